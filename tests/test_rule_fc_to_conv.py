"""FcToConv: an FC that feeds ops the target does not allow after an FC -> Reshape, 1x1
Conv, Flatten."""
import numpy as np
from onnx import helper

from npu_helpers import model, readers, rewritten, same_numbers
from paddle_npu.npu.passes.restruct import FcToConv
from paddle_npu.npu.chip.target import load_target

RNG = np.random.default_rng(0)
NNIE = load_target("nnie")


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_an_fc_before_a_relu():
    proto = model([helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc"),
                   helper.make_node("Relu", ["h"], ["y"], name="act")],
                  [("x", [2, 6])], [("y", [2, 4])], [("w", _weights(6, 4)), ("b", _weights(4))])
    result, m = rewritten(proto, FcToConv(NNIE))
    assert len(result.fired) == 1 and result.refused == {}
    to4, conv, flat, act = m.graph
    assert [n.op_type for n in (to4, conv, flat)] == ["Reshape", "Conv", "Flatten"]
    assert conv.name == "fc/conv1x1" and len(conv.inputs) == 3
    assert to4.inputs[0].name == "x" and readers(flat.outputs[0]) == ["act"]
    assert flat.outputs[0].name == "h" and not {"w", "b"} & set(m.graph.initializers)
    same_numbers(proto, m, {"x": _weights(2, 6)})


def test_a_matmul_and_its_bias_add():
    proto = model([helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
                   helper.make_node("Add", ["mm", "b"], ["h"], name="bias"),
                   helper.make_node("Relu", ["h"], ["y"], name="act")],
                  [("x", [2, 6])], [("y", [2, 4])], [("w", _weights(6, 4)), ("b", _weights(4))])
    result, m = rewritten(proto, FcToConv(NNIE))
    assert len(result.fired) == 1
    assert [n.op_type for n in m.graph] == ["Reshape", "Conv", "Flatten", "Relu"]
    assert len(list(m.graph)[1].inputs) == 3                 # the bias in the Conv
    same_numbers(proto, m, {"x": _weights(2, 6)})


def test_an_fc_before_softmax_or_last_stays():
    for follower in ("Softmax", None):
        nodes = [helper.make_node("Gemm", ["x", "w"], ["h" if follower else "y"], name="fc")]
        if follower:
            nodes.append(helper.make_node(follower, ["h"], ["y"], name="next"))
        proto = model(nodes, [("x", [2, 6])], [("y", [2, 4])], [("w", _weights(6, 4))])
        result, m = rewritten(proto, FcToConv(NNIE))
        assert result.fired == [] and result.refused == {}
        assert [n.name for n in m.graph] == [n.name for n in nodes]


def test_a_rank_3_input_is_refused():
    proto = model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                   helper.make_node("Relu", ["h"], ["y"], name="act")],
                  [("x", [2, 3, 4])], [("y", [2, 3, 4])], [("w", np.eye(4, dtype=np.float32))])
    result, m = rewritten(proto, FcToConv(NNIE))
    assert result.fired == [] and list(result.refused) == ["fc"]
    assert [n.op_type for n in m.graph] == ["MatMul", "Relu"]


def test_on_lenet(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("lenet")
    result, m = rewritten(onnx_bytes, FcToConv(NNIE))
    # the first two FCs feed another FC; the last is the model's last op and stays
    assert len(result.fired) == 2
    ops = [n.op_type for n in m.graph]
    assert ops.count("Gemm") == 1 and ops.count("Conv") == 4
    same_numbers(onnx_bytes, m, feeds)
    # on a target whose FCs may feed anything, nothing changes
    result, m = rewritten(onnx_bytes, FcToConv(load_target("npu256")))
    assert result.fired == [] and [n.op_type for n in m.graph].count("Gemm") == 3
