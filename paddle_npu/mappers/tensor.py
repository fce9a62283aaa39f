"""Shape manipulation, indexing, creation, casting."""
import numpy as np

from ..errors import ConversionError
from .common import (as_int64, cast, const_i64, dtype_attr, int64_vector, ints, reshape, slice_,
                     squeeze, unsqueeze)
from .registry import paddle_op


def _shape_input(ctx, op, attr="shape", tensor="ShapeTensor", single="Shape"):
    """A shape given as attribute, as one int tensor, or as a list of scalar tensors."""
    if ctx.has_input(op, tensor):
        return int64_vector(ctx, ctx.inputs(op, tensor))
    if ctx.has_input(op, single):
        return as_int64(ctx, ctx.input(op, single), ctx.dtype(op, single))
    return ints(op.attr(attr, []))


@paddle_op("reshape2", "reshape")
class Reshape:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", reshape(ctx, ctx.input(op, "X"), _shape_input(ctx, op)))


@paddle_op("transpose2", "transpose")
class Transpose:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Transpose(ctx.input(op, "X"), perm=ints(op.attr("axis"))))


@paddle_op("flatten_contiguous_range")
class FlattenRange:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        start = op.attr("start_axis", 1) % max(rank, 1)
        stop = op.attr("stop_axis", -1) % max(rank, 1)
        if rank == 0:
            return ctx.set_output(op, "Out", reshape(ctx, x, [1]))
        if stop == rank - 1 and start <= 1:
            if start == 1:
                return ctx.set_output(op, "Out", ctx.op.Flatten(x, axis=1))
            return ctx.set_output(op, "Out", reshape(ctx, x, [-1]))
        # Keep the dims outside [start, stop] (0 = copy), merge the rest (-1).
        shape = ctx.shape(op, "X")
        new = [0] * start + [-1] + [0] * (rank - stop - 1)
        if any(d < 0 for i, d in enumerate(shape) if i < start or i > stop) and start > 0 \
                and stop < rank - 1:
            pass  # 0 copies the input dim, so unknown outer dims are fine
        ctx.set_output(op, "Out", reshape(ctx, x, new))


@paddle_op("flatten2", "flatten")
class Flatten:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Flatten(ctx.input(op, "X"), axis=op.attr("axis", 1)))


@paddle_op("squeeze2", "squeeze")
class Squeeze:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        axes = [a % len(shape) for a in op.attr("axes", [])] if shape else op.attr("axes", [])
        if shape and axes:   # Paddle ignores axes whose dim is not 1; ONNX would fail
            axes = [a for a in axes if shape[a] == 1]
            if not axes:
                return ctx.set_output(op, "Out", ctx.op.Identity(x))
        ctx.set_output(op, "Out", squeeze(ctx, x, axes or None))


@paddle_op("unsqueeze2", "unsqueeze")
class Unsqueeze:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        if ctx.has_input(op, "AxesTensor") or ctx.has_input(op, "AxesTensorList"):
            raise ConversionError("unsqueeze with tensor axes is not supported")
        rank = ctx.rank(op, "X")
        axes, out_rank = [], rank
        for a in op.attr("axes", []):   # Paddle applies axes one by one
            out_rank += 1
            axes.append(a + out_rank if a < 0 else a)
        ctx.set_output(op, "Out", unsqueeze(ctx, x, sorted(axes)))


@paddle_op("shape", "shape64")
class Shape:
    @classmethod
    def version_7(cls, ctx, op):
        out = ctx.op.Shape(ctx.input(op, "Input"))
        dt = ctx.out_dtype(op, "Out")
        if dt and dt != "int64":
            out = cast(ctx, out, dt)
        ctx.set_output(op, "Out", out)


@paddle_op("slice")
class Slice:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "Input")
        axes = ints(op.attr("axes"))
        starts = cls._bound(ctx, op, "starts", "StartsTensor", "StartsTensorList")
        ends = cls._bound(ctx, op, "ends", "EndsTensor", "EndsTensorList")
        if ctx.opset < 10 and not (isinstance(starts, list) and isinstance(ends, list)):
            raise ConversionError("slice with tensor bounds needs opset 10")
        if isinstance(ends, list):   # Paddle allows any huge end; keep within int64
            ends = [min(e, 2 ** 62) for e in ends]
        y = slice_(ctx, x, starts, ends, axes)
        dec = ints(op.attr("decrease_axis", []))
        if dec:
            out_var = ctx.var(op.output("Out")[0])
            # Paddle 2.5+ gives a 0-d tensor when every axis is decreased.
            y = squeeze(ctx, y, dec)
            if out_var is not None and out_var.shape is not None and len(out_var.shape) == 1 \
                    and ctx.rank(op, "Input") == len(dec):
                y = reshape(ctx, y, [1])
        ctx.set_output(op, "Out", y)

    @staticmethod
    def _bound(ctx, op, attr, tensor, tensor_list):
        if ctx.has_input(op, tensor):
            return as_int64(ctx, ctx.input(op, tensor), ctx.dtype(op, tensor))
        if ctx.has_input(op, tensor_list):
            return int64_vector(ctx, ctx.inputs(op, tensor_list))
        return ints(op.attr(attr))


@paddle_op("concat")
class Concat:
    @classmethod
    def version_7(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        if ctx.has_input(op, "AxisTensor"):
            axis = ctx.constant_input(op, "AxisTensor")
            if axis is None:
                raise ConversionError("concat with a computed axis is not supported")
            axis = int(np.asarray(axis).reshape(-1)[0])
        else:
            axis = op.attr("axis", 0)
        if axis < 0:
            axis += ctx.rank(op, "X")
        ctx.set_output(op, "Out", ctx.op.Concat(*xs, axis=axis))


@paddle_op("cast")
class Cast:
    @classmethod
    def version_7(cls, ctx, op):
        to = dtype_attr(op.attr("out_dtype", op.attr("dtype")))
        ctx.set_output(op, "Out", cast(ctx, ctx.input(op, "X"), to))


@paddle_op("assign", "share_data", "memcpy", "memcpy_d2h", "memcpy_h2d")
class Assign:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.input(op, "X"))


@paddle_op("fill_constant", "full")
class FillConstant:
    @classmethod
    def version_9(cls, ctx, op):
        dtype = np.dtype(dtype_attr(op.attr("dtype", 5)))
        value = op.attr("value", 0.0)
        if op.attr("str_value"):
            value = float(op.attr("str_value"))
        if ctx.has_input(op, "ValueTensor"):
            raise ConversionError("fill_constant with a tensor value is not supported")
        shape = _shape_input(ctx, op, "shape", "ShapeTensorList", "ShapeTensor")
        if isinstance(shape, list):
            return ctx.set_output(op, "Out", ctx.const(np.full(shape, value, dtype=dtype)))
        from ..exporter import onnx_dtype
        import onnx_ir as ir
        fill = ir.tensor(np.asarray([value], dtype=dtype))
        ctx.set_output(op, "Out", ctx.op.ConstantOfShape(shape, value=fill))


@paddle_op("assign_value")
class AssignValue:
    @classmethod
    def version_7(cls, ctx, op):
        dtype = np.dtype(dtype_attr(op.attr("dtype", 5)))
        for key in ("fp32_values", "int32_values", "int64_values", "bool_values", "fp64_values",
                    "values"):
            vals = op.attr(key)
            if vals:
                break
        ctx.set_output(op, "Out", ctx.const(np.asarray(vals, dtype=dtype).reshape(op.attr("shape"))))


@paddle_op("stack")
class Stack:
    @classmethod
    def version_7(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        axis = op.attr("axis", 0)
        if axis < 0:
            axis += ctx.rank(op, "X") + 1
        ctx.set_output(op, "Y", ctx.op.Concat(*[unsqueeze(ctx, x, [axis]) for x in xs], axis=axis))


@paddle_op("split")
class Split:
    @classmethod
    def version_7(cls, ctx, op):
        from .common import split
        x = ctx.input(op, "X")
        axis = op.attr("axis", 0)
        if ctx.has_input(op, "AxisTensor"):
            axis = int(np.asarray(ctx.constant_input(op, "AxisTensor")).reshape(-1)[0])
        shape = ctx.shape(op, "X")
        axis = axis % len(shape)
        n_out = len(op.output("Out"))
        sections = ints(op.attr("sections", []))
        if not sections:
            if shape[axis] < 0:
                if ctx.opset < 18:
                    raise ConversionError("split of an unknown-size axis needs opset 18")
                outs = ctx.op.Split(x, axis=axis, num_outputs=n_out, _outputs=n_out)
                outs = outs if isinstance(outs, tuple) else (outs,)
                for i, o in enumerate(outs):
                    ctx.set_output(op, "Out", o, i)
                return
            sections = [shape[axis] // n_out] * n_out
        if -1 in sections:
            known = sum(s for s in sections if s >= 0)
            sections[sections.index(-1)] = shape[axis] - known
        for i, o in enumerate(split(ctx, x, sections, axis)):
            ctx.set_output(op, "Out", o, i)


@paddle_op("gather")
class Gather:
    @classmethod
    def version_7(cls, ctx, op):
        x, idx = ctx.input(op, "X"), ctx.input(op, "Index")
        axis = op.attr("axis", 0)
        if ctx.has_input(op, "Axis"):
            axis = int(np.asarray(ctx.constant_input(op, "Axis")).reshape(-1)[0])
        ctx.set_output(op, "Out", ctx.op.Gather(x, idx, axis=axis))


@paddle_op("lookup_table_v2", "embedding")
class Embedding:
    @classmethod
    def version_7(cls, ctx, op):
        w, ids = ctx.input(op, "W"), ctx.input(op, "Ids")
        out = ctx.op.Gather(w, ids, axis=0)
        pad = op.attr("padding_idx", -1)
        if pad is not None and pad >= 0:   # rows at padding_idx read as zeros
            rows = ctx.shape(op, "W")[0]
            mask = np.ones((rows, 1), dtype=np.dtype(ctx.dtype(op, "W")))
            mask[pad] = 0
            out = ctx.op.Mul(out, ctx.op.Gather(ctx.const(mask), ids, axis=0))
        ctx.set_output(op, "Out", out)


@paddle_op("expand_v2", "expand")
class Expand:
    @classmethod
    def version_8(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = _shape_input(ctx, op, "shape", "expand_shapes_tensor", "Shape")
        if isinstance(shape, list):
            in_shape = ctx.shape(op, "X")
            lead = len(shape) - len(in_shape)
            # Paddle's -1 keeps the input dim; ONNX Expand broadcasts 1 for the same effect.
            shape = [1 if s == -1 else s for s in shape]
            shape = const_i64(ctx, shape)
            del lead
        ctx.set_output(op, "Out", ctx.op.Expand(x, shape))
