"""Device placement and segments: which nodes the NPU runs, which the CPU (MCU) runs.

Placement minimises the estimated latency (cost.py, the target's `Cost` numbers), hand-overs
between chip and CPU included:

1. every node goes where it can run, the NPU when both can (no CPU island for an op the NPU
   runs); the reason of every node left on the CPU is kept for the report;
2. the graph is re-ordered (still topologically) so that nodes of one device run back to
   back as long as the data flow allows: a CPU-only op moves to the edge of the NPU work
   around it when nothing after it on the NPU needs it (both starting devices are tried and
   the order with fewer segments kept);
3. a run of NPU nodes without array work (vector unit, lookup table, moves) that reads what
   the CPU made goes to the CPU when that is faster than running it on the chip and handing
   its tensors over: small post-processing after NMS / TopK / data-dependent shapes joins
   the CPU tail this way (a hand-over is one latency per segment boundary plus the bytes of
   every tensor crossing it; the model's inputs and outputs travel to and from the host
   whatever the placement, so only hand-overs between chip and CPU weigh here);
4. a target's cap on NPU segments is honoured by moving the cheapest such runs to the CPU;
   when only runs with array work are left, the cap is an error naming the nodes.

Contiguous runs of one device become numbered segments, NPU -> CPU -> NPU ... as NNIE runs
Faster R-CNN. Each node records its device and segment (graph.py's `set_placement`); placement
never changes what a node computes, only where and in which order it runs.
"""
import heapq
from dataclasses import dataclass, field
from typing import List, Optional

import onnx_ir as ir

from ...errors import ConversionError
from .. import graph as g
from ..chip.cost import is_array_node, node_ns, transfer_ns, value_bytes
from ..ops import DOMAIN, get_primitive
from .framework import Pass, PassResult, not_lowered


@dataclass
class Segment:
    index: int
    device: str
    nodes: List[str]
    inputs: List[str] = field(default_factory=list)    # tensors it receives from elsewhere
    outputs: List[str] = field(default_factory=list)   # tensors it hands to others / the host
    cost: Optional[dict] = None     # cost.segment_costs: MACs, bytes crossing, estimated ns
    layers: list = field(default_factory=list)         # [(source layer, unit, nodes)]

    def as_dict(self):
        return {"index": self.index, "device": self.device, "nodes": len(self.nodes),
                "first": self.nodes[0], "last": self.nodes[-1],
                "inputs": self.inputs, "outputs": self.outputs,
                **({"cost": self.cost} if self.cost is not None else {})}



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


def why_cpu(node, target, refusals):
    """Why `place` put a node on the CPU."""
    if g.mark(node) == "cpu":
        return f"marked for the CPU ({g.mark_reason(node) or 'by the user'})"
    if node.name in refusals:
        return f"not lowered: {refusals[node.name]}"
    if node.domain == DOMAIN:
        return f"target {target.name!r} has no {node.op_type} primitive"
    return f"the NPU of target {target.name!r} does not run {node.op_type}"


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


class _Graph:
    """What placement reads: the nodes in order, who reads what, the model's outputs."""

    def __init__(self, graph):
        self.nodes = list(graph)
        self.index = {node: i for i, node in enumerate(self.nodes)}
        self.reads = {node: _used_values(node) for node in self.nodes}
        self.deps, self.users = {}, {}
        for node in self.nodes:
            deps = {v.producer() for v in self.reads[node]}
            self.deps[node] = {d for d in deps if d in self.index and d is not node}
            for d in self.deps[node]:
                self.users.setdefault(d, []).append(node)
        self.outputs = set(graph.outputs)
        self.initializers = set(graph.initializers.values())

    def order(self, device, first):
        """A topological order running each device's ready nodes back to back, starting
        with device `first`."""
        waiting = {node: len(self.deps[node]) for node in self.nodes}
        ready = {"npu": [], "cpu": []}
        for node in self.nodes:
            if waiting[node] == 0:
                heapq.heappush(ready[device[node]], (self.index[node], node.name, node))
        order, current = [], first
        while ready["npu"] or ready["cpu"]:
            if not ready[current]:
                current = "cpu" if current == "npu" else "npu"
            _, _, node = heapq.heappop(ready[current])
            order.append(node)
            for user in self.users.get(node, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready[device[user]], (self.index[user], user.name, user))
        if len(order) != len(self.nodes):
            raise ConversionError("the graph has a cycle")
        return order

    def best_order(self, device):
        """The order with fewer device changes of the two starting devices (ties: the
        first node's device)."""
        first = device[self.nodes[0]] if self.nodes else "npu"
        orders = [self.order(device, first),
                  self.order(device, "cpu" if first == "npu" else "npu")]
        return min(orders, key=lambda o: len(runs(o, device)))

    def latency_ns(self, order, device, target, node_cost):
        """Estimated latency of an order under a placement: every node on its device, and
        each segment fed by the other device paying one hand-over of all the tensors it
        receives. The model's inputs and outputs go between the host and whichever device
        uses them wherever that is, so they do not weigh in placement (the report counts
        them)."""
        total, received = 0.0, []
        for node in order:
            if not received or device[node] != device[received[-1][0]]:
                received.append((node, set()))
            total += node_cost(node, device[node])
            for v in self.reads[node]:
                prod = v.producer()
                if prod in self.index and device[prod] != device[node] and \
                        v.const_value is None and v not in self.initializers:
                    received[-1][1].add(v)
        return total + sum(transfer_ns(sum(value_bytes(v) for v in values), target)
                           for _, values in received if values)

    def fed_by_cpu(self, run, device):
        """Whether a run reads a tensor a CPU node makes (so is not the model's head)."""
        return any(v.producer() in self.index and device[v.producer()] == "cpu"
                   for n in run for v in self.reads[n])


def runs(order, device):
    """Contiguous runs of one device in an order: [[node, ...], ...]."""
    out = []
    for node in order:
        if not out or device[out[-1][0]] != device[node]:
            out.append([])
        out[-1].append(node)
    return out


class _Costs:
    """Node costs on either device, computed once."""

    def __init__(self, target):
        self.target, self.ns = target, {}

    def __call__(self, node, where):
        key = (node, where)
        if key not in self.ns:
            self.ns[key] = node_ns(node, where, self.target)[1]
        return self.ns[key]


def _move_cost(graph, order, run, device, costs):
    """(ns lost by moving an NPU run to the CPU, < 0 when it gains; its ns on the NPU, on
    the CPU, and the hand-overs' ns saved) in the current order."""
    moved = dict(device)
    moved.update((n, "cpu") for n in run)
    before = graph.latency_ns(order, device, costs.target, costs)
    after = graph.latency_ns(order, moved, costs.target, costs)
    on_npu = sum(costs(n, "npu") for n in run)
    on_cpu = sum(costs(n, "cpu") for n in run)
    return after - before, on_npu, on_cpu, (before - on_npu) - (after - on_cpu)


def _movable(graph, run, device, target):
    """An NPU run the CPU may take: it reads what a CPU node made (the NPU keeps the
    model's head), it has no array work (the arrays hold the weights), and the CPU runs
    every node of it."""
    return graph.fed_by_cpu(run, device) and not any(is_array_node(n) for n in run) and \
        all(target.cpu_runs(n.op_type, n.domain) for n in run)


def _us(ns):
    return f"{ns / 1000:.1f} us"


def _move(run, device, reasons, why):
    for n in run:
        device[n] = "cpu"
        reasons[n.name] = why


def _place_by_cost(graph, device, target, reasons):
    """Steps 2-4 of the module docstring; returns the final order."""
    costs = _Costs(target)
    order = graph.best_order(device)
    moved = True
    while moved:
        moved = False
        for run in runs(order, device):
            if device[run[0]] != "npu" or not _movable(graph, run, device, target):
                continue
            delta, on_npu, on_cpu, saved = _move_cost(graph, order, run, device, costs)
            if delta < 0:
                _move(run, device, reasons,
                      f"faster on the CPU with its neighbours: {_us(on_cpu)} here vs "
                      f"{_us(on_npu)} on the NPU and {_us(saved)} of hand-overs")
                moved = True
        if moved:
            order = graph.best_order(device)
    cap = target.max_npu_segments
    while cap:
        npu_runs = [r for r in runs(order, device) if device[r[0]] == "npu"]
        candidates = [r for r in npu_runs if _movable(graph, r, device, target)]
        if len(npu_runs) <= cap or not candidates:
            break
        deltas = [_move_cost(graph, order, r, device, costs)[0] for r in candidates]
        i = min(range(len(candidates)), key=deltas.__getitem__)
        _move(candidates[i], device, reasons,
              f"moved to the CPU to keep within {cap} NPU segments (+{_us(deltas[i])})")
        order = graph.best_order(device)
    return order


def partition(model, target, refusals=None):
    """Place, re-order and segment the main graph in place. Returns (Segments, {name of a
    node on the CPU: why})."""
    graph = _Graph(model.graph)
    device, missing, reasons = {}, {}, {}
    for node in graph.nodes:
        dev = place(node, target)
        if dev is None:
            missing.setdefault(node.op_type, []).append(node.name)
        elif dev == "cpu":
            reasons[node.name] = why_cpu(node, target, refusals or {})
        device[node] = dev
    if missing:
        listed = "; ".join(f"{op} ({len(names)}: {names[0]}...)" for op, names in
                           sorted(missing.items()))
        raise ConversionError(f"target {target.name!r}: neither its NPU nor its CPU runs {listed}")

    order = _place_by_cost(graph, device, target, reasons)
    model.graph.remove(graph.nodes, safe=False)
    model.graph.extend(order)

    segments = []
    for node in order:
        if not segments or segments[-1].device != device[node]:
            segments.append(Segment(len(segments), device[node], []))
        segments[-1].nodes.append(node.name)
        g.set_placement(node, device[node], segments[-1].index)

    seg_of = {node: g.segment(node) for node in order}
    ins, outs = [{} for _ in segments], [{} for _ in segments]   # ordered sets of names
    for node in order:
        k = seg_of[node]
        for v in graph.reads[node]:
            if v.const_value is not None or v in graph.initializers:
                continue
            prod = v.producer()
            src = seg_of.get(prod)
            if src != k:                 # from another segment, or a graph input
                ins[k][v.name] = None
                if src is not None:
                    outs[src][v.name] = None
        for v in node.outputs:
            if v in graph.outputs:
                outs[k][v.name] = None
    for s, i, o in zip(segments, ins, outs):
        s.inputs, s.outputs = list(i), list(o)
    return segments, {n.name: reasons[n.name] for n in order if device[n] == "cpu"}


def check_segment_cap(segments, target, op_types=None):
    """A target that caps its NPU segments (NNIE: 8): error naming the CPU nodes that split
    the NPU work when there are more: the first few, then per op type (op_types: {node
    name: op type}) the count and the first node."""
    cap = getattr(target, "max_npu_segments", 0)
    npu = [s for s in segments if s.device == "npu"]
    if not cap or len(npu) <= cap:
        return
    splitters = [s for s in segments if s.device == "cpu" and 0 < s.index < len(segments) - 1]
    parts = []
    for s in splitters:
        shown = ", ".join(s.nodes[:3]) + (f" (+{len(s.nodes) - 3})" if len(s.nodes) > 3 else "")
        by_type = {}
        for name in s.nodes:
            by_type.setdefault((op_types or {}).get(name, "other"), []).append(name)
        counts = ", ".join(f"{op} {len(names)} ({names[0]}{', ...' if len(names) > 1 else ''})"
                           for op, names in by_type.items())
        parts.append(f"#{s.index}: {shown} [by type: {counts}]")
    raise ConversionError(
        f"target {target.name!r} runs at most {cap} NPU segments, this model needs {len(npu)}: "
        f"the NPU work is split by the CPU nodes of segments {'; '.join(parts)} (let the NPU "
        "run them, restructure them, or mark neighbouring nodes _cpu to join the CPU parts)")


@dataclass
class Placement(PassResult):
    segments: list = field(default_factory=list)    # the Segments, in order
    cpu_reasons: dict = field(default_factory=dict)     # CPU node -> why it is there


class Partition(Pass):
    """Place, order and segment the graph (`partition`); a target's cap on NPU segments is
    checked. The reasons of nodes on the CPU name the earlier lowering passes' refusals."""
    name = "partition"
    Result = Placement

    def __init__(self, target):
        super().__init__()
        self.target = target

    def run(self, model, result):
        segments, reasons = partition(model, self.target, not_lowered(self.before))
        check_segment_cap(segments, self.target, {n.name: n.op_type for n in model.graph})
        result.segments, result.cpu_reasons = segments, reasons
        result.modified = True
