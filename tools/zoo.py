"""Model zoo: small, seeded Paddle models exported in both Paddle formats.

Tests and benchmarks use it as the oracle side of the converter. paddle is
imported only inside the per-export subprocess (`_export-one`), because the
legacy format needs FLAGS_enable_pir_api=0 set before `import paddle`; the
registry, `export` and the CLI themselves never import paddle.

    python tools/zoo.py list
    python tools/zoo.py export --models ci|all|a,b --formats legacy,pir --out DIR

Each export directory holds:
    model.pdmodel | model.json, model.pdiparams   what paddle.jit.save wrote
    reference.npz   in_<input name> (test batch), out_<i> (eager outputs)
    state.npz       every variable in model.pdiparams, by its program name
    paddle_api.json the saved program as Paddle's own API describes it
    meta.json       name, format, versions, inputs, outputs, checks, cache key
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

ZOO_FILE = Path(__file__).resolve()
FORMATS = ("legacy", "pir")
MODEL_FILE = {"legacy": "model.pdmodel", "pir": "model.json"}
# Written last by the child: a directory whose meta.json exists is complete.
FILES = ("model.pdiparams", "reference.npz", "state.npz", "paddle_api.json", "meta.json")
RTOL, ATOL = 1e-4, 1e-5  # jit.load vs eager, relative to the output's scale


class ExportError(RuntimeError):
    """An export subprocess failed; the message ends with its stderr tail."""


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    name: str
    shape: Tuple[Optional[int], ...]  # None = dynamic (batch)
    dtype: str = "float32"


@dataclass(frozen=True)
class Model:
    name: str
    build: Callable  # () -> paddle.nn.Layer, weights drawn after paddle.seed
    inputs: Tuple[Input, ...]
    ci: bool
    tags: Tuple[str, ...]
    batch: int = 1
    gen: Optional[Callable] = None  # (rng, batch) -> {name: array}
    expect_ops: Dict[str, Tuple[str, ...]] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode()) % (2**31)


MODELS: Dict[str, Model] = {}


def _register(name, inputs, *, ci, tags, batch=1, gen=None, expect_ops=None):
    def deco(build):
        MODELS[name] = Model(name, build, tuple(Input(*i) for i in inputs), ci,
                             tuple(tags), batch, gen, expect_ops or {})
        return build
    return deco


def _make_inputs(model: Model, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if model.gen is not None:
        return {k: np.ascontiguousarray(v) for k, v in model.gen(rng, model.batch).items()}
    out = {}
    for i in model.inputs:
        shape = [model.batch if d is None else d for d in i.shape]
        out[i.name] = rng.standard_normal(shape).astype(i.dtype)
    return out


def test_inputs(name: str) -> Dict[str, np.ndarray]:
    """The deterministic test batch of model `name` (what reference.npz holds)."""
    m = MODELS[name]
    return _make_inputs(m, m.seed)


def _vision(name, size=64, ci=True, tags=(), **kw):
    """Register a paddle.vision.models classifier taking [N, 3, size, size]."""
    def build():
        import paddle.vision.models as pvm
        return getattr(pvm, name)(**kw)
    _register(name, [("x", (None, 3, size, size))], ci=ci, tags=("vision", "cnn") + tuple(tags))(build)


# --- required (issue 2) ---------------------------------------------------
_vision("resnet18", tags=("resnet", "batch_norm"))
_vision("mobilenet_v3_small", tags=("mobilenet", "hardswish", "se"))


@_register("transformer_encoder", [("x", (None, 8, 32))], ci=True, batch=2,
           tags=("transformer", "attention", "layer_norm"))
def _transformer_encoder():
    from paddle import nn
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=2)


@_register("lstm", [("x", (None, 10, 16))], ci=True, batch=2, tags=("rnn", "lstm"),
           expect_ops={"legacy": ("rnn",), "pir": ("pd_op.rnn",)})
def _lstm():
    from paddle import nn
    return nn.LSTM(input_size=16, hidden_size=24, num_layers=2)


@_register("control_flow", [("x", (None, 16))], ci=True, batch=2, tags=("control_flow",),
           expect_ops={"legacy": ("conditional_block", "while"), "pir": ("pd_op.if", "pd_op.while")})
def _control_flow():
    import paddle
    from paddle import nn

    class ControlFlow(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc_in, self.fc_a, self.fc_b = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            h = self.fc_in(x)
            # Two data-dependent ifs: the test batch takes the first one's
            # true branch and the second one's false branch.
            if paddle.mean(h) > -100.0:
                h = paddle.tanh(self.fc_a(h))
            else:
                h = self.fc_b(h)
            if paddle.max(paddle.abs(h)) > 100.0:
                h = h * 0.0
            else:
                h = h + 1.0
            # A while loop whose trip count (2..4) depends on the input.
            i = paddle.zeros([1], dtype="int64")
            n = paddle.cast(paddle.sum(paddle.abs(x)), "int64") % 3 + 2
            while i < n:
                h = paddle.tanh(self.fc_b(h)) * 0.5 + h
                i = i + 1
            return h

    return ControlFlow()


# --------------------------------------------------------------------------
# Export (parent side)
# --------------------------------------------------------------------------
def paddle_version() -> str:
    try:
        return metadata.version("paddlepaddle")
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(name: str, fmt: str) -> str:
    """Changes whenever this file, the Paddle version, the model or format does."""
    h = hashlib.sha256(ZOO_FILE.read_bytes())
    h.update(f"\0{name}\0{fmt}\0{paddle_version()}".encode())
    return h.hexdigest()[:16]


def _complete(out: Path, name: str, fmt: str) -> Optional[dict]:
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    files = (MODEL_FILE[fmt],) + FILES
    if meta.get("cache_key") != cache_key(name, fmt) or not all((out / f).is_file() for f in files):
        return None
    return meta


def export(name: str, fmt: str, out_dir, *, force: bool = False, timeout: float = 3600) -> dict:
    """Export model `name` in format `fmt` ("legacy"/"pir") into out_dir.

    Reuses out_dir when it already holds a complete export with the same
    cache key. Returns meta.json's content plus "dir" and "cached"; raises
    ExportError (KeyError/ValueError for a bad name/format) on failure.
    """
    if name not in MODELS:
        raise KeyError(f"unknown zoo model {name!r}")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")
    out = Path(out_dir)
    meta = None if force else _complete(out, name, fmt)
    if meta is not None:
        return {**meta, "dir": str(out), "cached": True}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ)
    env.pop("FLAGS_enable_pir_api", None)  # the child sets it for legacy
    env.setdefault("GLOG_minloglevel", "2")
    cmd = [sys.executable, str(ZOO_FILE), "_export-one", name, fmt, str(tmp)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(f"{name}/{fmt}: timed out after {timeout}s") from None
    if p.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-25:])
        raise ExportError(f"{name}/{fmt}: export failed (exit {p.returncode})\n{tail}")
    # Swap in atomically enough for test workers sharing one cache directory.
    shutil.rmtree(out, ignore_errors=True)
    try:
        os.replace(tmp, out)
    except OSError:  # another process won the race; its export is equivalent
        shutil.rmtree(tmp, ignore_errors=True)
    meta = json.loads((out / "meta.json").read_text())
    return {**meta, "dir": str(out), "cached": False}


# --------------------------------------------------------------------------
# Export (child side: runs with paddle imported)
# --------------------------------------------------------------------------
def _flatten(x) -> list:
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in _flatten(e)]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _flatten(x[k])]
    return [x]


def _legacy_shims():
    """Workarounds that make legacy (FLAGS_enable_pir_api=0) to_static work.

    1. Paddle 3.3 binds ~57 APIs (paddle.tanh/sigmoid/exp/abs/sqrt/matmul/
       multiply/sum/amax/argmax/greater_than/logical_*/..., F.gelu/sigmoid/
       tanh/softplus and the matching Tensor methods) straight to _C_ops, which
       takes only eager Tensors and PIR Values: given a legacy Variable they
       raise "must be Value, but got Variable" (so nn.MultiHeadAttention,
       nn.Tanh, F.gelu... all fail). Given a Variable, these shims append the
       legacy op Paddle 2.x emitted instead (tanh, matmul_v2, reduce_sum, ...).
    2. nn.LSTM/GRU keep an uninitialised `_dropout_state` tensor whose
       `.device` raises "Unknown place type"; to_static's param_guard reads
       every public attribute of it, so `.device` must not raise.
    """
    import paddle
    from paddle.base.framework import Variable, convert_np_dtype_to_dtype_
    from paddle.base.layer_helper import LayerHelper

    def op(type_, ins, attrs=None, dtype=None, out="Out"):
        x = ins[next(iter(ins))][0]
        helper = LayerHelper(type_)
        res = helper.create_variable_for_type_inference(dtype or x.dtype)
        helper.append_op(type=type_, inputs=ins, outputs={out: [res]}, attrs=attrs or {})
        return res

    def var(y, like):  # a python scalar operand becomes a [1] tensor
        return y if isinstance(y, Variable) else paddle.full([1], y, like.dtype)

    def red(x, axis):
        if axis is None or axis == [] or axis == ():
            return {"dim": [], "reduce_all": True}
        dims = [axis] if isinstance(axis, int) else list(axis)
        return {"dim": dims, "reduce_all": len(dims) == len(x.shape)}

    B = "bool"
    shims = {}
    for n in ("tanh sigmoid exp abs sqrt rsqrt sin cos log floor ceil sign log1p expm1 "
              "sinh cosh asin acos atanh acosh log2 log10").split():
        shims[n] = lambda x, name=None, _t=n, **k: op(_t, {"X": [x]})
    for n in ("isnan", "isinf", "isfinite"):
        shims[n] = lambda x, name=None, _t=n + "_v2": op(_t, {"X": [x]}, dtype=B)
    shims["round"] = lambda x, decimals=0, name=None: op("round", {"X": [x]}, {"decimals": decimals})
    shims["matmul"] = lambda x, y, transpose_x=False, transpose_y=False, name=None, **k: op(
        "matmul_v2", {"X": [x], "Y": [y]}, {"trans_x": transpose_x, "trans_y": transpose_y})
    for n, t in (("multiply", "elementwise_mul"), ("maximum", "elementwise_max"),
                 ("minimum", "elementwise_min")):
        shims[n] = lambda x, y, name=None, _t=t, **k: op(_t, {"X": [x], "Y": [var(y, x)]}, {"axis": -1})
    shims["greater_than"] = lambda x, y, name=None, **k: op(
        "greater_than", {"X": [x], "Y": [var(y, x)]}, dtype=B)
    for n in ("logical_and", "logical_or", "logical_xor"):
        shims[n] = lambda x, y, out=None, name=None, _t=n: op(_t, {"X": [x], "Y": [y]}, dtype=B)
    shims["logical_not"] = lambda x, out=None, name=None: op("logical_not", {"X": [x]}, dtype=B)
    shims["bmm"] = lambda x, y, name=None: op("bmm", {"X": [x], "Y": [y]})
    shims["sum"] = lambda x, axis=None, dtype=None, keepdim=False, name=None, **k: op(
        "reduce_sum", {"X": [x]}, {**red(x, axis), "keep_dim": keepdim, **(
            {"out_dtype": convert_np_dtype_to_dtype_(dtype)} if dtype else {})},
        dtype=dtype or x.dtype)
    for n, t, d in (("amax", "reduce_amax", None), ("amin", "reduce_amin", None),
                    ("all", "reduce_all", B), ("any", "reduce_any", B)):
        shims[n] = lambda x, axis=None, keepdim=False, name=None, _t=t, _d=d, **k: op(
            _t, {"X": [x]}, {**red(x, axis), "keep_dim": keepdim}, dtype=_d)
    shims["logsumexp"] = lambda x, axis=None, keepdim=False, name=None, **k: op(
        "logsumexp", {"X": [x]}, {"axis": red(x, axis)["dim"], "keepdim": keepdim,
                                  "reduce_all": red(x, axis)["reduce_all"]})
    for n, t in (("argmax", "arg_max"), ("argmin", "arg_min")):
        shims[n] = lambda x, axis=None, keepdim=False, dtype="int64", name=None, _t=t: op(
            _t, {"X": [x]}, {"axis": 0 if axis is None else axis, "keepdims": keepdim,
                             "flatten": axis is None, "dtype": int(convert_np_dtype_to_dtype_(dtype))},
            dtype=dtype)
    shims["gelu"] = lambda x, approximate=False, name=None: op(
        "gelu", {"X": [x]}, {"approximate": approximate in (True, "tanh")})
    shims["softplus"] = lambda x, beta=1, threshold=20, name=None: op(
        "softplus", {"X": [x]}, {"beta": float(beta), "threshold": float(threshold)})
    shims["expand_as"] = lambda x, y, name=None: op(
        "expand_as_v2", {"X": [x], "Y": [y]}, {"target_shape": list(y.shape)})
    shims["tril"] = lambda x, diagonal=0, name=None: op("tril_triu", {"X": [x]}, {"diagonal": diagonal, "lower": True})
    shims["triu"] = lambda x, diagonal=0, name=None: op("tril_triu", {"X": [x]}, {"diagonal": diagonal, "lower": False})

    def route(orig, shim):
        @paddle.jit.not_to_static
        def f(*args, **kwargs):
            # (in eager mode isinstance(Tensor, Variable) is True, hence the mode check)
            if not paddle.in_dynamic_mode() and isinstance(args[0] if args else kwargs.get("x"), Variable):
                return shim(*args, **kwargs)
            return orig(*args, **kwargs)
        return f

    for n, shim in shims.items():
        for mod in (paddle, paddle.tensor, paddle.nn.functional, Variable):
            orig = getattr(mod, n, None)
            if getattr(orig, "__module__", "").endswith("generated_tensor_methods_patch"):
                setattr(mod, n, route(orig, shim))

    device = paddle.Tensor.device
    paddle.Tensor.device = property(lambda t: device.fget(t) if t._is_initialized() else None)


def _randomize(layer, rng):
    """Give constant-initialised parameters (zero biases, unit norm scales,
    PReLU slopes) random values, so a converter that drops them is caught."""
    for p in layer.parameters():
        v = p.numpy()
        if v.size and np.all(v == v.flat[0]):
            c = float(v.flat[0])
            noise = rng.uniform(-0.3, 0.3, v.shape) * abs(c) if c else rng.normal(0, 0.1, v.shape)
            p.set_value((v + noise).astype(v.dtype))


def _calibrate(layer, feeds):
    """Keep activations in a sane range: one eval pass over a calibration
    batch in which every Conv/Linear output is scaled to unit std (weights and
    bias scaled with it) and every BatchNorm's running mean/variance is set to
    the batch statistics of its actual input, in execution order."""
    import paddle
    from paddle import nn

    done, hooks = set(), []

    def scale_out(lay, args, out):
        if id(lay) in done or not isinstance(out, paddle.Tensor):
            return None
        done.add(id(lay))
        std = float(out.numpy().std())
        if not np.isfinite(std) or std < 1e-6:
            return None
        s = 1.0 / std
        for p in (lay.weight, getattr(lay, "bias", None)):
            if p is not None:
                p.set_value(p.numpy() * s)
        return out * s

    def set_stats(lay, args):
        if id(lay) in done:
            return None
        done.add(id(lay))
        x = args[0].numpy()
        ch = -1 if getattr(lay, "_data_format", "NCHW") in ("NHWC", "NLC", "NDHWC") else 1
        axes = tuple(a for a in range(x.ndim) if a != ch % x.ndim)
        lay._mean.set_value(x.mean(axis=axes).astype("float32"))
        lay._variance.set_value(x.var(axis=axes).astype("float32"))
        return None

    for sub in layer.sublayers(include_self=True):
        if isinstance(sub, (nn.Conv1D, nn.Conv2D, nn.Conv3D, nn.Conv2DTranspose, nn.Linear)):
            hooks.append(sub.register_forward_post_hook(scale_out))
        elif isinstance(sub, nn.layer.norm._BatchNormBase):
            hooks.append(sub.register_forward_pre_hook(set_stats))
    with paddle.no_grad():
        layer(*[paddle.to_tensor(v) for v in feeds.values()])
    for h in hooks:
        h.remove()


def _jsonable(v):
    """Attribute values as JSON: enums/places/dtypes as strings."""
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, float):
        return v if np.isfinite(v) else repr(v)
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return _jsonable(v.item())
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if isinstance(v, (list, tuple)):
        return [_jsonable(e) for e in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(e) for k, e in v.items()}
    return str(v)


def _dtype_name(d) -> str:
    s = str(d).split(".")[-1].lower()
    return {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16",
            "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32",
            "int64": "int64", "bool": "bool"}.get(s, s)


def _describe_legacy(prog, feed_names, fetch_targets) -> dict:
    """The legacy ProgramDesc as paddle.static.Program reports it."""
    from paddle.base import core
    AT = core.AttrType
    blocks = []
    for b in prog.blocks:
        ops = []
        for op in b.ops:
            attrs, types = {}, {}
            for a in sorted(op.attr_names):
                t = op.desc.attr_type(a)
                types[a] = str(t).split(".")[-1]
                if t == AT.BLOCK:
                    attrs[a] = op._block_attr_id(a)
                elif t == AT.BLOCKS:
                    attrs[a] = list(op._blocks_attr_ids(a))
                else:
                    attrs[a] = _jsonable(op.attr(a))
            ops.append({
                "type": op.type,
                "inputs": {s: list(op.input(s)) for s in op.input_names},
                "outputs": {s: list(op.output(s)) for s in op.output_names},
                "attrs": attrs, "attr_types": types})
        vars_ = {}
        for v in b.vars.values():
            d = {"type": str(v.type).split(".")[-1], "persistable": bool(v.persistable)}
            if v.type == core.VarDesc.VarType.LOD_TENSOR:
                d.update(dtype=_dtype_name(v.dtype), shape=list(v.shape))
            vars_[v.name] = d
        blocks.append({"idx": b.idx, "parent_idx": b.parent_idx, "ops": ops, "vars": vars_})
    return {"format": "legacy", "blocks": blocks, "feed_names": list(feed_names),
            "fetch_names": [v.name for v in fetch_targets]}


def _pir_type(v):
    """[shape, dtype] of a dense tensor value, else [None, its type string]
    (vector<...> from builtin.combine, the rnn op's dropout state, ...)."""
    try:
        return [list(v.shape), _dtype_name(v.dtype)]
    except ValueError:
        return [None, str(v.type())]


def _describe_pir(prog, feed_names) -> dict:
    """The PIR program as paddle.pir reports it. Ops are numbered in pre-order
    ("idx"); each operand is [producer idx, result index] or ["arg", block
    number, argument index] for a block argument."""
    vals, nblocks = {}, [0]

    def _pir_src(v):
        try:
            return vals.get(v.id)
        except ValueError:  # an absent optional operand (null Value)
            return None

    def block(b):
        bno = nblocks[0]
        nblocks[0] += 1
        for j, a in enumerate(b.args()):
            vals[a.id] = ["arg", bno, j]
        out = []
        for op in b.ops:
            out.append(_pir_op(op))
        return {"block": bno, "args": [_pir_type(a) for a in b.args()], "ops": out}

    counter = [0]

    def _pir_op(op):
        i = counter[0]
        counter[0] += 1
        for k, r in enumerate(op.results()):
            vals[r.id] = [i, k]
        try:  # ops without OpYamlInfoInterface (builtin.*, cf.*) raise here, and
            # get_output_names() on them segfaults, so only call it after this
            ins, outs = list(op.get_input_names()), list(op.get_output_names())
        except ValueError:
            ins = outs = None
        d = {"idx": i, "name": op.name(), "input_names": ins, "output_names": outs,
             "attrs": _jsonable(op.attrs()), "num_operands": op.num_operands(),
             "num_results": op.num_results(),
             "operands": [_pir_src(v) for v in op.operands_source()],
             "results": [_pir_type(r) for r in op.results()]}
        if op.num_regions():
            d["blocks"] = [block(b) for b in op.blocks()]
        return d

    top = block(prog.global_block())
    params = []

    def walk(ops):
        for o in ops:
            if o["name"] == "builtin.parameter":
                params.append(o["attrs"]["parameter_name"])
            for b in o.get("blocks", []):
                walk(b["ops"])
    walk(top["ops"])
    return {"format": "pir", "block": top, "parameters": params, "feed_names": list(feed_names)}


def _count_ops(api: dict) -> Tuple[int, List[str]]:
    kinds = []
    if api["format"] == "legacy":
        kinds = [op["type"] for b in api["blocks"] for op in b["ops"]]
    else:
        def walk(b):
            for o in b["ops"]:
                kinds.append(o["name"])
                for s in o.get("blocks", []):
                    walk(s)
        walk(api["block"])
    return len(kinds), sorted(set(kinds))


def _export_one(name: str, fmt: str, out_dir: str) -> None:
    t0 = time.time()
    if fmt == "legacy":
        os.environ["FLAGS_enable_pir_api"] = "0"  # must precede `import paddle`
    import paddle

    if fmt == "legacy":
        _legacy_shims()

    m = MODELS[name]
    out = Path(out_dir)
    out.mkdir(parents=True)
    prefix = str(out / "model")
    paddle.seed(m.seed)
    np.random.seed(m.seed)
    layer = m.build()
    layer.eval()
    _randomize(layer, np.random.default_rng(m.seed))
    _calibrate(layer, _make_inputs(m, m.seed + 1))
    feeds = test_inputs(name)
    tensors = [paddle.to_tensor(v) for v in feeds.values()]
    with paddle.no_grad():
        ref = [t.numpy() for t in _flatten(layer(*tensors))]
    # Program parameter names are the parameters' own unique names.
    by_name = {p.name: p.numpy() for p in layer.state_dict().values()}

    specs = [paddle.static.InputSpec([d if d is not None else None for d in i.shape], i.dtype, i.name)
             for i in m.inputs]
    static = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
    paddle.jit.save(static, prefix)
    t_save = time.time() - t0

    loaded = paddle.jit.load(prefix)
    with paddle.no_grad():
        got = [t.numpy() for t in _flatten(loaded(*tensors))]
    jit_diff = [float(np.max(np.abs(a.astype("float64") - b))) if a.size else 0.0
                for a, b in zip(ref, got)]
    jit_ok = len(got) == len(ref) and all(
        a.shape == b.shape and np.allclose(b, a, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(a).max(initial=0))))
        for a, b in zip(ref, got))

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.global_scope()
    prog, feed_names, fetch_targets = paddle.static.load_inference_model(prefix, exe)
    if fmt == "legacy":
        api = _describe_legacy(prog, feed_names, fetch_targets)
        saved = sorted(n for b in api["blocks"] for n, v in b["vars"].items()
                       if v["persistable"] and v["type"] == "LOD_TENSOR")
    else:
        api = _describe_pir(prog, feed_names)
        saved = sorted(set(api["parameters"]))
    state, scope_only, differ = {}, [], []
    for n in saved:
        loaded_v = np.array(scope.find_var(n).get_tensor())
        if n in by_name:
            state[n] = by_name[n]
            if not np.array_equal(state[n], loaded_v):
                differ.append(n)
        else:  # e.g. a constant that to_static turned into a variable
            state[n] = loaded_v
            scope_only.append(n)
    if differ:
        raise RuntimeError(f"pdiparams differ from the layer's state: {differ[:5]}")
    n_ops, kinds = _count_ops(api)
    missing = [k for k in m.expect_ops.get(fmt, ()) if k not in kinds]
    if missing:
        raise RuntimeError(f"expected ops missing from the {fmt} program: {missing}")

    np.savez(out / "reference.npz", **{f"in_{k}": v for k, v in feeds.items()},
             **{f"out_{i}": v for i, v in enumerate(ref)})
    np.savez(out / "state.npz", **state)
    (out / "paddle_api.json").write_text(json.dumps(api, indent=1))
    meta = {
        "name": name, "format": fmt, "paddle_version": paddle.__version__,
        "cache_key": cache_key(name, fmt), "ci": m.ci, "tags": list(m.tags),
        "model_file": MODEL_FILE[fmt],
        "inputs": [{"name": i.name, "shape": [-1 if d is None else d for d in i.shape],
                    "dtype": i.dtype, "test_shape": list(feeds[i.name].shape)} for i in m.inputs],
        "outputs": [{"shape": list(r.shape), "dtype": str(r.dtype)} for r in ref],
        "num_outputs": len(ref), "paddle_ops": n_ops, "op_types": kinds,
        "params": len(state), "params_from_scope_only": scope_only,
        "jit_load": {"ok": bool(jit_ok), "max_abs_diff": jit_diff, "num_outputs": len(got)},
        "save_seconds": round(t_save, 2), "seconds": round(time.time() - t0, 2),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------
def select(spec: str) -> List[str]:
    """'all', 'ci' or a comma list of names -> model names (registry order)."""
    if spec == "all":
        return list(MODELS)
    if spec == "ci":
        return [n for n, m in MODELS.items() if m.ci]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in MODELS]
    if bad:
        raise SystemExit(f"unknown models: {', '.join(bad)} (see `zoo.py list`)")
    return names


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the registered models")
    ex = sub.add_parser("export", help="export models into OUT/<model>/<format>")
    ex.add_argument("--models", default="ci")
    ex.add_argument("--formats", default="legacy,pir")
    ex.add_argument("--out", required=True)
    ex.add_argument("--force", action="store_true", help="ignore cached exports")
    one = sub.add_parser("_export-one")
    one.add_argument("name")
    one.add_argument("format", choices=FORMATS)
    one.add_argument("out_dir")
    a = ap.parse_args(argv)

    if a.cmd == "_export-one":
        _export_one(a.name, a.format, a.out_dir)
        return 0
    if a.cmd == "list":
        print(f"{'model':24} {'ci':3} {'inputs':40} tags")
        for m in MODELS.values():
            ins = ", ".join(f"{i.name}{list(i.shape)}:{i.dtype}" for i in m.inputs).replace("None", "N")
            print(f"{m.name:24} {'y' if m.ci else 'n':3} {ins:40} {','.join(m.tags)}")
        return 0

    fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise SystemExit(f"unknown formats: {bad}")
    failures, warnings = [], []
    print(f"{'model':24} {'format':7} {'status':9} {'ops':>6} {'seconds':>8}", flush=True)
    for name in select(a.models):
        for fmt in fmts:
            t = time.time()
            try:
                r = export(name, fmt, Path(a.out) / name / fmt, force=a.force)
                status = "cached" if r["cached"] else "ok"
                if not r["jit_load"]["ok"]:
                    status += "!"
                    warnings.append(f"{name}/{fmt}: jit.load differs from eager, "
                                    f"max abs diff {r['jit_load']['max_abs_diff']}")
                ops = r["paddle_ops"]
            except ExportError as e:
                status, ops = "FAILED", "-"
                failures.append(str(e))
            print(f"{name:24} {fmt:7} {status:9} {ops:>6} {time.time() - t:8.1f}", flush=True)
    for w in warnings:
        print("WARNING", w)
    for f in failures:
        print("\nFAILED", f)
    if failures:
        print(f"\n{len(failures)} export(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
