"""Lut's and QLut's function bodies."""
import math

from ..ops.quant import qrange
from .body import Emulated, config_tag, emulates
from .quant import INT64


def _hardsigmoid(b, x, alpha, beta):
    return b.op("HardSigmoid", x, alpha=alpha, beta=beta)


def _gelu(b, x, alpha, beta):        # x * (1 + erf(x / sqrt 2)) / 2: Gelu is opset 20
    c = b.op("Constant", value_float=1 / math.sqrt(2))
    half, one = b.op("Constant", value_float=0.5), b.op("Constant", value_float=1.0)
    e = b.op("Erf", b.op("Mul", x, b.op("CastLike", c, x)))
    return b.op("Mul", b.op("Mul", x, b.op("CastLike", half, x)),
                b.op("Add", e, b.op("CastLike", one, x)))


def _mish(b, x, alpha, beta):        # x * tanh(softplus(x)): Mish is opset 18
    return b.op("Mul", x, b.op("Tanh", b.op("Softplus", x)))


def _swish(b, x, alpha, beta):
    return b.op("Mul", x, b.op("Sigmoid", x))


def _plain(op_type):
    return lambda b, x, alpha, beta: b.op(op_type, x)


# function (ops/lut.py's FUNCTIONS) -> the ONNX ops computing it
BODIES = {
    "sigmoid": _plain("Sigmoid"),
    "tanh": _plain("Tanh"),
    "exp": _plain("Exp"),
    "log": _plain("Log"),
    "sqrt": _plain("Sqrt"),
    "reciprocal": _plain("Reciprocal"),
    "erf": _plain("Erf"),
    "softplus": _plain("Softplus"),
    "hardswish": _plain("HardSwish"),
    "hardsigmoid": _hardsigmoid,
    "gelu": _gelu,
    "mish": _mish,
    "swish": _swish,
}


@emulates("Lut")
class Lut(Emulated):
    """f by the ONNX op computing it (or the few ops of its formula), in X's type."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        if a["function"] == "hardsigmoid":
            return f"hardsigmoid_{config_tag(a['alpha'], a['beta'])}"
        return a["function"]

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = BODIES[attrs["function"]](b, "X", attrs["alpha"], attrs["beta"])
        b.op("Identity", y, out="Y")


@emulates("QLut")
class QLut(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"b{cls.attrs_of(attrs)['bits']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        index = b.op("Sub", b.op("Cast", "X", to=INT64), b.const(qrange(attrs["bits"])[0]))
        b.op("Gather", "Table", index, axis=0, out="Y")
