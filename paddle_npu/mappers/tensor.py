"""Shape manipulation, indexing, slicing, joining and splitting, casting, constants."""
import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from ..exporter import onnx_dtype
from .common import (as_int64, cast, const_i64, dtype_attr, int64_vector, ints, reduce, reshape,
                     slice_, split, squeeze, unsqueeze)
from .registry import paddle_op

# Slice bounds meaning "to the end" / "to the front" (kept well inside int64 so that
# runtimes adding the dim size to a negative bound cannot overflow).
END = 2 ** 62
FRONT = -(2 ** 62)


# --- helpers shared with the other modules of this family ---------------------------------

def first_input(op, *slots):
    """The first of several slot names an op uses (legacy and PIR spellings differ)."""
    for s in slots:
        if op.input(s):
            return s
    return slots[0]


def first_output(op, *slots):
    """The first of several output slot names an op uses."""
    for s in slots:
        if op.output(s):
            return s
    return slots[0]


def const_of(ctx, op, slot, i=0):
    """NumPy value of an input that is a constant (parameter, folded constant) or None."""
    return ctx.constant_input(op, slot, i) if ctx.has_input(op, slot) else None


def int_list_input(ctx, op, attr, tensor=None, tensor_list=None):
    """An int list given as attribute, one int tensor or a list of scalar tensors.

    Returns a Python list when every part is constant, else an int64 1-D Value.
    """
    if tensor and ctx.has_input(op, tensor):
        c = const_of(ctx, op, tensor)
        if c is not None:
            return ints(np.asarray(c).reshape(-1))
        v = as_int64(ctx, ctx.input(op, tensor), ctx.dtype(op, tensor))
        # Paddle reads every element (IntArray); a program translated from Paddle 2.x stacks
        # its [1]-shaped sizes into a [k, 1] tensor
        return v if ctx.rank(op, tensor) == 1 else reshape(ctx, v, [-1])
    if tensor_list and ctx.has_input(op, tensor_list):
        values = ctx.inputs(op, tensor_list)
        if all(v.const_value is not None for v in values):
            return [int(np.asarray(v.const_value.numpy()).reshape(-1)[0]) for v in values]
        return int64_vector(ctx, values)
    return ints(op.attr(attr, []) or [])


def is_value(v):
    """True for an ONNX value (a computed int list), False for a Python list."""
    return isinstance(v, ir.Value)


def dims_of(ctx, x, axes):
    """Shape(x)[axes] as an int64 1-D value."""
    return ctx.op.Gather(ctx.op.Shape(x), const_i64(ctx, list(axes)), axis=0)


def out_rank(ctx, op, slot="Out", i=0):
    """The rank Paddle recorded for an output, or None."""
    var = ctx.var(op.output(slot)[i]) if len(op.output(slot)) > i else None
    return None if var is None or var.shape is None else len(var.shape)


# --- reshaping ---------------------------------------------------------------------------

@paddle_op("reshape2", "reshape")
class Reshape:
    @classmethod
    def version_7(cls, ctx, op):
        # Paddle's 0 (copy the input dim) and -1 (infer) mean what ONNX Reshape's do.
        shape = int_list_input(ctx, op, "shape", "Shape", "ShapeTensor")
        ctx.set_output(op, "Out", reshape(ctx, ctx.input(op, "X"), shape))


@paddle_op("transpose2", "transpose")
class Transpose:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Transpose(ctx.input(op, "X"), perm=ints(op.attr("axis"))))


@paddle_op("flatten_contiguous_range")
class FlattenRange:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        rank = len(shape)
        if rank == 0:   # a 0-d tensor flattens to [1]
            return ctx.set_output(op, "Out", reshape(ctx, x, [1]))
        start = op.attr("start_axis", 1) % rank
        stop = op.attr("stop_axis", -1) % rank
        if start >= stop:
            out = ctx.op.Identity(x)
        elif start == 0 and stop == rank - 1:
            out = reshape(ctx, x, [-1])
        elif start == 1 and stop == rank - 1:
            out = flatten(ctx, x, 1, ctx.dtype(op, "X"), shape)
        elif stop == rank - 1:   # Reshape's 0 copies the input dim at the same index
            out = reshape(ctx, x, [0] * start + [-1])
        elif all(d > 0 for d in shape[stop + 1:]):
            out = reshape(ctx, x, [0] * start + [-1] + shape[stop + 1:])
        else:   # trailing dims known only at run time
            parts = [const_i64(ctx, [-1]), dims_of(ctx, x, range(stop + 1, rank))]
            if start:
                parts.insert(0, dims_of(ctx, x, range(start)))
            out = reshape(ctx, x, ctx.op.Concat(*parts, axis=0))
        ctx.set_output(op, "Out", out)


@paddle_op("flatten2")
class Flatten2:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", flatten(ctx, ctx.input(op, "X"), op.attr("axis", 1),
                                          ctx.dtype(op, "X"), ctx.shape(op, "X")))


def flatten(ctx, x, axis, dtype_name, shape):
    """ONNX Flatten to 2-D at `axis`; before opset 9 Flatten takes float tensors only, and
    the others are reshaped (a dim of the product of the dims before or after axis known)."""
    if ctx.opset >= 9 or dtype_name in ("float16", "float32", "float64"):
        return ctx.op.Flatten(x, axis=axis)
    shape = list(shape or [])
    if axis == 0:
        return reshape(ctx, x, [1, -1])
    if axis == 1:
        return reshape(ctx, x, [0, -1])
    if len(shape) > axis and all(d >= 0 for d in shape[axis:]):
        return reshape(ctx, x, [-1, int(np.prod(shape[axis:]))])
    if len(shape) >= axis and all(d >= 0 for d in shape[:axis]):
        return reshape(ctx, x, [int(np.prod(shape[:axis])), -1])
    raise ConversionError(f"flattening a {dtype_name} tensor of shape {shape} at axis {axis} "
                          "needs opset 9 (or the dims on one side of the axis known)")


@paddle_op("squeeze2")
class Squeeze:
    @classmethod
    def required_opset(cls, op):
        return 13 if op.input("axis") else 7   # computed axes: Squeeze's axes input

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        if ctx.has_input(op, "axis"):
            return ctx.set_output(op, "Out", cls._computed_axes(ctx, op, x))
        shape = ctx.shape(op, "X")
        rank = len(shape)
        axes = sorted({a % rank for a in ints(op.attr("axes", []) or [])}) if rank else []
        if not axes:    # no axes: every dim of size 1
            if all(d >= 0 for d in shape):
                axes = [i for i, d in enumerate(shape) if d == 1]
            else:
                return ctx.set_output(op, "Out", squeeze(ctx, x) if rank else ctx.op.Identity(x))
        # Paddle leaves axes whose size is not 1 alone (ONNX would fail): keep the 1-dims, and
        # the unknown ones when the recorded output rank says they went too.
        ones = [a for a in axes if shape[a] == 1]
        unknown = [a for a in axes if shape[a] < 0]
        if unknown and out_rank(ctx, op) == rank - len(ones) - len(unknown):
            ones = sorted(ones + unknown)
        if not ones:
            return ctx.set_output(op, "Out", ctx.op.Identity(x))
        ctx.set_output(op, "Out", squeeze(ctx, x, ones))


    @staticmethod
    def _computed_axes(ctx, op, x):
        """Axes known at run time: the ones whose dim is 1 go (Paddle ignores the others)."""
        axes = reshape(ctx, as_int64(ctx, ctx.input(op, "axis"), ctx.dtype(op, "axis")), [-1])
        ones = ctx.op.Equal(ctx.op.Gather(ctx.op.Shape(x), axes, axis=0), const_i64(ctx, 1))
        return ctx.op.Squeeze(x, ctx.op.Compress(axes, ones, axis=0))


def unsqueeze_positions(axes, rank):
    """Where Paddle's unsqueeze puts the new dims: it inserts them one at a time, each
    axis counted in the rank reached so far, moving the earlier new dims along."""
    positions = []
    cur = rank
    for a in axes:
        a = a + cur + 1 if a < 0 else a
        positions = [p + 1 if p >= a else p for p in positions]
        positions.append(a)
        cur += 1
    return sorted(positions)


@paddle_op("unsqueeze2")
class Unsqueeze:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        axes = int_list_input(ctx, op, "axes", "AxesTensor", "AxesTensorList")
        rank = ctx.rank(op, "X")
        if is_value(axes):
            return ctx.set_output(op, "Out", cls._computed_axes(ctx, op, x, axes, rank))
        ctx.set_output(op, "Out", unsqueeze(ctx, x, unsqueeze_positions(axes, rank)))

    @staticmethod
    def _computed_axes(ctx, op, x, axes, rank):
        """Axes known at run time (their count known): unsqueeze_positions in the graph, for
        Unsqueeze's axes input (opset 13)."""
        if ctx.opset < 13:
            raise ConversionError("unsqueeze with axes computed at run time needs opset 13")
        n = out_rank(ctx, op)
        n = None if n is None else n - rank
        if n is None or n < 0:
            raise ConversionError("unsqueeze with computed axes needs their count")
        positions = []
        for i in range(n):
            a = ctx.op.Gather(axes, const_i64(ctx, [i]), axis=0)
            a = ctx.op.Where(ctx.op.Less(a, const_i64(ctx, [0])),
                             ctx.op.Add(a, const_i64(ctx, [rank + i + 1])), a)
            # the earlier new dims at or after this one move along
            positions = [ctx.op.Add(p, cast(ctx, ctx.op.Not(ctx.op.Less(p, a)), "int64"))
                         for p in positions] + [a]
        return ctx.op.Unsqueeze(x, ctx.op.Concat(*positions, axis=0)) if positions else \
            ctx.op.Identity(x)


# --- shape, slices -----------------------------------------------------------------------

@paddle_op("shape", "shape64")
class Shape:
    """Legacy `shape` (Input/Out, int32); PIR `shape64` keeps its own slot names (input/out)."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, first_input(op, "Input", "input", "in0"))
        out_slot = first_output(op, "Out", "out", "out0")
        out = ctx.op.Shape(x)
        dt = ctx.out_dtype(op, out_slot)
        if dt and dt != "int64":
            out = cast(ctx, out, dt)
        ctx.set_output(op, out_slot, out)


@paddle_op("size")
class Size:
    @classmethod
    def version_7(cls, ctx, op):
        n = ctx.op.Size(ctx.input(op, "Input"))
        dt = ctx.out_dtype(op, "Out")
        if dt and dt != "int64":
            n = cast(ctx, n, dt)
        ctx.set_output(op, "Out", n)


def _decrease(ctx, op, y, in_rank):
    """Drop the decrease_axis dims (Paddle 2.5+ yields 0-d when every dim goes)."""
    dec = sorted({a % in_rank for a in ints(op.attr("decrease_axis", []) or [])})
    if not dec:
        return y
    y = squeeze(ctx, y, dec)
    if len(dec) == in_rank and out_rank(ctx, op) == 1:   # older programs keep [1]
        y = reshape(ctx, y, [1])
    return y


def _clamp(bounds):
    return bounds if is_value(bounds) else [min(max(b, FRONT), END) for b in bounds]


@paddle_op("slice")
class Slice:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "Input")
        axes = ints(op.attr("axes"))
        starts = int_list_input(ctx, op, "starts", "StartsTensor", "StartsTensorList")
        ends = int_list_input(ctx, op, "ends", "EndsTensor", "EndsTensorList")
        if ctx.opset < 10 and (is_value(starts) or is_value(ends)):
            raise ConversionError("slice with computed bounds needs opset 10")
        # Paddle allows any huge bound; keep them clear of int64 overflow
        starts, ends = _clamp(starts), _clamp(ends)
        y = slice_(ctx, x, starts, ends, axes)
        ctx.set_output(op, "Out", _decrease(ctx, op, y, ctx.rank(op, "Input")))

    @classmethod
    def required_opset(cls, op):
        computed = any(op.input(s) for s in ("StartsTensor", "StartsTensorList", "EndsTensor",
                                              "EndsTensorList"))
        return 10 if computed else 7


@paddle_op("strided_slice")
class StridedSlice:
    @classmethod
    def version_10(cls, ctx, op):
        x = ctx.input(op, "Input")
        axes = ints(op.attr("axes"))
        starts = int_list_input(ctx, op, "starts", "StartsTensor", "StartsTensorList")
        ends = int_list_input(ctx, op, "ends", "EndsTensor", "EndsTensorList")
        steps = int_list_input(ctx, op, "strides", "StridesTensor", "StridesTensorList")
        y = slice_(ctx, x, _clamp(starts), _clamp(ends), axes, steps)
        ctx.set_output(op, "Out", _decrease(ctx, op, y, ctx.rank(op, "Input")))


# --- joining and splitting ----------------------------------------------------------------

def _axis_input(ctx, op, attr="axis", tensor="AxisTensor", default=0):
    if ctx.has_input(op, tensor):
        c = const_of(ctx, op, tensor)
        if c is None:
            raise ConversionError(f"{op.type} with a computed axis is not supported")
        return int(np.asarray(c).reshape(-1)[0])
    return int(op.attr(attr, default))


@paddle_op("concat")
class Concat:
    @classmethod
    def version_7(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        axis = _axis_input(ctx, op)
        if axis < 0:
            axis += ctx.rank(op, "X")
        ctx.set_output(op, "Out", xs[0] if len(xs) == 1 else ctx.op.Concat(*xs, axis=axis))


@paddle_op("stack")
class Stack:
    @classmethod
    def version_7(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        axis = op.attr("axis", 0)
        if axis < 0:
            axis += ctx.rank(op, "X") + 1
        parts = [unsqueeze(ctx, x, [axis]) for x in xs]
        ctx.set_output(op, "Y", parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis))


def _split_equal(ctx, x, axis, n):
    """n equal pieces of an axis whose size is only known at run time (Slice, opset 10)."""
    size = ctx.op.Div(dims_of(ctx, x, [axis]), const_i64(ctx, [n]))
    outs = []
    for i in range(n):
        start = ctx.op.Mul(size, const_i64(ctx, [i]))
        end = ctx.op.Mul(size, const_i64(ctx, [i + 1]))
        outs.append(ctx.op.Slice(x, start, end, const_i64(ctx, [axis])))
    return outs


@paddle_op("split")
class Split:
    @classmethod
    def check(cls, op):
        if op.input("SectionsTensorList"):
            return "split with computed section sizes is not supported"
        return None

    @classmethod
    def required_opset(cls, op):
        # equal parts of an axis of unknown size: Slice with computed bounds
        var = op.block.find_var(op.input("X")[0]) if op.block is not None else None
        if op.attr("sections") or var is None or not var.shape:
            return 7
        return 10 if var.shape[op.attr("axis", 0) % len(var.shape)] < 0 else 7

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        axis = _axis_input(ctx, op) % len(shape)
        n_out = len(op.output("Out"))
        sections = ints(op.attr("sections", []) or [])
        dim = shape[axis]
        if not sections and dim < 0:   # `num` equal parts of an axis of unknown size
            if ctx.opset >= 18:
                outs = ctx.op.Split(x, axis=axis, num_outputs=n_out, _outputs=n_out)
                outs = outs if isinstance(outs, tuple) else (outs,)
            elif ctx.opset >= 10:
                outs = _split_equal(ctx, x, axis, n_out)
            else:
                raise ConversionError("split of an axis of unknown size needs opset 10")
        elif not sections:
            outs = split(ctx, x, [dim // n_out] * n_out, axis)
        elif -1 in sections and dim < 0:
            outs = cls._dynamic_sections(ctx, x, axis, sections)
        else:
            if -1 in sections:
                sections[sections.index(-1)] = dim - sum(s for s in sections if s >= 0)
            outs = split(ctx, x, sections, axis)
        for i, o in enumerate(outs):
            ctx.set_output(op, "Out", o, i)

    @staticmethod
    def _dynamic_sections(ctx, x, axis, sections):
        """Sections with a -1 on an axis of unknown size: constant slices, counted from the
        front before the -1 part and from the back after it."""
        k = sections.index(-1)
        before, after = sum(sections[:k]), sum(sections[k + 1:])
        outs, start = [], 0
        for s in sections[:k]:
            outs.append(slice_(ctx, x, [start], [start + s], [axis]))
            start += s
        outs.append(slice_(ctx, x, [before], [-after if after else END], [axis]))
        start = -after
        for s in sections[k + 1:]:
            end = start + s
            outs.append(slice_(ctx, x, [start], [end if end < 0 else END], [axis]))
            start = end
        return outs


def _pieces(ctx, x, axis, n):
    """x split into n pieces of size 1 along axis, that axis removed."""
    return [squeeze(ctx, p, [axis]) for p in split(ctx, x, [1] * n, axis)]


@paddle_op("unbind")
class Unbind:
    @classmethod
    def version_7(cls, ctx, op):
        rank = ctx.rank(op, "X")
        axis = op.attr("axis", 0) % rank
        for i, p in enumerate(_pieces(ctx, ctx.input(op, "X"), axis, len(op.output("Out")))):
            ctx.set_output(op, "Out", p, i)


@paddle_op("unstack")
class Unstack:
    @classmethod
    def version_7(cls, ctx, op):
        rank = ctx.rank(op, "X")
        axis = op.attr("axis", 0) % rank
        for i, p in enumerate(_pieces(ctx, ctx.input(op, "X"), axis, len(op.output("Y")))):
            ctx.set_output(op, "Y", p, i)


# --- casting, copying, constants ------------------------------------------------------------

@paddle_op("cast")
class Cast:
    @classmethod
    def version_7(cls, ctx, op):
        to = dtype_attr(op.attr("out_dtype", op.attr("dtype")))
        ctx.set_output(op, "Out", cast(ctx, ctx.input(op, "X"), to))


@paddle_op("assign", "share_data")
class Assign:
    @classmethod
    def version_7(cls, ctx, op):
        ctx.set_output(op, "Out", ctx.op.Identity(ctx.input(op, "X")))


def fill_value(op, dtype):
    """fill_constant's value: str_value (exact for big ints, 'inf', 'nan') wins over value."""
    s = op.attr("str_value")
    if s:
        if dtype.kind in "iu":
            try:
                return int(s)
            except ValueError:
                return int(float(s))
        return float(s)
    return op.attr("value", 0.0)


def constant_of_shape(ctx, shape, value, dtype):
    """A tensor of `shape` (list or int64 value) filled with value."""
    if not is_value(shape):
        return ctx.const(np.full(shape, value, dtype=dtype))
    return ctx.op.ConstantOfShape(shape, value=ir.tensor(np.asarray([value], dtype=dtype)))


@paddle_op("fill_constant")
class FillConstant:
    @classmethod
    def required_opset(cls, op):   # a computed shape or value needs ConstantOfShape / Expand
        computed = any(op.input(s) for s in ("ValueTensor", "ShapeTensor", "ShapeTensorList"))
        return 9 if computed else 7

    @classmethod
    def version_7(cls, ctx, op):
        dtype = np.dtype(dtype_attr(op.attr("dtype", 5)))
        shape = int_list_input(ctx, op, "shape", "ShapeTensor", "ShapeTensorList")
        if ctx.has_input(op, "ValueTensor"):
            value = ctx.input(op, "ValueTensor")
            if ctx.dtype(op, "ValueTensor") != dtype.name:
                value = cast(ctx, value, dtype.name)
            value = reshape(ctx, value, [])
            target = shape if is_value(shape) else const_i64(ctx, shape)
            return ctx.set_output(op, "Out", ctx.op.Expand(value, target))
        ctx.set_output(op, "Out", constant_of_shape(ctx, shape, fill_value(op, dtype), dtype))


_VALUE_KEYS = ("values", "fp32_values", "int32_values", "int64_values", "bool_values",
               "fp64_values", "fp16_values")


@paddle_op("assign_value")
class AssignValue:
    @classmethod
    def version_7(cls, ctx, op):
        dtype = np.dtype(dtype_attr(op.attr("dtype", 5)))
        vals = next((op.attr(k) for k in _VALUE_KEYS if op.attr(k)), [])
        shape = ints(op.attr("shape", [len(vals)]))
        ctx.set_output(op, "Out", ctx.const(np.asarray(vals, dtype=dtype).reshape(shape)))


# --- broadcasting, tiling --------------------------------------------------------------------

@paddle_op("expand_v2")
class ExpandV2:
    @classmethod
    def version_8(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = int_list_input(ctx, op, "shape", "Shape", "expand_shapes_tensor")
        # Paddle's -1 keeps the input dim; ONNX Expand broadcasts a 1 to the same effect.
        if is_value(shape):
            shape = ctx.op.Abs(shape)       # -1 -> 1, sizes unchanged
        else:
            shape = const_i64(ctx, [1 if s == -1 else s for s in shape])
        ctx.set_output(op, "Out", ctx.op.Expand(x, shape))


@paddle_op("expand_as_v2")
class ExpandAs:
    @classmethod
    def version_8(cls, ctx, op):
        x = ctx.input(op, "X")
        if ctx.has_input(op, "Y"):
            target = ctx.op.Shape(ctx.input(op, "Y"))
        else:
            shape = ints(op.attr("target_shape"))
            if any(d < 0 for d in shape):
                raise ConversionError("expand_as without Y needs a fully known target_shape")
            target = const_i64(ctx, shape)
        ctx.set_output(op, "Out", ctx.op.Expand(x, target))


def _tile(ctx, x, rank, repeats):
    """Tile with Paddle's rules: fewer repeats than dims repeat the trailing dims, more
    repeats than dims add leading dims."""
    if is_value(repeats):
        return ctx.op.Tile(x, repeats)   # caller made the lengths agree
    n = len(repeats)
    if n < rank:
        repeats = [1] * (rank - n) + repeats
    elif n > rank:
        x = unsqueeze(ctx, x, list(range(n - rank)))
    return ctx.op.Tile(x, const_i64(ctx, repeats))


@paddle_op("tile")
class Tile:
    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        repeats = int_list_input(ctx, op, "repeat_times", "RepeatTimes", "repeat_times_tensor")
        if is_value(repeats):   # computed repeats: line them up with the dims here
            n_rep = len(op.input("repeat_times_tensor")) or ctx.shape(op, "RepeatTimes")[0]
            if n_rep < 0:
                raise ConversionError("tile with a repeat_times tensor of unknown length")
            if n_rep < rank:
                repeats = ctx.op.Concat(const_i64(ctx, [1] * (rank - n_rep)), repeats, axis=0)
            elif n_rep > rank:
                x = unsqueeze(ctx, x, list(range(n_rep - rank)))
        ctx.set_output(op, "Out", _tile(ctx, x, rank, repeats))


# --- indexing ----------------------------------------------------------------------------------

@paddle_op("gather")
class Gather:
    @classmethod
    def version_7(cls, ctx, op):
        x, idx = ctx.input(op, "X"), ctx.input(op, "Index")
        axis = _axis_input(ctx, op, "axis", "Axis")
        if ctx.rank(op, "Index") == 2:   # Paddle reads an [N, 1] index as [N]
            idx = reshape(ctx, idx, [-1])
        ctx.set_output(op, "Out", ctx.op.Gather(x, idx, axis=axis))


@paddle_op("index_select")
class IndexSelect:
    @classmethod
    def version_7(cls, ctx, op):
        x, idx = ctx.input(op, "X"), ctx.input(op, "Index")
        axis = op.attr("dim", 0) % ctx.rank(op, "X")
        ctx.set_output(op, "Out", ctx.op.Gather(x, idx, axis=axis))


@paddle_op("gather_nd")
class GatherNd:
    @classmethod
    def version_11(cls, ctx, op):
        x, idx = ctx.input(op, "X"), ctx.input(op, "Index")
        idx = as_int64(ctx, idx, ctx.dtype(op, "Index"))   # ONNX GatherND takes int64 only
        ctx.set_output(op, "Out", ctx.op.GatherND(x, idx))


@paddle_op("lookup_table_v2", "lookup_table")
class Embedding:
    """Rows of W; rows read at padding_idx are zeros. lookup_table (v1) ids end in a 1-dim."""

    @classmethod
    def version_7(cls, ctx, op):
        w, ids = ctx.input(op, "W"), ctx.input(op, "Ids")
        if op.type == "lookup_table":
            ids = squeeze(ctx, ids, [ctx.rank(op, "Ids") - 1])
        pad = op.attr("padding_idx", -1)
        pad = -1 if pad is None else int(pad)
        rows = ctx.shape(op, "W")[0]
        if pad < -1 and rows > 0:
            pad += rows
        const = const_of(ctx, op, "W")
        if pad >= 0 and const is not None:   # a weight: zero its padding row once, here
            const = np.array(const)
            const[pad] = 0
            w = ctx.const(const)
            pad = -1
        out = ctx.op.Gather(w, ids, axis=0)
        if pad >= 0:   # a computed table: multiply by a 0/1 row mask gathered the same way
            if rows < 0:
                raise ConversionError("embedding with padding_idx needs the table's row count")
            mask = np.ones((rows, 1), dtype=np.dtype(ctx.dtype(op, "W")))
            mask[pad] = 0
            out = ctx.op.Mul(out, ctx.op.Gather(ctx.const(mask), ids, axis=0))
        ctx.set_output(op, "Out", out)


# --- reordering -------------------------------------------------------------------------------

@paddle_op("flip")
class Flip:
    @classmethod
    def version_10(cls, ctx, op):
        x = ctx.input(op, "X")
        rank = ctx.rank(op, "X")
        axes = sorted({a % rank for a in ints(op.attr("axis", []) or [])})
        if not axes:
            return ctx.set_output(op, "Out", ctx.op.Identity(x))
        k = len(axes)
        ctx.set_output(op, "Out", slice_(ctx, x, [-1] * k, [FRONT] * k, axes, [-1] * k))


@paddle_op("roll")
class Roll:
    @classmethod
    def version_10(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        shifts = int_list_input(ctx, op, "shifts", first_input(op, "ShiftsTensor", "shifts"))
        axes = ints(op.attr("axis", []) or [])
        if is_value(shifts):   # computed shifts: one Value per axis
            shifts = reshape(ctx, shifts, [-1])
            shifts = [ctx.op.Gather(shifts, const_i64(ctx, [i]), axis=0)
                      for i in range(len(axes) or 1)]
        if not axes:   # no axis: roll the flattened tensor, then restore the shape
            flat = reshape(ctx, x, [-1])
            n = int(np.prod(shape)) if all(d >= 0 for d in shape) else -1
            y = cls._roll(ctx, flat, 0, n, shifts[0])
            return ctx.set_output(op, "Out", reshape(ctx, y, ctx.op.Shape(x)))
        for s, a in zip(shifts, axes):
            a %= len(shape)
            x = cls._roll(ctx, x, a, shape[a], s)
        ctx.set_output(op, "Out", x)

    @staticmethod
    def _roll(ctx, x, axis, dim, shift):
        """x rolled by `shift` (an int, or a [1] int64 Value) along axis of size dim."""
        if dim >= 0 and not is_value(shift):
            if dim == 0 or shift % dim == 0:
                return x
            s = shift % dim
            return ctx.op.Concat(slice_(ctx, x, [dim - s], [dim], [axis]),
                                 slice_(ctx, x, [0], [dim - s], [axis]), axis=axis)
        # unknown size: the cut point (dim - shift mod dim) is computed
        d = dims_of(ctx, x, [axis]) if dim < 0 else const_i64(ctx, [dim])
        s = shift if is_value(shift) else const_i64(ctx, [shift])
        cut = ctx.op.Sub(d, ctx.op.Mod(s, d))     # Mod with fmod=0 takes the divisor's sign
        ax = const_i64(ctx, [axis])
        return ctx.op.Concat(ctx.op.Slice(x, cut, d, ax),
                             ctx.op.Slice(x, const_i64(ctx, [0]), cut, ax), axis=axis)


@paddle_op("expand")
class Expand:
    """The old expand: X tiled expand_times times along each dim. Its output is shaped here:
    Paddle 3 records expand_times as the output's shape when it writes this op."""

    @classmethod
    def version_7(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        times = int_list_input(ctx, op, "expand_times", "ExpandTimes", "expand_times_tensor")
        y = _tile(ctx, x, len(shape), times)
        if not is_value(times) and len(times) == len(shape):
            y.shape = ir.Shape([d * t if d >= 0 else None for d, t in zip(shape, times)])
        ctx.set_output(op, "Out", y)


@paddle_op("repeat_interleave")
class RepeatInterleave:
    """Each slice along `dim` repeated: an int count tiles a new axis after `dim` and merges
    it; per-slice counts gather the slices by index (count i of slice i)."""

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        shape = ctx.shape(op, "X")
        rank = len(shape)
        axis = int(op.attr("dim", 0)) % max(rank, 1)
        if not ctx.has_input(op, "RepeatsTensor"):
            r = int(op.attr("Repeats", 1))
            tiled = ctx.op.Tile(unsqueeze(ctx, x, [axis + 1]),
                                const_i64(ctx, [1] * (axis + 1) + [r] + [1] * (rank - axis - 1)))
            parts = [const_i64(ctx, [shape[axis] * r if shape[axis] >= 0 else -1])]
            if axis:
                parts.insert(0, dims_of(ctx, x, range(axis)))
            if axis + 1 < rank:
                parts.append(dims_of(ctx, x, range(axis + 1, rank)))
            target = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)
            y = reshape(ctx, tiled, target)
            # a Reshape to a computed shape leaves every size open: a known one (the three
            # channels of a repeated grey image) must stay known for stage 2 to lower a Conv
            if x.shape is not None and isinstance(x.shape[axis], int):
                y.shape = ir.Shape([d * r if i == axis else d for i, d in enumerate(x.shape)])
                y.type = ir.TensorType(onnx_dtype(ctx.dtype(op, "X")))  # (shape needs a type)
            return ctx.set_output(op, "Out", y)
        reps = const_of(ctx, op, "RepeatsTensor")
        if reps is not None:
            idx = const_i64(ctx, np.repeat(np.arange(len(reps)), np.asarray(reps).reshape(-1)))
        else:   # index of output j = how many cumulative counts are <= j
            counts = as_int64(ctx, ctx.input(op, "RepeatsTensor"), ctx.dtype(op, "RepeatsTensor"))
            ends = ctx.op.CumSum(counts, const_i64(ctx, 0))
            total = reduce(ctx, "ReduceSum", counts, [0], keepdims=False)
            pos = ctx.op.Range(const_i64(ctx, 0), total, const_i64(ctx, 1))
            passed = cast(ctx, ctx.op.Not(ctx.op.Less(unsqueeze(ctx, pos, [1]),
                                                      unsqueeze(ctx, ends, [0]))), "int64")
            idx = reduce(ctx, "ReduceSum", passed, [1], keepdims=False)
        ctx.set_output(op, "Out", ctx.op.Gather(x, idx, axis=axis))


@paddle_op("tril_triu")
class TrilTriu:
    """Lower (col - row <= diagonal) or upper (col - row >= diagonal) triangle of the last two
    dims: ONNX Trilu from opset 14, a mask before."""

    @classmethod
    def version_11(cls, ctx, op):
        x = ctx.input(op, "X")
        k = int(op.attr("diagonal", 0))
        lower = bool(op.attr("lower", False))
        rank = ctx.rank(op, "X")
        if ctx.opset >= 14 and ctx.dtype(op, "X") in _TRILU_DTYPES:
            return ctx.set_output(op, "Out", ctx.op.Trilu(x, const_i64(ctx, k), upper=int(not lower)))
        zero, one = const_i64(ctx, 0), const_i64(ctx, 1)
        rows = ctx.op.Range(zero, reshape(ctx, dims_of(ctx, x, [rank - 2]), []), one)
        cols = ctx.op.Range(zero, reshape(ctx, dims_of(ctx, x, [rank - 1]), []), one)
        offset = ctx.op.Sub(unsqueeze(ctx, cols, [0]), unsqueeze(ctx, rows, [1]))
        kc = const_i64(ctx, k)
        keep = ctx.op.Not(ctx.op.Greater(offset, kc) if lower else ctx.op.Less(offset, kc))
        if ctx.dtype(op, "X") == "bool":   # (no bool Where in onnxruntime before opset 16)
            return ctx.set_output(op, "Out", ctx.op.And(x, keep))
        zero_x = ctx.const(np.zeros((), np.dtype(ctx.dtype(op, "X"))))
        ctx.set_output(op, "Out", ctx.op.Where(keep, x, zero_x))


_TRILU_DTYPES = ("float32", "float64", "int64", "bool")


@paddle_op("partial_concat", "partial_sum")
class PartialConcatSum:
    """Columns [start_index, start_index + length) of each 2-D input, concatenated / summed."""

    @classmethod
    def version_8(cls, ctx, op):
        start = int(op.attr("start_index", 0))
        length = int(op.attr("length", -1))
        end = END if length < 0 else start + length
        parts = [slice_(ctx, x, [start], [end], [1]) for x in ctx.inputs(op, "X")]
        if len(parts) == 1:
            out = ctx.op.Identity(parts[0])
        elif op.type == "partial_concat":
            out = ctx.op.Concat(*parts, axis=1)
        else:
            out = ctx.op.Sum(*parts)
        ctx.set_output(op, "Out", out)
