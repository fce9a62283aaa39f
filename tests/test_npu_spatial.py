"""The spatial op families on the NPU: ConvTranspose (VMM + Col2Im), pooling (Pool), Resize
(AxisResample), InstanceNormalization / GroupNorm (InstanceNorm), Conv3D (Im2Col3D + VMM),
lowered from tiny ONNX models built here and run three ways (onnxruntime before, onnxruntime
on the function bodies after, the NumPy reference), with what was emitted, its cost and a
refusal."""
import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from npu_helpers import assert_close, checked, model, npu_ops, op_types, serialized, three_way
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.npu import DOMAIN, get_primitive, lower
from paddle_npu.npu.emulation import MIN_BODY_OPSET
from paddle_npu.npu.emulation.registry import emulation_of_op
from paddle_npu.npu.emulation.resample import repeats
from paddle_npu.npu.ops import ArrayModel
from test_npu_ops import run_primitive


def _vector_ns(lowered, primitive):
    """Placement's estimate (cost.py) for the node of this primitive, on npu256's vector unit
    (16 elements per ns)."""
    from paddle_npu.npu.chip.cost import node_ns
    from paddle_npu.npu.chip.target import load_target

    (node,) = [n for n in lowered.graph if n.op_type == primitive]
    unit, ns = node_ns(node, "npu", load_target("npu256"))
    assert unit == "vector"
    return ns


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (input shape, weight shape [C, M/g, KH, KW], attributes, bias)
CONV_T = [
    ([1, 4, 5, 6], [4, 3, 2, 2], dict(strides=[2, 2]), True),
    ([2, 6, 4, 4], [6, 2, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                      output_padding=[1, 1], group=3), False),
    ([1, 3, 5, 4], [3, 2, 3, 2], dict(strides=[1, 2], dilations=[2, 1], pads=[0, 1, 2, 0]),
     True),
    ([1, 8, 3, 3], [8, 1, 4, 4], dict(strides=[2, 2], pads=[1, 1, 1, 1], group=8), True),
    ([1, 3, 7], [3, 4, 3], dict(strides=[2], pads=[1, 0], output_padding=[1]), True),
]


@pytest.mark.parametrize("xs, ws, attrs, bias", CONV_T, ids=range(len(CONV_T)))
@pytest.mark.parametrize("target", ["npu256", "npu64"])
def test_conv_transpose_runs_on_the_arrays(xs, ws, attrs, bias, target):
    if target == "npu64":
        ws = [ws[0] * 20 if attrs.get("group", 1) == 1 else ws[0]] + ws[1:]
        xs = [xs[0], ws[0]] + xs[2:]
    inputs = ["x", "w"] + (["b"] if bias else [])
    group = attrs.get("group", 1)
    m = ws[1] * group
    inits = [("w", _rand(ws, 1))] + ([("b", _rand([m], 2))] if bias else [])
    onnx_model = model([helper.make_node("ConvTranspose", inputs, ["y"], name="up", **attrs)],
                       [("x", xs)], [("y", None)], inits)
    lowered, report = lower(onnx_model, target)
    checked(lowered)
    assert {"VMM", "Col2Im", "DimTransform"} <= npu_ops(lowered)
    assert ("", "ConvTranspose") not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    (layer,) = report.layers
    pixels = int(np.prod(xs)) // xs[1]
    assert layer.cost.macs == pixels * ws[0] * int(np.prod(ws[1:]))  # no inserted zeros
    assert report.npu_mac_share() == 1.0
    x = _rand(xs, 3)
    want, got, ref, r = three_way(onnx_model, lowered, {"x": x}, target)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.macs >= layer.cost.macs     # block-diagonal tiles multiply zeros too
    assert r.array.add_elements >= pixels * m * int(np.prod(ws[2:]))
    sums = pixels * m * int(np.prod(ws[2:])) + (want[0].size if bias else 0)
    assert _vector_ns(lowered, "Col2Im") == sums / 16


@pytest.mark.parametrize("ws, attrs, casts", [
    ([6, 4, 2, 2], dict(strides=[2, 2]), False),              # a DB head's upsampling
    ([6, 4, 4, 4], dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),
])
def test_conv_transpose_float32_and_exact_col2im(ws, attrs, casts):
    """Lowered with float32 bodies, Col2Im calls its float32 body; where no two taps meet
    that is the exact body itself (no float64 anywhere), else only the exact body casts.
    Both agree with onnxruntime's ConvTranspose."""
    inits = [("w", _rand(ws, 7)), ("b", _rand([ws[1]], 8))]
    onnx_model = model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up",
                                         **attrs)],
                       [("x", [1, 6, 7, 5])], [("y", None)], inits)
    x = {"x": _rand([1, 6, 7, 5], 9)}
    bodies = {}
    for kind in ("exact", "float32"):
        lowered, _ = lower(onnx_model, "npu256", emulation=kind)
        (call,) = [n for n in lowered.graph if n.op_type == "Col2Im"]
        assert call.overload.endswith("f32") == (kind == "float32")
        bodies[kind] = [n.op_type for f in lowered.functions.values() if f.name == "Col2Im"
                        for n in f]
        want, got, ref, _ = three_way(onnx_model, lowered, x, "npu256")
        assert_close(got[0], want[0], f"onnxruntime, {kind} bodies")
        if kind == "exact":
            np.testing.assert_array_equal(got[0], ref[0])      # both sum exactly
    assert bodies["exact"] and bodies["float32"]
    assert ("Cast" in bodies["exact"]) == casts and "Cast" not in bodies["float32"]
    assert (bodies["exact"] == bodies["float32"]) == (not casts)


def test_conv_transpose_with_a_computed_weight_stays_plain():
    nodes = [helper.make_node("Neg", ["w0"], ["w"], name="neg"),
             helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2])]
    onnx_model = model(nodes, [("x", [1, 2, 3, 3]), ("w0", [2, 2, 2, 2])], [("y", None)])
    lowered, report = lower(onnx_model)
    assert ("", "ConvTranspose") in op_types(lowered)
    assert report.refusals["up"] == "ConvTranspose: the weight is not a constant"
    lowered, report = lower(model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", auto_pad="SAME_UPPER",
                          strides=[2, 2])],
        [("x", [1, 2, 3, 3])], [("y", None)], [("w", _rand([2, 2, 3, 3], 0))]), "nnie")
    assert report.refusals["up"] == "ConvTranspose: the target has no Col2Im to sum the kernel taps"


# (op, input shape, attributes)
POOLS = [
    ("MaxPool", [1, 3, 7, 8], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", [2, 2, 7, 7], dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", [1, 2, 9, 9], dict(kernel_shape=[3, 2], dilations=[2, 1], pads=[2, 0, 1, 1])),
    ("MaxPool", [1, 2, 9, 8], dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", [1, 3, 7, 8], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", [1, 3, 7, 8], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       count_include_pad=1)),
    ("AveragePool", [1, 2, 7, 7], dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", [1, 2, 6, 7], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       ceil_mode=1, count_include_pad=1)),
    ("GlobalAveragePool", [2, 4, 5, 3], {}),
    ("GlobalMaxPool", [2, 4, 5, 3], {}),
]


@pytest.mark.parametrize("op, xs, attrs", POOLS, ids=[f"{p[0]}{i}" for i, p in enumerate(POOLS)])
def test_pooling_runs_on_the_vector_unit(op, xs, attrs):
    onnx_model = model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)],
                       [("x", xs)], [("y", None)])
    lowered, report = lower(onnx_model)
    checked(lowered)
    assert npu_ops(lowered) == {"Pool"} and ("", op) not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _rand(xs, 4)
    want, got, ref, r = three_way(onnx_model, lowered, {"x": x}, None)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    taps = int(np.prod(attrs.get("kernel_shape", xs[2:])))
    assert r.array.vector_elements == want[0].size * taps   # one operation per window tap
    assert _vector_ns(lowered, "Pool") == want[0].size * taps / 16    # placement's estimate


def _pool_grid(op):
    """(attributes, input height) over sizes 1-9, kernels and strides 1-3, pads 0-1, floor and
    ceil mode, dilation 1-2 (MaxPool's), explicit pads or auto_pad: the height axis only."""
    for size, k, s, pad, ceil, d, auto in itertools.product(
            range(1, 10), range(1, 4), range(1, 4), (0, 1), (0, 1), (1, 2),
            ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")):
        if (op == "AveragePool" and d > 1) or (auto != "NOTSET" and (pad or d > 1)):
            continue            # no NPU form / refused: test_pooling_refusals
        attrs = dict(kernel_shape=[k, 1], strides=[s, 1], dilations=[d, 1],
                     pads=[pad, 0, pad, 0], ceil_mode=ceil)
        if op == "AveragePool":
            del attrs["dilations"]
        if auto != "NOTSET":
            del attrs["pads"]
            attrs["auto_pad"] = auto
        yield attrs, size


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooled_sizes_and_values_are_onnxruntimes_over_a_grid(op):
    """Every window onnxruntime runs, the lowered Pool runs (onnxruntime on its body, and the
    reference), with the same values: onnxruntime divides by the stride rounding toward zero,
    so a window longer than the padded input still gives one output (a 2x2 stride-2 pool of a
    height-1 image), and a dilated window on padding only is float32's lowest (the
    reference's maxima are onnxruntime's exactly, its means within the tolerance). Where
    onnxruntime pools to nothing, Pool is not used. The model declares onnxruntime's size,
    or leaves it to shape inference, which sizes pools as onnxruntime does (onnx's own
    inference misses ceil_mode's rule that a last window starts inside: 40 MaxPool and 27
    AveragePool cases of this grid)."""
    rng = np.random.default_rng(12)
    session = ort.SessionOptions()
    session.log_severity_level = 4
    ran = 0
    for attrs, size in _pool_grid(op):
        node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
        x = rng.standard_normal((1, 2, size, 3)).astype(np.float32)
        undeclared = model([node], [("x", x.shape)], [("y", None)])
        try:
            (want,) = ort.InferenceSession(undeclared.SerializeToString(), session,
                                           providers=["CPUExecutionProvider"]).run(None, {"x": x})
        except Exception:    # noqa: BLE001 - onnxruntime refuses these pads: no reference
            continue
        declared = model([node], [("x", x.shape)], [("y", want.shape)])
        for onnx_model, how in ((declared, "declared"), (undeclared, "undeclared")):
            lowered, report = lower(onnx_model)
            what = f"{op} {attrs} on height {size}, its size {how}"
            if want.size == 0:
                assert "no window fits" in report.refusals["pool"], what
                continue
            assert npu_ops(lowered) == {"Pool"}, what
            assert _output_dims(lowered) == list(want.shape), what
            _, got, ref, _ = three_way(onnx_model, lowered, {"x": x}, None)
            assert got[0].shape == ref[0].shape == want.shape, what
            assert np.array_equal(got[0], want), what     # the body is onnxruntime's pool
            if op == "MaxPool":
                assert np.array_equal(ref[0], want), what
            else:       # the reference's mean is the float64 sum rounded once
                assert_close(ref[0], want, what)
            ran += 1
    assert ran > 2 * (700 if op == "MaxPool" else 250)


def _output_dims(lowered):
    """The sizes the lowered model declares for its one output."""
    (out,) = lowered.graph.outputs
    return [d if isinstance(d, int) else None for d in out.shape]



def _ceil_chain(x_dims, declared=()):
    """x -> MaxPool -> Relu -> AveragePool -> Conv -> y, both pools 2x2 stride 2 pad 1 in
    ceil_mode: onnx's inference sizes a 5x5 input 4x4 then 3x3, onnxruntime 3x3 then 2x2
    (the last window of each would start in the end padding). `declared`: (name, dims)
    value infos the model carries."""
    window = dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="pool", **window),
             helper.make_node("Relu", ["p"], ["r"], name="relu"),
             helper.make_node("AveragePool", ["r"], ["q"], name="pool1", **window),
             helper.make_node("Conv", ["q", "w"], ["y"], name="conv", kernel_shape=[1, 1])]
    w = np.random.default_rng(14).standard_normal((3, 2, 1, 1)).astype(np.float32)
    m = model(nodes, [("x", x_dims)], [("y", None)], [("w", w)])
    m.graph.value_info.extend(helper.make_tensor_value_info(n, 1, d) for n, d in declared)
    return m


CEIL_CHAIN_SIZES = {"p": [1, 2, 3, 3], "r": [1, 2, 3, 3], "q": [1, 2, 2, 2], "y": [1, 3, 2, 2]}


@pytest.mark.parametrize("how", ["undeclared", "onnx's sizes declared", "input shape set"])
def test_sizes_after_ceil_mode_pools_are_onnxruntimes(how):
    """Shape inference (onnx_io's, both stages') sizes ceil_mode pools as onnxruntime runs
    them, and what follows from those sizes: also where the model carries onnx's own sizes
    (an earlier inference wrote them) or lowering fixes the input's size; the lowered model
    runs and gives onnxruntime's values."""
    from paddle_npu.onnx_io import load_model

    if how == "onnx's sizes declared":
        onnx_model = _ceil_chain([1, 2, 5, 5], [("p", [1, 2, 4, 4]), ("r", [1, 2, 4, 4]),
                                                ("q", [1, 2, 3, 3])])
    else:
        onnx_model = _ceil_chain([1, 2, 5, 5] if how == "undeclared" else [1, 2, "h", "w"])
    shapes = {"x": [1, 2, 5, 5]} if how == "input shape set" else None
    x = np.random.default_rng(15).standard_normal((1, 2, 5, 5)).astype(np.float32)
    if shapes is None:
        m = load_model(onnx_model)
        sizes = {v.name: list(v.shape) for n in m.graph for v in n.outputs}
        assert sizes == CEIL_CHAIN_SIZES
    lowered, report = lower(onnx_model, input_shape=shapes)
    assert {"Pool"} <= npu_ops(lowered), report.refusals
    assert _output_dims(lowered) == CEIL_CHAIN_SIZES["y"]
    want, got, ref, _ = three_way(onnx_model, lowered, {"x": x}, None)
    assert want[0].shape == got[0].shape == ref[0].shape == (1, 3, 2, 2)
    assert_close(got[0], want[0], how)
    assert_close(ref[0], want[0], how)

def test_a_quantised_layer_after_a_pool_to_height_one():
    """A classifier's 2x2 stride-2 pool of a height-2 image to height 1, then a 1x1 Conv on
    int8: the lowered model's height is onnxruntime's, its integers the reference's."""
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.qlower import quantized_lower
    from paddle_npu.npu.verification.reference import Reference

    rng = np.random.default_rng(13)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("MaxPool", ["p"], ["q"], name="pool1", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["q", "w"], ["y"], name="conv", kernel_shape=[1, 1])]
    w = (rng.standard_normal((8, 16, 1, 1)) / 4).astype(np.float32)
    onnx_model = model(nodes, [("x", [None, 16, 2, 12])], [("y", None)], [("w", w)])
    data = serialized(onnx_model)
    table = calibrate(data, {"x": rng.standard_normal((8, 16, 2, 12)).astype(np.float32)})
    lowered, report, _ = quantized_lower(data, table, 8)
    assert {"Pool", "QVMM"} <= npu_ops(lowered)
    x = {"x": rng.standard_normal((2, 16, 2, 12)).astype(np.float32)}
    _, want = run_onnx(data, x)
    low = serialized(lowered)
    _, got = run_onnx(low, x)
    assert got[0].shape == want[0].shape == (2, 8, 1, 3)
    assert np.array_equal(got[0], Reference(low, None).run(x)[0])
    assert agreement(got[0], want[0])["cosine"] > 0.99


def test_pooling_refusals():
    two_outputs = model([helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool",
                                          kernel_shape=[2, 2])],
                        [("x", [1, 2, 4, 4])], [("y", None)])
    lowered, report = lower(two_outputs)
    assert report.refusals["pool"] == "MaxPool: MaxPool's indices output has no NPU form"
    dynamic = model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="pool")],
                    [("x", [1, 2, "h", "w"])], [("y", None)])
    lowered, report = lower(dynamic)
    assert ("", "GlobalAveragePool") in op_types(lowered)
    assert "static channels and size" in report.refusals["pool"]
    same = model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[3, 3],
                                   dilations=[2, 2], auto_pad="SAME_LOWER")],
                 [("x", [1, 2, 9, 9])], [("y", None)])
    lowered, report = lower(same)
    assert "auto_pad with dilations" in report.refusals["pool"]
    lowered, report = lower(model([helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                                                    kernel_shape=[2, 2])],
                                  [("x", [1, 2, 4, 4])], [("y", None)]), "nnie")
    assert not npu_ops(lowered) and [s.device for s in report.segments] == ["npu"]


def _resize_model(xs, attrs, scales=None, sizes=None, opset=13, op="Resize"):
    inits, inputs = [], ["x"]
    if opset >= 11 and op == "Resize":
        inputs += ["", "scales" if scales is not None else ""] + (["sizes"] if sizes else [])
    else:
        inputs.append("scales")
    if scales is not None:
        inits.append(("scales", np.asarray(scales, np.float32)))
    if sizes:
        inits.append(("sizes", np.asarray(sizes, np.int64)))
    return model([helper.make_node(op, inputs, ["y"], name="resize", **attrs)],
                 [("x", xs)], [("y", None)], inits, opset=opset)


# (input shape, attributes, scales, sizes, opset, op, primitives expected)
RESIZES = [
    ([1, 3, 4, 5], dict(mode="nearest"), [1, 1, 2, 2], None, 13, "Resize", {"AxisResample"}),
    ([1, 2, 5, 6], dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                        nearest_mode="round_prefer_ceil"), None, [1, 2, 7, 4], 13, "Resize",
     {"AxisResample"}),
    ([2, 3, 4, 5], dict(mode="linear", coordinate_transformation_mode="half_pixel"),
     [1, 1, 2, 2], None, 13, "Resize", {"AxisResample"}),
    ([1, 2, 4, 6], dict(mode="linear", coordinate_transformation_mode="align_corners"), None,
     [1, 2, 7, 11], 13, "Resize", {"AxisResample"}),
    ([1, 2, 6, 6], dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
     None, [1, 2, 3, 1], 13, "Resize", {"AxisResample"}),
    ([1, 2, 4, 5], dict(mode="linear", coordinate_transformation_mode="asymmetric"),
     [1, 1, 1.5, 3], None, 13, "Resize", {"AxisResample"}),
    ([1, 2, 5, 4], dict(mode="cubic", cubic_coeff_a=-0.5), [1, 1, 2, 1], None, 13, "Resize",
     {"AxisResample"}),
    # scales whose target lengths are fractional (7.5, 2.8): align_corners divides by the
    # output's lengths less one (6, 1), as onnxruntime does
    ([1, 2, 5, 4], dict(mode="linear", coordinate_transformation_mode="align_corners"),
     [1, 1, 1.5, 0.7], None, 13, "Resize", {"AxisResample"}),
    # loaded at opset 15, the Upsample is a Resize
    ([1, 3, 4, 5], dict(mode="nearest"), [1, 1, 2, 3], None, 9, "Upsample", {"AxisResample"}),
]


@pytest.mark.parametrize("xs, attrs, scales, sizes, opset, op, prims", RESIZES,
                         ids=[f"{r[1]['mode']}{i}" for i, r in enumerate(RESIZES)])
def test_resize_runs_on_the_npu(xs, attrs, scales, sizes, opset, op, prims):
    onnx_model = _resize_model(xs, attrs, scales, sizes, opset, op)
    lowered, report = lower(onnx_model)
    checked(lowered)
    assert prims <= npu_ops(lowered) and ("", op) not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _rand(xs, 5)
    want, got, ref, r = three_way(onnx_model, lowered, {"x": x}, None)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[attrs["mode"]]
    assert r.array.macs == 0
    if taps == 1:             # picks: moves
        assert r.array.moved_elements >= want[0].size and r.array.vector_elements == 0
    else:                     # per resized axis, taps multiply-adds per output element
        assert want[0].size * taps <= r.array.vector_elements <= 2 * x.size * 4 * taps


@pytest.mark.parametrize("shape, axis, taps", [
    ([2, 3, 6, 5], 3, 2), ([2, 3, 6, 5], 2, 2), ([1, 2, 7], 2, 4), ([3, 9], 1, 4)])
def test_a_weighted_resample_sums_in_float32_tap_by_tap(shape, axis, taps):
    """AxisResample's float32 body: a Gather and a Mul per tap, one Sum, no float64 copy;
    as far from the exact sums as float32 rounding of the taps' products and sum."""
    rng = np.random.default_rng(taps + axis)
    out = 2 * shape[axis] + 1
    idx = rng.integers(0, shape[axis], (out, taps))
    w = rng.uniform(-0.5, 1.5, (out, taps)).astype(np.float32)
    attrs = {"axis": axis, "indices": [int(i) for i in idx.ravel()],
             "weights": [float(v) for v in w.ravel()], "taps": taps}
    x = rng.standard_normal(shape).astype(np.float32)
    prim = get_primitive("AxisResample")
    emulated = emulation_of_op("AxisResample")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    fn = emulated.function_proto(MIN_BODY_OPSET, {**attrs, "_float": True}, [shape], float32=True)
    assert sorted(n.op_type for n in fn.node if n.op_type != "Constant") == \
        ["Gather"] * taps + ["Mul"] * taps + ["Sum"]
    got = run_primitive("AxisResample", [x], attrs, float32=True, derived={"_float": True})
    terms = np.take(x, idx, axis=axis) * w.reshape(w.shape + (1,) * (x.ndim - axis - 1))
    bound = taps * np.abs(terms).sum(axis=axis + 1) * 2.0 ** -23   # taps roundings of each
    assert got.dtype == np.float32 and (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("shape, axis, indices, resize", [
    ([2, 3, 4, 5], 3, np.repeat(np.arange(5), 2), True),      # nearest x2 along the width
    ([1, 2, 7], 2, np.repeat(np.arange(7), 3), True),          # x3, rank 3
    ([2, 3, 4, 5], 2, np.repeat(np.arange(4), 2), False),      # the height: whole rows
    ([2, 3, 4, 5], 3, np.array([0, 0, 1, 2, 2, 3, 4, 4]), False),  # not a whole factor
    ([2, 3, 4, 5], 3, np.arange(5)[::-1], False),              # a move, nothing repeated
])
@pytest.mark.parametrize("floats", [True, False])
def test_a_pick_repeating_the_last_axis_runs_as_a_nearest_resize(shape, axis, indices,
                                                                  resize, floats):
    """AxisResample's pick along a float X's last axis that repeats every entry a whole
    number of times calls onnxruntime's nearest Resize; other picks (and an X given as not
    float: no Resize in its body) a Gather. The same values as the reference either way."""
    attrs = {"axis": axis, "indices": [int(i) for i in indices]}
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    prim = get_primitive("AxisResample")
    emulated = emulation_of_op("AxisResample")
    want = prim.reference(ArrayModel(8, 8), [x], attrs)[0]
    derived = {"_float": True} if floats else {}
    fn = emulated.function_proto(MIN_BODY_OPSET, {**attrs, **derived}, [shape])
    body = [n.op_type for n in fn.node if n.op_type != "Constant"]
    assert body == (["Resize"] if resize and floats else ["Gather"])
    assert fn.overload.endswith("_resize") == (resize and floats)
    got = run_primitive("AxisResample", [x], attrs, derived=derived)
    np.testing.assert_array_equal(got, want)


def test_repeats_finds_whole_factors_only():
    assert repeats(np.repeat(np.arange(4), 3)) == 3
    assert repeats(np.arange(4)) == 0                   # each once: no upscaling
    assert repeats(np.array([0, 0, 1, 1, 2])) == 0      # the last entry once
    assert repeats(np.array([1, 1, 0, 0])) == 0         # out of order
    assert repeats(np.array([0, 0, 2, 2])) == 0         # an entry left out
    assert repeats(np.array([], np.int64)) == 0


def test_resize_refusals():
    crop = _resize_model([1, 2, 4, 4], dict(mode="linear",
                                            coordinate_transformation_mode="tf_crop_and_resize"),
                         [1, 1, 2, 2])
    lowered, report = lower(crop)
    assert report.refusals["resize"] == "Resize: tf_crop_and_resize has no NPU form"
    lowered, report = lower(_resize_model([1, 2, 4, 4], dict(mode="linear"), [1, 1, 2, 2]),
                            "nnie")
    assert ("", "Resize") in op_types(lowered)
    assert report.refusals["resize"] == "Resize: the target has no AxisResample (resizing)"
    assert not npu_ops(lowered)


def test_instance_norm_runs_on_the_vector_unit():
    c = 3
    onnx_model = model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"],
                                         name="norm", epsilon=1e-3)],
                       [("x", [2, c, 5, 4])], [("y", None)],
                       [("s", _rand([c], 6)), ("b", _rand([c], 7))])
    lowered, report = lower(onnx_model)
    checked(lowered)
    assert npu_ops(lowered) == {"InstanceNorm"}
    x = _rand([2, c, 5, 4], 8) * 3 + 1
    want, got, ref, r = three_way(onnx_model, lowered, {"x": x}, None)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.vector_elements == 3 * x.size + 2 * c


def test_group_norm_as_stage_1_writes_it_runs_whole_on_the_npu():
    """Paddle's group_norm: Reshape to [N, groups, -1], InstanceNormalization, Reshape back,
    per-channel scale and shift (paddle_npu/mappers/vision.py)."""
    groups, c = 2, 6
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"], name="group"),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"],
                              name="norm"),
             helper.make_node("Reshape", ["n", "image"], ["r"], name="ungroup"),
             helper.make_node("Mul", ["r", "scale"], ["m"], name="scale"),
             helper.make_node("Add", ["m", "shift"], ["y"], name="shift")]
    inits = [("grouped", np.array([0, groups, -1])), ("image", np.array([2, c, 4, 5])),
             ("ones", np.ones(groups, np.float32)), ("zeros", np.zeros(groups, np.float32)),
             ("scale", _rand([c, 1, 1], 9)), ("shift", _rand([c, 1, 1], 10))]
    onnx_model = model(nodes, [("x", [2, c, 4, 5])], [("y", None)], inits)
    lowered, report = lower(onnx_model)
    assert {"InstanceNorm", "DimTransform"} <= npu_ops(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _rand([2, c, 4, 5], 11)
    want, got, ref, _ = three_way(onnx_model, lowered, {"x": x}, None)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    lowered, report = lower(onnx_model, "nnie")
    assert report.refusals["norm"] == "InstanceNormalization: the target has no InstanceNorm"


# (input shape, weight shape [M, C/g, KD, KH, KW], attributes, bias)
CONV3D = [
    ([1, 3, 4, 5, 6], [4, 3, 3, 3, 3], dict(pads=[1, 1, 1, 1, 1, 1]), True),
    ([2, 4, 5, 6, 4], [6, 2, 2, 3, 1], dict(strides=[2, 1, 2], dilations=[1, 2, 1], group=2),
     False),
]


@pytest.mark.parametrize("xs, ws, attrs, bias", CONV3D, ids=range(len(CONV3D)))
def test_conv3d_runs_on_the_arrays(xs, ws, attrs, bias):
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [("w", _rand(ws, 12))] + ([("b", _rand([ws[0]], 13))] if bias else [])
    onnx_model = model([helper.make_node("Conv", inputs, ["y"], name="conv3d", **attrs)],
                       [("x", xs)], [("y", None)], inits)
    lowered, report = lower(onnx_model, "npu64")
    checked(lowered)
    assert {"Im2Col3D", "VMM"} <= npu_ops(lowered) and ("", "Conv") not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = _rand(xs, 14)
    want, got, ref, r = three_way(onnx_model, lowered, {"x": x}, "npu64")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    (layer,) = report.layers
    assert layer.cost.macs == want[0].size * int(np.prod(ws[1:]))
    assert r.array.macs >= layer.cost.macs


def test_conv3d_on_a_target_without_im2col3d_stays_plain():
    onnx_model = model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv3d")],
                       [("x", [1, 2, 3, 3, 3])], [("y", None)], [("w", _rand([2, 2, 1, 1, 1], 0))])
    lowered, report = lower(onnx_model, "nnie")
    assert report.refusals["conv3d"] == "Conv: the target has no Im2Col3D for 3-D convolutions"


def _integer_cosine(onnx_model, lowered, x):
    """The integer model's output cosine to the float one; onnxruntime (function bodies) and
    the NumPy reference bit-true."""
    from npu_helpers import serialized
    from paddle_npu.compare import run_onnx
    from paddle_npu.npu import Reference

    _, (want,) = run_onnx(serialized(onnx_model), {"x": x})
    _, (got,) = run_onnx(serialized(lowered), {"x": x})
    (ref,) = Reference(serialized(lowered), None).run({"x": x})
    assert np.array_equal(got, ref)
    return float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))


@pytest.mark.parametrize("bits", [8, 16])
def test_conv_transpose_quantises(bits):
    """Its matrix work goes through emit_matrix, so the integer plan comes with it: the
    columns are read out as floats before Col2Im sums the taps (a ReLU after it stays after
    the sum); a float resize follows. Cosine to float >= 0.99, onnxruntime and the NumPy
    reference bit-true."""
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.qlower import quantized_lower

    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], name="up",
                              strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
             helper.make_node("Relu", ["t"], ["r"], name="relu"),
             helper.make_node("Resize", ["r", "", "scales"], ["y"], name="resize",
                              mode="linear")]
    inits = [("w", _rand([4, 3, 3, 3], 15) * 0.3), ("b", _rand([3], 16)),
             ("scales", np.array([1, 1, 2, 2], np.float32))]
    onnx_model = model(nodes, [("x", ["n", 4, 5, 5])], [("y", None)], inits)
    rng = np.random.default_rng(17)
    table = calibrate(onnx_model, {"x": rng.standard_normal((16, 4, 5, 5)).astype(np.float32)})
    lowered, report, records = quantized_lower(onnx_model, table, bits=bits)
    assert {"QVMM", "Col2Im"} <= npu_ops(lowered) and ("", "Relu") in op_types(lowered)
    (record,) = [r for r in records if r["layer"] == "up"]
    assert record["bits"] == bits and not record["relu_fused"] and record["s_y"] is None
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    assert _integer_cosine(onnx_model, lowered, x) >= 0.99


def test_conv3d_quantises():
    """Conv3D's matrix work goes through emit_matrix: int8 on the arrays, bit-true."""
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.qlower import quantized_lower

    onnx_model = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv3d",
                                         pads=[1, 1, 1, 1, 1, 1])],
                       [("x", ["n", 3, 4, 5, 5])], [("y", None)],
                       [("w", _rand([4, 3, 3, 3, 3], 18) * 0.2), ("b", _rand([4], 19))])
    rng = np.random.default_rng(20)
    table = calibrate(onnx_model, {"x": rng.standard_normal((8, 3, 4, 5, 5)).astype(np.float32)})
    lowered, _, records = quantized_lower(onnx_model, table)
    assert {"Im2Col3D", "QVMM", "Requantize"} <= npu_ops(lowered)
    assert [r["layer"] for r in records] == ["conv3d"]
    x = rng.standard_normal((1, 3, 4, 5, 5)).astype(np.float32)
    assert _integer_cosine(onnx_model, lowered, x) >= 0.99
