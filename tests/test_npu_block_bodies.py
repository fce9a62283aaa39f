"""VMM tiles of depthwise and grouped layers: their weight is block-diagonal, and the
function body onnxruntime runs multiplies only the blocks (the NPU program keeps the whole
tile). Bodies against the NumPy reference, lowered layers against the model before."""
import numpy as np
import onnx
import pytest
from onnx import helper

from npu_helpers import assert_close, checked, model, on_arrays, serialized, three_way
from paddle_npu.compare import agreement
from paddle_npu.npu import DOMAIN, get_primitive, lower
from paddle_npu.npu.emulation import MIN_BODY_OPSET
from paddle_npu.npu.emulation.registry import emulation_of_op
from paddle_npu.npu.emulation.vmm import diagonal_blocks
from paddle_npu.npu.ops import ArrayModel
from paddle_npu.npu.chip.target import Target
from paddle_npu.npu.chip.tiling import Geometry, plan_tiles, tile_weight
from test_npu_ops import run_primitive

BIG = on_arrays(Target("big", rows=256, cols=256))   # depthwise Convs on tiles

VMM = get_primitive("VMM")
EMULATED_VMM = emulation_of_op("VMM")


def block_tile(n, k, m, seed=0):
    """n diagonal blocks of k x m random weights, zero elsewhere."""
    rng = np.random.default_rng(seed)
    w = np.zeros((n * k, n * m), dtype=np.float32)
    for j in range(n):
        w[j * k:(j + 1) * k, j * m:(j + 1) * m] = rng.standard_normal((k, m))
    return w


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("n,k,m,off,extra", [
    (28, 9, 1, 0, 0),        # a 3x3 depthwise layer's full tile on a 256-row array
    (4, 9, 1, 252, 0),       # the layer's last tile: fewer channels, rows read at an offset
    (5, 25, 1, 3, 7),        # 5x5 taps, in the middle of X's columns
    (3, 4, 2, 0, 0),         # grouped: 2 output channels per group
    (6, 1, 3, 2, 4),         # one row per block (a grouped 1x1 layer)
])
def test_block_body_matches_the_reference(n, k, m, off, extra, float32):
    w = block_tile(n, k, m, seed=n + k)
    assert diagonal_blocks(w) == (n, k, m)
    x = np.random.default_rng(1).standard_normal((2, 5, off + n * k + extra)).astype(np.float32)
    shapes = [list(x.shape), list(w.shape)]
    attrs = {"row_offset": off}
    derived = {"_blocks": (n, k, m)}      # as functions.attach_functions finds them
    fn = EMULATED_VMM.function_proto(MIN_BODY_OPSET, {**attrs, **derived}, shapes, float32=float32)
    assert f"blocks{n}x{k}x{m}" in fn.overload
    assert not any(node.op_type == "MatMul" and "W" in node.input for node in fn.node)
    got = run_primitive("VMM", [x, w], attrs, consts=(1,), float32=float32, shapes=shapes,
                        derived=derived)
    ref = VMM.reference(ArrayModel(256, 256), [x, w], attrs)[0]
    if float32:
        assert agreement(got, ref)["rel_diff"] <= 1e-6
    else:       # the exact body: float64 sums of the same products, rounded once
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("groups, found", [
    (31, [(16, 9, 1), (15, 9, 1)]),   # 2 arrays evenly filled: the last holds what is left
    (32, [(16, 9, 1)] * 2),           # 2 arrays either way: 16 in each
    (64, [(22, 9, 1)] * 2 + [(20, 9, 1)]),   # 3 arrays: 22 + 22 + 20, not 28 + 28 + 8
])
def test_tiles_of_a_depthwise_layer_are_found_block_diagonal(groups, found):
    """The packed plan's tiles of a depthwise layer (28 channels' 9 taps fit 256 rows)."""
    geo = Geometry(groups=groups, channels=1, taps=9, outputs=1)
    w = np.random.default_rng(0).standard_normal((groups, 1, 3, 3)).astype(np.float32)
    tiles = plan_tiles(geo, "packed", 256, 256)
    assert [diagonal_blocks(tile_weight(w, geo, t)) for t in tiles] == found


@pytest.mark.parametrize("w", [
    np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32),   # dense
    block_tile(2, 3, 2) + np.eye(6, 4, k=2, dtype=np.float32),            # one weight off
    np.ones((7, 3), dtype=np.float32),                                      # no common split
])
def test_a_tile_that_is_not_block_diagonal_keeps_the_dense_body(w):
    assert diagonal_blocks(w) is None
    x = np.random.default_rng(1).standard_normal((3, w.shape[0])).astype(np.float32)
    original = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", list(x.shape))],
                     [("y", [3, w.shape[1]])], [("w", w)])
    for bodies in ("exact", "float32"):
        lowered = lower(original, BIG, emulation=bodies)[0]
        vmm = [n for n in lowered.graph if n.op_type == "VMM"]
        assert vmm and all("blocks" not in n.overload for n in vmm)
        want, got, ref_out, _ = three_way(original, lowered, {"x": x}, BIG)
        assert_close(got[0], want[0], f"onnxruntime on the lowered model ({bodies})")


@pytest.mark.parametrize("bodies", ["exact", "float32"])
@pytest.mark.parametrize("channels,mult,kernel,sizes,order", [
    # MobileNet's depthwise 3x3: 2 tiles of 16 channels (28 fit), each read tap by tap
    (32, 1, 3, [16, 16], "taps"),
    (40, 1, 5, [10] * 4, "taps"),     # 5x5 taps: 10 channels a tile
    (12, 2, 3, [12], "taps"),         # a channel multiplier of 2: 2 columns per channel
    # 2 arrays for 31 channels, evenly filled: tiles of 16 and 15 (Im2Col's last block)
    (31, 1, 3, [16, 15], "taps"),
    (6, 1, 1, [6], "blocks"),         # a 1x1 kernel: one tap, block-diagonal
])
def test_depthwise_conv_lowers_to_tiles_of_its_groups(channels, mult, kernel, sizes, order,
                                                       bodies):
    """Tiles read tap by tap hold their channels' taps one tap after another (row i*n + j:
    tap i of channel j) and run the dense body, several as one stack (W [T, R, M], Im2Col's
    blocks first; a last tile of fewer channels holds them where a full one does, the rest
    zero); block-diagonal ones the block body."""
    rng = np.random.default_rng(channels)
    wt = rng.standard_normal((channels * mult, 1, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(channels * mult).astype(np.float32)
    pad = kernel // 2
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=channels,
                            kernel_shape=[kernel, kernel], pads=[pad] * 4, strides=[1, 1])
    original = model([conv], [("x", [1, channels, 10, 9])],
                     [("y", [1, channels * mult, 10, 9])], [("w", wt), ("b", bias)])
    lowered = lower(original, BIG, emulation=bodies)[0]
    checked(lowered)
    vmm = [n for n in lowered.graph if n.op_type == "VMM"]
    taps, n = kernel * kernel, sizes[0]
    stacked = order == "taps" and len(sizes) > 1
    if stacked:
        (node,) = vmm
        w = node.inputs[1].const_value.numpy()
        assert w.shape == (len(sizes), n * taps, n * mult)   # T arrays, each a whole tile
        (add,) = [a for a in lowered.graph if a.op_type == "AddInTile"]
        assert list(add.attributes.get_ints("offsets")) == [i * n * mult for i in range(len(sizes))]
        assert list(add.attributes.get_ints("stacked")) == [1]
        for held, size in zip(w, sizes):
            groups = held.reshape(taps, n, n, mult)           # [tap, channel, group, column]
            j = np.arange(size)
            assert np.count_nonzero(groups[:, j, j]) == np.count_nonzero(held) == \
                size * taps * mult
    else:
        assert len(vmm) == len(sizes)
        for node, size in zip(vmm, sizes):
            w = node.inputs[1].const_value.numpy()
            assert w.shape == (size * taps, size * mult)      # the array holds the whole tile
            if order == "taps":
                assert "blocks" not in node.overload
                groups = w.reshape(taps, size, size, mult)    # [tap, channel, group, column]
                j = np.arange(size)
                assert np.count_nonzero(groups[:, j, j]) == np.count_nonzero(w) == \
                    w.size // size
            else:
                assert f"blocks{size}x{taps}x{mult}" in node.overload
    (im2col,) = [n for n in lowered.graph if n.op_type == "Im2Col"]
    assert im2col.attributes.get_int("channel_block", 0) == (n if order == "taps" else 0)
    assert im2col.attributes.get_int("blocks_first", 0) == stacked
    x = rng.standard_normal((1, channels, 10, 9)).astype(np.float32)
    want, got, ref_out, report = three_way(original, lowered, {"x": x}, BIG)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    assert report.array.arrays == len(sizes)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("kernel,stride,pads", [([3, 3], [1, 1], [1, 1, 1, 1]),
                                                ([3, 3], [2, 2], [0, 1, 1, 0]),
                                                ([2, 5], [1, 2], [0, 2, 1, 2])])
def test_im2col_of_floats_swaps_taps_and_channels_with_an_einsum(layout, kernel, stride, pads):
    """A float image's fixed-size Im2Col body moves taps behind channels with an Einsum (an
    int8 one keeps the Transpose): the same rows as the reference, bit for bit."""
    n, c, h, w = 2, 9, 7, 9
    x = np.random.default_rng(4).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": pads}
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    if layout == "nhwc":
        attrs = dict(attrs, layout="nhwc", image_size=[h, w])
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    shapes = [list(x.shape)]
    fn = emulated.function_proto(MIN_BODY_OPSET, {**attrs, "_float": True}, shapes)
    assert fn.overload.endswith("_einsum")
    assert {"Einsum"} <= {node.op_type for node in fn.node}
    # only the NCHW image itself is moved channels-last by a Transpose
    assert [node.op_type for node in fn.node].count("Transpose") == (layout == "nchw")
    got = run_primitive("Im2Col", [x], attrs, shapes=shapes, derived={"_float": True})
    np.testing.assert_array_equal(got, want)
    plain = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes)
    assert "Einsum" not in {node.op_type for node in plain.node}


@pytest.mark.parametrize("kernel,stride,pads,block,known", [
    ([1, 1], [1, 1], [0, 0, 0, 0], 0, True),      # a 1x1 kernel: the image moved as it is
    ([1, 1], [2, 2], [0, 0, 0, 0], 0, True),
    ([3, 3], [2, 2], [1, 1, 1, 1], 0, True),      # channel by channel
    ([3, 3], [2, 2], [1, 1, 1, 1], 3, True),      # tap by tap (a dense layer's packed plan)
    ([7, 7], [2, 2], [3, 3, 3, 3], 0, False),     # height and width open: the generic body
])
@pytest.mark.parametrize("channels", [3, 8])
def test_a_pictures_few_channels_move_channels_last_with_an_einsum(kernel, stride, pads,
                                                                    block, known, channels):
    """An NCHW float image of fewer than 8 channels (a picture at a network's input) moves
    channels-last with an Einsum, 8 channels and more with a Transpose; an int8 one always
    with a Transpose. The same rows as the reference, bit for bit, either way."""
    n, h, w = 2, 11, 10
    x = np.random.default_rng(5).standard_normal((n, channels, h, w)).astype(np.float32)
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": pads, "channel_block": block}
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    shapes = [list(x.shape) if known else [n, channels, "h", "w"]]
    few = channels < 8
    fn = emulated.function_proto(MIN_BODY_OPSET, {**attrs, "_float": True}, shapes)
    moves = [node for node in fn.node if node.op_type in ("Einsum", "Transpose")]
    assert [(node.op_type, onnx.helper.get_attribute_value(node.attribute[0]))
            for node in moves][0] == (("Einsum", b"ncp->npc") if few else ("Transpose", [0, 2, 1]))
    assert fn.overload.endswith("einsum_pixels") == few
    got = run_primitive("Im2Col", [x], attrs, shapes=shapes, derived={"_float": True})
    np.testing.assert_array_equal(got, want)
    plain = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes)      # an int8 image's
    assert "Einsum" not in {node.op_type for node in plain.node}
    assert plain.overload != fn.overload or not few


@pytest.mark.parametrize("kernel,stride,pads,dilations,block,channels,one_hot", [
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 3, 3, True),     # a stem's, tap by tap
    ([3, 3], [1, 2], [0, 1, 2, 1], [2, 1], 0, 3, True),     # channel by channel
    ([5, 5], [2, 2], [2, 2, 2, 2], [1, 1], 1, 1, True),     # one channel: 25 columns
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 4, 4, False),    # 36 columns: the gather
    ([7, 7], [2, 2], [3, 3, 3, 3], [1, 1], 3, 3, False),    # 147 columns: the gather
])
def test_a_pictures_float32_im2col_is_a_one_hot_conv(kernel, stride, pads, dilations, block,
                                                     channels, one_hot):
    """A float picture of few channels, at most ONE_HOT_COLUMNS columns: the float32 body is
    onnxruntime's Conv with one-hot filters, the rows bit for bit the reference's on finite
    input; more columns keep the gather (the exact body's)."""
    n, h, w = 2, 13, 11
    x = np.random.default_rng(6).standard_normal((n, channels, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = [0.0, -0.0, 3e38]
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": pads, "dilations": dilations,
             "channel_block": block}
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    derived = {"_float": True}
    fn = emulated.function_proto(MIN_BODY_OPSET, {**attrs, **derived}, [list(x.shape)],
                                 float32=True)
    assert ("Conv" in {node.op_type for node in fn.node}) == one_hot
    got = run_primitive("Im2Col", [x], attrs, float32=True, derived=derived)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("group, overload", [
    (1, "_b4of4"),          # dense: the columns tap by tap, as the gather gives them
    (4, "_b4of4"),          # depthwise, one tile: its 4 channels tap by tap
    (2, "_einsum"),         # grouped (2 channels a group): channel by channel, an Einsum
])
def test_lowered_float_convs_call_the_fastest_im2col(group, overload):
    rng = np.random.default_rng(6)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4,
                            group=group)
    w = rng.standard_normal((8, 4 // group, 3, 3)).astype(np.float32)
    original = model([conv], [("x", [1, 4, 6, 6])], [("y", [1, 8, 6, 6])], [("w", w)])
    lowered = lower(original, BIG)[0]
    checked(lowered)
    im2col = [n for n in lowered.graph if n.op_type == "Im2Col"]
    # (4 channels: moved channels-last by an Einsum as well)
    assert im2col and all(n.overload.endswith(overload + "_einsum_pixels") for n in im2col)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    want, got, ref_out, _ = three_way(original, lowered, {"x": x}, BIG)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("n,k,m,off,extra,aligned", [
    (28, 9, 1, 252, 27, True),    # a middle tile of a 3x3 depthwise layer
    (3, 4, 2, 4, 8, True),        # grouped, 2 outputs per group
    (5, 25, 1, 3, 7, False),      # rows off X's grid of 25 columns
    (3, 4, 2, 4, 7, False),       # X's width not whole blocks
])
def test_block_tiles_on_the_grid_of_x_reshape_all_of_x(n, k, m, off, extra, aligned, float32):
    """A tile whose blocks lie on X's grid of k columns reads all of X as [..., C, k] and
    slices its blocks from that (the same Reshape in every tile of a layer); off the grid
    it slices its columns first. Same values either way, bit for bit in the exact body."""
    w = block_tile(n, k, m, seed=k)
    x = np.random.default_rng(2).standard_normal((1, 6, off + n * k + extra)).astype(np.float32)
    shapes, attrs = [list(x.shape), list(w.shape)], {"row_offset": off}
    derived = {"_blocks": (n, k, m)}
    fn = EMULATED_VMM.function_proto(MIN_BODY_OPSET, {**attrs, **derived}, shapes, float32=float32)
    reads_x = [node.op_type for node in fn.node if node.input[:1] == ["X"]]
    assert reads_x == (["Reshape"] if aligned else ["Slice"])
    assert (f"_of{x.shape[-1]}" in fn.overload) == aligned
    got = run_primitive("VMM", [x, w], attrs, consts=(1,), float32=float32, shapes=shapes,
                        derived=derived)
    ref = VMM.reference(ArrayModel(256, 256), [x, w], attrs)[0]
    if float32:
        assert agreement(got, ref)["rel_diff"] <= 1e-6
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("bodies", ["exact", "float32"])
def test_onnxruntime_runs_the_tiles_of_a_layer_from_one_split(bodies, tmp_path):
    """The tiles of a lowered layer slice the same rows along one axis: onnxruntime merges
    their Slices into Splits, so a model of many tiles runs fewer nodes. A depthwise 3x3
    conv of 64 channels (tiles of 22, 22 and 20, each read tap by tap: one stack, which
    slices nothing) then a dense 3x3 conv of 64 inputs (576 rows: three row tiles)."""
    import onnxruntime as ort   # heavy, and only for running a model

    rng = np.random.default_rng(9)
    dw = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    dense = rng.standard_normal((8, 64, 3, 3)).astype(np.float32)
    original = model(
        [helper.make_node("Conv", ["x", "dw"], ["h"], group=64, kernel_shape=[3, 3],
                          pads=[1] * 4),
         helper.make_node("Conv", ["h", "dense"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)],
        [("x", [1, 64, 6, 5])], [("y", [1, 8, 6, 5])], [("dw", dw), ("dense", dense)])
    lowered = lower(original, BIG, emulation=bodies)[0]
    checked(lowered)
    vmm = [n for n in lowered.graph if n.op_type == "VMM"]
    assert len(vmm) == 4 and not any("blocks" in n.overload for n in vmm)
    assert [n.overload.startswith("stack") for n in vmm] == [True, False, False, False]
    x = rng.standard_normal((1, 64, 6, 5)).astype(np.float32)
    want, got, ref_out, _ = three_way(original, lowered, {"x": x}, BIG)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(serialized(lowered), opts, providers=["CPUExecutionProvider"])
    ran = [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]
    # one Split: the dense layer's tiles'; one Slice: the stack's 64 columns of 3 x 22
    assert ran.count("Slice") == 1 and ran.count("Split") == 1, sorted(ran)
