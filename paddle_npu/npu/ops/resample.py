"""AxisResample: each output entry along one axis a weighted sum of a few input entries at
constant places (resizing), or, with no weights, a pick of one (a move)."""
import numpy as np
from onnx import numpy_helper

from .base import DOUBLE, Arg, Attr, Primitive, config_tag, float_input_attrs, primitive, \
    static_numel


def _taps(a):
    """(indices [O, T], weights [O, T] or None) of the attributes."""
    t = a["taps"]
    idx = np.asarray(a["indices"], np.int64).reshape(-1, t)
    w = np.asarray(a["weights"], np.float64).reshape(-1, t) if len(a["weights"]) else None
    return idx, w


def repeats(indices):
    """r when a pick's indices take every entry r > 1 times in turn (0, .., 0, 1, .., 1, ..:
    nearest upscaling by a whole factor), else 0."""
    n, r = int(indices.max(initial=-1)) + 1, len(indices)
    if n < 1 or r % n or r == n:
        return 0
    return r // n if np.array_equal(indices, np.repeat(np.arange(n), r // n)) else 0


def _resize_factor(attrs, rank):
    """r when a float X's pick along its last axis repeats every entry r times (`repeats`),
    else 0: the body is then onnxruntime's nearest Resize, faster than its Gather of single
    elements there (along an outer axis the Gather copies whole rows and is the faster)."""
    idx, w = _taps(attrs)
    if w is not None or not attrs.get("_float") or int(attrs["axis"]) != rank - 1:
        return 0
    return repeats(idx[:, 0])


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
    def input_attrs(cls, inputs):
        return float_input_attrs(inputs)

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        rank = len(in_shapes[0])
        tag = config_tag(int(a["axis"]), int(a["taps"]), [int(i) for i in a["indices"]],
                         [float(w) for w in a["weights"]], rank)
        return tag + ("_resize" if _resize_factor({**attrs, **a}, rank) else "")

    @classmethod
    def body(cls, b, attrs, in_shapes):
        axis, rank = int(attrs["axis"]), len(in_shapes[0])
        idx, w = _taps(attrs)
        factor = _resize_factor(attrs, rank)
        if factor:                                  # Y[..., o] = X[..., floor(o / r)]
            scales = np.ones(rank, np.float32)
            scales[axis] = factor
            b.op("Resize", "X", "", b.op("Constant", value=numpy_helper.from_array(scales)),
                 mode="nearest", coordinate_transformation_mode="asymmetric",
                 nearest_mode="floor", out="Y")
            return
        if w is None:
            b.op("Gather", "X", b.const(idx[:, 0]), axis=axis, out="Y")
            return
        g = b.op("Gather", b.op("Cast", "X", to=DOUBLE), b.const(idx), axis=axis)  # [.., O, T, ..]
        weights = w.reshape(w.shape + (1,) * (rank - axis - 1))
        g = b.op("Mul", g, b.op("Constant", value=numpy_helper.from_array(weights)))
        y = b.op("ReduceSum", g, b.const([axis + 1]), keepdims=0)
        b.op("CastLike", y, "X", out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        """A weighted sum summed in float32, term by term: sum over t of Gather(X, the
        entries of tap t) * their weights. No float64 copy of X, and no [..., O, T, ...]
        of all the taps summed over an inner axis (what makes the exact body slow on large
        images: its Cast, Gather, Mul and ReduceSum)."""
        idx, w = _taps(attrs)
        if w is None:
            cls.body(b, attrs, in_shapes)
            return
        axis, rank = int(attrs["axis"]), len(in_shapes[0])
        terms = []
        for t in range(idx.shape[1]):
            weights = w[:, t].astype(np.float32).reshape((-1,) + (1,) * (rank - axis - 1))
            terms.append(b.op("Mul", b.op("Gather", "X", b.const(idx[:, t]), axis=axis),
                              b.op("Constant", value=numpy_helper.from_array(weights))))
        b.op("Sum", *terms, out="Y")

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x, axis = inputs[0], a["axis"]
        idx, w = _taps(a)
        if w is None:
            y = np.take(x, idx[:, 0], axis=axis)
            array.moved_elements += y.size
            return [y]
        g = np.take(x.astype(np.float64), idx, axis=axis)        # [..., O, T, ...]
        y = (g * w.reshape(w.shape + (1,) * (x.ndim - axis - 1))).sum(axis=axis + 1)
        array.vector_elements += y.size * a["taps"]
        return [y.astype(x.dtype)]
