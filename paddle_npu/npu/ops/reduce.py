"""Reduce and LayerNorm: the vector unit's reductions, and layer normalisation built on them."""
import numpy as np

from .base import Arg, Attr, Primitive, count_dims, primitive

FUNCTIONS = ("sum", "mean", "max", "min")


def _reduced_dims(shape, axes, keepdims):
    return [1 if i in axes else d for i, d in enumerate(shape)] if keepdims else \
        [d for i, d in enumerate(shape) if i not in axes]


@primitive
class Reduce(Primitive):
    """Y = f over `axes` of X, f being sum, mean, max or min, on the vector unit: every
    element of X is read once. Sums are kept in float64 and rounded once to X's type."""

    inputs = (Arg("X", "any float tensor (the reduced axes of fixed size)"),)
    outputs = (Arg("Y", "X reduced over `axes`"),)
    attributes = (Attr("function", "string", "sum, mean, max or min"),
                  Attr("axes", "ints", "the axes reduced (non-negative, sorted)"),
                  Attr("keepdims", "int", "1: the reduced axes stay with size 1", 1))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        if a["function"] not in FUNCTIONS:
            raise ValueError(f"Reduce: unknown function {a['function']!r} (known: {FUNCTIONS})")
        return [_reduced_dims(in_shapes[0], a["axes"], a["keepdims"])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        axes, keep = tuple(a["axes"]), bool(a["keepdims"])
        if a["function"] in ("sum", "mean"):
            y = getattr(np, a["function"])(x.astype(np.float64), axis=axes, keepdims=keep)
        else:
            y = getattr(np, a["function"][:3])(x, axis=axes, keepdims=keep)
        array.vector_elements += x.size
        return [np.asarray(y).astype(x.dtype)]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return count_dims(in_shapes[0])


@primitive
class LayerNorm(Primitive):
    """Y = (X - mean) / sqrt(var + epsilon) * Scale + Bias, mean and (biased) variance over
    the axes from `axis` to the last (LayerNormalization), on the vector unit: three passes
    over X (the mean, the variance, the normalisation), in float64, rounded once to X's
    type."""

    inputs = (Arg("X", "any float tensor (the normalised axes of fixed size)"),
              Arg("Scale", "the normalised axes' shape (may be left out)", optional=True),
              Arg("Bias", "the normalised axes' shape (may be left out)", optional=True))
    outputs = (Arg("Y", "X's shape and type"),)
    attributes = (Attr("axis", "int", "the first normalised axis (non-negative)"),
                  Attr("epsilon", "float", "added to the variance", 1e-5))

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        axes = tuple(range(a["axis"], x.ndim))
        x64 = x.astype(np.float64)
        d = x64 - x64.mean(axis=axes, keepdims=True)
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + a["epsilon"])
        scale, bias = (inputs + [None, None])[1:3]
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias
        array.vector_elements += 3 * x.size
        return [y.astype(x.dtype)]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return 3 * count_dims(in_shapes[0])
