"""Rewrite rules seen through `lower`: what they make of a model is what the NPU runs.
Each rule on its own: tests/test_rule_<name>.py."""
import numpy as np
import onnx
from onnx import helper

from npu_helpers import assert_close, model, three_way
from paddle_npu.npu import lower


def test_merge_dim_transforms_moves_once():
    """A transpose and the reshape after it (heads merged back; a channel shuffle's last two
    steps) -> one DimTransform; a transpose also read elsewhere stays as it is."""
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
    x = np.random.default_rng(0).standard_normal((1, 6, 2, 2)).astype(np.float32)
    want, got, ref, r = three_way(shuffle, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    np.testing.assert_array_equal(ref[0], want[0])
    assert r.array.moved_elements == 2 * x.size            # was three moves
    # the transposed tensor is also an output: both moves stay
    shuffle.graph.output.append(helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None))
    lowered, _ = lower(shuffle)
    assert [n.op_type for n in lowered.graph] == ["DimTransform"] * 3
