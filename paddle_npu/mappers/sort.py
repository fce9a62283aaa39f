"""Sorting and distinct values: argsort, unique."""
import onnx_ir as ir

from ..exporter import onnx_dtype
from .common import cast, dtype_attr
from .registry import paddle_op
from .tensor import dims_of


@paddle_op("argsort")
class Argsort:
    """A TopK over the whole axis. Equal values may come out in another order than Paddle's."""

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        if rank == 0:
            ctx.set_output(op, "Out", ctx.op.Identity(x))
            zero = ctx.const(0, dtype="int64")
            return ctx.set_output(op, "Indices", zero)
        axis = int(op.attr("axis", -1)) % rank
        values, indices = ctx.op.TopK(x, dims_of(ctx, x, [axis]), axis=axis,
                                      largest=int(bool(op.attr("descending", False))), sorted=1,
                                      _outputs=2)
        ctx.set_output(op, "Out", values)
        ctx.set_output(op, "Indices", indices)


_UNIQUE_OUTPUTS = (("Out", "out0"), ("Indices", "out1"), ("Index", "out2"), ("Counts", "out3"))


@paddle_op("unique")
class Unique:
    """ONNX Unique: the sorted distinct values (of the flattened input, or of slices along
    one axis), first-occurrence indices, inverse indices and counts."""

    @classmethod
    def check(cls, op):
        axis = op.attr("axis", []) or []
        if len(axis) > 1:
            return f"unique over several axes {axis} is not supported"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        x_slot = "X" if op.input("X") else "in0"
        x, x_dtype = ctx.input(op, x_slot), ctx.dtype(op, x_slot)
        axis = op.attr("axis", []) or []
        kw = {"axis": int(axis[0])} if axis else {}
        outs = ctx.op.Unique(x, sorted=int(bool(op.attr("is_sorted", True))), _outputs=4, **kw)
        index_dtype = dtype_attr(op.attr("dtype", "int64"))
        for k, (legacy, pir) in enumerate(_UNIQUE_OUTPUTS):
            slot = legacy if op.output(legacy) else pir
            v = outs[k]
            if k > 0 and index_dtype != "int64":
                v = cast(ctx, v, index_dtype)
            # typed here: Paddle 3.3's PIR programs record float32 for some of these outputs
            v.type = ir.TensorType(onnx_dtype(x_dtype if k == 0 else index_dtype))
            ctx.set_output(op, slot, v)
