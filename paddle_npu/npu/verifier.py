"""Stage-2 verification: onnxruntime on the model before lowering, onnxruntime on the lowered
model (function bodies), and the NumPy reference, on the same seeded input."""
import gc
import os

import numpy as np
import onnx_ir as ir

from ..compare import agreement, run_onnx, run_onnx_on
from ..errors import ConversionError
from ..onnx_io import graph_inputs, load_header, load_proto
from .ops import DOMAIN
from .passes import with_input_shapes
from .reference import Reference

TOLERANCE = 1e-5
# About one float32 ulp, relative: the input nudge that measures a model's float-noise floor.
NUDGE = 1e-7
# Integer plans round on purpose: they are judged by the cosine of their outputs to the float
# model's (the way vendor toolchains compare), and onnxruntime must match the bit-true NumPy
# reference exactly.
MIN_COSINE = 0.99
INTEGER_PRIMITIVES = {"Quantize", "QVMM", "Requantize", "Dequantize", "QLut", "QRuntimeVMM",
                      "QDepthwiseConv"}

_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
       9: np.bool_, 10: np.float16, 11: np.float64}


def seeded_inputs(model, seed=0, batch=1):
    """Inputs for every graph input: normal floats, small non-negative ints (safe as indices),
    random booleans; symbolic dims are `batch`."""
    return seeded_feeds([(name, elem_type, dims or [])     # rank not given: a scalar
                         for name, elem_type, dims in graph_inputs(load_header(model).graph)],
                        seed, batch)


def seeded_feeds(specs, seed=0, batch=1):
    """seeded_inputs for (name, ONNX element type, dims: None for a size not fixed)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, elem_type, dims in specs:
        shape = [batch if d is None else d for d in dims]
        dtype = _NP.get(elem_type)
        if dtype is None:
            raise ValueError(f"input {name!r}: element type {elem_type} is not supported")
        if dtype == np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _runnable(model):
    """What onnxruntime is given: a file as its path (onnxruntime reads it; we hold no copy),
    an ir.Model as it is (run_onnx gives the session its weights where they lie), anything
    else serialized."""
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        return os.fspath(model)
    if isinstance(model, ir.Model):
        return model
    return load_proto(model).SerializeToString()


def _primitives(proto):
    return {n.op_type for n in proto.graph.node if n.domain == DOMAIN}


def _sqnr_db(got, want):
    want = np.asarray(want, np.float64)
    noise = float(np.sum((np.asarray(got, np.float64) - want) ** 2))
    signal = float(np.sum(want ** 2))
    if noise == 0:
        return float("inf")
    return 10 * np.log10(signal / noise) if signal > 0 else -float("inf")


def float_noise_floor(model, feeds, nudge=NUDGE):
    """Per output, how far float rounding alone moves the model in onnxruntime (relative to its
    scale): the largest move under graph optimisations off and four input nudges of about one
    float32 ulp (all up, all down, two seeded random signs per element). Some heads (detection
    decode, TPS rectification, large gains) amplify rounding far past 1e-5; a lowered model
    within this floor differs from the original by rounding, not by a lowering error."""
    model = _runnable(model)
    rng = np.random.default_rng(0)

    def nudged(sign):
        return {k: v if v.dtype.kind != "f" else
                (v.astype(np.float64) * (1 + sign(v) * nudge)).astype(v.dtype)
                for k, v in feeds.items()}

    signs = (lambda v: 1, lambda v: -1, lambda v: rng.choice([-1, 1], v.shape),
             lambda v: rng.choice([-1, 1], v.shape))
    _, (plain, *runs) = run_onnx_on(model, [feeds] + [nudged(sign) for sign in signs])
    runs.append(run_onnx(model, feeds, graph_optimizations=False)[1])
    return [max(rel_diff(r[i], p) for r in runs) for i, p in enumerate(plain)]


def rel_diff(got, want):
    """Relative difference of one output (compare.agreement); exact for integer outputs."""
    if not np.issubdtype(np.asarray(want).dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else float("inf")
    return agreement(got, want)["rel_diff"]


def verify(original, lowered, target=None, feeds=None, seed=0, tolerance=TOLERANCE,
           input_shape=None, min_cosine=MIN_COSINE, recorded=None):
    """Compare the three runs; returns a dict with per-output agreement and `ok`.

    A float plan is ok when both runs are within `tolerance` (relative) of the original, or
    else each output within the original's own float-noise floor on the same feeds
    (float_noise_floor), or else, given `recorded` outputs (a more exact run, e.g. Paddle in
    float64, None where an output has none), each lowered run no farther from them than the
    original is (`within` says which: "tolerance", "floor" or "recorded"); an integer plan
    when every output's cosine to the original reaches `min_cosine` and onnxruntime's run
    equals the NumPy reference's bit for bit.
    input_shape: the sizes the model was lowered at ({input: [sizes]}), for the seeded
    input and the run before lowering."""
    used = _primitives(load_header(lowered))
    if not used:
        name = lowered if isinstance(lowered, str) else "the second model"
        raise ConversionError(f"{name}: has no NPU primitives, so it is not a lowered model; "
                              "lower it first (`paddle-npu lower MODEL -o LOWERED`)")
    integer = bool(used & INTEGER_PRIMITIVES)
    if input_shape:
        original = with_input_shapes(original, input_shape)
    if feeds is None:
        feeds = seeded_inputs(original, seed)
    # one model at a time in memory: each run's session is gone before the next is made
    names, want = run_onnx(_runnable(original), feeds)
    _, got_ort = run_onnx(_runnable(lowered), feeds)
    ref = Reference(lowered, target)
    got_ref = ref.run(feeds)
    array = ref.array.as_dict()
    del ref
    gc.collect()        # the evaluator's reference cycles hold its copy of the weights
    outputs, worst = [], 0.0
    for name, w, o, r in zip(names, want, got_ort, got_ref):
        entry = {"name": name, "shape": list(np.shape(w))}
        for key, got in (("onnxruntime", o), ("reference", r)):
            if np.issubdtype(np.asarray(w).dtype, np.floating):
                a = agreement(got, w)
            else:                      # indices, masks: exact
                same = np.array_equal(np.asarray(got), np.asarray(w))
                a = {"max_abs_diff": 0.0 if same else float("inf"),
                     "rel_diff": 0.0 if same else float("inf"), "cosine": 1.0 if same else 0.0}
            entry[key] = a
            worst = max(worst, a["rel_diff"])
        if integer:
            entry["sqnr_db"] = _sqnr_db(o, w)
            entry["bit_exact"] = bool(np.array_equal(np.asarray(o), np.asarray(r)))
        outputs.append(entry)
    result = {"outputs": outputs, "worst_rel_diff": worst, "tolerance": tolerance,
              "integer": integer, "array": array}
    if integer:
        result["min_cosine"] = min_cosine
        result["worst_cosine"] = min((e["onnxruntime"]["cosine"] for e in outputs), default=1.0)
        result["ok"] = result["worst_cosine"] >= min_cosine and \
            all(e["bit_exact"] for e in outputs)
    elif worst <= tolerance:
        result["ok"], result["within"] = True, "tolerance"
    else:
        floor = float_noise_floor(original, feeds)
        result["floor"] = floor
        for entry, f in zip(outputs, floor):
            entry["floor"] = f
        result["ok"] = all(max(e[k]["rel_diff"] for k in ("onnxruntime", "reference"))
                           <= max(tolerance, f) for e, f in zip(outputs, floor))
        result["within"] = "floor" if result["ok"] else None
        if not result["ok"] and recorded and any(r is not None for r in recorded):
            result["ok"] = _as_close_to_recorded(outputs, recorded, want, got_ort, got_ref,
                                                 tolerance)
            result["within"] = "recorded" if result["ok"] else None
    return result


def _as_close_to_recorded(outputs, recorded, want, got_ort, got_ref, tolerance):
    """Each output's runs of the lowered model are no farther from the recorded one than the
    original's run is (or within tolerance of it): their difference is then float32 rounding
    in both, amplified by the model, not a lowering error. Records each distance."""
    if len(recorded) != len(outputs):
        return False
    ok = True
    for entry, rec, w, o, r in zip(outputs, recorded, want, got_ort, got_ref):
        if rec is None:
            return False
        entry["from_recorded"] = {k: rel_diff(got, rec) for k, got in
                                  (("original", w), ("onnxruntime", o), ("reference", r))}
        d = entry["from_recorded"]
        ok = ok and max(d["onnxruntime"], d["reference"]) <= max(tolerance, d["original"])
    return ok


def render(result):
    lines = [f"{'output':<32} {'vs':<12} {'max abs diff':>13} {'rel diff':>10} {'cosine':>10}"]
    for o in result["outputs"]:
        for key in ("onnxruntime", "reference"):
            a = o[key]
            lines.append(f"{o['name'][-32:]:<32} {key:<12} {a['max_abs_diff']:>13.3e} "
                         f"{a['rel_diff']:>10.2e} {a['cosine']:>10.6f}")
    arr = result["array"]
    lines.append(f"reference: {arr['arrays']} arrays programmed, {arr['vmm_invocations']} VMM "
                 f"invocations, {arr['macs']} array MACs")
    verdict = "agrees" if result["ok"] else "DISAGREES"
    if result.get("integer"):
        exact = all(o["bit_exact"] for o in result["outputs"])
        sqnr = min(o["sqnr_db"] for o in result["outputs"])
        lines.append(f"{verdict} (integer plan): worst cosine to float "
                     f"{result['worst_cosine']:.6f} (at least {result['min_cosine']:g}), SQNR "
                     f"{sqnr:.2f} dB; onnxruntime vs NumPy reference "
                     f"{'bit-exact' if exact else 'NOT bit-exact'}")
    elif result.get("within") == "floor":
        lines.append(f"agrees within the model's float-noise floor ({max(result['floor']):.1e}: "
                     "its own output moves that much for a one-ulp input change): worst "
                     f"relative diff {result['worst_rel_diff']:.2e}, above the tolerance "
                     f"{result['tolerance']:g}")
    elif result.get("within") == "recorded":
        worst = max(max(o["from_recorded"]["onnxruntime"], o["from_recorded"]["reference"])
                    for o in result["outputs"])
        model = max(o["from_recorded"]["original"] for o in result["outputs"])
        lines.append(f"agrees as closely as the model itself with the recorded outputs: the "
                     f"lowered model is {worst:.2e} from them, the model {model:.2e} (worst "
                     f"relative diff {result['worst_rel_diff']:.2e} to the model, beyond its "
                     f"float-noise floor {max(result['floor']):.1e})")
    elif result["ok"]:
        lines.append(f"agrees within {result['tolerance']:g}: worst relative diff "
                     f"{result['worst_rel_diff']:.2e}")
    else:
        floor = (f", beyond the model's own float-noise floor {max(result['floor']):.1e}"
                 if result.get("floor") else "")
        lines.append(f"DISAGREES: worst relative diff {result['worst_rel_diff']:.2e} "
                     f"(tolerance {result['tolerance']:g}{floor})")
    return "\n".join(lines)
