"""Col2Im's function bodies."""
import numpy as np

from .body import DOUBLE, Emulated, add_up, config_tag, emulates


def _groups(k, s, d):
    """How many stride-steps a kernel axis's taps span: tap i lands (i*d) // s pixels and
    (i*d) % s positions past its input pixel's s-strided position."""
    return (k - 1) * d // s + 1


def _taps_per_pixel(k, s, d):
    """The most taps of a kernel axis landing on one output position."""
    return max(sum(1 for i in range(k) if i * d % s == p) for p in range(s))


def _spread_columns(m, kh, kw, sh, sw, dh, dw):
    """Column table placing X's columns (m, kh, kw) at (m, i*dh, j*dw) of [M, QH*sh, QW*sw]
    (the zero column m*kh*kw at the positions no tap lands on), or None when they are
    there already (dilation 1 and kernels that are multiples of the strides)."""
    lh, lw = _groups(kh, sh, dh) * sh, _groups(kw, sw, dw) * sw
    if (lh, lw, dh, dw) == (kh, kw, 1, 1):
        return None
    zero = m * kh * kw
    table = np.full((m, lh, lw), zero, dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            table[:, i * dh, j * dw] = (np.arange(m) * kh + i) * kw + j
    return table.reshape(-1)


@emulates("Col2Im")
class Col2Im(Emulated):
    """The exact body sums in float64 and rounds once to X's type where more than two
    addends meet an output; the float32 body adds float32 rows in float32."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        bias = len(in_shapes) > 1 and in_shapes[1] is not None
        key = [(k, [int(v) for v in a[k]]) for k in sorted(a)]
        return f"{'b' if bias else ''}{config_tag(key, in_shapes[0][2], bias)}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        """The taps grouped by where they land: tap i of a kernel axis lands i*d = q*s + p
        past its input pixel's s-strided position, phase p of the q-th pixel after it. So
        the rows, each image row's phases moved between its pixels (one axis swap), hold
        each group q as an image of the input's size, which lands shifted by q whole
        pixels; the groups are summed so, and the sum moved to the output's layout (a
        second swap, of big blocks: onnxruntime's Transpose of high rank with tiny trailing
        axes is much slower). Taps that never overlap (stride >= kernel) make one group: no
        sum."""
        (h, w), (oh, ow) = attrs["image_shape"], attrs["output_shape"]
        (kh, kw), (sh, sw) = attrs["kernel_shape"], attrs["strides"]
        (dh, dw), (pt, pl) = attrs["dilations"], attrs["pads"]
        bias = len(in_shapes) > 1 and in_shapes[1] is not None
        m = in_shapes[0][2] // (kh * kw)
        qh, qw = _groups(kh, sh, dh), _groups(kw, sw, dw)
        # One X element per output (and the bias) rounded once in X's type is already the
        # exact sum: the exact body sums in float64 only past two addends.
        native = float32 or \
            _taps_per_pixel(kh, sh, dh) * _taps_per_pixel(kw, sw, dw) + bias <= 2
        x = "X"
        table = _spread_columns(m, kh, kw, sh, sw, dh, dw)
        if table is not None:        # room for the phases no tap lands on: a zero column
            x = b.op("Pad", x, b.const([0, 0, 0, 0, 0, 1]))
            x = b.op("Gather", x, b.const(table), axis=2)
        # [N*H, W, M*QH*sh*QW, sw] -> [N*H, M*QH*sh*QW, W, sw]: each image row's phases
        # interleaved between its pixels, the kernel taps' groups side by side
        x = b.op("Reshape", x, b.const([-1, w, m * qh * sh * qw, sw]))
        x = b.op("Transpose", x, perm=[0, 2, 1, 3])
        x = b.op("Reshape", x, b.const([-1, h, m, qh, sh, qw, w * sw]))
        groups = []
        for i in range(qh):          # each group shifted by its whole pixels
            for j in range(qw):
                g = b.op("Slice", x, b.const([i, j]), b.const([i + 1, j + 1]),
                         b.const([3, 5])) if qh * qw > 1 else x
                g = b.op("Reshape", g, b.const([-1, h, m * sh, w * sw]))
                if not native:
                    g = b.op("Cast", g, to=DOUBLE)
                pads = [0, i, 0, j * sw, 0, qh - 1 - i, 0, (qw - 1 - j) * sw]
                groups.append(b.op("Pad", g, b.const(pads)) if any(pads) else g)
        # native: the groups in X's own type, which ONNX Sum refuses unless a float
        y = groups[0] if len(groups) == 1 else \
            add_up(b, groups) if native and not float32 else b.op("Sum", *groups)
        # [N, H', M, sh, W'*sw] -> [N, M, H', sh, W'*sw]: the canvas
        ch, cw = h + qh - 1, w + qw - 1
        y = b.op("Reshape", y, b.const([-1, ch, m, sh, cw * sw]))
        y = b.op("Transpose", y, perm=[0, 2, 1, 3, 4])
        y = b.op("Reshape", y, b.const([-1, m, ch * sh, cw * sw]))
        pads = [0, 0, -pt, -pl, 0, 0, oh + pt - ch * sh, ow + pl - cw * sw]   # negative: cut
        if any(pads):
            y = b.op("Pad", y, b.const(pads))
        if bias:
            y = b.op("Add", y, b.op("Reshape", "B" if native else b.op("Cast", "B", to=DOUBLE),
                                    b.const([-1, 1, 1])))
        b.output(y, "Y", like=None if native else "X")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        cls.body(b, attrs, in_shapes, float32=True)
