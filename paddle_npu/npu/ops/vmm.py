"""VMM: row vectors times a constant matrix programmed into a crossbar array."""
import numpy as np

from .base import DOUBLE, Arg, Attr, Primitive, primitive


@primitive
class VMM(Primitive):
    """Y[..., k, :] = X[..., k, row_offset : row_offset + R] @ W for every row k: one
    vector-matrix multiplication per row on the array holding W. The lowering makes every
    W one array tile (R <= rows, M <= cols); a bigger W is split over several arrays by the
    reference, their partial products summed. An ideal array sums its R products exactly:
    each output is rounded to X's type once (the body and the reference accumulate in
    float64)."""

    inputs = (Arg("X", "rows [..., K, R_total] (the array reads R of them from row_offset)"),
              Arg("W", "constant weight tile [R, M]"))
    outputs = (Arg("Y", "[..., K, M]"),)
    attributes = (Attr("row_offset", "int", "first column of X fed to the array's row 0", 0),)

    @classmethod
    def infer(cls, in_shapes, attrs):
        return [list(in_shapes[0][:-1]) + [in_shapes[1][1]]]

    @classmethod
    def overload(cls, attrs, in_shapes):
        """"whole" when the array reads all of X's columns, "rows_<offset>_<R>_rank<n>" when
        the columns it reads are known at lowering (the Slice bounds one per axis of X),
        else "" (the slice computed at every run)."""
        span = cls._static_span(attrs, in_shapes)
        if span is None:
            return ""
        offset, r, total = span
        return "whole" if offset == 0 and r == total else \
            f"rows_{offset}_{r}_rank{len(in_shapes[0])}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        y = b.op("MatMul", b.op("Cast", cls._rows(b, attrs, in_shapes), to=DOUBLE),
                 b.op("Cast", "W", to=DOUBLE))
        b.op("CastLike", y, "X", out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        b.op("MatMul", cls._rows(b, attrs, in_shapes), "W", out="Y")

    @classmethod
    def _static_span(cls, attrs, in_shapes):
        """(row_offset, R, X's columns) when X's last size and W's rows are fixed, else None."""
        x, w = in_shapes[0], in_shapes[1]
        if not x or not w or not isinstance(x[-1], int) or not isinstance(w[0], int):
            return None
        return cls.attrs_of(attrs)["row_offset"], w[0], x[-1]

    @classmethod
    def _rows(cls, b, attrs, in_shapes):
        """X[..., row_offset : row_offset + R] in as few nodes as it takes: every VMM node
        inlines them, and a per-channel plan has thousands (X itself when the array reads
        all of it; one Slice of constant bounds when the sizes are fixed)."""
        span = cls._static_span(attrs, in_shapes)
        if span is not None:
            offset, r, total = span
            if offset == 0 and r == total:
                return "X"
            lead = len(in_shapes[0]) - 1        # bounds for every axis: no axes constant
            return b.op("Slice", "X", b.const([0] * lead + [offset]),
                        b.const([np.iinfo(np.int64).max] * lead + [offset + r]))
        offset = b.attr("row_offset", "int")                   # a scalar
        start = b.op("Add", offset, b.const([0]))               # [row_offset]
        end = b.op("Add", offset, b.op("Shape", "W", end=1))    # [row_offset + R]
        return b.op("Slice", "X", start, end, b.const([-1]))

    @classmethod
    def reference(cls, array, inputs, attrs):
        x, w = inputs
        off = cls.attrs_of(attrs)["row_offset"]
        r = w.shape[0]
        if x.shape[-1] < off + r:
            raise ValueError(f"VMM: X has {x.shape[-1]} columns, row_offset {off} + "
                             f"{r} weight rows do not fit")
        return [array.vmm(attrs.get("_node"), x, w, off, np.float64).astype(x.dtype)]
