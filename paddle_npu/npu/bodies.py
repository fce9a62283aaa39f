"""Which function bodies onnxruntime runs a lowered model with: float32 or exact sums.

The primitives that sum (VMM, AddInTile, Col2Im, RuntimeVMM, Reduce, LayerNorm, Pool's
global average, AxisResample's weighted resizes) have two bodies: the exact one accumulates
in float64 and rounds once, as the NumPy reference does; the float32 one sums in float32, as
fast as onnxruntime's own Conv / MatMul and as far from the exact sums as they are. `lower`
writes exact ones unless asked; "auto" (`lower --verify`'s default) runs the lowered model
with float32 bodies on the seeded input `verify` uses by default and keeps them when it
agrees with the model before lowering within half the 1e-5 tolerance (MARGIN); past that,
when float32 sums are no more than MARGIN times as far from the model as the exact ones and
within the bound `verify` holds the exact ones to (the tolerance, or the model's own
float-noise floor where exact sums miss the tolerance too), or when neither body meets its
bound. Where float32 sums miss that, "auto" tries them once more with the tiles' partials
added exactly (AddInTile's exact body: "exact-tile" sums), which takes away the roundings
of adding a layer's many partials in float32 at a fraction of the exact bodies' time;
where that misses too, "exact-first": exact bodies on the fewest of the graph's first nodes
that sum that meet the bound, float32 after them and on those of them the bound does not
need (`_exact_first`; a first layer's rounding is what every later one carries, so a few
exact nodes at the start often suffice); otherwise the whole model gets the exact bodies. The report says which and why. The NumPy
reference always sums exactly.
"""
import math

import onnx
import onnx_ir as ir

from ..compare import run_onnx
from ..errors import ConversionError
from .functions import attach_functions, summing_nodes
from .passes import Pass
from .preprocess_fusion import fused_reference
from .verifier import TOLERANCE, float_noise_floor, rel_diff, seeded_feeds

BODIES = ("auto", "float32", "exact")
# The most first nodes found needing exact bodies that "exact-first" tries one by one in
# float32 again (a run of the lowered model each).
PRUNE_MAX = 32
# The primitives that add a layer's tiles' partial products: exact in "exact-tile" bodies.
TILE_SUMS = ("AddInTile",)
# One seeded input is a sample: on other inputs float32 sums may land farther from the model
# than on it, so "auto" takes float32 by the tolerance alone only within half of it, and
# beyond that only as close to the model as twice the exact sums' distance (the sample then
# puts the exact sums near the bound too).
MARGIN = 2.0


def check_bodies(bodies):
    if bodies not in BODIES:
        raise ConversionError(f"unknown function bodies {bodies!r} (known: "
                              f"{', '.join(BODIES)})")


def choose_bodies(lowered, original, bodies="auto", preprocess=None, input_shape=None,
                  tolerance=TOLERANCE):
    """Attach the function bodies of `lowered` (an ir.Model, changed in place) and return the
    choice: {"bodies": "float32" | "exact", "asked": bodies, "float32_nodes": nodes that can
    sum in float32, "why": one line}, and what "auto" measured (`_measure`: "rel_diff",
    "within", "exact_rel_diff", "floor").
    original: the model before lowering (path, bytes, ModelProto or ir.Model); preprocess and
    input_shape: as given to `lower`, so that the model is run as the lowered one is."""
    check_bodies(bodies)
    made = {}           # the functions built so far, for each set of bodies tried
    summing = summing_nodes(lowered.graph)
    nodes = len(summing)
    choice = {"asked": bodies, "float32_nodes": nodes}
    if nodes == 0 or bodies == "exact":
        attach_functions(lowered, made=made)
        why = "asked for (lower's default; --verify checks float32 ones)" if nodes \
            else "no primitive that sums has float32 inputs"
        return {**choice, "bodies": "exact", "why": why}
    attach_functions(lowered, float32=True, made=made)
    if bodies == "float32":
        return {**choice, "bodies": "float32", "why": "asked for"}
    try:
        measured = _measure(lowered, original, preprocess, input_shape, tolerance, made)
    except Exception as e:      # noqa: BLE001 - any failure to run the check keeps exact sums
        attach_functions(lowered, made=made)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        return {**choice, "bodies": "exact",
                "why": f"float32 sums could not be checked ({first})"}
    choice.update(measured)
    worst = max(measured["rel_diff"], default=0.0)
    within = measured["within"]
    if within == "tolerance":
        return {**choice, "bodies": "float32",
                "why": f"float32 sums agree within {tolerance / MARGIN:g}: worst relative diff "
                       f"{worst:.1e}"}
    exact = max(measured["exact_rel_diff"])
    sums = f"float32 sums {worst:.1e} from the model, exact ones {exact:.1e}"
    floor = f"the model's float-noise floor {max(measured['floor']):.1e}" \
        if "floor" in measured else None
    if within == "floor":
        why = f"{sums}: both beyond {tolerance:g}, float32 within {floor}"
    elif within == "as_exact":
        why = f"{sums}: " + (f"float32 within {tolerance:g}" if floor is None else
                             f"the exact sums miss {floor} too") + \
            f", and no more than {MARGIN:g}x as far as they are"
    else:
        why = _missed(measured, tolerance)

        def kept(within):
            return f"within {floor}" if within == "floor" else \
                f"no more than {MARGIN:g}x as far as the exact sums"
        if measured.get("tile_within"):
            attach_functions(lowered, float32=True, exact=TILE_SUMS, made=made)
            return {**choice, "bodies": "exact-tile",
                    "why": f"{why}; with the tiles' partials added exactly, "
                           f"{max(measured['tile_rel_diff']):.1e}: "
                           f"{kept(measured['tile_within'])}"}
        if measured.get("first_within"):
            exact = [summing[i] for i in measured["exact_nodes"]]
            attach_functions(lowered, float32=True, exact_nodes=exact, made=made)
            first = measured["first_exact"]
            which = f"the first {first}" if len(exact) == first else \
                f"{len(exact)} of the first {first}"
            return {**choice, "bodies": "exact-first",
                    "why": f"{why}; with {which} of the {nodes} nodes that sum exact (to "
                           f"{exact[-1].name}), {max(measured['first_rel_diff']):.1e}: "
                           f"{kept(measured['first_within'])}"}
        attach_functions(lowered, made=made)
        return {**choice, "bodies": "exact", "why": why}
    attach_functions(lowered, float32=True, made=made)
    return {**choice, "bodies": "float32", "why": why}


def _missed(measured, tolerance):
    """Why float32 sums are not kept, on the output that shows it most: the one furthest
    past a bound the exact sums meet (the tolerance, or the model's float-noise floor on
    that output where it is larger), else the one furthest past MARGIN times the exact
    sums' distance. Named when there are several: the worst output overall may be within
    its own, larger floor."""
    rel, exact = measured["rel_diff"], measured["exact_rel_diff"]
    floor = measured.get("floor") or [0.0] * len(rel)
    bounds = [max(tolerance, f) for f in floor]
    missed = [k for k in range(len(rel)) if exact[k] <= bounds[k] < rel[k]]
    if missed:
        i = max(missed, key=lambda k: rel[k] / bounds[k])
        bound = f"{tolerance:g}" if floor[i] <= tolerance else \
            f"the model's float-noise floor {floor[i]:.1e}"
    else:
        i = max(range(len(rel)), key=lambda k: rel[k] / exact[k] if exact[k] else math.inf)
        bound = f"{MARGIN:g}x the exact sums' distance"
    names = measured.get("outputs") or []
    where = f" on output {names[i]!r}" if len(rel) > 1 and i < len(names) else ""
    return f"float32 sums were {rel[i]:.1e} from the model{where}, beyond {bound} (exact " \
           f"sums {exact[i]:.1e})"


def _measure(lowered, original, preprocess, input_shape, tolerance, made=None):
    """How the lowered model (float32 bodies attached) agrees with the original in
    onnxruntime on `verify`'s default seeded input: {"rel_diff": per output, "within":
    "tolerance" | "floor" | "as_exact" | None}. Beyond tolerance / MARGIN, also the exact
    bodies' "exact_rel_diff" and, when those miss the tolerance, the model's "floor"
    (`kept_within` says why float32 sums are kept, if they are); where they are not, the
    exact-tile bodies' "tile_rel_diff" and "tile_within", by the same rule, and where those
    miss too, what `_exact_first` finds ("first_exact", ...). The bodies it ran
    last stay attached: choose_bodies attaches the ones it keeps. made: attach_functions'
    functions built so far; the sessions share the contiguous copies of the strided
    weights (run_onnx's copies)."""
    original = _runnable(original, preprocess, input_shape)
    graph = lowered.graph        # its inputs are the model's, at the sizes it was lowered at
    feeds = seeded_feeds([(v.name, int(v.dtype), [d if isinstance(d, int) else None
                                                   for d in v.shape.dims])
                          for v in graph.inputs if v.name not in graph.initializers])
    names, want = run_onnx(original, feeds)

    copies = {}

    def diffs(graph_optimizations=True):
        _, got = run_onnx(lowered, feeds, graph_optimizations, copies)
        return [rel_diff(g, w) for g, w in zip(got, want)]

    out = {"rel_diff": diffs(), "outputs": names}
    if max(out["rel_diff"], default=0.0) <= tolerance / MARGIN:
        return {**out, "within": "tolerance"}
    attach_functions(lowered, made=made)
    # the exact bodies run without onnxruntime's graph optimisations: their sums are exact
    # either way, and no float64 copy of every weight is made (the folded Cast of W)
    out["exact_rel_diff"] = diffs(graph_optimizations=False)
    if max(out["exact_rel_diff"]) > tolerance:
        out["floor"] = float_noise_floor(original, feeds)
    out["within"] = kept_within(out["rel_diff"], out["exact_rel_diff"], out.get("floor"),
                                tolerance)
    if out["within"] is None and any(n.op_type in TILE_SUMS for n in summing_nodes(graph)):
        attach_functions(lowered, float32=True, exact=TILE_SUMS, made=made)
        out["tile_rel_diff"] = diffs()
        out["tile_within"] = kept_within(out["tile_rel_diff"], out["exact_rel_diff"],
                                         out.get("floor"), tolerance)
    if out["within"] is None and not out.get("tile_within"):
        out.update(_exact_first(lowered, out, diffs, tolerance, made))
    return out


def _exact_first(lowered, out, diffs, tolerance, made=None):
    """The fewest of the graph's first nodes that sum whose exact bodies, the others' float32,
    keep the lowered model within the bound float32 sums missed (`kept_within`): {"first_exact":
    how many, "first_rel_diff", "first_within"}, or {} when only all of them do. Rounding in
    the first layers is carried and grown by every layer after them (exact bodies on the
    first layer alone may bring the model most of the way to the all-exact result), so the
    search goes forward: 1, 2, 4, ... nodes until one passes, then halves the step back to
    the fewest that pass (a count tried and passed: rounding is not monotone in the count,
    the result is always one measured). All but the last is the most it tries: all of them
    are the exact bodies. Up to PRUNE_MAX of them, each is then tried once more in float32
    and left so where the others pass without it ("exact_nodes": the positions kept exact):
    an Im2Col moves the same values either way. Each try is a session of the lowered model;
    the functions built for one (`made`) and the contiguous copies of its strided weights
    (run_onnx's copies) serve the next."""
    nodes = summing_nodes(lowered.graph)

    def passes(chosen):
        """Whether exact bodies on the first `chosen` nodes (a count), or on those of `chosen`
        (positions), pass; the last that passed is kept in `found`."""
        exact = nodes[:chosen] if isinstance(chosen, int) else [nodes[i] for i in chosen]
        attach_functions(lowered, float32=True, exact_nodes=exact, made=made)
        got = diffs()
        within = kept_within(got, out["exact_rel_diff"], out.get("floor"), tolerance)
        if within:
            found.update(first_rel_diff=got, first_within=within)
        return within

    found, failed, count, last = {}, 0, 1, len(nodes) - 1
    while count <= last and not passes(count):     # all of them: the exact bodies
        failed, count = count, (last + 1 if count == last else min(2 * count, last))
    if not found:
        return {}
    passed = count             # found holds the last count that passed: the fewest
    while passed - failed > 1:
        middle = (failed + passed) // 2
        if passes(middle):
            passed = middle
        else:
            failed = middle
    keep = list(range(passed))
    if passed <= PRUNE_MAX:    # then each of them once more: left float32 if the rest pass
        for i in range(passed):
            if passes([k for k in keep if k != i]):
                keep.remove(i)
    return {**found, "first_exact": passed, "exact_nodes": keep}


def kept_within(rel_diff, exact_rel_diff, floor=None, tolerance=TOLERANCE):
    """Why float32 sums `rel_diff` from the model (per output, beyond tolerance / MARGIN)
    are kept, given the exact sums' `exact_rel_diff` and, where those miss the tolerance, the
    model's float-noise `floor` (the bound per output is then the larger of the two, as
    `verify` holds the exact sums to): "floor" when they are within it; "as_exact" when
    they are no more than MARGIN times as far from the model as the exact sums and miss no
    bound the exact sums meet; else None."""
    bounds = [tolerance] * len(rel_diff) if floor is None else \
        [max(tolerance, f) for f in floor]
    if floor is not None and all(d <= b for d, b in zip(rel_diff, bounds)):
        return "floor"
    as_close = all(d <= MARGIN * e for d, e in zip(rel_diff, exact_rel_diff))
    fair = all(d <= b or e > b for d, e, b in zip(rel_diff, exact_rel_diff, bounds))
    return "as_exact" if as_close and fair else None


def _runnable(original, preprocess, input_shape):
    """The model before lowering as onnxruntime runs it beside the lowered one (preprocessing
    fused, sizes fixed as `lower` did): a path or serialized bytes, copied only when changed."""
    if isinstance(original, ir.Model):      # fused_reference may rewrite one in place
        original = ir.serde.serialize_model(original)
    original = fused_reference(original, preprocess, input_shape)
    if isinstance(original, onnx.ModelProto):
        original = original.SerializeToString()
    return original


class ChooseBodies(Pass):
    """The primitives' function bodies, float32 or exact sums (`choose_bodies`)."""
    name = "functions"

    def __init__(self, original, bodies="auto", preprocess=None, input_shape=None):
        super().__init__()
        self.original, self.bodies = original, bodies
        self.preprocess, self.input_shape = preprocess, input_shape

    def run(self, model, result):
        result.info.update(choose_bodies(model, self.original, self.bodies, self.preprocess,
                                         self.input_shape))
        result.modified = True
