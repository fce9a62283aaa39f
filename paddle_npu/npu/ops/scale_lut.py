"""ScaleLut: normalisation and quantisation of uint8 pixels by table look-up."""
import numpy as np

from .base import Arg, Primitive, primitive
from .scale import channel_shape

LEVELS = 256          # a uint8 pixel's values: one table entry each


@primitive
class ScaleLut(Primitive):
    """Y[n, c, ...] = T[c, X[n, c, ...]]: each uint8 pixel is replaced by entry X of its
    channel's 256-entry table, which holds the quantised normalised value
    round((x * scale[c] + bias[c]) / q) + zero_point precomputed for every x (ScaleLut in
    the original op list: normalisation of an int8 NPU's input without any arithmetic). The tables'
    type (int8, or uint8 when every mean is 0) is the output's."""

    inputs = (Arg("X", "uint8 image [N, C, ...], channels on axis 1"),
              Arg("T", "per-channel tables [C, 256], int8 or uint8"))
    outputs = (Arg("Y", "X's shape, T's type"),)
    attributes = ()

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, table = inputs
        if x.dtype != np.uint8:
            raise ValueError(f"ScaleLut: the input must be uint8, not {x.dtype}")
        if table.ndim != 2 or table.shape != (x.shape[1], LEVELS):
            raise ValueError(f"ScaleLut: tables of shape {table.shape} for {x.shape[1]} "
                             f"channels (expected [{x.shape[1]}, {LEVELS}])")
        channel = np.arange(x.shape[1]).reshape(channel_shape(x.ndim))
        return [table[channel, x.astype(np.intp)]]
