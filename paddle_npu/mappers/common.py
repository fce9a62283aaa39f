"""Helpers mappers share: ONNX ops whose signature changed between opsets, dtypes, pads.

Each helper emits the right form for `ctx.opset`, so a mapper's `version_N` stays valid
for every opset from N up to its next version.
"""
import numpy as np

from ..errors import ConversionError
from ..exporter import onnx_dtype
from ..frontend.params import dtype_name


def ints(values):
    return [int(v) for v in values]


def const_i64(ctx, values):
    return ctx.const(np.asarray(values, dtype=np.int64))


def unsqueeze(ctx, x, axes):
    if ctx.opset >= 13:
        return ctx.op.Unsqueeze(x, const_i64(ctx, axes))
    return ctx.op.Unsqueeze(x, axes=ints(axes))


def squeeze(ctx, x, axes=None):
    if axes is None or len(axes) == 0:
        return ctx.op.Squeeze(x)
    if ctx.opset >= 13:
        return ctx.op.Squeeze(x, const_i64(ctx, axes))
    return ctx.op.Squeeze(x, axes=ints(axes))


def reduce(ctx, op_type, x, axes=None, keepdims=True):
    """ReduceX over `axes` (None: all). Axes became an input at 13 (ReduceSum) / 18 (others)."""
    keep = int(bool(keepdims))
    as_input = ctx.opset >= (13 if op_type == "ReduceSum" else 18)
    if axes is None:
        return getattr(ctx.op, op_type)(x, keepdims=keep)
    if as_input:
        return getattr(ctx.op, op_type)(x, const_i64(ctx, axes), keepdims=keep)
    return getattr(ctx.op, op_type)(x, axes=ints(axes), keepdims=keep)


def slice_(ctx, x, starts, ends, axes, steps=None):
    """Slice with constant (lists) or tensor (Values) bounds; before opset 10 only constants."""
    if ctx.opset < 10:
        if steps is not None and any(s != 1 for s in steps):
            raise ConversionError("Slice with steps needs opset 10")
        return ctx.op.Slice(x, starts=ints(starts), ends=ints(ends), axes=ints(axes))
    args = [_i64(ctx, starts), _i64(ctx, ends), _i64(ctx, axes)]
    if steps is not None:
        args.append(_i64(ctx, steps))
    return ctx.op.Slice(x, *args)


def _i64(ctx, v):
    return v if hasattr(v, "producer") else const_i64(ctx, v)


def var_dtype(op, slot, i=0):
    """The dtype Paddle recorded for an op's input, from the op alone (for required_opset)."""
    names = op.input(slot)
    var = op.block.find_var(names[i]) if len(names) > i and op.block is not None else None
    return None if var is None else var.dtype


def clip_opset(dtype_name):
    """The opset where onnxruntime runs Clip on a dtype: float32 everywhere, float16 from 11
    (bounds as inputs), float64 and integers from 12."""
    if dtype_name in (None, "float32"):
        return 7
    return 11 if dtype_name == "float16" else 12


def clip(ctx, x, lo=None, hi=None, dtype="float32"):
    if ctx.opset < clip_opset(dtype):
        raise ConversionError(f"Clip on {dtype} needs opset {clip_opset(dtype)}")
    if ctx.opset < 11:
        return ctx.op.Clip(x, min=None if lo is None else float(lo),
                           max=None if hi is None else float(hi))
    np_dtype = np.dtype(dtype)
    lo_v = None if lo is None else (lo if hasattr(lo, "producer") else ctx.const(np.asarray(lo, np_dtype)))
    hi_v = None if hi is None else (hi if hasattr(hi, "producer") else ctx.const(np.asarray(hi, np_dtype)))
    return ctx.op.Clip(x, lo_v, hi_v)


def split(ctx, x, sizes, axis):
    n = len(sizes)
    if ctx.opset >= 13:
        return _as_tuple(ctx.op.Split(x, const_i64(ctx, sizes), axis=axis, _outputs=n))
    return _as_tuple(ctx.op.Split(x, axis=axis, split=ints(sizes), _outputs=n))


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def cast(ctx, x, dtype_name):
    return ctx.op.Cast(x, to=int(onnx_dtype(dtype_name)))


def reshape(ctx, x, shape):
    return ctx.op.Reshape(x, shape if hasattr(shape, "producer") else const_i64(ctx, shape))


def pad(ctx, x, pads, mode="constant", value=0.0):
    """pads in ONNX order [x1_begin, x2_begin, ..., x1_end, x2_end, ...]."""
    if ctx.opset < 11:
        return ctx.op.Pad(x, pads=ints(pads), mode=mode, value=float(value))
    args = [x, pads if hasattr(pads, "producer") else const_i64(ctx, pads)]
    if mode == "constant":
        args.append(ctx.const(np.asarray(value, dtype=np.float32)))
    return ctx.op.Pad(*args, mode=mode)


def paddle_pads_2d(paddings):
    """Paddle's [top, bottom, left, right] or [h, w] -> ONNX [top, left, bottom, right]."""
    p = ints(paddings)
    if len(p) == 2:
        return [p[0], p[1], p[0], p[1]]
    if len(p) == 4:
        return [p[0], p[2], p[1], p[3]]
    raise ConversionError(f"cannot read paddings {paddings}")


def paddle_pads_nd(paddings, n):
    """Paddle paddings for n spatial dims ([p] * n or [b1, e1, b2, e2, ...]) -> ONNX order."""
    p = ints(paddings)
    if len(p) == n:
        return p + p
    if len(p) == 2 * n:
        return p[0::2] + p[1::2]
    raise ConversionError(f"cannot read paddings {paddings} for {n} spatial dims")


def conv_padding(op, n_spatial=2):
    """ONNX padding attributes of a Paddle conv/pool op (`padding_algorithm` aware)."""
    algo = op.attr("padding_algorithm", "EXPLICIT")
    if algo == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if algo == "VALID":
        return {"pads": [0] * (2 * n_spatial)}
    return {"pads": paddle_pads_nd(op.attr("paddings", [0] * n_spatial), n_spatial)}


def broadcast_y(ctx, op, y, x_rank, y_rank):
    """Paddle's elementwise `axis`: Y's dims line up with X's starting at `axis`.

    ONNX broadcasting aligns trailing dims, so Y gets trailing 1-dims when needed.
    """
    axis = op.attr("axis", -1)
    if axis is None or axis == -1 or y_rank >= x_rank:
        return y
    trailing = x_rank - axis - y_rank
    if trailing <= 0:
        return y
    const = y.const_value.numpy() if y.const_value is not None else None
    if const is not None:
        return ctx.const(const.reshape(const.shape + (1,) * trailing))
    return unsqueeze(ctx, y, list(range(y_rank, y_rank + trailing)))


def dtype_attr(value):
    """A Paddle dtype attribute -> numpy dtype name.

    Legacy programs store VarType codes (5 = float32), PIR ones dtype names.
    """
    if isinstance(value, str):
        return {"float": "float32", "double": "float64", "half": "float16"}.get(value, value)
    name = dtype_name(int(value))
    if name is None:
        raise ConversionError(f"unknown Paddle dtype code {value}")
    return name


def int64_vector(ctx, values):
    """A list of 1-element (or 0-d) int tensors -> one int64 vector (Paddle's *TensorList)."""
    parts = []
    for v in values:
        if v.const_value is not None:
            parts.append(const_i64(ctx, np.asarray(v.const_value.numpy()).reshape(-1)))
            continue
        v = ctx.op.Cast(v, to=int(onnx_dtype("int64")))
        parts.append(reshape(ctx, v, [1]))
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def as_int64(ctx, v, dtype_name):
    return v if dtype_name == "int64" else cast(ctx, v, "int64")


# ONNX ops onnxruntime (1.32; checked at opsets 7 to 17, PRelu and GridSample to 20) has no
# float64 kernel for
NO_FLOAT64_KERNEL = {"Acos", "Asin", "Atan", "Tan", "Cosh", "Sinh", "Softplus", "Selu", "Erf",
                     "LeakyRelu", "Elu", "HardSigmoid", "Softsign", "Conv", "GlobalMaxPool",
                     "GlobalAveragePool"}
# and those it has one for only from an opset on
FLOAT64_KERNEL_SINCE = {"MaxPool": 8, "PRelu": 16, "GridSample": 20}


def has_float64_kernel(ctx, onnx_op):
    """Whether onnxruntime runs `onnx_op` in float64 at the opset being written."""
    return onnx_op not in NO_FLOAT64_KERNEL and ctx.opset >= FLOAT64_KERNEL_SINCE.get(onnx_op, 0)


def in_float32(ctx, dtype_name, fn, *values, onnx_op=None):
    """fn(*values), computed in float32 and cast back when the dtype is float64: onnxruntime
    runs these ops in float32 only (about 1e-7 relative is lost). With `onnx_op`, only where
    onnxruntime has no float64 kernel for that op at this opset."""
    if dtype_name != "float64" or (onnx_op is not None and has_float64_kernel(ctx, onnx_op)):
        return fn(*values)
    return cast(ctx, fn(*[cast(ctx, v, "float32") for v in values]), "float64")


def computed_dtype(ctx, op, slot="X"):
    """The dtype an input is computed in under in_float32."""
    dt = ctx.dtype(op, slot)
    return "float32" if dt == "float64" else dt
