"""The analog read-out of an integer tile in a function body (ops/readout.py): QVMM's
product sliced over cells and input bits, each column sum through the ADC.

The slices are integers: the weight's cells (unsigned, a few bits) and the input's digits
(with the input's sign). Where both fit bytes, one MatMulInteger of the stacked slices sums
them in int32; otherwise a float64 MatMul does (every value an integer below 2^53). Either
way onnxruntime computes the reference's integers. The cells depend on the weights alone,
so onnxruntime folds them into constants when the session is made, keeping every
intermediate of the folding until it ends: they are computed in bytes (a float64 chain held
some 35 MB per 256 x 256 tile, and a model of a thousand tiles ran out of memory)."""
import numpy as np
from onnx import numpy_helper

from .body import DOUBLE

INT8, UINT8, INT16, UINT16, INT32 = 3, 2, 5, 4, 6     # TensorProto's
# the largest sum of two products MatMulInteger may form: x86's u8 x s8 kernels without
# VNNI add products in pairs into int16
PAIR_LIMIT = 32767


def _typed(b, value, dtype):
    return b.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype)))


def sliced_product(b, x, w, r, a, rank):
    """The product as the array reads it out (ops/readout.py) of the integer rows x (rank
    `rank`, [..., N, R]) and the integer weights w [R, M]: the input slices stacked
    [K, 1, ..., N, R] times the cells stacked [1, J, 1..., R, M] in one batched product
    [K, J, ..., N, M], every reading through the ADC at once (its step per pair of slices a
    constant [K, J, 1, ...]), weighted by each pair's place and summed over K and J."""
    bits = 8 if a["acc_bits"] == 32 else 16       # the layer's: its rows' and weights'
    d = r.dac_bits if 0 < r.dac_bits < bits else bits
    inputs = -(-bits // d)
    differential = r.weight_scheme == "differential"
    mag = bits - 1 if differential else bits
    c = r.cell_bits if 0 < r.cell_bits < mag else mag
    slices = -(-mag // c)
    signs = (1, -1) if differential else (1,)
    reach = (1 << (bits - 1)) if inputs == 1 else (1 << d) - 1     # the largest |x slice|
    small = (inputs > 1 or bits == 8) and reach <= 128 and \
        2 * reach * ((1 << c) - 1) <= PAIR_LIMIT
    # the cells part by part (ops/readout.py's order is slice by slice, the parts inner)
    order = [(s, sign) for sign in signs for s in range(slices)]
    cells = _cells(b, w, bits, differential, c, slices, rank, UINT8 if small else DOUBLE)
    digits = _digits_of_input(b, x, bits, d, inputs, rank, INT8 if small else DOUBLE)
    if small:
        y = b.op("Cast", b.op("MatMulInteger", digits, cells), to=DOUBLE)
    else:
        y = b.op("MatMul", digits, cells)                   # [K, J, ..., N, M]
    pairs = [inputs, len(order)] + [1] * rank
    place = [order.index((s, sign)) for s in range(slices) for sign in signs]
    if r.adc_bits:
        hi = (1 << (r.adc_bits - 1)) - 1       # sign and magnitude
        given = np.asarray(a["adc_shifts"], np.float64).reshape(inputs, len(order))
        shifts = np.empty_like(given)
        shifts[:, place] = given
        step = np.exp2(shifts).reshape(pairs)
        y = b.op("Round", b.op("Div", y, _typed(b, step, np.float64)))   # ties to even
        y = b.op("Mul", b.op("Clip", y, _typed(b, -hi, np.float64),
                             _typed(b, hi, np.float64)), _typed(b, step, np.float64))
    weight = np.array([[sign * 2.0 ** (d * k + c * s) for s, sign in order]
                       for k in range(inputs)]).reshape(pairs)
    acc = b.op("ReduceSum", b.op("Mul", y, _typed(b, weight, np.float64)), b.const([0, 1]),
               keepdims=0)
    if not differential:
        total = b.op("ReduceSum", b.op("Cast", x, to=DOUBLE), b.const([-1]), keepdims=1)
        acc = b.op("Sub", acc, b.op("Mul", total, _typed(b, 2.0 ** (bits - 1), np.float64)))
    return acc


def _cells(b, w, bits, differential, c, slices, rank, to):
    """The cells of the integer weights w [R, M], [1, J, 1 per axis of X before its rows,
    R, M] of type `to`, part by part (differential: w+ then w-; offset: w + 2^(B-1)), each
    part's slices low bits first; in the narrowest types onnxruntime divides."""
    if bits == 8:
        unsigned = UINT8
        if differential:
            zero = _typed(b, 0, np.int8)
            parts = [b.op("Max", w, zero), b.op("Max", b.op("Neg", w), zero)]
        else:
            parts = [b.op("Add", b.op("Cast", w, to=INT16), _typed(b, 128, np.int16))]
        dtype = np.uint8
    else:
        unsigned, wide = UINT16, b.op("Cast", w, to=INT32)
        if differential:
            zero = _typed(b, 0, np.int32)
            parts = [b.op("Max", wide, zero), b.op("Max", b.op("Neg", wide), zero)]
        else:
            parts = [b.op("Add", wide, _typed(b, 1 << 15, np.int32))]
        dtype = np.uint16
    shape = [1, slices] + [1] * rank
    if slices == 1:         # a weight in one cell: the part itself
        stacked = [b.op("Unsqueeze", b.op("Cast", p, to=unsigned), b.const(list(range(rank))))
                   for p in parts]
    else:   # [R, M] against [1, S, 1..., 1, 1]: the slices stacked where the product wants
        divisors = np.array([1 << (c * s) for s in range(slices)], dtype).reshape(shape)
        stacked = [b.op("Mod", b.op("Div", b.op("Cast", p, to=unsigned),
                                    _typed(b, divisors, dtype)), _typed(b, 1 << c, dtype))
                   for p in parts]
    cells = stacked[0] if len(stacked) == 1 else b.op("Concat", *stacked, axis=1)
    return b.op("Cast", cells, to=to)


def _digits_of_input(b, x, bits, d, inputs, rank, to):
    """The integer rows x [..., N, R] fed d bits of their magnitude a cycle, each slice with
    the row's sign: [K, 1, ..., N, R] of type `to`."""
    if inputs == 1:
        return b.op("Cast", b.op("Unsqueeze", x, b.const([0, 1])), to=to)
    wide = b.op("Cast", x, to=INT32)
    divisors = np.array([1 << (d * k) for k in range(inputs)], np.int32).reshape(
        [inputs, 1] + [1] * rank)
    digits = b.op("Mod", b.op("Div", b.op("Abs", wide), _typed(b, divisors, np.int32)),
                  _typed(b, 1 << d, np.int32))
    return b.op("Cast", b.op("Mul", digits, b.op("Sign", wide)), to=to)
