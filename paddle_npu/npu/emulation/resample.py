"""AxisResample's function bodies."""
import numpy as np
from onnx import numpy_helper

from ..ops.resample import taps_of
from .body import DOUBLE, Emulated, config_tag, emulates, float_input_attrs


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
    idx, w = taps_of(attrs)
    if w is not None or not attrs.get("_float") or int(attrs["axis"]) != rank - 1:
        return 0
    return repeats(idx[:, 0])


@emulates("AxisResample")
class AxisResample(Emulated):
    """The exact body gathers the taps of every output, weighs them and sums them in
    float64, rounded once to X's type; a pick is a Gather (or onnxruntime's nearest Resize
    for a float X repeated along its last axis)."""

    @classmethod
    def input_attrs(cls, inputs, images=()):
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
        idx, w = taps_of(attrs)
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
        idx, w = taps_of(attrs)
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
