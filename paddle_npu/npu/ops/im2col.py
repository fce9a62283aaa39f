"""Im2Col: an image to the rows a crossbar array multiplies (reshape_2 in the original op list)."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


# The layouts of an image a spatial primitive (Im2Col, Pool, DepthwiseConv) reads: "nchw", or
# "nhwc": [N, H, W, C], a matrix layer's rows as they come out of it, one pixel a row of
# channels (the layout pass, npu/passes/channels_last.py, keeps images so between layers). The
# attribute `image_size` repeats its height and width for readers without shapes.
LAYOUT_ATTRS = (
    Attr("layout", "string", '"nchw": X is [N, C, H, W]; "nhwc": X is [N, H, W, C], pixel by '
                             "pixel with their channels last", "nchw"),
    Attr("image_size", "ints", '[H, W] of an "nhwc" X (unused for "nchw")', [0, 0]),
)

# A convolution window's attributes (Im2Col's, DepthwiseConv's).
WINDOW_ATTRS = (
    Attr("kernel_shape", "ints", "[KH, KW]"),
    Attr("strides", "ints", "[sh, sw]", [1, 1]),
    Attr("pads", "ints", "[top, left, bottom, right], zeros added around the image "
                         "(ONNX Conv's order)", [0, 0, 0, 0]),
    Attr("dilations", "ints", "[dh, dw]", [1, 1]),
)


def is_nhwc(a):
    return a["layout"] == "nhwc"


def image_dims(shape, a):
    """(N, C, H, W) of the image X of a spatial primitive, whichever its layout."""
    if not is_nhwc(a):
        return tuple(shape)
    n, h, w, c = shape
    return n, c, h, w


def as_nchw(x, a):
    """An image array X as [N, C, H, W], whichever its layout (a view)."""
    return x.transpose(0, 3, 1, 2) if is_nhwc(a) else x


def as_layout(y, a):
    """An NCHW result array in the primitive's layout (contiguous)."""
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if is_nhwc(a) else y


def check_layout(a, shape):
    """Raises on a layout the primitive cannot read."""
    if a["layout"] not in ("nchw", "nhwc"):
        raise ValueError(f"unknown layout {a['layout']!r} (known: nchw, nhwc)")
    if is_nhwc(a) and (len(shape) != 4 or min(a["image_size"]) < 1 or
                       list(shape[1:3]) != list(a["image_size"])):
        raise ValueError(f'an "nhwc" image is [N, H, W, C] with image_size [H, W] '
                         f"(got {list(shape)} and {list(a['image_size'])})")


def out_size(size, k, s, d, p0, p1):
    if not isinstance(size, int):
        return None
    return (size + p0 + p1 - (d * (k - 1) + 1)) // s + 1


def output_size(a, h, w):
    """(OH, OW): the windows of a kernel (attributes `a`) down and across an h x w image
    (None where a size is left open)."""
    (kh, kw), (sh, sw) = a["kernel_shape"], a["strides"]
    (dh, dw), (pt, pl, pb, pr) = a["dilations"], a["pads"]
    return out_size(h, kh, sh, dh, pt, pb), out_size(w, kw, sw, dw, pl, pr)


def column_source(channels, taps, block):
    """Where Im2Col's columns come from: for each column in the order `channel_block` gives,
    the column c * taps + tap that holds the same value channel by channel (block 0). A
    kernel matrix's rows [C * taps, M] taken in this order multiply those columns."""
    if not block:
        return np.arange(channels * taps)
    out = []
    for c0 in range(0, channels, block):        # each block's channels, tap by tap
        c = np.arange(c0, min(c0 + block, channels))
        out.append((c[None, :] * taps + np.arange(taps)[:, None]).reshape(-1))
    return np.concatenate(out)


@primitive
class Im2Col(Primitive):
    """Unfolds every receptive field of an image into one row: row oh*OW + ow holds
    X[n, c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw] at column c*KH*KW + kh*KW + kw, zero
    where that falls in the padding. Multiplying the rows by the kernel matrix
    W.reshape(M, C*KH*KW)^T is the convolution. The image is NCHW, or (layout "nhwc") the
    previous matrix layer's rows as they are, [N, H, W, C].

    With `channel_block` B the columns come in another order: the channels in blocks of B
    (the last block what is left, C mod B), each block tap by tap: channel b*B + j of block b
    of n channels at column b*KH*KW*B + (kh*KW + kw)*n + j (the kernel matrix's rows taken in
    the same order: column_source). B = C is tap by tap, each tap's pixel with its channels
    side by side: what a gather of whole pixels gives as it is, where channel by channel
    needs every value moved once more. A block order needs the image's height and width
    fixed.

    With `blocks_first` as well, Y is [N, ceil(C / B), OH*OW, KH*KW*B]: block b's rows on
    their own, every block B channels (the last filled up with zero channels), each tap by
    tap as above: the rows of a stack of alike tiles, one block each (VMM with a stacked W)."""

    inputs = (Arg("X", "image [N, C, H, W], or [N, H, W, C] in the nhwc layout"),)
    outputs = (Arg("Y", "rows [N, OH*OW, C*KH*KW] ([N, blocks, OH*OW, KH*KW*B] blocks first)"),)
    attributes = WINDOW_ATTRS + (
        Attr("channel_block", "int", "0: the columns channel by channel; B: blocks of B "
                                     "channels, each tap by tap", 0),
        Attr("blocks_first", "int", "1: each channel_block's rows on their own (a leading "
                                    "axis of blocks)", 0),
    ) + LAYOUT_ATTRS

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        check_layout(a, in_shapes[0])
        n, c, h, w = image_dims(in_shapes[0], a)
        check_block(a, c, h, w)
        kh, kw = a["kernel_shape"]
        oh, ow = output_size(a, h, w)
        rows = oh * ow if oh is not None and ow is not None else None
        if a["blocks_first"]:
            block = a["channel_block"]
            return [[n, -(-c // block), rows, kh * kw * block]]
        cols = c * kh * kw if isinstance(c, int) else None
        return [[n, rows, cols]]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        check_layout(a, inputs[0].shape)
        x = as_nchw(inputs[0], a)
        n, c, h, w = x.shape
        check_block(a, c, h, w)
        block = a["channel_block"]
        if a["blocks_first"]:           # the channels filled up to whole blocks, then split
            count = -(-c // block)
            whole = np.zeros((n, count * block, h, w), dtype=x.dtype)
            whole[:, :c] = x
            rows = cls.reference(array, [whole], {**a, "blocks_first": 0, "layout": "nchw"})[0]
            return [np.ascontiguousarray(rows.reshape(n, rows.shape[1], count, -1)
                                         .transpose(0, 2, 1, 3))]
        (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
        pt, pl, pb, pr = a["pads"]
        xp = x
        if any(a["pads"]):
            xp = np.zeros((n, c, h + pt + pb, w + pl + pr), dtype=x.dtype)
            xp[:, :, pt:pt + h, pl:pl + w] = x
        oh, ow = output_size(a, h, w)
        taps = kernel_taps((kh, kw), (sh, sw), (dh, dw), (oh, ow))
        if (kh, kw) == (1, 1):         # one tap: the (strided) image channels-last, as a view
            _, _, rows, cols = next(taps)
            # (what reads the rows copies them into its own type anyway)
            out = xp[:, :, rows, cols].transpose(0, 2, 3, 1)
        elif block:         # the full blocks [.., C // B, KH, KW, B], then the rest's
            full = c // block * block
            out = np.empty((n, oh, ow, c * kh * kw), dtype=x.dtype)
            blocks = out[..., :full * kh * kw].reshape(n, oh, ow, -1, kh, kw, block)
            rest = out[..., full * kh * kw:].reshape(n, oh, ow, kh, kw, c - full)
            for i, j, rows, cols in taps:
                pixels = xp[:, :, rows, cols].transpose(0, 2, 3, 1)      # [N, OH, OW, C]
                blocks[:, :, :, :, i, j] = pixels[..., :full].reshape(n, oh, ow, -1, block)
                rest[:, :, :, i, j] = pixels[..., full:]
        else:
            out = np.empty((n, oh, ow, c, kh, kw), dtype=x.dtype)
            for i, j, rows, cols in taps:
                out[:, :, :, :, i, j] = xp[:, :, rows, cols].transpose(0, 2, 3, 1)
        rows = out.reshape(n, oh * ow, c * kh * kw)
        array.moved_elements += rows.size
        return [rows]


def check_block(a, channels, h, w):
    """Raises on a channel_block the image cannot be read by."""
    block = a["channel_block"]
    if block < 0:
        raise ValueError(f"channel_block {block} is negative")
    if block and not all(isinstance(v, int) for v in (channels, h, w)):
        raise ValueError(f"a channel_block needs the image's channels, height and width "
                         f"fixed (got {channels}, {h}, {w})")
    if a["blocks_first"] and not block:
        raise ValueError("blocks_first needs a channel_block")


def kernel_taps(kernel, strides, dilations, out):
    """(i, j, rows, cols) per kernel tap: the slices of a padded image that tap (i, j) of
    every window reads, one strided view per tap instead of a loop over windows."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dilations, out
    for i in range(kh):
        for j in range(kw):
            yield (i, j, slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                   slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def resolve_pads(node, spatial, kernel, strides, dilations):
    """A window node's (Conv, pooling) explicit [begin..., end...] pads, auto_pad resolved
    (the input's spatial dims static)."""
    n = len(kernel)
    auto = node.attributes.get_string("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(node.attributes.get_ints("pads", [0] * 2 * n))
    if auto == "VALID":
        return [0] * 2 * n
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end
