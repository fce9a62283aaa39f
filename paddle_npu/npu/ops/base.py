"""What every NPU primitive is made of: a schema, an ONNX function body, a NumPy reference.

A primitive is a class decorated with `@primitive` whose class attributes describe it
(`inputs`, `outputs`, `attributes`, the docstring) and whose classmethods give

    infer(in_shapes, attrs)      -> [output shape]   shapes as lists of int | str (symbolic)
    body(b, attrs, in_shapes)    fills a `Body` with standard ONNX ops computing the outputs
    overload(attrs, in_shapes)   the name of the body this node needs: "" by default; a
                                 body that references the node's attributes (`Ref`,
                                 `Body.attr`) serves every node of its overload
    reference(array, inputs, attrs) -> [outputs]     NumPy, counting into `array`

The function bodies are written against one opset (MIN_BODY_OPSET .. the model's), using
only ops whose signature has not changed since: the lowered model imports the same version
for the default domain as its functions do (onnxruntime inlines them with the model's).
"""
import hashlib
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

DOMAIN = "ai.paddle_npu"
VERSION = 1
MIN_BODY_OPSET = 15     # CastLike; Unsqueeze axes and Pad pads as inputs; Constant value_ints
DOUBLE = 11             # TensorProto.DOUBLE: the accumulators' type
FLOAT_TYPES = (1, DOUBLE)   # TensorProto.FLOAT, DOUBLE


def float_input_attrs(inputs):
    """{"_float": True} when a node's first input is float32 or float64 (a body that may use
    an op with no integer kernel, as Einsum), else {}: `Primitive.input_attrs` for those."""
    x = inputs[0] if inputs else None
    return {"_float": True} if x is not None and x.dtype is not None and \
        int(x.dtype) in FLOAT_TYPES else {}


def add_up(b, values):
    """The sum of same-typed tensors `values` as a chain of Adds, first to last: ONNX Sum
    takes floats only, Add integers too (a body whose values may be int32 / int64
    accumulators sums with this; Sum is for the bodies that only see floats)."""
    total = values[0]
    for v in values[1:]:
        total = b.op("Add", total, v)
    return total


_primitives = {}        # op type -> class


@dataclass(frozen=True)
class Arg:
    name: str
    doc: str
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class Ref:
    """In a function body, an attribute taking the calling node's attribute `name`."""
    name: str
    type: str            # "int" | "ints" | "float"


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
    # The bodies that sum products accumulate exactly (float64, as the NumPy reference does);
    # their `float32_body` (same signature as `body`, float32 inputs only) sums in float32,
    # as fast as onnxruntime's own Conv / MatMul and as far from the exact sums as they are
    # (not within 1e-5 of the model before lowering on every model: npu/bodies.py chooses)
    float32_body = None

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
    def overload(cls, attrs, in_shapes):
        return ""

    @classmethod
    def input_attrs(cls, inputs):
        """Facts a node's body specialises on that follow from its inputs (`inputs`: the
        node's onnx_ir values: a constant's values, an element type), keyed with a leading
        "_": they are not attributes of the NPU program, only of the function body
        onnxruntime runs. {} by default."""
        return {}

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

    @classmethod
    def function_proto(cls, opset, attrs, in_shapes, float32=False):
        """The FunctionProto a node with these attributes and input shapes calls
        (`float32`: the float32 body, under the overload `float32_overload` names)."""
        b = Body(opset)
        derived = {k: v for k, v in attrs.items() if k.startswith("_")}   # input_attrs
        (cls.float32_body if float32 else cls.body)(b, {**cls.attrs_of(attrs), **derived},
                                                    in_shapes)
        outputs = [a.name for a in cls.outputs]
        b.drop_output_identities(outputs)
        overload = cls.overload(attrs, in_shapes)
        generic = overload == "" or bool(b.refs)     # declares the attributes it reads
        inputs = [a.name for a in cls.inputs if not a.variadic]
        variadic = [a for a in cls.inputs if a.variadic]
        if variadic:   # specialised to a count: P0, P1, ...
            inputs += [f"{variadic[0].name}{i}" for i in range(len(in_shapes) - len(inputs))]
        f = helper.make_function(
            DOMAIN, cls.op_type, inputs, outputs, b.nodes,
            [helper.make_opsetid("", opset)],
            attributes=[a.name for a in cls.attributes if a.default is None] if generic else [],
            attribute_protos=[helper.make_attribute(a.name, a.default) for a in cls.attributes
                              if a.default is not None] if generic else [],
            doc_string=" ".join((cls.__doc__ or "").split()))
        f.overload = float32_overload(overload) if float32 else overload
        return f


def float32_overload(overload):
    """The overload of a node calling its primitive's float32 body."""
    return f"{overload}_f32" if overload else "f32"


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


def config_tag(*parts):
    """A short, stable overload name for a specialised function body."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]


class Body:
    """Writes the node list of a function body: `b.op("Add", x, y)` returns the output name.
    `opset`: the default domain's version the body is written for (an op whose signature
    changed since MIN_BODY_OPSET, such as ReduceMax's axes, is spelled for it)."""

    def __init__(self, opset=MIN_BODY_OPSET):
        self.nodes = []
        self.opset = opset
        self.refs = set()       # the calling node's attributes the body reads
        self._n = 0

    def _tmp(self, hint):
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type, *inputs, out=None, **attrs):
        out = out or self._tmp(op_type.lower())
        plain = {k: v for k, v in attrs.items() if not isinstance(v, Ref)}
        # named (after its output): onnxruntime then names the node's kernels after the
        # function too ("_inlfunc_VMM_..."), so a profile tells which primitive each ran for
        node = helper.make_node(op_type, [i or "" for i in inputs], [out], name=out, **plain)
        for key, ref in attrs.items():
            if isinstance(ref, Ref):
                self.refs.add(ref.name)
                a = node.attribute.add()
                a.name, a.ref_attr_name = key, ref.name
                a.type = {"int": AttributeProto.INT, "ints": AttributeProto.INTS,
                          "float": AttributeProto.FLOAT}[ref.type]
        self.nodes.append(node)
        return out

    def output(self, value, name, like=None):
        """Write `value` to the function output `name`: cast to `like`'s type when given (a
        wide accumulator's sum rounded back to its inputs' type), else as it is."""
        if like is None:
            self.op("Identity", value, out=name)
        else:
            self.op("CastLike", value, like, out=name)

    def drop_output_identities(self, outputs):
        """Identity nodes copying a value made in the body to a function output: the node
        making it writes the output instead (every call inlines one node fewer)."""
        made = {o: n for n in self.nodes for o in n.output}
        for node in list(self.nodes):
            if node.op_type != "Identity" or node.output[0] not in outputs:
                continue
            source = node.input[0]
            producer = made.get(source)
            readers = [n for n in self.nodes if source in n.input]
            if producer is None or source in outputs or len(readers) != 1:
                continue
            producer.output[list(producer.output).index(source)] = node.output[0]
            self.nodes.remove(node)

    def const(self, value, out=None):
        """An int64 constant (a scalar stays a scalar)."""
        arr = np.asarray(value, dtype=np.int64)
        return self.op("Constant", out=out, value=numpy_helper.from_array(arr))

    def attr(self, name, kind, out=None):
        """A Constant holding the calling node's attribute `name` ("int" or "ints")."""
        key = "value_int" if kind == "int" else "value_ints"
        return self.op("Constant", out=out or self._tmp(name), **{key: Ref(name, kind)})


class ArrayModel:
    """What the NumPy reference knows of the chip, and what it counts while running.

    Each VMM weight is programmed into arrays of rows x cols cells (weight-stationary: one
    tile per array); every row vector driven through a programmed array is one invocation.
    """

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
        self.programmed = {}         # VMM node -> its weight as the arrays hold it
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
            self.tile_ids.add((node, i, j))
            self.vmm_invocations += vectors
            self.macs += vectors * ri * mj
        return y.reshape(lead + (m,))

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
