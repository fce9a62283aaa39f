"""Stage 1: Program -> ONNX model, through the @paddle_op mapper registry."""
import json

import numpy as np
import onnx_ir as ir
from onnx import helper

from .errors import ConversionError, PaddleFormatError, UnsupportedOpsError
from . import __version__
from .mappers.registry import get_mapper
from .naming import UniqueNames
from .optimize import fold_shapes
from .shapes import input_dim_symbols

MIN_OPSET, MAX_OPSET = 7, 21

# Program structure, not computation: inputs, outputs and parameters are handled here.
STRUCTURAL_OPS = {"feed", "fetch", "data", "parameter", "shadow_output"}

# The newest IR version each opset may be stored with (onnx's own VERSION_TABLE).
_IR_VERSION = {7: 3, 8: 3, 9: 4, 10: 5, 11: 6, 12: 7, 13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8,
               19: 9, 20: 9, 21: 10}

_DTYPES = {name: ir.DataType.from_numpy(np.dtype(name)) for name in (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}
_DTYPES["bfloat16"] = ir.DataType.BFLOAT16


def onnx_dtype(name):
    """ir.DataType of a numpy-style dtype name ('float32', 'bfloat16', ...)."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ConversionError(f"dtype {name!r} has no ONNX equivalent") from None


# The attribute types of a non-empty list, in the order onnx_ir infers them.
_LIST_TYPES = ((int, ir.AttributeType.INTS), (float, ir.AttributeType.FLOATS),
               (str, ir.AttributeType.STRINGS))


def _attribute(name, value):
    """ir.convenience.convert_attribute, with a list's type found here: its own inference
    checks a list against runtime-checkable protocols first, slow enough to be a tenth of
    building the graph."""
    if isinstance(value, (list, tuple)) and value:
        for kind, attr_type in _LIST_TYPES:
            if all(isinstance(x, kind) for x in value):
                return ir.convenience.convert_attribute(name, value, attr_type)
    return ir.convenience.convert_attribute(name, value)


class _OpBuilder:
    """`ctx.op.Conv(x, w, strides=[1, 1])` appends a node to the graph being built.

    Keyword arguments are ONNX attributes (None values are left out); `_outputs=n`
    returns n values, `_domain` sets the domain.
    """

    def __init__(self, ctx):
        self._ctx = ctx

    def __getattr__(self, op_type):
        def emit(*inputs, _outputs=1, _domain="", **attrs):
            return self._ctx.emit(op_type, inputs, attrs, _outputs, _domain)
        return emit


def onnx_proto_graph(inputs, nodes, initializers, output, opset):
    """A ModelProto of these nodes computing `output` (for shape inference; `nodes` stay
    where they are)."""
    graph = helper.make_graph(
        [ir.serde.serialize_node(n) for n in nodes], "partial",
        [ir.serde.serialize_value(v) for v in inputs],
        [helper.make_empty_tensor_value_info(output.name)],
        [ir.serde.serialize_tensor(v.const_value) for v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


class ExportContext:
    """What a mapper sees: the op's inputs as ONNX values, a node builder, constants."""

    def __init__(self, program, opset):
        self.program = program
        self.opset = opset
        self.op = _OpBuilder(self)
        self.initializers = {}         # name -> Value, all in the main graph
        self._scopes = [{}]            # paddle var name -> Value, innermost last
        self._graphs = [[]]            # nodes of the graph being built, innermost last
        self._current = None           # (paddle op, its index) being mapped
        self._node_count = {}
        self.model_metadata = {}       # key -> JSON-able value, the model's metadata_props
        self.graph_inputs = []         # the model's inputs, as ir.Values
        self._unique_value_name = UniqueNames(set(program.params) | set(program.inputs))
        self._op_index = {}
        for block in program.blocks:
            for i, op in enumerate(block.ops):
                self._op_index[id(op)] = i if block.idx == 0 else f"{block.idx}.{i}"

    # --- values of Paddle variables -------------------------------------------------------
    def lookup(self, name):
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        if name in self.program.params:
            return self._param_value(name)
        raise ConversionError(f"variable {name!r} is used before any op produces it"
                              + self._where())

    def _param_value(self, name):
        value = self.initializers.get(name)
        if value is None:
            value = self.const(self.program.params[name], name=name)
        return value

    def input(self, op, slot, i=0):
        """The ONNX value of the i-th variable in an input slot."""
        names = op.input(slot)
        if i >= len(names):
            raise ConversionError(f"op {op.type!r} has no input {slot}[{i}]" + self._where())
        return self.lookup(names[i])

    def inputs(self, op, slot):
        return [self.lookup(n) for n in op.input(slot)]

    def has_input(self, op, slot):
        return bool(op.input(slot))

    def has_output(self, op, slot):
        return bool(op.output(slot))

    def set_output(self, op, slot, value, i=0):
        """Bind the i-th variable of an output slot to `value`."""
        names = op.output(slot)
        if i >= len(names):
            return  # Paddle leaves unused optional outputs out
        name = names[i]
        if value.name is None:   # values keep the name of the first Paddle var they become
            value.name = self._unique_value_name(name)
        self._scopes[-1][name] = value

    def bind(self, name, value):
        """Bind a Paddle variable name to a value (sub-graph inputs, loop-carried values)."""
        self._scopes[-1][name] = value

    def var(self, name):
        """The Program's Var (dtype, shape) for a variable name, or None."""
        block = self._current[0].block if self._current else self.program.global_block
        return block.find_var(name) if block else self.program.var(name)

    def shape(self, op, slot, i=0):
        """The static shape Paddle recorded for an input (-1 = unknown), or None."""
        var = self.var(op.input(slot)[i])
        return None if var is None or var.shape is None else list(var.shape)

    def static_shape(self, op, slot, i=0):
        """An input's shape as well as it can be known: Paddle's record, its -1 dims filled
        in by ONNX shape inference on the graph built so far (which sees the model's input
        shapes as given, e.g. by --input-shape); None when the rank is unknown too."""
        recorded = self.shape(op, slot, i)
        if recorded is not None and all(d >= 0 for d in recorded):
            return recorded
        inferred = self.infer_shape(self.input(op, slot, i))
        if inferred is None or (recorded is not None and len(inferred) != len(recorded)):
            return recorded
        if recorded is None:
            return [d if isinstance(d, int) else -1 for d in inferred]
        return [r if r >= 0 else (d if isinstance(d, int) else -1)
                for r, d in zip(recorded, inferred)]

    def infer_shape(self, value):
        """ONNX shape inference (with shape sub-graphs folded) on the main graph built so
        far, up to `value`: its dims (ints, or None for unknown), or None. Not inside
        sub-graphs."""
        if value.shape is not None and value.shape.is_static():
            return list(value.shape)
        if len(self._graphs) > 1:
            return None

        nodes = self._graphs[0]
        unnamed = [v for node in nodes for v in node.outputs if v.name is None]
        for k, v in enumerate(unnamed):                # serializing needs names; theirs come later
            v.name = f"__infer_{k}"
        try:
            initializers, typed = [], []
            for v in self.initializers.values():       # shapes matter, data only for small ones
                small = v.const_value.size <= 1024
                (initializers if small else typed).append(v)
            graph = onnx_proto_graph(self.graph_inputs + typed, nodes, initializers, value,
                                     self.opset)
        finally:
            for v in unnamed:
                v.name = None
        model = ir.serde.deserialize_model(graph)
        fold_shapes(model)
        out = model.graph.outputs[0]
        if out.shape is None:
            return None
        return [d if isinstance(d, int) else None for d in out.shape]

    def rank(self, op, slot, i=0):
        shape = self.shape(op, slot, i)
        if shape is None:
            raise ConversionError(f"rank of {op.type}.{slot} is unknown" + self._where())
        return len(shape)

    def dtype(self, op, slot, i=0):
        var = self.var(op.input(slot)[i])
        return None if var is None else var.dtype

    def out_dtype(self, op, slot, i=0):
        var = self.var(op.output(slot)[i])
        return None if var is None else var.dtype

    def constant_input(self, op, slot, i=0):
        """The NumPy value of an input if it is a parameter or a constant, else None."""
        names = op.input(slot)
        if i >= len(names):
            return None
        value = self.lookup(names[i])
        if value.const_value is not None:
            return value.const_value.numpy()
        return None

    # --- building --------------------------------------------------------------------------
    def const(self, array, name=None, dtype=None):
        """A constant, stored as an initializer of the main graph (sub-graphs may use it)."""
        array = np.asarray(array, dtype=dtype) if dtype is not None or not isinstance(
            array, np.ndarray) else array
        if name is None:
            name = self._unique_value_name(self._prefix() + "const")
        elif name in self.initializers:
            return self.initializers[name]
        tensor = ir.Tensor(array, name=name)        # (ir.tensor checks protocols first)
        value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                         const_value=tensor)
        self.initializers[name] = value
        return value

    def emit(self, op_type, inputs, attrs, num_outputs=1, domain=""):
        attrs = {k: v for k, v in attrs.items() if v is not None}
        inputs = [self._as_value(x) for x in inputs]
        node = ir.Node(domain, op_type, inputs, [_attribute(k, v) for k, v in attrs.items()],
                       num_outputs=num_outputs, name=self._node_name(op_type))
        if self._current is not None:
            node.metadata_props["paddle_op"] = self._current[0].type
        self._graphs[-1].append(node)
        return node.outputs[0] if num_outputs == 1 else tuple(node.outputs)

    def name_anonymous_values(self, nodes):
        """Values no Paddle var named are named after their node, for readable graphs."""
        for node in nodes:
            for k, out in enumerate(node.outputs):
                if out.name is None:
                    base = node.name if len(node.outputs) == 1 else f"{node.name}:{k}"
                    out.name = self._unique_value_name(base)

    def _as_value(self, x):
        if x is None or isinstance(x, ir.Value):
            return x
        return self.const(np.asarray(x))

    def _prefix(self):
        if self._current is None:
            return ""
        op, idx = self._current
        return f"{op.type}_{idx}/"

    def _node_name(self, op_type):
        base = self._prefix() + op_type
        n = self._node_count.get(base, 0)
        self._node_count[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def _where(self):
        if self._current is None:
            return ""
        op, idx = self._current
        return f" (op #{idx} {op.type})"

    # --- sub-graphs --------------------------------------------------------------------------
    def subgraph(self, block, inputs, outputs, name):
        """Convert a Paddle block into an ONNX graph (If branches, Loop bodies).

        inputs:  [(paddle var name or None, ir.Value)] graph inputs, bound in the block's scope
                 (an unnamed Value is named after the var)
        outputs: [paddle var name, ir.Value, or a callable returning an ir.Value] graph outputs,
                 looked up (or called, to emit nodes in the sub-graph) after conversion
        Values of enclosing graphs are used directly, as ONNX allows.
        """
        self._scopes.append({})
        self._graphs.append([])
        saved = self._current
        try:
            for var_name, value in inputs:
                if value.name is None:
                    value.name = self._unique_value_name(var_name or f"{name}_in")
                if var_name is not None:
                    self.bind(var_name, value)
            self.convert_ops(block.ops)
            self._current = saved
            outs = []
            for out in outputs:
                if callable(out):
                    out = out()
                value = out if isinstance(out, ir.Value) else self.lookup(out)
                if value.producer() is None or value.producer() not in self._graphs[-1] \
                        or value in outs:   # produced inside the graph, and listed once
                    typed, value = value, self.op.Identity(value)
                    value.type = typed.type   # (a sequence's type can't be inferred back)
                outs.append(value)
            nodes = self._graphs[-1]
            self.name_anonymous_values(nodes)   # here: each ir.Graph would name them val_0, ...
        finally:
            self._current = saved
            self._graphs.pop()
            self._scopes.pop()
        return ir.Graph([v for _, v in inputs], outs, nodes=nodes, name=name)

    def convert_ops(self, ops):
        for op in ops:
            if op.type in STRUCTURAL_OPS:
                continue
            mapper = get_mapper(op.type)
            handler = mapper.handler(self.opset)
            self._current = (op, self._op_index[id(op)])
            try:
                handler(self, op)
            except (ConversionError, PaddleFormatError):
                raise
            except Exception as exc:  # noqa: BLE001 - a mapper's failure, named for the user
                text = " ".join(str(exc).split())
                raise ConversionError(
                    f"{self.program.model_path or '<memory>'}: op #{self._current[1]} "
                    f"({op.type}) cannot be converted: {type(exc).__name__}: {text} (its "
                    "variables' shapes or attributes may be damaged; otherwise this is a bug in "
                    f"the {op.type} mapper, please report it)") from exc
        self._current = None


def _required_opset(program):
    """The lowest opset covering every op, and {(type, reason): count} of what can't convert."""
    problems, needed, needed_by = {}, MIN_OPSET, None
    for op in program.all_ops():
        if op.type in STRUCTURAL_OPS:
            continue
        mapper = get_mapper(op.type)
        reason = "no mapper registered" if mapper is None else mapper.check(op)
        if reason is None:
            opset = mapper.required_opset(op)
            if opset > MAX_OPSET:
                reason = f"needs opset {opset}, above the newest supported ({MAX_OPSET})"
            elif opset > needed:
                needed, needed_by = opset, op.type
        if reason is not None:
            problems[(op.type, reason)] = problems.get((op.type, reason), 0) + 1
    return needed, needed_by, problems


def choose_opset(program, opset_version=None, auto_upgrade_opset=True):
    """The opset to export with: the lowest that covers the model, or the user's."""
    needed, needed_by, problems = _required_opset(program)
    if problems:
        raise UnsupportedOpsError(problems, program.model_path)
    if opset_version is None:
        return needed
    if not MIN_OPSET <= opset_version <= MAX_OPSET:
        raise ConversionError(f"opset {opset_version} is outside {MIN_OPSET}..{MAX_OPSET}")
    if opset_version < needed:
        if not auto_upgrade_opset:
            raise ConversionError(f"op {needed_by!r} needs opset >= {needed}, {opset_version} was "
                                  "asked; allow the upgrade (auto_upgrade_opset / "
                                  "--enable_auto_update_opset) or ask for a newer opset")
        return needed
    return opset_version


def _graph_input(program, name, symbols):
    var = program.var(name)
    if var is None or var.dtype is None:
        raise ConversionError(f"model input {name!r} has no dtype in the program")
    dims = [d if d >= 0 else symbols.get((name, i), f"{name}_dim{i}")
            for i, d in enumerate(var.shape or ())]
    return ir.Value(name=name, type=ir.TensorType(onnx_dtype(var.dtype)), shape=ir.Shape(dims))


def name_free_dims(model):
    """Give the graph outputs' dims that shape inference left unknown a symbol of their own
    (`<output>_dim<i>`): a dynamic dim then always has a name."""
    def unknown(d):
        return not isinstance(d, int) and getattr(d, "value", d) is None

    for value in model.graph.outputs:
        if value.shape is not None and any(unknown(d) for d in value.shape):
            value.shape = ir.Shape([f"{value.name}_dim{i}" if unknown(d) else d
                                    for i, d in enumerate(value.shape)])


def program_to_onnx(program, opset, progress=None):
    """Map every op of the Program to ONNX nodes; returns an ir.Model (not yet optimized)."""
    ctx = ExportContext(program, opset)
    graph_inputs = []
    symbols = input_dim_symbols(program)
    for name in program.inputs:
        value = _graph_input(program, name, symbols)
        ctx.bind(name, value)
        graph_inputs.append(value)
    ctx.graph_inputs = graph_inputs
    ops = program.global_block.ops
    if progress is not None:
        ops = progress(ops)
    ctx.convert_ops(ops)

    outputs = []
    for name in program.outputs:
        value = ctx.lookup(name)
        if value.name != name or value in outputs or value in graph_inputs or value.const_value is not None:
            value = ctx.op.Identity(value)   # the output must carry the Paddle name
            # (unless the program overwrote an input in place, as legacy while loops do: the
            # input keeps the name)
            value.name = ctx._unique_value_name(name) if name in program.inputs else name
        outputs.append(value)
    for name, value in zip(program.outputs, outputs):   # declared from the Program; shape
        var = program.var(name)                         # inference may refine them
        if var is not None and var.dtype is not None and value.type is None:
            value.type = ir.TensorType(onnx_dtype(var.dtype))
        if var is not None and var.shape is not None and value.shape is None:
            # Unknown dims stay unnamed here: shape inference gives them the inputs' symbols
            # where the program makes them equal; `name_free_dims` names the rest.
            value.shape = ir.Shape([d if d >= 0 else None for d in var.shape])

    graph = ir.Graph(graph_inputs, outputs, nodes=ctx._graphs[0],
                     initializers=list(ctx.initializers.values()),
                     opset_imports={"": opset}, name="paddle_npu")
    ctx.name_anonymous_values(ir.traversal.RecursiveGraphIterator(graph))
    # An output carries its Paddle name; a value the program overwrote in place held it first.
    named = {v.name: v for v in outputs}
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for v in node.outputs:
            if v.name in named and named[v.name] is not v:
                v.name = ctx._unique_value_name(v.name)
    model = ir.Model(graph, ir_version=_IR_VERSION[opset], producer_name="paddle_npu",
                     producer_version=__version__)
    for key, value in ctx.model_metadata.items():
        model.metadata_props[key] = json.dumps(value, sort_keys=True)
    return model
