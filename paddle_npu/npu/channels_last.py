"""Images stay channels-last between NPU layers (a stage-2 pass, run after the lowerings).

A lowered Conv ends in a move of its rows [N, H*W, C] (the arrays' output, pixel by pixel)
to NCHW, and the next Conv's Im2Col gathers them channels-last again. This pass keeps the
rows as they are along chains of layers that do not care about the layout, and moves to
NCHW only where something needs it:

    to NCHW (DimTransform of a matrix layer's rows)   the rows stand for its output
    elementwise ops and activations (Add, Mul, Relu,  run on the rows: constants moved to
    Clip, Lut, Quantize, ...)                         the rows' layout once, here; a
                                                      per-image gate [N, C, 1, 1] is [N, 1, C]
    Im2Col                                            reads the rows (layout "nhwc"); a 1x1
                                                      kernel at stride 1 is the rows: dropped
    Pool, Join / Concat of channels                   on the rows (Pool's layout "nhwc";
                                                      Join along the rows' channel axis)
    anything else, a graph output                     a move to NCHW in front of it

Every rewritten node computes what it did, in another layout, so the model's outputs are
unchanged (tests/test_npu_channels_last.py checks them against onnxruntime before lowering).
"""
import numpy as np
import onnx_ir as ir

from . import graph as g
from .ops import DOMAIN, get_primitive
from .ops.im2col import TABLE_LIMIT, table_entries
from .passes import Pass

# Plain ONNX ops computing element by element, with broadcasting: the same layout change of
# all their operands is that of their output.
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow", "PRelu", "Relu",
               "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
               "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Softplus", "Identity")
# Primitives computing element by element on their first input; the others are a scale of
# one element, or QLut's table (not an operand of the same shape).
ELEMENTWISE_PRIMITIVES = ("Lut", "QLut", "Quantize", "Dequantize")


class ChannelsLast(Pass):
    """See the module docstring. `fired`: what now runs on rows; `refused`: nodes reading
    rows that need NCHW, and why; info: moves to NCHW before and after."""
    name = "channels_last"

    def run(self, model, result):
        graph = model.graph
        self.builder = g.Builder(graph)
        rows = {}               # NCHW value -> (its rows [N, H*W, C], (H, W))
        seeds, replaced = [], []
        for node in list(graph):
            if node.graph is not graph:
                continue
            size = _to_nchw(node)
            if size is not None:
                rows[node.outputs[0]] = (node.inputs[0], size)
                seeds.append(node)
                continue
            if not any(v in rows for v in node.inputs if v is not None):
                continue
            why = self._rewrite(node, rows, replaced, result)
            if why is not None:
                result.refused[node.name] = why
        added = self._back_to_nchw(graph, rows, set(replaced), seeds)
        g.drop_dead(graph, seeds + replaced)
        kept = sum(1 for n in seeds if n.graph is graph)
        result.info.update(moves_before=len(seeds), moves_after=kept + added)
        if seeds:
            result.fired.append(f"{len(seeds)} move(s) to NCHW -> {kept + added}")

    def _rewrite(self, node, rows, replaced, result):
        """Run `node` on rows where it can (fills `rows` for its output); else why not."""
        if g.is_op(node, *ELEMENTWISE) or (node.domain == DOMAIN and
                                            node.op_type in ELEMENTWISE_PRIMITIVES):
            return self._elementwise(node, rows, replaced, result)
        if node.domain == DOMAIN and node.op_type == "Im2Col":
            return self._im2col(node, rows, result)
        if node.domain == DOMAIN and node.op_type == "Pool":
            return self._pool(node, rows, replaced, result)
        if (node.domain == DOMAIN and node.op_type == "Join") or g.is_op(node, "Concat"):
            return self._join(node, rows, replaced, result)
        return f"{node.op_type} reads NCHW (its element order depends on the layout)" \
            if node.domain == DOMAIN and node.op_type == "DimTransform" else \
            f"{node.op_type} is not known to the layout pass: it reads NCHW"

    def _elementwise(self, node, rows, replaced, result):
        out = _image_dims(node.outputs[0])
        if out is None:
            return "its output is not an image of fixed channels and size"
        size = tuple(out[2:])
        operands = node.inputs if node.domain != DOMAIN else node.inputs[:1]
        inputs = list(node.inputs)
        for k, v in enumerate(operands):
            if v is None:
                continue
            if v in rows:
                r, hw = rows[v]
                if hw not in ((1, 1), size):
                    return "an operand broadcasts over height or width alone"
                inputs[k] = r
                continue
            c = g.constant(v)
            if c is None:
                return f"operand {v.name} is NCHW, not a matrix layer's rows"
            moved = _constant_rows(c, size)
            if moved is None:
                return f"constant {v.name} of shape {list(c.shape)} has no rows form"
            if moved is not c:
                inputs[k] = g.initializer(node.graph, moved, f"{v.name}.rows")
        for v in node.inputs[len(operands):]:
            c = g.constant(v)
            if c is None or (node.op_type != "QLut" and c.size != 1):
                return f"{v.name} is not a constant of one element"
        new = self._replace(node, inputs, [out[0], size[0] * size[1], out[1]], replaced)
        rows[node.outputs[0]] = (new.outputs[0], size)
        result.fired.append(f"{node.name} on rows")
        return None

    def _im2col(self, node, rows, result):
        a = _attrs(node)
        if a["layout"] != "nchw":
            return "already reads rows"
        r, (h, w) = rows[node.inputs[0]]
        pointwise = list(a["kernel_shape"]) == [1, 1] and not any(a["pads"])
        if not pointwise and table_entries(a, h, w) > TABLE_LIMIT:
            return (f"its index table ({table_entries(a, h, w)} entries) would be over "
                    f"{TABLE_LIMIT}: it gathers from NCHW at run time")
        if pointwise and list(a["strides"]) == [1, 1]:      # the rows are its rows
            ir.convenience.replace_all_uses_with(node.outputs[0], r)
            node.graph.remove(node, safe=True)
            result.fired.append(f"{node.name} dropped: a 1x1 kernel reads the rows as they are")
            return None
        node.replace_input_with(0, r)
        node.attributes["layout"] = ir.AttrString("layout", "nhwc")
        node.attributes["image_size"] = ir.AttrInt64s("image_size", [h, w])
        node.overload = _overload(node)
        result.fired.append(f"{node.name} reads rows")
        return None

    def _pool(self, node, rows, replaced, result):
        out = _image_dims(node.outputs[0])
        if out is None or _attrs(node)["layout"] != "nchw":
            return "its output is not an NCHW image of fixed channels and size"
        r, size = rows[node.inputs[0]]
        new = self._replace(node, [r], [out[0], out[2] * out[3], out[1]], replaced,
                            layout="nhwc", image_size=list(size))
        rows[node.outputs[0]] = (new.outputs[0], tuple(out[2:]))
        result.fired.append(f"{node.name} on rows")
        return None

    def _join(self, node, rows, replaced, result):
        out = _image_dims(node.outputs[0])
        if out is None or node.attributes.get_int("axis", 0) not in (1, -3):
            return "it does not join channels of images of fixed size"
        if any(v not in rows or rows[v][1] != tuple(out[2:]) for v in node.inputs):
            return "not every input is rows of an image of its size"
        new = self._replace(node, [rows[v][0] for v in node.inputs],
                            [out[0], out[2] * out[3], out[1]], replaced, axis=2)
        rows[node.outputs[0]] = (new.outputs[0], tuple(out[2:]))
        result.fired.append(f"{node.name} on rows")
        return None

    def _replace(self, node, inputs, shape, replaced, **attrs):
        """A copy of `node` reading `inputs`, its attributes changed by `attrs`, output
        `shape`; inserted before it. The original goes once nothing reads it."""
        kept = {k: a for k, a in node.attributes.items() if k not in attrs}
        new = ir.Node(node.domain, node.op_type, inputs,
                      list(kept.values()) + g.attributes(attrs),
                      name=self.builder.names(f"{node.name}/rows"))
        new.outputs[0].name = new.name
        new.outputs[0].type = node.outputs[0].type
        new.outputs[0].shape = ir.Shape(shape)
        g.copy_annotations(node, new)
        if node.domain == DOMAIN:
            new.overload = _overload(new)
        node.graph.insert_before(node, new)
        replaced.append(node)
        return new

    def _back_to_nchw(self, graph, rows, replaced, seeds):
        """A move to NCHW for every value something other than the rewritten nodes reads
        (or a graph output); a seed stays for them instead. Returns the moves added."""
        added = 0
        for v, (r, (h, w)) in rows.items():
            needed = v.is_graph_output() or any(u not in replaced for u, _ in v.uses())
            if not needed or v.producer() in seeds:
                continue
            c = g.dims(r)[2]
            back = g.make_node(DOMAIN, "DimTransform", [r],
                               {"perm": [0, 2, 1], "shape": [0, c, h, w]},
                               self.builder.names(f"{v.producer().name}/to_nchw"),
                               dtype=v.dtype, shape=g.dims(v))
            back.overload = _overload(back)
            g.copy_annotations(r.producer(), back)
            graph.insert_after(r.producer(), back)
            g.take_over(v, back.outputs[0])
            added += 1
        return added


def _to_nchw(node):
    """(H, W) when `node` moves a matrix layer's rows [N, H*W, C] to [N, C, H, W], else None."""
    if node.domain != DOMAIN or node.op_type != "DimTransform" or \
            list(node.attributes.get_ints("perm", [])) != [0, 2, 1]:
        return None
    x, y = g.dims(node.inputs[0]), _image_dims(node.outputs[0])
    if x is None or y is None or len(x) != 3 or x[1:] != [y[2] * y[3], y[1]]:
        return None
    return y[2], y[3]


def _image_dims(value):
    """[N, C, H, W] of a 4-D value whose C, H and W are fixed, else None."""
    d = g.dims(value)
    if d is None or len(d) != 4 or not all(isinstance(x, int) for x in d[1:]):
        return None
    return d


def _constant_rows(c, size):
    """A constant operand of an NCHW image of `size` (H, W), as the operand of its rows:
    `c` itself when it is one element of rank <= 3, None when it has no rows form (rank
    over 4, or varying over height or width alone)."""
    if c.size == 1 and c.ndim <= 3:
        return c
    if c.ndim > 4:
        return None
    a, b, h, w = (1,) * (4 - c.ndim) + c.shape
    if (h, w) not in ((1, 1), tuple(size)):
        return None
    return np.ascontiguousarray(c.reshape(a, b, h * w).transpose(0, 2, 1))


def _attrs(node):
    prim = get_primitive(node.op_type)
    return prim.attrs_of({k: a.value for k, a in node.attributes.items()})


def _overload(node):
    return get_primitive(node.op_type).overload(_attrs(node), [g.dims(v) for v in node.inputs])
