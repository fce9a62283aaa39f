"""AddInTile: partial products summed into an output row buffer, plus a bias row."""
import numpy as np

from .base import DOUBLE, Arg, Attr, Primitive, config_tag, primitive


def _layout(attrs, in_shapes):
    """[(offset, width)] of each partial, and the output width."""
    widths = [s[-1] for s in in_shapes[1:]]
    offsets = list(attrs.get("offsets") or [0] * len(widths))
    if len(offsets) != len(widths):
        raise ValueError(f"AddInTile: {len(widths)} partials but {len(offsets)} offsets")
    width = attrs.get("width") or max(o + w for o, w in zip(offsets, widths))
    return list(zip(offsets, widths)), width


@primitive
class AddInTile(Primitive):
    """Y = B + sum over i of P_i placed at columns [offsets[i], offsets[i] + width(P_i)) of a
    zero row of `width` columns: partial products of the row tiles of one output are added,
    those of different column tiles land side by side (Add In Tile in the original op list,
    which adds the per-channel results and then the bias). The sum is kept in a wide (float64)
    accumulator and rounded to the partials' type once (the float32 body,
    Primitive.float32_body, adds float32 partials in float32)."""

    inputs = (Arg("B", "bias row [width] (may be left out: empty name)", optional=True),
              Arg("P", "partial results [..., K, w_i]", variadic=True))
    outputs = (Arg("Y", "[..., K, width]"),)
    attributes = (
        Attr("offsets", "ints", "output column of each partial's first column (default all 0)",
             []),
        Attr("width", "int", "output columns (default: the widest partial's end)", 0),
    )

    @classmethod
    def infer(cls, in_shapes, attrs):
        _, width = _layout(attrs, in_shapes)
        return [list(in_shapes[1][:-1]) + [width]]

    @classmethod
    def overload(cls, attrs, in_shapes):
        layout, width = _layout(attrs, in_shapes)
        bias = in_shapes[0] is not None
        return f"{'b' if bias else ''}n{len(layout)}_{config_tag(layout, width, bias)}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        layout, width = _layout(attrs, in_shapes)
        # Two addends per output (a partial and the bias, or two partials): their sum rounded
        # once in their own type is already the exact one (float64 holds it exactly), so the
        # exact body needs no casts.
        terms = [0] * width
        for o, w in layout:
            for c in range(o, o + w):
                terms[c] += 1
        native = float32 or max(terms, default=0) + (in_shapes[0] is not None) <= 2
        groups = {}                     # partials at the same place are summed first
        for i, place in enumerate(layout):
            groups.setdefault(place, []).append(f"P{i}" if native else
                                                b.op("Cast", f"P{i}", to=DOUBLE))
        spans = sorted(groups)
        if float32 and spans == [(0, width)] and in_shapes[0] is not None and \
                len(groups[(0, width)]) > 1:
            # one place, every column (a layer's bands): partials and bias in one Sum, in
            # the order the Sum and Add below would add them (float32 bodies only: Sum has
            # no integer kernel). One partial takes the Add below: onnxruntime's Sum of a
            # broadcast bias measured ~2x slower, and it fuses a MatMul + Add into one Gemm.
            b.op("Sum", *groups[(0, width)], "B", out="Y")
            return
        sums = {place: b.op("Sum", *names) if len(names) > 1 else names[0]
                for place, names in groups.items()}
        edges = [0] + [o + w for o, w in spans]
        if all(o == e for (o, _), e in zip(spans, edges)) and edges[-1] == width:
            total = b.op("Concat", *(sums[p] for p in spans), axis=-1) if len(spans) > 1 \
                else sums[spans[0]]
        else:                           # overlapping or gapped: zero-pad each to the width
            padded = []
            for (o, w) in spans:
                rank = len(in_shapes[1])
                pads = [0] * (2 * rank)
                pads[rank - 1], pads[2 * rank - 1] = o, width - o - w
                padded.append(b.op("Pad", sums[(o, w)], b.const(pads)))
            total = b.op("Sum", *padded) if len(padded) > 1 else padded[0]
        if in_shapes[0] is not None:
            total = b.op("Add", total, "B" if native else b.op("Cast", "B", to=DOUBLE))
        b.output(total, "Y", like=None if native else "P0")   # native: in P's type all along

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        cls.body(b, attrs, in_shapes, float32=True)

    @classmethod
    def reference(cls, array, inputs, attrs):
        bias, parts = inputs[0], inputs[1:]
        layout, width = _layout(attrs, [None if bias is None else bias.shape] +
                                [p.shape for p in parts])
        lead = np.broadcast_shapes(*(p.shape[:-1] for p in parts))
        y = np.zeros(lead + (width,), dtype=np.float64)
        written = np.zeros(width, dtype=bool)
        for (o, w), p in zip(layout, parts):
            if written[o:o + w].any():
                array.add_elements += int(np.prod(lead)) * w
            y[..., o:o + w] += p
            written[o:o + w] = True
        if bias is not None:
            y += bias
            array.add_elements += y.size
        return [y.astype(parts[0].dtype)]
