"""Reduce and LayerNorm: the vector unit's reductions, and layer normalisation built on them."""
import numpy as np
from onnx import numpy_helper

from .base import DOUBLE, Arg, Attr, Primitive, config_tag, count_dims, primitive

FUNCTIONS = ("sum", "mean", "max", "min")


def _reduce(b, function, x, axes, keepdims):
    """ONNX ops reducing x over `axes` (sum / mean / max / min; the axes an input from opset 18,
    ReduceSum's already from 13)."""
    op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
          "min": "ReduceMin"}[function]
    if op == "ReduceSum" or b.opset >= 18:
        return b.op(op, x, b.const(axes), keepdims=keepdims)
    return b.op(op, x, axes=list(axes), keepdims=keepdims)


def _reduced_dims(shape, axes, keepdims):
    return [1 if i in axes else d for i, d in enumerate(shape)] if keepdims else \
        [d for i, d in enumerate(shape) if i not in axes]


def _sum_type(b, v, float32):
    """v in the type the body sums in: as it is in a float32 body, else float64."""
    return v if float32 else b.op("Cast", v, to=DOUBLE)


def _sum_constant(b, value, float32):
    """A scalar constant in the type the body sums in (float32 bodies only ever run on
    float32 inputs: functions.sums_in_float32), rounded to float32 first as an attribute
    holds it."""
    dtype = np.float32 if float32 else np.float64
    return b.op("Constant", value=numpy_helper.from_array(np.array(np.float32(value), dtype)))


def _size(shape, axes):
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


@primitive
class Reduce(Primitive):
    """Y = f over `axes` of X, f being sum, mean, max or min, on the vector unit: every
    element of X is read once. Sums are kept in float64 and rounded once to X's type (in
    float32 in the float32 body, a mean there by onnxruntime's ReduceMean)."""

    inputs = (Arg("X", "any float tensor (the reduced axes of fixed size)"),)
    outputs = (Arg("Y", "X reduced over `axes`"),)
    attributes = (Attr("function", "string", "sum, mean, max or min"),
                  Attr("axes", "ints", "the axes reduced (non-negative, sorted)"),
                  Attr("keepdims", "int", "1: the reduced axes stay with size 1", 1))

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        if a["function"] not in FUNCTIONS:
            raise ValueError(f"Reduce: unknown function {a['function']!r} (known: {FUNCTIONS})")
        return [_reduced_dims(in_shapes[0], a["axes"], a["keepdims"])]

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        size = _size(in_shapes[0], a["axes"]) if a["function"] == "mean" else 0
        axes = [int(i) for i in a["axes"]]     # a list when emitted, a tuple when read back
        return f"{a['function']}_{config_tag(axes, int(a['keepdims']), size)}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        f, axes, keep = attrs["function"], list(attrs["axes"]), attrs["keepdims"]
        if f == "mean" and float32:     # one node, not a sum and a division: every node
            b.output(_reduce(b, f, "X", axes, keep), "Y")       # costs session creation
        elif f in ("sum", "mean"):
            y = _reduce(b, "sum", _sum_type(b, "X", float32), axes, keep)
            if f == "mean":
                y = b.op("Div", y, _sum_constant(b, _size(in_shapes[0], axes), float32))
            b.output(y, "Y", like=None if float32 else "X")
        else:
            b.op("Identity", _reduce(b, f, "X", axes, keep), out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        cls.body(b, attrs, in_shapes, float32=True)

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        axes, keep = tuple(a["axes"]), bool(a["keepdims"])
        if a["function"] in ("sum", "mean"):
            y = getattr(np, a["function"])(x.astype(np.float64), axis=axes, keepdims=keep)
        else:
            y = getattr(np, a["function"][:3])(x, axis=axes, keepdims=keep)
        array.vector_elements += x.size
        return [np.asarray(y).astype(x.dtype)]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return count_dims(in_shapes[0])


@primitive
class LayerNorm(Primitive):
    """Y = (X - mean) / sqrt(var + epsilon) * Scale + Bias, mean and (biased) variance over
    the axes from `axis` to the last (LayerNormalization), on the vector unit: three passes
    over X (the mean, the variance, the normalisation), in float64, rounded once to X's
    type (in float32 in the float32 body, which onnxruntime runs as one LayerNormalization)."""

    inputs = (Arg("X", "any float tensor (the normalised axes of fixed size)"),
              Arg("Scale", "the normalised axes' shape (may be left out)", optional=True),
              Arg("Bias", "the normalised axes' shape (may be left out)", optional=True))
    outputs = (Arg("Y", "X's shape and type"),)
    attributes = (Attr("axis", "int", "the first normalised axis (non-negative)"),
                  Attr("epsilon", "float", "added to the variance", 1e-5))

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        axes = list(range(a["axis"], len(in_shapes[0])))
        present = [len(in_shapes) > i and in_shapes[i] is not None for i in (1, 2)]
        eps = float(np.float32(a["epsilon"]))    # as the node's attribute holds it
        return f"ln_{config_tag(axes, _size(in_shapes[0], axes), eps, present)}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        def wide(v):
            return _sum_type(b, v, float32=False)
        axes = list(range(attrs["axis"], len(in_shapes[0])))
        n = _sum_constant(b, _size(in_shapes[0], axes), float32=False)
        x = wide("X")
        d = b.op("Sub", x, b.op("Div", _reduce(b, "sum", x, axes, 1), n))
        var = b.op("Div", _reduce(b, "sum", b.op("Mul", d, d), axes, 1), n)
        eps = _sum_constant(b, attrs["epsilon"], float32=False)
        y = b.op("Div", d, b.op("Sqrt", b.op("Add", var, eps)))
        if len(in_shapes) > 1 and in_shapes[1] is not None:
            y = b.op("Mul", y, wide("Scale"))
        if len(in_shapes) > 2 and in_shapes[2] is not None:
            y = b.op("Add", y, wide("Bias"))
        b.output(y, "Y", like="X")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        scale, bias = (len(in_shapes) > i and in_shapes[i] is not None for i in (1, 2))
        if b.opset >= 17 and scale:     # one node (every node costs session creation)
            # (no "" for a missing Bias: onnxruntime 1.32 crashes on one in a function body)
            b.op("LayerNormalization", "X", "Scale", *(["Bias"] if bias else []),
                 axis=attrs["axis"], epsilon=float(attrs["epsilon"]), out="Y")
            return
        # written as onnxruntime's LayerNormFusion matches it (ReduceMean, Sub, Pow 2,
        # ReduceMean, Add, Sqrt, Div, Mul, Add), so that it runs as one LayerNormalization
        axes = list(range(attrs["axis"], len(in_shapes[0])))
        d = b.op("Sub", "X", _reduce(b, "mean", "X", axes, 1))
        two = _sum_constant(b, 2.0, float32=True)
        var = _reduce(b, "mean", b.op("Pow", d, two), axes, 1)
        eps = _sum_constant(b, attrs["epsilon"], float32=True)
        y = b.op("Div", d, b.op("Sqrt", b.op("Add", var, eps)))
        if scale:
            y = b.op("Mul", y, "Scale")
        if bias:
            y = b.op("Add", y, "Bias")
        b.output(y, "Y")

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        axes = tuple(range(a["axis"], x.ndim))
        x64 = x.astype(np.float64)
        d = x64 - x64.mean(axis=axes, keepdims=True)
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + a["epsilon"])
        scale, bias = (inputs + [None, None])[1:3]
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias
        array.vector_elements += 3 * x.size
        return [y.astype(x.dtype)]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return 3 * count_dims(in_shapes[0])
