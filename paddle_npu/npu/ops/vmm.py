"""VMM: row vectors times a constant matrix programmed into a crossbar array."""
import numpy as np

from .base import Arg, Attr, Primitive, primitive


@primitive
class VMM(Primitive):
    """Y[..., k, :] = X[..., k, row_offset : row_offset + R] @ W for every row k: one
    vector-matrix multiplication per row on the arrays holding W. The lowering makes every
    W one band of array tiles (R <= rows; M columns over ceil(M / cols) arrays side by side,
    all fed the same rows); a W of more rows is split over several arrays by the
    reference, their partial products summed. An ideal array sums its R products exactly:
    each output is rounded to X's type once.

    A stack of T alike tiles, W [T, R, M] on T arrays (a layer's tiles that each read their
    own block of channels: Im2Col's blocks_first), reads X [..., T, K, R], tile t its own
    rows X[..., t, :, :]: Y[..., t, k, :] = X[..., t, k, :] @ W[t], each array's result
    (AddInTile places or sums them)."""

    inputs = (Arg("X", "rows [..., K, R_total] (the array reads R of them from row_offset); "
                       "for a stack [..., T, K, R]"),
              Arg("W", "constant weight tile [R, M], or a stack of T tiles [T, R, M]"))
    outputs = (Arg("Y", "[..., K, M] ([..., T, K, M] for a stack)"),)
    attributes = (Attr("row_offset", "int", "first column of X fed to the array's row 0 "
                                            "(0 for a stack)", 0),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        x, w = in_shapes[0], in_shapes[1]
        if len(w) == 3:
            cls.check_stack(attrs, x, w)
        return [list(x[:-1]) + [w[-1]]]

    @classmethod
    def check_stack(cls, attrs, x, w):
        """Raises unless X [..., T, K, R] is the rows of a stack W [T, R, M]."""
        t, r, m = w
        offset = cls.attrs_of(attrs)["row_offset"]
        if len(x) < 3 or x[-3] != t or x[-1] != r or offset:
            raise ValueError(f"VMM: a stack of {t} tiles [{r}, {m}] reads rows [..., {t}, K, "
                             f"{r}] from row_offset 0 (got {list(x)}, row_offset {offset})")

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        node = attrs.get("_arrays", attrs.get("_node"))
        if w.ndim == 3:
            cls.check_stack(attrs, x.shape, w.shape)
            return [array.vmm_stack(node, x, w, np.float64).astype(x.dtype)]
        off = cls.attrs_of(attrs)["row_offset"]
        r = w.shape[0]
        if x.shape[-1] < off + r:
            raise ValueError(f"VMM: X has {x.shape[-1]} columns, row_offset {off} + "
                             f"{r} weight rows do not fit")
        return [array.vmm(node, x, w, off, np.float64).astype(x.dtype)]
