"""AxisGather: elements picked along one axis at constant indices, a move (nearest resizing)."""
import numpy as np

from .base import Arg, Attr, Primitive, config_tag, primitive


@primitive
class AxisGather(Primitive):
    """Y = X with axis `axis` replaced by X's entries at `indices` (in order, repeats
    allowed): the DimTransform-class move nearest-neighbour resizing is along each axis. Its
    cost is one moved element per Y element."""

    inputs = (Arg("X", "any tensor"),)
    outputs = (Arg("Y", "X's shape but len(indices) along axis"),)
    attributes = (Attr("axis", "int", "the axis picked along (non-negative)"),
                  Attr("indices", "ints", "the entries of X kept, in Y's order"))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        out = list(in_shapes[0])
        out[a["axis"]] = len(a["indices"])
        return [out]

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        return config_tag(int(a["axis"]), [int(i) for i in a["indices"]])

    @classmethod
    def body(cls, b, attrs, in_shapes):
        b.op("Gather", "X", b.const(list(attrs["indices"])), axis=int(attrs["axis"]), out="Y")

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        y = np.take(inputs[0], np.asarray(a["indices"], dtype=np.int64), axis=a["axis"])
        array.moved_elements += y.size
        return [y]
