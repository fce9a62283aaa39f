"""Reshape / Flatten / Squeeze / Unsqueeze / Transpose -> DimTransform."""
from ..registry import onnx_op


def reshape_spec(in_dims, out_dims):
    """DimTransform's `shape` turning a tensor of in_dims into out_dims, or None.

    Static dims are written out, a symbolic dim kept at its index becomes 0 (copy), and at
    most one other dim becomes -1 (inferred)."""
    spec, inferred = [], False
    for i, d in enumerate(out_dims):
        if isinstance(d, int):
            if d == 0:
                return None          # an empty dim would read as "copy"
            spec.append(d)
        elif d is not None and i < len(in_dims) and in_dims[i] == d:
            spec.append(0)
        elif not inferred:
            spec.append(-1)
            inferred = True
        else:
            return None
    return spec


@onnx_op("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
class Layout:
    @classmethod
    def _plan(cls, ctx, node):
        """(perm, shape) or a reason string."""
        if not ctx.target.runs_primitive("DimTransform"):
            return "the target has no DimTransform"
        x, y = node.inputs[0], node.outputs[0]
        in_dims, out_dims = ctx.dims(x), ctx.dims(y)
        if in_dims is None or out_dims is None:
            return "input or output shape unknown"
        if ctx.constant(x) is not None:
            return "constant input (folded, not run)"
        perm = list(range(len(in_dims)))
        if node.op_type == "Transpose":
            perm = list(node.attributes.get_ints("perm", perm[::-1]))
        moved = [in_dims[p] for p in perm]
        shape = reshape_spec(moved, out_dims)
        if shape is None:
            return f"output shape {out_dims} cannot be written from {moved}"
        return perm, shape

    @classmethod
    def check(cls, ctx, node):
        plan = cls._plan(ctx, node)
        return plan if isinstance(plan, str) else None

    @classmethod
    def lower(cls, ctx, node):
        perm, shape = cls._plan(ctx, node)
        return [ctx.npu.DimTransform(node.inputs[0], perm=perm, shape=shape,
                                     _name="dim_transform")]
