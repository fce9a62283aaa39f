"""MatMul of two activations (attention's Q K^T and P V) -> RuntimeVMM: the second operand
is written into the arrays at run time. Called by linear.py's MatMul lowering, which owns
MatMul and hands it the nodes whose second operand is not a constant."""
from ..report import LayerReport
from ..tiling import PlanCost


def check(ctx, node):
    """Why this MatMul cannot run on arrays written at run time, or None."""
    if not ctx.target.runs_primitive("RuntimeVMM"):
        return "the weight (second operand) is not a constant and the target's arrays " \
               "cannot be written at run time (RuntimeVMM)"
    a, b = (ctx.dims(v) for v in node.inputs[:2])
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return "both operands must have a known rank of 2 or more"
    if not all(isinstance(d, int) for d in b[-2:]):
        return "the written matrix's sizes are not fixed"
    return None


def lower(ctx, node):
    x, w = node.inputs[:2]
    y = ctx.npu.RuntimeVMM(x, w, _name="runtime_vmm")
    target = ctx.target
    r, m = ctx.dims(w)[-2:]
    out = ctx.dims(y)
    matrices = 1
    for d in out[:-2]:
        matrices *= d if isinstance(d, int) else 1
    k = out[-2] if isinstance(out[-2], int) else 1
    tiles = -(-r // target.rows) * -(-m // target.cols)
    # no weights stay on arrays (arrays, cells, weights 0): the tiles are written per matrix
    cost = PlanCost("written", 0, 0, 0, matrices * k, matrices * k * tiles,
                    matrices * k * r * m, 0, 0)
    ctx.record(LayerReport(node.name, node.op_type,
                           f"K={r} N={m} on {tiles} array tile(s) written at run time: "
                           f"{matrices * r * m} cells per inference", cost))
    return [y]
