"""What `verify` judges by: float plans by their distance from the model computed in float64
against the model's own float32 run (test_verify_float64.py has the numbers), or, where the
model cannot be run in float64, by tolerance, then the model's float-noise floor, then
recorded (float64) outputs; integer plans by cosine to float, bit-exactness of their integer
tensors against the NumPy reference and the tolerance on the float ops after them; a model
that was never lowered is refused; the NumPy reference runs BatchNormalization as
inference."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import EXAMPLE
from paddle_npu.api import export
from paddle_npu.errors import ConversionError
from paddle_npu.npu.pipeline import lower
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.reference import Reference
from paddle_npu.npu.verification.verifier import render, verify

X = np.load(os.path.join(EXAMPLE, "reference_io.npz"))["in_x"]


@pytest.fixture(scope="module")
def digits():
    return export(os.path.join(EXAMPLE, "legacy", "model.pdmodel"))


def test_an_integer_plan_is_judged_by_cosine_and_bit_exactness(digits):
    table = calibrate(digits, {"x": X[:64]})
    lowered, _, _ = quantized_lower(digits, table, 8, "npu256")
    result = verify(digits, lowered, "npu256", feeds={"x": X[64:96]})
    assert result["integer"] and result["ok"], render(result)
    assert result["worst_rel_diff"] > 1e-5      # the float tolerance would have refused it
    assert all(o["bit_exact"] for o in result["outputs"])
    assert 0.99 <= result["worst_cosine"] < 1
    assert "bit-exact" in render(result) and "SQNR" in render(result)
    strict = verify(digits, lowered, "npu256", feeds={"x": X[64:96]}, min_cosine=0.999999999)
    assert not strict["ok"]


def _matmul_softmax():
    """A MatMul followed by a Softmax: quantised, an integer layer with a float tail (the
    Softmax's max, exp and sum run on float values in both runs)."""
    from onnx import numpy_helper

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 32)) / 4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
         helper.make_node("Softmax", ["h"], ["y"], axis=-1, name="softmax")], "mm_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((64, 64)).astype(np.float32)
    return model.SerializeToString(), {"x": x[:32]}, {"x": x[32:]}


@pytest.fixture(scope="module")
def matmul_softmax():
    model, calib, feeds = _matmul_softmax()
    lowered, _, _ = quantized_lower(model, calibrate(model, calib), 8, "npu256")
    return model, lowered, feeds


def test_an_integer_plan_with_a_float_tail_is_judged_by_its_integer_tensors(matmul_softmax):
    model, lowered, feeds = matmul_softmax
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    (out,) = result["outputs"]
    # the Softmax after the integer layer rounds differently in onnxruntime and NumPy
    assert not out["bit_exact"] and 0 < out["ort_vs_reference"] <= 1e-6
    assert out["within"] == "tolerance"
    # the input's Quantize and the layer's Requantize (its tile products are read through it)
    assert result["integer_tensors"] == 2 and not result["integer_mismatches"]
    assert "2 integer tensors bit-exact; float outputs after them" in render(result)


def test_verify_keeps_a_digest_of_each_integer_tensor_not_the_tensor(matmul_softmax):
    """The reference's run holds digests of the tensors verify compares (onnxruntime's are
    compared with them), arrays only of the float tensors it is asked to hold."""
    from paddle_npu.npu.verification.verifier import _digest, _run_with_tensors, _Seen

    model, lowered, feeds = matmul_softmax
    seen = _Seen()
    _, held = Reference(lowered, "npu256").run(feeds, keep=seen)
    assert held == {} and seen.floats == {} and len(seen.digests) == 2
    at_ort = _run_with_tensors(lowered, feeds, list(seen.digests))[1]
    assert {n: _digest(v) for n, v in at_ort.items()} == seen.digests
    one_off = at_ort["proj/requantize"].copy()
    one_off.flat[5] += 1
    assert _digest(one_off) != seen.digests["proj/requantize"]
    assert "y" in seen.floating and "proj/requantize" not in seen.floating
    zeros = np.zeros(3, np.float32)
    assert _digest(zeros) == _digest(-zeros) and _digest(zeros) != _digest(zeros + 1e-45)


def test_an_integer_tensor_that_differs_disagrees_naming_it(matmul_softmax, monkeypatch):
    from onnx import numpy_helper

    from paddle_npu.npu.ops.quant import Requantize
    from paddle_npu.onnx_io import load_proto

    model, lowered, feeds = matmul_softmax
    exact = Requantize.reference.__func__

    def one_off(cls, array, inputs, attrs):       # the reference one step off at one value
        (y,) = exact(cls, array, inputs, attrs)
        y = y.copy()
        y.flat[5] += 1
        return (y,)

    with monkeypatch.context() as m:
        m.setattr(Requantize, "reference", classmethod(one_off))
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert not result["ok"] and result["worst_cosine"] > 0.99
    (bad,) = result["integer_mismatches"]
    assert bad["name"] == "proj/requantize" and bad["differing"] == bad["max_abs_diff"] == 1
    assert "DISAGREES" in render(result) and \
        "integer tensor proj/requantize NOT bit-exact (1 of 1024 values" in render(result)

    # the lowered model's own Requantize (its function body, what onnxruntime runs) rounding
    # at three quarters of a step instead of a half: the values in between come out a step off
    proto = load_proto(lowered)
    body = next(f for f in proto.functions if f.name == "Requantize")
    half = next(n for n in body.node if n.op_type == "Div" and n.input[0] == "D")
    two = next(n for n in body.node if n.output[0] == half.input[1])
    two.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(4, np.int64)))
    result = verify(model, proto, "npu256", feeds=feeds)
    assert not result["ok"]
    (bad,) = result["integer_mismatches"]
    assert bad["name"] == "proj/requantize" and 0 < bad["differing"] < 1024
    assert "integer tensor proj/requantize NOT bit-exact" in render(result)


def _between_two_layers(middle, weights=(), last=True):
    """`middle` (nodes from "h" to "p") between two MatMuls (last=False: after one, "p" the
    output), lowered as an int16 plan, and held-out feeds."""
    from onnx import numpy_helper

    rng = np.random.default_rng(7)
    w1, w2 = ((rng.standard_normal((32, 32)) / 3).astype(np.float32) for _ in range(2))
    out = [helper.make_node("MatMul", ["p", "w2"], ["y"], name="out")] if last else []
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="proj"), *middle, *out],
        "between", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
        [helper.make_tensor_value_info("y" if last else "p", TensorProto.FLOAT, ["n", 32])],
        [numpy_helper.from_array(w1, "w1"), *weights] +
        ([numpy_helper.from_array(w2, "w2")] if last else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = model.SerializeToString()
    x = rng.standard_normal((64, 32)).astype(np.float32)
    lowered, _, _ = quantized_lower(model, calibrate(model, {"x": x[:32]}), 16, "npu256")
    return model, lowered, {"x": x[32:]}


def _exp_off_by(factor):
    """The reference's lookup tables (a Softmax's exp) times `factor`, every other value."""
    from paddle_npu.npu.ops.lut import Lut

    exact = Lut.reference.__func__

    def lut(cls, array, inputs, attrs):
        (y,) = exact(cls, array, inputs, attrs)
        y = y.copy()
        y[..., ::2] *= factor
        return (y,)
    return Lut, "reference", classmethod(lut)


def test_float_ops_between_integer_layers_are_held_to_the_tolerance(monkeypatch):
    """A Softmax between two int16 MatMuls: where the reference's float values there are a
    few ulps off onnxruntime's (some of them then quantise to the next integer), the second
    layer is compared on onnxruntime's values and agrees; a float op that is wrong is named."""
    model, lowered, feeds = _between_two_layers(
        [helper.make_node("Softmax", ["h"], ["p"], axis=-1, name="softmax")])
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1 + 2 ** -20)))      # 8 ulps
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    assert [f["name"] for f in result["float_inputs"]] == ["p"]
    assert 0 < result["float_inputs"][0]["rel_diff"] <= 2e-6
    assert not result["integer_mismatches"]
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1.01)))
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert not result["ok"] and "(beyond 1e-05: p)" in render(result)


def test_a_float_chain_that_amplifies_rounding_is_checked_op_by_op(monkeypatch):
    """A Softmax scaled by 1e4 into a Sin between two int16 MatMuls (a relation bias made as
    sin(100 log(...)) is such a chain): an ulp of the Softmax comes out 1e-3 apart in the
    tensor the second layer reads, so the chain is judged op by op, each op on onnxruntime's
    inputs: a correct chain agrees, a wrong op in it is named."""
    from onnx import numpy_helper

    model, lowered, feeds = _between_two_layers(
        [helper.make_node("Softmax", ["h"], ["s"], axis=-1, name="softmax"),
         helper.make_node("Mul", ["s", "k"], ["a"], name="scale"),
         helper.make_node("Sin", ["a"], ["p"], name="sin")],
        [numpy_helper.from_array(np.array(1e4, np.float32), "k")])
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1 + 2 ** -23)))      # one ulp
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    ((p,),) = [[f for f in result["float_inputs"] if f["name"] == "p"]]
    assert p["rel_diff"] > 1e-4          # the whole runs, far beyond the tolerance
    ops = {f["node"]: f for f in result["float_ops"]}
    assert {"softmax/exp", "scale", "sin"} <= set(ops)
    assert all(f["ends"] == ["p"] and f["rel_diff"] <= 1e-6 for f in ops.values())
    assert 0 < ops["softmax/exp"]["rel_diff"]
    assert "agree one by one on onnxruntime's inputs" in render(result)
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1 + 2 ** -10)))
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert not result["ok"]
    assert "float op softmax/exp (Lut) 9.8e-04 NOT within 1e-05 on onnxruntime's inputs " \
        "(beyond 1e-05: p)" in render(result)


def test_a_float_output_that_amplifies_rounding_is_checked_op_by_op(monkeypatch):
    """The same chain after the last integer layer, ending in the model's output."""
    from onnx import numpy_helper

    model, lowered, feeds = _between_two_layers(
        [helper.make_node("Softmax", ["h"], ["s"], axis=-1, name="softmax"),
         helper.make_node("Mul", ["s", "k"], ["a"], name="scale"),
         helper.make_node("Sin", ["a"], ["p"], name="sin")],
        [numpy_helper.from_array(np.array(1e4, np.float32), "k")], last=False)
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1 + 2 ** -23)))      # one ulp
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    (out,) = result["outputs"]
    assert out["ort_vs_reference"] > 1e-4 and out["within"] == "float ops"
    assert {"softmax/exp", "scale", "sin"} <= {f["node"] for f in result["float_ops"]}
    assert "(their float ops agree one by one)" in render(result)
    with monkeypatch.context() as m:
        m.setattr(*_exp_off_by(np.float32(1 + 2 ** -10)))
        result = verify(model, lowered, "npu256", feeds=feeds)
    assert not result["ok"] and result["outputs"][0]["within"] is None
    assert "float op softmax/exp (Lut)" in render(result)


def test_verify_refuses_a_model_that_was_not_lowered(digits):
    with pytest.raises(ConversionError, match="not a lowered model"):
        verify(digits, digits, "npu256")


def test_verify_takes_a_lowering_that_left_every_node_on_the_cpu():
    """A model of ops the NPU does not run (a Loop) lowers with no primitive at all: still a
    lowered model, verified like any other (it was refused as 'not a lowered model')."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("n", TensorProto.INT64, [], [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lowered, _ = lower(model, "npu256")
    assert not any(n.domain for n in lowered.graph)         # every node on the CPU
    result = verify(model, lowered, "npu256")
    assert result["ok"], render(result)


def test_reference_batchnorm_is_inference_at_opset_9():
    rng = np.random.default_rng(0)
    c = 3
    scale, bias = rng.random(c).astype(np.float32) + 0.5, rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.random(c).astype(np.float32) + 0.1
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [c], v.tolist())
             for n, v in (("s", scale), ("b", bias), ("m", mean), ("v", var))]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                            epsilon=1e-3)
    graph = helper.make_graph([node], "bn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 4, 4])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    x = rng.standard_normal((2, c, 4, 4)).astype(np.float32)
    got = Reference(model.SerializeToString(), "npu256").run({"x": x})[0]
    r = lambda a: a.reshape(1, c, 1, 1)   # noqa: E731
    want = (x - r(mean)) / np.sqrt(r(var) + 1e-3) * r(scale) + r(bias)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lower_quantize_verify_on_the_calibration_data_agrees(tmp_path, capsys):
    from paddle_npu.cli import main

    m, table, data = tmp_path / "m.onnx", tmp_path / "t.json", tmp_path / "data.npz"
    np.savez(data, x=X[:64])
    assert main(["convert", os.path.join(EXAMPLE, "legacy", "model.pdmodel"), "-o", str(m)]) == 0
    assert main(["calibrate", str(m), "--data", str(data), "-o", str(table)]) == 0
    capsys.readouterr()
    code = main(["lower", str(m), "-o", str(tmp_path / "q.onnx"), "--quantize", "int8",
                 "--calibration", str(table), "--verify", "--data", str(data)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agrees (integer plan)" in out and "bit-exact" in out


def _cancelling_matmul():
    """MatMul by zero-sum weight columns, fed inputs near 1000: the output is a small difference
    of large partial sums, so float32 rounding moves it far past 1e-5 of its scale (a model
    that amplifies rounding, as detection heads do), in onnxruntime's own MatMul too."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    k, n = 512, 16
    w = rng.standard_normal((k, n))
    w = (w - w.mean(0)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "cancel",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = (1000 + rng.standard_normal((4, k))).astype(np.float32)
    return model.SerializeToString(), {"x": x}


def _broken_lowering(model):
    """The model lowered, with one kernel cell of its largest weight off by 1 %."""
    from onnx import numpy_helper

    from paddle_npu.npu import lower
    from paddle_npu.onnx_io import load_proto

    broken = load_proto(lower(model, "npu256")[0])
    weight = max(broken.graph.initializer, key=lambda t: np.prod(t.dims))
    w = numpy_helper.to_array(weight).copy()
    w.flat[0] *= 1.01
    weight.CopyFrom(numpy_helper.from_array(w, weight.name))
    return broken


def test_a_model_that_amplifies_rounding_agrees_by_its_float64_distance():
    from paddle_npu.npu import lower

    model, feeds = _cancelling_matmul()
    lowered, _ = lower(model, "npu256")
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["worst_rel_diff"] > 1e-5          # 1e-5 alone would call it DISAGREES
    assert result["ok"] and result["within"] == "float64", render(result)
    (d,) = [o["float64"] for o in result["outputs"]]
    # the exact sums are closer to the float64 result than the model's own float32 run
    assert d["model"] > 1e-5 and max(d["onnxruntime"], d["reference"]) < d["model"]
    assert d["bound"] == result["float64"]["factor"] * d["model"]
    assert result["float64"]["ran_with"] == "onnx reference" and "floor" not in result
    assert "agrees: no farther from the model computed in float64 than" in render(result)


def test_a_broken_lowering_disagrees_beyond_the_models_own_float32_error():
    model, feeds = _cancelling_matmul()
    broken = _broken_lowering(model)
    result = verify(model, broken, "npu256", feeds=feeds)
    assert not result["ok"] and result["within"] is None
    assert result["float64"]["worst_ratio"] > result["float64"]["factor"]
    assert "DISAGREES" in render(result) and "from the model computed in float64" in \
        render(result)


def test_without_a_float64_run_the_tolerance_then_the_floor_judge(monkeypatch):
    from paddle_npu.npu import lower
    from paddle_npu.npu.verification import verifier

    def cannot(model, feeds):
        raise ConversionError("the model cannot be run in float64: no kernel")

    monkeypatch.setattr(verifier, "float64_outputs", cannot)
    model, feeds = _cancelling_matmul()
    lowered, _ = lower(model, "npu256")
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"] and result["within"] == "floor", render(result)
    assert result["worst_rel_diff"] <= result["floor"][0]
    assert result["float64"] == {"error": "the model cannot be run in float64: no kernel"}
    assert "within the model's float-noise floor" in render(result)
    assert "(no float64 run: the model cannot be run in float64: no kernel)" in render(result)
    result = verify(model, _broken_lowering(model), "npu256", feeds=feeds)
    assert not result["ok"] and result["worst_rel_diff"] > result["floor"][0] > 1e-5
    assert "DISAGREES" in render(result) and "float-noise floor" in render(result)
    shifted = {"x": feeds["x"] - 1000}                    # no cancellation: plain rounding
    result = verify(model, lowered, "npu256", feeds=shifted)
    assert result["ok"] and result["within"] == "tolerance" and "floor" not in result
    assert "agrees within 1e-05" in render(result)


def _float64_matmul(model, feeds):
    from onnx import numpy_helper

    from paddle_npu.onnx_io import load_proto

    w = numpy_helper.to_array(load_proto(model).graph.initializer[0]).astype(np.float64)
    return [feeds["x"].astype(np.float64) @ w]


def test_recorded_float64_outputs_do_not_excuse_a_broken_lowering(monkeypatch):
    from paddle_npu.npu.verification import verifier

    def cannot(model, feeds):           # (recorded outputs judge only without a float64 run)
        raise ConversionError("the model cannot be run in float64")

    monkeypatch.setattr(verifier, "float64_outputs", cannot)
    model, feeds = _cancelling_matmul()
    broken = _broken_lowering(model)
    result = verify(model, broken, "npu256", feeds=feeds, recorded=_float64_matmul(model, feeds))
    assert not result["ok"] and "DISAGREES" in render(result)
    d = result["outputs"][0]["from_recorded"]
    assert d["onnxruntime"] > 1e-3 > d["original"]


def test_a_lowered_model_as_close_to_the_float64_result_as_the_model_agrees():
    from paddle_npu.npu.verification.verifier import _as_close_to_recorded

    exact = np.linspace(-1, 1, 64)
    model = exact + 3e-5 * np.cos(np.arange(64))        # the model's own float32 error
    lowered = exact - 2e-5 * np.sin(np.arange(64))      # 3.6e-5 from the model, 2e-5 from exact
    entries = [{}]
    assert _as_close_to_recorded(entries, [exact], [model], [lowered], [lowered], 1e-5)
    assert entries[0]["from_recorded"]["original"] > entries[0]["from_recorded"]["onnxruntime"]
    farther = exact + 4e-5 * np.sin(np.arange(64))
    assert not _as_close_to_recorded([{}], [exact], [model], [farther], [lowered], 1e-5)
    assert not _as_close_to_recorded([{}], [None], [model], [lowered], [lowered], 1e-5)


def test_verify_command_judges_by_the_float64_run_with_its_factor(tmp_path, capsys):
    import json

    from paddle_npu.cli import main

    model, feeds = _cancelling_matmul()
    m, low, data = tmp_path / "m.onnx", tmp_path / "l.onnx", tmp_path / "io.npz"
    m.write_bytes(model)
    assert main(["lower", str(m), "-o", str(low)]) == 0
    np.savez(data, in_x=feeds["x"])
    capsys.readouterr()
    assert main(["verify", str(m), str(low), "--inputs", str(data)]) == 0
    out = capsys.readouterr().out
    assert "agrees: no farther from the model computed in float64 than" in out
    assert main(["verify", str(m), str(low), "--inputs", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    ratio = result["float64"]["worst_ratio"]
    assert result["within"] == "float64" and 0 < ratio < 1
    # the same runs judged with a factor below the one they need
    assert main(["verify", str(m), str(low), "--inputs", str(data),
                 "--factor", str(ratio / 2)]) == 1
    assert "DISAGREES" in capsys.readouterr().out
