"""The pass contract of stage 2, and the passes every lowering runs.

Every step is an onnx_ir in-place pass (`Pass`) returning one `PassResult`: the model,
whether it changed, what fired and what was refused and why. `Sequence` runs a declared
list of them and keeps every result. A local rewrite is a `Rule` (a pattern anchored on a
node, a check that says why not, a rewrite), run over the graph by `RulePass`.

    NameNodes             every node a unique, readable name
    FixInputShapes        the inputs' sizes set (--input-shape), every shape inferred again
    InferShapes           onnx's shape inference written into the model's values
    FoldFixedConstants    what is constant at the model's fixed sizes (masks, position ids,
                          anchor grids) folded, so the chip holds it rather than computes it
    FoldBatchNorm         Conv / Gemm followed by BatchNormalization -> one op (a Rule)
    FuseLayerNorm         the ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div (/ Mul /
                          Add) layer normalisation exporters write out -> one LayerNorm (a Rule)
    MergeDimTransforms    a DimTransform followed by one that only reshapes -> one (a Rule)
    BatchNormToAffine     any other inference BatchNormalization -> Mul + Add
    RemoveUnused          nodes and functions nothing reads
"""
import time
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ..errors import ConversionError
from ..onnx_io import infer_shapes, load_model, to_proto
from ..optimize import fold_constants
from . import graph as g
from .mappers.layout import reshape_spec
from .ops import DOMAIN


@dataclass
class PassResult(ir.passes.PassResult):
    name: str = ""
    fired: list = field(default_factory=list)      # descriptions of the rewrites done
    refused: dict = field(default_factory=dict)    # node name -> why it was left as it is
    info: dict = field(default_factory=dict)       # what else the pass has to report

    def as_dict(self):
        return {"pass": self.name, "fired": list(self.fired), "refused": dict(self.refused)}


class Pass(ir.passes.InPlacePass):
    """A stage-2 pass: `run(model, result)` rewrites the model in place and fills `result`
    (fired / refused / info); the model counts as modified when anything fired."""
    name = ""

    def call(self, model):
        result = PassResult(model, False, self.name)
        self.run(model, result)
        result.modified = result.modified or bool(result.fired)
        return result

    def run(self, model, result):
        raise NotImplementedError


class Sequence(Pass):
    """Passes run in order on one model; `results` holds each one's PassResult.
    progress: None, or called with (pass name, seconds) after each pass."""
    name = "sequence"

    def __init__(self, *passes):
        super().__init__()
        self.passes = [p for p in passes if p is not None]
        self.results = []
        self.progress = None

    def run(self, model, result):
        self.results = []
        for p in self.passes:
            start = time.perf_counter()
            r = p(model)
            if not isinstance(r, PassResult):     # an onnx_ir pass: wrap its result
                r = PassResult(r.model, r.modified, type(p).__name__)
            self.results.append(r)
            result.modified = result.modified or r.modified
            if self.progress is not None:
                self.progress(r.name, time.perf_counter() - start)

    def result(self, name):
        return next((r for r in self.results if r.name == name), None)


class Rule:
    """A local rewrite.

    match(node)          the pattern: a dict of what it found anchored at `node`, or None
    check(found)         why this match cannot be rewritten (a sentence), or None
    rewrite(b, found)    the replacement, built with `b` (a graph.Builder); returns what
                         it did, as a sentence for the report
    """
    name = ""

    def match(self, node):
        raise NotImplementedError

    def check(self, found):
        return None

    def rewrite(self, builder, found):
        raise NotImplementedError


class RulePass(Pass):
    """Apply rules to every node of the main graph, in order. `restart`: scan again from the
    top after each rewrite until nothing fires (rewrites that enable others); a node rewritten
    after it was refused is no longer listed as refused."""

    def __init__(self, name, rules, restart=False):
        super().__init__()
        self.name, self.rules, self.restart = name, list(rules), restart

    def run(self, model, result):
        graph = model.graph
        builder = g.Builder(graph)
        again = True
        while again:
            again = False
            for node in list(graph):
                if node.graph is not graph:
                    continue
                for rule in self.rules:
                    found = rule.match(node)
                    if found is None:
                        continue
                    why = rule.check(found)
                    if why is not None:
                        result.refused[node.name] = why
                        continue
                    result.fired.append(rule.rewrite(builder, found))
                    again = self.restart
                    break
                if again:
                    break
        if self.restart:
            alive = {n.name for n in graph}
            for name in [n for n in result.refused if n not in alive]:
                del result.refused[name]


# --- naming and shapes ---------------------------------------------------------------------

class NameNodes(Pass):
    """Unnamed or clashing node names become `<op_type>_<index>`: lowered nodes are named
    `<source node>/<part>`, so the source names must be unique."""
    name = "name_nodes"

    def run(self, model, result):
        seen = set()
        for i, node in enumerate(ir.traversal.RecursiveGraphIterator(model.graph)):
            if not node.name or node.name in seen:
                base = f"{node.op_type}_{i}"
                name, n = base, 0
                while name in seen:
                    n += 1
                    name = f"{base}_{n}"
                node.name = name
                result.modified = True
            seen.add(node.name)


class InferShapes(Pass):
    """Shapes of the values rewrites added, from onnx's shape inference (in place)."""
    name = "infer_shapes"

    def run(self, model, result):
        result.modified = infer_shapes(model)


# A constant the chip holds instead of computing it at every inference may outweigh the
# nodes that made it (an attention mask of seq x seq, an anchor grid): up to this size.
HELD_CONSTANT_BYTES = 1 << 20


class FoldFixedConstants(Pass):
    """Nodes whose inputs are all constant at the model's sizes (ConstantOfShape + CumSum
    position ids, tril masks, meshgrid anchors of a detection head) -> initializers of up to
    HELD_CONSTANT_BYTES each, shape sub-graphs included; shapes inferred again after."""
    name = "fold_constants"

    def run(self, model, result):
        for _ in range(8):          # each round of folding may make more sizes static
            folded = fold_constants(model, growth_allowance=HELD_CONSTANT_BYTES)
            if not folded:
                break
            result.fired.append(f"{folded} node(s) folded")
            infer_shapes(model)


class FixInputShapes(Pass):
    """Set the inputs' sizes ({name: dims}, -1 dynamic), infer every shape again from them
    and fold the shape sub-graphs that became constant."""
    name = "input_shapes"

    def __init__(self, shapes):
        super().__init__()
        self.shapes = dict(shapes)

    def run(self, model, result):
        graph = model.graph
        inputs = {v.name: v for v in graph.inputs}
        unknown = [n for n in self.shapes if n not in inputs]
        if unknown:
            raise ConversionError(f"--input-shape names {', '.join(map(repr, unknown))}, "
                                  f"not an input of the model (its inputs: "
                                  f"{', '.join(inputs) or 'none'})")
        for name, dims in self.shapes.items():
            value = inputs[name]
            dims = [int(d) for d in dims]
            if any(d < -1 or d == 0 for d in dims):
                raise ConversionError(f"--input-shape {name}: {dims} has a size below 1 "
                                      "(-1 leaves one dynamic)")
            if value.shape is not None and len(value.shape) != len(dims):
                raise ConversionError(f"--input-shape {name}: {dims} has rank {len(dims)}, "
                                      f"the model's input has rank {len(value.shape)} "
                                      f"{list(value.shape)}")
            value.shape = ir.Shape([d if d > 0 else None for d in dims])
            result.fired.append(f"{name}: {dims}")
        # what inference derived from the old sizes is stale: derive it again
        for node in graph:
            for out in node.outputs:
                out.shape = None
        for _ in range(8):          # each round of folding may make more sizes static
            infer_shapes(model)
            if not fold_constants(model):
                break
        result.modified = True


def with_input_shapes(model, shapes):
    """The ModelProto of `model` (path, bytes, ModelProto, ir.Model) with its inputs' sizes
    fixed (`FixInputShapes`): what calibration and verification run when lowering fixes
    them."""
    m = load_model(model)
    FixInputShapes(shapes)(m)
    return to_proto(m)


class RemoveUnused(Pass):
    """Nodes and model-local functions nothing reads any more."""
    name = "remove_unused"

    def run(self, model, result):
        result.modified = common_passes.RemoveUnusedNodesPass()(model).modified
        result.modified |= common_passes.RemoveUnusedFunctionsPass()(model).modified


# --- BatchNormalization ----------------------------------------------------------------------

def bn_params(bn):
    """(scale, mean, beta) of an inference BatchNormalization, or None: y = (x - mean) *
    scale + beta. Computed in the parameters' own precision, in the order runtimes fold
    them, so that a folded model computes what a runtime's own fusion does."""
    if bn.op_type != "BatchNormalization" or bn.domain not in g.STANDARD \
            or len(bn.inputs) < 5 or bn.attributes.get_int("training_mode", 0):
        return None
    if any(out.uses() or out.is_graph_output() for out in bn.outputs[1:]):
        return None
    gamma, beta, mean, var = (g.constant(v) for v in bn.inputs[1:5])
    if any(p is None for p in (gamma, beta, mean, var)):
        return None
    eps = bn.attributes.get_float("epsilon", 1e-5)
    scale = gamma / np.sqrt(var + np.asarray(eps, var.dtype))
    return scale, mean, beta


class FoldBatchNorm(Rule):
    """Conv / Gemm -> BatchNormalization (reading only it) -> the Conv / Gemm with the
    normalisation folded into its weight and bias."""
    name = "bn_collapse"

    def match(self, node):
        if node.op_type != "BatchNormalization":
            return None
        x = node.inputs[0] if node.inputs else None
        return {"bn": node, "params": bn_params(node), "x": x,
                "prod": x.producer() if x is not None else None}

    def check(self, found):
        bn, params, x, prod = found["bn"], found["params"], found["x"], found["prod"]
        if params is None:
            return "not an inference BatchNormalization with constant parameters"
        if prod is None or prod.graph is not bn.graph:
            return "its input is a model input or comes from outside the graph"
        if prod.op_type not in ("Conv", "Gemm") or prod.domain not in g.STANDARD:
            return f"it follows {prod.op_type} ({prod.name}), not a Conv or Gemm"
        if len(x.uses()) != 1 or x.is_graph_output():
            return f"{prod.name}'s output is also read elsewhere"
        w = g.constant(prod.inputs[1])
        has_c = len(prod.inputs) > 2 and prod.inputs[2] is not None
        if w is None or (has_c and g.constant(prod.inputs[2]) is None):
            return f"{prod.name}'s weight or bias is not a constant"
        scale = params[0]
        if prod.op_type == "Conv":
            if w.shape[0] != scale.size:
                return "its channel count differs from the Conv's"
        else:
            if x.shape is None or len(x.shape) != 2:
                return "the Gemm's output is not known to be 2-D"
            if w.shape[0 if prod.attributes.get_int("transB", 0) else 1] != scale.size:
                return "its channel count differs from the Gemm's"
        return None

    def rewrite(self, builder, found):
        bn, prod = found["bn"], found["prod"]
        graph = bn.graph
        scale, mean, beta = found["params"]
        w = g.constant(prod.inputs[1])
        has_c = len(prod.inputs) > 2 and prod.inputs[2] is not None
        c = g.constant(prod.inputs[2]) if has_c else None
        dtype = w.dtype
        attrs = list(prod.attributes.values())
        if prod.op_type == "Conv":
            by = scale.reshape((-1,) + (1,) * (w.ndim - 1))
            b2 = ((c if c is not None else np.zeros_like(mean)) - mean) * scale + beta
        else:
            trans_b = prod.attributes.get_int("transB", 0)
            by = scale[:, None] if trans_b else scale[None, :]
            c_eff = c * np.asarray(prod.attributes.get_float("beta", 1.0), c.dtype) \
                if c is not None else np.zeros_like(mean)
            b2 = np.broadcast_to((c_eff - mean) * scale + beta,
                                 np.broadcast_shapes(c_eff.shape, scale.shape))
            attrs = [a for a in attrs if a.name != "beta"]
        # The weight is scaled where it lies when nothing else reads it (no second copy of
        # the model's weights); the product is rounded to its dtype once either way.
        w2 = np.multiply(w, by, out=w, casting="same_kind") if _only_reader(prod, 1, w) \
            else (w * by).astype(dtype, copy=False)
        old = [v for v in list(prod.inputs[1:]) + list(bn.inputs[1:]) if v is not None]
        new = ir.Node(prod.domain, prod.op_type,
                      [prod.inputs[0], g.initializer(graph, w2, f"{bn.name}.w"),
                       g.initializer(graph, np.ascontiguousarray(b2, dtype=dtype),
                                     f"{bn.name}.b")],
                      attrs, name=prod.name, metadata_props=dict(prod.metadata_props))
        g.note(new, "folded", bn.name)
        graph.insert_before(prod, new)
        g.take_over(bn.outputs[0], new.outputs[0])
        graph.remove([bn, prod], safe=True)
        g.drop_unread_initializers(graph, old)
        return f"{prod.name}+{bn.name} -> {new.name}"


def _only_reader(node, i, array):
    """Whether `array` (the value of node's input i) may be rewritten in place: an
    initializer's own writable array that `node` alone reads, once."""
    value = node.inputs[i]
    return value.name in node.graph.initializers and \
        node.graph.initializers[value.name] is value and len(value.uses()) == 1 and \
        not value.is_graph_output() and not value.is_graph_input() and \
        array.flags.writeable and array.flags.c_contiguous


def fold_batchnorm(model):
    """Fold every inference BatchNormalization into the Conv or Gemm feeding only it;
    returns how many folded."""
    return len(RulePass("bn_collapse", [FoldBatchNorm()])(model).fired)


class BatchNormToAffine(Pass):
    """An inference BatchNormalization nothing could absorb -> x * scale + shift."""
    name = "batchnorm_to_affine"

    def run(self, model, result):
        graph = model.graph
        for bn in list(graph):
            params = bn_params(bn)
            x = bn.inputs[0] if bn.inputs else None
            if params is None or x is None or x.shape is None or len(x.shape) < 2:
                continue
            scale, mean, beta = params
            bshape = (-1,) + (1,) * (len(x.shape) - 2)
            s = g.initializer(graph, scale.reshape(bshape), f"{bn.name}.scale")
            t = g.initializer(graph, (beta - mean * scale).reshape(bshape), f"{bn.name}.shift")
            mul = ir.Node("", "Mul", [x, s], name=f"{bn.name}/scale")
            add = ir.Node("", "Add", [mul.outputs[0], t], name=f"{bn.name}/shift")
            mul.outputs[0].name = f"{bn.name}/scale"
            mul.outputs[0].type, mul.outputs[0].shape = bn.outputs[0].type, bn.outputs[0].shape
            graph.insert_before(bn, [mul, add])
            g.take_over(bn.outputs[0], add.outputs[0])
            graph.remove(bn, safe=True)
            result.fired.append(f"{bn.name} -> {mul.name}, {add.name}")


def batchnorm_to_affine(model):
    """Run BatchNormToAffine; returns how many BatchNormalizations it replaced."""
    return len(BatchNormToAffine()(model).fired)


# --- layer normalisation ---------------------------------------------------------------------

def _producer(value, *op_types):
    """The standard node of one of these types making `value`, or None."""
    node = value.producer() if value is not None else None
    return node if g.is_op(node, *op_types) else None


def _mean_axes(node, rank):
    """The sorted non-negative axes of a ReduceMean keeping its dims, or None."""
    if not node.attributes.get_int("keepdims", 1):
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:      # opset 18: an input
        axes = g.constant(node.inputs[1])
        axes = None if axes is None else axes.reshape(-1).tolist()
    else:
        axes = list(node.attributes.get_ints("axes", []))
    return sorted(a + rank if a < 0 else a for a in axes) if axes else None


def _scalar(value, want=None):
    """The float of a constant holding one number (and equal to `want`, if given), or None."""
    c = g.constant(value)
    if c is None or c.size != 1 or c.dtype.kind != "f":
        return None
    x = float(c.reshape(()))
    return x if want is None or x == want else None


def _other(node, value):
    """The operand of a binary node that is not `value`."""
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


class FuseLayerNorm(Rule):
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* scale] [+ bias], the means over
    the trailing axes (Pow by 2 or the product d * d) -> one LayerNorm primitive, scale and
    bias constants of the normalised axes' shape. Anchored at the Div."""
    name = "layernorm"

    def match(self, node):
        if not g.is_op(node, "Div"):
            return None
        d, root = node.inputs
        sub, sqrt = _producer(d, "Sub"), _producer(root, "Sqrt")
        add_eps = _producer(sqrt.inputs[0], "Add") if sqrt else None
        mean = _producer(sub.inputs[1], "ReduceMean") if sub else None
        if add_eps is None or mean is None or mean.inputs[0] is not sub.inputs[0]:
            return None
        var = next((n for n in (_producer(v, "ReduceMean") for v in add_eps.inputs) if n), None)
        square = _producer(var.inputs[0], "Pow", "Mul") if var else None
        if square is None or square.inputs[0] is not d or (
                square.op_type == "Pow" and _scalar(square.inputs[1], 2.0) is None) or (
                square.op_type == "Mul" and square.inputs[1] is not d):
            return None
        return {"div": node, "x": sub.inputs[0], "nodes": [mean, sub, square, var, add_eps, sqrt,
                                                           node],
                "eps": _scalar(_other(add_eps, var.outputs[0])), "means": (mean, var)}

    def _affine(self, value, op_type, dims, axis):
        """(node, constant of the normalised axes' shape) when `value` feeds only a Mul / Add
        by a constant varying along those axes only, else (None, None)."""
        user = g.single_user(value)
        if not g.is_op(user, op_type):
            return None, None
        c = g.constant(_other(user, value))
        norm_shape = dims[axis:]
        lead = 0 if c is None else c.ndim - len(norm_shape)
        if c is None or c.dtype.kind != "f" or c.ndim > len(dims) or \
                any(n != 1 for n in c.shape[:max(lead, 0)]):
            return None, None
        c = c.reshape(c.shape[max(lead, 0):])
        try:
            return user, np.broadcast_to(c, norm_shape)
        except ValueError:
            return None, None

    def check(self, found):
        x, (mean, var) = found["x"], found["means"]
        dims = g.dims(x)
        if dims is None:
            return "the input's rank is not known"
        axes = _mean_axes(mean, len(dims))
        if axes is None or axes != _mean_axes(var, len(dims)) or \
                axes != list(range(axes[0], len(dims))):
            return "the means are not over the same trailing axes, kept"
        if not all(isinstance(dims[a], int) for a in axes):
            return "the normalised axes have no fixed size"
        if found["eps"] is None:
            return "epsilon is not a constant number"
        nodes = found["nodes"]
        if any(n.outputs[0].is_graph_output() or not set(g.users(n.outputs[0])) <= set(nodes)
               for n in nodes[:-1]):
            return "a part of it is also read elsewhere"
        if x.dtype is None or not x.dtype.is_floating_point():
            return f"input type {x.dtype} is not floating point"
        found["axis"] = axes[0]
        return None

    def rewrite(self, builder, found):
        div, x, axis = found["div"], found["x"], found["axis"]
        graph = div.graph
        last, params = div.outputs[0], []
        for op_type in ("Mul", "Add"):
            node, c = self._affine(last, op_type, g.dims(x), axis)
            if node is None:
                params.append(None)
                continue
            params.append(g.initializer(graph, np.ascontiguousarray(c, dtype=c.dtype),
                                        f"{div.name}.{'scale' if op_type == 'Mul' else 'bias'}"))
            found["nodes"].append(node)
            last = node.outputs[0]
        while params and params[-1] is None:
            params.pop()
        attrs = {"axis": axis, "epsilon": found["eps"]}
        ln = builder.node("LayerNorm", [x] + params, attrs, name=f"{div.name}/layer_norm",
                          shape=g.dims(x), domain=DOMAIN)
        g.set_source(ln, div.name, "LayerNormalization")
        graph.insert_before(found["nodes"][-1], ln)
        g.inherit_marks(found["nodes"], [ln])
        g.take_over(last, ln.outputs[0])
        g.drop_dead(graph, found["nodes"])
        return f"{'+'.join(n.name for n in found['nodes'])} -> {ln.name}"


# --- moves -----------------------------------------------------------------------------------

class MergeDimTransforms(Rule):
    """DimTransform (perm p, any shape) read only by a DimTransform that only reshapes
    (identity perm) -> one DimTransform (p, the second's shape): a transpose and the reshape
    after it (attention's heads merged back, a channel shuffle's last two steps) move the
    elements once. Anchored at the second."""
    name = "merge_dim_transforms"

    def match(self, node):
        if node.domain != DOMAIN or node.op_type != "DimTransform":
            return None
        first = node.inputs[0].producer()
        if first is None or first.domain != DOMAIN or first.op_type != "DimTransform":
            return None
        return {"first": first, "second": node}

    def check(self, found):
        first, second = found["first"], found["second"]
        perm = list(second.attributes.get_ints("perm", []))
        if perm != list(range(len(perm))):
            return "the second DimTransform also transposes"
        if g.single_user(first.outputs[0]) is None:
            return f"{first.name}'s output is also read elsewhere"
        x_dims, out = g.dims(first.inputs[0]), g.dims(second.outputs[0])
        p1 = list(first.attributes.get_ints("perm", []))
        shape = None if x_dims is None or out is None else \
            reshape_spec([x_dims[p] for p in p1], out)
        if shape is None:
            return "the merged shape cannot be written"
        found["perm"], found["shape"] = p1, shape
        return None

    def rewrite(self, builder, found):
        first, second = found["first"], found["second"]
        attrs = {"perm": found["perm"], "shape": found["shape"]}
        merged = builder.node("DimTransform", [first.inputs[0]], attrs,
                              name=f"{second.name}/merged", shape=g.dims(second.outputs[0]),
                              dtype=second.outputs[0].dtype, domain=DOMAIN)
        g.copy_annotations(second, merged)
        second.graph.insert_before(second, merged)
        g.take_over(second.outputs[0], merged.outputs[0])
        g.drop_dead(second.graph, [second, first])
        return f"{first.name}+{second.name} -> {merged.name}"
