"""Im2Col3D: a volume to the rows a crossbar array multiplies (Conv3D's Im2Col)."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive
from .im2col import out_size


def output_sizes(spatial, a):
    return [out_size(size, k, s, d, p0, p1) for size, k, s, d, p0, p1 in
            zip(spatial, a["kernel_shape"], a["strides"], a["dilations"], a["pads"][:3],
                a["pads"][3:])]


@primitive
class Im2Col3D(Primitive):
    """Unfolds every receptive field of an NCDHW volume into one row: row (od*OH + oh)*OW + ow
    holds X[n, c, od*sd - pf + kd*dd, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw] at column
    ((c*KD + kd)*KH + kh)*KW + kw, zero where that falls in the padding. Multiplying the rows
    by W.reshape(M, C*KD*KH*KW)^T is the 3-D convolution. A move: one element moved per
    output element."""

    inputs = (Arg("X", "volume [N, C, D, H, W]"),)
    outputs = (Arg("Y", "rows [N, OD*OH*OW, C*KD*KH*KW]"),)
    attributes = (
        Attr("kernel_shape", "ints", "[KD, KH, KW]"),
        Attr("strides", "ints", "[sd, sh, sw]", [1, 1, 1]),
        Attr("pads", "ints", "[front, top, left, back, bottom, right] (ONNX Conv's order)",
             [0, 0, 0, 0, 0, 0]),
        Attr("dilations", "ints", "[dd, dh, dw]", [1, 1, 1]),
    )

    @classmethod
    def infer(cls, in_shapes, attrs):
        a = cls.attrs_of(attrs)
        n, c = in_shapes[0][:2]
        if not all(isinstance(d, int) for d in in_shapes[0][1:]):
            return [[n, None, None]]
        od, oh, ow = output_sizes(in_shapes[0][2:], a)
        return [[n, od * oh * ow, c * int(np.prod(a["kernel_shape"]))]]

    @classmethod
    def reference(cls, array, inputs, attrs):
        a = cls.attrs_of(attrs)
        x = inputs[0]
        n, c = x.shape[:2]
        (kd, kh, kw), (sd, sh, sw), (dd, dh, dw) = a["kernel_shape"], a["strides"], \
            a["dilations"]
        p = a["pads"]
        xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[3]), (p[1], p[4]), (p[2], p[5])))
        od, oh, ow = output_sizes(x.shape[2:], a)
        out = np.empty((n, od, oh, ow, c, kd, kh, kw), dtype=x.dtype)
        for i in range(kd):           # one strided view per kernel tap
            for j in range(kh):
                for m in range(kw):
                    view = xp[:, :, i * dd: i * dd + (od - 1) * sd + 1: sd,
                              j * dh: j * dh + (oh - 1) * sh + 1: sh,
                              m * dw: m * dw + (ow - 1) * sw + 1: sw]
                    out[..., i, j, m] = view.transpose(0, 2, 3, 4, 1)
        array.moved_elements += out.size
        return [out.reshape(n, od * oh * ow, c * kd * kh * kw)]
