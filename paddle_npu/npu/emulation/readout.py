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


def sliced_product(b, x, w, r, a):
    """The product as the array reads it out (ops/readout.py), in float64 (every value an
    integer below 2^53)."""
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
    if inputs > 1:      # sign and magnitude
        x_sign, x_mag = b.op("Sign", x), b.op("Abs", x)
    hi = (1 << (r.adc_bits - 1)) - 1 if r.adc_bits else None      # sign and magnitude
    lo = -hi if r.adc_bits else None
    acc, i = None, 0
    for k in range(inputs):
        xk = x if inputs == 1 else b.op("Mul", x_sign, _digits(b, x_mag, d * k, d))
        for shift, sign, ws in cells:
            y = b.op("MatMul", xk, ws)
            if r.adc_bits:
                e = a["adc_shifts"][i]
                if e:           # the nearest code, a tie to the even one (Round)
                    y = b.op("Round", b.op("Div", y, _double(b, 2.0 ** e)))
                y = b.op("Clip", y, _double(b, lo), _double(b, hi))
                if e:
                    y = b.op("Mul", y, _double(b, 2.0 ** e))
            term = b.op("Mul", y, _double(b, sign * 2.0 ** (d * k + shift)))
            acc = term if acc is None else b.op("Add", acc, term)
            i += 1
    if r.weight_scheme == "offset":
        total = b.op("ReduceSum", x, b.const([-1]), keepdims=1)
        acc = b.op("Sub", acc, b.op("Mul", total, _double(b, 2.0 ** (bits - 1))))
    return acc
