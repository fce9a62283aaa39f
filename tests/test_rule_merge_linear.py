"""MergeLinear: FC -> (Identity / Dropout)* -> FC with nothing non-linear between -> one FC."""
import numpy as np
from onnx import helper

from npu_helpers import model, rewritten, same_numbers
from paddle_npu.npu import graph as g
from paddle_npu.npu.pipeline import prepare
from paddle_npu.npu.passes.restruct import PASSES, MergeLinear
from paddle_npu.npu.chip.target import load_target

RNG = np.random.default_rng(0)
NNIE = load_target("nnie")


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _merge(proto):
    return rewritten(proto, MergeLinear(), restart=True)


def test_chains_three_fcs_into_one():
    proto = model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1"),
                   helper.make_node("Dropout", ["h1"], ["d"], name="drop"),
                   helper.make_node("Gemm", ["d", "w2", "b2"], ["h2"], name="fc2"),
                   helper.make_node("Gemm", ["h2", "w3"], ["y"], name="fc3", transB=1)],
                  [("x", [2, 6])], [("y", [2, 3])],
                  [("w1", _weights(6, 5)), ("b1", _weights(5)), ("w2", _weights(5, 4)),
                   ("b2", _weights(4)), ("w3", _weights(3, 4))])
    result, m = _merge(proto)
    assert len(result.fired) == 2 and result.refused == {}
    (fc,) = m.graph
    assert fc.op_type == "Gemm" and fc.inputs[0].name == "x" and fc.outputs[0].name == "y"
    assert not {"w1", "b1", "w2", "b2", "w3"} & set(m.graph.initializers)
    same_numbers(proto, m, {"x": _weights(2, 6)})


def test_matmuls_with_bias_adds_on_rank_3():
    proto = model([helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
                   helper.make_node("Add", ["b1", "m1"], ["h1"], name="bias1"),
                   helper.make_node("Identity", ["h1"], ["i"], name="same"),
                   helper.make_node("MatMul", ["i", "w2"], ["m2"], name="mm2"),
                   helper.make_node("Add", ["m2", "b2"], ["y"], name="bias2")],
                  [("x", [2, 3, 6])], [("y", [2, 3, 4])],
                  [("w1", _weights(6, 5)), ("b1", _weights(5)), ("w2", _weights(5, 4)),
                   ("b2", _weights(4))])
    result, m = _merge(proto)
    assert len(result.fired) == 1
    mm, add = m.graph
    assert (mm.op_type, mm.name, add.op_type, add.name) == \
        ("MatMul", "mm1_1", "Add", "mm1/bias")
    assert add.inputs[0] is mm.outputs[0] and add.outputs[0].name == "y"
    assert add.metadata_props["paddle_npu.merged"] == "mm1,bias1,mm2,bias2"
    same_numbers(proto, m, {"x": _weights(2, 3, 6)})


def test_a_relu_between_is_refused():
    proto = model([helper.make_node("Gemm", ["x", "w1"], ["h"], name="fc1"),
                   helper.make_node("Relu", ["h"], ["r"], name="act"),
                   helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2")],
                  [("x", [1, 4])], [("y", [1, 4])],
                  [("w1", _weights(4, 4)), ("w2", _weights(4, 4))])
    result, m = _merge(proto)
    assert result.fired == [] and list(result.refused) == ["fc1"]
    assert [n.name for n in m.graph] == ["fc1", "act", "fc2"]


def test_an_output_read_elsewhere_is_refused():
    w = np.ones((4, 4), np.float32)
    for outputs in ([("y", [2, 4]), ("h", [2, 4])],           # also a model output
                    [("y", [2, 4]), ("r", [2, 4])]):         # also read by a Relu
        proto = model([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc1"),
                       helper.make_node("Gemm", ["h", "w"], ["y"], name="fc2"),
                       helper.make_node("Relu", ["h"], ["r"], name="act")],
                      [("x", [2, 4])], outputs, [("w", w)])
        result, m = _merge(proto)
        assert result.fired == [] and list(result.refused) == ["fc1"]
        assert [n.name for n in m.graph][:2] == ["fc1", "fc2"]


def test_fcs_marked_differently_are_refused():
    proto = model([helper.make_node("Gemm", ["x", "w1"], ["h"], name="fc1"),
                   helper.make_node("Gemm", ["h", "w2"], ["y"], name="fc2")],
                  [("x", [1, 4])], [("y", [1, 4])],
                  [("w1", _weights(4, 4)), ("w2", _weights(4, 4))])
    m = prepare(proto)
    g.set_mark(next(iter(m.graph)), "cpu", "test")
    result = PASSES["merge_linear"](m, NNIE)
    assert result.fired == [] and list(result.refused) == ["fc1"]


def test_on_lenet_and_face_embed(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("lenet")          # three Linear layers, nothing between
    result, m = _merge(onnx_bytes)
    assert len(result.fired) == 2
    assert [n.op_type for n in m.graph].count("Gemm") == 1
    same_numbers(onnx_bytes, m, feeds)
    onnx_bytes, feeds = zoo_onnx("face_embed")     # FC + BatchNorm1D + PCA
    m = prepare(onnx_bytes)
    PASSES["bn_collapse"](m, NNIE)
    result = PASSES["merge_linear"](m, NNIE)
    assert len(result.fired) == 1
    assert [n.op_type for n in m.graph].count("Gemm") == 1
    same_numbers(onnx_bytes, m, feeds)
