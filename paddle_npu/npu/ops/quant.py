"""Integer primitives of a quantised NPU model: Quantize, Dequantize, QVMM,
Requantize (and QDepthwiseConv, the vector unit's depthwise layers: ops/depthwise.py).

The arithmetic, one convention everywhere (symmetric, zero point 0):

    Quantize     q = saturate(round_half_even(x / s))           float -> int8 / int16
    QVMM         acc = sum over r of x_q[r] * w_q[r, m]         exact, int32 (int64 acc_bits=64);
                 or as an analog array reads it out (weights over cells, inputs bit by
                 bit, ADCs: ops/readout.py)
    AddInTile    acc = sum of the row tiles' partials + bias_q  (the existing primitive, exact
                 on integers)
    Requantize   y = saturate(round_half_away(acc * M[m] / 2^shift[m]))   per output column;
                 M and D = 2^shift are int64 constants, the product is int64
    Dequantize   x = float32(q) * s
"""
import numpy as np

from .base import Arg, Attr, Primitive, primitive
from .readout import of_attrs, sliced_product

_INT_OF_BITS = {8: np.int8, 16: np.int16}
_ACC_OF_BITS = {32: np.int32, 64: np.int64}


def qrange(bits):
    """(qmin, qmax) of a signed integer of `bits` bits."""
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def int_type(bits):
    """The NumPy type of a signed integer of `bits` bits (8 or 16)."""
    if bits not in _INT_OF_BITS:
        raise ValueError(f"{bits}-bit integers are not supported (8 or 16)")
    return _INT_OF_BITS[bits]


def acc_type(acc_bits):
    """The NumPy type of an `acc_bits`-bit accumulator (32 or 64)."""
    return _ACC_OF_BITS[acc_bits]


def quantize_array(x, scale, bits):
    """The NumPy Quantize: saturate(round_half_even(x / scale)) as int8 / int16."""
    lo, hi = qrange(bits)
    x = np.asarray(x, np.float32)
    q = np.rint(x / np.float32(scale))
    return np.clip(q, lo, hi).astype(int_type(bits))


@primitive
class Quantize(Primitive):
    """Y = saturate(round_half_even(X / S)) as a signed integer of `bits` bits (zero point 0):
    what ONNX QuantizeLinear computes for int8, for int16 as well."""
    placed_as = "VMM"     # a part of an integer matrix layer: runs with its arrays

    inputs = (Arg("X", "float tensor"), Arg("S", "scale, a float32 scalar"))
    outputs = (Arg("Y", "int8 / int16 tensor of X's shape"),)
    attributes = (Attr("bits", "int", "8 or 16", 8),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, s = inputs
        array.moved_elements += x.size
        return [quantize_array(x, s, cls.attrs_of(attrs)["bits"])]


@primitive
class Dequantize(Primitive):
    """Y = float32(X) * S: an integer tensor back to real values (DequantizeLinear)."""
    placed_as = "VMM"     # a part of an integer matrix layer: runs with its arrays

    inputs = (Arg("X", "integer tensor (int8 / int16; int32 accumulators)"),
              Arg("S", "scale: a float32 scalar, or one per element of X's last axis"))
    outputs = (Arg("Y", "float32 tensor of X's shape"),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, s = inputs
        return [x.astype(np.float32) * np.float32(s)]


def in_accumulator(sums, acc_bits, op, node):
    """Exact integer sums in the `acc_bits`-bit accumulator's type; an OverflowError naming
    the node where one does not fit (the integer primitives' references)."""
    dtype = acc_type(acc_bits)
    info = np.iinfo(dtype)
    if sums.size and (sums.min() < info.min or sums.max() > info.max):
        raise OverflowError(f"{op} {node}: the {acc_bits}-bit accumulator overflows")
    return sums.astype(dtype)


def _exact_type(x, w, r):
    """The cheapest type whose BLAS product of integer rows `x` and matrix `w` (`r` rows) is
    exact: every partial sum is an integer below r * max|x| * max|w|, which float32 holds
    exactly below 2^24 (int8 layers on 256-row arrays) and float64 below 2^53."""
    x_max = max(abs(int(np.iinfo(x.dtype).min)), int(np.iinfo(x.dtype).max))
    w_max = int(np.abs(w.astype(np.int64)).max(initial=0))
    bound = r * x_max * w_max
    return np.float32 if bound < 2 ** 24 else np.float64 if bound < 2 ** 53 else np.int64


@primitive
class QVMM(Primitive):
    """Y[..., k, :] = X[..., k, row_offset : row_offset + R] @ W on integers: int8 (or int16)
    rows times the int8 (int16) matrix held by the array, summed exactly into an
    `acc_bits`-bit accumulator (32 for int8 layers, 64 for int16 ones).

    A stack of T alike tiles W [T, R, M] on T arrays reads T of X's blocks [..., B, K, R]
    from `block_offset` as VMM's stack reads its X (ops/vmm.py), each tile its own rows;
    read out exactly. A layer of many such tiles is cut into stacks whose partials AddInTile
    sums link by link (mappers/matrix.py)."""
    placed_as = "VMM"     # a part of an integer matrix layer: runs with its arrays

    inputs = (Arg("X", "integer rows [..., K, R_total]; for a stack [..., B, K, R]"),
              Arg("W", "constant integer weight tile [R, M], or a stack of T tiles "
                       "[T, R, M]"))
    outputs = (Arg("Y", "[..., K, M] ([..., T, K, M] for a stack), int32 / int64"),)
    attributes = (Attr("row_offset", "int", "first column of X fed to the array's row 0 "
                                            "(0 for a stack)", 0),
                  Attr("acc_bits", "int", "accumulator width: 32 or 64", 32),
                  # the analog read-out (ops/readout.py); all 0: an exact product
                  Attr("cell_bits", "int", "bits per cell (0: a weight in one cell)", 0),
                  Attr("dac_bits", "int", "input bits per cycle (0: all at once)", 0),
                  Attr("adc_bits", "int", "bits of the ADC reading each column (0: exact)", 0),
                  Attr("weight_scheme", "string", '"differential" (w+ - w-, two columns) or '
                                                  '"offset" (w + 2^(B-1))', "differential"),
                  Attr("adc_shifts", "ints", "the ADC's step 2^e per pair of input and "
                                             "weight slices", []),
                  Attr("block_offset", "int", "a stack: the first of X's blocks (its axis "
                                              "-3) fed to tile 0", 0))

    @classmethod
    def infer(cls, in_shapes, attrs):
        x, w = in_shapes[0], in_shapes[1]
        if len(w) == 3:
            cls.check_stack(attrs, x, w)
            return [list(x[:-3]) + [w[0]] + list(x[-2:-1]) + [w[-1]]]
        return [list(x[:-1]) + [w[-1]]]

    @classmethod
    def check_stack(cls, attrs, x, w):
        """Raises unless X [..., B, K, R] holds the T blocks a stack W [T, R, M] reads from
        block_offset, with row_offset 0 and an exact read-out."""
        t, r, m = w
        a = cls.attrs_of(attrs)
        first = a["block_offset"]
        if len(x) < 3 or not (isinstance(x[-3], int) and 0 <= first and
                              first + t <= x[-3]) or x[-1] != r or a["row_offset"]:
            raise ValueError(f"QVMM: a stack of {t} tiles [{r}, {m}] reads blocks [..., "
                             f"{first}:{first + t}, K, {r}] with row_offset 0 (got "
                             f"{list(x)}, row_offset {a['row_offset']})")
        if not of_attrs(a).ideal:
            raise ValueError("QVMM: a stack is read out exactly (its tiles' analog "
                             "read-outs are set tile by tile)")

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        a = cls.attrs_of(attrs)
        if w.ndim == 3:
            cls.check_stack(attrs, x.shape, w.shape)
            first = a["block_offset"]
            rows = x[..., first:first + w.shape[0], :, :]
            y = array.vmm_stack(attrs.get("_arrays", attrs.get("_node")), rows, w,
                                _exact_type(x, w, w.shape[1]))
            return [in_accumulator(y, a["acc_bits"], "QVMM", attrs.get("_node"))]
        off, r = a["row_offset"], w.shape[0]
        if x.shape[-1] < off + r:
            raise ValueError(f"QVMM: X has {x.shape[-1]} columns, row_offset {off} + "
                             f"{r} weight rows do not fit")
        held = attrs.get("_arrays", attrs.get("_node"))
        readout = of_attrs(a)
        if readout.ideal:
            y = array.vmm(held, x, w, off, _exact_type(x, w, r))
        else:
            node = attrs.get("_node")
            peaks = None if array.adc_peaks is None else array.adc_peaks.setdefault(node, [])
            clips = None if array.adc_clips is None else array.adc_clips.setdefault(node, [0, 0])
            y = sliced_product(x[..., off:off + r], w, readout, a["adc_shifts"], peaks, clips,
                               array.noise and array.noise.of(node))
            array.count(held, y.size // y.shape[-1], r, w.shape[1])
        return [in_accumulator(y, a["acc_bits"], "QVMM", attrs.get("_node"))]


def requantize_array(acc, mult, div, bits, relu=0):
    """The NumPy Requantize (see the module docstring). Divisors that are powers of two
    (2^shift, as the lowering writes them) divide by an arithmetic shift: for p < 0,
    -((-p + h) // d) = (p + h - 1) >> shift (h = d // 2), so no sign is taken apart and
    no int64 division runs; the same integers."""
    p = acc.astype(np.int64)
    p *= mult.astype(np.int64)
    d = div.astype(np.int64)
    lo, hi = qrange(bits)
    if np.all(d > 0) and not np.any(d & (d - 1)):
        negative = p < 0
        p += d // 2
        p -= negative if np.all(d > 1) else negative * (d > 1)    # d = 1: p stays p
        p >>= np.frexp(d.astype(np.float64))[1].astype(np.int64) - 1    # log2(d), exact
    else:
        p = np.sign(p) * ((np.abs(p) + d // 2) // d)
    np.clip(p, 0 if relu else lo, hi, out=p)
    return p.astype(int_type(bits))


@primitive
class Requantize(Primitive):
    """Y = saturate(round_half_away_from_zero(Acc * M / D)) per output column (the last
    axis), D = 2^shift: the accumulator rescaled to the next tensor's int8 / int16 grid by
    a fixed-point multiplier, as integer NPUs do (no float on the way). relu=1 saturates at
    0 below (a fused ReLU)."""
    placed_as = "VMM"     # a part of an integer matrix layer: runs with its arrays

    inputs = (Arg("Acc", "int32 / int64 accumulator [..., M]"),
              Arg("M", "int64 multiplier per column [M]"),
              Arg("D", "int64 divisor 2^shift per column [M]"))
    outputs = (Arg("Y", "int8 / int16 [..., M]"),)
    attributes = (Attr("bits", "int", "8 or 16", 8),
                  Attr("relu", "int", "1: saturate at 0 from below", 0))

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        acc, mult, div = inputs
        a = cls.attrs_of(attrs)
        return [requantize_array(acc, mult, div, a["bits"], a["relu"])]
