"""Clean-up of an exported graph: fold constants, drop Identity chains and dead nodes.

What a user would otherwise run polygraphy or onnxsim for. Constant folding evaluates
a node whose inputs are all constants with the ONNX reference implementation; `Shape`
of a value whose shape is fully known becomes a constant first, so shape sub-graphs
(Shape -> Gather -> Concat -> Reshape, ...) fold away.
"""
import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

# Folding a node whose output is much bigger than its inputs (Expand, Tile,
# ConstantOfShape) would bloat the file: keep those unless the result is small.
_MAX_GROWTH_BYTES = 1 << 20
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan"}


def _const(value):
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    return None


def _evaluate(node, inputs, opset):
    """Run one node with onnx.reference; None if it cannot be evaluated."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names_in = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
    names_out = [f"o{k}" for k in range(len(node.outputs))]
    attrs = [ir.serde.serialize_attribute(a) for a in node.attributes.values()]
    proto = helper.make_node(node.op_type, names_in, names_out, domain=node.domain)
    proto.attribute.extend(attrs)
    try:
        ref = ReferenceEvaluator(proto, opsets={node.domain or "": opset})
        feeds = {n: x for n, x in zip(names_in, inputs) if n}
        return ref.run(None, feeds)
    except Exception:  # an op the reference cannot run: leave the node as it is
        return None


def _fold_shape(node):
    """Shape of a statically shaped value -> its value."""
    x = node.inputs[0]
    if x is None or x.shape is None or not all(isinstance(d, int) for d in x.shape.dims):
        return None
    dims = np.array(x.shape.dims, dtype=np.int64)
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", len(dims))
    return [dims[start:end]]


def fold_constants(model):
    """Replace every foldable node by initializers, in graph order. Returns the count."""
    graph = model.graph
    opset = model.opset_imports.get("", 21)
    folded = 0
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD:
            continue
        if node.op_type == "Shape":
            results = _fold_shape(node)
        else:
            inputs = [_const(v) if v is not None else None for v in node.inputs]
            if any(v is not None and x is None for v, x in zip(node.inputs, inputs)):
                continue
            if not node.inputs and node.op_type != "Constant":
                continue
            results = _evaluate(node, inputs, opset)
            if results is not None:
                in_bytes = sum(x.nbytes for x in inputs if x is not None)
                out_bytes = sum(np.asarray(r).nbytes for r in results)
                if out_bytes > max(in_bytes, _MAX_GROWTH_BYTES):
                    continue
        if results is None:
            continue
        for out, array in zip(node.outputs, results):
            array = np.asarray(array)
            tensor = ir.tensor(array, name=out.name)
            out.const_value = tensor
            new = ir.Value(name=out.name, type=ir.TensorType(tensor.dtype),
                           shape=ir.Shape(array.shape), const_value=tensor)
            out.name = None
            graph.register_initializer(new)
            ir.convenience.replace_all_uses_with(out, new, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        folded += 1
    return folded


def optimize(model, fold=True):
    """Fold constants and remove dead code and Identity chains, in place."""
    common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    for _ in range(8 if fold else 0):   # each round may reveal new static shapes
        common_passes.ShapeInferencePass(strict_mode=False)(model)
        if not fold_constants(model):
            break
    common_passes.IdentityEliminationPass()(model)
    common_passes.RemoveUnusedNodesPass()(model)
    common_passes.RemoveUnusedFunctionsPass()(model)
    common_passes.RemoveUnusedOpsetsPass()(model)
    common_passes.TopologicalSortPass()(model)
    _drop_partial_value_info(model)
    if model.ir_version < 4:   # IR 3 wants every initializer listed as a graph input
        common_passes.AddInitializersToInputsPass()(model)
    return model


def _drop_partial_value_info(model):
    """Intermediate values with a type but no shape would be written as invalid value_info."""
    io = set(model.graph.inputs) | set(model.graph.outputs)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value not in io and value.shape is None:
                value.type = None
