"""The NPU operator set: each primitive's ONNX function body (run by onnxruntime) against its
NumPy reference and against an independent formula, and what the reference counts."""
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.compare import agreement, run_onnx
from paddle_npu.npu import DOMAIN, VERSION, all_primitives, get_primitive
from paddle_npu.npu.emulation import MIN_BODY_OPSET
from paddle_npu.npu.emulation.functions import attach_functions
from paddle_npu.npu.emulation.im2col import TABLE_LIMIT
from paddle_npu.npu.emulation.registry import emulation_of_op
from paddle_npu.npu.ops import ArrayModel
from paddle_npu.npu.ops.im2col import column_source

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run_primitive(op_type, inputs, attrs, opset=MIN_BODY_OPSET, consts=(), float32=False,
                  shapes=None, derived=None):
    """onnxruntime on a one-node model calling the primitive's function body (`float32`: its
    float32 body; `shapes`: the input shapes the body is made for, default the inputs';
    `derived`: what `Emulated.input_attrs` found, for the body only)."""
    m, feeds = primitive_model(op_type, inputs, attrs, opset, consts, float32, shapes, derived)
    return run_onnx(m.SerializeToString(), feeds)[1][0]


def primitive_model(op_type, inputs, attrs, opset=MIN_BODY_OPSET, consts=(), float32=False,
                    shapes=None, derived=None):
    """The one-node model `run_primitive` runs, and its feeds (inputs not in `consts`)."""
    prim = get_primitive(op_type)
    emulated = emulation_of_op(op_type)
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
    shapes = shapes or [None if x is None else list(x.shape) for x in inputs]
    node = helper.make_node(op_type, names, ["y"], domain=DOMAIN, **attrs)
    fn = emulated.function_proto(opset, {**attrs, **(derived or {})}, shapes, float32=float32)
    node.overload = fn.overload
    feeds = {n: x for n, x, k in zip(names, inputs, range(len(inputs)))
             if x is not None and k not in consts}
    inits = [numpy_helper.from_array(x, n) for n, x, k in zip(names, inputs, range(len(inputs)))
             if x is not None and k in consts]
    out_shape = prim.infer(shapes, attrs)[0]
    graph = helper.make_graph(
        [node], "p",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, feeds[n].shape) for n in feeds],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                helper.make_opsetid(DOMAIN, VERSION)],
                          functions=[fn])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m, feeds


def test_every_primitive_has_a_complete_schema():
    prims = all_primitives()
    assert {"Im2Col", "VMM", "AddInTile", "DimTransform"} <= set(prims)
    for name, p in prims.items():
        s = p.schema()
        assert s["domain"] == DOMAIN and s["version"] == VERSION and s["op_type"] == name
        assert s["doc"] and s["inputs"] and s["outputs"]
        for a in s["inputs"] + s["outputs"] + s["attributes"]:
            assert a["doc"], (name, a["name"])
        for hook in ("infer", "reference"):
            assert callable(getattr(p, hook)), (name, hook)
        assert callable(emulation_of_op(name).body), name      # onnxruntime runs every one


def conv_by_loops(x, w, stride, pads, dil):
    """Direct convolution, the formula written out (independent of Im2Col)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil[0]: i * dil[0] + (oh - 1) * stride[0] + 1: stride[0],
                       j * dil[1]: j * dil[1] + (ow - 1) * stride[1] + 1: stride[1]]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    return y


@st.composite
def im2col_cases(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    p = [draw(st.integers(0, 2)) for _ in range(4)]
    h = draw(st.integers(max(1, d[0] * (kh - 1) + 1 - p[0] - p[2]), 12))
    w = draw(st.integers(max(1, d[1] * (kw - 1) + 1 - p[1] - p[3]), 12))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    return n, c, h, w, [kh, kw], s, p, d


@SETTINGS
@given(im2col_cases())
def test_im2col_body_reference_and_formula_agree(case):
    n, c, h, w, k, s, p, d = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    prim = get_primitive("Im2Col")
    array = ArrayModel(8, 8)
    ref = prim.reference(array, [x], attrs)[0]
    assert list(ref.shape) == prim.infer([list(x.shape)], attrs)[0]
    body = run_primitive("Im2Col", [x], attrs)
    np.testing.assert_array_equal(body, ref)              # pure data movement: exact
    wt = rng.standard_normal((3, c, *k)).astype(np.float32)
    conv = ref.astype(np.float64) @ wt.reshape(3, -1).T.astype(np.float64)
    want = conv_by_loops(x, wt, s, p, d)
    got = conv.transpose(0, 2, 1).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    assert array.moved_elements == ref.size


def _im2col_model(attrs, shape):
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    node = helper.make_node("Im2Col", ["x"], ["y"], domain=DOMAIN, **attrs)
    node.overload = emulated.overload(attrs, [shape])
    graph = helper.make_graph(
        [node], "p", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", MIN_BODY_OPSET),
                                                helper.make_opsetid(DOMAIN, VERSION)],
                          functions=[emulated.function_proto(MIN_BODY_OPSET, attrs, [shape])])
    m.ir_version = 10
    return m


@SETTINGS
@given(im2col_cases())
def test_im2col_body_for_an_image_of_unknown_size(case):
    """Height and width left open: the body computes the receptive fields at run time."""
    n, c, h, w, k, s, p, d = case
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    m = _im2col_model(attrs, ["N", c, "H", "W"])
    got = run_onnx(m.SerializeToString(), {"x": x})[1][0]
    want = get_primitive("Im2Col").reference(ArrayModel(8, 8), [x], attrs)[0]
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(im2col_cases())
def test_im2col_body_for_a_fixed_image_and_an_open_batch(case):
    """Height and width fixed, the batch open: the body gathers with a constant index table
    and computes no shape at run time."""
    n, c, h, w, k, s, p, d = case
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    m = _im2col_model(attrs, ["N", c, h, w])
    assert {node.op_type for node in m.functions[0].node} <= {
        "Constant", "Pad", "Slice", "Reshape", "Transpose", "Gather"}
    got = run_onnx(m.SerializeToString(), {"x": x})[1][0]
    want = get_primitive("Im2Col").reference(ArrayModel(8, 8), [x], attrs)[0]
    np.testing.assert_array_equal(got, want)


def as_rows(x):
    """An NCHW image as the rows of a matrix layer, [N, H, W, C] (the nhwc layout)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


@SETTINGS
@given(im2col_cases())
def test_im2col_reads_an_nhwc_image_as_it_reads_the_nchw_one(case):
    """layout "nhwc": the previous matrix layer's rows [N, H, W, C] in, the same rows out as
    from the NCHW image, in the body (pointwise or fixed-size) and in the reference."""
    n, c, h, w, k, s, p, d = case
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    nhwc = dict(attrs, layout="nhwc", image_size=[h, w])
    rows = as_rows(x)
    assert prim.infer([list(rows.shape)], nhwc)[0] == list(want.shape)
    assert emulated.overload(nhwc, [["N", h, w, c]]).startswith(("pointwise_nhwc", "fixed_nhwc"))
    np.testing.assert_array_equal(prim.reference(ArrayModel(8, 8), [rows], nhwc)[0], want)
    np.testing.assert_array_equal(run_primitive("Im2Col", [rows], nhwc), want)


@SETTINGS
@given(im2col_cases(), st.data())
def test_im2col_channel_blocks_reorder_the_columns(case, data):
    """channel_block B: the columns channel by channel taken in column_source's order, in the
    reference and in the bodies (a fixed NCHW or nhwc image)."""
    n, c, h, w, k, s, p, d = case
    block = data.draw(st.integers(1, c + 1))       # any size: the last block holds the rest
    x = np.random.default_rng(1).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    plain = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    want = plain[..., column_source(c, k[0] * k[1], block)]
    nhwc = assert_im2col_gives(x, dict(attrs, channel_block=block), want)
    if block == c:          # tap by tap: the gather's own order, nothing moved after it
        fn = emulated.function_proto(MIN_BODY_OPSET, nhwc, [[n, h, w, c]])
        assert not {"Transpose", "Einsum"} & {node.op_type for node in fn.node}


@SETTINGS
@given(im2col_cases(), st.data())
def test_im2col_blocks_first_gives_each_block_its_own_rows(case, data):
    """blocks_first: block t's rows [N, OH*OW, KH*KW*B] at Y[:, t], tap by tap, the channels
    past C (the last block filled up) zero: from the channel-by-channel columns, in the
    reference and in the bodies (a fixed NCHW or nhwc image)."""
    n, c, h, w, k, s, p, d = case
    block = data.draw(st.integers(1, c + 1))
    x = np.random.default_rng(2).standard_normal((n, c, h, w)).astype(np.float32)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d}
    prim = get_primitive("Im2Col")
    plain = prim.reference(ArrayModel(8, 8), [x], attrs)[0]          # column c * KK + tap
    kk, count = k[0] * k[1], -(-c // block)
    want = np.zeros((n, count, plain.shape[1], kk * block), np.float32)
    for ch in range(c):
        t, j = divmod(ch, block)
        want[:, t, :, j::block] = plain[..., ch * kk:(ch + 1) * kk]
    first = dict(attrs, channel_block=block, blocks_first=1)
    assert prim.infer([list(x.shape)], first)[0] == list(want.shape)
    assert_im2col_gives(x, first, want)


def assert_im2col_gives(x, attrs, want):
    """Im2Col's reference and body give `want` from the NCHW image x and from its rows (the
    nhwc layout); returns the nhwc attributes."""
    prim = get_primitive("Im2Col")
    nhwc = dict(attrs, layout="nhwc", image_size=list(x.shape[2:]))
    for image, a in ((x, attrs), (as_rows(x), nhwc)):
        np.testing.assert_array_equal(prim.reference(ArrayModel(8, 8), [image], a)[0], want)
        np.testing.assert_array_equal(run_primitive("Im2Col", [image], a), want)
    return nhwc


def test_im2col_bodies_of_other_channel_counts_are_other_functions():
    """A blocked body holds its blocks per pixel: two images of the same size and kernel but
    other channel counts call different functions (a model's depthwise layers of 120 and
    240 channels in blocks of 10 once shared one, and gathered past the image's end)."""
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    a = dict(kernel_shape=[5, 5], pads=[2] * 4, channel_block=10, layout="nhwc",
             image_size=[4, 4])
    assert emulated.overload(a, [[1, 4, 4, 120]]) != emulated.overload(a, [[1, 4, 4, 240]])
    for c in (120, 240):
        x = np.random.default_rng(c).standard_normal((1, 4, 4, c)).astype(np.float32)
        np.testing.assert_array_equal(run_primitive("Im2Col", [x], a),
                                      prim.reference(ArrayModel(8, 8), [x], a)[0])


def test_im2col_refuses_a_channel_block_of_an_image_of_open_size():
    with pytest.raises(ValueError, match="channel_block needs the image's channels, height"):
        get_primitive("Im2Col").infer([[1, 3, "H", "W"]], {"kernel_shape": [3, 3],
                                                            "channel_block": 2})
    with pytest.raises(ValueError, match="channel_block -1 is negative"):
        get_primitive("Im2Col").infer([[1, 3, 4, 4]], {"kernel_shape": [3, 3],
                                                        "channel_block": -1})
    with pytest.raises(ValueError, match="blocks_first needs a channel_block"):
        get_primitive("Im2Col").infer([[1, 3, 4, 4]], {"kernel_shape": [3, 3],
                                                        "blocks_first": 1})


def test_im2col_refuses_an_nhwc_image_without_its_size():
    prim = get_primitive("Im2Col")
    with pytest.raises(ValueError, match="image_size"):
        prim.infer([[1, 4, 4, 3]], {"kernel_shape": [3, 3], "layout": "nhwc"})
    with pytest.raises(ValueError, match="image_size"):
        prim.infer([[1, 16, 3]], {"kernel_shape": [3, 3], "layout": "nhwc",
                                  "image_size": [4, 4]})
    with pytest.raises(ValueError, match="unknown layout"):
        prim.infer([[1, 3, 4, 4]], {"kernel_shape": [3, 3], "layout": "hwcn"})


@pytest.mark.parametrize("shape, attrs", [
    ([2, 3, 7, 8], dict(mode="max", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ([1, 2, 7, 7], dict(mode="avg", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ([1, 2, 9, 9], dict(mode="max", kernel_shape=[3, 2], dilations=[2, 1], pads=[2, 0, 1, 1])),
    ([2, 4, 5, 3], dict(mode="avg", kernel_shape=[5, 3])),          # global
    ([2, 4, 5, 3], dict(mode="max", kernel_shape=[5, 3])),
])
def test_pool_reads_an_nhwc_image_as_it_reads_the_nchw_one(shape, attrs):
    """layout "nhwc": a matrix layer's rows [N, H, W, C] in, the NCHW result's rows out."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    prim = get_primitive("Pool")
    want = as_rows(prim.reference(ArrayModel(8, 8), [x], attrs)[0])
    nhwc = dict(attrs, layout="nhwc", image_size=shape[2:])
    rows = as_rows(x)
    assert prim.infer([list(rows.shape)], nhwc)[0] == list(want.shape)
    array = ArrayModel(8, 8)
    np.testing.assert_array_equal(prim.reference(array, [rows], nhwc)[0], want)
    assert array.vector_elements == want.size * np.prod(attrs["kernel_shape"])
    np.testing.assert_allclose(run_primitive("Pool", [rows], nhwc), want, rtol=1e-6, atol=1e-6)


@SETTINGS
@given(case=im2col_cases(), layout=st.sampled_from(["nchw", "nhwc"]), bias=st.booleans())
def test_depthwise_conv_is_each_channels_own_convolution(case, layout, bias):
    """DepthwiseConv against the convolution written out (a group per channel), in both
    layouts: the reference, the exact body bit for bit with it (float64 sums rounded once,
    the bias added after), the float32 body (onnxruntime's Conv) within float32 rounding."""
    n, c, h, w, kernel, s, p, d = case
    rng = np.random.default_rng(c * 100 + h * 10 + w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    taps = rng.standard_normal((c, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    want = np.concatenate([conv_by_loops(x[:, i:i + 1], taps[i:i + 1], s, p, d)
                           for i in range(c)], axis=1)
    want = want.astype(np.float32)
    if bias:                # in float32, after the taps' sum is rounded (as AddInTile adds it)
        want += b[None, :, None, None]
    attrs = dict(kernel_shape=kernel, strides=s, pads=p, dilations=d)
    if layout == "nhwc":
        x, want = as_rows(x), as_rows(want)
        attrs.update(layout="nhwc", image_size=[h, w])
    inputs = [x, taps] + ([b] if bias else [])
    prim = get_primitive("DepthwiseConv")
    array = ArrayModel(8, 8)
    got = prim.reference(array, inputs, attrs)[0]
    assert list(got.shape) == prim.infer([list(v.shape) for v in inputs], attrs)[0]
    np.testing.assert_array_equal(got, want)
    assert array.vector_elements == got.size * kernel[0] * kernel[1] and array.arrays == 0
    np.testing.assert_array_equal(run_primitive("DepthwiseConv", inputs, attrs), got)
    fast = run_primitive("DepthwiseConv", inputs, attrs, float32=True)
    assert fast.shape == got.shape and agreement(fast, got)["rel_diff"] <= 1e-6


@pytest.mark.parametrize("block, first", [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_im2col_keeps_a_big_index_table_out_of_the_model(layout, block, first):
    """Past TABLE_LIMIT entries (a 3x3 kernel on a 640x640 image) the fixed-size body holds
    the table's row and column terms, which onnxruntime adds up at session creation, not
    megabytes of table; it still gathers what the reference does. Below the limit it holds
    the table itself."""
    prim = get_primitive("Im2Col")
    emulated = emulation_of_op("Im2Col")
    attrs = {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 2, 1, 0],
             "dilations": [1, 2]}
    assert 640 * 640 * 9 > TABLE_LIMIT >= 160 * 160 * 9

    def biggest_constant(fn):
        return max(numpy_helper.to_array(a.t).size for n in fn.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value")

    # output 320x638 at 640 (80x158 at 160): terms of OW*KW entries, or the whole table (of
    # whole blocks of channels: 2 blocks of 1 channel with channel_block 1). Blocks first,
    # the table is of whole pixels, the blocks moved first after the gather: its size does
    # not grow with the channels (a table per block takes GBs on a large image)
    blocks = 2 if block == 1 and not first else 1
    for size, held in ((640, 638 * 3 * blocks), (160, 80 * 158 * 9 * blocks)):
        x = np.random.default_rng(size).standard_normal((1, 2, size, size)).astype(np.float32)
        a = dict(attrs, channel_block=block, blocks_first=first)
        if layout == "nhwc":
            a.update(layout="nhwc", image_size=[size, size])
            x = as_rows(x)
        fn = emulated.function_proto(MIN_BODY_OPSET, a, [list(x.shape)])
        assert fn.overload.startswith(f"fixed_{layout + '_' if layout == 'nhwc' else ''}"
                                      f"{size}x{size}_")
        assert biggest_constant(fn) == held
        want = prim.reference(ArrayModel(256, 256), [x], {**a, "_node": "i"})[0]
        np.testing.assert_array_equal(run_primitive("Im2Col", [x], a), want)


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 30), st.integers(1, 30),
       st.integers(0, 10), st.sampled_from([(4, 4), (16, 8), (256, 256)]))
def test_vmm_body_and_reference_tile_and_count(k, r, m, extra, off, grid):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, k, off + r + extra)).astype(np.float32)
    w = rng.standard_normal((r, m)).astype(np.float32)
    want = x[..., off:off + r].astype(np.float64) @ w.astype(np.float64)
    array = ArrayModel(*grid)
    ref = get_primitive("VMM").reference(array, [x, w], {"row_offset": off, "_node": "v"})[0]
    body = run_primitive("VMM", [x, w], {"row_offset": off}, consts=(1,))
    assert agreement(ref, want)["rel_diff"] <= 1e-7
    assert agreement(body, want)["rel_diff"] <= 1e-7
    # the float32 body: float32 summation of r products errs by at most (r + 1) units of
    # roundoff times the sum of the products' magnitudes
    fast = run_primitive("VMM", [x, w], {"row_offset": off}, consts=(1,), float32=True)
    x_abs = np.abs(x[..., off:off + r]).astype(np.float64)
    bound = (r + 1) * 2.0 ** -24 * (x_abs @ np.abs(w).astype(np.float64))
    assert (np.abs(fast - want) <= bound).all()
    tiles = -(-r // grid[0]) * -(-m // grid[1])
    assert array.arrays == tiles
    assert array.vmm_invocations == tiles * 2 * k
    assert array.macs == 2 * k * r * m


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("grid", [(256, 256), (4, 4)])
@pytest.mark.parametrize("lead, t, r, m", [([2], 3, 9, 4), ([1], 4, 18, 2), ([], 2, 5, 3)])
def test_vmm_stack_multiplies_each_tile_by_its_own_rows(lead, t, r, m, grid, float32):
    """W [T, R, M], X [..., T, K, R]: Y[..., t, k, :] = X[..., t, k, :] @ W[t], each tile on
    its own arrays (the reference counts them: one batched product when each tile fits an
    array, tile by tile on arrays of 4 x 4)."""
    rng = np.random.default_rng(t * r)
    x = rng.standard_normal(lead + [t, 5, r]).astype(np.float32)
    w = rng.standard_normal((t, r, m)).astype(np.float32)
    want = np.einsum("...tkr,trm->...tkm", x.astype(np.float64), w.astype(np.float64))
    prim = get_primitive("VMM")
    assert prim.infer([list(x.shape), list(w.shape)], {})[0] == list(want.shape)
    array = ArrayModel(*grid)
    ref = prim.reference(array, [x, w], {"_node": "v"})[0]
    np.testing.assert_array_equal(ref, want.astype(np.float32))
    per_tile = -(-r // grid[0]) * -(-m // grid[1])
    assert array.arrays == t * per_tile and array.macs == t * int(np.prod(lead)) * 5 * r * m
    assert array.vmm_invocations == t * per_tile * int(np.prod(lead)) * 5
    got = run_primitive("VMM", [x, w], {}, consts=(1,), float32=float32)
    if float32:
        assert agreement(got, want)["rel_diff"] <= 1e-6
    else:
        np.testing.assert_array_equal(got, ref)


def test_vmm_stack_refuses_rows_that_are_not_its_tiles():
    prim = get_primitive("VMM")
    with pytest.raises(ValueError, match="a stack of 3 tiles"):
        prim.infer([[1, 2, 5, 9], [3, 9, 4]], {})
    with pytest.raises(ValueError, match="from row_offset 0"):
        prim.infer([[1, 3, 5, 9], [3, 9, 4]], {"row_offset": 2})


def test_vmm_default_row_offset_comes_from_the_function():
    x = np.arange(12, dtype=np.float32).reshape(1, 2, 6)
    w = np.ones((3, 2), dtype=np.float32)
    np.testing.assert_array_equal(run_primitive("VMM", [x, w], {}, consts=(1,)),
                                  x[..., :3] @ w)


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("off,cols,overload,nodes", [
    (0, 5, "whole", 1),                   # the array reads all of X: a bare MatMul
    (2, 9, "rows_2_5_rank3", 5),          # a fixed part of it: one Slice of constant bounds
                                          # on its one axis (starts, ends, axes)
    (2, "C", "", 8),                      # X's width open: the bounds computed at every run
])
def test_vmm_body_per_overload(off, cols, overload, nodes, float32):
    rng = np.random.default_rng(3)
    width = 5 + off if cols == "C" else cols
    x = rng.standard_normal((2, 3, width)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    shapes = [[2, 3, cols], [5, 4]]
    prim = get_primitive("VMM")
    emulated = emulation_of_op("VMM")
    assert emulated.overload({"row_offset": off}, shapes) == overload
    fn = emulated.function_proto(MIN_BODY_OPSET, {"row_offset": off}, shapes, float32=float32)
    assert len(fn.node) == nodes + (0 if float32 else 3)       # the exact body's 3 casts
    want = x[..., off:off + 5].astype(np.float64) @ w.astype(np.float64)
    got = run_primitive("VMM", [x, w], {"row_offset": off}, consts=(1,), float32=float32,
                        shapes=shapes)
    assert agreement(got, want)["rel_diff"] <= (1e-6 if float32 else 1e-7)
    # the same columns of a matrix (an FC layer's rows) call a body sliced for its rank
    if overload.startswith("rows"):
        flat = run_primitive("VMM", [x[0], w], {"row_offset": off}, consts=(1,),
                             float32=float32)
        assert emulated.overload({"row_offset": off}, [[3, cols], [5, 4]]) == "rows_2_5_rank2"
        assert agreement(flat, want[0])["rel_diff"] <= (1e-6 if float32 else 1e-7)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("layout", [
    [(0, 5), (0, 5), (0, 5)],             # row-tile partials of one output
    [(0, 4), (4, 3), (7, 2)],             # column tiles side by side
    [(0, 4), (4, 3), (0, 4), (4, 3)],     # both
    [(2, 3), (0, 4)],                     # overlapping and unordered
    [(1, 2)],                             # one partial inside a wider row (gap)
    [(0, 5)],                             # one partial, every column
])
def test_add_in_tile_places_and_sums(layout, bias):
    rng = np.random.default_rng(2)
    width = max(o + w for o, w in layout) + (1 if layout == [(1, 2)] else 0)
    parts = [rng.standard_normal((2, 3, w)).astype(np.float32) for _, w in layout]
    b = rng.standard_normal(width).astype(np.float32) if bias else None
    want = np.zeros((2, 3, width))
    for (o, w), p in zip(layout, parts):
        want[..., o:o + w] += p
    if bias:
        want += b
    attrs = {"offsets": [o for o, _ in layout], "width": width}
    array = ArrayModel(4, 4)
    ref = get_primitive("AddInTile").reference(array, [b] + parts, attrs)[0]
    body = run_primitive("AddInTile", [b] + parts, attrs)
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(body, want, rtol=1e-6, atol=1e-6)
    fast = run_primitive("AddInTile", [b] + parts, attrs, float32=True)
    np.testing.assert_allclose(fast, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout, bias, casts", [
    ([(0, 4), (4, 3)], True, False),      # column tiles and the bias: two addends each
    ([(0, 5), (0, 5)], False, False),     # two row tiles
    ([(0, 5), (0, 5)], True, True),       # two row tiles and the bias: three
])
def test_add_in_tile_exact_body_casts_only_past_two_addends(layout, bias, casts):
    """Two float32 addends rounded once in float32 are the exact sum rounded once, so the
    exact body adds them as they are; past two it sums in float64."""
    rng = np.random.default_rng(4)
    width = max(o + w for o, w in layout)
    parts = [(rng.standard_normal((2, 3, w)) * 10.0 ** rng.integers(-4, 4, (2, 3, w)))
             .astype(np.float32) for _, w in layout]
    b = rng.standard_normal(width).astype(np.float32) if bias else None
    attrs = {"offsets": [o for o, _ in layout], "width": width}
    shapes = [None if b is None else [width]] + [list(p.shape) for p in parts]
    fn = emulation_of_op("AddInTile").function_proto(MIN_BODY_OPSET, attrs, shapes)
    assert any(n.op_type == "Cast" for n in fn.node) == casts
    want = np.zeros((2, 3, width))
    for (o, w), p in zip(layout, parts):
        want[..., o:o + w] += p
    if bias:
        want += b
    np.testing.assert_array_equal(run_primitive("AddInTile", [b] + parts, attrs),
                                  want.astype(np.float32))


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("layout, ops", [
    ([(3, [0, 4, 8])], "Transpose"),               # a depthwise stack: tiles side by side,
    ([(3, [0, 4, 8]), (None, [0])], "Transpose"),  # the last's columns past the width cut
    ([(5, [0] * 5)], "MatMul"),                    # a per-channel stack: all summed
    ([(3, [0, 4, 0])], "Gather"),                  # neither: tile by tile
    ([(2, [2, 6]), (None, [0])], "Transpose"),     # with a plain partial, a gap
])
@pytest.mark.parametrize("bias", [False, True])
def test_add_in_tile_places_a_stack_of_tiles(layout, ops, bias, float32):
    """A stacked partial [..., T, K, w] is T tiles' results, each at its own offset; columns
    past the width are not kept. Against the partials placed one by one."""
    rng = np.random.default_rng(len(layout))
    width = 10
    parts, offsets, stacked, want = [], [], [], np.zeros((2, 3, width))
    for count, places in layout:
        p = rng.standard_normal((2, count, 3, 4) if count else (2, 3, 4)).astype(np.float32)
        parts.append(p)
        stacked.append(1 if count else 0)
        offsets += places
        for t, o in enumerate(places):
            tile = p[:, t] if count else p
            kept = min(4, width - o)
            want[..., o:o + kept] += tile[..., :kept]
    b = rng.standard_normal(width).astype(np.float32) if bias else None
    if bias:
        want += b
    attrs = {"offsets": offsets, "width": width, "stacked": stacked}
    prim = get_primitive("AddInTile")
    emulated = emulation_of_op("AddInTile")
    shapes = [None if b is None else [width]] + [list(p.shape) for p in parts]
    assert prim.infer(shapes, attrs)[0] == [2, 3, width]
    array = ArrayModel(4, 4)
    ref = prim.reference(array, [b] + parts, attrs)[0]
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
    fn = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes, float32=float32)
    assert ops in {n.op_type for n in fn.node}
    got = run_primitive("AddInTile", [b] + parts, attrs, float32=float32)
    if float32:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, ref)


def test_add_in_tile_refuses_a_stack_that_does_not_match_its_offsets():
    prim = get_primitive("AddInTile")
    with pytest.raises(ValueError, match="3 tiles' partials but 2 offsets"):
        prim.infer([None, [1, 3, 5, 4]], {"offsets": [0, 4], "stacked": [1]})
    with pytest.raises(ValueError, match="an offset past the 8 columns"):
        prim.infer([None, [1, 3, 5, 4]], {"offsets": [0, 4, 8], "width": 8, "stacked": [1]})


@pytest.mark.parametrize("partials, ops", [(1, ["Add"]), (3, ["Sum"])])
def test_add_in_tile_float32_body_of_every_column(partials, ops):
    """Partials covering every column and the bias, float32: one Sum of them all, or, for
    one partial, an Add (onnxruntime's Sum of a broadcast bias is slower, and a MatMul +
    Add is one Gemm to it)."""
    shapes = [[6]] + [[1, 4, 6]] * partials
    fn = emulation_of_op("AddInTile").function_proto(MIN_BODY_OPSET, {"width": 6}, shapes,
                                                   float32=True)
    assert [n.op_type for n in fn.node] == ops


def col2im_by_loops(x, bias, image, out, k, s, p, d):
    """Col2Im's formula written out, pixel by pixel and tap by tap (independent of the
    reference's strided windows): the sum in float64 and the sum of the addends' magnitudes."""
    (h, w), (oh, ow), (kh, kw) = image, out, k
    n, _, cols = x.shape
    x6 = x.reshape(n, h, w, cols // (kh * kw), kh, kw).astype(np.float64)
    y = np.zeros((n, cols // (kh * kw), oh, ow))
    mag = np.zeros_like(y)
    for ih in range(h):
        for iw in range(w):
            for i in range(kh):
                for j in range(kw):
                    r, c = ih * s[0] - p[0] + i * d[0], iw * s[1] - p[1] + j * d[1]
                    if 0 <= r < oh and 0 <= c < ow:
                        y[:, :, r, c] += x6[:, ih, iw, :, i, j]
                        mag[:, :, r, c] += np.abs(x6[:, ih, iw, :, i, j])
    if bias is not None:
        y += bias.reshape(-1, 1, 1)
        mag += np.abs(bias.astype(np.float64)).reshape(-1, 1, 1)
    return y, mag


@st.composite
def col2im_cases(draw):
    """A transposed convolution's geometry: kernel, stride, dilation, the pads cut from both
    ends and the output padding added past the end (ConvTranspose's output size)."""
    k = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    image = [draw(st.integers(1, 6)), draw(st.integers(1, 6))]
    begin = [draw(st.integers(0, (k[a] - 1) * d[a])) for a in range(2)]
    end = [draw(st.integers(0, (k[a] - 1) * d[a])) for a in range(2)]
    extra = [draw(st.integers(0, s[a] - 1)) for a in range(2)]
    out = [(image[a] - 1) * s[a] + (k[a] - 1) * d[a] + 1 + extra[a] - begin[a] - end[a]
           for a in range(2)]
    assume(min(out) >= 1)
    n, m, bias = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.booleans())
    return n, m, image, out, k, s, begin, d, bias


@SETTINGS
@given(col2im_cases())
def test_col2im_body_reference_and_formula_agree(case):
    """The exact body is the reference bit for bit (both the float64 sum rounded once), the
    reference is the formula, and the float32 body is as far from it as float32 summation
    allows: (taps + 1) units of roundoff of the sum of the addends' magnitudes."""
    n, m, image, out, k, s, p, d, bias = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, image[0] * image[1], m * k[0] * k[1])).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    attrs = {"image_shape": image, "output_shape": out, "kernel_shape": k, "strides": s,
             "pads": p, "dilations": d}
    prim = get_primitive("Col2Im")
    array = ArrayModel(4, 4)
    ref = prim.reference(array, [x, b], attrs)[0]
    want, mag = col2im_by_loops(x, b, image, out, k, s, p, d)
    np.testing.assert_array_equal(ref, want.astype(np.float32))
    np.testing.assert_array_equal(run_primitive("Col2Im", [x, b], attrs), ref)
    fast = run_primitive("Col2Im", [x, b], attrs, float32=True)
    taps = k[0] * k[1] + bias
    assert (np.abs(fast - want) <= (taps + 1) * 2.0 ** -24 * mag).all()
    # the rows of an open batch: the same body, made for any N
    if n == 2:
        open_batch = run_primitive("Col2Im", [x, b], attrs,
                                   shapes=[["n"] + list(x.shape[1:]), None if b is None else [m]])
        np.testing.assert_array_equal(open_batch, ref)


@pytest.mark.parametrize("k, s, bias, casts", [
    ([2, 2], [2, 2], True, False),      # a segmentation head's upsampling: one tap a pixel
    ([3, 1], [3, 2], True, False),      # stride past the kernel: some pixels only the bias
    ([1, 2], [1, 1], False, False),     # two taps a pixel, no bias
    ([1, 2], [1, 1], True, True),       # two taps and the bias: three addends
    ([4, 4], [2, 2], False, True),      # four taps a pixel
])
def test_col2im_exact_body_casts_only_past_two_addends(k, s, bias, casts):
    """An X element and the bias rounded once in float32 are the exact sum rounded once, so
    where no two taps meet (or two meet and there is no bias) the exact body adds in X's
    type; past two addends it sums in float64."""
    rng = np.random.default_rng(6)
    m, image = 3, [4, 5]
    x = (rng.standard_normal((1, 20, m * k[0] * k[1])) *
         10.0 ** rng.integers(-4, 4, (1, 20, m * k[0] * k[1]))).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    out = [(image[a] - 1) * s[a] + k[a] for a in range(2)]
    attrs = {"image_shape": image, "output_shape": out, "kernel_shape": k, "strides": s}
    fn = emulation_of_op("Col2Im").function_proto(
        MIN_BODY_OPSET, attrs, [list(x.shape), None if b is None else [m]])
    assert any(n.op_type == "Cast" for n in fn.node) == casts
    want, _ = col2im_by_loops(x, b, image, out, k, s, [0, 0], [1, 1])
    np.testing.assert_array_equal(run_primitive("Col2Im", [x, b], attrs),
                                  want.astype(np.float32))


def test_bodies_write_their_outputs_without_a_copy():
    """A body's last op writes the function output itself: no Identity is left to inline
    at every call, unless the output is an input as it is."""
    lut = emulation_of_op("Lut").function_proto(
        MIN_BODY_OPSET, {"function": "sigmoid", "alpha": 0.0, "beta": 0.0}, [[2, 3]])
    assert [n.op_type for n in lut.node] == ["Sigmoid"] and list(lut.node[0].output) == ["Y"]
    add = emulation_of_op("AddInTile")
    one = add.function_proto(MIN_BODY_OPSET, {"offsets": [0], "width": 3}, [None, [2, 3]])
    assert [n.op_type for n in one.node] == ["Identity"]          # Y is P0 as it is
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_primitive("AddInTile", [None, x],
                                                {"offsets": [0], "width": 3}), x)


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_dim_transform_is_transpose_then_reshape(dims, rnd):
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    perm = list(range(len(dims)))
    rnd.shuffle(perm)
    moved = [dims[p] for p in perm]
    shape = [0] + [-1] if len(dims) > 1 else [-1]
    attrs = {"perm": perm, "shape": shape}
    want = np.transpose(x, perm).reshape([moved[0], -1] if len(dims) > 1 else [-1])
    prim = get_primitive("DimTransform")
    ref = prim.reference(ArrayModel(4, 4), [x], attrs)[0]
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(run_primitive("DimTransform", [x], attrs), want)
    assert prim.infer([dims], attrs)[0] == list(want.shape)


def dim_transform(perm, shape):
    return {"perm": perm, "shape": shape}


def crop(starts, ends, axes, steps=None):
    return {"starts": starts, "ends": ends, "axes": axes, "steps": steps or [1] * len(axes)}


SLICE = ["Constant", "Constant", "Slice"]            # starts, ends
BOTH = ["Transpose", "Constant", "Reshape"]


@pytest.mark.parametrize("op_type, dims, shapes, attrs, overload, ops", [
    # DimTransform: a Reshape where perm is the identity, a Transpose where the reshape
    # gives back the permuted shape
    ("DimTransform", [2, 3, 4], None, dim_transform([0, 2, 1], [0, 12]), "", BOTH),
    ("DimTransform", [2, 3, 4], None, dim_transform([0, 1, 2], [0, -1]), "reshape",
     ["Constant", "Reshape"]),
    ("DimTransform", [2, 3, 4], None, dim_transform([0, 2, 1], [0, 4, 3]), "transpose",
     ["Transpose"]),
    ("DimTransform", [2, 3, 4], None, dim_transform([2, 0, 1], [0, -1, 0]), "transpose",
     ["Transpose"]),
    ("DimTransform", [2, 3, 4], None, dim_transform([0, 1, 2], [0, 3, 4]), "identity",
     ["Identity"]),
    ("DimTransform", [2, 3, 4], None, dim_transform([0, 2, 1], [0, 4, -1, 1]), "", BOTH),
    # ... axis 0 moved behind the others keeps its Reshape (see the test below)
    ("DimTransform", [2, 3, 4], None, dim_transform([1, 0, 2], [0, 0, 0]), "", BOTH),
    ("DimTransform", [2, 3, 4], None, dim_transform([1, 2, 0], [3, 4, 2]), "", BOTH),
    ("DimTransform", [2, 3, 4, 5], None, dim_transform([1, 2, 0, 3], [0, 0, 0, 0]), "", BOTH),
    # ... an open dim: 0 or the one -1 keeps it, a fixed size there may not
    ("DimTransform", [2, 3, 4], [["N", 3, 4]], dim_transform([2, 0, 1], [4, -1, 3]),
     "transpose", ["Transpose"]),
    ("DimTransform", [2, 3, 4], [["N", 3, 4]], dim_transform([0, 2, 1], [2, 4, 3]), "", BOTH),
    ("DimTransform", [2, 3, 4], [["N", 3, 4]], dim_transform([0, 1, 2], [2, 3, 4]),
     "reshape", ["Constant", "Reshape"]),
    ("DimTransform", [2, 3, 4], [[2, "M", 4]], dim_transform([0, 2, 1], [0, -1, 0]),
     "transpose", ["Transpose"]),
    # Crop: Slice's steps left out when all 1, its axes too when they are 0, 1, ... (its
    # defaults)
    ("Crop", [4, 6], None, crop([1], [3], [0]), "leading_axes", SLICE),
    ("Crop", [4, 6], None, crop([1, -4], [3, 100], [0, 1]), "leading_axes", SLICE),
    ("Crop", [4, 6], None, crop([2], [-1], [1]), "unit_steps", ["Constant"] + SLICE),
    ("Crop", [4, 6], None, crop([0, 1], [4, 6], [1, 0]), "unit_steps", ["Constant"] + SLICE),
    ("Crop", [4, 6], None, crop([5], [0], [1], [-2]), "", ["Constant", "Constant"] + SLICE),
    ("Crop", [4, 6], None, crop([0], [4], [0], [2]), "", ["Constant", "Constant"] + SLICE),
    # ... one index of one axis gathered
    ("Crop", [3, 4, 6], None, crop([1], [2], [0]), "index_axis0", ["Constant", "Gather"]),
    ("Crop", [4, 6], None, crop([5], [6], [1]), "index_axis1", ["Constant", "Gather"]),
    # ... only inside the axis' fixed size (Slice's results outside it are empty)
    ("Crop", [4, 6], None, crop([4], [5], [0]), "leading_axes", SLICE),
    ("Crop", [4, 6], None, crop([-1], [0], [0]), "leading_axes", SLICE),
    ("Crop", [4, 6], [["N", 6]], crop([0], [1], [0]), "leading_axes", SLICE),
])
def test_moves_inline_only_what_the_call_needs(op_type, dims, shapes, attrs, overload, ops):
    """DimTransform's and Crop's bodies per overload: fewer nodes at every call, the
    reference's result."""
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    shapes = shapes or [dims]
    prim = get_primitive(op_type)
    emulated = emulation_of_op(op_type)
    assert emulated.overload(attrs, shapes) == overload
    fn = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes)
    assert [n.op_type for n in fn.node] == ops
    want = prim.reference(ArrayModel(4, 4), [x], attrs)[0]
    got = run_primitive(op_type, [x], attrs, shapes=shapes)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch", ["N", "fixed"])
@pytest.mark.parametrize("dims, perm", [([6, 10, 4], [1, 0, 2]),
                                        ([6, 3, 5, 4], [1, 2, 0, 3])])
def test_a_transpose_of_axis_0_before_an_exact_vmm_runs(dims, perm, batch):
    """onnxruntime 1.32 crashes on a Transpose moving axis 0 behind the others when it feeds
    an exact VMM body (Cast to float64, MatMul) at ORT_ENABLE_ALL (an RNN's time-major
    output; onnxruntime issue 28392): such a DimTransform of a float tensor moves it with an
    Einsum, whatever the batch, and the graph runs."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal(dims).astype(np.float32)
    open_dims = ([batch] if batch == "N" else dims[:1]) + dims[1:]
    moved = [open_dims[p] for p in perm]
    w = rng.standard_normal((dims[-1], 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("DimTransform", ["x"], ["t"], domain=DOMAIN, perm=perm,
                          shape=[0] * len(perm)),
         helper.make_node("VMM", ["t", "w"], ["y"], domain=DOMAIN)], "transpose_vmm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, open_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, moved[:-1] + [8])],
        [numpy_helper.from_array(w, "w")],
        value_info=[helper.make_tensor_value_info("t", TensorProto.FLOAT, moved)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", MIN_BODY_OPSET)])
    proto.ir_version = 10
    model = ir.serde.deserialize_model(proto)
    attach_functions(model)
    assert [n.overload for n in model.graph] == ["einsum_" + "_".join(map(str, perm)), "whole"]
    _, (got,) = run_onnx(ir.serde.serialize_model(model).SerializeToString(), {"x": x})
    want = np.transpose(x, perm).astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_one_function_serves_every_node_of_its_overload():
    """Bodies that read the node's attributes are attached once per overload: nodes of one
    overload with other attribute values each get their own result."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    calls = [("Crop", crop([0], [1], [0])), ("Crop", crop([2], [3], [0])),
             ("Crop", crop([0], [2], [0])), ("Crop", crop([1], [3], [0])),
             ("Crop", crop([1], [4], [2])), ("Crop", crop([3], [0], [1])),
             ("DimTransform", dim_transform([0, 1, 2], [0, -1])),
             ("DimTransform", dim_transform([0, 1, 2], [-1, 5])),
             ("DimTransform", dim_transform([2, 0, 1], [0, 0, 0])),
             ("DimTransform", dim_transform([2, 1, 0], [0, -1, 3]))]
    nodes, outputs, want = [], [], []
    for i, (op_type, attrs) in enumerate(calls):
        prim = get_primitive(op_type)
        y = prim.reference(ArrayModel(4, 4), [x], attrs)[0]
        nodes.append(helper.make_node(op_type, ["x"], [f"y{i}"], domain=DOMAIN, **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, y.shape))
        want.append(y)
    graph = helper.make_graph(nodes, "calls", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x.shape)], outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", MIN_BODY_OPSET)])
    proto.ir_version = 10
    model = ir.serde.deserialize_model(proto)
    # Crop: index_axis0, leading_axes, unit_steps; DimTransform: reshape, transpose
    assert attach_functions(model) == 5
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto)
    got = run_onnx(proto.SerializeToString(), {"x": x})[1]
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("layout, channels", [("nhwc", (512, 2)), ("nhwc", (8, 2)),
                                              ("nchw", (3, 1))])
@pytest.mark.parametrize("window", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},             # PP-LiteSeg-T's conv2d_134
    {"kernel_shape": [3, 3], "strides": [2, 1], "dilations": [1, 2], "pads": [0, 2, 1, 0]},
    {"kernel_shape": [1, 1]},
    {"kernel_shape": [1, 1], "strides": [2, 2]},
])
def test_im2cols_of_one_window_on_other_channel_counts_get_their_own_bodies(window, layout,
                                                                          channels, float32):
    """Two Im2Cols of one window on images of one size but other channel counts: an nhwc body
    reshapes its pixels to its channels, a picture's float32 body is a one-hot Conv of them,
    so each needs its own function. Under one overload the second ran the first's body:
    PP-LiteSeg-T's conv2d_134 (3x3 on 2 channels at 4x4, after a 3x3 on 1024) failed
    onnxruntime's shape inference on the per-channel plan (Reshape to 512 values a pixel)."""
    rng = np.random.default_rng(11)
    nodes, inputs, outputs, feeds, want = [], [], [], {}, []
    for i, c in enumerate(channels):
        x = rng.standard_normal((1, c, 4, 4)).astype(np.float32)
        attrs = dict(window)
        if layout == "nhwc":
            attrs.update(layout="nhwc", image_size=[4, 4])
            x = as_rows(x)
        y = get_primitive("Im2Col").reference(ArrayModel(8, 8), [x], attrs)[0]
        nodes.append(helper.make_node("Im2Col", [f"x{i}"], [f"y{i}"], domain=DOMAIN, **attrs))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, x.shape))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, y.shape))
        feeds[f"x{i}"] = x
        want.append(y)
    graph = helper.make_graph(nodes, "im2cols", inputs, outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", MIN_BODY_OPSET)])
    proto.ir_version = 10
    model = ir.serde.deserialize_model(proto)
    attach_functions(model, float32=float32)
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto)
    got = run_onnx(proto.SerializeToString(), feeds)[1]
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)


def test_symbolic_batch_survives_shape_inference_of_primitives():
    im2col = get_primitive("Im2Col").infer(
        [["N", 3, 8, 8]], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})[0]
    assert im2col == ["N", 64, 27]
    dt = get_primitive("DimTransform").infer([["N", 64, 5]], {"perm": [0, 2, 1],
                                                             "shape": [0, 5, 8, 8]})[0]
    assert dt == ["N", 5, 8, 8]
    flat = get_primitive("DimTransform").infer([["N", 4, 2, 2]], {"perm": [0, 1, 2, 3],
                                                                 "shape": [0, -1]})[0]
    assert flat == ["N", 16]


@pytest.mark.parametrize("op_type, attrs, shapes", [
    ("RuntimeVMM", {}, [[2, 3, 5, 7], [2, 3, 7, 4]]),
    ("Reduce", {"function": "sum", "axes": [1, 3], "keepdims": 1}, [[2, 3, 4, 5]]),
    ("Reduce", {"function": "mean", "axes": [2], "keepdims": 0}, [[2, 3, 4, 5]]),
    ("Reduce", {"function": "max", "axes": [0], "keepdims": 1}, [[2, 3, 4, 5]]),
    ("LayerNorm", {"axis": 2, "epsilon": 1e-3}, [[2, 3, 4, 5], [4, 5], [4, 5]]),
    ("LayerNorm", {"axis": 3}, [[2, 3, 4, 5]]),
    ("Pool", {"mode": "avg", "kernel_shape": [3, 4], "layout": "nhwc", "image_size": [3, 4]},
     [[2, 3, 4, 5]]),                   # global average of rows (an SE block's)
])
def test_vector_float32_bodies_sum_in_float32_and_agree(op_type, attrs, shapes):
    """The float32 bodies of attention's run-time VMM, Reduce, LayerNorm and the global
    average Pool: no float64 in them, and within float32 rounding of the reference (which
    sums in float64)."""
    rng = np.random.default_rng(5)
    inputs = [(rng.standard_normal(s) * 3 + 1).astype(np.float32) for s in shapes]
    prim = get_primitive(op_type)
    emulated = emulation_of_op(op_type)
    fn = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes, float32=True)
    assert not any(a.i == TensorProto.DOUBLE for n in fn.node for a in n.attribute
                   if a.name == "to")
    want = prim.reference(ArrayModel(8, 8), inputs, attrs)[0]
    got = run_primitive(op_type, inputs, attrs, float32=True)
    assert got.shape == want.shape and agreement(got, want)["rel_diff"] <= 1e-6
    np.testing.assert_array_equal(run_primitive(op_type, inputs, attrs), want)


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("op_type, attrs, shapes, nodes", [
    ("Reduce", {"function": "mean", "axes": [1], "keepdims": 1}, [[2, 6, 3]], (6, 1)),
    ("LayerNorm", {"axis": 2, "epsilon": 1e-3}, [[2, 3, 5], [5], [5]], (19, 11)),
])
def test_vector_bodies_make_constants_in_the_type_they_sum_in(op_type, attrs, shapes, nodes,
                                                              float32):
    """The divisor and epsilon of a mean and a layer norm, and its exponent 2, are constants
    of the type the body sums in (float64, or float32: float32 bodies are attached to float32
    inputs only): no node converts a constant at every call. A float32 mean is one
    ReduceMean."""
    rng = np.random.default_rng(8)
    inputs = [(rng.standard_normal(s) * 2 + 1).astype(np.float32) for s in shapes]
    prim = get_primitive(op_type)
    emulated = emulation_of_op(op_type)
    fn = emulated.function_proto(MIN_BODY_OPSET, attrs, shapes, float32=float32)
    constants = {o for n in fn.node if n.op_type == "Constant" for o in n.output}
    assert not [n for n in fn.node if n.op_type in ("Cast", "CastLike")
                and n.input[0] in constants]
    assert len(fn.node) == nodes[float32]
    want = prim.reference(ArrayModel(8, 8), inputs, attrs)[0]
    got = run_primitive(op_type, inputs, attrs, float32=float32)
    if float32:
        assert agreement(got, want)["rel_diff"] <= 1e-6
    else:
        np.testing.assert_array_equal(got, want)


def test_layer_norm_float32_body_runs_as_one_layer_normalization(tmp_path):
    """onnxruntime fuses the float32 LayerNorm body into its LayerNormalization kernel (what
    makes transformers' lowered models run near the model's speed): no reduction is left."""
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ([2, 3, 8], [8], [8])]
    m, feeds = primitive_model("LayerNorm", inputs, {"axis": 2}, consts=(1, 2), float32=True)
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    got = ort.InferenceSession(m.SerializeToString(), opts,
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ops = {n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node}
    assert "LayerNormalization" in ops and not ops & {"ReduceMean", "Pow", "Sqrt"}, ops
    want = get_primitive("LayerNorm").reference(ArrayModel(8, 8), inputs, {"axis": 2})[0]
    assert agreement(got, want)["rel_diff"] <= 1e-6


@pytest.mark.parametrize("attrs, shapes, ops", [
    ({"axis": 2, "epsilon": 1e-3}, [[2, 3, 8], [8], [8]], ["LayerNormalization"]),
    ({"axis": 1}, [[2, 3, 8], [3, 8], None], ["LayerNormalization"]),
    ({"axis": 2}, [[2, 3, 8]], None),           # no Scale: LayerNormalization needs one
])
def test_layer_norm_float32_body_from_opset_17_is_one_node(attrs, shapes, ops):
    """At opset 17 (lowered models are raised to it where they convert) the float32 body is
    LayerNormalization itself, within float32 rounding of the reference; without a Scale it
    stays written out."""
    rng = np.random.default_rng(9)
    inputs = [None if s is None else (rng.standard_normal(s) * 2 + 1).astype(np.float32)
              for s in shapes]
    prim = get_primitive("LayerNorm")
    emulated = emulation_of_op("LayerNorm")
    fn = emulated.function_proto(17, attrs, [None if x is None else list(x.shape) for x in inputs],
                             float32=True)
    if ops is None:
        assert "LayerNormalization" not in [n.op_type for n in fn.node]
    else:
        assert [n.op_type for n in fn.node] == ops
    want = prim.reference(ArrayModel(8, 8), inputs, attrs)[0]
    got = run_primitive("LayerNorm", inputs, attrs, opset=17, float32=True)
    assert got.shape == want.shape and agreement(got, want)["rel_diff"] <= 1e-6
