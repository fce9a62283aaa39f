"""float16 export: a converted float32 ONNX model made to compute in float16.

    to_float16(model, keep_io_types=True) -> [warning]   (an ir.Model, changed in place)

Every float32 weight becomes float16 and every float32 value that an op computes becomes
float16, except:

  * the model's inputs and outputs, kept float32 with a Cast after / before them
    (keep_io_types=False makes them float16 too);
  * what ONNX does not allow in float16: a slot whose type constraint, at the model's
    opset, has no tensor(float16) (Range's, Resize's `scales`) keeps float32, a Cast
    bridging it to its float16 neighbours;
  * a Transpose feeding a MatMul: onnxruntime 1.32 crashes building the session on the
    float16 pattern (tests/test_fp16.py runs it, to tell when that is fixed);
  * a weight with values beyond float16's range (|w| > 65504 rounds to inf): it stays
    float32 and the nodes using it run in float32, a Cast to float16 after them, so that a
    product that comes back into range (a large scale times a small input) is kept; a
    warning names it. A weight many of whose values flush to zero (below 2**-24) is
    narrowed all the same and named in a warning: computing beside it in float32 would not
    bring them back, its consumers' other inputs being float16.

onnxruntime's CPU provider has float16 kernels for about 55 ONNX ops (data movement, Cast,
LayerNormalization...); for the others (Conv, MatMul, Add...) it inserts the Casts to
float32 and back itself when it builds the session, so those ops are left float16 in the
file: a provider with float16 kernels (CUDA, TensorRT, DirectML) runs them in float16, as
an fp16 export is asked for.

Types of values come from onnx's shape inference on the float32 model; control flow
(If/Loop/Scan) carries float16: its bodies' float32 inputs and outputs become float16, and a
value a body captures from outside is cast where it is produced, as any other.

onnxconverter-common's convert_float_to_float16 was weighed and not used: it clamps weights
into +-1e4 and lifts nonzero values below 1e-7 to 1e-7 (changing weights float16 holds
exactly), leaves a Cast(to=FLOAT)'s `to` as it is (a float32 value among float16 ones), and
blocks by a fixed list of op names rather than by what ONNX and onnxruntime accept.
"""
import numpy as np
import onnx
import onnx_ir as ir

from .onnx_io import infer_shapes

F32, F16 = ir.DataType.FLOAT, ir.DataType.FLOAT16
F16_TYPE = "tensor(float16)"
FLOAT16_MAX = float(np.finfo(np.float16).max)       # 65504
# A weight is named when at least this share of its nonzero values become zero in float16.
FLUSH_SHARE = 0.01

# Attributes naming the dtype of a node's outputs (Cast, RandomNormal, EyeLike, ...).
_DTYPE_ATTRS = ("to", "dtype", "output_dtype")
_CONTROL_FLOW = ("If", "Loop", "Scan")


def to_float16(model, keep_io_types=True):
    """Make the float32 ir.Model `model` compute in float16 (see the module's docstring);
    returns the warnings about its weights, one line each."""
    infer_shapes(model)
    opsets = dict(model.opset_imports)
    warnings, wide = [], set()
    for graph in _graphs(model.graph):
        for value in graph.initializers.values():
            if _is_f32(value) and value.const_value is not None:
                _look_at_weight(value.name, value.const_value.numpy(), wide, value, warnings)
        for node in graph:
            tensor = _f32_tensor_attr(node)
            if node.op_type in ("Constant", "ConstantOfShape") and tensor is not None:
                _look_at_weight(node.outputs[0].name, tensor, wide, node.outputs[0],
                                warnings)
    plan = {}
    for graph in _graphs(model.graph):
        for node in graph:
            plan[id(node)] = _narrowed_vars(node, opsets, wide)
    converter = _Converter(model, plan, wide, keep_io_types)
    converter.run()
    return warnings


def _graphs(graph):
    """The graph and every sub-graph in it, outer first."""
    yield graph
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield from _graphs(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.value:
                    yield from _graphs(sub)


def _is_f32(value):
    return value is not None and isinstance(value.type, ir.TensorType) and value.dtype == F32


def _f32_tensor_attr(node):
    """The float32 array a Constant / ConstantOfShape holds (None for other values)."""
    attr = node.attributes.get("value")
    if attr is not None and attr.type == ir.AttributeType.TENSOR and attr.value.dtype == F32:
        return attr.value.numpy()
    return None


def _look_at_weight(name, array, wide, value, warnings):
    """Note (in `wide`) a weight float16 cannot hold; warn about it and about one that
    flushes to zero in large numbers."""
    finite = np.isfinite(array)
    over = finite & (np.abs(array) > FLOAT16_MAX)
    if over.any():
        wide.add(value)
        warnings.append(f"weight {name!r}: {int(over.sum())} of {array.size} values beyond "
                        f"float16's range (largest |w| {float(np.abs(array[over]).max()):.4g} "
                        f"> {FLOAT16_MAX:g}): kept float32, the nodes using it run in float32")
        return
    nonzero = array != 0
    flushed = nonzero & (array.astype(np.float16) == 0)
    if flushed.any() and flushed.sum() >= FLUSH_SHARE * nonzero.sum():
        warnings.append(f"weight {name!r}: {int(flushed.sum())} of its {int(nonzero.sum())} "
                        "nonzero values are below float16's smallest (5.96e-08) and become 0")


def _feeds(node, op_type):
    return any(use.node.op_type == op_type for out in node.outputs for use in out.uses())


def _schema(node, opsets):
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain, opsets.get("ai.onnx"))
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def _formal(params, i):
    """The formal parameter of slot i (the last one when variadic), or None."""
    if i < len(params):
        return params[i]
    if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def _slots(node, schema):
    """[(is an output, index, value, its type variable or fixed type)] over the node's
    inputs and outputs."""
    out = []
    for is_out, values, params in ((False, node.inputs, schema.inputs),
                                   (True, node.outputs, schema.outputs)):
        for i, value in enumerate(values):
            formal = _formal(params, i)
            if value is not None and formal is not None:
                out.append((is_out, i, value, formal.type_str))
    return out


def _narrowed_vars(node, opsets, wide):
    """{slot type string: True when the node's float32 values there become float16}: None
    for a node that stays float32 throughout (no schema, a weight float16 cannot hold, a
    sequence of floats, a Transpose into a MatMul)."""
    schema = _schema(node, opsets)
    if schema is None:
        return None
    for value in (*node.inputs, *node.outputs):
        if value is not None and value.type is not None and \
                not isinstance(value.type, ir.TensorType) and value.dtype == F32:
            return None      # sequences / optionals of float: left as they are
    if node.op_type not in _CONTROL_FLOW and any(v in wide for v in node.inputs):
        return None
    if node.op_type == "Transpose" and _feeds(node, "MatMul"):
        # onnxruntime 1.32 crashes building the session on a float16 Transpose into a
        # MatMul (its MatMul-Transpose fusion, at ORT_ENABLE_ALL): the Transpose runs in
        # float32, the MatMul in float16 after a Cast.
        return None
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    return {type_str: F16_TYPE in allowed.get(type_str, (type_str,))
            for _, _, _, type_str in _slots(node, schema)}


class _Converter:
    """Rewrites the model by the plan: new types for values, Casts where a value's type and
    a use's differ, float16 weights."""

    def __init__(self, model, plan, wide, keep_io_types):
        self.model, self.plan, self.wide, self.keep_io = model, plan, wide, keep_io_types
        self.opsets = dict(model.opset_imports)
        self.names = {v.name for g in _graphs(model.graph)
                      for v in (*g.inputs, *g.initializers.values(),
                                *(o for n in g for o in n.outputs)) if v.name}
        self.casts = {}         # (id(value), dtype) -> the cast value
        # Each graph with the dtype of its float inputs and outputs: the model's as asked,
        # a body's float16 unless its node stays float32.
        io_type = F32 if keep_io_types else F16
        self.graph_io = [(model.graph, io_type)]
        for graph, _ in self.graph_io:      # grows as it goes: bodies after their graph
            for node in graph:
                body_type = F32 if plan[id(node)] is None else F16
                for attr in node.attributes.values():
                    subs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
                        attr.value if attr.type == ir.AttributeType.GRAPHS else ()
                    self.graph_io.extend((sub, body_type) for sub in subs)

    def _fresh(self, base):
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def run(self):
        uses, new_type = [], {}    # uses: (value, the dtype the use wants, where it is)
        for graph, io_type in self.graph_io:
            for value in graph.inputs:
                if _is_f32(value) and not value.is_initializer():   # (a weight, below 4)
                    new_type[id(value)] = io_type
            for node in graph:
                self._plan_node(node, uses, new_type)
            for i, value in enumerate(graph.outputs):
                if _is_f32(value):
                    uses.append((value, io_type, _GraphOutput(graph, i)))
        self._narrow_weights(uses)
        for graph, _ in self.graph_io:
            for node in graph:
                if self.plan[id(node)] is not None:
                    self._retype_attributes(node, new_type)
            for value in (*graph.inputs, *(o for n in graph for o in n.outputs)):
                if id(value) in new_type:
                    value.type = ir.TensorType(new_type[id(value)])
        for value, want, site in uses:
            if value.dtype != want:
                site.rewire(self._cast(value, want))

    def _plan_node(self, node, uses, new_type):
        plan = self.plan[id(node)]
        if plan is None:
            slots = [(True, i, v, None) for i, v in enumerate(node.outputs)] + \
                [(False, i, v, None) for i, v in enumerate(node.inputs)]
        else:
            slots = _slots(node, _schema(node, self.opsets))
        for is_out, i, value, type_str in slots:
            if not _is_f32(value):
                continue
            want = F16 if plan is not None and plan.get(type_str) else F32
            if is_out:
                new_type[id(value)] = want
            else:
                uses.append((value, want, _NodeInput(node, i)))

    def _narrow_weights(self, uses):
        """Initializers: float16 (float32 when float16 cannot hold them); a use wanting the
        other type gets its own copy of the weight, made from the float32 values."""
        wanted = {}
        for value, want, _ in uses:
            if value.is_initializer():
                wanted.setdefault(id(value), set()).add(want)
        for graph, _ in self.graph_io:
            for value in list(graph.initializers.values()):
                if not _is_f32(value) or value.const_value is None:
                    continue
                keep = value in self.wide or wanted.get(id(value)) == {F32}
                if not keep:
                    array = value.const_value.numpy()
                    self.casts[id(value), F32] = self._copy(graph, value, array, F32)
                    value.const_value = ir.tensor(array.astype(np.float16), name=value.name)
                    value.type = ir.TensorType(F16)
                else:
                    array = value.const_value.numpy()
                    self.casts[id(value), F16] = self._copy(graph, value, array, F16)

    def _copy(self, graph, value, array, dtype):
        """A lazily registered copy of a weight in another dtype (registered on first use)."""
        return _LazyWeight(self, graph, value.name, array, dtype)

    def _retype_attributes(self, node, new_type):
        """The attributes that fix a narrowed output's dtype, and Constant / ConstantOfShape
        values, in float16."""
        if not any(new_type.get(id(o)) == F16 for o in node.outputs):
            return
        for name in _DTYPE_ATTRS:
            attr = node.attributes.get(name)
            if attr is not None and attr.type == ir.AttributeType.INT and attr.value == F32:
                node.attributes[name] = ir.AttrInt64(name, int(F16))
        array = _f32_tensor_attr(node)
        if array is not None:
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(array.astype(np.float16)))
        if node.op_type == "ConstantOfShape" and "value" not in node.attributes:
            # its default is a float32 zero
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(np.zeros(1, np.float16)))
        if node.op_type in ("RandomNormal", "RandomUniform") and "dtype" not in node.attributes:
            node.attributes["dtype"] = ir.AttrInt64("dtype", int(F16))     # default: float32
        if node.op_type == "Constant":
            for name in ("value_float", "value_floats"):
                attr = node.attributes.pop(name, None)
                if attr is not None:
                    array = np.asarray(attr.value, dtype=np.float16)
                    node.attributes["value"] = ir.AttrTensor("value", ir.tensor(array))

    def _cast(self, value, dtype):
        key = (id(value), dtype)
        found = self.casts.get(key)
        if isinstance(found, _LazyWeight):
            found = self.casts[key] = found.register()
        if found is not None:
            return found
        suffix = "float16" if dtype == F16 else "float32"
        out = ir.Value(name=self._fresh(f"{value.name}/{suffix}"), type=ir.TensorType(dtype),
                       shape=value.shape)
        cast = ir.node("Cast", [value], {"to": int(dtype)}, outputs=[out],
                       name=self._fresh(f"{value.name}/cast_{suffix}"))
        producer = value.producer()
        if producer is not None:
            producer.graph.insert_after(producer, cast)
        else:
            graph = value.graph
            if len(graph):
                graph.insert_before(graph.node(0), cast)
            else:
                graph.append(cast)
        self.casts[key] = out
        return out


class _LazyWeight:
    """A weight's copy in the other dtype, added to its graph only when a use needs it."""

    def __init__(self, converter, graph, name, array, dtype):
        self.converter, self.graph, self.name, self.array, self.dtype = \
            converter, graph, name, array, dtype

    def register(self):
        suffix = "float16" if self.dtype == F16 else "float32"
        name = self.converter._fresh(f"{self.name}/{suffix}")
        data = self.array.astype(np.float16 if self.dtype == F16 else np.float32)
        value = ir.Value(name=name, type=ir.TensorType(self.dtype),
                         shape=ir.Shape(data.shape), const_value=ir.tensor(data, name=name))
        self.graph.register_initializer(value)
        return value


class _NodeInput:
    """A node's input i."""

    def __init__(self, node, index):
        self.node, self.index = node, index

    def rewire(self, new):
        self.node.replace_input_with(self.index, new)


class _GraphOutput:
    """A graph's output i: the value computed takes a new name, the cast one the output's."""

    def __init__(self, graph, index):
        self.graph, self.index = graph, index

    def rewire(self, new):
        old = self.graph.outputs[self.index]
        if old.is_graph_input() or old.is_initializer() or \
                sum(o is old for o in self.graph.outputs) > 1:
            self.graph.outputs[self.index] = new
            return
        name = old.name
        old.name, new.name = new.name, name
        self.graph.outputs[self.index] = new

