"""InstanceNormalization (and so stage 1's GroupNorm) -> InstanceNorm on the vector unit."""
from ..registry import onnx_op


@onnx_op("InstanceNormalization")
class InstanceNormalization:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("InstanceNorm"):
            return "the target has no InstanceNorm"
        x = node.inputs[0]
        if x.dtype is None or not x.dtype.is_floating_point():
            return f"input type {x.dtype} is not floating point"
        if ctx.dims(x) is None or len(ctx.dims(x)) < 3:
            return "the input must have a known rank of 3 or more"
        return None

    @classmethod
    def lower(cls, ctx, node):
        return [ctx.npu.InstanceNorm(*node.inputs[:3],
                                     epsilon=node.attributes.get_float("epsilon", 1e-5),
                                     _name="instance_norm")]
