"""The float rule of `verify` in numbers. The model computed in float64 (float64.py) is the
model's own arithmetic without rounding; a correct lowering of a model whose float32 runs
are far from it (a deep chain that amplifies rounding, PP-OCRv4's recogniser) agrees, and a
lowering wrong by a few times the model's own float32 error, or by a dropped epsilon that
stays inside a fixed 1e-5, does not."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.errors import ConversionError
from paddle_npu.npu import lower
from paddle_npu.npu.verification import float64 as float64_module
from paddle_npu.npu.verification.float64 import as_float64, float64_outputs
from paddle_npu.npu.verification.verifier import FACTOR, render, seeded_inputs, verify
from paddle_npu.onnx_io import load_proto


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


@pytest.mark.parametrize("op, attrs", [
    ("Conv", {"group": 1, "pads": [0, 1, 2, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ("Conv", {"group": 2, "pads": [1, 1, 1, 1], "strides": [1, 2]}),
    ("Conv", {"group": 4, "pads": [1, 1, 1, 1]}),                       # depthwise
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 0, 1, 1], "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "ceil_mode": 1}),         # onnx's own
])
def test_the_window_ops_compute_what_onnxs_reference_does(op, attrs):
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 9, 8))
    inits = []
    inputs = ["x"]
    if op == "Conv":
        w = rng.standard_normal((8, 4 // attrs["group"], 3, 3))
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w[:, 0, 0, 0], "b")]
        inputs += ["w", "b"]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "window",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ReferenceEvaluator(model, new_ops=float64_module._window_ops()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def chain(blocks=16, offset=100.0, epsilon=1e-5, wrong_gain=None, seed=1, width=64):
    """`blocks` of MatMul, Add and LayerNormalization on [16, width]: the Add's large common
    offset cancels in the LayerNorm's mean, which amplifies the float32 rounding of the
    values before it (onnxruntime's run of 16 blocks at offset 100 is 1.4e-5 from the
    float64 result). wrong_gain: the last LayerNorm's first gain off by that much
    (relative)."""
    rng = np.random.default_rng(seed)
    nodes, inits, h = [], {}, "x"
    for k in range(blocks):
        gain = np.ones(width, np.float32)
        if wrong_gain is not None and k == blocks - 1:
            gain[0] *= np.float32(1 + wrong_gain)
        inits.update({f"w{k}": (rng.standard_normal((width, width)) /
                                np.sqrt(width)).astype(np.float32),
                      f"b{k}": (offset + 0.1 * rng.standard_normal(width)).astype(np.float32),
                      f"g{k}": gain, f"z{k}": np.zeros(width, np.float32)})
        out = "y" if k == blocks - 1 else f"h{k}"
        nodes += [helper.make_node("MatMul", [h, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]),
                  helper.make_node("LayerNormalization", [f"a{k}", f"g{k}", f"z{k}"], [out],
                                   axis=-1, epsilon=epsilon)]
        h = out
    return _model(nodes, inits, (16, width), (16, width))


def test_a_deep_chain_that_amplifies_rounding_agrees():
    model = chain()
    result = verify(model, lower(model, "npu256")[0], "npu256")
    assert result["ok"] and result["within"] == "float64", render(result)
    (d,) = [o["float64"] for o in result["outputs"]]
    assert d["model"] > 1e-5 and result["worst_rel_diff"] > 1e-5    # past a fixed 1e-5
    assert result["float64"]["worst_ratio"] < FACTOR / 2


def test_a_lowering_off_by_a_few_times_the_float32_error_disagrees():
    """One gain of the deep chain's last LayerNorm off by 4e-4 in the lowered model: the
    outputs move by about 9x the model's own float32 error."""
    model = chain()
    wrong = lower(chain(wrong_gain=4e-4), "npu256")[0]
    result = verify(model, wrong, "npu256")
    assert not result["ok"] and result["within"] is None
    assert FACTOR < result["float64"]["worst_ratio"] < 5 * FACTOR
    assert "DISAGREES" in render(result)


def test_a_dropped_epsilon_disagrees_though_within_a_fixed_1e_5():
    """LayerNorm with its 1e-5 epsilon dropped: 7.6e-6 from the model, which a fixed 1e-5
    tolerance accepted; 28x the model's own float32 error (2.7e-7)."""
    model = chain(blocks=1, offset=0.0)
    feeds = seeded_inputs(model)
    result = verify(model, lower(model, "npu256")[0], "npu256", feeds=feeds)
    assert result["ok"], render(result)
    wrong = lower(chain(blocks=1, offset=0.0, epsilon=0.0), "npu256")[0]
    result = verify(model, wrong, "npu256", feeds=feeds)
    assert result["worst_rel_diff"] < 1e-5
    assert not result["ok"] and result["float64"]["worst_ratio"] > FACTOR, render(result)


@pytest.fixture(scope="module")
def recogniser(zoo_onnx):
    """PP-OCRv4's mobile recogniser (legacy export, 48x320), lowered at that size."""
    onnx_bytes, _ = zoo_onnx("ppocrv4_rec_mobile")
    shape = {"x": [1, 3, 48, 320]}
    return onnx_bytes, shape, load_proto(lower(onnx_bytes, "npu256", input_shape=shape)[0])


def test_the_ocr_recogniser_agrees(recogniser):
    onnx_bytes, shape, lowered = recogniser
    result = verify(onnx_bytes, lowered, "npu256", input_shape=shape)
    assert result["ok"] and result["within"] == "float64", render(result)
    assert result["float64"]["worst_ratio"] < FACTOR / 2


def test_the_ocr_recogniser_with_one_weight_off_disagrees(recogniser):
    """The largest weight of its first convolution off by 2.5e-5 (relative): about 8x the
    model's own float32 error (1e-5) at the output."""
    onnx_bytes, shape, lowered = recogniser
    wrong = type(lowered)()
    wrong.CopyFrom(lowered)
    first = next(n for n in wrong.graph.node if n.op_type == "VMM")
    weight = next(t for t in wrong.graph.initializer if t.name == first.input[1])
    w = numpy_helper.to_array(weight).copy()
    w.flat[np.argmax(np.abs(w))] *= 1 + 2.5e-5
    weight.CopyFrom(numpy_helper.from_array(w, weight.name))
    result = verify(onnx_bytes, wrong, "npu256", input_shape=shape)
    assert not result["ok"], render(result)
    assert FACTOR < result["float64"]["worst_ratio"] < 5 * FACTOR
