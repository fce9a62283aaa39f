"""Products and norms: bmm, dot, mv, addmm, einsum, dist, norm (l2-normalise)."""
import numpy as np

from .common import cast, reduce
from .reduce import p_norm
from .registry import paddle_op
from .tensor import first_input, first_output


@paddle_op("bmm")
class Bmm:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.MatMul(ctx.input(op, "X"), ctx.input(op, "Y")))


@paddle_op("mv")
class Mv:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, first_input(op, "X", "in0"))
        vec = ctx.input(op, first_input(op, "Vec", "in1"))
        ctx.set_output(op, first_output(op, "Out", "out0"), ctx.op.MatMul(x, vec))


@paddle_op("dot")
class Dot:
    """sum(x * y) over the last axis: 1-D inputs give a 0-d result, [N, D] ones give [N]."""

    @classmethod
    def version_7(cls, ctx, op):
        xs, ys = first_input(op, "X", "in0"), first_input(op, "Y", "in1")
        x, y = ctx.input(op, xs), ctx.input(op, ys)
        dt = ctx.dtype(op, xs)
        prod = ctx.op.Mul(x, y) if dt != "bool" else ctx.op.And(x, y)
        if dt == "bool":
            prod = cast(ctx, prod, "int64")
        out = reduce(ctx, "ReduceSum", prod, [ctx.rank(op, xs) - 1], keepdims=False)
        if dt == "bool":
            out = cast(ctx, out, "bool")
        ctx.set_output(op, first_output(op, "Out", "out0"), out)


@paddle_op("einsum")
class Einsum:
    """ONNX Einsum takes Paddle's equations as they are (explicit or implicit output)."""

    @classmethod
    def version_12(cls, ctx, op):
        xs = ctx.inputs(op, first_input(op, "Operands", "in0"))
        eq = op.attr("equation").replace(" ", "")
        ctx.set_output(op, first_output(op, "Out", "out0"), ctx.op.Einsum(*xs, equation=eq))


@paddle_op("dist")
class Dist:
    """The p-norm of x - y (broadcast) over every element, 0-d."""

    @classmethod
    def required_opset(cls, op):
        return 11 if float(op.attr("p", 2.0)) == 0 else 7   # Equal on floats

    @classmethod
    def version_7(cls, ctx, op):
        d = ctx.op.Sub(ctx.input(op, "X"), ctx.input(op, "Y"))
        p = float(op.attr("p", 2.0))
        ctx.set_output(op, "Out", p_norm(ctx, d, p, None, False, np.dtype(ctx.dtype(op, "X"))))


@paddle_op("norm")
class Norm:
    """x / sqrt(sum(x^2, axis) + epsilon); Norm is that denominator (keeping the axis)."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        dtype = np.dtype(ctx.dtype(op, "X"))
        axis = int(op.attr("axis", 1)) % ctx.rank(op, "X")
        sq = reduce(ctx, "ReduceSumSquare", x, [axis], keepdims=True)
        norm = ctx.op.Sqrt(ctx.op.Add(sq, ctx.const(np.asarray(op.attr("epsilon", 1e-10), dtype))))
        ctx.set_output(op, "Out", ctx.op.Div(x, norm))
        ctx.set_output(op, "Norm", norm)


@paddle_op("addmm")
class Addmm:
    """Beta * Input + Alpha * (X @ Y), Input broadcast."""

    @classmethod
    def version_7(cls, ctx, op):
        dtype = np.dtype(ctx.dtype(op, "X"))
        product = ctx.op.MatMul(ctx.input(op, "X"), ctx.input(op, "Y"))
        base = ctx.input(op, "Input")
        alpha, beta = float(op.attr("Alpha", 1.0)), float(op.attr("Beta", 1.0))
        if alpha != 1.0:
            product = ctx.op.Mul(product, ctx.const(np.asarray(alpha, dtype)))
        if beta != 1.0:
            base = ctx.op.Mul(base, ctx.const(np.asarray(beta, dtype)))
        ctx.set_output(op, "Out", ctx.op.Add(base, product))
