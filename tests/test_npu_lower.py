"""Stage 2 on random Conv / Gemm / MatMul configurations: lowered with both plans onto arrays
smaller and larger than the layer, the lowered model (onnxruntime, function bodies) and the
NumPy reference match onnxruntime on the original within 1e-5 relative; the graph holds
only NPU primitives; the reference's counts match the cost report."""
import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from npu_helpers import assert_close, checked, model, npu_ops, on_arrays, op_types, three_way
from paddle_npu.npu import DOMAIN, Target, lower
from paddle_npu.npu.chip.tiling import PLANS, Geometry, plan_cost, plan_cost_of, plan_tiles

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TINY = Target("tiny", rows=12, cols=8)      # several tiles; a 4x4 kernel splits a channel
BIG = Target("big", rows=256, cols=256)     # most layers fit one
PRIMITIVES = {"Im2Col", "VMM", "AddInTile", "DimTransform"}


@st.composite
def conv_cases(draw):
    depthwise = draw(st.booleans())
    group = draw(st.integers(1, 12)) if depthwise else draw(st.sampled_from([1, 1, 2, 3]))
    cg = 1 if depthwise else draw(st.integers(1, 12))
    mg = draw(st.integers(1, 3)) if depthwise else draw(st.integers(1, 12))
    one_d = draw(st.integers(0, 5)) == 0
    kh = 1 if one_d else draw(st.integers(1, 4))
    kw = draw(st.integers(1, 4))
    s = [1 if one_d else draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [1 if one_d else draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    if auto.startswith("SAME"):
        d = [1, 1]        # onnxruntime, the oracle, has no dilated SAME padding
    pads = [0 if one_d and i % 2 == 0 else draw(st.integers(0, 2)) for i in range(4)] \
        if auto == "NOTSET" else [0] * 4
    h = 1 if one_d else draw(st.integers(max(1, d[0] * (kh - 1) + 1), 9))
    w = draw(st.integers(max(1, d[1] * (kw - 1) + 1), 9))
    return {"group": group, "cg": cg, "mg": mg, "one_d": one_d, "k": [kh, kw], "s": s,
            "d": d, "auto": auto, "pads": pads, "hw": [h, w],
            "bias": draw(st.booleans()), "batch": draw(st.integers(1, 2)),
            "dynamic_batch": draw(st.booleans())}


def conv_model(c, seed=0):
    rng = np.random.default_rng(seed)
    cin, m = c["cg"] * c["group"], c["mg"] * c["group"]
    if c["one_d"]:
        wshape, xshape = [m, c["cg"], c["k"][1]], [cin, c["hw"][1]]
        attrs = {"strides": c["s"][1:], "dilations": c["d"][1:]}
        pads = [c["pads"][1], c["pads"][3]]
    else:
        wshape, xshape = [m, c["cg"], *c["k"]], [cin, *c["hw"]]
        attrs = {"strides": c["s"], "dilations": c["d"]}
        pads = c["pads"]
    if c["auto"] == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = c["auto"]
    w = rng.standard_normal(wshape).astype(np.float32)
    inits = [("w", w)]
    inputs = ["x", "w"]
    if c["bias"]:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
        inputs.append("b")
    node = helper.make_node("Conv", inputs, ["y"], name="conv", group=c["group"], **attrs)
    batch = "N" if c["dynamic_batch"] else c["batch"]
    x = rng.standard_normal([c["batch"]] + xshape).astype(np.float32)
    return model([node], [("x", [batch] + xshape)], [("y", None)], inits), {"x": x}


@pytest.mark.parametrize("plan", ["packed", "per-channel"])
@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
@SETTINGS
@given(case=conv_cases())
def test_random_conv_lowers_and_matches(case, plan, target):
    target = on_arrays(target)          # depthwise ones too: test_random_depthwise_conv_...
    original, feeds = conv_model(case)
    lowered, report = lower(original, target, plan)
    checked(lowered)
    assert npu_ops(lowered) <= PRIMITIVES and "VMM" in npu_ops(lowered)
    assert {d for d, _ in op_types(lowered)} == {DOMAIN}      # nothing else is left
    assert all(n.metadata_props["paddle_npu.device"] == "npu" for n in lowered.graph)
    want, got, ref_out, ref = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")

    (layer,) = report.layers
    cost = layer.cost
    assert cost.plan == plan and layer.alternative.plan != plan
    assert ref.array.arrays == cost.arrays
    n = case["batch"] if not case["dynamic_batch"] else 1
    assert ref.array.vmm_invocations == cost.vmm_invocations * case["batch"] // n
    vmm_nodes = [x for x in lowered.graph if x.op_type == "VMM"]
    arrays = 0
    for x in vmm_nodes:        # every weight is one band: one array's rows, arrays side by side
        *stack, r, m = x.inputs[1].shape.dims          # (or a stack of such tiles)
        assert r <= target.rows
        arrays += (stack[0] if stack else 1) * -(-m // target.cols)
    assert arrays == cost.arrays
    # a band holds every tile of its rows: no two VMM nodes read the same rows
    spans = [(x.attributes.get_int("row_offset", 0), x.inputs[1].shape[0]) for x in vmm_nodes]
    assert len(set(spans)) == len(spans)
    assert 0 < cost.utilisation <= 1
    assert cost.weights == case["mg"] * case["group"] * case["cg"] * case["k"][0] * case["k"][1]


@st.composite
def depthwise_cases(draw):
    case = draw(conv_cases())
    case.update(group=draw(st.integers(2, 12)), cg=1, mg=1)
    return case


@pytest.mark.parametrize("bodies", ["exact", "float32"])
@SETTINGS
@given(case=depthwise_cases())
def test_random_depthwise_conv_runs_on_the_vector_unit(case, bodies):
    original, feeds = conv_model(case)
    lowered, report = lower(original, TINY, "packed", emulation=bodies)
    checked(lowered)
    assert npu_ops(lowered) == ({"DepthwiseConv", "DimTransform"} if case["one_d"] else
                                {"DepthwiseConv"})
    want, got, ref_out, ref = three_way(original, lowered, feeds, TINY)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    (layer,) = report.layers
    assert layer.cost.plan == "vector" and layer.cost.arrays == 0 and layer.alternative is None
    taps = case["k"][0] * case["k"][1]
    n = case["batch"] if not case["dynamic_batch"] else 1
    assert layer.cost.macs == want[0][:n].size * taps          # batch 1 when it is open
    assert ref.array.vector_elements == want[0].size * taps and ref.array.arrays == 0


@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conv_cases())
def test_float32_bodies_sum_in_float32_and_match(case, target):
    from paddle_npu.npu.emulation.functions import attach_functions

    original, feeds = conv_model(case)
    lowered, _ = lower(original, target)
    exact = ir.serde.serialize_model(lowered)
    attach_functions(lowered, float32=True)
    proto = checked(lowered)
    calls = {(n.op_type, n.overload) for n in proto.graph.node}
    assert {o for t, o in calls if t in ("VMM", "AddInTile")} <= {"f32"} | {
        o for t, o in calls if o.endswith("_f32")}
    assert {(f.name, f.overload) for f in proto.functions} == calls
    want, got, ref_out, _ = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model, float32 bodies")
    # the NumPy reference does not use the bodies: the same as for the exact ones
    np.testing.assert_array_equal(ref_out[0], three_way(original, exact, feeds, target)[2][0])


@st.composite
def gemm_cases(draw):
    return {"m": draw(st.integers(1, 5)), "k": draw(st.integers(1, 40)),
            "n": draw(st.integers(1, 30)), "trans_a": draw(st.booleans()),
            "trans_b": draw(st.booleans()), "alpha": draw(st.sampled_from([1.0, 0.5, 2.0])),
            "beta": draw(st.sampled_from([1.0, 0.25])),
            "c": draw(st.sampled_from([None, "row", "row2d", "scalar"]))}


@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
@SETTINGS
@given(g=gemm_cases())
def test_random_gemm_lowers_and_matches(g, target):
    rng = np.random.default_rng(3)
    a_shape = [g["k"], g["m"]] if g["trans_a"] else [g["m"], g["k"]]
    b_shape = [g["n"], g["k"]] if g["trans_b"] else [g["k"], g["n"]]
    inits = [("b", rng.standard_normal(b_shape).astype(np.float32))]
    inputs = ["a", "b"]
    if g["c"] is not None:
        shape = {"row": [g["n"]], "row2d": [1, g["n"]], "scalar": [1]}[g["c"]]
        inits.append(("c", rng.standard_normal(shape).astype(np.float32)))
        inputs.append("c")
    node = helper.make_node("Gemm", inputs, ["y"], name="fc", alpha=g["alpha"], beta=g["beta"],
                            transA=int(g["trans_a"]), transB=int(g["trans_b"]))
    original = model([node], [("a", a_shape)], [("y", [g["m"], g["n"]])], inits)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32)}
    lowered, report = lower(original, target)
    checked(lowered)
    assert npu_ops(lowered) <= PRIMITIVES and {d for d, _ in op_types(lowered)} == {DOMAIN}
    want, got, ref_out, ref = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    (layer,) = report.layers
    assert ref.array.arrays == layer.cost.arrays == \
        -(-g["k"] // target.rows) * -(-g["n"] // target.cols)
    assert ref.array.vmm_invocations == layer.cost.vmm_invocations == layer.cost.arrays * g["m"]


@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
@SETTINGS
@given(lead=st.lists(st.integers(1, 3), min_size=1, max_size=3), k=st.integers(1, 40),
       n=st.integers(1, 30))
def test_random_matmul_lowers_and_matches(lead, k, n, target):
    rng = np.random.default_rng(4)
    node = helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")
    original = model([node], [("a", lead + [k])], [("y", lead + [n])],
                     [("w", rng.standard_normal([k, n]).astype(np.float32))])
    feeds = {"a": rng.standard_normal(lead + [k]).astype(np.float32)}
    lowered, report = lower(original, target)
    assert npu_ops(lowered) <= {"VMM", "AddInTile"}
    assert {d for d, _ in op_types(lowered)} == {DOMAIN}
    want, got, ref_out, ref = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    assert ref.array.vmm_invocations == report.layers[0].cost.vmm_invocations


@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
def test_matmul_with_a_vector_weight_is_one_column(target):
    """[..., K] @ [K] (PicoDet's distribution-to-distance integral): a VMM on a [K, 1]
    weight, the column's axis dropped after."""
    rng = np.random.default_rng(5)
    node = helper.make_node("MatMul", ["a", "w"], ["y"], name="integral")
    original = model([node], [("a", [4, 6, 20])], [("y", [4, 6])],
                     [("w", rng.standard_normal([20]).astype(np.float32))])
    feeds = {"a": rng.standard_normal([4, 6, 20]).astype(np.float32)}
    lowered, report = lower(original, target)
    assert npu_ops(lowered) <= {"VMM", "AddInTile", "DimTransform"} and "VMM" in npu_ops(lowered)
    assert {d for d, _ in op_types(lowered)} == {DOMAIN}
    want, got, ref_out, ref = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    assert ref.array.macs == report.layers[0].cost.macs == 4 * 6 * 20


def test_matmul_with_two_activations_is_not_a_vmm():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="attn")
    original = model([node], [("a", [2, 3, 4]), ("b", [2, 4, 5])], [("y", [2, 3, 5])])
    lowered, report = lower(original, BIG)
    assert op_types(lowered) == {("", "MatMul")}
    assert "not a constant" in report.refusals["attn"]
    assert [s.device for s in report.segments] == ["cpu"]


@pytest.mark.parametrize("plan", ["packed", "per-channel"])
def test_plans_cover_every_weight_exactly_once(plan):
    for geo in (Geometry(1, 70, 9, 300), Geometry(32, 1, 9, 1), Geometry(4, 8, 25, 6),
                Geometry(1, 3, 121, 5)):
        tiles = plan_tiles(geo, plan, 64, 64)
        cover = np.zeros((geo.groups * geo.group_rows, geo.groups * geo.outputs), dtype=int)
        for t in tiles:
            assert t.rows <= 64 and t.cols <= 64
            cover[t.row_start:t.row_start + t.rows, t.col_start:t.col_start + t.cols] += 1
        for g in range(geo.groups):   # each group's block once; nothing outside the blocks
            block = cover[g * geo.group_rows:(g + 1) * geo.group_rows,
                          g * geo.outputs:(g + 1) * geo.outputs]
            assert (block == 1).all()
        assert sum(t.useful for t in tiles) == geo.groups * geo.group_rows * geo.outputs


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 40), st.sampled_from([1, 4, 9, 25, 300]),
       st.integers(1, 40), st.sampled_from(PLANS), st.sampled_from([(12, 8), (256, 256)]),
       st.booleans())
def test_plan_cost_counted_without_tiles_is_the_tiles_cost(groups, cg, taps, mg, plan, grid,
                                                           bias):
    geo = Geometry(groups, cg, taps, mg)
    rows, cols = grid
    assert plan_cost_of(geo, plan, rows, cols, 7, bias, 8) == \
        plan_cost(plan_tiles(geo, plan, rows, cols), plan, rows, cols, 7, bias, 8)


def test_packing_beats_per_channel_as_the_seed_describes():
    geo = Geometry(1, 256, 9, 256)      # a ResNet 3x3 conv, 256 -> 256 channels
    per_channel = plan_tiles(geo, "per-channel", 256, 256)
    packed = plan_tiles(geo, "packed", 256, 256)
    assert len(per_channel) == 256                   # one array per input channel
    assert len(packed) == 10                          # 28 channels (252 rows) per array
    assert all(t.rows == 252 for t in packed[:-1])
    depthwise = Geometry(96, 1, 9, 1)
    assert len(plan_tiles(depthwise, "per-channel", 256, 256)) == 96
    assert len(plan_tiles(depthwise, "packed", 256, 256)) == 4   # 28 groups block-diagonal


@pytest.mark.parametrize("target", [TINY, BIG], ids=["12x8", "256x256"])
@pytest.mark.parametrize("lead", [[], [2], [2, 3]])
def test_matmul_with_a_constant_first_operand_lowers_transposed(lead, target):
    """C [M, K] @ x [..., K, N] (a TPS grid's matrix, spatial mixing) runs as
    (x^T C^T)^T: two moves around VMM tiles, not on the CPU."""
    rng = np.random.default_rng(5)
    m, k, n = 7, 20, 9
    node = helper.make_node("MatMul", ["c", "b"], ["y"], name="mm")
    original = model([node], [("b", lead + [k, n])], [("y", lead + [m, n])],
                     [("c", rng.standard_normal([m, k]).astype(np.float32))])
    feeds = {"b": rng.standard_normal(lead + [k, n]).astype(np.float32)}
    lowered, report = lower(original, target)
    checked(lowered)
    assert npu_ops(lowered) <= {"VMM", "AddInTile", "DimTransform"}
    assert {d for d, _ in op_types(lowered)} == {DOMAIN}
    assert [s.device for s in report.segments] == ["npu"]
    want, got, ref_out, ref = three_way(original, lowered, feeds, target)
    assert_close(got[0], want[0], "onnxruntime on the lowered model")
    assert_close(ref_out[0], want[0], "NumPy reference")
    assert ref.array.vmm_invocations == report.layers[0].cost.vmm_invocations
