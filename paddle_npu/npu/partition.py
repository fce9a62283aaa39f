"""Device placement and segments: which nodes the NPU runs, which the CPU (MCU) runs.

Every top-level node gets a device; the graph is re-ordered (still topologically) so that
nodes of one device run back to back as long as the data flow allows, and contiguous runs
of one device become numbered segments, NPU -> CPU -> NPU ... as NNIE runs Faster R-CNN.
Each node records its device and segment (graph.py's `set_placement`).
"""
import heapq

import onnx_ir as ir

from ..errors import ConversionError
from . import graph as g
from .ops import DOMAIN, get_primitive
from .passes import Pass
from .report import Segment
from .segments import check_segment_cap


def place(node, target):
    """'npu', 'cpu', or None when neither runs it."""
    if g.mark(node) == "cpu":   # the user's mark (marks.py)
        return "cpu" if target.cpu_runs(node.op_type, node.domain) else None
    op_type = node.op_type
    if node.domain == DOMAIN:
        op_type = get_primitive(op_type).placed_as or op_type
    if target.npu_runs(op_type, node.domain):
        return "npu"
    if target.cpu_runs(node.op_type, node.domain):
        return "cpu"
    return None


def _subgraphs(node):
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.value
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.value


def _used_values(node):
    """Values a node reads, including those its sub-graphs read from enclosing graphs."""
    used = [v for v in node.inputs if v is not None]
    graphs, inner, reads = list(_subgraphs(node)), set(), []
    while graphs:                       # every graph nested in the node, at any depth
        g = graphs.pop()
        inner.update(g.inputs)
        reads.extend(g.outputs)
        for sub in g:
            inner.update(sub.outputs)
            reads.extend(v for v in sub.inputs if v is not None)
            graphs.extend(_subgraphs(sub))
    seen = set(used)
    for v in reads:
        if v not in inner and v not in seen:
            seen.add(v)
            used.append(v)
    return used


def partition(model, target):
    """Place, re-order and segment the main graph in place; returns the Segments."""
    graph = model.graph
    nodes = list(graph)
    device, missing = {}, {}
    for node in nodes:
        dev = place(node, target)
        if dev is None:
            missing.setdefault(node.op_type, []).append(node.name)
        device[node] = dev
    if missing:
        listed = "; ".join(f"{op} ({len(names)}: {names[0]}...)" for op, names in
                           sorted(missing.items()))
        raise ConversionError(f"target {target.name!r}: neither its NPU nor its CPU runs {listed}")

    index = {node: i for i, node in enumerate(nodes)}
    reads = {node: _used_values(node) for node in nodes}
    waiting, users = {}, {}
    for node in nodes:
        deps = {v.producer() for v in reads[node]}
        deps = {d for d in deps if d in index and d is not node}
        waiting[node] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(node)
    ready = {"npu": [], "cpu": []}
    for node in nodes:
        if waiting[node] == 0:
            heapq.heappush(ready[device[node]], (index[node], node.name, node))
    order, current = [], device[nodes[0]] if nodes else "npu"
    while ready["npu"] or ready["cpu"]:
        if not ready[current]:
            current = "cpu" if current == "npu" else "npu"
        _, _, node = heapq.heappop(ready[current])
        order.append(node)
        for user in users.get(node, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready[device[user]], (index[user], user.name, user))
    if len(order) != len(nodes):
        raise ConversionError("the graph has a cycle")
    graph.remove(nodes, safe=False)
    graph.extend(order)

    segments = []
    for node in order:
        if not segments or segments[-1].device != device[node]:
            segments.append(Segment(len(segments), device[node], []))
        segments[-1].nodes.append(node.name)
        g.set_placement(node, device[node], segments[-1].index)

    seg_of = {node: g.segment(node) for node in order}
    outputs = set(graph.outputs)
    ins, outs = [{} for _ in segments], [{} for _ in segments]   # ordered sets of names
    for node in order:
        k = seg_of[node]
        for v in reads[node]:
            if v.const_value is not None or v.name in graph.initializers:
                continue
            prod = v.producer()
            src = seg_of.get(prod)
            if src != k:                 # from another segment, or a graph input
                ins[k][v.name] = None
                if src is not None:
                    outs[src][v.name] = None
        for v in node.outputs:
            if v in outputs:
                outs[k][v.name] = None
    for s, i, o in zip(segments, ins, outs):
        s.inputs, s.outputs = list(i), list(o)
    return segments


class Partition(Pass):
    """Place, order and segment the graph (`partition`); a target's cap on NPU segments is
    checked. info["segments"]: the Segments."""
    name = "partition"

    def __init__(self, target):
        super().__init__()
        self.target = target

    def run(self, model, result):
        segments = partition(model, self.target)
        check_segment_cap(segments, self.target)
        result.info["segments"] = segments
        result.modified = True
