"""Slice / Split / Concat, and Gather at constant positions -> the moves Crop and Join
(ops/moves.py); Gather from a constant table -> TableRead (ops/table_read.py)."""
import numpy as np

from ..registry import onnx_op
from .layout import reshape_spec


def _axis(node, rank, default=0):
    axis = node.attributes.get_int("axis", default)
    return axis + rank if axis < 0 else axis


def _moves_check(ctx, node, primitive):
    """Why the node's input cannot be moved by `primitive`, or None. A target whose vector
    unit does not list Slice / Split leaves them to the CPU; a Gather at constant positions
    is a crop wherever the target has Crop."""
    return ctx.unit_refusal(node, primitive, listed=node.op_type != "Gather")


def _refusal(ctx, node, primitive, plan):
    """Why the node cannot become `primitive`: _moves_check's reason, or the reason string
    `plan(ctx, node)` returns instead of a plan; None when it can."""
    reason = _moves_check(ctx, node, primitive)
    if reason is None:
        found = plan(ctx, node)
        reason = found if isinstance(found, str) else None
    return reason


def _crop(ctx, x, windows, name):
    """x cropped to {axis: (start, end, step)} (already within the dims)."""
    axes = sorted(windows)
    return ctx.npu.Crop(x, starts=[windows[a][0] for a in axes],
                        ends=[windows[a][1] for a in axes], axes=axes,
                        steps=[windows[a][2] for a in axes], _name=name)


def _slice_plan(ctx, node):
    """{axis: (start, end, step)} of a Slice with constant operands, or a reason."""
    dims = ctx.dims(node.inputs[0])
    operands = (list(node.inputs[1:5]) + [None] * 4)[:4]     # axes and steps optional
    parts = [ctx.constant(v) if v is not None else None for v in operands]
    if parts[0] is None or parts[1] is None or any(
            v is not None and p is None for v, p in zip(operands[2:], parts[2:])):
        return "starts, ends, axes and steps must be constants"
    starts, ends = parts[0].tolist(), parts[1].tolist()
    axes = parts[2].tolist() if parts[2] is not None else list(range(len(starts)))
    steps = parts[3].tolist() if parts[3] is not None else [1] * len(starts)
    windows = {}
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = a + len(dims) if a < 0 else a
        if not isinstance(dims[a], int):
            return f"axis {a} has no fixed size"
        if k < 1:
            return "a reversed slice (step below 1) is not a crop"
        windows[a] = slice(s, e, k).indices(dims[a])
    return windows


@onnx_op("Slice")
class Slice:
    @classmethod
    def check(cls, ctx, node):
        return _refusal(ctx, node, "Crop", _slice_plan)

    @classmethod
    def lower(cls, ctx, node):
        return [_crop(ctx, node.inputs[0], _slice_plan(ctx, node), "crop")]


def _split_sizes(ctx, node):
    """The sizes Split cuts along its axis, or a reason."""
    dims = ctx.dims(node.inputs[0])
    axis = _axis(node, len(dims))
    if not isinstance(dims[axis], int):
        return f"axis {axis} has no fixed size"
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        sizes = ctx.constant(node.inputs[1])
        if sizes is None:
            return "the split sizes are not constants"
        return [int(s) for s in sizes]
    if node.attributes.get("split") is not None:
        return list(node.attributes.get_ints("split"))
    n = len(node.outputs)
    each = -(-dims[axis] // n)              # equal parts, the last one smaller
    return [min(each, dims[axis] - i * each) for i in range(n)]


@onnx_op("Split")
class Split:
    @classmethod
    def check(cls, ctx, node):
        return _refusal(ctx, node, "Crop", _split_sizes)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        axis = _axis(node, len(ctx.dims(x)))
        out, start = [], 0
        for k, size in enumerate(_split_sizes(ctx, node)):
            out.append(_crop(ctx, x, {axis: (start, start + size, 1)}, f"crop_{k}"))
            start += size
        return out


@onnx_op("Concat")
class Concat:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.npu_runs("Concat"):
            return "the target's vector unit does not run Concat"    # left to the CPU
        if not ctx.target.runs_primitive("Join"):
            return "the target has no Join"
        if all(ctx.constant(v) is not None for v in node.inputs):
            return "constant input (folded, not run)"
        if any(ctx.dims(v) is None for v in node.inputs):
            return "an input's rank is not known"
        return None

    @classmethod
    def lower(cls, ctx, node):
        axis = _axis(node, len(ctx.dims(node.inputs[0])))
        return [ctx.npu.Join(*node.inputs, axis=axis, _name="join")]


def _positions(ctx, node):
    """Gather of an activation at constant positions as (axis, (start, end, step), drop the
    axis?), or a reason."""
    dims = ctx.dims(node.inputs[0])
    axis = _axis(node, len(dims))
    if not isinstance(dims[axis], int):
        return f"axis {axis} has no fixed size"
    index = ctx.constant(node.inputs[1]).astype(np.int64)
    if index.ndim > 1 or index.size == 0:
        return "the constant positions are not one index or a list of them"
    index = np.where(index < 0, index + dims[axis], index)
    flat = index.reshape(-1)
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if step < 1 or np.any(flat != flat[0] + step * np.arange(flat.size)):
        return "the constant positions are not evenly spaced and increasing (not a crop)"
    out = ctx.dims(node.outputs[0])
    if index.ndim == 0 and (out is None or reshape_spec(dims, out) is None):
        return "the output shape is not known"
    return axis, (int(flat[0]), int(flat[-1]) + 1, step), index.ndim == 0


def _picks(ctx, node):
    """Gather of a float activation at a list of constant positions in any order (the taps
    of a bilinear resize written out, as stage 1 does for Paddle's align_corners arithmetic)
    as (axis, positions) for AxisResample's pick, or None."""
    x, index = node.inputs[0], ctx.constant(node.inputs[1])
    dims = ctx.dims(x)
    if not ctx.target.runs_primitive("AxisResample") or x.dtype is None or \
            not x.dtype.is_floating_point() or dims is None or index is None or \
            index.ndim != 1 or index.size == 0:
        return None
    axis = _axis(node, len(dims))
    if not isinstance(dims[axis], int):
        return None
    index = np.where(index < 0, index + dims[axis], index).astype(np.int64)
    if index.min() < 0 or index.max() >= dims[axis]:
        return None
    return axis, [int(i) for i in index]


@onnx_op("Gather")
class Gather:
    """A constant table read at run-time indices (an embedding) -> TableRead; an
    activation read at constant positions -> Crop (+ DimTransform dropping a scalar's axis),
    or, at positions in any order, AxisResample picking them."""

    @classmethod
    def check(cls, ctx, node):
        table, index = ctx.constant(node.inputs[0]), ctx.constant(node.inputs[1])
        if table is not None and index is not None:
            return "constant input (folded, not run)"
        if table is not None:
            if not ctx.target.runs_primitive("TableRead"):
                return "the target has no TableRead"
            if _axis(node, table.ndim) != 0:
                return "a constant table is read by rows (axis 0) only"
            return None
        if index is None:
            return "both the data and the indices are computed at run time"
        if not ctx.target.runs_primitive("DimTransform"):
            return "the target has no DimTransform"
        reason = _moves_check(ctx, node, "Crop")
        found = _positions(ctx, node) if reason is None else None
        if isinstance(found, str) and not _picks(ctx, node):    # no crop, and no pick either
            reason = found
        return reason

    @classmethod
    def lower(cls, ctx, node):
        data, index = node.inputs[:2]
        if ctx.constant(data) is not None:
            return [ctx.npu.TableRead(data, index, _name="table_read")]
        found = _positions(ctx, node)
        if isinstance(found, str):
            axis, positions = _picks(ctx, node)
            return [ctx.npu.AxisResample(data, axis=axis, indices=positions, _name="pick")]
        axis, window, scalar = found
        y = _crop(ctx, data, {axis: window}, "crop")
        if scalar:               # one position: its axis goes
            out = ctx.dims(node.outputs[0])
            y = ctx.npu.DimTransform(y, perm=list(range(len(ctx.dims(y)))),
                                     shape=reshape_spec(ctx.dims(y), out), _name="drop_axis")
        return [y]
