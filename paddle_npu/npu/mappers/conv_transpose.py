"""ConvTranspose (2-D, and 1-D as 2-D) -> DimTransform to rows + VMM tiles + Col2Im.

Each input pixel's channels times the kernel matrix [C/g, M/g*KH*KW] (per group) gives that
pixel's contribution to every output channel and kernel tap; Col2Im adds the contributions
where they land (and the bias). The arrays do exactly the layer's multiply-accumulates (no
zeros inserted between pixels), so the integer path is `emit_matrix`'s; an integer plan reads
its accumulator out as floats, as the taps are summed after it."""
import dataclasses

import numpy as np

from ..chip.plan import plan_layer
from ..chip.tiling import Geometry
from ..registry import onnx_op
from .conv import operand_reason
from .matrix import emit_matrix


def _attrs(node, spatial, kernel):
    """(strides, dilations, pads [begin..., end...], output_padding, output sizes), or a
    reason string."""
    a, n = node.attributes, len(kernel)
    strides = list(a.get_ints("strides", [1] * n))
    dilations = list(a.get_ints("dilations", [1] * n))
    out_pad = list(a.get_ints("output_padding", [0] * n))
    if a.get_string("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
        return f"auto_pad={a.get_string('auto_pad')} is not supported (give explicit pads)"
    if a.get_ints("output_shape", None):
        return "output_shape is not supported (give pads and output_padding)"
    pads = list(a.get_ints("pads", [0] * 2 * n))
    if a.get_string("auto_pad", "NOTSET") == "VALID":
        pads = [0] * 2 * n
    out = [(size - 1) * s + o + (k - 1) * d + 1 - p0 - p1 for size, s, o, k, d, p0, p1 in
           zip(spatial, strides, out_pad, kernel, dilations, pads[:n], pads[n:])]
    return strides, dilations, pads, out_pad, out


@onnx_op("ConvTranspose")
class ConvTranspose:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("VMM"):
            return "the target has no VMM"
        if not ctx.target.runs_primitive("Col2Im"):
            return "the target has no Col2Im to sum the kernel taps"
        reason = operand_reason(ctx, node)
        if reason:
            return reason
        w = ctx.constant(node.inputs[1])
        if w.ndim not in (3, 4):
            return f"only 1-D and 2-D transposed convolutions lower (weight of rank {w.ndim})"
        found = _attrs(node, ctx.dims(node.inputs[0])[2:], list(w.shape[2:]))
        if isinstance(found, str):
            return found
        if min(found[4]) < 1:
            return f"the output would be empty ({found[4]})"
        return None

    @classmethod
    def plan(cls, ctx, node):
        """The layer's plan: a 1x1 layer of M*KH*KW columns per group whose partial sums
        Col2Im adds (`emit`: its window and sizes)."""
        x = node.inputs[0]
        w = ctx.constant(node.inputs[1])
        b = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
            else None
        dims = ctx.dims(x)
        strides, dilations, pads, out_pad, out = _attrs(node, dims[2:], list(w.shape[2:]))
        one_d = w.ndim == 3
        if one_d:                                   # 1-D: a 2-D one of height 1
            w, dims = w[:, :, None, :], dims[:2] + [1] + dims[2:]
            strides, dilations, out = [1] + strides, [1] + dilations, [1] + out
            pads = [0, pads[0], 0, pads[1]]
        n_, c, h, wd = dims
        _, mg, kh, kw = w.shape
        group = node.attributes.get_int("group", 1)
        cg = c // group
        # [C, M/g, KH, KW] -> a Conv-like [M*KH*KW, C/g, 1, 1], group by group, so that the
        # kernel matrix of group g is [C/g, M/g*KH*KW], columns ordered (m, kh, kw)
        kernel = w.reshape(group, cg, mg * kh * kw).transpose(0, 2, 1)
        kernel = np.ascontiguousarray(kernel.reshape(group * mg * kh * kw, cg, 1, 1))
        geo = Geometry(group, cg, 1, mg * kh * kw)
        plan = plan_layer(node, geo, kernel, None, ctx.target, ctx.plan, ctx.quantization)
        if plan.scales is not None and not plan.scales.float_out:
            # the columns are partial sums: read them out as floats, Col2Im adds them
            plan.scales = dataclasses.replace(plan.scales, s_y=None, relu=None, mult=None,
                                              div=None, output=node.outputs[0].name)
        batch = n_ if isinstance(n_, int) else 1
        plan.vectors = batch * h * wd
        plan.extra_adds = plan.vectors * mg * group * kh * kw + \
            (0 if b is None else batch * mg * group * out[0] * out[1])
        plan.detail = (f"C={c} M={mg * group} k={kh}x{kw} s={'x'.join(map(str, strides))} "
                       f"g={group}"
                       + (f" d={'x'.join(map(str, dilations))}" if max(dilations) > 1 else "")
                       + (f" op={'x'.join(map(str, out_pad))}" if any(out_pad) else "")
                       + f" -> {out[0]}x{out[1]}")
        plan.emit = {"one_d": one_d, "image": [c, h, wd], "bias": b,
                     "col2im": dict(image_shape=[h, wd], output_shape=out[-2:],
                                    kernel_shape=[kh, kw], strides=strides,
                                    pads=[pads[0], pads[1]], dilations=dilations),
                     "shape": [0, mg * group, out[-1]]}
        return plan

    @classmethod
    def lower(cls, ctx, node):
        plan = ctx.plan_of(node)
        e = plan.emit
        c, h, wd = e["image"]
        rows = ctx.npu.DimTransform(node.inputs[0], perm=[0, 2, 1] if e["one_d"] else
                                    [0, 2, 3, 1], shape=[0, h * wd, c], _name="to_rows")
        acc = emit_matrix(ctx, plan, rows)
        b = e["bias"]
        bias = ctx.initializer(b.astype(plan.weights[0].dtype), "bias") if b is not None \
            else None
        y = ctx.npu.Col2Im(acc, bias, **e["col2im"], _name="col2im")
        if e["one_d"]:
            y = ctx.npu.DimTransform(y, perm=[0, 1, 2, 3], shape=e["shape"], _name="to_1d")
        return [y]
