"""The analog read-out of an integer tile in a function body (ops/readout.py): QVMM's
product sliced over cells and input bits, each column sum through the ADC, written in
float64 ops (every value an integer below 2^53, so onnxruntime computes the reference's
integers)."""
import numpy as np
from onnx import numpy_helper



def _double(b, value):
    return b.op("Constant", value=numpy_helper.from_array(np.asarray(value, np.float64)))


def _digits(b, v, shift, bits):
    """Bits [shift, shift + bits) of the non-negative integers `v` (float64) as a float64
    number: the floor of v / 2^shift less its multiples of 2^bits."""
    if shift:
        v = b.op("Floor", b.op("Div", v, _double(b, 2.0 ** shift)))
    upper = b.op("Floor", b.op("Div", v, _double(b, 2.0 ** bits)))
    return b.op("Sub", v, b.op("Mul", upper, _double(b, 2.0 ** bits)))


def sliced_product(b, x, w, r, a, rank):
    """The product as the array reads it out (ops/readout.py), in float64 (every value an
    integer below 2^53, so the sums are exact in any order): the input slices stacked
    [K, ..., N, R] times the weight slices stacked [J, R, M] in one batched MatMul
    [K, J, ..., N, M], every reading through the ADC at once (its step per pair of slices
    a constant [K, J, 1, ...]), weighted by each pair's place and summed over K and J.
    rank: X's."""
    bits = 8 if a["acc_bits"] == 32 else 16       # the layer's: its rows' and weights'
    d = r.dac_bits if 0 < r.dac_bits < bits else bits
    inputs = -(-bits // d)
    if r.weight_scheme == "differential":
        mag = bits - 1
        parts = [(1, b.op("Relu", w)), (-1, b.op("Relu", b.op("Neg", w)))]
    else:
        mag = bits
        parts = [(1, b.op("Add", w, _double(b, 2.0 ** (bits - 1))))]
    c = r.cell_bits if 0 < r.cell_bits < mag else mag
    cells = [(c * s, sign, _digits(b, p, c * s, c))
             for s in range(-(-mag // c)) for sign, p in parts]
    zero = b.const([0])
    if inputs == 1:
        xs = b.op("Unsqueeze", x, zero)
    else:               # sign and magnitude
        x_sign, x_mag = b.op("Sign", x), b.op("Abs", x)
        xs = b.op("Concat", *(b.op("Unsqueeze", b.op("Mul", x_sign, _digits(b, x_mag, d * k, d)),
                                    zero) for k in range(inputs)), axis=0)
    ws = b.op("Concat", *(b.op("Unsqueeze", cell, zero) for _, _, cell in cells), axis=0)
    # [1, J, 1 per axis of X before its rows, R, M]: broadcast against the input stack
    ws = b.op("Unsqueeze", ws, b.const([0] + list(range(2, rank))))
    y = b.op("MatMul", b.op("Unsqueeze", xs, b.const([1])), ws)     # [K, J, ..., N, M]
    pairs = [inputs, len(cells)] + [1] * rank
    if r.adc_bits:
        hi = (1 << (r.adc_bits - 1)) - 1       # sign and magnitude
        step = np.exp2(np.asarray(a["adc_shifts"], np.float64)).reshape(pairs)
        y = b.op("Round", b.op("Div", y, _double(b, step)))   # the nearest code, ties to even
        y = b.op("Mul", b.op("Clip", y, _double(b, -hi), _double(b, hi)), _double(b, step))
    weight = np.array([[sign * 2.0 ** (d * k + shift) for shift, sign, _ in cells]
                       for k in range(inputs)]).reshape(pairs)
    acc = b.op("ReduceSum", b.op("Mul", y, _double(b, weight)), b.const([0, 1]), keepdims=0)
    if r.weight_scheme == "offset":
        total = b.op("ReduceSum", x, b.const([-1]), keepdims=1)
        acc = b.op("Sub", acc, b.op("Mul", total, _double(b, 2.0 ** (bits - 1))))
    return acc
