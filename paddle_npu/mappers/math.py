"""Elementwise arithmetic, matrix products, scale."""
import numpy as np

from ..errors import ConversionError
from .common import broadcast_y, cast, in_float32, reshape, var_dtype
from .registry import paddle_op

_BINARY = {
    "elementwise_add": "Add", "elementwise_sub": "Sub", "elementwise_mul": "Mul",
    "elementwise_div": "Div", "elementwise_pow": "Pow", "elementwise_max": "Max",
    "elementwise_min": "Min",
}


@paddle_op(*_BINARY)
class Elementwise:
    @classmethod
    def required_opset(cls, op):
        dt = var_dtype(op, "X")
        if op.type in ("elementwise_pow", "elementwise_max", "elementwise_min") and \
                dt and not dt.startswith("float"):
            return 12   # integer Pow / Max / Min
        return 8 if op.type in ("elementwise_max", "elementwise_min") else 7

    @classmethod
    def version_7(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        y = broadcast_y(ctx, op, y, ctx.rank(op, "X"), ctx.rank(op, "Y"))
        if op.type == "elementwise_pow" and ctx.dtype(op, "Y") != ctx.dtype(op, "X"):
            y = cast(ctx, y, ctx.dtype(op, "X"))
        ctx.set_output(op, "Out", getattr(ctx.op, _BINARY[op.type])(x, y))


@paddle_op("elementwise_floordiv")
class FloorDiv:
    """Paddle floors (-3 // 2 = -2); ONNX Div on integers truncates (-1): a quotient with a
    non-zero remainder of the divisor's opposite sign is one too big."""

    @classmethod
    def required_opset(cls, op):
        dt = var_dtype(op, "X")
        return 9 if dt and not dt.startswith("float") else 7   # Less on integers

    @classmethod
    def version_7(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        y = broadcast_y(ctx, op, y, ctx.rank(op, "X"), ctx.rank(op, "Y"))
        q = ctx.op.Div(x, y)
        dt = ctx.dtype(op, "X")
        if dt.startswith("float"):
            return ctx.set_output(op, "Out", ctx.op.Floor(q))
        zero = ctx.const(np.zeros((), np.dtype(dt)))
        r = ctx.op.Sub(x, ctx.op.Mul(q, y))
        off = ctx.op.And(ctx.op.Not(ctx.op.Equal(r, zero)),
                         ctx.op.Xor(ctx.op.Less(r, zero), ctx.op.Less(y, zero)))
        ctx.set_output(op, "Out", ctx.op.Sub(q, cast(ctx, off, dt)))


@paddle_op("atan2")
class Atan2:
    """atan(x1 / x2) moved into x2 < 0's half-plane by +-pi; atan2(0, 0) = 0 as in Paddle.
    Integer inputs give float64, as Paddle's kernel does."""

    @classmethod
    def version_11(cls, ctx, op):
        dtype = ctx.out_dtype(op, "Out") or ctx.dtype(op, "X1")
        x1, x2 = ctx.input(op, "X1"), ctx.input(op, "X2")
        if ctx.dtype(op, "X1") != dtype:
            x1, x2 = cast(ctx, x1, dtype), cast(ctx, x2, dtype)

        def c(v):
            return ctx.const(np.asarray(v, dtype))
        base = in_float32(ctx, dtype, ctx.op.Atan, ctx.op.Div(x1, x2))
        turn = ctx.op.Where(ctx.op.Less(x1, c(0)), c(-np.pi), c(np.pi))
        out = ctx.op.Add(base, ctx.op.Where(ctx.op.Less(x2, c(0)), turn, c(0)))
        origin = ctx.op.And(ctx.op.Equal(x1, c(0)), ctx.op.Equal(x2, c(0)))
        ctx.set_output(op, "Out", ctx.op.Where(origin, c(0), out))


@paddle_op("elementwise_mod")
class Mod:
    @classmethod
    def version_10(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        y = broadcast_y(ctx, op, y, ctx.rank(op, "X"), ctx.rank(op, "Y"))
        fmod = int(ctx.dtype(op, "X").startswith("float"))
        if fmod:
            # Paddle's mod takes the sign of the divisor (Python %): x - floor(x / y) * y
            out = ctx.op.Sub(x, ctx.op.Mul(ctx.op.Floor(ctx.op.Div(x, y)), y))
        else:
            out = ctx.op.Mod(x, y, fmod=0)
        ctx.set_output(op, "Out", out)


@paddle_op("matmul_v2")
class MatMulV2:
    @classmethod
    def version_7(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        x = _maybe_transpose(ctx, x, ctx.rank(op, "X"), op.attr("trans_x", False))
        y = _maybe_transpose(ctx, y, ctx.rank(op, "Y"), op.attr("trans_y", False))
        ctx.set_output(op, "Out", ctx.op.MatMul(x, y))


@paddle_op("matmul")
class MatMulV1:
    """The old matmul: transpose_X/transpose_Y and a scale factor alpha."""

    @classmethod
    def version_7(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        x = _maybe_transpose(ctx, x, ctx.rank(op, "X"), op.attr("transpose_X", False))
        y = _maybe_transpose(ctx, y, ctx.rank(op, "Y"), op.attr("transpose_Y", False))
        out = ctx.op.MatMul(x, y)
        alpha = op.attr("alpha", 1.0)
        if alpha != 1.0:
            out = ctx.op.Mul(out, ctx.const(np.asarray(alpha, np.dtype(ctx.dtype(op, "X")))))
        ctx.set_output(op, "Out", out)


def _maybe_transpose(ctx, v, rank, flag):
    if not flag:
        return v
    if rank == 1:
        return v
    const = v.const_value.numpy() if v.const_value is not None else None
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    if const is not None:   # a weight: transpose it now rather than at run time
        return ctx.const(np.ascontiguousarray(np.transpose(const, perm)))
    return ctx.op.Transpose(v, perm=perm)


@paddle_op("mul")
class Mul:
    """Old fc: X flattened to 2-D at x_num_col_dims, Y at y_num_col_dims, MatMul, and the
    result shaped X.shape[:x_num_col_dims] + Y.shape[y_num_col_dims:]."""

    @classmethod
    def version_7(cls, ctx, op):
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        xs, ys = ctx.shape(op, "X"), ctx.shape(op, "Y")
        xn, yn = op.attr("x_num_col_dims", 1), op.attr("y_num_col_dims", 1)
        if len(xs) != 2:
            x = ctx.op.Flatten(x, axis=xn)
        if len(ys) != 2:
            const = y.const_value.numpy() if y.const_value is not None else None
            y = ctx.const(const.reshape(int(np.prod(ys[:yn])), -1)) if const is not None \
                else ctx.op.Flatten(y, axis=yn)
        out = ctx.op.MatMul(x, y)
        if xn > 1 or len(ys) - yn > 1:
            if ctx.opset < 10:
                raise ConversionError("mul with more than one row or column dim needs opset 10")
            lead = ctx.op.Slice(ctx.op.Shape(ctx.input(op, "X")), ctx.const(np.array([0])),
                                ctx.const(np.array([xn])))
            tail = ctx.const(np.asarray(ys[yn:], np.int64))
            out = reshape(ctx, out, ctx.op.Concat(lead, tail, axis=0))
        ctx.set_output(op, "Out", out)


@paddle_op("scale")
class Scale:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        dtype = np.dtype(ctx.dtype(op, "X"))
        if ctx.has_input(op, "ScaleTensor"):
            scale = ctx.input(op, "ScaleTensor")
            if ctx.dtype(op, "ScaleTensor") != dtype.name:
                scale = cast(ctx, scale, dtype.name)
        else:
            scale = float(op.attr("scale", 1.0))
        bias = float(op.attr("bias", 0.0))
        after = op.attr("bias_after_scale", True)
        if dtype.kind != "f":   # integer scale: compute in float, cast back like Paddle
            out = cast(ctx, x, "float32")
            out = _scale_bias(ctx, out, scale, bias, after, np.dtype("float32"))
            ctx.set_output(op, "Out", cast(ctx, out, dtype.name))
            return
        ctx.set_output(op, "Out", _scale_bias(ctx, x, scale, bias, after, dtype))


def _scale_bias(ctx, x, scale, bias, bias_after_scale, dtype):
    s = scale if not isinstance(scale, float) else (None if scale == 1.0 else ctx.const(np.asarray(scale, dtype)))
    b = None if bias == 0.0 else ctx.const(np.asarray(bias, dtype))
    if b is not None and not bias_after_scale:
        x = ctx.op.Add(x, b)
        b = None
    if s is not None:
        x = ctx.op.Mul(x, s)
    if b is not None:
        x = ctx.op.Add(x, b)
    if s is None and b is None:
        x = ctx.op.Identity(x)
    return x


@paddle_op("sum")   # PIR add_n arrives as sum
class Sum:
    @classmethod
    def version_8(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        ctx.set_output(op, "Out", xs[0] if len(xs) == 1 else ctx.op.Sum(*xs))
