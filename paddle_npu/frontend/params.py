"""Reader for Paddle's tensor records: `.pdiparams`, `__params__` and per-parameter files.

A combined params file is a plain concatenation of records, one per
persistable var, with no names in it: the names come from the program, in the
order Paddle writes them (`param_order`). One record, little-endian:

    uint32  version            (0)
    uint64  lod_level          number of LoD levels
    lod_level x { uint64 nbytes, nbytes of uint64 offsets }
    uint32  tensor version     (0)
    int32   desc_size
    desc_size bytes            VarType.TensorDesc protobuf (data_type, dims)
    numel x itemsize bytes     the data, C order

Arrays are `np.frombuffer` views over an `mmap` of the file: nothing is copied
until someone writes to them (they are read-only).
"""
import mmap
import os
import struct
from dataclasses import dataclass
from typing import List

import numpy as np

from ..errors import PaddleFormatError
from ..proto import framework_pb2

_VT = framework_pb2.VarType

# Paddle's VarType.Type codes of data types, as numpy dtypes.
import ml_dtypes  # bfloat16 and float8 as numpy dtypes (onnx depends on it too)

DTYPES = {
    _VT.BOOL: np.dtype(np.bool_),
    _VT.INT16: np.dtype(np.int16),
    _VT.INT32: np.dtype(np.int32),
    _VT.INT64: np.dtype(np.int64),
    _VT.FP16: np.dtype(np.float16),
    _VT.FP32: np.dtype(np.float32),
    _VT.FP64: np.dtype(np.float64),
    _VT.UINT8: np.dtype(np.uint8),
    _VT.INT8: np.dtype(np.int8),
    _VT.UINT16: np.dtype(np.uint16),
    _VT.UINT32: np.dtype(np.uint32),
    _VT.UINT64: np.dtype(np.uint64),
    _VT.BF16: np.dtype(ml_dtypes.bfloat16),
    _VT.FP8_E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    _VT.FP8_E5M2: np.dtype(ml_dtypes.float8_e5m2),
    _VT.COMPLEX64: np.dtype(np.complex64),
    _VT.COMPLEX128: np.dtype(np.complex128),
}


def dtype_name(code):
    """'float32' etc. for a VarType.Type code, None for non-tensor codes."""
    dt = DTYPES.get(code)
    return None if dt is None else dt.name


@dataclass
class Record:
    array: np.ndarray
    lod: List[np.ndarray]
    offset: int            # where the record starts in the file
    end: int


class _Cursor:
    """Bounds-checked little-endian reads over a buffer, errors naming the byte offset."""

    def __init__(self, buf, path):
        self.buf, self.path, self.pos = buf, path, 0

    def fail(self, problem, offset=None, hint=None):
        raise PaddleFormatError(self.path, problem, offset=self.pos if offset is None else offset,
                                hint=hint)

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            self.fail(f"file ends inside {what}: needs {n} bytes, {len(self.buf) - self.pos} left",
                      hint="the file is truncated; export or copy it again")
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt, what):
        size = struct.calcsize(fmt)
        start = self.take(size, what)
        return struct.unpack_from(fmt, self.buf, start)[0]


def read_record(cur):
    """Read one tensor record at the cursor."""
    start = cur.pos
    version = cur.unpack("<I", "the record version")
    if version != 0:
        cur.fail(f"tensor record version {version}, expected 0", offset=start,
                 hint="not a Paddle params file, or the program and params files do not match")
    lod_level = cur.unpack("<Q", "the LoD level")
    if lod_level > 64:
        cur.fail(f"implausible LoD level {lod_level}", offset=start + 4,
                 hint="the params file is corrupt or does not belong to this program")
    lod = []
    for _ in range(lod_level):
        nbytes = cur.unpack("<Q", "a LoD level size")
        if nbytes % 8:
            cur.fail(f"LoD level of {nbytes} bytes is not a whole number of uint64", offset=cur.pos - 8)
        at = cur.take(nbytes, "LoD data")
        lod.append(np.frombuffer(cur.buf, dtype="<u8", count=nbytes // 8, offset=at))
    tversion = cur.unpack("<I", "the tensor version")
    if tversion != 0:
        cur.fail(f"tensor version {tversion}, expected 0", offset=cur.pos - 4)
    desc_at = cur.pos
    desc_size = cur.unpack("<i", "the tensor descriptor size")
    if desc_size < 0 or desc_size > (1 << 20):
        cur.fail(f"implausible tensor descriptor size {desc_size}", offset=desc_at)
    at = cur.take(desc_size, "the tensor descriptor")
    desc = _VT.TensorDesc()
    try:
        desc.ParseFromString(bytes(cur.buf[at:at + desc_size]))
    except Exception as exc:  # protobuf raises DecodeError or others on garbage
        cur.fail(f"tensor descriptor does not parse ({exc})", offset=at)
    if not desc.HasField("data_type"):
        cur.fail("tensor descriptor has no data type", offset=at)
    dtype = DTYPES.get(desc.data_type)
    if dtype is None:
        cur.fail(f"unsupported tensor data type code {desc.data_type}", offset=at,
                 hint="this dtype cannot be converted; cast the parameter before exporting")
    dims = list(desc.dims)
    if any(d < 0 for d in dims):
        cur.fail(f"negative dimension in stored tensor shape {dims}", offset=at)
    numel = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if numel > len(cur.buf):
        cur.fail(f"tensor of shape {dims} is larger than the whole file", offset=at,
                 hint="the file is truncated or corrupt")
    data_at = cur.take(numel * dtype.itemsize, f"tensor data of shape {dims}")
    array = np.frombuffer(cur.buf, dtype=dtype, count=numel, offset=data_at).reshape(dims)
    return Record(array, lod, start, cur.pos)


def _map(path):
    """A read-only mmap of the file (an empty bytes for an empty file)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise PaddleFormatError(path, "params file not found",
                                hint="pass the .pdiparams written next to the model") from None
    except OSError as exc:
        raise PaddleFormatError(path, f"cannot read the params file ({exc.strerror})") from None


def param_order(program):
    """The names of the tensors in a combined params file, in the order Paddle writes them.

    Both program formats: every persistable dense tensor except the feed/fetch holders,
    sorted by name in Python string order (what Paddle's save_combine and pir_io receive).
    Established on real exports record by record (dtype, shape and values against Paddle's
    scope): tests/test_params.py, tests/test_zoo.py, tests/test_pir_reader.py. Not saved:
    parameters marked not persistable, e.g. an RNN's `dropout_state__non_persistable`.
    """
    names = set()
    for block in program.blocks:
        for var in block.vars.values():
            if var.persistable and var.kind == "dense_tensor" and var.name not in ("feed", "fetch"):
                names.add(var.name)
    return sorted(names)


def parse_records(buf, path):
    """Every record in a buffer holding a combined params file, in file order."""
    cur = _Cursor(buf, path)
    records = []
    while cur.pos < len(buf):
        records.append(read_record(cur))
    return records


def read_records(path):
    """Every record of a combined params file, in file order."""
    return parse_records(_map(path), path)


def read_combined(path, names, expected=None):
    """Map the records of a combined params file onto `names` (Paddle's write order).

    `expected` maps a name to (dtype name, shape) from the program, used to catch
    a params file that belongs to another program.
    """
    if names and os.path.getsize(path) == 0:
        raise PaddleFormatError(path, f"is empty (0 bytes); the program has {len(names)} "
                                "parameters", hint="the file was cut off or not written; "
                                "pass the params file exported with the model")
    return name_records(read_records(path), names, path, expected)


def name_records(records, names, path, expected=None):
    """{name: array} for records in Paddle's write order `names`."""
    if len(records) != len(names):
        raise PaddleFormatError(
            path, f"holds {len(records)} tensors but the program has {len(names)} parameters",
            hint="the params file belongs to another model; pass the one exported with it")
    params = {}
    for name, rec in zip(names, records):
        _check_matches(path, name, rec, expected)
        params[name] = rec.array
    return params


def read_single(path, name, expected=None):
    """A per-parameter file (old model directories): exactly one record."""
    buf = _map(path)
    cur = _Cursor(buf, path)
    rec = read_record(cur)
    if cur.pos != len(buf):
        cur.fail(f"{len(buf) - cur.pos} trailing bytes after the tensor record",
                 hint="the file is corrupt or is not a single-parameter file")
    _check_matches(path, name, rec, expected)
    return rec.array


def _lstrip_ones(shape):
    shape = list(shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    return shape


def _check_matches(path, name, rec, expected):
    if not expected or name not in expected:
        return
    dtype, shape = expected[name]
    ok_shape = shape is None or len(shape) == rec.array.ndim and all(
        d < 0 or d == s for d, s in zip(shape, rec.array.shape))
    # Paddle's loader keeps the stored tensor whatever the declaration, and real models
    # differ from theirs in two ways we accept: a shape that differs only in leading 1s
    # (PaddleSlim's quantised models declare scales [1] / [C] and store [] / [1, C]; the
    # program's shape is what its ops were built for, so the record takes it), and
    # quantised weights (weight -> dequantize_linear) stored int8 / int16 under a float
    # declaration (kept as stored)
    if not ok_shape and all(d >= 0 for d in shape) and \
            _lstrip_ones(shape) == _lstrip_ones(rec.array.shape):
        rec.array = rec.array.reshape(shape)
        ok_shape = True
    ok_dtype = dtype is None or dtype == rec.array.dtype.name or \
        rec.array.dtype.name in ("int8", "int16") and dtype in ("float32", "float64")
    if not (ok_shape and ok_dtype):
        raise PaddleFormatError(
            path, f"tensor for parameter {name!r} is {rec.array.dtype.name}{list(rec.array.shape)}, "
            f"the program declares {dtype}{list(shape) if shape is not None else '?'}",
            offset=rec.offset, where=f"parameter {name!r}",
            hint="the params file belongs to another model or version; pass the one exported with it")
