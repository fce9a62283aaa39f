"""Images stay channels-last between NPU layers (a stage-2 pass, run after the lowerings).

A lowered Conv ends in a move of its rows [N, H*W, C] (the arrays' output, pixel by pixel)
to NCHW, and the next Conv's Im2Col gathers them channels-last again. This pass keeps the
rows as they are along chains of layers that do not care about the layout, as an image
[N, H, W, C] (the same elements in the same order), and moves to NCHW only where something
needs it:

    to NCHW (DimTransform of a matrix layer's rows)   the rows stand for its output
    elementwise ops and activations (Add, Mul, Relu,  run on the rows: constants moved to
    Clip, Lut, Quantize, ...)                         the rows' layout once, here; a per-
                                                      image gate [N, C, 1, 1] is [N, 1, 1, C]
    Im2Col                                            reads the rows (layout "nhwc"); a 1x1
                                                      kernel at stride 1 is the rows: dropped,
                                                      its layer's VMMs read them as they are
    DimTransform to rows                              the rows as they are, or (ConvTranspose's
                                                      input) their [N, H*W, C]
    Pool, DepthwiseConv, Join / Concat of channels,   on the rows (Pool's and Depthwise-
    Crop of channels, Reduce over the pixels,         Conv's layout "nhwc"; the others on
    AxisResample (resizing)                           the rows' axes)
    anything else, a graph output                     a move to NCHW in front of it

Rows of rank 4, not [N, H*W, C], keep the image's height and width in the program: the
emulation runs a chain of such layers as one image (emulation/image_rows.py).

Every rewritten node computes what it did, in another layout, so the model's outputs are
unchanged (tests/test_npu_channels_last.py checks them against onnxruntime before lowering).
A tensor of the model left only as rows keeps its name, its node marked with the image's
size (graph.set_rows_size); `tensors_as_nchw` gives such tensors back as NCHW arrays.
"""
import numpy as np
import onnx_ir as ir

from .. import graph as g
from ..ops import DOMAIN, get_primitive
from .framework import Pass

# Primitives walking windows of their first input, an image, in either layout.
WINDOW_PRIMITIVES = ("Pool", "DepthwiseConv", "QDepthwiseConv")


class ChannelsLast(Pass):
    """See the module docstring. `fired`: what now runs on rows; `refused`: nodes reading
    rows that keep NCHW, and why; info: moves to NCHW before and after.

    Planned first, then rewritten. A node of one rows operand making a value that must be
    NCHW anyway (a graph output, or read by a node that keeps NCHW other than a DimTransform,
    which merges with the move) keeps NCHW itself, the move before it, unless an Im2Col
    reads the value: moving it after the node would gain nothing. Planning repeats until
    that holds."""
    name = "channels_last"

    def run(self, model, result):
        graph = model.graph
        pinned, refused = set(), {}
        while True:
            sizes, plan, why = _plan(graph, pinned)
            refused.update(why)             # a reason found earlier holds still
            needed = {v for v in sizes
                      if v.is_graph_output() or any(u not in plan for u, _ in v.uses())}
            # a DimTransform reading a value merges with the move to NCHW before it
            pin = {v for v in needed if v.is_graph_output() or any(
                u not in plan and not _is_dim_transform(u) for u in g.users(v))}
            if pin <= pinned:
                break
            pinned |= pin
        result.refused.update(refused)
        self.builder = g.Builder(graph)
        rows, seeds, replaced = {}, [], []
        for node in list(graph):
            if node in plan:
                plan[node](self, node, rows, replaced, result)
            elif _to_nchw(node) is not None:
                rows[node.outputs[0]] = self._seed_rows(node, replaced)
                seeds.append(node)
        added = self._back_to_nchw(graph, rows, sizes, needed, seeds)
        g.drop_dead(graph, seeds + replaced)
        for v, r in rows.items():       # a tensor left only as rows keeps its name
            if v.name is not None and v.producer().graph is not graph:
                name, v.name = v.name, None
                r.name = name
                g.set_rows_size(r.producer(), *sizes[v])
        kept = sum(1 for n in seeds if n.graph is graph)
        result.info.update(moves_before=len(seeds), moves_after=kept + added)
        if seeds:
            result.fired.append(f"{len(seeds)} move(s) to NCHW -> {kept + added}")

    def _seed_rows(self, node, replaced):
        """The rows [N, H, W, C] a move to NCHW reads: its input as it is when that has rank
        4 (the move then fixed to read it, should it stay), else that reshaped."""
        x = node.inputs[0]
        n, c, h, w = g.dims(node.outputs[0])
        if len(g.dims(x)) == 4:
            node.attributes["perm"] = ir.AttrInt64s("perm", [0, 3, 1, 2])
            return x
        image = g.make_node(DOMAIN, "DimTransform", [x],
                            {"perm": [0, 1, 2], "shape": [0, h, w, c]},
                            self.builder.names(f"{node.name}/rows"), dtype=x.dtype,
                            shape=[n, h, w, c])
        g.copy_annotations(node, image)
        node.graph.insert_before(node, image)
        replaced.append(image)                  # goes if nothing reads it
        return image.outputs[0]

    # --- the rewrites, each of a node _plan accepted ---------------------------------------

    def _elementwise(self, node, rows, replaced, result):
        n, c, h, w = g.dims(node.outputs[0])
        inputs = list(node.inputs)
        for k, v in enumerate(_operands(node)):
            if v in rows:
                inputs[k] = rows[v]
            elif v is not None:
                c_ = g.constant(v)
                moved = _constant_rows(c_, (h, w))
                if moved is not c_:
                    inputs[k] = g.initializer(node.graph, moved, f"{v.name}.rows")
        new = self._replace(node, inputs, [n, h, w, c], replaced)
        rows[node.outputs[0]] = new.outputs[0]
        result.fired.append(f"{new.name} on rows")

    def _im2col(self, node, rows, replaced, result):
        r = rows[node.inputs[0]]
        h, w = g.dims(node.inputs[0])[2:]
        node.replace_input_with(0, r)
        node.attributes["layout"] = ir.AttrString("layout", "nhwc")
        node.attributes["image_size"] = ir.AttrInt64s("image_size", [h, w])
        result.fired.append(f"{node.name} reads rows")

    def _drop(self, node, rows, replaced, result):
        """An Im2Col of a 1x1 kernel at stride 1, or a move to rows [N, H, W, C]: its output
        is the rows. What the Im2Col fed, its layer up to the move to NCHW, now reads rows
        of rank 4: their shapes are inferred again."""
        r = rows[node.inputs[0]]
        readers = g.users(node.outputs[0])
        ir.convenience.replace_all_uses_with(node.outputs[0], r)
        node.graph.remove(node, safe=True)
        if len(g.dims(node.outputs[0])) != 4:
            _infer_layer(readers)
        result.fired.append(f"{node.name} dropped: its output is the rows")

    def _flatten(self, node, rows, replaced, result):
        """A move to rows [N, H*W, C] (ConvTranspose's input): a reshape of the rows."""
        node.replace_input_with(0, rows[node.inputs[0]])
        node.attributes["perm"] = ir.AttrInt64s("perm", [0, 1, 2, 3])
        result.fired.append(f"{node.name} reshapes the rows")

    def _window(self, node, rows, replaced, result):
        n, c, oh, ow = g.dims(node.outputs[0])
        new = self._replace(node, [rows[node.inputs[0]]] + list(node.inputs[1:]),
                            [n, oh, ow, c], replaced, layout="nhwc",
                            image_size=g.dims(node.inputs[0])[2:])
        rows[node.outputs[0]] = new.outputs[0]
        result.fired.append(f"{new.name} on rows")

    def _remap(self, node, rows, replaced, result):
        n, c, h, w = g.dims(node.outputs[0])
        new = self._replace(node, [rows[node.inputs[0]]], [n, h, w, c], replaced,
                            **_rows_attrs(node))
        rows[node.outputs[0]] = new.outputs[0]
        result.fired.append(f"{new.name} on rows")

    def _join(self, node, rows, replaced, result):
        n, c, h, w = g.dims(node.outputs[0])
        new = self._replace(node, [rows[v] for v in node.inputs], [n, h, w, c], replaced,
                            axis=3)
        rows[node.outputs[0]] = new.outputs[0]
        result.fired.append(f"{new.name} on rows")

    def _replace(self, node, inputs, shape, replaced, **attrs):
        """A copy of `node` reading `inputs`, its attributes changed by `attrs`, output
        `shape`; inserted before it. The original goes once nothing reads it."""
        kept = {k: a for k, a in node.attributes.items() if k not in attrs}
        new = ir.Node(node.domain, node.op_type, inputs,
                      list(kept.values()) + g.attributes(attrs), name=node.name)
        node.name = f"{node.name}/nchw"                  # goes once nothing reads it
        new.outputs[0].name = self.builder.names(f"{node.outputs[0].name}/rows")
        new.outputs[0].type = node.outputs[0].type
        new.outputs[0].shape = ir.Shape(shape)
        g.copy_annotations(node, new)
        node.graph.insert_before(node, new)
        replaced.append(node)
        return new

    def _back_to_nchw(self, graph, rows, sizes, needed, seeds):
        """A move to NCHW for every value in `needed` (a seed stays for it instead).
        Returns the moves added."""
        added = 0
        for v in rows:                  # in graph order: the same names at every run
            made = v.producer()
            if v not in needed or made in seeds:
                continue
            r, (h, w) = rows[v], sizes[v]
            back = g.make_node(DOMAIN, "DimTransform", [r],
                               {"perm": [0, 3, 1, 2], "shape": [0, g.dims(r)[3], h, w]},
                               "", dtype=v.dtype, shape=g.dims(v))
            g.copy_annotations(r.producer(), back)
            if g.source(back) is None:
                g.set_source(back, r.producer().name, r.producer().op_type)
            back.name = self.builder.names(f"{g.source(back)}/to_nchw")
            graph.insert_after(r.producer(), back)
            g.take_over(v, back.outputs[0])
            added += 1
        return added


# --- the plan ---------------------------------------------------------------------------------

def _plan(graph, pinned):
    """({NCHW value that will have rows: (H, W)}, {node: its rewrite}, {node name: why it
    keeps NCHW}) for a graph in which the values `pinned` are needed in NCHW."""
    sizes, plan, refused = {}, {}, {}
    for node in graph:
        size = _to_nchw(node)
        if size is not None:
            sizes[node.outputs[0]] = size
            continue
        if not any(v in sizes for v in node.inputs if v is not None):
            continue
        rewrite, why = _choose(node, sizes, pinned)
        if why is not None:
            refused[node.name] = why
            continue
        plan[node] = rewrite
        if rewrite not in (ChannelsLast._im2col, ChannelsLast._drop, ChannelsLast._flatten):
            sizes[node.outputs[0]] = tuple(g.dims(node.outputs[0])[2:])
    return sizes, plan, refused


def _choose(node, sizes, pinned):
    """(the rewrite of a node reading rows, None), or (None, why it keeps NCHW)."""
    if node.domain == DOMAIN and node.op_type == "Im2Col":
        return _check_im2col(node)
    if _is_to_rows(node):
        return (ChannelsLast._drop if len(g.dims(node.outputs[0])) == 4 else
                ChannelsLast._flatten), None
    rewrite, why = _choose_rows_maker(node, sizes)
    if why is not None:
        return None, why
    out = node.outputs[0]
    if out in pinned and len([v for v in node.inputs if v in sizes]) == 1 and not any(
            u.domain == DOMAIN and u.op_type == "Im2Col" for u in g.users(out)):
        return None, "its output is needed in NCHW, and no Im2Col reads it"
    return rewrite, None


def _choose_rows_maker(node, sizes):
    """(the rewrite making rows of a node's output, None), or (None, why it cannot)."""
    elementwise = _is_elementwise(node)
    window = node.domain == DOMAIN and node.op_type in WINDOW_PRIMITIVES
    join = (node.domain == DOMAIN and node.op_type == "Join") or g.is_op(node, "Concat")
    remap = node.domain == DOMAIN and node.op_type in ("Crop", "Reduce", "AxisResample")
    if _is_dim_transform(node):
        return None, "DimTransform reads NCHW (its element order depends on the layout)"
    if not (elementwise or window or join or remap):
        return None, f"{node.op_type} is not known to the layout pass: it reads NCHW"
    if _image_dims(node.outputs[0]) is None:
        return None, "its output is not an image of fixed channels and size"
    out = tuple(g.dims(node.outputs[0])[2:])
    if elementwise:
        why = _check_elementwise(node, sizes, out)
        return (None, why) if why else (ChannelsLast._elementwise, None)
    if window:
        return ChannelsLast._window, None
    if remap:
        if _rows_attrs(node) is None:
            return None, f"{node.op_type} over these axes has no rows form"
        return ChannelsLast._remap, None
    if node.attributes.get_int("axis", 0) not in (1, -3):
        return None, "it does not join channels"
    if any(sizes.get(v) != out for v in node.inputs):
        return None, "not every input is rows of an image of its size"
    return ChannelsLast._join, None


def _rows_attrs(node):
    """The attributes that make a Crop of channels, a Reduce over the pixels (dims kept) or
    an AxisResample work on the rows' axes, else None. (A reduction over channels, a
    softmax's, would run on rows too; it keeps NCHW so far.)"""
    a = _attrs(node)
    if node.op_type == "AxisResample":     # resizing along H or W, or a pick of channels
        return {"axis": [0, 3, 1, 2][int(a["axis"])]}
    axes = tuple(sorted(int(x) for x in a["axes"]))
    if node.op_type == "Crop":
        return {"axes": [3]} if axes == (1,) else None
    return {"axes": [1, 2]} if axes == (2, 3) and a["keepdims"] else None


def _check_im2col(node):
    a = _attrs(node)
    pointwise = list(a["kernel_shape"]) == [1, 1] and not any(a["pads"])
    if pointwise and list(a["strides"]) == [1, 1] and not a.get("blocks_first"):
        return ChannelsLast._drop, None                 # the rows are its rows
    return ChannelsLast._im2col, None


def _check_elementwise(node, sizes, out):
    """Why an elementwise node cannot run on rows, or None."""
    for v in _operands(node):
        if v is None:
            continue
        if v in sizes:
            if sizes[v] not in ((1, 1), out):
                return "an operand broadcasts over height or width alone"
            continue
        c = g.constant(v)
        if c is None:
            return f"operand {v.name} is NCHW, not a matrix layer's rows"
        if _constant_rows(c, out) is None:
            return f"constant {v.name} of shape {list(c.shape)} has no rows form"
    for v in node.inputs[len(_operands(node)):]:
        c = g.constant(v)
        if c is None or (node.op_type != "QLut" and c.size != 1):
            return f"{v.name} is not a constant of one element"
    return None


def _operands(node):
    """The inputs of an elementwise node that take its layout: all of a plain op's; a
    primitive's first (the rest are a scale, or QLut's table)."""
    return node.inputs if node.domain != DOMAIN else node.inputs[:1]


def _to_nchw(node):
    """(H, W) when `node` moves a matrix layer's rows, [N, H*W, C] or [N, H, W, C] (a
    layer reading the rows as they are: _drop), to [N, C, H, W], else None."""
    if not _is_dim_transform(node):
        return None
    perm = list(node.attributes.get_ints("perm", []))
    x, y = g.dims(node.inputs[0]), _image_dims(node.outputs[0])
    if x is None or y is None:
        return None
    n, c, h, w = y
    if (perm, x[1:]) not in (([0, 2, 1], [h * w, c]), ([0, 2, 1], [h, w, c]),
                             ([0, 3, 1, 2], [h, w, c])):
        return None
    return h, w


def _is_to_rows(node):
    """Whether `node` moves an NCHW image [N, C, H, W] to its rows, [N, H*W, C] or
    [N, H, W, C]."""
    if not _is_dim_transform(node) or list(node.attributes.get_ints("perm", [])) != [0, 2, 3, 1]:
        return False
    x, y = _image_dims(node.inputs[0]), g.dims(node.outputs[0])
    return x is not None and y is not None and y[1:] in ([x[2] * x[3], x[1]],
                                                           [x[2], x[3], x[1]])


def _is_elementwise(node):
    return g.is_op(node, *g.ELEMENTWISE) or (node.domain == DOMAIN and
                                           node.op_type in g.ELEMENTWISE_PRIMITIVES)


def _infer_layer(readers):
    """Infers again the output shapes of a layer's primitives from `readers` on, up to its
    moves (DimTransform), after their input changed rank."""
    todo = list(readers)
    while todo:
        node = todo.pop(0)
        if node.domain != DOMAIN or _is_dim_transform(node):
            continue
        prim = get_primitive(node.op_type)
        shapes = prim.infer([g.dims(v) for v in node.inputs],
                            {k: a.value for k, a in node.attributes.items()})
        for v, shape in zip(node.outputs, shapes):
            v.shape = ir.Shape(shape)
            todo.extend(g.users(v))


def _is_dim_transform(node):
    return node.domain == DOMAIN and node.op_type == "DimTransform"


def _image_dims(value):
    """[N, C, H, W] of a 4-D value whose C, H and W are fixed, else None."""
    d = g.dims(value)
    if d is None or len(d) != 4 or not all(isinstance(x, int) for x in d[1:]):
        return None
    return d


def _constant_rows(c, size):
    """A constant operand of an NCHW image of `size` (H, W), as the operand of its rows:
    `c` itself when it is one element, None when it has no rows form (rank over 4, or
    varying over height or width alone)."""
    if c.size == 1 and c.ndim <= 4:
        return c
    if c.ndim > 4:
        return None
    a, b, h, w = (1,) * (4 - c.ndim) + c.shape
    if (h, w) not in ((1, 1), tuple(size)):
        return None
    return np.ascontiguousarray(c.reshape(a, b, h, w).transpose(0, 2, 3, 1))


def _attrs(node):
    prim = get_primitive(node.op_type)
    return prim.attrs_of({k: a.value for k, a in node.attributes.items()})


def tensors_as_nchw(model_proto, tensors):
    """{name: array} of tensors fetched from a lowered model, those it holds as rows
    [N, H, W, C] (graph.set_rows_size) given back as the model's NCHW arrays."""
    sizes = {n.output[0]: g.proto_rows_size(n) for n in model_proto.graph.node
             if g.proto_rows_size(n) is not None}
    out = dict(tensors)
    for name, size in sizes.items():
        if name in out:
            x = out[name]
            out[name] = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return out
