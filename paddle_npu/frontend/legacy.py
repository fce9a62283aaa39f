"""Reader for the legacy program format: `.pdmodel` / `__model__` (a ProgramDesc protobuf)."""
from google.protobuf.message import DecodeError

from ..errors import PaddleFormatError
from ..program import Block, Op, Program, Var
from ..proto import framework_pb2
from .params import dtype_name
from ..filekind import protobuf_damage

_VT = framework_pb2.VarType
_A = framework_pb2

# VarType.Type codes of non-tensor variables, as Var.kind.
_KINDS = {
    _VT.LOD_TENSOR: "dense_tensor",
    _VT.SELECTED_ROWS: "selected_rows",
    _VT.FEED_MINIBATCH: "feed_minibatch",
    _VT.FETCH_LIST: "fetch_list",
    _VT.STEP_SCOPES: "step_scopes",
    _VT.LOD_RANK_TABLE: "lod_rank_table",
    _VT.LOD_TENSOR_ARRAY: "tensor_array",
    _VT.READER: "reader",
    _VT.RAW: "raw",
    _VT.STRING: "string",
    _VT.STRINGS: "strings",
    _VT.VOCAB: "vocab",
    _VT.SPARSE_COO: "sparse_coo",
    _VT.SPARSE_CSR: "sparse_csr",
}


def _text(b):
    """Attribute strings: Paddle does not promise UTF-8, so keep odd bytes, don't fail."""
    return b if isinstance(b, str) else b.decode("utf-8", errors="surrogateescape")


def _name(value, path, where, what):
    """A string field; protobuf hands back bytes when the file holds invalid UTF-8."""
    if isinstance(value, str):
        return value
    raise PaddleFormatError(path, f"{what} is not valid UTF-8 ({value[:40]!r})", where=where,
                            hint="the file is corrupt")


def _names(values, path, where, what):
    return [_name(v, path, where, what) for v in values]


def _scalar(s):
    kind = s.type
    if kind == framework_pb2.Scalar.BOOLEAN:
        return bool(s.b)
    if kind == framework_pb2.Scalar.LONG:
        return int(s.i)
    if kind == framework_pb2.Scalar.FLOAT64:
        return float(s.r)
    if kind == framework_pb2.Scalar.COMPLEX128:
        return complex(s.c.r, s.c.i)
    raise ValueError(f"scalar of unknown type {kind}")


# AttrType -> how to turn the Attr message into a Python value. Block
# attributes hold indices here; `_link_blocks` swaps in the Block objects.
_ATTR_VALUES = {
    _A.INT: lambda a: int(a.i),
    _A.FLOAT: lambda a: float(a.f),
    _A.STRING: lambda a: _text(a.s),
    _A.INTS: lambda a: list(a.ints),
    _A.FLOATS: lambda a: list(a.floats),
    _A.STRINGS: lambda a: [_text(s) for s in a.strings],
    _A.BOOLEAN: lambda a: bool(a.b),
    _A.BOOLEANS: lambda a: list(a.bools),
    _A.BLOCK: lambda a: _BlockIndex(a.block_idx),
    _A.LONG: lambda a: int(a.l),
    _A.BLOCKS: lambda a: [_BlockIndex(i) for i in a.blocks_idx],
    _A.LONGS: lambda a: list(a.longs),
    _A.FLOAT64S: lambda a: list(a.float64s),
    _A.VAR: lambda a: _text(a.var_name),
    _A.VARS: lambda a: [_text(v) for v in a.vars_name],
    _A.FLOAT64: lambda a: float(a.float64),
    _A.SCALAR: lambda a: _scalar(a.scalar),
    _A.SCALARS: lambda a: [_scalar(s) for s in a.scalars],
}


class _BlockIndex(int):
    """A block attribute before the blocks exist."""


def parse_program_desc(data, path):
    """Decode ProgramDesc bytes; a clear error for anything that is not one."""
    desc = framework_pb2.ProgramDesc()
    try:
        desc.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        offset, problem = protobuf_damage(data) or (None, f"protobuf decode failed: {exc}")
        raise PaddleFormatError(
            path, f"not a valid Paddle program ({problem})", offset=offset,
            hint="the file is truncated or corrupt, or is not a .pdmodel; a Paddle 3 .json "
                 "program must keep its .json name") from None
    if not desc.blocks:
        raise PaddleFormatError(path, "program has no blocks",
                                hint="the file is empty, truncated or not a .pdmodel")
    return desc


def _var(vd, path, where):
    vt = vd.type
    kind = _KINDS.get(vt.type)
    if kind is None:
        raise PaddleFormatError(path, f"var {vd.name!r} has unknown type code {vt.type}", where=where,
                                hint="the file is corrupt or from an unsupported Paddle version")
    var = Var(_name(vd.name, path, where, "a var name"), persistable=vd.persistable, kind=kind, stop_gradient=vd.stop_gradient)
    tensor = None
    if vt.HasField("lod_tensor"):
        tensor, var.lod_level = vt.lod_tensor.tensor, vt.lod_tensor.lod_level
    elif vt.HasField("tensor_array"):
        tensor, var.lod_level = vt.tensor_array.tensor, vt.tensor_array.lod_level
    elif vt.HasField("selected_rows"):
        tensor = vt.selected_rows
    if tensor is not None:
        var.dtype = dtype_name(tensor.data_type)
        if var.dtype is None and var.kind == "dense_tensor":
            raise PaddleFormatError(
                path, f"var {vd.name!r} has unknown data type code {tensor.data_type}", where=where,
                hint="this dtype cannot be converted")
        var.shape = tuple(int(d) for d in tensor.dims)
    return var


def _op(od, path, where):
    if not od.type:
        raise PaddleFormatError(path, "op without a type", where=where,
                                hint="the file is corrupt")
    op = Op(_name(od.type, path, where, "an op type"))
    for slots, target in ((od.inputs, op.inputs), (od.outputs, op.outputs)):
        for v in slots:
            slot = _name(v.parameter, path, where, "a slot name")
            target[slot] = _names(v.arguments, path, where, f"an argument of slot {slot!r}")
    for a in od.attrs:
        _name(a.name, path, where, "an attribute name")
        conv = _ATTR_VALUES.get(a.type)
        if conv is None:
            raise PaddleFormatError(
                path, f"attribute {a.name!r} of op {od.type!r} has unknown type {a.type}",
                where=where, hint="the file is corrupt or from a newer Paddle")
        try:
            op.attrs[a.name] = conv(a)
        except ValueError as exc:
            raise PaddleFormatError(path, f"attribute {a.name!r} of op {od.type!r}: {exc}",
                                    where=where) from None
    return op


def _link_blocks(program, path):
    """Replace block indices in attributes by the Block objects."""
    n = len(program.blocks)
    for block in program.blocks:
        for i, op in enumerate(block.ops):
            for name, value in op.attrs.items():
                idxs = value if isinstance(value, list) else [value]
                if not all(isinstance(v, _BlockIndex) for v in idxs) or not idxs:
                    continue
                bad = [v for v in idxs if not 0 <= v < n]
                if bad:
                    raise PaddleFormatError(
                        path, f"attribute {name!r} refers to block {bad[0]}, the program has {n}",
                        where=f"block {block.idx} op #{i} ({op.type})", hint="the file is corrupt")
                blocks = [program.blocks[v] for v in idxs]
                op.attrs[name] = blocks if isinstance(value, list) else blocks[0]


def read_legacy_program(data, path):
    """ProgramDesc bytes -> Program (no parameters yet)."""
    desc = parse_program_desc(data, path)
    program = Program(format="legacy", blocks=[], model_path=str(path))
    if desc.HasField("version"):
        program.version = int(desc.version.version)
    program.op_version_map = {
        _name(p.op_name, path, "op_version_map", "an op name"): int(p.op_version.version)
        for p in desc.op_version_map.pair}
    for i, bd in enumerate(desc.blocks):
        if bd.idx != i:
            raise PaddleFormatError(path, f"block #{i} says its index is {bd.idx}",
                                    where=f"block {i}", hint="the file is corrupt")
        if not -1 <= bd.parent_idx < len(desc.blocks) or bd.parent_idx == i:
            raise PaddleFormatError(path, f"block {i} has invalid parent {bd.parent_idx}",
                                    where=f"block {i}", hint="the file is corrupt")
        block = Block(idx=i, parent_idx=bd.parent_idx, program=program)
        for vd in bd.vars:
            block.vars[vd.name] = _var(vd, path, f"block {i}")
        for j, od in enumerate(bd.ops):
            op = _op(od, path, f"block {i} op #{j} ({od.type or '?'})")
            op.block = block
            block.ops.append(op)
        program.blocks.append(block)
    _link_blocks(program, path)
    _find_feeds_and_fetches(program)
    return program


def _find_feeds_and_fetches(program):
    feeds, fetches = [], []
    for op in program.global_block.ops:
        if op.type == "feed":
            feeds.append((op.attr("col", 0), op.output("Out")[0] if op.output("Out") else None))
        elif op.type == "fetch":
            fetches.append((op.attr("col", 0), op.input("X")[0] if op.input("X") else None))
    program.inputs = [n for _, n in sorted(feeds, key=lambda t: t[0]) if n]
    program.outputs = [n for _, n in sorted(fetches, key=lambda t: t[0]) if n]
