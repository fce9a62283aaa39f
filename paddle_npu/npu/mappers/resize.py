"""Resize of an NCHW image's H and W -> per axis, AxisGather (nearest: a move) or
a constant interpolation matrix on the arrays (linear, cubic: VMM tiles via linear._matrix).

The resize is separable: along one axis it is a matrix A [in, out] with Y = X A. A is found at
compile time by resizing the identity with the node's own attributes and scales (the ONNX
reference implementation, so every coordinate transformation and nearest mode means what the
ONNX specification says). A column holding a single 1 is a pick of one input element: nearest
resizing moves data and multiplies nothing."""
import functools

import numpy as np

from ..registry import onnx_op
from .linear import _matrix


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
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

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


def _picks(a):
    """The input index each output takes when every column of A holds a single 1, else None."""
    picks = np.argmax(a, axis=0)
    one_hot = np.zeros_like(a)
    one_hot[picks, np.arange(a.shape[1])] = 1.0
    return [int(i) for i in picks] if np.array_equal(a, one_hot) else None


@onnx_op("Resize")
class Resize:
    @classmethod
    def check(cls, ctx, node):
        # a target resizes on the NPU when it has the move (strict targets keep Resize as is)
        if not ctx.target.runs_primitive("AxisGather"):
            return "the target has no AxisGather (resizing)"
        reason = _check(ctx, node)
        if reason:
            return reason
        if not ctx.target.runs_primitive("VMM") and any(
                _picks(axis_matrix(ctx, node, axis)) is None for axis in (2, 3)):
            return "the target has no VMM for the interpolation matrices"
        return None

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        _, c, _, _ = ctx.dims(x)
        for axis in (3, 2):
            a = axis_matrix(ctx, node, axis)
            picks = _picks(a)
            if picks == list(range(a.shape[0])):
                continue                       # this axis is left as it is
            if picks is not None:
                x = ctx.npu.AxisGather(x, axis=axis, indices=picks, _name=f"pick_{'nchw'[axis]}")
                continue
            h, w = ctx.dims(x)[2:]
            if axis == 3:                      # rows of W
                rows = ctx.npu.DimTransform(x, perm=[0, 1, 2, 3], shape=[0, c * h, w],
                                            _name="rows_w")
            else:                              # rows of H
                rows = ctx.npu.DimTransform(x, perm=[0, 1, 3, 2], shape=[0, c * w, h],
                                            _name="rows_h")
            y = _matrix(ctx, node, rows, a.astype(np.float32), None)
            n_out = a.shape[1]
            if axis == 3:
                x = ctx.npu.DimTransform(y, perm=[0, 1, 2], shape=[0, c, h, n_out],
                                         _name="image_w")
            else:
                y = ctx.npu.DimTransform(y, perm=[0, 1, 2], shape=[0, c, w, n_out],
                                         _name="image_h")
                x = ctx.npu.DimTransform(y, perm=[0, 1, 3, 2], shape=[0, 0, 0, 0],
                                         _name="image")
        if x is node.inputs[0]:
            x = ctx.npu.DimTransform(x, perm=[0, 1, 2, 3], shape=[0, 0, 0, 0], _name="same")
        return [x]
