"""Conv with a 5-D weight (Conv3D) -> Im2Col3D + VMM tiles + AddInTile + DimTransform. Called
by conv.py's Conv lowering, which owns Conv and hands it the 3-D convolutions."""
from ..chip.plan import plan_layer
from ..chip.tiling import Geometry
from ..ops.im2col import out_size, resolve_pads
from .matrix import emit_matrix


def _geometry(ctx, node):
    """(kernel, strides, dilations, pads, output sizes) of a Conv3D."""
    a, w = node.attributes, ctx.constant(node.inputs[1])
    spatial = ctx.dims(node.inputs[0])[2:]
    kernel = list(a.get_ints("kernel_shape", w.shape[2:]))
    strides = list(a.get_ints("strides", [1, 1, 1]))
    dilations = list(a.get_ints("dilations", [1, 1, 1]))
    pads = resolve_pads(node, spatial, kernel, strides, dilations)
    outs = [out_size(*args) for args in zip(spatial, kernel, strides, dilations, pads[:3],
                                            pads[3:])]
    return kernel, strides, dilations, pads, outs


def check(ctx, node):
    """Why the target cannot run this 3-D convolution, or None (its operands are conv.py's)."""
    if not ctx.target.runs_primitive("Im2Col3D"):
        return "the target has no Im2Col3D for 3-D convolutions"
    return None


def plan(ctx, node):
    """The layer's plan (its tiles; `emit`: the window and the output sizes)."""
    x = node.inputs[0]
    w = ctx.constant(node.inputs[1])
    b = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
        else None
    n_, c = ctx.dims(x)[:2]
    m, cg = w.shape[:2]
    group = node.attributes.get_int("group", 1)
    kernel, strides, dilations, pads, outs = _geometry(ctx, node)
    geo = Geometry(group, cg, kernel[0] * kernel[1] * kernel[2], m // group)
    layer = plan_layer(node, geo, w, b, ctx.target, ctx.plan, ctx.quantization)
    layer.vectors = (n_ if isinstance(n_, int) else 1) * outs[0] * outs[1] * outs[2]
    layer.detail = (f"C={c} M={m} k={'x'.join(map(str, kernel))} "
                    f"s={'x'.join(map(str, strides))} g={group} -> {'x'.join(map(str, outs))}")
    layer.emit = {"conv3d": True, "window": dict(kernel_shape=kernel, strides=strides,
                                                 pads=pads, dilations=dilations),
                  "shape": [0, m] + outs}
    return layer


def lower(ctx, node, plan):
    rows = ctx.npu.Im2Col3D(node.inputs[0], **plan.emit["window"], _name="im2col3d")
    acc = emit_matrix(ctx, plan, rows)
    return [ctx.npu.DimTransform(acc, perm=[0, 2, 1], shape=plan.emit["shape"],
                                 _name="to_ncdhw")]
