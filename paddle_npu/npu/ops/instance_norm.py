"""InstanceNorm: per-(sample, channel) normalisation on the vector unit."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive, static_numel


@primitive
class InstanceNorm(Primitive):
    """Y[n, c, ...] = (X[n, c, ...] - mean) / sqrt(var + epsilon) * S[c] + B[c], mean and
    (biased) variance over every element of X[n, c] (GroupNorm is this on X reshaped to
    [N, groups, -1], then a per-channel scale and shift). The vector unit sums each slice
    twice (mean, then squared deviations) and normalises, scales and shifts each element:
    its cost is 3 operations per element, plus one reciprocal square root per (n, c). The
    statistics are kept in float64 and Y is rounded to X's type once."""

    inputs = (Arg("X", "[N, C, ...]"), Arg("S", "scale [C]"), Arg("B", "shift [C]"))
    outputs = (Arg("Y", "X's shape and type"),)
    attributes = (Attr("epsilon", "float", "added to the variance", 1e-5),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return 3 * static_numel(in_shapes[0]) + in_shapes[0][0] * in_shapes[0][1]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, s, t = inputs
        eps = cls.attrs_of(attrs)["epsilon"]
        axes = tuple(range(2, x.ndim))
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=axes, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = (x64 - mean) / np.sqrt(var + np.float64(np.float32(eps))) * \
            s.astype(np.float64).reshape(shape) + t.astype(np.float64).reshape(shape)
        array.vector_elements += 3 * x.size + x.shape[0] * x.shape[1]
        return [y.astype(x.dtype)]
