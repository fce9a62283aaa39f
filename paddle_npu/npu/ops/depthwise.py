"""DepthwiseConv and QDepthwiseConv: a convolution of one channel per group, on the vector
unit, in floats and on integers."""
import numpy as np

from .base import Arg, Attr, Primitive, count_dims, primitive
from .im2col import (LAYOUT_ATTRS, WINDOW_ATTRS, as_layout, as_nchw, check_layout, image_dims,
                     is_nhwc, kernel_taps, output_size)
from .quant import in_accumulator


@primitive
class DepthwiseConv(Primitive):
    """Y[n, c, oh, ow] = sum over the window's taps (kh, kw) of W[c, 0, kh, kw] *
    X[n, c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw] (zero in the padding), + B[c]: a Conv
    whose groups are its channels. The vector unit walks the windows as Pool does and
    multiplies and adds where Pool compares or adds (KH*KW multiply-adds per output element);
    the arrays, which would hold such a kernel block-diagonally, mostly zeros, are not used. An
    "nhwc" image (a matrix layer's rows [N, H, W, C]) gives nhwc rows [N, OH, OW, C]. The taps
    sum exactly, rounded once to X's type, and the bias is added in that type: what the
    layer's arrays and AddInTile give."""

    inputs = (Arg("X", "image [N, C, H, W], or [N, H, W, C] in the nhwc layout"),
              Arg("W", "the taps of each channel [C, 1, KH, KW] (ONNX Conv's weight)"),
              Arg("B", "bias [C] (may be left out)", optional=True))
    outputs = (Arg("Y", "[N, C, OH, OW], or [N, OH, OW, C] in the nhwc layout"),)
    attributes = WINDOW_ATTRS + LAYOUT_ATTRS

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        check_layout(a, in_shapes[0])
        n, c, h, w = image_dims(in_shapes[0], a)
        oh, ow = output_size(a, h, w) if isinstance(h, int) and isinstance(w, int) else \
            (None, None)
        return [[n, oh, ow, c] if is_nhwc(a) else [n, c, oh, ow]]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return count_dims(out_shapes[0]) * int(np.prod(attrs["kernel_shape"]))

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x, bias = inputs[0], _bias(inputs)
        y = _tap_sums_array(array, x, inputs[1], a, np.float64).astype(x.dtype)
        if bias is not None:
            y += bias.astype(x.dtype)[None, :, None, None]
        return [as_layout(y, a)]


@primitive
class QDepthwiseConv(Primitive):
    """DepthwiseConv on integers: int8 (or int16) images and taps, the products summed
    exactly into an `acc_bits`-bit accumulator (32 for int8 layers, 64 for int16 ones), +
    the integer bias B: what the layer's QVMM tiles and AddInTile give."""
    placed_as = "DepthwiseConv"     # the vector unit's, on integers

    inputs = (Arg("X", "integer image [N, C, H, W], or [N, H, W, C] in the nhwc layout"),
              Arg("W", "the integer taps of each channel [C, 1, KH, KW]"),
              Arg("B", "integer bias [C] in the accumulator's type (may be left out)",
                  optional=True))
    outputs = (Arg("Y", "[N, C, OH, OW] (nhwc: [N, OH, OW, C]), int32 / int64"),)
    attributes = DepthwiseConv.attributes + (
        Attr("acc_bits", "int", "accumulator width: 32 or 64", 32),)

    infer = DepthwiseConv.infer
    work = DepthwiseConv.work

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        y = _tap_sums_array(array, inputs[0], inputs[1], a, np.int64)
        if _bias(inputs) is not None:
            y += inputs[2].astype(np.int64)[None, :, None, None]
        y = in_accumulator(y, a["acc_bits"], "QDepthwiseConv", attrs.get("_node"))
        return [as_layout(y, a)]


def _bias(inputs):
    """The reference's optional input B, or None."""
    return inputs[2] if len(inputs) > 2 else None


def _tap_sums_array(array, x, w, a, dtype):
    """The taps' products of X summed in `dtype` (float64, or int64: exact on integers), as
    NCHW [N, C, OH, OW]; the vector unit's multiply-adds counted."""
    check_layout(a, x.shape)
    image = as_nchw(x, a)
    n, c, h, wd = image.shape
    oh, ow = output_size(a, h, wd)
    pt, pl, pb, pr = a["pads"]
    xp = np.pad(image.astype(dtype), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    taps = w.astype(dtype)
    y = np.zeros((n, c, oh, ow), dtype)
    for i, j, rows, cols in kernel_taps(a["kernel_shape"], a["strides"], a["dilations"],
                                        (oh, ow)):
        y += xp[:, :, rows, cols] * taps[None, :, 0, i, j, None, None]
    array.vector_elements += y.size * int(np.prod(a["kernel_shape"]))
    return y
