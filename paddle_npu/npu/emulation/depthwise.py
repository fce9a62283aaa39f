"""DepthwiseConv's and QDepthwiseConv's function bodies."""
from ..ops.im2col import image_dims, is_nhwc, output_size
from .body import DOUBLE, Emulated, config_tag, emulates
from .im2col import Im2Col, padded_pixels, window_coords
from .quant import acc_type
from .reduce import reduce


@emulates("DepthwiseConv")
class DepthwiseConv(Emulated):
    """The exact body gathers the windows as Im2Col's nhwc body does and sums the taps'
    products in float64 (`_tap_sums`), rounded once to X's type; the float32 body is
    onnxruntime's own Conv with a group per channel."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        n, c, h, w = image_dims(in_shapes[0], a)
        bias = len(in_shapes) > 2 and in_shapes[2] is not None
        parts = [(k, [int(i) for i in a[k]]) for k in ("kernel_shape", "strides", "pads",
                                                       "dilations", "image_size")]
        return f"{a['layout']}_{config_tag(parts, c, h, w, bias)}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = b.op("CastLike", _tap_sums(b, attrs, in_shapes), "X")
        if len(in_shapes) > 2 and in_shapes[2] is not None:
            y = b.op("Add", y, b.op("CastLike", "B", "X"))
        _image_out(b, attrs, in_shapes, y)

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        """onnxruntime's Conv with a group per channel (it convolves NCHW: an nhwc image
        goes there and back, by transposes onnxruntime cancels against its neighbours')."""
        c = image_dims(in_shapes[0], attrs)[1]
        x = b.op("Transpose", "X", perm=[0, 3, 1, 2]) if is_nhwc(attrs) else "X"
        bias = "B" if len(in_shapes) > 2 and in_shapes[2] is not None else None
        y = b.op("Conv", x, "W", *([bias] if bias else []), group=c,
                 kernel_shape=list(attrs["kernel_shape"]), strides=list(attrs["strides"]),
                 pads=list(attrs["pads"]), dilations=list(attrs["dilations"]),
                 out=None if is_nhwc(attrs) else "Y")
        if is_nhwc(attrs):
            b.op("Transpose", y, perm=[0, 2, 3, 1], out="Y")


@emulates("QDepthwiseConv")
class QDepthwiseConv(Emulated):
    """The taps' products summed in float64, which holds every such sum exactly, then cast
    to the accumulator's type."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"{DepthwiseConv.overload(attrs, in_shapes)}_acc{cls.attrs_of(attrs)['acc_bits']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = b.op("Cast", _tap_sums(b, attrs, in_shapes), to=acc_type(attrs["acc_bits"]))
        if len(in_shapes) > 2 and in_shapes[2] is not None:
            y = b.op("Add", y, "B")
        _image_out(b, attrs, in_shapes, y)


def _tap_sums(b, attrs, in_shapes):
    """The windows of X in float64 gathered as Im2Col's nhwc body gathers them,
    [N, OH*OW, KH*KW, C], times the taps and summed over them: [N, OH*OW, C]."""
    n, c, h, w = image_dims(in_shapes[0], attrs)
    (kh, kw), (_, pl, _, pr) = attrs["kernel_shape"], attrs["pads"]
    oh, ow = output_size(attrs, h, w)
    x = b.op("Cast", "X", to=DOUBLE)
    if not is_nhwc(attrs):                                  # the image [N, H, W, C]
        x = b.op("Transpose", x, perm=[0, 2, 3, 1])
    pixels = padded_pixels(b, x, c, attrs["pads"])
    rows, cols = window_coords(attrs, oh, ow)
    windows = Im2Col.gather_blocks(b, pixels, (rows * (w + pl + pr), cols), 1)
    taps = b.op("Transpose", b.op("Reshape", b.op("Cast", "W", to=DOUBLE),
                                  b.const([c, kh * kw])), perm=[1, 0])     # [KH*KW, C]
    return reduce(b, "sum", b.op("Mul", windows, taps), [2], 0)


def _image_out(b, attrs, in_shapes, y):
    """Y from its pixels [N, OH*OW, C], in the primitive's layout."""
    n, c, h, w = image_dims(in_shapes[0], attrs)
    oh, ow = output_size(attrs, h, w)
    y = b.op("Reshape", y, b.const([0, oh, ow, c]))
    if not is_nhwc(attrs):
        y = b.op("Transpose", y, perm=[0, 3, 1, 2])
    b.output(y, "Y")
