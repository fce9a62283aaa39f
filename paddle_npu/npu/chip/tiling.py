"""How a layer's weight matrix is cut into array tiles, and what that costs.

A layer's kernel matrix has one row per input element of a receptive field (C*KH*KW for a
Conv, K for a Gemm) and one column per output channel; with groups, group g owns rows
[g*Cg*KK, (g+1)*Cg*KK) and columns [g*Mg, (g+1)*Mg). Every tile occupies one array
(weight-stationary), fed the input columns [row_start, row_start + rows) and writing the
output columns [col_start, col_start + cols).

A layer is emitted band by band: a band is the tiles of one row range side by side (the
same input columns, consecutive output columns), one VMM node whose weight spans them. Each
output column is still the sum of its own R products on its own array, so a band computes
what its tiles do one by one, in one product instead of several.

Plans:
    per-channel  one input channel's KH*KW rows per tile (the original op list's way)
    packed       as many whole channels' KH*KW rows as fit the array's rows (a channel whose
                 KH*KW exceeds them is split), output channels split over the columns (a
                 dense Conv's kernel matrix is given with its rows tap by tap, one tap's
                 channels after another, and cut into arrays of rows: mappers/conv.py); small
                 groups (depthwise) go block-diagonally, as few tiles as fit them, each as
                 full as the others but the last, which holds what is left (96 groups
                 4 x 24, not 28 + 28 + 28 + 12; 64 groups 22 + 22 + 20, not 28 + 28 + 8): the
                 tiles are alike, so a lowering can run them as one stack (mappers/matrix.py)
"""
from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

PLANS = ("packed", "per-channel")


class Tile(NamedTuple):        # a tuple: a per-channel plan makes tens of thousands
    row_start: int
    rows: int
    col_start: int
    cols: int
    useful: int                                   # layer weights it holds (the rest are 0)
    groups: Optional[Tuple[int, int]] = None      # block-diagonal: groups [g0, g1)


@dataclass(frozen=True)
class Geometry:
    """The shape of a layer's kernel matrix."""
    groups: int       # g
    channels: int     # input channels per group (Cg; K for a Gemm)
    taps: int         # KH*KW (1 for a Gemm)
    outputs: int      # output channels per group (Mg)

    @property
    def group_rows(self):
        return self.channels * self.taps


def _chunks(n, size):
    return [(i, min(size, n - i)) for i in range(0, n, size)]


def plan_tiles(geo, plan, rows, cols):
    """The tiles of a layer under a plan, for arrays of rows x cols."""
    if plan not in PLANS:
        raise ValueError(f"unknown plan {plan!r} (known: {', '.join(PLANS)})")
    kk, gr = geo.taps, geo.group_rows
    if plan == "packed" and geo.groups > 1 and gr <= rows and geo.outputs <= cols:
        per = min(rows // gr, cols // geo.outputs)
        count = -(-geo.groups // per)
        per = -(-geo.groups // count)        # the same arrays, evenly filled
        tiles = []
        for g0, n in _chunks(geo.groups, per):
            tiles.append(Tile(g0 * gr, n * gr, g0 * geo.outputs, n * geo.outputs,
                              n * gr * geo.outputs, (g0, g0 + n)))
        return tiles
    if kk > rows:            # one channel's taps need several arrays
        taps = _chunks(kk, rows)
        row_ranges = [(c * kk + i, n) for c in range(geo.channels) for i, n in taps]
    else:
        per = 1 if plan == "per-channel" else rows // kk
        row_ranges = [(c * kk, n * kk) for c, n in _chunks(geo.channels, per)]
    col_ranges = _chunks(geo.outputs, cols)
    return [Tile(g * gr + r0, rn, g * geo.outputs + c0, cn, rn * cn)
            for g in range(geo.groups) for r0, rn in row_ranges for c0, cn in col_ranges]


def bands(tiles):
    """The tiles merged into bands (see above): consecutive tiles of the same rows whose
    columns follow on, block-diagonal tiles (each its own rows) kept as they are."""
    out = []
    for t in tiles:
        last = out[-1] if out else None
        if last is not None and t.groups is None and last.groups is None and \
                (last.row_start, last.rows) == (t.row_start, t.rows) and \
                last.col_start + last.cols == t.col_start:
            out[-1] = last._replace(cols=last.cols + t.cols, useful=last.useful + t.useful)
        else:
            out.append(t)
    return out


def group_matrix(weight, g, geo):
    """Group g's kernel matrix [Cg*KH*KW, Mg] of a Conv weight [M, Cg, KH, KW]
    (or of a Gemm weight already [K, N], with one group)."""
    if weight.ndim == 2:
        return weight
    return weight[g * geo.outputs:(g + 1) * geo.outputs].reshape(geo.outputs, -1).T


def tile_weight(weight, geo, tile):
    """The [rows, cols] matrix programmed into a tile's array: a view of `weight` when the
    tile is one block of it (no copy of the layer's weights), else a new array."""
    import numpy as np      # on first use: the command line's parser reads PLANS from here

    if tile.groups is not None:
        g0, g1 = tile.groups
        block = np.zeros((tile.rows, tile.cols), dtype=weight.dtype)
        for g in range(g0, g1):
            i, j = (g - g0) * geo.group_rows, (g - g0) * geo.outputs
            block[i:i + geo.group_rows, j:j + geo.outputs] = group_matrix(weight, g, geo)
        return block
    g = tile.row_start // geo.group_rows
    r0 = tile.row_start - g * geo.group_rows
    c0 = tile.col_start - g * geo.outputs
    return group_matrix(weight, g, geo)[r0:r0 + tile.rows, c0:c0 + tile.cols]


@dataclass
class PlanCost:
    plan: str
    arrays: int
    cells: int               # arrays x rows x cols
    weights: int             # the layer's weights (cells holding them)
    vectors: int             # row vectors per inference (N*OH*OW; N=1 when dynamic)
    vmm_invocations: int     # arrays x vectors
    macs: int                # useful multiply-accumulates
    add_elements: int        # element additions in AddInTile (partials and bias)
    weight_bytes: int        # the weights at the target's weight bits
    cells_per_weight: int = 1   # a weight sliced over cells of a few bits (ops/readout.py)

    @property
    def utilisation(self):
        return self.weights * self.cells_per_weight / self.cells if self.cells else 0.0

    def as_dict(self):
        d = dict(vars(self))
        d["utilisation"] = round(self.utilisation, 6)
        return d


def plan_cost(tiles, plan, rows, cols, vectors, has_bias, weight_bits):
    regions = {}
    for t in tiles:
        regions[(t.col_start, t.cols)] = regions.get((t.col_start, t.cols), 0) + 1
    adds = sum((n - 1) * w for (_, w), n in regions.items())
    width = sum(w for (_, w) in regions)
    adds = (adds + (width if has_bias else 0)) * vectors
    weights = sum(t.useful for t in tiles)
    return PlanCost(plan, len(tiles), len(tiles) * rows * cols, weights, vectors,
                    len(tiles) * vectors, weights * vectors, adds,
                    (weights * weight_bits + 7) // 8)


def plan_cost_of(geo, plan, rows, cols, vectors, has_bias, weight_bits):
    """plan_cost(plan_tiles(geo, plan, rows, cols), ...) counted without making the tiles (a
    per-channel plan of a big layer has thousands): every row range meets every column
    range of every group once."""
    if plan == "packed" and geo.groups > 1 and geo.group_rows <= rows and geo.outputs <= cols:
        return plan_cost(plan_tiles(geo, plan, rows, cols), plan, rows, cols, vectors,
                         has_bias, weight_bits)          # block-diagonal: few tiles
    kk = geo.taps
    if kk > rows:
        row_ranges = geo.channels * len(_chunks(kk, rows))
    else:
        per = 1 if plan == "per-channel" else rows // kk
        row_ranges = len(_chunks(geo.channels, per))
    width = geo.groups * geo.outputs
    tiles = geo.groups * row_ranges * len(_chunks(geo.outputs, cols))
    weights = geo.groups * geo.group_rows * geo.outputs
    adds = ((row_ranges - 1) * width + (width if has_bias else 0)) * vectors
    return PlanCost(plan, tiles, tiles * rows * cols, weights, vectors, tiles * vectors,
                    weights * vectors, adds, (weights * weight_bits + 7) // 8)
