"""Control flow: Paddle's conditional / loop blocks -> ONNX If and Loop.

Legacy programs (dy2static on FLAGS_enable_pir_api=0) write an if/else as two
`conditional_block`s (the second one guarded by `logical_not(cond)`), each
assigning the branch's results to its own `Out` vars, then `select_input`
picks the taken branch's values with the int32 mask `cast(cond)`. A loop is a
`while` whose body block re-assigns the loop variables (its `Out`, the
condition included) by name.

PIR programs (read by frontend/pir.py) have `if` (true_block / false_block,
each ending in a `yield` of the results) and `while` (loop-carried values in
X, bound to the body block's `args`; the body yields the next condition, then
the next values).

Sub-blocks become ONNX sub-graphs; they read values of the enclosing graphs
directly (ONNX outer-scope references), so a block's `Input` lists need no
wiring. Both If-11 (branches may yield different shapes) and Loop-11 are
needed, hence opset 11.

Tensor arrays (what dy2static makes of a Python list appended to in a loop)
become ONNX sequences. Legacy programs write them in place by name
(`write_to_array` -> Out = the array); PIR's `array_write_` also updates its
`array` operand in place, and a PIR `while` does not list the arrays its body
writes among its loop values: they are carried here. Sequences as loop values
(Loop-13) and passed through branches (Identity-14) need opset 14.
"""
import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from ..exporter import onnx_dtype
from ..program import Block
from .common import cast, reshape
from .registry import paddle_op


def _scalar(ctx, cond):
    """A bool condition of shape [] or [1] -> the scalar If / Loop want."""
    return reshape(ctx, cond, [])


def _lookup_or_none(ctx, name):
    try:
        return ctx.lookup(name)
    except ConversionError:
        return None


def _var_or_fail(ctx, block, name, what):
    var = block.find_var(name) if block is not None else None
    if var is None:
        var = ctx.var(name)
    if var is None or var.dtype is None:
        raise ConversionError(f"{what} {name!r} has no dtype in the program")
    return var


def _placeholder(ctx, block, name):
    """A stand-in for a var a branch that did not run leaves unset: an empty tensor of the
    var's dtype and rank (only `select_input` reads it, and it picks the other branch), or
    an empty sequence for a tensor array (a list not appended to yet)."""
    var = _var_or_fail(ctx, block, name, "conditional_block output")
    if var.kind == "tensor_array":
        return _seq_typed(ctx.op.SequenceEmpty(dtype=int(onnx_dtype(var.dtype))), var)
    rank = len(var.shape) if var.shape is not None else 1
    return ctx.const(np.zeros((0,) * rank, dtype=np.dtype(var.dtype)))


def _seq_typed(value, var):
    """Declare a sequence's type: onnx_ir's shape inference would record an inferred sequence
    as a tensor of its element type."""
    if var is not None and var.kind == "tensor_array" and var.dtype is not None:
        value.type = ir.SequenceType(ir.TensorType(onnx_dtype(var.dtype)))
    return value


def _unique(names):
    seen = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return seen


def _graph_input(var=None, dtype_name=None):
    """A sub-graph input: a scalar of `dtype_name`, or typed after a Program var."""
    if var is None:
        return ir.Value(type=ir.TensorType(onnx_dtype(dtype_name)), shape=ir.Shape([]))
    tensor = ir.TensorType(onnx_dtype(var.dtype))
    return ir.Value(type=ir.SequenceType(tensor) if var.kind == "tensor_array" else tensor)


def _bind_by_name(ctx, op, names, values):
    """Legacy ops (re)assign vars by name: bind each Out name to its new value."""
    outs = op.output("Out")
    values = values if isinstance(values, tuple) else (values,)
    for name, value in zip(names, values):
        _seq_typed(value, ctx.var(name))
        ctx.set_output(op, "Out", value, outs.index(name))


def _yielded(block):
    """The values a PIR sub-block hands back (its trailing `yield`)."""
    for op in reversed(block.ops):
        if op.type == "yield":
            return list(op.input("X"))
    return []


def _outer_arrays_written(block):
    """Names of the arrays `array_write_` ops in `block` (or blocks nested in it) update in
    place that were created outside it (PIR only: legacy ops list them in Out)."""
    made, written = set(block.args), []
    stack = [block]
    while stack:
        b = stack.pop()
        for op in b.ops:
            made.update(n for names in op.outputs.values() for n in names)
            if op.type == "write_to_array":
                written.extend(op.input("array"))
            for v in op.attrs.values():
                stack.extend(x for x in (v if isinstance(v, list) else [v]) if isinstance(x, Block))
    return _unique(n for n in written if n not in made)


def _empty_block(parent):
    return Block(idx=-1, parent_idx=parent.idx, program=parent.program)


@paddle_op("yield")
class Yield:
    """PIR's `cf.yield` ends a sub-block; the If / Loop mapper reads its inputs."""

    @classmethod
    def version_7(cls, ctx, op):
        pass


@paddle_op("conditional_block")
class ConditionalBlock:
    @classmethod
    def check(cls, op):
        if not op.attr("is_scalar_condition", False):
            return ("is_scalar_condition=False (run the block when every input is non-empty) is "
                    "not supported; only dy2static's scalar conditions are")
        if not isinstance(op.attr("sub_block"), Block):
            return "no sub_block"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        block = op.attr("sub_block")
        outs = _unique(op.output("Out"))
        cond = _scalar(ctx, ctx.input(op, "Cond"))
        # When the block does not run, its outputs keep what they held before, and a var that
        # held nothing gets an empty placeholder (only select_input reads it, then ignores it).
        kept = []
        for name in outs:
            prev = _lookup_or_none(ctx, name)
            kept.append(prev if prev is not None else _placeholder(ctx, op.block, name))
        then_g = ctx.subgraph(block, [], outs, "then_branch")
        else_g = ctx.subgraph(_empty_block(op.block), [], kept, "else_branch")
        results = ctx.op.If(cond, then_branch=then_g, else_branch=else_g, _outputs=len(outs))
        _bind_by_name(ctx, op, outs, results)


@paddle_op("select_input")
class SelectInput:
    """Out = X[Mask]; an If per choice, since the unselected inputs may be placeholders of
    another shape (see conditional_block)."""

    @classmethod
    def version_11(cls, ctx, op):
        xs = ctx.inputs(op, "X")
        mask = _scalar(ctx, ctx.input(op, "Mask"))
        mask = ctx.op.Cast(mask, to=int(ir.DataType.INT64))
        empty = _empty_block(op.block)
        out = xs[-1]
        for i in range(len(xs) - 2, -1, -1):   # mask == i ? X[i] : (what the later inputs chose)
            pick_i = ctx.op.Equal(mask, ctx.const(np.asarray(i, dtype=np.int64)))
            then_g = ctx.subgraph(empty, [], [xs[i]], "then_branch")
            else_g = ctx.subgraph(empty, [], [out], "else_branch")
            out = _seq_typed(ctx.op.If(pick_i, then_branch=then_g, else_branch=else_g),
                             ctx.var(op.input("X")[i]))
        ctx.set_output(op, "Out", out)


@paddle_op("if")
class If:
    """PIR `if`: both branches are blocks ending in `yield`."""

    @classmethod
    def check(cls, op):
        for key in ("true_block", "false_block"):
            if not isinstance(op.attr(key), Block):
                return f"no {key}"
            if _outer_arrays_written(op.attr(key)):
                return ("appending to a tensor array (a Python list) inside an if branch is not "
                        "supported")
        return None

    @classmethod
    def version_11(cls, ctx, op):
        outs = op.output("Out")
        cond = _scalar(ctx, ctx.input(op, "Cond"))
        branches = []
        for key, tag in (("true_block", "then"), ("false_block", "else")):
            block = op.attr(key)
            yielded = _yielded(block)
            if len(yielded) != len(outs):
                raise ConversionError(f"if: the {key} yields {len(yielded)} values for "
                                      f"{len(outs)} results")
            branches.append(ctx.subgraph(block, [], yielded, f"{tag}_branch"))
        if not outs:
            return   # an if for side effects only has nothing to compute in ONNX
        results = ctx.op.If(cond, then_branch=branches[0], else_branch=branches[1],
                            _outputs=len(outs))
        results = results if isinstance(results, tuple) else (results,)
        for i, value in enumerate(results):
            ctx.set_output(op, "Out", value, i)


def _as_carried(ctx, value, var):
    """A loop value's initial value in the dtype the body carries. dy2static's stand-in for a
    variable first set inside the loop is a float64 [1] tensor (assign_value) under the
    var's declared dtype; ONNX Loop carries one dtype throughout, and the stand-in is never
    read, so it becomes zeros of the declared dtype."""
    if var.kind == "tensor_array" or value.dtype is None or value.dtype == onnx_dtype(var.dtype):
        return value
    if value.const_value is not None:
        return ctx.const(np.zeros(value.const_value.shape, np.dtype(var.dtype)))
    return cast(ctx, value, var.dtype)


def _loop(ctx, op, block, carried, init, body_inputs, next_cond, next_values):
    """Emit an ONNX Loop running `block` while the condition holds.

    carried:     Paddle names the body reads the loop-carried values under
    init:        their values before the loop
    body_inputs: the carried values' Vars (body graph input types)
    next_cond / next_values: names (or Values) the body leaves the next condition / values in
    """
    inputs = [(None, _graph_input(dtype_name="int64")), (None, _graph_input(dtype_name="bool"))]
    inputs += [(name, _graph_input(var)) for name, var in zip(carried, body_inputs)]
    outputs = [lambda: _scalar(ctx, ctx.lookup(next_cond))] + list(next_values)
    body = ctx.subgraph(block, inputs, outputs, "body")
    cond = _scalar(ctx, ctx.input(op, "Condition"))
    results = ctx.op.Loop(None, cond, *init, body=body, _outputs=len(init))
    return results if isinstance(results, tuple) else (results,)


@paddle_op("while")
class While:
    @classmethod
    def check(cls, op):
        if not isinstance(op.attr("sub_block"), Block):
            return "no sub_block"
        if op.block.program.format != "pir" and op.input("Condition")[0] not in op.output("Out"):
            return "the loop body never updates its condition (an endless loop)"
        return None

    @classmethod
    def version_11(cls, ctx, op):
        block = op.attr("sub_block")
        if op.block.program.format == "pir":
            cls._pir(ctx, op, block)
        else:
            cls._legacy(ctx, op, block)

    @staticmethod
    def _pir(ctx, op, block):
        carried = list(block.args)
        init = ctx.inputs(op, "X")
        yielded = _yielded(block)
        if len(carried) != len(init) or len(yielded) != len(init) + 1:
            raise ConversionError(f"while: {len(init)} loop values, {len(carried)} block "
                                  f"arguments and {len(yielded)} yielded values do not match")
        # Arrays of enclosing blocks the body appends to are loop values too.
        arrays = [n for n in _outer_arrays_written(block) if _lookup_or_none(ctx, n) is not None]
        vars_ = [_var_or_fail(ctx, block, name, "while loop value") for name in carried + arrays]
        init = [_as_carried(ctx, v, var) for v, var in zip(init, vars_)]
        init = init + [ctx.lookup(n) for n in arrays]
        results = _loop(ctx, op, block, carried + arrays, init, vars_, yielded[0],
                        yielded[1:] + arrays)
        for i in range(len(carried)):
            ctx.set_output(op, "Out", results[i], i)
        for name, value in zip(arrays, results[len(carried):]):
            ctx.bind(name, _seq_typed(value, ctx.var(name)))

    @staticmethod
    def _legacy(ctx, op, block):
        # The loop variables are the outer vars the body assigns (Out, the condition among
        # them): each is carried by name from one iteration to the next.
        cond_name = op.input("Condition")[0]
        carried = _unique(op.output("Out"))
        init, vars_ = [], []
        for name in carried:
            value = _lookup_or_none(ctx, name)
            var = _var_or_fail(ctx, op.block, name, "while loop variable")
            if value is None:   # first assigned inside the loop (a list appended to, ...)
                value = _placeholder(ctx, op.block, name)
            init.append(_as_carried(ctx, value, var))
            vars_.append(var)
        results = _loop(ctx, op, block, carried, init, vars_, cond_name, carried)
        _bind_by_name(ctx, op, carried, results)


# --- tensor arrays ---------------------------------------------------------------------------

def _slot(names, *preferred):
    """The legacy slot name if the op has it, else its first slot (PIR names: in0, out0...)."""
    for slot in preferred:
        if names.get(slot):
            return slot
    return next(iter(names))


def _array_name(op):
    """The array a write updates: PIR passes it as `array`, legacy writes to Out by name."""
    return (op.input("array") or op.output("Out"))[0]


@paddle_op("create_array")
class CreateArray:
    @classmethod
    def version_14(cls, ctx, op):
        slot = _slot(op.outputs, "Out", "out")
        var = _var_or_fail(ctx, op.block, op.output(slot)[0], "create_array output")
        ctx.set_output(op, slot, _seq_typed(ctx.op.SequenceEmpty(dtype=int(onnx_dtype(var.dtype))),
                                            var))


@paddle_op("write_to_array")
class WriteToArray:
    """Only appends, the writes dy2static makes for `list.append` (I = the array's length)."""

    @classmethod
    def check(cls, op):
        array, pos = _array_name(op), op.input("I")
        for other in op.block.ops:
            if other.type in ("lod_array_length", "array_length") and pos and \
                    pos[0] in other.outputs.get(_slot(other.outputs, "Out", "out"), []) and \
                    array in [n for names in other.inputs.values() for n in names]:
                return None
        return ("write_to_array at a position other than the array's end is not supported "
                "(only the appends of a Python list in a loop are)")

    @classmethod
    def version_14(cls, ctx, op):
        name = _array_name(op)
        seq = _lookup_or_none(ctx, name)
        if seq is None:   # legacy arrays exist, empty, before their first write
            seq = _placeholder(ctx, op.block, name)
        new = _seq_typed(ctx.op.SequenceInsert(seq, ctx.input(op, "X")),
                         _var_or_fail(ctx, op.block, name, "tensor array"))
        ctx.set_output(op, "Out", new)
        ctx.bind(name, new)   # PIR's array_write_ updates its operand in place


@paddle_op("lod_array_length", "array_length")
class ArrayLength:
    @classmethod
    def version_14(cls, ctx, op):
        n = ctx.op.SequenceLength(ctx.input(op, _slot(op.inputs, "X", "x")))
        slot = _slot(op.outputs, "Out", "out")
        var = ctx.var(op.output(slot)[0])
        if var is None or var.shape is None or len(var.shape) == 1:
            n = reshape(ctx, n, [1])   # Paddle's length is a [1] tensor
        ctx.set_output(op, slot, n)


@paddle_op("tensor_array_to_tensor", "array_to_tensor")
class ArrayToTensor:
    """Stack (use_stack) or concatenate the array's tensors along `axis`."""

    @classmethod
    def version_14(cls, ctx, op):
        seq = ctx.input(op, _slot(op.inputs, "X", "x"))
        out = ctx.op.ConcatFromSequence(seq, axis=op.attr("axis", 0),
                                        new_axis=int(bool(op.attr("use_stack", False))))
        ctx.set_output(op, _slot(op.outputs, "Out", "out"), out)
