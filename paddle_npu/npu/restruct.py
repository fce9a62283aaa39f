"""Restructuring passes (seed 002's "restruct"): rewrite a model into an equivalent one a
constrained NPU accepts, before the stage-2 mappers run.

    bn_collapse    BatchNormalization folded into the Conv / Gemm feeding it (passes.py's
                   fold_batchnorm: the one shared pass; what it cannot absorb becomes Mul + Add)
    merge_linear   FC -> FC with nothing non-linear between (the seed's FC + PCA) -> one FC,
                   weights multiplied and the first bias carried through the second
    l2norm         x / sqrt(sum(x^2) + a), x / ReduceL2(x) (optionally clipped below) and
                   LpNormalization(p=2) rebuilt from Mul, a 1x1 Conv doing the sum (the
                   reduction as a Conv), Sqrt, Clip and Div; the norm is broadcast back over
                   the channels by repeated Concat when the target has no broadcast
                   (the seed's concat_boardcast)
    fc_to_conv     an FC that is not the model's last op (its output feeds something other
                   than the target's allowed FC followers, e.g. softmax) -> Reshape, 1x1 Conv,
                   Flatten

Each pass returns a PassResult: what it rewrote and, per node it had to leave alone, why.
A target lists the passes it needs (`restruct.passes`); `enable` / `disable` switch them.
Nodes keep their marks (`paddle_npu.mark`, `paddle_npu.precision`) through a rewrite.
"""
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from ..naming import UniqueNames, add_initializer
from .passes import fold_batchnorm

ORDER = ("bn_collapse", "merge_linear", "l2norm", "fc_to_conv")
MARK_KEYS = ("paddle_npu.mark", "paddle_npu.mark_reason", "paddle_npu.precision")
_STD = ("", "ai.onnx")


@dataclass
class PassResult:
    name: str
    fired: list = field(default_factory=list)      # descriptions of the rewrites done
    refused: dict = field(default_factory=dict)    # node name -> why it was left as it is

    def as_dict(self):
        return {"pass": self.name, "fired": list(self.fired), "refused": dict(self.refused)}


# --- helpers -------------------------------------------------------------------------------

def _const(value):
    """The constant a value holds (an initializer or a Constant node's), or None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if _std(node, "Constant") and "value" in node.attributes:
        return node.attributes["value"].value.numpy()
    return None


def _std(node, *types):
    return node is not None and node.domain in _STD and node.op_type in types


def _single_user(value):
    """The only node reading `value`, or None (several readers, none, or a graph output)."""
    if value is None or value.is_graph_output():
        return None
    users = {u for u, _ in value.uses()}
    return users.pop() if len(users) == 1 else None


def _marks(node):
    return {k: node.metadata_props[k] for k in MARK_KEYS if k in node.metadata_props}


def _inherit(sources, nodes):
    for src in sources:
        for k, v in _marks(src).items():
            for n in nodes:
                n.metadata_props.setdefault(k, v)


def _value(name, dtype, dims):
    return ir.Value(name=name, type=ir.TensorType(dtype),
                    shape=None if dims is None else ir.Shape(dims))


def _dims(value):
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


def _node(graph, op_type, inputs, name, attrs=None, out_dims=None, dtype=ir.DataType.FLOAT):
    node = ir.Node("", op_type, inputs, [ir.Attr(k, _attr_type(v), v)
                                         for k, v in (attrs or {}).items()],
                   outputs=[_value(name, dtype, out_dims)], name=name)
    return node


def _attr_type(v):
    if isinstance(v, float):
        return ir.AttributeType.FLOAT
    if isinstance(v, int):
        return ir.AttributeType.INT
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return ir.AttributeType.INTS
    raise TypeError(v)


def _take_output(old, new):
    """`new` stands for `old` (its users and graph-output slot), under old's name."""
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    name, old.name = old.name, None
    new.name = name
    if old.type is not None:
        new.type = old.type
    if old.shape is not None:
        new.shape = old.shape


def _drop_dead(graph, nodes):
    """Remove those of `nodes` (and what only they fed) whose outputs nobody reads."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if node.graph is not graph:
            continue
        if any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue
        feeders = [v.producer() for v in node.inputs if v is not None and v.producer()]
        graph.remove(node, safe=True)
        todo.extend(feeders)


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
    if _std(node, "Gemm"):
        a = node.attributes
        if a.get_int("transA", 0):
            return None, "Gemm with transA=1"
        w = _const(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, "its weight is not a constant matrix"
        w = w.astype(np.float64) * a.get_float("alpha", 1.0)
        if a.get_int("transB", 0):
            w = w.T
        b = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = _const(node.inputs[2])
            if c is None:
                return None, "its bias is not a constant"
            c = c.astype(np.float64) * a.get_float("beta", 1.0)
            if c.size not in (1, w.shape[1]) or (c.ndim == 2 and c.shape[0] != 1):
                return None, f"its C of shape {list(c.shape)} is not a bias row"
            b = np.broadcast_to(c.reshape(-1), (w.shape[1],)).copy()
        return _FC([node], node.inputs[0], w, b, node.outputs[0]), None
    if _std(node, "MatMul"):
        w = _const(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, "its weight is not a constant matrix"
        w = w.astype(np.float64)
        add = _single_user(node.outputs[0])
        if _std(add, "Add"):
            other = add.inputs[1] if add.inputs[0] is node.outputs[0] else add.inputs[0]
            c = _const(other)
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
    wv = add_initializer(graph, np.ascontiguousarray(w, dtype=dtype), f"{base}.w")
    out_dims = None if xd is None else xd[:-1] + [w.shape[1]]
    edt = ir.DataType.from_numpy(np.dtype(dtype))
    if xd is not None and len(xd) == 2:
        inputs = [x, wv]
        if b is not None:
            inputs.append(add_initializer(graph, np.ascontiguousarray(b, dtype=dtype), f"{base}.b"))
        nodes = [_node(graph, "Gemm", inputs, names(base), out_dims=out_dims, dtype=edt)]
    else:
        nodes = [_node(graph, "MatMul", [x, wv], names(base), out_dims=out_dims, dtype=edt)]
        if b is not None:
            bv = add_initializer(graph, np.ascontiguousarray(b, dtype=dtype), f"{base}.b")
            nodes.append(_node(graph, "Add", [nodes[0].outputs[0], bv], names(f"{base}/bias"),
                               out_dims=out_dims, dtype=edt))
    graph.insert_before(before, nodes)
    return nodes


# --- the passes ----------------------------------------------------------------------------

def bn_collapse(model, target):
    res = PassResult("bn_collapse")
    fold_batchnorm(model, res.refused, res.fired)
    return res


LINEAR_BETWEEN = ("Identity", "Dropout")
NONLINEAR = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
             "HardSwish", "Elu", "Selu", "Softplus", "Gelu", "Softmax", "Abs", "Exp", "Log")


def merge_linear(model, target):
    """Consecutive FCs (only Identity / Dropout between) -> one FC; repeated to a fixpoint."""
    graph, res = model.graph, PassResult("merge_linear")
    names = UniqueNames.of_graph(graph)
    changed = True
    while changed:
        changed = False
        for node in list(graph):
            if node.graph is not graph:
                continue
            first, why = _fc(node)
            if first is None:
                continue
            value, between = first.out, []
            user = _single_user(value)
            while _std(user, *LINEAR_BETWEEN) and len(user.outputs) == 1:
                between.append(user)
                value = user.outputs[0]
                user = _single_user(value)
            if user is None:
                nxt = {u for u, _ in value.uses()}
                if any(_fc(u)[0] is not None for u in nxt):
                    what = "is also a model output" if value.is_graph_output() else \
                        f"has {len(nxt)} readers"
                    res.refused[node.name] = (f"its output {value.name} {what}: merging would "
                                              "compute it twice")
                continue
            if _std(user, *NONLINEAR):
                after = _single_user(user.outputs[0])
                if after is not None and _fc(after)[0] is not None:
                    res.refused[node.name] = (f"{user.op_type} ({user.name}) between it and "
                                              f"{after.name} is not linear")
                continue
            second, why = _fc(user)
            if second is None:
                if _std(user, "Gemm", "MatMul"):
                    res.refused[node.name] = f"the next FC {user.name} cannot merge: {why}"
                continue
            if _marks(first.nodes[0]) != _marks(second.nodes[0]):
                res.refused[node.name] = (f"it and {user.name} carry different marks "
                                          f"({_marks(first.nodes[0]) or 'none'} vs "
                                          f"{_marks(second.nodes[0]) or 'none'})")
                continue
            if first.w.shape[1] != second.w.shape[0]:
                res.refused[node.name] = "the FCs' sizes do not chain"
                continue
            dtype = _const(node.inputs[1]).dtype
            w = first.w @ second.w
            b = None
            if first.b is not None or second.b is not None:
                b = (first.b @ second.w if first.b is not None else 0.0) + \
                    (second.b if second.b is not None else 0.0)
            new = _emit_fc(graph, names, first, first.x, w, b, dtype, first.nodes[0])
            _inherit(first.nodes + second.nodes, new)
            new[-1].metadata_props["paddle_npu.merged"] = ",".join(
                n.name for n in first.nodes + second.nodes)
            _take_output(second.out, new[-1].outputs[0])
            _drop_dead(graph, second.nodes + between + first.nodes)
            res.fired.append(f"{'+'.join(n.name for n in first.nodes + second.nodes)} -> "
                             f"{new[-1].name}")
            changed = True
            break
    for fired in res.fired:   # a node merged later is no longer refused
        for part in fired.split(" -> ")[0].split("+"):
            res.refused.pop(part, None)
    return res


def _fc_followers(target):
    return tuple(getattr(target, "fc_followers", ("*",)))


def fc_to_conv(model, target):
    """Every FC that is not the model's last op -> Reshape [N, K, 1, 1], 1x1 Conv, Flatten."""
    graph, res = model.graph, PassResult("fc_to_conv")
    names = UniqueNames.of_graph(graph)
    allowed = _fc_followers(target)
    for node in list(graph):
        if node.graph is not graph or not _std(node, "Gemm", "MatMul"):
            continue
        fc, why = _fc(node)
        if fc is None:
            res.refused[node.name] = why
            continue
        users = {u for u, _ in fc.out.uses()}
        if not users:
            continue          # the model's last op: NNIE lets it stay an FC
        if "*" in allowed or all(u.op_type in allowed for u in users):
            continue          # followed only by what the target allows after an FC
        xd = _dims(fc.x)
        if xd is None or len(xd) != 2:
            res.refused[node.name] = (f"its input {fc.x.name} has "
                                      f"{'an unknown rank' if xd is None else f'rank {len(xd)}'}"
                                      ": only [N, K] inputs become a 1x1 Conv")
            continue
        k, m = fc.w.shape
        dtype = _const(node.inputs[1]).dtype
        edt = ir.DataType.from_numpy(np.dtype(dtype))
        base = node.name
        shape = add_initializer(graph, np.asarray([-1, k, 1, 1], np.int64), f"{base}.nchw")
        to4 = _node(graph, "Reshape", [fc.x, shape], names(f"{base}/to_nchw"),
                    out_dims=[xd[0], k, 1, 1], dtype=edt)
        inputs = [to4.outputs[0], add_initializer(graph, np.ascontiguousarray(
            fc.w.T.reshape(m, k, 1, 1), dtype=dtype), f"{base}.conv_w")]
        if fc.b is not None:
            inputs.append(add_initializer(graph, np.ascontiguousarray(fc.b, dtype=dtype),
                                       f"{base}.conv_b"))
        conv = _node(graph, "Conv", inputs, names(f"{base}/conv1x1"),
                     {"kernel_shape": [1, 1]}, out_dims=[xd[0], m, 1, 1], dtype=edt)
        flat = _node(graph, "Flatten", [conv.outputs[0]], names(f"{base}/flatten"),
                     {"axis": 1}, out_dims=[xd[0], m], dtype=edt)
        graph.insert_before(fc.nodes[0], [to4, conv, flat])
        _inherit(fc.nodes, [to4, conv, flat])
        _take_output(fc.out, flat.outputs[0])
        _drop_dead(graph, fc.nodes)
        res.fired.append(f"{'+'.join(n.name for n in fc.nodes)} -> {conv.name}")
    return res


# --- L2 normalisation ----------------------------------------------------------------------

def _axes(node):
    """The reduce axes of a Reduce* node (attribute or, from opset 13/18, input), or None."""
    if "axes" in node.attributes:
        return list(node.attributes.get_ints("axes"))
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        a = _const(node.inputs[1])
        return None if a is None else [int(v) for v in a.reshape(-1)]
    return None


def _sum_of_squares(value, x_expected=None):
    """(x, nodes, reason) if value = sum(x^2) over one axis with keepdims."""
    node = value.producer()
    if _std(node, "ReduceSumSquare"):
        return node.inputs[0], [node], _reduce_reason(node)
    if _std(node, "ReduceSum"):
        sq = node.inputs[0].producer()
        if _std(sq, "Mul") and sq.inputs[0] is sq.inputs[1]:
            return sq.inputs[0], [node, sq], _reduce_reason(node)
        if _std(sq, "Pow"):
            p = _const(sq.inputs[1])
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
    if _std(node, "Clip", "Max"):
        if node.op_type == "Clip":
            lo = node.attributes.get_float("min", None) if "min" in node.attributes else \
                (_const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None
                 else None)
            hi = node.attributes.get_float("max", None) if "max" in node.attributes else \
                (_const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None
                 else None)
            if lo is None or (hi is not None and float(np.asarray(hi).reshape(())) < 3e38):
                return None
            clip_min, src = float(np.asarray(lo).reshape(())), node.inputs[0]
        else:
            if len(node.inputs) != 2:
                return None
            c0, c1 = _const(node.inputs[0]), _const(node.inputs[1])
            c, src = (c1, node.inputs[0]) if c1 is not None else (c0, node.inputs[1])
            if c is None or c.size != 1:
                return None
            clip_min = float(c.reshape(()))
        nodes.append(node)
        node = src.producer()
        if node is None:
            return None
    a = 0.0
    if _std(node, "ReduceL2"):
        y, why = node.inputs[0], _reduce_reason(node)
        nodes.append(node)
    elif _std(node, "Sqrt"):
        nodes.append(node)
        s = node.inputs[0]
        add = s.producer()
        if _std(add, "Add"):
            c0, c1 = _const(add.inputs[0]), _const(add.inputs[1])
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
    32 copies at a time, as the seed's concat_boardcast does, generalised to any count by
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


def l2norm(model, target):
    """L2 normalisation of [N, C] features -> ops the target's NPU has."""
    graph, res = model.graph, PassResult("l2norm")
    names = UniqueNames.of_graph(graph)
    needed = ["Mul", "Sqrt", "Div"]
    broadcast = getattr(target, "broadcast", True)
    if not broadcast:
        needed.append("Concat")
    for node in list(graph):
        if node.graph is not graph:
            continue
        if _std(node, "LpNormalization"):
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
        elif _std(node, "Div"):
            found = _norm_pattern(node)
            if found is None:
                continue
        else:
            continue
        x, a, clip_min, nodes, why = found
        if why is None:
            missing = [op for op in needed if not target.npu_runs(op)]
            if clip_min is not None and not target.npu_runs("Clip"):
                missing.append("Clip")
            if missing:
                why = (f"target {target.name!r}'s NPU has no {', '.join(missing)}: the norm "
                       "stays as it is (on the CPU)")
        xd = _dims(x)
        if why is None and xd[1] is None:
            why = "the feature size is not known"
        if why is None and any(_marks(n) for n in nodes):
            why = "a node of it carries a mark: left as the user placed it"
        if why is not None:
            res.refused[node.name] = why
            continue
        c = xd[1]
        dtype = x.type.dtype if x.type is not None else ir.DataType.FLOAT
        npdt = dtype.numpy()
        base = node.name
        four = [xd[0], c, 1, 1]
        shape = add_initializer(graph, np.asarray([-1, c, 1, 1], np.int64), f"{base}.nchw")
        x4 = _node(graph, "Reshape", [x, shape], names(f"{base}/feat_nchw"), out_dims=four,
                   dtype=dtype)
        sq = _node(graph, "Mul", [x4.outputs[0], x4.outputs[0]], names(f"{base}/square"),
                   out_dims=four, dtype=dtype)
        ones = add_initializer(graph, np.ones((1, c, 1, 1), npdt), f"{base}.sum_w")
        bias = add_initializer(graph, np.full((1,), a, npdt), f"{base}.plus_a")
        total = _node(graph, "Conv", [sq.outputs[0], ones, bias], names(f"{base}/sum_conv"),
                      {"kernel_shape": [1, 1]}, out_dims=[xd[0], 1, 1, 1], dtype=dtype)
        root = _node(graph, "Sqrt", [total.outputs[0]], names(f"{base}/sqrt"),
                     out_dims=[xd[0], 1, 1, 1], dtype=dtype)
        new = [x4, sq, total, root]
        norm = root.outputs[0]
        if clip_min is not None:
            lo = add_initializer(graph, np.asarray(clip_min, npdt), f"{base}.min")
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
        _take_output(node.outputs[0], flat.outputs[0])
        _drop_dead(graph, nodes)
        res.fired.append(f"{node.name} -> {len(new)} nodes (a={a:g}"
                         + (f", min {clip_min:g}" if clip_min is not None else "")
                         + (", concat broadcast" if not broadcast else "") + ")")
    return res


PASSES = {"bn_collapse": bn_collapse, "merge_linear": merge_linear, "l2norm": l2norm,
          "fc_to_conv": fc_to_conv}


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


def restruct(model, target, enable=(), disable=()):
    """Run the selected passes on an ir.Model in place; returns their PassResults."""
    results = []
    for name in selected(target, enable, disable):
        results.append(PASSES[name](model, target))
    return results


def reinfer(model):
    """The model with shapes inferred again (for the nodes the passes added)."""
    import onnx

    proto = ir.serde.serialize_model(model)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:   # shapes as the passes set them
        return model
    return ir.serde.deserialize_model(proto)
