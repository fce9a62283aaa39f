"""Reductions, Softmax and layer normalisation as NPU primitives on the vector unit: ReduceSum
/ ReduceMean / ReduceMax / ReduceMin -> Reduce, Softmax -> Reduce (max), Sub, Lut (exp),
Reduce (sum), Div, LayerNormalization and the formula exporters write out for it ->
LayerNorm. Tiny models built with onnx.helper, lowered on npu256, run three ways
(onnxruntime before, onnxruntime on the function bodies after, the NumPy reference), with
the elements the reference counts and the refusals."""
import numpy as np
import pytest
from onnx import helper

from npu_helpers import assert_close, checked, model, npu_ops, op_types, three_way
from paddle_npu.npu import lower

RNG = np.random.default_rng(0)
SHAPE = [2, 3, 4, 5]


def _x():
    return RNG.standard_normal(SHAPE).astype(np.float32) * 3


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("opset, keepdims", [(17, 1), (17, 0), (18, 1)])
def test_reduction_lowers_to_reduce(op, opset, keepdims):
    """Axes as the attribute (opset 17 but ReduceSum) or as an input (ReduceSum, opset 18)."""
    as_input = op == "ReduceSum" or opset >= 18
    nodes = [helper.make_node(op, ["x", "axes"] if as_input else ["x"], ["y"], name="reduce",
                              keepdims=keepdims, **({} if as_input else {"axes": [1, -1]}))]
    inits = [("axes", np.array([1, -1], np.int64))] if as_input else []
    m = model(nodes, [("x", SHAPE)], [("y", None)], inits, opset=opset)
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"Reduce"} and ("", op) not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _x()
    want, got, ref, r = three_way(m, lowered, {"x": x}, "npu256")
    assert got[0].shape == want[0].shape == ((2, 1, 4, 1) if keepdims else (2, 4))
    assert_close(got[0], want[0], f"{op} onnxruntime")
    assert_close(ref[0], want[0], f"{op} reference")
    assert r.array.vector_elements == x.size          # every element read once


def test_softmax_is_max_exp_sum_scale():
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=2, name="softmax")],
              [("x", SHAPE)], [("y", SHAPE)])
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"Reduce", "Lut"} and ("", "Softmax") not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _x() * 5                                       # large logits: the max keeps exp finite
    want, got, ref, r = three_way(m, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.lut_elements == x.size and r.array.vector_elements == 2 * x.size


@pytest.mark.parametrize("axis", [-1, 2])
def test_layer_normalization_lowers_to_layer_norm(axis):
    scale = RNG.standard_normal(SHAPE[2 if axis == 2 else 3:]).astype(np.float32)
    bias = RNG.standard_normal(scale.shape).astype(np.float32)
    m = model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis,
                                epsilon=1e-3, name="ln")],
              [("x", SHAPE)], [("y", SHAPE)], [("s", scale), ("b", bias)])
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"LayerNorm"}
    x = _x() + 2
    want, got, ref, r = three_way(m, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.vector_elements == 3 * x.size      # mean, variance, normalisation


def _written_out_layer_norm(square="Pow", with_affine=True):
    """layer_norm as stage 1 writes it before opset 17 (paddle_npu/mappers/nn.py)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], name="mean"),
             helper.make_node("Sub", ["x", "mean"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="pow") if square == "Pow" else
             helper.make_node("Mul", ["d", "d"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1], name="var"),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
             helper.make_node("Div", ["d", "std"], ["n"], name="div")]
    if with_affine:
        nodes += [helper.make_node("Mul", ["n", "s"], ["ns"], name="scale"),
                  helper.make_node("Add", ["ns", "b"], ["y"], name="bias")]
    else:
        nodes += [helper.make_node("Relu", ["n"], ["y"], name="after")]
    inits = [("two", np.float32(2)), ("eps", np.float32(1e-5)),
             ("s", RNG.standard_normal(5).astype(np.float32)),
             ("b", RNG.standard_normal(5).astype(np.float32))]
    return model(nodes, [("x", SHAPE)], [("y", SHAPE)], inits if with_affine else inits[:2],
                 opset=11)


@pytest.mark.parametrize("square, with_affine", [("Pow", True), ("Mul", False)])
def test_written_out_layer_norm_is_fused_and_runs_as_one(square, with_affine):
    m = _written_out_layer_norm(square, with_affine)
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"LayerNorm"}
    assert {t for d, t in op_types(lowered) if d == ""} == (set() if with_affine else {"Relu"})
    x = _x() - 1
    want, got, ref, r = three_way(m, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


def test_refusals_name_why():
    # the mean is read elsewhere: no fusion, the parts lower one by one
    m = _written_out_layer_norm()
    m.graph.output.append(helper.make_tensor_value_info("mean", 1, None))
    lowered, report = lower(m)
    assert "LayerNorm" not in npu_ops(lowered) and "Reduce" in npu_ops(lowered)
    # a target without the primitives keeps the plain ops, with the reason
    sm = model([helper.make_node("Softmax", ["x"], ["y"], name="softmax"),
                helper.make_node("ReduceMean", ["y"], ["z"], axes=[1], name="mean")],
               [("x", [2, 6])], [("z", None)])
    lowered, report = lower(sm, "nnie")
    assert report.refusals == {"softmax": "Softmax: the target has no Reduce",
                               "mean": "ReduceMean: the target's vector unit does not run "
                                       "ReduceMean"}
    assert ("", "Softmax") in op_types(lowered)
    # a reduction over an axis of open size stays as it is
    open_axis = model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum")],
                      [("x", [2, "n"])], [("y", None)], [("axes", np.array([1], np.int64))])
    _, report = lower(open_axis)
    assert report.refusals["sum"] == "ReduceSum: the reduced axes have no fixed size"
