"""MatMul of two activations (attention's Q K^T and P V) -> RuntimeVMM: the second operand
is written into the arrays at run time. Called by linear.py's MatMul lowering, which owns
MatMul and hands it the nodes whose second operand is not a constant. In an integer
lowering both operands are quantised on their calibrated per-tensor scales, QRuntimeVMM sums
them exactly and the accumulator is read out as floats (scale s_x * s_w); a tensor the
calibration table lacks keeps the float RuntimeVMM."""
import numpy as np
import onnx_ir as ir

from ..chip.plan import LayerPlan, UnitPlan, tensor_scale, unit_bits


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


def plan(ctx, node):
    """The layer's plan: no weights on the arrays, the second operand written into them for
    each matrix of the product (`written`: its rows and columns, the matrices, the row vectors
    read through each); in an integer lowering, both operands' scales (`unit_plan`)."""
    r, m = ctx.dims(node.inputs[1])[-2:]
    out = ctx.dims(node.outputs[0])
    matrices = 1
    for d in out[:-2]:
        matrices *= d if isinstance(d, int) else 1
    k = out[-2] if isinstance(out[-2], int) else 1
    tiles = -(-r // ctx.target.rows) * -(-m // ctx.target.cols)
    return LayerPlan(node.name, node.op_type, [], [], [], None, m, unit="written",
                     vectors=matrices * k, written=(r, m, matrices, k),
                     detail=f"K={r} N={m} on {tiles} array tile(s) written at run time: "
                            f"{matrices * r * m} cells per inference",
                     unit_plan=_unit_plan(ctx, node))


def _unit_plan(ctx, node):
    """The integer form's bits and scales, or None for the float form (a float lowering, or
    an operand the calibration table lacks)."""
    bits = unit_bits(node, ctx.quantization)
    if bits is None:
        return None
    x, w = node.inputs[:2]
    s_x = tensor_scale(ctx.quantization, x.name, bits)
    s_w = tensor_scale(ctx.quantization, w.name, bits)
    if s_x is None or s_w is None:
        return None
    return UnitPlan(node.name, "RuntimeVMM", bits, x.name, node.outputs[0].name, s_x, s_w=s_w)


def lower(ctx, node, plan):
    x, w = node.inputs[:2]
    q = plan.unit_plan
    if q is None:
        return [ctx.npu.RuntimeVMM(x, w, _name="runtime_vmm")]
    int_type = ir.DataType.INT8 if q.bits == 8 else ir.DataType.INT16
    xq, wq = (ctx.npu.Quantize(v, ctx.initializer(s, f"s_{part}"), bits=q.bits,
                               _name=f"quantize_{part}", _dtype=int_type)
              for v, s, part in ((x, q.s_x, "x"), (w, q.s_w, "w")))
    acc = ctx.npu.QRuntimeVMM(xq, wq, acc_bits=32 if q.bits == 8 else 64, _name="qruntime_vmm",
                              _dtype=ir.DataType.INT32 if q.bits == 8 else ir.DataType.INT64)
    scale = np.float32(np.float64(q.s_x) * np.float64(q.s_w))
    return [ctx.npu.Dequantize(acc, ctx.initializer(scale, "s_acc"), _name="dequantize",
                               _dtype=ir.DataType.FLOAT)]
