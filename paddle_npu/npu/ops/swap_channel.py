"""SwapChannel: the channels of an image reordered, RGB <-> BGR (swapChannelOp in the original
op list)."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


@primitive
class SwapChannel(Primitive):
    """Y[:, j] = X[:, order[j]]: output channel j is input channel order[j] (order
    [2, 1, 0] turns RGB into BGR and back). When the next op is a convolution of group 1 the
    fusion permutes its weights' input channels instead and no SwapChannel is left."""

    inputs = (Arg("X", "image [N, C, ...], channels on axis 1"),)
    outputs = (Arg("Y", "[N, len(order), ...], X's type"),)
    attributes = (Attr("order", "ints", "the input channel each output channel is taken from"),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        shape = list(in_shapes[0])
        shape[1] = len(cls.attrs_of(attrs)["order"])
        return [shape]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x = inputs[0]
        order = list(cls.attrs_of(attrs)["order"])
        if any(not 0 <= k < x.shape[1] for k in order):
            raise ValueError(f"SwapChannel: order {order} for {x.shape[1]} channels")
        y = np.take(x, order, axis=1)
        array.moved_elements += y.size
        return [y]
