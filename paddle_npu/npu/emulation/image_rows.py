"""Which 1x1 layers' rows onnxruntime is to run as images: a choice of function bodies.

A VMM reading rows [N, H, W, C] with one weight tile [R, M] (a 1x1 layer kept channels-last
by the layout pass, channels_last.py) computes what a 1x1 Conv does. Next to what
onnxruntime runs as an image anyway (a depthwise or pooling layer's Conv or pool, in its
blocked layout), a 1x1 Conv body lets it keep that layout and cancel the transposes between
them; between layers that gather their rows (Im2Col) a Conv body would only add moves into
its blocked layout and out of it, and the MatMul stays. The program is the same either way.
"""
from .. import graph as g
from ..ops import DOMAIN, get_primitive
from ..ops.pool import is_global


def image_rows(graph):
    """The values that 1x1 layers' VMMs (`_reads_rows`) read as images, their float32
    bodies 1x1 Convs: those next to what onnxruntime runs as an image anyway, a depthwise or
    pooling layer or another such 1x1 layer, through elementwise ops (all of whose operands
    are such images, but constants and per-image gates [N, 1, 1, C]) and AddInTile, before
    or after."""
    images, marked = set(), set()
    for node in graph:
        x = node.inputs[0] if node.inputs else None
        if _is_image_op(node) or (_keeps_layout(node) and _of_images(node, images)):
            images.update(node.outputs)
        elif _reads_rows(node) and (x in marked or x in images or _feeds_image_op(node)):
            marked.add(x)           # (a layer's other bands read the same rows)
            images.update(node.outputs)
    return marked


def _reads_rows(node):
    """Whether a node is a VMM reading rows [N, H, W, C] with one weight tile [R, M]."""
    if node.domain != DOMAIN or node.op_type != "VMM":
        return False
    x, w = node.inputs[0], node.inputs[1]
    return len(g.dims(x) or ()) == 4 and w is not None and w.shape is not None and \
        len(w.shape) == 2


def _of_images(node, images):
    """Whether a node's operands, but constants and per-image gates, are all `images`."""
    operands = [v for v in node.inputs if v is not None and g.constant(v) is None and
                (g.dims(v) or [])[1:3] != [1, 1]]
    return bool(operands) and all(v in images for v in operands)


def _is_image_op(node):
    """What onnxruntime runs as its own Conv or pool, in its image layout: DepthwiseConv,
    and a Pool but a global one (a Reduce over the pixels)."""
    if node.domain != DOMAIN or node.op_type not in ("DepthwiseConv", "Pool"):
        return False
    attrs = {k: a.value for k, a in node.attributes.items()}
    return node.op_type == "DepthwiseConv" or \
        not is_global(get_primitive("Pool").attrs_of(attrs))


def _keeps_layout(node):
    """Elementwise ops, and AddInTile (summing a layer's tiles)."""
    return g.is_op(node, *g.ELEMENTWISE) or (node.domain == DOMAIN and (
        node.op_type in g.ELEMENTWISE_PRIMITIVES or node.op_type == "AddInTile"))


def _feeds_image_op(node):
    """Whether a node's output reaches a depthwise or pooling layer through elementwise ops."""
    todo, seen = list(node.outputs), set()
    while todo:
        v = todo.pop()
        for user in g.users(v):
            if _is_image_op(user):
                return True
            if _keeps_layout(user) and user not in seen:
                seen.add(user)
                todo.extend(user.outputs)
    return False
