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
