"""Col2Im: the rows a transposed convolution's arrays write, accumulated into its image."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive, static_numel


def _canvas(size, k, s, d, begin, out):
    """Length of the zero canvas every kernel tap's contribution is placed on: long enough
    for the largest tap offset and for the output window [begin, begin + out)."""
    return max(size * s + (k - 1) * d, begin + out)


@primitive
class Col2Im(Primitive):
    """Y[n, m, oh, ow] = B[m] + sum of X[n, ih*W + iw, (m*KH + kh)*KW + kw] over every
    (ih, kh, iw, kw) with oh = ih*sh - pt + kh*dh and ow = iw*sw - pl + kw*dw: the rows a
    transposed convolution's arrays produce (one row per input pixel, one column per output
    channel and kernel tap) scattered and summed into the output image on the vector unit
    (the inverse of Im2Col's gather). The sum is kept in float64 and rounded to X's type
    once; the cost is one addition per X element (and per bias element)."""

    inputs = (Arg("X", "rows [N, H*W, M*KH*KW]"),
              Arg("B", "bias [M] (may be left out: empty name)", optional=True))
    outputs = (Arg("Y", "image [N, M, OH, OW]"),)
    attributes = (
        Attr("image_shape", "ints", "[H, W], the input image the rows come from"),
        Attr("output_shape", "ints", "[OH, OW]"),
        Attr("kernel_shape", "ints", "[KH, KW]"),
        Attr("strides", "ints", "[sh, sw]", [1, 1]),
        Attr("pads", "ints", "[top, left]: the rows and columns cut from the start of the "
                             "full result (its end is cut to OH, OW)", [0, 0]),
        Attr("dilations", "ints", "[dh, dw]", [1, 1]),
    )

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        n, _, cols = in_shapes[0]
        kh, kw = a["kernel_shape"]
        m = cols // (kh * kw) if isinstance(cols, int) else None
        return [[n, m] + list(a["output_shape"])]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        bias = len(in_shapes) > 1 and in_shapes[1] is not None
        return static_numel(in_shapes[0]) + (static_numel(out_shapes[0]) if bias else 0)

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x, bias = inputs[0], inputs[1] if len(inputs) > 1 else None
        (h, w), (oh, ow) = a["image_shape"], a["output_shape"]
        (kh, kw), (sh, sw) = a["kernel_shape"], a["strides"]
        (dh, dw), (pt, pl) = a["dilations"], a["pads"]
        n, rows, cols = x.shape
        if rows != h * w or cols % (kh * kw):
            raise ValueError(f"Col2Im: rows {list(x.shape)} do not fit image {h}x{w} and "
                             f"kernel {kh}x{kw}")
        m = cols // (kh * kw)
        cols6 = x.reshape(n, h, w, m, kh, kw).astype(np.float64)
        canvas = np.zeros((n, m, _canvas(h, kh, sh, dh, pt, oh),
                           _canvas(w, kw, sw, dw, pl, ow)))
        for i in range(kh):           # one strided window of the canvas per kernel tap
            for j in range(kw):
                canvas[:, :, i * dh: i * dh + (h - 1) * sh + 1: sh,
                       j * dw: j * dw + (w - 1) * sw + 1: sw] += \
                    cols6[:, :, :, :, i, j].transpose(0, 3, 1, 2)
        y = canvas[:, :, pt:pt + oh, pl:pl + ow]
        array.add_elements += x.size
        if bias is not None:
            y = y + bias.astype(np.float64).reshape(-1, 1, 1)
            array.add_elements += y.size
        return [y.astype(x.dtype)]
