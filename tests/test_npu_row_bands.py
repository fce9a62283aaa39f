"""Each band of a matrix layer gathers its own rows (npu/row_bands.py): the lowered model
computes what the model before lowering does, in onnxruntime (exact and float32 bodies) and
in the NumPy reference, and the pass leaves alone what it must."""
import numpy as np
import pytest
from npu_helpers import assert_close, checked, model, serialized, three_way
from onnx import helper

from paddle_npu.compare import run_onnx
from paddle_npu.npu import DOMAIN, lower
from paddle_npu.npu.functions import attach_functions
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.row_bands import MIN_BYTES


def convs(channels, size, layers=2, seed=0):
    """`layers` 3x3 convolutions of `channels` channels, with a Relu after each: the first
    reads the NCHW input, the others the previous layer's rows (the layout pass)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 3, 3)) /
             np.sqrt(9 * channels)).astype(np.float32)
        inits += [(f"w{i}", w), (f"b{i}", rng.standard_normal(channels).astype(np.float32))]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    shape = [1, channels, size, size]
    return model(nodes, [("x", shape)], [(x, shape)], inits)


def im2cols(lowered):
    """{Im2Col node name: (layout, columns)} of a lowered model."""
    return {n.name: (n.attributes["layout"].value if "layout" in n.attributes else "nchw",
                     list(n.attributes["columns"].value) if "columns" in n.attributes
                     else None)
            for n in lowered.graph if n.domain == DOMAIN and n.op_type == "Im2Col"}


@pytest.mark.parametrize("channels,size,bands", [
    (64, 32, [[0, 256], [256, 256], [512, 64]]),    # bands of whole taps
    (96, 40, [[0, 256], [256, 256], [512, 256], [768, 96]]),    # runs of 32 channels
])
def test_each_band_gathers_its_own_columns_and_the_model_computes_the_same(channels, size,
                                                                             bands):
    original = convs(channels, size)
    lowered, _ = lower(serialized(original), "npu256")
    found = im2cols(lowered)
    assert sorted(c for layout, c in found.values() if layout == "nchw") == bands
    assert sorted(c for layout, c in found.values() if layout == "nhwc") == bands
    assert all(n.attributes["row_offset"].value == 0 for n in lowered.graph
               if n.op_type == "VMM")
    checked(lowered)
    x = np.random.default_rng(1).standard_normal((1, channels, size, size)).astype(np.float32)
    want, got, ref, _ = three_way(original, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime, exact bodies")
    np.testing.assert_array_equal(ref[0], got[0])       # the exact bodies sum as it does
    attach_functions(lowered, float32=True)
    _, fast = run_onnx(serialized(lowered), {"x": x})
    assert_close(fast[0], want[0], "onnxruntime, float32 bodies")


def test_small_rows_and_integer_layers_keep_one_im2col():
    """Rows below MIN_BYTES (16x16 pixels of 576 columns: 590 KB) stay one Im2Col, its
    bands read by row_offset; so do an int8 plan's (its QVMMs read int8 rows)."""
    assert 4 * 16 * 16 * 576 < MIN_BYTES <= 4 * 32 * 32 * 576
    lowered, _ = lower(serialized(convs(64, 16)), "npu256")
    assert all(c is None for _, c in im2cols(lowered).values())
    assert sorted(n.attributes["row_offset"].value for n in lowered.graph
                  if n.op_type == "VMM")[-2:] == [512, 512]
    onnx_bytes = serialized(convs(64, 32))
    calib = {"x": np.random.default_rng(2).standard_normal((1, 64, 32, 32)).astype(np.float32)}
    quantized, _, _ = quantized_lower(onnx_bytes, calibrate(onnx_bytes, calib), 8, "npu256")
    assert len(im2cols(quantized)) == 2 and \
        all(c is None for _, c in im2cols(quantized).values())
    assert {n.op_type for n in quantized.graph if n.op_type in ("VMM", "QVMM")} == {"QVMM"}
