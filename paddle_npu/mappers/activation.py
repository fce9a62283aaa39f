"""Activations and other one-input elementwise functions."""
import numpy as np

from ..errors import ConversionError
from .common import cast, clip, clip_opset, in_float32, reshape, split, var_dtype
from .registry import paddle_op

_UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "abs": "Abs", "floor": "Floor", "ceil": "Ceil", "reciprocal": "Reciprocal",
    "sin": "Sin", "cos": "Cos", "erf": "Erf", "softsign": "Softsign", "sign": "Sign",
    "round": "Round", "acos": "Acos", "asin": "Asin", "atan": "Atan", "tan": "Tan",
    "cosh": "Cosh", "sinh": "Sinh",
}
_NEEDS_OPSET = {"Sign": 9, "Erf": 9, "Round": 11, "Cosh": 9, "Sinh": 9}


@paddle_op(*_UNARY)
class Unary:
    @classmethod
    def required_opset(cls, op):
        return _NEEDS_OPSET.get(_UNARY[op.type], 7)

    @classmethod
    def version_7(cls, ctx, op):
        onnx_op = _UNARY[op.type]
        fn = getattr(ctx.op, onnx_op)
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", in_float32(ctx, ctx.dtype(op, "X"), fn, x, onnx_op=onnx_op))


def _c(ctx, op, value, slot="X"):
    return ctx.const(np.asarray(value, np.dtype(ctx.dtype(op, slot))))


@paddle_op("log2", "log10")
class LogBase:
    @classmethod
    def version_7(cls, ctx, op):
        base = 2.0 if op.type == "log2" else 10.0
        y = ctx.op.Div(ctx.op.Log(ctx.input(op, "X")), _c(ctx, op, np.log(base)))
        ctx.set_output(op, "Out", y)


@paddle_op("log1p")
class Log1p:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", ctx.op.Log(ctx.op.Add(x, _c(ctx, op, 1.0))))


@paddle_op("logsigmoid")
class LogSigmoid:
    """log(sigmoid(x)) = -softplus(-x): no overflow for large |x|."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        soft = in_float32(ctx, ctx.dtype(op, "X"), ctx.op.Softplus, ctx.op.Neg(x))
        ctx.set_output(op, "Out", ctx.op.Neg(soft))


@paddle_op("mish")
class Mish:
    """x * tanh(softplus(x)), softplus(x) taken as x above `threshold` (Paddle's cut-off)."""

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        soft = in_float32(ctx, ctx.dtype(op, "X"), ctx.op.Softplus, x)
        threshold = op.attr("threshold", 20.0)
        if threshold is not None:
            soft = ctx.op.Where(ctx.op.Greater(x, _c(ctx, op, threshold)), x, soft)
        ctx.set_output(op, "Out", ctx.op.Mul(x, ctx.op.Tanh(soft)))


@paddle_op("selu")
class Selu:
    @classmethod
    def version_7(cls, ctx, op):
        alpha = float(op.attr("alpha", 1.6732632423543772))
        gamma = float(op.attr("scale", 1.0507009873554805))
        ctx.set_output(op, "Out", in_float32(ctx, ctx.dtype(op, "X"), lambda x: ctx.op.Selu(
            x, alpha=alpha, gamma=gamma), ctx.input(op, "X")))


@paddle_op("softshrink")
class SoftShrink:
    """x - l above l, x + l below -l, 0 between (ONNX Shrink with bias = lambd = l)."""

    @classmethod
    def version_9(cls, ctx, op):
        lam = float(op.attr("lambda", 0.5))
        ctx.set_output(op, "Out", ctx.op.Shrink(ctx.input(op, "X"), bias=lam, lambd=lam))


@paddle_op("tanh_shrink")
class TanhShrink:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", ctx.op.Sub(x, ctx.op.Tanh(x)))


@paddle_op("thresholded_relu")
class ThresholdedRelu:
    """x where x > threshold, else `value` (0 unless set)."""

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        keep = ctx.op.Greater(x, _c(ctx, op, op.attr("threshold", 1.0)))
        ctx.set_output(op, "Out", ctx.op.Where(keep, x, _c(ctx, op, op.attr("value", 0.0) or 0.0)))


@paddle_op("brelu")   # PIR hardtanh arrives as brelu
class HardTanh:
    @classmethod
    def required_opset(cls, op):
        return clip_opset(var_dtype(op, "X"))

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", clip(ctx, x, op.attr("t_min", 0.0), op.attr("t_max", 24.0),
                                       ctx.dtype(op, "X")))


@paddle_op("relu6")
class Relu6:
    @classmethod
    def required_opset(cls, op):
        return clip_opset(var_dtype(op, "X"))

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", clip(ctx, x, 0.0, op.attr("threshold", 6.0), ctx.dtype(op, "X")))


@paddle_op("leaky_relu")
class LeakyRelu:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.LeakyRelu(ctx.input(op, "X"),
                                                   alpha=float(op.attr("alpha", 0.02))))


@paddle_op("hard_sigmoid")
class HardSigmoid:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.HardSigmoid(
            ctx.input(op, "X"), alpha=float(op.attr("slope", 0.2)),
            beta=float(op.attr("offset", 0.5))))


@paddle_op("hard_swish")
class HardSwish:
    """x * clip(x + offset, 0, threshold) / scale (Paddle's defaults 3, 6, 6 = ONNX HardSwish)."""

    @classmethod
    def required_opset(cls, op):
        return clip_opset(var_dtype(op, "X"))

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        thr = op.attr("threshold", 6.0)
        scale = op.attr("scale", 6.0)
        offset = op.attr("offset", 3.0)
        if ctx.opset >= 14 and (thr, scale, offset) == (6.0, 6.0, 3.0):
            return ctx.set_output(op, "Out", ctx.op.HardSwish(x))
        if thr == scale:   # clip(x + offset, 0, thr) / thr is HardSigmoid: 2 nodes, not 4
            gate = ctx.op.HardSigmoid(x, alpha=1.0 / scale, beta=offset / scale)
            return ctx.set_output(op, "Out", ctx.op.Mul(x, gate))
        dt = ctx.dtype(op, "X")
        gate = clip(ctx, ctx.op.Add(x, _c(ctx, op, offset)), 0.0, thr, dt)
        ctx.set_output(op, "Out", ctx.op.Div(ctx.op.Mul(x, gate), _c(ctx, op, scale)))


@paddle_op("swish", "silu")
class Swish:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        beta = op.attr("beta", 1.0)
        arg = x if beta == 1.0 else ctx.op.Mul(x, _c(ctx, op, beta))
        ctx.set_output(op, "Out", ctx.op.Mul(x, ctx.op.Sigmoid(arg)))


@paddle_op("hard_shrink")
class HardShrink:
    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        t = _c(ctx, op, op.attr("threshold", 0.5))
        keep = ctx.op.Or(ctx.op.Greater(x, t), ctx.op.Less(x, ctx.op.Neg(t)))
        ctx.set_output(op, "Out", ctx.op.Where(keep, x, _c(ctx, op, 0.0)))


@paddle_op("gelu")
class Gelu:
    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        dt = ctx.dtype(op, "X")
        if op.attr("approximate", False):
            if ctx.opset >= 20:
                return ctx.set_output(op, "Out", ctx.op.Gelu(x, approximate="tanh"))
            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            inner = ctx.op.Mul(_c(ctx, op, np.sqrt(2 / np.pi)),
                               ctx.op.Add(x, ctx.op.Mul(_c(ctx, op, 0.044715),
                                                        ctx.op.Mul(x, ctx.op.Mul(x, x)))))
            y = ctx.op.Mul(ctx.op.Mul(_c(ctx, op, 0.5), x),
                           ctx.op.Add(_c(ctx, op, 1.0), ctx.op.Tanh(inner)))
            return ctx.set_output(op, "Out", y)
        if ctx.opset >= 20:
            # (onnxruntime runs it as its function body, on Erf)
            return ctx.set_output(op, "Out", in_float32(ctx, dt, ctx.op.Gelu, x, onnx_op="Erf"))
        # 0.5 x (1 + erf(x / sqrt(2)))
        erf = in_float32(ctx, dt, ctx.op.Erf, ctx.op.Div(x, _c(ctx, op, np.sqrt(2.0))),
                         onnx_op="Erf")
        y = ctx.op.Mul(ctx.op.Mul(x, ctx.op.Add(erf, _c(ctx, op, 1.0))), _c(ctx, op, 0.5))
        ctx.set_output(op, "Out", y)


@paddle_op("elu")
class Elu:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Elu(ctx.input(op, "X"), alpha=float(op.attr("alpha", 1.0))))


@paddle_op("softplus")
class Softplus:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        beta, threshold = op.attr("beta", 1.0), op.attr("threshold", 20.0)
        if beta == 1.0 and threshold >= 20.0:
            return ctx.set_output(op, "Out", ctx.op.Softplus(x))
        bx = ctx.op.Mul(x, _c(ctx, op, beta))
        soft = ctx.op.Div(ctx.op.Softplus(bx), _c(ctx, op, beta))
        ctx.set_output(op, "Out", ctx.op.Where(ctx.op.Greater(bx, _c(ctx, op, threshold)), x, soft)
                       if ctx.opset >= 9 else soft)


@paddle_op("pow")
class Pow:
    @classmethod
    def required_opset(cls, op):
        dt = var_dtype(op, "X")
        return 12 if dt and not dt.startswith("float") else 7   # integer Pow: opset 12

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        if ctx.has_input(op, "FactorTensor"):
            y = ctx.input(op, "FactorTensor")
        else:
            y = _c(ctx, op, op.attr("factor", 1.0))
        ctx.set_output(op, "Out", ctx.op.Pow(x, y))


@paddle_op("square")
class Square:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        ctx.set_output(op, "Out", ctx.op.Mul(x, x))


@paddle_op("rsqrt")
class Rsqrt:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Reciprocal(ctx.op.Sqrt(ctx.input(op, "X"))))


@paddle_op("clip")
class Clip:
    """Bounds as attributes or tensors (of any dtype: cast to X's, as Paddle reads them)."""

    @classmethod
    def required_opset(cls, op):
        tensor_bounds = op.input("Min") or op.input("Max")
        return max(clip_opset(var_dtype(op, "X")), 11 if tensor_bounds else 7)

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        dt = ctx.dtype(op, "X")
        bounds = []
        for slot, attr in (("Min", "min"), ("Max", "max")):
            if not ctx.has_input(op, slot):
                bounds.append(op.attr(attr, None))
                continue
            v = ctx.input(op, slot)
            if ctx.dtype(op, slot) != dt:
                v = cast(ctx, v, dt)
            bounds.append(reshape(ctx, v, []))     # Paddle's [1] bound; ONNX wants a scalar
        ctx.set_output(op, "Out", clip(ctx, x, *bounds, dt))


@paddle_op("prelu")
class PRelu:
    @classmethod
    def version_7(cls, ctx, op):
        x, alpha = ctx.input(op, "X"), ctx.input(op, "Alpha")
        mode = op.attr("mode", "all")
        rank = ctx.rank(op, "X")
        const = alpha.const_value.numpy() if alpha.const_value is not None else None
        if const is not None:
            if mode == "channel":   # [C] or [1, C, 1, 1] -> [C, 1, ..., 1] broadcasting over NC...
                alpha = ctx.const(const.reshape((-1,) + (1,) * (rank - 2)))
            elif mode == "element":
                alpha = ctx.const(const.reshape(ctx.shape(op, "X")[1:]))
            else:
                alpha = ctx.const(const.reshape(1))
        elif mode == "channel" and rank > 2:   # a computed [C] alpha: [C, 1, ..., 1] too
            alpha = reshape(ctx, alpha, [-1] + [1] * (rank - 2))
        ctx.set_output(op, "Out", in_float32(ctx, ctx.dtype(op, "X"), ctx.op.PRelu, x, alpha,
                                             onnx_op="PRelu"))


@paddle_op("softmax", "log_softmax")
class Softmax:
    @classmethod
    def version_7(cls, ctx, op):
        onnx_op = getattr(ctx.op, "Softmax" if op.type == "softmax" else "LogSoftmax")
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        if rank == 0:   # one element: softmax over it as a [1] vector
            return ctx.set_output(op, "Out", reshape(ctx, onnx_op(reshape(ctx, x, [1]), axis=0), []))
        axis = op.attr("axis", -1)
        axis = axis + rank if axis < 0 else axis
        if ctx.opset >= 13 or axis == rank - 1:
            return ctx.set_output(op, "Out", onnx_op(x, axis=axis))
        # Before 13, Softmax flattens from `axis` on: move the axis last, then back.
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        y = ctx.op.Transpose(onnx_op(ctx.op.Transpose(x, perm=perm), axis=rank - 1), perm=perm)
        ctx.set_output(op, "Out", y)


@paddle_op("swiglu")
class SwiGlu:
    """silu(x) * y; without y, x's last axis holds both halves: silu(x1) * x2."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "x")
        if ctx.has_input(op, "y"):
            gate, y = x, ctx.input(op, "y")
        else:
            shape = ctx.static_shape(op, "x")
            if shape is None or shape[-1] < 0:
                raise ConversionError("swiglu without y needs the size of x's last axis")
            half = shape[-1] // 2
            gate, y = split(ctx, x, [half, half], len(shape) - 1)
        ctx.set_output(op, "out", ctx.op.Mul(ctx.op.Mul(gate, ctx.op.Sigmoid(gate)), y))


@paddle_op("logit")
class Logit:
    """log(x / (1 - x)), x first clipped to [eps, 1 - eps] when eps > 0."""

    @classmethod
    def required_opset(cls, op):
        return clip_opset(var_dtype(op, "X"))

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        eps = float(op.attr("eps", 0.0) or 0.0)
        if eps > 0:
            x = clip(ctx, x, eps, 1.0 - eps, ctx.dtype(op, "X"))
        one = _c(ctx, op, 1.0)
        ctx.set_output(op, "Out", ctx.op.Log(ctx.op.Div(x, ctx.op.Sub(one, x))))


@paddle_op("trunc")
class Trunc:
    """Rounds toward zero: ceil below 0, floor above; integers unchanged."""

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        if not ctx.dtype(op, "X").startswith(("float", "bfloat")):
            return ctx.set_output(op, "Out", ctx.op.Identity(x))
        below = ctx.op.Less(x, _c(ctx, op, 0.0))
        ctx.set_output(op, "Out", ctx.op.Where(below, ctx.op.Ceil(x), ctx.op.Floor(x)))
