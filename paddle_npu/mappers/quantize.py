"""Quantized models: Paddle's quantize_linear / dequantize_linear -> ONNX QDQ.

Facts (checked against Paddle's executor in tests/opcases_quantize.py): Paddle's `Scale` is
the absolute maximum of the range, so the ONNX scale is Scale / (2^(bit_length-1) - 1).
round_type 0 rounds half to even and saturates to [qmin, qmax], exactly QuantizeLinear;
round_type 1 clips x to [-Scale, Scale] and rounds half away from zero: we clip the same way,
and exact .5 ties then round to even. Either way QuantizeLinear divides by the scale where
Paddle multiplies by bin_count / Scale, so a value within float rounding of a half step can
land one step apart; in a quantised model values come from earlier grids and such near-ties
do occur (one element in 100,000 at a layer of tests/test_npu_quant.py's PTQ model; classes
agree). The older fake_quantize ops below are mapped exactly instead (no QDQ pair to keep).
only_observer pairs (PaddleSlim's out-scales of tensors it does not quantise) pass x through;
their Scale goes into the model's metadata (OBSERVED_KEY: {tensor: Scale}), where the
quantised NPU lowering finds the ranges of those tensors (npu/quant/qdq.py).
"""
import json

import numpy as np

from .common import cast, clip, reshape
from .registry import paddle_op
from ..errors import ConversionError


OBSERVED_KEY = "paddle_npu.observed_thresholds"


def _bin_count(op):
    return float((1 << (int(op.attr("bit_length", 8)) - 1)) - 1)


def _per_axis(op):
    return op.attr("quant_axis", -1) not in (None, -1)


def _check(op):
    if int(op.attr("bit_length", 8)) != 8:
        return f"bit_length={op.attr('bit_length')} (only 8-bit quantization maps to ONNX int8)"
    return None


def _onnx_scale(ctx, op):
    """Scale / bin_count as float32: a scalar per tensor, 1-D per axis."""
    bins = _bin_count(op)
    const = ctx.constant_input(op, "Scale")
    if const is not None:
        s = (np.asarray(const, np.float32) / np.float32(bins)).astype(np.float32)
        return ctx.const(s.reshape(-1) if _per_axis(op) else s.reshape(()))
    s = ctx.op.Div(ctx.input(op, "Scale"), ctx.const(np.asarray(bins, np.float32)))
    return s if _per_axis(op) else reshape(ctx, s, [])


def _zero_point(ctx, op):
    if not ctx.has_input(op, "ZeroPoint"):
        return None
    const = ctx.constant_input(op, "ZeroPoint")
    if const is not None:
        z = np.rint(np.asarray(const, np.float64)).astype(np.int8)
        return ctx.const(z.reshape(-1) if _per_axis(op) else z.reshape(()))
    z = ctx.op.Cast(ctx.op.Round(ctx.input(op, "ZeroPoint")), to=3)   # INT8
    return z if _per_axis(op) else reshape(ctx, z, [])


def _axis_attr(op):
    return {"axis": int(op.attr("quant_axis"))} if _per_axis(op) else {}


class _QDQ:
    @classmethod
    def check(cls, op):
        return _check(op)

    @classmethod
    def required_opset(cls, op):
        return 13 if _per_axis(op) else 10   # per-axis scales came with opset 13


@paddle_op("quantize_linear")
class QuantizeLinear(_QDQ):
    @classmethod
    def version_10(cls, ctx, op):
        x = ctx.input(op, "X")
        if op.attr("only_observer", False):   # calibration-only: passes x through
            scale = ctx.constant_input(op, "Scale")
            if scale is not None and np.size(scale) == 1:
                ctx.model_metadata.setdefault(OBSERVED_KEY, {})[op.input("X")[0]] = \
                    float(np.asarray(scale).reshape(()))
            return ctx.set_output(op, "Y", x)
        scale = _onnx_scale(ctx, op)
        zp = _zero_point(ctx, op)
        qmin, qmax = op.attr("qmin", -128), op.attr("qmax", 127)
        if op.attr("round_type", 0) == 1 or (qmin, qmax) != (-128, 127):
            lo = -_bin_count(op) if op.attr("round_type", 0) == 1 else qmin
            hi = _bin_count(op) if op.attr("round_type", 0) == 1 else qmax
            # clip in the float domain: [lo, hi] steps of the ONNX scale
            x = ctx.op.Min(ctx.op.Max(x, ctx.op.Mul(scale, ctx.const(np.float32(lo)))),
                           ctx.op.Mul(scale, ctx.const(np.float32(hi))))
        if zp is None:
            zp = ctx.const(np.zeros(() if not _per_axis(op) else
                                    (ctx.shape(op, "Scale") or [1])[0], np.int8))
        ctx.set_output(op, "Y", ctx.op.QuantizeLinear(x, scale, zp, **_axis_attr(op)))


@paddle_op("dequantize_linear")
class DequantizeLinear(_QDQ):
    @classmethod
    def version_10(cls, ctx, op):
        x = ctx.input(op, "X")
        if op.attr("only_observer", False):
            return ctx.set_output(op, "Y", x)
        scale = _onnx_scale(ctx, op)
        zp = _zero_point(ctx, op)
        const = ctx.constant_input(op, "X")
        if const is not None:    # stored weights: keep them int8 in the model
            x = ctx.const(np.rint(np.asarray(const, np.float64)).astype(np.int8))
        elif x.producer() is None or x.producer().op_type != "QuantizeLinear":
            # Paddle carries quantized values in float tensors; ONNX wants int8
            x = ctx.op.Cast(ctx.op.Round(x), to=3)
        args = [x, scale] + ([zp] if zp is not None else [])
        y = ctx.op.DequantizeLinear(*args, **_axis_attr(op))
        dt = ctx.out_dtype(op, "Y")
        if dt and dt != "float32":
            y = cast(ctx, y, dt)
        ctx.set_output(op, "Y", y)


# --- PaddleSlim's older format: fake_quantize_* / fake_*dequantize_* -------------------------
# The activation quantisers output the integer values themselves, as floats, with
# k = bin_cnt * (1 / s), bin_cnt = 2^(bit_length-1) - 1 (k first, then x * k: the float
# order decides the half steps, established against Paddle's executor on every half step):
#     round_type 1 (these ops' default): Out = round_half_away(clip(X, -s, s) * k)
#     round_type 0:                      Out = clip(round_half_even(X * k), -bin_cnt-1, bin_cnt)
# The weights are stored integer-valued, and a dequantise op after the conv / matmul
# multiplies its output back by the scales. We map them literally (tests/test_npu_quant.py):
# the model stays exactly what Paddle computes. With constant scales the last node of each
# carries them (FAKE_QUANT_KEY: the quantiser's input and threshold; FAKE_DEQUANT_KEY: the
# weight and input scales), so the NPU lowering can keep them (npu/quant/qdq.py).
FAKE_QUANT_KEY = "paddle_npu.fake_quant"
FAKE_DEQUANT_KEY = "paddle_npu.fake_dequant"


def _tag(value, key, info):
    value.producer().metadata_props[key] = json.dumps(info)


def _fake_quantize(ctx, op, scale):
    bins = _bin_count(op)
    x = ctx.input(op, "X")
    k = ctx.op.Mul(ctx.op.Reciprocal(scale), ctx.const(np.float32(bins)))
    if int(op.attr("round_type", 1)) == 0:
        out = clip(ctx, ctx.op.Round(ctx.op.Mul(x, k)), -bins - 1, bins)
    else:
        v = ctx.op.Mul(ctx.op.Min(ctx.op.Max(x, ctx.op.Neg(scale)), scale), k)
        half = ctx.const(np.float32(0.5))
        out = ctx.op.Mul(ctx.op.Sign(v), ctx.op.Floor(ctx.op.Add(ctx.op.Abs(v), half)))
    ctx.set_output(op, "Out", out)
    if ctx.has_output(op, "OutScale"):
        ctx.set_output(op, "OutScale", scale)
    threshold = scale.const_value.numpy() if scale.const_value is not None else None
    if threshold is not None and threshold.size == 1:
        _tag(out, FAKE_QUANT_KEY, {"input": op.input("X")[0],
                                   "bits": int(op.attr("bit_length", 8)),
                                   "threshold": float(threshold.reshape(())),
                                   "round_type": int(op.attr("round_type", 1))})


class _FakeQuantize:
    @classmethod
    def required_opset(cls, op):
        return 11 if op.attr("round_type", 1) == 0 else 9     # Round came with opset 11

    @classmethod
    def check(cls, op):
        if not op.attr("is_test", True):
            return "training mode (is_test=False): the scale is still being learned"
        if op.attr("round_type", 1) not in (0, 1):
            return f"round_type={op.attr('round_type')}"
        return None


@paddle_op("fake_quantize_range_abs_max", "fake_quantize_moving_average_abs_max")
class FakeQuantizeWithScale(_FakeQuantize):
    """Inference: the scale is the stored InScale."""

    @classmethod
    def version_9(cls, ctx, op):        # Sign came with opset 9
        _fake_quantize(ctx, op, ctx.input(op, "InScale"))


@paddle_op("fake_quantize_abs_max")
class FakeQuantizeAbsMax(_FakeQuantize):
    """The scale is the input's own absolute maximum."""

    @classmethod
    def check(cls, op):
        return None if op.attr("round_type", 1) in (0, 1) else \
            f"round_type={op.attr('round_type')}"

    @classmethod
    def version_9(cls, ctx, op):
        scale = ctx.op.ReduceMax(ctx.op.Abs(ctx.input(op, "X")), keepdims=0)
        _fake_quantize(ctx, op, reshape(ctx, scale, [1]))


@paddle_op("fake_dequantize_max_abs")
class FakeDequantizeMaxAbs:
    """Out = X * Scale / max_range."""

    @classmethod
    def version_7(cls, ctx, op):
        k = ctx.op.Div(ctx.input(op, "Scale"),
                       ctx.const(np.float32(op.attr("max_range"))))
        ctx.set_output(op, "Out", ctx.op.Mul(ctx.input(op, "X"), k))


@paddle_op("fake_channel_wise_dequantize_max_abs")
class FakeChannelWiseDequantize:
    """One scale: per channel along quant_axis, X * s[c] / (2^(b-1) - 1). Two (a layer's
    output: weight scales per output channel, then the input's scale): per channel along
    axis x_num_col_dims, X * s0[c] * s1 / ((2^(b0-1) - 1) (2^(b1-1) - 1))."""

    @classmethod
    def check(cls, op):
        n = len(op.input("Scales"))
        if n not in (1, 2):
            return f"{n} scales"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        if rank is None:
            raise ConversionError("fake_channel_wise_dequantize_max_abs: the program records "
                                  "no shape for X, and the channel axis depends on its rank")
        scales = op.input("Scales")
        bits = list(op.attr("quant_bits", [8] * len(scales)))
        axis = int(op.attr("x_num_col_dims", 1)) if len(scales) == 2 else \
            int(op.attr("quant_axis", 0))
        shape = [1] * rank
        shape[axis % rank] = -1
        k = ctx.op.Div(reshape(ctx, ctx.input(op, "Scales", 0), shape),
                       ctx.const(np.float32((1 << (bits[0] - 1)) - 1)))
        if len(scales) == 2:
            k = ctx.op.Mul(k, ctx.op.Div(ctx.input(op, "Scales", 1),
                                         ctx.const(np.float32((1 << (bits[1] - 1)) - 1))))
        out = ctx.op.Mul(x, k)
        ctx.set_output(op, "Out", out)
        consts = [ctx.constant_input(op, "Scales", i) for i in range(len(scales))]
        if len(scales) == 2 and all(c is not None for c in consts) and consts[1].size == 1:
            _tag(out, FAKE_DEQUANT_KEY, {
                "weight_scales": [float(v) for v in consts[0].reshape(-1)],
                "weight_bits": int(bits[0]), "input_threshold": float(consts[1].reshape(())),
                "input_bits": int(bits[1])})
