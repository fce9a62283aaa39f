"""Index grids and element-wise gathers (detection heads decode boxes with these)."""
import numpy as np

from .common import as_int64, const_i64, reshape
from .registry import paddle_op


@paddle_op("meshgrid")
class Meshgrid:
    """'ij' grids: output i is input i laid along dim i and broadcast over the others."""

    @classmethod
    def version_8(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        n = len(xs)
        # the full shape is the concatenation of every input's length
        full = ctx.op.Concat(*[reshape(ctx, ctx.op.Shape(x), [1]) for x in xs], axis=0) \
            if ctx.opset >= 8 else None
        for i, x in enumerate(xs):
            shape = [1] * n
            shape[i] = -1
            grid = ctx.op.Expand(reshape(ctx, x, const_i64(ctx, shape)), full)
            ctx.set_output(op, "Out", grid, i)


@paddle_op("take_along_axis")
class TakeAlongAxis:
    @classmethod
    def check(cls, op):
        if op.attr("broadcast", True) not in (True, False):
            return "unknown broadcast mode"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        x, idx = ctx.input(op, "Input"), ctx.input(op, "Index")
        axis = op.attr("Axis", op.attr("axis", 0))
        rank = ctx.rank(op, "Input")
        axis = axis + rank if axis < 0 else axis
        x_shape, i_shape = ctx.shape(op, "Input"), ctx.shape(op, "Index")
        if op.attr("broadcast", True) and x_shape and i_shape and (
                len(x_shape) != len(i_shape) or any(
                    a != b for d, (a, b) in enumerate(zip(x_shape, i_shape)) if d != axis)):
            # Paddle broadcasts index and input against each other except along `axis`
            idx_target = ctx.op.Max(ctx.op.Shape(x), ctx.op.Shape(idx))
            axis_len = ctx.op.Gather(ctx.op.Shape(idx), const_i64(ctx, [axis]), axis=0)
            mask = np.zeros(rank, np.int64)
            mask[axis] = 1
            idx_shape = ctx.op.Where(ctx.const(mask.astype(bool)), axis_len, idx_target)
            idx = ctx.op.Expand(idx, idx_shape)
            x_len = ctx.op.Gather(ctx.op.Shape(x), const_i64(ctx, [axis]), axis=0)
            x = ctx.op.Expand(x, ctx.op.Where(ctx.const(mask.astype(bool)), x_len, idx_target))
        ctx.set_output(op, "Result", ctx.op.GatherElements(x, idx, axis=axis))


@paddle_op("index_sample")
class IndexSample:
    """out[i, j] = x[i, index[i, j]]."""

    @classmethod
    def version_11(cls, ctx, op):
        idx = as_int64(ctx, ctx.input(op, "Index"), ctx.dtype(op, "Index"))
        ctx.set_output(op, "Out", ctx.op.GatherElements(ctx.input(op, "X"), idx, axis=1))
