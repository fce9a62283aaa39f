"""Each rewrite rule on a tiny hand-built model (no Paddle): it fires, the graph has the new
shape, and onnxruntime computes the same before and after on the same input; one refusal
each, with its reason."""
import numpy as np
import onnx
from onnx import helper

from npu_helpers import assert_close, model
from paddle_npu.compare import run_onnx
from paddle_npu.npu.passes import FoldBatchNorm, RulePass
from paddle_npu.npu.pipeline import prepare
from paddle_npu.npu.restruct import FcToConv, L2Norm, LpNormToOps, MergeLinear
from paddle_npu.npu.target import load_target
from paddle_npu.onnx_io import to_bytes

NNIE = load_target("nnie")
RNG = np.random.default_rng(0)


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _apply(proto, *rules, restart=False):
    """(result, rewritten model bytes) of rules run over the model."""
    m = prepare(proto)
    result = RulePass(rules[0].name, rules, restart=restart)(m)
    m.ir_version = max(m.ir_version, 10)
    data = to_bytes(m)
    onnx.checker.check_model(onnx.load_from_string(data))
    return result, data


def _ops(data):
    return [n.op_type for n in onnx.load_from_string(data).graph.node]


def _same(before, after, feeds):
    _, want = run_onnx(before.SerializeToString(), feeds)
    _, got = run_onnx(after, feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, f"output {i}")


def test_fold_batchnorm_into_conv():
    c = 3
    proto = model([helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv", pads=[1] * 4),
                   helper.make_node("BatchNormalization", ["h", "g", "beta", "m", "v"], ["y"],
                                    name="bn")],
                  [("x", [1, 2, 5, 5])], [("y", [1, c, 5, 5])],
                  [("w", _weights(c, 2, 3, 3)), ("b", _weights(c)),
                   ("g", _weights(c)), ("beta", _weights(c)), ("m", _weights(c)),
                   ("v", np.abs(_weights(c)) + 0.5)])
    result, after = _apply(proto, FoldBatchNorm())
    assert result.fired == ["conv+bn -> conv"] and result.refused == {}
    assert _ops(after) == ["Conv"]
    _same(proto, after, {"x": _weights(1, 2, 5, 5)})


def test_fold_batchnorm_refuses_a_shared_conv_output():
    c = 2
    proto = model([helper.make_node("Conv", ["x", "w"], ["h"], name="conv"),
                   helper.make_node("BatchNormalization", ["h", "g", "beta", "m", "v"], ["y"],
                                    name="bn"),
                   helper.make_node("Relu", ["h"], ["r"], name="relu")],
                  [("x", [1, c, 3, 3])], [("y", [1, c, 3, 3]), ("r", [1, c, 3, 3])],
                  [("w", _weights(c, c, 1, 1)), ("g", _weights(c)), ("beta", _weights(c)),
                   ("m", _weights(c)), ("v", np.ones(c, np.float32))])
    result, _ = _apply(proto, FoldBatchNorm())
    assert result.fired == []
    assert result.refused == {"bn": "conv's output h is also read elsewhere"}


def test_fold_batchnorm_in_place_only_for_a_weight_one_conv_reads(tmp_path):
    """A Conv's weight that nothing else reads is scaled where it lies (the model holds one
    copy of its weights) and the replaced parameters leave the model at once; a weight two
    Convs share is left as it is for the other."""
    c = 12                                  # weights of >= 1024 elements: arrays of their own
    bn = [("g", _weights(c)), ("beta", _weights(c)), ("m", _weights(c)),
          ("v", np.abs(_weights(c)) + 0.5)]
    proto = model([helper.make_node("Conv", ["x", "w"], ["h"], name="conv", pads=[1] * 4),
                   helper.make_node("BatchNormalization", ["h", "g", "beta", "m", "v"], ["y"],
                                    name="bn"),
                   helper.make_node("Conv", ["y", "ws"], ["h2"], name="conv2", pads=[1] * 4),
                   helper.make_node("BatchNormalization", ["h2", "g", "beta", "m", "v"],
                                    ["y2"], name="bn2"),
                   helper.make_node("Conv", ["y2", "ws"], ["z"], name="conv3", pads=[1] * 4)],
                  [("x", [1, 16, 5, 5])], [("z", [1, c, 5, 5])],
                  [("w", _weights(c, 16, 3, 3)), ("ws", _weights(c, c, 3, 3))] + bn)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    m = prepare(path)
    w = m.graph.initializers["w"].const_value.numpy()
    shared = m.graph.initializers["ws"].const_value.numpy().copy()
    result = RulePass("bn_collapse", [FoldBatchNorm()])(m)
    assert result.fired == ["conv+bn -> conv", "conv2+bn2 -> conv2"]
    assert np.shares_memory(m.graph.initializers["bn.w"].const_value.numpy(), w)
    assert not {"w", "g", "beta", "m", "v"} & set(m.graph.initializers)
    assert m.graph.initializers["ws"].const_value.numpy().flags.writeable
    np.testing.assert_array_equal(m.graph.initializers["ws"].const_value.numpy(), shared)
    m.ir_version = max(m.ir_version, 10)
    _same(proto, to_bytes(m), {"x": _weights(1, 16, 5, 5)})


def test_merge_linear_chains_three_fcs():
    proto = model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1"),
                   helper.make_node("Dropout", ["h1"], ["d"], name="drop"),
                   helper.make_node("Gemm", ["d", "w2", "b2"], ["h2"], name="fc2"),
                   helper.make_node("Gemm", ["h2", "w3"], ["y"], name="fc3", transB=1)],
                  [("x", [2, 6])], [("y", [2, 3])],
                  [("w1", _weights(6, 5)), ("b1", _weights(5)), ("w2", _weights(5, 4)),
                   ("b2", _weights(4)), ("w3", _weights(3, 4))])
    result, after = _apply(proto, MergeLinear(), restart=True)
    assert len(result.fired) == 2 and result.refused == {}
    assert _ops(after) == ["Gemm"]
    _same(proto, after, {"x": _weights(2, 6)})


def test_merge_linear_refuses_through_a_relu():
    proto = model([helper.make_node("Gemm", ["x", "w1"], ["h"], name="fc1"),
                   helper.make_node("Relu", ["h"], ["r"], name="act"),
                   helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2")],
                  [("x", [1, 4])], [("y", [1, 4])],
                  [("w1", _weights(4, 4)), ("w2", _weights(4, 4))])
    result, _ = _apply(proto, MergeLinear(), restart=True)
    assert result.fired == []
    assert result.refused == {"fc1": "Relu (act) between it and fc2 is not linear"}


def test_fc_to_conv_before_a_relu():
    proto = model([helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc"),
                   helper.make_node("Relu", ["h"], ["y"], name="act")],
                  [("x", [2, 6])], [("y", [2, 4])], [("w", _weights(6, 4)), ("b", _weights(4))])
    result, after = _apply(proto, FcToConv(NNIE))
    assert result.fired == ["fc -> fc/conv1x1"] and result.refused == {}
    assert _ops(after) == ["Reshape", "Conv", "Flatten", "Relu"]
    _same(proto, after, {"x": _weights(2, 6)})


def test_fc_to_conv_leaves_an_fc_before_softmax():
    proto = model([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc"),
                   helper.make_node("Softmax", ["h"], ["y"], name="prob")],
                  [("x", [2, 6])], [("y", [2, 4])], [("w", _weights(6, 4))])
    result, after = _apply(proto, FcToConv(NNIE))
    assert result.fired == [] and result.refused == {}
    assert _ops(after) == ["Gemm", "Softmax"]


def test_l2norm_rebuilt_with_concat_broadcast():
    c = 40
    proto = model([helper.make_node("LpNormalization", ["x"], ["y"], name="norm", p=2, axis=1)],
                  [("x", [2, c])], [("y", [2, c])])
    result, after = _apply(proto, L2Norm(NNIE), LpNormToOps(NNIE))     # NNIE: no broadcast
    assert len(result.fired) == 1 and "concat broadcast" in result.fired[0]
    assert "Concat" in _ops(after) and "LpNormalization" not in _ops(after)
    _same(proto, after, {"x": _weights(2, c)})


def test_l2norm_refuses_p1():
    proto = model([helper.make_node("LpNormalization", ["x"], ["y"], name="norm", p=1, axis=1)],
                  [("x", [2, 4])], [("y", [2, 4])])
    result, _ = _apply(proto, L2Norm(NNIE), LpNormToOps(NNIE))
    assert result.fired == []
    assert result.refused == {"norm": "p=1: only the L2 norm is rebuilt"}


def _layer_norm_written_out(eps_name="eps"):
    """stage 1's layer_norm before opset 17: mean, Sub, Pow 2, mean, Add eps, Sqrt, Div,
    Mul scale, Add bias, over the last axis."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], name="mean"),
             helper.make_node("Sub", ["x", "mean"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1], name="var"),
             helper.make_node("Add", ["var", eps_name], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
             helper.make_node("Div", ["d", "std"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "s"], ["ns"], name="scale"),
             helper.make_node("Add", ["ns", "b"], ["y"], name="bias")]
    return model(nodes, [("x", [2, 3, 8])] + ([("e", [1])] if eps_name == "e" else []),
                 [("y", [2, 3, 8])], [("two", np.float32(2)), ("eps", np.float32(1e-5)),
                                      ("s", _weights(8)), ("b", _weights(8))], opset=11)


def test_fuse_layer_norm():
    from paddle_npu.npu.emulation.functions import attach_functions
    from paddle_npu.npu.passes import FuseLayerNorm

    proto = _layer_norm_written_out()
    m = prepare(proto)
    result = RulePass("layernorm", [FuseLayerNorm()])(m)
    assert result.fired == ["mean+sub+pow+var+add_eps+sqrt+div+scale+bias -> div/layer_norm"]
    attach_functions(m)
    m.ir_version = max(m.ir_version, 10)
    after = to_bytes(m)
    assert _ops(after) == ["LayerNorm"]
    _same(proto, after, {"x": _weights(2, 3, 8)})
    # epsilon computed at run time: refused, with the reason
    result, after = _apply(_layer_norm_written_out("e"), FuseLayerNorm())
    assert result.fired == [] and result.refused == {"div": "epsilon is not a constant number"}


def test_merge_dim_transforms_moves_once():
    """A transpose and the reshape after it (heads merged back; a channel shuffle's last two
    steps) -> one DimTransform; a transpose also read elsewhere stays as it is."""
    from npu_helpers import three_way
    from paddle_npu.npu import lower

    shape = helper.make_node("Constant", [], ["to"], name="to", value=onnx.numpy_helper.from_array(
        np.array([1, 6, 2, 2], np.int64)))
    groups = helper.make_node("Constant", [], ["g"], name="g", value=onnx.numpy_helper.from_array(
        np.array([1, 2, 3, 2, 2], np.int64)))
    nodes = [shape, groups, helper.make_node("Reshape", ["x", "g"], ["a"], name="split_groups"),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4], name="swap"),
             helper.make_node("Reshape", ["t", "to"], ["y"], name="merge_groups")]
    shuffle = model(nodes, [("x", [1, 6, 2, 2])], [("y", [1, 6, 2, 2])])
    lowered, _ = lower(shuffle)
    kinds = [n.op_type for n in lowered.graph]
    assert kinds == ["DimTransform", "DimTransform"]
    x = _weights(1, 6, 2, 2)
    want, got, ref, r = three_way(shuffle, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    np.testing.assert_array_equal(ref[0], want[0])
    assert r.array.moved_elements == 2 * x.size            # was three moves
    # the transposed tensor is also an output: both moves stay
    shuffle.graph.output.append(helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None))
    lowered, _ = lower(shuffle)
    assert [n.op_type for n in lowered.graph] == ["DimTransform"] * 3
