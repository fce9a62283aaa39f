"""The passes every lowering runs besides the lowerings themselves.

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
import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ...errors import ConversionError
from ...onnx_io import infer_shapes, load_model, to_proto
from ...optimize import fold_constants
from .. import graph as g
from ..mappers.layout import reshape_spec
from ..ops import DOMAIN
from .framework import Pass, RulePass
from .rules import Rule


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
    refuse_partial = True

    def pattern(self, p):
        prod = p.op("Conv|Gemm", "x", "w", "c?", name="prod")
        return p.op("BatchNormalization", prod, "gamma", "beta", "mean", "var", name="bn")

    def check(self, m):
        params = bn_params(m.bn)
        if params is None:
            return "not an inference BatchNormalization with constant parameters"
        w = g.constant(m.w)
        if w is None or (m.c is not None and g.constant(m.c) is None):
            return f"{m.prod.name}'s weight or bias is not a constant"
        gemm = m.prod.op_type == "Gemm"
        if gemm and len(g.dims(m.prod.outputs[0]) or ()) != 2:
            return "the Gemm's output is not known to be 2-D"
        if w.shape[1 if gemm and not m.prod.attributes.get_int("transB", 0) else 0] != \
                params[0].size:
            return f"its channel count differs from the {m.prod.op_type}'s"
        return None

    def rewrite(self, b, m):
        prod = m.prod
        scale, mean, beta = bn_params(m.bn)
        w, c = g.constant(m.w), g.constant(m.c)
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
            else (w * by).astype(w.dtype, copy=False)
        new = b.like(prod, [m.x, b.initializer(w2, f"{m.bn.name}.w"),
                            b.initializer(np.ascontiguousarray(b2, dtype=w.dtype),
                                          f"{m.bn.name}.b")], attrs)
        g.note(new, "folded", m.bn.name)
        return new.outputs[0], f"{m.names} -> {new.name}"


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


def _squares(node, m):
    """Whether a Pow / Mul squares its first input."""
    return node.inputs[1] is node.inputs[0] if node.op_type == "Mul" else \
        _scalar(node.inputs[1], 2.0) is not None


def _norm_axes(m):
    """(input dims, the first normalised axis) of a layer normalisation's match, or None."""
    dims = g.dims(m.x)
    axes = None if dims is None else _mean_axes(m.mean, len(dims))
    return None if axes is None else (dims, axes[0])


def _affine(m, value):
    """`value` as a constant of the normalised axes' shape (it varies along those axes
    only), or None."""
    found, c = _norm_axes(m), g.constant(value)
    if found is None or c is None or c.dtype.kind != "f" or c.ndim > len(found[0]):
        return None
    shape = found[0][found[1]:]
    lead = max(c.ndim - len(shape), 0)
    if any(n != 1 for n in c.shape[:lead]) or not all(isinstance(d, int) for d in shape):
        return None
    try:
        return np.broadcast_to(c.reshape(c.shape[lead:]), shape)
    except ValueError:
        return None


class FuseLayerNorm(Rule):
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* scale] [+ bias], the means over
    the trailing axes (Pow by 2 or the product d * d) -> one LayerNorm primitive, scale and
    bias constants of the normalised axes' shape. Anchored at the Div."""
    name = "layernorm"

    def pattern(self, p):
        mean = p.op("ReduceMean", "x", "_?", name="mean")
        d = p.op("Sub", "x", mean, name="sub")
        var = p.op("ReduceMean", p.op("Pow|Mul", d, "_", name="square", where=_squares), "_?",
                   name="var")
        std = p.op("Sqrt", p.op("Add", var, "eps", name="add_eps"), name="sqrt")
        y = p.op("Div", d, std, name="div", anchor=True)
        y = p.maybe("Mul", y, "scale", name="mul",
                    where=lambda node, m: _affine(m, m.scale) is not None)
        return p.maybe("Add", y, "bias", name="add",
                       where=lambda node, m: _affine(m, m.bias) is not None)

    def check(self, m):
        dims = g.dims(m.x)
        if dims is None:
            return "the input's rank is not known"
        axes = _mean_axes(m.mean, len(dims))
        if axes is None or axes != _mean_axes(m.var, len(dims)) or \
                axes != list(range(axes[0], len(dims))):
            return "the means are not over the same trailing axes, kept"
        if not all(isinstance(dims[a], int) for a in axes):
            return "the normalised axes have no fixed size"
        if _scalar(m.eps) is None:
            return "epsilon is not a constant number"
        if m.x.dtype is None or not m.x.dtype.is_floating_point():
            return f"input type {m.x.dtype} is not floating point"
        return None

    def rewrite(self, b, m):
        dims, axis = _norm_axes(m)
        params = [b.initializer(np.ascontiguousarray(_affine(m, value)), f"{m.div.name}.{what}")
                  if node is not None else None
                  for node, value, what in ((m.mul, m.scale, "scale"), (m.add, m.bias, "bias"))]
        while params and params[-1] is None:
            params.pop()
        attrs = {"axis": axis, "epsilon": _scalar(m.eps)}
        ln = b.node("LayerNorm", [m.x] + params, attrs, name=f"{m.div.name}/layer_norm",
                    shape=dims, domain=DOMAIN)
        g.set_source(ln, m.div.name, "LayerNormalization")
        return ln.outputs[0], f"{m.names} -> {ln.name}"


# --- moves -----------------------------------------------------------------------------------

class MergeDimTransforms(Rule):
    """DimTransform (perm p, any shape) read only by a DimTransform that only reshapes
    (identity perm) -> one DimTransform (p, the second's shape): a transpose and the reshape
    after it (attention's heads merged back, a channel shuffle's last two steps) move the
    elements once."""
    name = "merge_dim_transforms"

    def pattern(self, p):
        first = p.op("DimTransform", "x", name="first", domain=DOMAIN)
        return p.op("DimTransform", first, name="second", domain=DOMAIN)

    @staticmethod
    def _merged(m):
        """{"perm", "shape"} of the one DimTransform, or None when its shape can't be
        written."""
        x_dims, out = g.dims(m.x), g.dims(m.output)
        perm = list(m.first.attributes.get_ints("perm", []))
        shape = None if x_dims is None or out is None else \
            reshape_spec([x_dims[p] for p in perm], out)
        return None if shape is None else {"perm": perm, "shape": shape}

    def check(self, m):
        perm = list(m.second.attributes.get_ints("perm", []))
        if perm != list(range(len(perm))):
            return "the second DimTransform also transposes"
        if self._merged(m) is None:
            return "the merged shape cannot be written"
        return None

    def rewrite(self, b, m):
        attrs = self._merged(m)
        merged = b.node("DimTransform", [m.x], attrs, name=f"{m.second.name}/merged",
                        shape=g.dims(m.output), dtype=m.output.dtype, domain=DOMAIN)
        g.copy_annotations(m.second, merged)
        return merged.outputs[0], f"{m.names} -> {merged.name}"
