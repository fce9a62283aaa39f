"""Pool: max and average pooling over NCHW windows on the vector unit."""
import numpy as np

from ...shape_inference import pooled_size
from .base import Arg, Attr, Primitive, primitive, static_numel
from .im2col import (LAYOUT_ATTRS, as_layout, as_nchw, check_layout, image_dims, is_nhwc,
                     kernel_taps)


@primitive
class Pool(Primitive):
    """Y[n, c, oh, ow] = max (mode "max") or mean (mode "avg") of X[n, c, oh*sh - pt + kh*dh,
    ow*sw - pl + kw*dw] over the window's taps: the vector unit compares or adds each
    window's KH*KW elements (its cost: KH*KW operations per output element; global pooling
    is one window the size of the image). An "nhwc" image (a matrix layer's rows [N, H, W, C])
    gives nhwc rows [N, OH, OW, C]. Padding is never the maximum; an average divides
    by the taps inside the image, or by all KH*KW with count_include_pad (windows that
    ceil_mode adds past the padding count only what they cover). The average sums in float64
    and rounds once."""

    inputs = (Arg("X", "image [N, C, H, W], or [N, H, W, C] in the nhwc layout"),)
    outputs = (Arg("Y", "[N, C, OH, OW], or [N, OH, OW, C] in the nhwc layout"),)
    attributes = (
        Attr("mode", "string", '"max" or "avg"'),
        Attr("kernel_shape", "ints", "[KH, KW]"),
        Attr("strides", "ints", "[sh, sw]", [1, 1]),
        Attr("pads", "ints", "[top, left, bottom, right]", [0, 0, 0, 0]),
        Attr("dilations", "ints", "[dh, dw] (max only)", [1, 1]),
        Attr("ceil_mode", "int", "1: the output size rounds up", 0),
        Attr("count_include_pad", "int", "1: an average divides by KH*KW", 0),
    ) + LAYOUT_ATTRS

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        check_layout(a, in_shapes[0])
        n, c, oh, ow = _out_dims(image_dims(in_shapes[0], a), a)
        return [[n, oh, ow, c] if is_nhwc(a) else [n, c, oh, ow]]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return static_numel(out_shapes[0]) * int(np.prod(attrs["kernel_shape"]))

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        check_layout(a, inputs[0].shape)
        return [as_layout(cls._nchw_reference(array, as_nchw(inputs[0], a), a), a)]

    @classmethod
    def _nchw_reference(cls, array, x, a):
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
        pt, pl, pb, pr = a["pads"]
        oh = pooled_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
        ow = pooled_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
        is_max = a["mode"] == "max"
        if (oh, ow) == (1, 1) and (kh, kw) == (h, w) and not any(a["pads"]):   # global
            x64 = x.astype(np.float64)
            y = x64.max(axis=(2, 3), keepdims=True) if is_max else \
                x64.mean(axis=(2, 3), keepdims=True)
            array.vector_elements += y.size * kh * kw
            return y.astype(x.dtype)
        # pad far enough for every window ceil_mode adds
        eb = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + pt + pb))
        er = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + pl + pr))
        fill = -np.inf if is_max else 0.0
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)),
                    constant_values=fill)
        inside = np.pad(np.ones((h, w)), ((pt, pb + eb), (pl, pr + er)))       # the image
        padded = np.pad(np.ones((h + pt + pb, w + pl + pr)), ((0, eb), (0, er)))  # + pads
        y = None
        count, seen = np.zeros((oh, ow)), np.zeros((oh, ow))
        for _, _, rows, cols in kernel_taps((kh, kw), (sh, sw), (dh, dw), (oh, ow)):
            v = xp[:, :, rows, cols]
            y = v.copy() if y is None else (np.maximum(y, v) if is_max else y + v)
            count += (padded if a["count_include_pad"] else inside)[rows, cols]
            seen += inside[rows, cols]
        if not is_max:
            y = y / count
        else:       # a window on padding only (dilated past the image): onnxruntime's start
            y[..., seen == 0] = np.finfo(x.dtype).min if x.dtype.kind == "f" else \
                np.iinfo(x.dtype).min
        array.vector_elements += y.size * kh * kw
        return y.astype(x.dtype)


def _out_dims(image, a):
    """(N, C, OH, OW) of a Pool on an image of (N, C, H, W)."""
    n, c, h, w = image
    (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
    pt, pl, pb, pr = a["pads"]
    oh = pooled_size(h, kh, sh, dh, pt, pb, a["ceil_mode"]) if isinstance(h, int) else None
    ow = pooled_size(w, kw, sw, dw, pl, pr, a["ceil_mode"]) if isinstance(w, int) else None
    return n, c, oh, ow


def is_global(a):
    """One window the size of an nhwc image, no padding."""
    return list(a["kernel_shape"]) == list(a["image_size"]) and not any(a["pads"])
