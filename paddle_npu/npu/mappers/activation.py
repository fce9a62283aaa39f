"""Unary activations -> Lut, the lookup-table unit (ops/lut.py); in an integer lowering
Quantize -> QLut (a 2^bits-entry table from the input's grid to the output's) -> Dequantize,
when the calibration table has both tensors and the table can stand for the function on the
calibrated inputs (else the float Lut; ops/lut.coarse_step)."""
import onnx_ir as ir

from ..chip.plan import UnitPlan, tensor_scale, unit_bits
from ..ops.lut import coarse_share, coarse_step, lut_table
from ..ops.quant import qrange
from ..registry import onnx_op

# ONNX op -> the Lut function computing it
FUNCTION_OF = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
               "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Erf": "erf",
               "Softplus": "softplus", "HardSwish": "hardswish", "HardSigmoid": "hardsigmoid",
               "Mish": "mish", "Gelu": "gelu"}


@onnx_op(*FUNCTION_OF)
class Activation:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("Lut"):
            return "the target has no lookup-table unit (Lut)"
        if ctx.constant(node.inputs[0]) is not None:
            return "constant input (folded, not run)"
        x = node.inputs[0]
        if x.dtype is None or not x.dtype.is_floating_point():
            return f"input type {x.dtype} is not floating point"
        if node.op_type == "Gelu" and node.attributes.get_string("approximate", "none") != "none":
            return "Gelu's tanh approximation has no table"
        return None

    @classmethod
    def plan(cls, ctx, node):
        """In an integer lowering, the table's bits and scales (plan.UnitPlan) when the
        calibration table has both tensors, with why it stays float where a table cannot
        stand for the function on the calibrated inputs; else None (a float Lut)."""
        bits = unit_bits(node, ctx.quantization)
        if bits is None:
            return None
        x, y = node.inputs[0], node.outputs[0]
        s_x = tensor_scale(ctx.quantization, x.name, bits)
        s_y = tensor_scale(ctx.quantization, y.name, bits)
        if s_x is None or s_y is None:
            return None
        function = FUNCTION_OF[node.op_type]
        entry = ctx.quantization.table["tensors"][x.name]
        limit = float(s_x) * qrange(bits)[1]      # (a table without min / max)
        lo, hi = entry.get("min", -limit), entry.get("max", limit)
        at = coarse_step(function, lo, hi, float(s_x), float(s_y), bits, **_extra(node))
        why = None if at is None else \
            f"one {bits}-bit input step from {at:.3g} moves {function} by more than " \
            f"{coarse_share(bits):.2%} of its output range " \
            f"(inputs calibrated to [{lo:.3g}, {hi:.3g}])"
        return UnitPlan(node.name, "Lut", bits, x.name, y.name, s_x, s_y, function=function,
                        float_why=why)

    @classmethod
    def lower(cls, ctx, node):
        function = FUNCTION_OF[node.op_type]
        x = node.inputs[0]
        plan = ctx.plans.get(node.name)
        if plan is None or plan.float_why is not None:
            return [ctx.npu.Lut(x, function=function, **_extra(node), _name="lut")]
        bits = plan.bits
        int_type = ir.DataType.INT8 if bits == 8 else ir.DataType.INT16
        table = lut_table(function, plan.s_x, plan.s_y, bits, **_extra(node))
        q = ctx.npu.Quantize(x, ctx.initializer(plan.s_x, "s_x"), bits=bits,
                             _name="quantize", _dtype=int_type)
        yq = ctx.npu.QLut(q, ctx.initializer(table, "table"), bits=bits, _name="qlut")
        return [ctx.npu.Dequantize(yq, ctx.initializer(plan.s_y, "s_y"), _name="dequantize",
                                   _dtype=ir.DataType.FLOAT)]


def _extra(node):
    """The Lut attributes besides the function: HardSigmoid's alpha and beta."""
    if FUNCTION_OF[node.op_type] != "hardsigmoid":
        return {}
    return {"alpha": node.attributes.get_float("alpha", 0.2),
            "beta": node.attributes.get_float("beta", 0.5)}
