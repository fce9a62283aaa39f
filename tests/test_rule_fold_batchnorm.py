"""FoldBatchNorm: a BatchNormalization folded into the Conv / Gemm feeding only it."""
import numpy as np
import onnx
from onnx import helper

from npu_helpers import model, readers, rewritten, same_numbers
from paddle_npu.npu import graph as g
from paddle_npu.npu.passes.common import FoldBatchNorm
from paddle_npu.npu.passes.framework import RulePass
from paddle_npu.npu.pipeline import prepare

RNG = np.random.default_rng(0)


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _bn(c, suffix=""):
    return [(f"g{suffix}", _weights(c)), (f"beta{suffix}", _weights(c)),
            (f"m{suffix}", _weights(c)), (f"v{suffix}", np.abs(_weights(c)) + 0.5)]


def _batchnorm(x, y, name="bn", suffix=""):
    return helper.make_node("BatchNormalization",
                            [x] + [f"{p}{suffix}" for p in ("g", "beta", "m", "v")], [y],
                            name=name)


def test_folds_into_conv_keeping_its_name_marks_and_output():
    c = 3
    conv = helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv", pads=[1] * 4)
    conv.metadata_props.add(key=g.PRECISION, value="16")
    proto = model([conv, _batchnorm("h", "y")], [("x", [1, 2, 5, 5])], [("y", [1, c, 5, 5])],
                  [("w", _weights(c, 2, 3, 3)), ("b", _weights(c))] + _bn(c))
    result, m = rewritten(proto, FoldBatchNorm())
    assert len(result.fired) == 1 and result.refused == {}
    (node,) = m.graph
    assert (node.op_type, node.name) == ("Conv", "conv")
    assert [v.name for v in node.inputs] == ["x", "bn.w", "bn.b"]
    assert node.outputs[0].name == "y" and m.graph.outputs[0] is node.outputs[0]
    assert g.precision(node) == 16 and node.metadata_props["paddle_npu.folded"] == "bn"
    assert list(node.attributes.get_ints("pads")) == [1] * 4
    assert set(m.graph.initializers) == {"bn.w", "bn.b"}      # the replaced ones dropped
    same_numbers(proto, m, {"x": _weights(1, 2, 5, 5)})


def test_folds_into_a_gemm_with_trans_b_and_beta():
    proto = model([helper.make_node("Gemm", ["x", "w", "c"], ["h"], name="fc", transB=1,
                                    beta=0.5),
                   _batchnorm("h", "y"),
                   helper.make_node("Relu", ["y"], ["r"], name="act")],
                  [("x", [2, 6])], [("r", [2, 4])],
                  [("w", _weights(4, 6)), ("c", _weights(4))] + _bn(4))
    result, m = rewritten(proto, FoldBatchNorm())
    assert len(result.fired) == 1
    fc, act = m.graph
    assert (fc.op_type, fc.name, act.name) == ("Gemm", "fc", "act")
    assert "beta" not in fc.attributes and fc.attributes.get_int("transB") == 1
    assert readers(fc.outputs[0]) == ["act"] and fc.outputs[0].name == "y"
    same_numbers(proto, m, {"x": _weights(2, 6)})


def test_a_conv_output_read_elsewhere_is_refused():
    c = 2
    proto = model([helper.make_node("Conv", ["x", "w"], ["h"], name="conv"),
                   _batchnorm("h", "y"),
                   helper.make_node("Relu", ["h"], ["r"], name="relu")],
                  [("x", [1, c, 3, 3])], [("y", [1, c, 3, 3]), ("r", [1, c, 3, 3])],
                  [("w", _weights(c, c, 1, 1))] + _bn(c))
    result, m = rewritten(proto, FoldBatchNorm())
    assert result.fired == [] and list(result.refused) == ["bn"]
    assert [n.name for n in m.graph] == ["conv", "bn", "relu"]


def test_a_batchnorm_after_an_add_is_refused():
    proto = model([helper.make_node("Add", ["x", "x"], ["s"], name="add"), _batchnorm("s", "y")],
                  [("x", [1, 4, 2, 2])], [("y", [1, 4, 2, 2])], _bn(4))
    result, m = rewritten(proto, FoldBatchNorm())
    assert result.fired == [] and list(result.refused) == ["bn"]
    assert [n.op_type for n in m.graph] == ["Add", "BatchNormalization"]


def test_weight_scaled_in_place_only_when_one_conv_reads_it(tmp_path):
    """A Conv's weight that nothing else reads is scaled where it lies (the model holds one
    copy of its weights); a weight two Convs share is left as it is for the other."""
    c = 12                                  # weights of >= 1024 elements: arrays of their own
    proto = model([helper.make_node("Conv", ["x", "w"], ["h"], name="conv", pads=[1] * 4),
                   _batchnorm("h", "y"),
                   helper.make_node("Conv", ["y", "ws"], ["h2"], name="conv2", pads=[1] * 4),
                   _batchnorm("h2", "y2", "bn2"),
                   helper.make_node("Conv", ["y2", "ws"], ["z"], name="conv3", pads=[1] * 4)],
                  [("x", [1, 16, 5, 5])], [("z", [1, c, 5, 5])],
                  [("w", _weights(c, 16, 3, 3)), ("ws", _weights(c, c, 3, 3))] + _bn(c))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    m = prepare(path)
    w = m.graph.initializers["w"].const_value.numpy()
    shared = m.graph.initializers["ws"].const_value.numpy().copy()
    result = RulePass("bn_collapse", [FoldBatchNorm()])(m)
    assert len(result.fired) == 2
    assert np.shares_memory(m.graph.initializers["bn.w"].const_value.numpy(), w)
    assert not {"w", "g", "beta", "m", "v"} & set(m.graph.initializers)
    assert m.graph.initializers["ws"].const_value.numpy().flags.writeable
    np.testing.assert_array_equal(m.graph.initializers["ws"].const_value.numpy(), shared)
    same_numbers(proto, m, {"x": _weights(1, 16, 5, 5)})


def test_on_det_head(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("det_head")
    result, m = rewritten(onnx_bytes, FoldBatchNorm())
    assert len(result.fired) == 3 and result.refused == {}
    assert "BatchNormalization" not in {n.op_type for n in m.graph}
    same_numbers(onnx_bytes, m, feeds)
