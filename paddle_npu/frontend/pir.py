"""Reader for Paddle 3 PIR program files (`model.json` from `paddle.jit.save`).

The result is the same `Program` the legacy `.pdmodel` reader gives, so one
set of mappers serves both formats: legacy op types and slot names, legacy
attribute names, constants that PIR turned into operands folded back into
attributes, feed/fetch ops for the inputs and outputs.

File layout (Paddle's `paddle/fluid/pir/serialize_deserialize`, checked on
files written by Paddle 3.0, 3.1, 3.2 and 3.3):

    {"base_code": {"magic": "pir", "version": N, "trainable": bool},
     "program": {"regions": [{"#": "region_0", "blocks": [BLOCK]}]}}
    BLOCK  = {"#": "block_0", "args": [ARG], "ops": [OP], "kwargs"?: [ARG]}
    ARG    = {"#": -1, "TT": TYPE}                  block argument, ids -1, -2, ...
    OP     = {"#": "1.conv2d",                      dialect number . op name
              "I": [{"%": id}],                     operands; id 0 = no value
              "O": [{"%": id, "TT": TYPE}],         results, ids 1, 2, ...
              "A": [{"N": name, "AT": ATTR}],       attributes
              "OA": [...], "DA": [...], "QA": [...],  stop_gradient/persistable; dist; quant
              "regions"?: [{"#": ..., "blocks": [BLOCK]}]}
    parameters are compressed:
              {"#": "p", "O": {"%": id, "TT": TYPE},
               "A": [is_distributed, is_parameter, need_clip, name], "OA": [persistable,
               stop_gradient, trainable]}   (0/1 ints; OA only when trainable)
    TYPE   = {"#": "0.t_dtensor", "D": [{"#": "0.t_f32"}, dims, layout, lod, offset]},
             {"#": "0.t_vec", "D": [TYPE, ...]}, {"#": "1.t_dense_tensor_array", ...}
    ATTR   = {"#": "0.a_i32", "D": 3}, {"#": "0.a_array", "D": [ATTR]},
             {"#": "0.a_f32", "VD": "NaN" | "INF" | "-INF"} for non-finite floats, ...

Dialect numbers: 0 builtin, 1 pd_op, 2 cf, 3 custom_op, 4 dist_op. Versions:
1 = Paddle 3.0, 2 = 3.1, 3 = 3.2, 4 = 3.3 (0 = a develop build); the keys are
the same in all of them, only some attributes changed width (i32 -> i64,
f32 -> f64), which this reader does not care about.

How PIR becomes the legacy shape (tables in `pir_compat.json`, generated from
Paddle itself by `tools/gen_pir_compat.py`):
  * op type: the table's legacy type (pd_op.add -> elementwise_add, pd_op.matmul
    -> matmul_v2, batch_norm_ -> batch_norm, relu_ -> relu); an op the table
    lacks borrows its in-place/out-of-place twin's entry when the operand counts
    agree, else keeps its PIR name without dialect (`full_int_array`).
  * operands: by position to the PIR operand names, then to the legacy slot
    (conv2d input/filter -> Input/Filter). An operand fed by a constant
    (full_int_array, full, assign_value, or a combine of them) whose legacy form
    was an attribute is folded back into it (pool2d kernel_size -> ksize) and
    the constant op disappears when nothing else reads it; a non-constant one
    stays a tensor slot (list_inputs for lists: reshape shape -> ShapeTensor).
    Operands with no legacy slot keep the PIR name as slot; unknown ops get
    in0, in1, ... and out0, ...
  * results: to legacy output slots; a PIR-only result nobody reads
    (batch_norm's reserve_space) is dropped. Vector results expand to one
    name per element (rnn State), builtin.combine/split/slice disappear
    (a slice's result names the element it picks).
  * attributes: legacy names (transpose_x -> trans_x), plain Python values;
    dtypes as numpy names ('float32'), undefined dtype as -1 (legacy's "unset");
    places as 'cpu' / 'gpu:0' / 'undefined'. Legacy attributes PIR dropped get
    their legacy defaults, and the ones selecting a PIR op its value
    (pd_op.tril -> tril_triu lower=True).
  * names: parameters by parameter name, inputs by the data op's name, fetched
    values by the fetch name, the rest `<legacy type>_<k>.tmp_<result>`, block
    arguments `<op>_<k>.arg_<i>`; unique.
  * inputs/outputs: pd_op.data, and pd_op.feed in programs paddle.pir.translate_to_pir
    made from legacy ones, -> a legacy `feed` op (X=['feed'], Out=[name], col),
    pd_op.fetch -> `fetch` (X=[name], Out=['fetch'], col); Program.inputs in col
    order (a data op's col is its position), outputs in program order.

Control flow (no legacy equivalent, so these slots are ours):
    if:    inputs Cond=[c]; outputs Out=[...]; attrs true_block, false_block (Blocks)
    while: inputs Condition=[c], X=[loop-carried inputs]; outputs Out=[final values];
           attrs sub_block (a Block whose `args` name the loop-carried values)
    other ops with regions: inputs X, outputs Out, attrs sub_block (one region)
           or sub_blocks (several)
    yield: inputs X=[...], the values a sub-block hands back (`cf.yield`); in a
           while body the first is the next condition, the rest the next values.
"""
import json
import os
import warnings

from ..errors import PaddleFormatError
from ..program import Block, Op, Program, Var

KNOWN_VERSIONS = {0: "develop", 1: "3.0", 2: "3.1", 3: "3.2", 4: "3.3"}
DIALECTS = {"0": "builtin", "1": "pd_op", "2": "cf", "3": "custom_op", "4": "dist_op"}

# Element types (builtin dialect) -> numpy-style dtype names.
ELEMENT_TYPES = {
    "t_bool": "bool", "t_i8": "int8", "t_ui8": "uint8", "t_i16": "int16", "t_i32": "int32",
    "t_i64": "int64", "t_index": "int64", "t_f16": "float16", "t_bf16": "bfloat16",
    "t_f32": "float32", "t_f64": "float64", "t_c64": "complex64", "t_c128": "complex128",
    "t_f8e4m3fn": "float8_e4m3fn", "t_f8e5m2": "float8_e5m2",
}
# Tensor-like types -> Var.kind.
TENSOR_KINDS = {
    "t_dtensor": "dense_tensor", "t_dense_tensor_array": "tensor_array",
    "t_selected_rows": "selected_rows", "t_sparse_coo_tensor": "sparse_coo",
    "t_sparse_csr_tensor": "sparse_csr", "t_dist_dtensor": "dense_tensor",
}
# phi::AllocationType of a place attribute.
PLACES = {0: "undefined", 1: "cpu", 2: "gpu", 3: "gpu_pinned", 4: "xpu", 7: "ipu", 9: "custom"}

# Ops that only move values around; they become no Op.
_PLUMBING = {"builtin.combine", "builtin.split", "builtin.slice", "builtin.parameter"}
# Ops that bring a model input in: `data` in programs Paddle 3 wrote, `feed` in programs
# paddle.pir.translate_to_pir made from legacy ones (how PaddleX ships older models).
_INPUTS = {"pd_op.data", "pd_op.feed"}
# Ops whose single result is a constant that can be folded into an attribute.
_CONSTANTS = {"pd_op.full_int_array", "pd_op.full", "pd_op.assign_value", "pd_op.assign_value_"}
_COMPAT = None


def compat_table():
    """pir_compat.json's op table (loaded once)."""
    global _COMPAT
    if _COMPAT is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pir_compat.json")
        with open(path, encoding="utf-8") as f:
            _COMPAT = json.load(f)["ops"]
    return _COMPAT


def compat_entry(pir_name, n_operands=None):
    """The table entry for a full PIR op name, {} when unknown.

    An op missing from the table whose in-place / out-of-place twin (`relu_` /
    `relu`) is there borrows the twin's entry when the operand counts agree.
    """
    table = compat_table()
    entry = table.get(pir_name)
    if entry is None:
        twin = table.get(pir_name[:-1] if pir_name.endswith("_") else pir_name + "_")
        if twin and (n_operands is None or len(twin.get("operands", ())) == n_operands):
            entry = twin
    return entry or {}


class _Fail(Exception):
    """A malformed structure; becomes a PaddleFormatError naming the op."""

    def __init__(self, problem, where=None):
        super().__init__(problem)
        self.problem, self.where = problem, where


def _located(e, where):
    """Give a _Fail the innermost location it happened at."""
    if e.where is None:
        e.where = where
    return e


def _need(cond, problem):
    if not cond:
        raise _Fail(problem)


def _get(obj, key, kind, what):
    """obj[key] checked to be of `kind` (a type or tuple of types).

    The hot path of the reader: messages are only built when a check fails."""
    if not isinstance(obj, dict):
        raise _Fail(f"{what} is not a JSON object")
    if key not in obj:
        raise _Fail(f"{what} has no {key!r} key")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Fail(f"{what}: {key!r} is {type(value).__name__}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind):
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer",
             bool: "a boolean", float: "a number"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _int(v, what):
    _need(isinstance(v, int) and not isinstance(v, bool), f"{what} is not an integer: {v!r}")
    return v


def _value_id(obj, what):
    """A value reference: {"%": id}; files from before Paddle 3.0 used "#"."""
    _need(isinstance(obj, dict), f"{what} is not a JSON object")
    key = "%" if "%" in obj or not isinstance(obj.get("#"), int) else "#"
    return _get(obj, key, int, what)


def _dialect_name(compact):
    """'1.conv2d' -> 'pd_op.conv2d'; older or hand-written files may spell the dialect out."""
    head, dot, tail = compact.partition(".")
    _need(dot and tail, f"op name {compact!r} has no dialect prefix")
    if head in DIALECTS:
        return f"{DIALECTS[head]}.{tail}"
    _need(head in DIALECTS.values(), f"op name {compact!r}: unknown dialect {head!r}")
    return compact


# ---------------------------------------------------------------------------
# Types and attributes

class _Type:
    """A value's type: kind, dtype, shape, lod level; `elements` for vectors."""
    __slots__ = ("kind", "dtype", "shape", "lod_level", "elements")

    def __init__(self, kind, dtype=None, shape=None, lod_level=0, elements=None):
        self.kind, self.dtype, self.shape = kind, dtype, shape
        self.lod_level, self.elements = lod_level, elements


def _parse_type(tj, depth=0):
    _need(depth < 8, "types nested too deeply")
    tag = _get(tj, "#", str, "a type")
    if tag == "NULL":
        return _Type("null")
    dialect, _, name = tag.partition(".")
    _need(dialect in DIALECTS, f"type {tag!r}: unknown dialect")
    if name in ELEMENT_TYPES:
        return _Type("scalar", ELEMENT_TYPES[name], ())
    if name == "t_vec":
        return _Type("vector", elements=[_parse_type(t, depth + 1)
                                         for t in _get(tj, "D", list, f"type {tag}")])
    if name == "t_dist_dtensor":                       # D[0] is the dense tensor type
        data = _get(tj, "D", list, f"type {tag}")
        _need(data, f"type {tag}: empty data")
        return _parse_type(data[0], depth + 1)
    if name in TENSOR_KINDS:
        data = _get(tj, "D", list, f"type {tag}")
        _need(len(data) >= 2, f"type {tag}: expected [dtype, dims, ...], got {len(data)} items")
        elem = _parse_type(data[0], depth + 1)
        _need(elem.kind == "scalar", f"type {tag}: element type is not a data type")
        dims = data[1]
        _need(isinstance(dims, list), f"type {tag}: dims is not an array")
        shape = tuple(_int(d, f"type {tag} dim") for d in dims)
        lod = data[3] if name in ("t_dtensor", "t_selected_rows") and len(data) > 3 else []
        _need(isinstance(lod, list), f"type {tag}: lod is not an array")
        return _Type(TENSOR_KINDS[name], elem.dtype, shape, len(lod))
    if dialect == "2":                                 # cf stack/inlet/outlet
        return _Type(name[2:] if name.startswith("t_") else name)
    raise _Fail(f"unknown type {tag!r}")


def _float(aj, tag):
    if "VD" in aj:                                     # non-finite floats
        special = aj["VD"]
        _need(isinstance(special, str), f"attribute {tag}: 'VD' is not a string")
        value = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}.get(special.lower())
        _need(value is not None, f"attribute {tag}: unknown special value {special!r}")
        return value
    v = _get(aj, "D", (int, float), f"attribute {tag}")
    _need(not isinstance(v, bool), f"attribute {tag}: boolean where a number belongs")
    return float(v)


def _dtype_attr(v):
    """A DataType attribute -> numpy-style name; unset -> -1 as in legacy programs."""
    _need(isinstance(v, str), f"dtype attribute is not a string: {v!r}")
    low = v.lower()
    if low.startswith("undefined"):
        return -1
    return {"float": "float32", "double": "float64", "half": "float16"}.get(low, low)


def _parse_attr(aj, depth=0):
    """An attribute JSON -> plain Python value."""
    _need(depth < 16, "attributes nested too deeply")
    tag = _get(aj, "#", str, "an attribute")
    if tag == "NULL":
        return None
    dialect, _, name = tag.partition(".")
    _need(dialect in DIALECTS, f"attribute {tag!r}: unknown dialect")
    what = f"attribute {tag}"
    if name == "a_bool":
        return _get(aj, "D", bool, what)
    if name in ("a_i32", "a_i64", "a_index"):
        return _get(aj, "D", int, what)
    if name in ("a_f32", "a_f64"):
        return _float(aj, tag)
    if name in ("a_str", "a_tensorname", "a_layout"):
        return _get(aj, "D", str, what)
    if name == "a_array":
        return [_parse_attr(x, depth + 1) for x in _get(aj, "D", list, what)]
    if name in ("a_c64", "a_c128"):
        d = _get(aj, "D", list, what)
        _need(len(d) == 2 and all(isinstance(x, (int, float)) for x in d), f"{what}: bad complex")
        return complex(d[0], d[1])
    if name == "a_intarray":
        return [_int(x, what) for x in _get(aj, "D", list, what)]
    if name == "a_dtype":
        return _dtype_attr(_get(aj, "D", str, what))
    if name == "a_place":
        d = _get(aj, "D", list, what)
        _need(len(d) >= 2, f"{what}: expected [type, device, ...]")
        kind = PLACES.get(_int(d[0], what), str(d[0]))
        return kind if kind in ("undefined", "cpu") else f"{kind}:{_int(d[1], what)}"
    if name == "a_type":
        t = _parse_type(_get(aj, "D", dict, what))
        return t.dtype if t.kind == "scalar" else t.kind
    if name == "a_scalar":
        d = _get(aj, "D", list, what)
        _need(len(d) >= 2, f"{what}: expected [dtype, value]")
        return d[1] if len(d) == 2 else complex(d[1], d[2])
    if dialect == "4":                                 # distributed attributes: keep raw
        return aj.get("D")
    raise _Fail(f"unknown attribute type {tag!r}")


def _attr_list(items, what):
    """[{"N": name, "AT": attr}] -> {name: value}; entries without AT were deleted by patches."""
    _need(isinstance(items, list), f"{what} is not an array")
    out = {}
    for item in items:
        name = _get(item, "N", str, f"an entry of {what}")
        if "AT" in item:
            out[name] = _parse_attr(item["AT"])
    return out


# ---------------------------------------------------------------------------
# Pass 1: the JSON into raw ops and values

class _RawOp:
    __slots__ = ("name", "operands", "results", "attrs", "out_attrs", "regions", "where")

    def __init__(self, name, where):
        self.name, self.where = name, where
        self.operands, self.results, self.attrs, self.out_attrs, self.regions = [], [], {}, {}, []


class _RawBlock:
    __slots__ = ("args", "ops", "parent")

    def __init__(self, parent):
        self.args, self.ops, self.parent = [], [], parent


class _Value:
    """One PIR value: its type, its producer (op, result index) or block argument."""
    __slots__ = ("id", "type", "op", "index", "block", "name", "stop_gradient", "uses")

    def __init__(self, vid, vtype, op, index, block):
        self.id, self.type, self.op, self.index, self.block = vid, vtype, op, index, block
        self.name, self.stop_gradient, self.uses = None, False, []


class _Scanner:
    def __init__(self):
        self.values = {}          # id -> _Value
        self.current = None       # where we are, for unexpected errors

    def define(self, vid, vtype, op, index, block):
        _need(vid not in self.values, f"value %{vid} is defined twice")
        v = _Value(vid, vtype, op, index, block)
        self.values[vid] = v
        return v

    def block(self, bj, parent, where, depth=0):
        _need(depth < 64, "regions nested too deeply")
        raw = _RawBlock(parent)
        for i, aj in enumerate(_get(bj, "args", list, f"{where}")):
            vid = _get(aj, "#", int, f"{where} argument #{i}")
            _need(vid < 0, f"{where} argument #{i} has id {vid}; block arguments are negative")
            raw.args.append(self.define(vid, _parse_type(_get(aj, "TT", dict, f"{where} argument")),
                                        None, i, raw))
        if "kwargs" in bj:
            _need(isinstance(bj["kwargs"], list), f"{where}: 'kwargs' is not an array")
        for j, oj in enumerate(_get(bj, "ops", list, where)):
            raw.ops.append(self.op(oj, raw, f"{where} op #{j}", depth))
        return raw

    def op(self, oj, block, where, depth):
        self.current = where
        compact = _get(oj, "#", str, where)
        if compact == "p":
            return self.parameter(oj, block, where)
        where = f"{where} ({compact})"
        try:
            raw = _RawOp(_dialect_name(compact), where)
            for i, ij in enumerate(_get(oj, "I", list, where)):
                vid = _value_id(ij, f"operand #{i}")
                if vid != 0:
                    _need(vid in self.values, f"operand #{i} uses value %{vid}, which is not defined "
                                              "before it")
                    self.values[vid].uses.append(raw)
                raw.operands.append(self.values.get(vid))
            raw.attrs = _attr_list(oj.get("A", []), "'A'")
            raw.out_attrs = _attr_list(oj.get("OA", []), "'OA'")
            stop = raw.out_attrs.get("stop_gradient")
            for i, rj in enumerate(_get(oj, "O", list, where)):
                vid = _value_id(rj, f"result #{i}")
                vtype = _parse_type(_get(rj, "TT", dict, f"result #{i}"))
                if vid == 0:                           # a result Paddle did not create
                    raw.results.append(None)
                    continue
                _need(vid > 0, f"result #{i} has id {vid}; results are positive")
                v = self.define(vid, vtype, raw, i, block)
                if isinstance(stop, list) and i < len(stop):
                    v.stop_gradient = bool(stop[i])
                raw.results.append(v)
            regions = oj.get("regions", [])
            _need(isinstance(regions, list), "'regions' is not an array")
        except _Fail as e:
            raise _located(e, where) from None
        for r, rj in enumerate(regions):
            rwhere = f"{where} region #{r}"
            try:
                blocks = _get(rj, "blocks", list, rwhere)
            except _Fail as e:
                raise _located(e, rwhere) from None
            raw.regions.append([self.block(b, block, f"{rwhere} block #{k}", depth + 1)
                                for k, b in enumerate(blocks)])
        return raw

    def parameter(self, oj, block, where):
        raw = _RawOp("builtin.parameter", f"{where} (parameter)")
        try:
            attrs = _get(oj, "A", list, "parameter")
            _need(len(attrs) == 4, f"parameter has {len(attrs)} attributes, expected 4")
            _need(isinstance(attrs[3], str) and attrs[3], "parameter name is not a non-empty string")
            raw.attrs = {"is_distributed": bool(attrs[0]), "is_parameter": bool(attrs[1]),
                         "need_clip": bool(attrs[2]), "parameter_name": attrs[3]}
            raw.where = f"{where} (parameter {attrs[3]!r})"
            flags = oj.get("OA", [1, 1, 1])            # absent when saved with trainable=False
            _need(isinstance(flags, list) and len(flags) == 3,
                  "parameter 'OA' should be [persistable, stop_gradient, trainable]")
            raw.out_attrs = {"persistable": bool(flags[0]), "stop_gradient": bool(flags[1]),
                             "trainable": bool(flags[2])}
            rj = _get(oj, "O", dict, "parameter")
            vid = _value_id(rj, "parameter result")
            _need(vid > 0, f"parameter result has id {vid}")
            v = self.define(vid, _parse_type(_get(rj, "TT", dict, "parameter result")), raw, 0, block)
            v.stop_gradient = raw.out_attrs["stop_gradient"]
            raw.results.append(v)
        except _Fail as e:
            raise _located(e, raw.where) from None
        return raw


# ---------------------------------------------------------------------------
# Pass 2/3: names, then Program

class _Builder:
    def __init__(self, path):
        self.program = Program(format="pir", blocks=[], model_path=str(path))
        self.taken = set()
        self.counters = {}
        self.bases = {}           # id(raw op) -> stem of its temp names
        self.constants = set()    # id(Op) of constant ops, dropped when all uses were folded
        self.feeds = []           # (col, name) of the model inputs
        self.picked = {}          # id(vector value) -> {index: name} from builtin.slice
        self.current = None

    # -- names --------------------------------------------------------------
    def unique(self, name):
        base, k = name, 1
        while name in self.taken:
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        return name

    def op_base(self, raw):
        """The stem of temp names for an op's results, legacy style: conv2d_3."""
        if id(raw) not in self.bases:
            kind = compat_entry(raw.name, len(raw.operands)).get("legacy_type") or raw.name.split(".", 1)[1]
            n = self.counters.get(kind, 0)
            self.counters[kind] = n + 1
            self.bases[id(raw)] = f"{kind}_{n}"
        return self.bases[id(raw)]

    def name_values(self, root):
        """Parameters, data and fetched values first (names users know), then the rest."""
        ops = list(self.walk(root))
        for raw in ops:
            if raw.name == "builtin.parameter":
                pname = raw.attrs["parameter_name"]
                _need(pname not in self.taken, f"parameter {pname!r} appears twice")
                self.taken.add(pname)
                raw.results[0].name = pname
        for raw in ops:
            if raw.name in _INPUTS and raw.results and raw.results[0] is not None:
                name = raw.attrs.get("name")
                _need(isinstance(name, str) and name,
                      f"{raw.name.split('.', 1)[1]} op without a 'name' attribute")
                raw.results[0].name = self.unique(name)
        for raw in ops:
            if raw.name == "pd_op.fetch" and raw.operands and raw.operands[0] is not None:
                v = raw.operands[0]
                name = raw.attrs.get("name")
                if v.name is None and v.op is not None and isinstance(name, str) and name \
                        and v.op.name != "builtin.combine":
                    v.name = self.unique(name)
        for raw in ops:
            for sub in raw.regions:
                for blk in sub:
                    for i, arg in enumerate(blk.args):
                        arg.name = self.unique(f"{self.op_base(raw)}.arg_{i}")
            if raw.name == "builtin.split" and raw.operands and raw.operands[0] is not None:
                vec = raw.operands[0]                  # elements named after the vector's producer
                base = self.op_base(vec.op) if vec.op is not None else "vector"
                for i, v in enumerate(raw.results):
                    if v is not None and v.name is None:
                        v.name = self.unique(f"{base}.tmp_{vec.index}_{i}")
                continue
            if raw.name == "builtin.slice":
                self.name_slice(raw)
                continue
            for v in raw.results:
                if v is None or v.name is not None or raw.name == "builtin.combine":
                    continue
                if v.type.kind == "vector":
                    continue                           # named by element, see names()
                v.name = self.unique(f"{self.op_base(raw)}.tmp_{v.index}")

    def name_slice(self, raw):
        """builtin.slice picks element `index` of a vector (translate_to_pir writes one after
        each split / rnn): its result names that element, the first slice of an index wins."""
        _need(len(raw.operands) == 1 and raw.operands[0] is not None and len(raw.results) == 1,
              "slice takes one vector and gives one value")
        vec, res = raw.operands[0], raw.results[0]
        i = raw.attrs.get("index")
        n = len(vec.type.elements) if vec.type.kind == "vector" else 0
        _need(isinstance(i, int) and 0 <= i < n, f"slice index {i!r} outside a vector of {n}")
        if res is None:
            return
        if vec.op is not None and vec.op.name == "builtin.combine":
            picked = {i: self.names(vec)[i]}           # the combined value itself
        else:
            picked = self.picked.setdefault(id(vec), {})
        if res.name is None:                           # not fetched: the element's name
            base = self.op_base(vec.op) if vec.op is not None else "vector"
            res.name = picked.get(i) or self.unique(f"{base}.tmp_{vec.index}_{i}")
        picked.setdefault(i, res.name)

    def names(self, v):
        """The variable names a value stands for: vectors expand to their elements."""
        if v is None:
            return []
        if v.op is not None and v.op.name == "builtin.combine":
            return [n for o in v.op.operands for n in self.names(o)]
        if v.type.kind == "vector":
            if v.name is None:                         # name elements: a split's results, or new
                splits = [u for u in v.uses if u.name == "builtin.split" and u.operands
                          and u.operands[0] is v]
                picked = self.picked.get(id(v), {})
                if splits:
                    v.name = [r.name for r in splits[0].results if r is not None]
                else:
                    base = self.op_base(v.op) if v.op is not None else "vector"
                    v.name = [picked.get(i) or self.unique(f"{base}.tmp_{v.index}_{i}")
                              for i in range(len(v.type.elements))]
            return list(v.name)
        return [v.name]

    def walk(self, raw_block):
        for raw in raw_block.ops:
            yield raw
            for sub in raw.regions:
                for blk in sub:
                    yield from self.walk(blk)

    # -- program ------------------------------------------------------------
    def build(self, root):
        self.name_values(root)
        gblock = self.new_block(-1)
        gblock.vars["feed"] = Var("feed", kind="feed_minibatch", persistable=True)
        gblock.vars["fetch"] = Var("fetch", kind="fetch_list", persistable=True)
        self.fill(root, gblock)
        # legacy programs prepend their feed ops, so a translated one may list col 1 first
        self.program.inputs = [n for _, n in sorted(self.feeds, key=lambda t: t[0])]
        self.drop_folded_constants()
        return self.program

    def new_block(self, parent_idx):
        block = Block(idx=len(self.program.blocks), parent_idx=parent_idx, program=self.program)
        self.program.blocks.append(block)
        return block

    def add_var(self, block, v, persistable=False):
        if v is None:
            return
        t = v.type
        if t.kind == "vector":
            for name, et in zip(self.names(v), t.elements):
                block.vars.setdefault(name, Var(name, dtype=et.dtype, shape=et.shape, kind=et.kind,
                                                lod_level=et.lod_level))
            return
        block.vars[v.name] = Var(v.name, dtype=t.dtype, shape=t.shape, persistable=persistable,
                                 kind=t.kind, lod_level=t.lod_level, stop_gradient=v.stop_gradient)

    def fill(self, raw_block, block):
        for arg in raw_block.args:
            self.add_var(block, arg)
        block.args = [a.name for a in raw_block.args]
        for raw in raw_block.ops:
            self.current = raw.where
            try:
                op = self.convert(raw, block)
            except _Fail as e:
                raise _located(e, raw.where) from None
            if op is not None:
                op.block = block
                block.ops.append(op)

    def convert(self, raw, block):
        name = raw.name
        if name == "builtin.parameter":
            v = raw.results[0]
            self.add_var(self.program.global_block, v, persistable=raw.out_attrs["persistable"])
            self.program.global_block.vars[v.name].stop_gradient = v.stop_gradient
            return None
        if name in _PLUMBING:
            for v in raw.results:
                self.add_var(block, v)
            if name == "builtin.slice" and raw.results[0] is not None:
                element = self.names(raw.operands[0])[raw.attrs["index"]]
                if element != raw.results[0].name:     # a second name for the element
                    return Op("assign", {"X": [element]}, {"Out": [raw.results[0].name]}, {})
            return None
        for v in raw.results:
            self.add_var(block, v)
        if name in _INPUTS:
            out = raw.results[0] if raw.results else None
            _need(out is not None, f"{name.split('.', 1)[1]} op without a result")
            persistable = raw.out_attrs.get("persistable")
            if isinstance(persistable, list) and persistable and persistable[0]:
                block.vars[out.name].persistable = True     # saved with the parameters
            col = raw.attrs.get("col", len(self.feeds))     # data ops: in program order
            _need(isinstance(col, int) and not isinstance(col, bool), f"feed col is {col!r}")
            self.feeds.append((col, out.name))
            return Op("feed", {"X": ["feed"]}, {"Out": [out.name]}, {"col": col})
        if name == "pd_op.fetch":
            _need(raw.operands and raw.operands[0] is not None, "fetch op without an input")
            src = self.names(raw.operands[0])
            _need(len(src) == 1, "fetch of a vector value")
            self.program.outputs.append(src[0])
            col = raw.attrs.get("col", len(self.program.outputs) - 1)
            return Op("fetch", {"X": src}, {"Out": ["fetch"]}, {"col": col})
        if raw.regions:
            return self.control_flow(raw, block)
        if name == "pd_op.select_input":     # translated `if`s; Paddle gives it no slot names
            _need(len(raw.operands) >= 2 and all(raw.operands) and len(raw.results) == 1,
                  "select_input takes a mask and values and gives one value")
            return Op("select_input", {"Mask": self.names(raw.operands[0]),
                                       "X": [n for v in raw.operands[1:] for n in self.names(v)]},
                      {"Out": self.names(raw.results[0])}, {})
        if name == "cf.yield":
            return Op("yield", {"X": [n for v in raw.operands for n in self.names(v)]}, {}, {})
        return self.generic(raw, block)

    def control_flow(self, raw, block):
        subs = []
        for region in raw.regions:
            for rb in region:
                sub = self.new_block(block.idx)
                self.fill(rb, sub)
                subs.append(sub)
        short = raw.name.split(".", 1)[1]
        operands = [n for v in raw.operands for n in self.names(v)]
        results = [n for v in raw.results for n in self.names(v)]
        attrs = dict(raw.attrs)
        if raw.name == "pd_op.if":
            _need(len(subs) == 2, f"if has {len(subs)} blocks, expected 2")
            _need(len(raw.operands) >= 1, "if without a condition")
            attrs.update(true_block=subs[0], false_block=subs[1])
            return Op("if", {"Cond": operands[:1]}, {"Out": results}, attrs)
        if raw.name == "pd_op.while":
            _need(len(subs) == 1, f"while has {len(subs)} blocks, expected 1")
            _need(len(raw.operands) >= 1, "while without a condition")
            attrs["sub_block"] = subs[0]
            return Op("while", {"Condition": operands[:1], "X": operands[1:]}, {"Out": results}, attrs)
        if len(subs) == 1:
            attrs["sub_block"] = subs[0]
        else:
            attrs["sub_blocks"] = subs
        return Op(short, {"X": operands}, {"Out": results}, attrs)

    def generic(self, raw, block):
        entry = compat_entry(raw.name, len(raw.operands))
        op_type = entry.get("legacy_type") or raw.name.split(".", 1)[1]
        operand_names = entry.get("operands") or []
        result_names = entry.get("results") or []
        attr_names = entry.get("attr_names", {})
        folds = entry.get("folds", {})
        inputs, outputs, attrs = {}, {}, {}
        for key, value in raw.attrs.items():
            attrs[attr_names.get(key, key)] = value
        for i, v in enumerate(raw.operands):
            pname = operand_names[i] if i < len(operand_names) else f"in{i}"
            if v is None:
                continue
            fold = folds.get(pname)
            if fold is not None:
                value = _constant(v, fold.get("kind"))
                if value is not _NOT_CONSTANT:
                    attrs[fold["attr"]] = value
                    continue
            is_list = v.op is not None and v.op.name == "builtin.combine"
            slot = (entry.get("list_inputs", {}).get(pname) if is_list else None) \
                or entry.get("inputs", {}).get(pname) or pname
            inputs.setdefault(slot, []).extend(self.names(v))
        for i, v in enumerate(raw.results):
            rname = result_names[i] if i < len(result_names) else f"out{i}"
            if v is None:
                continue
            slot = entry.get("outputs", {}).get(rname)
            if slot is None and entry.get("legacy_type") and not v.uses:
                for n in self.names(v):                # a PIR-only result nobody reads
                    block.vars.pop(n, None)            # (batch_norm's reserve_space)
                continue
            slot = slot or rname
            outputs.setdefault(slot, []).extend(self.names(v))
        for key, value in entry.get("legacy_defaults", {}).items():
            attrs.setdefault(key, value)
        for key, value in entry.get("implied_attrs", {}).items():
            attrs.setdefault(key, value)
        op = Op(op_type, inputs, outputs, attrs)
        if raw.name in _CONSTANTS:
            self.constants.add(id(op))
        return op

    def drop_folded_constants(self):
        """Constant ops whose every use became an attribute are gone from legacy programs too."""
        used = set(self.program.outputs)
        for op in self.program.all_ops():
            for names in op.inputs.values():
                used.update(names)
        for block in self.program.blocks:
            keep = []
            for op in block.ops:
                outs = [n for names in op.outputs.values() for n in names]
                if id(op) in self.constants and outs and not any(n in used for n in outs):
                    for n in outs:
                        block.vars.pop(n, None)
                    continue
                keep.append(op)
            block.ops = keep


_NOT_CONSTANT = object()


def _constant_elements(v, depth=0):
    """The flat list of numbers a constant value holds, or None when it is no constant."""
    op = v.op if v is not None else None
    if op is None or depth > 4:
        return None
    if op.name == "builtin.combine":
        parts = [_constant_elements(o, depth + 1) for o in op.operands]
        if any(p is None for p in parts):
            return None
        return [x for p in parts for x in p]
    if op.name == "pd_op.full_int_array":
        value = op.attrs.get("value")
        return list(value) if isinstance(value, list) else None
    if op.name == "pd_op.full":
        shape, value = op.attrs.get("shape", []), op.attrs.get("value")
        if not isinstance(shape, list) or any(d != 1 for d in shape) or isinstance(value, (list, dict)):
            return None                                # only scalars become attributes
        return [value]
    if op.name in ("pd_op.assign_value", "pd_op.assign_value_"):
        value = op.attrs.get("values")
        return list(value) if isinstance(value, list) else None
    return None


def _constant(v, kind):
    """A constant operand as the legacy attribute kind, or _NOT_CONSTANT."""
    elems = _constant_elements(v)
    if elems is None or not all(isinstance(x, (int, float, bool)) for x in elems):
        return _NOT_CONSTANT
    if kind in ("ints", "floats", "bools"):
        conv = {"ints": int, "floats": float, "bools": bool}[kind]
        if kind == "ints" and any(float(x) != int(x) for x in elems):
            return _NOT_CONSTANT
        return [conv(x) for x in elems]
    if len(elems) != 1:
        return _NOT_CONSTANT
    x = elems[0]
    if kind == "int":
        return int(x) if float(x) == int(x) else _NOT_CONSTANT
    if kind == "float":
        return float(x)
    if kind == "bool":
        return bool(x)
    return x


# ---------------------------------------------------------------------------

def _load_json(path, data):
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError as e:
        raise PaddleFormatError(path, f"not valid UTF-8 ({e.reason})", offset=e.start,
                                hint="the file is corrupt or not a Paddle PIR program") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PaddleFormatError(path, f"not valid JSON ({e.msg})", offset=e.pos,
                                hint="the file is truncated or corrupt; re-export it with "
                                     "paddle.jit.save") from None
    except RecursionError:
        raise PaddleFormatError(path, "JSON nested too deeply",
                                hint="the file is corrupt or not a Paddle PIR program") from None


def read_pir_program(path, data=None):
    """Read a PIR `model.json` into a Program (format 'pir'; no parameters yet).

    data: the file's bytes when the caller has read them already.
    """
    path = os.fspath(path)
    if data is None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise PaddleFormatError(path, f"cannot read ({e.strerror})") from None
    doc = _load_json(path, data)
    hint = "the file is corrupt or was not written by paddle.jit.save; re-export it"
    if not isinstance(doc, dict) or not isinstance(doc.get("base_code"), dict):
        raise PaddleFormatError(path, "no 'base_code' object: not a Paddle PIR program", hint=hint)
    base = doc["base_code"]
    if base.get("magic") != "pir":
        raise PaddleFormatError(path, f"magic is {base.get('magic')!r}, expected 'pir'",
                                where="base_code", hint="not a Paddle PIR program")
    version = base.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise PaddleFormatError(path, f"PIR version {version!r} is not a version number",
                                where="base_code", hint=hint)
    if version not in KNOWN_VERSIONS:
        warnings.warn(f"{path}: PIR format version {version} is newer than the ones this reader "
                      f"knows ({max(KNOWN_VERSIONS)} = Paddle {KNOWN_VERSIONS[max(KNOWN_VERSIONS)]}); "
                      "reading it anyway")
    scanner = _Scanner()
    builder = None
    where = "program"
    try:
        prog = _get(doc, "program", dict, "the file")
        regions = _get(prog, "regions", list, "program")
        _need(len(regions) >= 1, "program has no regions")
        blocks = _get(regions[0], "blocks", list, "region #0")
        _need(len(blocks) >= 1, "region #0 has no blocks")
        root = scanner.block(blocks[0], None, "block #0")
        where = "building the program"
        builder = _Builder(path)
        program = builder.build(root)
    except _Fail as e:
        raise PaddleFormatError(path, e.problem, where=e.where, hint=hint) from None
    except (KeyError, TypeError, IndexError, ValueError, AttributeError, RecursionError) as e:
        # a structure the checks above did not foresee: still the user's file, not our bug
        where = getattr(builder, "current", None) or scanner.current or where
        raise PaddleFormatError(path, f"malformed program ({type(e).__name__}: {e})", where=where,
                                hint=hint) from None
    program.version = version
    return program


