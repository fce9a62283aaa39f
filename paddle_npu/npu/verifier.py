"""Stage-2 verification: onnxruntime on the model before lowering, onnxruntime on the lowered
model (function bodies), and the NumPy reference, on the same seeded input."""
import numpy as np

from ..compare import agreement, run_onnx
from ..onnx_io import load_proto
from .reference import Reference

TOLERANCE = 1e-5

_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
       9: np.bool_, 10: np.float16, 11: np.float64}


def seeded_inputs(model, seed=0, batch=1):
    """Inputs for every graph input: normal floats, small non-negative ints (safe as indices),
    random booleans; symbolic dims are `batch`."""
    proto = load_proto(model)
    inits = {i.name for i in proto.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in proto.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        dtype = _NP.get(t.elem_type)
        if dtype is None:
            raise ValueError(f"input {i.name!r}: element type {t.elem_type} is not supported")
        if dtype == np.bool_:
            feeds[i.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[i.name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _serialized(model):
    proto = load_proto(model)
    return proto.SerializeToString()


def verify(original, lowered, target=None, feeds=None, seed=0, tolerance=TOLERANCE,
           input_shape=None):
    """Compare the three runs; returns a dict with per-output agreement and `ok`.
    input_shape: the sizes the model was lowered at ({input: [sizes]}), for the seeded
    input and the run before lowering."""
    if input_shape:
        from .passes import with_input_shapes
        original = with_input_shapes(original, input_shape)
    if feeds is None:
        feeds = seeded_inputs(original, seed)
    names, want = run_onnx(_serialized(original), feeds)
    lowered_bytes = _serialized(lowered)
    _, got_ort = run_onnx(lowered_bytes, feeds)
    ref = Reference(lowered_bytes, target)
    got_ref = ref.run(feeds)
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
        outputs.append(entry)
    return {"outputs": outputs, "worst_rel_diff": worst, "tolerance": tolerance,
            "ok": worst <= tolerance, "array": ref.array.as_dict()}


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
    lines.append(f"{'agrees' if result['ok'] else 'DISAGREES'}: worst relative diff "
                 f"{result['worst_rel_diff']:.2e} (tolerance {result['tolerance']:g})")
    return "\n".join(lines)
