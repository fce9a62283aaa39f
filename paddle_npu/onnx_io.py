"""Where an ONNX model crosses the disk / protobuf boundary, for stage 2 and its tools.

    load_proto(model)           path, bytes, ModelProto or ir.Model -> ModelProto
    load_header(model)          the same without the big initializers' bytes (structure only)
    graph_inputs(graph)         a GraphProto's inputs (initializers left out): name, type, sizes
    load_model(model, opset)    the same -> one ir.Model (opset raised, shapes inferred; a
                                file's or bytes' big weights read straight into arrays, never
                                parsed into protobuf)
    to_proto(model) / to_bytes  an ir.Model (or anything load_proto takes) serialized
    infer_shapes(model)         onnx's shape inference (pools at onnxruntime's sizes:
                                shape_inference.py) merged into an ir.Model in place
    upgrade_opset(proto, n)     onnx's version converter, keeping node names and metadata
    save_proto(proto, path)     a ModelProto written atomically (segments, QDQ exports)
    StreamedModel(model)        an ir.Model written to a file with its weights streamed from
                                their arrays (no second copy), checkable without them, or
                                given to onnxruntime as they are in memory (for_onnxruntime)

Everything after `load_model` works on that one ir.Model; a ModelProto is made only here.
"""
import math
import os

import numpy as np
import onnx
import onnx_ir as ir
from onnx import ModelProto, TensorProto, helper, serialization, version_converter
from onnx_ir.passes.common import _c_api_utils

from . import shape_inference
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


def own_proto(model, proto=None):
    """A ModelProto of `model` the caller may edit: `proto` (load_proto's of it, loaded here
    when not given), copied only where it is the caller's own object (a path or an
    ir.Model gives a proto of its own already)."""
    proto = load_proto(model) if proto is None else proto
    if proto is model:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    return proto


def load_header(model):
    """The ModelProto of a model file or bytes without the bytes of its big initializers
    (nodes, inputs, outputs, every initializer's name, type and dims kept), for looking at
    its structure without holding its weights; anything else as load_proto reads it."""
    proto, _ = _load_weights_aside(model, weights=False)
    return proto if proto is not None else load_proto(model)


def graph_inputs(graph):
    """[(name, ONNX element type, dims)] of a GraphProto's inputs that are not initializers:
    dims an int per axis (None where its size is left open), None when the rank is not
    given."""
    inits = {i.name for i in graph.initializer}
    return [(i.name, i.type.tensor_type.elem_type,
             [d.dim_value if d.HasField("dim_value") else None
              for d in i.type.tensor_type.shape.dim]
             if i.type.tensor_type.HasField("shape") else None)
            for i in graph.input if i.name not in inits]


def names_read(node):
    """The tensors a node reads: its inputs and what its subgraphs take from outside them."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            inside = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                names += [x for x in names_read(n) if x not in inside and x not in names]
                inside.update(n.output)
    return names


def to_proto(model):
    """The ModelProto of an ir.Model (or of anything load_proto reads)."""
    return load_proto(model)


def to_bytes(model):
    """The serialized model."""
    return to_proto(model).SerializeToString()


def load_model(model, min_opset=None, infer=True, preferred_opset=None):
    """One ir.Model to rewrite: the default-domain opset raised to `preferred_opset` where
    onnx's converter takes the model there, else to `min_opset`, when lower; shapes inferred
    with `infer` (as far as onnx can), initializers no longer listed as graph inputs (IR < 4
    listed them; the models we write are IR >= 10, where they are constants only)."""
    # The converter and shape inference copy the whole model (twice each): the weights are
    # set aside while they run (a proto we made ourselves only: the caller's stays as it is)
    proto, aside = _load_weights_aside(model)
    if proto is None:
        proto = load_proto(model)
        aside = _set_weights_aside(proto) if not isinstance(model, onnx.ModelProto) else {}
    else:
        aside.update(_set_weights_aside(proto))      # what external data files held
    if preferred_opset is not None:
        try:
            proto = upgrade_opset(proto, preferred_opset)
        except ConversionError:
            if min_opset is None:
                raise
    if min_opset is not None:
        proto = upgrade_opset(proto, min_opset)     # (nothing to do once preferred is done)
    if infer:
        try:
            proto = shape_inference.infer(proto)
        except Exception:   # (a model over 2 GB, an op onnx chokes on): shapes as given
            pass
    m = ir.serde.deserialize_model(proto)
    _put_weights_back(m, aside)
    if isinstance(model, onnx.ModelProto):
        _read_weights_once(m)
    inputs = [v for v in m.graph.inputs if v.name not in m.graph.initializers]
    if len(inputs) != len(m.graph.inputs):
        m.graph.inputs.clear()
        m.graph.inputs.extend(inputs)
        # IR < 4 requires every initializer to be an input: written back (and read by onnx's
        # version converter) the model would name weights nothing defines
        m.ir_version = max(m.ir_version, 4)
    return m


_ASIDE = "paddle_npu:set-aside"     # the external-data location of a weight set aside
_ASIDE_ELEMENTS = 1024              # smaller tensors (shapes, axes, scales) stay in place
_ASIDE_BYTES = 1024                 # (at least this many bytes, then)


def _mark_aside(t):
    """A TensorProto without its bytes, marked as external data set aside (dtype, dims kept)."""
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", _ASIDE


def _set_weights_aside(proto):
    """Take the bytes of the big initializers out of the proto, leaving each one marked as
    external data (dtype and dims kept): {name: uint8 array}."""
    aside = {}
    for t in proto.graph.initializer:
        # counted from the dims: reading raw_data (or ByteSize) would copy the bytes
        if t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data") and \
                math.prod(t.dims) >= _ASIDE_ELEMENTS:
            aside[t.name] = np.frombuffer(t.raw_data, dtype=np.uint8)
            _mark_aside(t)
    return aside


def _load_weights_aside(model, weights=True):
    """(ModelProto, {name: uint8 array}) for a model file or bytes, its big initializers'
    bytes read straight into arrays (a file's) or viewed where they lie (bytes'), the proto
    parsed without them; (None, None) for anything else, or what this reader does not
    follow (then onnx.load reads it, and says what is wrong). weights=False: the proto
    only (no weights read, no external data loaded)."""
    if isinstance(model, (bytes, bytearray)):
        buffer, path = memoryview(model), None
    elif isinstance(model, (str, os.PathLike)) and os.path.isfile(model) and \
            serialization.registry.get_format_from_file_extension(
                os.path.splitext(os.fspath(model))[1]) in (None, "protobuf"):
        path = os.fspath(model)
    else:
        return None, None
    try:
        if path is None:
            return _strip_weights(buffer, lambda start, size: np.frombuffer(
                buffer, np.uint8, size, start) if weights else None)
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return None, None
            return _strip_weights(_FileBytes(f), lambda start, size: _read_at(
                f, start, size) if weights else None,
                os.path.dirname(path) if weights else None)
    except Exception:  # noqa: BLE001 - _NotPlain, protobuf's DecodeError: onnx.load reads it
        return None, None   # and says what is wrong


class _NotPlain(Exception):
    """The bytes are not laid out as _strip_weights follows them."""


class _FileBytes:
    """A file read as `buffer[i]` / `buffer[a:b]` by small blocks, for walking its protobuf
    fields without reading (or mapping: the page cache's large folios would count in our
    RSS) the bytes of the weights between them."""
    BLOCK = 16384

    def __init__(self, f):
        self._fd, self._size, self._blocks = f.fileno(), os.fstat(f.fileno()).st_size, {}

    def __len__(self):
        return self._size

    def __getitem__(self, at):
        if isinstance(at, slice):
            return os.pread(self._fd, at.stop - at.start, at.start)
        block = self._blocks.get(at // self.BLOCK)
        if block is None:
            block = self._blocks[at // self.BLOCK] = os.pread(
                self._fd, self.BLOCK, at - at % self.BLOCK)
        return block[at % self.BLOCK]


def _read_at(f, start, size):
    """`size` bytes of file `f` from `start`, into a new uint8 array."""
    array = np.empty(size, np.uint8)
    f.seek(start)
    if f.readinto(memoryview(array)) != size:
        raise _NotPlain("short read")
    return array


def _varint_at(buffer, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buffer) or shift > 63:
            raise _NotPlain("truncated varint")
        byte = buffer[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _fields(buffer, start, end):
    """(number, field start, payload start, field end) of each field in [start, end); a
    payload start only for length-delimited fields."""
    pos = start
    while pos < end:
        tag, body = _varint_at(buffer, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, stop = _varint_at(buffer, body)
        elif wire == 1:
            stop = body + 8
        elif wire == 5:
            stop = body + 4
        elif wire == 2:
            size, body = _varint_at(buffer, body)
            stop = body + size
        else:                       # groups: nothing ONNX writes
            raise _NotPlain(f"wire type {wire}")
        if stop > end or number == 0:
            raise _NotPlain("field past its message")
        yield number, pos, body if wire == 2 else None, stop
        pos = stop


def _strip_weights(buffer, read, base_dir=None):
    """The ModelProto in `buffer` parsed with every main-graph initializer of over
    _ASIDE_BYTES of raw_data taken out (dtype, dims kept, marked as set aside), and those
    bytes as {name: read(start, size)}; small ones get their bytes back. A file's external
    data (from `base_dir`) is loaded as onnx.load does."""
    pieces, cuts, graphs = [], [], 0
    for number, start, body, stop in _fields(buffer, 0, len(buffer)):
        if number != _GRAPH_FIELD or body is None:
            pieces.append(buffer[start:stop])
            continue
        graphs += 1
        graph = []
        for g_number, g_start, g_body, g_stop in _fields(buffer, body, stop):
            raw = None
            if g_number == _INITIALIZER_FIELD and g_body is not None:
                raw = [(f_start, f_body, f_stop) for number_, f_start, f_body, f_stop
                       in _fields(buffer, g_body, g_stop) if number_ == _RAW_DATA_FIELD]
            if raw is not None:
                cuts.append(None)
            if not raw or len(raw) > 1 or raw[0][2] - raw[0][1] < _ASIDE_BYTES:
                graph.append(buffer[g_start:g_stop])
                continue
            f_start, f_body, f_stop = raw[0]
            cuts[-1] = (f_body, f_stop - f_body)
            size = (f_start - g_body) + (g_stop - f_stop)
            graph += [_field(_INITIALIZER_FIELD, size), buffer[g_body:f_start],
                      buffer[f_stop:g_stop]]
        size = sum(len(p) for p in graph)
        pieces += [_field(_GRAPH_FIELD, size)] + graph
    if graphs != 1:
        raise _NotPlain(f"{graphs} graph fields")
    proto = ModelProto.FromString(b"".join(bytes(p) for p in pieces))
    if not proto.HasField("graph") or not proto.opset_import or \
            len(proto.graph.initializer) != len(cuts):
        raise _NotPlain("not a model")
    if base_dir is not None:
        onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
    aside = {}
    for t, cut in zip(proto.graph.initializer, cuts):
        if cut is None:
            continue
        if math.prod(t.dims) < _ASIDE_ELEMENTS:
            t.raw_data = bytes(buffer[cut[0]:cut[0] + cut[1]])
        else:
            aside[t.name] = read(*cut)
            _mark_aside(t)
    return proto, aside


def _put_weights_back(model, aside):
    """The weights set aside, as arrays over their bytes (no copy), in the ir.Model."""
    for name, value in model.graph.initializers.items():
        if name not in aside:
            continue
        held = value.const_value
        array = aside[name].view(held.dtype.numpy()).reshape(held.shape.numpy())
        value.const_value = ir.Tensor(array, name=name)
    left = [v.name for v in model.graph.initializers.values()
            if isinstance(v.const_value, ir.ExternalTensor) and v.const_value.location == _ASIDE]
    if left:
        raise ConversionError(f"internal error: weights {left[:3]} were not put back")


def _read_weights_once(model):
    """The big weights of a model deserialized from the caller's proto (whose bytes are not
    set aside) as arrays read once: each read of a proto's tensor makes a new array, so two
    layers reading one weight would not see the same memory, and a tied weight would be
    put on arrays twice (LowerContext.tile_initializer shares a tile's by its memory)."""
    for name, value in model.graph.initializers.items():
        held = value.const_value
        if isinstance(held, ir.serde.TensorProtoTensor) and held.nbytes >= _ASIDE_BYTES and \
                held.dtype.numpy().kind in "biuf":
            value.const_value = ir.Tensor(held.numpy(), name=name, doc_string=held.doc_string,
                                          metadata_props=dict(held.metadata_props))


def infer_shapes(model, check_type=False):
    """onnx's shape inference (shape_inference.infer: pools at onnxruntime's sizes) on an
    ir.Model, the shapes and types it finds written into the model's own values (no new
    model; left as it is when inference fails). True if any changed. Only the inferred value infos are read back: onnx_ir's ShapeInferencePass
    deserializes the whole inferred model to merge it, about half of its time."""
    def infer(proto):
        return shape_inference.infer(proto, check_type=check_type)
    try:    # (call_onnx_api leaves the big initializers' bytes out of the proto)
        inferred = _c_api_utils.call_onnx_api(infer, model)
    except Exception:  # noqa: BLE001 - as the pass: inference that fails changes nothing
        return False
    return _merge_inferred(model.graph, inferred.graph)


def _merge_inferred(graph, proto):
    """The types and shapes of `proto` (the inferred GraphProto of `graph`) set on the
    values of `graph` they name, sub-graphs with theirs. True if any changed."""
    values = {v.name: v for v in graph.inputs}
    values.update((v.name, v) for node in graph for v in node.outputs)
    changed = False
    for info in (*proto.value_info, *proto.output):
        value = values.get(info.name)
        if value is None:
            continue
        shape = ir.serde.deserialize_type_proto_for_shape(info.type)
        if shape is not None and value.shape != shape:
            value.shape, changed = shape, True
        found = ir.serde.deserialize_type_proto_for_type(info.type)
        if found is not None and found.dtype is not None and value.type != found:
            if value.type is None or isinstance(found, ir.TensorType):
                value.type, changed = found, True
    if len(proto.node) != len(graph):
        return changed
    for node, node_proto in zip(graph, proto.node):
        graphs = {a.name: [a.g] if a.HasField("g") else a.graphs for a in node_proto.attribute
                  if a.HasField("g") or a.graphs}
        for name, attr in node.attributes.items():
            subs = attr.value if attr.type == ir.AttributeType.GRAPHS else [attr.value] \
                if attr.type == ir.AttributeType.GRAPH else []
            for sub, sub_proto in zip(subs, graphs.get(name, ())):
                changed |= _merge_inferred(sub, sub_proto)
    return changed


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
    # a name the converted graph still defines is not free: an opset 10 Resize's scales
    # stay an initializer while the roi input put before them is new
    used = {o for n in converted.node for o in n.output} | {v.name for v in converted.input}
    used |= {i.name for i in converted.initializer}
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


def _plain_array(tensor):
    """The tensor's own NumPy array when its bytes in the file are that array's (native byte
    order, whole bytes per element), else None (ir.Tensor.tobytes knows the rest)."""
    array = tensor.raw if type(tensor) is ir.Tensor else None    # (a subclass: its tobytes)
    if not isinstance(array, np.ndarray) or array.dtype.itemsize * 8 != tensor.dtype.bitwidth \
            or not (array.dtype.isnative or array.dtype.itemsize == 1) \
            or array.nbytes != tensor.nbytes:
        return None
    return array


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
        scratch = np.empty(0, np.uint8)     # one buffer for the strided tensors' bytes
        with open(path, "wb") as f:
            for piece in self._parts():
                if isinstance(piece, bytes):
                    f.write(piece)
                    continue
                array = _plain_array(piece)
                if array is None:
                    f.write(self._bytes_of(piece))
                elif array.flags.c_contiguous:
                    f.write(array.reshape(-1).view(np.uint8))
                else:               # (a tile viewing its layer's weight): copied into scratch
                    if scratch.nbytes < array.nbytes:
                        scratch = np.empty(array.nbytes, np.uint8)
                    out = scratch[:array.nbytes].view(array.dtype).reshape(array.shape)
                    np.copyto(out, array)
                    f.write(out.reshape(-1).view(np.uint8))

    def size(self):
        return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in self._parts())

    def for_onnxruntime(self, copies=None):
        """(bytes, {name: array}): the model for an onnxruntime session that is given its big
        weights as they are in memory (SessionOptions.add_external_initializers, OrtValues
        over these arrays), their initializers in the bytes marked as external data; a
        weight that is no plain array of a type onnxruntime takes from NumPy goes in the
        bytes. On ResNet-50 (98 MiB of weights) this takes 0.02 s where serializing takes
        0.28 s, and the session is made in half the time, with no copy of the weights.
        A strided array (a tile viewing its layer's weight) is given as a contiguous copy,
        one copy where its bytes in the model would be three (written, parsed, kept), made
        once for all sessions that share `copies` ({name: copy}, filled here)."""
        copies = {} if copies is None else copies
        proto = ModelProto()
        proto.CopyFrom(self.proto)
        given = {}
        for init in proto.graph.initializer:
            tensor = self._tensors.get(init.name)
            if tensor is None:
                continue
            array = _plain_array(tensor)
            if array is not None and array.dtype.kind in "biuf":
                if not array.flags.c_contiguous:
                    if init.name not in copies:
                        copies[init.name] = np.ascontiguousarray(array)
                    array = copies[init.name]
                given[init.name] = array
                _mark_aside(init)
            else:
                init.raw_data = self._bytes_of(tensor)
        return proto.SerializeToString(), given

    def to_bytes(self):
        return b"".join(p if isinstance(p, bytes) else self._bytes_of(p) for p in self._parts())
