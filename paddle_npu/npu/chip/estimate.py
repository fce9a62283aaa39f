"""What the lowered model costs on the chip: its arrays mapped (mapping.py), its schedule
simulated (schedule.py), and the lower bound the chip description sets.

    latency     one image, from its input to its outputs at the host
    throughput  images per second in steady state: with the weights on the chip, images
                follow each other through the pipeline and the busiest unit (per copy)
                sets the pace (`paced_by`); in groups, an image at a time, the first
                group reprogrammed for the next
    bound       the largest of: every array MAC spread over all the chip's arrays at full
                use; the schedule's own data flow with no unit shared (the critical path
                of the layers' reads); the busiest shared unit's work (vector unit, lookup
                table, scatter / gather unit, CPU, link), which no schedule avoids
"""
from dataclasses import dataclass, field

from ...errors import ConversionError
from .mapping import Mapping, map_layers, replicate
from .schedule import MAX_ROWS, Dep, Task, build_tasks, simulate

SHARED = ("vector", "lut", "scatter", "written", "cpu", "link", "program")


@dataclass
class ChipEstimate:
    mapping: Mapping
    latency_ns: float
    throughput_per_s: float
    paced_by: str                  # the unit (or layer) whose work sets the throughput
    bound_ns: float
    bounds: dict                   # {"macs", "data_flow", "shared_unit"}: ns
    busy_ns: dict                  # unit -> ns per image
    layer_busy_ns: dict            # layer -> ns its arrays work per image
    program_ns: float              # one reprogramming of the arrays
    peak_bytes: int                # activations held at the worst moment
    memory_bytes: int              # the chip's (0: not declared)
    spilled_bytes: int = 0         # held beyond it: to the host and back over the link
    timeline: dict = field(default_factory=dict)    # unit -> [(start, end)] ns (the picture)
    vector_units: int = 1          # each works on a row of its own at once
    without_copies: dict = field(default_factory=dict)   # latency, throughput, pace: copies aside
    # depthwise layers lowered onto spare arrays (pipeline.balanced): {"layers", "arrays",
    # "before": the summary() of the lowering that kept them on the vector unit}
    balanced: dict = field(default_factory=dict)

    def summary(self):
        """Latency, images per second and pace, with and without copies."""
        return {"latency_ns": round(self.latency_ns, 1),
                "throughput_per_s": round(self.throughput_per_s, 3), "paced_by": self.paced_by,
                "without_replication": self.without_copies or None}

    def as_dict(self):
        m = self.mapping
        return {"arrays_available": m.available, "arrays_needed": m.needed,
                "arrays_used": m.used, "vector_units": self.vector_units,
                "groups": max(0, len(m.groups) - 1),
                "group_layers": [[n for n, _ in grp] for grp in m.groups],
                "program_ns": round(self.program_ns, 1),
                "latency_ns": round(self.latency_ns, 1),
                "throughput_per_s": round(self.throughput_per_s, 3),
                "paced_by": self.paced_by, "bound_ns": round(self.bound_ns, 1),
                "bounds": {k: round(v, 1) for k, v in self.bounds.items()},
                "replication": {n: c for n, c in m.copies.items() if c > 1},
                "busy_ns": {k: round(v, 1) for k, v in self.busy_ns.items()},
                "layer_busy_ns": {k: round(v, 1) for k, v in self.layer_busy_ns.items()},
                "memory": {"peak_bytes": self.peak_bytes, "available": self.memory_bytes,
                           "spilled_bytes": self.spilled_bytes},
                "without_replication": self.without_copies or None,
                "depthwise_on_arrays": self.balanced or None}

    def lines(self):
        m = self.mapping
        have = f"{m.available} arrays" if m.available else "arrays as needed"
        if len(m.groups) > 1:
            fit = (f"needs {m.needed}: runs in {len(m.groups)} groups, the arrays "
                   f"reprogrammed {len(m.groups) - 1} times ({self.program_ns / 1000:.1f} us "
                   f"each)")
        else:
            fit = f"holds all {m.needed}" + (f", {m.used} with copies" if m.used > m.needed
                                             else "")
        units = f", {self.vector_units} vector units" if self.vector_units > 1 else ""
        out = [f"chip: {have}{units}; {fit}"]
        ratio = self.latency_ns / self.bound_ns if self.bound_ns else 1.0
        pace = "reprogramming per image" if self.paced_by == "groups" else self.paced_by
        out.append(f"  latency {_us(self.latency_ns)}, {self.throughput_per_s:,.0f} images/s "
                   f"(paced by {pace}); "
                   f"bound {_us(self.bound_ns)} ({ratio:.2f}x; "
                   + ", ".join(f"{k.replace('_', ' ')} {_us(v)}" for k, v in self.bounds.items())
                   + ")")
        copies = {n: c for n, c in m.copies.items() if c > 1}
        if copies:
            shown = sorted(copies.items(), key=lambda t: -t[1])
            out.append("  copies: " + ", ".join(f"{n} x{c}" for n, c in shown[:6])
                       + (f" (+{len(shown) - 6})" if len(shown) > 6 else ""))
            if self.without_copies:
                out.append(f"  without copies: latency {_us(self.without_copies['latency_ns'])}, "
                           f"{self.without_copies['throughput_per_s']:,.0f} images/s")
        if self.balanced:
            before = self.balanced["before"]
            out.append(f"  {len(self.balanced['layers'])} depthwise layers on "
                       f"{self.balanced['arrays']} spare arrays instead of the vector unit: "
                       f"{self.throughput_per_s:,.0f} images/s, kept there "
                       f"{before['throughput_per_s']:,.0f} (paced by {before['paced_by']})")
        busy = ", ".join(f"{u} {_us(v)}" for u, v in self.busy_ns.items()
                         if not u.startswith("layer:") and u != "handover" and v)
        top = sorted(self.layer_busy_ns.items(), key=lambda t: -t[1])[:3]
        out.append(f"  busy: {busy}" + ("; slowest layers " + ", ".join(
            f"{n} {_us(v)}" for n, v in top) if top else ""))
        mem = f"  activation memory: peak {_kib(self.peak_bytes)}"
        if self.memory_bytes:
            mem += f" of {_kib(self.memory_bytes)}"
        if self.spilled_bytes:
            mem += (f": OVER by {_kib(self.spilled_bytes)}, spilled to the host and back over "
                    f"the link (in the latency)")
        out.append(mem)
        return out


def cost_change(before, after):
    """What a change of the plan costs on the chip, from the estimates before and after:
    ({"arrays", "latency_ns", "throughput_per_s"}: [before, after], one line saying so)."""
    a0, a1 = before.mapping.needed, after.mapping.needed
    l0, l1 = before.latency_ns, after.latency_ns
    t0, t1 = before.throughput_per_s, after.throughput_per_s

    def times(old, new):
        return f" (x{new / old:.2f})" if old else ""
    return ({"arrays": [a0, a1], "latency_ns": [l0, l1], "throughput_per_s": [t0, t1]},
            f"{a0} -> {a1} arrays{times(a0, a1)}, latency {_us(l0)} -> {_us(l1)}"
            f"{times(l0, l1)}, {t0:,.0f} -> {t1:,.0f} images/s")


def _us(ns):
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1000:.1f} us"


def _kib(n):
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def estimate_chip(model, segments, target, plans, layers, fit="groups", name="the model"):
    """The ChipEstimate of a lowered model: plans (LayerPlan) and layers (their LayerReport)
    of its matrix layers, segments placed with costs (cost.segment_costs)."""
    on_arrays = {p.layer: p.arrays_of or p.layer for p in plans if p.unit == "arrays"}
    arrays = [(l.name, l.cost.arrays) for l in layers if l.name in on_arrays and l.cost.arrays]
    mapping = map_layers(arrays, target.array_count, fit, name)
    tasks = build_tasks(model, segments, target, on_arrays)
    program_ns = target.rows * target.cost.array_program_ns_per_row
    _add_groups(tasks, mapping, program_ns)
    layer_busy = {}
    for t in tasks:
        if t.layer is not None:
            layer_busy[t.layer] = layer_busy.get(t.layer, 0.0) + t.ns
    shared = {}
    for t in tasks:
        if t.unit in SHARED:
            shared[t.unit] = shared.get(t.unit, 0.0) + t.ns
    units = target.vector_units(mapping.available or mapping.needed)
    plain = _run(tasks, mapping, program_ns, target, units)
    vectors = {}
    for t in tasks:
        if t.layer is not None:
            vectors[t.layer] = max(vectors.get(t.layer, 0), t.vectors)
    replicate(mapping, layer_busy, vectors)
    for t in tasks:     # a layer's copies share its rows out: at least one step per copy
        if t.vectors and mapping.copies.get(t.layer, 1) > t.rows:
            t.rows = min(mapping.copies[t.layer], MAX_ROWS, t.vectors)
    run = _run(tasks, mapping, program_ns, target, units)
    if run["spilled"] and fit == "refuse":
        raise ConversionError(
            f"{name}: its activations need {run['peak']} bytes at once, the target's memory "
            f"holds {target.activation_bytes} (or lower with --fit groups to spill the rest "
            f"to the host over the link)")
    servers = _servers(mapping, units)
    flow = simulate(tasks, servers, memory=False, own_units=True)
    macs = sum(l.cost.macs for l in layers if l.name in on_arrays)
    spread = macs / ((mapping.available or mapping.needed or 1) * target.rows * target.cols) \
        * target.cost.array_vmm_ns
    bounds = {"macs": spread, "data_flow": flow.latency_ns,
              "shared_unit": max((v / servers.get(u, 1) for u, v in shared.items()
                                  if u != "program"), default=0.0)}
    est = ChipEstimate(mapping, run["latency_ns"], run["throughput_per_s"], run["paced_by"],
                       max(bounds.values()), bounds, run["busy"], layer_busy, program_ns,
                       run["peak"], target.activation_bytes, run["spilled"], run["timeline"],
                       vector_units=units)
    if any(c > 1 for c in mapping.copies.values()):
        est.without_copies = {"latency_ns": round(plain["latency_ns"], 1),
                          "throughput_per_s": round(plain["throughput_per_s"], 3),
                          "paced_by": plain["paced_by"]}
    return est


def _servers(mapping, vector_units):
    return {"handover": None, "vector": vector_units,
            **{f"layer:{n}": c for n, c in mapping.copies.items()}}


def _run(tasks, mapping, program_ns, target, vector_units):
    """Latency, throughput, busy units and peak memory of the tasks under the mapping; what
    does not fit the chip's activation memory goes to the host and comes back over the link
    (the `spilled` bytes, their time added to the link and to the latency)."""
    servers = _servers(mapping, vector_units)
    run = simulate(tasks, servers, trace=True)
    busy, latency = dict(run.busy_ns), run.latency_ns
    spilled = max(0, run.peak_bytes - target.activation_bytes) if target.activation_bytes \
        else 0
    if spilled:
        extra = 2 * spilled / target.cost.link_bytes_per_ns
        busy["link"] = busy.get("link", 0.0) + extra
        latency += extra
    if len(mapping.groups) > 1:
        per_image, pace = latency + program_ns, "groups"   # the first group back, next image
    else:
        per_image, pace = max(((v / servers.get(u, 1), u) for u, v in busy.items()
                               if u != "program" and servers.get(u, 1)), default=(0.0, None))
        pace = pace[len("layer:"):] if pace and pace.startswith("layer:") else pace
    return {"latency_ns": latency, "busy": busy, "peak": run.peak_bytes, "spilled": spilled,
            "timeline": run.timeline, "paced_by": pace,
            "throughput_per_s": 1e9 / per_image if per_image else 0.0}


def _add_groups(tasks, mapping, program_ns):
    """In a model of several groups: a task reprogramming the arrays before each group after
    the first, once every layer of the group before has read its last vector; the group's
    layers wait for it. A layer split over several groups reads every vector once per
    part."""
    if len(mapping.groups) < 2:
        return
    first = {}
    for gi, grp in enumerate(mapping.groups):
        for n, _ in grp:
            first.setdefault(n, gi)
    for t in tasks:
        if t.layer is not None:
            t.ns *= len(mapping.group_of(t.layer)) or 1
    # a task runs in its layer's group, or in a later one when what it reads comes from
    # there (a layer reading an earlier layer's arrays after later groups: its weights come
    # back with that group)
    for i in _data_order(tasks):
        t = tasks[i]
        t.group = max([first.get(t.layer, 0) if t.layer is not None else 0] +
                      [tasks[d.task].group for d in t.deps])
    programs = []
    for gi in range(1, len(mapping.groups)):
        before = [i for i, t in enumerate(tasks) if t.layer is not None and t.group == gi - 1]
        programs.append(len(tasks))
        tasks.append(Task(f"program group {gi}", "program", program_ns,
                          deps=[Dep(i, "after") for i in before] +
                          ([Dep(programs[-2], "after")] if len(programs) > 1 else [])))
    for t in tasks:
        if t.layer is not None and t.group > 0:
            t.deps.append(Dep(programs[t.group - 1], "after"))


def _data_order(tasks):
    """The task indices in an order where every task comes after those it reads."""
    waiting = [len(t.deps) for t in tasks]
    readers = [[] for _ in tasks]
    for i, t in enumerate(tasks):
        for d in t.deps:
            readers[d.task].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    return order
