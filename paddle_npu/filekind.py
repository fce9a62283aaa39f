"""What a file is, from its first bytes: so that a file given to the wrong command is named
for what it is ("an ONNX model", "a Paddle program") instead of failing deep in a parser."""
import os

from .proto import framework_pb2


def _head(source, size=4096):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:size])
    with open(source, "rb") as f:
        return f.read(size)


def looks_like_onnx(data):
    """ONNX writers put ModelProto's ir_version (field 1, a varint: tag 0x08) first, a
    Paddle ProgramDesc starts with its blocks (field 1, length-delimited: tag 0x0a)."""
    if data[:1] != b"\x08":
        return False
    import onnx     # only to recognise an ONNX file: reading Paddle files never loads it

    try:
        proto = onnx.ModelProto.FromString(bytes(data))
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not ONNX
        return False
    return proto.HasField("graph") and len(proto.opset_import) > 0


def _looks_like_program(data):
    if data[:1] != b"\x0a":
        return False
    try:
        return len(framework_pb2.ProgramDesc.FromString(bytes(data)).blocks) > 0
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a program
        return False


def describe(path):
    """A phrase naming what the file at `path` looks like ("an empty file", "an ONNX model",
    "a Paddle program (.pdmodel)", ...)."""
    try:
        if os.path.isdir(path):
            return "a directory"
        size = os.path.getsize(path)
        head = _head(path)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if size == 0:
        return "an empty file (0 bytes)"
    stripped = head.lstrip()
    if stripped[:1] == b"{":
        return "a Paddle PIR program (.json)" if b'"base_code"' in head else "a JSON object"
    if stripped[:1] == b"[":
        return "a JSON array"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (an .npz of arrays?)"
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy .npy array"
    with open(path, "rb") as f:
        data = f.read()
    if looks_like_onnx(data):
        return "an ONNX model"
    if _looks_like_program(data):
        return "a Paddle program (.pdmodel)"
    return f"not a file format paddle_npu knows ({size} bytes)"


def _varint(data, pos):
    """(value, next position), or None when the data ends inside it."""
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            return None
    return None


def protobuf_damage(data):
    """(byte offset, what is wrong) of the first top-level protobuf field that is cut off or
    malformed, or None when every field is whole (the damage, if any, is inside one)."""
    pos = 0
    while pos < len(data):
        start = pos
        tag = _varint(data, pos)
        if tag is None:
            return start, "the file ends inside a field's tag"
        key, pos = tag
        wire = key & 7
        if key >> 3 == 0:
            return start, "field number 0 (not protobuf data)"
        if wire == 0:
            value = _varint(data, pos)
            if value is None:
                return start, "the file ends inside a number"
            pos = value[1]
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
            if pos > len(data):
                return start, "the file ends inside a fixed-size number"
        elif wire == 2:
            length = _varint(data, pos)
            if length is None:
                return start, "the file ends inside a length"
            size, pos = length
            if pos + size > len(data):
                return start, (f"a field of {size} bytes starts here but only "
                               f"{len(data) - pos} remain: the file is truncated")
            pos += size
        else:
            return start, f"wire type {wire} (not protobuf data, or corrupt)"
    return None
