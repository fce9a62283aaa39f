"""AddInTile: partial products summed into an output row buffer, plus a bias row."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


def stacked_flags(attrs, parts):
    """The `stacked` flag of each of `parts` partials (default: none stacked)."""
    flags = list(attrs.get("stacked") or [0] * parts)
    if len(flags) != parts:
        raise ValueError(f"AddInTile: {parts} partials but {len(flags)} stacked flags")
    return flags


def tile_counts(attrs, in_shapes):
    """Per partial, the tiles it holds: T for a stack [..., T, K, w] (`stacked`), else 1."""
    parts = in_shapes[1:]
    counts = []
    for shape, flag in zip(parts, stacked_flags(attrs, len(parts))):
        if flag and (len(shape) < 3 or not isinstance(shape[-3], int)):
            raise ValueError(f"AddInTile: a stacked partial is [..., T, K, w] with T fixed "
                             f"(got {list(shape)})")
        counts.append(shape[-3] if flag else 1)
    return counts


def tile_layout(attrs, in_shapes):
    """[(offset, width)] of each tile's partial (a stack's T in order), and the output
    width."""
    widths = [s[-1] for s, n in zip(in_shapes[1:], tile_counts(attrs, in_shapes))
              for _ in range(n)]
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
    accumulator and rounded to the partials' type once.
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
        _, width = tile_layout(attrs, in_shapes)
        first = list(in_shapes[1])
        if stacked_flags(attrs, len(in_shapes) - 1)[0]:         # [..., T, K, w] -> [..., K]
            del first[-3]
        return [first[:-1] + [width]]

    @classmethod
    def reference(cls, array, inputs, attrs):
        bias, parts = inputs[0], inputs[1:]
        shapes = [None if bias is None else bias.shape] + [p.shape for p in parts]
        layout, width = tile_layout(attrs, shapes)
        pieces = list(_placed(parts, stacked_flags(attrs, len(parts)), layout))
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


def side_by_side(places):
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
        if side_by_side(places):
            yield places[0][0], np.moveaxis(p, -3, -2).reshape(p.shape[:-3] + (p.shape[-2], -1))
        else:
            yield from ((po, p[..., t, :, :]) for t, (po, _) in enumerate(places))
