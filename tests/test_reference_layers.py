"""The reference's fused matrix layers (npu/verification/reference_layers.py) against the
same lowered model run node by node (every VMM tile, then AddInTile): equal bit for bit,
counts equal."""
import numpy as np
import pytest
from npu_helpers import model, on_arrays, serialized
from onnx import helper, numpy_helper

from paddle_npu.compare import run_onnx
from paddle_npu.npu import DOMAIN, VERSION, Reference, get_primitive, lower
from paddle_npu.npu.mappers.matrix import MAX_PARTIALS
from paddle_npu.npu.ops import ArrayModel
from paddle_npu.npu.ops.quant import requantize_array
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.reference_layers import LAYER_OP, fuse_matrix_layers
from paddle_npu.onnx_io import load_proto


def _fused_layers(lowered_bytes):
    graph = load_proto(lowered_bytes).graph
    return len(fuse_matrix_layers(graph))


def _assert_same_as_tile_by_tile(lowered_bytes, feeds, target="npu256"):
    """Fused and node-by-node outputs equal bit for bit, with the same counts; returns how
    many layers were fused (so that a test can insist it is not vacuous)."""
    fused, tiles = Reference(lowered_bytes, target), Reference(lowered_bytes, target,
                                                               fuse_layers=False)
    for _ in range(2):        # the second run reuses the prepared weights
        got, want = fused.run(feeds), tiles.run(feeds)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes()        # bit for bit, signed zeros too
        counts = {k: v for k, v in fused.array.as_dict().items() if k != "seconds"}
        assert counts == {k: v for k, v in tiles.array.as_dict().items() if k != "seconds"}
    assert LAYER_OP in fused.array.seconds and LAYER_OP not in tiles.array.seconds
    return _fused_layers(lowered_bytes)


def _conv_model(rng, c, m, k, size, stride=1, group=1):
    w = (rng.standard_normal((m, c // group, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k],
                            pads=[k // 2] * 4, strides=[stride, stride], group=group)
    out = (size + 2 * (k // 2) - k) // stride + 1
    return model([node], [("x", [None, c, size, size])], [("y", [None, m, out, out])],
                 [("w", w), ("b", b)])


def _gemm_model(rng, k, m):
    w = (rng.standard_normal((k, m)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"])
    return model([node], [("x", [None, k])], [("y", [None, m])], [("w", w), ("b", b)])


# (channels in, out, kernel, image size, stride, groups): several row and column tiles of
# 256 x 256 arrays, partial last tiles, a depthwise layer, one-pixel outputs
CONVS = [(300, 600, 3, 6, 1, 1), (64, 520, 1, 5, 2, 1), (96, 96, 3, 7, 1, 96),
         (700, 40, 3, 3, 2, 1), (30, 30, 3, 1, 1, 1)]


@pytest.mark.parametrize("c,m,k,size,stride,group", CONVS)
@pytest.mark.parametrize("batch", [1, 3])
def test_float_conv_layers_equal_tile_by_tile(c, m, k, size, stride, group, batch):
    rng = np.random.default_rng(c + m + k + size)
    onnx_model = _conv_model(rng, c, m, k, size, stride, group)
    lowered, _ = lower(serialized(onnx_model), on_arrays(),       # depthwise on arrays too
                       input_shape={"x": [batch, c, size, size]})
    x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
    assert _assert_same_as_tile_by_tile(serialized(lowered), {"x": x}) == 1


@pytest.mark.parametrize("k,m,batch", [(1000, 700, 1), (1000, 700, 5), (2048, 1000, 2)])
def test_float_matrix_layers_equal_tile_by_tile(k, m, batch):
    rng = np.random.default_rng(k + m)
    lowered, _ = lower(serialized(_gemm_model(rng, k, m)), "npu256",
                       input_shape={"x": [batch, k]})
    x = rng.standard_normal((batch, k)).astype(np.float32)
    assert _assert_same_as_tile_by_tile(serialized(lowered), {"x": x}) == 1


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("c,m,k,size,stride,group", CONVS[:4])
def test_integer_conv_layers_equal_tile_by_tile(c, m, k, size, stride, group, bits):
    rng = np.random.default_rng(c * m + bits)
    onnx_bytes = serialized(_conv_model(rng, c, m, k, size, stride, group))
    calib = {"x": rng.standard_normal((4, c, size, size)).astype(np.float32)}
    lowered, _, _ = quantized_lower(onnx_bytes, calibrate(onnx_bytes, calib), bits,
                                    on_arrays(), input_shape={"x": [2, c, size, size]})
    x = rng.standard_normal((2, c, size, size)).astype(np.float32)
    assert _assert_same_as_tile_by_tile(serialized(lowered), {"x": x}) == 1
    ref = Reference(serialized(lowered), "npu256")
    ref.run({"x": x})
    ((_, prepared),) = next(iter(ref.layers.values())).prepared.values()
    if group > 1:     # a depthwise layer's alike tiles, read tap by tap: one stack
        (qvmm,) = [n for n in lowered.graph if n.op_type == "QVMM"]
        assert len(qvmm.inputs[1].shape) == 3 and prepared is None
    elif bits == 16:  # int16 sums pass 2^24: float64 products of weights held as integers
        assert prepared.dtype == np.float64
        assert all(m.dtype.kind == "i" for _, _, m in prepared.products)


def test_integer_layer_past_the_float32_bound_is_cut_into_exact_products():
    """A 9216-row int8 layer: 128 * sum|w| passes 2^24 over all rows, so the fused layer
    multiplies it in several float32 products (or float64); the sums stay exact."""
    rng = np.random.default_rng(11)
    onnx_bytes = serialized(_conv_model(rng, 1024, 64, 3, 3))
    calib = {"x": rng.standard_normal((4, 1024, 3, 3)).astype(np.float32)}
    lowered, _, _ = quantized_lower(onnx_bytes, calibrate(onnx_bytes, calib), 8, "npu256",
                                    input_shape={"x": [2, 1024, 3, 3]})
    x = rng.standard_normal((2, 1024, 3, 3)).astype(np.float32)
    ref = Reference(serialized(lowered), "npu256")
    ref.run({"x": x})
    (plan,) = ref.layers.values()
    ((weights, prepared),) = plan.prepared.values()
    magnitude = sum(np.abs(w.astype(np.int64)).sum() for w in weights)
    assert 128 * magnitude / 64 >= 2 ** 24          # on average over the columns: past it
    assert len(prepared.products) > 1 or prepared.dtype == np.float64
    assert _assert_same_as_tile_by_tile(serialized(lowered), {"x": x}) == 1


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v1", "mobilenet_v3_small",
                                  "mobilenet_v3_large"])
@pytest.mark.parametrize("quantized", [False, True])
def test_zoo_models_equal_tile_by_tile(zoo_onnx, name, quantized):
    onnx_bytes, feeds = zoo_onnx(name)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    if quantized:
        table = calibrate(onnx_bytes, feeds)
        lowered, _, _ = quantized_lower(onnx_bytes, table, 8, "npu256", input_shape=shapes)
    else:
        lowered, _ = lower(onnx_bytes, "npu256", input_shape=shapes)
    assert _assert_same_as_tile_by_tile(serialized(lowered), feeds) > 10


def _hand_layer(rng, tiles, width, rows, bias=True):
    """One AddInTile over VMM tiles given as (row offset, weight rows, weight columns, output
    column, scale), in that order: a layer no lowering writes (overlaps, gaps, any order).
    Tiles of equal (row offset, shape) share their weights times their scale, so that a
    partial can cancel another and leave what a third lost to rounding."""
    nodes, inits, base = [], [], {}
    for i, (off, r, m, _, scale) in enumerate(tiles):
        w = base.setdefault((off, r, m), rng.standard_normal((r, m))) * scale
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("VMM", ["x", f"w{i}"], [f"p{i}"], name=f"vmm{i}",
                                      domain=DOMAIN, row_offset=off))
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(width).astype(np.float32),
                                             "b"))
    nodes.append(helper.make_node("AddInTile", ["b" if bias else ""] +
                                  [f"p{i}" for i in range(len(tiles))], ["y"], name="add",
                                  domain=DOMAIN, offsets=[t[3] for t in tiles], width=width))
    graph = helper.make_graph(nodes, "layer",
                              [helper.make_tensor_value_info("x", 1, [None, rows])],
                              [helper.make_tensor_value_info("y", 1, [None, width])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(DOMAIN, VERSION)])
    return m.SerializeToString()


BIG = 2.0 ** 40


@pytest.mark.parametrize("tiles,width,bias", [
    # columns 5-29: big + small - big, rounded as added in this order (the small partial
    # first, or the big ones together, would keep bits this order loses)
    ([(0, 40, 30, 0, BIG), (40, 50, 35, 5, 1.0), (0, 40, 30, 0, -BIG)], 45, True),
    # partials overlapping in part, in an order that is neither by rows nor by columns
    ([(0, 40, 30, 10, 1.0), (40, 50, 20, 0, BIG), (0, 40, 30, 0, 1.0), (90, 10, 25, 15, 1.0),
      (40, 50, 20, 0, -BIG), (40, 50, 35, 5, 1.0)], 45, True),
    # a gap of columns no partial writes, and columns reached by one partial only
    ([(0, 64, 16, 0, 1.0), (64, 36, 16, 0, 1.0), (0, 64, 8, 30, 1.0), (64, 36, 16, 20, 1.0)],
     40, False),
])
@pytest.mark.parametrize("vectors", [2, 3, 7])
def test_hand_written_layers_equal_tile_by_tile(tiles, width, bias, vectors):
    """AddInTile adds each column's partials in its order; the fused layer adds them in
    rounds (each column's k-th partial in round k): the same sums, bit for bit."""
    rng = np.random.default_rng(len(tiles) * 100 + vectors)
    x = rng.standard_normal((vectors, 100)).astype(np.float32)
    assert _assert_same_as_tile_by_tile(_hand_layer(rng, tiles, width, 100, bias),
                                        {"x": x}) == 1


def test_partial_read_elsewhere_is_not_fused():
    """A tile's output that is also a graph output stays its own node."""
    rng = np.random.default_rng(3)
    lowered, _ = lower(serialized(_gemm_model(rng, 600, 300)), "npu256",
                       input_shape={"x": [2, 600]})
    proto = load_proto(serialized(lowered))
    vmm = next(n for n in proto.graph.node if n.op_type == "VMM")
    extra = proto.graph.output.add()
    extra.name = vmm.output[0]
    assert len(fuse_matrix_layers(load_proto(proto.SerializeToString()).graph)) == 0
    x = rng.standard_normal((2, 600)).astype(np.float32)
    got = Reference(proto.SerializeToString(), "npu256").run({"x": x})
    want = Reference(proto.SerializeToString(), "npu256", fuse_layers=False).run({"x": x})
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("bits,relu", [(8, 0), (8, 1), (16, 0)])
def test_requantize_by_shift_equals_the_division(bits, relu):
    """requantize_array divides by powers of two with a shift: the integers of the
    definition, round(acc * M / D) half away from zero, computed here with Python ints
    (every shift from 0, values at the half-way points, both signs, int32's ends)."""
    rng = np.random.default_rng(bits + relu)
    shifts = np.arange(0, 40) % 40
    div = (2 ** shifts).astype(np.int64)
    mult = rng.integers(1, 2 ** 20, div.size).astype(np.int64)
    acc = rng.integers(-2 ** 31, 2 ** 31, (50, div.size)).astype(np.int32)
    acc[:4] = [[0] * div.size, [-1] * div.size, [2 ** 31 - 1] * div.size, [-2 ** 31] * div.size]
    for a, b in ((mult, acc), (np.ones_like(mult), rng.integers(-9, 10, (30, div.size)))):
        b = b.astype(np.int32)
        lo, hi = (0 if relu else -(1 << bits - 1)), (1 << bits - 1) - 1
        for d_ in (div, div + 1):                  # powers of two, and not
            want = [[max(lo, min(hi, (1 if p > 0 else -1) * ((abs(p) + int(d) // 2) // int(d))))
                     for p, d in ((int(v) * int(m), d) for v, m, d in zip(row, a, d_))]
                    for row in b]
            got = requantize_array(b, a, d_, bits, relu)
            assert got.dtype == (np.int8 if bits == 8 else np.int16)
            assert np.array_equal(got, np.array(want))


@pytest.mark.parametrize("c,k,s,p,d,dtype", [
    (8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), np.float32),
    (16, (3, 2), (2, 1), (0, 2, 1, 0), (1, 2), np.float32),
    (33, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), np.int8),
    (9, (3, 3), (1, 2), (0, 0, 0, 0), (2, 1), np.int16),
    (12, (1, 1), (2, 2), (1, 0, 0, 1), (1, 1), np.float32)])
def test_im2col_reference_follows_its_formula(c, k, s, p, d, dtype):
    """Im2Col's reference (padding without np.pad, a 1x1 kernel in one copy) with more
    channels than the hypothesis cases of test_npu_ops, integer types too: every entry
    against the formula of its docstring."""
    rng = np.random.default_rng(c)
    x = (rng.standard_normal((2, c, 7, 6)) * 40).astype(dtype)
    attrs = {"kernel_shape": list(k), "strides": list(s), "pads": list(p),
             "dilations": list(d)}
    got = get_primitive("Im2Col").reference(ArrayModel(8, 8), [x], attrs)[0]
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = k, s, d, p
    oh = (7 + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (6 + pl + pr - dw * (kw - 1) - 1) // sw + 1
    want = np.zeros((2, oh * ow, c * kh * kw), dtype=dtype)
    for i in range(oh):
        for j in range(ow):
            for ch in range(c):
                for a in range(kh):
                    for b in range(kw):
                        y, z = i * sh - pt + a * dh, j * sw - pl + b * dw
                        if 0 <= y < 7 and 0 <= z < 6:
                            want[:, i * ow + j, ch * kh * kw + a * kw + b] = x[:, ch, y, z]
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("quantized", [False, True])
def test_per_channel_plan_equals_tile_by_tile(zoo_onnx, quantized):
    """The per-channel plan: every output column is the sum of one partial per input
    channel (tens of row groups stacked, added in AddInTile's order)."""
    onnx_bytes, feeds = zoo_onnx("mobilenet_v1")
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    if quantized:
        lowered, _, _ = quantized_lower(onnx_bytes, calibrate(onnx_bytes, feeds), 8, "npu256",
                                        plan="per-channel", input_shape=shapes)
    else:
        lowered, _ = lower(onnx_bytes, "npu256", "per-channel", input_shape=shapes)
    assert _assert_same_as_tile_by_tile(serialized(lowered), feeds) > 10


def test_a_batch_runs_at_once_when_the_batch_is_left_open():
    """One run of 3 images gives each image's outputs (to float rounding: BLAS may group an
    output's sum differently for 3 rows than for 1) and counts 3 images' work."""
    rng = np.random.default_rng(5)
    onnx_bytes = serialized(_conv_model(rng, 64, 300, 3, 6))
    lowered, _ = lower(onnx_bytes, "npu256", input_shape={"x": [-1, 64, 6, 6]})
    ref = Reference(serialized(lowered), "npu256")
    assert ref.input_sizes == {"x": [None, 64, 6, 6]}
    x = rng.standard_normal((3, 64, 6, 6)).astype(np.float32)
    (batch,) = ref.run({"x": x})
    macs = ref.array.macs
    for i in range(3):
        (one,) = ref.run({"x": x[i:i + 1]})
        np.testing.assert_allclose(batch[i:i + 1], one, rtol=1e-6, atol=1e-6)
    assert macs == 3 * ref.array.macs > 0


def test_a_batch_the_model_was_not_made_for_is_refused_by_name():
    rng = np.random.default_rng(6)
    onnx_bytes = serialized(_conv_model(rng, 8, 16, 3, 5))
    lowered, _ = lower(onnx_bytes, "npu256", input_shape={"x": [1, 8, 5, 5]})
    ref = Reference(serialized(lowered), "npu256")
    with pytest.raises(ValueError, match=r"input 'x' is 4x8x5x5, but the lowered model was "
                                         r"made for 1x8x5x5; .*--input-shape x:-1,8,5,5"):
        ref.run({"x": np.zeros((4, 8, 5, 5), np.float32)})
    with pytest.raises(ValueError, match=r"input 'x' is 1x8x6x6, but .* made for 1x8x5x5$"):
        ref.run({"x": np.zeros((1, 8, 6, 6), np.float32)})



@pytest.mark.parametrize("bits", [8, 16])
def test_many_tiles_sum_in_a_chain_of_add_in_tiles(bits):
    """A Gemm on 10,240 inputs has 40 row tiles of 256 rows: AddInTile adds at most
    MAX_PARTIALS of them, the rest in a link that adds the running sum (the last input).
    Fused, node by node and in onnxruntime: the same integers, the same counts."""
    rng = np.random.default_rng(bits)
    k = 40 * 256
    onnx_bytes = serialized(_gemm_model(rng, k, 24))
    calib = {"x": rng.standard_normal((4, k)).astype(np.float32)}
    lowered, _, _ = quantized_lower(onnx_bytes, calibrate(onnx_bytes, calib), bits, "npu256",
                                    input_shape={"x": [2, k]})
    sums = [n for n in load_proto(serialized(lowered)).graph.node if n.op_type == "AddInTile"]
    assert [len(n.input) for n in sums] == [1 + MAX_PARTIALS, 1 + 8 + 1]
    assert [bool(n.input[0]) for n in sums] == [True, False]      # the bias once
    assert sums[1].input[-1] == sums[0].output[0]
    x = rng.standard_normal((2, k)).astype(np.float32)
    assert _assert_same_as_tile_by_tile(serialized(lowered), {"x": x}) == 1
    (got,) = Reference(serialized(lowered), "npu256").run({"x": x})
    _, (ort,) = run_onnx(serialized(lowered), {"x": x})
    assert ort.tobytes() == got.tobytes()
