"""MatMul of two activations (attention's Q K^T and P V) -> RuntimeVMM: the second operand
is written into the arrays at run time. Called by linear.py's MatMul lowering, which owns
MatMul and hands it the nodes whose second operand is not a constant. In an integer
lowering both operands are quantised on their calibrated per-tensor scales, QRuntimeVMM sums
them exactly and the accumulator is read out as floats (scale s_x * s_w); a tensor the
calibration table lacks keeps the float RuntimeVMM."""
import numpy as np
import onnx_ir as ir

from ..plan import LayerPlan, tensor_scale, unit_bits, unit_record


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
    read through each)."""
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
                            f"{matrices * r * m} cells per inference")


def lower(ctx, node, plan):
    x, w = node.inputs[:2]
    return [_integer(ctx, node, x, w) or ctx.npu.RuntimeVMM(x, w, _name="runtime_vmm")]


def _integer(ctx, node, x, w):
    """The integer form's output (floats), or None for the float form."""
    bits = unit_bits(node, ctx.quantization)
    if bits is None:
        return None
    s_x = tensor_scale(ctx.quantization, x.name, bits)
    s_w = tensor_scale(ctx.quantization, w.name, bits)
    if s_x is None or s_w is None:
        return None
    int_type = ir.DataType.INT8 if bits == 8 else ir.DataType.INT16
    xq, wq = (ctx.npu.Quantize(v, ctx.initializer(s, f"s_{part}"), bits=bits,
                               _name=f"quantize_{part}", _dtype=int_type)
              for v, s, part in ((x, s_x, "x"), (w, s_w, "w")))
    acc = ctx.npu.QRuntimeVMM(xq, wq, acc_bits=32 if bits == 8 else 64, _name="qruntime_vmm",
                              _dtype=ir.DataType.INT32 if bits == 8 else ir.DataType.INT64)
    scale = np.float32(np.float64(s_x) * np.float64(s_w))
    ctx.unit_records.append(unit_record(node, "RuntimeVMM", bits, x.name, node.outputs[0].name,
                                        s_x, None))
    return ctx.npu.Dequantize(acc, ctx.initializer(scale, "s_acc"), _name="dequantize",
                              _dtype=ir.DataType.FLOAT)
