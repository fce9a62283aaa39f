"""Restructuring passes (NNIE-style "restruct"): rewrite a model into an equivalent one a
constrained NPU accepts, before the stage-2 mappers run.

    bn_collapse    BatchNormalization folded into the Conv / Gemm feeding it (passes.py's
                   fold_batchnorm: the one shared pass; what it cannot absorb becomes Mul + Add)
    merge_linear   FC -> FC with nothing non-linear between (NNIE's FC + PCA) -> one FC,
                   weights multiplied and the first bias carried through the second
    l2norm         x / sqrt(sum(x^2) + a), x / ReduceL2(x) (optionally clipped below) and
                   LpNormalization(p=2) rebuilt from Mul, a 1x1 Conv doing the sum (the
                   reduction as a Conv), Sqrt, Clip and Div; the norm is broadcast back over
                   the channels by repeated Concat when the target has no broadcast
                   (NNIE's concat_boardcast)
    fc_to_conv     an FC that is not the model's last op (its output feeds something other
                   than the target's allowed FC followers, e.g. softmax) -> Reshape, 1x1 Conv,
                   Flatten

Each pass is a RulePass of one rule (passes.py): it returns a PassResult with what it
rewrote and, per node it had to leave alone, why. A target lists the passes it needs
(`restruct.passes`); `enable` / `disable` switch them. Nodes keep their placement marks
through a rewrite.
"""
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from . import graph as g
from .passes import FoldBatchNorm, Rule, RulePass
from .target import RESTRUCT_PASSES as ORDER


def _node(graph, op_type, inputs, name, attrs=None, out_dims=None, dtype=ir.DataType.FLOAT):
    """A standard node whose output is named as the node, with its type and shape."""
    return g.make_node("", op_type, inputs, attrs or {}, name, dtype, out_dims)


def _dims(value):
    """Static dims as int, anything else None."""
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


# --- fully connected layers ----------------------------------------------------------------

@dataclass
class _FC:
    """y = x @ w + b (w [K, M], b [M] or None) read off a Gemm or a MatMul (+ Add bias)."""
    nodes: list          # the FC's nodes, first to last
    x: ir.Value
    w: np.ndarray
    b: object
    out: ir.Value


def _fc(node):
    """The FC starting at `node`, or (None, reason) when it is not one we can rewrite."""
    if g.is_op(node, "Gemm"):
        a = node.attributes
        if a.get_int("transA", 0):
            return None, "Gemm with transA=1"
        w = g.constant(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, "its weight is not a constant matrix"
        w = w.astype(np.float64) * a.get_float("alpha", 1.0)
        if a.get_int("transB", 0):
            w = w.T
        b = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = g.constant(node.inputs[2])
            if c is None:
                return None, "its bias is not a constant"
            c = c.astype(np.float64) * a.get_float("beta", 1.0)
            if c.size not in (1, w.shape[1]) or (c.ndim == 2 and c.shape[0] != 1):
                return None, f"its C of shape {list(c.shape)} is not a bias row"
            b = np.broadcast_to(c.reshape(-1), (w.shape[1],)).copy()
        return _FC([node], node.inputs[0], w, b, node.outputs[0]), None
    if g.is_op(node, "MatMul"):
        w = g.constant(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, "its weight is not a constant matrix"
        w = w.astype(np.float64)
        add = g.single_user(node.outputs[0])
        if g.is_op(add, "Add"):
            other = add.inputs[1] if add.inputs[0] is node.outputs[0] else add.inputs[0]
            c = g.constant(other)
            if c is not None and c.size in (1, w.shape[1]) and c.shape[-1:] in ((1,), (w.shape[1],), ()) \
                    and c.ndim <= 1:
                b = np.broadcast_to(c.astype(np.float64).reshape(-1), (w.shape[1],)).copy()
                return _FC([node, add], node.inputs[0], w, b, add.outputs[0]), None
        return _FC([node], node.inputs[0], w, None, node.outputs[0]), None
    return None, "not an FC"


def _emit_fc(graph, names, fc_like, x, w, b, dtype, before):
    """Nodes computing x @ w + b for x of any rank, as a Gemm (rank 2) or MatMul + Add."""
    xd = _dims(x)
    base = fc_like.nodes[0].name
    wv = g.initializer(graph, np.ascontiguousarray(w, dtype=dtype), f"{base}.w")
    out_dims = None if xd is None else xd[:-1] + [w.shape[1]]
    edt = ir.DataType.from_numpy(np.dtype(dtype))
    if xd is not None and len(xd) == 2:
        inputs = [x, wv]
        if b is not None:
            inputs.append(g.initializer(graph, np.ascontiguousarray(b, dtype=dtype), f"{base}.b"))
        nodes = [_node(graph, "Gemm", inputs, names(base), out_dims=out_dims, dtype=edt)]
    else:
        nodes = [_node(graph, "MatMul", [x, wv], names(base), out_dims=out_dims, dtype=edt)]
        if b is not None:
            bv = g.initializer(graph, np.ascontiguousarray(b, dtype=dtype), f"{base}.b")
            nodes.append(_node(graph, "Add", [nodes[0].outputs[0], bv], names(f"{base}/bias"),
                               out_dims=out_dims, dtype=edt))
    graph.insert_before(before, nodes)
    return nodes


# --- the rules -----------------------------------------------------------------------------

LINEAR_BETWEEN = ("Identity", "Dropout")
NONLINEAR = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
             "HardSwish", "Elu", "Selu", "Softplus", "Gelu", "Softmax", "Abs", "Exp", "Log")


class MergeLinear(Rule):
    """FC -> (Identity / Dropout)* -> FC: one FC, weights multiplied, the first bias carried
    through the second. Run to a fixpoint (a merged FC may merge with the next)."""
    name = "merge_linear"

    def match(self, node):
        first, _ = _fc(node)
        if first is None:
            return None
        value, between = first.out, []
        user = g.single_user(value)
        while g.is_op(user, *LINEAR_BETWEEN) and len(user.outputs) == 1:
            between.append(user)
            value = user.outputs[0]
            user = g.single_user(value)
        found = {"node": node, "first": first, "between": between, "value": value,
                 "user": user, "second": None, "why": None}
        if user is None:       # several readers: a refusal only when one of them is an FC
            return found if any(_fc(u)[0] is not None for u in g.users(value)) else None
        if g.is_op(user, *NONLINEAR):
            after = g.single_user(user.outputs[0])
            return found if after is not None and _fc(after)[0] is not None else None
        found["second"], found["why"] = _fc(user)
        if found["second"] is None and not g.is_op(user, "Gemm", "MatMul"):
            return None
        return found

    def check(self, found):
        value, user, first, second = (found[k] for k in ("value", "user", "first", "second"))
        if user is None:
            what = "is also a model output" if value.is_graph_output() else \
                f"has {len(g.users(value))} readers"
            return f"its output {value.name} {what}: merging would compute it twice"
        if g.is_op(user, *NONLINEAR):
            after = g.single_user(user.outputs[0])
            return f"{user.op_type} ({user.name}) between it and {after.name} is not linear"
        if second is None:
            return f"the next FC {user.name} cannot merge: {found['why']}"
        if g.marks_of(first.nodes[0]) != g.marks_of(second.nodes[0]):
            return (f"it and {user.name} carry different marks "
                    f"({g.marks_of(first.nodes[0]) or 'none'} vs "
                    f"{g.marks_of(second.nodes[0]) or 'none'})")
        if first.w.shape[1] != second.w.shape[0]:
            return "the FCs' sizes do not chain"
        return None

    def rewrite(self, builder, found):
        node, first, second = found["node"], found["first"], found["second"]
        graph = node.graph
        dtype = g.constant(node.inputs[1]).dtype
        w = first.w @ second.w
        b = None
        if first.b is not None or second.b is not None:
            b = (first.b @ second.w if first.b is not None else 0.0) + \
                (second.b if second.b is not None else 0.0)
        new = _emit_fc(graph, builder.names, first, first.x, w, b, dtype, first.nodes[0])
        g.inherit_marks(first.nodes + second.nodes, new)
        g.note(new[-1], "merged", ",".join(n.name for n in first.nodes + second.nodes))
        g.take_over(second.out, new[-1].outputs[0])
        g.drop_dead(graph, second.nodes + found["between"] + first.nodes)
        return f"{'+'.join(n.name for n in first.nodes + second.nodes)} -> {new[-1].name}"


class FcToConv(Rule):
    """An FC that is not the model's last op and feeds something other than the target's
    allowed FC followers -> Reshape [N, K, 1, 1], 1x1 Conv, Flatten."""
    name = "fc_to_conv"

    def __init__(self, target):
        self.allowed = tuple(getattr(target, "fc_followers", ("*",)))

    def match(self, node):
        if not g.is_op(node, "Gemm", "MatMul"):
            return None
        fc, why = _fc(node)
        if fc is not None:
            users = g.users(fc.out)
            if not users:
                return None       # the model's last op: NNIE lets it stay an FC
            if "*" in self.allowed or all(u.op_type in self.allowed for u in users):
                return None       # followed only by what the target allows after an FC
        return {"node": node, "fc": fc, "why": why}

    def check(self, found):
        fc = found["fc"]
        if fc is None:
            return found["why"]
        xd = _dims(fc.x)
        if xd is None or len(xd) != 2:
            return (f"its input {fc.x.name} has "
                    f"{'an unknown rank' if xd is None else f'rank {len(xd)}'}"
                    ": only [N, K] inputs become a 1x1 Conv")
        return None

    def rewrite(self, builder, found):
        node, fc = found["node"], found["fc"]
        graph, names = node.graph, builder.names
        xd = _dims(fc.x)
        k, m = fc.w.shape
        dtype = g.constant(node.inputs[1]).dtype
        edt = ir.DataType.from_numpy(np.dtype(dtype))
        base = node.name
        shape = g.initializer(graph, np.asarray([-1, k, 1, 1], np.int64), f"{base}.nchw")
        to4 = _node(graph, "Reshape", [fc.x, shape], names(f"{base}/to_nchw"),
                    out_dims=[xd[0], k, 1, 1], dtype=edt)
        inputs = [to4.outputs[0], g.initializer(graph, np.ascontiguousarray(
            fc.w.T.reshape(m, k, 1, 1), dtype=dtype), f"{base}.conv_w")]
        if fc.b is not None:
            inputs.append(g.initializer(graph, np.ascontiguousarray(fc.b, dtype=dtype),
                                        f"{base}.conv_b"))
        conv = _node(graph, "Conv", inputs, names(f"{base}/conv1x1"),
                     {"kernel_shape": [1, 1]}, out_dims=[xd[0], m, 1, 1], dtype=edt)
        flat = _node(graph, "Flatten", [conv.outputs[0]], names(f"{base}/flatten"),
                     {"axis": 1}, out_dims=[xd[0], m], dtype=edt)
        graph.insert_before(fc.nodes[0], [to4, conv, flat])
        g.inherit_marks(fc.nodes, [to4, conv, flat])
        g.take_over(fc.out, flat.outputs[0])
        g.drop_dead(graph, fc.nodes)
        return f"{'+'.join(n.name for n in fc.nodes)} -> {conv.name}"


# --- L2 normalisation ----------------------------------------------------------------------

def _axes(node):
    """The reduce axes of a Reduce* node (attribute or, from opset 13/18, input), or None."""
    if "axes" in node.attributes:
        return list(node.attributes.get_ints("axes"))
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        a = g.constant(node.inputs[1])
        return None if a is None else [int(v) for v in a.reshape(-1)]
    return None


def _sum_of_squares(value, x_expected=None):
    """(x, nodes, reason) if value = sum(x^2) over one axis with keepdims."""
    node = value.producer()
    if g.is_op(node, "ReduceSumSquare"):
        return node.inputs[0], [node], _reduce_reason(node)
    if g.is_op(node, "ReduceSum"):
        sq = node.inputs[0].producer()
        if g.is_op(sq, "Mul") and sq.inputs[0] is sq.inputs[1]:
            return sq.inputs[0], [node, sq], _reduce_reason(node)
        if g.is_op(sq, "Pow"):
            p = g.constant(sq.inputs[1])
            if p is not None and p.size == 1 and float(p.reshape(())) == 2.0:
                return sq.inputs[0], [node, sq], _reduce_reason(node)
    return None, [], "not a sum of squares"


def _reduce_reason(node):
    x = node.inputs[0]
    xd = _dims(x)
    if xd is None or len(xd) != 2:
        return (f"{node.name} reduces a tensor of "
                f"{'unknown rank' if xd is None else f'rank {len(xd)}'}: only [N, C] features "
                "are rebuilt")
    axes = _axes(node)
    if axes is None or [a % 2 for a in axes] != [1]:
        return f"{node.name} reduces over axes {axes}, not the feature axis 1"
    if not node.attributes.get_int("keepdims", 1):
        return f"{node.name} does not keep the reduced axis"
    return None


def _norm_pattern(div):
    """(x, a, clip_min, nodes, reason) for Div(x, d) with d an L2 norm of x."""
    x, d = div.inputs[0], div.inputs[1]
    node = d.producer() if d is not None else None
    if node is None:
        return None
    nodes, clip_min = [div], None
    if g.is_op(node, "Clip", "Max"):
        if node.op_type == "Clip":
            lo = node.attributes.get_float("min", None) if "min" in node.attributes else \
                (g.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None
                 else None)
            hi = node.attributes.get_float("max", None) if "max" in node.attributes else \
                (g.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None
                 else None)
            if lo is None or (hi is not None and float(np.asarray(hi).reshape(())) < 3e38):
                return None
            clip_min, src = float(np.asarray(lo).reshape(())), node.inputs[0]
        else:
            if len(node.inputs) != 2:
                return None
            c0, c1 = g.constant(node.inputs[0]), g.constant(node.inputs[1])
            c, src = (c1, node.inputs[0]) if c1 is not None else (c0, node.inputs[1])
            if c is None or c.size != 1:
                return None
            clip_min = float(c.reshape(()))
        nodes.append(node)
        node = src.producer()
        if node is None:
            return None
    a = 0.0
    if g.is_op(node, "ReduceL2"):
        y, why = node.inputs[0], _reduce_reason(node)
        nodes.append(node)
    elif g.is_op(node, "Sqrt"):
        nodes.append(node)
        s = node.inputs[0]
        add = s.producer()
        if g.is_op(add, "Add"):
            c0, c1 = g.constant(add.inputs[0]), g.constant(add.inputs[1])
            c, s2 = (c1, add.inputs[0]) if c1 is not None else (c0, add.inputs[1])
            if c is None or c.size != 1:
                return None
            a = float(c.reshape(()))
            nodes.append(add)
            s = s2
        y, more, why = _sum_of_squares(s)
        if y is None:
            return None
        nodes.extend(more)
    else:
        return None
    if y is not x:
        return None
    if why is None and a < 0:
        why = f"a = {a} is negative"
    return x, a, clip_min, nodes, why


def concat_broadcast(graph, names, value, count, axis, base, dims, dtype):
    """`value` (size 1 along `axis`) repeated `count` times along it by Concat nodes only:
    32 copies at a time, as NNIE's concat_boardcast does, generalised to any count by
    its base-32 digits. Returns (nodes, output value)."""
    nodes, levels, n = [], [], count
    block, size = value, 1
    while n:
        digit = n % 32
        levels.append((block, size, digit))
        n //= 32
        if n:
            d = list(dims)
            d[axis] = size * 32
            cat = _node(graph, "Concat", [block] * 32, names(f"{base}/x{size * 32}"),
                        {"axis": axis}, out_dims=d, dtype=dtype)
            nodes.append(cat)
            block, size = cat.outputs[0], size * 32
    parts = [blk for blk, _, digit in levels for _ in range(digit)]
    if len(parts) == 1:
        return nodes, parts[0]
    d = list(dims)
    d[axis] = count
    cat = _node(graph, "Concat", parts, names(f"{base}/x{count}"), {"axis": axis},
                out_dims=d, dtype=dtype)
    nodes.append(cat)
    return nodes, cat.outputs[0]


class L2Norm(Rule):
    """L2 normalisation of [N, C] features -> ops the target's NPU has (Mul, a 1x1 Conv
    summing the squares, Sqrt, Clip, Div; Concat broadcasting without broadcast)."""
    name = "l2norm"

    def __init__(self, target):
        self.target = target
        self.broadcast = getattr(target, "broadcast", True)
        self.needed = ["Mul", "Sqrt", "Div"] + ([] if self.broadcast else ["Concat"])

    def match(self, node):
        if g.is_op(node, "LpNormalization"):
            p = node.attributes.get_int("p", 2)
            axis = node.attributes.get_int("axis", -1)
            xd = _dims(node.inputs[0])
            why = None
            if p != 2:
                why = f"p={p}: only the L2 norm is rebuilt"
            elif xd is None or len(xd) != 2:
                why = "only [N, C] features are rebuilt"
            elif axis % 2 != 1:
                why = f"axis={axis} is not the feature axis 1"
            found = (node.inputs[0], 0.0, None, [node], why)
        elif g.is_op(node, "Div"):
            found = _norm_pattern(node)
            if found is None:
                return None
        else:
            return None
        return dict(zip(("x", "a", "clip_min", "nodes", "why"), found), node=node)

    def check(self, found):
        target, why = self.target, found["why"]
        if why is None:
            missing = [op for op in self.needed if not target.npu_runs(op)]
            if found["clip_min"] is not None and not target.npu_runs("Clip"):
                missing.append("Clip")
            if missing:
                why = (f"target {target.name!r}'s NPU has no {', '.join(missing)}: the norm "
                       "stays as it is (on the CPU)")
        xd = _dims(found["x"])
        if why is None and xd[1] is None:
            why = "the feature size is not known"
        if why is None and any(g.marks_of(n) for n in found["nodes"]):
            why = "a node of it carries a mark: left as the user placed it"
        return why

    def rewrite(self, builder, found):
        node, x, a, clip_min, nodes = (found[k] for k in ("node", "x", "a", "clip_min",
                                                          "nodes"))
        graph, names, broadcast = node.graph, builder.names, self.broadcast
        xd = _dims(x)
        c = xd[1]
        dtype = x.type.dtype if x.type is not None else ir.DataType.FLOAT
        npdt = dtype.numpy()
        base = node.name
        four = [xd[0], c, 1, 1]
        shape = g.initializer(graph, np.asarray([-1, c, 1, 1], np.int64), f"{base}.nchw")
        x4 = _node(graph, "Reshape", [x, shape], names(f"{base}/feat_nchw"), out_dims=four,
                   dtype=dtype)
        sq = _node(graph, "Mul", [x4.outputs[0], x4.outputs[0]], names(f"{base}/square"),
                   out_dims=four, dtype=dtype)
        ones = g.initializer(graph, np.ones((1, c, 1, 1), npdt), f"{base}.sum_w")
        bias = g.initializer(graph, np.full((1,), a, npdt), f"{base}.plus_a")
        total = _node(graph, "Conv", [sq.outputs[0], ones, bias], names(f"{base}/sum_conv"),
                      {"kernel_shape": [1, 1]}, out_dims=[xd[0], 1, 1, 1], dtype=dtype)
        root = _node(graph, "Sqrt", [total.outputs[0]], names(f"{base}/sqrt"),
                     out_dims=[xd[0], 1, 1, 1], dtype=dtype)
        new = [x4, sq, total, root]
        norm = root.outputs[0]
        if clip_min is not None:
            lo = g.initializer(graph, np.asarray(clip_min, npdt), f"{base}.min")
            clip = _node(graph, "Clip", [norm, lo], names(f"{base}/clip"),
                         out_dims=[xd[0], 1, 1, 1], dtype=dtype)
            new.append(clip)
            norm = clip.outputs[0]
        if not broadcast:
            cats, norm = concat_broadcast(graph, names, norm, c, 1, f"{base}/norm", four, dtype)
            new.extend(cats)
        div = _node(graph, "Div", [x4.outputs[0], norm], names(f"{base}/divide"),
                    out_dims=four, dtype=dtype)
        flat = _node(graph, "Flatten", [div.outputs[0]], names(f"{base}/flatten"),
                     {"axis": 1}, out_dims=[xd[0], c], dtype=dtype)
        new += [div, flat]
        graph.insert_before(node, new)
        g.take_over(node.outputs[0], flat.outputs[0])
        g.drop_dead(graph, nodes)
        return (f"{node.name} -> {len(new)} nodes (a={a:g}"
                + (f", min {clip_min:g}" if clip_min is not None else "")
                + (", concat broadcast" if not broadcast else "") + ")")


def restruct_pass(name, target):
    """The RulePass of one restruct pass, configured for a target."""
    if name == "bn_collapse":
        return RulePass(name, [FoldBatchNorm()])
    if name == "merge_linear":
        return RulePass(name, [MergeLinear()], restart=True)
    if name == "l2norm":
        return RulePass(name, [L2Norm(target)])
    if name == "fc_to_conv":
        return RulePass(name, [FcToConv(target)])
    raise ConversionError(f"unknown restruct pass {name!r} (known: {', '.join(ORDER)})")


# name -> (model, target) -> PassResult: one pass run on its own
PASSES = {name: (lambda model, target, _name=name: restruct_pass(_name, target)(model))
          for name in ORDER}


def selected(target, enable=(), disable=()):
    """The passes to run, in ORDER: the target's own, plus `enable`, minus `disable`."""
    wanted = set(getattr(target, "restruct", ("bn_collapse",)))
    for name in list(enable or ()) + list(disable or ()):
        if name not in PASSES:
            raise ConversionError(f"unknown restruct pass {name!r} "
                                  f"(known: {', '.join(ORDER)})")
    wanted |= set(enable or ())
    wanted -= set(disable or ())
    return [p for p in ORDER if p in wanted]


def restruct_passes(target, enable=(), disable=()):
    """The selected passes, configured for the target, in ORDER."""
    return [restruct_pass(name, target) for name in selected(target, enable, disable)]
