"""AddInTile's function bodies."""
import numpy as np
from onnx import numpy_helper

from ..ops.add_in_tile import side_by_side, stacked_flags, tile_counts, tile_layout
from .body import DOUBLE, Emulated, add_up, config_tag, emulates


@emulates("AddInTile")
class AddInTile(Emulated):
    """The exact body sums float partials in float64 and rounds once to their type where
    more than two addends meet (two are summed exactly in their own type); integer partials
    (an integer plan's accumulators) are summed in their own type, exact as the accumulator
    holds the sum. The float32 body adds float32 partials in float32."""

    @classmethod
    def input_attrs(cls, inputs, images=()):
        """{"_integer": True} when the partials are integers."""
        p = inputs[1] if len(inputs) > 1 else None
        return {"_integer": True} if p is not None and p.dtype is not None and \
            p.dtype.is_integer() else {}

    @classmethod
    def overload(cls, attrs, in_shapes):
        layout, width = tile_layout(attrs, in_shapes)
        bias = in_shapes[0] is not None
        stacks = tile_counts(attrs, in_shapes)
        tag = config_tag(layout, width, bias) if not any(stacked_flags(attrs, len(stacks))) else \
            config_tag(layout, width, bias, stacks, [len(s) for s in in_shapes[1:]])
        return f"{'i' if attrs.get('_integer') else ''}{'b' if bias else ''}n{len(layout)}_{tag}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        layout, width = tile_layout(attrs, in_shapes)
        # Two addends per output (a partial and the bias, or two partials): their sum rounded
        # once in their own type is already the exact one (float64 holds it exactly), so the
        # exact body needs no casts.
        terms = [0] * width
        for o, w in layout:
            for c in range(o, min(o + w, width)):
                terms[c] += 1
        native = float32 or attrs.get("_integer") or \
            max(terms, default=0) + (in_shapes[0] is not None) <= 2

        def wide(v):
            return v if native else b.op("Cast", v, to=DOUBLE)

        def summed(values):
            # the native sums are in the partials' own type, an integer plan's int32 / int64
            # accumulators too, which ONNX Sum (floats only) refuses: Adds there
            if len(values) == 1:
                return values[0]
            return add_up(b, values) if native and not float32 else b.op("Sum", *values)

        groups = {}                     # partials at the same place are summed first
        for place, value in cls._pieces(b, attrs, in_shapes, layout, width, wide):
            groups.setdefault(place, []).append(value)
        spans = sorted(groups)
        if float32 and spans == [(0, width)] and in_shapes[0] is not None and \
                len(groups[(0, width)]) > 1:
            # one place, every column (a layer's bands): partials and bias in one Sum, in
            # the order the Sum and Add below would add them (float32 bodies only: Sum has
            # no integer kernel). One partial takes the Add below: onnxruntime's Sum of a
            # broadcast bias is slower, and it fuses a MatMul + Add into one Gemm.
            b.op("Sum", *groups[(0, width)], "B", out="Y")
            return
        sums = {place: summed(names) for place, names in groups.items()}
        edges = [0] + [o + w for o, w in spans]
        rank = len(in_shapes[1]) - (1 if stacked_flags(attrs, len(in_shapes) - 1)[0] else 0)
        if all(o == e for (o, _), e in zip(spans, edges)) and edges[-1] == width:
            total = b.op("Concat", *(sums[p] for p in spans), axis=-1) if len(spans) > 1 \
                else sums[spans[0]]
        else:                           # overlapping or gapped: zero-pad each to the width
            padded = []
            for (o, w) in spans:
                pads = [0] * (2 * rank)
                pads[rank - 1], pads[2 * rank - 1] = o, width - o - w
                padded.append(b.op("Pad", sums[(o, w)], b.const(pads)))
            total = summed(padded)
        if in_shapes[0] is not None:
            total = b.op("Add", total, wide("B"))
        b.output(total, "Y", like=None if native else "P0")   # native: in P's type all along

    @staticmethod
    def _pieces(b, attrs, in_shapes, layout, width, wide):
        """((offset, columns), value) of each partial, in the accumulator's type (`wide`),
        cut to the width. A stack's tiles side by side are one piece (their products moved
        behind the rows); at one place, their sum; else one piece each."""
        tiles = iter(layout)
        for i, (shape, flag) in enumerate(zip(in_shapes[1:],
                                              stacked_flags(attrs, len(in_shapes) - 1))):
            p = f"P{i}"
            if not flag:
                o, w = next(tiles)
                yield _cut(b, wide(p), o, w, width, len(shape))
                continue
            places = [next(tiles) for _ in range(shape[-3])]
            (o, w), n = places[0], len(shape) - 3           # n: the leading axes
            if side_by_side(places):
                moved = b.op("Transpose", p, perm=list(range(n)) + [n + 1, n, n + 2])
                rows = b.op("Reshape", moved, b.const([0] * (n + 1) + [len(places) * w]))
                yield _cut(b, wide(rows), o, len(places) * w, width, n + 2)
            elif all(po == o for po, _ in places):
                # the sum over the tiles as ones [T] @ [..., T, K*w]: onnxruntime's ReduceSum
                # over that axis is far slower on a batch of one
                stack = wide(p)
                ones = b.op("CastLike", b.op("Constant", value=numpy_helper.from_array(
                    np.ones(len(places), np.float32))), stack)
                flat = b.op("Reshape", stack, b.const([0] * n + [len(places), -1]))
                total = b.op("MatMul", ones, flat)
                yield _cut(b, b.op("Reshape", total, b.const([0] * n + [-1, w])), o, w, width,
                           n + 2)
            else:
                for t, (po, pw) in enumerate(places):
                    one = b.op("Gather", p, b.const(t), axis=n)
                    yield _cut(b, wide(one), po, pw, width, n + 2)

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        cls.body(b, attrs, in_shapes, float32=True)


def _cut(b, value, offset, columns, width, rank):
    """((offset, columns kept), value) with its columns past `width` sliced off."""
    if offset + columns <= width:
        return (offset, columns), value
    kept = width - offset
    return (offset, kept), b.op("Slice", value, b.const([0]), b.const([kept]),
                                b.const([rank - 1]))
