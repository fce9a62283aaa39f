"""AxisResample: each output entry along one axis a weighted sum of a few input entries at
constant places (resizing), or, with no weights, a pick of one (a move)."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive, static_numel


def taps_of(a):
    """(indices [O, T], weights [O, T] or None) of the attributes."""
    t = a["taps"]
    idx = np.asarray(a["indices"], np.int64).reshape(-1, t)
    w = np.asarray(a["weights"], np.float64).reshape(-1, t) if len(a["weights"]) else None
    return idx, w


@primitive
class AxisResample(Primitive):
    """Y[..., o, ...] = sum over t < taps of weights[o*taps + t] * X[..., indices[o*taps + t],
    ...] along axis `axis`: resizing along one axis on the vector unit (linear: 2 taps, cubic:
    4, as the ONNX specification weighs them; the sum in float64, rounded to X's type once;
    cost: taps multiply-adds per Y element). With no weights, taps is 1 and Y picks X's
    entries (nearest resizing): a move, one moved element per Y element."""

    inputs = (Arg("X", "any float tensor"),)
    outputs = (Arg("Y", "X's shape but len(indices) / taps along axis"),)
    attributes = (Attr("axis", "int", "the axis resampled (non-negative)"),
                  Attr("indices", "ints", "[O * taps] the entries of X each output reads"),
                  Attr("weights", "floats", "[O * taps] their weights (none: a pick)", []),
                  Attr("taps", "int", "entries per output", 1))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        out = list(in_shapes[0])
        out[a["axis"]] = len(a["indices"]) // a["taps"]
        return [out]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return static_numel(out_shapes[0]) * attrs["taps"]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x, axis = inputs[0], a["axis"]
        idx, w = taps_of(a)
        if w is None:
            y = np.take(x, idx[:, 0], axis=axis)
            array.moved_elements += y.size
            return [y]
        g = np.take(x.astype(np.float64), idx, axis=axis)        # [..., O, T, ...]
        y = (g * w.reshape(w.shape + (1,) * (x.ndim - axis - 1))).sum(axis=axis + 1)
        array.vector_elements += y.size * a["taps"]
        return [y.astype(x.dtype)]
