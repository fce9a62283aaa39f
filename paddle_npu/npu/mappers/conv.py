"""Conv -> Im2Col + one VMM per band of array tiles + AddInTile (+ bias) + DimTransform
(integer: matrix.emit_matrix), or a depthwise one -> DepthwiseConv on the vector unit
(integer: QDepthwiseConv between Quantize and Requantize); 3-D convolutions: conv3d.py."""
import numpy as np
import onnx_ir as ir

from ...errors import ConversionError
from ..chip.plan import plan_layer, plan_vector_layer
from ..chip.tiling import PLANS, Geometry, plan_tiles
from ..ops.im2col import out_size, resolve_pads
from ..registry import onnx_op
from . import conv3d
from .matrix import emit_matrix, quantize_rows, read_out


def operand_reason(ctx, node):
    """Why a convolution's weight, bias or input keeps it off the arrays, or None (Conv,
    ConvTranspose and Conv3D alike)."""
    w = ctx.constant(node.inputs[1])
    if w is None:
        return "the weight is not a constant"
    if w.dtype.kind != "f":
        return f"weight dtype {w.dtype} is not floating point"
    if len(node.inputs) > 2 and node.inputs[2] is not None and \
            ctx.constant(node.inputs[2]) is None:
        return "the bias is not a constant"
    if ctx.static_dims(node.inputs[0], skip=(0,)) is None:
        return "channels and spatial size of the input must be static"
    return None


def runs_depthwise(ctx, node, group, channels, outputs):
    """Whether a Conv runs on the vector unit (DepthwiseConv, QDepthwiseConv on integers): a
    group per channel, one output channel each, on a target that lists the primitive, unless
    the lowering puts it on spare arrays (LowerContext.array_layers). There it costs KH*KW
    multiply-adds per output element, the element operations its Im2Col alone would take
    on the arrays' way, and no array; its block-diagonal tiles would be mostly zeros."""
    return group > 1 and group == channels == outputs and \
        ctx.target.runs_primitive("DepthwiseConv") and node.name not in ctx.array_layers


def _depthwise(ctx, plan, x):
    """A depthwise layer on the vector unit, taps [C, 1, KH, KW]: DepthwiseConv, or on an
    integer plan Quantize, QDepthwiseConv, Requantize and Dequantize on the image's rows
    (Requantize's scales are per channel, the rows' last axis), moved back to NCHW."""
    s, e = plan.scales, plan.emit
    taps, window = e["taps"], e["window"]
    if s is None:
        return ctx.npu.DepthwiseConv(
            x, ctx.initializer(np.ascontiguousarray(taps), "taps"),
            ctx.initializer(plan.bias, "bias") if plan.bias is not None else None,
            **window, _name="depthwise")
    n_, c, h, w = ctx.dims(x)
    rows = ctx.npu.DimTransform(x, perm=[0, 2, 3, 1], shape=[0, h, w, c], _name="to_rows")
    acc = ctx.npu.QDepthwiseConv(
        quantize_rows(ctx, plan, rows),
        ctx.initializer(np.ascontiguousarray(s.weights_q[0].T.reshape(taps.shape)), "taps_q"),
        ctx.initializer(s.bias_q, "bias_q") if s.bias_q is not None else None,
        **window, layout="nhwc", image_size=[h, w], acc_bits=plan.acc_bits,
        _name="qdepthwise", _dtype=ir.DataType.INT32 if plan.acc_bits == 32 else
        ir.DataType.INT64)
    return ctx.npu.DimTransform(read_out(ctx, plan, acc), perm=[0, 3, 1, 2],
                                shape=[0] + e["out"], _name="to_nchw")


def column_block(geo, plan, target):
    """Im2Col's channel_block for a layer (ops/im2col.py) under the packed plan, where a
    kernel has more than one tap: a dense kernel (one group) reads the columns tap by tap (all
    its channels one block), its kernel matrix's rows taken in that order filling every
    array's rows; a depthwise one (a channel per group) in block-diagonal tiles reads a
    tile's channels at a time (the first tile's count; the last tile may hold fewer), each
    tile's rows tap by tap. Else 0, channel by channel (a per-channel tile is one channel's
    taps, a grouped layer's tile its groups' rows)."""
    if plan != "packed" or geo.taps == 1:
        return 0
    if geo.groups == 1:
        return geo.channels
    if geo.channels == 1:
        tiles = plan_tiles(geo, plan, target.rows, target.cols)
        if all(t.groups is not None for t in tiles):
            return tiles[0].groups[1] - tiles[0].groups[0]
    return 0


@onnx_op("Conv")
class Conv:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("VMM"):
            return "the target has no VMM"
        w = ctx.constant(node.inputs[1])
        if w is not None and w.ndim == 5:
            return conv3d.check(ctx, node) or operand_reason(ctx, node)
        if w is not None and w.ndim not in (3, 4):
            return f"only 1-D, 2-D and 3-D convolutions lower (weight of rank {w.ndim})"
        return operand_reason(ctx, node)

    @classmethod
    def plan(cls, ctx, node):
        """The layer's plan: its tiles (or the vector unit, depthwise), and what its
        emission needs (`emit`: the window, Im2Col's column order, the output shape)."""
        if ctx.constant(node.inputs[1]).ndim == 5:
            return conv3d.plan(ctx, node)
        x = node.inputs[0]
        w = ctx.constant(node.inputs[1])
        b = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
            else None
        dims = ctx.dims(x)
        one_d = w.ndim == 3
        if one_d:                                   # [N, C, L] -> [N, C, 1, L]
            dims = [dims[0], dims[1], 1, dims[2]]
            w = w[:, :, None, :]
        n_, c, h, wd = dims
        m, cg, kh, kw = w.shape
        group = node.attributes.get_int("group", 1)
        a = node.attributes
        kernel = list(a.get_ints("kernel_shape", w.shape[2 + one_d:]))
        strides = list(a.get_ints("strides", [1] * len(kernel)))
        dilations = list(a.get_ints("dilations", [1] * len(kernel)))
        pads = resolve_pads(node, ctx.dims(x)[2:], kernel, strides, dilations)
        if one_d:
            kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
            pads = [0, pads[0], 0, pads[1]]
        pt, pl, pb, pr = pads
        oh = out_size(h, kh, strides[0], dilations[0], pt, pb)
        ow = out_size(wd, kw, strides[1], dilations[1], pl, pr)
        if min(oh, ow) < 1:     # (onnx's shape inference rounds such a size up to 1)
            raise ConversionError(
                f"lowering {node.name}: its {kh}x{kw} window (strides {strides[one_d:]}, "
                f"pads {pads}) does not fit the {h}x{wd} input: the output would be empty; "
                f"give the model a larger input")

        k = "x".join(map(str, kernel[-1:] if one_d else kernel))
        detail = (f"C={c} M={m} k={k} s={'x'.join(map(str, strides[one_d:]))} g={group}"
                  + (f" d={'x'.join(map(str, dilations[one_d:]))}" if max(dilations) > 1 else "")
                  + (f" -> {ow}" if one_d else f" -> {oh}x{ow}"))
        window = dict(kernel_shape=[kh, kw], strides=strides, pads=pads, dilations=dilations)
        emit = {"one_d": one_d, "window": window, "out": [m, oh, ow],
                "shape": [0, m, ow] if one_d else [0, m, oh, ow], "image": [c, h, wd]}
        vectors = (n_ if isinstance(n_, int) else 1) * oh * ow
        if runs_depthwise(ctx, node, group, c, m):
            plan = plan_vector_layer(node, w.reshape(len(w), -1).T, b, ctx.quantization)
            plan.vectors, plan.detail = vectors, detail + " on the vector unit"
            plan.emit = {**emit, "taps": w}
            return plan

        geo = Geometry(group, cg, kh * kw, m // group)
        geos = {p: geo for p in PLANS}
        block = column_block(geo, ctx.plan, ctx.target)
        matrix = w
        if block and group == 1:    # the kernel matrix's rows tap by tap, as Im2Col's columns
            geos["packed"] = Geometry(1, c * kh * kw, 1, m)
            matrix = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(m, -1).T
        # depthwise: each tile's rows tap by tap, as Im2Col's block of its channels
        by_tap = bool(block) and group > 1
        plan = plan_layer(node, geos[ctx.plan], matrix, b, ctx.target, ctx.plan,
                          ctx.quantization, by_tap=by_tap)
        plan.vectors, plan.detail = vectors, detail
        plan.other = geos[next(p for p in PLANS if p != ctx.plan)]
        plan.emit = {**emit, "im2col": dict(window, channel_block=block),
                     "stack": by_tap or ctx.plan == "per-channel"}
        return plan

    @classmethod
    def lower(cls, ctx, node):
        plan = ctx.plan_of(node)
        if plan.emit.get("conv3d"):
            return conv3d.lower(ctx, node, plan)
        e = plan.emit
        x = node.inputs[0]
        if e["one_d"]:                              # [N, C, L] -> [N, C, 1, L]
            c, _, length = e["image"]
            x = ctx.npu.DimTransform(x, perm=[0, 1, 2], shape=[0, c, 1, length],
                                     _name="to_2d")
        if plan.unit == "vector":
            y = _depthwise(ctx, plan, x)
        else:
            acc = emit_matrix(ctx, plan, x, im2col=e["im2col"], stack=e["stack"])
            y = ctx.npu.DimTransform(acc, perm=[0, 2, 1], shape=e["shape"], _name="to_nchw")
            return [y]
        if e["one_d"]:
            y = ctx.npu.DimTransform(y, perm=[0, 1, 2, 3], shape=e["shape"], _name="to_1d")
        return [y]
