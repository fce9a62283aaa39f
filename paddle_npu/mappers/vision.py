"""Vision layers: interpolation, padding, transposed convolution, index/adaptive/3-D pooling,
pixel shuffles, instance/group normalisation, affine_channel."""
import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from ..shape_inference import pooled_size
from ..shapes import FLAG_HINT, inputs_static
from .common import (cast, computed_dtype, const_i64, in_float32, ints, int64_vector,
                     paddle_pads_nd, reduce, reshape, slice_, unsqueeze)
from .registry import paddle_op
from .tensor import first_input, first_output

INT_MAX = 2 ** 62   # an 'until the end' bound for Slice


# --- small shared helpers ---------------------------------------------------------------------

def _first_slot(op, slots, inputs=True):
    """The first of several slot names the op has (PIR ops without a legacy twin keep theirs)."""
    table = op.inputs if inputs else op.outputs
    for s in slots:
        if table.get(s):
            return s
    return slots[0]


def _var_shape(op, slot, i=0, inputs=True):
    """Static shape of an op's input/output var from the Program (None when unrecorded)."""
    names = op.input(slot) if inputs else op.output(slot)
    if len(names) <= i or op.block is None:
        return None
    var = op.block.find_var(names[i])
    return None if var is None or var.shape is None else list(var.shape)


def _is_used(op, slot):
    """Whether another op (or the program's fetch list) reads an output of `op`."""
    names = set(op.output(slot))
    if not names or op.block is None or op.block.program is None:
        return False
    program = op.block.program
    if names & set(program.outputs):
        return True
    for other in program.all_ops():
        if other is op:
            continue
        for vs in other.inputs.values():
            if names & set(vs):
                return True
    return False


def _channels_first(fmt):
    return fmt in (None, "NCHW", "NCDHW", "NCW", "AnyLayout")


def _to_channels_first(ctx, x, rank):
    return ctx.op.Transpose(x, perm=[0, rank - 1] + list(range(1, rank - 1)))


def _to_channels_last(ctx, x, rank):
    return ctx.op.Transpose(x, perm=[0] + list(range(2, rank)) + [1])


def _shape_slice(ctx, x, start, end):
    """Shape(x)[start:end] as an int64 vector."""
    return slice_(ctx, ctx.op.Shape(x), [start], [end], [0])


# --- interpolation ----------------------------------------------------------------------------

_INTERP = {
    "bilinear_interp_v2": "bilinear", "nearest_interp_v2": "nearest", "linear_interp_v2": "linear",
    "bicubic_interp_v2": "bicubic", "trilinear_interp_v2": "trilinear",
    "bilinear_interp": "bilinear", "nearest_interp": "nearest",
}
_METHOD_MODE = {"nearest": "nearest", "bilinear": "linear", "linear": "linear",
                "trilinear": "linear", "bicubic": "cubic"}


# PIR linear/trilinear interp keep some operand names (no legacy slot in the table).
_SIZE_TENSOR, _SCALE_TENSOR = ("SizeTensor", "size_tensor"), ("Scale", "scale_tensor")


def _sizes_in(op):
    return _first_slot(op, _SIZE_TENSOR)


def _scale_in(op):
    return _first_slot(op, _SCALE_TENSOR)


def _interp_method(op):
    return op.attr("interp_method") or _INTERP[op.type]


def _n_spatial(op):
    shape = _var_shape(op, "X")
    if shape is not None:
        return len(shape) - 2
    return {"linear": 1, "trilinear": 3}.get(_interp_method(op), 2)


def _scale_attr(op, n):
    """The `scale` attribute as Paddle's kernel reads it: n factors, or None when unused."""
    s = op.attr("scale")
    if not op.type.endswith("_v2"):            # v1: one float, used when > 0
        return [float(s)] * n if isinstance(s, (int, float)) and s > 0 else None
    s = list(s or [])
    if n == 1:
        s = s[:1]
    elif len(s) < 2:                           # 2-D/3-D kernels ignore a 1-element list
        return None
    s = s[:n] if len(s) >= n else None
    if not s or any(v <= 0 for v in s):
        return None
    return [float(v) for v in s]


def _out_attr(op, n):
    return [int(op.attr(k, -1)) for k in ("out_d", "out_h", "out_w")[3 - n:]]


def _resize_modes(op):
    """(ONNX mode, coordinate_transformation_mode, nearest_mode) equal to Paddle's kernel."""
    method = _interp_method(op)
    mode = _METHOD_MODE[method]
    align_corners = bool(op.attr("align_corners", False))
    default_align_mode = 1 if op.type == "bilinear_interp" else 0
    align_mode = int(op.attr("align_mode", default_align_mode))
    if mode == "nearest":
        # floor(ratio * i), or with align_corners int(ratio * i + 0.5)
        return (mode, "align_corners", "round_prefer_ceil") if align_corners else \
            (mode, "asymmetric", "floor")
    if align_corners:
        return mode, "align_corners", None
    if mode == "linear" and align_mode == 1:
        return mode, "asymmetric", None
    # (i + 0.5) * ratio - 0.5, source 0 for a length-1 output (Paddle's ratio is then 0)
    return mode, "pytorch_half_pixel", None


def _legacy_upsample_scales(op):
    """Constant scales for Upsample / Resize-10 when they give exactly Paddle's result."""
    mode, coord, _ = _resize_modes(op)
    if mode == "cubic" or coord != "asymmetric" or op.input(_sizes_in(op)) or \
            op.input("OutSize") or op.input(_scale_in(op)) or \
            not _channels_first(op.attr("data_layout")):
        return None
    n = _n_spatial(op)
    scales = _scale_attr(op, n)
    if scales is None:
        shape = _var_shape(op, "X")
        outs = _out_attr(op, n)
        if shape is None or any(d <= 0 for d in shape[2:]) or \
                any(o <= 0 or o % d for o, d in zip(outs, shape[2:])):
            return None                        # only whole-number ratios are exact
        scales = [float(o // d) for o, d in zip(outs, shape[2:])]
    if mode == "nearest" and any(s < 1 for s in scales):
        return None                            # old nearest rounds up when shrinking
    return scales


@paddle_op(*_INTERP)
class Interpolate:
    """Paddle's interpolation kernels as ONNX Resize.

    Output size: SizeTensor, else OutSize, else the Scale input / `scale` attribute (the
    output is int(in * scale) and the source coordinate uses 1/scale, which is exactly what
    Resize does when given scales), else out_d/out_h/out_w (coordinates use in/out). Paddle 3
    runs the v1 ops (one float `scale`, align_mode default 1) with the same kernel.
    """

    @classmethod
    def check(cls, op):
        method = _interp_method(op)
        if method not in _METHOD_MODE:
            return f"interp_method={method!r} is not supported"
        layout = op.attr("data_layout", "NCHW")
        if layout not in ("NCHW", "NCDHW", "NCW", "NHWC", "NDHWC", "NWC", "AnyLayout"):
            return f"data_layout={layout!r} is not supported"
        n = _n_spatial(op)
        if op.input("OutSize") and not op.input(_sizes_in(op)) and (
                op.input(_scale_in(op)) or _scale_attr(op, n)):
            return ("OutSize together with a scale (Paddle then uses the scale for coordinates "
                    "but OutSize for the size) is not supported")
        return None

    @classmethod
    def required_opset(cls, op):
        return 7 if _legacy_upsample_scales(op) is not None else 11

    @classmethod
    def version_7(cls, ctx, op):
        scales = _legacy_upsample_scales(op)
        if scales is None:
            raise ConversionError(f"{op.type} with these attributes needs opset 11")
        mode, _, _ = _resize_modes(op)
        x = ctx.input(op, "X")
        full = [1.0, 1.0] + scales
        if ctx.opset < 9:
            y = ctx.op.Upsample(x, mode=mode, scales=full)
        elif ctx.opset < 10:
            y = ctx.op.Upsample(x, ctx.const(np.asarray(full, np.float32)), mode=mode)
        else:
            y = ctx.op.Resize(x, ctx.const(np.asarray(full, np.float32)), mode=mode)
        ctx.set_output(op, "Out", y)

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        n = rank - 2
        last = not _channels_first(op.attr("data_layout", "NCHW"))
        if last:
            x = _to_channels_first(ctx, x, rank)
        mode, coord, nearest = _resize_modes(op)
        taps = _align_corners_taps(ctx, op) if coord == "align_corners" and mode == "linear" \
            and n == 2 else None
        if taps is not None:
            y = _bilinear_as_paddle(ctx, x, *taps)
            if last:
                y = _to_channels_last(ctx, y, rank)
            return ctx.set_output(op, "Out", y)
        scales, sizes = cls._target(ctx, op, x, n)
        # roi (and scales next to sizes) may be left out from opset 13, before that empty
        empty = ctx.const(np.zeros([0], np.float32)) if ctx.opset < 13 else None
        args = [x, empty, empty, sizes] if sizes is not None else [x, empty, scales]
        attrs = {"mode": mode, "coordinate_transformation_mode": coord}
        if nearest:
            attrs["nearest_mode"] = nearest
        if mode == "cubic":
            attrs.update(cubic_coeff_a=-0.75, exclude_outside=0)
        y = ctx.op.Resize(*args, **attrs)
        if last:
            y = _to_channels_last(ctx, y, rank)
        ctx.set_output(op, "Out", y)

    @classmethod
    def _target(cls, ctx, op, x, n):
        """(scales, None) or (None, sizes) for Resize, in Paddle's order of precedence."""
        def with_nc(spatial):
            return ctx.op.Concat(_shape_slice(ctx, x, 0, 2), spatial, axis=0)

        if ctx.has_input(op, _sizes_in(op)):
            return None, with_nc(int64_vector(ctx, ctx.inputs(op, _sizes_in(op))))
        scale = _scale_attr(op, n)
        if ctx.has_input(op, "OutSize"):
            return None, with_nc(cast(ctx, ctx.input(op, "OutSize"), "int64"))
        if ctx.has_input(op, _scale_in(op)):
            s = cast(ctx, ctx.input(op, _scale_in(op)), "float32")
            s = ctx.op.Expand(reshape(ctx, s, [-1]), const_i64(ctx, [n]))  # 1 value -> n
            return ctx.op.Concat(ctx.const(np.ones(2, np.float32)), s, axis=0), None
        if scale is not None:
            return ctx.const(np.asarray([1.0, 1.0] + scale, np.float32)), None
        outs = _out_attr(op, n)
        if any(o <= 0 for o in outs):
            raise ConversionError(f"{op.type} has no output size (out sizes {outs}, no scale)")
        return None, with_nc(const_i64(ctx, outs))


def _align_corners_taps(ctx, op):
    """Per spatial axis (source rows, next rows, their weights) of a bilinear align_corners
    resize, in Paddle's float32 arithmetic (ratio = float(in - 1) / (out - 1), source =
    ratio * i), when the sizes are known at conversion time; else None. Resize computes
    the source as i * (in - 1) / (out - 1), which differs in the last bits, and a sensitive
    head (a threshold map, a detector's box regression) turns that into visible differences."""
    if ctx.dtype(op, "X") != "float32" or ctx.has_input(op, _sizes_in(op)) or \
            ctx.has_input(op, "OutSize") or ctx.has_input(op, _scale_in(op)):
        return None
    shape = ctx.static_shape(op, "X")
    if shape is None or len(shape) != 4:
        return None
    ins = shape[2:] if _channels_first(op.attr("data_layout", "NCHW")) else shape[1:3]
    scale = _scale_attr(op, 2)
    outs = ([int(np.float32(s) * np.float32(i)) for s, i in zip(scale, ins)] if scale
            else _out_attr(op, 2))
    if any(d <= 0 for d in list(ins) + outs):
        return None
    taps = []
    for size, out in zip(ins, outs):
        ratio = np.float32(size - 1) / np.float32(out - 1) if out > 1 else np.float32(0)
        src = ratio * np.arange(out, dtype=np.float32)
        lo = np.maximum(src.astype(np.int64), 0)
        hi = np.minimum(lo + 1, size - 1)
        w_hi = (src - lo.astype(np.float32)).astype(np.float32)
        taps.append((lo, hi, w_hi, np.float32(1) - w_hi))
    return taps


def _bilinear_as_paddle(ctx, x, rows, cols):
    """x[lo_h, lo_w] * wl_h * wl_w + x[hi_h, lo_w] * wh_h * wl_w + x[lo_h, hi_w] * wl_h * wh_w
    + x[hi_h, hi_w] * wh_h * wh_w, summed in this order as Paddle's CPU kernel does."""
    (lo_h, hi_h, wh_h, wl_h), (lo_w, hi_w, wh_w, wl_w) = rows, cols
    by_row = {k: ctx.op.Gather(x, ctx.const(i), axis=2) for k, i in (("lo", lo_h), ("hi", hi_h))}
    terms = []
    for w_col, col in ((wl_w, lo_w), (wh_w, hi_w)):
        for w_row, row in ((wl_h, "lo"), (wh_h, "hi")):
            picked = ctx.op.Gather(by_row[row], ctx.const(col), axis=3)
            terms.append(ctx.op.Mul(ctx.op.Mul(picked, ctx.const(w_row.reshape(-1, 1))),
                                    ctx.const(w_col)))
    y = terms[0]
    for t in terms[1:]:
        y = ctx.op.Add(y, t)
    return y


# --- padding ----------------------------------------------------------------------------------

def _pad_value(ctx, dtype_name, value):
    return ctx.const(np.asarray(value, np.dtype(dtype_name or "float32")))


def _onnx_pad(ctx, x, pads, mode, value, dtype_name):
    """ONNX Pad with the constant of the input's dtype; pads: list or int64 Value."""
    if ctx.opset < 11:
        return ctx.op.Pad(x, pads=ints(pads), mode=mode, value=float(value))
    p = pads if hasattr(pads, "producer") else const_i64(ctx, pads)
    if mode == "constant":
        return ctx.op.Pad(x, p, _pad_value(ctx, dtype_name, value), mode=mode)
    return ctx.op.Pad(x, p, mode=mode)


def _circular(ctx, x, axis, before, after, size):
    """Wrap-around padding of one axis as a Gather of (i - before) mod size."""
    if before == 0 and after == 0:
        return x
    if size is not None and size > 0:
        idx = (np.arange(-before, size + after) % size).astype(np.int64)
        return ctx.op.Gather(x, ctx.const(idx), axis=axis)
    dim = _shape_slice(ctx, x, axis, axis + 1)
    stop = ctx.op.Add(dim, const_i64(ctx, [after]))
    idx = ctx.op.Range(ctx.const(np.asarray(-before, np.int64)), _scalar(ctx, stop),
                       ctx.const(np.asarray(1, np.int64)))
    idx = ctx.op.Mod(idx, _scalar(ctx, dim), fmod=0)     # Python-style: never negative
    return ctx.op.Gather(x, idx, axis=axis)


def _scalar(ctx, v):
    return reshape(ctx, v, [])


_PAD3D_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                "circular": "circular"}


@paddle_op("pad3d")
class Pad3d:
    """paddings = [left, right, top, bottom, front, back] (W, H, D pairs)."""

    @classmethod
    def check(cls, op):
        mode = op.attr("mode", "constant")
        if mode not in _PAD3D_MODES:
            return f"mode={mode!r} is not supported"
        if op.attr("data_format", "NCDHW") not in ("NCDHW", "NDHWC"):
            return f"data_format={op.attr('data_format')!r} is not supported"
        if op.input("Paddings") and mode == "circular":
            return "circular padding with paddings given as a tensor is not supported"
        return None

    @classmethod
    def required_opset(cls, op):
        if op.input("Paddings"):
            return 11
        if op.attr("mode", "constant") == "circular":
            shape = _var_shape(op, "X")
            if shape is None or any(d <= 0 for d in _spatial_dims(shape, op)):
                return 11
        return 7

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        mode = _PAD3D_MODES[op.attr("mode", "constant")]
        last = op.attr("data_format", "NCDHW") == "NDHWC"
        axes = [1, 2, 3] if last else [2, 3, 4]            # D, H, W
        dtype = ctx.dtype(op, "X")
        value = op.attr("value", 0.0)
        if ctx.has_input(op, "Paddings"):
            p = cast(ctx, reshape(ctx, ctx.input(op, "Paddings"), [-1]), "int64")
            begin = ctx.op.Gather(p, const_i64(ctx, [4, 2, 0]), axis=0)
            end = ctx.op.Gather(p, const_i64(ctx, [5, 3, 1]), axis=0)
            zeros = const_i64(ctx, [0, 0])
            parts = [zeros, begin, zeros, end] if not last else \
                [const_i64(ctx, [0]), begin, const_i64(ctx, [0, 0]), end, const_i64(ctx, [0])]
            pads = ctx.op.Concat(*parts, axis=0)
            return ctx.set_output(op, "Out", _onnx_pad(ctx, x, pads, mode, value, dtype))
        p = ints(op.attr("paddings", [0] * 6))
        begins = {axes[0]: p[4], axes[1]: p[2], axes[2]: p[0]}
        ends = {axes[0]: p[5], axes[1]: p[3], axes[2]: p[1]}
        if mode == "circular":
            shape = ctx.shape(op, "X") or [-1] * 5
            for a in axes:
                x = _circular(ctx, x, a, begins[a], ends[a], shape[a] if shape[a] > 0 else None)
            return ctx.set_output(op, "Out", x)
        pads = [begins.get(a, 0) for a in range(5)] + [ends.get(a, 0) for a in range(5)]
        ctx.set_output(op, "Out", _onnx_pad(ctx, x, pads, mode, value, dtype))


def _spatial_dims(shape, op):
    return shape[1:4] if op.attr("data_format", "NCDHW") == "NDHWC" else shape[2:5]


@paddle_op("pad")
class Pad:
    """The old constant `pad`: paddings = [begin0, end0, begin1, end1, ...] over every dim."""

    @classmethod
    def version_7(cls, ctx, op):
        p = ints(op.attr("paddings", []))
        pads = p[0::2] + p[1::2]
        y = _onnx_pad(ctx, ctx.input(op, "X"), pads, "constant", op.attr("pad_value", 0.0),
                      ctx.dtype(op, "X"))
        ctx.set_output(op, "Out", y)


# --- transposed convolution -------------------------------------------------------------------

def _conv_t_geometry(op):
    """(pads in ONNX order, dilations, output_padding, strides, sizes to crop the output to
    or None) of a conv*_transpose op, or the reason it can't be converted."""
    n = 3 if op.type == "conv3d_transpose" else 2
    strides = ints(op.attr("strides", [1] * n))
    dilations = ints(op.attr("dilations", [1] * n))
    wshape = _var_shape(op, "Filter")
    xshape = _var_shape(op, "Input")
    in_sp = xshape[2:] if xshape and len(xshape) == n + 2 else [-1] * n
    if wshape is None or len(wshape) != n + 2 or any(k <= 0 for k in wshape[2:]):
        return "the filter shape is unknown"
    ksize = wshape[2:]
    algo = op.attr("padding_algorithm", "EXPLICIT")
    if algo == "VALID":
        pads = [0] * (2 * n)
    elif algo == "SAME":
        # Paddle pads as a forward conv of the input size would (and drops dilation); with
        # stride 1 that is k - 1 whatever the size
        dilations = [1] * n
        if any(d <= 0 and s != 1 for d, s in zip(in_sp, strides)):
            return "padding_algorithm='SAME' with stride > 1 needs static input sizes"
        pads = _same_pads([d if d > 0 else 1 for d in in_sp], ksize, strides)
    else:
        pads = paddle_pads_nd(op.attr("paddings", [0] * n), n)
    out_pad = ints(op.attr("output_padding", []) or [0] * n)
    out_size = ints(op.attr("output_size", []) or [])
    if out_size and any(d <= 0 for d in in_sp):
        # sizes known at run time: the output from the begin pad on, stride - 1 past the end
        # (Paddle takes output_size below natural size + stride), cropped to output_size
        return pads[:n] + [0] * n, dilations, [s - 1 for s in strides], strides, out_size
    if out_size:
        out_pad = []
        for i in range(n):
            natural = (in_sp[i] - 1) * strides[i] - pads[i] - pads[n + i] + \
                dilations[i] * (ksize[i] - 1) + 1
            extra = out_size[i] - natural
            if extra < 0:
                return f"output_size {out_size} does not fit the input size {in_sp}"
            out_pad.append(extra)
    return pads, dilations, out_pad, strides, None


@paddle_op("conv2d_transpose", "depthwise_conv2d_transpose", "conv3d_transpose")
class ConvTranspose:
    @classmethod
    def check(cls, op):
        fmt = op.attr("data_format", "NCHW")
        if not _channels_first(fmt):
            return f"data_format={fmt!r} is not supported (export the model channels-first)"
        if op.input("output_size") or op.input("OutputSize"):
            return "output_size given as a tensor is not supported"
        geo = _conv_t_geometry(op)
        return geo if isinstance(geo, str) else None

    @classmethod
    def version_7(cls, ctx, op):
        pads, dilations, out_pad, strides, crop = _conv_t_geometry(op)
        x, w = ctx.input(op, "Input"), ctx.input(op, "Filter")
        y = ctx.op.ConvTranspose(x, w, strides=strides, dilations=dilations, pads=pads,
                                 output_padding=out_pad if any(out_pad) else None,
                                 group=int(op.attr("groups", 1) or 1))
        if crop:
            y = slice_(ctx, y, [0] * len(crop), crop, list(range(2, 2 + len(crop))))
        if ctx.has_input(op, "Bias"):
            n = len(strides)
            b = ctx.input(op, "Bias")
            const = b.const_value.numpy() if b.const_value is not None else None
            b = ctx.const(const.reshape((-1,) + (1,) * n)) if const is not None else \
                unsqueeze(ctx, b, list(range(1, 1 + n)))
            y = ctx.op.Add(y, b)
        ctx.set_output(op, "Output", y)


# --- pooling ----------------------------------------------------------------------------------

def _adaptive_bins(size, out):
    """Paddle's adaptive bins: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_pool(ctx, x, spatial, out_sizes, kind):
    """Adaptive pooling of static sizes: one Slice + reduce per bin, axis by axis.

    A bin is a box (a product of per-axis ranges), and max or mean over a box is the max or
    mean over one axis of those over the others: pooling axis by axis equals Paddle's.
    """
    reducer = "ReduceMax" if kind == "max" else "ReduceMean"
    for i, (size, out) in enumerate(zip(spatial, out_sizes)):
        axis = 2 + i
        if size == out:
            continue
        if size % out == 0:
            continue      # handled together by one pooling node below
        parts = [reduce(ctx, reducer, slice_(ctx, x, [b], [e], [axis]), [axis])
                 for b, e in _adaptive_bins(size, out)]
        x = ctx.op.Concat(*parts, axis=axis)
        spatial = list(spatial)
        spatial[i] = out
    # the evenly divisible axes: one pooling node
    kernel = [s // o if s % o == 0 else 1 for s, o in zip(spatial, out_sizes)]
    if any(k != 1 for k in kernel):
        pool = ctx.op.MaxPool if kind == "max" else ctx.op.AveragePool
        x = pool(x, kernel_shape=kernel, strides=kernel, pads=[0] * (2 * len(kernel)))
    return x


def _pool_attrs(op, n, spatial):
    """MaxPool/AveragePool attributes of a non-adaptive Paddle pool."""
    ksize = ints(_pool_ksize(op))
    if op.attr("global_pooling", False):
        return {"kernel_shape": spatial, "strides": [1] * n, "pads": [0] * (2 * n)}
    attrs = {"kernel_shape": ksize, "strides": ints(op.attr("strides", [1] * n))}
    algo = op.attr("padding_algorithm", "EXPLICIT")
    if algo == "SAME":
        attrs["auto_pad"] = "SAME_UPPER"
    elif algo == "VALID":
        attrs["pads"] = [0] * (2 * n)
    else:
        attrs["pads"] = paddle_pads_nd(op.attr("paddings", [0] * n), n)
    if op.attr("ceil_mode", False):
        attrs["ceil_mode"] = 1
    return attrs


def _same_pads(spatial, ksize, strides):
    """Paddle's SAME padding (the extra pixel at the end), ONNX order."""
    begin, end = [], []
    for d, k, s in zip(spatial, ksize, strides):
        total = max(((d + s - 1) // s - 1) * s + k - d, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def avg_pool_problem(op, spatial):
    """Why an average pool's divisor can't be reproduced, or None (see avg_pool)."""
    if op.attr("pooling_type", "avg") != "avg" or op.attr("exclusive", True) or \
            op.attr("adaptive", False) or op.attr("global_pooling", False):
        return None
    if op.attr("padding_algorithm", "EXPLICIT") == "SAME" and (
            spatial is None or any(d <= 0 for d in spatial)):
        return "SAME average pooling with exclusive=False needs static input sizes"
    return None


def paddle_pooled_size(size, k, s, p0, p1, ceil):
    """Paddle's pool output size (phi's PoolOutputSize): a C++ integer division, ceil_mode
    rounding up by adding s - 1 (it keeps a last window that starts in the end padding or
    past the input, which onnxruntime drops)."""
    room = size - k + p0 + p1 + (s - 1 if ceil else 0)
    return (room // s if room >= 0 else -(-room // s)) + 1


def max_pool(ctx, x, attrs, spatial, dtype_name):
    """MaxPool with Paddle's output size: where ceil_mode's last window would start in the
    end padding or past the input (static sizes), onnxruntime drops it and Paddle gives its
    initial value, the dtype's lowest; the input is padded at the end with that value far
    enough for onnxruntime to keep it."""
    n = len(attrs["kernel_shape"])
    if not attrs.get("ceil_mode") or "pads" not in attrs:
        return ctx.op.MaxPool(x, **attrs)
    pads, extra = attrs["pads"], []
    for size, k, s, p0, p1 in zip(spatial, attrs["kernel_shape"], attrs["strides"],
                                  pads[:n], pads[n:]):
        want = paddle_pooled_size(size, k, s, p0, p1, 1) if size > 0 else None
        short = want is not None and p1 < k and want > pooled_size(size, k, s, 1, p0, p1, 1)
        # (then the padded length fits `want` windows exactly: ceil_mode drops none)
        extra.append((want - 1) * s + k - (size + p0 + p1) if short else 0)
    if any(extra):
        lowest = np.finfo(np.dtype(dtype_name or "float32")).min
        x = _onnx_pad(ctx, x, [0] * (n + 2) + [0, 0] + extra, "constant", lowest, dtype_name)
    return ctx.op.MaxPool(x, **attrs)


def avg_pool(ctx, x, attrs, exclusive, spatial, dtype_name):
    """AveragePool with Paddle's divisor and output size (see _avg_pool_empty_windows)."""
    if attrs.get("ceil_mode") and "pads" in attrs and spatial and all(d > 0 for d in spatial):
        y = _avg_pool_empty_windows(ctx, x, attrs, exclusive, spatial, dtype_name)
        if y is not None:
            return y
    return _avg_pool(ctx, x, attrs, exclusive, spatial, dtype_name)


def _avg_pool_empty_windows(ctx, x, attrs, exclusive, spatial, dtype_name):
    """ceil_mode's last window where it starts past the input: onnxruntime drops it, Paddle
    keeps it. None when onnxruntime keeps Paddle's windows.

    Paddle's exclusive=False is exclusive pooling of the input zero-padded by pad_begin on
    each side (its count stops at in + pad_begin). The windows starting in what is counted
    are pooled without ceil_mode, the end pad (uncounted) just long enough for them; the
    others hold nothing, and Paddle divides their sum 0 by their count, that extent less
    their start (0 or below): NaN where it is 0, else 0, appended."""
    n = len(attrs["kernel_shape"])
    pads = attrs["pads"]
    if all(pooled_size(d, k, s, 1, p0, p1, 1) == paddle_pooled_size(d, k, s, p0, p1, 1)
           for d, k, s, p0, p1 in zip(spatial, attrs["kernel_shape"], attrs["strides"],
                                      pads[:n], pads[n:])):
        return None
    begin = [0 if exclusive else p for p in pads[:n]]       # pads left to the pooling
    sizes = [d if exclusive else d + 2 * p for d, p in zip(spatial, pads[:n])]
    held, end, fills = [], [], []
    for i, (size, k, s) in enumerate(zip(sizes, attrs["kernel_shape"], attrs["strides"])):
        p0 = pads[:n][i]
        want = paddle_pooled_size(spatial[i], k, s, p0, pads[n + i], 1)
        q0 = p0 if exclusive else 0
        inside = min(want, -(-(size + q0) // s))            # windows starting in `size`
        held.append(inside)
        end.append(max(0, (inside - 1) * s + k - size - q0))
        fills.append([size - (j * s - q0) == 0 for j in range(inside, want)])
    if not exclusive:
        x = _onnx_pad(ctx, x, [0, 0] + pads[:n] + [0, 0] + pads[:n], "constant", 0.0,
                      dtype_name)
    y = ctx.op.AveragePool(x, count_include_pad=0, kernel_shape=attrs["kernel_shape"],
                           strides=attrs["strides"], pads=[p if exclusive else 0
                                                           for p in pads[:n]] + end)
    # the axes filling with NaN last: a corner empty along two axes is NaN if either count is 0
    for i in sorted(range(n), key=lambda i: any(fills[i])):
        for nan in fills[i]:
            after = [0] * (n + 2)
            after[2 + i] = 1
            y = _onnx_pad(ctx, y, [0] * (n + 2) + after, "constant",
                          float("nan") if nan else 0.0, dtype_name)
    return y


def _avg_pool(ctx, x, attrs, exclusive, spatial, dtype_name):
    """AveragePool with Paddle's divisor.

    With exclusive=False Paddle counts a window's padding only up to in + pad_begin, so an
    end pad wider than the begin pad (SAME, or explicit [0, 1]) is never counted; ONNX's
    count_include_pad counts it. Then: zero-pad explicitly by the counted amounts and pool
    with the rest as uncounted padding. An end pad narrower than the begin pad is counted
    by both, but a last window of ceil_mode past it is counted by Paddle up to in +
    pad_begin, by ONNX only up to in + pad_end: there (static sizes) the input is zero-padded
    to in + pad_begin, and the windows past Paddle's count sliced off.
    """
    if exclusive:
        return ctx.op.AveragePool(x, count_include_pad=0, **attrs)
    n = len(attrs["kernel_shape"])
    if attrs.get("auto_pad") == "SAME_UPPER":
        pads = _same_pads(spatial, attrs["kernel_shape"], attrs["strides"])
    else:
        pads = attrs.get("pads", [0] * (2 * n))
    ceil = attrs.get("ceil_mode") and "auto_pad" not in attrs     # (SAME ignores it)
    sizes = [_ceil_counts_past_end_pad(size, k, s, p0, p1) if ceil else None
             for size, k, s, p0, p1 in zip(spatial, attrs["kernel_shape"], attrs["strides"],
                                           pads[:n], pads[n:])]
    if any(sizes):
        counted = [pads[i] if sizes[i] else min(pads[i], pads[n + i]) for i in range(n)]
        x = _onnx_pad(ctx, x, [0, 0] + pads[:n] + [0, 0] + counted, "constant", 0.0,
                      dtype_name)
        attrs = {k: v for k, v in attrs.items() if k != "auto_pad"}
        attrs["pads"] = [0] * n + [max(0, pads[n + i] - counted[i]) for i in range(n)]
        y = ctx.op.AveragePool(x, count_include_pad=0, **attrs)
        axes = [i for i in range(n) if sizes[i]]
        return slice_(ctx, y, [0] * len(axes), [sizes[i] for i in axes],
                      [2 + i for i in axes])
    if all(pads[n + i] <= pads[i] for i in range(n)):
        attrs = dict(attrs)
        if attrs.pop("auto_pad", None):
            attrs["pads"] = pads
        return ctx.op.AveragePool(x, count_include_pad=1, **attrs)
    counted = [min(pads[i], pads[n + i]) for i in range(n)]
    x = _onnx_pad(ctx, x, [0, 0] + pads[:n] + [0, 0] + counted, "constant", 0.0, dtype_name)
    attrs = {k: v for k, v in attrs.items() if k != "auto_pad"}
    attrs["pads"] = [0] * n + [pads[n + i] - counted[i] for i in range(n)]
    return ctx.op.AveragePool(x, count_include_pad=0, **attrs)


def _ceil_counts_past_end_pad(size, k, s, p0, p1):
    """Paddle's output size along an axis of static `size` where ceil_mode's last window
    reaches past the end pad (narrower than the begin pad) into what Paddle counts as
    padding and ONNX does not, else None (also where that window counts nothing: Paddle
    divides 0 by 0 there)."""
    if size <= 0 or p1 >= p0:
        return None
    out = paddle_pooled_size(size, k, s, p0, p1, 1)
    start = (out - 1) * s - p0
    return out if start + k > size + p1 and start < size + p0 else None


def _pool_ksize(op):
    k = op.attr("ksize")
    return k if k is not None else op.attr("kernel_size", [])


def _needs_sizes(op):
    """An adaptive pool to a grid other than 1x1: its bins depend on the input's size."""
    return op.attr("adaptive", False) and not op.attr("global_pooling", False) and \
        not all(k == 1 for k in ints(_pool_ksize(op)))


def _pool_problem(op, spatial_shape):
    """Why an adaptive pool can't be converted (sizes unknown), or None. With the model's
    input sizes all fixed (the program's, or --input-shape), conversion infers its sizes."""
    if not _needs_sizes(op):
        return None
    if spatial_shape is None or any(d <= 0 for d in spatial_shape):
        if op.block is not None and inputs_static(op.block.program):
            return None
        return unknown_pool_sizes(ints(_pool_ksize(op)), spatial_shape)
    return None


def unknown_pool_sizes(ksize, spatial):
    return (f"adaptive pooling to {ksize} needs static input sizes, got "
            f"{[-1 if d < 0 else d for d in spatial] if spatial else 'none'}: fix the model's "
            f"input sizes with {FLAG_HINT}")


def pool_spatial(ctx, op, slot, n):
    """The n spatial sizes of a pool's input (-1 unknown); inferred for an adaptive pool
    whose recorded sizes are open, an error when even that leaves them open."""
    shape = ctx.shape(op, slot) or [-1] * (n + 2)
    if _needs_sizes(op) and any(d < 0 for d in shape[2:]):
        shape = ctx.static_shape(op, slot) or shape
        if any(d < 0 for d in shape[2:]):       # (check() let it through: inputs are fixed)
            raise ConversionError(f"adaptive pooling to {ints(_pool_ksize(op))}: ONNX shape "
                                  "inference cannot find its input sizes from the model's "
                                  f"input sizes, got {shape[2:]}" + ctx._where())
    return shape[2:]


@paddle_op("pool3d")
class Pool3d:
    @classmethod
    def check(cls, op):
        fmt = op.attr("data_format", "NCDHW")
        if not _channels_first(fmt):
            return f"data_format={fmt!r} is not supported (export the model channels-first)"
        shape = _var_shape(op, "X")
        spatial = shape[2:] if shape else None
        return _pool_problem(op, spatial) or avg_pool_problem(op, spatial)

    @classmethod
    def required_opset(cls, op):
        return 10 if op.attr("ceil_mode", False) else 7

    @classmethod
    def version_7(cls, ctx, op):
        # onnxruntime has no float64 average pools (nor max pools before opset 8)
        y = in_float32(ctx, ctx.dtype(op, "X"), lambda x: cls._pool(ctx, op, x), ctx.input(op, "X"))
        ctx.set_output(op, "Out", y)

    @classmethod
    def _pool(cls, ctx, op, x):
        kind = op.attr("pooling_type", "max")
        spatial = pool_spatial(ctx, op, "X", 3)
        ksize = ints(_pool_ksize(op))
        if op.attr("global_pooling", False) or (op.attr("adaptive", False) and
                                                all(k == 1 for k in ksize)):
            y = ctx.op.GlobalMaxPool(x) if kind == "max" else ctx.op.GlobalAveragePool(x)
        elif op.attr("adaptive", False):
            y = _adaptive_pool(ctx, x, spatial, ksize, kind)
        else:
            attrs = _pool_attrs(op, 3, spatial)
            if kind == "max":
                y = max_pool(ctx, x, attrs, spatial, computed_dtype(ctx, op))
            else:
                y = avg_pool(ctx, x, attrs, op.attr("exclusive", True), spatial, computed_dtype(ctx, op))
        return y


@paddle_op("max_pool2d_with_index", "max_pool3d_with_index")
class MaxPoolWithIndex:
    """Max pooling that also returns Mask, the argmax as an index into each H*W plane.

    PIR keeps this op under its own name: slots in0/out0/out1 (x/out/mask), attr kernel_size.
    """

    X = ("X", "x", "in0")
    OUT = ("Out", "out", "out0")
    MASK = ("Mask", "mask", "out1")

    @classmethod
    def _n(cls, op):
        return 3 if op.type == "max_pool3d_with_index" else 2

    @classmethod
    def check(cls, op):
        shape = _var_shape(op, _first_slot(op, cls.X))
        spatial = shape[2:] if shape else None
        problem = _pool_problem(op, spatial)
        if problem:
            return problem
        if not _is_used(op, _first_slot(op, cls.MASK, inputs=False)):
            return None
        static = spatial is not None and all(d > 0 for d in spatial)
        if op.attr("global_pooling", False) and not static:
            return "the Mask of global max pooling needs static input sizes"
        if op.attr("adaptive", False) and not op.attr("global_pooling", False) and (
                not static or any(d % k for d, k in zip(spatial, ints(_pool_ksize(op))))):
            return "the Mask of adaptive max pooling needs static sizes divisible by the output"
        return None

    @classmethod
    def required_opset(cls, op):
        if op.attr("ceil_mode", False):
            return 10
        return 8 if _is_used(op, _first_slot(op, cls.MASK, inputs=False)) else 7

    @classmethod
    def version_7(cls, ctx, op):
        xs = _first_slot(op, cls.X)
        x = ctx.input(op, xs)
        if _is_used(op, _first_slot(op, cls.MASK, inputs=False)):   # (opset 8 and up)
            return cls._pool(ctx, op, x, want_mask=True)
        # onnxruntime has no float64 GlobalMaxPool, nor a float64 MaxPool before opset 8
        y = in_float32(ctx, ctx.dtype(op, xs), lambda v: cls._pool(ctx, op, v, False), x)
        ctx.set_output(op, _first_slot(op, cls.OUT, False), y)

    @classmethod
    def _pool(cls, ctx, op, x, want_mask):
        """Out, or with want_mask both outputs set."""
        n = cls._n(op)
        spatial = pool_spatial(ctx, op, _first_slot(op, cls.X), n)
        ksize = ints(_pool_ksize(op))
        adaptive = op.attr("adaptive", False)
        if adaptive and not op.attr("global_pooling", False):
            if all(k == 1 for k in ksize) and not want_mask:
                return ctx.op.GlobalMaxPool(x)
            if all(d > 0 and d % k == 0 for d, k in zip(spatial, ksize)):
                kern = [d // k for d, k in zip(spatial, ksize)]
                attrs = {"kernel_shape": kern, "strides": kern, "pads": [0] * (2 * n)}
            else:
                return _adaptive_pool(ctx, x, spatial, ksize, "max")
        else:
            if op.attr("global_pooling", False) and any(d <= 0 for d in spatial):
                return ctx.op.GlobalMaxPool(x)
            attrs = _pool_attrs(op, n, spatial)
        if not want_mask:
            return ctx.op.MaxPool(x, **attrs)
        y, idx = ctx.op.MaxPool(x, _outputs=2, **attrs)
        # ONNX indexes the whole tensor, Paddle each (n, c) plane
        plane = _shape_slice(ctx, x, 2, 3)
        for axis in range(3, 2 + n):
            plane = ctx.op.Mul(plane, _shape_slice(ctx, x, axis, axis + 1))
        mask = cast(ctx, ctx.op.Mod(idx, plane), "int32") if ctx.opset >= 10 else \
            cast(ctx, ctx.op.Sub(idx, ctx.op.Mul(ctx.op.Div(idx, plane), plane)), "int32")
        ctx.set_output(op, _first_slot(op, cls.OUT, False), y)
        ctx.set_output(op, _first_slot(op, cls.MASK, False), mask)


# --- pixel shuffles ---------------------------------------------------------------------------

def _rearrange(ctx, x, inner_shape, perm, out_shape):
    """Reshape to [N, *inner] (inner may hold Values), transpose, reshape to [N, *out]."""
    def vec(parts):
        items = [_shape_slice(ctx, x, 0, 1)]
        for p in parts:
            items.append(p if hasattr(p, "producer") else const_i64(ctx, [p]))
        return ctx.op.Concat(*items, axis=0)
    y = reshape(ctx, x, vec(inner_shape))
    y = ctx.op.Transpose(y, perm=perm)
    return reshape(ctx, y, vec(out_shape))


@paddle_op("pixel_shuffle", "pixel_unshuffle", "channel_shuffle")
class PixelShuffle:
    @classmethod
    def check(cls, op):
        shape = _var_shape(op, "X")
        fmt = op.attr("data_format", "NCHW")
        if fmt not in ("NCHW", "NHWC"):
            return f"data_format={fmt!r} is not supported"
        c = None if shape is None else shape[3 if fmt == "NHWC" else 1]
        if c is None or c <= 0:
            return "the channel count must be static"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        fmt = op.attr("data_format", "NCHW")
        if fmt == "NHWC":
            x = _to_channels_first(ctx, x, 4)
        shape = ctx.shape(op, "X")
        c = shape[3] if fmt == "NHWC" else shape[1]
        if op.type == "pixel_shuffle" and ctx.opset >= 11:
            y = ctx.op.DepthToSpace(x, blocksize=int(op.attr("upscale_factor")), mode="CRD")
        else:
            y = cls._by_reshape(ctx, op, x, c)
        if fmt == "NHWC":
            y = _to_channels_last(ctx, y, 4)
        ctx.set_output(op, "Out", y)

    @classmethod
    def _by_reshape(cls, ctx, op, x, c):
        h, w = _shape_slice(ctx, x, 2, 3), _shape_slice(ctx, x, 3, 4)
        if op.type == "channel_shuffle":
            g = int(op.attr("groups"))
            return _rearrange(ctx, x, [g, c // g, h, w], [0, 2, 1, 3, 4], [c, h, w])
        if op.type == "pixel_shuffle":
            r = int(op.attr("upscale_factor"))
            rr = const_i64(ctx, [r])
            return _rearrange(ctx, x, [c // (r * r), r, r, h, w], [0, 1, 4, 2, 5, 3],
                              [c // (r * r), ctx.op.Mul(h, rr), ctx.op.Mul(w, rr)])
        r = int(op.attr("downscale_factor"))
        rr = const_i64(ctx, [r])
        hr, wr = ctx.op.Div(h, rr), ctx.op.Div(w, rr)
        return _rearrange(ctx, x, [c, hr, r, wr, r], [0, 1, 3, 5, 2, 4], [c * r * r, hr, wr])


# --- normalisation ----------------------------------------------------------------------------

def _channel_param(ctx, op, slot, c, fill, n_spatial=None):
    """A per-channel scale/bias input ([C]), or the constant `fill` when absent."""
    dtype = np.dtype(ctx.dtype(op, "X") or "float32")
    if ctx.has_input(op, slot):
        v = ctx.input(op, slot)
    else:
        if c is None or c <= 0:
            raise ConversionError(f"{op.type} without {slot} needs a static channel count")
        v = ctx.const(np.full([c], fill, dtype))
    if n_spatial is None:
        return v
    const = v.const_value.numpy() if v.const_value is not None else None
    if const is not None:
        return ctx.const(const.reshape((-1,) + (1,) * n_spatial))
    return unsqueeze(ctx, v, list(range(1, 1 + n_spatial)))


@paddle_op("instance_norm")
class InstanceNorm:
    @classmethod
    def check(cls, op):
        shape = _var_shape(op, "X")
        if not (op.input("Scale") and op.input("Bias")) and (shape is None or shape[1] <= 0):
            return "instance_norm without scale or bias needs a static channel count"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        c = shape[1] if shape else None
        y = ctx.op.InstanceNormalization(
            x, _channel_param(ctx, op, "Scale", c, 1.0), _channel_param(ctx, op, "Bias", c, 0.0),
            epsilon=float(op.attr("epsilon", 1e-5)))
        ctx.set_output(op, "Y", y)


@paddle_op("group_norm")
class GroupNorm:
    """Normalise [N, G, rest] per (n, g) with InstanceNormalization, then scale per channel."""

    @classmethod
    def check(cls, op):
        layout = op.attr("data_layout", "NCHW")
        if not _channels_first(layout):
            return f"data_layout={layout!r} is not supported (export the model channels-first)"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        g = int(op.attr("groups"))
        dtype = np.dtype(ctx.dtype(op, "X") or "float32")
        grouped = reshape(ctx, x, [0, g, -1])
        y = ctx.op.InstanceNormalization(grouped, ctx.const(np.ones([g], dtype)),
                                         ctx.const(np.zeros([g], dtype)),
                                         epsilon=float(op.attr("epsilon", 1e-5)))
        y = reshape(ctx, y, ctx.op.Shape(x))
        n_sp = rank - 2
        if ctx.has_input(op, "Scale"):
            y = ctx.op.Mul(y, _channel_param(ctx, op, "Scale", None, 1.0, n_sp))
        if ctx.has_input(op, "Bias"):
            y = ctx.op.Add(y, _channel_param(ctx, op, "Bias", None, 0.0, n_sp))
        ctx.set_output(op, "Y", y)


@paddle_op("affine_channel")
class AffineChannel:
    """x * scale + bias per channel (the folded batch norm of old detection models)."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        last = op.attr("data_layout", "NCHW") == "NHWC"
        n_sp = None if last else rank - 2
        scale = _channel_param(ctx, op, "Scale", None, 1.0, n_sp)
        bias = _channel_param(ctx, op, "Bias", None, 0.0, n_sp)
        ctx.set_output(op, "Out", ctx.op.Add(ctx.op.Mul(x, scale), bias))


# --- sampling, unpooling, patches, temporal shift -----------------------------------------------

@paddle_op("grid_sampler")
class GridSampler:
    """ONNX GridSample (opset 16; its modes were renamed linear / cubic at 20)."""

    @classmethod
    def check(cls, op):
        if op.attr("mode", "bilinear") not in ("bilinear", "nearest"):
            return f"mode={op.attr('mode')!r} is not supported"
        return None

    @classmethod
    def version_16(cls, ctx, op):
        mode = op.attr("mode", "bilinear")
        if ctx.opset >= 20 and mode == "bilinear":
            mode = "linear"
        y = in_float32(ctx, ctx.dtype(op, "X"), lambda x, g: ctx.op.GridSample(
            x, g, mode=mode, padding_mode=op.attr("padding_mode", "zeros"),
            align_corners=int(bool(op.attr("align_corners", True)))),
            ctx.input(op, "X"), ctx.input(op, "Grid"), onnx_op="GridSample")
        ctx.set_output(op, "Output", y)


@paddle_op("unpool")
class Unpool:
    """Max unpooling: each value written at its Indices (flat positions within its output
    H*W plane, as max_pool2d_with_index gives them) of a zero plane."""

    @classmethod
    def check(cls, op):
        if op.attr("unpooling_type", "max") != "max":
            return f"unpooling_type={op.attr('unpooling_type')!r} is not supported"
        return _nchw_only_unpool(op)

    @classmethod
    def version_11(cls, ctx, op):
        x, idx = ctx.input(op, "X"), ctx.input(op, "Indices")
        shape = ctx.shape(op, "X")
        out_hw = ints(op.attr("output_size", []) or [])
        if len(out_hw) != 2 or any(d <= 0 for d in out_hw):   # Paddle's default output size
            if any(d <= 0 for d in shape[2:]):
                raise ConversionError("unpool without output_size needs static input sizes")
            k, s = ints(op.attr("ksize")), ints(op.attr("strides", [1, 1]))
            p = ints(op.attr("paddings", [0, 0]))
            out_hw = [(shape[2 + i] - 1) * s[i] - 2 * p[i] + k[i] for i in range(2)]
        idx = reshape(ctx, cast(ctx, idx, "int64") if ctx.dtype(op, "Indices") != "int64" else idx,
                      [0, 0, -1])
        n_c = ctx.op.Gather(ctx.op.Shape(x), const_i64(ctx, [0, 1]), axis=0)
        plane = ctx.op.ConstantOfShape(
            ctx.op.Concat(n_c, const_i64(ctx, [out_hw[0] * out_hw[1]]), axis=0),
            value=ir.tensor(np.zeros(1, np.dtype(ctx.dtype(op, "X")))))
        out = ctx.op.ScatterElements(plane, idx, reshape(ctx, x, [0, 0, -1]), axis=2)
        ctx.set_output(op, "Out", reshape(ctx, out, [0, 0] + out_hw))


def _nchw_only_unpool(op):
    fmt = op.attr("data_format", "NCHW")
    return None if _channels_first(fmt) else f"data_format={fmt!r} is not supported"


@paddle_op("unfold")
class Unfold:
    """im2col: [N, C, H, W] -> [N, C*kh*kw, L], a grouped Conv whose kh*kw one-hot kernels
    per channel pick each window position (channel-major, as Paddle orders them)."""

    @classmethod
    def version_7(cls, ctx, op):
        x_slot = first_input(op, "X", "in0")          # PIR keeps its own slot names
        x = ctx.input(op, x_slot)
        c = ctx.shape(op, x_slot)[1]
        if c <= 0:
            raise ConversionError("unfold needs a static channel count")
        kh, kw = ints(op.attr("kernel_sizes"))
        pads = ints(op.attr("paddings", [0, 0, 0, 0]))
        if len(pads) == 2:
            pads = pads + pads
        eye = np.eye(kh * kw, dtype=np.dtype(computed_dtype(ctx, op, x_slot)))
        w = ctx.const(np.tile(eye.reshape(kh * kw, 1, kh, kw), (c, 1, 1, 1)))
        y = in_float32(ctx, ctx.dtype(op, x_slot), lambda v: ctx.op.Conv(
            v, w, group=c, kernel_shape=[kh, kw], strides=ints(op.attr("strides", [1, 1])),
            dilations=ints(op.attr("dilations", [1, 1])), pads=pads), x, onnx_op="Conv")
        ctx.set_output(op, first_output(op, "Y", "out0"), reshape(ctx, y, [0, 0, -1]))


@paddle_op("temporal_shift")
class TemporalShift:
    """[N*T, C, H, W] seen as [N, T, C, H, W]: the first C*ratio channels take frame t-1,
    the next C*ratio frame t+1 (zeros past the ends), the rest stay."""

    @classmethod
    def check(cls, op):
        fmt = op.attr("data_format", "NCHW")
        return None if fmt == "NCHW" else f"data_format={fmt!r} is not supported"

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        t = int(op.attr("seg_num"))
        c = shape[1]
        if c <= 0:
            raise ConversionError("temporal_shift needs a static channel count")
        ratio = float(op.attr("shift_ratio", 0.25))
        c1, c2 = int(c * ratio), int(c * 2 * ratio)
        v = reshape(ctx, x, ctx.op.Concat(const_i64(ctx, [-1, t]), slice_(
            ctx, ctx.op.Shape(x), [1], [4], [0]), axis=0))           # [N, T, C, H, W]
        padded = _onnx_pad(ctx, v, [0, 1, 0, 0, 0, 0, 1, 0, 0, 0], "constant", 0.0,
                           ctx.dtype(op, "X"))                       # a zero frame each side
        back = slice_(ctx, padded, [0, 0], [t, c1], [1, 2])          # frame t-1
        fwd = slice_(ctx, padded, [2, c1], [t + 2, c2], [1, 2])      # frame t+1
        keep = slice_(ctx, v, [c2], [c], [2])
        out = ctx.op.Concat(back, fwd, keep, axis=2)
        ctx.set_output(op, "Out", reshape(ctx, out, ctx.op.Shape(x)))
