"""RuntimeVMM's and QRuntimeVMM's function bodies."""
from .body import DOUBLE, Emulated, emulates
from .quant import acc_type


@emulates("RuntimeVMM")
class RuntimeVMM(Emulated):
    """The exact body multiplies in float64 and rounds once to X's type; the float32 body is
    onnxruntime's float32 MatMul."""

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = b.op("MatMul", b.op("Cast", "X", to=DOUBLE), b.op("Cast", "W", to=DOUBLE))
        b.op("CastLike", y, "X", out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        b.op("MatMul", "X", "W", out="Y")


@emulates("QRuntimeVMM")
class QRuntimeVMM(Emulated):
    """The product in float64, exact for such sums (|sum| < 2^53), cast to the
    accumulator's type."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"acc{cls.attrs_of(attrs)['acc_bits']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = b.op("MatMul", b.op("Cast", "X", to=DOUBLE), b.op("Cast", "W", to=DOUBLE))
        b.op("Cast", y, to=acc_type(attrs["acc_bits"]), out="Y")
