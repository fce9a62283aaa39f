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


# (op, attributes, inputs, opset): nodes folded in NumPy, each checked against onnxruntime
_FOLD_CASES = [
    ("Reshape", {}, [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array([0, -1, 2])], 13),
    ("Reshape", {"allowzero": 1}, [np.zeros((0, 3), np.float32), np.array([3, 0])], 14),
    ("Unsqueeze", {"axes": [0, -1]}, [np.array(7, np.int64)], 9),
    ("Unsqueeze", {}, [np.ones((2, 3), np.float32), np.array([-1, 1])], 13),
    ("Squeeze", {"axes": [1]}, [np.ones((2, 1, 3, 1), np.float32)], 11),
    ("Squeeze", {}, [np.ones((2, 1, 3, 1), np.float32)], 13),
    ("Squeeze", {}, [np.ones((2, 1, 3, 1), np.float32), np.array([-1])], 13),
    ("Concat", {"axis": -1}, [np.ones((2, 1), np.int64), np.zeros((2, 3), np.int64)], 13),
    ("Gather", {"axis": 1}, [np.arange(12, dtype=np.int64).reshape(3, 4), np.array([[-1, 0]])], 13),
    ("Gather", {}, [np.arange(4, dtype=np.int64), np.array(-2)], 13),
    ("Expand", {}, [np.arange(3, dtype=np.float32).reshape(3, 1), np.array([2, 1, 4])], 13),
    ("Cast", {"to": TensorProto.INT32}, [np.array([-1.7, 2.5, 3.9], np.float32)], 13),
    ("Cast", {"to": TensorProto.BOOL}, [np.array([0.0, -0.5, 2.0], np.float32)], 13),
    ("Add", {}, [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([10], np.int64)], 13),
    ("Sub", {}, [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([10], np.int64)], 13),
    ("Mul", {}, [np.arange(6, dtype=np.int32).reshape(2, 3), np.array([-3], np.int32)], 13),
    ("Less", {}, [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([2, 0, 9], np.int64)], 13),
    ("Range", {}, [np.array(5, np.int64), np.array(-3, np.int64), np.array(-2, np.int64)], 13),
    ("Range", {}, [np.array(0, np.int32), np.array(7, np.int32), np.array(3, np.int32)], 13),
]


def test_numpy_folds_agree_with_onnxruntime():
    from paddle_npu.optimize import _NUMPY_FOLDS, _evaluate
    assert {case[0] for case in _FOLD_CASES} | {"Identity"} == set(_NUMPY_FOLDS)
    for op, attrs, inputs, opset in _FOLD_CASES:
        names = [f"i{k}" for k in range(len(inputs))]
        node = helper.make_node(op, names, ["y"], **attrs)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype),
                                                        x.shape) for n, x in zip(names, inputs)],
            [onnx.ValueInfoProto(name="y")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        _, (want,) = run_onnx(proto.SerializeToString(), dict(zip(names, inputs)))
        ir_node = ir.serde.deserialize_node(node)
        assert _NUMPY_FOLDS[op](inputs, ir_node, opset) is not None, (op, opset)   # no fallback
        got = _evaluate(ir_node, inputs, opset)
        assert got is not None, (op, opset)
        assert got[0].dtype == want.dtype and got[0].shape == want.shape, (op, opset, got[0], want)
        np.testing.assert_array_equal(got[0], want)


def test_pre_opset13_unsqueeze_of_a_constant_folds():
    """onnx.reference's Unsqueeze cannot run opset 9's attribute form; the NumPy fold can."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])
    nodes = [helper.make_node("Unsqueeze", ["six"], ["s1"], axes=[0]),
             helper.make_node("Concat", ["one", "s1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = {"six": np.array(6, np.int64), "one": np.array([1], np.int64)}
    ops, _ = _before_after(_model(nodes, [x], [y], inits, opset=9),
                           {"x": RNG.randn(1, 6).astype(np.float32)})
    assert ops == ["Reshape"]


def _types_and_shapes(model):
    """{value name: (type, shape)} over every graph of an ir.Model, sub-graphs included."""
    out = {}
    for graph in model.graphs():
        for v in (*graph.inputs, *(o for n in graph for o in n.outputs)):
            out[v.name] = (str(v.type), str(v.shape))
    return out


def test_infer_shapes_sets_what_onnx_irs_pass_sets_in_graph_and_branches():
    """Our merge of onnx's inferred value infos (no whole-model deserialization) against
    onnx_ir's ShapeInferencePass: the same types and shapes on every value, an If's branches'
    own included, and the branches' values do get shapes."""
    from onnx_ir.passes.common import ShapeInferencePass

    from paddle_npu.onnx_io import infer_shapes
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)

    def branch(name, op):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)
        return helper.make_graph([helper.make_node(op, ["r"], [f"{name}_mid"]),
                                  helper.make_node("Relu", [f"{name}_mid"], [f"{name}_out"])],
                                 name, [], [out])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Neg"),
                              else_branch=branch("else", "Abs"))]
    proto = _model(nodes, [x, c], [y], {"shape": np.array([0, 48], np.int64)})
    ours, theirs = ir.serde.deserialize_model(proto), ir.serde.deserialize_model(proto)
    assert infer_shapes(ours)
    ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(theirs)
    assert _types_and_shapes(ours) == _types_and_shapes(theirs)
    assert _types_and_shapes(ours)["then_mid"] == ("FLOAT", "[N,48]")
    assert not infer_shapes(ours)       # nothing left to change


def test_a_shape_known_only_after_folding_folds_in_a_second_round(monkeypatch):
    """Reshape's target is Neg of a constant (onnx's data propagation does not see through
    Neg): its output's shape is known only once the Neg folds, and then its Shape folds too.
    Where no Shape is left and the folded constants' readers have shapes, there is no
    second round of shape inference."""
    import paddle_npu.optimize as optimize_module
    calls = []
    real = optimize_module.infer_shapes
    monkeypatch.setattr(optimize_module, "infer_shapes",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Neg", ["minus_shape"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Shape", ["r"], ["y"]),
             helper.make_node("Relu", ["r"], ["z"])]
    inits = {"minus_shape": np.array([-2, -6], np.int64)}
    feeds = {"x": RNG.randn(3, 4).astype(np.float32)}
    ops, _ = _before_after(_model(nodes, [x], [y, z], inits), feeds)
    assert ops == ["Reshape", "Relu"] and len(calls) == 2
    calls.clear()
    nodes = [helper.make_node("Neg", ["minus_bias"], ["bias"]),
             helper.make_node("Add", ["x", "bias"], ["z"])]
    inits = {"minus_bias": RNG.randn(4).astype(np.float32)}
    ops, _ = _before_after(_model(nodes, [x], [z], inits), feeds)
    assert ops == ["Add"] and len(calls) == 1
