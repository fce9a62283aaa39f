"""Crop and Join: the moves that cut tensors apart and put them together (Slice, Split,
Gather at constant positions; Concat), DimTransform-class: they only move elements."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


def crop_dims(dims, starts, ends, axes, steps):
    """The output dims of a crop (Python's slice rules; a dim not fixed stays as it is)."""
    out = list(dims)
    for s, e, a, k in zip(starts, ends, axes, steps):
        if isinstance(out[a], int):
            out[a] = len(range(*slice(s, e, k).indices(out[a])))
    return out


@primitive
class Crop(Primitive):
    """Y = X[starts:ends:steps] on `axes` (ONNX Slice with constant starts, ends, axes and
    steps; Python's slice rules): a window of X moved out. Its cost is the elements moved."""

    inputs = (Arg("X", "any tensor"),)
    outputs = (Arg("Y", "the window"),)
    attributes = (Attr("starts", "ints", "first index on each axis"),
                  Attr("ends", "ints", "end (exclusive) on each axis"),
                  Attr("axes", "ints", "the axes cropped (non-negative)"),
                  Attr("steps", "ints", "step on each axis"))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        return [crop_dims(in_shapes[0], a["starts"], a["ends"], a["axes"], a["steps"])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        index = [slice(None)] * x.ndim
        for s, e, ax, k in zip(a["starts"], a["ends"], a["axes"], a["steps"]):
            index[ax] = slice(s, e, k)
        y = np.ascontiguousarray(x[tuple(index)])
        array.moved_elements += y.size
        return [y]


@primitive
class Join(Primitive):
    """Y = the inputs side by side along `axis` (Concat): each moved into its place. Its
    cost is the elements moved."""

    inputs = (Arg("P", "tensors of one rank, equal but on `axis`", variadic=True),)
    outputs = (Arg("Y", "their concatenation"),)
    attributes = (Attr("axis", "int", "the axis joined along (non-negative)"),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        axis = cls.attrs_of(attrs)["axis"]
        out = list(in_shapes[0])
        sizes = [s[axis] for s in in_shapes]
        out[axis] = sum(sizes) if all(isinstance(d, int) for d in sizes) else None
        return [out]

    @classmethod
    def reference(cls, array, inputs, attrs):
        y = np.concatenate(inputs, axis=cls.attrs_of(attrs)["axis"])
        array.moved_elements += y.size
        return [y]
