"""Calibration: per-tensor activation ranges of a float ONNX model over a calibration set.

The table is JSON, one entry per float tensor the model computes (and its inputs):

    {"format": "paddle_npu.calibration/1", "model": "m.onnx", "samples": 512,
     "method": "mse",                      # which statistic filled "threshold"
     "tensors": {"conv1.out": {"min": -3.1, "max": 7.9, "absmax": 7.9,
                               "percentile": 6.2, "mse": 5.8, "threshold": 5.8,
                               "threshold16": 15.8}, ...},
     "precision": {"fc_hp": "int16"}}      # optional per-layer bits (node or output name)

`threshold` is what int8 quantisation uses (scale = threshold / 127); edit it by hand to
clip differently. int16 layers use `threshold16` (scale = threshold16 / 32767), twice
`absmax`: 16 bits leave room to keep values the calibration set never reached, at the cost
of one bit (gates, as a squeeze-excitation block's, swing past a small sample's absmax on
new inputs), instead of clipping them; a table without it uses `absmax`. `percentile` is
the 99.99th percentile of |x|; `mse` the clipping threshold that minimises the int8
round-trip error on the sampled values.
"""
import json
import math
import os

import numpy as np
import onnx

from ...errors import ConversionError
from ...onnx_io import load_proto
from ...outputs import write_text
from ..emulation.runtime import session as emulated_session
from ..passes.rnn import unrolled_proto
from .samples import open_samples, run_batches

FORMAT = "paddle_npu.calibration/1"
METHODS = ("absmax", "percentile", "mse")
PERCENTILE = 99.99
INT16_HEADROOM = 2.0        # threshold16 = this x absmax (see the module docstring)
SAMPLE_CAP = 1 << 18        # values kept per tensor for percentile / MSE


def load_feeds(proto, data, limit=None, preprocess=None):
    """The whole data set as {input name: array with a leading sample axis} (samples.py's
    open_samples, all read at once: for the reports that keep every output anyway)."""
    return open_samples(proto, data, limit, preprocess).arrays()


def float_tensors(proto):
    """{name: elem_type} of every float tensor a node computes (shape inference's types)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:
        inferred = proto
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + \
            list(inferred.graph.input):
        types[vi.name] = vi.type.tensor_type.elem_type
    out = {}
    for node in proto.graph.node:
        for name in node.output:
            if name and types.get(name) == onnx.TensorProto.FLOAT:
                out[name] = types[name]
    return out


def mse_threshold(values, absmax, bits=8, steps=96):
    """The clipping threshold in (0, absmax] minimising the mean squared round-trip error of
    symmetric `bits`-bit quantisation over `values`."""
    if absmax <= 0 or values.size == 0:
        return float(absmax)
    qmax = (1 << (bits - 1)) - 1
    best, best_err = absmax, None
    v = values.astype(np.float64)
    for t in np.linspace(absmax / steps, absmax, steps):
        s = t / qmax
        err = float(np.mean((np.clip(np.rint(v / s), -qmax - 1, qmax) * s - v) ** 2))
        if best_err is None or err < best_err:
            best, best_err = float(t), err
    return best


class TensorStats:
    """One tensor's running statistics over the calibration set: min and max of its finite
    values, how many were not finite, and a uniform sample of at most SAMPLE_CAP of its
    values (reservoir sampling, batched) for the percentile and the MSE threshold, so
    memory stays the same whatever the number of samples."""

    def __init__(self, rng, cap=SAMPLE_CAP):
        self.rng, self.cap = rng, cap
        self.min, self.max, self.non_finite, self.seen = np.inf, -np.inf, 0, 0
        self.parts, self.kept = [], None    # values while fewer than cap, then the reservoir

    def add(self, arr):
        v = np.asarray(arr, np.float32).reshape(-1)
        finite = np.isfinite(v)
        if not finite.all():
            self.non_finite += int(v.size - np.count_nonzero(finite))
            v = v[finite]
        if v.size == 0:
            return
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        held = self.seen if self.kept is None else self.cap
        take = min(self.cap - held, v.size) if self.kept is None else 0
        if take:
            self.parts.append(v[:take].copy())
            if held + take == self.cap:
                self.kept, self.parts = np.concatenate(self.parts), []
        rest = v[take:]
        if rest.size:
            # A value at stream position i replaces a random slot with probability cap/(i+1);
            # for a batch, as many replacements as that gives in all (drawn at the batch's
            # middle position), of values and slots drawn at random: O(replacements).
            middle = self.seen + take + rest.size / 2
            count = self.rng.binomial(rest.size, min(1.0, self.cap / middle))
            self.kept[self.rng.integers(0, self.cap, count)] = \
                rest[self.rng.integers(0, rest.size, count)]
        self.seen += v.size

    def values(self):
        return self.kept if self.kept is not None else np.concatenate(self.parts)


def calibrate(model, data, method="mse", limit=None, seed=0, preprocess=None, progress=None):
    """The calibration table (a dict) of an ONNX model (path / bytes / proto) over `data`
    (an .npz path, a folder of images with `preprocess` a PreprocessSpec, or a
    {input: array} dict), run sample by sample (samples.run_batches). Tensors that took NaN
    or infinite values are left out (listed under "non_finite"): no scale fits them, and a
    layer on one says so when lowered. progress: a label for a progress line on a terminal."""
    if method not in METHODS:
        raise ConversionError(f"unknown calibration method {method!r} (known: {METHODS})")
    # LSTM / GRU as stage 2 unrolls them: their steps' tensors are layers' inputs too
    proto = unrolled_proto(load_proto(model))
    samples = open_samples(proto, data, limit, preprocess)
    where = data if isinstance(data, (str, os.PathLike)) else "the calibration data"
    if samples.count == 0:
        raise ConversionError(f"{where}: 0 samples; calibration needs the model's inputs "
                              "with a leading sample axis")
    names = list(float_tensors(proto))
    session = emulated_session(proto, names)
    rng = np.random.default_rng(seed)
    stats = {}
    for feeds, outs in run_batches(session, samples, where, progress):
        for name, arr in list(feeds.items()) + list(outs.items()):
            if np.asarray(arr).dtype == np.float32:
                stats.setdefault(name, TensorStats(rng)).add(arr)
    tensors, non_finite = {}, {}
    for name, s in stats.items():
        if s.non_finite:
            non_finite[name] = s.non_finite
            continue
        if s.min == np.inf:
            continue
        absmax = max(abs(s.min), abs(s.max))
        sample = s.values()
        entry = {"min": s.min, "max": s.max, "absmax": absmax,
                 "percentile": float(np.percentile(np.abs(sample), PERCENTILE)),
                 "mse": mse_threshold(sample, absmax)}
        entry["threshold"] = entry[method]
        entry["threshold16"] = INT16_HEADROOM * absmax
        tensors[name] = entry
    if not tensors:
        raise ConversionError(f"{where}: no tensor of the model took a finite float value "
                              "on this data; nothing to calibrate")
    source = model if isinstance(model, (str, os.PathLike)) else None
    return {"format": FORMAT, "model": os.fspath(source) if source else None,
            "samples": samples.count, "method": method, "percentile": PERCENTILE,
            "tensors": tensors, "non_finite": non_finite, "precision": {}}


def save_table(table, path):
    # allow_nan=False: a NaN written as JSON's non-standard NaN would pass other readers
    write_text(path, json.dumps(table, indent=1, allow_nan=False) + "\n")


def load_table(path):
    """A calibration table from its JSON file or a dict, checked: every threshold a
    non-negative number and every statistic finite (a NaN scale would lower into a model
    onnxruntime refuses)."""
    if isinstance(path, dict):      # a table in memory is checked as a file is
        table, path = path, "the calibration table"
    else:
        try:
            with open(path, encoding="utf-8") as f:
                table = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConversionError(f"{path}: cannot read the calibration table ({exc})") \
                from None
    if not isinstance(table, dict) or table.get("format") != FORMAT or \
            not isinstance(table.get("tensors"), dict):
        raise ConversionError(f"{path}: not a calibration table (format {FORMAT!r} expected)")
    for name, e in table["tensors"].items():
        if not isinstance(e, dict) or not _is_number(e.get("threshold")):
            raise ConversionError(f"{path}: tensor {name!r} needs a non-negative threshold")
        for key in ("threshold", "threshold16", "min", "max", "absmax", "percentile", "mse"):
            if key in e and not (_is_number(e[key]) and math.isfinite(e[key])):
                raise ConversionError(
                    f"{path}: tensor {name!r} has {key} {e[key]!r}, not a finite number; "
                    "calibrate again (`paddle-npu calibrate`) or set it to the tensor's "
                    "range by hand")
        if e["threshold"] < 0:
            raise ConversionError(f"{path}: tensor {name!r} needs a non-negative threshold")
    table.setdefault("precision", {})
    return table


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_precision(path):
    """A precision table: `name int16` / `name int8` per line (# comments), or JSON
    {name: "int16"}. Names are layer (node) names or their output tensor names."""
    if isinstance(path, dict):
        return dict(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        data = json.loads(text)
    else:
        data = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ConversionError(f"{path}:{n}: expected `NAME int8|int16`")
            data[parts[0]] = parts[1]
    for name, bits in data.items():
        if bits not in ("int8", "int16"):
            raise ConversionError(f"{path}: {name}: precision {bits!r} is not int8 or int16")
    return data
