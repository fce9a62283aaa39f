"""Calibration: per-tensor activation ranges of a float ONNX model over a calibration set.

The table is JSON, one entry per float tensor the model computes (and its inputs):

    {"format": "paddle_npu.calibration/1", "model": "m.onnx", "samples": 512,
     "method": "mse",                      # which statistic filled "threshold"
     "tensors": {"conv1.out": {"min": -3.1, "max": 7.9, "absmax": 7.9,
                               "percentile": 6.2, "mse": 5.8, "threshold": 5.8}, ...},
     "precision": {"fc_hp": "int16"}}      # optional per-layer bits (node or output name)

`threshold` is what int8 quantisation uses (scale = threshold / 127); edit it by hand to
clip differently. int16 layers use `absmax` (scale = absmax / 32767): 16 bits leave no
reason to clip. `percentile` is the 99.99th percentile of |x|; `mse` the clipping threshold
that minimises the int8 round-trip error on the sampled values.
"""
import json
import os

import numpy as np
import onnx

from ...errors import ConversionError
from ...filekind import describe
from ...onnx_io import load_proto
from ...outputs import write_text
from ...preprocess import image_files, read_images
from ..rnn import unrolled_proto

FORMAT = "paddle_npu.calibration/1"
METHODS = ("absmax", "percentile", "mse")
PERCENTILE = 99.99
SAMPLE_CAP = 1 << 18        # values kept per tensor for percentile / MSE
BATCH = 64


def load_feeds(proto, data, limit=None, preprocess=None):
    """The calibration set as {input name: array with a leading sample axis}: an .npz keyed by
    input name (or in_<name>, as reference_io.npz files are), or a folder of images turned
    into the model's image input by `preprocess` (a PreprocessSpec: the model's
    normalisation, see preprocess.read_images)."""
    inits = {i.name for i in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    if os.path.isdir(data):
        return _image_feeds(proto, names, data, limit, preprocess)
    if preprocess is not None:
        raise ConversionError(f"{data}: preprocessing settings apply to a folder of images, "
                              "not to an .npz of model inputs")
    try:
        arrays = np.load(data)
    except Exception:  # noqa: BLE001 - numpy's various complaints
        raise ConversionError(f"{data}: cannot read it as an .npz of arrays: it is "
                              f"{describe(data)}") from None
    feeds = {}
    for name in names:
        for key in (name, f"in_{name}"):
            if key in arrays.files:
                feeds[name] = arrays[key]
                break
        else:
            raise ConversionError(f"{data}: no array for input {name!r} (keys: "
                                  f"{', '.join(arrays.files)})")
    n = {len(v) for v in feeds.values()}
    if len(n) != 1:
        raise ConversionError(f"{data}: the inputs have different sample counts {sorted(n)}")
    if limit:
        feeds = {k: v[:limit] for k, v in feeds.items()}
    return feeds


def _image_feeds(proto, names, folder, limit, spec):
    if spec is None:
        raise ConversionError(f"{folder}: a folder of images needs the model's "
                              "normalisation, which `paddle-npu calibrate` takes (--mean / "
                              "--std ..., or preprocess= a PreprocessSpec in Python); "
                              "elsewhere give an .npz of model inputs")
    inputs = {i.name: i for i in proto.graph.input if i.name in names}
    name = spec.input or (next(iter(inputs)) if len(inputs) == 1 else None)
    if name not in inputs:
        raise ConversionError(f"{folder}: the model has no input {name!r} (inputs: "
                              f"{', '.join(inputs)})" if name else
                              f"{folder}: images feed one image input but the model has "
                              f"{len(inputs)} ({', '.join(inputs)}); calibrate on an .npz "
                              "holding all of them")
    if len(inputs) != 1:
        raise ConversionError(f"{folder}: the model has other inputs besides {name!r} "
                              f"({', '.join(n for n in inputs if n != name)}); calibrate "
                              "on an .npz holding all of them")
    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in inputs[name].type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ConversionError(f"{folder}: input {name!r} is not a 4-D image input "
                              f"(shape {dims})")
    return {name: read_images(image_files(folder), spec, dims, limit)}


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


def session_with_all(proto, names):
    """An onnxruntime session whose outputs are `names` (intermediate float tensors)."""
    import onnxruntime as ort   # heavy, and only for running the calibration set

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_batches(session, feeds, batch=BATCH):
    """Yield {output name: array} per batch of the calibration set."""
    names = [o.name for o in session.get_outputs()]
    n = len(next(iter(feeds.values())))
    for start in range(0, n, batch):
        outs = session.run(None, {k: v[start:start + batch] for k, v in feeds.items()})
        yield dict(zip(names, outs))


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


def calibrate(model, data, method="mse", limit=None, seed=0, preprocess=None):
    """The calibration table (a dict) of an ONNX model (path / bytes / proto) over `data`
    (an .npz path, a folder of images with `preprocess` a PreprocessSpec, or a
    {input: array} dict)."""
    if method not in METHODS:
        raise ConversionError(f"unknown calibration method {method!r} (known: {METHODS})")
    # LSTM / GRU as stage 2 unrolls them: their steps' tensors are layers' inputs too
    proto = unrolled_proto(load_proto(model))
    feeds = data if isinstance(data, dict) else load_feeds(proto, data, limit, preprocess)
    names = list(float_tensors(proto))
    inputs = [name for name, arr in feeds.items() if np.asarray(arr).dtype.kind == "f"]
    n = len(next(iter(feeds.values()))) if feeds else 0
    where = data if isinstance(data, (str, os.PathLike)) else "the calibration data"
    if n == 0:
        raise ConversionError(f"{where}: 0 samples; calibration needs the model's inputs "
                              "with a leading sample axis")
    for name in inputs:
        bad = int(np.count_nonzero(~np.isfinite(feeds[name])))
        if bad:
            raise ConversionError(f"{where}: input {name!r} has {bad} NaN or infinite values "
                                  f"of {np.size(feeds[name])}; calibrate on real inputs")
    session = session_with_all(proto, names)
    rng = np.random.default_rng(seed)
    stats = {}

    def add(name, arr):
        arr = np.asarray(arr, np.float32).reshape(-1)
        s = stats.setdefault(name, {"min": np.inf, "max": -np.inf, "sample": []})
        if arr.size == 0:
            return
        s["min"] = min(s["min"], float(arr.min()))
        s["max"] = max(s["max"], float(arr.max()))
        keep = max(1, SAMPLE_CAP * BATCH // max(n, 1))
        s["sample"].append(arr if arr.size <= keep else rng.choice(arr, keep, replace=False))

    for start in range(0, n, BATCH):
        for name in inputs:
            add(name, feeds[name][start:start + BATCH])
    for outs in run_batches(session, feeds):
        for name, arr in outs.items():
            if np.asarray(arr).dtype == np.float32:
                add(name, arr)
    tensors = {}
    for name, s in stats.items():
        if s["min"] == np.inf:
            continue
        absmax = max(abs(s["min"]), abs(s["max"]))
        sample = np.abs(np.concatenate(s["sample"]))
        entry = {"min": s["min"], "max": s["max"], "absmax": absmax,
                 "percentile": float(np.percentile(sample, PERCENTILE)),
                 "mse": mse_threshold(np.concatenate(s["sample"]), absmax)}
        entry["threshold"] = entry[method]
        tensors[name] = entry
    if not tensors:
        raise ConversionError(f"{where}: no tensor of the model took a finite float value "
                              "on this data; nothing to calibrate")
    source = model if isinstance(model, (str, os.PathLike)) else None
    return {"format": FORMAT, "model": os.fspath(source) if source else None, "samples": n,
            "method": method, "percentile": PERCENTILE, "tensors": tensors, "precision": {}}


def save_table(table, path):
    write_text(path, json.dumps(table, indent=1) + "\n")


def load_table(path):
    """A calibration table from its JSON file (checked)."""
    if isinstance(path, dict):
        return path
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{path}: cannot read the calibration table ({exc})") from None
    if not isinstance(table, dict) or table.get("format") != FORMAT or \
            not isinstance(table.get("tensors"), dict):
        raise ConversionError(f"{path}: not a calibration table (format {FORMAT!r} expected)")
    for name, e in table["tensors"].items():
        if not isinstance(e, dict) or not isinstance(e.get("threshold"), (int, float)) or \
                e["threshold"] < 0:
            raise ConversionError(f"{path}: tensor {name!r} needs a non-negative threshold")
    table.setdefault("precision", {})
    return table


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
