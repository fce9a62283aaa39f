"""tools/bench_npu.py's floor of a lowered model: the Im2Col bytes, array products and
depthwise multiply-adds it counts (one layer each here), against what the layer's sizes and
the tiling give by hand; the kernel calls it adds for onnxruntime; and the primitive it
counts each of onnxruntime's kernels for."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from bench_npu import call_seconds, inlined_nodes, profile, program_work
from npu_helpers import model, on_arrays, serialized
from onnx import helper

from paddle_npu.npu import lower


def _conv(c, m, group, size):
    rng = np.random.default_rng(c + m + group)
    w = rng.standard_normal((m, c // group, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4,
                            group=group)
    return model([node], [("x", [None, c, size, size])], [("y", [None, m, size, size])],
                 [("w", w)])


# (channels, outputs, groups, Im2Col values, array products) at 2 x 40 x 6 x 6:
# dense: one Im2Col of 9 * 40 = 360 columns, two bands of rows (256 + 104) x 24 columns;
# depthwise: 40 channels in 2 stacked tiles of 20 (tiling: evenly filled), 9 * 20 = 180
# rows x 20 columns each
CASES = [(40, 24, 1, 2 * 36 * 360, 2 * 36 * 24 * 360),
         (40, 40, 40, 2 * 2 * 36 * 180, 2 * 2 * 36 * 20 * 180)]


@pytest.mark.parametrize("c,m,group,values,products", CASES)
def test_program_work_counts_im2col_rows_and_array_products(c, m, group, values, products):
    lowered, _ = lower(serialized(_conv(c, m, group, 6)), on_arrays(),
                       input_shape={"x": [2, c, 6, 6]}, emulation="float32")
    x = np.random.default_rng(0).standard_normal((2, c, 6, 6)).astype(np.float32)
    work = program_work(ir.serde.serialize_model(lowered).SerializeToString(), {"x": x})
    assert work == {"im2col_bytes": [4 * values], "array_macs": products, "vector_macs": 0}


def test_program_work_counts_a_depthwise_convs_multiply_adds():
    """On the vector unit (the default target): no Im2Col, no array; 9 taps for each of the
    2 x 40 x 6 x 6 outputs."""
    lowered, _ = lower(serialized(_conv(40, 40, 40, 6)), "npu256",
                       input_shape={"x": [2, 40, 6, 6]}, emulation="float32")
    x = np.random.default_rng(0).standard_normal((2, 40, 6, 6)).astype(np.float32)
    work = program_work(ir.serde.serialize_model(lowered).SerializeToString(), {"x": x})
    assert work == {"im2col_bytes": [], "array_macs": 0, "vector_macs": 2 * 40 * 36 * 9}


def test_profile_counts_the_kernels_onnxruntime_runs_after_inlining_and_fusing():
    """A function of MatMul then Add, called twice: four nodes once inlined, which
    onnxruntime fuses into two Gemms; the timing floor counts those two calls. The outputs
    are the model's."""
    body = [helper.make_node("MatMul", ["X", "W"], ["P"]),
            helper.make_node("Add", ["P", "B"], ["Y"])]
    function = helper.make_function("test.kernels", "Dense", ["X", "W", "B"], ["Y"], body,
                                    [helper.make_opsetid("", 17)])
    calls = [helper.make_node("Dense", ["x", "w", "b"], ["h"], domain="test.kernels"),
             helper.make_node("Dense", ["h", "w", "b"], ["y"], domain="test.kernels")]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        calls, "two_layers", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])],
        [onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
         onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    data = helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("test.kernels", 1)]).SerializeToString()
    assert inlined_nodes(data) == 4
    x = rng.standard_normal((4, 8)).astype(np.float32)
    profiled = profile(data, {"x": x}, runs=1)
    assert profiled["kernels"] == 2
    w, b = (onnx.numpy_helper.to_array(t) for t in graph.initializer)
    np.testing.assert_allclose(profiled["outputs"][0], (x @ w + b) @ w + b, rtol=1e-5)


def test_call_seconds_is_a_kernel_calls_time():
    """Microseconds or less a call on this machine kind, never nothing."""
    assert 0 < call_seconds(calls=200, runs=5) < 1e-4


def test_profile_shares_tell_which_primitive_each_kernel_ran_for():
    """Conv (with a bias), Relu, Conv lowered: onnxruntime's kernels are counted for the
    primitives of the two layers, and the Relu (a plain ONNX op) for "other"; the shares
    add up to the whole. Without names in the function bodies, onnxruntime names the
    inlined kernels on its own and most fall to "other"."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((6, 8, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)]
    source = model(nodes, [("x", [None, 4, 6, 6])], [("y", [None, 6, 6, 6])],
                   [("w1", w1), ("b1", rng.standard_normal(8).astype(np.float32)),
                    ("w2", w2)])
    lowered, _ = lower(serialized(source), on_arrays(), input_shape={"x": [1, 4, 6, 6]},
                       emulation="float32")
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    shares = profile(ir.serde.serialize_model(lowered).SerializeToString(), {"x": x},
                     runs=2)["shares"]
    # (the first layer's bias add runs in its VMM's kernel: onnxruntime fuses MatMul + Add)
    layers = {"Im2Col", "VMM", "AddInTile"}
    assert {"Im2Col", "VMM", "other"} <= set(shares) <= layers | {"DimTransform", "other"}
    assert sum(shares.get(p, 0) for p in layers) > 0.5
    assert sum(shares.values()) == pytest.approx(1)


def test_profile_shares_count_a_product_fused_into_a_plain_op():
    """A depthwise Conv then Relu on the vector unit: onnxruntime fuses the DepthwiseConv
    body's Conv with the Relu and names the kernel after the Relu; it counts as "products"
    (a matrix layer's), not "other"."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], kernel_shape=[3, 3], pads=[1] * 4,
                              group=16),
             helper.make_node("Relu", ["h"], ["y"])]
    source = model(nodes, [("x", [None, 16, 8, 8])], [("y", [None, 16, 8, 8])],
                   [("w", rng.standard_normal((16, 1, 3, 3)).astype(np.float32))])
    lowered, _ = lower(serialized(source), "npu256", input_shape={"x": [1, 16, 8, 8]},
                       emulation="float32")
    assert "DepthwiseConv" in {n.op_type for n in lowered.graph}
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    shares = profile(ir.serde.serialize_model(lowered).SerializeToString(), {"x": x},
                     runs=2)["shares"]
    assert shares.get("products", 0) > 0.1      # (the rest: onnxruntime's NCHWc reorders)
