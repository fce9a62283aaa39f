"""The one emission of a matrix layer's plan (plan.py), shared by Conv, Gemm and MatMul."""
import numpy as np
import onnx_ir as ir

from ..plan import plan_layer


def plan_matrix(ctx, node, geo, weight, bias, tiling="packed", by_tap=False):
    """The layer's plan for the context's target and quantisation (plan.plan_layer),
    kept by the context (the quantisation records come from it)."""
    plan = plan_layer(node, geo, weight, bias, ctx.target, tiling, ctx.quantization, by_tap)
    ctx.plans.append(plan)
    return plan


def emit_matrix(ctx, plan, x, im2col=None, stack=False):
    """x's rows (x itself [..., K], or Im2Col(x) with the attributes `im2col`) times the
    plan's kernel matrix, one VMM per band of tiles, + bias: the accumulator [..., width],
    as floats. `stack`: the tiles are a depthwise layer's, each its own channel_block read
    tap by tap; a float plan of several runs them as one stack (`_emit_stack`).
    An integer plan quantises x (before Im2Col at 8 bits, which then moves int8; after it at
    16, as onnxruntime's Pad has no int16 kernel for Im2Col's body), sums integers and
    dequantises the result; a ReLU folded into it is taken over by the layer's output."""
    s = plan.scales
    if s is None and stack and len(plan.bands) > 1:
        return _emit_stack(ctx, plan, x, im2col)
    if s is None:
        rows = ctx.npu.Im2Col(x, **im2col, _name="im2col") if im2col else x
        partials = [ctx.npu.VMM(rows, ctx.initializer(w, f"w_{_tag(t)}"),
                                row_offset=t.row_start, _name=f"vmm_{_tag(t)}")
                    for t, w in zip(plan.bands, plan.weights)]
        if not plan.sums_tiles:
            return partials[0]
        bias = ctx.initializer(plan.bias, "bias") if plan.bias is not None else None
        return ctx.npu.AddInTile(bias, *partials, offsets=plan.offsets, width=plan.width,
                                 _name="add_in_tile")

    int_type = ir.DataType.INT8 if plan.bits == 8 else ir.DataType.INT16
    acc_type = ir.DataType.INT32 if plan.acc_bits == 32 else ir.DataType.INT64

    def quantize(v):
        return ctx.npu.Quantize(v, ctx.initializer(s.s_x, "s_x"), bits=plan.bits,
                                _name="quantize", _dtype=int_type)

    early = bool(im2col) and plan.bits == 8
    rows = quantize(x) if early else x
    if im2col:
        rows = ctx.npu.Im2Col(rows, **im2col, _name="im2col")
    if not early:
        rows = quantize(rows)
    partials = [ctx.npu.QVMM(rows, ctx.initializer(w, f"wq_{_tag(t)}"), row_offset=t.row_start,
                             acc_bits=plan.acc_bits, _name=f"qvmm_{_tag(t)}", _dtype=acc_type)
                for t, w in zip(plan.bands, s.weights_q)]
    if not plan.sums_tiles:
        acc = partials[0]
    else:
        bias = ctx.initializer(s.bias_q, "bias_q") if s.bias_q is not None else None
        acc = ctx.npu.AddInTile(bias, *partials, offsets=plan.offsets, width=plan.width,
                                _name="add_in_tile", _dtype=acc_type)
    if s.float_out:         # no scale to requantise to: the accumulator read out as floats
        scale = (np.float64(s.s_x) * s.s_w).astype(np.float32)
        return ctx.npu.Dequantize(acc, ctx.initializer(scale, "s_acc"), _name="dequantize",
                                  _dtype=ir.DataType.FLOAT)
    yq = ctx.npu.Requantize(acc, ctx.initializer(s.mult, "rq_mult"),
                            ctx.initializer(s.div, "rq_div"), bits=plan.bits,
                            relu=1 if s.relu is not None else 0, _name="requantize",
                            _dtype=int_type)
    if s.relu is not None:
        ctx.absorb(s.relu)
    return ctx.npu.Dequantize(yq, ctx.initializer(s.s_y, "s_y"), _name="dequantize",
                              _dtype=ir.DataType.FLOAT)


def _emit_stack(ctx, plan, x, im2col):
    """A depthwise layer's tiles as one stack: Im2Col's blocks first (a block of channels
    per tile), one VMM of W [T, R, M] (ops/vmm.py), + bias. Every tile but the last holds
    the first one's n channels (tiling: evenly filled); the last's weights are put where
    its channels' are in a full tile (rows tap by tap, tap i of channel j at row i*n + j),
    the rest zero, and the columns it leaves empty are not kept."""
    first = plan.bands[0]
    n = first.groups[1] - first.groups[0]
    taps, per_group = first.rows // n, first.cols // n
    stack = np.zeros((len(plan.bands), first.rows, first.cols), dtype=plan.weights[0].dtype)
    for tile, w, held in zip(plan.bands, plan.weights, stack):
        k = tile.groups[1] - tile.groups[0]
        held.reshape(taps, n, -1)[:, :k, :k * per_group] = w.reshape(taps, k, -1)
    rows = ctx.npu.Im2Col(x, **im2col, blocks_first=1, _name="im2col")
    y = ctx.npu.VMM(rows, ctx.initializer(stack, "w_stack"), columns=plan.width,
                    _name="vmm_stack")
    if plan.bias is None:
        return y
    return ctx.npu.AddInTile(ctx.initializer(plan.bias, "bias"), y, offsets=[0],
                             width=plan.width, _name="add_in_tile")


def _tag(tile):
    return f"r{tile.row_start}_c{tile.col_start}"
