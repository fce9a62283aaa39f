"""The NumPy reference's matrix layers: the VMM (or QVMM) tiles of one layer and the AddInTile
summing them, run as one computation with the same arithmetic as running them one by one.

The lowering writes a layer as one VMM node per band of array tiles (the tiles of one row
range side by side), all reading the same rows, and one AddInTile. Run node by node, that is
hundreds of small BLAS products and as many hand-overs; here each layer becomes one node of
the reference (never of the lowered model) that

- float (VMM): puts the tiles reading the same rows side by side in one matrix, so a layer
  is one BLAS call per row group (the matrices held in the weights' type, float32, and
  widened to float64 just before their product). Each output is still the sum of the same
  R products in the same order: BLAS sums an output over its R rows in one sequence
  whatever the number of columns (one row is the exception: a matrix-vector product, run
  tile by tile). Each tile's result is rounded to float32 as VMM rounds it and the partials
  are added in AddInTile's order in float64 (per column; _additions); where every output
  column gets one partial, 0 + p + bias rounds to the float32 sum p + bias (double rounding
  is innocuous for + from binary64 to binary32), so that runs in float32.
  `tests/test_reference_layers.py` holds this to the node-by-node path bit for bit.
- integer (QVMM): multiplies the whole layer in as few products as exactness allows. Every
  partial sum of int8 / int16 products is an integer bounded by max|x| * sum over the rows of
  |w[r, m]| (any order, any grouping), so a product whose bound is below 2^24 is exact in
  float32 and below 2^53 in float64; its sum is then the same integer the tiles and
  AddInTile's exact sum give, and it is added in the accumulator's type when the bound with
  the bias fits it (float64 products, int16's, widen integer weights a piece at a time:
  _wide_product). Layers whose bounds do not allow it (or whose tiles could overflow their
  accumulators, which the tile path reports) run tile by tile.

The counters (arrays, VMM invocations, MACs, AddInTile additions) are the tiles' own.
"""
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from onnx import helper

from ..ops import DOMAIN, get_primitive
from ..ops.base import chunks

LAYER_DOMAIN = "ai.paddle_npu.reference"   # the fused layers' nodes exist only in the reference
LAYER_OP = "MatrixLayer"

FLOAT32_EXACT = 2 ** 24      # integers below this are exact in float32 (24-bit significand)
FLOAT64_EXACT = 2 ** 53


@dataclass
class LayerPlan:
    """One layer as the lowering wrote it: its tiles in AddInTile's order."""
    kind: str                    # "VMM" or "QVMM"
    names: list                  # the tiles' VMM node names
    arrays: list                 # ... and their weights' names (the arrays they run on)
    tile_attrs: list             # each tile node's own attributes
    sum_attrs: dict              # the AddInTile's (a chain's: all its tiles' offsets)
    links: list                  # each AddInTile's tile count (nodes; more than one: a chain)
    link_attrs: list             # ... and its own attributes
    prepared: dict = field(default_factory=dict)     # weights' ids -> prepared weights

    @cached_property
    def row_offsets(self):
        return [a.get("row_offset", 0) for a in self.tile_attrs]

    @cached_property
    def offsets(self):
        """AddInTile's output column of each tile."""
        return list(self.sum_attrs.get("offsets") or [0] * len(self.names))

    @property
    def width(self):
        return self.sum_attrs.get("width", 0)

    @property
    def acc_bits(self):
        return self.tile_attrs[0].get("acc_bits", 32)     # one for all (fuse_matrix_layers)


def fuse_matrix_layers(graph):
    """Replace, in a GraphProto (in place), every AddInTile whose partials are all VMM (or all
    QVMM) outputs of the same rows, used nowhere else, by one MatrixLayer node; a chain of
    AddInTiles (an integer layer of many tiles: each link adds its tiles to the running sum,
    its last input) becomes one node too. Returns {MatrixLayer node name: LayerPlan}."""
    used = _uses(graph)
    producer = {o: n for n in graph.node for o in n.output}
    plans, drop, replace = {}, set(), {}
    # a fused AddInTile's output -> (its node, its plan's name, the rows, the bias)
    links = {}
    for node in graph.node:
        if node.domain != DOMAIN or node.op_type != "AddInTile" or len(node.input) < 2:
            continue
        parts, chained = list(node.input[1:]), None
        if parts[-1] in links and used.get(parts[-1], 0) == 1 and not node.input[0]:
            chained, parts = links[parts[-1]], parts[:-1]
        tiles = [producer.get(p) for p in parts]
        kinds = {(t.domain, t.op_type) if t is not None else None for t in tiles}
        if len(kinds) != 1 or next(iter(kinds)) not in ((DOMAIN, "VMM"), (DOMAIN, "QVMM")):
            continue
        if len(set(parts)) != len(tiles) \
                or any(used.get(p, 0) != 1 for p in parts) \
                or len({t.name for t in tiles}) != len(tiles) or not all(t.name for t in tiles):
            continue
        tile_attrs = [_attrs(t) for t in tiles]
        if len({a.get("acc_bits", 32) for a in tile_attrs}) != 1 or \
                len({t.input[0] for t in tiles}) != 1:
            continue
        if any(a.get(k) for a in tile_attrs for k in ("cell_bits", "dac_bits", "adc_bits")):
            continue        # an analog read-out: each tile computes on its own (QVMM)
        rows, bias, sum_attrs = tiles[0].input[0], node.input[0], _attrs(node)
        plan = LayerPlan(kind=tiles[0].op_type, names=[t.name for t in tiles],
                         arrays=[t.input[1] for t in tiles], tile_attrs=tile_attrs,
                         sum_attrs=sum_attrs, links=[len(tiles)], link_attrs=[sum_attrs])
        if chained is not None:
            before, before_name, before_rows, bias = chained
            first = plans[before_name]
            if first.kind != "QVMM" or plan.kind != "QVMM" or before_rows != rows or \
                    first.acc_bits != plan.acc_bits:
                continue
            del plans[before_name], replace[id(before)]
            drop.add(id(before))
            offsets = first.offsets + list(sum_attrs.get("offsets") or [0] * len(parts))[:-1]
            plan = LayerPlan(kind="QVMM", names=first.names + plan.names,
                             arrays=first.arrays + plan.arrays,
                             tile_attrs=first.tile_attrs + tile_attrs,
                             sum_attrs={**sum_attrs, "offsets": offsets},
                             links=first.links + plan.links,
                             link_attrs=first.link_attrs + plan.link_attrs)
        name = f"{node.name or node.output[0]}/matrix_layer"
        plans[name] = plan
        links[node.output[0]] = (node, name, rows, bias)
        drop.update(id(producer[p]) for p in parts)
        replace[id(node)] = helper.make_node(
            LAYER_OP, [rows, bias] + plan.arrays, list(node.output), name=name,
            domain=LAYER_DOMAIN)
    nodes = [replace.get(id(n), n) for n in graph.node if id(n) not in drop]
    del graph.node[:]
    graph.node.extend(nodes)
    return plans


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _uses(graph):
    """How often each value name is read: by nodes (subgraphs included) or as a graph output."""
    used = {}

    def visit(g):
        for n in g.node:
            for i in n.input:
                used[i] = used.get(i, 0) + 1
            for a in n.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    visit(sub)
        for o in g.output:
            used[o.name] = used.get(o.name, 0) + 1

    visit(graph)
    return used


def layer_op_class(plans, array):
    """The OpRun class running MatrixLayer nodes for `array` (counts and timing)."""
    from onnx.reference.op_run import OpRun     # (onnx.reference is slow to import: only
                                                # when a reference runs, not for `lower`)

    def _run(self, x, bias, *weights):
        t = time.perf_counter()
        out = run_layer(array, plans[self.onnx_node.name], x, bias, weights)
        array.seconds[LAYER_OP] = array.seconds.get(LAYER_OP, 0.0) + time.perf_counter() - t
        return (out,)

    return type(LAYER_OP, (OpRun,), {"op_domain": LAYER_DOMAIN, "_run": _run})


def run_layer(array, plan, x, bias, weights):
    """The layer's AddInTile output, as the tiles and the AddInTile would give it."""
    prepared = _prepared(array, plan, x, bias, weights)
    if prepared is None:
        return tile_by_tile(array, plan, x, bias, weights)
    lead = x.shape[:-1]
    vectors = int(np.prod(lead))
    rows = array.as_type(x, prepared.dtype).reshape(vectors, x.shape[-1])
    if plan.kind == "QVMM":
        y = _integer_sum(prepared, plan.offsets, rows, bias, plan.width)
        out_type = np.int32 if plan.acc_bits == 32 else np.int64
    else:
        if vectors < 2:      # one row: BLAS takes a matrix-vector path, as tile by tile does
            return tile_by_tile(array, plan, x, bias, weights)
        y = _float_sum(prepared, rows, bias, x.dtype, plan.width)
        out_type = x.dtype
    prepared.count(array, vectors)
    return y.astype(out_type, copy=False).reshape(lead + (plan.width,))


PIECE_BYTES = 1 << 28      # an integer layer's partials of one link held at a time, at most


def tile_by_tile(array, plan, x, bias, weights):
    """The layer as its nodes run one by one: each tile's reference, then AddInTile's; a
    chain link by link, each link's tiles just before it (a few partials held at a time).
    An integer layer runs a piece of its rows at a time (the integers do not depend on
    it): a link's partials are its tiles' columns for every row (a per-channel plan's 32
    tiles on a 960x960 image: 7.5 GB), a piece's at most PIECE_BYTES."""
    if plan.kind == "QVMM":
        columns = max(sum(w.size // w.shape[-2] for w in weights[first:first + n])
                      for first, n in zip(np.cumsum([0] + plan.links), plan.links))
        batch = int(np.prod(x.shape[:-3 if weights[0].ndim == 3 else -2]))
        rows = max(1, PIECE_BYTES // (8 * columns * batch))
        if rows < x.shape[-2]:
            return np.concatenate([_tiles_then_sums(array, plan, x[..., a:a + r, :], bias,
                                                    weights)
                                   for a, r in chunks(x.shape[-2], rows)], axis=-2)
    return _tiles_then_sums(array, plan, x, bias, weights)


def _tiles_then_sums(array, plan, x, bias, weights):
    """tile_by_tile on the rows x (all of them, or a piece)."""
    vmm, add = get_primitive(plan.kind), get_primitive("AddInTile")
    tiles = list(zip(plan.names, plan.arrays, plan.tile_attrs, weights))
    total, first = None, 0
    for n, attrs in zip(plan.links, plan.link_attrs):
        parts = [vmm.reference(array, [x, w], {**a, "_node": name, "_arrays": arrays})[0]
                 for name, arrays, a, w in tiles[first:first + n]]
        running = [] if total is None else [total]
        total = add.reference(array, [None if running else bias] + parts + running, attrs)[0]
        first += n
    return total


@dataclass
class _Prepared:
    """A layer's weights as the fused products read them, and the tiles' counts per row."""
    dtype: type                  # the products' type
    tile_ids: set
    macs_per_row: int
    adds_per_row: int
    stacks: list = None          # [_Stack] (float; integer layers that are mostly zeros)
    additions: list = None       # float: AddInTile's additions, see _additions
    acc: type = None             # integer: the type the products' sums are added in
    products: list = None        # integer: [(first row, end row, float32 weight [rows, width]
                                 # or integer weight [width, rows]: _wide_product)]

    def count(self, array, vectors):
        array.tile_ids.update(self.tile_ids)
        array.vmm_invocations += vectors * len(self.tile_ids)
        array.macs += vectors * self.macs_per_row
        array.add_elements += vectors * self.adds_per_row


def _prepared(array, plan, x, bias, weights):
    """The layer's weights as the fused products read them, made once per weight set (None:
    the layer runs tile by tile)."""
    key = (tuple(id(w) for w in weights), x.dtype, x.shape[-1])
    held = plan.prepared.get(key)
    if held is not None and all(a is b for a, b in zip(held[0], weights)):
        return held[1]
    made = _prepare(array, plan, x, bias, weights)
    plan.prepared = {key: (tuple(weights), made)}    # the weights stay alive with their ids
    return made


def _prepare(array, plan, x, bias, weights):
    spans = list(zip(plan.offsets, (w.shape[1] for w in weights)))
    if any(w.ndim != 2 for w in weights) or \
            any(off + w.shape[0] > x.shape[-1] for off, w in zip(plan.row_offsets, weights)) or \
            max(o + m for o, m in spans) > plan.width:
        return None                  # the tile path says what is wrong
    tile_ids, macs = set(), 0
    for name, w in zip(plan.arrays, weights):
        for i, ri in chunks(w.shape[0], array.rows):
            for j, mj in chunks(w.shape[1], array.cols):
                tile_ids.add((name, i, j))
                macs += ri * mj
    adds = _additions_count(plan, spans) + (plan.width if bias is not None else 0)
    if any(w.shape[0] > array.rows for w in weights):   # rows over several arrays: tile path
        return None
    if plan.kind == "QVMM":
        integer = _integer_products(plan, x, bias, weights)
        if integer is None:
            return None
        acc, dtype, products = integer
        if products is None:       # mostly zeros as one matrix (depthwise): group by group
            return _Prepared(dtype, tile_ids, macs, adds, acc=acc,
                             stacks=_stacks(plan, weights, dtype))
        return _Prepared(dtype, tile_ids, macs, adds, acc=acc, products=products)
    stacks = _stacks(plan, weights, np.float64)
    return _Prepared(np.float64, tile_ids, macs, adds, stacks=stacks,
                     additions=_additions(plan, stacks))


def _additions_count(plan, spans):
    """AddInTile's count of additions per row: a partial landing on written columns adds its
    columns; in a chain, each link after the first also adds the running sum (its last
    partial, every column) to its tiles'."""
    adds, first = 0, 0
    for k, n in enumerate(plan.links):
        written = np.zeros(plan.width, dtype=bool)
        for o, m in spans[first:first + n] + ([(0, plan.width)] if k else []):
            if written[o:o + m].any():
                adds += m
            written[o:o + m] = True
        first += n
    return adds


def _additions(plan, stacks):
    """AddInTile's additions of the partials, as [(stack, group, first product column, end
    column, first output column)]: grouped in rounds, round k adding each column's k-th
    partial, so each column still receives its partials in AddInTile's order. The partials
    of a round land on distinct columns, so neighbours from the same product are one
    addition (tiles of one row range written as separate VMM nodes, as lowerings before
    bands did: a 3x3 conv's two column tiles per row group, 38 additions -> 19)."""
    source = {t: (s, g, a, b) for s, stack in enumerate(stacks)
              for g, cols in enumerate(stack.cols) for t, a, b in cols}
    last = np.zeros(plan.width, dtype=np.int64)      # per column: its last partial's round
    rounds = {}
    for t in range(len(plan.offsets)):
        s, g, a, b = source[t]
        o = plan.offsets[t]
        k = int(last[o:o + b - a].max(initial=0)) + 1
        last[o:o + b - a] = k
        rounds.setdefault(k, []).append((s, g, a, b, o))
    out = []
    for k in sorted(rounds):
        merged = []
        for s, g, a, b, o in sorted(rounds[k], key=lambda e: e[4]):
            if merged and merged[-1][:2] == (s, g) and merged[-1][3] == a and \
                    merged[-1][4] + a - merged[-1][2] == o:      # the product's next columns
                merged[-1] = merged[-1][:3] + (b, merged[-1][4])
            else:
                merged.append((s, g, a, b, o))
        out.extend(merged)
    return out


@dataclass
class _Stack:
    """Row groups of one shape: T matrices [R, M], each multiplied by its rows of x in a BLAS
    product [V, R] x [R, M] of the products' type, as for a lone group.

    The matrices are held in the weights' own type (float32: half the bytes of float64), each
    stored column by column, and copied into one float64 matrix (in cache) just before its
    product: on few rows V (a small image's late layers) a product is bound by reading its
    weights, and OpenBLAS copies (packs) a matrix stored column by column the fastest.
    Neither changes the product's bits: the same float64 values go through the same
    kernel."""
    row_offsets: list            # each group's first row
    rows: int                    # R
    held: np.ndarray             # [T, M, R]: each group's matrix, transposed
    dtype: type                  # the products' type
    cols: list                   # per group: [(tile, first column, end column)]
    dest: np.ndarray = None      # output column of each of the T * M product columns
    scratch: np.ndarray = None   # [M, R] of dtype: the matrix being multiplied

    def product(self, x):
        """[T, V, M]: each group's rows of x times its matrix."""
        out = np.empty((len(self.row_offsets), x.shape[0], self.held.shape[1]),
                       dtype=self.dtype)
        for g, off in enumerate(self.row_offsets):
            matrix = self.held[g]
            if matrix.dtype != self.dtype:
                if self.scratch is None:
                    self.scratch = np.empty(matrix.shape, dtype=self.dtype)
                np.copyto(self.scratch, matrix)
                matrix = self.scratch
            np.matmul(x[:, off:off + self.rows], matrix.T, out=out[g])
        return out


def _stacks(plan, weights, dtype):
    """Tiles reading the same rows side by side in one matrix, and such row groups of equal
    shape stacked (in the order they first appear), multiplied in `dtype`. When every output
    column receives one partial (a depthwise layer's tiles, or a single row tile), `dest`
    places them all at once."""
    members = {}
    for t, (off, w) in enumerate(zip(plan.row_offsets, weights)):
        members.setdefault((off, w.shape[0]), []).append(t)
    stacks = {}
    for (off, r), tiles in members.items():
        start, cols = 0, []
        for t in tiles:
            cols.append((t, start, start + weights[t].shape[1]))
            start += weights[t].shape[1]
        # transposed: [M, R], each tile's columns one after another
        matrix = np.concatenate([weights[t].T for t in tiles], axis=0)
        stacks.setdefault(matrix.shape, []).append((off, matrix, cols))
    cover = np.zeros(plan.width, dtype=np.int64)
    for o, w in zip(plan.offsets, weights):
        cover[o:o + w.shape[1]] += 1
    out = []
    for (_, r), groups in stacks.items():
        held = np.ascontiguousarray(np.stack([g[1] for g in groups]))
        stack = _Stack([g[0] for g in groups], r, held, dtype, [g[2] for g in groups])
        if cover.max(initial=0) <= 1:
            stack.dest = np.concatenate([np.arange(plan.offsets[t], plan.offsets[t] + b - a)
                                         for cols in stack.cols for t, a, b in cols])
        out.append(stack)
    return out


def _float_sum(prepared, rows, bias, dtype, width):
    """VMM per tile (float64 products rounded to the rows' type) and AddInTile (float64 sum
    of the tiles' partials in its order, plus the bias), rounded to the rows' type."""
    vectors = rows.shape[0]
    stacks = prepared.stacks
    if all(stack.dest is not None for stack in stacks):
        # one partial per column: AddInTile's sum is 0 + p + b rounded once, and a float64
        # sum of two float32 numbers rounded to float32 is their float32 sum (double
        # rounding is innocuous for + when 53 >= 2 * 24 + 2), so it runs in float32
        exact = dtype == np.float32 and (bias is None or bias.dtype == np.float32)
        y = np.zeros((vectors, width), dtype=dtype if exact else np.float64)
        for stack in stacks:
            product = stack.product(rows).astype(dtype)      # [T, V, M]
            if len(product) == 1 and np.array_equal(stack.dest, np.arange(width)):
                y += product[0]                              # 0 + p, as AddInTile
            else:
                y[:, stack.dest] += product.transpose(1, 0, 2).reshape(vectors, -1)
        if bias is not None:
            y += bias
        return y.astype(dtype, copy=False)
    y = np.zeros((vectors, width), dtype=np.float64)
    products = [stack.product(rows).astype(dtype) for stack in stacks]     # [T, V, M] each
    for s, g, a, b, o in prepared.additions:
        y[:, o:o + b - a] += products[s][g, :, a:b]
    if bias is not None:
        y += bias
    return y.astype(dtype)


def _integer_products(plan, x, bias, weights):
    """(accumulator type, product type, products): the layer's integer weights placed in one
    [rows, width] matrix cut into row ranges whose products are exact in float32 (else one
    float64 product, the matrix held as integers [width, rows]), or None as products when
    that matrix would be mostly zeros (the tiles are grouped as for float layers, each group
    exact in its type). None when a tile could overflow its accumulator or a sum could pass
    2^53: the tile path is then the judge."""
    if x.dtype.kind not in "iu" or any(w.dtype.kind not in "iu" for w in weights):
        return None
    x_max = max(abs(int(np.iinfo(x.dtype).min)), int(np.iinfo(x.dtype).max))
    acc_max = np.iinfo(np.int32 if plan.acc_bits == 32 else np.int64).max
    magnitudes = [np.abs(w.astype(np.int64)) for w in weights]
    if any(w.shape[0] * x_max * int(m.max(initial=0)) > acc_max
           for w, m in zip(weights, magnitudes)):
        return None
    column_sum = np.zeros(plan.width, dtype=np.int64)      # sum of |w| over the layer's rows
    for o, m in zip(plan.offsets, magnitudes):
        column_sum[o:o + m.shape[1]] += m.sum(axis=0)
    bias_max = 0 if bias is None else int(np.abs(bias.astype(np.int64)).max(initial=0))
    total = x_max * int(column_sum.max(initial=0)) + bias_max
    if total >= FLOAT64_EXACT:
        return None
    acc = np.int32 if plan.acc_bits == 32 and total <= acc_max else \
        np.int64 if plan.acc_bits == 64 else np.float64
    lo = min(plan.row_offsets)
    hi = max(off + w.shape[0] for off, w in zip(plan.row_offsets, weights))
    if (hi - lo) * plan.width > 2 * sum(w.size for w in weights):
        per_tile = max(x_max * int(m.sum(axis=0).max(initial=0)) for m in magnitudes)
        return acc, np.float32 if per_tile < FLOAT32_EXACT else np.float64, None
    full = np.zeros((hi - lo, plan.width), dtype=np.int64)
    magnitude = np.zeros((hi - lo, plan.width), dtype=np.int64)   # sum of |w| per cell
    for off, w, m, o in zip(plan.row_offsets, weights, magnitudes, plan.offsets):
        full[off - lo:off - lo + w.shape[0], o:o + w.shape[1]] += w
        magnitude[off - lo:off - lo + w.shape[0], o:o + w.shape[1]] += m
    # cut at tile row boundaries, each range as long as its float32 bound allows
    bounds = sorted({off - lo for off in plan.row_offsets} | {hi - lo})
    cuts, start, column_sum = [], 0, np.zeros(plan.width, dtype=np.int64)
    for a, b in zip(bounds, bounds[1:]):
        piece = magnitude[a:b].sum(axis=0)
        if a > start and x_max * int((column_sum + piece).max()) >= FLOAT32_EXACT:
            cuts.append((start, a))
            start, column_sum = a, np.zeros(plan.width, dtype=np.int64)
        column_sum += piece
    cuts.append((start, hi - lo))
    exact32 = all(x_max * int(magnitude[a:b].sum(axis=0).max(initial=0)) < FLOAT32_EXACT
                  for a, b in cuts)
    if exact32:
        return acc, np.float32, [(lo + a, lo + b, full[a:b].astype(np.float32))
                                 for a, b in cuts]
    # float64 products (int16): the weights held as integers, transposed, a quarter of the
    # bytes; _wide_product widens them piece by piece
    largest = int(np.abs(full).max(initial=0))
    narrow = next(t for t in (np.int8, np.int16, np.int32, np.int64)
                  if largest <= np.iinfo(t).max)
    return acc, np.float64, [(lo, hi, np.ascontiguousarray(full.T, dtype=narrow))]


WIDE_PIECE_ROWS = 256     # rows widened to float64 at a time: [width, 256], 2 KiB a column


def _wide_product(x, held):
    """x [V, R] times the integer weights held transposed [M, R], in float64: each piece of
    rows widened into a scratch matrix [M, r] that multiplies x's piece from the left (as
    stored, a little faster than x times its transpose), the products summed; all exact, as
    every partial sum is below 2^53."""
    y = None
    scratch = np.empty((held.shape[0], min(WIDE_PIECE_ROWS, held.shape[1])))
    for a, r in chunks(held.shape[1], WIDE_PIECE_ROWS):
        matrix = scratch[:, :r]
        np.copyto(matrix, held[:, a:a + r])
        part = matrix @ x[:, a:a + r].T                        # [M, V]
        if y is None:
            y = part
        else:
            y += part
    return y.T


def _integer_sum(prepared, offsets, rows, bias, width):
    """The exact integer sums (in the accumulator's type when it holds them all): integers
    add in any order, so the tiles' partials are added as they come."""
    acc = prepared.acc
    y = None
    for a, b, matrix in prepared.products or ():
        product = rows[:, a:b] @ matrix if matrix.dtype.kind == "f" else \
            _wide_product(rows[:, a:b], matrix)
        product = product.astype(acc)                        # integers: the cast is exact
        if y is None:
            y = product
        else:
            y += product
    if prepared.stacks:
        y = np.zeros((rows.shape[0], width), dtype=acc)
        for stack in prepared.stacks:
            product = stack.product(rows).astype(acc)        # [T, V, M]
            if stack.dest is not None:
                y[:, stack.dest] += product.transpose(1, 0, 2).reshape(rows.shape[0], -1)
                continue
            for g, cols in enumerate(stack.cols):
                for t, a, b in cols:
                    y[:, offsets[t]:offsets[t] + b - a] += product[g, :, a:b]
    if bias is not None:
        y += bias.astype(acc)
    return y
