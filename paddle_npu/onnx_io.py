"""Where an ONNX model crosses the disk / protobuf boundary, for stage 2 and its tools.

    load_proto(model)           path, bytes, ModelProto or ir.Model -> ModelProto
    load_model(model, opset)    the same -> one ir.Model (opset raised, shapes inferred)
    to_proto(model) / to_bytes  an ir.Model (or anything load_proto takes) serialized
    infer_shapes(model)         onnx's shape inference merged into an ir.Model in place
    upgrade_opset(proto, n)     onnx's version converter, keeping node names and metadata
    save_proto(proto, path)     a ModelProto written atomically (segments, QDQ exports)
    StreamedModel(model)        an ir.Model written to a file with its weights streamed from
                                their arrays (no second copy), checkable without them

Everything after `load_model` works on that one ir.Model; a ModelProto is made only here.
"""
import math
import os

import numpy as np
import onnx
import onnx_ir as ir
from onnx import ModelProto, TensorProto, helper, version_converter
from onnx_ir.passes.common import ShapeInferencePass

from .errors import ConversionError
from .filekind import describe
from .outputs import write_with


def load_proto(model):
    """A ModelProto from a path, serialized bytes, a ModelProto or an ir.Model."""
    if isinstance(model, ir.Model):
        return ir.serde.serialize_model(model)
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise ConversionError(f"{model}: does not exist")
        try:
            proto, problem = onnx.load(os.fspath(model)), None
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
            proto, problem = None, exc
        if proto is None or not proto.HasField("graph") or not proto.opset_import:
            kind = describe(model)
            if kind == "an ONNX model":     # e.g. its external data file is missing
                raise ConversionError(f"{model}: cannot be read ({problem})")
            raise ConversionError(f"{model}: {kind}, not an ONNX model (a Paddle export "
                                  "goes through `paddle-npu convert` first)")
        return proto
    raise TypeError(f"cannot read an ONNX model from {type(model).__name__}")


def to_proto(model):
    """The ModelProto of an ir.Model (or of anything load_proto reads)."""
    return load_proto(model)


def to_bytes(model):
    """The serialized model."""
    return to_proto(model).SerializeToString()


def load_model(model, min_opset=None, infer=True):
    """One ir.Model to rewrite: the default-domain opset raised to `min_opset` when lower,
    shapes inferred with `infer` (as far as onnx can), initializers no longer listed as graph inputs
    (IR < 4 listed them; the models we write are IR >= 10, where they are constants only)."""
    proto = load_proto(model)
    # The converter and shape inference copy the whole model (twice each): the weights are
    # set aside while they run (a proto we made ourselves only: the caller's stays as it is)
    aside = _set_weights_aside(proto) if not isinstance(model, onnx.ModelProto) else {}
    if min_opset is not None:
        proto = upgrade_opset(proto, min_opset)
    if infer:
        try:
            proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False,
                                                      data_prop=True)
        except Exception:   # (a model over 2 GB, an op onnx chokes on): shapes as given
            pass
    m = ir.serde.deserialize_model(proto)
    _put_weights_back(m, aside)
    inputs = [v for v in m.graph.inputs if v.name not in m.graph.initializers]
    if len(inputs) != len(m.graph.inputs):
        m.graph.inputs.clear()
        m.graph.inputs.extend(inputs)
    return m


_ASIDE = "paddle_npu:set-aside"     # the external-data location of a weight set aside
_ASIDE_ELEMENTS = 1024              # smaller tensors (shapes, axes, scales) stay in place


def _set_weights_aside(proto):
    """Take the bytes of the big initializers out of the proto, leaving each one marked as
    external data (dtype and dims kept): {name: bytes}."""
    aside = {}
    for t in proto.graph.initializer:
        # counted from the dims: reading raw_data (or ByteSize) would copy the bytes
        if t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data") and \
                math.prod(t.dims) >= _ASIDE_ELEMENTS:
            aside[t.name] = t.raw_data
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            entry = t.external_data.add()
            entry.key, entry.value = "location", _ASIDE
    return aside


def _put_weights_back(model, aside):
    """The weights set aside, as arrays over their bytes (no copy), in the ir.Model."""
    for name, value in model.graph.initializers.items():
        if name not in aside:
            continue
        held = value.const_value
        array = np.frombuffer(aside[name], dtype=held.dtype.numpy()).reshape(held.shape.numpy())
        value.const_value = ir.Tensor(array, name=name)
    left = [v.name for v in model.graph.initializers.values()
            if isinstance(v.const_value, ir.ExternalTensor) and v.const_value.location == _ASIDE]
    if left:
        raise ConversionError(f"internal error: weights {left[:3]} were not put back")


def infer_shapes(model):
    """onnx's shape inference on an ir.Model, the shapes and types it finds written into the
    model's own values (no new model; left as it is when inference fails). True if any
    changed."""
    return ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model).modified


def opset_of(proto):
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def upgrade_opset(proto, minimum):
    """The ModelProto converted to opset `minimum` when it is older (onnx's version
    converter), with the node names, output names and metadata the converter drops."""
    current = opset_of(proto)
    if current >= minimum:
        return proto

    try:
        converted = version_converter.convert_version(proto, minimum)
    except Exception as exc:  # the converter raises bare RuntimeErrors
        raise ConversionError(f"cannot upgrade the model from opset {current} to {minimum} "
                              f"(the NPU function bodies need it): {exc}") from None
    _restore_names(proto.graph, converted.graph)
    _restore_metadata(proto.graph, converted.graph)
    return converted


def _restore_metadata(original, converted):
    """onnx's version converter drops the nodes' metadata_props (stage 1's notes, such as the
    scales of a quantised model's layers): copied back by node name."""
    meta = {n.name: list(n.metadata_props) for n in original.node
            if n.name and len(n.metadata_props)}
    for node in converted.node:
        if node.name in meta and not len(node.metadata_props):
            node.metadata_props.extend(meta[node.name])


def _restore_names(original, converted):
    """onnx's version converter gives the nodes it replaces (Upsample -> Resize, ...) no name
    and new output names (`_v_109`); give both back, found through the consumers, which keep
    theirs: calibration tables, marks and reports name the model's own tensors and layers."""
    known = {v.name for v in list(original.input) + list(original.initializer)}
    known |= {o for n in original.node for o in n.output}
    inputs_of = {n.name: list(n.input) for n in original.node if n.name}
    producer_of = {o: n.name for n in original.node for o in n.output}
    used = {o for n in converted.node for o in n.output} | {v.name for v in converted.input}
    rename = {}
    for node in converted.node:
        want_inputs = inputs_of.get(node.name, [])
        for i, name in enumerate(node.input):
            if name and name not in known and i < len(want_inputs) and \
                    want_inputs[i] not in used and want_inputs[i] not in rename.values():
                rename.setdefault(name, want_inputs[i])
    if not rename:
        return
    names = {n.name for n in converted.node}
    for node in converted.node:
        for i, name in enumerate(node.input):
            node.input[i] = rename.get(name, name)
        for i, name in enumerate(node.output):
            if name in rename:
                node.output[i] = rename[name]
                owner = producer_of.get(rename[name])
                if not node.name and owner and owner not in names:
                    node.name = owner
                    names.add(owner)
    for vi in converted.value_info:
        vi.name = rename.get(vi.name, vi.name)


def save_proto(proto, path):
    """Write a ModelProto to `path` the way every output is written (paddle_npu/outputs.py:
    a temp file renamed over it when complete, or through a device or symlink)."""

    return write_with(path, lambda tmp: onnx.save(proto, tmp))


# An initializer bigger than this is written from its own tensor (the reader's zero-copy view
# of the params file, for a converted model), never copied into a ModelProto.
STREAM_BYTES = 1024


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, length):
    """The tag and length of a length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(length)


_GRAPH_FIELD, _INITIALIZER_FIELD, _RAW_DATA_FIELD = 7, 5, 9   # onnx.proto's field numbers


class StreamedModel:
    """An ir.Model serialized without a second copy of its weights.

    `proto` is the model's ModelProto with every main-graph initializer over STREAM_BYTES
    reduced to its header (name, type, dims, no data); `write(path)` writes the complete
    model, each such initializer's bytes taken from its tensor as it goes and checked for
    size the way onnx.checker checks raw_data. The file parses to the same model as
    `ir.serde.serialize_model(model)` (the initializers come after the graph's other fields).
    `checkable()` is `proto` with those initializers as typed graph inputs, for onnx.checker
    and shape inference (which need their types and shapes, not their bytes)."""

    def __init__(self, model):
        self._tensors = {}                  # initializer name -> its tensor
        saved = []
        try:
            for value in model.graph.initializers.values():
                tensor = value.const_value
                if tensor is None or tensor.nbytes <= STREAM_BYTES or \
                        tensor.dtype == ir.DataType.STRING:
                    continue
                header = onnx.TensorProto(name=value.name, data_type=tensor.dtype.value,
                                          dims=tensor.shape.numpy())
                if tensor.doc_string:
                    header.doc_string = tensor.doc_string
                for key, text in tensor.metadata_props.items():
                    header.metadata_props.add(key=key, value=text)
                saved.append((value, tensor))
                self._tensors[value.name] = tensor
                value.const_value = ir.serde.TensorProtoTensor(header)
            self.proto = ir.serde.serialize_model(model)
        finally:
            for value, tensor in saved:
                value.const_value = tensor

    def checkable(self):
        proto = ModelProto()
        proto.CopyFrom(self.proto)
        kept = [i for i in proto.graph.initializer if i.name not in self._tensors]
        headers = [i for i in proto.graph.initializer if i.name in self._tensors]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(kept)
        listed = {i.name for i in proto.graph.input}     # (IR < 4 lists initializers there)
        proto.graph.input.extend(helper.make_tensor_value_info(h.name, h.data_type, h.dims)
                                 for h in headers if h.name not in listed)
        return proto

    def _parts(self):
        """The model's bytes as a list of pieces: bytes, or a tensor to write in their place."""
        graph = onnx.GraphProto()
        graph.CopyFrom(self.proto.graph)
        del graph.initializer[:]
        pieces = [graph.SerializeToString()]
        for init in self.proto.graph.initializer:
            tensor = self._tensors.get(init.name)
            if tensor is None:
                data = init.SerializeToString()
                pieces += [_field(_INITIALIZER_FIELD, len(data)), data]
                continue
            head = init.SerializeToString() + _field(_RAW_DATA_FIELD, tensor.nbytes)
            pieces += [_field(_INITIALIZER_FIELD, len(head) + tensor.nbytes), head, tensor]
        graph_size = sum(p.nbytes if not isinstance(p, bytes) else len(p) for p in pieces)
        rest = onnx.ModelProto()
        rest.CopyFrom(self.proto)
        rest.ClearField("graph")
        return [rest.SerializeToString(), _field(_GRAPH_FIELD, graph_size)] + pieces

    @staticmethod
    def _bytes_of(tensor):
        data = tensor.tobytes()
        if len(data) != tensor.nbytes:   # what onnx.checker checks of raw_data
            raise ConversionError(f"initializer {tensor.name!r}: {len(data)} bytes for a "
                                  f"{tensor.dtype} tensor of shape {tensor.shape} "
                                  f"({tensor.nbytes} expected)")
        return data

    def write(self, path):
        with open(path, "wb") as f:
            for piece in self._parts():
                f.write(piece if isinstance(piece, bytes) else self._bytes_of(piece))

    def size(self):
        return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in self._parts())

    def to_bytes(self):
        return b"".join(p if isinstance(p, bytes) else self._bytes_of(p) for p in self._parts())
