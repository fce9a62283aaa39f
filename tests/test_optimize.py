"""Graph clean-up rewrites: each checked numerically before/after in onnxruntime."""
import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.compare import run_onnx
from paddle_npu.optimize import optimize

RNG = np.random.RandomState(0)


def _model(nodes, inputs, outputs, inits, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _before_after(proto, feeds):
    _, before = run_onnx(proto.SerializeToString(), feeds)
    model = ir.serde.deserialize_model(proto)
    optimize(model)
    out = ir.serde.serialize_model(model)
    onnx.checker.check_model(out, full_check=True)
    _, after = run_onnx(out.SerializeToString(), feeds)
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return [n.op_type for n in out.graph.node], out


def test_conv_bias_add_fuses_into_conv():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = {"w": RNG.randn(4, 3, 3, 3).astype(np.float32),
             "b": RNG.randn(1, 4, 1, 1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "b"], ["y"])]
    ops, out = _before_after(_model(nodes, [x], [y], inits), {"x": RNG.randn(2, 3, 8, 8).astype(np.float32)})
    assert ops == ["Conv"] and out.graph.output[0].name == "y"


def test_conv_bias_not_fused_when_conv_output_is_also_used():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "c")]
    inits = {"w": RNG.randn(4, 3, 1, 1).astype(np.float32), "b": RNG.randn(4, 1, 1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "b"], ["y"])]
    ops, _ = _before_after(_model(nodes, [x], outs, inits), {"x": RNG.randn(1, 3, 8, 8).astype(np.float32)})
    assert ops == ["Conv", "Add"]


def test_2d_matmul_bias_becomes_gemm_but_3d_does_not():
    x2 = helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["N", 6])
    x3 = helper.make_tensor_value_info("x3", TensorProto.FLOAT, ["N", 2, 6])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y2", "y3")]
    inits = {"w": RNG.randn(6, 5).astype(np.float32), "b": RNG.randn(5).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x2", "w"], ["m2"]), helper.make_node("Add", ["m2", "b"], ["y2"]),
             helper.make_node("MatMul", ["x3", "w"], ["m3"]), helper.make_node("Add", ["b", "m3"], ["y3"])]
    ops, _ = _before_after(_model(nodes, [x2, x3], outs, inits),
                           {"x2": RNG.randn(3, 6).astype(np.float32), "x3": RNG.randn(3, 2, 6).astype(np.float32)})
    assert sorted(ops) == ["Add", "Gemm", "MatMul"]


def test_static_shape_subgraph_folds_and_identities_vanish():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = {"idx": np.array([1, 2], np.int64), "m1": np.array([-1], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["hw"]),
             helper.make_node("Concat", ["m1", "hw"], ["shape"], axis=0),
             helper.make_node("Identity", ["x"], ["x1"]),
             helper.make_node("Identity", ["x1"], ["x2"]),
             helper.make_node("Reshape", ["x2", "shape"], ["y"])]
    ops, _ = _before_after(_model(nodes, [x], [y], inits), {"x": RNG.randn(2, 3, 4).astype(np.float32)})
    assert ops == ["Reshape"]


def test_dynamic_shape_subgraph_is_kept():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "M"])
    inits = {"i0": np.array([0], np.int64), "m1": np.array([-1], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             helper.make_node("Concat", ["n", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    ops, _ = _before_after(_model(nodes, [x], [y], inits), {"x": RNG.randn(5, 3, 4).astype(np.float32)})
    assert ops == ["Shape", "Gather", "Concat", "Reshape"]
