"""Resize of an NCHW image's H and W -> one AxisResample per resized axis on the vector unit:
nearest a pick (a move), linear and cubic a weighted sum of 2 or 4 neighbours.

The resize is separable: along one axis it is a matrix A [in, out] with Y = X A, each column
with a few non-zeros. A is found at compile time by resizing the identity with the node's own
attributes and scales (the ONNX reference implementation, so every coordinate transformation
and nearest mode means what the ONNX specification says); its non-zeros are AxisResample's
indices and weights. (As matrix products on the arrays the interpolation would cost one array
read per row of the image, far more than the vector unit's few multiply-adds per element.)"""
import functools

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..registry import onnx_op


def _const(ctx, node, i):
    """Input i as a constant array, an empty array when left out, None when computed."""
    if len(node.inputs) <= i or node.inputs[i] is None or not node.inputs[i].name:
        return np.zeros(0)
    return ctx.constant(node.inputs[i])


def _scales_or_sizes(ctx, node):
    """("scales" | "sizes", values, input index) of the node, or a reason string. (Models are
    loaded at opset 15 or above: an Upsample or a Resize-10 has become a Resize of this form.)"""
    scales, sizes = _const(ctx, node, 2), _const(ctx, node, 3)
    if scales is None or sizes is None:
        return "the scales or sizes are not constant"
    return ("scales", scales, 2) if scales.size else ("sizes", sizes, 3)


def _check(ctx, node):
    a = node.attributes
    dims, out = ctx.static_dims(node.inputs[0], skip=(0,)), ctx.dims(node.outputs[0])
    if dims is None or len(dims) != 4 or out is None or not all(isinstance(d, int)
                                                              for d in out[1:]):
        return "only an NCHW image of static channels and size resizes on the NPU"
    if out[1] != dims[1]:
        return "only H and W may be resized"
    if a.get_string("coordinate_transformation_mode", "") == "tf_crop_and_resize":
        return "tf_crop_and_resize has no NPU form"
    if a.get_ints("axes", None) or a.get_int("antialias", 0):
        return "axes and antialias are not supported"
    if a.get_string("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "keep_aspect_ratio_policy other than stretch is not supported"
    found = _scales_or_sizes(ctx, node)
    if isinstance(found, str):
        return found
    if found[1].size != 4:
        return f"{found[0]} of {found[1].size} values for a 4-D input"
    x = node.inputs[0]
    if x.dtype is None or not x.dtype.is_floating_point():
        return f"input type {x.dtype} is not floating point"
    return None


def axis_matrix(ctx, node, axis):
    """A [in, out] of the resize along `axis` (2 or 3), as the ONNX reference computes it."""
    n_in, n_out = ctx.dims(node.inputs[0])[axis], ctx.dims(node.outputs[0])[axis]
    kind, values, where = _scales_or_sizes(ctx, node)
    probe = [1.0, 1.0, 1.0, float(values[axis])] if kind == "scales" else \
        [n_in, 1, 1, int(values[axis])]
    attrs = tuple(sorted((k, v.value if isinstance(v.value, (int, float, str)) else
                          tuple(v.value)) for k, v in node.attributes.items()))
    opset = ctx.model.opset_imports.get("", 11)
    return _probe(node.op_type, attrs, kind, tuple(probe), where, n_in, n_out, opset).copy()


@functools.lru_cache(maxsize=64)
def _probe(op_type, attrs, kind, probe, where, n_in, n_out, opset):
    from onnx.reference import ReferenceEvaluator   # ~40 ms: only when a model has a Resize

    attrs = dict(attrs)
    inputs = ["x"] + [""] * (where - 1) + [kind]
    inits = [numpy_helper.from_array(
        np.asarray(probe, np.float32 if kind == "scales" else np.int64), kind)]
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["y"], **attrs)], "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, None)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)], inits)
    probe_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    eye = np.eye(n_in).reshape(n_in, 1, 1, n_in)
    (y,) = ReferenceEvaluator(probe_model).run(None, {"x": eye})
    if y.shape != (n_in, 1, 1, n_out):
        raise ValueError(f"{op_type}: resizing the identity gave {y.shape}")
    return y.reshape(n_in, n_out)


def _taps(a):
    """(indices, weights or None, taps) of AxisResample for the matrix A [in, out]: weights
    None when every column holds a single 1 (a pick)."""
    taps = max(1, int((a != 0).sum(axis=0).max()))
    idx = np.zeros((a.shape[1], taps), np.int64)
    w = np.zeros((a.shape[1], taps))
    for o in range(a.shape[1]):
        rows = np.flatnonzero(a[:, o])
        idx[o, :len(rows)], w[o, :len(rows)] = rows, a[rows, o]
    if taps == 1 and np.all(w == 1.0):
        return [int(i) for i in idx[:, 0]], None, 1
    return [int(i) for i in idx.ravel()], [float(v) for v in w.ravel()], taps


@onnx_op("Resize")
class Resize:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("AxisResample"):
            return "the target has no AxisResample (resizing)"
        return _check(ctx, node)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        for axis in (3, 2):
            indices, weights, taps = _taps(axis_matrix(ctx, node, axis))
            if weights is None and indices == list(range(ctx.dims(x)[axis])):
                continue                       # this axis is left as it is
            extra = {} if weights is None else {"weights": weights, "taps": taps}
            x = ctx.npu.AxisResample(x, axis=axis, indices=indices, **extra,
                                     _name=f"resample_{'nchw'[axis]}")
        if x is node.inputs[0]:
            x = ctx.npu.DimTransform(x, perm=[0, 1, 2, 3], shape=[0, 0, 0, 0], _name="same")
        return [x]
