"""Im2Col's function bodies: gathers of an image's pixels by index tables made at lowering."""
import numpy as np
from onnx import TensorProto, numpy_helper

from ..ops.im2col import column_source, image_dims, is_nhwc, output_size
from .body import Emulated, config_tag, emulates, float_input_attrs


def _height_width(in_shapes, a):
    """The image's height and width as the lowering knows them (a str or None: left open)."""
    if is_nhwc(a):
        return tuple(a["image_size"])
    shape = in_shapes[0] if in_shapes else None
    return (shape[2], shape[3]) if shape is not None and len(shape) == 4 else (None, None)


# The fixed-size bodies hold their index table in the model. Past this many entries (1 MiB of
# int32; a 3x3 kernel on a 640x640 image needs 3.7 M) they hold its row and column terms
# instead, which onnxruntime adds up once, at session creation: the file stays small, and no
# run computes the table (the generic body does, with a Transpose of the whole image).
TABLE_LIMIT = 1 << 18


def index_table(b, rows, cols, shape):
    """The Constant (or constant expression) of an int32 index table rows + cols (arrays that
    broadcast), reshaped to `shape`. The table itself up to TABLE_LIMIT entries, else the
    terms and the Add that makes it from them, for onnxruntime to fold."""
    def const(a):
        return b.op("Constant", value=numpy_helper.from_array(np.asarray(a, np.int32)))

    if np.prod(np.broadcast_shapes(rows.shape, cols.shape)) <= TABLE_LIMIT:
        return const((rows + cols).reshape(shape))
    return b.op("Reshape", b.op("Add", const(rows), const(cols)), b.const(list(shape)))


@emulates("Im2Col")
class Im2Col(Emulated):
    """The rows gathered from the (padded) image by one Gather of whole pixels (or of whole
    blocks of channels) per window tap, by an index table computed at lowering where the
    image's height and width are fixed (`index_table`), at run time where they are not
    (`_generic_body`). An int16 image is padded in int32 (onnxruntime's Pad has no int16
    kernel): the same integers."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        h, w = _height_width(in_shapes, a)
        nhwc = "nhwc_" if is_nhwc(a) else ""
        channels = image_dims(in_shapes[0], a)[1] if in_shapes and in_shapes[0] else None
        # Every node of an overload calls one function, so the name holds all its body bakes
        # in. The channel count is baked into an nhwc body (its pixels are Reshapes to C
        # values) and into a few-channel picture's one-hot Conv (float32_body); an nchw
        # gather of whole pixels leaves it open. An int16 image's body pads in int32.
        pixels = "_einsum_pixels" if _pixels_by_einsum({**attrs, **a}, channels) else ""
        channel_tag = f"c{channels}_" if nhwc or pixels else ""
        pixels += "_int16" if attrs.get("_int16") else ""
        if list(a["kernel_shape"]) == [1, 1] and not any(a["pads"]) and not a["blocks_first"]:
            sh, sw = a["strides"]
            size = f"_{h}x{w}" if nhwc and (sh, sw) != (1, 1) else ""
            return f"pointwise_{nhwc}{channel_tag}s{sh}x{sw}{size}{pixels}"
        # a block's body holds the blocks per pixel: the channels are part of it
        order = f"_b{a['channel_block']}of{channels}" if a["channel_block"] else \
            "_einsum" if attrs.get("_float") else ""
        order += "_first" if a["blocks_first"] else ""
        if isinstance(h, int) and isinstance(w, int):       # (an nhwc image always is)
            return f"fixed_{nhwc}{h}x{w}_{channel_tag}" + config_tag(
                a["kernel_shape"], a["strides"], a["pads"], a["dilations"]) + order + pixels
        return pixels[1:]

    @classmethod
    def input_attrs(cls, inputs, images=()):
        """{"_float": True} when X is float32 or float64: the fixed-size bodies then swap
        taps and channels with an Einsum, not a Transpose: onnxruntime's Einsum is the
        faster of the two there (it has no int8 kernel: an int8 image keeps the Transpose).
        A picture's few channels move channels-last by one too (_pixels_by_einsum).
        {"_int16": True} when X is int16: the bodies pad it in int32 (`pad`)."""
        x = inputs[0] if inputs else None
        if x is not None and x.dtype is not None and int(x.dtype) == TensorProto.INT16:
            return {"_int16": True}
        return float_input_attrs(inputs)

    @staticmethod
    def _channels_last(b, attrs, x, channels):
        """[N, C, P] -> [N, P, C]: an NCHW image's pixels, channels last."""
        if _pixels_by_einsum(attrs, channels):
            return b.op("Einsum", x, equation="ncp->npc")
        return b.op("Transpose", x, perm=[0, 2, 1])

    @staticmethod
    def _channels_first(b, attrs, g):
        """[N, OH*OW, KH*KW, C] -> [N, OH*OW, C, KH*KW] (the columns channel by channel)."""
        if attrs.get("_float"):
            return b.op("Einsum", g, equation="npkc->npck")
        return b.op("Transpose", g, perm=[0, 1, 3, 2])

    @classmethod
    def _gather(cls, b, attrs, pixels, rows, cols, channels):
        """Y from `pixels` [N, P, C] (a padded image's pixels, channels last) and the pixel
        each tap of each window reads, rows + cols (window_coords' shapes, [OH, OW, KH, KW]
        once added): channel by channel, one Gather of whole pixels and the columns moved
        after it; with a channel_block, one Gather of whole blocks of channels (and one of
        the last, smaller block); blocks first, one Gather of the blocks' rows one block
        after another (the channels filled up to whole blocks first)."""
        (kh, kw), block = attrs["kernel_shape"], attrs["channel_block"]
        oh, ow = rows.shape[0], cols.shape[1]
        table = (rows, cols)
        if attrs.get("blocks_first"):       # (the pixels' channels filled up: _channel_fill)
            # whole pixels by the table of the windows' taps, then the blocks moved first: a
            # table of every block's rows would be 4 bytes per row entry (a block of one
            # channel: 4 GB for one 3x3 layer of 128 channels on a 960x960 image)
            count = -(-channels // block)
            g = cls.gather_blocks(b, pixels, table, 1)          # [N, OH*OW, KH*KW, C]
            g = b.op("Reshape", g, b.const([0, oh * ow, kh * kw, count, block]))
            g = b.op("Transpose", g, perm=[0, 3, 1, 2, 4])
            b.op("Reshape", g, b.const([0, count, oh * ow, -1]), out="Y")
            return
        if not block:
            g = cls.gather_blocks(b, pixels, table, 1)             # [N, OH*OW, KH*KW, C]
            if kh * kw > 1:
                g = cls._channels_first(b, attrs, g)
            b.op("Reshape", g, b.const([0, oh * ow, -1]), out="Y")
            return
        full, rest = divmod(channels, block)
        parts = []
        for first, count, size in ((0, full, block), (full * block, 1 if rest else 0, rest)):
            if not count:
                continue
            part = pixels if size == channels else b.op(
                "Slice", pixels, b.const([first]), b.const([first + count * size]),
                b.const([2]))
            parts.append(cls.gather_blocks(b, part, table, count, size))
        if len(parts) == 1:                                     # [N, OH*OW, n*KH*KW, B]
            b.op("Reshape", parts[0], b.const([0, oh * ow, -1]), out="Y")
        else:
            b.op("Concat", *(b.op("Reshape", g, b.const([0, oh * ow, -1])) for g in parts),
                 axis=-1, out="Y")

    @staticmethod
    def gather_blocks(b, pixels, table, count, size=None):
        """Gather(pixels, the table) of whole pixels [N, OH*OW, KH*KW, C], or of `count`
        blocks of `size` channels a pixel, block by block: [N, OH*OW, count*KH*KW, size]."""
        rows, cols = table
        oh, ow = rows.shape[0], cols.shape[1]
        shape = [oh * ow, -1]
        if count > 1:       # a block axis after the window's: [OH, OW, count, KH, KW]
            rows, cols = rows[:, :, None] * count, cols[:, :, None] * count
            cols = cols + np.arange(count).reshape(1, 1, -1, 1, 1)
            pixels = b.op("Reshape", pixels, b.const([0, -1, size]))
        return b.op("Gather", pixels, index_table(b, rows, cols, shape), axis=1)

    @classmethod
    def body(cls, b, attrs, in_shapes):
        overload = cls.overload(attrs, in_shapes)
        channels = image_dims(in_shapes[0], attrs)[1]
        if overload.startswith("pointwise"):
            cls._pointwise_body(b, attrs, channels)
        elif overload.startswith("fixed_nhwc"):
            cls._nhwc_body(b, attrs, channels)
        elif overload.startswith("fixed"):
            cls._fixed_size_body(b, attrs, *_height_width(in_shapes, attrs), channels)
        else:
            cls._generic_body(b, attrs, channels)

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        """A float picture's few channels (fewer than 8) gathered by onnxruntime's Conv with
        one-hot filters (filter j picks column j's channel at its tap) where that takes few
        products (KH*KW*C at most ONE_HOT_COLUMNS); else the body. On finite input the rows
        are the gather's, bit for bit (each value times one, plus zeros); an Inf in the
        picture turns its windows' other columns NaN (Inf x 0), where the exact body moves
        it. A network's first layer gathers the largest image: the Conv is faster there than
        the Pad, Einsum and Gather of the body."""
        channels = image_dims(in_shapes[0], attrs)[1]
        if not _one_hot(attrs, in_shapes, channels):
            cls.body(b, attrs, in_shapes)
            return
        (kh, kw), block = attrs["kernel_shape"], attrs["channel_block"]
        taps = kh * kw
        cols = channels * taps
        source = column_source(channels, taps, block)      # column j reads c*taps + tap
        filters = np.zeros((cols, channels * taps), np.float32)
        filters[np.arange(cols), source] = 1
        w = b.op("Constant", value=numpy_helper.from_array(
            filters.reshape(cols, channels, kh, kw), "one_hot"))
        y = b.op("Conv", "X", w, kernel_shape=[kh, kw], strides=list(attrs["strides"]),
                 pads=list(attrs["pads"]), dilations=list(attrs["dilations"]))
        oh, ow = output_size(attrs, *_height_width(in_shapes, attrs))
        b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 3, 1]), b.const([0, oh * ow, cols]),
             out="Y")

    @classmethod
    def _pointwise_body(cls, b, attrs, channels):
        """A 1x1 kernel without padding: the (strided) image moved channels-last (an nhwc
        image already is: at stride 1 its pixels are the rows)."""
        sh, sw = attrs["strides"]
        if is_nhwc(attrs):
            if (sh, sw) == (1, 1):
                b.op("Reshape", "X", b.const([0, -1, channels]), out="Y")
            else:
                cls._nhwc_body(b, attrs, channels)
            return
        x = "X"
        if (sh, sw) != (1, 1):
            big = np.iinfo(np.int64).max
            x = b.op("Slice", x, b.const([0, 0]), b.const([big, big]), b.const([2, 3]),
                     b.const([sh, sw]))
        flat = b.op("Reshape", x, b.const([0, 0, -1]))                 # [N, C, OH*OW]
        b.op("Identity", cls._channels_last(b, attrs, flat, channels), out="Y")

    @classmethod
    def _fixed_size_body(cls, b, attrs, h, w, channels):
        """Height and width fixed at lowering: the generic body's gather with its index
        table computed here, once, and held as a constant (the batch may stay open;
        onnxruntime folds no Shape of a tensor whose batch is open, so the generic body
        would compute the table again at every run)."""
        (_, pl, _, pr) = attrs["pads"]
        oh, ow = output_size(attrs, h, w)
        rows, cols = window_coords(attrs, oh, ow)               # in the padded image
        pixels = cls._nchw_pixels(b, attrs, channels, _channel_fill(attrs, channels))
        cls._gather(b, attrs, pixels, rows * (w + pl + pr), cols, channels)

    @classmethod
    def _nchw_pixels(cls, b, attrs, channels, fill=0):
        """An NCHW image padded (`fill` zero channels after its own), its pixels
        channels-last: [N, Hp*Wp, C + fill], what a window table indexes."""
        (pt, pl, pb, pr) = attrs["pads"]
        x = pad(b, "X", b.const([0, 0, pt, pl, 0, fill, pb, pr]), attrs.get("_int16")) \
            if any(attrs["pads"]) or fill else "X"
        xp = b.op("Reshape", x, b.const([0, 0, -1]))                         # [N, C, Hp*Wp]
        return cls._channels_last(b, attrs, xp, channels)

    @classmethod
    def _nhwc_body(cls, b, attrs, channels):
        """An nhwc image [N, H, W, C]: padded (Pad copies the image either way), then one
        Gather of whole pixels by a table [OH*OW, KH*KW] made here (a sum of two small
        terms, which onnxruntime folds fastest, past TABLE_LIMIT)."""
        h, w = attrs["image_size"]
        (_, pl, _, pr) = attrs["pads"]
        oh, ow = output_size(attrs, h, w)
        rows, cols = window_coords(attrs, oh, ow)               # in the padded image
        pixels = padded_pixels(b, "X", channels, attrs["pads"], _channel_fill(attrs, channels),
                               attrs.get("_int16"))
        cls._gather(b, attrs, pixels, rows * (w + pl + pr), cols, channels)

    @classmethod
    def _generic_body(cls, b, attrs, channels):
        """The receptive fields as one index table into the padded image (a few small ops on
        the attributes and the image's height and width), gathered channels-last: whole
        pixels (C values) per index."""
        k, s = b.attr("kernel_shape", "ints"), b.attr("strides", "ints")
        d, p = b.attr("dilations", "ints"), b.attr("pads", "ints")
        i0, i1, i2, i4 = b.const([0]), b.const([1]), b.const([2]), b.const([4])
        zero, one, pair0 = b.const(0), b.const(1), b.const([0, 0])
        before, after = b.op("Slice", p, i0, i2), b.op("Slice", p, i2, i4)
        hwp = b.op("Add", b.op("Add", b.op("Shape", "X", start=2), before), after)  # [Hp, Wp]
        span = b.op("Add", b.op("Mul", b.op("Sub", k, one), d), one)
        o = b.op("Add", b.op("Div", b.op("Sub", hwp, span), s), one)          # [OH, OW]

        def coords(axis):   # [O, K]: the padded-image coordinate of output o, kernel tap k
            pick = zero if axis == 0 else one
            start = b.op("Mul", b.op("Range", zero, b.op("Gather", o, pick), one),
                         b.op("Gather", s, pick))
            tap = b.op("Mul", b.op("Range", zero, b.op("Gather", k, pick), one),
                       b.op("Gather", d, pick))
            return b.op("Add", b.op("Unsqueeze", start, i1), b.op("Unsqueeze", tap, i0))

        rows = b.op("Unsqueeze", coords(0), b.const([1, 3]))       # [OH, 1, KH, 1]
        cols = b.op("Unsqueeze", coords(1), b.const([0, 2]))       # [1, OW, 1, KW]
        index = b.op("Add", b.op("Mul", rows, b.op("Gather", hwp, one)), cols)
        index = b.op("Reshape", index, b.const([-1]))              # [OH*OW*KH*KW]

        pads = b.op("Concat", pair0, before, pair0, after, axis=0)
        xp = b.op("Reshape", pad(b, "X", pads, attrs.get("_int16")),
                  b.const([0, 0, -1]))                                      # [N, C, Hp*Wp]
        g = b.op("Gather", cls._channels_last(b, attrs, xp, channels), index, axis=1)
        out_rows = b.op("ReduceProd", o, keepdims=1)                            # [OH*OW]
        taps = b.op("ReduceProd", k, keepdims=1)                                # [KH*KW]
        g = b.op("Reshape", g, b.op("Concat", i0, out_rows, taps, b.const([-1]), axis=0))
        t = b.op("Transpose", g, perm=[0, 1, 3, 2])              # [N, OH*OW, C, KH*KW]
        b.op("Reshape", t, b.op("Concat", i0, out_rows, b.const([-1]), axis=0), out="Y")


def pad(b, x, pads, int16=False):
    """Pad(x, pads) with zeros; an int16 x padded in int32, onnxruntime's Pad having no int16
    kernel (the same integers)."""
    if not int16:
        return b.op("Pad", x, pads)
    wide = b.op("Pad", b.op("Cast", x, to=TensorProto.INT32), pads)
    return b.op("Cast", wide, to=TensorProto.INT16)


def padded_pixels(b, image, channels, pads, fill=0, int16=False):
    """An nhwc image [N, H, W, C] padded (`pads` as a window's), with `fill` zero channels
    after its own: the pixels [N, Hp*Wp, C + fill] a window table indexes."""
    pt, pl, pb, pr = pads
    if any(pads) or fill:
        image = pad(b, image, b.const([0, pt, pl, 0, 0, pb, pr, fill]), int16)
    return b.op("Reshape", image, b.const([0, -1, channels + fill]))


def _pixels_by_einsum(attrs, channels):
    """Whether an NCHW image's pixels move channels-last by an Einsum, not a Transpose: a
    float image of fewer than 8 channels (a picture's, at a network's input), where
    onnxruntime's Einsum after the Pad is the faster; on more channels neither is faster
    throughout, and an int8 image has no Einsum kernel."""
    return bool(attrs.get("_float")) and not is_nhwc(attrs) and isinstance(channels, int) \
        and channels < 8


# The most columns a picture's one-hot Conv body makes (KH*KW*C: 27 for a 3x3 kernel on RGB)
ONE_HOT_COLUMNS = 32


def _one_hot(attrs, in_shapes, channels):
    """Whether Im2Col's float32 body is a one-hot Conv."""
    h, w = _height_width(in_shapes, attrs)
    return _pixels_by_einsum(attrs, channels) and isinstance(h, int) and isinstance(w, int) \
        and not attrs.get("blocks_first") and attrs["channel_block"] in (0, channels) and \
        channels * int(np.prod(attrs["kernel_shape"])) <= ONE_HOT_COLUMNS


def _channel_fill(attrs, channels):
    """The zero channels a blocks-first image gets to whole blocks (0 for other orders)."""
    block = attrs["channel_block"]
    return -channels % block if attrs.get("blocks_first") else 0


def window_coords(a, oh, ow):
    """(rows [OH, 1, KH, 1], cols [1, OW, 1, KW]): the row and the column each tap of each
    window reads, in the padded image."""
    (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
    rows = (np.arange(oh) * sh)[:, None, None, None] + (np.arange(kh) * dh)[None, None, :, None]
    cols = (np.arange(ow) * sw)[None, :, None, None] + (np.arange(kw) * dw)[None, None, None, :]
    return rows, cols
