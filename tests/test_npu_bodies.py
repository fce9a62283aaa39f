"""Which function bodies `lower` gives a lowered model (npu/bodies.py): float32 sums where the
lowered model then agrees with the model before lowering, exact (float64) sums where float32
ones miss the bound; either forced."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from npu_helpers import serialized
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.npu import DOMAIN, lower, verify
from paddle_npu.npu import bodies as bodies_module
from paddle_npu.npu.bodies import MARGIN, TILE_SUMS, kept_within
from paddle_npu.npu.functions import attach_functions, summing_nodes
from paddle_npu.npu.verifier import seeded_inputs

K, M = 128, 4


def cancelling_matmul():
    """ones(1, K) @ W, W's column sums cancelling across the two 64-row tiles of an npu64
    array: tile 0 sums to -(2^24 - 1), tile 1 to 2^24 + 2, both representable in float32,
    so the exact bodies (each tile summed exactly, rounded once, then the tiles added) give
    the true 3; summed in float32, tile 1 passes 2^24 + 1, rounds to 2^24 and twice loses
    1, giving 1. The model before lowering sums all 128 rows in order, its running sums
    staying below 2^24: exactly 3 as well. The ones come from Sign(Abs(x)), so the model's
    float-noise floor (its output under one-ulp input nudges) is 0."""
    w = np.zeros((K, M), np.float32)
    w[0], w[64], w[65], w[66] = -(2.0 ** 24 - 1), 2.0 ** 24 - 1, 2.0, 1.0
    w *= 2.0 ** -np.arange(M, dtype=np.float32)     # each column a power of two smaller
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sign", ["a"], ["ones"]),
         helper.make_node("MatMul", ["ones", "w"], ["y"])], "cancelling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), w.astype(np.float64).sum(0)


def small_conv():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def overloads(lowered):
    """The overloads the main graph's VMM / AddInTile nodes call."""
    return {n.overload for n in lowered.graph
            if n.domain == DOMAIN and n.op_type in ("VMM", "AddInTile")}


def test_float32_missing_the_bound_gets_exact_sums_on_the_first_nodes_that_need_them():
    original, exact_sums = cancelling_matmul()
    feeds = seeded_inputs(original)
    _, (want,) = run_onnx(original, feeds)
    np.testing.assert_array_equal(want[0], exact_sums)      # the model itself sums exactly

    forced, report = lower(original, "npu64", bodies="float32")
    assert report.bodies["bodies"] == "float32" and report.bodies["why"] == "asked for"
    assert all(o.endswith("f32") for o in overloads(forced))
    _, (fast,) = run_onnx(serialized(forced), feeds)
    assert agreement(fast, want)["rel_diff"] > 0.5           # 1 for 3: far beyond 1e-5

    lowered, report = lower(original, "npu64", bodies="auto")
    choice = report.bodies
    assert choice["asked"] == "auto" and choice["float32_nodes"] == 3
    assert choice["rel_diff"][0] > 0.5 and choice["exact_rel_diff"] == [0.0]
    # the tiles' partials added exactly do not help: tile 1's own float32 sum lost the 2
    assert choice["tile_rel_diff"][0] > 0.5 and choice["tile_within"] is None
    # tile 0's exact sum alone neither; both tiles' do, their partials then add exactly;
    # tile 0's one product is exact in float32 as well: only tile 1 needs its exact body
    assert choice["bodies"] == "exact-first" and choice["first_exact"] == 2
    assert choice["exact_nodes"] == [1]
    assert choice["first_rel_diff"] == [0.0] and choice["first_within"] == "as_exact"
    assert choice["why"].startswith("float32 sums were 6.7e-01 from the model")
    assert "with 1 of the first 2 of the 3 nodes that sum exact (to MatMul_2/vmm_r64_c0), " \
        "0.0e+00" in choice["why"], choice["why"]
    f32 = {n.name: n.overload.endswith("f32") for n in lowered.graph if n.domain == DOMAIN}
    assert f32 == {"MatMul_2/vmm_r0_c0": True, "MatMul_2/vmm_r64_c0": False,
                   "MatMul_2/add_in_tile": True}
    assert "function bodies: exact-first sums" in report.render()
    _, (got,) = run_onnx(serialized(lowered), feeds)
    np.testing.assert_array_equal(got[0], exact_sums)
    result = verify(original, lowered, "npu64")
    assert result["ok"] and result["within"] == "float64"


def _chain(layers):
    """ones(1, 128) through `layers` MatMuls of 128 x 128 on npu64: two tiles and their
    AddInTile a layer, 3 * layers nodes that sum."""
    rng = np.random.default_rng(3)
    nodes, inits, x = [helper.make_node("Abs", ["x"], ["h0"])], [], "h0"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((K, K)).astype(np.float32),
                                             f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i + 1}"]))
        x = f"h{i + 1}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, K])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("needed", [[0], [1], [0, 1], [4], [0, 2], [6], [7], [0, 3, 7], [8]])
def test_the_fewest_first_nodes_with_exact_sums_are_found(needed):
    """With a bound met once the nodes `needed` (positions among the 9 nodes that sum) call
    exact bodies, the search finds the fewest first nodes holding them and then leaves the
    others among those float32; where only all 9 pass, it gives up (the exact bodies)."""
    lowered, _ = lower(_chain(3), "npu64", bodies="float32")
    nodes = summing_nodes(lowered.graph)
    assert len(nodes) == 9
    tried = []

    def diffs():
        exact = {i for i, n in enumerate(nodes) if not n.overload.endswith("f32")}
        tried.append(exact)
        return [0.0 if exact >= set(needed) else 1.0]

    found = bodies_module._exact_first(lowered, {"exact_rel_diff": [0.0]}, diffs, 1e-5)
    if needed == [8]:
        assert found == {} and [len(t) for t in tried] == [1, 2, 4, 8]
    else:
        assert found == {"first_exact": max(needed) + 1, "exact_nodes": needed,
                         "first_rel_diff": [0.0], "first_within": "as_exact"}
        # at most 4 counts forward (1, 2, 4, 8) and 3 back, then each of the first once more
        assert len(tried) <= 7 + max(needed) + 1


def test_functions_built_for_one_set_of_bodies_serve_the_next():
    """attach_functions with `made` builds each function once: trying other bodies takes the
    ones built before, and the model carries the same functions as when built afresh."""
    lowered, _ = lower(_chain(3), "npu64", bodies="float32")
    nodes = summing_nodes(lowered.graph)
    made = {}
    attach_functions(lowered, float32=True, made=made)
    first = dict(made)
    attach_functions(lowered, float32=True, exact_nodes=nodes[:1], made=made)
    assert all(made[k] is f for k, f in first.items()) and len(made) > len(first)

    def functions():
        return {k: ir.serde.serialize_function(f).SerializeToString()
                for k, f in lowered.functions.items()}
    reused = functions()
    attach_functions(lowered, float32=True, exact_nodes=nodes[:1])
    assert reused == functions()


def three_tiles():
    """ones(1, 192) @ w on npu64, three tiles of 64 rows whose partial sums are 2^24, 1 and 1
    (each exact in float32): added in float32, 2^24 + 1 rounds to 2^24 twice over, while
    the exact sum 2^24 + 2 is a float32 number too."""
    w = np.zeros((192, 1), np.float32)
    w[0], w[64], w[128] = 2.0 ** 24, 1.0, 1.0
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sign", ["a"], ["ones"]),
         helper.make_node("MatMul", ["ones", "w"], ["y"])], "three_tiles",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 192])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_exact_tile_bodies_add_the_partials_exactly():
    """Float32 products, the tiles' partials added in float64 and rounded once (AddInTile's
    exact body): 2^24 + 2 where float32 additions give 2^24; the products stay float32."""
    lowered, _ = lower(three_tiles(), "npu64", bodies="float32")
    x = {"x": np.ones((1, 192), np.float32)}
    _, (fast,) = run_onnx(serialized(lowered), x)
    assert fast[0, 0] == 2.0 ** 24
    attach_functions(lowered, float32=True, exact=TILE_SUMS)
    calls = {(n.op_type, n.overload.endswith("f32")) for n in lowered.graph
             if n.domain == DOMAIN and n.op_type in ("VMM", "AddInTile")}
    assert calls == {("VMM", True), ("AddInTile", False)}
    _, (tiles,) = run_onnx(serialized(lowered), x)
    assert tiles[0, 0] == 2.0 ** 24 + 2


@pytest.mark.parametrize("tile_within, chosen", [("floor", "exact-tile"), (None, "exact")])
def test_auto_tries_exact_tile_sums_where_float32_ones_miss(monkeypatch, tile_within, chosen):
    """Float32 sums past the model's float-noise floor that the exact ones meet (ResNet-50
    at 64x64 on verify's input): "auto" keeps the exact-tile bodies when those are within it
    (as measured, 3.5e-5 for a floor of 3.8e-5), else the exact ones; the report says why."""
    measured = {"rel_diff": [4.2e-5], "exact_rel_diff": [2.3e-5], "floor": [3.8e-5],
                "within": None, "tile_rel_diff": [3.5e-5], "tile_within": tile_within}
    monkeypatch.setattr(bodies_module, "_measure", lambda *args: measured)
    lowered, report = lower(three_tiles(), "npu64", bodies="auto")
    assert report.bodies["bodies"] == chosen
    why = ("float32 sums were 4.2e-05 from the model, beyond the model's float-noise floor "
           "3.8e-05 (exact sums 2.3e-05)")
    if chosen == "exact-tile":
        why += "; with the tiles' partials added exactly, 3.5e-05: within the model's " \
               "float-noise floor 3.8e-05"
    assert report.bodies["why"] == why
    assert f"function bodies: {chosen} sums in onnxruntime ({why};" in report.render()
    f32 = {n.op_type for n in lowered.graph if n.domain == DOMAIN and n.overload.endswith("f32")}
    assert f32 == ({"VMM"} if chosen == "exact-tile" else set())


@pytest.mark.parametrize("measured, why", [
    # PP-YOLOE+ s at 640x640: the worst output is within its own floor, the other is not
    ({"rel_diff": [1.22e-5, 4.72e-5], "exact_rel_diff": [5.84e-6, 3.05e-5],
      "floor": [7.85e-6, 4.86e-5], "outputs": ["scores", "boxes"]},
     "float32 sums were 1.2e-05 from the model on output 'scores', beyond 1e-05 (exact sums "
     "5.8e-06)"),
    # within the tolerance, but more than MARGIN times as far as the exact sums
    ({"rel_diff": [8e-6], "exact_rel_diff": [3e-6], "outputs": ["y"]},
     "float32 sums were 8.0e-06 from the model, beyond 2x the exact sums' distance (exact "
     "sums 3.0e-06)"),
])
def test_the_report_names_the_output_float32_sums_miss_on(monkeypatch, measured, why):
    """The reason exact sums are kept names the output whose bound float32 sums miss, with
    that output's numbers (not the worst output's, which its larger floor may cover)."""
    assert kept_within(measured["rel_diff"], measured["exact_rel_diff"],
                       measured.get("floor"), tolerance=1e-5) is None
    monkeypatch.setattr(bodies_module, "_measure", lambda *args: {**measured, "within": None})
    _, report = lower(three_tiles(), "npu64", bodies="auto")
    assert report.bodies["bodies"] == "exact"
    assert report.bodies["why"] == why


def test_float32_within_the_bound_is_kept():
    original = small_conv()
    lowered, report = lower(original, "npu256", bodies="auto")
    choice = report.bodies
    assert choice["bodies"] == "float32" and choice["within"] == "tolerance"
    assert max(choice["rel_diff"]) <= 1e-5 / MARGIN
    assert overloads(lowered) and all(o.endswith("f32") for o in overloads(lowered))
    assert {(f.name, f.overload) for f in lowered.functions.values()} >= \
        {("VMM", "whole_f32")}
    result = verify(original, lowered, "npu256")
    assert result["ok"] and result["worst_rel_diff"] <= 1e-5


def test_exact_bodies_forced_and_unknown_refused():
    original = small_conv()
    lowered, report = lower(original, "npu256", bodies="exact")
    # the VMM and the Im2Col (of a picture: a one-hot Conv in float32)
    assert report.bodies == {"asked": "exact", "float32_nodes": 2, "bodies": "exact",
                             "why": "asked for (lower's default; --verify checks float32 ones)"}
    assert overloads(lowered) and not any(o.endswith("f32") for o in overloads(lowered))
    assert report.as_dict()["bodies"]["bodies"] == "exact"
    with pytest.raises(ConversionError, match="unknown function bodies 'fast'"):
        lower(original, "npu256", bodies="fast")


def test_cli_exact_and_float32_bodies_exclude_each_other(tmp_path):
    from test_npu_e2e import cli

    plain, lowered = tmp_path / "conv.onnx", tmp_path / "conv.npu.onnx"
    onnx.save(small_conv(), str(plain))
    res = cli("lower", plain, "-o", lowered, "--exact-bodies")
    assert res.returncode == 0, res.stderr
    assert "function bodies: exact sums in onnxruntime (asked for" in res.stdout
    calls = {n.overload for n in onnx.load(str(lowered)).graph.node if n.op_type == "VMM"}
    assert calls == {"whole"}
    res = cli("lower", plain, "-o", lowered, "--exact-bodies", "--float32-bodies")
    assert res.returncode == 2 and "not allowed with argument" in res.stderr


@pytest.mark.parametrize("options", [
    {"input_shape": {"x": [1, 3, 8, 8]}},
    {"preprocess": {"mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375],
                    "pixel_format": "bgr", "channel_format": "nhwc"}},
    {"preprocess": {"mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0],
                    "channel_format": "nhwc"}, "input_shape": {"x": [1, 3, 8, 8]}},
])
def test_the_check_runs_the_model_as_lowered(options):
    """Fixed sizes and fused preprocessing (raw uint8 images in) are applied to the model the
    float32 bodies are checked against, as `lower` applies them: the check runs."""
    lowered, report = lower(small_conv(), "npu256", bodies="auto", **options)
    assert report.bodies["bodies"] == "float32", report.bodies["why"]
    assert report.bodies["within"] == "tolerance"


def test_cli_verify_fixes_sizes_then_fuses_preprocessing(tmp_path):
    """`lower --verify` runs the model as lower changed it: sizes fixed, then raw images."""
    from test_npu_e2e import cli

    plain, lowered = tmp_path / "conv.onnx", tmp_path / "conv.npu.onnx"
    onnx.save(small_conv(), str(plain))
    res = cli("lower", plain, "-o", lowered, "--input-shape", "x:1,3,8,8", "--fuse-preprocess",
              "--mean", "0,0,0", "--std", "255,255,255", "--channel-format", "nhwc", "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "agrees: no farther from the model computed in float64" in res.stdout
    assert "function bodies: float32 sums" in res.stdout     # --verify lets lower choose


@pytest.mark.parametrize("rel_diff, exact, floor, within", [
    ([7.6e-6], [6.7e-6], None, "as_exact"),     # both near the bound: float32 as close
    ([7.6e-6], [3.0e-6], None, None),           # more than twice as far as the exact sums
    ([1.2e-5], [6.7e-6], None, None),           # beyond the tolerance the exact sums meet
    ([7.6e-6, 1e-7], [6.7e-6, 1e-8], None, None),   # each output is compared
    ([3.0e-5], [2.0e-5], [4.0e-5], "floor"),    # within the floor, as verify accepts
    ([4.2e-5], [2.3e-5], [3.8e-5], None),       # beyond the floor the exact sums meet
    ([7.0e-5], [6.0e-5], [3.0e-5], "as_exact"),  # neither body within the floor
    ([7.0e-5, 5e-5], [6.0e-5, 3e-5], [3.0e-5, 4e-5], None),  # float32 misses one exact meets
    ([2.0e-4], [6.0e-5], [3.0e-5], None),       # ... and float32 over twice as far
])
def test_float32_sums_beyond_half_the_tolerance_are_kept_only_as_close_as_exact_ones(
        rel_diff, exact, floor, within):
    assert kept_within(rel_diff, exact, floor, tolerance=1e-5) == within


def test_a_mobilenet_whose_exact_sums_are_near_the_bound_keeps_float32_sums(zoo_onnx):
    """MobileNetV1 (64x64): float32 sums about 7.6e-6 from the model on verify's input,
    past half the tolerance, and the exact ones 6.7e-6: float32 is kept, and verified."""
    onnx_bytes, _ = zoo_onnx("mobilenet_v1")
    lowered, report = lower(onnx_bytes, "npu256", bodies="auto")
    choice = report.bodies
    assert choice["bodies"] == "float32", choice["why"]
    if choice["within"] == "as_exact":
        assert max(choice["rel_diff"]) <= min(1e-5, MARGIN * max(choice["exact_rel_diff"]))
    else:
        assert choice["within"] == "tolerance"
    # the float32 bodies are what the model calls, after the exact ones were measured
    assert overloads(lowered) and all(o.endswith("f32") for o in overloads(lowered))
    result = verify(onnx_bytes, lowered, "npu256")
    assert result["ok"] and result["within"] == "float64", result
