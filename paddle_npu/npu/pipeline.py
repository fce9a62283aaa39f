"""Stage 2: an ONNX model -> the same model on NPU primitives, CPU segments, and a report.

    onnx_io.load_model (opset 17 where it converts, else 15; shapes inferred) -> one ir.Model, then
    the declared passes (`passes()`):
        name nodes -> fixed input sizes (--input-shape) -> fuse preprocessing -> marks
        -> restruct rules -> shapes again -> LSTM / GRU unrolled (rnn.py) -> shapes again
        -> fold what is constant at the fixed sizes
        -> layer normalisations written out fused (a LayerNorm primitive)
        -> BatchNorm left over to Mul + Add -> @onnx_op lowerings -> images kept
        channels-last between NPU layers (channels_last.py) -> a transpose and the
        reshape after it merged into one DimTransform -> drop what is unused
        -> place / order / segment by estimated latency
    -> the NPU program; then the function bodies onnxruntime emulates it with are attached
       (emulation/: the program stays as it is) -> (ir.Model, Report)
"""
import functools
import math
import time

from ..errors import ConversionError
from ..onnx_io import load_model
from . import graph as g
from .chip.cost import layer_report, node_macs, segment_costs
from .chip.estimate import estimate_chip
from .chip.plan import LayerPlan, UnitPlan
from .chip.target import load_target
from .chip.tiling import PLANS, Geometry, plan_tiles
from .context import LowerContext
from .emulation import DEFAULT as DEFAULT_EMULATION
from .emulation import MIN_BODY_OPSET, check_emulation
from .emulation.functions import emulate
from .graph import device
from .ops import DOMAIN
from .passes.channels_last import ChannelsLast
from .passes.common import (BatchNormToAffine, FixInputShapes, FoldFixedConstants, FuseLayerNorm,
                            InferShapes, MergeDimTransforms, NameNodes, RemoveUnused)
from .passes.framework import Pass, RulePass, Sequence
from .passes.input_shapes import dynamic_inputs
from .passes.marks import ApplyMarks
from .passes.partition import Partition
from .passes.planning import Planned, PlanLayers
from .passes.preprocess_fusion import FusePreprocess
from .passes.restruct import ORDER as RESTRUCT_PASSES
from .passes.restruct import restruct_passes
from .passes.rnn import UnrollRnn
from .registry import get_onnx_mapper
from .report import Report

MIN_IR_VERSION = 10     # node metadata_props and function overloads


# The opset a lowered model is raised to where onnx's converter can take it there (else
# MIN_BODY_OPSET): 17 has LayerNormalization, a LayerNorm's float32 body in one node.
LOWERED_OPSET = 17


def prepare(model):
    """The ir.Model the passes work on: opset upgraded, shapes inferred, nodes named."""
    m = load_model(model, MIN_BODY_OPSET, preferred_opset=LOWERED_OPSET)
    NameNodes()(m)
    return m


class LowerNodes(Pass):
    """Every node a registered lowering (`@onnx_op`) accepts -> NPU primitives, a matrix
    layer from the planning pass's plan; the others stay, with the lowering's reason in
    `refused`."""
    name = "lower"
    lowering = True

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def run(self, model, result):
        ctx = self.ctx
        ctx.plans = next((r.plans for r in self.before if isinstance(r, Planned)), {})
        for node in list(model.graph):
            if node.graph is not model.graph:       # absorbed by a lowering before it
                continue
            mapper = get_onnx_mapper(node.op_type, node.domain)
            if mapper is None:
                continue
            # (a planned node was checked by the planning pass)
            reason = None if node.name in ctx.plans else mapper.check(ctx, node)
            if reason is not None:
                result.refused[node.name] = f"{node.op_type}: {reason}"
                continue
            ctx.begin(node)
            ctx.replace(node, list(mapper.lower(ctx, node)))
            result.fired.append(node.name)


def graph_passes(target, preprocess=None, marks=None, enable=(), disable=(),
                 input_shape=None, primitives=True):
    """The passes that decide the layers: they leave plain ONNX ops whose matrix layers the
    lowerings take as they are (the names the quantised layers' records carry);
    `primitives`: preprocessing fused as the NPU's primitives, else as standard ops."""
    return [
        FixInputShapes(input_shape) if input_shape else None,
        FusePreprocess(preprocess, primitives=primitives) if preprocess is not None else None,
        ApplyMarks(marks),
        *restruct_passes(target, enable, disable),
        InferShapes(),
        UnrollRnn(target),
        InferShapes(),
        FoldFixedConstants(),
    ]


def passes(ctx, preprocess=None, marks=None, enable=(), disable=(), input_shape=None):
    """The declared stage-2 pass list for a LowerContext (model, target, plan)."""
    target = ctx.target
    return Sequence(
        *graph_passes(target, preprocess, marks, enable, disable, input_shape),
        RulePass("layernorm", [FuseLayerNorm()]) if target.runs_primitive("LayerNorm") and
        target.npu_runs("LayerNormalization") else None,
        BatchNormToAffine(),
        PlanLayers(ctx),
        LowerNodes(ctx),
        ChannelsLast(),
        RulePass("merge_dim_transforms", [MergeDimTransforms()], restart=True),
        RemoveUnused(),
        Partition(target),
    )


def lower(model, target=None, plan="packed", preprocess=None, marks=None, enable=(),
          disable=(), input_shape=None, quantization=None, progress=None,
          emulation=DEFAULT_EMULATION, fit="groups", name=None, balance=False):
    """Lower an ONNX model (path, bytes, ModelProto or ir.Model) for a target (preset name,
    target file or Target). Returns (ir.Model, Report); the input is left unchanged.
    preprocess: a PreprocessSpec (or dict) to fuse image preprocessing in front of the
    model first (raw uint8 images in; see paddle_npu/preprocess.py).
    marks: a marks.Marks (CPU / 16-bit placement, compile_mode); enable / disable: restruct
    passes to switch on / off beyond the target's own (restruct.py).
    input_shape: {input name: [sizes]} fixing the inputs' sizes first (-1 leaves one
    dynamic; input_shapes.py), so that layers on inputs of open size can lower.
    quantization: a plan.Quantization to lower matrix layers to integer primitives (their
    records are kept in the model's metadata, `quantization_records`).
    progress: None, or called with (stage name, seconds) after each stage.
    emulation: the function bodies attached for onnxruntime, "exact" or "float32"
    (emulation/); the NPU program is the same with either.
    fit: a model needing more arrays than the target has runs in "groups" (the arrays
    reprogrammed between them), or is refused ("refuse": ConversionError naming the
    smallest chip that holds it); chip/mapping.py. name: the model's file, for messages.
    balance: where the vector unit sets the pace and the chip has arrays to spare, put the
    depthwise layers with the most vector work on arrays instead (block-diagonal tiles), as
    many as the throughput gains by, lowering again (`balanced`)."""
    if plan not in PLANS:
        raise ConversionError(f"unknown plan {plan!r} (known: {', '.join(PLANS)})")
    check_emulation(emulation)
    target = load_target(target)
    once = functools.partial(_lower_once, model, target, plan, preprocess, marks, enable,
                             disable, input_shape, quantization, progress, emulation, fit,
                             name)
    m, report, plans = once()
    return balanced(once, target, plan, m, report, plans) if balance else (m, report)


def balanced(once, target, plan, m, report, plans):
    """Of the lowering `m, report` (once(): _lower_once with the user's options, `plan`
    among them), and of lowerings of the same with depthwise layers on spare arrays, the
    one whose chip estimate has the most images per second. Only where the vector unit sets
    the pace and the chip has arrays to spare; the candidates move the depthwise layers of
    most vector work: the first quarter, half, three quarters and all of them, each cut to
    what the spare arrays hold. The chosen estimate records what it moved and the first
    one's figures (ChipEstimate.balanced)."""
    chip = report.chip
    spare = chip.mapping.available - chip.mapping.needed
    if chip.paced_by != "vector" or spare <= 0:
        return m, report
    vector = sorted((p for p in plans if p.unit == "vector"),
                    key=lambda p: -p.vectors * p.tiles[0].useful)
    # (the arrays each takes under the plan: a per-channel plan gives each channel its own)
    arrays = [len(plan_tiles(Geometry(p.tiles[0].cols, 1, p.tiles[0].rows, 1), plan,
                             target.rows, target.cols)) for p in vector]
    best, tried = (m, report), set()
    for share in (0.25, 0.5, 0.75, 1.0):
        k = math.ceil(len(vector) * share)
        while k and sum(arrays[:k]) > spare:
            k -= 1
        if not k or k in tried:
            continue
        tried.add(k)
        moved = [p.layer for p in vector[:k]]
        m2, report2, _ = once(array_layers=moved)
        if report2.chip.throughput_per_s > best[1].chip.throughput_per_s:
            report2.chip.balanced = {"layers": moved, "arrays": sum(arrays[:k]),
                                     "before": chip.summary()}
            best = (m2, report2)
    return best


def _lower_once(model, target, plan, preprocess, marks, enable, disable, input_shape,
                quantization, progress, emulation, fit, name, array_layers=()):
    start = time.perf_counter()
    m = prepare(model)
    if progress is not None:
        progress("load", time.perf_counter() - start)
    ctx = LowerContext(m, target, plan, quantization, array_layers)
    steps = passes(ctx, preprocess, marks, enable, disable, input_shape)
    steps.progress = progress
    steps(m)
    # (every planned node is lowered: the planning pass checked it)
    plans = [p for p in ctx.plans.values() if isinstance(p, LayerPlan)]
    units = [p if isinstance(p, UnitPlan) else p.unit_plan for p in ctx.plans.values()
             if isinstance(p, UnitPlan) or p.unit_plan is not None]
    m.ir_version = max(m.ir_version, MIN_IR_VERSION)
    attached = time.perf_counter()
    emulated = emulate(m, emulation)
    if progress is not None:
        progress("emulation", time.perf_counter() - attached)
    if quantization is not None:
        g.set_quantization(m, {"bits": quantization.bits,
                               "layers": _records(m, plans),
                               "units": [u.record() for u in units if u.float_why is None],
                               "float_units": [_kept_float(u) for u in units
                                               if u.float_why is not None]})

    devices, plain = {}, {}
    for node in m.graph:
        dev = g.device(node)
        devices[dev] = devices.get(dev, 0) + 1
        if node.domain != DOMAIN:
            where = plain.setdefault(node.op_type, {})
            where[dev] = where.get(dev, 0) + 1
    restructured = [r.as_dict() for r in steps.results
                    if r.name in RESTRUCT_PASSES]
    fused = steps.result(FusePreprocess)
    placed = steps.result(Partition)
    layers = [layer_report(p, target) for p in plans]
    segment_costs(m, placed.segments, target, layers)
    chip = estimate_chip(m, placed.segments, target, plans, layers, fit,
                         name or (model if isinstance(model, str) else "the model"))
    report = Report(target.as_dict(), plan, layers, placed.segments,
                    devices, plain, steps.not_lowered(), time.perf_counter() - start,
                    preprocess=fused.fused if fused else None,
                    restruct=restructured, marks=steps.result(ApplyMarks).marks.as_dict(),
                    dynamic=_left_dynamic(m, target), plain_macs=_plain_macs(m),
                    cpu_reasons=placed.cpu_reasons, emulation=emulated, chip=chip)
    return m, report, plans


def lowerable(model, target=None, preprocess=None, marks=None, enable=(), disable=(),
              input_shape=None):
    """The model `lower` lowers with these options as an ir.Model of standard ONNX ops, its
    layers the lowered model's (`graph_passes`): an LSTM / GRU unrolled, the matrix layers
    named as the records of a quantised lowering name them."""
    target = load_target(target)
    m = prepare(model)
    Sequence(*graph_passes(target, preprocess, marks, enable, disable, input_shape,
                           primitives=False))(m)
    return m


def _left_dynamic(model, target):
    """When inputs keep sizes that are not fixed and nodes the NPU has a form for stay off
    it with sizes not fixed: {"inputs": {name: dims}, "kept_off_npu": {op type: count}}."""
    inputs = dynamic_inputs(model)
    if not inputs:
        return None
    kept = {}
    for node in model.graph:
        # on the NPU, or one the NPU runs as it is (on the CPU by a mark or for its cost)
        if device(node) == "npu" or target.npu_runs(node.op_type, node.domain) or \
                get_onnx_mapper(node.op_type, node.domain) is None:
            continue
        values = [v for v in list(node.inputs) + list(node.outputs) if v is not None]
        if any(v.shape is None or not all(isinstance(d, int) for d in v.shape.dims)
               for v in values):
            kept[node.op_type] = kept.get(node.op_type, 0) + 1
    return {"inputs": inputs, "kept_off_npu": kept} if kept else None


def _plain_macs(model):
    """{op type: multiply-accumulates} of the matrix layers left as plain ONNX ops (Conv,
    ConvTranspose, MatMul, Gemm): the work the arrays do not do."""
    out = {}
    for node in model.graph:
        macs = 0 if node.domain == DOMAIN else node_macs(node)
        if macs:
            out[node.op_type] = out.get(node.op_type, 0) + macs
    return out


def _records(model, plans):
    """The quantisation records of the integer layers, in the order their first products
    (QVMM, or QDepthwiseConv on the vector unit) run in the placed graph."""
    first = {}
    for i, node in enumerate(model.graph):
        if node.domain == DOMAIN and node.op_type in ("QVMM", "QDepthwiseConv"):
            first.setdefault(g.source(node), i)
    return [p.record() for p in sorted((p for p in plans if p.bits is not None),
                                       key=lambda p: first[p.layer])]


def _kept_float(unit):
    """The record of a lookup table an integer lowering keeps in float, and why."""
    return {"layer": unit.layer, "op": unit.op, "function": unit.function, "bits": unit.bits,
            "why": unit.float_why}


def quantization_records(model):
    """The per-layer quantisation records an ir.Model lowered with `quantization` carries,
    or None."""
    found = g.quantization(model)
    return None if found is None else found["layers"]
