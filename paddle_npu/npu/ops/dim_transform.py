"""DimTransform: a layout change, transpose then reshape (dimtransform / reshape_3 in the
original op list)."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


def reshape_dims(src, shape):
    """ONNX Reshape's rule (0 copies the input dim, one -1 is inferred) on shapes that may
    hold symbolic dims; the inferred dim is symbolic if anything it depends on is."""
    out = [src[i] if s == 0 else s for i, s in enumerate(shape)]
    if -1 in out:
        known = [d for d in out if d != -1]
        symbols = sorted(str(d) for d in src if not isinstance(d, int))
        inferred = None
        if symbols == sorted(str(d) for d in known if not isinstance(d, int)):
            # the same symbolic dims on both sides: the static parts divide
            total = int(np.prod([d for d in src if isinstance(d, int)], dtype=np.int64))
            rest = int(np.prod([d for d in known if isinstance(d, int)], dtype=np.int64))
            inferred = total // rest if rest else None
        out[out.index(-1)] = inferred
    return out


@primitive
class DimTransform(Primitive):
    """Y = Reshape(Transpose(X, perm), shape): the rank and layout changes between the
    primitives (the original op list's dimtransform_1 / dimtransform_2 / reshape_3). In
    `shape`, 0 keeps the dimension of the transposed X at that index and one -1 is inferred,
    as in Reshape."""

    inputs = (Arg("X", "any tensor"),)
    outputs = (Arg("Y", "X's elements, permuted and reshaped"),)
    attributes = (Attr("perm", "ints", "permutation of X's axes"),
                  Attr("shape", "ints", "the output shape, Reshape's rules on the permuted X"))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        src = [in_shapes[0][p] for p in a["perm"]]
        return [reshape_dims(src, a["shape"])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = np.transpose(inputs[0], a["perm"])
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(a["shape"])]
        array.moved_elements += x.size
        return [np.ascontiguousarray(x).reshape(shape)]
