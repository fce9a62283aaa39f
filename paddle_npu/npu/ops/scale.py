"""Scale: the per-channel multiply-add of image normalisation (ScaleOp in the original op list)."""
from .base import Arg, Primitive, primitive


def channel_shape(rank):
    """The shape a per-channel vector takes to broadcast over axis 1 of a rank-`rank` tensor."""
    if rank is None or rank < 2:
        raise ValueError(f"a per-channel op needs an input of rank >= 2 (channels on axis 1), "
                         f"not rank {rank}")
    return [-1] + [1] * (rank - 2)


@primitive
class Scale(Primitive):
    """Y[n, c, ...] = X[n, c, ...] * S[c] + B[c]: the per-channel multiply-add that normalises
    an image, (x - mean) / std written as x * (1 / std) + (-mean / std) (the original op list's
    Scale).
    Computed in X's type: the product is rounded to it, then the sum, as a Mul and an Add
    would."""

    inputs = (Arg("X", "image [N, C, ...], channels on axis 1"),
              Arg("S", "per-channel multiplier [C]"),
              Arg("B", "per-channel addend [C]"))
    outputs = (Arg("Y", "X's shape and type"),)
    attributes = ()

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, s, t = inputs
        shape = channel_shape(x.ndim)
        if s.size != x.shape[1] or t.size != x.shape[1]:
            raise ValueError(f"Scale: {x.shape[1]} channels but {s.size} multipliers and "
                             f"{t.size} addends")
        prod = (x * s.astype(x.dtype).reshape(shape)).astype(x.dtype)
        return [(prod + t.astype(x.dtype).reshape(shape)).astype(x.dtype)]
