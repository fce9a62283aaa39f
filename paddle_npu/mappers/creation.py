"""Tensors made from shapes and scalars: *_like fills, range, linspace, one_hot, eye, empty,
random fills."""
import numpy as np

from ..errors import ConversionError
from ..exporter import onnx_dtype
from .common import cast, const_i64, dtype_attr, reshape, unsqueeze
from .registry import paddle_op
from .tensor import const_of, constant_of_shape, dims_of, fill_value, int_list_input, is_value


def _dtype_or(op, attr, fallback):
    """A dtype attribute, or `fallback` when unset (-1 / undefined)."""
    v = op.attr(attr, -1)
    if v is None or v == -1 or v == "undefined":
        return fallback
    return dtype_attr(v)


@paddle_op("fill_constant_batch_size_like")
class FillConstantBatchSizeLike:
    """shape with shape[output_dim_idx] taken from Input.shape[input_dim_idx]."""

    @classmethod
    def version_9(cls, ctx, op):
        dtype = np.dtype(dtype_attr(op.attr("dtype", 5)))
        shape = [int(d) for d in op.attr("shape")]
        i_in, i_out = op.attr("input_dim_idx", 0), op.attr("output_dim_idx", 0)
        x = ctx.input(op, "Input")
        parts = []
        if i_out > 0:
            parts.append(const_i64(ctx, shape[:i_out]))
        parts.append(dims_of(ctx, x, [i_in % ctx.rank(op, "Input")]))
        if i_out + 1 < len(shape):
            parts.append(const_i64(ctx, shape[i_out + 1:]))
        target = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)
        ctx.set_output(op, "Out", constant_of_shape(ctx, target, fill_value(op, dtype), dtype))


@paddle_op("fill_any_like")
class FillAnyLike:
    """full_like / zeros_like / ones_like: X's shape filled with `value`."""

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        dtype = np.dtype(ctx.out_dtype(op, "Out") or _dtype_or(op, "dtype", ctx.dtype(op, "X")))
        if ctx.has_input(op, "value"):   # PIR full_like whose value is computed
            value = ctx.input(op, "value")
            if value.const_value is None:
                v = reshape(ctx, cast(ctx, value, dtype.name), [])
                return ctx.set_output(op, "Out", ctx.op.Expand(v, ctx.op.Shape(x)))
            fill = np.asarray(value.const_value.numpy()).reshape(-1)[0]
        else:
            fill = op.attr("value", 0.0)
            if isinstance(fill, str):   # legacy Variable-valued attribute: the var's name
                v = reshape(ctx, cast(ctx, ctx.lookup(fill), dtype.name), [])
                return ctx.set_output(op, "Out", ctx.op.Expand(v, ctx.op.Shape(x)))
        ctx.set_output(op, "Out", constant_of_shape(ctx, ctx.op.Shape(x), fill, dtype))


def _scalar_input(ctx, op, slot, dtype_name):
    """A 1-element input as (python number or None, 0-d Value of dtype_name)."""
    c = const_of(ctx, op, slot)
    if c is not None:
        c = np.asarray(c).reshape(-1)[0]
        return c, ctx.const(np.asarray(c, dtype=dtype_name))
    v = ctx.input(op, slot)
    if ctx.dtype(op, slot) != dtype_name:
        v = cast(ctx, v, dtype_name)
    return None, reshape(ctx, v, [])


@paddle_op("range")
class Range:
    @classmethod
    def version_11(cls, ctx, op):
        dtype = ctx.out_dtype(op, "Out") or _dtype_or(op, "dtype", ctx.dtype(op, "Start"))
        start, s = _scalar_input(ctx, op, "Start", dtype)
        end, e = _scalar_input(ctx, op, "End", dtype)
        step, d = _scalar_input(ctx, op, "Step", dtype)
        if start is not None and end is not None and step is not None:
            return ctx.set_output(op, "Out", ctx.const(np.arange(start, end, step, dtype=dtype)))
        ctx.set_output(op, "Out", ctx.op.Range(s, e, d))


@paddle_op("linspace")
class Linspace:
    """start + i * step for i < num, step = (stop - start) / (num - 1), in float64 and cast to
    the output dtype (Paddle counts its second half back from stop: equal up to rounding)."""

    @classmethod
    def version_11(cls, ctx, op):
        dtype = ctx.out_dtype(op, "Out") or dtype_attr(op.attr("dtype", 5))
        start, s = _scalar_input(ctx, op, "Start", "float64")
        stop, e = _scalar_input(ctx, op, "Stop", "float64")
        num = const_of(ctx, op, "Num")
        if num is not None and start is not None and stop is not None:
            vals = np.linspace(float(start), float(stop), int(np.asarray(num).reshape(-1)[0]))
            return ctx.set_output(op, "Out", ctx.const(vals.astype(dtype)))
        _, n = _scalar_input(ctx, op, "Num", "int64")
        i = cast(ctx, ctx.op.Range(ctx.const(np.asarray(0, np.int64)), n,
                                   ctx.const(np.asarray(1, np.int64))), "float64")
        # step = (stop - start) / max(num - 1, 1); num == 1 gives [start]
        denom = ctx.op.Max(ctx.op.Sub(cast(ctx, n, "float64"), ctx.const(np.asarray(1.0))),
                           ctx.const(np.asarray(1.0)))
        step = ctx.op.Div(ctx.op.Sub(e, s), denom)
        out = ctx.op.Add(s, ctx.op.Mul(i, step))
        ctx.set_output(op, "Out", out if dtype == "float64" else cast(ctx, out, dtype))


@paddle_op("one_hot_v2")
class OneHot:
    """Equal(ids[..., None], arange(depth)): exact for any dtype, ids out of range give zeros
    (what allow_out_of_range asks; Paddle raises otherwise)."""

    @classmethod
    def version_11(cls, ctx, op):
        ids = ctx.input(op, "X")
        dtype = ctx.out_dtype(op, "Out") or dtype_attr(op.attr("dtype", 5))
        if ctx.has_input(op, "depth_tensor"):
            depth = const_of(ctx, op, "depth_tensor")
            if depth is None:
                _, depth_v = _scalar_input(ctx, op, "depth_tensor", "int64")
                classes = ctx.op.Range(ctx.const(np.asarray(0, np.int64)), depth_v,
                                       ctx.const(np.asarray(1, np.int64)))
            else:
                classes = const_i64(ctx, np.arange(int(np.asarray(depth).reshape(-1)[0])))
        else:
            depth = op.attr("depth")
            if depth is None or depth < 0:
                raise ConversionError("one_hot without a depth")
            classes = const_i64(ctx, np.arange(int(depth)))
        ids = cast(ctx, ids, "int64") if ctx.dtype(op, "X") != "int64" else ids
        hot = ctx.op.Equal(unsqueeze(ctx, ids, [ctx.rank(op, "X")]), classes)
        ctx.set_output(op, "Out", cast(ctx, hot, dtype))


@paddle_op("fill_zeros_like")
class FillZerosLike:
    """Zeros in X's shape and dtype (an op of Paddle 1.x programs)."""

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        dtype = np.dtype(ctx.out_dtype(op, "Out") or ctx.dtype(op, "X"))
        ctx.set_output(op, "Out", constant_of_shape(ctx, ctx.op.Shape(x), 0, dtype))


@paddle_op("eye")
class Eye:
    @classmethod
    def version_7(cls, ctx, op):
        rows = int(op.attr("num_rows"))
        cols = op.attr("num_columns", -1)
        cols = rows if cols is None or cols < 0 else int(cols)
        dtype = ctx.out_dtype(op, "Out") or dtype_attr(op.attr("dtype", 5))
        ctx.set_output(op, "Out", ctx.const(np.eye(rows, cols, dtype=dtype)))


@paddle_op("empty")
class Empty:
    """Paddle leaves the memory uninitialised; zeros are one valid content."""

    @classmethod
    def version_9(cls, ctx, op):
        dtype = np.dtype(ctx.out_dtype(op, "Out") or dtype_attr(op.attr("dtype", 5)))
        shape = int_list_input(ctx, op, "shape", "ShapeTensor", "ShapeTensorList")
        ctx.set_output(op, "Out", constant_of_shape(ctx, shape, 0, dtype))


@paddle_op("gaussian_random", "uniform_random")
class RandomFill:
    """Random tensors (RandomNormal / RandomUniform): onnxruntime draws other numbers than
    Paddle; shape, dtype and distribution agree. A computed shape goes through
    ConstantOfShape and the *Like op."""

    @classmethod
    def check(cls, op):
        if op.type == "uniform_random" and op.attr("diag_num", 0):
            return "uniform_random with diag_num (a fixed diagonal) is not supported"
        return None

    @classmethod
    def version_9(cls, ctx, op):
        dtype = ctx.out_dtype(op, "Out") or dtype_attr(op.attr("dtype", 5))
        shape = int_list_input(ctx, op, "shape", "ShapeTensor", "ShapeTensorList")
        seed = op.attr("seed", 0)
        kw = {"seed": float(seed)} if seed else {}
        if op.type == "gaussian_random":
            kw.update(mean=float(op.attr("mean", 0.0)), scale=float(op.attr("std", 1.0)))
            like, fixed = ctx.op.RandomNormalLike, ctx.op.RandomNormal
        else:
            kw.update(low=float(op.attr("min", -1.0)), high=float(op.attr("max", 1.0)))
            like, fixed = ctx.op.RandomUniformLike, ctx.op.RandomUniform
        to = int(onnx_dtype(dtype))
        if is_value(shape):
            out = like(constant_of_shape(ctx, shape, 0, np.dtype(dtype)), dtype=to, **kw)
        else:
            out = fixed(shape=[int(d) for d in shape], dtype=to, **kw)
        ctx.set_output(op, "Out", out)
