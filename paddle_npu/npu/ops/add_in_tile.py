"""AddInTile: partial products summed into an output row buffer, plus a bias row."""
import numpy as np
from onnx import numpy_helper

from .base import DOUBLE, Arg, Attr, Primitive, add_up, config_tag, primitive


def _stacked(attrs, parts):
    """The `stacked` flag of each of `parts` partials (default: none stacked)."""
    flags = list(attrs.get("stacked") or [0] * parts)
    if len(flags) != parts:
        raise ValueError(f"AddInTile: {parts} partials but {len(flags)} stacked flags")
    return flags


def _stacks(attrs, in_shapes):
    """Per partial, the tiles it holds: T for a stack [..., T, K, w] (`stacked`), else 1."""
    parts = in_shapes[1:]
    counts = []
    for shape, flag in zip(parts, _stacked(attrs, len(parts))):
        if flag and (len(shape) < 3 or not isinstance(shape[-3], int)):
            raise ValueError(f"AddInTile: a stacked partial is [..., T, K, w] with T fixed "
                             f"(got {list(shape)})")
        counts.append(shape[-3] if flag else 1)
    return counts


def _layout(attrs, in_shapes):
    """[(offset, width)] of each tile's partial (a stack's T in order), and the output
    width."""
    widths = [s[-1] for s, n in zip(in_shapes[1:], _stacks(attrs, in_shapes)) for _ in range(n)]
    offsets = list(attrs.get("offsets") or [0] * len(widths))
    if len(offsets) != len(widths):
        raise ValueError(f"AddInTile: {len(widths)} tiles' partials but {len(offsets)} "
                         f"offsets")
    width = attrs.get("width") or max(o + w for o, w in zip(offsets, widths))
    if any(o >= width for o in offsets):
        raise ValueError(f"AddInTile: an offset past the {width} columns ({offsets})")
    return list(zip(offsets, widths)), width


@primitive
class AddInTile(Primitive):
    """Y = B + sum over i of P_i placed at columns [offsets[i], offsets[i] + width(P_i)) of a
    zero row of `width` columns: partial products of the row tiles of one output are added,
    those of different column tiles land side by side (Add In Tile in the original op list,
    which adds the per-channel results and then the bias). The sum is kept in a wide (float64)
    accumulator and rounded to the partials' type once (the float32 body,
    Primitive.float32_body, adds float32 partials in float32).
    A partial may be a stack of T tiles' results [..., T, K, w] (a VMM stack; `stacked`),
    each tile with its own offset; a tile's columns past `width` are not kept (the last
    array of a stack may hold fewer channels than the others)."""

    inputs = (Arg("B", "bias row [width] (may be left out: empty name)", optional=True),
              Arg("P", "partial results [..., K, w_i], or stacks of them [..., T, K, w_i]",
                  variadic=True))
    outputs = (Arg("Y", "[..., K, width]"),)
    attributes = (
        Attr("offsets", "ints", "output column of each tile's first column, a stack's tiles "
                                "in order (default all 0)", []),
        Attr("width", "int", "output columns (default: the widest partial's end)", 0),
        Attr("stacked", "ints", "per partial, 1 when it is a stack [..., T, K, w] (default "
                                "none)", []),
    )

    @classmethod
    def infer(cls, in_shapes, attrs):
        _, width = _layout(attrs, in_shapes)
        first = list(in_shapes[1])
        if _stacked(attrs, len(in_shapes) - 1)[0]:         # [..., T, K, w] -> [..., K]
            del first[-3]
        return [first[:-1] + [width]]

    @classmethod
    def overload(cls, attrs, in_shapes):
        layout, width = _layout(attrs, in_shapes)
        bias = in_shapes[0] is not None
        stacks = _stacks(attrs, in_shapes)
        tag = config_tag(layout, width, bias) if not any(_stacked(attrs, len(stacks))) else \
            config_tag(layout, width, bias, stacks, [len(s) for s in in_shapes[1:]])
        return f"{'b' if bias else ''}n{len(layout)}_{tag}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        layout, width = _layout(attrs, in_shapes)
        # Two addends per output (a partial and the bias, or two partials): their sum rounded
        # once in their own type is already the exact one (float64 holds it exactly), so the
        # exact body needs no casts.
        terms = [0] * width
        for o, w in layout:
            for c in range(o, min(o + w, width)):
                terms[c] += 1
        native = float32 or max(terms, default=0) + (in_shapes[0] is not None) <= 2

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
        rank = len(in_shapes[1]) - (1 if _stacked(attrs, len(in_shapes) - 1)[0] else 0)
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
                                              _stacked(attrs, len(in_shapes) - 1))):
            p = f"P{i}"
            if not flag:
                o, w = next(tiles)
                yield _cut(b, wide(p), o, w, width, len(shape))
                continue
            places = [next(tiles) for _ in range(shape[-3])]
            (o, w), n = places[0], len(shape) - 3           # n: the leading axes
            if _side_by_side(places):
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

    @classmethod
    def reference(cls, array, inputs, attrs):
        bias, parts = inputs[0], inputs[1:]
        shapes = [None if bias is None else bias.shape] + [p.shape for p in parts]
        layout, width = _layout(attrs, shapes)
        pieces = list(_placed(parts, _stacked(attrs, len(parts)), layout))
        lead = np.broadcast_shapes(*(p.shape[:-1] for _, p in pieces))
        written, adds = np.zeros(width, dtype=bool), 0
        for o, w in layout:     # a tile's columns landing on written ones are additions
            w = min(w, width - o)
            adds += w if written[o:o + w].any() else 0
            written[o:o + w] = True
        array.add_elements += int(np.prod(lead)) * adds
        y = np.zeros(lead + (width,), dtype=np.float64)
        for o, p in pieces:
            w = min(p.shape[-1], width - o)
            y[..., o:o + w] += p[..., :w]
        if bias is not None:
            y += bias
            array.add_elements += y.size
        return [y.astype(parts[0].dtype)]


def _side_by_side(places):
    """Whether a stack's tiles' (offset, width) follow on from the first's."""
    o, w = places[0]
    return all(po == o + t * w for t, (po, _) in enumerate(places))


def _placed(parts, stacked, layout):
    """(offset, partial) of each partial in order, a stack's tiles one by one, or at once
    (moved behind the rows) when side by side."""
    tiles = iter(layout)
    for p, flag in zip(parts, stacked):
        if not flag:
            yield next(tiles)[0], p
            continue
        places = [next(tiles) for _ in range(p.shape[-3])]
        if _side_by_side(places):
            yield places[0][0], np.moveaxis(p, -3, -2).reshape(p.shape[:-3] + (p.shape[-2], -1))
        else:
            yield from ((po, p[..., t, :, :]) for t, (po, _) in enumerate(places))


def _cut(b, value, offset, columns, width, rank):
    """((offset, columns kept), value) with its columns past `width` sliced off."""
    if offset + columns <= width:
        return (offset, columns), value
    kept = width - offset
    return (offset, kept), b.op("Slice", value, b.const([0]), b.const([kept]),
                                b.const([rank - 1]))
