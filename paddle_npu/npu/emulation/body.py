"""What every primitive's emulation is made of: ONNX function bodies onnxruntime runs it by.

An emulation is a class decorated with `@emulates(op_type)`, deriving from `Emulated`, in
the module named as its primitive's (emulation/vmm.py for ops/vmm.py; registry.py finds
them), whose classmethods give

    body(b, attrs, in_shapes)    fills a `Body` with standard ONNX ops computing the outputs
    float32_body                 the same for float32 inputs, summing in float32 (None: the
                                 primitive does not sum, or has no such body)
    overload(attrs, in_shapes)   the name of the body a node needs: "" by default; a body
                                 that references the node's attributes (`Ref`, `Body.attr`)
                                 serves every node of its overload
    input_attrs(inputs, images)  what a body specialises on that follows from the node's
                                 inputs, not from its attributes

The bodies are written against one opset (MIN_BODY_OPSET .. the model's), using only ops
whose signature has not changed since: the lowered model imports the same version for the
default domain as its functions do (onnxruntime inlines them with the model's).
"""
import hashlib
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

from ..ops import DOMAIN, get_primitive
from . import MIN_BODY_OPSET

DOUBLE = 11             # TensorProto.DOUBLE: the exact bodies' accumulators
FLOAT_TYPES = (1, DOUBLE)   # TensorProto.FLOAT, DOUBLE

REGISTERED = {}         # op type -> Emulated class (@emulates)


def emulates(op_type):
    """Class decorator registering the emulation of the primitive `op_type` (registry.py
    looks them up)."""
    def register(cls):
        prim = get_primitive(op_type)
        if prim is None:
            raise ValueError(f"no NPU primitive {op_type!r} to emulate")
        if op_type in REGISTERED:
            raise ValueError(f"NPU primitive {op_type!r} is emulated twice")
        cls.primitive = prim
        REGISTERED[op_type] = cls
        return cls
    return register


class Emulated:
    """Base class: see the module docstring. `primitive`: the Primitive emulated."""

    primitive = None
    float32_body = None

    @classmethod
    def attrs_of(cls, attrs):
        return cls.primitive.attrs_of(attrs)

    @classmethod
    def overload(cls, attrs, in_shapes):
        return ""

    @classmethod
    def input_attrs(cls, inputs, images=()):
        """Facts a node's body specialises on that follow from its inputs (`inputs`: the
        node's onnx_ir values: a constant's values, an element type; `images`: the values
        onnxruntime is to run as images, image_rows.py), keyed with a leading "_": they are
        not attributes of the NPU program, only of the function body. {} by default."""
        return {}

    @classmethod
    def body(cls, b, attrs, in_shapes):
        raise NotImplementedError(f"{cls.primitive.op_type}: no function body")

    @classmethod
    def function_proto(cls, opset, attrs, in_shapes, float32=False):
        """The FunctionProto a node with these attributes and input shapes calls
        (`float32`: the float32 body, under the overload `float32_overload` names)."""
        prim = cls.primitive
        b = Body(opset)
        derived = {k: v for k, v in attrs.items() if k.startswith("_")}   # input_attrs
        (cls.float32_body if float32 else cls.body)(b, {**prim.attrs_of(attrs), **derived},
                                                    in_shapes)
        outputs = [a.name for a in prim.outputs]
        b.drop_output_identities(outputs)
        overload = cls.overload(attrs, in_shapes)
        generic = overload == "" or bool(b.refs)     # declares the attributes it reads
        inputs = [a.name for a in prim.inputs if not a.variadic]
        variadic = [a for a in prim.inputs if a.variadic]
        if variadic:   # specialised to a count: P0, P1, ...
            inputs += [f"{variadic[0].name}{i}" for i in range(len(in_shapes) - len(inputs))]
        f = helper.make_function(
            DOMAIN, prim.op_type, inputs, outputs, b.nodes,
            [helper.make_opsetid("", opset)],
            attributes=[a.name for a in prim.attributes if a.default is None] if generic else [],
            attribute_protos=[helper.make_attribute(a.name, a.default) for a in prim.attributes
                              if a.default is not None] if generic else [],
            doc_string=" ".join((prim.__doc__ or "").split()))
        f.overload = float32_overload(overload) if float32 else overload
        return f


def float32_overload(overload):
    """The overload of a node calling its primitive's float32 body."""
    return f"{overload}_f32" if overload else "f32"


def config_tag(*parts):
    """A short, stable overload name for a specialised function body."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]


def float_input_attrs(inputs):
    """{"_float": True} when a node's first input is float32 or float64 (a body that may use
    an op with no integer kernel, as Einsum), else {}: `Emulated.input_attrs` for those."""
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


@dataclass(frozen=True)
class Ref:
    """In a function body, an attribute taking the calling node's attribute `name`."""
    name: str
    type: str            # "int" | "ints" | "float"


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
