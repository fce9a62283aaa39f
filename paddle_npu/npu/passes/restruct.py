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

Each pass is a RulePass of its rules (rules.py): it returns a PassResult with what it
rewrote and, per node it had to leave alone, why. A target lists the passes it needs
(`restruct.passes`); `enable` / `disable` switch them. Nodes keep their placement marks
through a rewrite.
"""
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ...errors import ConversionError
from .. import graph as g
from ..chip.target import RESTRUCT_PASSES as ORDER
from .common import FoldBatchNorm
from .framework import RulePass
from .rules import Rule


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


def _bias_row(matmul, add):
    """The bias an Add after a MatMul by a constant matrix adds (a constant of one number
    or of the matrix's width), float64, or None."""
    w = g.constant(matmul.inputs[1]) if g.is_op(matmul, "MatMul") else None
    c = g.constant(add.inputs[1] if add.inputs[0] is matmul.outputs[0] else add.inputs[0])
    if w is None or w.ndim != 2 or c is None or c.ndim > 1 or c.size not in (1, w.shape[1]):
        return None
    return np.broadcast_to(c.astype(np.float64).reshape(-1), (w.shape[1],)).copy()


def _fc(node, add=None):
    """The FC a Gemm is, or a MatMul (+ `add`, its bias Add), or (None, reason)."""
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
        return _FC([node], node.inputs[0], w, b), None
    w = g.constant(node.inputs[1])
    if w is None or w.ndim != 2:
        return None, "its weight is not a constant matrix"
    if add is None:
        return _FC([node], node.inputs[0], w.astype(np.float64), None), None
    return _FC([node, add], node.inputs[0], w.astype(np.float64), _bias_row(node, add)), None


def _fc_pattern(p, k, x=None, where=None, anchor=False):
    """An FC: Gemm, or MatMul and the Add of its bias when that is its only reader (nodes
    fc<k> and bias<k>, input x<k>)."""
    fc = p.op("Gemm|MatMul", x or f"x{k}", "_", "_?", name=f"fc{k}", where=where,
              anchor=anchor)
    return p.maybe("Add", fc, "_", name=f"bias{k}",
                   where=lambda add, m: _bias_row(getattr(m, f"fc{k}"), add) is not None)


def _emit_fc(b, base, x, w, bias, dtype):
    """Nodes computing x @ w + bias for x of any rank, as a Gemm (rank 2) or MatMul + Add;
    returns the last."""
    xd = _dims(x)
    wv = b.initializer(np.ascontiguousarray(w, dtype=dtype), f"{base}.w")
    out_dims = None if xd is None else xd[:-1] + [w.shape[1]]
    edt = ir.DataType.from_numpy(np.dtype(dtype))
    bv = None if bias is None else \
        b.initializer(np.ascontiguousarray(bias, dtype=dtype), f"{base}.b")
    if xd is not None and len(xd) == 2:
        return b.node("Gemm", [x, wv] + ([bv] if bv is not None else []), name=base,
                      shape=out_dims, dtype=edt)
    mm = b.node("MatMul", [x, wv], name=base, shape=out_dims, dtype=edt)
    if bv is None:
        return mm
    return b.node("Add", [mm.outputs[0], bv], name=f"{base}/bias", shape=out_dims, dtype=edt)


# --- the rules -----------------------------------------------------------------------------

LINEAR_BETWEEN = "Identity|Dropout"
NONLINEAR = ("Relu|LeakyRelu|PRelu|Sigmoid|Tanh|Clip|HardSigmoid|HardSwish|Elu|Selu|"
             "Softplus|Gelu|Softmax|Abs|Exp|Log")


class MergeLinear(Rule):
    """FC -> (Identity / Dropout)* -> FC: one FC, weights multiplied, the first bias carried
    through the second. Run to a fixpoint (a merged FC may merge with the next)."""
    name = "merge_linear"

    def pattern(self, p):
        h = _fc_pattern(p, "1", where=lambda node, m: _fc(node)[0] is not None, anchor=True)
        h = p.repeat(LINEAR_BETWEEN, h, name="between", where=lambda node, m:
                     len(node.outputs) == 1)
        h = p.maybe(NONLINEAR, h, "_?", "_?", name="act")
        return _fc_pattern(p, "2", x=h)

    def check(self, m):
        if m.act is not None:
            return f"{m.act.op_type} ({m.act.name}) between it and {m.fc2.name} is not linear"
        first, _ = _fc(m.fc1, m.bias1)
        second, why = _fc(m.fc2, m.bias2)
        if second is None:
            return f"the next FC {m.fc2.name} cannot merge: {why}"
        if g.marks_of(m.fc1) != g.marks_of(m.fc2):
            return (f"it and {m.fc2.name} carry different marks "
                    f"({g.marks_of(m.fc1) or 'none'} vs {g.marks_of(m.fc2) or 'none'})")
        if first.w.shape[1] != second.w.shape[0]:
            return "the FCs' sizes do not chain"
        return None

    def rewrite(self, b, m):
        (first, _), (second, _) = _fc(m.fc1, m.bias1), _fc(m.fc2, m.bias2)
        bias = None
        if first.b is not None or second.b is not None:
            bias = (first.b @ second.w if first.b is not None else 0.0) + \
                (second.b if second.b is not None else 0.0)
        new = _emit_fc(b, m.fc1.name, first.x, first.w @ second.w, bias,
                       g.constant(m.fc1.inputs[1]).dtype)
        merged = [n.name for n in first.nodes + second.nodes]
        g.note(new, "merged", ",".join(merged))
        return new.outputs[0], f"{'+'.join(merged)} -> {new.name}"


class FcToConv(Rule):
    """An FC that is not the model's last op and feeds something other than the target's
    allowed FC followers -> Reshape [N, K, 1, 1], 1x1 Conv, Flatten."""
    name = "fc_to_conv"

    def __init__(self, target):
        self.allowed = tuple(getattr(target, "fc_followers", ("*",)))

    def pattern(self, p):
        return _fc_pattern(p, "", anchor=True)

    def applies(self, m):
        """Not the model's last op (NNIE lets that stay an FC) nor followed only by what the
        target allows after an FC; every op that is no FC is reported."""
        users = g.users(m.output)
        return _fc(m.fc, m.bias)[0] is None or bool(users) and "*" not in self.allowed and \
            not all(u.op_type in self.allowed for u in users)

    def check(self, m):
        fc, why = _fc(m.fc, m.bias)
        if fc is None:
            return why
        xd = _dims(fc.x)
        if xd is None or len(xd) != 2:
            return (f"its input {fc.x.name} has "
                    f"{'an unknown rank' if xd is None else f'rank {len(xd)}'}"
                    ": only [N, K] inputs become a 1x1 Conv")
        return None

    def rewrite(self, b, m):
        fc, _ = _fc(m.fc, m.bias)
        n, (k, c) = _dims(fc.x)[0], fc.w.shape
        dtype = g.constant(m.fc.inputs[1]).dtype
        edt = ir.DataType.from_numpy(np.dtype(dtype))
        base = m.fc.name
        shape = b.initializer(np.asarray([-1, k, 1, 1], np.int64), f"{base}.nchw")
        to4 = b.node("Reshape", [fc.x, shape], name=f"{base}/to_nchw", shape=[n, k, 1, 1],
                     dtype=edt)
        inputs = [to4.outputs[0], b.initializer(np.ascontiguousarray(
            fc.w.T.reshape(c, k, 1, 1), dtype=dtype), f"{base}.conv_w")]
        if fc.b is not None:
            inputs.append(b.initializer(np.ascontiguousarray(fc.b, dtype=dtype),
                                        f"{base}.conv_b"))
        conv = b.node("Conv", inputs, {"kernel_shape": [1, 1]}, name=f"{base}/conv1x1",
                      shape=[n, c, 1, 1], dtype=edt)
        flat = b.node("Flatten", [conv.outputs[0]], {"axis": 1}, name=f"{base}/flatten",
                      shape=[n, c], dtype=edt)
        return flat.outputs[0], f"{'+'.join(x.name for x in fc.nodes)} -> {conv.name}"


# --- L2 normalisation ----------------------------------------------------------------------

def _axes(node):
    """The reduce axes of a Reduce* node (attribute or, from opset 13/18, input), or None."""
    if "axes" in node.attributes:
        return list(node.attributes.get_ints("axes"))
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        a = g.constant(node.inputs[1])
        return None if a is None else [int(v) for v in a.reshape(-1)]
    return None


def _reduce_reason(node):
    """Why a reduction is not one over the features of [N, C] kept, or None."""
    xd = _dims(node.inputs[0])
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


def _number(value):
    """The float of a constant of one element, or None."""
    c = g.constant(value)
    return None if c is None or c.size != 1 else float(c.reshape(()))


def _squares(node, m):
    """Whether a Mul / Pow squares its first input."""
    return node.inputs[0] is node.inputs[1] if node.op_type == "Mul" else \
        _number(node.inputs[1]) == 2.0


def _clip_min(node):
    """The lower bound of a Clip with none above (or one of 3e38 and more), or of a Max by
    a constant; None otherwise."""
    if node.op_type == "Max":
        if len(node.inputs) != 2:
            return None
        c1 = g.constant(node.inputs[1])
        return _number(node.inputs[1] if c1 is not None else node.inputs[0])
    lo, hi = _clip_bound(node, "min", 1), _clip_bound(node, "max", 2)
    return None if lo is None or (hi is not None and hi < 3e38) else lo


def _clip_bound(node, attr, i):
    """A Clip's bound: its attribute (before opset 11) or its input i, or None."""
    if attr in node.attributes:
        return node.attributes.get_float(attr)
    return _number(node.inputs[i]) if len(node.inputs) > i else None


def concat_broadcast(b, value, count, axis, base, dims, dtype):
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
            cat = b.node("Concat", [block] * 32, {"axis": axis}, name=f"{base}/x{size * 32}",
                         shape=d, dtype=dtype)
            nodes.append(cat)
            block, size = cat.outputs[0], size * 32
    parts = [blk for blk, _, digit in levels for _ in range(digit)]
    if len(parts) == 1:
        return nodes, parts[0]
    d = list(dims)
    d[axis] = count
    cat = b.node("Concat", parts, {"axis": axis}, name=f"{base}/x{count}", shape=d,
                 dtype=dtype)
    nodes.append(cat)
    return nodes, cat.outputs[0]


class L2Norm(Rule):
    """x / sqrt(sum(x^2) + a) or x / ReduceL2(x), maybe clipped below, of [N, C] features
    -> ops the target's NPU has (Mul, a 1x1 Conv summing the squares, Sqrt, Clip, Div;
    Concat broadcasting without broadcast). Anchored at the Div."""
    name = "l2norm"

    def __init__(self, target):
        self.target = target
        self.broadcast = getattr(target, "broadcast", True)
        self.needed = ["Mul", "Sqrt", "Div"] + ([] if self.broadcast else ["Concat"])

    def pattern(self, p):
        total = p.either(
            p.op("ReduceSumSquare", "x", "_?", name="reduce"),
            p.op("ReduceSum", p.op("Mul|Pow", "x", "_", name="square", where=_squares), "_?",
                 name="reduce"))
        norm = p.either(
            p.op("ReduceL2", "x", "_?", name="reduce"),
            p.op("Sqrt", p.maybe("Add", total, "a", name="plus_a",
                                 where=lambda node, m: _number(m.a) is not None), name="sqrt"))
        norm = p.maybe("Clip|Max", norm, "_?", "_?", name="clip",
                       where=lambda node, m: _clip_min(node) is not None)
        return p.op("Div", "x", norm, name="div")

    def form(self, m):
        """(a, the lower bound or None, why this form is not rebuilt or None)."""
        a = _number(m.a) if m.a is not None else 0.0
        why = _reduce_reason(m.reduce) or (f"a = {a} is negative" if a < 0 else None)
        return a, _clip_min(m.clip) if m.clip is not None else None, why

    def check(self, m):
        target = self.target
        _, clip_min, why = self.form(m)
        if why is None:
            missing = [op for op in self.needed if not target.npu_runs(op)]
            if clip_min is not None and not target.npu_runs("Clip"):
                missing.append("Clip")
            if missing:
                why = (f"target {target.name!r}'s NPU has no {', '.join(missing)}: the norm "
                       "stays as it is (on the CPU)")
        if why is None and _dims(m.x)[1] is None:
            why = "the feature size is not known"
        if why is None and any(g.marks_of(n) for n in m.nodes):
            why = "a node of it carries a mark: left as the user placed it"
        return why

    def rewrite(self, b, m):
        a, clip_min, _ = self.form(m)
        x, base = m.x, m.anchor.name
        n, c = _dims(x)
        dtype = x.type.dtype if x.type is not None else ir.DataType.FLOAT
        npdt = dtype.numpy()
        four, one = [n, c, 1, 1], [n, 1, 1, 1]
        shape = b.initializer(np.asarray([-1, c, 1, 1], np.int64), f"{base}.nchw")
        x4 = b.node("Reshape", [x, shape], name=f"{base}/feat_nchw", shape=four, dtype=dtype)
        sq = b.node("Mul", [x4.outputs[0], x4.outputs[0]], name=f"{base}/square", shape=four,
                    dtype=dtype)
        ones = b.initializer(np.ones((1, c, 1, 1), npdt), f"{base}.sum_w")
        bias = b.initializer(np.full((1,), a, npdt), f"{base}.plus_a")
        total = b.node("Conv", [sq.outputs[0], ones, bias], {"kernel_shape": [1, 1]},
                       name=f"{base}/sum_conv", shape=one, dtype=dtype)
        norm = b.node("Sqrt", [total.outputs[0]], name=f"{base}/sqrt", shape=one,
                      dtype=dtype).outputs[0]
        if clip_min is not None:
            lo = b.initializer(np.asarray(clip_min, npdt), f"{base}.min")
            norm = b.node("Clip", [norm, lo], name=f"{base}/clip", shape=one,
                          dtype=dtype).outputs[0]
        if not self.broadcast:
            _, norm = concat_broadcast(b, norm, c, 1, f"{base}/norm", four, dtype)
        div = b.node("Div", [x4.outputs[0], norm], name=f"{base}/divide", shape=four,
                     dtype=dtype)
        flat = b.node("Flatten", [div.outputs[0]], {"axis": 1}, name=f"{base}/flatten",
                      shape=[n, c], dtype=dtype)
        return flat.outputs[0], (
            f"{base} -> {len(b.made)} nodes (a={a:g}"
            + (f", min {clip_min:g}" if clip_min is not None else "")
            + (", concat broadcast" if not self.broadcast else "") + ")")


class LpNormToOps(L2Norm):
    """LpNormalization (p=2) of [N, C] features over axis 1 -> the ops L2Norm rebuilds."""

    def pattern(self, p):
        return p.op("LpNormalization", "x", name="lp")

    def form(self, m):
        p = m.lp.attributes.get_int("p", 2)
        axis = m.lp.attributes.get_int("axis", -1)
        xd = _dims(m.x)
        why = None
        if p != 2:
            why = f"p={p}: only the L2 norm is rebuilt"
        elif xd is None or len(xd) != 2:
            why = "only [N, C] features are rebuilt"
        elif axis % 2 != 1:
            why = f"axis={axis} is not the feature axis 1"
        return 0.0, None, why


def restruct_pass(name, target):
    """The RulePass of one restruct pass, configured for a target."""
    if name == "bn_collapse":
        return RulePass(name, [FoldBatchNorm()])
    if name == "merge_linear":
        return RulePass(name, [MergeLinear()], restart=True)
    if name == "l2norm":
        return RulePass(name, [L2Norm(target), LpNormToOps(target)])
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
