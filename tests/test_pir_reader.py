"""The PIR reader (paddle_npu/frontend/pir.py) against Paddle itself.

Paddle exports small layers with paddle.jit.save (PIR) in a subprocess and
describes the saved program through its own API (load_inference_model, op
names, operand sources, get_input_names(), attrs()); our Program must line up
op by op: legacy type from pir_compat.json, every operand in the legacy slot
the table names (or folded into the legacy attribute when Paddle fed it a
constant), every attribute under its legacy name with Paddle's value. The
parameter order must match the .pdiparams records and Paddle's loaded values.
Malformed files (every truncation, byte flips, structural damage) must give
PaddleFormatError and nothing else.
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLE, ROOT
from paddle_npu import PaddleFormatError
from paddle_npu.frontend.params import read_records
from paddle_npu.frontend.params import param_order
from paddle_npu.frontend.pir import compat_entry, compat_table, read_pir_program
from paddle_npu.program import Block

DIGITS_JSON = os.path.join(EXAMPLE, "pir", "model.json")

# ---------------------------------------------------------------------------
# Paddle side: export, then describe what was saved with Paddle's own API.

ORACLE = r'''
import json, os, sys
import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec as S

class ConvBnPool(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.dw = nn.Conv2D(8, 8, 3, stride=2, padding=1, groups=8, bias_attr=False)
    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.max_pool2d(y, 3, 2, 1) + F.avg_pool2d(y, 2, 2)
        y = self.dw(F.interpolate(y, scale_factor=2, mode="bilinear"))
        return F.adaptive_avg_pool2d(y, 1).flatten(1)

class LinearGeluNorm(nn.Layer):
    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.l2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)
    def forward(self, x):
        h = self.ln(F.gelu(self.l1(x)))
        y = self.l2(h)
        return F.softmax(y, -1), paddle.topk(y, 2, axis=-1)[1], y.mean(-1, keepdim=True), \
            paddle.reshape(h, [-1, 4, 8]).transpose([0, 2, 1])

class ControlFlow(nn.Layer):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)
    def forward(self, x):
        y = self.l(x)
        if y.mean() > 0:
            y = y * 2
        else:
            y = y - 1
        i = paddle.zeros([1], "int64")
        while i < 3:
            y = F.relu(y + 1)
            i = i + 1
        return y

class Rnn(nn.Layer):
    def __init__(self):
        super().__init__()
        self.lstm, self.gru = nn.LSTM(8, 16, num_layers=2), nn.GRU(16, 8, direction="bidirect")
    def forward(self, x):
        y, _ = self.lstm(x)
        z, _ = self.gru(y)
        return z

class Transformer(nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), 2)
    def forward(self, ids):
        return self.enc(self.emb(ids))

class Buffers(nn.Layer):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1D(4)
        self.register_buffer("kept", paddle.full([4], 2.0), persistable=True)
        self.register_buffer("dropped", paddle.full([4], 3.0), persistable=False)
    def forward(self, x):
        return self.bn(x) * self.kept + self.dropped

MODELS = {
    "conv_bn_pool": (ConvBnPool, [S([None, 3, 16, 16], "float32", "x")]),
    "linear_gelu_norm": (LinearGeluNorm, [S([None, 16], "float32", "x")]),
    "control_flow": (ControlFlow, [S([None, 4], "float32", "x")]),
    "rnn": (Rnn, [S([None, 5, 8], "float32", "x")]),
    "transformer": (Transformer, [S([None, 7], "int64", "ids")]),
    "buffers": (Buffers, [S([None, 4], "float32", "x")]),
    "resnet18": (lambda: paddle.vision.models.resnet18(num_classes=10), [S([None, 3, 32, 32], "float32", "x")]),
}

def jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    text = str(v)
    return text[len("paddle."):] if text.startswith("paddle.") else text

def describe(program):
    counter = [0]
    def block(b, owner):
        ids = {}
        for k, a in enumerate(b.args()):
            ids[a.id] = ["arg", owner, k]
        return ids, [op_desc(op, ids) for op in b.ops]
    seen = {}
    def src(v):
        if v is None or not v.initialized():
            return None
        return seen.get(v.id)
    def op_desc(op, arg_ids):
        seen.update(arg_ids)
        idx = counter[0]
        counter[0] += 1
        d = {"i": idx, "name": op.name(), "operands": [src(o.source()) for o in op.operands()],
             "results": [{"dtype": jsonable(r.dtype) if r.is_dense_tensor_type() else None,
                          "shape": list(r.shape) if r.is_dense_tensor_type() else None}
                         for r in op.results()],
             "attrs": {k: jsonable(v) for k, v in op.attrs().items()}}
        try:
            d["inputs"], d["outputs"] = list(op.get_input_names()), list(op.get_output_names())
        except Exception:
            d["inputs"] = d["outputs"] = None
        d["blocks"] = []
        for b in op.blocks():
            ids, ops = block(b, idx)
            d["blocks"].append({"args": len(b.args()), "ops": ops})
        for k, r in enumerate(op.results()):
            seen[r.id] = ["op", idx, k]
        return d
    return block(program.global_block(), None)[1]

def main(out):
    paddle.seed(7)
    for name, (cls, spec) in MODELS.items():
        layer = cls()
        layer.eval()
        d = os.path.join(out, name)
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True),
                        os.path.join(d, "model"))
        paddle.enable_static()
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(paddle.CPUPlace())
            prog, feeds, fetches = paddle.static.load_inference_model(os.path.join(d, "model"), exe)
            from paddle.static.pir_io import get_pir_parameters
            params, opts = get_pir_parameters(prog)
            saved = {}
            for v in params + opts:
                if v.persistable:
                    saved[v.name] = np.array(scope.find_var(v.name).get_tensor())
            np.savez(os.path.join(d, "params.npz"), **saved)
            with open(os.path.join(d, "paddle.json"), "w") as f:
                json.dump({"feeds": list(feeds), "n_fetch": len(fetches), "ops": describe(prog)}, f)
        paddle.disable_static()

main(sys.argv[1])
'''

MODEL_NAMES = ["conv_bn_pool", "linear_gelu_norm", "control_flow", "rnn", "transformer",
               "buffers", "resnet18"]


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    pytest.importorskip("paddle")
    out = tmp_path_factory.mktemp("pir_exports")
    script = out / "oracle.py"
    script.write_text(ORACLE)
    env = dict(os.environ)
    env.pop("FLAGS_enable_pir_api", None)        # PIR is Paddle 3's default
    proc = subprocess.run([sys.executable, str(script), str(out)], env=env, cwd=str(out),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _paddle(exports, name):
    with open(exports / name / "paddle.json") as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# Op-by-op comparison with Paddle's description

PLUMBING = {"builtin.parameter", "builtin.combine", "builtin.split", "builtin.slice"}
CONSTANTS = {"pd_op.full", "pd_op.full_int_array", "pd_op.assign_value", "pd_op.assign_value_"}
STRUCTURAL = {"pd_op.data": "feed", "pd_op.fetch": "fetch", "pd_op.if": "if",
              "pd_op.while": "while", "cf.yield": "yield"}
SKIP_ATTRS = {"stop_gradient", "persistable", "op_callstack", "place", "struct_name"}


def _preorder_paddle(ops):
    for op in ops:
        yield op
        for b in op["blocks"]:
            yield from _preorder_paddle(b["ops"])


def _preorder_ours(block):
    for op in block.ops:
        yield op
        for key in ("true_block", "false_block", "sub_block"):
            if isinstance(op.attrs.get(key), Block):
                yield from _preorder_ours(op.attrs[key])


def _expected_type(name, n_operands):
    if name in STRUCTURAL:
        return STRUCTURAL[name]
    return compat_entry(name, n_operands).get("legacy_type") or name.split(".", 1)[1]


def _close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            np.isclose(float(a), float(b), rtol=1e-6, equal_nan=True)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _paddle_attr(value):
    """Paddle's attrs() as our reader reports them (DataType -> name, undefined -> -1)."""
    if isinstance(value, str) and value.lower().startswith("undefined"):
        return -1
    return value


class Matcher:
    """Pairs Paddle's ops with ours and resolves Paddle values to our variable names."""

    def __init__(self, desc, program):
        self.by_index = {op["i"]: op for op in _preorder_paddle(desc["ops"])}
        self.program = program
        self.pairs, self.folded = {}, set()
        ours = list(_preorder_ours(program.global_block))
        j = 0
        for op in _preorder_paddle(desc["ops"]):
            if op["name"] in PLUMBING:
                continue
            want = _expected_type(op["name"], len(op["operands"]))
            if j < len(ours) and ours[j].type == want:
                self.pairs[op["i"]] = ours[j]
                j += 1
            elif op["name"] in CONSTANTS:
                self.folded.add(op["i"])       # every use became an attribute
            else:
                got = ours[j].type if j < len(ours) else "<end>"
                raise AssertionError(f"paddle op #{op['i']} {op['name']} (-> {want}) vs ours {got}")
        assert j == len(ours), f"{len(ours) - j} ops of ours have no Paddle op"

    def result_names(self, src):
        """Our variable names for a Paddle value ["op", i, k] / ["arg", owner, k]."""
        if src[0] == "arg":
            owner = self.pairs[src[1]]
            blocks = [op_block for key in ("true_block", "false_block", "sub_block")
                      if isinstance((op_block := owner.attrs.get(key)), Block)]
            return [blocks[0].args[src[2]]]
        op = self.by_index[src[1]]
        if op["name"] == "builtin.parameter":
            return [op["attrs"]["parameter_name"]]
        if op["name"] == "builtin.combine":
            return [n for s in op["operands"] for n in self.result_names(s)]
        if op["name"] == "builtin.split":
            return [self.result_names(op["operands"][0])[src[2]]]
        ours = self.pairs[src[1]]
        if op["name"] in STRUCTURAL or op["outputs"] is None:
            return [ours.outputs["Out"][src[2]]]
        entry = compat_entry(op["name"], len(op["operands"]))
        rname = op["outputs"][src[2]]
        return ours.outputs[entry.get("outputs", {}).get(rname, rname)]

    def constant(self, src):
        """The Python value of a constant Paddle value (full_int_array, full, combine of them)."""
        op = self.by_index[src[1]]
        if op["name"] == "builtin.combine":
            vals = [self.constant(s) for s in op["operands"]]
            return [x for v in vals for x in (v if isinstance(v, list) else [v])]
        return op["attrs"]["value"]


def _check_op(m, op, ours):
    entry = compat_entry(op["name"], len(op["operands"]))
    assert op["inputs"] == entry["operands"], (op["name"], op["inputs"], entry["operands"])
    assert op["outputs"] == entry["results"], (op["name"], op["outputs"], entry["results"])
    for i, src in enumerate(op["operands"]):
        pname = op["inputs"][i]
        if src is None:
            continue
        fold = entry.get("folds", {}).get(pname)
        src_op = m.by_index.get(src[1]) if src[0] == "op" else None
        slots = {entry["inputs"].get(pname), entry["list_inputs"].get(pname), pname}
        if fold and not slots & set(ours.inputs):      # folded: the constant is the attribute
            value = m.constant(src)
            got = ours.attrs[fold["attr"]]
            assert _close(got, value) or _close([got], value) or _close(got, [value]), \
                (op["name"], pname, got, value)
            continue
        names = m.result_names(src)
        is_list = src_op is not None and src_op["name"] == "builtin.combine"
        slot = (entry["list_inputs"].get(pname) if is_list else None) or entry["inputs"].get(pname, pname)
        assert ours.inputs.get(slot) == names, (op["name"], pname, slot, ours.inputs, names)
    for name, value in op["attrs"].items():
        if name in SKIP_ATTRS:
            continue
        legacy = entry.get("attr_names", {}).get(name, name)
        assert legacy in ours.attrs, (op["name"], name, legacy, ours.attrs)
        assert _close(ours.attrs[legacy], _paddle_attr(value)), (op["name"], name, ours.attrs[legacy], value)


def _check_var(program, name, result):
    var = next((b.vars[name] for b in program.blocks if name in b.vars), None)
    assert var is not None, name
    if result["dtype"] is not None:
        assert var.dtype == result["dtype"], (name, var.dtype, result["dtype"])
        assert list(var.shape) == result["shape"], (name, var.shape, result["shape"])


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_program_matches_paddle(exports, name):
    desc = _paddle(exports, name)
    program = read_pir_program(exports / name / "model.json")
    assert program.format == "pir" and program.version in (1, 2, 3, 4)
    assert program.inputs == desc["feeds"]
    assert len(program.outputs) == desc["n_fetch"]
    m = Matcher(desc, program)
    for i, ours in m.pairs.items():
        op = m.by_index[i]
        for k, r in enumerate(op["results"]):
            if op["name"] in STRUCTURAL or op["outputs"] is None:
                continue
            entry = compat_entry(op["name"], len(op["operands"]))
            slot = entry["outputs"].get(op["outputs"][k])
            if slot is not None:
                for n in ours.outputs[slot]:
                    if r["dtype"] is not None:
                        _check_var(program, n, r)
        if op["name"] in STRUCTURAL:
            continue
        _check_op(m, op, ours)
    # every name an op reads or writes is a Var its block can see
    for op in program.all_ops():
        for names in list(op.inputs.values()) + list(op.outputs.values()):
            for n in names:
                assert op.block.find_var(n) is not None, (op, n)


def test_names_follow_paddle(exports):
    program = read_pir_program(exports / "conv_bn_pool" / "model.json")
    gb = program.global_block
    assert program.inputs == ["x"]
    assert gb.vars["x"].dtype == "float32" and gb.vars["x"].shape == (-1, 3, 16, 16)
    assert program.outputs == ["fetch_name_0"] and gb.ops[-1].type == "fetch"
    assert gb.ops[0].type == "feed" and gb.ops[0].output("Out") == ["x"]
    conv = next(op for op in gb.ops if op.type == "conv2d")
    assert conv.input("Input") == ["x"] and conv.input("Filter")[0].startswith("conv2d_")
    assert gb.vars[conv.input("Filter")[0]].persistable
    bn = next(op for op in gb.ops if op.type == "batch_norm")
    assert set(bn.inputs) == {"X", "Scale", "Bias", "Mean", "Variance"}
    assert {"Y", "MeanOut", "VarianceOut"} <= set(bn.outputs)
    assert bn.attr("data_layout") == "NCHW" and bn.attr("is_test") is True
    pools = [op for op in gb.ops if op.type == "pool2d"]
    assert [p.attr("ksize") for p in pools[:2]] == [[3, 3], [2, 2]]
    assert not any(op.type == "full_int_array" for op in gb.ops)       # folded away
    # temp names are legacy-like and unique
    outs = [n for op in program.all_ops() for names in op.outputs.values() for n in names]
    assert len(outs) == len(set(outs) - {"fetch"}) + outs.count("fetch")


def test_linear_and_folds(exports):
    program = read_pir_program(exports / "linear_gelu_norm" / "model.json")
    ops = program.global_block.ops
    mm = next(op for op in ops if op.type == "matmul_v2")
    assert mm.attr("trans_x") is False and mm.attr("trans_y") is False and "transpose_x" not in mm.attrs
    topk = next(op for op in ops if op.type == "top_k_v2")
    assert topk.attr("k") == 2 and topk.attr("axis") == -1 and "K" not in topk.inputs
    assert set(topk.outputs) == {"Out", "Indices"}
    mean = next(op for op in ops if op.type == "reduce_mean")
    assert mean.attr("dim") == [-1] and mean.attr("keep_dim") is True
    reshape = next(op for op in ops if op.type == "reshape2")
    assert reshape.attr("shape") == [-1, 4, 8]
    assert next(op for op in ops if op.type == "transpose2").attr("axis") == [0, 2, 1]
    ln = next(op for op in ops if op.type == "layer_norm")
    assert set(ln.inputs) == {"X", "Scale", "Bias"} and ln.attr("begin_norm_axis") == 1


def test_control_flow_blocks(exports):
    program = read_pir_program(exports / "control_flow" / "model.json")
    gb = program.global_block
    if_op = next(op for op in gb.ops if op.type == "if")
    while_op = next(op for op in gb.ops if op.type == "while")
    t, f, body = if_op.attr("true_block"), if_op.attr("false_block"), while_op.attr("sub_block")
    assert all(isinstance(b, Block) and b.parent_idx == 0 and b.program is program for b in (t, f, body))
    assert [b.idx for b in program.blocks] == list(range(len(program.blocks)))
    assert len(if_op.input("Cond")) == 1
    for b in (t, f):                           # each branch yields the if's results
        assert b.ops[-1].type == "yield" and len(b.ops[-1].input("X")) == len(if_op.output("Out"))
    carried = while_op.input("X")
    assert len(body.args) == len(carried) == len(while_op.output("Out"))
    assert all(a in body.vars for a in body.args)
    yielded = body.ops[-1]
    assert yielded.type == "yield" and len(yielded.input("X")) == len(carried) + 1
    # the loop condition is recomputed in the body and yielded first
    cond_producer = next(op for op in body.ops if yielded.input("X")[0] in op.output("Out"))
    assert cond_producer.type == "less_than"
    # sub-block ops see outer names through find_var
    inner = next(op for op in t.ops if op.type == "scale")
    assert t.find_var(inner.input("X")[0]) is not None
    assert program.outputs[0] in while_op.output("Out")


# ---------------------------------------------------------------------------
# Parameter order: the .pdiparams records, Paddle's loaded values

@pytest.mark.parametrize("name", MODEL_NAMES)
def test_param_order_matches_pdiparams(exports, name):
    program = read_pir_program(exports / name / "model.json")
    order = param_order(program)
    saved = np.load(exports / name / "params.npz")
    assert sorted(saved.files) == order                     # what Paddle saves, by its own API
    path = exports / name / "model.pdiparams"
    if not order:
        assert not path.exists() or path.stat().st_size == 0
        return
    records = read_records(str(path))
    assert len(records) == len(order)
    for pname, rec in zip(order, records):
        var = program.var(pname)
        assert (rec.array.dtype.name, rec.array.shape) == (var.dtype, var.shape), pname
        np.testing.assert_array_equal(rec.array, saved[pname])


def test_buffers_and_dropout_state(exports):
    # register_buffer'ed tensors are exported as parameters (both of them, whatever their
    # persistable flag in the Layer) and saved; Paddle's own list is the reference
    program = read_pir_program(exports / "buffers" / "model.json")
    saved = np.load(exports / "buffers" / "params.npz")
    order = param_order(program)
    assert order == sorted(saved.files) and len(order) == 6
    values = sorted(float(saved[n][0]) for n in order if n.startswith("eager_tmp"))
    assert values == [2.0, 3.0]
    # an RNN's dropout state is a parameter that is not persistable: not in the file
    rnn = read_pir_program(exports / "rnn" / "model.json")
    states = [n for n in rnn.global_block.vars if "dropout_state" in n]
    assert states and not set(states) & set(param_order(rnn))
    assert all(not rnn.var(n).persistable for n in states)


def test_param_order_of_committed_example():
    program = read_pir_program(DIGITS_JSON)
    records = read_records(os.path.join(EXAMPLE, "pir", "model.pdiparams"))
    order = param_order(program)
    assert order == sorted(order) and len(order) == len(records)
    for pname, rec in zip(order, records):
        assert (rec.array.dtype.name, rec.array.shape) == (program.var(pname).dtype, program.var(pname).shape)


# ---------------------------------------------------------------------------
# The table is Paddle's: key entries, and reproducible by the generator

def test_compat_table_key_entries():
    table = compat_table()
    conv = table["pd_op.conv2d"]
    assert conv["legacy_type"] == "conv2d"
    assert conv["operands"] == ["input", "filter"]
    assert conv["inputs"] == {"input": "Input", "filter": "Filter"} and conv["outputs"] == {"out": "Output"}
    pool = table["pd_op.pool2d"]
    assert pool["folds"]["kernel_size"] == {"attr": "ksize", "kind": "ints"}
    bn = table["pd_op.batch_norm_"]
    assert bn["legacy_type"] == "batch_norm" and bn["outputs"]["out"] == "Y"
    assert table["pd_op.add"]["legacy_type"] == "elementwise_add"
    assert table["pd_op.matmul"]["legacy_type"] == "matmul_v2"
    assert table["pd_op.matmul"]["attr_names"] == {"transpose_x": "trans_x", "transpose_y": "trans_y"}
    assert table["pd_op.relu_"]["legacy_type"] == "relu"
    assert table["pd_op.embedding"]["inputs"] == {"x": "Ids", "weight": "W"}
    assert table["pd_op.reshape"]["list_inputs"] == {"shape": "ShapeTensor"}
    assert table["pd_op.tril"]["implied_attrs"] == {"lower": True}


def test_generator_reproduces_table(tmp_path):
    pytest.importorskip("paddle")
    gen = os.path.join(ROOT, "tools", "gen_pir_compat.py")
    proc = subprocess.run([sys.executable, gen, "--only", "pool2d", "conv2d", "matmul_v2", "reduce_mean"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    learned = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {e["pir"] for e in learned} >= {"pd_op.pool2d", "pd_op.conv2d", "pd_op.matmul", "pd_op.mean"}
    table = compat_table()
    for e in learned:
        committed = table[e["pir"]]
        for key in ("legacy_type", "operands", "results", "inputs", "outputs", "folds", "attr_names"):
            assert committed[key] == e[key], (e["pir"], key)


# ---------------------------------------------------------------------------
# Format edges, hand-made files

def _program(ops, version=4, magic="pir", **block):
    body = {"#": "block_0", "args": [], "ops": ops, **block}
    return json.dumps({"base_code": {"magic": magic, "version": version, "trainable": True},
                       "program": {"regions": [{"#": "region_0", "blocks": [body]}]}}).encode()


def _t(dtype="0.t_f32", dims=(-1, 4)):
    return {"#": "0.t_dtensor", "D": [{"#": dtype}, list(dims), "NCHW", [], 0]}


def _a(name, tag, data):
    return {"N": name, "AT": {"#": tag, "D": data}}


DATA = {"#": "1.data", "I": [], "O": [{"%": 1, "TT": _t()}],
        "A": [_a("name", "0.a_str", "x"), _a("shape", "1.a_intarray", [-1, 4]),
              _a("dtype", "1.a_dtype", "float32")]}


def _fetch(vid, out=99):
    return {"#": "1.fetch", "I": [{"%": vid}], "O": [{"%": out, "TT": _t()}],
            "A": [_a("name", "0.a_str", "out"), _a("col", "0.a_i32", 0)]}


def test_unknown_op_keeps_pir_names():
    new = {"#": "1.brand_new_op", "I": [{"%": 1}, {"%": 0}], "O": [{"%": 2, "TT": _t()}],
           "A": [_a("alpha", "0.a_f64", 0.5), {"N": "inf", "AT": {"#": "0.a_f32", "VD": "-INF"}}]}
    program = read_pir_program("m.json", _program([DATA, new, _fetch(2)]))
    op = program.global_block.ops[1]
    assert op.type == "brand_new_op" and op.inputs == {"in0": ["x"]} and op.outputs == {"out0": ["out"]}
    assert op.attrs == {"alpha": 0.5, "inf": float("-inf")}
    assert program.outputs == ["out"]


def test_translated_program_shape():
    """What paddle.pir.translate_to_pir writes (tools/zoo.py's translated format): inputs
    through pd_op.feed, feeds in reverse col order, a builtin.slice per element of a split;
    two slices of one element (one of them fetched) become one name and an assign."""
    def feed(vid, name, col):
        return {"#": "1.feed", "I": [], "O": [{"%": vid, "TT": _t()}],
                "A": [_a("name", "0.a_str", name), _a("col", "0.a_i32", col)]}

    def slice_(vid, index):
        return {"#": "0.slice", "I": [{"%": 4}], "O": [{"%": vid, "TT": _t(dims=(-1, 2))}],
                "A": [_a("index", "0.a_i32", index)]}

    add = {"#": "1.add", "I": [{"%": 1}, {"%": 2}], "O": [{"%": 3, "TT": _t()}]}
    split = {"#": "1.split_with_num", "I": [{"%": 3}, {"%": 0}],
             "O": [{"%": 4, "TT": {"#": "0.t_vec", "D": [_t(dims=(-1, 2)), _t(dims=(-1, 2))]}}],
             "A": [_a("num", "0.a_i32", 2), _a("axis", "0.a_i32", 1)]}
    relu = {"#": "1.relu", "I": [{"%": 5}], "O": [{"%": 8, "TT": _t(dims=(-1, 2))}]}
    ops = [feed(2, "b", 1), feed(1, "a", 0), add, split, slice_(5, 1), slice_(6, 0),
           slice_(7, 1), relu, _fetch(8, 90), _fetch(7, 91), _fetch(6, 92)]
    program = read_pir_program("m.json", _program(ops))
    assert program.inputs == ["a", "b"]
    block = program.global_block
    assert [(op.type, op.attr("col")) for op in block.ops[:2]] == [("feed", 1), ("feed", 0)]
    split_op = next(op for op in block.ops if op.type == "split")
    first, second = split_op.outputs["Out"]
    relu_op = next(op for op in block.ops if op.type == "relu")
    assert relu_op.inputs == {"X": [second]}            # the first slice of index 1 names it
    assign = next(op for op in block.ops if op.type == "assign")
    assert assign.inputs == {"X": [second]} and assign.outputs["Out"] != [second]
    assert program.outputs[1:] == [assign.outputs["Out"][0], first]


def test_versions():
    for version in (0, 1, 2, 3, 4):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert read_pir_program("m.json", _program([DATA], version=version)).version == version
    with pytest.warns(UserWarning, match="newer"):
        read_pir_program("m.json", _program([DATA], version=9))
    with pytest.raises(PaddleFormatError, match="magic"):
        read_pir_program("m.json", _program([DATA], magic="onnx"))
    with pytest.raises(PaddleFormatError, match="version"):
        read_pir_program("m.json", _program([DATA], version="4"))
    # Paddle 3.0 wrote pool2d strides as a_i32, 3.1+ as a_i64: both are plain ints
    for tag in ("0.a_i32", "0.a_i64"):
        arr = {"#": "0.a_array", "D": [{"#": tag, "D": 2}, {"#": tag, "D": 2}]}
        pool = {"#": "1.pool2d", "I": [{"%": 1}, {"%": 0}], "O": [{"%": 2, "TT": _t()}],
                "A": [{"N": "strides", "AT": arr}]}
        assert read_pir_program("m.json", _program([DATA, pool])).global_block.ops[1].attr("strides") == [2, 2]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("program"), "'program'"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][1].pop("O"), "'O'"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][1]["I"].append({"%": 77}), "%77"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][0]["O"][0]["TT"]["D"][0].update({"#": "0.t_f99"}),
     "t_f99"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][1]["A"][0]["AT"].update({"#": "0.a_what"}),
     "a_what"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][1].update({"#": "9.relu"}), "dialect"),
    (lambda d: d["program"]["regions"][0]["blocks"][0]["ops"][1]["O"][0].update({"%": 1}), "twice"),
])
def test_structural_errors_name_the_op(mutate, message):
    relu = {"#": "1.relu", "I": [{"%": 1}], "O": [{"%": 2, "TT": _t()}], "A": [_a("struct_name", "0.a_str", "/R/")]}
    doc = json.loads(_program([DATA, relu, _fetch(2)]))
    mutate(doc)
    with pytest.raises(PaddleFormatError) as err:
        read_pir_program("m.json", json.dumps(doc).encode())
    text = str(err.value)
    assert text.startswith("m.json") and message in text and "re-export" in text
    if "regions" in json.dumps(doc) and message != "'program'":
        assert "op #" in text


def test_parameter_op_compact_form():
    p = {"#": "p", "A": [0, 1, 1, "w"], "O": {"%": 3, "TT": _t(dims=(4, 4))}, "OA": [1, 0, 1], "DA": [], "QA": []}
    mm = {"#": "1.matmul", "I": [{"%": 1}, {"%": 3}], "O": [{"%": 2, "TT": _t()}],
          "A": [_a("transpose_x", "0.a_bool", False), _a("transpose_y", "0.a_bool", True)]}
    program = read_pir_program("m.json", _program([p, DATA, mm, _fetch(2)]))
    assert program.var("w").persistable and program.var("w").shape == (4, 4)
    op = program.global_block.ops[1]
    assert op.type == "matmul_v2" and op.inputs == {"X": ["x"], "Y": ["w"]} and op.attr("trans_y") is True
    assert param_order(program) == ["w"]
    p["OA"] = [0, 1, 0]                         # not persistable: not in the params file
    assert param_order(read_pir_program("m.json", _program([p, DATA, mm, _fetch(2)]))) == []


# ---------------------------------------------------------------------------
# Fuzzing: never anything but PaddleFormatError

def _outcome(data, path="fuzz.json"):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_pir_program(path, data)
    except PaddleFormatError as exc:
        assert exc.path == path and str(exc).startswith(path)
        return "error"
    return "read"


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_every_truncation_of_control_flow_json(exports):
    data = _bytes(exports / "control_flow" / "model.json")
    for n in range(len(data)):
        assert _outcome(data[:n]) == "error", n
    assert _outcome(data) == "read"


def test_truncations_of_example_json():
    data = _bytes(DIGITS_JSON)
    for n in list(range(0, len(data), 7)) + list(range(len(data) - 64, len(data))):
        assert _outcome(data[:n]) == "error", n


FUZZ = settings(max_examples=800, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.data())
def test_byte_flips(data):
    buf = bytearray(_bytes(DIGITS_JSON))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    _outcome(bytes(buf))


JUNK = [None, 0, -1, 7, 2 ** 70, 1.5, True, "", "x", "1.conv2d", "0.t_f32", "0.a_i32", [], {}, [1],
        {"#": "0.a_i32"}, {"%": 0}, {"%": -5}, {"#": "NULL"}]


def _containers(x, acc):
    if isinstance(x, dict):
        acc.append(x)
        for v in x.values():
            _containers(v, acc)
    elif isinstance(x, list):
        acc.append(x)
        for v in x:
            _containers(v, acc)
    return acc


@FUZZ
@given(st.data())
def test_structural_damage(data):
    # valid JSON, wrong structure: deleted keys, values of the wrong type, duplicated items
    doc = json.loads(_bytes(os.path.join(EXAMPLE, "pir", "model.json")) if data.draw(st.booleans())
                     else _program([DATA, {"#": "1.while", "I": [{"%": 1}, {"%": 1}],
                                           "O": [{"%": 2, "TT": _t()}], "A": [],
                                           "regions": [{"#": "region_1", "blocks": [
                                               {"#": "block_1", "args": [{"#": -1, "TT": _t()}],
                                                "ops": [{"#": "2.yield", "I": [{"%": -1}, {"%": -1}],
                                                         "O": [], "A": []}]}]}]},
                                    _fetch(2)]))
    nodes = _containers(doc, [])
    for _ in range(data.draw(st.integers(1, 3))):
        node = nodes[data.draw(st.integers(0, len(nodes) - 1))]
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(sorted(node)))
            if data.draw(st.booleans()):
                del node[key]
            else:
                node[key] = data.draw(st.sampled_from(JUNK))
        elif isinstance(node, list) and node:
            i = data.draw(st.integers(0, len(node) - 1))
            choice = data.draw(st.integers(0, 2))
            if choice == 0:
                del node[i]
            elif choice == 1:
                node[i] = data.draw(st.sampled_from(JUNK))
            else:
                node.insert(i, node[i])
    _outcome(json.dumps(doc).encode())


def test_not_json_at_all():
    for data in (b"", b"\xff\xfe{", b"[]", b"null", b'{"base_code": 1}', b"{" * 100000,
                 b'{"base_code": {"magic": "pir", "version": 4}}'):
        assert _outcome(data) == "error"
