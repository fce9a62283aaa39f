"""Writes into tensors: scatter, scatter_nd_add, set_value (slice assignment), and reads
whose size depends on the data: masked_select."""
import numpy as np

from ..errors import ConversionError
from .common import as_int64, cast, const_i64, ints, reshape, unsqueeze
from .registry import paddle_op
from .tensor import END, FRONT, _VALUE_KEYS, int_list_input, is_value


def _int64(ctx, op, slot):
    return as_int64(ctx, ctx.input(op, slot), ctx.dtype(op, slot))


@paddle_op("scatter")
class Scatter:
    """Rows Ids of X replaced by Updates (overwrite), or zeroed and then summed into."""

    @classmethod
    def required_opset(cls, op):
        return 11 if op.attr("overwrite", True) else 16

    @classmethod
    def version_11(cls, ctx, op):
        x, upd = ctx.input(op, "X"), ctx.input(op, "Updates")
        ids = reshape(ctx, _int64(ctx, op, "Ids"), [-1, 1])   # [N] or [N, 1] -> rows
        if op.attr("overwrite", True):
            return ctx.set_output(op, "Out", ctx.op.ScatterND(x, ids, upd))
        zeros = ctx.op.Mul(upd, ctx.const(np.zeros((), np.dtype(ctx.dtype(op, "X")))))
        cleared = ctx.op.ScatterND(x, ids, zeros)
        ctx.set_output(op, "Out", ctx.op.ScatterND(cleared, ids, upd, reduction="add"))


@paddle_op("scatter_nd_add")
class ScatterNdAdd:
    @classmethod
    def version_16(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.ScatterND(ctx.input(op, "X"), _int64(ctx, op, "Index"),
                                                   ctx.input(op, "Updates"), reduction="add"))


@paddle_op("masked_select")
class MaskedSelect:
    """The elements of X where Mask is true (both broadcast), as a 1-D tensor."""

    @classmethod
    def version_9(cls, ctx, op):
        x, mask = ctx.input(op, "X"), ctx.input(op, "Mask")
        if ctx.shape(op, "X") != ctx.shape(op, "Mask"):
            x = ctx.op.Where(mask, x, x)                  # X broadcast against Mask
            mask = ctx.op.Expand(mask, ctx.op.Shape(x))
        ctx.set_output(op, "Y", ctx.op.Compress(reshape(ctx, x, [-1]), reshape(ctx, mask, [-1]),
                                                axis=0))


@paddle_op("set_value")
class SetValue:
    """x[slices] = value: the flat positions of x are sliced the same way, and the value,
    broadcast to that region, is scattered into flat x at those positions."""

    @classmethod
    def check(cls, op):
        if op.attr("none_axes"):
            return "set_value with None (new-axis) indices is not supported"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "Input")
        rank = ctx.rank(op, "Input")
        dtype = ctx.dtype(op, "Input")
        axes = [a % rank for a in ints(op.attr("axes", []))]
        # legacy programs give computed bounds as lists of scalars; PIR as one 1-D tensor
        starts = int_list_input(ctx, op, "starts", "starts", "StartsTensorList")
        ends = int_list_input(ctx, op, "ends", "ends", "EndsTensorList")
        steps = int_list_input(ctx, op, "steps", "steps", "StepsTensorList") or [1] * len(axes)
        starts, ends = (b if is_value(b) else [min(max(v, FRONT), END) for v in b]
                        for b in (starts, ends))
        n = ctx.op.Size(x)
        positions = ctx.op.Reshape(ctx.op.Range(const_i64(ctx, 0), n, const_i64(ctx, 1)),
                                   ctx.op.Shape(x))
        region = ctx.op.Slice(positions, *[b if is_value(b) else const_i64(ctx, b)
                                           for b in (starts, ends, axes, steps)])
        value = cls._value(ctx, op, dtype)
        decrease = sorted(a % rank for a in ints(op.attr("decrease_axes", []) or []))
        value_rank = (ctx.rank(op, "ValueTensor") if ctx.has_input(op, "ValueTensor")
                      else value.const_value.numpy().ndim)
        if decrease and value_rank is not None and 0 < value_rank == rank - len(decrease):
            value = unsqueeze(ctx, value, decrease)     # the dims the indexing dropped
        value = ctx.op.Expand(value, ctx.op.Shape(region))
        flat = ctx.op.ScatterElements(reshape(ctx, x, [-1]), reshape(ctx, region, [-1]),
                                      reshape(ctx, value, [-1]), axis=0)
        ctx.set_output(op, "Out", ctx.op.Reshape(flat, ctx.op.Shape(x)))

    @staticmethod
    def _value(ctx, op, dtype):
        if ctx.has_input(op, "ValueTensor"):
            v = ctx.input(op, "ValueTensor")
            return v if ctx.dtype(op, "ValueTensor") == dtype else cast(ctx, v, dtype)
        vals = next((op.attr(k) for k in _VALUE_KEYS if op.attr(k)), None)
        if vals is None:
            raise ConversionError("set_value without a value (no ValueTensor, no values)")
        shape = ints(op.attr("shape", [len(vals)]) or [len(vals)])
        return ctx.const(np.asarray(vals, dtype=dtype).reshape(shape))
