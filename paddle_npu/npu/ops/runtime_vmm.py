"""RuntimeVMM: rows times a matrix written into the arrays at run time (attention), and
QRuntimeVMM, its integer form."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive
from .quant import in_accumulator


@primitive
class RuntimeVMM(Primitive):
    """Y = X @ W (MatMul's broadcasting over leading dims) where W is an activation, not a
    constant: for every matrix W[b] [R, M] the arrays are written with W[b] first (R * M
    cells, counted as the write cost), then every row of X[b] is one VMM per array tile, as
    in VMM. Sums are exact, rounded once to X's type."""

    inputs = (Arg("X", "rows [..., K, R]"),
              Arg("W", "the matrices written at run time [..., R, M]"))
    outputs = (Arg("Y", "[..., K, M]"),)
    attributes = ()

    @classmethod
    def infer(cls, in_shapes, attrs):
        x, w = in_shapes
        lead_x, lead_w = list(x[:-2]), list(w[:-2])
        n = max(len(lead_x), len(lead_w))
        lead_x, lead_w = [1] * (n - len(lead_x)) + lead_x, [1] * (n - len(lead_w)) + lead_w
        lead = [b if a == 1 else a for a, b in zip(lead_x, lead_w)]
        return [lead + [x[-2], w[-1]]]

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        y = np.matmul(x.astype(np.float64), w.astype(np.float64))
        _count(array, x, w, y)
        return [y.astype(x.dtype)]


def _count(array, x, w, y):
    """The arrays' work for Y = X @ W written at run time: W's cells, one VMM per row and
    tile, the MACs."""
    matrices = int(np.prod(y.shape[:-2], dtype=np.int64))
    r, m = w.shape[-2:]
    k = x.shape[-2]
    tiles = -(-r // array.rows) * -(-m // array.cols)
    array.written_cells += matrices * r * m
    array.vmm_invocations += matrices * k * tiles
    array.macs += matrices * k * r * m


@primitive
class QRuntimeVMM(Primitive):
    """Y = X @ W on integers, W written into the arrays at run time as RuntimeVMM does: int8
    (int16) rows times int8 (int16) matrices, summed exactly into an `acc_bits`-bit
    accumulator (32 for int8, 64 for int16)."""
    placed_as = "RuntimeVMM"

    inputs = (Arg("X", "integer rows [..., K, R]"),
              Arg("W", "integer matrices written at run time [..., R, M]"))
    outputs = (Arg("Y", "[..., K, M], int32 / int64"),)
    attributes = (Attr("acc_bits", "int", "accumulator width: 32 or 64", 32),)

    infer = RuntimeVMM.infer

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        y = in_accumulator(np.matmul(x.astype(np.int64), w.astype(np.int64)),
                           cls.attrs_of(attrs)["acc_bits"], "QRuntimeVMM", attrs.get("_node"))
        _count(array, x, w, y)
        return [y]
