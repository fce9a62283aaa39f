"""Reductions, arg max/min, top-k, cumulative sums and products, median, norms."""
import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from .common import cast, const_i64, dtype_attr, ints, reduce, reshape, split
from .registry import paddle_op
from .tensor import const_of, out_rank

# Paddle reduction -> ONNX reduction
_REDUCE = {
    "reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax",
    "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd", "reduce_amax": "ReduceMax",
    "reduce_amin": "ReduceMin", "reduce_all": "ReduceMin", "reduce_any": "ReduceMax",
    "frobenius_norm": "ReduceL2", "logsumexp": "ReduceLogSumExp",
}


def reduce_axes(op, rank, dim_attr="dim", all_attr="reduce_all"):
    """The axes a Paddle reduction runs over (sorted, non-negative), None for all of them.

    Paddle reduces everything when reduce_all is set, when no axes are given, or when
    there are as many axes as dims (phi's recompute_reduce_all)."""
    dims = op.attr(dim_attr)
    dims = [] if dims is None else ints(dims if isinstance(dims, (list, tuple)) else [dims])
    if op.attr(all_attr, False) or not dims or rank == 0 or len(dims) >= rank:
        return None
    return sorted({d % rank for d in dims})


@paddle_op(*_REDUCE)
class Reduce:
    @classmethod
    def check(cls, op):
        if op.input("axis") or op.input("AxisTensor") or op.input("AxisTensorList"):
            return "reduction over computed axes is not supported"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        in_dt = ctx.dtype(op, "X")
        out_dt = ctx.out_dtype(op, "Out") or in_dt
        if op.type == "logsumexp":
            axes = reduce_axes(op, rank, "axis")
            keep = op.attr("keepdim", False)
        else:
            axes = reduce_axes(op, rank)
            keep = op.attr("keep_dim", False)
        onnx_op = _REDUCE[op.type]
        if op.type in ("reduce_all", "reduce_any"):
            # no boolean reductions in ONNX: min / max over 0/1
            if in_dt != "bool":
                x = cast(ctx, x, "bool")
            x = cast(ctx, x, "float32")
        elif in_dt != out_dt:   # sum of bool/int32 gives int64; out_dtype casts first
            x = cast(ctx, x, out_dt)
        if rank == 0:
            y = ctx.op.Identity(x)
        else:
            y = reduce(ctx, onnx_op, x, axes, keep)
        if op.type in ("reduce_all", "reduce_any"):
            y = cast(ctx, y, "bool")
            # Paddle records a float input's dtype for the result though it yields bool
            y.type = ir.TensorType(ir.DataType.BOOL)
        ctx.set_output(op, "Out", y)


@paddle_op("mean")
class Mean:
    """The old `mean` op: the mean of every element (0-d, or [1] in programs before 2.5)."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        y = reduce(ctx, "ReduceMean", reshape(ctx, x, [-1]), [0], keepdims=False)
        if out_rank(ctx, op) == 1:
            y = reshape(ctx, y, [1])
        ctx.set_output(op, "Out", y)


@paddle_op("p_norm")
class PNorm:
    """sum(|x|^p)^(1/p) over one axis (or all, asvector); 0, inf and -inf orders too."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        p = float(op.attr("porder", 2.0))
        keep = op.attr("keepdim", False)
        axes = None if op.attr("asvector", False) or rank <= 1 else [op.attr("axis", -1) % rank]
        ctx.set_output(op, "Out", p_norm(ctx, x, p, axes, keep, np.dtype(ctx.dtype(op, "X"))))

    @classmethod
    def required_opset(cls, op):
        return 11 if float(op.attr("porder", 2.0)) == 0 else 7   # Equal on floats


def p_norm(ctx, x, p, axes, keep, dtype):
    """sum(|x|^p)^(1/p) over axes (None: all); orders 0 (non-zeros), inf and -inf too."""
    if p == 2:
        return reduce(ctx, "ReduceL2", x, axes, keep)
    if p == 1:
        return reduce(ctx, "ReduceL1", x, axes, keep)
    if p == np.inf:
        return reduce(ctx, "ReduceMax", ctx.op.Abs(x), axes, keep)
    if p == -np.inf:
        return reduce(ctx, "ReduceMin", ctx.op.Abs(x), axes, keep)
    if p == 0:   # count of non-zeros
        nz = cast(ctx, ctx.op.Not(ctx.op.Equal(x, ctx.const(np.zeros((), dtype)))), dtype.name)
        return reduce(ctx, "ReduceSum", nz, axes, keep)
    powed = ctx.op.Pow(ctx.op.Abs(x), ctx.const(np.asarray(p, dtype)))
    return ctx.op.Pow(reduce(ctx, "ReduceSum", powed, axes, keep),
                      ctx.const(np.asarray(1.0 / p, dtype)))


def _index_dtype(op):
    dt = op.attr("dtype", 3)
    return "int64" if dt in (None, -1) else dtype_attr(dt)


@paddle_op("arg_max", "arg_min")
class ArgMaxMin:
    @classmethod
    def check(cls, op):
        if op.input("axis"):
            return f"{op.type} over a computed axis is not supported"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        fn = ctx.op.ArgMax if op.type == "arg_max" else ctx.op.ArgMin
        keep = bool(op.attr("keepdims", False))
        if op.attr("flatten", False) or rank == 0:
            y = fn(reshape(ctx, x, [-1]), axis=0, keepdims=0)      # 0-d
            if keep and rank:
                y = reshape(ctx, y, [1] * rank)
        else:
            y = fn(x, axis=int(op.attr("axis", -1)) % rank, keepdims=int(keep))
        dt = _index_dtype(op)
        ctx.set_output(op, "Out", y if dt == "int64" else cast(ctx, y, dt))


@paddle_op("top_k", "top_k_v2")
class TopK:
    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        if ctx.has_input(op, "K"):
            k = const_of(ctx, op, "K")
            if k is not None:
                k = const_i64(ctx, [int(np.asarray(k).reshape(-1)[0])])
            else:
                k = reshape(ctx, cast(ctx, ctx.input(op, "K"), "int64"), [1])
        else:
            k = const_i64(ctx, [int(op.attr("k", 1))])
        if rank == 0:   # the one element, at index 0
            ctx.set_output(op, "Out", ctx.op.Identity(x))
            return ctx.set_output(op, "Indices", ctx.const(np.zeros((), np.int64)))
        axis = -1 if op.type == "top_k" else int(op.attr("axis", -1))
        values, indices = ctx.op.TopK(x, k, axis=axis % max(rank, 1),
                                      largest=int(op.attr("largest", True)),
                                      sorted=int(op.attr("sorted", True)), _outputs=2)
        ctx.set_output(op, "Out", values)
        ctx.set_output(op, "Indices", indices)


@paddle_op("cumsum")
class CumSum:
    @classmethod
    def check(cls, op):
        if op.input("axis"):
            return "cumsum over a computed axis is not supported"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        if op.attr("flatten", False) or rank == 0:
            x, axis = reshape(ctx, x, [-1]), 0
        else:
            axis = int(op.attr("axis", -1)) % rank
        y = ctx.op.CumSum(x, ctx.const(np.asarray(axis, np.int64)),
                          exclusive=int(op.attr("exclusive", False)),
                          reverse=int(op.attr("reverse", False)))
        if rank == 0 and out_rank(ctx, op) == 0:   # a 0-d input keeps its shape
            y = reshape(ctx, y, [])
        ctx.set_output(op, "Out", y)



_MAX_CUMPROD_STEPS = 1024


@paddle_op("cumprod")
class CumProd:
    """Running products along `dim`, multiplied one step after another as Paddle's kernel
    does (ONNX has no CumProd): one Mul per position, so the axis needs a known size."""

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.static_shape(op, "X")
        if not shape:
            raise ConversionError("cumprod needs the rank of its input")
        axis = int(op.attr("dim", -1)) % len(shape)
        n = shape[axis]
        if not 0 < n <= _MAX_CUMPROD_STEPS:
            raise ConversionError(f"cumprod needs a known axis size of at most "
                                  f"{_MAX_CUMPROD_STEPS} (got {n}); fix it with --input-shape")
        parts = list(split(ctx, x, [1] * n, axis)) if n > 1 else [x]
        reverse, exclusive = op.attr("reverse", False), op.attr("exclusive", False)
        if reverse:
            parts = parts[::-1]
        if exclusive:    # 1, x0, x0*x1, ...
            one = ctx.const(np.ones((), np.dtype(ctx.dtype(op, "X"))))
            parts = [ctx.op.Expand(one, ctx.op.Shape(parts[0]))] + parts[:-1]
        out = [parts[0]]
        for p in parts[1:]:
            out.append(ctx.op.Mul(out[-1], p))
        if reverse:
            out = out[::-1]
        ctx.set_output(op, "Out", out[0] if n == 1 else ctx.op.Concat(*out, axis=axis))


@paddle_op("median")
class Median:
    """The middle of the sorted values along one axis (or all): mode 'avg' averages the two
    middle ones of an even count, 'min' takes the lower."""

    @classmethod
    def check(cls, op):
        axes = op.attr("axis", [])
        if isinstance(axes, (list, tuple)) and len(axes) > 1:
            return "median over several axes is not supported"
        medians = set(op.output("medians"))
        if op.attr("mode", "avg") == "avg" and any(
                medians & set(n for names in other.inputs.values() for n in names)
                for other in op.block.program.all_ops()):
            return "median's index pairs (mode 'avg') are used, which is not supported"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "x")
        shape = ctx.static_shape(op, "x")
        axes = op.attr("axis", [])
        axes = list(axes) if isinstance(axes, (list, tuple)) else [axes]
        keep = op.attr("keepdim", False)
        if not axes:                                   # over every element
            n = int(np.prod(shape)) if shape and all(d > 0 for d in shape) else -1
            x, axis = reshape(ctx, x, [-1]), 0
        else:
            axis = int(axes[0]) % len(shape)
            n = shape[axis]
        if n <= 0:
            raise ConversionError("median needs a known size along its axis; fix it with "
                                  "--input-shape")
        k = n // 2 + 1
        low, where = ctx.op.TopK(x, const_i64(ctx, [k]), axis=axis, largest=0, sorted=1,
                                 _outputs=2)

        def at(t, i):                                  # position i of the sorted lower half
            t = ctx.op.Slice(t, const_i64(ctx, [i]), const_i64(ctx, [i + 1]), const_i64(ctx, [axis]))
            if not axes:
                return reshape(ctx, t, [1] * len(shape) if keep else [])
            if keep:
                return t
            return ctx.op.Squeeze(t, const_i64(ctx, [axis])) if ctx.opset >= 13 else \
                ctx.op.Squeeze(t, axes=[axis])

        pick = k - 1 if n % 2 or op.attr("mode", "avg") == "avg" else k - 2
        y = at(low, pick)
        if n % 2 == 0 and op.attr("mode", "avg") == "avg":
            half = ctx.const(np.asarray(0.5, np.dtype(ctx.dtype(op, "x"))))
            y = ctx.op.Mul(ctx.op.Add(at(low, k - 2), y), half)
        ctx.set_output(op, "out", y)
        if op.attr("mode", "avg") != "avg" and ctx.has_output(op, "medians"):
            ctx.set_output(op, "medians", at(where, pick))
