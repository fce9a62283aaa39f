"""Comparisons, logical and bitwise ops, where, nonzero."""
from .common import broadcast_y, cast, var_dtype as _dtype
from .registry import paddle_op


def _is_float(dt):
    return dt is not None and (dt.startswith("float") or dt == "bfloat16")


def _operands(ctx, op):
    """X and Y with Y lined up by Paddle's `axis` and cast to X's dtype when they differ."""
    x, y = ctx.input(op, "X"), ctx.input(op, "Y")
    y = broadcast_y(ctx, op, y, ctx.rank(op, "X"), ctx.rank(op, "Y"))
    dx, dy = ctx.dtype(op, "X"), ctx.dtype(op, "Y")
    if dx and dy and dx != dy:
        y = cast(ctx, y, dx)
    return x, y


_COMPARE = ("equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal")


@paddle_op(*_COMPARE)
class Compare:
    @classmethod
    def required_opset(cls, op):
        dt = _dtype(op, "X")
        if op.type in ("equal", "not_equal"):
            return 11 if _is_float(dt) else 7              # Equal on floats: opset 11
        if _is_float(dt):
            return 11 if op.type.endswith("_equal") else 7  # <= / >=: Less or Equal
        return 9                                            # Less/Greater on ints: opset 9

    @classmethod
    def version_7(cls, ctx, op):
        x, y = _operands(ctx, op)
        if ctx.dtype(op, "X") == "bool" and op.type not in ("equal", "not_equal"):
            x, y = cast(ctx, x, "int32"), cast(ctx, y, "int32")
        t = op.type
        if t == "equal":
            out = ctx.op.Equal(x, y)
        elif t == "not_equal":
            out = ctx.op.Not(ctx.op.Equal(x, y))
        elif t == "less_than":
            out = ctx.op.Less(x, y)
        elif t == "greater_than":
            out = ctx.op.Greater(x, y)
        elif ctx.opset >= 12:
            out = (ctx.op.LessOrEqual if t == "less_equal" else ctx.op.GreaterOrEqual)(x, y)
        else:   # Or(Less, Equal) keeps NaN false, unlike Not(Greater)
            strict = ctx.op.Less(x, y) if t == "less_equal" else ctx.op.Greater(x, y)
            out = ctx.op.Or(strict, ctx.op.Equal(x, y))
        ctx.set_output(op, "Out", out)


_LOGICAL = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}


def _as_bool(ctx, op, slot):
    v = ctx.input(op, slot)
    return v if ctx.dtype(op, slot) == "bool" else cast(ctx, v, "bool")


@paddle_op(*_LOGICAL, "logical_not")
class Logical:
    """Non-bool operands count as true when non-zero, as in Paddle."""

    @classmethod
    def version_7(cls, ctx, op):
        x = _as_bool(ctx, op, "X")
        if op.type == "logical_not":
            return ctx.set_output(op, "Out", ctx.op.Not(x))
        y = broadcast_y(ctx, op, _as_bool(ctx, op, "Y"), ctx.rank(op, "X"), ctx.rank(op, "Y"))
        ctx.set_output(op, "Out", getattr(ctx.op, _LOGICAL[op.type])(x, y))


_BITWISE = {"bitwise_and": ("And", "BitwiseAnd"), "bitwise_or": ("Or", "BitwiseOr"),
            "bitwise_xor": ("Xor", "BitwiseXor"), "bitwise_not": ("Not", "BitwiseNot")}


@paddle_op(*_BITWISE)
class Bitwise:
    """Bool operands use the logical ops (opset 7); integers need ONNX's Bitwise* (18)."""

    @classmethod
    def required_opset(cls, op):
        return 7 if _dtype(op, "X") == "bool" else 18

    @classmethod
    def version_7(cls, ctx, op):
        logical, bitwise = _BITWISE[op.type]
        fn = getattr(ctx.op, logical if ctx.dtype(op, "X") == "bool" else bitwise)
        if op.type == "bitwise_not":
            return ctx.set_output(op, "Out", fn(ctx.input(op, "X")))
        ctx.set_output(op, "Out", fn(*_operands(ctx, op)))


@paddle_op("where")
class Where:
    @classmethod
    def version_9(cls, ctx, op):
        cond = ctx.input(op, "Condition")
        if ctx.dtype(op, "Condition") != "bool":
            cond = cast(ctx, cond, "bool")
        x, y = ctx.input(op, "X"), ctx.input(op, "Y")
        dx, dy = ctx.dtype(op, "X"), ctx.dtype(op, "Y")
        if dx and dy and dx != dy:
            y = cast(ctx, y, dx)
        ctx.set_output(op, "Out", ctx.op.Where(cond, x, y))


@paddle_op("where_index")
class WhereIndex:
    """paddle.nonzero: [N, rank] int64 indices (ONNX NonZero gives [rank, N])."""

    @classmethod
    def version_9(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Transpose(ctx.op.NonZero(ctx.input(op, "Condition")),
                                                   perm=[1, 0]))


@paddle_op("isnan_v2", "isinf_v2", "isfinite_v2")
class IsNanInf:
    """Element-wise tests; integers are never NaN or infinite. IsInf takes no float16 before
    opset 20: it is tested in float32 (every float16 value is exact there)."""

    @classmethod
    def required_opset(cls, op):
        return 9 if op.type == "isnan_v2" else 10

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        dt = ctx.dtype(op, "X")
        if not _is_float(dt):
            same = ctx.op.Equal(x, x)                     # all true, X's shape
            return ctx.set_output(op, "Out", same if op.type == "isfinite_v2" else ctx.op.Not(same))
        if dt in ("float16", "bfloat16") and ctx.opset < 20:
            x = cast(ctx, x, "float32")
        if op.type == "isnan_v2":
            return ctx.set_output(op, "Out", ctx.op.IsNaN(x))
        if op.type == "isinf_v2":
            return ctx.set_output(op, "Out", ctx.op.IsInf(x))
        ctx.set_output(op, "Out", ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsInf(x))))
