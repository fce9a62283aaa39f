"""The NumPy reference's own versions of standard ops (npu/verification/reference.py)
against onnxruntime."""
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from paddle_npu.compare import run_onnx
from paddle_npu.npu import Reference


def _grid_sample_model(opset, mode, padding, corners, x_shape, grid_shape):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=corners)
    out = [x_shape[0], x_shape[1], grid_shape[1], grid_shape[2]]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m.SerializeToString()


@pytest.mark.parametrize("opset,mode,padding,corners", [
    (opset, mode, padding, corners)
    for opset, (mode, padding, corners) in itertools.product(
        (16, 20), itertools.product(("linear", "nearest"), ("zeros", "border", "reflection"),
                                    (0, 1)))])
def test_grid_sample_matches_onnxruntime(opset, mode, padding, corners):
    """Both opsets' mode names; the grid reaches well outside [-1, 1] so every padding rule
    and the reflection's repeated folding are used."""
    if opset == 16 and mode == "linear":
        mode = "bilinear"
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = rng.uniform(-2.6, 2.6, (2, 4, 6, 2)).astype(np.float32)
    grid[0, 0, :3] = [[-1, -1], [1, 1], [0, 0]]             # corners and centre exactly
    model = _grid_sample_model(opset, mode, padding, corners, list(x.shape), list(grid.shape))
    feeds = {"x": x, "grid": grid}
    expected = run_onnx(model, feeds)[1][0]
    got = Reference(model, "npu256").run(feeds)[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected).max() > 0.1                     # not a vacuous all-zero sample


def _chain_model(steps, size):
    """x -> Neg -> Add(.., x) -> Relu -> Add(.., x) ... : 2 x `steps` tensors of `size`
    floats, each read by the next node only (x by every Add); then an If whose branches read
    the last one, `t`, from outside them."""
    nodes, last = [], "x"
    for k in range(steps):
        nodes.append(helper.make_node("Relu" if k % 2 else "Neg", [last], [f"r{k}"]))
        nodes.append(helper.make_node("Add", [f"r{k}", "x"], [f"a{k}"]))
        last = f"a{k}"
    nodes.append(helper.make_node("Identity", [last], ["t"]))
    nodes.append(helper.make_node("ReduceSum", ["t"], ["s"], keepdims=0))
    nodes.append(helper.make_node("Greater", ["s", "zero"], ["c"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])
    branch = [helper.make_graph([helper.make_node(op, ["t"], [name])], f"g_{op}", [],
                                [helper.make_tensor_value_info(name, TensorProto.FLOAT, [size])])
              for op, name in (("Abs", "y_then"), ("Neg", "y_else"))]
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=branch[0],
                                  else_branch=branch[1]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])], [out],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m.SerializeToString()


def test_the_reference_lets_a_tensor_go_after_the_last_node_reading_it():
    """A run holds what is still to be read (x, a node's input and output), not every tensor
    of the model: 40 tensors of 4 MB peak at a few of them. A tensor a subgraph reads from
    outside it is held until that node has run."""
    import tracemalloc
    size = 1 << 20
    model = _chain_model(20, size)
    x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    ref = Reference(model, None)
    tracemalloc.start()
    try:
        got = ref.run({"x": x})[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, run_onnx(model, {"x": x})[1][0])
    assert peak < 5 * x.nbytes, peak / x.nbytes


def test_the_reference_holds_what_keep_names():
    """keep sees each node with its inputs and outputs; what it names outlives the run."""
    size = 16
    model = _chain_model(3, size)
    x = np.arange(size, dtype=np.float32) - 8
    seen = []

    def keep(node, values):
        seen.append((node[1], all(n in values for n in node[2] + node[3])))
        return [o for o in node[3] if o.startswith("r")]
    out, held = Reference(model, None).run({"x": x}, keep=keep)
    everything = onnx.load_from_string(model)
    assert seen == [(n.op_type, True) for n in everything.graph.node]
    assert sorted(held) == ["r0", "r1", "r2"]
    np.testing.assert_array_equal(held["r1"], np.maximum(-x + x, 0))
    np.testing.assert_array_equal(out[0], run_onnx(model, {"x": x})[1][0])
