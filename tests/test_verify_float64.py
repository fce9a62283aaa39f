"""The model computed in float64 (float64.py): the model's own arithmetic without rounding."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.errors import ConversionError
from paddle_npu.npu import float64 as float64_module
from paddle_npu.npu.float64 import as_float64, float64_outputs
from paddle_npu.npu.verifier import seeded_inputs


def _model(nodes, inits, out_shape, in_shape=(4, 8), opset=17):
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _affine(activation=None):
    """x @ w + 0.1 (a Constant's value_float), through a Cast to float and an If whose
    branch reads the outer tensor; with `activation`, a HardSigmoid (alpha 1/6) after."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    branch = helper.make_graph([helper.make_node("Mul", ["s", "two"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                               [numpy_helper.from_array(np.float32(2), "two")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Constant", [], ["c"], value_float=0.1),
             helper.make_node("Add", ["m", "c"], ["a"]),
             helper.make_node("Cast", ["a"], ["s"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(
                 np.array(True))),
             helper.make_node("If", ["t"], ["y" if activation is None else "z"],
                              then_branch=branch, else_branch=branch)]
    if activation:
        nodes.append(helper.make_node("HardSigmoid", ["z"], ["y"], alpha=1 / 6))
    return _model(nodes, {"w": w}, (4, 3)), w


def test_the_float64_copy_computes_the_models_own_arithmetic():
    model, w = _affine()
    x = seeded_inputs(model)["x"]
    proto = as_float64(model)
    assert {t.data_type for t in proto.graph.initializer} == {TensorProto.DOUBLE}
    (got,), ran_with = float64_outputs(model, {"x": x})
    # the constant is the float32 number the model states, computed with in float64
    want = (x.astype(np.float64) @ w.astype(np.float64) + float(np.float32(0.1))) * 2
    assert ran_with == "onnx reference" and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


def test_onnxruntime_runs_the_float64_copy_where_the_evaluator_cannot(monkeypatch):
    def fails(proto, feeds):
        raise NotImplementedError("no such op\nmore")

    monkeypatch.setattr(float64_module, "_evaluate", fails)
    model, w = _affine()
    x = seeded_inputs(model)["x"]
    (got,), ran_with = float64_outputs(model, {"x": x})
    want = (x.astype(np.float64) @ w.astype(np.float64) + float(np.float32(0.1))) * 2
    assert ran_with == "onnxruntime"
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # onnxruntime has no float64 HardSigmoid: neither runs it, and the error says so
    model, _ = _affine(activation=True)
    with pytest.raises(ConversionError) as err:
        float64_outputs(model, {"x": x})
    assert "cannot be run in float64: onnx's reference evaluator: no such op; onnxruntime: " \
        in str(err.value) and "\n" not in str(err.value)
