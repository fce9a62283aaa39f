"""Writes into tensors: scatter, scatter_nd_add, set_value (slice assignment), masked_fill,
put_along_axis, index_put, and reads whose size depends on the data: masked_select."""
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
        if ctx.rank(op, "Ids") == 0 and ctx.rank(op, "Updates") == ctx.rank(op, "X") - 1:
            upd = unsqueeze(ctx, upd, [0])      # one row given without its axis (0-d for 1-D X)
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


@paddle_op("masked_fill")
class MaskedFill:
    """x where mask is false, value where it is true (the three broadcast together)."""

    @classmethod
    def version_9(cls, ctx, op):
        x, mask, value = (ctx.input(op, s) for s in ("x", "mask", "value"))
        dtype = ctx.dtype(op, "x")
        if ctx.dtype(op, "value") != dtype:
            value = cast(ctx, value, dtype)
        if ctx.dtype(op, "mask") != "bool":
            mask = cast(ctx, mask, "bool")
        ctx.set_output(op, "out", ctx.op.Where(mask, value, x))


@paddle_op("put_along_axis")
class PutAlongAxis:
    """arr with values written at `indices` along `axis` (assign, add or mul)."""

    _REDUCTIONS = {"assign": "none", "add": "add", "mul": "mul", "multiply": "mul"}

    @classmethod
    def check(cls, op):
        reduce_ = op.attr("Reduce", "assign")
        if reduce_ not in cls._REDUCTIONS:
            return f"put_along_axis with reduce={reduce_!r} is not supported"
        if not op.attr("Include_self", True):
            return "put_along_axis with include_self=False is not supported"
        return None

    @classmethod
    def required_opset(cls, op):
        return 11 if op.attr("Reduce", "assign") == "assign" else 16

    @classmethod
    def version_11(cls, ctx, op):
        arr, idx = ctx.input(op, "Input"), _int64(ctx, op, "Index")
        value = ctx.input(op, "Value")
        if ctx.dtype(op, "Value") != ctx.dtype(op, "Input"):
            value = cast(ctx, value, ctx.dtype(op, "Input"))
        value = ctx.op.Expand(value, ctx.op.Shape(idx))
        reduction = cls._REDUCTIONS[op.attr("Reduce", "assign")]
        attrs = {} if reduction == "none" else {"reduction": reduction}
        ctx.set_output(op, "Result", ctx.op.ScatterElements(arr, idx, value,
                                                            axis=int(op.attr("Axis", 0)), **attrs))


@paddle_op("index_put")
class IndexPut:
    """x[i0, i1, ...] = value (or += with accumulate) for integer index tensors, which
    broadcast together; value broadcasts to the region they select. A boolean mask (Paddle
    takes one alone, over x's leading dims) stands for the integer indices of its true
    positions, so value broadcasts to [count of trues] + the dims the mask leaves."""

    @classmethod
    def check(cls, op):
        names = op.input("indices")
        masks = [n for n in names if op.block.find_var(n) is not None
                 and op.block.find_var(n).dtype == "bool"]
        if masks and len(names) != 1:          # Paddle's kernel rejects these too
            return "index_put with a boolean mask among other indices is not supported"
        return None

    @classmethod
    def required_opset(cls, op):
        return 16 if op.attr("accumulate", False) else 11

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "x")
        if ctx.dtype(op, "indices") == "bool":
            stacked, n_dims = cls._mask_positions(ctx, op)
        else:
            stacked, n_dims = cls._index_positions(ctx, op)
        # the region written: the index shape, then the dims of x the indices leave
        region = ctx.op.Concat(ctx.op.Slice(ctx.op.Shape(stacked), const_i64(ctx, [0]),
                                            const_i64(ctx, [-1])),
                               ctx.op.Slice(ctx.op.Shape(x), const_i64(ctx, [n_dims]),
                                            const_i64(ctx, [2 ** 62])), axis=0)
        value = ctx.input(op, "value")
        if ctx.dtype(op, "value") != ctx.dtype(op, "x"):
            value = cast(ctx, value, ctx.dtype(op, "x"))
        value = ctx.op.Expand(value, region)
        attrs = {"reduction": "add"} if op.attr("accumulate", False) else {}
        ctx.set_output(op, "out", ctx.op.ScatterND(x, stacked, value, **attrs))

    @staticmethod
    def _mask_positions(ctx, op):
        """[count of trues, mask rank]: the true positions, in row-major order like Paddle's."""
        rank = ctx.rank(op, "indices")
        if not rank:
            raise ConversionError("index_put needs a boolean mask of known rank >= 1")
        return ctx.op.Transpose(ctx.op.NonZero(ctx.input(op, "indices")), perm=[1, 0]), rank

    @staticmethod
    def _index_positions(ctx, op):
        """[*broadcast index shape, number of indices]: the integer indices side by side."""
        idx = [as_int64(ctx, ctx.input(op, "indices", i), ctx.dtype(op, "indices", i))
               for i in range(len(op.input("indices")))]
        if len(idx) > 1:                         # broadcast the index tensors together
            total = idx[0]
            for v in idx[1:]:
                total = ctx.op.Add(total, ctx.op.Mul(v, const_i64(ctx, 0)))
            idx = [ctx.op.Expand(v, ctx.op.Shape(total)) for v in idx]
        return ctx.op.Concat(*[unsqueeze(ctx, v, [-1]) for v in idx], axis=-1), len(idx)
