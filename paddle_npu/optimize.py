"""Clean-up of an exported graph: fold constants, drop Identity chains and dead nodes.

What a user would otherwise run polygraphy or onnxsim for. Constant folding evaluates
a node whose inputs are all constants with the ONNX reference implementation; `Shape`
of a value whose shape is fully known becomes a constant first, so shape sub-graphs
(Shape -> Gather -> Concat -> Reshape, ...) fold away.
"""
import numpy as np
import onnx_ir as ir
from onnx import helper
from onnx_ir.passes import common as common_passes

from .naming import add_initializer
from .onnx_io import infer_shapes

# Folding must not make the stored model bigger: a node whose result outweighs its inputs
# (Expand, Tile, ConstantOfShape, a Cast widening float16 weights to float32) is kept unless
# the result is tiny. Weights thus stay in the dtype Paddle stored them in.
_FOLD_GROWTH_ALLOWANCE = 1024

# DequantizeLinear stays: the QDQ pair is how a quantized model tells runtimes its scales
# (a constant weight's QuantizeLinear does fold, into the int8 weight).
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan", "DequantizeLinear"}


def _const(value):
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    return None


def _axes(node, inputs, opset, since):
    """Unsqueeze / Squeeze axes: an attribute before opset `since`, the 2nd input from it."""
    if opset < since:
        return node.attributes.get_ints("axes", None)
    return None if len(inputs) < 2 or inputs[1] is None else [int(a) for a in inputs[1]]


def _reshape(node, x, shape, opset):
    shape = [int(d) for d in shape]
    if not (opset >= 14 and node.attributes.get_int("allowzero", 0)):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _unsqueeze(node, inputs, opset):
    x, axes = inputs[0], _axes(node, inputs, opset, 13)
    rank = x.ndim + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = np.expand_dims(x, axis)
    return x


def _squeeze(node, inputs, opset):
    axes = _axes(node, inputs, opset, 13)
    return np.squeeze(inputs[0], axis=None if axes is None else tuple(axes))


def _of_one_dtype(ufunc):
    """A fold of a binary op by `ufunc` when both operands have one dtype (ONNX requires it;
    NumPy would promote a mix, so that is left to onnx.reference)."""
    return lambda i, n, o: ufunc(i[0], i[1]) if i[0].dtype == i[1].dtype else None


# Ops exported graphs fold by the hundred (shape arithmetic, reshaped biases), in NumPy: onnx's
# reference evaluator costs ~70 ms to import and ~1 ms a node, and its Unsqueeze fails before
# opset 13. {op: (inputs, node, opset) -> array}
_NUMPY_FOLDS = {
    "Reshape": lambda i, n, o: _reshape(n, i[0], i[1], o),
    "Unsqueeze": lambda i, n, o: _unsqueeze(n, i, o),
    "Squeeze": lambda i, n, o: _squeeze(n, i, o),
    "Concat": lambda i, n, o: np.concatenate([x for x in i if x is not None],
                                             axis=n.attributes.get_int("axis")),
    "Gather": lambda i, n, o: np.take(i[0], i[1], axis=n.attributes.get_int("axis", 0)),
    "Expand": lambda i, n, o: np.broadcast_to(
        i[0], np.broadcast_shapes(i[0].shape, tuple(int(d) for d in i[1]))).copy(),
    "Cast": lambda i, n, o: _cast(i[0], n.attributes.get_int("to")),
    "Add": _of_one_dtype(np.add),
    "Sub": _of_one_dtype(np.subtract),
    "Mul": _of_one_dtype(np.multiply),
    "Less": _of_one_dtype(np.less),
    "Range": lambda i, n, o: _range(*i),
    "Identity": lambda i, n, o: i[0],
}
_SIMPLE_DTYPES = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                        np.uint8, np.uint16, np.uint32, np.uint64,
                                        np.float16, np.float32, np.float64)}


def _range(start, limit, delta):
    """Range of integers (a float Range's rounding is left to onnx.reference)."""
    if start.dtype.kind not in "iu" or not start.dtype == limit.dtype == delta.dtype or \
            int(delta) == 0:
        return None
    return np.arange(start, limit, delta, dtype=start.dtype)


def _cast(x, to):
    dtype = ir.DataType(to).numpy()
    return x.astype(dtype) if dtype in _SIMPLE_DTYPES else None


def _evaluate(node, inputs, opset):
    """Run one node in NumPy, or with onnx.reference; None if it cannot be evaluated."""
    fold = _NUMPY_FOLDS.get(node.op_type)
    if fold is not None and all(x is None or x.dtype in _SIMPLE_DTYPES for x in inputs):
        try:
            result = fold(inputs, node, opset)
        except (ValueError, IndexError, TypeError):   # a node onnx.reference would fail on too
            return None
        if result is not None:
            return [np.asarray(result)]
    from onnx.reference import ReferenceEvaluator   # ~70 ms, for the rare node numpy cannot fold

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


def fold_constants(model, growth_allowance=_FOLD_GROWTH_ALLOWANCE, made=None):
    """Replace every foldable node by initializers, in graph order. Returns the count (and
    adds the initializers' values to the list `made`, if given). A node whose result
    outweighs its inputs is folded only up to `growth_allowance` bytes."""
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
                if out_bytes > max(in_bytes, growth_allowance):
                    continue
        if results is None:
            continue
        for out, array in zip(node.outputs, results):
            array = np.asarray(array)
            tensor = ir.Tensor(array, name=out.name)
            out.const_value = tensor
            new = ir.Value(name=out.name, type=ir.TensorType(tensor.dtype),
                           shape=ir.Shape(array.shape), const_value=tensor)
            out.name = None
            graph.register_initializer(new)
            ir.convenience.replace_all_uses_with(out, new, replace_graph_outputs=True)
            if made is not None:
                made.append(new)
        graph.remove(node, safe=True)
        folded += 1
    return folded


def _single_consumer(value, graph):
    return len(value.uses()) == 1 and value not in graph.outputs


def _bias_of(add, x):
    """The constant other operand of `add` (whose one operand is x), or None."""
    if add.op_type != "Add" or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is x else add.inputs[0]
    return _const(other)


def fuse_bias_into_conv_and_gemm(model):
    """Conv + Add(per-channel constant) -> Conv with bias; 2-D MatMul(x, W) + Add(b) -> Gemm.

    Paddle keeps the bias of conv2d / linear as a separate elementwise_add; folding it
    into the producing op is exact and halves those nodes.
    """
    graph, fused = model.graph, 0
    for node in list(graph):
        if node.op_type not in ("Conv", "MatMul") or node.domain not in ("", "ai.onnx"):
            continue
        y = node.outputs[0]
        if not _single_consumer(y, graph):
            continue
        add = next(iter(y.uses())).node
        bias = _bias_of(add, y)
        if bias is None or add.graph is not graph:
            continue
        if node.op_type == "Conv":
            w = _const(node.inputs[1])
            if w is None:
                continue
            m = w.shape[0]
            spatial = w.ndim - 2
            if bias.size != m or bias.shape not in ((m,), (m,) + (1,) * spatial,
                                                    (1, m) + (1,) * spatial):
                continue
            total = bias.reshape(m)
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                old = _const(node.inputs[2])
                if old is None:
                    continue
                total = total + old
            new = ir.Node("", "Conv", [node.inputs[0], node.inputs[1],
                                       add_initializer(graph, total.astype(w.dtype), f"{add.name}.bias")],
                          node.attributes.values(), name=node.name)
        else:
            a, w = node.inputs
            wc = _const(w)
            if wc is None or wc.ndim != 2 or a.shape is None or len(a.shape) != 2 \
                    or bias.ndim > 1 or bias.size != wc.shape[1] or model.opset_imports.get("", 0) < 7:
                continue
            new = ir.Node("", "Gemm", [a, w, add_initializer(graph, bias.reshape(-1), f"{add.name}.bias")],
                          name=node.name)
        graph.insert_before(node, new)
        out = add.outputs[0]
        new.outputs[0].name = None
        ir.convenience.replace_all_uses_with(out, new.outputs[0], replace_graph_outputs=True)
        new.outputs[0].name, new.outputs[0].type, new.outputs[0].shape = out.name, out.type, out.shape
        graph.remove([add, node], safe=True)
        fused += 1
    return fused


class _IdentityElimination(common_passes.IdentityEliminationPass):
    """onnx_ir's pass, keeping the Identity that makes a value of an enclosing graph an output
    of an If branch or Loop body (ONNX wants graph outputs produced inside the graph), or
    that keeps two graph outputs apart (onnxruntime fails on a sub-graph listing a value
    twice)."""

    def _try_eliminate_identity_node(self, node):
        if node.op_type == "Identity" and node.inputs and node.inputs[0] is not None \
                and node.outputs[0].is_graph_output():
            x = node.inputs[0]
            owner = x.producer().graph if x.producer() is not None else x.graph
            if owner is not node.graph or x.is_graph_output():
                return False
        return super()._try_eliminate_identity_node(node)


def fold_shapes(model, rounds=8):
    """Shape inference and constant folding until nothing more folds (each round may
    reveal new static shapes)."""
    for _ in range(rounds):
        infer_shapes(model, check_type=True)
        made = []
        if not fold_constants(model, made=made) or not _inference_may_learn(model, made):
            break


def _inference_may_learn(model, made):
    """Whether shape inference may find more after folding made the constants `made`: a
    Shape or Size is left to fold, or a node reading one of them has an output of unknown
    shape or sizes (None, or onnx's made-up "unk__" names; an input's named size is as
    known as it gets). Each round of inference serializes the model."""
    if any(n.op_type in ("Shape", "Size") for n in model.graph):
        return True
    named = {d.value for v in model.graph.inputs for d in (v.shape or ())
             if isinstance(d, ir.SymbolicDim)}
    return any(out.shape is None or any(isinstance(d, ir.SymbolicDim) and
                                        (d.value is None or d.value not in named)
                                        for d in out.shape)
               for value in made for node, _ in value.uses() for out in node.outputs)


def optimize(model, fold=True):
    """Fold constants, fuse biases, remove dead code and Identity chains, in place."""
    common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    if fold:
        fold_shapes(model)
    if fold:
        fuse_bias_into_conv_and_gemm(model)
    _IdentityElimination()(model)
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
            # (If branch / Loop body outputs keep theirs: their graph declares them)
            if value not in io and value.shape is None and not value.is_graph_output():
                value.type = None
