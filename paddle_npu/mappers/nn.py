"""Convolution, normalisation, pooling, dropout."""
import numpy as np

from .common import (computed_dtype, conv_padding, in_float32, ints, paddle_pads_2d, reduce,
                     reshape, unsqueeze)
from .registry import paddle_op
from .vision import (_adaptive_pool, _pool_problem, _var_shape, avg_pool, avg_pool_problem,
                     max_pool, pool_spatial)


def _nchw_only(op, key="data_format"):
    fmt = op.attr(key, "NCHW")
    if fmt not in ("NCHW", "AnyLayout", "NCDHW", "NCL"):
        return f"{key}={fmt!r} is not supported (export the model channels-first)"
    return None


@paddle_op("conv2d", "depthwise_conv2d", "conv3d")
class Conv:
    @classmethod
    def check(cls, op):
        return _nchw_only(op)

    @classmethod
    def version_7(cls, ctx, op):
        x, w = ctx.input(op, "Input"), ctx.input(op, "Filter")
        n = 3 if op.type == "conv3d" else 2
        dilations = ints(op.attr("dilations", [1] * n))
        if op.attr("padding_algorithm", "EXPLICIT") == "SAME":
            dilations = [1] * n   # Paddle computes SAME convolutions without dilation
        y = ctx.op.Conv(x, w, strides=ints(op.attr("strides", [1] * n)), dilations=dilations,
                        group=int(op.attr("groups", 1) or 1), **conv_padding(op, n))
        if ctx.has_input(op, "Bias"):   # fused conv2d+bias from optimized programs
            b = ctx.input(op, "Bias")
            y = ctx.op.Add(y, _channel_bias(ctx, b, n))
        ctx.set_output(op, "Output", y)


def _channel_bias(ctx, b, n_spatial):
    const = b.const_value.numpy() if b.const_value is not None else None
    if const is not None:
        return ctx.const(const.reshape((-1,) + (1,) * n_spatial))
    return unsqueeze(ctx, b, list(range(1, 1 + n_spatial)))


@paddle_op("deformable_conv", "deformable_conv_v1")
class DeformableConv:
    """ONNX DeformConv (opset 19): Paddle's Offset ((y, x) per kernel position and offset
    group) and Mask layouts are its own; v1 has no Mask."""

    @classmethod
    def version_19(cls, ctx, op):
        x, w = ctx.input(op, "Input"), ctx.input(op, "Filter")
        args = [x, w, ctx.input(op, "Offset"), None]
        if ctx.has_input(op, "Mask"):
            args.append(ctx.input(op, "Mask"))
        k = ctx.shape(op, "Filter")[2:]
        y = ctx.op.DeformConv(*args, kernel_shape=k, strides=ints(op.attr("strides", [1, 1])),
                              dilations=ints(op.attr("dilations", [1, 1])),
                              pads=paddle_pads_2d(op.attr("paddings", [0, 0])),
                              group=int(op.attr("groups", 1) or 1),
                              offset_group=int(op.attr("deformable_groups", 1) or 1))
        ctx.set_output(op, "Output", y)


@paddle_op("data_norm")
class DataNorm:
    """(x - BatchSum / BatchSize) * sqrt(BatchSize / BatchSquareSum) per column of [N, C]
    (then * scale_w + bias when enable_scale_and_shift). Paddle 3 no longer has this op."""

    @classmethod
    def check(cls, op):
        if (op.attr("slot_dim", -1) or -1) > 0:
            return "data_norm with slot_dim (show/click slots) is not supported"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        size, total, square = (ctx.input(op, s) for s in ("BatchSize", "BatchSum", "BatchSquareSum"))
        means = ctx.op.Div(total, size)
        scales = ctx.op.Sqrt(ctx.op.Div(size, square))
        y = ctx.op.Mul(ctx.op.Sub(x, means), scales)
        if op.attr("enable_scale_and_shift", False):
            y = ctx.op.Add(ctx.op.Mul(y, ctx.input(op, "scale_w")), ctx.input(op, "bias"))
        ctx.set_output(op, "Y", y)
        ctx.set_output(op, "Means", means)
        ctx.set_output(op, "Scales", scales)


@paddle_op("batch_norm")
class BatchNorm:
    @classmethod
    def check(cls, op):
        return _nchw_only(op, "data_layout") or _nchw_only(op)

    @classmethod
    def version_9(cls, ctx, op):
        args = [ctx.input(op, s) for s in ("X", "Scale", "Bias", "Mean", "Variance")]
        y = ctx.op.BatchNormalization(*args, epsilon=float(op.attr("epsilon", 1e-5)))
        ctx.set_output(op, "Y", y)


@paddle_op("pool2d")
class Pool2d:
    @classmethod
    def check(cls, op):
        shape = _var_shape(op, "X")
        spatial = shape[2:] if shape else None
        return _nchw_only(op) or _pool_problem(op, spatial) or avg_pool_problem(op, spatial)

    @classmethod
    def required_opset(cls, op):
        if op.attr("ceil_mode", False) and not op.attr("global_pooling", False):
            return 10   # ceil_mode attribute
        return 7

    @classmethod
    def version_7(cls, ctx, op):
        # onnxruntime has no float64 average pools (nor max pools before opset 8)
        y = in_float32(ctx, ctx.dtype(op, "X"), lambda x: cls._pool(ctx, op, x), ctx.input(op, "X"))
        ctx.set_output(op, "Out", y)

    @classmethod
    def _pool(cls, ctx, op, x):
        kind = op.attr("pooling_type", "max")
        ksize = ints(op.attr("ksize", [1, 1]))
        spatial = pool_spatial(ctx, op, "X", 2)
        adaptive = op.attr("adaptive", False)
        is_global = op.attr("global_pooling", False) or (
            adaptive and ksize == [1, 1]) or (
            not adaptive and ksize == spatial and all(d > 0 for d in spatial)
            and _zero_pads(op) and op.attr("padding_algorithm", "EXPLICIT") != "SAME")
        if is_global:
            return ctx.op.GlobalMaxPool(x) if kind == "max" else ctx.op.GlobalAveragePool(x)
        if adaptive:
            if any(s % k for s, k in zip(spatial, ksize)):   # uneven or overlapping bins
                return _adaptive_pool(ctx, x, spatial, ksize, kind)
            stride = [s // k for s, k in zip(spatial, ksize)]
            attrs = {"kernel_shape": stride, "strides": stride, "pads": [0, 0, 0, 0]}
        else:
            attrs = {"kernel_shape": ksize, "strides": ints(op.attr("strides", [1, 1])),
                     **conv_padding(op)}
            if "pads" in attrs:
                attrs["pads"] = paddle_pads_2d(op.attr("paddings", [0, 0])) \
                    if op.attr("padding_algorithm", "EXPLICIT") == "EXPLICIT" else attrs["pads"]
            if op.attr("ceil_mode", False):
                attrs["ceil_mode"] = 1
        if kind == "max":
            return max_pool(ctx, x, attrs, spatial, computed_dtype(ctx, op))
        return avg_pool(ctx, x, attrs, op.attr("exclusive", True), spatial, computed_dtype(ctx, op))


def _zero_pads(op):
    return all(p == 0 for p in op.attr("paddings", [0, 0]))


@paddle_op("dropout")
class Dropout:
    """Inference: identity, or a scale for the old 'downgrade_in_infer' mode."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        mode = op.attr("dropout_implementation", "downgrade_in_infer")
        p = float(op.attr("dropout_prob", 0.5))
        if mode == "downgrade_in_infer" and p != 0.0:
            x = ctx.op.Mul(x, ctx.const(np.asarray(1.0 - p, np.dtype(ctx.dtype(op, "X")))))
        ctx.set_output(op, "Out", x)


@paddle_op("layer_norm")
class LayerNorm:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        begin = op.attr("begin_norm_axis", 1)
        eps = float(op.attr("epsilon", 1e-5))
        shape = ctx.shape(op, "X")
        axes = list(range(begin, rank))
        norm_shape = [shape[a] for a in axes]
        scale = ctx.input(op, "Scale") if ctx.has_input(op, "Scale") else None
        bias = ctx.input(op, "Bias") if ctx.has_input(op, "Bias") else None
        if ctx.opset >= 17 and all(d > 0 for d in norm_shape):
            dtype = np.dtype(ctx.dtype(op, "X"))
            scale = _as_shape(ctx, scale, norm_shape) if scale is not None else ctx.const(
                np.ones(norm_shape, dtype))
            if bias is not None:
                bias = _as_shape(ctx, bias, norm_shape)
            y = ctx.op.LayerNormalization(x, scale, bias, axis=begin, epsilon=eps)
            return ctx.set_output(op, "Y", y)
        # Before opset 17: the formula, in float32 as Paddle computes it.
        mean = reduce(ctx, "ReduceMean", x, axes)
        d = ctx.op.Sub(x, mean)
        # Pow(d, 2), not Mul(d, d): onnxruntime fuses this exact pattern into LayerNormalization
        two = ctx.const(np.asarray(2.0, np.dtype(ctx.dtype(op, "X"))))
        var = reduce(ctx, "ReduceMean", ctx.op.Pow(d, two), axes)
        eps_c = ctx.const(np.asarray(eps, np.dtype(ctx.dtype(op, "X"))))
        y = ctx.op.Div(d, ctx.op.Sqrt(ctx.op.Add(var, eps_c)))
        if scale is not None:
            y = ctx.op.Mul(y, _as_shape(ctx, scale, norm_shape))
        if bias is not None:
            y = ctx.op.Add(y, _as_shape(ctx, bias, norm_shape))
        ctx.set_output(op, "Y", y)



@paddle_op("fused_rms_norm_quant")
class FusedRmsNorm:
    """PIR-only (paddle.incubate.nn.functional.fused_rms_norm, PaddleX's LLM-style blocks):
    h = x (+ residual); out = h / sqrt(mean(h^2 over axes from begin_norm_axis) + eps)
    * norm_weight (+ norm_bias); residual_out = h. Paddle gives the op no legacy name, so
    its operands keep their positions: in0 x, in1 bias, in2 residual, in3 norm_weight, in4
    norm_bias; results out0 out, out1 residual_out, out2 inv_var."""

    @classmethod
    def check(cls, op):
        if op.attr("quant_scale", -1.0) > 0:
            return "fused_rms_norm with int8 output quantisation (quant_scale > 0) is not supported"
        if op.input("in1"):
            return "fused_rms_norm with a bias before the norm is not supported"
        if not op.input("in3"):
            return "fused_rms_norm without norm_weight"
        x = op.block.find_var(op.input("in0")[0])
        if x is None or x.shape is None:
            return "fused_rms_norm on an input of unknown rank"
        normalized = x.shape[int(op.attr("begin_norm_axis", 1)) % max(len(x.shape), 1):]
        if len(normalized) > 1 and any(d < 0 for d in normalized):
            return "fused_rms_norm over several axes of unknown size"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "in0")
        if ctx.has_input(op, "in2"):
            x = ctx.op.Add(x, ctx.input(op, "in2"))
        rank = ctx.rank(op, "in0")
        begin = int(op.attr("begin_norm_axis", 1)) % rank
        dtype = np.dtype(ctx.dtype(op, "in0"))
        mean_sq = reduce(ctx, "ReduceMean", ctx.op.Mul(x, x), list(range(begin, rank)))
        eps = ctx.const(np.asarray(float(op.attr("epsilon", 1e-5)), dtype))
        norm_shape = list(ctx.static_shape(op, "in0") or [])[begin:]
        y = ctx.op.Mul(ctx.op.Mul(x, ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(mean_sq, eps)))),
                       _as_shape(ctx, ctx.input(op, "in3"), norm_shape))
        if ctx.has_input(op, "in4"):
            y = ctx.op.Add(y, _as_shape(ctx, ctx.input(op, "in4"), norm_shape))
        ctx.set_output(op, "out0", y)
        if ctx.has_output(op, "out1") and ctx.has_input(op, "in2"):
            ctx.set_output(op, "out1", x)


def _as_shape(ctx, v, shape):
    """Paddle stores layer_norm's scale/bias flattened; ONNX wants the normalized shape."""
    if len(shape) == 1:
        return v
    const = v.const_value.numpy() if v.const_value is not None else None
    if const is not None:
        return ctx.const(const.reshape(shape))
    return reshape(ctx, v, shape)
