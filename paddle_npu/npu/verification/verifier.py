"""Stage-2 verification: onnxruntime on the model before lowering, onnxruntime on the lowered
model (its emulation: function bodies), and the NumPy reference, on the same seeded input."""
import gc
import hashlib
import os

import numpy as np
import onnx
import onnx_ir as ir

from ...compare import agreement, run_onnx, run_onnx_on
from ...errors import ConversionError
from ...onnx_io import graph_inputs, load_header, load_proto, names_read, own_proto
from ..emulation import EMULATIONS
from ..emulation import KEY as EMULATION_KEY
from ..emulation.functions import emulate, emulation_of
from ..ops import DOMAIN
from ..passes.common import with_input_shapes
from .float64 import float64_outputs
from .float_ops import check_float_ops, float_chain
from .reference import Reference
from .selection import (HELD, RANKED, compare_picks, expose_steps, find_selections, held_as,
                        hold, link_lowered, own_picks)

TOLERANCE = 1e-5
# A float plan agrees when each of its runs is no farther from the model computed in float64
# than FACTOR times onnxruntime's float32 run of the model is. A correct lowering rounds
# differently, not more: on the CI zoo and PP-OCRv4's recogniser (three inputs each) the
# exact sums and the NumPy reference came 0.15-1.7x as far as onnxruntime, float32 sums
# 0.35-2.0x; the bound is twice the most, and refuses an error 4x the model's own.
FACTOR = 4.0
# The least a float32 output can be off (half an ulp of its largest value, relative): the
# bound's base where onnxruntime's run happens to be nearly exact.
FLOAT32_UNIT = 2.0 ** -24
# About one float32 ulp, relative: the input nudge that measures a model's float-noise floor.
NUDGE = 1e-7
# Integer plans round on purpose: they are judged by the cosine of their outputs to the float
# model's (the way vendor toolchains compare); onnxruntime must match the bit-true NumPy
# reference exactly on every integer tensor, and within the float tolerance on float outputs
# (float ops after the integer layers, Softmax, LayerNorm, ..., may round differently in the
# two from the same integers).
MIN_COSINE = 0.99
LAYER_INSIDES = {"Im2Col", "QVMM"}     # (see _integer_outputs)
INTEGER_PRIMITIVES = {"Quantize", "QVMM", "Requantize", "Dequantize", "QLut", "QRuntimeVMM",
                      "QDepthwiseConv"}

_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
       9: np.bool_, 10: np.float16, 11: np.float64}


def seeded_inputs(model, seed=0, batch=1):
    """Inputs for every graph input: normal floats, small non-negative ints (safe as indices),
    random booleans; symbolic dims are `batch`."""
    return seeded_feeds([(name, elem_type, dims or [])     # rank not given: a scalar
                         for name, elem_type, dims in graph_inputs(load_header(model).graph)],
                        seed, batch)


def seeded_feeds(specs, seed=0, batch=1):
    """seeded_inputs for (name, ONNX element type, dims: None for a size not fixed)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, elem_type, dims in specs:
        shape = [batch if d is None else d for d in dims]
        dtype = _NP.get(elem_type)
        if dtype is None:
            raise ValueError(f"input {name!r}: element type {elem_type} is not supported")
        if dtype == np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _runnable(model):
    """What onnxruntime is given: a file as its path (onnxruntime reads it; we hold no copy),
    an ir.Model as it is (run_onnx gives the session its weights where they lie), anything
    else serialized."""
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        return os.fspath(model)
    if isinstance(model, ir.Model):
        return model
    return load_proto(model).SerializeToString()


def _primitives(proto):
    return {n.op_type for n in proto.graph.node if n.domain == DOMAIN}


def _sqnr_db(got, want):
    want = np.asarray(want, np.float64)
    noise = float(np.sum((np.asarray(got, np.float64) - want) ** 2))
    signal = float(np.sum(want ** 2))
    if noise == 0:
        return float("inf")
    return 10 * np.log10(signal / noise) if signal > 0 else -float("inf")


def float_noise_floor(model, feeds, nudge=NUDGE):
    """Per output, how far float rounding alone moves the model in onnxruntime (relative to its
    scale): the largest move under graph optimisations off and four input nudges of about one
    float32 ulp (all up, all down, two seeded random signs per element). Some heads (detection
    decode, TPS rectification, large gains) amplify rounding far past 1e-5; a lowered model
    within this floor differs from the original by rounding, not by a lowering error."""
    model = _runnable(model)
    rng = np.random.default_rng(0)

    def nudged(sign):
        return {k: v if v.dtype.kind != "f" else
                (v.astype(np.float64) * (1 + sign(v) * nudge)).astype(v.dtype)
                for k, v in feeds.items()}

    signs = (lambda v: 1, lambda v: -1, lambda v: rng.choice([-1, 1], v.shape),
             lambda v: rng.choice([-1, 1], v.shape))
    _, (plain, *runs) = run_onnx_on(model, [feeds] + [nudged(sign) for sign in signs])
    runs.append(run_onnx(model, feeds, graph_optimizations=False)[1])
    return [max(rel_diff(r[i], p) for r in runs) for i, p in enumerate(plain)]


def rel_diff(got, want):
    """Relative difference of one output (compare.agreement); exact for integer outputs."""
    if not np.issubdtype(np.asarray(want).dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else float("inf")
    return agreement(got, want)["rel_diff"]


def verify(original, lowered, target=None, feeds=None, seed=0, tolerance=TOLERANCE,
           input_shape=None, min_cosine=MIN_COSINE, recorded=None, factor=FACTOR):
    """Compare the three runs; returns a dict with per-output agreement and `ok`.

    A float plan is ok when, per output, both runs of the lowered model are no farther from
    the original computed in float64 (float64.py) than `factor` times the original's
    float32 run by onnxruntime is (or than `factor` float32 units, FLOAT32_UNIT, where that
    run is nearly exact); integer outputs equal the original's (`within`: "float64"; each
    output's `float64`: the three distances, the bound and `ratio`, the factor it needed;
    `float64`: what ran the model, the factor, the worst ratio). Where the original cannot
    be run in float64 (`float64`: {"error": why}), the rule before it: both runs within
    `tolerance` (relative) of the original, or else each output within the original's own
    float-noise floor on the same feeds (float_noise_floor), or else, given `recorded`
    outputs (a more exact run, e.g. Paddle in float64, None where an output has none), each
    lowered run no farther from them than the original is (`within` says which:
    "tolerance", "floor" or "recorded"). An integer plan
    when every output's cosine to the original reaches `min_cosine`, every integer tensor
    onnxruntime computes equals the NumPy reference's bit for bit (`integer_mismatches`
    names those that do not), and the float ops after (and between) the integer layers agree
    within `tolerance`: the tensors they end in, or else each op on onnxruntime's inputs
    (each output's `ort_vs_reference` and `within`: "bit-exact", "tolerance" or "float ops";
    `float_inputs`: the float tensors integer layers read where the two differ; `float_ops`:
    each op checked on its own, for those beyond `tolerance`).
    input_shape: the sizes the model was lowered at ({input: [sizes]}), for the seeded
    input and the run before lowering.

    Outputs computed from the picks of a TopK, ArgMax or ArgMin (selection.py) are judged,
    by the same rules, given the model's picks (held: fed to the lowered model in place of
    its own), and the scores each selection ranks with them (`selections`: per selection its
    `scores` entry and how the lowered model's own picks compare; per output its
    `selection`, None for an output no pick reaches); it is not ok either when a pick the
    lowered model makes on its own differs beyond a near-tie. Recorded outputs are not used
    then (what Paddle picked is not recorded); the float64 run is given the model's picks."""
    header = load_header(lowered)
    used = _primitives(header)
    # (a lowering that left every node on the CPU has no primitive, but its emulation key)
    if not used and EMULATION_KEY not in {p.key for p in header.metadata_props}:
        name = lowered if isinstance(lowered, str) else "the second model"
        raise ConversionError(f"{name}: has no NPU primitives, so it is not a lowered model; "
                              "lower it first (`paddle-npu lower MODEL -o LOWERED`)")
    integer = bool(used & INTEGER_PRIMITIVES)
    if input_shape:
        original = with_input_shapes(original, input_shape)
    if feeds is None:
        feeds = seeded_inputs(original, seed)
    selections = find_selections(load_header(original).graph)
    if selections:
        link_lowered(selections, header.graph, lowered)
        # the lowered model's own picks, and its outputs from them (shown, not judged)
        # (a loop's are those its held run gives: selection.py)
        free_outputs, free_values = _run_with_tensors(
            lowered, feeds, [n for s in selections if not s.loop for n in
                             ((s.lowered_scores,) if s.grid else (s.picks, s.lowered_scores))])
        free = (free_outputs, {**feeds, **free_values})
        original, lowered, feeds, names, want, picks = _hold_selections(original, lowered,
                                                                        selections, feeds)
        if recorded:        # (the recorded outputs' picks are not known: not comparable)
            hinging = {o for s in selections for o in s.outputs}
            recorded = [None if n in hinging else r for n, r in zip(names, recorded)] + \
                [None] * len(selections)
    else:
        # one model at a time in memory: each run's session is gone before the next is made
        names, want = run_onnx(_runnable(original), feeds)
    if integer:
        got_ref, got_ort, check, array = _integer_runs(lowered, target, feeds, tolerance)
    else:
        ref = Reference(lowered, target)
        got_ref = ref.run(feeds)
        array = ref.array.as_dict()
        del ref
        gc.collect()    # the evaluator's reference cycles hold its copy of the weights
        _, got_ort = run_onnx(_runnable(lowered), feeds)
        emulation, got_other = _other_emulation(lowered, feeds)
    outputs, worst = [], 0.0
    for i, (name, w, o, r) in enumerate(zip(names, want, got_ort, got_ref)):
        entry = {"name": name, "shape": list(np.shape(w))}
        for key, got in (("onnxruntime", o), ("reference", r)):
            entry[key] = _agreement(got, w)
            worst = max(worst, entry[key]["rel_diff"])
        if not integer:     # (not judged: the emulation the lowered model does not carry)
            entry["other_emulation"] = _agreement(got_other[i], w)
        if integer:
            entry["sqnr_db"] = _sqnr_db(o, w)
            # an integer output is held to the bits; a float one, computed by float ops from
            # integer tensors that are (checked below) the same in both, to the tolerance
            r = check["outputs"][len(outputs)]
            entry["bit_exact"] = bool(np.array_equal(np.asarray(o), np.asarray(r)))
            entry["ort_vs_reference"] = rel_diff(o, r)
            entry["within"] = "bit-exact" if entry["bit_exact"] else \
                "tolerance" if entry["ort_vs_reference"] <= tolerance else \
                "float ops" if _chain_agrees(name, check["float_ops"], tolerance) else None
        outputs.append(entry)
    # the scores each selection ranks, judged like the outputs (after them in every list)
    ranked = outputs[len(outputs) - len(selections):] if selections else []
    result = {"outputs": outputs[:len(outputs) - len(ranked)], "worst_rel_diff": worst,
              "tolerance": tolerance, "integer": integer, "array": array}
    if selections:
        result["selections"] = _selection_report(selections, ranked, picks, free,
                                                 result["outputs"], want,
                                                 got_ort[len(result["outputs"]):])
    if integer:
        result["min_cosine"] = min_cosine
        result["worst_cosine"] = min((e["onnxruntime"]["cosine"] for e in outputs), default=1.0)
        result["integer_tensors"] = check["integer_tensors"]
        result["integer_mismatches"] = check["integer_mismatches"]
        result["float_inputs"] = check["float_inputs"]
        result["float_ops"] = check["float_ops"]
        result["ok"] = result["worst_cosine"] >= min_cosine and \
            not result["integer_mismatches"] and all(e["within"] for e in outputs) and \
            all(_chain_agrees(f["name"], check["float_ops"], tolerance)
                for f in result["float_inputs"] if f["rel_diff"] > tolerance)
    else:
        # (after the lowered model's runs: one model's weights in memory at a time)
        try:
            exact, ran_with = float64_outputs(original, feeds)
        except ConversionError as e:
            result["float64"] = {"error": str(e)}
            _judge_without_float64(result, outputs, original, feeds, recorded, want, got_ort,
                                   got_ref)
        else:
            result["float64"] = _judge_by_float64(outputs, want, got_ort, got_ref, exact,
                                                  factor, ran_with, got_other)
            result["ok"] = all(e["float64"]["ok"] for e in outputs)
            result["within"] = "float64" if result["ok"] else None
        emulation["worst_rel_diff"] = max(e["other_emulation"]["rel_diff"] for e in outputs)
        if "worst_ratio" in result["float64"]:
            emulation["worst_ratio"] = max(e["float64"].get("other_ratio", 0.0)
                                           for e in outputs)
            emulation["ok"] = emulation["worst_ratio"] <= factor
        result["emulation"] = emulation
    if selections and not all(s["explained"] for s in result["selections"]):
        result["ok"] = False
        if not integer:
            result["within"] = None
    return result


def _judge_by_float64(outputs, want, got_ort, got_ref, exact, factor, ran_with, got_other):
    """Each output's `float64` entry: how far the original's float32 run ("model") and the
    lowered model's runs are from the float64 result, the bound (`factor` times the first,
    at least `factor` float32 units), the factor the worst run needed (`ratio`) and `ok`;
    beside them, not judged, the other emulation's distance and factor (`other_emulation`,
    `other_ratio`). An integer output (indices, a mask) is held to the original's, exactly.
    Returns the summary: what ran the float64 model, the factor, the worst ratio."""
    worst = 0.0
    for entry, w, o, r, x, e in zip(outputs, want, got_ort, got_ref, exact, got_other):
        if not np.issubdtype(np.asarray(w).dtype, np.floating):
            same = all(entry[k]["rel_diff"] == 0 for k in ("onnxruntime", "reference"))
            entry["float64"] = {"ok": same, "ratio": 0.0 if same else float("inf")}
        else:
            d = {"model": rel_diff(w, x), "onnxruntime": rel_diff(o, x),
                 "reference": rel_diff(r, x), "other_emulation": rel_diff(e, x)}
            base = max(d["model"], FLOAT32_UNIT)
            ratio = max(d["onnxruntime"], d["reference"]) / base
            entry["float64"] = {**d, "bound": factor * base, "ratio": ratio,
                                "other_ratio": d["other_emulation"] / base,
                                "ok": bool(ratio <= factor)}
        worst = max(worst, entry["float64"]["ratio"])
    return {"ran_with": ran_with, "factor": factor, "worst_ratio": worst}


def _judge_without_float64(result, outputs, original, feeds, recorded, want, got_ort,
                           got_ref):
    """The float rule where the model cannot be run in float64: the tolerance, else the
    model's float-noise floor, else the recorded outputs (see verify)."""
    tolerance = result["tolerance"]
    if result["worst_rel_diff"] <= tolerance:
        result["ok"], result["within"] = True, "tolerance"
        return
    floor = float_noise_floor(original, feeds)
    result["floor"] = floor
    for entry, f in zip(outputs, floor):
        entry["floor"] = f
    result["ok"] = all(max(e[k]["rel_diff"] for k in ("onnxruntime", "reference"))
                       <= max(tolerance, f) for e, f in zip(outputs, floor))
    result["within"] = "floor" if result["ok"] else None
    if not result["ok"] and recorded and any(r is not None for r in recorded):
        result["ok"] = _as_close_to_recorded(outputs, recorded, want, got_ort, got_ref,
                                             tolerance)
        result["within"] = "recorded" if result["ok"] else None


def _other_emulation(lowered, feeds):
    """({"judged": the emulation the lowered model carries, "other": the other one},
    onnxruntime's outputs of the lowered model under the other one). An ir.Model is given
    its own emulation back afterwards."""
    model = lowered if isinstance(lowered, ir.Model) else \
        ir.load(os.fspath(lowered)) if isinstance(lowered, (str, os.PathLike)) else \
        ir.serde.deserialize_model(load_proto(lowered))
    carried = emulation_of(model.metadata_props)
    other = next(e for e in EMULATIONS if e != carried)
    emulate(model, other)
    try:
        return {"judged": carried, "other": other}, run_onnx(model, feeds)[1]
    finally:
        if model is lowered:
            emulate(model, carried)


def _agreement(got, want):
    """compare.agreement of a float tensor; an integer one (indices, masks) exact."""
    if np.issubdtype(np.asarray(want).dtype, np.floating):
        return agreement(got, want)
    same = np.array_equal(np.asarray(got), np.asarray(want))
    return {"max_abs_diff": 0.0 if same else float("inf"),
            "rel_diff": 0.0 if same else float("inf"), "cosine": 1.0 if same else 0.0}


def _hold_selections(original, lowered, selections, feeds):
    """Both models with the model's picks held (selection.hold): (the model held, the lowered
    model held, the feeds with the picks, the output names (the model's, then each
    selection's ranked scores), the model's outputs and scores, its picks by name)."""
    made = [n for s in selections for n in (s.picks, s.scores)]
    original = expose_steps(own_proto(original), selections)
    want, values = _run_with_tensors(original, feeds, made)
    values = {**feeds, **values}            # (scores may be a graph input)
    picks = {s.picks: values[s.picks] for s in selections}
    held_feeds = {**feeds, **{name + HELD: v for name, v in picks.items()}}
    names = [o.name for o in load_header(original).graph.output] + \
        [s.picks + RANKED for s in selections]
    want = list(want) + [values[s.scores] for s in selections]
    return (hold(original, selections, lowered=False),
            hold(own_proto(lowered), selections, lowered=True), held_feeds, names, want, picks)


def _selection_report(selections, ranked, picks, free, outputs, want, held_scores):
    """Per selection: what it ranks and picks, how its scores compare (`scores`: an entry as
    for an output) and how the lowered model's own picks compare (compare_picks); per output
    computed from picks, its `selection`: how it was judged, the picks it hinges on and how
    many of them the lowered model makes on its own, and its free-running agreement.
    held_scores: the lowered model's scores given the picks (a loop's own picks: theirs)."""
    free_outputs, free_values = free
    report = []
    for s, entry, held in zip(selections, ranked, held_scores):
        entry["name"] = s.scores
        got_scores = held if s.loop else free_values.get(s.lowered_scores)
        got_picks = own_picks(s, held, picks[s.picks]) if s.loop else free_values.get(s.picks)
        # (a grid has no picks to count: it is judged as its `scores` entry)
        same = {"picks": 0, "picks_same": 0, "in_place": 0, "explained": True} if s.grid \
            else compare_picks(s, want[len(outputs) + len(report)], picks[s.picks],
                               got_scores, got_picks)
        report.append({"op": s.op, "node": s.node, "picks_name": s.picks, "scores": entry,
                       "outputs": s.outputs, "grid": s.grid, **same})
    for i, entry in enumerate(outputs):
        hinges = [r for r in report if entry["name"] in r["outputs"]]
        entry["selection"] = {
            "judged": held_as(hinges),
            "picks_names": [r["picks_name"] for r in hinges],
            "picks": sum(r["picks"] for r in hinges),
            "picks_same": sum(r["picks_same"] for r in hinges),
            "free_running": _agreement(free_outputs[i], want[i])} if hinges else None
    return report


def _integer_runs(lowered, target, feeds, tolerance):
    """The NumPy reference and onnxruntime on an integer plan, compared inside: every
    integer tensor (_integer_outputs) bit for bit. Float ops between integer layers (a
    LayerNorm's float32 body, a Softmax) may round differently in the two, and a
    quantisation of values one ulp apart can then land on two integers; so where the float
    tensors an integer layer reads differ, the reference runs again reading onnxruntime's,
    so that every integer layer is compared on the same inputs. Those float tensors, and
    float outputs beyond `tolerance`, may come from a chain of float ops that amplifies
    rounding: each op of their chains is then run on onnxruntime's inputs and held to
    `tolerance` (float_ops.py). Returns (the reference's outputs, onnxruntime's, the
    comparison, the array counts)."""
    output_names, got_ref, seen, array = _reference_run(lowered, target, feeds)
    tensors, boundary = list(seen.digests), list(seen.float_digests)
    got_ort, at_ort = _run_with_tensors(lowered, feeds, tensors + boundary)
    ort_digests = {n: _digest(at_ort.pop(n)) for n in tensors if n in at_ort}
    apart = {n: v for n, v in at_ort.items() if _digest(v) != seen.float_digests[n]}
    del at_ort
    check_outputs = got_ref
    if apart:
        _, check_outputs, seen, _ = _reference_run(lowered, target, feeds, apart)
    float_inputs = [{"name": n, "rel_diff": rel_diff(apart[n], seen.floats[n])}
                    for n in boundary if n in apart]
    # (a tensor only the reference's fused layers name is compared where it is used)
    differ = [n for n in tensors if n in ort_digests and ort_digests[n] != seen.digests[n]]
    mismatches = _mismatches(lowered, target, feeds, apart, differ)
    ends = [f["name"] for f in float_inputs if f["rel_diff"] > tolerance] + \
        [n for n, o, r in zip(output_names, got_ort, check_outputs)
         if n in seen.floating and rel_diff(o, r) > tolerance]
    check = {"outputs": check_outputs, "float_inputs": float_inputs,
             "float_ops": _float_ops(lowered, target, feeds, ends, seen.floating),
             "integer_tensors": len(ort_digests),
             "integer_mismatches": mismatches}
    return got_ref, got_ort, check, array


def _chain_agrees(name, float_ops, tolerance):
    """Whether the float ops tensor `name` is computed from agree one by one (_float_ops)."""
    chain = [f for f in float_ops if name in f["ends"]]
    return bool(chain) and all(f["rel_diff"] <= tolerance for f in chain)


def _float_ops(lowered, target, feeds, ends, floating):
    """The float ops the tensors `ends` are computed from (back to integer tensors, inputs
    and weights), each checked on onnxruntime's inputs (float_ops.check_float_ops); each
    entry also names the ends its output leads to (`ends`)."""
    if not ends:
        return []
    proto = load_proto(lowered)
    chains = {e: float_chain(proto.graph, [e], floating.__contains__) for e in ends}
    nodes = float_chain(proto.graph, ends, floating.__contains__)
    names = {n for node in nodes for n in list(names_read(node)) + list(node.output) if n}
    _, values = _run_with_tensors(proto, feeds, sorted(names))
    values.update({n: v for n, v in feeds.items() if n in names})
    checked = check_float_ops(proto, target, nodes, values)
    del values
    for entry in checked:
        entry["ends"] = [e for e, chain in chains.items()
                         if any(entry["output"] in n.output for n in chain)]
    return checked


class _Seen:
    """What verify takes of the reference's run of an integer plan, node by node (its `keep`):
    `digests`: {integer tensor (_integer_outputs): its digest}, in graph order, and
    `float_digests`: the same of the float tensors integer ones are made from (a Quantize's
    input, ...): holding the tensors themselves would hold all of a model's activations at
    once; `floats`: {name: array} of those float tensors named in `hold`; `floating`: the
    names of the float tensors the nodes compute."""

    def __init__(self, hold=()):
        self.hold, self.floats, self.floating = set(hold), {}, set()
        self.digests, self.float_digests = {}, {}

    def __call__(self, node, values):
        def dtype_of(name):
            return getattr(values.get(name), "dtype", None)
        _, _, inputs, outputs = node
        self.floating.update(o for o in outputs if _kind(dtype_of(o), np.floating))
        made = _integer_outputs(node, dtype_of)
        self.digests.update((o, _digest(values[o])) for o in made)
        if made:
            for i in inputs:
                if i in self.floating and i not in self.float_digests:
                    self.float_digests[i] = _digest(values[i])
                    if i in self.hold:
                        self.floats[i] = values[i]
        return []


def _reference_run(lowered, target, feeds, given=None):
    """The NumPy reference's run of an integer plan (reading `given` {name: array} in place
    of its own tensors, and holding its own of those): (the output names, its outputs, what
    verify takes of it (_Seen), the array counts)."""
    ref = Reference(lowered, target)
    ref.given.update(given or {})
    seen = _Seen(given or ())
    outputs = ref.run(feeds, keep=seen)[0]
    names, array = ref.output_names, ref.array.as_dict()
    del ref
    gc.collect()        # the evaluator's reference cycles hold its copy of the weights
    return names, outputs, seen, array


def _digest(value):
    """A tensor's shape, type and a hash of its bytes: equal when the tensors are (a float
    zero's sign aside: both are made +0, as np.array_equal sees them)."""
    value = np.ascontiguousarray(value)
    if value.dtype.kind == "f":
        value = value + value.dtype.type(0)         # -0.0 + 0.0 is +0.0
    return value.shape, value.dtype.str, hashlib.blake2b(memoryview(value).cast("B")).digest()


def _mismatches(lowered, target, feeds, given, names):
    """How the integer tensors `names` differ between onnxruntime and the reference (reading
    `given`), both run again for them: only their digests were kept."""
    if not names:
        return []
    ref = Reference(lowered, target)
    ref.given.update(given)
    wanted = set(names)
    held = ref.run(feeds, keep=lambda node, values: [o for o in node[3] if o in wanted])[1]
    at_ort = _run_with_tensors(lowered, feeds, names)[1]
    return [_mismatch(n, at_ort[n], held[n]) for n in names]


def _integer_outputs(node, dtype_of):
    """The integer tensors a node of the reference computes in an integer plan: the
    integer-typed outputs of the integer primitives and of every node reading integer tensors
    only (moves, matrix layers, tables). An index or a cast that a plain op makes from floats
    (TopK, ArgMax) is not among them: it follows the float values it is made from. Nor are a
    layer's rows and tile products (Im2Col, QVMM): its summed accumulator (AddInTile) reads
    them all and is compared, and holding them (a 3x3 layer's rows are nine times its image,
    a per-channel plan has a product per channel) would take tens of GB on a large image."""
    domain, op, inputs, outputs = node
    if domain == DOMAIN and op in LAYER_INSIDES:
        return []
    if (domain == DOMAIN and op in INTEGER_PRIMITIVES) or \
            all(_kind(dtype_of(i), np.integer) for i in inputs if i):
        return [o for o in outputs if o and _kind(dtype_of(o), np.integer)]
    return []


def _kind(dtype, kind):
    """Whether `dtype` (None: not an array) is of `kind` (np.integer, np.floating)."""
    return dtype is not None and np.issubdtype(dtype, kind)


def _run_with_tensors(lowered, feeds, tensors):
    """onnxruntime's outputs of the lowered model, and {name: array} of those of `tensors` it
    computes (made graph outputs for this run only)."""
    if isinstance(lowered, ir.Model):
        graph = lowered.graph
        values = {v.name: v for node in graph for v in node.outputs}
        count = len(graph.outputs)
        given = {v.name for v in graph.outputs}
        graph.outputs.extend(values[n] for n in tensors if n in values and n not in given)
        try:
            names, got = run_onnx(lowered, feeds)
        finally:
            del graph.outputs[count:]
    else:
        proto = load_proto(lowered)     # (the caller's own proto: its outputs restored)
        graph = proto.graph
        made = {o for n in graph.node for o in n.output}
        count = len(graph.output)
        given = {o.name for o in graph.output}
        # (no type given: onnxruntime infers it, as for any tensor inside the graph)
        graph.output.extend(onnx.ValueInfoProto(name=n) for n in tensors
                            if n in made and n not in given)
        try:
            names, got = run_onnx(proto.SerializeToString(), feeds)
        finally:
            del graph.output[count:]
    wanted = set(tensors)
    return got[:count], {n: v for n, v in zip(names, got) if n in wanted}


def _mismatch(name, got, want):
    """How an integer tensor differs between onnxruntime and the NumPy reference."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return {"name": name, "shape": list(want.shape), "onnxruntime_shape": list(got.shape)}
    differ = got != want
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    return {"name": name, "shape": list(want.shape), "differing": int(differ.sum()),
            "max_abs_diff": int(diff.max()) if diff.size else 0}


def _as_close_to_recorded(outputs, recorded, want, got_ort, got_ref, tolerance):
    """Each output's runs of the lowered model are no farther from the recorded one than the
    original's run is (or within tolerance of it): their difference is then float32 rounding
    in both, amplified by the model, not a lowering error. Records each distance."""
    if len(recorded) != len(outputs):
        return False
    ok = True
    for entry, rec, w, o, r in zip(outputs, recorded, want, got_ort, got_ref):
        if rec is None:
            return False
        entry["from_recorded"] = {k: rel_diff(got, rec) for k, got in
                                  (("original", w), ("onnxruntime", o), ("reference", r))}
        d = entry["from_recorded"]
        ok = ok and max(d["onnxruntime"], d["reference"]) <= max(tolerance, d["original"])
    return ok


def render(result):
    judged = "worst_ratio" in result.get("float64", {})
    lines = [f"{'output':<32} {'vs':<12} {'max abs diff':>13} {'rel diff':>10} {'cosine':>10}"
             + (f" {'from f64':>9}" if judged else "")]
    selections = result.get("selections", [])
    rows = [(o["name"][-30:] + " *" if o.get("selection") else o["name"][-32:], o)
            for o in result["outputs"]]
    rows += [(f"{s['scores']['name'][-(30 - len(s['op'])):]} ({s['op']})", s["scores"])
             for s in selections]
    for label, o in rows:
        # (the model's own run: its distance from float64 only, the others' yardstick)
        keys = ("onnxruntime", "reference") + \
            (("model",) if judged and "model" in o["float64"] else ())
        for key in keys:
            a = o.get(key)
            line = f"{label:<32} {key:<12} " + \
                (f"{a['max_abs_diff']:>13.3e} {a['rel_diff']:>10.2e} {a['cosine']:>10.6f}"
                 if a else f"{'':>13} {'':>10} {'':>10}")
            if judged and key in o["float64"]:
                line += f" {o['float64'][key]:>9.2e}"
            lines.append(line)
    if selections:
        lines += _render_selections(result)
    arr = result["array"]
    lines.append(f"reference: {arr['arrays']} arrays programmed, {arr['vmm_invocations']} VMM "
                 f"invocations, {arr['macs']} array MACs")
    verdict = "agrees" if result["ok"] else "DISAGREES"
    wrong_picks = [f"{s['op']} {s['node']}" for s in result.get("selections", [])
                   if not s["explained"]]
    picks = (f"the picks of {', '.join(wrong_picks)} differ beyond near-ties; "
             if wrong_picks else "")
    if "error" in result.get("float64", {}):
        lines.append(f"(no float64 run: {result['float64']['error']})")
    if result.get("integer"):
        sqnr = min(o["sqnr_db"] for _, o in _judged(result))
        lines.append(f"{verdict} (integer plan): {picks}worst cosine to float "
                     f"{result['worst_cosine']:.6f}{_at_worst(result)} (at least "
                     f"{result['min_cosine']:g}), SQNR "
                     f"{sqnr:.2f} dB; onnxruntime vs NumPy reference: "
                     + _render_integer_check(result))
    elif judged:
        lines.append(_render_float64(result, picks))
    elif result.get("within") == "floor":
        lines.append(f"agrees within the model's float-noise floor ({max(result['floor']):.1e}: "
                     "its own output moves that much for a one-ulp input change): worst "
                     f"relative diff {result['worst_rel_diff']:.2e}, above the tolerance "
                     f"{result['tolerance']:g}")
    elif result.get("within") == "recorded":
        worst = max(max(o["from_recorded"]["onnxruntime"], o["from_recorded"]["reference"])
                    for o in result["outputs"])
        model = max(o["from_recorded"]["original"] for o in result["outputs"])
        lines.append(f"agrees as closely as the model itself with the recorded outputs: the "
                     f"lowered model is {worst:.2e} from them, the model {model:.2e} (worst "
                     f"relative diff {result['worst_rel_diff']:.2e} to the model, beyond its "
                     f"float-noise floor {max(result['floor']):.1e})")
    elif result["ok"]:
        lines.append(f"agrees within {result['tolerance']:g}: worst relative diff "
                     f"{result['worst_rel_diff']:.2e}")
    else:
        floor = (f", beyond the model's own float-noise floor {max(result['floor']):.1e}"
                 if result.get("floor") else "")
        lines.append(f"DISAGREES: {picks}worst relative diff {result['worst_rel_diff']:.2e}"
                     f"{_at_worst(result)} (tolerance {result['tolerance']:g}{floor})")
    if result.get("emulation"):
        lines.append(_render_emulation(result["emulation"]))
    return "\n".join(lines)


def _render_emulation(emulation):
    """One line: the emulation judged, and how far the other one is (not judged)."""
    other = emulation["other"]
    line = f"emulation {emulation['judged']} judged above; {other} (not judged): "
    if "worst_ratio" not in emulation:
        return line + f"worst relative diff {emulation['worst_rel_diff']:.2e} to the model"
    line += f"{emulation['worst_ratio']:.2g}x the model's own float32 distance from float64, "
    return line + ("within the rule too" if emulation["ok"] else
                   f"beyond the rule: keep {emulation['judged']} for accuracy runs")


def _render_float64(result, picks):
    """The verdict of the float64 rule, on the output (or ranked scores) that needed the
    largest factor."""
    f64 = result["float64"]
    judged = _judged(result)
    name, entry = max(judged, key=lambda j: j[1]["float64"]["ratio"])
    d = entry["float64"]
    at = f" at {name}" if len(judged) > 1 else ""
    if "model" not in d:        # integer outputs only, or one that differs
        return ("agrees: every output equals the model's" if result["ok"] else
                f"DISAGREES: {picks}the integer output {name} differs from the model's")
    runs = f"onnxruntime {d['onnxruntime']:.1e}, reference {d['reference']:.1e}"
    line = (f"{f64['worst_ratio']:.2g}x its own float32 run in onnxruntime (at most "
            f"{f64['factor']:g}x; {runs}, the model {d['model']:.1e} from it{at})")
    if result["ok"]:
        return f"agrees: no farther from the model computed in float64 than {line}"
    if d["ratio"] <= f64["factor"]:     # (the picks alone)
        return f"DISAGREES: {picks}the outputs are within {line}"
    return (f"DISAGREES: {picks}{max(d['onnxruntime'], d['reference']):.2e} from the model "
            f"computed in float64, {line}")


def _judged(result):
    """(label, entry) of every tensor judged: the outputs, then the scores selections rank."""
    return [(o["name"], o) for o in result["outputs"]] + \
        [(f"{s['scores']['name']} (ranked by {s['op']} {s['node']})", s["scores"])
         for s in result.get("selections", [])]


def _at_worst(result):
    """' at NAME': where the worst cosine (integer plan) or relative diff is, when the model
    has more than one output or its outputs hinge on selections."""
    judged = _judged(result)
    if len(judged) < 2:
        return ""
    if result.get("integer"):
        name, _ = min(judged, key=lambda j: j[1]["onnxruntime"]["cosine"])
    else:
        name, _ = max(judged, key=lambda j: max(j[1][k]["rel_diff"]
                                                 for k in ("onnxruntime", "reference")))
    return f" at {name}"


def _render_selections(result):
    lines = []
    hinging = [o for o in result["outputs"] if o.get("selection")]
    free = ", ".join(f"{o['name']} cosine {o['selection']['free_running']['cosine']:.6f}"
                     for o in hinging)
    lines.append(f"* judged {held_as(result['selections'])} (held in the lowered model); "
                 f"free-running: {free}")
    for s in result["selections"]:
        head = f"{s['op']} {s['node']} of {s['scores']['name']}: "
        if s["grid"]:
            lines.append(head + "its grid judged as an output (above), the samples given the "
                         "float model's grid")
            continue
        if s["picks_same"] == s["in_place"] == s["picks"]:
            lines.append(head + f"all {s['picks']} picks the same")
            continue
        same = (f"{s['picks_same']} of {s['picks']} picks the same ({s['in_place']} in "
                "place)")
        if s["explained"]:
            lines.append(head + f"{same}; the others are near-ties: within "
                         f"{s['near_tie']:.1e} of the float model's score there (the scores "
                         f"differ by up to {s['score_error']:.1e})")
        else:
            lines.append(head + f"{same}; the others are NOT near-ties: {s['near_tie']:.1e} "
                         f"apart, beyond twice the scores' difference ({s['score_error']:.1e}): "
                         f"the {s['op']} picks differently from the same scores")
    return lines


def _render_integer_check(result):
    tol = result["tolerance"]
    parts = []
    bad = result["integer_mismatches"]
    if bad:
        first = bad[0]
        how = (f"{first['differing']} of {int(np.prod(first['shape']))} values differ by up to "
               f"{first['max_abs_diff']}" if "differing" in first else
               f"shape {first['onnxruntime_shape']} vs {first['shape']}")
        more = f"; {len(bad) - 1} more integer tensors after it" if len(bad) > 1 else ""
        parts.append(f"integer tensor {first['name']} NOT bit-exact ({how}{more})")
    else:
        parts.append(f"{result['integer_tensors']} integer tensors bit-exact")
    floats = [o for o in result["outputs"] if o["within"] != "bit-exact"]
    if floats:
        worst = max(floats, key=lambda o: o["ort_vs_reference"])
        beyond = [o["name"] for o in floats if o["within"] is None]
        parts.append(f"float outputs after them {worst['ort_vs_reference']:.1e} apart "
                     + (f"(beyond {tol:g}: {', '.join(beyond)})" if beyond else
                        f"(within {tol:g})" if worst["within"] == "tolerance" else
                        "(their float ops agree one by one)"))
    else:
        parts.append("outputs bit-exact")
    apart = result["float_inputs"]
    if apart:
        worst = max(f["rel_diff"] for f in apart)
        parts.append(f"{len(apart)} float tensor{'s' * (len(apart) > 1)} the integer layers "
                     f"read round{'s' * (len(apart) == 1)} differently, up to {worst:.1e}"
                     + (f" (within {tol:g}; the integer layers compared on onnxruntime's)"
                        if worst <= tol else ""))
    ops = result["float_ops"]
    if ops:
        wrong = [f for f in ops if f["rel_diff"] > tol]
        if wrong:
            parts.append("float op " + ", ".join(f"{f['node'] or f['output']} ({f['op']}) "
                                                  f"{f['rel_diff']:.1e}" for f in wrong[:3])
                         + f" NOT within {tol:g} on onnxruntime's inputs (beyond {tol:g}: "
                         + ", ".join(dict.fromkeys(e for f in wrong for e in f["ends"]))
                         + ")")
        else:
            parts.append(f"the {len(ops)} float ops they come from agree one by one on "
                         f"onnxruntime's inputs, up to "
                         f"{max(f['rel_diff'] for f in ops):.1e} (within {tol:g})")
    return "; ".join(parts)
