"""The integer primitives' function bodies: Quantize, Dequantize, QVMM, Requantize.

Every body uses only ops whose integer (or IEEE float32) semantics are exact and the same in
onnxruntime and NumPy (Div of float32, Round half to even, int64 Mul / Add / Div of
non-negative values, MatMul of integers held exactly in float64), so the NumPy references
(ops/quant.py) and onnxruntime running the bodies give bit-identical integers.
"""
import numpy as np
from onnx import helper, numpy_helper

from ..ops import quant, readout
from ..ops.quant import qrange
from .body import DOUBLE, Emulated, emulates
from .readout import sliced_product

INT64, FLOAT = 7, 1     # TensorProto's


def int_type(bits):
    """The ONNX type of a signed integer of `bits` bits (8 or 16)."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(quant.int_type(bits)))


def acc_type(acc_bits):
    """The ONNX type of an `acc_bits`-bit accumulator (32 or 64)."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(quant.acc_type(acc_bits)))


def _float_const(b, value):
    return b.op("Constant", value=numpy_helper.from_array(np.asarray(value, np.float32)))


@emulates("Quantize")
class Quantize(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"b{cls.attrs_of(attrs)['bits']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        bits = attrs["bits"]
        lo, hi = qrange(bits)
        x = b.op("Cast", "X", to=FLOAT)
        q = b.op("Round", b.op("Div", x, b.op("Cast", "S", to=FLOAT)))
        q = b.op("Clip", q, _float_const(b, lo), _float_const(b, hi))
        b.op("Cast", q, to=int_type(bits), out="Y")


@emulates("Dequantize")
class Dequantize(Emulated):

    @classmethod
    def body(cls, b, attrs, in_shapes):
        b.op("Mul", b.op("Cast", "X", to=FLOAT), b.op("Cast", "S", to=FLOAT), out="Y")


@emulates("QVMM")
class QVMM(Emulated):
    """The rows times W in float64, which holds every such sum exactly (|sum| < 2^53), cast
    to the accumulator's type. A stack's, one batched MatMul in the accumulator's type: its
    products [T, K, M] are T times a layer's output, and an integer MatMul holds them once
    where a float64 one and its cast hold them three times (a per-channel plan's stack on a
    960x960 image: tens of GB); exact, as each tile's sum fits the accumulator."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        if len(in_shapes[1]) == 3:
            cls.primitive.infer(in_shapes, attrs)
            return f"acc{a['acc_bits']}_stack{in_shapes[1][0]}_b{a['block_offset']}"
        tag = f"acc{a['acc_bits']}_o{a['row_offset']}"
        r = readout.of_attrs(a)
        if r.ideal:
            return tag
        # (the sliced body stacks the slices in front of X's axes: one body per X rank)
        return (f"{tag}_r{len(in_shapes[0])}_c{r.cell_bits}d{r.dac_bits}a{r.adc_bits}"
                f"{r.weight_scheme[0]}_" + "_".join(map(str, a["adc_shifts"])))

    @classmethod
    def body(cls, b, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        if len(in_shapes[1]) == 3:
            first, count = a["block_offset"], in_shapes[1][0]
            x = b.op("Slice", "X", b.const([first]), b.const([first + count]), b.const([-3]))
            acc = acc_type(a["acc_bits"])
            b.op("MatMul", b.op("Cast", x, to=acc), b.op("Cast", "W", to=acc), out="Y")
            return
        start = b.const([a["row_offset"]])      # specialised: no attribute references
        r = b.op("Slice", b.op("Shape", "W"), b.const([0]), b.const([1]))
        x = b.op("Slice", "X", start, b.op("Add", start, r), b.const([-1]))
        r = readout.of_attrs(a)
        if r.ideal:
            y = b.op("MatMul", b.op("Cast", x, to=DOUBLE), b.op("Cast", "W", to=DOUBLE))
        else:
            y = sliced_product(b, x, "W", r, a, len(in_shapes[0]))
        b.op("Cast", y, to=acc_type(a["acc_bits"]), out="Y")


@emulates("Requantize")
class Requantize(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        return f"b{a['bits']}r{a['relu']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        lo, hi = qrange(attrs["bits"])
        lo = 0 if attrs["relu"] else lo
        p = b.op("Mul", b.op("Cast", "Acc", to=INT64), "M")
        half = b.op("Div", "D", b.const(2))
        q = b.op("Div", b.op("Add", b.op("Abs", p), half), "D")
        q = b.op("Mul", b.op("Sign", p), q)
        q = b.op("Min", b.op("Max", q, b.const(lo)), b.const(hi))
        b.op("Cast", q, to=int_type(attrs["bits"]), out="Y")
