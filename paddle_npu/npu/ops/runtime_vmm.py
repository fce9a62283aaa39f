"""RuntimeVMM: rows times a matrix written into the arrays at run time (attention)."""
import numpy as np

from .base import DOUBLE, Arg, Primitive, primitive


@primitive
class RuntimeVMM(Primitive):
    """Y = X @ W (MatMul's broadcasting over leading dims) where W is an activation, not a
    constant: for every matrix W[b] [R, M] the arrays are written with W[b] first (R * M
    cells, counted as the write cost), then every row of X[b] is one VMM per array tile, as
    in VMM. Sums are exact (float64), rounded once to X's type."""

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
    def body(cls, b, attrs, in_shapes):
        y = b.op("MatMul", b.op("Cast", "X", to=DOUBLE), b.op("Cast", "W", to=DOUBLE))
        b.op("CastLike", y, "X", out="Y")

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        y = np.matmul(x.astype(np.float64), w.astype(np.float64))
        lead = y.shape[:-2]
        matrices = int(np.prod(lead, dtype=np.int64))
        r, m = w.shape[-2:]
        k = x.shape[-2]
        tiles = -(-r // array.rows) * -(-m // array.cols)
        array.written_cells += matrices * r * m
        array.vmm_invocations += matrices * k * tiles
        array.macs += matrices * k * r * m
        return [y.astype(x.dtype)]
