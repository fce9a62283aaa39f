"""What `verify` judges by: float plans by tolerance, integer plans by cosine to float and
bit-exactness against the NumPy reference; a model that was never lowered is refused; the
NumPy reference runs BatchNormalization as inference."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import EXAMPLE
from paddle_npu.api import export
from paddle_npu.errors import ConversionError
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.reference import Reference
from paddle_npu.npu.verifier import render, verify

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


def test_verify_refuses_a_model_that_was_not_lowered(digits):
    with pytest.raises(ConversionError, match="not a lowered model"):
        verify(digits, digits, "npu256")


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
