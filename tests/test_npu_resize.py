"""Resize's per-axis matrix (mappers/resize.py resize_matrix, the closed form the lowering
uses) against onnx's reference Resize run on the identity, over the interpolation modes,
coordinate transformations, nearest modes, scales up and down (whole and fractional) and
sizes; and the few cases where that reference departs from the ONNX specification, held to
the specification and to onnxruntime."""
import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import op_resize

from paddle_npu.npu.mappers.resize import resize_matrix

COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
# (attributes other than the coordinate transformation), each with every transformation
MODES = [dict(mode="nearest", nearest_mode=m) for m in NEAREST] + [
    dict(mode="linear"),
    dict(mode="cubic"),                                       # cubic_coeff_a -0.75
    dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)]
CONFIGS = [dict(coordinate_transformation_mode=c, **m)
           for m, c in itertools.product(MODES, COORDINATES)]
# (input length, scale) and (input length, output length) along the resized axis
SCALES = [(5, 2.0), (4, 3.0), (5, 0.5), (12, 0.25), (7, 1.5), (4, 2.5), (13, 0.7), (13, 1 / 3),
          (6, 1.0), (3, 4.0)]
SIZES = [(5, 13), (13, 5), (1, 4), (7, 7), (6, 1), (4, 9), (9, 4), (2, 3)]
# both sides in float64: the weights agree to rounding, the picks exactly
TOLERANCE = {"nearest": 0.0, "linear": 1e-9, "cubic": 1e-9}


class Resize(op_resize.Resize):
    """onnx's reference Resize (the evaluator takes an op by its class name) with
    cubic_coeff_a a Python float: it reads the attribute as np.float32, which makes it
    evaluate Keys' kernel in float32 (about 1e-6 off)."""
    def _run(self, *inputs, **attrs):
        if attrs.get("cubic_coeff_a") is not None:
            attrs["cubic_coeff_a"] = float(attrs["cubic_coeff_a"])
        return super()._run(*inputs, **attrs)


def _oracle(attrs, kind):
    """ONNX's reference Resize of an [n, 1, 1, n] identity along the last axis, the scales
    or sizes a model input: rows are the input entries, columns the output entries."""
    where = ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"]
    dtype = onnx.TensorProto.FLOAT if kind == "scales" else onnx.TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Resize", where, ["y"], **attrs)], "resize",
        [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, None),
         helper.make_tensor_value_info(kind, dtype, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)])
    ref = ReferenceEvaluator(helper.make_model(graph,
                                               opset_imports=[helper.make_opsetid("", 19)]),
                             new_ops=[Resize])

    def run(n_in, value):
        given = np.array([1, 1, 1, value], np.float32) if kind == "scales" else \
            np.array([n_in, 1, 1, value], np.int64)
        (y,) = ref.run(None, {"x": np.eye(n_in).reshape(n_in, 1, 1, n_in), kind: given})
        return y.reshape(n_in, -1)
    return run


def _departs(attrs, n_in, n_out, scale):
    """Why onnx's reference Resize departs from the specification here, or None.
    (test_where_the_reference_departs holds one case of each to the specification.)"""
    ctm, mode = attrs["coordinate_transformation_mode"], attrs["mode"]
    width = (n_out / n_in if scale is None else scale) * n_in   # the reference's length
    if ctm == "align_corners" and width != n_out:
        return "length: the reference divides by scale * n_in - 1, not n_out - 1"
    if ctm == "pytorch_half_pixel" and (width == 1) != (n_out == 1):
        return "length: the reference asks scale * n_in, not n_out, for a single entry"
    if ctm == "pytorch_half_pixel" and n_out == 1:
        return "one entry: the reference reads coordinate -0.5, the specification 0"
    if ctm == "half_pixel_symmetric" and scale is None and width != n_out:
        return "length: n_out / n_in * n_in is not n_out in float64"
    # the reference finds its neighbours at x + pad (its edge padding, 1 for 2 taps, 2 for
    # 4): a coordinate an ulp above a whole number is that number there, the window one
    # early (its weights are still the ones for x)
    s = n_out / n_in if scale is None else scale
    y = np.arange(n_out, dtype=np.float64)
    x = {"half_pixel": (y + 0.5) / s - 0.5,
         "half_pixel_symmetric": n_in / 2 * (1 - n_out / width) + (y + 0.5) / s - 0.5,
         "pytorch_half_pixel": (y + 0.5) / s - 0.5,
         "align_corners": y * (n_in - 1) / max(n_out - 1, 1),
         "asymmetric": y / s}[ctm]
    pad = 2 if mode == "cubic" else 1
    moved = np.floor(x + pad) - pad
    if np.any((moved != np.floor(x)) | ((x + pad == moved + pad) != (x == np.floor(x)))):
        return "window: x + pad rounds onto a whole number"
    return None


def _matrix(attrs, n_in, n_out, scale):
    return resize_matrix(n_in, n_out, scale, mode=attrs["mode"],
                         coordinate_mode=attrs["coordinate_transformation_mode"],
                         nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"),
                         cubic_a=attrs.get("cubic_coeff_a", -0.75),
                         exclude_outside=bool(attrs.get("exclude_outside", 0)))


@pytest.mark.parametrize("attrs", CONFIGS, ids=["-".join(
    str(v) for k, v in sorted(c.items()) if k != "mode" or c["mode"] != "nearest")
    for c in CONFIGS])
def test_resize_matrix_matches_the_onnx_reference(attrs):
    """Each case against onnx's reference; where that departs from the specification
    (_departs), against onnxruntime, which follows it (in float32: weights within 1e-5)."""
    tol = TOLERANCE[attrs["mode"]]
    departed = []
    for kind, cases in (("scales", SCALES), ("sizes", SIZES)):
        oracle = _oracle(attrs, kind)
        for n_in, value in cases:
            # a scale as the model holds it (float32); the reference's output length
            scale = float(np.float32(value)) if kind == "scales" else None
            n_out = int(scale * n_in) if kind == "scales" else value
            got = _matrix(attrs, n_in, n_out, scale)
            why = _departs(attrs, n_in, n_out, scale)
            if why:
                departed.append((n_in, value, why))
                want, bound = _ort(attrs, n_in, n_out, scale), max(tol, 1e-5)
            else:
                want, bound = oracle(n_in, value), tol
            assert got.shape == want.shape == (n_in, n_out), (n_in, value)
            err = np.abs(got - want).max()
            assert err <= bound, f"{kind} {n_in} -> {value} ({why}): {err:.3g}\n{got}\n{want}"
    # most of the grid (18 cases) is held to the reference itself
    assert len(departed) <= 6, departed


def _ort(attrs, n_in, n_out, scale):
    """onnxruntime's Resize of an [n, 1, 1, n] identity (float32 arithmetic)."""
    kind = "sizes" if scale is None else "scales"
    where = ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"]
    init = onnx.numpy_helper.from_array(
        np.array([1, 1, 1, scale], np.float32) if scale is not None else
        np.array([n_in, 1, 1, n_out], np.int64), kind)
    graph = helper.make_graph(
        [helper.make_node("Resize", where, ["y"], **attrs)], "resize",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [init])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.eye(n_in, dtype=np.float32).reshape(n_in, 1, 1, n_in)})
    return y.reshape(n_in, -1)


def _picks(rows, n_in):
    a = np.zeros((n_in, len(rows)))
    a[rows, np.arange(len(rows))] = 1
    return a


# (attributes, n_in, n_out, scale or None for sizes, the specification's matrix, reason)
DEPARTURES = [
    # align_corners divides by length_resized - 1: 1 here, not 5 * 0.5 - 1
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), 5, 2, 0.5,
     _picks([0, 4], 5), "length"),
    # 11 -> 15: x = 7 * 10 / 14 = 5 exactly; the reference divides by 15 / 11 * 11 - 1, an
    # ulp under 14 (its ceil 6)
    (dict(mode="nearest", coordinate_transformation_mode="align_corners",
          nearest_mode="ceil"), 11, 15, None,
     _picks(np.ceil(np.arange(15) * 10 / 14).astype(int), 11), "length"),
    # one output entry reads coordinate 0: the first input entry, in every mode
    (dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel"), 4, 1, None,
     _picks([0], 4), "one entry"),
    (dict(mode="nearest", coordinate_transformation_mode="pytorch_half_pixel"), 5, 1, 0.3,
     _picks([0], 5), "length"),
    # 7 at scale 0.5: the 3 entries centred in a length of 3.5, x = 1, 3, 5 (the first one
    # ulp above 1 in float64)
    (dict(mode="nearest", coordinate_transformation_mode="half_pixel_symmetric"), 7, 3, 0.5,
     _picks([1, 3, 5], 7), "window"),
]


@pytest.mark.parametrize("attrs, n_in, n_out, scale, want, reason", DEPARTURES,
                         ids=[f"{d[0]['coordinate_transformation_mode']}-{d[0]['mode']}-{i}"
                              for i, d in enumerate(DEPARTURES)])
def test_where_the_reference_departs(attrs, n_in, n_out, scale, want, reason):
    """The specification's value, which onnxruntime computes too, where the reference's
    differs (so the grid above leaves these cases out for the reason _departs gives)."""
    got = _matrix(attrs, n_in, n_out, scale)
    np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(_ort(attrs, n_in, n_out, scale), want, atol=1e-6)
    assert (_departs(attrs, n_in, n_out, scale) or "").startswith(reason)
    value = n_out if scale is None else scale
    ref = _oracle(attrs, "sizes" if scale is None else "scales")(n_in, value)
    assert np.abs(ref - want).max() > 1e-3          # the reference does depart

