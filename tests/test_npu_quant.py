"""Integer precision: integer primitives, calibration, quantised lowering, QDQ export,
accuracy report."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from npu_helpers import assert_close, model, on_arrays, serialized
from onnx import helper

from paddle_npu.errors import ConversionError
from paddle_npu.npu import graph as g
from paddle_npu.npu import lower
from paddle_npu.npu.emulation.registry import emulation_of_op
from paddle_npu.npu.ops import DOMAIN, get_primitive
from paddle_npu.npu.ops.quant import quantize_array, requantize_array
from paddle_npu.npu.passes.common import with_input_shapes
from paddle_npu.npu.quant.accuracy import layer_report, worst_layers
from paddle_npu.npu.quant.calibrate import calibrate, load_table, save_table
from paddle_npu.npu.quant.qdq import export_qdq
from paddle_npu.npu.quant.qlower import fixed_point, quantized_lower, records_of
from paddle_npu.npu.verification.reference import Reference
from paddle_npu.onnx_io import upgrade_opset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "digits_cnn")
# the example quantised by Paddle's PTQ in both PaddleSlim formats, with Paddle's outputs
PTQ_FIXTURES = os.path.join(ROOT, "tests", "data", "paddleslim_ptq")


def run_primitive(op, inputs, attrs, out_type):
    """onnxruntime running one primitive through its function body (an input None: left
    out, an optional one's empty name)."""
    emulated = emulation_of_op(op)
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    shapes = [None if a is None else list(a.shape) for a in inputs]
    node = helper.make_node(op, names, ["y"], domain=DOMAIN, **attrs)
    node.overload = emulated.overload(attrs, shapes)
    f = emulated.function_proto(17, attrs, shapes)
    fed = {n: a for n, a in zip(names, inputs) if a is not None}
    g = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in fed.items()],
        [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(DOMAIN, 1)], functions=[f])
    m.ir_version = 10
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, fed)[0]


@pytest.mark.parametrize("bits", [8, 16])
def test_quantize_body_equals_reference(bits):
    rng = np.random.default_rng(0)
    s = np.float32(0.05)
    # ties (k + 0.5) * s, saturation far out, and plain values
    x = np.concatenate([rng.standard_normal(500) * 3, (np.arange(-20, 20) + 0.5) * s,
                        [1e6, -1e6, 0.0]]).astype(np.float32)
    got = run_primitive("Quantize", [x, np.asarray(s)], {"bits": bits},
                        onnx.TensorProto.INT8 if bits == 8 else onnx.TensorProto.INT16)
    want = quantize_array(x, s, bits)
    assert np.array_equal(got, want)
    hi = 127 if bits == 8 else 32767
    assert want.max() == hi and want.min() == -hi - 1        # saturates
    # ONNX QuantizeLinear computes the same for int8 (the QDQ export relies on it)
    if bits == 8:
        q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
        g = helper.make_graph([q], "t", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info("y", 3, x.shape)],
                              [onnx.numpy_helper.from_array(np.asarray(s), "s"),
                               onnx.numpy_helper.from_array(np.zeros((), np.int8), "z")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        got = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert np.array_equal(got, want)


@pytest.mark.parametrize("bits,relu", [(8, 0), (8, 1), (16, 0)])
def test_requantize_body_equals_reference(bits, relu):
    rng = np.random.default_rng(1)
    acc = rng.integers(-2 ** 24, 2 ** 24, size=(3, 5, 6)).astype(np.int32)
    real = rng.uniform(1e-6, 1e-3, 6) if bits == 8 else rng.uniform(1e-4, 1e-1, 6)
    mult, div = fixed_point(real, 2 ** 25)
    assert np.all(np.abs(mult / div - real) <= real * 2.0 ** -29)
    got = run_primitive("Requantize", [acc, mult, div], {"bits": bits, "relu": relu},
                        onnx.TensorProto.INT8 if bits == 8 else onnx.TensorProto.INT16)
    want = requantize_array(acc, mult, div, bits, relu)
    assert np.array_equal(got, want)
    exact = acc.astype(np.float64) * mult / div              # rounding half away from zero
    ref = np.clip(np.sign(exact) * np.floor(np.abs(exact) + 0.5), 0 if relu else -(1 << bits - 1),
                  (1 << bits - 1) - 1)
    assert np.array_equal(want, ref)


def test_qvmm_body_equals_reference_and_exact_int32():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, size=(2, 7, 300)).astype(np.int8)
    w = rng.integers(-127, 128, size=(200, 40)).astype(np.int8)
    got = run_primitive("QVMM", [x, w], {"row_offset": 50, "acc_bits": 32},
                        onnx.TensorProto.INT32)
    want = x[..., 50:250].astype(np.int64) @ w.astype(np.int64)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    from paddle_npu.npu.ops import ArrayModel
    ref = get_primitive("QVMM").reference(ArrayModel(64, 16), [x, w],
                                          {"row_offset": 50, "acc_bits": 32})[0]
    assert np.array_equal(ref, want)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype, acc_bits, out_type", [(np.int8, 32, onnx.TensorProto.INT32),
                                                       (np.int16, 64, onnx.TensorProto.INT64)])
def test_qdepthwise_conv_body_and_reference_are_the_exact_integer_sums(dtype, acc_bits,
                                                                       out_type, layout):
    """Extreme values, strides, dilation and padding: onnxruntime (the body sums in float64)
    and the reference give the integer convolution of each channel, written out in int64."""
    from paddle_npu.npu.ops import ArrayModel

    info = np.iinfo(dtype)
    rng = np.random.default_rng(4)
    n, c, h, w = 2, 5, 9, 8
    x = rng.choice([info.min, info.max, -1, 0, 3], size=(n, c, h, w)).astype(dtype)
    taps = rng.choice([info.min + 1, info.max, -2, 0], size=(c, 1, 3, 3)).astype(dtype)
    bias = rng.integers(-1000, 1000, size=c).astype(np.int32 if acc_bits == 32 else np.int64)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 2, 0, 1],
             "dilations": [1, 2], "acc_bits": acc_bits}
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 0), (2, 1)))
    oh, ow = (h + 1 - 3) // 2 + 1, (w + 3 - 5) + 1
    want = np.zeros((n, c, oh, ow), np.int64) + bias[None, :, None, None]
    for i in range(3):
        for j in range(3):
            want += xp[:, :, i:i + 2 * oh - 1:2, 2 * j:2 * j + ow] * \
                taps[None, :, 0, i, j, None, None].astype(np.int64)
    if layout == "nhwc":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        want = want.transpose(0, 2, 3, 1)
        attrs.update(layout="nhwc", image_size=[h, w])
    got = run_primitive("QDepthwiseConv", [x, taps, bias], attrs, out_type)
    assert got.dtype == bias.dtype and np.array_equal(got, want)
    ref = get_primitive("QDepthwiseConv").reference(ArrayModel(64, 16), [x, taps, bias], attrs)
    assert ref[0].dtype == bias.dtype and np.array_equal(ref[0], want)


@pytest.mark.parametrize("acc", [np.int32, np.int64])
@pytest.mark.parametrize("layout, bias", [
    ([(0, 5), (0, 5)], False),            # two row tiles of one output
    ([(0, 4), (4, 3)], True),             # column tiles side by side, and the bias
    ([(2, 3), (0, 4)], False),            # overlapping and unordered
    ([(0, 2), (4, 2)], True),             # a gap between two column tiles
])
def test_add_in_tile_adds_integer_partials_in_their_own_type(layout, bias, acc):
    """Two addends a column take the body that adds in the partials' own type: on an integer
    plan's int32 / int64 accumulators too (extreme values: any rounding would show)."""
    info = np.iinfo(acc)
    rng = np.random.default_rng(8)
    width = max(o + w for o, w in layout)
    parts = [rng.integers(info.min // 4, info.max // 4, (2, 3, w), dtype=acc) for _, w in layout]
    b = rng.integers(info.min // 4, info.max // 4, width, dtype=acc) if bias else None
    want = np.zeros((2, 3, width), np.int64)
    for (o, w), p in zip(layout, parts):
        want[..., o:o + w] += p
    if bias:
        want += b
    attrs = {"offsets": [o for o, _ in layout], "width": width}
    got = run_primitive("AddInTile", [b] + parts, attrs,
                        helper.np_dtype_to_tensor_dtype(np.dtype(acc)))
    assert got.dtype == acc and np.array_equal(got, want)


def test_col2im_adds_two_integer_taps_in_their_own_type():
    """Two taps a pixel and no bias: Col2Im's body adds in X's own type, integers too."""
    from paddle_npu.npu.ops import ArrayModel

    rng = np.random.default_rng(9)
    x = rng.integers(-2 ** 29, 2 ** 29, (1, 20, 6), dtype=np.int32)
    attrs = {"image_shape": [4, 5], "output_shape": [4, 6], "kernel_shape": [1, 2],
             "strides": [1, 1]}
    ref = get_primitive("Col2Im").reference(ArrayModel(4, 4), [x], attrs)[0]
    got = run_primitive("Col2Im", [x], attrs, onnx.TensorProto.INT32)
    assert got.dtype == np.int32 and np.array_equal(got, ref)
    cols = x.reshape(1, 4, 5, 3, 2).astype(np.int64)
    want = np.zeros((1, 3, 4, 6), np.int64)
    want[..., :5] += cols[..., 0].transpose(0, 3, 1, 2)
    want[..., 1:] += cols[..., 1].transpose(0, 3, 1, 2)
    assert np.array_equal(ref, want)


# Rows of a layer's kernel matrix that make 1, 2 and 3 row tiles on npu256's 256-row arrays
ROWS_OF_TILES = {1: 200, 2: 300, 3: 600}


def _matrix_layer(kind, rows, bias, rng):
    """A 1x1 Conv on `rows` channels, a Gemm or a MatMul of `rows` features (rows of 4), 6
    outputs, + a bias (Conv, Gemm); the model and a feed maker."""
    w = (rng.standard_normal((6, rows)) / np.sqrt(rows)).astype(np.float32)
    b = [("b", rng.standard_normal(6).astype(np.float32))] if bias else []
    if kind == "conv":
        inits, shape = [("w", w.reshape(6, rows, 1, 1))] + b, [rows, 3, 3]
        node = helper.make_node("Conv", ["x", "w"] + ["b"] * bias, ["y"], kernel_shape=[1, 1])
    elif kind == "gemm":
        inits, shape = [("w", w)] + b, [rows]
        node = helper.make_node("Gemm", ["x", "w"] + ["b"] * bias, ["y"], transB=1)
    else:
        assert not bias, "a MatMul has no bias (an Add after one on 3-D rows stays an Add)"
        inits, shape = [("w", w.T.copy())], [4, rows]
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    m = model([node], [("x", [None] + shape)], [("y", None)], inits)
    return m, lambda n: {"x": rng.standard_normal([n] + shape).astype(np.float32)}


@pytest.mark.parametrize("plan", ["packed", "per-channel"])
@pytest.mark.parametrize("tiles", [1, 2, 3])
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("kind, bias", [("conv", False), ("conv", True), ("gemm", False),
                                        ("gemm", True), ("matmul", False)])
def test_integer_matrix_layers_of_one_to_three_row_tiles_run_bit_true(kind, bias, bits, tiles,
                                                                      plan):
    """A Conv, Gemm or MatMul whose kernel matrix takes 1-3 row tiles, with and without a
    bias, on both plans: onnxruntime runs the lowered integer model (two tiles' partials and
    no bias once met an AddInTile body onnxruntime refused) and it equals the bit-true
    reference, close to the float model."""
    rng = np.random.default_rng(10 * tiles + bias)
    m, feeds = _matrix_layer(kind, ROWS_OF_TILES[tiles], bias, rng)
    onnx_bytes = serialized(m)
    table = calibrate(onnx_bytes, feeds(64))
    lowered, _, records = quantized_lower(onnx_bytes, table, bits, plan=plan)
    assert [(r["bits"], r["acc_bits"]) for r in records] == [(bits, 32 if bits == 8 else 64)]
    if plan == "packed":        # 6 outputs: one column of tiles
        assert records[0]["tiles"] == tiles
    proto = ir.serde.serialize_model(lowered)
    x = feeds(2)
    got = _ort(proto, x)[0]
    assert np.array_equal(got, Reference(proto, None).run(x)[0])
    assert _cosine(got, _ort(m, x)[0]) > 0.999


def test_int16_keeps_values_past_the_calibrated_range():
    """int16 scales reach twice the calibrated absmax (threshold16): an input 1.5x past what
    calibration saw is kept, where an int8 layer clips it at its threshold."""
    rng = np.random.default_rng(3)
    m, feeds = _matrix_layer("gemm", 32, True, rng)
    onnx_bytes = serialized(m)
    calib = feeds(64)
    table = calibrate(onnx_bytes, calib)
    x = {"x": calib["x"][:4] / np.abs(calib["x"][:4]).max() *
         table["tensors"]["x"]["absmax"] * 1.5}
    assert table["tensors"]["x"]["threshold16"] == 2 * table["tensors"]["x"]["absmax"]
    want = _ort(m, x)[0]
    cos = {}
    for bits in (8, 16):
        lowered, _, records = quantized_lower(onnx_bytes, table, bits)
        assert records[0]["s_x"] == pytest.approx(
            table["tensors"]["x"]["threshold16" if bits == 16 else "threshold"] /
            (32767 if bits == 16 else 127), rel=1e-6)
        cos[bits] = _cosine(_ort(ir.serde.serialize_model(lowered), x)[0], want)
    assert cos[16] > 0.99999 and cos[8] < 0.999


def test_int16_layers_quantise_their_images_and_im2col_moves_int16():
    """A 16-bit layer quantises its image before Im2Col, as an 8-bit one does (Im2Col only
    moves values and pads zeros, and Quantize(0) = 0): Im2Col moves int16, an NCHW picture's
    and an nhwc image's rows, padded in int32 in the function bodies (onnxruntime's Pad has
    no int16 kernel); onnxruntime equals the NumPy reference bit for bit."""
    rng = np.random.default_rng(16)

    def weight(m, c):
        return (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="first", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="second", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], strides=[2, 2])]
    m = model(nodes, [("x", [1, 3, 8, 8])], [("y", None)],
              [("w1", weight(8, 3)), ("w2", weight(4, 8))])
    onnx_bytes = serialized(m)
    feeds = {"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)}
    lowered = quantized_lower(onnx_bytes, calibrate(onnx_bytes, feeds), 16)[0]
    im2col = [n for n in lowered.graph if n.op_type == "Im2Col"]
    assert [n.attributes.get_string("layout", "nchw") for n in im2col] == ["nchw", "nhwc"]
    for n in im2col:
        assert n.inputs[0].dtype == ir.DataType.INT16
        assert n.inputs[0].producer().op_type == "Quantize"
    proto = ir.serde.serialize_model(lowered)
    for f in (f for f in proto.functions if f.name == "Im2Col"):
        made = {o: node for node in f.node for o in node.output}
        pads = [node for node in f.node if node.op_type == "Pad"]
        assert pads and all(made[node.input[0]].op_type == "Cast" for node in pads)
    for i in range(2):
        x = {"x": feeds["x"][i:i + 1]}
        assert np.array_equal(_ort(proto, x)[0], Reference(proto, None).run(x)[0])


def _two_windows(window, groups=1, wide=8, thin=2, outs=2, size=4):
    """Two Convs of one window (`window`: Conv attributes) and `groups` on images of one size,
    `wide` and `thin` channels, both the rows of a 1x1 Conv before them (nhwc Im2Cols):
    x -> 1x1 -> a (wide) -> 1x1 -> b (thin); ya = window(a), yb = window(b), `outs` channels
    each. The model and a feed maker."""
    rng = np.random.default_rng(groups * 100 + wide + thin)

    def weight(m, c, k=(1, 1)):
        return (rng.standard_normal((m, c, *k)) / np.sqrt(c * np.prod(k))).astype(np.float32)

    k = window["kernel_shape"]
    nodes = [helper.make_node("Conv", ["x", "w_stem"], ["s"], name="stem"),
             helper.make_node("Relu", ["s"], ["a"], name="relu_stem"),
             helper.make_node("Conv", ["a", "w_narrow"], ["n"], name="narrow"),
             helper.make_node("Relu", ["n"], ["b"], name="relu_narrow"),
             helper.make_node("Conv", ["a", "w_wide"], ["ya"], name="wide", group=groups,
                              **window),
             helper.make_node("Conv", ["b", "w_thin"], ["yb"], name="thin", group=groups,
                              **window)]
    inits = [("w_stem", weight(wide, 3)), ("w_narrow", weight(thin, wide)),
             ("w_wide", weight(outs, wide // groups, k)),
             ("w_thin", weight(outs, thin // groups, k))]
    m = model(nodes, [("x", [1, 3, size, size])], [("ya", None), ("yb", None)], inits)
    return m, lambda n: {"x": rng.standard_normal((n, 3, size, size)).astype(np.float32)}


def _lowered_windows_equal_the_reference(m, feeds, plan, bits):
    """Lower the model of `_two_windows` (float, or integer of `bits`) on `plan`; onnxruntime
    runs it and equals the NumPy reference (bit for bit at integers); the two windows' Im2Cols
    read nhwc images (what the test is about; an integer 1x1 window of stride 1 has none:
    its array reads the rows as they are)."""
    onnx_bytes = serialized(m)
    if bits:
        lowered = quantized_lower(onnx_bytes, calibrate(onnx_bytes, feeds(16)), bits,
                                  plan=plan)[0]
    else:
        lowered = lower(m, "npu256", plan=plan)[0]
    assert all(n.attributes["layout"].value == "nhwc" for n in lowered.graph
               if n.op_type == "Im2Col" and g.source(n) in ("wide", "thin"))
    proto = ir.serde.serialize_model(lowered)
    x = feeds(1)
    got = _ort(proto, x)
    ref = Reference(proto, None).run(x)
    for a, b in zip(got, ref):
        if bits:
            assert np.array_equal(a, b)
        else:
            assert_close(a, b, "onnxruntime against the NumPy reference")


@pytest.mark.parametrize("plan", ["packed", "per-channel"])
@pytest.mark.parametrize("bits", [None, 8, 16])
def test_pp_liteseg_t_conv2d_134_after_a_wider_window_runs_on_both_plans(plan, bits):
    """PP-LiteSeg-T's conv2d_134 at 128x128: a 3x3 window (pad 1) on nhwc rows of 2 channels
    at 4x4, to 1 channel, in a model where another Im2Col of the same window reads 4x4 rows
    of more channels. Per-channel int8 / int16 both called one function, made for the wider
    image, and onnxruntime refused the model (Reshape of 2-channel pixels to 512 values)."""
    m, feeds = _two_windows({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, wide=16,
                            thin=2, outs=1, size=4)
    _lowered_windows_equal_the_reference(m, feeds, plan, bits)


@pytest.mark.parametrize("bits", [None, 8, 16])
@pytest.mark.parametrize("window, groups", [
    ({"kernel_shape": [1, 1]}, 1),
    ({"kernel_shape": [1, 1], "strides": [2, 2]}, 1),
    ({"kernel_shape": [3, 3]}, 1),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 1),
    ({"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}, 1),
    ({"kernel_shape": [1, 3], "strides": [1, 2], "pads": [0, 1, 0, 0]}, 1),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 2),
    ({"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [1, 2], "pads": [0, 1, 1, 0]}, 2),
])
@pytest.mark.parametrize("plan", ["packed", "per-channel"])
def test_windows_on_two_channel_counts_run_bit_true(window, groups, bits, plan):
    """Two layers of one window on nhwc images of one size and 8 and 4 channels, over kernels,
    strides, dilations, pads and groups: onnxruntime runs the lowered model and equals the
    reference. The packed plan's strided 1x1 and grouped layers gather channel by channel
    (channel_block 0), the per-channel plan's stacks a channel per block: all shared one
    body across channel counts before their overloads named them."""
    m, feeds = _two_windows(window, groups, wide=8, thin=4, outs=2, size=6)
    _lowered_windows_equal_the_reference(m, feeds, plan, bits)


@pytest.mark.parametrize("bits", [8, 16])
def test_a_per_channel_integer_layer_is_a_chain_of_stacks(bits):
    """The per-channel plan cuts a 3x3 layer on 40 channels into 40 tiles, a channel's nine
    rows each: two QVMM stacks, W [32, 9, 24] and [8, 9, 24] on 40 arrays reading the
    channels from 0 and 32, summed by a chain of two AddInTiles, instead of a QVMM per tile
    (tens of thousands on a deep CNN, which onnxruntime took minutes to load; one stack of
    every channel's partials took it GBs). Its integers are exact whatever the tiling: bit
    for bit the packed plan's, onnxruntime's and the reference's."""
    rng = np.random.default_rng(bits)
    w = (rng.standard_normal((24, 40, 3, 3)) / 20).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    m = serialized(model([conv], [("x", [None, 40, 6, 6])], [("y", [None, 24, 6, 6])],
                         [("w", w), ("b", b)]))
    table = calibrate(m, {"x": rng.standard_normal((4, 40, 6, 6)).astype(np.float32)})
    x = {"x": rng.standard_normal((2, 40, 6, 6)).astype(np.float32)}
    outs = {}
    for plan in ("packed", "per-channel"):
        lowered, _, _ = quantized_lower(m, table, bits, "npu256", plan=plan,
                                        input_shape={"x": [2, 40, 6, 6]})
        proto = ir.serde.serialize_model(lowered)
        outs[plan] = _ort(proto, x)[0]
        assert outs[plan].tobytes() == Reference(proto, "npu256").run(x)[0].tobytes()
    qvmms = [n for n in lowered.graph if n.op_type == "QVMM"]
    assert [list(n.inputs[1].shape) for n in qvmms] == [[32, 9, 24], [8, 9, 24]]
    assert [n.attributes["block_offset"].value for n in qvmms] == [0, 32]
    sums = [n for n in lowered.graph if n.op_type == "AddInTile"]
    assert [n.inputs[-1].producer() for n in sums[1:]] == sums[:1]     # the running sum
    assert outs["per-channel"].tobytes() == outs["packed"].tobytes()


@pytest.mark.parametrize("bits", [8, 16])
def test_a_per_channel_integer_layer_runs_in_integers_a_piece_at_a_time(bits, monkeypatch):
    """A stack's products are [T, K, M], T times the layer's output (7.5 GB for a link of
    32 channels on a 960x960 image): onnxruntime multiplies and sums them in the
    accumulator's type (one copy; a float64 product and its cast held three), and the
    reference runs the rows a piece at a time. The integers and the counters stay the
    whole run's."""
    from paddle_npu.npu.verification import reference_layers

    rng = np.random.default_rng(bits)
    w = (rng.standard_normal((24, 40, 3, 3)) / 20).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    m = serialized(model([conv], [("x", [None, 40, 6, 6])], [("y", [None, 24, 6, 6])],
                         [("w", w)]))
    table = calibrate(m, {"x": rng.standard_normal((4, 40, 6, 6)).astype(np.float32)})
    x = {"x": rng.standard_normal((2, 40, 6, 6)).astype(np.float32)}
    lowered, _, _ = quantized_lower(m, table, bits, "npu256", plan="per-channel",
                                    input_shape={"x": [2, 40, 6, 6]})
    proto = ir.serde.serialize_model(lowered)
    acc = onnx.TensorProto.INT32 if bits == 8 else onnx.TensorProto.INT64
    for fn in proto.functions:
        if fn.name in ("QVMM", "AddInTile"):
            casts = {a.i for n in fn.node if n.op_type == "Cast" for a in n.attribute}
            assert casts <= {acc}, (fn.name, fn.overload, casts)
    got = _ort(proto, x)[0]
    whole, pieces = reference_layers._tiles_then_sums, []
    monkeypatch.setattr(reference_layers, "_tiles_then_sums",
                        lambda array, plan, x, *a: pieces.append(x.shape[-2]) or
                        whole(array, plan, x, *a))

    def run(piece_bytes):
        monkeypatch.setattr(reference_layers, "PIECE_BYTES", piece_bytes)
        pieces.clear()
        ref = Reference(proto, "npu256")
        y = ref.run(x)[0]
        a = ref.array
        return y, list(pieces), (a.vmm_invocations, a.macs, a.add_elements, len(a.tile_ids))

    y, cut, counts = run(1 << 28)
    assert cut == [36] and y.tobytes() == got.tobytes()
    # 2 images x 32 tiles x 24 columns x 8 bytes a row: 5 rows of 36 at a time
    y5, cut, counts5 = run(5 * 2 * 32 * 24 * 8)
    assert cut == [5] * 7 + [1] and y5.tobytes() == got.tobytes() and counts5 == counts


@pytest.mark.parametrize("op, inputs, attrs", [
    ("QVMM", [np.full((1, 2, 9), 32767, np.int16), np.full((9, 3), 32767, np.int16)], {}),
    ("QDepthwiseConv", [np.full((1, 2, 3, 3), 32767, np.int16),
                        np.full((2, 1, 3, 3), 32767, np.int16)], {"kernel_shape": [3, 3]}),
    ("QRuntimeVMM", [np.full((1, 2, 9), 32767, np.int16), np.full((1, 9, 3), 32767, np.int16)],
     {}),
])
def test_integer_references_refuse_an_accumulator_that_overflows(op, inputs, attrs):
    """Nine int16 products of 32767^2 pass 2^31: a 32-bit accumulator cannot hold them."""
    from paddle_npu.npu.ops import ArrayModel

    with pytest.raises(OverflowError, match=f"{op} layer/{op}: the 32-bit accumulator"):
        get_primitive(op).reference(ArrayModel(64, 16), inputs,
                                    {**attrs, "acc_bits": 32, "_node": f"layer/{op}"})
    sums = get_primitive(op).reference(ArrayModel(64, 16), inputs, {**attrs, "acc_bits": 64})[0]
    assert sums.dtype == np.int64 and sums.max() == 9 * 32767 ** 2


def _depthwise_block(rng, c=24, size=10):
    """1x1 conv, ReLU, depthwise 3x3 (bias), ReLU, 1x1 conv: a MobileNet block."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="pw1"),
             helper.make_node("Relu", ["a"], ["a1"], name="relu1"),
             helper.make_node("Conv", ["a1", "wd", "bd"], ["d"], name="dw", group=c,
                              kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["d"], ["d1"], name="relu2"),
             helper.make_node("Conv", ["d1", "w2"], ["y"], name="pw2")]
    inits = [("w1", rng.standard_normal((c, 3, 1, 1)).astype(np.float32)),
             ("wd", rng.standard_normal((c, 1, 3, 3)).astype(np.float32)),
             ("bd", rng.standard_normal(c).astype(np.float32)),
             ("w2", (rng.standard_normal((8, c, 1, 1)) / 5).astype(np.float32))]
    return model(nodes, [("x", [None, 3, size, size])], [("y", [None, 8, size, size])], inits)


@pytest.mark.parametrize("bits", [8, 16])
def test_an_integer_depthwise_layer_runs_on_the_vector_unit(bits):
    """QDepthwiseConv instead of block-diagonal QVMM tiles: onnxruntime equals the bit-true
    reference; at 8 bits the integers are the arrays' (the same exact sums and scales)."""
    rng = np.random.default_rng(6)
    onnx_bytes = serialized(_depthwise_block(rng))
    table = calibrate(onnx_bytes, {"x": rng.standard_normal((4, 3, 10, 10)).astype(np.float32)})
    x = {"x": rng.standard_normal((1, 3, 10, 10)).astype(np.float32)}
    outs = {}
    for target in ("npu256", on_arrays()):
        m, report, records = quantized_lower(onnx_bytes, table, bits, target)
        proto = ir.serde.serialize_model(m)
        got = _ort(proto, x)[0]
        assert np.array_equal(got, Reference(proto, None).run(x)[0])
        outs[report.target["name"] if target == "npu256" else "arrays"] = got
        assert [r["layer"] for r in records] == ["pw1", "dw", "pw2"]
        kinds = [n.op_type for n in m.graph if g.source(n) == "dw"]
        assert ("QDepthwiseConv" in kinds) == (target == "npu256")
        assert ("QVMM" in kinds) == (target != "npu256")
    if bits == 8:
        assert np.array_equal(outs["npu256"], outs["arrays"])


@pytest.mark.parametrize("dtype, bits, via", [(np.int8, 32, np.float32),
                                               (np.int16, 64, np.float64),
                                               (np.int32, 64, np.int64)])
def test_qvmm_reference_is_exact_in_the_type_it_multiplies_in(dtype, bits, via):
    """The reference multiplies in float32 / float64 BLAS when every partial sum is exact
    there, else in int64: extreme values give the same sums as int64 arithmetic."""
    from paddle_npu.npu.ops import ArrayModel
    from paddle_npu.npu.ops.quant import _exact_type

    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    big = 2 ** 20 if dtype == np.int32 else info.max     # int32 rows: int64 sums still fit
    x = rng.choice([-big, big - 1, big, 1, 0], size=(3, 5, 260)).astype(dtype)
    w = rng.choice([info.min + 1, info.max, -1, 0], size=(256, 40)).astype(dtype)
    assert _exact_type(x, w, 256) is via
    ref = get_primitive("QVMM").reference(ArrayModel(64, 16), [x, w],
                                          {"row_offset": 4, "acc_bits": bits})[0]
    want = x[..., 4:260].astype(np.int64) @ w.astype(np.int64)
    assert np.array_equal(ref, want)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The example CNN as ONNX, a calibration table from 512 TRAIN images, the test split."""
    from train_example import load_digits_split

    from paddle_npu import export

    d = tmp_path_factory.mktemp("digits")
    path = str(d / "digits.onnx")
    export(os.path.join(EXAMPLE, "legacy", "model.pdmodel"),
           os.path.join(EXAMPLE, "legacy", "model.pdiparams"), save_file=path)
    (xtr, _), _ = load_digits_split()
    np.savez(d / "calib.npz", x=xtr[:512])
    table = calibrate(path, str(d / "calib.npz"))
    save_table(table, str(d / "table.json"))
    ref = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    return {"dir": d, "onnx": path, "table": str(d / "table.json"), "x": ref["in_x"],
            "labels": ref["labels"]}


def expose(proto, names):
    """Make intermediate tensors graph outputs, with the types the model records for them."""
    types = {v.name: v.type.tensor_type.elem_type for v in proto.graph.value_info}
    for n in names:
        proto.graph.output.append(helper.make_tensor_value_info(n, types[n], None))


def _ort(proto, feeds):
    s = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def test_calibration_table(digits):
    table = load_table(digits["table"])
    e = table["tensors"]["x"]
    assert e["min"] == 0.0 and e["max"] == 1.0 and e["absmax"] == 1.0
    for e in table["tensors"].values():
        assert e["min"] <= e["max"] and 0 < e["threshold"] <= e["absmax"] + 1e-6
        assert e["percentile"] <= e["absmax"] + 1e-6 and e["mse"] <= e["absmax"] + 1e-6
    assert table["samples"] == 512


def test_digits_int8_accuracy_and_bit_true_simulator(digits):
    m, _, records = quantized_lower(digits["onnx"], digits["table"])
    assert [r["bits"] for r in records] == [8, 8, 8, 8]
    proto = ir.serde.serialize_model(m)
    ops = {n.op_type for n in proto.graph.node}
    assert "VMM" not in ops and {"Quantize", "QVMM", "Requantize", "Dequantize"} <= ops
    x = digits["x"]
    (fl,) = _ort(onnx.load(digits["onnx"]), {"x": x})
    # every integer tensor, and the output: onnxruntime (bodies) == NumPy simulator, exactly
    names = [n.output[0] for n in proto.graph.node
             if n.op_type in ("Quantize", "QVMM", "AddInTile", "Requantize")]
    expose(proto, names)
    got = _ort(proto, {"x": x})
    sim = Reference(proto, None).run({"x": x})
    assert len(got) == len(sim) == 1 + len(names)
    for a, b, name in zip(got, sim, ["out"] + names):
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    acc_f = (fl.argmax(1) == digits["labels"]).mean()
    acc_q = (got[0].argmax(1) == digits["labels"]).mean()
    assert acc_f == pytest.approx(0.9805, abs=1e-3)
    assert acc_q >= acc_f - 0.01


def test_hp_layers_and_precision_table_improve(digits, tmp_path):
    feeds = {"x": digits["x"][:128]}
    m8, _, r8 = quantized_lower(digits["onnx"], digits["table"])
    rep8 = layer_report(digits["onnx"], m8, feeds, r8)
    worst = [w["layer"] for w in worst_layers(rep8)][:2]
    prec = tmp_path / "prec.txt"
    prec.write_text("".join(f"{w} int16\n" for w in worst))
    m16, _, r16 = quantized_lower(digits["onnx"], digits["table"], precision=str(prec))
    assert {r["layer"] for r in r16 if r["bits"] == 16} == set(worst)
    assert all(r["acc_bits"] == 64 for r in r16 if r["bits"] == 16)
    rep16 = layer_report(digits["onnx"], m16, feeds, r16)
    assert rep16["outputs"][0]["sqnr_db"] > rep8["outputs"][0]["sqnr_db"] + 1.0
    # int16 layers are bit-true too
    proto = ir.serde.serialize_model(m16)
    assert np.array_equal(_ort(proto, feeds)[0], Reference(proto, None).run(feeds)[0])
    # a node named `_hp` is 16-bit without any table
    model = onnx.load(digits["onnx"])
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    conv.name = "first_conv_hp"
    from paddle_npu.npu.passes.marks import Marks
    _, _, rh = quantized_lower(model, digits["table"], marks=Marks(compile_mode=2))
    assert [r["bits"] for r in rh if r["layer"] == "first_conv_hp"] == [16]
    assert [r["bits"] for r in rh if r["layer"] != "first_conv_hp"] == [8, 8, 8]


def test_qdq_export_agrees_with_simulator(digits):
    """Where the arithmetic is the same the int8 tensors are equal: the Quantize of a tensor
    both compute from the same float values (the model input; inputs fed by exact int8
    chains). Where it is not: the QDQ model requantises a layer's output from a float32
    convolution of the dequantised values with round-half-even, the NPU from the exact
    int32 accumulator with a fixed-point multiplier and round-half-away -- near-ties land
    one step apart (at most 1 LSB, rarely), and those differences then reach later layers'
    inputs through pooling."""
    m, _, records = quantized_lower(digits["onnx"], digits["table"])
    qdq = export_qdq(digits["onnx"], records)
    float_weights = [i.name for i in qdq.graph.initializer
                     if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) >= 2]
    assert not float_weights, "the float weights the QDQ layers replaced are left in"
    proto = ir.serde.serialize_model(m)
    for r in records:
        qdq.graph.output.extend([helper.make_tensor_value_info(f"{r['layer']}/{t}/q", 3, None)
                                 for t in ("x", "y")])
        expose(proto, [f"{r['layer']}/{t}" for t in ("quantize", "requantize")])
    x = digits["x"]
    got_q = dict(zip([o.name for o in qdq.graph.output], _ort(qdq, {"x": x})))
    got_s = dict(zip([o.name for o in proto.graph.output], Reference(proto, None).run({"x": x})))
    first = records[0]["layer"]
    assert np.array_equal(got_q[f"{first}/x/q"], got_s[f"{first}/quantize"])     # exact
    for r in records:
        yq, ys = got_q[f"{r['layer']}/y/q"], got_s[f"{r['layer']}/requantize"]
        if yq.ndim == 4:
            ys = ys.transpose(0, 2, 1).reshape(yq.shape)
        diff = np.abs(yq.astype(np.int32) - ys)
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, r["layer"]
    out_q, out_s = got_q[qdq.graph.output[0].name], got_s[proto.graph.output[0].name]
    assert (out_q.argmax(1) == out_s.argmax(1)).mean() > 0.99


def test_quantized_model_keeps_its_scales(digits):
    """A QDQ model (what stage 1 makes of Paddle's quantize/dequantize_linear) lowers without
    calibration, keeping its activation and weight scales: the same integers as before."""
    m, _, records = quantized_lower(digits["onnx"], digits["table"])
    qdq = export_qdq(digits["onnx"], records)
    m2, _, records2 = quantized_lower(qdq, None)
    for a, b in zip(records, records2):
        assert b["weight_scales_kept"] and a["layer"] == b["layer"]
        assert a["s_x"] == b["s_x"] and a["s_y"] == b["s_y"]
    x = {"x": digits["x"][:64]}
    p1, p2 = ir.serde.serialize_model(m), ir.serde.serialize_model(m2)
    assert np.array_equal(_ort(p1, x)[0], _ort(p2, x)[0])


def _cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _check_qdq_scales(qdq, records):
    """The QDQ model holds each record's scales: its input's and output's, and the min / max
    of its weight's per-column scales."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in qdq.graph.initializer}
    made_by = {o: n for n in qdq.graph.node for o in n.output}
    nodes = {n.name: n for n in qdq.graph.node}
    for r in records:
        name = r["layer"]
        assert inits[f"{name}/x/scale"] == np.float32(r["s_x"]), name
        if r["s_y"] is None:
            assert f"{name}/y/scale" not in inits, name
        else:
            assert inits[f"{name}/y/scale"] == np.float32(r["s_y"]), name
        (w_dq,) = [made_by[i] for i in nodes[name].input[:2] if i in made_by and
                   made_by[i].op_type == "DequantizeLinear" and made_by[i].input[0] in inits]
        s_w = inits[w_dq.input[1]]
        assert (s_w.min(), s_w.max()) == (np.float32(r["s_w_min"]),
                                          np.float32(r["s_w_max"])), name


# the least cosine to float of a QDQ model's outputs, measured with onnxruntime on the zoo's
# test inputs (calibrated on the same): lstm 0.99991 (the lowered int8 model 0.99982), gru
# 0.99990 (0.99988)
QDQ_RNN_COSINE = 0.9998


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_qdq_of_an_rnn_is_its_unrolled_steps(zoo_onnx, name):
    """The quantised lowering unrolls an LSTM / GRU, so its QDQ model is the unrolled graph
    with QDQ around every step's matrix layers (what the NPU runs), one integer copy of each
    weight the steps share; onnxruntime runs it at about the integer plan's cosine."""
    onnx_bytes, feeds = zoo_onnx(name)
    m, _, records = quantized_lower(onnx_bytes, calibrate(onnx_bytes, feeds))
    assert any("/t1/" in r["layer"] for r in records)        # the steps are layers
    qdq = export_qdq(onnx_bytes, records)
    ops = [n.op_type for n in qdq.graph.node]
    assert "LSTM" not in ops and "GRU" not in ops
    assert ops.count("QuantizeLinear") == 2 * len(records)
    weights = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and
               n.input[0].endswith("/wq")]
    assert len(weights) < len(records)                       # shared by the steps
    _check_qdq_scales(qdq, records)
    want = _ort(onnx.load_from_string(onnx_bytes), feeds)
    got = _ort(qdq, feeds)
    lowered = _ort(ir.serde.serialize_model(m), feeds)
    cos = min(_cosine(a, b) for a, b in zip(want, got))
    assert cos >= QDQ_RNN_COSINE
    assert cos >= min(_cosine(a, b) for a, b in zip(want, lowered)) - 1e-4


def _detection_head():
    """A PicoDet-style head: Conv + ReLU, a grouped ConvTranspose (upsampling), the box
    regression's distribution integral (softmax over 8 bins @ a constant [8]: a 1-D weight)
    and a Gemm with alpha and a scalar C."""
    rng = np.random.default_rng(11)
    arrays = {"conv.w": rng.standard_normal((16, 3, 3, 3)) * 0.3,
              "conv.b": rng.standard_normal(16) * 0.1,
              "up.w": rng.standard_normal((16, 4, 2, 2)) * 0.3,
              "up.b": rng.standard_normal(8) * 0.1,
              "bins": np.arange(8.0), "shape": np.array([-1, 8]),
              "fc.w": rng.standard_normal((3, 8)), "fc.c": np.array(0.25)}
    inits = [onnx.numpy_helper.from_array(a.astype(np.int64 if k == "shape" else np.float32),
                                          k) for k, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv",
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ConvTranspose", ["r", "up.w", "up.b"], ["u"], name="up",
                              strides=[2, 2], group=2),
             helper.make_node("Reshape", ["u", "shape"], ["d"], name="to_bins"),
             helper.make_node("Softmax", ["d"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "bins"], ["dist"], name="integral"),
             helper.make_node("GlobalAveragePool", ["u"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.c"], ["cls"], name="fc", transB=1,
                              alpha=0.5, beta=2.0)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", 1,
                                                                            ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("dist", 1, None),
                               helper.make_tensor_value_info("cls", 1, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# measured as QDQ_RNN_COSINE, on 16 random inputs: 0.99996 (the lowered int8 model the same)
QDQ_HEAD_COSINE = 0.9999


def test_qdq_of_a_detection_head():
    """Every layer kind the quantised lowering takes has its QDQ form: a 1-D MatMul weight
    one scale, a Gemm's alpha and scalar C in its weight and int32 bias, a ConvTranspose's
    columns (group, output channel, tap) blocks of its weight."""
    model = _detection_head()
    x = {"x": np.random.default_rng(5).standard_normal((16, 3, 8, 8)).astype(np.float32)}
    m, _, records = quantized_lower(model, calibrate(model, x))
    assert {r["layer"] for r in records} == {"conv", "up", "integral", "fc"}
    qdq = export_qdq(model, records)
    _check_qdq_scales(qdq, records)
    want, got = _ort(model, x), _ort(qdq, x)
    lowered = _ort(ir.serde.serialize_model(m), x)
    cos = min(_cosine(a, b) for a, b in zip(want, got))
    assert cos >= QDQ_HEAD_COSINE
    assert cos >= min(_cosine(a, b) for a, b in zip(want, lowered)) - 1e-4


def test_qdq_at_opset_21_runs_with_onnxruntimes_optimisations():
    """A QDQ model that needs opset 21 (a ConvTranspose's blocked weight, an int16 layer)
    runs in onnxruntime as it loads it. There onnxruntime 1.32 moves an int8 pair through a
    MaxPool whose output no Quantize reads into a QuantizeLinear it then refuses itself
    ("output_dtype INT8 does not match y_zero_point type UINT8"), as on PP-OCRv5's server
    detector: the export puts the pair there itself (exact: a max of values on the grid is
    on it)."""
    rng = np.random.default_rng(3)
    inits = [onnx.numpy_helper.from_array(a.astype(np.float32), k) for k, a in (
        ("conv.w", rng.standard_normal((8, 3, 3, 3)) * 0.3),
        ("conv.b", rng.standard_normal(8) * 0.1),
        ("conv2.w", rng.standard_normal((8, 3, 3, 3)) * 0.3),
        ("up.w", rng.standard_normal((3, 4, 2, 2)) * 0.3),
        ("head.w", rng.standard_normal((4, 16, 1, 1)) * 0.3))]
    # a pooled layer's output joined with another's: no Quantize of ours follows the pool
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv",
                              pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["x", "conv2.w"], ["c2"], name="conv2",
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Concat", ["p", "c2"], ["j"], name="join", axis=1),
             helper.make_node("Conv", ["j", "head.w"], ["h"], name="head"),
             helper.make_node("ConvTranspose", ["x", "up.w"], ["u"], name="up",
                              strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1,
                                                                         ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("h", 1, None),
                               helper.make_tensor_value_info("u", 1, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = {"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)}
    m, _, records = quantized_lower(model, calibrate(model, x))
    qdq = export_qdq(model, records)
    assert qdq.opset_import[0].version == 21
    got, want = _ort(qdq, x), _ort(model, x)
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unoptimised = ort.InferenceSession(qdq.SerializeToString(), plain).run(None, x)
    lowered = _ort(ir.serde.serialize_model(m), x)
    for g, u, w, lo in zip(got, unoptimised, want, lowered):
        np.testing.assert_allclose(g, u, rtol=1e-5, atol=1e-5)
        assert _cosine(w, g) >= _cosine(w, lo) - 1e-4


def test_paddleslim_older_format_converts_exactly(tmp_path):
    """PaddleSlim's older format (fake_quantize_range_abs_max before each layer, integer-valued
    float weights, fake_channel_wise_dequantize_max_abs after it: tools/ptq_example.py --format
    fake; a fixture made once by it): stage 1 computes what Paddle's executor does. The NPU lowering needs no calibration:
    it turns each such layer back into the float layer with the model's scales (the layers
    Paddle leaves unquantised at the output read their accumulators out as floats) and agrees
    with Paddle's quantised run as closely as for the newer format. A calibration table given
    too only fills in the scales the model lacks (its layers' outputs)."""
    from train_example import load_digits_split

    from paddle_npu import export

    out = os.path.join(PTQ_FIXTURES, "fake")
    ref = np.load(os.path.join(out, "reference_io.npz"))
    x, want, near_tie = ref["in_x"], ref["out_0"], ref["near_tie"]
    path = str(tmp_path / "fake.onnx")
    export(os.path.join(out, "model.pdmodel"), os.path.join(out, "model.pdiparams"),
           save_file=path)
    (stage1,) = _ort(onnx.load(path), {"x": x})
    # exact where no quantiser input lies within float noise of a half step (the fixture's
    # near_tie mask, computed from Paddle's own values: tools/ptq_example.py says why)
    assert near_tie.sum() < len(x) // 3
    exact = ~near_tie
    assert np.abs(stage1[exact] - want[exact]).max() <= 1e-5 * np.abs(want).max()

    m, _, records = quantized_lower(path, None)
    assert records[0]["s_x"] == pytest.approx(1 / 127) and records[-1]["s_y"] is None
    (npu,) = _ort(ir.serde.serialize_model(m), {"x": x})
    assert (npu.argmax(1) == want.argmax(1)).mean() >= 0.997 and _cosine(npu, want) > 0.9999

    (xtr, _), _ = load_digits_split()          # a table adds scales; the model's own win
    m2, _, records2 = quantized_lower(path, calibrate(path, {"x": xtr[:512]}))
    assert [r["s_x"] for r in records2] == [r["s_x"] for r in records]
    assert all(r["s_y"] is not None for r in records2)
    (npu2,) = _ort(ir.serde.serialize_model(m2), {"x": x})
    assert (npu2.argmax(1) == want.argmax(1)).mean() >= 0.99 and _cosine(npu2, want) > 0.9995


FAKE_QUANT_TIES = """
import os, sys
os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np, paddle
paddle.enable_static()
main, start = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, start):
    x = paddle.static.data("x", [None, 12], "float32")
    scale = paddle.static.create_parameter([1], "float32", name="s",
        default_initializer=paddle.nn.initializer.Constant(2.54))
    blk = main.global_block()
    outs = []
    for op_type, rt in (("fake_quantize_range_abs_max", 1), ("fake_quantize_range_abs_max", 0),
                        ("fake_quantize_moving_average_abs_max", 1), ("fake_quantize_abs_max", 1)):
        out, out_scale = blk.create_var(dtype="float32"), blk.create_var(dtype="float32")
        inputs = {"X": x} if op_type == "fake_quantize_abs_max" else {"X": x, "InScale": scale}
        blk.append_op(type=op_type, inputs=inputs, outputs={"Out": out, "OutScale": out_scale},
                      attrs={"bit_length": 8, "is_test": True, "round_type": rt})
        outs.append(out)
    w = paddle.static.create_parameter([12], "float32", name="w",
        default_initializer=paddle.nn.initializer.Constant(0.5))
    deq = blk.create_var(dtype="float32")
    blk.append_op(type="fake_dequantize_max_abs", inputs={"X": outs[0], "Scale": scale},
                  outputs={"Out": deq}, attrs={"max_range": 127.0})
    outs.append(deq)
exe = paddle.static.Executor()
exe.run(start)
# 2.54 / 127 = 0.02 per step: k * 0.01 lands on every half step, ties both ways, and beyond
xv = (np.arange(-300, 300, 1, dtype=np.float32).reshape(50, 12) * 0.01).astype(np.float32)
got = exe.run(main, feed={"x": xv}, fetch_list=outs)
paddle.static.save_inference_model(sys.argv[1], [x], outs, exe, program=main)
np.savez(sys.argv[1] + "_io.npz", x=xv, **{f"out_{i}": g for i, g in enumerate(got)})
"""


def test_fake_quantize_ops_round_ties_as_paddle_does(tmp_path):
    """Every half step, both round_types, the scale from InScale or from the data: the same
    integers as Paddle's executor; and the per-tensor dequantiser."""
    from paddle_npu import export

    script = tmp_path / "make.py"
    script.write_text(FAKE_QUANT_TIES)
    prefix = str(tmp_path / "fq")
    r = subprocess.run([sys.executable, str(script), prefix], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    io = np.load(prefix + "_io.npz")
    path = str(tmp_path / "fq.onnx")
    export(prefix + ".pdmodel", prefix + ".pdiparams", save_file=path)
    got = _ort(onnx.load(path), {"x": io["x"]})
    for i, g in enumerate(got):
        want = io[f"out_{i}"]
        assert np.array_equal(g, want) if i < 4 else np.allclose(g, want, rtol=1e-6), i
    assert not np.array_equal(io["out_0"], io["out_1"])     # the two round_types differ


def test_paddle_quantised_model_keeps_paddles_scales(tmp_path):
    """A model Paddle itself quantised (post-training quantisation, quantize_linear /
    dequantize_linear, int8 weights in the params file: a fixture made once by
    tools/ptq_example.py) against Paddle's own run of it. Stage 1 (QDQ ONNX in onnxruntime) and the NPU lowering without any
    calibration table, on the model's scales, agree with Paddle on every class; values differ
    only where a product lands within float rounding of a half step (Paddle and onnxruntime
    divide by the scale in different orders): one step, a fraction of a percent at the output.
    The last layer, whose output the model leaves in float, reads its accumulator out as
    floats."""
    from paddle_npu import export

    out = os.path.join(PTQ_FIXTURES, "onnx")
    ref = np.load(os.path.join(out, "reference_io.npz"))
    x, want = ref["in_x"], ref["out_0"]
    path = str(tmp_path / "ptq.onnx")
    export(os.path.join(out, "model.pdmodel"), os.path.join(out, "model.pdiparams"),
           save_file=path)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    (stage1,) = _ort(onnx.load(path), {"x": x})
    assert (stage1.argmax(1) == want.argmax(1)).all()
    assert _cosine(stage1, want) > 0.99999

    m, _, records = quantized_lower(path, None)
    assert [r["s_y"] is None for r in records] == [False] * (len(records) - 1) + [True]
    assert sum(r["weight_scales_kept"] for r in records) >= 2    # the two without a BN fold
    assert records[0]["s_x"] == pytest.approx(1 / 127)             # x@scale = 1.0, int8
    (npu,) = _ort(ir.serde.serialize_model(m), {"x": x})
    assert (npu.argmax(1) == want.argmax(1)).mean() >= 0.997
    assert _cosine(npu, want) > 0.9999
    # the same in one command, from the Paddle files
    r = subprocess.run([sys.executable, "-m", "paddle_npu", "convert",
                        os.path.join(out, "model.pdmodel"),
                        "-o", str(tmp_path / "q.onnx"), "--npu", "npu256", "--quantize", "int8"],
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (cli,) = _ort(onnx.load(str(tmp_path / "q.onnx")), {"x": x})
    assert np.array_equal(cli, npu)


def test_cli_calibrate_lower_report(digits, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = lambda *a: subprocess.run([sys.executable, "-m", "paddle_npu", *a], env=env,  # noqa
                                    capture_output=True, text=True, cwd=tmp_path)
    r = run("calibrate", digits["onnx"], "--data", str(digits["dir"] / "calib.npz"),
            "-o", "t.json", "--method", "percentile")
    assert r.returncode == 0, r.stderr
    assert json.load(open(tmp_path / "t.json"))["method"] == "percentile"
    r = run("lower", digits["onnx"], "-o", "q.onnx", "--quantize", "int8",
            "--calibration", "t.json", "--qdq", "qdq.onnx")
    assert r.returncode == 0, r.stderr
    assert records_of(str(tmp_path / "q.onnx")) and os.path.exists(tmp_path / "qdq.onnx")
    ref = os.path.join(EXAMPLE, "reference_io.npz")
    r = run("quant-report", digits["onnx"], "--calibration", "t.json", "--data", ref,
            "--auto-hp", "1", "--plot", "sqnr.png", "--json", "rep.json")
    assert r.returncode == 0, r.stderr
    rep = json.load(open(tmp_path / "rep.json"))
    assert rep["accuracy"]["int8"] >= rep["accuracy"]["float"] - 0.01
    floor = rep["input_floor"][0]
    assert "floor: the float model with only its inputs rounded" in r.stdout
    assert floor["cosine"] > rep["outputs"][0]["cosine"] > 0.999
    assert len(rep["auto_hp"]["promoted"]) == 1
    assert "SQNR" in r.stdout and (os.path.exists(tmp_path / "sqnr.png") or
                                   os.path.exists(tmp_path / "sqnr.svg"))


def _opset7_conv_model():
    """A Conv -> Relu -> Flatten -> Gemm model as an opset-7 export writes one: IR version 3,
    its weights listed as graph inputs too."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    fc = rng.standard_normal((4 * 6 * 6, 3)).astype(np.float32) * 0.1
    fb = rng.standard_normal(3).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w, "conv.w"), (b, "conv.b"),
                                                            (fc, "fc.w"), (fb, "fc.b"))]
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc")]
    graph = helper.make_graph(
        nodes, "opset7", [helper.make_tensor_value_info("x", 1, ["n", 1, 8, 8])] +
        [helper.make_tensor_value_info(i.name, 1, list(i.dims)) for i in inits],
        [helper.make_tensor_value_info("y", 1, ["n", 3])], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3)
    onnx.checker.check_model(m)
    return m


def test_quant_report_with_input_shape_on_an_opset7_model(tmp_path):
    """--input-shape takes the path `lower` takes (the sizes fixed by the pipeline, after the
    model is upgraded), so an opset-7 model whose weights are graph inputs reports as it
    lowers."""
    onnx.save(_opset7_conv_model(), str(tmp_path / "m.onnx"))
    x = np.random.default_rng(0).standard_normal((6, 1, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x)
    save_table(calibrate(str(tmp_path / "m.onnx"), str(tmp_path / "d.npz")),
               str(tmp_path / "t.json"))
    run = lambda *a: subprocess.run([sys.executable, "-m", "paddle_npu", *a],  # noqa
                                    env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                                    text=True, cwd=tmp_path)
    shape = ("--input-shape", "x:1,1,8,8")
    r = run("quant-report", "m.onnx", "--calibration", "t.json", "--data", "d.npz", *shape,
            "--auto-hp", "1", "--json", "rep.json")
    assert r.returncode == 0, r.stderr
    rep = json.load(open(tmp_path / "rep.json"))
    assert rep["outputs"][0]["cosine"] > 0.999 and len(rep["auto_hp"]["promoted"]) == 1
    # the float model at fixed sizes (verify's and calibrate's reference) is a valid model
    # the version converter takes further
    shaped = with_input_shapes(str(tmp_path / "m.onnx"), {"x": [-1, 1, 8, 8]})
    onnx.checker.check_model(shaped)
    assert upgrade_opset(shaped, 15).opset_import[0].version == 15
    r = run("lower", "m.onnx", "-o", "q.onnx", "--quantize", "int8", "--calibration",
            "t.json", *shape)
    assert r.returncode == 0, r.stderr


def test_input_floor_is_the_float_model_on_rounded_inputs():
    """An identity model's floor is exactly the rounding of its input to the int8 grid of the
    calibrated threshold: cosine / SQNR computed here by hand."""
    from paddle_npu.npu.quant.accuracy import input_floor, metrics

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id",
                          [helper.make_tensor_value_info("x", 1, ["n", 5])],
                          [helper.make_tensor_value_info("y", 1, ["n", 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(3).standard_normal((40, 5)).astype(np.float32) * 2
    table = {"format": "paddle_npu.calibration/1",
             "tensors": {"x": {"threshold": 3.0, "absmax": float(np.abs(x).max())}}}
    step = 3.0 / 127
    want = metrics(x, np.clip(np.rint(x / step), -128, 127) * step)
    (got,) = input_floor(m, table, {"x": x})
    assert got["name"] == "y" and got["sqnr_db"] == pytest.approx(want["sqnr_db"], abs=1e-4)
    assert got["cosine"] == pytest.approx(want["cosine"], abs=1e-7) and got["cosine"] < 1
    (got16,) = input_floor(m, table, {"x": x}, bits=16)
    assert got16["sqnr_db"] > got["sqnr_db"] + 40


def test_cli_calibrate_on_a_folder_of_images(digits, tmp_path):
    """The 512 calibration digits as PNG files (pixel = 15 x the 0..16 value) calibrated with
    --scale 1/240 give the .npz calibration's table: the same model inputs, so the same ranges."""
    from PIL import Image
    from train_example import load_digits_split

    (xtr, _), _ = load_digits_split()
    folder = tmp_path / "images"
    folder.mkdir()
    for i, img in enumerate(xtr[:512, 0]):
        Image.fromarray(np.rint(img * 240).astype(np.uint8)).save(folder / f"{i:04d}.png")
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = lambda *a: subprocess.run([sys.executable, "-m", "paddle_npu", "calibrate",  # noqa
                                     digits["onnx"], "-o", "t.json", *a], env=env,
                                    capture_output=True, text=True, cwd=tmp_path)
    r = run("--data", str(folder), "--scale", str(1 / 240))
    assert r.returncode == 0, r.stderr
    got, want = load_table(str(tmp_path / "t.json")), load_table(digits["table"])
    assert got["samples"] == 512 and got["tensors"].keys() == want["tensors"].keys()
    for name, e in want["tensors"].items():
        for key in ("min", "max", "absmax", "threshold"):
            assert got["tensors"][name][key] == pytest.approx(e[key], rel=1e-5, abs=1e-6), \
                (name, key)
    os.remove(tmp_path / "t.json")
    r = run("--data", str(folder))          # the normalisation is not guessed
    assert r.returncode == 2 and "needs the model's normalisation" in r.stderr
    r = run("--data", str(digits["dir"] / "calib.npz"), "--std", "2")
    assert r.returncode == 2 and "--std: preprocessing options, they need --data FOLDER" in \
        r.stderr
    assert not os.path.exists(tmp_path / "t.json")


def _random_chain(depth=12, width=8, seed=0):
    """A deep, narrow random-weight Conv+ReLU chain (He init) -> GAP -> MatMul: like the
    zoo's mobilenet_v1, it amplifies a perturbation layer by layer, so an early layer's
    rounding noise shows up as large SQNR drops in the late layers."""
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x, c = [], [], "x", 3
    for i in range(depth):
        w = (rng.standard_normal((width, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, c = f"r{i}", width
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("MatMul", ["flat", "fcw"], ["y"], name="fc")]
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((width, 10)) / np.sqrt(width)).astype(np.float32), "fcw"))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, ["n", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, ["n", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_auto_hp_ranks_by_measured_output_sensitivity():
    """In an amplifying chain the layers with the largest added noise are the late ones, yet
    promoting them buys little: auto-hp measures what each promotion does to the output."""
    from paddle_npu.npu.quant.promote import auto_hp

    model = _random_chain()
    rng = np.random.default_rng(1)
    table = calibrate(model, {"x": rng.standard_normal((64, 3, 8, 8)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((32, 3, 8, 8)).astype(np.float32)}
    added = auto_hp(model, table, feeds, 2, rank="added")
    measured = auto_hp(model, table, feeds, 2)
    before = measured["before"]["outputs"][0]["sqnr_db"]
    assert added["before"]["outputs"][0]["sqnr_db"] == pytest.approx(before)
    sens = measured["sensitivity"]
    assert set(sens) == {r["layer"] for r in measured["before"]["layers"]}
    assert measured["promoted"] == sorted(sens, key=lambda k: -sens[k])[:2]
    assert set(measured["promoted"]) != set(added["promoted"])
    after_m = measured["after"]["outputs"][0]["sqnr_db"]
    after_a = added["after"]["outputs"][0]["sqnr_db"]
    assert after_m > before + 1.5, (before, after_m)
    assert after_m > after_a + 1.5, (after_a, after_m)


def test_hp_until_cosine_promotes_the_fewest_that_reach_it():
    """--hp-until-cosine: the count found is the smallest prefix of the sensitivity ranking
    whose output cosine reaches the target (one fewer does not); a target no promotion
    reaches promotes every layer and says so; one int8 already meets promotes none."""
    from paddle_npu.npu.quant.promote import auto_hp, min_cosine as _min_cosine
    from paddle_npu.npu.quant.accuracy import layer_report

    model = _random_chain()
    rng = np.random.default_rng(1)
    table = calibrate(model, {"x": rng.standard_normal((64, 3, 8, 8)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((32, 3, 8, 8)).astype(np.float32)}
    full = auto_hp(model, table, feeds, 0, until_cosine=2.0)           # unreachable
    assert full["reached"] is False and len(full["promoted"]) == 13
    cos = lambda rep: _min_cosine(rep["_float"], rep["_quant"], 32)  # noqa: E731  (per sample)
    lo, hi = cos(full["before"]), cos(full["after"])
    target = lo + 0.6 * (hi - lo)
    res = auto_hp(model, table, feeds, 0, until_cosine=target)
    k = len(res["promoted"])
    assert res["reached"] and cos(res["after"]) >= target and 0 < k < 13
    ranking = sorted(res["sensitivity"], key=lambda name: -res["sensitivity"][name])
    assert res["promoted"] == ranking[:k]
    fewer, _, recs = quantized_lower(model, table, precision={n: "int16" for n in ranking[:k - 1]})
    assert cos(layer_report(model, fewer, feeds, recs)) < target
    none = auto_hp(model, table, feeds, 0, until_cosine=lo - 1e-6)
    assert none["reached"] and none["promoted"] == []


def test_a_search_probe_stops_at_the_first_sample_below_its_bound(monkeypatch):
    """A probe of the promotion / ADC search runs the samples one at a time and stops at the
    first below the bound, the next probe starting with that one; one that meets the bound
    (or has none) runs them all and gives the exact worst cosine, as the whole run does."""
    from paddle_npu.npu.quant import promote
    from paddle_npu.npu.quant.samples import open_samples

    model = _random_chain()
    rng = np.random.default_rng(1)
    table = calibrate(model, {"x": rng.standard_normal((64, 3, 8, 8)).astype(np.float32)})
    feeds = open_samples(model, {"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)})
    m, _, recs = quantized_lower(model, table)
    rep = layer_report(model, m, feeds, recs)
    name = next(iter(rep["_float"]))
    each = [promote.min_cosine({name: rep["_float"][name][i:i + 1]},
                               {name: rep["_quant"][name][i:i + 1]}) for i in range(16)]
    run = []
    real = promote.tensors_by_sample
    monkeypatch.setattr(promote, "tensors_by_sample", lambda *a: (
        run.append(i) or (i, got) for i, got in real(*a)))
    probe = promote.Probe(feeds, rep["_float"], [], 16)
    bound = sorted(each)[8]
    first = next(i for i, c in enumerate(each) if c < bound)
    assert probe.worst(m, bound) == pytest.approx(each[first], abs=1e-9)
    assert run == list(range(first + 1)) and probe.order[0] == first
    run.clear()
    assert probe.worst(m, bound) == pytest.approx(each[first], abs=1e-9) and run == [first]
    run.clear()
    assert probe.worst(m, min(each)) == pytest.approx(min(each), abs=1e-9) and len(run) == 16
    assert probe.worst(m) == pytest.approx(min(each), abs=1e-9)


def test_suggestions_follow_each_layers_share_of_the_added_noise():
    from paddle_npu.npu.quant.accuracy import render, suggest

    def layer(name, added, sqnr, bits=8):
        return {"layer": name, "op": "Conv", "bits": bits, "cosine": 0.999, "sqnr_db": sqnr,
                "drop_db": 1.0, "max_abs_diff": 0.1, "added_nsr": added}

    layers = [layer("a", 6e-4, 30), layer("b", 1e-4, 28), layer("c", 1e-4, 18),
              layer("d", 2e-4, 25, bits=16), layer("e", 1e-4, 12, bits=16)]
    total = 1.1e-3
    got = {m["layer"]: suggest(m, total) for m in layers}
    assert got["a"] == "mark `_hp` (16-bit): adds 55% of the noise"
    assert got["b"] == "fine at int8"
    assert got["c"] == "mark `_hp` (16-bit): noisy output"
    assert got["d"] == "fine at int16" and got["e"].startswith("16-bit: mark `_cpu`")
    assert suggest(layers[0], total, hp_available=False).startswith("mark `_cpu`")
    text = render({"layers": layers, "outputs": []})
    assert text.splitlines()[1].startswith("a ") and "adds 55% of the noise" in text


def _fake_quant_layer(dequant_threshold):
    """x -> a fake quantiser (round(clip(x) * 127 / 2), tagged as stage 1 tags it) -> Conv with
    integer-valued weights -> the dequantiser's Mul (tagged with the scales it applies)."""
    from onnx import numpy_helper

    from paddle_npu.mappers.quantize import FAKE_DEQUANT_KEY, FAKE_QUANT_KEY

    rng = np.random.default_rng(4)
    w = rng.integers(-127, 128, (3, 2, 3, 3)).astype(np.float32)
    s_w = np.array([0.5, 0.8, 0.3], np.float32)
    k = (s_w / 127 * np.float32(dequant_threshold) / 127).reshape(1, 3, 1, 1)
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]),
             helper.make_node("Mul", ["xc", "k_x"], ["xs"]),
             helper.make_node("Round", ["xs"], ["xq"], name="fq"),
             helper.make_node("Conv", ["xq", "w"], ["acc"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["acc", "k"], ["y"], name="deq")]
    nodes[2].metadata_props.add(key=FAKE_QUANT_KEY, value=json.dumps(
        {"input": "x", "bits": 8, "threshold": 2.0, "round_type": 0}))
    nodes[4].metadata_props.add(key=FAKE_DEQUANT_KEY, value=json.dumps(
        {"weight_scales": s_w.tolist(), "weight_bits": 8,
         "input_threshold": dequant_threshold, "input_bits": 8}))
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("lo", np.float32(-2)), ("hi", np.float32(2)), ("k_x", np.float32(127 / 2)),
        ("w", w), ("k", k))]
    g = helper.make_graph(nodes, "fq", [helper.make_tensor_value_info("x", 1, ["n", 2, 5, 5])],
                          [helper.make_tensor_value_info("y", 1, ["n", 3, 5, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_older_format_layers_become_float_layers_with_the_models_scales():
    """The float layer computes what the literal one does, up to the input's own rounding,
    and records the scales; a dequantiser whose input scale is not the quantiser's is left
    as it is (it would not be the same layer)."""
    from paddle_npu.npu.pipeline import prepare
    from paddle_npu.npu.quant.qdq import strip_qdq

    x = np.random.default_rng(5).uniform(-2.5, 2.5, (4, 2, 5, 5)).astype(np.float32)
    model = _fake_quant_layer(2.0)
    (want,) = _ort(model, {"x": x})
    m, table, scales = strip_qdq(prepare(model))
    assert [n.op_type for n in m.graph] == ["Conv"]
    assert table["tensors"]["x"]["threshold"] == 2.0
    (s_w,) = scales.values()
    assert np.allclose(s_w, np.array([0.5, 0.8, 0.3]) / 127)
    # the float layer on the input rounded to the same grid gives the literal layer's output
    step = np.float32(2.0 / 127)
    xq = np.clip(np.rint(x / step), -127, 127) * step
    (got,) = _ort(ir.serde.serialize_model(m), {"x": xq})
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
    m2, table2, _ = strip_qdq(prepare(_fake_quant_layer(3.0)))
    assert table2 is None and [n.op_type for n in m2.graph][-2:] == ["Conv", "Mul"]


def _fixed_batch_cnn(batch=1):
    """Conv + ReLU, flattened by a Reshape to [batch, 256] (the batch baked in, as a program
    exported for batch 1 has it), and a MatMul: the input is [batch, 3, 8, 8]."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    fc = (rng.standard_normal((256, 5)) / 10).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    return model(nodes, [("x", [batch, 3, 8, 8])], [("y", [batch, 5])],
                 [("w", w), ("b", b), ("fc", fc), ("shape", np.array([batch, 256], np.int64))])


def test_a_fixed_batch_program_is_calibrated_and_measured_sample_by_sample():
    m = _fixed_batch_cnn(1)
    x = np.random.default_rng(12).standard_normal((8, 3, 8, 8)).astype(np.float32)
    table = calibrate(m, {"x": x})
    assert table["samples"] == 8
    assert table["tensors"]["x"]["absmax"] == float(np.abs(x).max())     # every sample seen
    q, _, records = quantized_lower(m, table)
    rep = layer_report(m, q, {"x": x}, records)
    assert rep["_float"]["y"].shape == (8, 5) and rep["outputs"][0]["cosine"] > 0.99
    from paddle_npu.npu.quant.promote import auto_hp
    assert auto_hp(m, table, {"x": x}, 1)["promoted"]
    # a batch fixed to 2 runs in pairs, and says so when the samples do not pair up
    assert calibrate(_fixed_batch_cnn(2), {"x": x})["samples"] == 8
    with pytest.raises(ConversionError, match="batches of exactly 2"):
        calibrate(_fixed_batch_cnn(2), {"x": x[:7]})


def test_auto_hp_with_input_shape_runs_its_data_in_the_batches_the_lowered_model_takes():
    m = _block_open_batch()
    x = np.random.default_rng(13).standard_normal((8, 3, 8, 8)).astype(np.float32)
    table = calibrate(m, {"x": x})
    from paddle_npu.npu.quant.promote import auto_hp
    res = auto_hp(m, table, {"x": x}, 1, input_shape={"x": [1, 3, 8, 8]})
    assert len(res["promoted"]) == 1 and res["after"]["outputs"][0]["cosine"] > 0.99


def _block_open_batch():
    rng = np.random.default_rng(14)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((6, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    return model(nodes, [("x", ["n", 3, 8, 8])], [("y", ["n", 6, 8, 8])],
                 [("w", w), ("w2", w2)])


def test_calibration_streams_an_npz_and_keeps_a_bounded_sample_per_tensor(tmp_path,
                                                                          monkeypatch):
    from paddle_npu.npu.quant.calibrate import TensorStats
    m = _block_open_batch()
    x = np.random.default_rng(15).standard_normal((20, 3, 8, 8)).astype(np.float32)
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, x=x)
        whole = calibrate(m, {"x": x})
        # the file is read a slice at a time, never an array whole
        with monkeypatch.context() as patch:
            patch.setattr(np.lib.npyio.NpzFile, "__getitem__",
                          lambda self, key: pytest.fail("an array was read whole"))
            streamed = calibrate(m, str(path))
        assert streamed["tensors"] == whole["tensors"]
        assert calibrate(m, str(path), limit=5)["tensors"]["x"]["absmax"] == \
            float(np.abs(x[:5]).max())
    # the values kept for percentile / MSE: at most the cap, whatever the sample count
    stats = TensorStats(np.random.default_rng(0), cap=1000)
    for k in range(500):
        stats.add(np.full(64, k, np.float32))
    kept = stats.values()
    assert kept.size == 1000 and stats.seen == 500 * 64
    assert 150 < kept.mean() < 350     # a sample of the whole stream, not its start


def test_progress_line_takes_the_items_as_they_come(capsys):
    from paddle_npu.progress import progress_bar
    taken = []

    def items():
        for k in range(3):
            taken.append(k)
            yield k
    bar = progress_bar(items(), "calibrate", enabled=True, total=3)
    assert next(bar) == 0 and taken == [0]
    assert list(bar) == [1, 2]
    assert "calibrate [" in capsys.readouterr().err


@pytest.mark.parametrize("key,value", [("threshold", float("nan")), ("absmax", float("inf")),
                                       ("min", float("nan"))])
def test_load_table_refuses_a_statistic_that_is_not_finite(tmp_path, key, value):
    m = _block_open_batch()
    table = calibrate(m, {"x": np.ones((2, 3, 8, 8), np.float32)})
    table["tensors"]["c"][key] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    for source in (str(path), table):
        with pytest.raises(ConversionError, match=f"tensor 'c' has {key} .*not a finite"):
            load_table(source)


def test_a_tensor_all_zero_in_calibration_keeps_the_layers_bias():
    # the input is zero on every calibration sample (threshold 0): the layer's output is
    # its bias, which a tiny input scale must not push out of the accumulator
    rng = np.random.default_rng(16)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    w2 = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Conv", ["c", "w2"], ["y"], name="conv2")]
    m = model(nodes, [("x", ["n", 3, 8, 8])], [("y", ["n", 4, 8, 8])],
              [("w", w), ("b", b), ("w2", w2)])
    x = np.zeros((4, 3, 8, 8), np.float32)
    table = calibrate(m, {"x": x})
    assert table["tensors"]["x"]["threshold"] == 0
    q, _, records = quantized_lower(m, table)
    rep = layer_report(m, q, {"x": x}, records)
    assert all(lay["cosine"] > 0.999 for lay in rep["layers"]), rep["layers"]
    # an output calibrated all zero: its Requantize saturates, never wraps around int64
    mult, div = fixed_point(np.array([1e20, 0.5]), 1 << 20)
    assert np.all(mult > 0) and np.all(mult.astype(float) * (1 << 20) < 2.0 ** 62)


def test_auto_hp_refuses_to_rank_layers_on_nan_measures():
    rng = np.random.default_rng(17)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Conv", ["c", "w2"], ["d"], name="conv2"),
             helper.make_node("Sqrt", ["d"], ["y"], name="root")]   # NaN where d < 0
    m = model(nodes, [("x", ["n", 3, 8, 8])], [("y", ["n", 4, 8, 8])],
              [("w", w), ("w2", rng.standard_normal((4, 4, 1, 1)).astype(np.float32))])
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    table = calibrate(m, {"x": x})
    assert "y" in table["non_finite"] and "y" not in table["tensors"]
    from paddle_npu.npu.quant.promote import auto_hp
    with pytest.raises(ConversionError, match="output 'y': its cosine / SQNR to float is NaN"):
        auto_hp(m, table, {"x": x}, 1)


def test_a_matmul_holding_its_constant_first_quantises_on_its_activation():
    """A @ x with A constant (a TPS head's fixed matrix): lowered as (x^T A^T)^T, its integer
    plan reads x's calibrated range (A has none), runs bit-true, and exports as QDQ."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((5, 8)).astype(np.float32)
    m = model([helper.make_node("MatMul", ["a", "x"], ["y"], name="tps")],
              [("x", [None, 8, 6])], [("y", None)], [("a", a)])
    data = serialized(m)
    feeds = lambda n: {"x": rng.standard_normal((n, 8, 6)).astype(np.float32)}  # noqa: E731
    table = calibrate(data, feeds(64))
    assert "a" not in table["tensors"]
    lowered, _, records = quantized_lower(data, table, 8)
    assert [(r["layer"], r["input"]) for r in records] == [("tps", "x")]
    proto = ir.serde.serialize_model(lowered)
    x = feeds(3)
    got = _ort(proto, x)[0]
    assert np.array_equal(got, Reference(proto, None).run(x)[0])
    assert _cosine(got, _ort(m, x)[0]) > 0.999
    qdq = export_qdq(data, records)
    assert _cosine(_ort(qdq, x)[0], _ort(m, x)[0]) > 0.999


def _moved_outputs_model():
    """x -> Conv (its output read only by a Reshape) -> MatMul with its constant first (the
    lowering transposes its output back, merged with the Reshape after it) -> Conv ->
    ConvTranspose (which reads its input as rows: that Conv's output exists in no form both
    models have)."""
    rng = np.random.default_rng(3)
    w = lambda name, *s: onnx.numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32), name)
    inits = [w("w0", 6, 3, 3, 3), w("front_w", 5, 16), w("w1", 4, 1, 3, 3),
             w("up_w", 4, 2, 3, 3)]
    inits += [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
              for v, n in (([1, 6, 16], "rows"), ([1, 1, 5, 6], "shape"))]
    nodes = [helper.make_node("Conv", ["x", inits[0].name], ["c0"], name="conv0",
                              pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c0", "rows"], ["f0"]),                 # [1, 6, 16]
             helper.make_node("Transpose", ["f0"], ["t0"], perm=[0, 2, 1]),       # [1, 16, 6]
             helper.make_node("MatMul", [inits[1].name, "t0"], ["m0"], name="front"),  # [1,5,6]
             helper.make_node("Reshape", ["m0", "shape"], ["r0"]),                # [1, 1, 5, 6]
             helper.make_node("Conv", ["r0", inits[2].name], ["c1"], name="conv1",
                              pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c1", inits[3].name], ["y"], name="up",
                              strides=[2, 2])]
    gr = helper.make_graph(nodes, "moved", [helper.make_tensor_value_info("x", 1, [1, 3, 4, 4])],
                           [helper.make_tensor_value_info("y", 1, [1, 2, 11, 13])], inits)
    return helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_layer_report_measures_outputs_the_lowering_moved():
    """A layer whose output the lowering moved into another layout (merged with the reshape
    after it) is measured at the moved tensor both models have: the same numbers, as the
    metrics do not depend on the elements' order. Before, such layers were missing from the
    report, so neither it nor --auto-hp could see them."""
    from paddle_npu.npu.quant.accuracy import metrics, run_tensors

    model = _moved_outputs_model()
    rng = np.random.default_rng(0)
    table = calibrate(model, {"x": rng.standard_normal((16, 3, 4, 4)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((8, 3, 4, 4)).astype(np.float32)}
    q, _, records = quantized_lower(model, table, 8)
    qproto = ir.serde.serialize_model(q)
    assert not {"c0", "m0"} & {v for n in qproto.graph.node for v in n.output}
    rep = {lay["layer"]: lay for lay in layer_report(model, q, feeds, records)["layers"]}
    assert {"conv0", "front"} <= set(rep)
    f = run_tensors(model.SerializeToString(), feeds, ["f0", "r0"])
    qv = run_tensors(qproto.SerializeToString(), feeds, ["f0", "r0"])
    for layer, at in (("conv0", "f0"), ("front", "r0")):
        expect = metrics(f[at], qv[at])
        assert rep[layer]["tensor"] == at and expect["cosine"] < 1 - 1e-6
        assert rep[layer]["cosine"] == pytest.approx(expect["cosine"], abs=1e-12)
        assert rep[layer]["sqnr_db"] == pytest.approx(expect["sqnr_db"], abs=1e-9)


def test_auto_hp_ranks_a_layer_the_report_cannot_see_first():
    """conv1's output is read by the ConvTranspose as rows: no tensor both models have holds
    it, so the report cannot measure it. The promotion search ranks it first rather than
    never (it had stayed at 8 bits whatever the target)."""
    from paddle_npu.npu.quant.promote import auto_hp

    model = _moved_outputs_model()
    rng = np.random.default_rng(0)
    table = calibrate(model, {"x": rng.standard_normal((16, 3, 4, 4)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((8, 3, 4, 4)).astype(np.float32)}
    res = auto_hp(model, table, feeds, 1, rank="added")
    assert "conv1" not in {lay["layer"] for lay in res["before"]["layers"]}
    assert res["promoted"] == ["conv1"]
    assert {r["layer"]: r["bits"] for r in res["records"]}["conv1"] == 16


def _picked_rows():
    """Class scores, their arg-max, and the picked class's embedding row as the output: an
    output that hinges on a discrete pick, as a decoder's next token or DETR's queries."""
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((16, 64)) / 4).astype(np.float32)
    emb = rng.standard_normal((64, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"], name="classifier"),
             helper.make_node("ArgMax", ["scores"], ["pick"], axis=1, keepdims=0),
             helper.make_node("Gather", ["emb", "pick"], ["y"], axis=0)]
    return model(nodes, [("x", ["n", 16])], [("y", ["n", 8])], [("w", w), ("emb", emb)])


def test_hp_until_cosine_judges_outputs_given_the_float_models_picks():
    """Near-tied scores swap the arg-max at 8 bits on some samples, and the row picked
    then differs wholesale. verify judges such outputs given the float model's picks; so
    does the promotion search: the scores are fine at 8 bits, nothing needs 16. (Judged
    free-running it had promoted every layer and still missed.)"""
    from paddle_npu.npu.quant.promote import auto_hp, min_cosine as _min_cosine
    from paddle_npu.npu.quant.accuracy import run_tensors

    m = _picked_rows()
    rng = np.random.default_rng(9)
    table = calibrate(m, {"x": rng.standard_normal((64, 16)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((64, 16)).astype(np.float32)}
    q, _, _ = quantized_lower(m, table, 8)
    free = run_tensors(ir.serde.serialize_model(q).SerializeToString(), feeds, ["y"])
    want = run_tensors(m.SerializeToString(), feeds, ["y"])
    assert _min_cosine(want, free, 64) < 0.5          # some picks swapped
    res = auto_hp(m, table, feeds, 0, until_cosine=0.99, rank="added")
    assert res["promoted"] == [] and res["reached"] is True


def test_the_report_and_its_floor_judge_outputs_given_the_float_models_picks():
    """quant-report judges as verify does: the picked rows, free-running far off where a
    near tie swapped, are exact given the float model's picks (the only layer before the
    pick is the classifier), and so is the floor of the inputs alone rounded."""
    from paddle_npu.npu.quant.accuracy import input_floor, layer_report

    m = _picked_rows()
    rng = np.random.default_rng(9)
    table = calibrate(m, {"x": rng.standard_normal((64, 16)).astype(np.float32)})
    feeds = {"x": rng.standard_normal((64, 16)).astype(np.float32)}
    q, _, records = quantized_lower(m, table, 8)
    rep = layer_report(m, q, feeds, records)
    [out] = rep["outputs"]
    assert out["judged"] == "given the float model's picks"
    assert out["cosine"] == 1.0 and out["max_abs_diff"] == 0
    assert [lay["layer"] for lay in rep["layers"]] == ["classifier"]
    assert rep["layers"][0]["cosine"] < 1.0           # the scores themselves are rounded
    [floor] = input_floor(m, table, feeds, 8)
    assert floor["judged"] == "given the float model's picks" and floor["max_abs_diff"] == 0


def test_held_values_are_fed_by_each_samples_rows():
    """A sampling grid's leading axis may hold several rows per image (a deformable
    attention's heads): each sample is fed its own block of rows, as a pick is its row."""
    from paddle_npu.npu.quant.accuracy import with_held
    from paddle_npu.npu.quant.samples import Samples

    x = np.arange(3, dtype=np.float32)[:, None]
    feeds = Samples(["x"], 3, lambda a, b: {"x": x[a:b]}, "the data")
    grid = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)      # two rows per sample
    picks = np.array([[7], [8], [9]])
    held = with_held(feeds, {"grid": grid, "picks": picks})
    part = held.read(1, 3)
    assert part["x"].tolist() == [[1.0], [2.0]]
    assert part["grid/held"].tolist() == grid[2:6].tolist()
    assert part["picks/held"].tolist() == [[8], [9]]
