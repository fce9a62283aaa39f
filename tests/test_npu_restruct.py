"""Restruct passes (NNIE-style): each fires on a real zoo model and keeps its outputs within
1e-5 relative (onnxruntime before / after), and refuses where it must, with its reason."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from npu_helpers import assert_close, model
from paddle_npu.compare import run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.npu import lower, verify
from paddle_npu.npu.pipeline import prepare
from paddle_npu.npu.restruct import PASSES, concat_broadcast, selected
from paddle_npu.npu.rules import Build
from paddle_npu.npu.target import load_target, target_from_dict

NNIE = load_target("nnie")


def _run_pass(onnx_bytes, name, target=NNIE):
    m = prepare(onnx_bytes)
    result = PASSES[name](m, target)
    m.ir_version = max(m.ir_version, 10)
    proto = ir.serde.serialize_model(m)
    onnx.checker.check_model(proto)
    return proto, result


def _same_outputs(before, after, feeds):
    _, want = run_onnx(before, feeds)
    _, got = run_onnx(after.SerializeToString(), feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, f"output {i}")


def _ops(proto):
    return [n.op_type for n in proto.graph.node]


def test_bn_collapse_on_det_head(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("det_head")
    after, res = _run_pass(onnx_bytes, "bn_collapse")
    assert len(res.fired) == 3 and "BatchNormalization" not in _ops(after)
    _same_outputs(onnx_bytes, after, feeds)


def test_bn_collapse_refuses_bn_after_add():
    x = np.ones(4, np.float32)
    m = model([helper.make_node("Add", ["x", "x"], ["s"], name="add"),
               helper.make_node("BatchNormalization", ["s", "g", "b", "m", "v"], ["y"], name="bn")],
              [("x", [1, 4, 2, 2])], [("y", [1, 4, 2, 2])],
              [("g", x), ("b", x * 0.5), ("m", x * 0.1), ("v", x * 2)])
    _, res = _run_pass(m.SerializeToString(), "bn_collapse")
    assert res.fired == []
    assert res.refused == {"bn": "s comes from Add (add), not Conv or Gemm"}


def test_merge_linear_on_lenet_and_face_embed(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("lenet")          # three Linear layers, nothing between
    after, res = _run_pass(onnx_bytes, "merge_linear")
    assert len(res.fired) == 2 and _ops(after).count("Gemm") == 1
    _same_outputs(onnx_bytes, after, feeds)
    onnx_bytes, feeds = zoo_onnx("face_embed")     # FC + BatchNorm1D + PCA
    m = prepare(onnx_bytes)
    PASSES["bn_collapse"](m, NNIE)
    res = PASSES["merge_linear"](m, NNIE)
    assert len(res.fired) == 1, res
    m.ir_version = 10
    after = ir.serde.serialize_model(m)
    assert _ops(after).count("Gemm") == 1
    _same_outputs(onnx_bytes, after, feeds)


def test_merge_linear_refuses_through_relu_and_shared_output():
    w = np.ones((4, 4), np.float32)
    relu = model([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc1"),
                  helper.make_node("Relu", ["h"], ["r"], name="act"),
                  helper.make_node("Gemm", ["r", "w"], ["y"], name="fc2")],
                 [("x", [2, 4])], [("y", [2, 4])], [("w", w)])
    _, res = _run_pass(relu.SerializeToString(), "merge_linear")
    assert res.fired == [] and res.refused == {"fc1": "Relu (act) between it and fc2 is not linear"}
    shared = model([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc1"),
                    helper.make_node("Gemm", ["h", "w"], ["y"], name="fc2")],
                   [("x", [2, 4])], [("y", [2, 4]), ("h", [2, 4])], [("w", w)])
    _, res = _run_pass(shared.SerializeToString(), "merge_linear")
    assert res.fired == [] and res.refused == {
        "fc1": "fc1's output h is also a model output"}


def test_fc_to_conv_on_lenet(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("lenet")
    after, res = _run_pass(onnx_bytes, "fc_to_conv")
    # the first two FCs feed another FC; the last is the model's last op and stays
    assert len(res.fired) == 2
    assert _ops(after).count("Gemm") == 1 and _ops(after).count("Conv") == 4
    _same_outputs(onnx_bytes, after, feeds)
    # on a target whose FCs may feed anything, nothing changes
    after, res = _run_pass(onnx_bytes, "fc_to_conv", load_target("npu256"))
    assert res.fired == [] and _ops(after).count("Gemm") == 3


def test_fc_to_conv_refuses_rank3_input():
    m = model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
               helper.make_node("Relu", ["h"], ["y"], name="act")],
              [("x", [2, 3, 4])], [("y", [2, 3, 4])], [("w", np.eye(4, dtype=np.float32))])
    _, res = _run_pass(m.SerializeToString(), "fc_to_conv")
    assert res.fired == []
    assert res.refused == {"fc": "its input x has rank 3: only [N, K] inputs become a 1x1 Conv"}


def test_l2norm_plus_one_and_plain_on_face_embed(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("face_embed")
    after, res = _run_pass(onnx_bytes, "l2norm")
    assert len(res.fired) == 2, res
    assert "a=1, concat broadcast" in res.fired[0] and "min 1e-12" in res.fired[1]
    ops = _ops(after)
    for gone in ("ReduceSum", "ReduceL2"):
        assert gone not in ops
    assert "Concat" in ops and ops.count("Conv") == 2 + 2      # the sums are 1x1 Convs
    _same_outputs(onnx_bytes, after, feeds)
    # a target that broadcasts divides directly: no Concat
    bcast = target_from_dict({"base": "nnie", "restruct": {"broadcast": True}})
    after, res = _run_pass(onnx_bytes, "l2norm", bcast)
    assert len(res.fired) == 2 and "Concat" not in _ops(after)
    _same_outputs(onnx_bytes, after, feeds)


def test_l2norm_refusals(zoo_onnx):
    onnx_bytes, _ = zoo_onnx("face_embed")
    _, res = _run_pass(onnx_bytes, "l2norm", load_target("npu256"))
    assert res.fired == []
    assert res.refused["elementwise_div_21/Div"] == \
        "target 'npu256''s NPU has no Sqrt: the norm stays as it is (on the CPU)"
    m = model([helper.make_node("ReduceL2", ["x"], ["n"], axes=[0], keepdims=1, name="norm"),
               helper.make_node("Div", ["x", "n"], ["y"], name="div")],
              [("x", [2, 8])], [("y", [2, 8])], opset=15)
    _, res = _run_pass(m.SerializeToString(), "l2norm")
    assert res.refused == {"div": "norm reduces over axes [0], not the feature axis 1"}
    lp = model([helper.make_node("LpNormalization", ["x"], ["y"], p=1, axis=1, name="lp")],
               [("x", [2, 8])], [("y", [2, 8])])
    _, res = _run_pass(lp.SerializeToString(), "l2norm")
    assert res.refused == {"lp": "p=1: only the L2 norm is rebuilt"}


def test_l2norm_lp_normalization_fires():
    lp = model([helper.make_node("LpNormalization", ["x"], ["y"], p=2, axis=1, name="lp")],
               [("x", [3, 40])], [("y", [3, 40])])
    after, res = _run_pass(lp.SerializeToString(), "l2norm")
    assert len(res.fired) == 1 and "LpNormalization" not in _ops(after)
    x = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    _same_outputs(lp.SerializeToString(), after, {"x": x})


@pytest.mark.parametrize("count", [1, 2, 7, 32, 64, 100, 1024, 1030])
def test_concat_broadcast_counts(count):
    g = ir.Graph([], [], nodes=[], opset_imports={"": 17})
    x = ir.Value(name="n", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 1, 1, 1]))
    g.inputs.append(x)
    nodes, out = concat_broadcast(Build(g), x, count, 1, "b", [2, count, 1, 1],
                                  ir.DataType.FLOAT)
    g.extend(nodes)
    assert all(n.op_type == "Concat" and len(n.inputs) <= 32 for n in nodes)
    if count == 1:
        assert out is x
        return
    g.outputs.append(out)
    proto = ir.serde.serialize_model(ir.Model(g, ir_version=10))
    v = np.random.default_rng(0).standard_normal((2, 1, 1, 1)).astype(np.float32)
    _, (got,) = run_onnx(proto.SerializeToString(), {"n": v})
    np.testing.assert_array_equal(got, np.broadcast_to(v, (2, count, 1, 1)))


def test_pass_selection_and_switches():
    assert selected(NNIE) == ["bn_collapse", "merge_linear", "l2norm", "fc_to_conv"]
    assert selected(load_target("npu256")) == ["bn_collapse"]
    assert selected(load_target("npu256"), enable=["fc_to_conv"]) == ["bn_collapse", "fc_to_conv"]
    assert selected(NNIE, disable=["l2norm", "merge_linear"]) == ["bn_collapse", "fc_to_conv"]
    with pytest.raises(ConversionError, match="unknown restruct pass 'pca'"):
        selected(NNIE, enable=["pca"])
    with pytest.raises(ConversionError, match=r"unknown restruct passes \['pca'\]"):
        target_from_dict({"restruct": {"passes": ["pca"]}})


def test_face_embed_lowered_for_nnie(zoo_onnx):
    """All four passes by default on the NNIE preset: the whole model then runs on the NPU
    (norms included) and verifies three ways."""
    onnx_bytes, feeds = zoo_onnx("face_embed")
    lowered, report = lower(onnx_bytes, "nnie")
    fired = {p["pass"]: len(p["fired"]) for p in report.restruct}
    assert fired == {"bn_collapse": 3, "merge_linear": 1, "l2norm": 2, "fc_to_conv": 1}
    assert [s.device for s in report.segments] == ["npu"]
    result = verify(onnx_bytes, lowered, "nnie", feeds=feeds)
    assert result["ok"], result
    # switched off: the BatchNormalization of the FC stays (as Mul + Add), norms go to the CPU
    lowered, report = lower(onnx_bytes, "nnie", disable=["bn_collapse", "l2norm"])
    assert [p["pass"] for p in report.restruct] == ["merge_linear", "fc_to_conv"]
    assert "cpu" in {s.device for s in report.segments}
    assert verify(onnx_bytes, lowered, "nnie", feeds=feeds)["ok"]
