"""Reduce's and LayerNorm's function bodies."""
import numpy as np
from onnx import numpy_helper

from .body import DOUBLE, Emulated, config_tag, emulates


def reduce(b, function, x, axes, keepdims):
    """ONNX ops reducing x over `axes` (sum / mean / max / min; the axes an input from opset 18,
    ReduceSum's already from 13)."""
    op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
          "min": "ReduceMin"}[function]
    if op == "ReduceSum" or b.opset >= 18:
        return b.op(op, x, b.const(axes), keepdims=keepdims)
    return b.op(op, x, axes=list(axes), keepdims=keepdims)


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


@emulates("Reduce")
class Reduce(Emulated):
    """The exact body sums in float64 and rounds once to X's type; the float32 body sums in
    float32, a mean by onnxruntime's ReduceMean."""

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
            b.output(reduce(b, f, "X", axes, keep), "Y")        # costs session creation
        elif f in ("sum", "mean"):
            y = reduce(b, "sum", _sum_type(b, "X", float32), axes, keep)
            if f == "mean":
                y = b.op("Div", y, _sum_constant(b, _size(in_shapes[0], axes), float32))
            b.output(y, "Y", like=None if float32 else "X")
        else:
            b.op("Identity", reduce(b, f, "X", axes, keep), out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        cls.body(b, attrs, in_shapes, float32=True)


@emulates("LayerNorm")
class LayerNorm(Emulated):
    """The exact body computes in float64 and rounds once to X's type; the float32 body is
    one LayerNormalization where the opset has it, else written as onnxruntime's
    LayerNormFusion matches it."""

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
        d = b.op("Sub", x, b.op("Div", reduce(b, "sum", x, axes, 1), n))
        var = b.op("Div", reduce(b, "sum", b.op("Mul", d, d), axes, 1), n)
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
        d = b.op("Sub", "X", reduce(b, "mean", "X", axes, 1))
        two = _sum_constant(b, 2.0, float32=True)
        var = reduce(b, "mean", b.op("Pow", d, two), axes, 1)
        eps = _sum_constant(b, attrs["epsilon"], float32=True)
        y = b.op("Div", d, b.op("Sqrt", b.op("Add", var, eps)))
        if scale:
            y = b.op("Mul", y, "Scale")
        if bias:
            y = b.op("Add", y, "Bias")
        b.output(y, "Y")
