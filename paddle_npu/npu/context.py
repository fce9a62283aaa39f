"""What a stage-2 mapper sees: the node's inputs and shapes, builders, the target, costs."""

import numpy as np
import onnx_ir as ir

from ..errors import ConversionError
from ..naming import UniqueNames
from . import graph as g
from .ops import DOMAIN, get_primitive


class _Builder:
    """`ctx.npu.VMM(x, w, row_offset=0, _name="vmm")` emits a node before the node being
    lowered and returns its output value(s), shapes filled in."""

    def __init__(self, ctx, domain):
        self._ctx, self._domain = ctx, domain

    def __getattr__(self, op_type):
        def emit(*inputs, _name=None, _outputs=1, _shapes=None, _dtype=None, **attrs):
            return self._ctx.emit(self._domain, op_type, inputs, attrs, _name, _outputs,
                                  _shapes, _dtype)
        return emit


class LowerContext:
    """plan: the tiling plan ("packed" / "per-channel"); quantization: a plan.Quantization
    for integer matrix layers, None for float ones; array_layers: names of depthwise layers
    put on the arrays (block-diagonal tiles) instead of the vector unit."""

    def __init__(self, model, target, plan, quantization=None, array_layers=()):
        self.model, self.graph = model, model.graph
        self.target, self.plan, self.quantization = target, plan, quantization
        self.array_layers = frozenset(array_layers)
        self.npu, self.onnx = _Builder(self, DOMAIN), _Builder(self, "")
        self.plans = {}             # layer -> its plan.LayerPlan (the planning pass's)
        self._source, self._marks, self._absorbed = None, {}, []
        self._names = UniqueNames.of_graph(self.graph)
        # a tile's memory (an integer tile's: its float weights' and scales) -> (its
        # initializer, the float weights)
        self._tiles = {}

    # --- facts about values ----------------------------------------------------------------
    constant = staticmethod(g.constant)
    dims = staticmethod(g.dims)
    static_dims = staticmethod(g.static_dims)

    def unit_refusal(self, node, primitive, listed=True):
        """Why the vector unit cannot run `node` as `primitive` on its first input, or None:
        the target's vector unit does not list the op (when `listed` asks), has no such
        primitive, or the input is a constant (folded, not run) of unknown rank."""
        if listed and not self.target.npu_runs(node.op_type):  # a target leaving it to the CPU
            return f"the target's vector unit does not run {node.op_type}"
        if not self.target.runs_primitive(primitive):
            return f"the target has no {primitive}"
        x = node.inputs[0]
        if self.constant(x) is not None:
            return "constant input (folded, not run)"
        if self.dims(x) is None:
            return "the input's rank is not known"
        return None

    # --- building -------------------------------------------------------------------------
    def unique_name(self, base):
        return self._names(base)

    def initializer(self, array, suffix):
        name = self.unique_name(f"{self._source.name}/{suffix}")
        # a view (a tile of the layer's weight) stays one: its bytes are made as it is written
        array = np.asarray(array)
        if array.ndim == 0:
            array = array.reshape(1)
        tensor = ir.Tensor(array, name=name)
        value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                         const_value=tensor)
        self.graph.register_initializer(value)
        return value

    def tile_initializer(self, array, suffix, key, weights):
        """The initializer of an array tile's weights `array`: an earlier layer's when it
        holds the same weights (`key`, plan.LayerPlan.tile_keys: a view of the same constant,
        as every step of an unrolled RNN multiplies by its recurrent weight: weight-stationary
        arrays programmed once, then reused), else a new one. `weights`: the float weights
        the key names by their memory, kept alive with it (no other array can then take
        their address)."""
        if key not in self._tiles:
            self._tiles[key] = (self.initializer(array, suffix), weights)
        return self._tiles[key][0]

    def emit(self, domain, op_type, inputs, attrs, name, num_outputs, shapes, dtype):
        src = self._source
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node_name = self.unique_name(f"{src.name}/{name or op_type}")
        node = ir.Node(domain, op_type, list(inputs), g.attributes(attrs),
                       num_outputs=num_outputs, name=node_name)
        g.set_source(node, src.name, src.op_type)
        g.copy_marks(self._marks, node)       # a marked node's parts keep its marks
        if domain == DOMAIN:
            prim = get_primitive(op_type)
            shapes = prim.infer([self.dims(x) for x in inputs], attrs)
        first = next(x for x in inputs if x is not None)
        for k, out in enumerate(node.outputs):
            out.name = node_name if num_outputs == 1 else self.unique_name(f"{node_name}:{k}")
            out.type = ir.TensorType(dtype or first.dtype)
            if shapes is not None:
                out.shape = ir.Shape(shapes[k])
        self.graph.insert_before(src, node)
        return node.outputs[0] if num_outputs == 1 else tuple(node.outputs)

    # --- bookkeeping ------------------------------------------------------------------------
    def begin(self, node):
        self._source, self._absorbed = node, []
        self._marks = g.marks_of(node)

    def absorb(self, follower):
        """The node being lowered also does `follower`'s work (a ReLU folded into it):
        follower's readers read the lowering's first output, which takes over its name."""
        self._absorbed.append(follower)

    def replace(self, node, values):
        """Make `values` stand for the node's outputs (taking over their names) and drop it."""
        if len(values) != len(node.outputs):
            raise ConversionError(f"lowering {node.name}: {len(values)} values for "
                                  f"{len(node.outputs)} outputs")
        for old, new in zip(node.outputs, values):
            want, got = self.dims(old), self.dims(new)
            if want is not None and got is not None and len(want) == len(got) and any(
                    isinstance(a, int) and isinstance(b, int) and a != b
                    for a, b in zip(want, got)):
                raise ConversionError(f"lowering {node.name}: output {old.name} would change "
                                      f"shape from {want} to {got}")
            name = old.name
            if new.producer() is None or new.const_value is not None or new.is_graph_input():
                raise ConversionError(f"lowering {node.name}: an output must be a new node's")
            ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
            old.name = None
            self._names.taken.discard(new.name)
            new.name = name
            if want is not None and (got is None or len(want) != len(got) or None in got):
                new.shape = old.shape      # what inference knew beats an unknown dim
        self.graph.remove(node, safe=True)
        for follower in self._absorbed:
            g.take_over(follower.outputs[0], values[0])
            self.graph.remove(follower, safe=True)
        self._source, self._absorbed = None, []

    def plan_of(self, node):
        """The planning pass's plan of a matrix layer."""
        return self.plans[node.name]
