"""The float16 export (paddle_npu/fp16.py): what it narrows and what it keeps float32, run in
onnxruntime against the float32 model; the API and CLI options; and the CI zoo models'
float16 exports against Paddle within their bound (tools/zoo.py fp16_bound)."""
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import zoo
from conftest import EXAMPLE
from paddle_npu.api import Float16Warning, export
from paddle_npu.cli import main
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.fp16 import to_float16

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
LEGACY = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
REF = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ir.serde.deserialize_model(proto)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _narrowed(model, keep_io_types=True):
    """(the float16 model's proto, its warnings), checked by onnx's strict inference."""
    notes = to_float16(model, keep_io_types)
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    return proto, notes


def _types(proto):
    inferred = onnx.shape_inference.infer_shapes(proto)
    g = inferred.graph
    out = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    out.update((t.name, t.data_type) for t in g.initializer)
    return out


def _run(proto, feeds):
    return run_onnx(proto.SerializeToString(), feeds)[1]


def _conv_model():
    x = helper.make_tensor_value_info("x", F, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", F, [1, 4, 8, 8])
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "x0"], ["y"])]
    rng = np.random.default_rng(3)
    inits = [_init("w", rng.standard_normal((4, 3, 3, 3), dtype=np.float32)),
             _init("b", rng.standard_normal(4, dtype=np.float32)),
             _init("x0", np.float32(0.5))]
    return _model(nodes, [x], [y], inits)


def test_weights_and_values_become_float16_inputs_and_outputs_stay_float32():
    x = RNG.standard_normal((1, 3, 8, 8), dtype=np.float32)
    (want,) = _run(ir.serde.serialize_model(_conv_model()), {"x": x})
    proto, notes = _narrowed(_conv_model())
    types = _types(proto)
    assert notes == []
    assert {types[n] for n in ("w", "b", "x0", "c", "r")} == {H}
    assert types["x"] == F and types["y"] == F
    assert [n.op_type for n in proto.graph.node] == ["Cast", "Conv", "Relu", "Add", "Cast"]
    assert [o.name for o in proto.graph.output] == ["y"]
    (got,) = _run(proto, {"x": x})
    assert got.dtype == np.float32
    assert agreement(got, want)["rel_diff"] < 2 ** -9      # a few float16 roundings


def test_keep_io_types_false_makes_inputs_and_outputs_float16():
    proto, _ = _narrowed(_conv_model(), keep_io_types=False)
    types = _types(proto)
    assert types["x"] == H and types["y"] == H
    assert "Cast" not in [n.op_type for n in proto.graph.node]
    (got,) = _run(proto, {"x": np.ones((1, 3, 8, 8), np.float16)})
    assert got.dtype == np.float16


def test_a_slot_onnx_allows_only_in_float32_keeps_it():
    """Resize's scales are tensor(float) at every opset, Range has no float16 (opset 13):
    they stay float32, a Cast bridging Range's output to the float16 Add."""
    x = helper.make_tensor_value_info("x", F, [1, 1, 2, 4])
    y = helper.make_tensor_value_info("y", F, None)
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Range", ["start", "limit", "delta"], ["ramp"]),
             helper.make_node("Add", ["up", "ramp"], ["y"])]
    inits = [_init("scales", np.array([1, 1, 2, 2], np.float32)),
             _init("start", np.float32(0)), _init("limit", np.float32(8)),
             _init("delta", np.float32(1))]
    model = _model(nodes, [x], [y], inits)
    x_val = RNG.standard_normal((1, 1, 2, 4), dtype=np.float32)
    (want,) = _run(ir.serde.serialize_model(model), {"x": x_val})
    proto, _ = _narrowed(model)
    types = _types(proto)
    assert types["scales"] == F and types["start"] == F and types["ramp"] == F
    assert types["up"] == H
    casts = [n for n in proto.graph.node if n.op_type == "Cast" and n.input[0] == "ramp"]
    assert len(casts) == 1 and casts[0].attribute[0].i == H
    (got,) = _run(proto, {"x": x_val})
    assert agreement(got, want)["rel_diff"] < 2 ** -10


def _transpose_matmul(dtype):
    np_type = np.float16 if dtype == H else np.float32
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", dtype, [10, 1, 48])],
                  [helper.make_tensor_value_info("y", dtype, None)],
                  [_init("w", np.ones((48, 8), np_type))])


def test_a_transpose_into_a_matmul_stays_float32():
    proto, _ = _narrowed(_transpose_matmul(F))
    types = _types(proto)
    assert types["t"] == F and types["w"] == H
    (got,) = _run(proto, {"x": np.ones((10, 1, 48), np.float32)})
    assert np.all(got == 48)


def test_onnxruntime_still_crashes_on_a_float16_transpose_into_a_matmul(tmp_path):
    """Why the Transpose above stays float32: onnxruntime's session on the plain float16
    graph dies (its MatMul-Transpose fusion). When this fails, onnxruntime was fixed: drop
    the exception in fp16._narrowed_vars."""
    path = tmp_path / "m.onnx"
    onnx.save(ir.serde.serialize_model(_transpose_matmul(H)), str(path))
    script = ("import sys, onnxruntime as ort\n"
              "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          timeout=300)
    assert proc.returncode < 0 or proc.returncode > 1, proc.returncode  # killed by a signal


def test_a_weight_beyond_float16_stays_float32_and_is_named():
    """x * 1e5 for a small x is in float16's range; 1e5 is not: the Mul runs in float32."""
    x = helper.make_tensor_value_info("x", F, [4])
    y = helper.make_tensor_value_info("y", F, [4])
    nodes = [helper.make_node("Mul", ["x", "big"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["y"])]
    model = _model(nodes, [x], [y], [_init("big", np.float32([1e5, 1, 2, 3])),
                                     _init("one", np.float32(1))])
    proto, notes = _narrowed(model)
    assert len(notes) == 1 and "'big'" in notes[0] and "kept float32" in notes[0]
    types = _types(proto)
    assert types["big"] == F and types["m"] == F and types["one"] == H
    x_val = np.float32([1e-3, 1, 2, 3])
    (got,) = _run(proto, {"x": x_val})
    np.testing.assert_allclose(got, x_val * [1e5, 1, 2, 3] + 1, rtol=2 ** -10)


def test_a_weight_flushing_to_zero_is_named_and_narrowed():
    x = helper.make_tensor_value_info("x", F, [3])
    y = helper.make_tensor_value_info("y", F, [3])
    tiny = np.float32([1e-9, 2e-9, 0.5])
    model = _model([helper.make_node("Add", ["x", "tiny"], ["y"])], [x], [y],
                   [_init("tiny", tiny)])
    proto, notes = _narrowed(model)
    assert len(notes) == 1 and "'tiny'" in notes[0] and "2 of its 3 nonzero" in notes[0]
    assert _types(proto)["tiny"] == H


def test_control_flow_bodies_and_typed_attributes_become_float16():
    """A Loop carrying a float (its body adding a weight captured from outside), an If whose
    branches hold a Constant and a Cast(to=FLOAT), a ConstantOfShape without a value."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [2])])
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            np.float32([0.25, 0.5]), "c"))], "then", [],
        [helper.make_tensor_value_info("c", F, [2])])
    other = helper.make_graph(
        [helper.make_node("Cast", ["ints"], ["c2"], to=F)], "else", [],
        [helper.make_tensor_value_info("c2", F, [2])])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["acc"], body=body),
             helper.make_node("If", ["flag"], ["branch"], then_branch=then, else_branch=other),
             helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
             helper.make_node("Add", ["acc", "branch"], ["s"]),
             helper.make_node("Add", ["s", "zeros"], ["y"])]
    inits = [_init("trips", np.int64(3)), _init("step", np.float32([1.5, -2])),
             _init("ints", np.int64([1, 2])), _init("shape", np.int64([2]))]
    inputs = [helper.make_tensor_value_info("x", F, [2]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", F, [2])], inits)
    proto, _ = _narrowed(model)
    loop, cond, const_shape = proto.graph.node[1], proto.graph.node[2], proto.graph.node[3]
    assert loop.op_type == "Loop" and cond.op_type == "If"
    body = loop.attribute[0].g
    assert body.input[2].type.tensor_type.elem_type == H
    assert body.output[1].type.tensor_type.elem_type == H
    branches = {a.name: a.g for a in cond.attribute}
    assert branches["then_branch"].node[0].attribute[0].t.data_type == H
    assert branches["else_branch"].node[0].attribute[0].i == H
    assert const_shape.attribute[0].t.data_type == H
    assert _types(proto)["step"] == H
    for flag in (True, False):
        (got,) = _run(proto, {"x": np.float32([1, 2]), "flag": np.array(flag)})
        want = np.float32([1, 2]) + 3 * np.float32([1.5, -2]) + \
            (np.float32([0.25, 0.5]) if flag else np.float32([1, 2]))
        np.testing.assert_allclose(got, want, rtol=2 ** -10)


def _example_fp16(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a plain model raises no Float16Warning
        return export(LEGACY, "", export_fp16_model=True, **kw)


def test_export_fp16_model_writes_a_float16_model():
    data = _example_fp16()
    proto = onnx.load_from_string(data)
    assert {t.data_type for t in proto.graph.initializer} == {H}
    assert proto.graph.input[0].type.tensor_type.elem_type == F
    _, (out,) = run_onnx(data, {"x": REF["in_x"]})
    assert out.dtype == np.float32
    # the example's own float32 floor is unrecorded: the float16 floor of a small CNN
    assert agreement(out, REF["out_0"])["rel_diff"] < 2 ** -8
    assert len(data) < 0.6 * len(export(LEGACY, ""))
    io16 = onnx.load_from_string(_example_fp16(keep_io_types=False))
    assert io16.graph.input[0].type.tensor_type.elem_type == H


def test_export_fp16_model_takes_a_bool():
    with pytest.raises(ConversionError, match="take True or False"):
        export(LEGACY, "", export_fp16_model="False")


def _with_a_huge_weight(monkeypatch):
    """The example's first weight scaled beyond float16's range before narrowing."""
    import paddle_npu.api as api

    def scaled(model, keep_io_types=True):
        value = next(iter(model.graph.initializers.values()))
        value.const_value = ir.tensor(value.const_value.numpy() * 1e6, name=value.name)
        return to_float16(model, keep_io_types)
    monkeypatch.setattr(api, "to_float16", scaled)


def test_export_warns_about_a_weight_float16_cannot_hold(monkeypatch):
    _with_a_huge_weight(monkeypatch)
    with pytest.warns(Float16Warning, match="beyond float16's range .* kept float32"):
        export(LEGACY, "", export_fp16_model=True)


def test_cli_fp16_flags(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.onnx"
    assert main(["convert", LEGACY, "-o", str(out), "--export_fp16_model", "True"]) == 0
    assert {t.data_type for t in onnx.load(str(out)).graph.initializer} == {H}
    assert main(["convert", LEGACY, "-o", str(out), "--fp16", "--fp16-io"]) == 0
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.elem_type == H
    capsys.readouterr()
    for bad in (["--fp16-io"], ["--fp16", "--npu", "generic"]):
        assert main(["convert", LEGACY, "-o", str(tmp_path / "x.onnx"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("paddle-npu: error: --f") and len(err.strip().splitlines()) == 1
    _with_a_huge_weight(monkeypatch)
    assert main(["convert", LEGACY, "-o", str(out), "--fp16"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("paddle-npu: warning: weight ")


def test_fp16_bound():
    """2**13 times the float32 floor, at least 2**-11 for a float output; an integer output
    exact unless Paddle's own moves."""
    assert zoo.fp16_bound([1e-6, 0.0], [2e-6, 0.0], [True, True]) == \
        [2e-6 * 2 ** 13, 2 ** -11]
    assert zoo.fp16_bound([0.0], [], [False]) == [0.0]
    v = zoo._fp16_verdict([np.float32([1, 2.0008])], [np.float32([1, 2])], [0.0], [])
    assert v["ok"] and v["bound"] == [2 ** -11]
    v = zoo._fp16_verdict([np.int64([1, 3])], [np.int64([1, 2])], [0.0], [])
    assert not v["ok"]


CI_MODELS = [name for name, m in zoo.MODELS.items() if m.ci]


@pytest.mark.parametrize("name", CI_MODELS)
def test_fp16_export_agrees_with_paddle_within_its_bound(zoo_dir, name):
    info = zoo.export(name, "legacy", os.path.join(zoo_dir, name, "legacy"))
    data = export(os.path.join(info["dir"], info["model_file"]), export_fp16_model=True)
    proto = onnx.load_from_string(data)
    assert H in {t.data_type for t in proto.graph.initializer}
    assert TensorProto.FLOAT not in {t.data_type for t in proto.graph.initializer
                                     if t.data_type in (F, H) and np.prod(t.dims) > 16}
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    truth = np.load(os.path.join(info["dir"], "truth.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    _, outs = run_onnx(data, feeds)
    want = [ref[f"out_{i}"] for i in range(info["num_outputs"])]
    assert [o.dtype for o in outs] == [w.dtype for w in want]
    v = zoo._fp16_verdict(outs, want, info["paddle_noise"],
                          [truth[f"out_{i}"] for i in range(len(truth.files))])
    if info.get("decoding"):
        # a greedy decoder: judged given Paddle's tokens, its logits at every step; free
        # running, a near-tie rounded the other way changes every token after it
        held = zoo._fp16_decoding(data, info, feeds, want)
        assert held["ok"], [(s["rel_diff"], b) for s, b in zip(held["stats"], held["bound"])]
        assert held["stats"][0]["cosine"] > 0.99
        picks = np.load(os.path.join(info["dir"], zoo.DECODING_FILE))["picks"]
        assert picks.shape[1] == info["decoding"]["steps"]
    else:
        assert v["ok"], [(s["rel_diff"], b) for s, b in zip(v["stats"], v["bound"])]
