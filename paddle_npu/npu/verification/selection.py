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


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def find_selections(graph):
    """The selections (Selection) some graph output is computed from, in graph order."""
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = [o.name for o in graph.output]
    made = {o for node in graph.node for o in node.output}
    found = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
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
        attrs = _attrs(node)
        topk = node.op_type == "TopK"
        found.append(Selection(
            op=node.op_type, node=node.name or picks, scores=node.input[0], picks=picks,
            axis=attrs.get("axis", -1 if topk else 0), keepdims=bool(attrs.get("keepdims", 1)),
            ordered=bool(attrs.get("sorted", 1)) if topk else True,
            largest=bool(attrs.get("largest", 1)) if topk else node.op_type == "ArgMax",
            outputs=hinging))
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
    for s in selections:
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
    by_picks = {s.lowered_picks if lowered and s.grid else s.picks: s for s in selections}
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
    del graph.node[:]
    graph.node.extend(nodes)
    # (no type given: onnxruntime infers it, as for any tensor inside the graph)
    graph.output.extend(onnx.ValueInfoProto(name=s.picks + RANKED) for s in selections)
    return proto


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
