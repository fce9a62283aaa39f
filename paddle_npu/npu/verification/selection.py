"""Outputs that hinge on a discrete choice, for `verify`: a TopK's, ArgMax's or ArgMin's
picks, and whatever is computed from them (rows taken with Gather / GatherElements, the
layers run on those rows, the picks themselves).

Rounding (float32 reordered, or integer quantisation) moves scores that are nearly tied, so
the lowered model may pick another candidate than the model did, and every output computed
from the picks then differs wholesale although nothing is lowered wrong: such outputs cannot
be judged by their free-running difference. verify instead holds the picks: the lowered
model reads the model's own picks in place of computing them (hold), and is judged on

  - the scores each selection ranks (its input), compared whole like any output: these are
    continuous, and a lowering that moves them changes what would be picked;
  - every output given the same picks: the candidates taken and all the layers after them
    (a detection transformer runs its decoder on the queries it picks; judging only the
    tensors the picks are taken from would leave that unchecked);
  - the picks it makes on its own (compare_picks): where they differ from the model's, the
    scores of the two candidates must be within twice the largest difference between the
    two models' scores. A sorted top-k (or an arg-max) can only swap candidates that close;
    a farther swap means the selection itself is lowered wrong.
"""
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from ...errors import ConversionError

# op type -> the output holding the picks
SELECTION_OPS = {"TopK": 1, "ArgMax": 0, "ArgMin": 0}
# op type -> the input holding the places it samples at, held as picks are (a deformable
# attention's, an unwarping model's grid: sampling multiplies the places' rounding by the
# sampled map's change from one pixel to the next, so the output is judged given the float
# model's places, and the places themselves like an output)
SAMPLING_OPS = {"GridSample": 1}
HELD = "/held"          # suffix of the input that feeds a held selection's picks
RANKED = "/ranked"      # suffix (to the picks' name) of the output showing the scores ranked
FREE = "/free"          # suffix of the held tensor as the model computes it
STEPS = "/steps"        # suffix of a loop body's tensor gathered over the steps


@dataclass
class Selection:
    op: str
    node: str
    scores: str                 # the tensor ranked (in the model)
    picks: str                  # the indices output
    axis: int
    keepdims: bool              # ArgMax / ArgMin: the axis kept (size 1)
    ordered: bool               # picks in rank order (sorted TopK, arg-max / min)
    largest: bool               # the largest scores picked (TopK largest=1, ArgMax)
    outputs: list = field(default_factory=list)    # graph outputs computed from the picks
    lowered_scores: str = None  # the tensor the lowered model's selection ranks
    grid: bool = False          # the places a sampling op reads (picks: the grid, no scores)
    lowered_picks: str = None   # a grid's name in the lowered model (moves merged into it)
    loop: str = None            # the Loop whose body picks, once per step (picks and scores:
    body_picks: str = None      # its body's tensors gathered over the steps, [N, steps, ...])
    body_scores: str = None
    lowered_body_scores: str = None


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _consumers(graph):
    """{tensor: the nodes reading it}, a node with subgraphs (If, Loop) reading what they
    name from outside too."""
    consumers = {}
    for node in graph.node:
        for name in set(node.input) | _named_inside(node):
            consumers.setdefault(name, []).append(node)
    return consumers


def _named_inside(node):
    names = set()
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for inner in g.node:
                names |= set(inner.input) | _named_inside(inner)
    return names


def find_selections(graph):
    """The selections (Selection) some graph output is computed from, in graph order."""
    consumers = _consumers(graph)
    outputs = [o.name for o in graph.output]
    made = {o for node in graph.node for o in node.output}
    found = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Loop":
            found += _loop_selections(node, consumers, outputs)
            continue
        if node.op_type in SAMPLING_OPS:
            grid = node.input[SAMPLING_OPS[node.op_type]]
            # (a grid given as an input or a weight is no result; one read twice, one)
            if grid in made and all(f.picks != grid for f in found):
                found += _grid(node, grid, consumers, outputs)
            continue
        if node.op_type not in SELECTION_OPS:
            continue
        picks = node.output[SELECTION_OPS[node.op_type]] \
            if len(node.output) > SELECTION_OPS[node.op_type] else ""
        if not picks:
            continue
        hinging = _reached(picks, consumers, outputs)
        if not hinging:
            continue
        found.append(_selection(node, node.input[0], picks, hinging))
    return found


def _axis(node):
    return _attrs(node).get("axis", -1 if node.op_type == "TopK" else 0)


def _selection(node, scores, picks, hinging, **loop):
    attrs = _attrs(node)
    topk = node.op_type == "TopK"
    axis = _axis(node)
    return Selection(
        op=node.op_type, node=node.name or picks, scores=scores, picks=picks,
        # (a step's tensors gathered over a loop's steps gain the steps' axis second)
        axis=axis + 1 if loop and axis > 0 else axis,
        keepdims=bool(attrs.get("keepdims", 1)),
        ordered=bool(attrs.get("sorted", 1)) if topk else True,
        largest=bool(attrs.get("largest", 1)) if topk else node.op_type == "ArgMax",
        outputs=hinging, **loop)


def _body(loop):
    return next(a.g for a in loop.attribute if a.name == "body")


def _loop_selections(loop, consumers, outputs):
    """The selections in a Loop's body whose picks reach the loop's outputs (a token carried
    to the next step, or gathered over the steps) and from them a graph output."""
    body = _body(loop)
    inner = _consumers(body)
    returned = [o.name for o in body.output[1:]]
    found = []
    for node in body.node:
        if node.op_type not in SELECTION_OPS or node.domain not in ("", "ai.onnx"):
            continue
        picks = node.output[SELECTION_OPS[node.op_type]] \
            if len(node.output) > SELECTION_OPS[node.op_type] else ""
        reached = set(_carried_over(body, picks, inner, returned)) if picks else set()
        # (body output i + 1, after the condition, is the loop's output i)
        hinging = sorted({o for r, out in zip(returned, loop.output) if r in reached and out
                          for o in _reached(out, consumers, outputs)}, key=outputs.index)
        # (picks along the batch axis cannot be held sample by sample: judged free-running)
        if not hinging or _axis(node) == 0:
            continue
        found.append(_selection(node, node.input[0] + STEPS, picks + STEPS, hinging,
                                loop=loop.name, body_picks=picks,
                                body_scores=node.input[0]))
    return found


def _reached(name, consumers, outputs):
    """The graph outputs computed from the tensor `name`."""
    reached, todo = {name}, [name]
    while todo:
        for user in consumers.get(todo.pop(), ()):
            for out in user.output:
                if out and out not in reached:
                    reached.add(out)
                    todo.append(out)
    return [o for o in outputs if o in reached]


def _grid(node, grid, consumers, outputs):
    """[the Selection of a sampling node's grid], or [] when no output reads its samples."""
    hinging = _reached(node.output[0], consumers, outputs)
    if not hinging:
        return []
    return [Selection(op=node.op_type, node=node.name or node.output[0], scores=grid,
                      picks=grid, axis=-1, keepdims=True, ordered=True, largest=True,
                      outputs=hinging, grid=True)]


def _carried_over(body, name, consumers, returned):
    """The body outputs computed from `name` in some step: a loop-carried output reached
    reaches, in the next step, whatever its body input does."""
    carried = len(body.input) - 2       # (inputs: the step's number, the condition, carried)
    starts = {name}
    while True:
        reached = {o for n in starts for o in _reached(n, consumers, returned)}
        more = {body.input[i + 1].name for i, o in enumerate(body.output)
                if 0 < i <= carried and o.name in reached} - starts
        if not more:
            return [o for o in returned if o in reached]
        starts |= more


def held_as(selections):
    """How outputs computed from `selections` (Selection, or verify's entries of them) are
    judged: given the float model's picks, sampling grids, or both."""
    grids = {bool(s.grid if isinstance(s, Selection) else s["grid"]) for s in selections}
    held = " and ".join(w for w, g in (("picks", False), ("sampling grids", True))
                        if g in grids)
    return f"given the float model's {held}"


def link_lowered(selections, graph, lowered):
    """Sets each selection's lowered_scores: the input of the node that makes its picks in
    the lowered model (lowering keeps the names of the ops it does not lower)."""
    lowered_name = lowered if isinstance(lowered, str) else "the lowered model"
    producers = {o: n for n in graph.node for o in n.output if o}
    samplers = {n.name: n for n in graph.node if n.op_type in SAMPLING_OPS}
    loops = {n.name: n for n in graph.node if n.op_type == "Loop"}
    for s in selections:
        if s.loop:      # (a loop the NPU does not run keeps its name and its body's)
            loop = loops.get(s.loop)
            node = loop and next((n for n in _body(loop).node
                                  if n.op_type == s.op and s.body_picks in n.output), None)
            if node is None:
                raise ConversionError(
                    f"{lowered_name}: has no Loop {s.loop} whose body's {s.op} computes "
                    f"{s.body_picks} (as the model's), so its outputs that hinge on those "
                    "picks cannot be compared")
            s.lowered_body_scores, s.lowered_scores = node.input[0], s.scores
            continue
        if s.grid:      # the sampling node keeps its name; its grid may not
            node = samplers.get(s.node)
            grid = node.input[SAMPLING_OPS[node.op_type]] if node is not None else None
            if grid not in producers:
                raise ConversionError(
                    f"{lowered_name}: has no {s.op} {s.node} sampling at a computed grid "
                    f"(as the model's at {s.picks}), so its outputs that hinge on it cannot "
                    "be compared")
            s.lowered_picks = s.lowered_scores = grid
            continue
        node = producers.get(s.picks)
        if node is None or node.op_type != s.op:
            raise ConversionError(
                f"{lowered_name}: has no {s.op} computing {s.picks} (the picks of {s.node} "
                "in the model), so its outputs that hinge on them cannot be compared")
        s.lowered_scores = node.input[0]


def hold(proto, selections, lowered):
    """`proto` (edited) made to read each selection's picks from the input picks + HELD
    instead of computing them, and shows the scores it ranks as the extra output
    picks + RANKED (after the model's, in the order of `selections`). lowered: the
    scores are the lowered model's (Selection.lowered_scores)."""
    graph = proto.graph
    expose_steps(proto, selections, lowered)
    _hold_steps(proto, selections)
    by_picks = {s.lowered_picks if lowered and s.grid else s.picks: s for s in selections
                if not s.loop}
    nodes = []
    for original in graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)         # (graph.node is emptied below)
        nodes.append(node)
        for index, name in enumerate(node.output):
            s = by_picks.get(name)
            if s is None:
                continue
            node.output[index] = name + FREE
            # (a grid of float32 places; a float64 run converts the input with the model)
            kind = onnx.TensorProto.FLOAT if s.grid else onnx.TensorProto.INT64
            graph.input.append(helper.make_tensor_value_info(s.picks + HELD, kind, None))
            # a grid is judged itself: as the model computes it, before it is held
            scores = name + FREE if s.grid else s.lowered_scores if lowered else s.scores
            # (right after the selection: the NumPy reference runs the nodes in their order)
            nodes += [helper.make_node("Identity", [s.picks + HELD], [name],
                                       name=name + HELD),
                      helper.make_node("Identity", [scores], [s.picks + RANKED],
                                       name=name + RANKED)]
    nodes += [helper.make_node("Identity", [s.scores], [s.picks + RANKED],
                               name=s.picks + RANKED) for s in selections if s.loop]
    del graph.node[:]
    graph.node.extend(nodes)
    # (no type given: onnxruntime infers it, as for any tensor inside the graph)
    graph.output.extend(onnx.ValueInfoProto(name=s.picks + RANKED) for s in selections)
    return proto


def expose_steps(proto, selections, lowered=False):
    """`proto` (edited) with the picks and scores of each selection in a loop's body
    gathered over the steps as tensors of the graph (Selection.picks, .scores: [N, steps,
    ...], the lowered model's scores for lowered=True); those it has already are left."""
    graph = proto.graph
    made = {o for n in graph.node for o in n.output}
    loops = {n.name: n for n in graph.node if n.op_type == "Loop"}
    for s in selections:
        if not s.loop or s.scores in made:
            continue
        loop, scores = loops[s.loop], s.lowered_body_scores if lowered else s.body_scores
        body = _body(loop)
        for inner, outer in ((s.body_picks, s.picks), (scores, s.scores)):
            body.output.append(onnx.ValueInfoProto(name=inner))
            loop.output.append(outer + "/by_step")
            graph.node.extend(_samples_first(outer + "/by_step", outer, _opset(proto)))
    return proto


def _opset(proto):
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def _samples_first(steps_first, out, opset):
    """Nodes moving a scan output's steps axis (stacked first) behind the samples' axis:
    [steps, N, ...] -> [N, steps, ...], whatever its rank (which the graph may not say):
    the trailing axes flattened for the Transpose, then given back their sizes."""
    def name(what):
        return f"{out}/{what}"

    def const(what, values):
        return helper.make_node("Constant", [], [name(what)], name=name(what),
                                value=helper.make_tensor(name(what), onnx.TensorProto.INT64,
                                                         [len(values)], values))
    big = 2 ** 62
    rest = helper.make_node("Slice", [name("shape"), name("two"), name("end")], [name("rest")],
                            name=name("rest")) if opset >= 10 else \
        helper.make_node("Slice", [name("shape")], [name("rest")], starts=[2], ends=[big],
                         axes=[0], name=name("rest"))
    return [
        helper.make_node("Shape", [steps_first], [name("shape")], name=name("shape")),
        const("flat_shape", [0, 0, -1]), const("zero", [0]), const("one", [1]),
        const("two", [2]), const("end", [big]),
        helper.make_node("Reshape", [steps_first, name("flat_shape")], [name("flat")],
                         name=name("flat")),
        helper.make_node("Transpose", [name("flat")], [name("moved")], perm=[1, 0, 2],
                         name=name("moved")),
        helper.make_node("Gather", [name("shape"), name("one")], [name("samples")], axis=0,
                         name=name("samples")),
        helper.make_node("Gather", [name("shape"), name("zero")], [name("steps")], axis=0,
                         name=name("steps")),
        rest,
        helper.make_node("Concat", [name("samples"), name("steps"), name("rest")],
                         [name("sizes")], axis=0, name=name("sizes")),
        helper.make_node("Reshape", [name("moved"), name("sizes")], [out], name=out)]


def _hold_steps(proto, selections):
    """Each loop selection's body made to read its step's pick from the input picks + HELD
    ([N, steps, ...], the model's picks gathered over the steps) instead of computing it."""
    loops = {n.name: n for n in proto.graph.node if n.op_type == "Loop"}
    for s in selections:
        if not s.loop:
            continue
        body = _body(loops[s.loop])
        nodes = []
        for original in body.node:
            node = onnx.NodeProto()
            node.CopyFrom(original)
            nodes.append(node)
            if node.op_type == s.op and s.body_picks in node.output:
                node.output[list(node.output).index(s.body_picks)] = s.body_picks + FREE
                # (the body's first input is the step's number)
                nodes.append(helper.make_node("Gather", [s.picks + HELD, body.input[0].name],
                                              [s.body_picks], axis=1, name=s.body_picks + HELD))
        del body.node[:]
        body.node.extend(nodes)
        proto.graph.input.append(
            helper.make_tensor_value_info(s.picks + HELD, onnx.TensorProto.INT64, None))


def steps_exposed(proto, selections):
    """A copy of `proto` with expose_steps' tensors, or `proto` itself when no selection is
    in a loop: the model whose picks and scores a run can fetch by name."""
    if not any(s.loop for s in selections):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return expose_steps(copy, selections)


def own_picks(selection, scores, like):
    """The picks `scores` give (a loop selection's lowered picks, from its held scores):
    arg-max / min, or the top k sorted, along the selection's axis, shaped as `like`."""
    scores, axis = np.asarray(scores), selection.axis % np.ndim(scores)
    if selection.op != "TopK":
        got = (np.argmax if selection.largest else np.argmin)(scores, axis=axis)
        return np.expand_dims(got, axis) if selection.keepdims else got
    order = np.argsort(-scores if selection.largest else scores, axis=axis, kind="stable")
    return np.take(order, np.arange(np.shape(like)[axis]), axis=axis)


def compare_picks(selection, scores, picks, got_scores, got_picks):
    """How the lowered model's own picks (got_picks, from its scores got_scores) compare with
    the model's (picks, from `scores`): {"picks", "picks_same" (the same candidates, in any
    place), "in_place", "near_tie" (the largest difference of the model's scores between a
    candidate the lowered model picked and the one the model picked in its place; for an
    unordered top-k, the model's k-th score), "score_error" (the largest difference between
    the two models' scores), "explained": every differing pick within 2 x score_error}."""
    scores = np.asarray(scores, np.float64)
    got_scores = np.asarray(got_scores, np.float64)
    picks, got_picks = np.asarray(picks), np.asarray(got_picks)
    out = {"picks": int(picks.size)}
    if got_picks.shape != picks.shape or got_scores.shape != scores.shape:
        return {**out, "picks_same": 0, "in_place": 0, "near_tie": float("inf"),
                "score_error": float("inf"), "explained": False}
    error = float(np.max(np.abs(got_scores - scores), initial=0.0))
    axis = selection.axis % scores.ndim
    if selection.op != "TopK" and not selection.keepdims:
        picks, got_picks = np.expand_dims(picks, axis), np.expand_dims(got_picks, axis)
    count = scores.shape[axis]
    s = np.moveaxis(scores, axis, -1).reshape(-1, count)
    p = np.moveaxis(picks, axis, -1).reshape(len(s), -1).astype(np.int64)
    q = np.moveaxis(got_picks, axis, -1).reshape(len(s), -1).astype(np.int64)
    in_place = int(np.sum(p == q))
    if p.shape[1] == 1:
        same = in_place
    else:
        same = int(sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(p, q)))
    out.update(picks_same=same, in_place=in_place, score_error=error)
    if np.any((q < 0) | (q >= count)):
        return {**out, "near_tie": float("inf"), "explained": False}
    at_p, at_q = np.take_along_axis(s, p, -1), np.take_along_axis(s, q, -1)
    if selection.ordered:
        # the j-th largest of two score sets error apart are within error of each other, so
        # the model's scores of the two j-th picks are within 2 x error
        gaps = np.abs(at_p - at_q)[p != q]
    else:
        # a candidate picked in place of one of the model's is within 2 x error of its k-th
        kth = at_p.min(-1, keepdims=True) if selection.largest else \
            at_p.max(-1, keepdims=True)
        swapped = np.array([~np.isin(b, a) for a, b in zip(p, q)])
        gaps = np.abs(np.broadcast_to(kth, at_q.shape) - at_q)[swapped]
    near_tie = float(gaps.max(initial=0.0))
    # (float64 sums of float32 differences: exact but for a last-bit rounding)
    out.update(near_tie=near_tie, explained=near_tie <= 2 * error * (1 + 1e-9))
    return out
