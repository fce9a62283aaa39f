"""Conv with a 5-D weight (Conv3D) -> Im2Col3D + VMM tiles + AddInTile + DimTransform. Called
by conv.py's Conv lowering, which owns Conv and hands it the 3-D convolutions."""
from ..ops.im2col import out_size, resolve_pads
from ..report import LayerReport
from ..tiling import Geometry, plan_cost
from .matrix import emit_matrix, plan_matrix


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


def lower(ctx, node):
    x = node.inputs[0]
    w = ctx.constant(node.inputs[1])
    b = ctx.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
        else None
    n_, c = ctx.dims(x)[:2]
    m, cg = w.shape[:2]
    group = node.attributes.get_int("group", 1)
    kernel, strides, dilations, pads, outs = _geometry(ctx, node)
    geo = Geometry(group, cg, kernel[0] * kernel[1] * kernel[2], m // group)
    plan = plan_matrix(ctx, node, geo, w, b, ctx.plan)
    rows = ctx.npu.Im2Col3D(x, kernel_shape=kernel, strides=strides, pads=pads,
                            dilations=dilations, _name="im2col3d")
    acc = emit_matrix(ctx, plan, rows)
    y = ctx.npu.DimTransform(acc, perm=[0, 2, 1], shape=[0, m] + outs, _name="to_ncdhw")
    vectors = (n_ if isinstance(n_, int) else 1) * outs[0] * outs[1] * outs[2]
    t = ctx.target
    cost = plan_cost(plan.tiles, ctx.plan, t.rows, t.cols, vectors, b is not None, t.weight_bits)
    ctx.record(LayerReport(node.name, node.op_type,
                           f"C={c} M={m} k={'x'.join(map(str, kernel))} "
                           f"s={'x'.join(map(str, strides))} g={group} -> "
                           f"{'x'.join(map(str, outs))}", cost))
    return [y]
