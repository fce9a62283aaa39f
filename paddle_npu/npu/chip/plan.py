"""The per-layer plan: how one matrix layer (Conv, ConvTranspose, Gemm, MatMul) goes onto
the arrays, decided by the planning pass (planning.py) before any node is emitted, from the
target, the node's marks and the calibration table. The lowerings emit from the plans
(`mappers/matrix.emit_matrix` for the tiles, float or integer alike) and record nothing;
the layers' costs are computed from the plans afterwards (cost.layer_report).

    unit             "arrays"; "vector": a depthwise layer on the vector unit; "written":
                     a product of two activations on arrays written at run time
    tiles            the arrays the kernel matrix is cut into (tiling.py)
    bands, weights   the VMM nodes: the tiles of one row range side by side (tiling.bands),
                     and the matrix each holds
    arrays_of        the earlier layer whose arrays hold these very weights (an unrolled
                     RNN's steps), or None
    bits             None: float primitives (no calibration, or the layer is marked `_cpu`);
                     8 / 16: integer primitives with these scales (`LayerScales`)
    vectors, detail  row vectors per inference and the report's line about the layer
    emit             what the layer's lowering needs besides (its window, layout, shapes)

Integer arithmetic (symmetric, zero point 0; the primitives are in ops/quant.py):

    x (float) -Quantize(s_x)-> Im2Col -> QVMM per tile (int8 x int8 -> int32)
      -> AddInTile (+ int32 bias) -> Requantize (M / 2^shift per column) -Dequantize(s_y)->

    (a depthwise layer on the vector unit: QDepthwiseConv, + its bias, in place of Im2Col,
    the tiles and AddInTile; planned by `plan_vector_layer`)

    s_x = threshold(x) / qmax          activations: per tensor, from the calibration table
    s_w[m] = max |W[:, m]| / qmax_w     weights: per output column (qmax_w = 127 / 32767)
    bias_q[m] = round(b[m] / (s_x s_w[m]))   in the accumulator's type
    M[m] / 2^shift[m] ~= s_x s_w[m] / s_y   M an integer of up to 31 bits (fewer when the
                                          accumulator bound would overflow int64)

A layer's bits, first match wins: the precision table (`Quantization.precision`) by layer
name; 16 for a layer marked high precision (`_hp` at the end of its name or of an output's,
or a 16-bit precision mark); the calibration table's own `precision` section by layer name;
either table by output name; the default. int16 layers accumulate in 64 bits. A ReLU that
alone reads a layer's output is folded into Requantize (saturating at 0, on the ReLU output's
range). Between layers values are dequantised: the vector unit's ops and the CPU see exactly
the integer grid's values.
"""
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ...errors import ConversionError
from .. import graph as g
from ..ops.im2col import column_source
from ..ops.quant import qrange
from ..ops.readout import Readout, full_scale_shifts
from .tiling import Geometry, Tile, bands, plan_tiles, tile_weight

HP_SUFFIX = "_hp"
MULT_BITS = 31


@dataclass
class Quantization:
    """What an integer lowering is given: the calibration table (calibrate.py's format, a
    dict), the default bits, a precision table {layer or output name: 8 | 16}, weight scales
    to keep {layer: per-output-channel scales} (a quantised Paddle model's), and whether a
    layer whose output has no scale in the table reads its accumulator out as floats (a QDQ
    model quantises its layers' inputs, not always their outputs: the last layer's logits)."""
    table: dict
    bits: int = 8
    precision: dict = field(default_factory=dict)
    weight_scales: dict = field(default_factory=dict)
    float_outputs: bool = False
    # {layer: per band, the ADC shift of each pair of slices} calibrated on sample inputs
    # (qlower.calibrate_adc); a layer left out reads out at its full scale
    adc_shifts: dict = field(default_factory=dict)
    # {layer: ADC bits} read out finer than the target's (quant-report --adc-until-cosine)
    adc_bits: dict = field(default_factory=dict)

    def bits_of(self, node, output_names):
        """The layer's bits (see the module docstring for the order)."""
        section = {name: 16 if p == "int16" else 8
                   for name, p in self.table.get("precision", {}).items()}
        if node.name in self.precision:
            return self.precision[node.name]
        if high_precision(node):
            return 16
        if node.name in section:
            return section[node.name]
        for name in output_names:
            for table in (self.precision, section):
                if name in table:
                    return table[name]
        return self.bits


def high_precision(node):
    """Whether the user marked the node to run at 16 bits."""
    return node.name.endswith(HP_SUFFIX) or g.precision(node) == 16 or \
        any(v.name and v.name.endswith(HP_SUFFIX) for v in node.outputs)


def fixed_point(real, acc_bound):
    """(M, D = 2^shift) int64 arrays with M / D ~= real (> 0), |acc| * M < 2^62."""
    mbits = int(min(MULT_BITS, 62 - np.ceil(np.log2(max(acc_bound, 2)))))
    if mbits < 8:
        raise ConversionError(f"accumulator bound {acc_bound:.3g} leaves no room for the "
                              "requantisation multiplier")
    real = np.asarray(real, np.float64)
    exp = np.floor(np.log2(np.maximum(real, 1e-300)))
    shift = np.clip(mbits - 1 - exp, 1, 62).astype(np.int64)
    # A ratio beyond 2^(mbits-1) (an output calibrated all zero: a tiny s_y) saturates any
    # non-zero accumulator anyway; capped, |acc| * M stays in int64 instead of wrapping.
    mult = np.minimum(np.rint(real * np.exp2(shift)), 2.0 ** mbits - 1).astype(np.int64)
    return mult, (np.int64(1) << shift)


@dataclass
class LayerScales:
    """The integer side of a layer plan."""
    input: str                   # the calibrated tensor the layer reads
    output: str                  # ... and the one it writes (a folded ReLU's output)
    relu: object                 # the ReLU node folded into Requantize, or None
    s_x: np.float32
    s_y: Optional[np.float32]    # None: the accumulator is read out as floats
    s_w: np.ndarray              # float64 (float32 values) per output column
    weights_q: list              # integer band matrices
    bias_q: Optional[np.ndarray]
    mult: Optional[np.ndarray]   # Requantize's M and D per column (None when s_y is)
    div: Optional[np.ndarray]
    kept: bool                   # s_w are the model's own (a quantised Paddle model)

    @property
    def float_out(self):
        return self.s_y is None


@dataclass
class LayerPlan:
    layer: str                   # the node's name
    op: str
    tiles: list                  # tiling.Tile: the arrays (costs, counts)
    bands: list                  # tiling.Tile: the VMM nodes (tiling.bands of the tiles)
    weights: list                # the float matrix each band holds
    bias: Optional[np.ndarray]   # [width] in the weights' dtype, or None
    width: int                   # output columns
    bits: Optional[int] = None   # None: float
    scales: Optional[LayerScales] = None
    arrays_of: Optional[str] = None   # the layer whose arrays hold these very weights
    unit: str = "arrays"         # "arrays" | "vector" | "written"
    tiling: str = "packed"       # how the tiles were cut (tiling.PLANS)
    vectors: int = 0             # row vectors per inference (N=1 where the batch is open)
    detail: str = ""             # "C=64 M=128 k=3x3 s=1 g=1 -> 32x32", ...
    other: Optional[Geometry] = None  # the kernel matrix under the other tiling (a Conv)
    extra_adds: int = 0          # additions after the tiles' (ConvTranspose's Col2Im)
    written: Optional[tuple] = None   # "written": (rows, cols, matrices, row vectors each)
    emit: dict = field(default_factory=dict)
    unit_plan: Optional["UnitPlan"] = None   # "written" in an integer lowering: its scales
    # an integer layer on arrays that read out as analog ones do (ops/readout.py): how, and
    # each band's ADC shifts; None: exactly
    readout: Optional[Readout] = None
    adc_shifts: list = field(default_factory=list)

    def qvmm_attrs(self, band):
        """The read-out attributes of band `band`'s QVMM ({} for an exact one)."""
        if self.readout is None:
            return {}
        return {**self.readout.attrs(), "adc_shifts": self.adc_shifts[band]}

    def tile_keys(self):
        """What tells, per band, that another layer's arrays hold the same weights: the
        memory of its float weights (and, integer, the scales and type they are quantised
        to); LowerContext.tile_initializer shares initializers by them too."""
        s = self.scales
        if s is None:
            return [memory_key(w) for w in self.weights]
        return [(memory_key(w), np.asarray(s.s_w[o:o + w.shape[1]]).tobytes(), q.dtype.str)
                for w, q, o in zip(self.weights, s.weights_q, self.offsets)]

    @property
    def offsets(self):
        """Each band's first output column."""
        return [t.col_start for t in self.bands]

    @property
    def sums_tiles(self):
        """Whether an AddInTile sums the bands (and adds the bias): not for one band that
        covers every column with no bias."""
        return len(self.bands) > 1 or self.bands[0].cols != self.width or self.bias is not None

    @property
    def acc_bits(self):
        return 32 if self.bits == 8 else 64

    def record(self):
        """The layer's quantisation record (kept in the model's metadata, read by the
        accuracy report and the QDQ export)."""
        s = self.scales
        return {"layer": self.layer, "op": self.op, "bits": self.bits, "input": s.input,
                "output": s.output, "relu_fused": s.relu is not None, "s_x": float(s.s_x),
                "s_y": None if s.float_out else float(s.s_y),
                "s_w_min": float(s.s_w.min()), "s_w_max": float(s.s_w.max()),
                "weight_scales_kept": s.kept, "acc_bits": self.acc_bits,
                "k": sum(t.rows for t in self.tiles), "tiles": len(self.tiles)}


def memory_key(array):
    """What tells two arrays hold the same elements without reading them: their memory."""
    return (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)


def plan_layer(node, geo, weight, bias, target, tiling, quantization=None, by_tap=False):
    """The plan of a matrix layer: `node` x (weight, a Conv's [M, Cg, KH, KW] or a [K, N]
    matrix, of kernel-matrix shape `geo`) + bias [N] or None, cut by `tiling` ("packed" /
    "per-channel") for the target's arrays; integer when `quantization` is given and the
    layer is not marked for the CPU. `by_tap`: the rows of each block-diagonal tile of a
    layer of one channel per group taken tap by tap (as Im2Col's channel_block reads it)."""
    tiles = plan_tiles(geo, tiling, target.rows, target.cols)
    merged = bands(tiles)
    matrices = [tile_weight(weight, geo, t) for t in merged]
    if by_tap:
        for i, t in enumerate(merged):
            n = t.groups[1] - t.groups[0]
            matrices[i] = matrices[i][column_source(n, geo.taps, n)]
    plan = LayerPlan(node.name, node.op_type, tiles, merged, matrices,
                     None if bias is None else bias.astype(weight.dtype),
                     geo.groups * geo.outputs, tiling=tiling)
    if quantization is not None and g.mark(node) != "cpu":
        plan.bits, plan.scales = _scales(node, plan, quantization)
        readout = Readout(**target.readout_settings())
        if readout.adc_bits and node.name in quantization.adc_bits:
            readout = replace(readout, adc_bits=quantization.adc_bits[node.name])
        if not readout.ideal:
            plan.readout = readout
            full = [full_scale_shifts(q, plan.bits, readout) for q in plan.scales.weights_q]
            given = quantization.adc_shifts.get(node.name)
            plan.adc_shifts = given if given is not None and \
                [len(s) for s in given] == [len(s) for s in full] else full
    return plan


def plan_vector_layer(node, matrix, bias, quantization=None):
    """The plan of a matrix layer the vector unit runs (DepthwiseConv): `matrix` [K, N], each
    output column the sum of its own K products (a depthwise layer's taps x channels), one
    tile standing for it, on no array, so that its scales, accumulator bound and record come
    out as a matrix layer's on the arrays; integer as `plan_layer`'s."""
    k, n = matrix.shape
    tile = Tile(0, k, 0, n, k * n)
    plan = LayerPlan(node.name, node.op_type, [tile], [tile], [matrix],
                     None if bias is None else bias.astype(matrix.dtype), n, unit="vector")
    if quantization is not None and g.mark(node) != "cpu":
        plan.bits, plan.scales = _scales(node, plan, quantization)
    return plan


def threshold_of(entry, bits):
    """A calibration table entry's clipping threshold on the `bits`-bit grid (calibrate.py:
    `threshold` for int8, `threshold16` for int16, `absmax` where a table has no
    `threshold16`: a quantised model's own scales)."""
    if bits <= 8:
        return float(entry["threshold"])
    return float(entry.get("threshold16", entry["absmax"]))


def unit_bits(node, quantization):
    """The bits of a lookup-table or written-array node (QLut, QRuntimeVMM) in an integer
    lowering, as a matrix layer's are chosen; None in a float one or for a node marked for
    the CPU."""
    if quantization is None or g.mark(node) == "cpu":
        return None
    bits = quantization.bits_of(node, [v.name for v in node.outputs])
    if bits not in (8, 16):
        raise ConversionError(f"{node.name}: {bits}-bit integers are not supported")
    return bits


@dataclass
class UnitPlan:
    """The integer side of a lookup table (Lut) or of arrays written at run time
    (RuntimeVMM) in an integer lowering: its bits and per-tensor scales (`s_y`: the output's,
    None where the accumulator is read out as floats; RuntimeVMM's written operand's is
    `s_w`), or, for a table that cannot stand for its function, why it stays float."""
    layer: str
    op: str                      # "Lut" | "RuntimeVMM"
    bits: int
    input: str
    output: str
    s_x: np.float32
    s_y: Optional[np.float32] = None
    s_w: Optional[np.float32] = None
    function: str = ""           # a Lut's
    float_why: Optional[str] = None

    def record(self):
        """What the accuracy report measures and --auto-hp may promote, as a matrix layer's
        record."""
        return {"layer": self.layer, "op": self.op, "bits": self.bits, "input": self.input,
                "output": self.output, "s_x": float(self.s_x),
                "s_y": None if self.s_y is None else float(self.s_y)}


def tensor_scale(quantization, name, bits):
    """The per-tensor scale of a calibrated tensor on the `bits`-bit grid (float32), or None
    when the calibration table lacks it."""
    entry = quantization.table["tensors"].get(name)
    if entry is None:
        return None
    return np.float32(max(threshold_of(entry, bits), 1e-12) / qrange(bits)[1])


def _folded_relu(value):
    nxt = g.single_user(value)
    return nxt if g.is_op(nxt, "Relu") else None


def _scales(node, plan, quantization):
    tensors = quantization.table["tensors"]
    source, out = node.name, node.outputs[0]
    relu = _folded_relu(out)
    out_value = relu.outputs[0] if relu else out
    if out_value.name not in tensors and quantization.float_outputs:
        relu, out_value = None, out       # the ReLU stays a vector op on the float output
    out_name = out_value.name
    float_out = quantization.float_outputs and out_name not in tensors
    bits = quantization.bits_of(node, [out_name, out.name])
    if bits not in (8, 16):
        raise ConversionError(f"layer {source}: {bits}-bit integers are not supported")
    # the operand that is not the weight (a MatMul may hold its constant first)
    in_name = next(v.name for v in node.inputs if v is not None and g.constant(v) is None)
    if in_name not in tensors:
        raise ConversionError(f"layer {source}: its input {in_name!r} is not in the "
                              "calibration table")
    if out_name not in tensors and not float_out:
        raise ConversionError(f"layer {source}: its output {out_name!r} is not in the "
                              "calibration table")
    a_lo, a_hi = qrange(bits)
    w_hi = a_hi
    s_y = None if float_out else np.float32(max(threshold_of(tensors[out_name], bits), 1e-12)
                                            / a_hi)
    offsets, width = plan.offsets, plan.width
    matrices = [w.astype(np.float64) for w in plan.weights]
    colmax = np.zeros(width)
    for off, w in zip(offsets, matrices):
        colmax[off:off + w.shape[1]] = np.maximum(colmax[off:off + w.shape[1]],
                                                  np.abs(w).max(axis=0))
    kept = quantization.weight_scales.get(source)
    s_w = None
    if kept is not None:
        s_w = np.broadcast_to(np.asarray(kept, np.float64).reshape(-1), (width,))
        if np.any(colmax / np.maximum(s_w, 1e-30) > w_hi + 0.5) or any(
                np.abs(w / s_w[o:o + w.shape[1]] - np.rint(w / s_w[o:o + w.shape[1]])).max()
                > 1e-3 for o, w in zip(offsets, matrices)):
            s_w = None            # weights changed since (BatchNorm folded): re-derive
    kept_scales = s_w is not None
    if s_w is None:
        s_w = np.where(colmax > 0, colmax, 1.0) / w_hi
    s_w = s_w.astype(np.float32).astype(np.float64)
    s_x = np.float32(max(threshold_of(tensors[in_name], bits), 1e-12) / a_hi)
    if plan.bias is not None:
        # An input calibrated all zero (threshold 0) is legitimate, its values all 0 on any
        # grid; the bias then is the output, and s_x s_w is its unit: keep s_x large enough
        # that the bias fits the accumulator with room for the products (2 bits).
        acc_bits = 32 if bits == 8 else 64
        room = float(np.max(np.abs(plan.bias.astype(np.float64)) / s_w)) / 2.0 ** (acc_bits - 3)
        s_x = max(s_x, np.float32(room))
    np_int = np.int8 if bits == 8 else np.int16
    weights_q = [np.clip(np.rint(w / s_w[o:o + w.shape[1]]), -w_hi, w_hi).astype(np_int)
                 for o, w in zip(offsets, matrices)]
    acc_bound = sum(t.rows for t in plan.tiles) * (-a_lo) * w_hi
    bias_q = None
    if plan.bias is not None:
        bias_q = np.rint(plan.bias.astype(np.float64) / (np.float64(s_x) * s_w))
        info = np.iinfo(np.int32 if bits == 8 else np.int64)
        bias_q = np.clip(bias_q, info.min, info.max).astype(info.dtype)
        acc_bound += float(np.abs(bias_q).max())
    mult = div = None
    if not float_out:
        mult, div = fixed_point(np.float64(s_x) * s_w / np.float64(s_y), acc_bound)
    return bits, LayerScales(in_name, out_name, relu, s_x, s_y, s_w, weights_q, bias_q, mult,
                             div, kept_scales)
