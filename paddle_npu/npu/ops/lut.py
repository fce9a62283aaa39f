"""Lut: a unary activation on the lookup-table unit beside the arrays, and QLut, its integer
form (a table of 2^bits entries)."""
import math

import numpy as np

from .base import Arg, Attr, Primitive, primitive
from .quant import qrange

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_softplus(x):
    return np.logaddexp(0.0, x)


# function -> f(x, alpha, beta) in NumPy, on float64
FUNCTIONS = {
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "tanh": lambda x, a, b: np.tanh(x),
    "exp": lambda x, a, b: np.exp(x),
    "log": lambda x, a, b: np.log(x),
    "sqrt": lambda x, a, b: np.sqrt(x),
    "reciprocal": lambda x, a, b: 1 / x,
    "erf": lambda x, a, b: _erf(x),
    "softplus": lambda x, a, b: _np_softplus(x),
    "hardswish": lambda x, a, b: x * np.clip(x / 6 + 0.5, 0, 1),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "gelu": lambda x, a, b: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "mish": lambda x, a, b: x * np.tanh(_np_softplus(x)),
    "swish": lambda x, a, b: x / (1 + np.exp(-x)),
}


@primitive
class Lut(Primitive):
    """Y = f(X) element by element on the lookup-table unit: `function` names f (sigmoid,
    tanh, exp, log, sqrt, reciprocal, erf, softplus, hardswish, hardsigmoid (alpha * x +
    beta clipped to [0, 1]), gelu (the erf form), mish, swish (x * sigmoid(x))). In the
    float plan the unit is ideal: f is computed exactly, in float64, rounded once to X's
    type."""

    inputs = (Arg("X", "any float tensor"),)
    outputs = (Arg("Y", "f(X), X's shape and type"),)
    attributes = (Attr("function", "string", "the function f"),
                  Attr("alpha", "float", "hardsigmoid's slope", 0.2),
                  Attr("beta", "float", "hardsigmoid's offset", 0.5))

    @classmethod
    def infer(cls, in_shapes, attrs):
        function = cls.attrs_of(attrs)["function"]
        if function not in FUNCTIONS:
            raise ValueError(f"Lut: unknown function {function!r} (known: {sorted(FUNCTIONS)})")
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        f = FUNCTIONS[a["function"]]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            y = f(x.astype(np.float64), a["alpha"], a["beta"])
        array.lut_elements += x.size
        return [y.astype(x.dtype)]


def lut_table(function, s_x, s_y, bits, alpha=0.2, beta=0.5):
    """QLut's table: entry q - qmin holds saturate(round_half_even(f(q * s_x) / s_y)) for
    every integer q of `bits` bits (256 entries at 8 bits, 65536 at 16), f in float64."""
    lo, hi = qrange(bits)
    x = np.arange(lo, hi + 1, dtype=np.float64) * np.float64(np.float32(s_x))
    f = FUNCTIONS[function]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        y = f(x, alpha, beta) / np.float64(np.float32(s_y))
    y = np.nan_to_num(y, nan=0.0, posinf=hi, neginf=lo)     # log / sqrt outside their domain
    return np.clip(np.rint(y), lo, hi).astype(np.int8 if bits == 8 else np.int16)


def coarse_share(bits):
    """The share of its output range f may move by within one input step of a `bits`-bit
    table: 1/8 at 8 bits, 1/128 at 16, so that half the table's bits survive its input's
    quantisation (a 16-bit table a step of which moves f by 1/8 holds f to 3 bits, worse than
    the 8-bit one: a relation bias sin(100 log(...)) then comes out noise)."""
    return 2.0 ** -(bits // 2 - 1)


def coarse_step(function, lo, hi, s_x, s_y, bits, alpha=0.2, beta=0.5):
    """Where a `bits`-bit table cannot stand for f on the calibrated inputs [lo, hi]: the
    input (a cell's low end) at which f changes within one input step s_x by more than
    coarse_share(bits) of the range the output grid s_y covers, else None. Log or Reciprocal
    of a ratio spanning decades (an inverse sigmoid's x / (1 - x)) is such a case: all its
    small values fall into the first cells, one entry each for outputs far apart."""
    qlo, qhi = qrange(bits)
    q = np.arange(max(qlo, int(np.floor(lo / s_x))), min(qhi, int(np.ceil(hi / s_x))) + 1,
                  dtype=np.float64)
    if not q.size:
        return None
    a = np.clip((q - 0.5) * s_x, lo, hi)
    b = np.clip((q + 0.5) * s_x, lo, hi)
    f = FUNCTIONS[function]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        change = np.abs(f(b, alpha, beta) - f(a, alpha, beta))
    change = np.where(b <= a, 0.0, np.nan_to_num(change, nan=np.inf))  # (log(0): no bound)
    worst = int(np.argmax(change))
    return float(a[worst]) if change[worst] > coarse_share(bits) * s_y * qhi else None


@primitive
class QLut(Primitive):
    """Y = Table[X - qmin]: an integer activation on the lookup-table unit, a table of
    2^bits entries (256 for int8 in and out) computed at compile time (`lut_table`: f on the
    input's grid, rounded to the output's). Exact: an index, no arithmetic."""
    placed_as = "Lut"

    inputs = (Arg("X", "int8 / int16 tensor"),
              Arg("Table", "constant int8 / int16 [2^bits]: f of every input value"))
    outputs = (Arg("Y", "X's shape, the table's type"),)
    attributes = (Attr("bits", "int", "the input's bits: 8 or 16", 8),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, table = inputs
        array.lut_elements += x.size
        return [table[x.astype(np.int64) - qrange(cls.attrs_of(attrs)["bits"])[0]]]
