"""MatMul / Gemm with a constant weight -> VMM tiles (+ AddInTile for tiles and bias)."""
import numpy as np

from ..chip.plan import plan_layer
from ..chip.tiling import Geometry
from ..registry import onnx_op
from . import runtime_matmul
from .layout import reshape_spec
from .matrix import emit_matrix


def _plan(ctx, node, x_dims, weight, bias):
    """The plan of x [..., K] times a constant [K, N] (+ bias [N]) on array tiles."""
    k, n = weight.shape
    plan = plan_layer(node, Geometry(1, k, 1, n), weight, bias, ctx.target, "packed",
                      ctx.quantization)
    plan.vectors, plan.detail = _vectors(x_dims), f"K={k} N={n}"
    return plan


def _vectors(dims):
    """Row vectors per inference: every leading dim, symbolic ones counted as 1."""
    out = 1
    for d in dims[:-1]:
        out *= d if isinstance(d, int) else 1
    return out


def _constant_operand(ctx, node):
    return any(ctx.constant(v) is not None for v in node.inputs[:2])


def _common_check(ctx, node, a, w):
    if not ctx.target.runs_primitive("VMM"):
        return "the target has no VMM"
    if w is None:
        return "the weight (second operand) is not a constant"
    if w.ndim not in (1, 2):
        return f"the constant weight has rank {w.ndim}, not 1 or 2"
    if w.dtype.kind != "f":
        return f"weight dtype {w.dtype} is not floating point"
    dims = ctx.dims(a)
    if dims is None or len(dims) < 2:
        return "the activation must have a known rank of 2 or more"
    if ctx.constant(a) is not None:
        return "both operands are constant"
    return None


def _constant_first(ctx, node):
    """A constant [M, K] times an activation [..., K, N] (TPS grids, spatial mixing)."""
    return ctx.constant(node.inputs[0]) is not None and ctx.constant(node.inputs[1]) is None


def _swap_last_two(ctx, x, name):
    rank = len(ctx.dims(x))
    return ctx.npu.DimTransform(x, perm=list(range(rank - 2)) + [rank - 1, rank - 2],
                                shape=[0] * rank, _name=name)


@onnx_op("MatMul")
class MatMul:
    @classmethod
    def check(cls, ctx, node):
        if not _constant_operand(ctx, node):        # two activations: runtime_matmul.py
            return runtime_matmul.check(ctx, node)
        if _constant_first(ctx, node):
            # A @ B = (B^T A^T)^T: the constant becomes the weight of the transposed product
            a = ctx.constant(node.inputs[0])
            reason = _common_check(ctx, node, node.inputs[1], a.T if a.ndim == 2 else a)
            return reason or ("the weight's operand must have a known rank of 2 or more"
                              if len(ctx.dims(node.inputs[1])) < 2 else None)
        return _common_check(ctx, node, node.inputs[0], ctx.constant(node.inputs[1]))

    @classmethod
    def plan(cls, ctx, node):
        if not _constant_operand(ctx, node):
            return runtime_matmul.plan(ctx, node)
        if _constant_first(ctx, node):
            dims = ctx.dims(node.inputs[1])
            weight = ctx.constant(node.inputs[0]).T      # tiles are views of it
            return _plan(ctx, node, dims[:-2] + [dims[-1], dims[-2]], weight, None)
        w = ctx.constant(node.inputs[1])
        return _plan(ctx, node, ctx.dims(node.inputs[0]), w if w.ndim == 2 else w[:, None],
                     None)

    @classmethod
    def lower(cls, ctx, node):
        plan = ctx.plan_of(node)
        if plan.unit == "written":
            return runtime_matmul.lower(ctx, node, plan)
        if _constant_first(ctx, node):
            xt = _swap_last_two(ctx, node.inputs[1], "transpose_b")
            return [_swap_last_two(ctx, emit_matrix(ctx, plan, xt), "transpose_y")]
        x, w = node.inputs[0], ctx.constant(node.inputs[1])
        if w.ndim == 2:
            return [emit_matrix(ctx, plan, x)]
        y = emit_matrix(ctx, plan, x)                   # [..., K] @ [K]: one column
        dims = ctx.dims(y)
        return [ctx.npu.DimTransform(y, perm=list(range(len(dims))),
                                     shape=reshape_spec(dims, dims[:-1]), _name="drop_column")]


def _gemm_bias(c, beta, n):
    """beta * C as a bias row [N], or None if C is not one (a full [M, N] matrix)."""
    c = np.asarray(c, dtype=np.float64) * beta
    if c.size == 1:
        return np.full(n, c.reshape(()))
    if c.shape in ((n,), (1, n)):
        return c.reshape(n)
    return None


@onnx_op("Gemm")
class Gemm:
    @classmethod
    def check(cls, ctx, node):
        reason = _common_check(ctx, node, node.inputs[0], ctx.constant(node.inputs[1]))
        if reason:
            return reason
        if len(ctx.dims(node.inputs[0])) != 2:
            return "Gemm's A must be 2-D"
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = ctx.constant(node.inputs[2])
            if c is None:
                return "C is not a constant"
            trans_b = node.attributes.get_int("transB", 0)
            n = ctx.constant(node.inputs[1]).shape[0 if trans_b else 1]
            if _gemm_bias(c, node.attributes.get_float("beta", 1.0), n) is None:
                return f"C of shape {list(c.shape)} is not a bias row"
        return None

    @classmethod
    def plan(cls, ctx, node):
        a = node.attributes
        w = ctx.constant(node.inputs[1])
        if a.get_int("transB", 0):
            w = w.T
        alpha = a.get_float("alpha", 1.0)
        if alpha != 1.0:
            w = (w.astype(np.float64) * alpha).astype(w.dtype)
        bias = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            bias = _gemm_bias(ctx.constant(node.inputs[2]), a.get_float("beta", 1.0), w.shape[1])
        dims = ctx.dims(node.inputs[0])
        return _plan(ctx, node, dims[::-1] if a.get_int("transA", 0) else dims, w,
                     bias)                            # (w.T: tiles are views of it)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        if node.attributes.get_int("transA", 0):
            x = ctx.npu.DimTransform(x, perm=[1, 0], shape=[0, 0], _name="transpose_a")
        return [emit_matrix(ctx, ctx.plan_of(node), x)]
