"""Estimated cost of a node on a device and of a tensor crossing between chip and CPU, from
the target's `Cost` numbers and the shapes the graph records (a size that is not fixed
counts as 1). Placement (partition.py) weighs these; the report adds them up per segment.

    arrays   VMM / QVMM: one array read per row vector; (Q)RuntimeVMM also writes the matrix
    vector   everything else the NPU runs (vector unit, lookup table, moves): per element
             (output elements; a primitive's `work`: a reduction counts what it reads)
    cpu      multiply-accumulates of matrix layers, plus every other output element
    transfer per hand-over (a segment boundary, all the tensors crossing it together): a fixed
             latency plus the bytes over the link
"""
from dataclasses import dataclass, replace
from typing import Optional

from ..graph import device as device_of, dims, segment as segment_of, source
from ..ops import DOMAIN, get_primitive
from ..ops.readout import columns_per_weight, input_cycles, of_attrs as readout_of
from .tiling import PLANS, PlanCost, plan_cost, plan_cost_of

ARRAY_PRIMITIVES = ("VMM", "QVMM", "RuntimeVMM", "QRuntimeVMM")
# a matrix layer's multiply-accumulates on the vector unit
VECTOR_MATRIX_PRIMITIVES = ("DepthwiseConv", "QDepthwiseConv")
WRITTEN_AT_RUN_TIME = ("RuntimeVMM", "QRuntimeVMM")
MATRIX_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
RNN_OPS = {"LSTM": 4, "GRU": 3, "RNN": 1}       # gates: weight blocks of W and R


@dataclass
class LayerReport:
    name: str                      # the source node
    op_type: str
    detail: str                    # "C=64 M=128 k=3x3 s=1 g=1 -> 32x32", ...
    cost: PlanCost                 # the plan emitted
    alternative: Optional[PlanCost] = None   # Conv: the other plan, for comparison

    def as_dict(self):
        d = {"name": self.name, "op_type": self.op_type, "detail": self.detail,
             **self.cost.as_dict()}
        if self.alternative is not None:
            d["alternative"] = self.alternative.as_dict()
        return d



def layer_report(plan, target):
    """A matrix layer's cost record, from its plan (plan.LayerPlan) and the target: its
    arrays, cells, weights, row vectors through the arrays, products and sums; a Conv's
    under the other tiling beside it. A layer whose tiles are an earlier layer's arrays
    (`arrays_of`) adds none of their arrays, cells or weights; its own reads, products and
    sums still count."""
    rows, cols, bits = target.rows, target.cols, target.weight_bits
    v = plan.vectors
    if plan.unit == "vector":       # one tile standing for the layer, on no array
        weights = plan.tiles[0].useful
        cost = PlanCost("vector", 0, 0, 0, v, 0, v * weights, 0, (weights * bits + 7) // 8)
        return LayerReport(plan.layer, plan.op, plan.detail, cost)
    if plan.unit == "written":      # no weights stay on arrays: written per matrix
        r, m, matrices, k = plan.written
        tiles = -(-r // rows) * -(-m // cols)
        cost = PlanCost("written", 0, 0, 0, matrices * k, matrices * k * tiles,
                        matrices * k * r * m, 0, 0)
        return LayerReport(plan.layer, plan.op, plan.detail, cost)
    has_bias = plan.bias is not None
    cost = plan_cost(plan.tiles, plan.tiling, rows, cols, v, has_bias, bits)
    cost.add_elements += plan.extra_adds
    if plan.readout is not None:      # each weight's cells side by side: more arrays
        per = columns_per_weight(plan.bits, plan.readout)
        arrays = sum(-(-t.cols * per // cols) for t in plan.tiles)
        cost = replace(cost, arrays=arrays, cells=arrays * rows * cols,
                       vmm_invocations=arrays * v, cells_per_weight=per)
    other = None
    if plan.other is not None:
        tiling = next(p for p in PLANS if p != plan.tiling)
        other = plan_cost_of(plan.other, tiling, rows, cols, v, has_bias, bits)
    detail = plan.detail
    if plan.arrays_of is not None:
        def shared(c):
            return c and replace(c, arrays=0, cells=0, weights=0, weight_bytes=0)
        cost, other = shared(cost), shared(other)
        detail = f"{detail}, on the arrays of {plan.arrays_of}"
    return LayerReport(plan.layer, plan.op, detail, cost, other)


def count(shape):
    """Elements of a shape, a size that is not fixed counted as 1; None if unknown."""
    if shape is None:
        return None
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else 1
    return n


def value_bytes(value):
    """Bytes of a tensor (0 when its shape or type is not known)."""
    n = count(dims(value))
    if n is None or value.dtype is None:
        return 0
    return n * value.dtype.itemsize


def is_array_node(node):
    return node.domain == DOMAIN and node.op_type in ARRAY_PRIMITIVES


def is_matrix_layer_node(node):
    """A primitive doing a matrix layer's multiply-accumulates (on the arrays or not)."""
    return is_array_node(node) or (node.domain == DOMAIN and
                                   node.op_type in VECTOR_MATRIX_PRIMITIVES)


def node_macs(node):
    """Multiply-accumulates of a matrix layer (plain Conv / ConvTranspose / MatMul / Gemm,
    LSTM / GRU / RNN, an array primitive or (Q)DepthwiseConv), 0 for anything else or when
    shapes are not known."""
    ins = [v for v in node.inputs]
    if node.domain == DOMAIN and node.op_type in VECTOR_MATRIX_PRIMITIVES:
        w, y = dims(ins[1]), dims(node.outputs[0])       # each output: its channel's taps
        return count(y) * count(w[1:]) if w is not None and y is not None else 0
    if node.domain == DOMAIN and node.op_type in ARRAY_PRIMITIVES:
        x, w, y = dims(ins[0]), dims(ins[1]), dims(node.outputs[0])
        if x is None or w is None or y is None:
            return 0
        return count(y) * (w[-2] if isinstance(w[-2], int) else 1)
    if node.domain in ("", "ai.onnx") and node.op_type in RNN_OPS:
        return _rnn_macs(node)
    if node.domain not in ("", "ai.onnx") or node.op_type not in MATRIX_OPS:
        return 0
    x, w, y = (dims(ins[0]), dims(ins[1]) if len(ins) > 1 else None, dims(node.outputs[0]))
    if node.op_type == "Conv" and w is not None:       # each output: C/g * kernel
        return count(y) * count(w[1:]) if y is not None else 0
    if node.op_type == "ConvTranspose" and w is not None:   # each input: M/g * kernel
        return count(x) * count(w[1:]) if x is not None else 0
    k = x[-1] if x and isinstance(x[-1], int) else None   # each output: the inner size K
    if node.op_type == "Gemm" and node.attributes.get_int("transA", 0) and x:
        k = x[0] if isinstance(x[0], int) else None
    return count(y) * k if k is not None and y is not None else 0


def _rnn_macs(node):
    """An LSTM / GRU / RNN node's gate products: per step, batch row and direction,
    gates * hidden * (input + hidden)."""
    x, w = dims(node.inputs[0]), dims(node.inputs[1])
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return 0
    hidden = node.attributes.get_int("hidden_size", 0) or (
        w[1] // RNN_OPS[node.op_type] if isinstance(w[1], int) else 0)
    return count(x[:2]) * count(w[:2]) * (count(x[2:]) + hidden)


def _output_elements(node):
    return sum(count(dims(v)) or 0 for v in node.outputs)


def _vector_elements(node):
    """Element operations of a node on the vector unit: a primitive's own count where it
    declares one (pooling windows, Col2Im's additions, ...), else one per output element."""
    prim = get_primitive(node.op_type) if node.domain == DOMAIN else None
    values = [v for v in node.inputs if v is not None] + list(node.outputs)
    if prim is None or any(dims(v) is None for v in values):
        return _output_elements(node)

    def static(v):     # a size that is not fixed counted as 1, as everywhere here
        return None if v is None else [d if isinstance(d, int) else 1 for d in dims(v)]

    attrs = prim.attrs_of({k: a.value for k, a in node.attributes.items()})
    work = prim.work(attrs, [static(v) for v in node.inputs], [static(v) for v in node.outputs])
    return _output_elements(node) if work is None else work


def node_ns(node, where, target):
    """(unit, estimated ns) of a node run on `where` ("npu" or "cpu"); unit is "arrays",
    "vector" or "cpu"."""
    c = target.cost
    if where == "cpu":
        return "cpu", node_macs(node) / c.cpu_macs_per_ns + \
            _output_elements(node) / c.cpu_elements_per_ns
    if not is_array_node(node):
        return "vector", _vector_elements(node) / c.vector_elements_per_ns
    x, w = dims(node.inputs[0]), dims(node.inputs[1])
    if x is None or w is None:
        return "arrays", 0.0
    stack = w[0] if node.op_type in ("VMM", "QVMM") and len(w) == 3 else 1   # tiles, own rows each
    vectors = count(x[:-1]) // stack
    r, m = (d if isinstance(d, int) else 1 for d in w[-2:])
    tiles = stack * -(-r // target.rows) * -(-m // target.cols)   # a VMM node: a band of tiles
    if node.op_type not in WRITTEN_AT_RUN_TIME:              # weight-stationary
        return "arrays", vectors * tiles * vector_read_ns(node, target)
    return "arrays", vectors * tiles * c.array_vmm_ns + count(w) * c.array_write_ns_per_cell


def vector_read_ns(node, target):
    """One row vector through an array: one read (`array_vmm_ns`), or, for an integer tile
    read out as analog arrays are (QVMM's cell / DAC / ADC bits, ops/readout.py), a read
    per input cycle, the ADC converting its `columns_per_adc` columns of one cycle while
    the next cycle reads (the longer of the two sets the pace)."""
    c = target.cost
    if node.op_type != "QVMM":
        return c.array_vmm_ns
    a = get_primitive("QVMM").attrs_of({k: v.value for k, v in node.attributes.items()})
    r = readout_of(a)
    if r.ideal:
        return c.array_vmm_ns
    per_cycle = max(c.array_vmm_ns, target.columns_per_adc * adc_conversion_ns(r.adc_bits,
                                                                              target))
    return input_cycles(8 if a["acc_bits"] == 32 else 16, r) * per_cycle


def adc_conversion_ns(bits, target):
    """One conversion of a `bits`-bit ADC: `adc_ns` is the target's ADCs' (of `adc_bits`),
    and a successive-approximation ADC resolves one bit per step, so a layer read out
    finer than them takes proportionally longer (0: no ADC, an exact read-out)."""
    if not bits:
        return 0.0
    return target.cost.adc_ns * bits / (target.adc_bits or bits)


def transfer_ns(nbytes, target):
    """One hand-over of `nbytes` between chip and CPU."""
    c = target.cost
    return c.transfer_latency_ns + nbytes / c.link_bytes_per_ns


def segment_costs(model, segments, target, layers):
    """The whole-model story per segment, set as `segment.cost`: MACs (the matrix layers'
    useful ones as the layer reports count them, on the arrays or the vector unit, plus the
    matrix layers a CPU runs), NPU share of
    them, bytes coming in from the other device (or the host), going out to it, and the
    model's outputs an NPU segment hands to the host, and the estimated ns per unit (arrays,
    vector, cpu) and of the hand-overs it receives (one for everything it takes from the
    other device or the host) or makes to the host (one for the model's outputs).
    Also `segment.layers`: [(source layer, unit, nodes)] in run order, consecutive nodes of
    one layer and unit together (the picture draws them)."""
    by_segment = {s.index: [] for s in segments}
    for node in model.graph:
        by_segment[segment_of(node)].append(node)
    layer_macs = {l.name: l.cost.macs for l in layers}
    produced_on = {}
    for node in model.graph:
        for v in node.outputs:
            produced_on[v] = device_of(node)
    values = {v.name: v for node in model.graph for v in list(node.inputs) + list(node.outputs)
              if v is not None}
    values.update((v.name, v) for v in model.graph.inputs)
    outputs = {v.name for v in model.graph.outputs}
    counted = set()
    for s in segments:
        ns = {"arrays": 0.0, "vector": 0.0, "cpu": 0.0, "transfers": 0.0}
        macs = 0
        s.layers = []
        for node in by_segment[s.index]:
            unit, t = node_ns(node, s.device, target)
            ns[unit] += t
            layer = source(node) or node.name
            if is_matrix_layer_node(node):
                if layer not in counted:
                    counted.add(layer)
                    macs += layer_macs.get(layer, node_macs(node))
            elif node.domain != DOMAIN:
                macs += node_macs(node)
            if s.layers and s.layers[-1][:2] == (layer, unit):
                s.layers[-1] = (layer, unit, s.layers[-1][2] + 1)
            else:
                s.layers.append((layer, unit, 1))
        bytes_in = bytes_out = bytes_host = 0
        for name in s.inputs:
            v = values[name]
            if produced_on.get(v, "cpu") != s.device:     # the host holds the model's inputs
                bytes_in += value_bytes(v)
        for name in s.outputs:
            v = values[name]
            readers = {device_of(u.node) for u in v.uses()} - {None}   # None: in a sub-graph
            if name in outputs:
                readers.add("cpu")
            if readers - {s.device}:
                bytes_out += value_bytes(v)
            if name in outputs and s.device == "npu":       # to the host
                bytes_host += value_bytes(v)
        crossing_in = int(any(produced_on.get(values[n], "cpu") != s.device for n in s.inputs))
        crossing_host = int(s.device == "npu" and any(n in outputs for n in s.outputs))
        ns["transfers"] = (transfer_ns(bytes_in, target) if crossing_in else 0.0) + \
            (transfer_ns(bytes_host, target) if crossing_host else 0.0)
        s.cost = {"macs": macs, "npu_macs": macs if s.device == "npu" else 0,
                  "bytes_in": bytes_in, "bytes_out": bytes_out, "bytes_to_host": bytes_host,
                  "transfers_in": crossing_in, "transfers_to_host": crossing_host,
                  "ns": {k: round(v, 1) for k, v in ns.items()},
                  "total_ns": round(sum(ns.values()), 1)}
