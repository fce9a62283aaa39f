"""The float ops of an integer plan checked one at a time: each run by the NumPy reference on
onnxruntime's own inputs and compared with onnxruntime's output.

Whole runs cannot be compared on a chain of float ops that amplifies rounding: a one-ulp
difference of a Log becomes 1e-4 after x100 and a sine, a decoder's refinements grow it
further. Op by op, a correct op differs by its own rounding only, and a wrong one is named.
"""
import numpy as np
import onnx
from onnx import helper

from ...compare import agreement
from ...onnx_io import load_proto, names_read
from .reference import Reference

LOCAL = "::given_onnxruntime"        # (the reference's outputs, beside onnxruntime's names)


def float_chain(graph, ends, is_float):
    """The nodes of `graph` (a GraphProto) that the tensors `ends` are computed from through
    float tensors (is_float(name)), in graph order; the walk stops at what is not float
    (integer tensors, shapes) and at graph inputs and weights."""
    producer = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    seen, todo = set(), list(ends)
    while todo:
        i = producer.get(todo.pop())
        if i is None or i in seen:
            continue
        seen.add(i)
        todo += [n for n in names_read(graph.node[i]) if n in producer and is_float(n)]
    return [graph.node[i] for i in sorted(seen)]


def check_float_ops(lowered, target, nodes, values):
    """Each node's float outputs computed by the reference from `values` (onnxruntime's
    tensors by name: every computed tensor the nodes read and write) against onnxruntime's:
    [{"node", "op", "output", "rel_diff"}], one per float output."""
    proto = load_proto(lowered)
    weights = {t.name: t for t in proto.graph.initializer}
    run, reads, outputs = [], [], []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.output[:]
        copy.output.extend(o + LOCAL if o else "" for o in node.output)
        run.append(copy)
        reads += [n for n in names_read(node) if n in values and n not in reads]
        outputs += [o for o in node.output if o and is_float(values.get(o))]
    graph = helper.make_graph(
        run, "float_ops", [onnx.ValueInfoProto(name=n) for n in reads],
        [onnx.ValueInfoProto(name=o + LOCAL) for o in outputs],
        [weights[n] for n in dict.fromkeys(n for node in nodes for n in names_read(node))
         if n in weights and n not in values])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import),
                              functions=list(proto.functions), ir_version=proto.ir_version)
    got = Reference(model, target, fuse_layers=False).run({n: values[n] for n in reads})
    made = {o: node for node in nodes for o in node.output}
    return [{"node": made[o].name, "op": made[o].op_type, "output": o,
             "rel_diff": agreement(g, values[o])["rel_diff"]} for o, g in zip(outputs, got)]


def is_float(value):
    """Whether `value` is an array of floats (None, an integer array, a sequence: not)."""
    return np.issubdtype(getattr(value, "dtype", np.int8), np.floating)
