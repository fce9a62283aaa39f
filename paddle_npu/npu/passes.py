"""The pass contract of stage 2, and the passes every lowering runs.

Every step is an onnx_ir in-place pass (`Pass`) returning one `PassResult`: the model,
whether it changed, what fired and what was refused and why. `Sequence` runs a declared
list of them and keeps every result. A local rewrite is a `Rule` (a pattern anchored on a
node, a check that says why not, a rewrite), run over the graph by `RulePass`.

    NameNodes             every node a unique, readable name
    FixInputShapes        the inputs' sizes set (--input-shape), every shape inferred again
    InferShapes           onnx's shape inference written into the model's values
    FoldBatchNorm         Conv / Gemm followed by BatchNormalization -> one op (a Rule)
    BatchNormToAffine     any other inference BatchNormalization -> Mul + Add
    RemoveUnused          nodes and functions nothing reads
"""
import time
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ..errors import ConversionError
from . import graph as g


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
        from ..onnx_io import infer_shapes
        result.modified = infer_shapes(model)


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
        from ..onnx_io import infer_shapes
        from ..optimize import fold_constants
        for _ in range(8):          # each round of folding may make more sizes static
            infer_shapes(model)
            if not fold_constants(model):
                break
        result.modified = True


def with_input_shapes(model, shapes):
    """The ModelProto of `model` (path, bytes, ModelProto, ir.Model) with its inputs' sizes
    fixed (`FixInputShapes`): what calibration and verification run when lowering fixes
    them."""
    from ..onnx_io import load_model, to_proto

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
            w2 = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
            b2 = ((c if c is not None else np.zeros_like(mean)) - mean) * scale + beta
        else:
            trans_b = prod.attributes.get_int("transB", 0)
            w2 = w * (scale[:, None] if trans_b else scale[None, :])
            c_eff = c * np.asarray(prod.attributes.get_float("beta", 1.0), c.dtype) \
                if c is not None else np.zeros_like(mean)
            b2 = np.broadcast_to((c_eff - mean) * scale + beta,
                                 np.broadcast_shapes(c_eff.shape, scale.shape))
            attrs = [a for a in attrs if a.name != "beta"]
        new = ir.Node(prod.domain, prod.op_type,
                      [prod.inputs[0], g.initializer(graph, w2.astype(dtype), f"{bn.name}.w"),
                       g.initializer(graph, np.ascontiguousarray(b2, dtype=dtype),
                                     f"{bn.name}.b")],
                      attrs, name=prod.name, metadata_props=dict(prod.metadata_props))
        g.note(new, "folded", bn.name)
        graph.insert_before(prod, new)
        g.take_over(bn.outputs[0], new.outputs[0])
        graph.remove([bn, prod], safe=True)
        return f"{prod.name}+{bn.name} -> {new.name}"


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
