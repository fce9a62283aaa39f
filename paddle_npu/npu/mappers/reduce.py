"""Reductions, Softmax and LayerNormalization on the vector unit: ReduceSum / ReduceMean /
ReduceMax / ReduceMin -> Reduce; Softmax -> Reduce (max), Sub, Lut (exp), Reduce (sum),
Div; LayerNormalization -> LayerNorm (ops/reduce.py)."""
from ..registry import onnx_op

FUNCTION_OF = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}


def reduce_axes(ctx, node, rank):
    """The sorted non-negative axes a Reduce* node reduces (attribute, or the input from
    ReduceSum-13 / opset 18), [] for none, or None when they are not constants."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = ctx.constant(node.inputs[1])
        if axes is None:
            return None
        axes = [int(a) for a in axes.reshape(-1)]
    else:
        axes = list(node.attributes.get_ints("axes", []))
    if not axes:
        return [] if node.attributes.get_int("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a + rank if a < 0 else a for a in axes)


def _float_input(ctx, node, primitive, axes=None):
    """Why a node on x cannot run as `primitive`, or None."""
    reason = ctx.unit_refusal(node, primitive)
    if reason:
        return reason
    x = node.inputs[0]
    if x.dtype is None or not x.dtype.is_floating_point():
        return f"input type {x.dtype} is not floating point"
    dims = ctx.dims(x)
    if axes is not None and not all(isinstance(dims[a], int) for a in axes):
        return "the reduced axes have no fixed size"
    return None


@onnx_op(*FUNCTION_OF)
class Reduction:
    @classmethod
    def check(cls, ctx, node):
        dims = ctx.dims(node.inputs[0])
        axes = reduce_axes(ctx, node, len(dims)) if dims is not None else []
        if axes is None:
            return "the axes are not constants"
        if not axes:
            return "no axis reduced (an identity)"
        return _float_input(ctx, node, "Reduce", axes)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        return [ctx.npu.Reduce(x, function=FUNCTION_OF[node.op_type],
                               axes=reduce_axes(ctx, node, len(ctx.dims(x))),
                               keepdims=node.attributes.get_int("keepdims", 1), _name="reduce")]


@onnx_op("Softmax")
class Softmax:
    """exp(x - max) / sum: the maximum and the sum on the vector unit, exp on the table."""

    @classmethod
    def _axis(cls, ctx, node):
        rank = len(ctx.dims(node.inputs[0]))
        axis = node.attributes.get_int("axis", -1)
        return axis + rank if axis < 0 else axis

    @classmethod
    def check(cls, ctx, node):
        dims = ctx.dims(node.inputs[0])
        reason = _float_input(ctx, node, "Reduce",
                              [cls._axis(ctx, node)] if dims is not None else None)
        if reason is None and not ctx.target.runs_primitive("Lut"):
            reason = "the target has no lookup-table unit (Lut) for exp"
        return reason

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        dims, axis = ctx.dims(x), cls._axis(ctx, node)
        top = ctx.npu.Reduce(x, function="max", axes=[axis], _name="max")
        shifted = ctx.onnx.Sub(x, top, _name="shift", _shapes=[dims])
        e = ctx.npu.Lut(shifted, function="exp", _name="exp")
        total = ctx.npu.Reduce(e, function="sum", axes=[axis], _name="sum")
        return [ctx.onnx.Div(e, total, _name="scale", _shapes=[dims])]


@onnx_op("LayerNormalization")
class LayerNormalization:
    @classmethod
    def check(cls, ctx, node):
        dims = ctx.dims(node.inputs[0])
        if len(node.outputs) > 1:
            return "it also outputs the mean and inverse deviation"
        axis = node.attributes.get_int("axis", -1)
        axes = None
        if dims is not None:
            axis = axis + len(dims) if axis < 0 else axis
            axes = list(range(axis, len(dims)))
        return _float_input(ctx, node, "LayerNorm", axes)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        rank = len(ctx.dims(x))
        axis = node.attributes.get_int("axis", -1)
        inputs = (list(node.inputs) + [None, None])[:3]
        y = ctx.npu.LayerNorm(*inputs, axis=axis + rank if axis < 0 else axis,
                              epsilon=node.attributes.get_float("epsilon", 1e-5),
                              _name="layer_norm")
        return [y]
