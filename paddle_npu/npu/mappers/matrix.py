"""The one emission of a matrix layer's plan (plan.py), shared by Conv, Gemm and MatMul."""
import numpy as np
import onnx_ir as ir

# the most partial results one AddInTile adds (a longer sum is a chain: _chain)
MAX_PARTIALS = 32


def emit_matrix(ctx, plan, x, im2col=None, stack=False):
    """x's rows (x itself [..., K], or Im2Col(x) with the attributes `im2col`) times the
    plan's kernel matrix, one VMM per band of tiles, + bias: the accumulator [..., width],
    as floats. `stack`: each band reads its own block of the image's channels, tap by tap,
    the bands in the channels' order (a depthwise layer's packed tiles; the per-channel
    plan's, a channel each): the bands, when alike, run as one stack (`_emit_stack`; an
    integer plan's when its arrays read out exactly).
    An integer plan quantises x (before Im2Col, which then moves integers), sums integers
    and dequantises the result; a ReLU folded into it is taken over by the layer's output."""
    s = plan.scales
    if stack and plan.readout is None and _stackable(plan, im2col):
        return _emit_stack(ctx, plan, x, im2col)
    if s is None:
        rows = ctx.npu.Im2Col(x, **im2col, _name="im2col") if im2col else x
        partials = [ctx.npu.VMM(rows, w, row_offset=t.row_start, _name=f"vmm_{_tag(t)}")
                    for t, w in zip(plan.bands, _band_weights(ctx, plan))]
        if not plan.sums_tiles:
            return partials[0]
        bias = ctx.initializer(plan.bias, "bias") if plan.bias is not None else None
        return ctx.npu.AddInTile(bias, *partials, offsets=plan.offsets, width=plan.width,
                                 _name="add_in_tile")

    rows = quantize_rows(ctx, plan, x)
    if im2col:
        rows = ctx.npu.Im2Col(rows, **im2col, _name="im2col")
    partials = [ctx.npu.QVMM(rows, w, row_offset=t.row_start, acc_bits=plan.acc_bits,
                             **plan.qvmm_attrs(i), _name=f"qvmm_{_tag(t)}",
                             _dtype=_acc_type(plan))
                for i, (t, w) in enumerate(zip(plan.bands, _band_weights(ctx, plan)))]
    if not plan.sums_tiles:
        acc = partials[0]
    else:
        bias = ctx.initializer(s.bias_q, "bias_q") if s.bias_q is not None else None
        acc = _sum_partials(ctx, plan, bias, partials)
    return read_out(ctx, plan, acc)


def _sum_partials(ctx, plan, bias, partials):
    """The integer partials (one per tile) + bias summed by AddInTile, at most MAX_PARTIALS
    at a time: a layer of more tiles (a per-channel plan's, one per input channel) sums them
    in a chain (`_chain`)."""
    def links():
        first = 0
        while first < len(partials):
            end = min(first + MAX_PARTIALS - (first > 0), len(partials))
            yield first, partials[first:end], plan.offsets[first:end], [0] * (end - first)
            first = end
    return _chain(ctx, plan, bias, links())


def _chain(ctx, plan, bias, links):
    """The sum of `links` (start tile, partials, their offsets, their stacked flags), one
    AddInTile each adding its partials to the running sum, bias on the first (exact in
    integers, so the grouping changes no result). The running sum is a link's last input
    and `links` may make each link's partials as it is asked for: onnxruntime then computes
    each link's tiles just before it, holding a few partials at a time instead of all."""
    total, last = None, len(plan.offsets)
    for start, parts, offsets, stacked in links:
        running = [] if total is None else [total]
        flags = {"stacked": stacked + [0] * len(running)} if any(stacked) else {}
        total = ctx.npu.AddInTile(None if running else bias, *parts, *running,
                                  offsets=offsets + [0] * len(running), width=plan.width,
                                  **flags, _dtype=_acc_type(plan),
                                  _name="add_in_tile" if start + len(offsets) == last
                                  else f"add_in_tile_{start}")
    return total


def _band_weights(ctx, plan):
    """The initializers of the plan's bands' weights (an integer plan's: quantised by its
    columns' scales), each an earlier layer's where it holds the same weights
    (LowerContext.tile_initializer)."""
    held, prefix = (plan.weights, "w") if plan.scales is None else (plan.scales.weights_q, "wq")
    return [ctx.tile_initializer(a, f"{prefix}_{_tag(t)}", key, w)
            for t, a, w, key in zip(plan.bands, held, plan.weights, plan.tile_keys())]


def _acc_type(plan):
    return ir.DataType.INT32 if plan.acc_bits == 32 else ir.DataType.INT64


def quantize_rows(ctx, plan, x):
    """x on an integer plan's grid (Quantize by its s_x)."""
    int_type = ir.DataType.INT8 if plan.bits == 8 else ir.DataType.INT16
    return ctx.npu.Quantize(x, ctx.initializer(plan.scales.s_x, "s_x"), bits=plan.bits,
                            _name="quantize", _dtype=int_type)


def read_out(ctx, plan, acc):
    """An integer plan's accumulator [..., width] as floats: requantised to the output's
    grid and dequantised (a ReLU folded in), or, with no output scale, read out as they are."""
    s = plan.scales
    int_type = ir.DataType.INT8 if plan.bits == 8 else ir.DataType.INT16
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


def _taps(im2col):
    return int(np.prod(im2col["kernel_shape"]))


def _stackable(plan, im2col):
    """Whether the bands are alike, band t reading rows [t*R, (t+1)*R) (R whole channels'
    taps), all but a last block-diagonal one of fewer groups the same size."""
    first, last = plan.bands[0], plan.bands[-1]
    r, m = first.rows, first.cols
    if len(plan.bands) < 2 or r % _taps(im2col) or \
            any(t.row_start != i * r for i, t in enumerate(plan.bands)):
        return False
    full = all((t.rows, t.cols) == (r, m) for t in plan.bands[:-1])
    return full and ((last.rows, last.cols) == (r, m) or (
        last.groups is not None and last.rows < r and last.cols < m))


def _emit_stack(ctx, plan, x, im2col):
    """The bands as one stack: Im2Col's blocks first (n channels per band), one VMM of W
    [T, R, M] (ops/vmm.py), AddInTile placing (or summing) the T results + bias; an integer
    plan's, on x quantised, QVMM stacks of at most MAX_PARTIALS tiles summed in a chain. A
    last band of fewer groups (tiling: evenly filled) has its weights put where its
    channels' are in a full one (rows tap by tap, tap i of channel j at row i*n + j), the
    rest zero: AddInTile keeps none of the columns that leaves empty."""
    s = plan.scales
    first = plan.bands[0]
    taps = _taps(im2col)
    n = first.rows // taps
    per_channel = first.cols // n
    weights = plan.weights if s is None else s.weights_q
    stack = np.zeros((len(plan.bands), first.rows, first.cols), dtype=weights[0].dtype)
    for tile, w, held in zip(plan.bands, weights, stack):
        k = tile.rows // taps
        held.reshape(taps, n, -1)[:, :k, :k * per_channel] = w.reshape(taps, k, -1)
    block = dict(im2col, channel_block=n)
    if s is None:
        rows = ctx.npu.Im2Col(x, **block, blocks_first=1, _name="im2col")
        y = ctx.npu.VMM(rows, ctx.initializer(stack, "w_stack"), _name="vmm_stack")
        bias = ctx.initializer(plan.bias, "bias") if plan.bias is not None else None
        return ctx.npu.AddInTile(bias, y, offsets=plan.offsets, width=plan.width,
                                 stacked=[1], _name="add_in_tile")
    # one AddInTile adds at most MAX_PARTIALS partials: a layer of more tiles is a chain,
    # each link one stack of that many tiles
    rows = ctx.npu.Im2Col(quantize_rows(ctx, plan, x), **block, blocks_first=1,
                          _name="im2col")

    def links():
        for start in range(0, len(stack), MAX_PARTIALS):
            end = min(start + MAX_PARTIALS, len(stack))
            y = ctx.npu.QVMM(rows, ctx.initializer(stack[start:end], f"wq_stack_{start}"),
                             acc_bits=plan.acc_bits, block_offset=start,
                             _name=f"qvmm_stack_{start}", _dtype=_acc_type(plan))
            yield start, [y], plan.offsets[start:end], [1]
    bias = ctx.initializer(s.bias_q, "bias_q") if s.bias_q is not None else None
    return read_out(ctx, plan, _chain(ctx, plan, bias, links()))


def _tag(tile):
    return f"r{tile.row_start}_c{tile.col_start}"
