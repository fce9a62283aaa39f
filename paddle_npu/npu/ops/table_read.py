"""TableRead: rows of a constant table read by index (an embedding lookup)."""
import numpy as np

from .base import Arg, Primitive, primitive


@primitive
class TableRead(Primitive):
    """Y = T[I]: for every index in I, row I[...] of the constant table T [rows, ...] read
    from the chip's memory (Gather on axis 0; a negative index counts from the end). Its
    cost is one row read per index."""

    inputs = (Arg("T", "the constant table [rows, ...]"),
              Arg("I", "integer indices, any shape"))
    outputs = (Arg("Y", "I's shape + T's row shape, T's type"),)
    attributes = ()

    @classmethod
    def infer(cls, in_shapes, attrs):
        t, i = in_shapes
        return [list(i) + list(t[1:])]

    @classmethod
    def reference(cls, array, inputs, attrs):
        table, index = inputs
        rows = table.shape[0]
        if index.size and (index.min() < -rows or index.max() >= rows):
            raise IndexError(f"TableRead: an index is outside the table's {rows} rows")
        array.table_rows += index.size
        return [np.take(table, index.astype(np.int64), axis=0)]
