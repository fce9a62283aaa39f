"""The graph toolkit every stage-2 pass, rule and lowering uses (onnx_ir graphs).

    constant(value)           the NumPy value of an initializer or a Constant node's output
    single_user(value)        the only node reading a value, or None
    take_over(old, new)       `new` stands for `old`: its readers, graph-output slot and name
    drop_dead(graph, nodes)   remove nodes (and what only they fed) nobody reads any more
    Builder(graph)            new nodes with names, types, shapes and attributes filled in
    dims(value)               a value's shape as a list of int / str / None

and the typed accessors of our node annotations, the only place their metadata keys are
spelled:

    mark / set_mark           "cpu" (the user placed it on the CPU) and why (mark_reason)
    precision / set_precision 8 or 16 bits (None: the target's)
    device / segment          where partitioning put the node
    source / source_op        the node a lowered node was made from
    quantization(model)       the per-layer scales of an integer lowering (model metadata)
    set_rows_size             the node's output is a tensor of the model held channels-last
                              (the layout pass, channels_last.py; proto_rows_size reads it)
    note(node, key, text)     free-form provenance ("folded", "merged")
"""
import json

import numpy as np
import onnx_ir as ir

from ..naming import UniqueNames, add_initializer

STANDARD = ("", "ai.onnx")
_PREFIX = "paddle_npu."
MARK = _PREFIX + "mark"
MARK_REASON = _PREFIX + "mark_reason"
PRECISION = _PREFIX + "precision"
DEVICE = _PREFIX + "device"
SEGMENT = _PREFIX + "segment"
SOURCE = _PREFIX + "source"
SOURCE_OP = _PREFIX + "source_op"
QUANTIZATION = _PREFIX + "quantization"     # model metadata: per-layer scales (JSON)
ROWS = _PREFIX + "rows"     # "HxW": the output is an NCHW tensor held as rows [N, H, W, C]
_NOTES = {"folded", "merged"}
# what a node's placement marks are: carried to whatever a rewrite or lowering makes of it
MARK_KEYS = (MARK, MARK_REASON, PRECISION)

# Plain ONNX ops computing element by element, with broadcasting: the same layout change of
# all their operands is that of their output.
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow", "PRelu", "Relu",
               "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
               "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Softplus", "Identity")
# Primitives computing element by element on their first input; the others are a scale of
# one element, or QLut's table (not an operand of the same shape).
ELEMENTWISE_PRIMITIVES = ("Lut", "QLut", "Quantize", "Dequantize")


# --- facts about values ---------------------------------------------------------------------

def constant(value):
    """The NumPy value of a constant value (an initializer or a Constant node's `value`),
    or None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if is_op(node, "Constant") and "value" in node.attributes:
        return node.attributes["value"].value.numpy()
    return None


def is_op(node, *op_types):
    """Whether `node` is a standard-domain node of one of these types."""
    return node is not None and node.domain in STANDARD and node.op_type in op_types


def users(value):
    """The distinct nodes reading `value`, in use order."""
    return list(dict.fromkeys(u for u, _ in value.uses()))


def single_user(value):
    """The only node reading `value`, or None (several readers, none, or a graph output)."""
    if value is None or value.is_graph_output():
        return None
    found = users(value)
    return found[0] if len(found) == 1 else None


def dims(value):
    """The value's shape as a list of int (static) / str (symbolic) / None, or None."""
    if value is None or value.shape is None:
        return None
    out = []
    for d in value.shape.dims:
        out.append(d if isinstance(d, int) else (d.value if d.value is not None else None))
    return out


def static_dims(value, skip=()):
    """The shape if every dim not in `skip` is static, else None."""
    found = dims(value)
    if found is None or any(not isinstance(d, int) for i, d in enumerate(found)
                            if i not in skip):
        return None
    return found


# --- editing --------------------------------------------------------------------------------

def take_over(old, new, shape=True):
    """`new` stands for `old`: every reader and graph-output slot, and old's name; with
    `shape`, also old's type and shape where known."""
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    name, old.name = old.name, None
    new.name = name
    if shape:
        if old.type is not None:
            new.type = old.type
        if old.shape is not None:
            new.shape = old.shape


def drop_dead(graph, nodes):
    """Remove those of `nodes` (and what only they fed) whose outputs nobody reads."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if node.graph is not graph:
            continue
        if any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue
        feeders = [v.producer() for v in node.inputs if v is not None and v.producer()]
        graph.remove(node, safe=True)
        todo.extend(feeders)


def drop_unread_initializers(graph, values):
    """Remove those of `values` that are initializers of `graph` nobody reads any more (so
    their arrays are freed now, not when the unused are removed at the end)."""
    for v in values:
        if graph.initializers.get(v.name) is v and not v.uses() and \
                not v.is_graph_output() and not v.is_graph_input():
            del graph.initializers[v.name]


def attributes(attrs):
    """onnx_ir attributes from a dict; an int list (even an empty one) is INTS, None skipped."""
    out = []
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer))
                                                    for v in value):
            out.append(ir.AttrInt64s(key, [int(v) for v in value]))
        else:
            out.extend(ir.convenience.convert_attributes({key: value}))
    return out


def initializer(graph, array, name):
    """A constant registered on the graph, under `name` or the first free name_N."""
    return add_initializer(graph, array, name)


def make_node(domain, op_type, inputs, attrs, name, dtype=None, shape=None, num_outputs=1,
              output_names=None):
    """A node (not yet in a graph) whose outputs have names, type and shape: output k is
    called `output_names[k]` (default: the node's name, `name:k` with several outputs)."""
    node = ir.Node(domain, op_type, list(inputs), attributes(attrs), num_outputs=num_outputs,
                   name=name)
    for k, out in enumerate(node.outputs):
        out.name = output_names[k] if output_names else (
            name if num_outputs == 1 else f"{name}:{k}")
        if dtype is not None:
            out.type = ir.TensorType(dtype)
        if shape is not None:
            out.shape = ir.Shape(shape)
    return node


class Builder:
    """New nodes for a graph: `b.node("Mul", [x, y], name="scale", shape=dims)` returns the
    node (not yet inserted); unique names from the graph's, dtype defaulting to the first
    input's."""

    def __init__(self, graph):
        self.graph = graph
        self.names = UniqueNames.of_graph(graph)

    def node(self, op_type, inputs, attrs=None, name=None, shape=None, dtype=None,
             domain=""):
        if dtype is None:
            first = next((x for x in inputs if x is not None), None)
            dtype = first.dtype if first is not None and first.type is not None else \
                ir.DataType.FLOAT
        return make_node(domain, op_type, inputs, attrs or {}, self.names(name or op_type),
                         dtype, shape)


# --- our annotations ------------------------------------------------------------------------

def mark(node):
    """"cpu" when the user placed the node on the CPU, else None."""
    return node.metadata_props.get(MARK)


def mark_reason(node):
    """Why the user's marks placed the node ("name ends in _cpu", ...), or None."""
    return node.metadata_props.get(MARK_REASON)


def set_mark(node, where, reason):
    node.metadata_props[MARK] = where
    node.metadata_props[MARK_REASON] = reason


def precision(node):
    """16 for a node marked to run at 16 bits, else None (the target's precision)."""
    return 16 if node.metadata_props.get(PRECISION) == "16" else None


def set_precision(node, bits):
    node.metadata_props[PRECISION] = str(int(bits))


def marks_of(node):
    """The node's placement marks, as metadata to copy onto what it becomes."""
    return {k: node.metadata_props[k] for k in MARK_KEYS if k in node.metadata_props}


def inherit_marks(sources, nodes):
    """Nodes made from `sources` carry their marks (the first source's win)."""
    for src in sources:
        for key, value in marks_of(src).items():
            for n in nodes:
                n.metadata_props.setdefault(key, value)


def copy_marks(table, node):
    """Marks recorded by `marks_of` set on a node unless it has its own."""
    for key, value in table.items():
        node.metadata_props.setdefault(key, value)


def device(node):
    return node.metadata_props.get(DEVICE)


def segment(node):
    value = node.metadata_props.get(SEGMENT)
    return None if value is None else int(value)


def set_placement(node, where, index):
    node.metadata_props[DEVICE] = where
    node.metadata_props[SEGMENT] = str(index)


def source(node):
    return node.metadata_props.get(SOURCE)


def source_op(node):
    return node.metadata_props.get(SOURCE_OP)


def set_source(node, src_name, src_op):
    node.metadata_props[SOURCE] = src_name
    node.metadata_props[SOURCE_OP] = src_op


def copy_annotations(src, node):
    """Source, placement and marks of `src` onto `node` (a rewrite of a lowered node)."""
    for key in (SOURCE, SOURCE_OP, DEVICE, SEGMENT) + MARK_KEYS:
        if key in src.metadata_props:
            node.metadata_props[key] = src.metadata_props[key]


def set_rows_size(node, h, w):
    """The node's output, the model's NCHW tensor of its name, is held as rows [N, H, W, C]
    of an H x W image."""
    node.metadata_props[ROWS] = f"{h}x{w}"


def proto_rows_size(node_proto):
    """(H, W) of a saved node whose output is held as rows (set_rows_size), else None."""
    text = proto_props(node_proto).get(ROWS)
    return None if text is None else tuple(int(d) for d in text.split("x"))


def quantization(model):
    """The quantisation a lowered ir.Model records ({"bits", "layers": [record]}), or None."""
    value = model.metadata_props.get(QUANTIZATION)
    return None if value is None else json.loads(value)


def set_quantization(model, info):
    model.metadata_props[QUANTIZATION] = json.dumps(info)


def note(node, key, text):
    """Provenance: which nodes this one was folded / merged from."""
    if key not in _NOTES:
        raise ValueError(f"unknown note {key!r}")
    node.metadata_props[_PREFIX + key] = text


def proto_props(node_proto):
    """{key: value} of a NodeProto's metadata (for code reading saved models)."""
    return {p.key: p.value for p in node_proto.metadata_props}


def proto_segment(node_proto):
    value = proto_props(node_proto).get(SEGMENT)
    return -1 if value is None else int(value)


def proto_precision(node_proto):
    return 16 if proto_props(node_proto).get(PRECISION) == "16" else None
