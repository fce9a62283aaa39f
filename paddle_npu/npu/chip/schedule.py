"""The chip's schedule of one image and the event-driven simulation that times it.

The lowered program becomes tasks, each on one unit of the chip:

    layer:L   a matrix layer's own arrays and their periphery (the window fed in, the
              tiles' partial sums added, its moves): every tile of the layer reads the same
              row vector at once, one vector per `array_vmm_ns`; the periphery works at the
              vector unit's rate beside the reads (a layer takes the longer of the two).
              Copies of the layer's weights (mapping.replicate) serve its vectors in turn.
    vector    everything else the NPU runs (elementwise, pooling, moves, normalisation)
    lut       the lookup-table unit (Lut, QLut)
    scatter   the scatter / gather unit a target may declare (max-unpooling, ...)
    written   arrays written at run time (RuntimeVMM: a product of two activations)
    cpu       the nodes placed on the CPU
    link      hand-overs between chip and CPU (and the host's inputs and outputs): the bytes
              over the link, after the driver's round trip (`handover`, which occupies
              nothing: hand-overs of several images overlap)
    program   reprogramming the arrays between groups of layers (every array of the group
              at once, row by row)

A task produces its output row by row: an image's rows (a window's output height), or
one piece when its output is not an image. A task's row starts when the rows of its inputs
that row needs are ready and its unit is free: a window needs the input rows under it, an
elementwise op or a matrix layer's product the same rows, anything else (a global pool, a
transpose, attention) the whole input. So layers overlap where the data flow allows. A
shared unit serves the task latest in the program first, so that rows flow on. The
simulation gives one image's latency, every unit's busy time and the activation memory
held at the worst moment (a row is held from when it is made until the last task reading
it no longer needs it).
"""
import heapq
import math
from dataclasses import dataclass, field
from typing import List, Optional

from .. import graph as g
from ..ops import DOMAIN, get_primitive
from ..ops.im2col import image_dims
from .cost import count, dims, is_array_node, node_ns, value_bytes, vector_read_ns
from .target import SCATTER_GATHER_OPS

MAX_ROWS = 64           # a task's rows are timed in at most this many steps
WINDOW_OPS = ("Im2Col", "Pool", "DepthwiseConv", "QDepthwiseConv")
ROW_PRIMITIVES = g.ELEMENTWISE_PRIMITIVES + ("Requantize", "Scale", "ScaleLut", "SwapChannel",
                                             "AddInTile", "VMM", "QVMM")
ROW_OPS = g.ELEMENTWISE + ("Cast", "Where", "Equal", "Greater", "Less", "Not", "And", "Or",
                           "Dropout")
LUT_PRIMITIVES = ("Lut", "QLut")
WRITTEN = ("RuntimeVMM", "QRuntimeVMM")


@dataclass
class Dep:
    task: int
    kind: str                      # "rows", "window", "whole"; "after": order only, no data
    window: tuple = ()             # (input rows, output rows, kernel extent, stride, top pad)


@dataclass
class Task:
    name: str
    unit: str
    ns: float                      # the whole output, one image
    rows: int = 1                  # steps the output is made in
    deps: List[Dep] = field(default_factory=list)
    out_bytes: int = 0
    layer: Optional[str] = None    # the matrix layer whose arrays it reads
    group: int = 0
    vectors: int = 0               # row vectors it reads through the arrays
    reads: float = 0.0             # a layer's: its arrays' time, and its periphery's
    periphery: float = 0.0


def _window(node):
    """(input rows, output rows, kernel extent, stride, top pad) of a window primitive."""
    prim = get_primitive(node.op_type)
    a = prim.attrs_of({k: v.value for k, v in node.attributes.items()})
    x = dims(node.inputs[0])
    if x is None or len(x) != 4:
        return None
    h = image_dims(x, a)[2]
    if not isinstance(h, int):
        return None
    k = (a["kernel_shape"][0] - 1) * a["dilations"][0] + 1
    s, top, bottom = a["strides"][0], a["pads"][0], a["pads"][2]
    out = max(1, (h + top + bottom - k) // s + 1)
    return h, out, k, s, top


def _row_wise(node):
    if node.domain == DOMAIN:
        if node.op_type == "DimTransform":
            perm = list(node.attributes["perm"].value)
            return perm[:2] == [0, 1]
        return node.op_type in ROW_PRIMITIVES
    if node.op_type == "Concat":
        rank = len(dims(node.outputs[0]) or [])
        axis = node.attributes.get_int("axis", 0)
        return rank >= 3 and axis in (-1, rank - 1)
    return node.op_type in ROW_OPS


def _has_rows(value):
    d = dims(value)
    return d is not None and len(d) >= 3 and isinstance(d[1], int) and d[1] > 1


def build_tasks(model, segments, target, array_layers):
    """The tasks of the lowered model ([Task]). array_layers: {layer: the layer whose
    arrays it reads} of the matrix layers on arrays (a layer reads its own, or an earlier
    one's)."""
    tasks, made_by = [], {}             # value name -> task index
    layer_task, node_task, device_of = {}, {}, {}
    for node in model.graph:
        layer = g.source(node)
        where = g.device(node) or "npu"
        if where == "npu" and layer in array_layers and node.op_type not in WRITTEN:
            i = layer_task.get(layer)
            if i is None:
                i = layer_task[layer] = len(tasks)
                tasks.append(Task(layer, f"layer:{array_layers[layer]}", 0.0,
                                  layer=array_layers[layer]))
            t = tasks[i]
            if is_array_node(node):
                x, w = dims(node.inputs[0]), dims(node.inputs[1])
                stacked = w is not None and node.op_type in ("VMM", "QVMM") and len(w) == 3
                stack = w[0] if stacked else 1
                vectors = (count(x[:-1]) or 1) // stack if x else 1
                t.vectors = max(t.vectors, vectors)
                t.reads = max(t.reads, vectors * vector_read_ns(node, target))  # tiles at once
            else:
                t.periphery += node_ns(node, "npu", target)[1]
            t.ns = max(t.reads, t.periphery)
        else:
            unit, ns = node_ns(node, where, target)
            if where == "npu":
                unit = "lut" if node.domain == DOMAIN and node.op_type in LUT_PRIMITIVES else \
                    "written" if node.op_type in WRITTEN else \
                    "scatter" if node.domain == "" and node.op_type in SCATTER_GATHER_OPS else \
                    "vector"
                first = next((v for v in node.inputs if v is not None and v.name in made_by),
                             None)
                if unit == "vector" and _row_wise(node) and first is not None and \
                        tasks[made_by[first.name]].unit.startswith("layer:"):
                    unit = tasks[made_by[first.name]].unit     # the layer's periphery
            i = len(tasks)
            tasks.append(Task(node.name, unit, ns))
        device_of[i] = where
        node_task[node.name] = i
        t = tasks[i]
        if node.domain == DOMAIN and node.op_type in WINDOW_OPS:
            w = _window(node)
            t.rows = max(t.rows, w[1] if w else 1)
        for v in node.inputs:
            if v is None or v.name not in made_by or made_by[v.name] == i:
                continue
            p = made_by[v.name]
            if node.domain == DOMAIN and node.op_type in WINDOW_OPS and v is node.inputs[0]:
                w = _window(node)
                dep = Dep(p, "window", w) if w else Dep(p, "whole")
            elif _row_wise(node) and _has_rows(v):
                dep = Dep(p, "rows")
                t.rows = max(t.rows, tasks[p].rows)
            else:
                dep = Dep(p, "whole")
            if not any(d.task == p and d.kind == dep.kind for d in t.deps):
                t.deps.append(dep)
        for v in node.outputs:
            made_by[v.name] = i
    outputs = {v.name for v in model.graph.outputs}
    for node in model.graph:         # what a task hands on: read by another task or the host
        for v in node.outputs:
            i = made_by[v.name]
            if v.name in outputs or any(u.node is not None and
                                        node_task.get(u.node.name, i) != i for u in v.uses()):
                tasks[i].out_bytes += value_bytes(v)
    for t in tasks:
        t.rows = max(1, min(t.rows, MAX_ROWS))
    _add_transfers(model, segments, target, tasks, made_by, device_of, node_task)
    return tasks


def _add_transfers(model, segments, target, tasks, made_by, device_of, node_task):
    """A hand-over per segment receiving from the other device or the host (its inputs
    together, as cost.segment_costs counts them), and one for the outputs the NPU hands to
    the host; the segment's tasks wait for its hand-over. A hand-over is the driver's round
    trip (`transfer_latency_ns`: time that passes, the link free meanwhile for another
    image's bytes) and then the bytes over the link."""
    def hand_over(name, nbytes, deps):
        c = target.cost
        trip = len(tasks)
        tasks.append(Task(f"{name}: round trip", "handover", c.transfer_latency_ns, deps=deps))
        tasks.append(Task(name, "link", nbytes / c.link_bytes_per_ns,
                          deps=[Dep(trip, "after")]))
        return trip + 1

    for s in segments:
        if not s.cost or not s.cost.get("transfers_in"):
            continue
        crossing = {made_by[n] for n in s.inputs
                    if n in made_by and device_of[made_by[n]] != s.device}
        link = hand_over(f"to #{s.index}", s.cost["bytes_in"],
                         [Dep(p, "whole") for p in sorted(crossing)])
        for i in sorted({node_task[n] for n in s.nodes if n in node_task}):
            tasks[i].deps = [d for d in tasks[i].deps if d.task not in crossing]
            tasks[i].deps.append(Dep(link, "whole"))
    outs = [v.name for v in model.graph.outputs if device_of.get(made_by.get(v.name)) == "npu"]
    if outs:
        nbytes = sum(value_bytes(v) for v in model.graph.outputs if v.name in outs)
        hand_over("to the host", nbytes, [Dep(made_by[n], "whole") for n in dict.fromkeys(outs)])


def _needed(dep, j, rows, p_rows):
    """The last row step of the producer that row step j (of `rows`) of a task needs; -1:
    none."""
    if dep.kind in ("whole", "after"):
        return p_rows - 1
    if dep.kind == "rows":
        return math.ceil((j + 1) * p_rows / rows) - 1
    h, out, k, s, top = dep.window
    done = math.ceil((j + 1) * out / rows)
    need = min(h, (done - 1) * s + k - top)
    return math.ceil(need * p_rows / h) - 1 if need > 0 else -1


def _passed(dep, j, rows):
    """The share of the producer's output task row step j no longer needs after it."""
    if dep.kind == "after":
        return 1.0
    if dep.kind == "whole":
        return 1.0 if j == rows - 1 else 0.0
    if dep.kind == "rows":
        return (j + 1) / rows
    h, out, k, s, top = dep.window
    first = math.ceil((j + 1) * out / rows) * s - top
    return 1.0 if j == rows - 1 else min(1.0, max(0.0, first / h))


@dataclass
class Run:
    latency_ns: float
    busy_ns: dict                  # unit -> ns
    peak_bytes: int
    finish_ns: list                # per task
    timeline: Optional[dict] = None   # unit -> [(start, end)]: when it worked (trace=True)


def simulate(tasks, servers, memory=True, own_units=False, trace=False):
    """Run the tasks: servers {unit: how many rows it works on at once; None: unbounded}
    (a unit not named has one). own_units: every task on a unit of its own with its unit's
    servers, nothing shared: the schedule's data flow alone, whose latency no schedule of
    these tasks beats. trace: also when each unit worked (Run.timeline). Returns a Run."""
    n = len(tasks)
    if own_units:
        servers = {i: servers.get(t.unit, 1) for i, t in enumerate(tasks)}
        tasks = [Task(t.name, i, t.ns, t.rows, t.deps, t.out_bytes, t.layer, t.group,
                      t.vectors) for i, t in enumerate(tasks)]
    consumers = [[] for _ in range(n)]
    readers = [[] for _ in range(n)]           # the consumers holding the data
    for i, t in enumerate(tasks):
        for d in t.deps:
            consumers[d.task].append((i, d))
            if d.kind != "after":
                readers[d.task].append(i)
    step = [t.ns / t.rows for t in tasks]
    issued, done = [0] * n, [0] * n            # row steps queued / finished (in order)
    finished = [set() for _ in range(n)]
    free = {u: servers.get(u, 1) for u in {t.unit for t in tasks}}
    queue = {u: [] for u in free}
    busy = {u: 0.0 for u in free}
    events, seq = [], 0
    finish = [0.0] * n
    timeline = {u: [] for u in free} if trace else None
    # memory: bytes of each task's output made and freed (its readers all past them)
    made, freed = [0.0] * n, [0.0] * n
    passed = [{} for _ in range(n)]
    live = peak = 0.0

    def ready(i):
        t = tasks[i]
        j = issued[i]
        return j < t.rows and all(done[d.task] - 1 >= _needed(d, j, t.rows, tasks[d.task].rows)
                                  for d in t.deps)

    def offer(i, dirty):
        while ready(i):
            # a shared unit serves the task latest in the program first: rows go on
            # through the pipeline rather than wait behind an earlier task's backlog
            heapq.heappush(queue[tasks[i].unit], (-i, issued[i]))
            issued[i] += 1
            dirty.add(tasks[i].unit)

    def dispatch(now, dirty):
        nonlocal seq
        for u in sorted(dirty):       # (a set's order would change the event order)
            q = queue[u]
            while q and (free[u] is None or free[u] > 0):
                i, j = heapq.heappop(q)
                i = -i
                if free[u] is not None:
                    free[u] -= 1
                busy[u] += step[i]
                if trace:
                    spans = timeline[u]
                    if spans and spans[-1][1] >= now:      # joins the span it continues
                        spans[-1] = (spans[-1][0], max(spans[-1][1], now + step[i]))
                    else:
                        spans.append((now, now + step[i]))
                seq += 1
                heapq.heappush(events, (now + step[i], seq, i, j))

    dirty = set()
    for i in range(n):
        offer(i, dirty)
    dispatch(0.0, dirty)
    now = 0.0
    while events:
        now, _, i, j = heapq.heappop(events)
        dirty = set()
        batch = [(i, j)]
        while events and events[0][0] == now:
            _, _, i2, j2 = heapq.heappop(events)
            batch.append((i2, j2))
        touched = set()
        for i, j in batch:
            u = tasks[i].unit
            if free[u] is not None:
                free[u] += 1
            dirty.add(u)
            finished[i].add(j)
            while done[i] in finished[i]:
                finished[i].discard(done[i])
                done[i] += 1
            if done[i] == tasks[i].rows:
                finish[i] = now
            touched.add(i)
            if memory:
                made[i] += tasks[i].out_bytes / tasks[i].rows
                live += tasks[i].out_bytes / tasks[i].rows
                for d in tasks[i].deps:
                    if d.kind == "after":
                        continue
                    p = d.task
                    share = _passed(d, j, tasks[i].rows)
                    if share <= passed[p].get(i, 0.0):
                        continue
                    passed[p][i] = share
                    gone = min(passed[p].get(c, 0.0) for c in readers[p])
                    now_freed = min(made[p], gone * tasks[p].out_bytes)
                    if now_freed > freed[p]:
                        live -= now_freed - freed[p]
                        freed[p] = now_freed
        peak = max(peak, live)        # (what ends and starts at one instant, together)
        for i in touched:
            offer(i, dirty)
            for c, _ in consumers[i]:
                offer(c, dirty)
        dispatch(now, dirty)
    stuck = [t.name for i, t in enumerate(tasks) if done[i] < t.rows]
    if stuck:
        raise RuntimeError(f"schedule: {len(stuck)} task(s) never ran, e.g. {stuck[0]}")
    return Run(now, busy, int(peak), finish, timeline)

