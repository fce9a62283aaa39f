"""What every NPU primitive is made of: a schema, shape inference, a NumPy reference.

A primitive is a class decorated with `@primitive` whose class attributes describe it
(`inputs`, `outputs`, `attributes`, the docstring: what the chip computes) and whose
classmethods give

    infer(in_shapes, attrs)      -> [output shape]   shapes as lists of int | str (symbolic)
    work(attrs, in_shapes, out_shapes)               its unit's element operations (cost.py)
    reference(array, inputs, attrs) -> [outputs]     NumPy, counting into `array`: the bit-true
                                                     simulator of the chip

How onnxruntime runs a primitive (its ONNX function bodies) is the emulation's, apart:
npu/emulation/.
"""
from dataclasses import dataclass

import numpy as np

DOMAIN = "ai.paddle_npu"
VERSION = 1

_primitives = {}        # op type -> class


@dataclass(frozen=True)
class Arg:
    name: str
    doc: str
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class Attr:
    name: str
    type: str            # "int" | "ints" | "float" | "string"
    doc: str
    default: object = None   # None: required


class Primitive:
    """Base class: see the module docstring."""

    op_type = ""
    inputs = ()
    outputs = ()
    attributes = ()
    placed_as = ""      # the primitive whose unit runs this one ("": itself)

    @classmethod
    def attrs_of(cls, attrs):
        """`attrs` with every declared default filled in; raises on a missing required one."""
        out = {}
        for a in cls.attributes:
            if a.name in attrs and attrs[a.name] is not None:
                out[a.name] = attrs[a.name]
            elif a.default is not None:
                out[a.name] = a.default
            else:
                raise ValueError(f"{cls.op_type}: attribute {a.name!r} is required")
        return out

    @classmethod
    def work(cls, attrs, in_shapes, out_shapes):
        """Element operations of the node on its unit when they are not one per output
        element (cost.py's estimate), else None; shapes static."""
        return None

    @classmethod
    def schema(cls):
        """The schema as plain data (for documentation, `paddle-npu targets --ops`, tests)."""
        return {"domain": DOMAIN, "version": VERSION, "op_type": cls.op_type,
                "doc": " ".join((cls.__doc__ or "").split()),
                "inputs": [vars(a) for a in cls.inputs],
                "outputs": [vars(a) for a in cls.outputs],
                "attributes": [vars(a) for a in cls.attributes]}


def primitive(cls):
    """Class decorator registering an NPU primitive under its class name."""
    if not issubclass(cls, Primitive):
        raise TypeError(f"{cls.__qualname__} must derive from Primitive")
    name = cls.op_type or cls.__name__
    if name in _primitives:
        raise ValueError(f"NPU primitive {name!r} is defined twice")
    cls.op_type = name
    _primitives[name] = cls
    return cls


def get_primitive(op_type):
    return _primitives.get(op_type)


def all_primitives():
    return dict(_primitives)


class ArrayModel:
    """What the NumPy reference knows of the chip, and what it counts while running.

    Each VMM weight is programmed into arrays of rows x cols cells (weight-stationary: one
    tile per array); every row vector driven through a programmed array is one invocation.
    """

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
        self.programmed = {}         # VMM node -> its weight as the arrays hold it
        # {QVMM node: [largest |column sum| per pair of slices]} when recording what an
        # analog read-out's ADCs see (ops/readout.py), else None
        self.adc_peaks = None
        # {QVMM node: [readings clipped, readings]} when counting how often its ADCs
        # saturate, else None
        self.adc_clips = None
        # a draw of the cells' non-idealities (readout.Noise), else None: exact cells
        self.noise = None
        self.reset()

    def program(self, node, weight, dtype=np.float64):
        """The weight of a VMM node as held by its arrays, in the `dtype` the reference
        multiplies in: programmed on first use (as a weight-stationary chip is, once), reused
        by every later inference."""
        held = self.programmed.get(node)
        if held is None or held[0] is not weight:     # a new node, or a new weight tensor
            held = self.programmed[node] = (weight, {})
        if dtype not in held[1]:
            held[1][dtype] = weight.astype(dtype)
        return held[1][dtype]

    def as_type(self, x, dtype):
        """`x` as `dtype`, converted once for all the VMM nodes reading it (the row and column
        tiles of one layer read the same rows)."""
        if self._converted is None or self._converted[0] is not x or \
                self._converted[1] != dtype:
            self._converted = (x, dtype, x.astype(dtype))
        return self._converted[2]

    def vmm(self, node, x, weight, row_offset, dtype):
        """X[..., k, row_offset:row_offset + R] @ W for every row k, computed in `dtype` as
        whole-matrix BLAS products, one per (rows x cols) array tile of W, and counted."""
        r, m = weight.shape
        lead = x.shape[:-1]
        rows = self.as_type(x, dtype).reshape(-1, x.shape[-1])
        w = self.program(node, weight, dtype)
        vectors = rows.shape[0]
        tiles = [(i, ri, j, mj) for i, ri in chunks(r, self.rows) for j, mj in chunks(m, self.cols)]
        y = None if len(tiles) == 1 else np.zeros((vectors, m), dtype=dtype)
        for i, ri, j, mj in tiles:
            part = rows[:, row_offset + i:row_offset + i + ri] @ w[i:i + ri, j:j + mj]
            if y is None:
                y = part
            else:
                y[:, j:j + mj] += part
        self.count(node, vectors, r, m)
        return y.reshape(lead + (m,))

    def count(self, node, vectors, r, m):
        """Count `vectors` row vectors through the array tiles of an r x m weight (what `vmm`
        reads; a product computed otherwise, as an analog read-out's, counts the same)."""
        for i, ri in chunks(r, self.rows):
            for j, mj in chunks(m, self.cols):
                self.tile_ids.add((node, i, j))
                self.vmm_invocations += vectors
                self.macs += vectors * ri * mj

    def vmm_stack(self, node, x, weight, dtype):
        """X[..., t, k, :] @ W[t] for every tile t of a stack W [T, R, M], each on its own
        arrays, counted as `vmm` counts them: one batched product when every tile fits one
        array, else tile by tile."""
        t, r, m = weight.shape
        if r > self.rows or m > self.cols:
            return np.stack([self.vmm((node, i), x[..., i, :, :], weight[i], 0, dtype)
                             for i in range(t)], axis=-3)
        y = np.matmul(self.as_type(x, dtype), self.program(node, weight, dtype))
        vectors = int(np.prod(x.shape[:-3])) * x.shape[-2]
        self.tile_ids.update(((node, i), 0, 0) for i in range(t))
        self.vmm_invocations += vectors * t
        self.macs += vectors * t * r * m
        return y

    def reset(self):
        """Zero the counters of a run (programmed weights stay)."""
        self.vmm_invocations = 0     # row vectors x tiles
        self.macs = 0                # multiply-accumulates done by the arrays
        self.tile_ids = set()        # distinct (weight, tile) pairs programmed
        self.add_elements = 0        # element additions done by AddInTile
        self.moved_elements = 0      # elements rearranged by Im2Col / DimTransform
        self.lut_elements = 0        # elements through the lookup-table unit (Lut)
        self.written_cells = 0       # array cells written at run time (RuntimeVMM)
        self.table_rows = 0          # rows read from constant tables (TableRead)
        self.vector_elements = 0     # element operations of the vector unit (Pool windows,
                                     # Col2Im sums; Reduce, LayerNorm: once per pass)
        self.seconds = {}            # primitive -> wall time in its reference
        self._converted = None       # (tensor, dtype, the tensor as dtype): see as_type

    @property
    def arrays(self):
        return len(self.tile_ids)

    def as_dict(self):
        return {"arrays": self.arrays, "vmm_invocations": self.vmm_invocations,
                "macs": self.macs, "add_elements": self.add_elements,
                "moved_elements": self.moved_elements, "lut_elements": self.lut_elements,
                "written_cells": self.written_cells, "table_rows": self.table_rows,
                "vector_elements": self.vector_elements,
                "seconds": {k: round(v, 6) for k, v in sorted(self.seconds.items())}}


def chunks(n, size):
    """[(start, length)] cutting n into pieces of at most `size` (a weight into array tiles)."""
    return [(i, min(size, n - i)) for i in range(0, n, size)]


def count_dims(dims):
    """Elements of a shape, a size that is not fixed counted as 1 (0 when unknown)."""
    if dims is None:
        return 0
    n = 1
    for d in dims:
        n *= d if isinstance(d, int) else 1
    return n


def static_numel(dims):
    n = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        n *= d
    return n
