"""Unary activations -> Lut, the lookup-table unit (ops/lut.py)."""
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
    def lower(cls, ctx, node):
        function = FUNCTION_OF[node.op_type]
        extra = {}
        if function == "hardsigmoid":
            extra = {"alpha": node.attributes.get_float("alpha", 0.2),
                     "beta": node.attributes.get_float("beta", 0.5)}
        return [ctx.npu.Lut(node.inputs[0], function=function, **extra, _name="lut")]
