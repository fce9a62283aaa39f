"""Pool: max and average pooling over NCHW windows on the vector unit."""
import numpy as np

from .base import Arg, Attr, Primitive, config_tag, primitive, static_numel
from .im2col import kernel_taps


def pooled_size(size, k, s, d, p0, p1, ceil):
    """ONNX's output size; with ceil_mode a last window must start inside the image or its
    begin padding."""
    span = d * (k - 1) + 1
    if not ceil:
        return (size + p0 + p1 - span) // s + 1
    out = -(-(size + p0 + p1 - span) // s) + 1
    return out - 1 if (out - 1) * s >= size + p0 else out


def _plain(v):
    return v if isinstance(v, (int, str)) else [int(i) for i in v]


@primitive
class Pool(Primitive):
    """Y[n, c, oh, ow] = max (mode "max") or mean (mode "avg") of X[n, c, oh*sh - pt + kh*dh,
    ow*sw - pl + kw*dw] over the window's taps: the vector unit compares or adds each
    window's KH*KW elements (its cost: KH*KW operations per output element; global pooling
    is one window the size of the image). Padding is never the maximum; an average divides
    by the taps inside the image, or by all KH*KW with count_include_pad (windows that
    ceil_mode adds past the padding count only what they cover). The average sums in float64
    and rounds once."""

    inputs = (Arg("X", "image [N, C, H, W]"),)
    outputs = (Arg("Y", "[N, C, OH, OW]"),)
    attributes = (
        Attr("mode", "string", '"max" or "avg"'),
        Attr("kernel_shape", "ints", "[KH, KW]"),
        Attr("strides", "ints", "[sh, sw]", [1, 1]),
        Attr("pads", "ints", "[top, left, bottom, right]", [0, 0, 0, 0]),
        Attr("dilations", "ints", "[dh, dw] (max only)", [1, 1]),
        Attr("ceil_mode", "int", "1: the output size rounds up", 0),
        Attr("count_include_pad", "int", "1: an average divides by KH*KW", 0),
    )

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        n, c, h, w = in_shapes[0]
        (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
        pt, pl, pb, pr = a["pads"]
        oh = pooled_size(h, kh, sh, dh, pt, pb, a["ceil_mode"]) if isinstance(h, int) else None
        ow = pooled_size(w, kw, sw, dw, pl, pr, a["ceil_mode"]) if isinstance(w, int) else None
        return [[n, c, oh, ow]]

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        return static_numel(out_shapes[0]) * int(np.prod(attrs["kernel_shape"]))

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        return f"{a['mode']}_{config_tag([(k, _plain(a[k])) for k in sorted(a)])}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        common = dict(kernel_shape=attrs["kernel_shape"], strides=attrs["strides"],
                      pads=attrs["pads"], ceil_mode=attrs["ceil_mode"])
        if attrs["mode"] == "max":
            b.op("MaxPool", "X", out="Y", dilations=attrs["dilations"], **common)
        else:
            b.op("AveragePool", "X", out="Y", count_include_pad=attrs["count_include_pad"],
                 **common)

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
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
            return [y.astype(x.dtype)]
        # pad far enough for every window ceil_mode adds
        eb = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + pt + pb))
        er = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + pl + pr))
        fill = -np.inf if is_max else 0.0
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)),
                    constant_values=fill)
        inside = np.pad(np.ones((h, w)), ((pt, pb + eb), (pl, pr + er)))       # the image
        padded = np.pad(np.ones((h + pt + pb, w + pl + pr)), ((0, eb), (0, er)))  # + pads
        y = None
        count = np.zeros((oh, ow))
        for _, _, rows, cols in kernel_taps((kh, kw), (sh, sw), (dh, dw), (oh, ow)):
            v = xp[:, :, rows, cols]
            y = v.copy() if y is None else (np.maximum(y, v) if is_max else y + v)
            count += (padded if a["count_include_pad"] else inside)[rows, cols]
        if not is_max:
            y = y / count
        array.vector_elements += y.size * kh * kw
        return [y.astype(x.dtype)]
