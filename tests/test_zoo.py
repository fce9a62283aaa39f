"""The CI-sized part of the model zoo (tools/zoo.py): real architectures with seeded weights,
exported by Paddle in both formats, read by us and converted end to end.

Reader: every parameter bit-exact against Paddle's own state, and (legacy) every op, slot,
attribute and var as Paddle's own API reports them. Converter: onnxruntime on our ONNX vs
Paddle's eager outputs on the same input.
"""
import json
import os
import re

import numpy as np
import pytest

import zoo
from paddle_npu import load
from paddle_npu.api import export
from paddle_npu.compare import agreement, run_onnx

CI_MODELS = [name for name, m in zoo.MODELS.items() if m.ci]
PARAMS = [(name, fmt) for name in CI_MODELS for fmt in zoo.FORMATS]
IDS = [f"{n}-{f}" for n, f in PARAMS]


@pytest.fixture(scope="session")
def zoo_export(zoo_dir):
    done = {}

    def get(name, fmt):
        if (name, fmt) not in done:
            done[name, fmt] = zoo.export(name, fmt, os.path.join(zoo_dir, name, fmt))
        return done[name, fmt]
    return get


def _model_file(info):
    return os.path.join(info["dir"], info["model_file"])


@pytest.mark.parametrize("name, fmt", PARAMS, ids=IDS)
def test_reader_recovers_every_parameter_bit_exact(zoo_export, name, fmt):
    info = zoo_export(name, fmt)
    program = load(_model_file(info))
    state = np.load(os.path.join(info["dir"], "state.npz"))
    assert set(program.params) == set(state.files)
    for key in state.files:
        ours, theirs = program.params[key], state[key]
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, key
        assert np.ascontiguousarray(ours).tobytes() == theirs.tobytes(), key


def _paddle_scalar(v):
    """Paddle's API reports SCALAR attributes by their repr, e.g. 'Scalar(int64(0))'."""
    m = re.fullmatch(r"Scalar\((\w+)\((.*)\)\)", v) if isinstance(v, str) else None
    if m is None:
        return v
    kind, text = m.groups()
    if kind.startswith(("int", "uint")):
        return int(text)
    if kind == "bool":
        return text == "True"
    return complex(text) if kind.startswith("complex") else float(text)


def _jsonable(v):
    """Our attribute values in the form the zoo's paddle_api.json records them."""
    if hasattr(v, "ops") and hasattr(v, "idx"):     # a Block: recorded as its index
        return v.idx
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, float):
        return float(np.float32(v)) if np.float32(v) == v else v
    return v


@pytest.mark.parametrize("name", CI_MODELS)
def test_legacy_reader_agrees_with_paddles_api(zoo_export, name):
    info = zoo_export(name, "legacy")
    program = load(_model_file(info))
    with open(os.path.join(info["dir"], "paddle_api.json")) as f:
        api = json.load(f)
    assert program.inputs == api["feed_names"]
    assert program.outputs == api["fetch_names"]
    assert len(program.blocks) == len(api["blocks"])
    for block, ref in zip(program.blocks, api["blocks"]):
        assert block.parent_idx == ref["parent_idx"]
        assert [op.type for op in block.ops] == [o["type"] for o in ref["ops"]]
        for op, ro in zip(block.ops, ref["ops"]):
            assert op.inputs == ro["inputs"], op.type
            assert op.outputs == ro["outputs"], op.type
            assert set(op.attrs) == set(ro["attrs"]), op.type
            for key, value in ro["attrs"].items():
                ours = _jsonable(op.attrs[key])
                value = [_paddle_scalar(x) for x in value] if isinstance(value, list) \
                    else _paddle_scalar(value)
                if isinstance(value, float) or (isinstance(value, list) and value and
                                                isinstance(value[0], float)):
                    np.testing.assert_allclose(ours, value, rtol=1e-7, err_msg=f"{op.type}.{key}")
                else:
                    assert ours == value, f"{op.type}.{key}: {ours!r} != {value!r}"
        for vname, rv in ref.get("vars", {}).items():
            var = block.vars[vname]
            assert var.persistable == rv["persistable"], vname
            if rv.get("dtype") is not None:
                assert var.dtype == rv["dtype"], vname
            if rv.get("shape") is not None:
                assert list(var.shape) == rv["shape"], vname


@pytest.mark.parametrize("name, fmt", PARAMS, ids=IDS)
def test_converted_model_matches_paddle(zoo_export, name, fmt):
    info = zoo_export(name, fmt)
    onnx_bytes = export(_model_file(info))
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    if zoo.MODELS[name].samples:
        # its output multiplies the grid's float rounding by the image's steepest step times
        # its size in pixels: the grid, and the output given Paddle's grid (check_sampling)
        grid = np.load(os.path.join(info["dir"], zoo.SAMPLING_FILE))["grid"]
        _, outs = run_onnx(zoo.with_sampling(onnx_bytes), {**feeds, zoo.SAMPLING_INPUT: grid})
        a = agreement(outs.pop(), grid)
        assert a["rel_diff"] <= 1e-4, f"grid: {a}"
    else:
        _, outs = run_onnx(onnx_bytes, feeds)
    assert len(outs) == info["num_outputs"]
    for i, got in enumerate(outs):
        want = ref[f"out_{i}"]
        assert got.shape == want.shape, f"output {i}"
        a = agreement(got, want)
        assert a["rel_diff"] <= 1e-4, f"output {i}: {a}"


def test_noise_floor_judgement():
    """A model passes within the tolerance or within its float-noise floor, output by output."""
    assert zoo.noise_floor([2e-4, 0.0], [1e-6, 3e-5]) == [2e-4, 3e-5]
    assert zoo.judge([5e-5, 1.5e-4], [0.0, 2e-4], 1e-4) == (True, 1)
    assert zoo.judge([5e-5, 1.5e-4], [0.0, 1e-4], 1e-4) == (False, 1)
    assert zoo.judge([3e-4, 1e-6], [2e-4, 0.0], 1e-4) == (False, 0)
    x = np.linspace(-3, 3, 1000, dtype="float32")
    nudged = zoo._nudge(x)
    assert nudged.dtype == x.dtype and 0 < np.abs(nudged - x).max() <= 2e-7 * 3
    ids = np.arange(5)
    assert zoo._nudge(ids) is ids


@pytest.mark.parametrize("name", CI_MODELS)
def test_paddle_noise_recorded(zoo_export, name):
    """Each export records how far Paddle's outputs move on a nudged input; the translated
    form shares the legacy one's (same eager layer and input)."""
    noise = {fmt: zoo_export(name, fmt)["paddle_noise"] for fmt in zoo.FORMATS}
    for fmt, values in noise.items():
        assert len(values) == zoo_export(name, fmt)["num_outputs"]
        assert all(np.isfinite(v) and v >= 0 for v in values), (fmt, values)
    assert noise["translated"] == noise["legacy"]


def test_float64_judgement():
    """A model whose ONNX is no farther from the float64 result than Paddle's float32 output
    is (or within tolerance of it) differs from Paddle by rounding alone."""
    assert zoo.as_exact_as_paddle([1.7e-4, 4e-4], [2.5e-4, 5e-4], 1e-4)
    assert zoo.as_exact_as_paddle([5e-5], [0.0], 1e-4)
    assert not zoo.as_exact_as_paddle([3e-4, 1e-6], [2.5e-4, 0.0], 1e-4)
    assert not zoo.as_exact_as_paddle([], [], 1e-4)   # no float64 result: no verdict


def test_each_output_may_be_explained_by_its_floor_or_by_float64():
    """One output within its float-noise floor, the other beyond it but no farther from the
    float64 result than Paddle's own: both differences are float rounding."""
    want = [np.float32([1, 2]), np.float32([1, 2])]
    outs = [np.float32([1, 2.001]), np.float32([1, 2.0008])]
    noise = [1e-3, 1e-5]
    v = zoo._verdict(outs, outs, want, noise, [np.float32([1, 2]), np.float32([1, 2.0005])], 1e-4)
    assert v["ok"] and v["status"] == "ok (float64)" and v["beyond_floor"] == [1]
    # the output beyond its floor farther from float64 than Paddle's: a conversion error
    v = zoo._verdict(outs, outs, want, noise, [np.float32([1, 2]), np.float32([1, 2.0001])], 1e-4)
    assert not v["ok"] and v["status"] == "MISMATCH"
    # no float64 result: the floor alone
    assert not zoo._verdict(outs, outs, want, noise, [], 1e-4)["ok"]


def test_an_output_beyond_both_measures_is_judged_by_our_float64_run():
    """Paddle's float32 output 5e-5 from float64, ours 1.5e-4 on the other side: beyond the
    floor and farther than Paddle's. Our ONNX run in float64 decides: Paddle's function
    (ok, within FLOAT64_FACTOR), another function (MISMATCH), or no float64 run (MISMATCH)."""
    want, outs = [np.float32([1, 2.0001])], [np.float32([1, 1.9997])]
    exact = [np.float64([1, 2])]
    calls = []

    def run(got):
        return lambda: calls.append(1) or got

    v = zoo._verdict(outs, outs, want, [1e-5], exact, 1e-4, run([np.float64([1, 2.0000001])]))
    assert v["ok"] and v["status"] == "ok (float64 run)" and calls == [1]
    assert not zoo._verdict(outs, outs, want, [1e-5], exact, 1e-4,
                            run([np.float64([1, 2.001])]))["ok"]
    assert not zoo._verdict(outs, outs, want, [1e-5], exact, 1e-4, run(None))["ok"]
    # ours more than FLOAT64_FACTOR times as far from float64 as Paddle's
    far = [np.float32([1, 2 - 5e-4 * zoo.FLOAT64_FACTOR])]
    assert not zoo._verdict(far, far, want, [1e-5], exact, 1e-4, run([np.float64([1, 2])]))["ok"]
    # within the floor: no float64 run
    calls.clear()
    assert zoo._verdict(outs, outs, want, [1e-3], exact, 1e-4, run(None))["ok"] and not calls


@pytest.mark.parametrize("name", CI_MODELS)
def test_float64_result_recorded(zoo_export, name):
    """Each export keeps the layer's outputs computed in float64; they are what Paddle's
    float32 outputs approximate, and the translated form shares the legacy one's."""
    info = zoo_export(name, "legacy")
    truth = np.load(os.path.join(info["dir"], "truth.npz"))
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    assert len(truth.files) == info["num_outputs"]
    exact_of = truth
    if zoo.MODELS[name].samples:   # the grid's float32 rounding, amplified: given its grid
        exact_of = np.load(os.path.join(info["dir"], zoo.SAMPLING_FILE))
        assert agreement(exact_of["grid"], exact_of["grid_f64"])["rel_diff"] <= 1e-4
    for i in range(info["num_outputs"]):
        key = f"out_f64_{i}" if exact_of is not truth else f"out_{i}"
        exact, got = exact_of[key], ref[f"out_{i}"]
        assert exact.dtype.kind != "f" or exact.dtype == np.float64, i
        assert agreement(got, exact)["rel_diff"] <= 1e-4, i
    translated = np.load(os.path.join(zoo_export(name, "translated")["dir"], "truth.npz"))
    assert all(np.array_equal(truth[k], translated[k]) for k in truth.files)


def test_cache_key_covers_the_export_side_only(tmp_path, monkeypatch):
    """Changing how exports are checked (below the banner) keeps the cached exports;
    changing the export side re-keys them."""
    text = zoo.ZOO_FILE.read_text()
    assert text.count(zoo.CHECK_BANNER) == 1
    key = zoo.cache_key("lenet", "legacy")
    copy = tmp_path / "zoo.py"
    monkeypatch.setattr(zoo, "ZOO_FILE", copy)
    copy.write_text(text + "\n# a change to the check\n")
    assert zoo.cache_key("lenet", "legacy") == key
    head, tail = text.split(zoo.CHECK_BANNER)
    copy.write_text(head + "\n# a change to an export\n" + zoo.CHECK_BANNER + tail)
    assert zoo.cache_key("lenet", "legacy") != key
    assert zoo.cache_key("lenet", "pir") != zoo.cache_key("lenet", "legacy")


RAMP = np.arange(6, dtype=np.float32)


def _toy_selecting_model(factor):
    """x [1, 6] -> its top 3 (TopK) -> y = factor * (x + RAMP) at the picks: a model whose
    output hinges on a top-k choice, as RT-DETR's query selection."""
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("TopK", ["x", "k"], ["top", "picks"], axis=1),
             helper.make_node("Add", ["x", "ramp"], ["shifted"]),
             helper.make_node("Mul", ["shifted", "factor"], ["scaled"]),
             helper.make_node("GatherElements", ["scaled", "picks"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "toy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(np.array([3], np.int64), "k"),
         numpy_helper.from_array(np.array(factor, np.float32), "factor"),
         numpy_helper.from_array(RAMP, "ramp")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _toy_selection_export(tmp_path, x, picks):
    """An export directory as the zoo writes one for a selecting model, Paddle's run
    being y = 2 * (x + RAMP) at `picks` (picked in that order)."""
    want = 2 * (x + RAMP)[:, picks[0]]
    np.savez(tmp_path / "reference.npz", in_x=x, out_0=want)
    np.savez(tmp_path / zoo.SELECTION_FILE, score=x, picks=picks, score_f64=x.astype(np.float64),
             out_f64_0=2 * (x.astype(np.float64) + RAMP)[:, picks[0]])
    meta = {"selection": {"score_noise": 0.0, "paddle_noise": [0.0], "picks": 3,
                          "picks_moved_by_nudge": 0}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return {"x": x}


def test_selection_check_feeds_paddles_picks(tmp_path):
    """Given Paddle's picks, our outputs are compared query by query even where our own
    top-k orders near-equal scores differently; a wrong computation still disagrees."""
    x = np.array([[0.5, 0.1, 0.5, 0.3, 0.2, 0.9]], np.float32)
    picks = np.array([[5, 2, 0]], np.int64)         # the tie at 0.5 broken the other way
    feeds = _toy_selection_export(tmp_path, x, picks)
    held = zoo.with_selection(_toy_selecting_model(2.0), held=True)
    _, (y, scores) = run_onnx(held, {**feeds, zoo.SELECTION_INPUT: picks})
    np.testing.assert_array_equal(y, 2 * (x + RAMP)[:, [5, 2, 0]])
    np.testing.assert_array_equal(scores, x)
    _, (y, scores, ours) = run_onnx(zoo.with_selection(_toy_selecting_model(2.0), held=False), feeds)
    np.testing.assert_array_equal(ours, [[5, 0, 2]])   # onnxruntime keeps the lower index first
    assert zoo._rel_diff(2 * (x + RAMP)[:, picks[0]], y) > 0.1   # its rows in another order

    v = zoo.check_selection(_toy_selecting_model(2.0), tmp_path, feeds, 1e-4)
    assert v["ok"] and v["status"] == "ok"
    assert (v["same_picks"], v["same_rank"], v["picks"]) == (3, 1, 3)
    assert v["names"] == ["scores", "out_0"]
    wrong = zoo.check_selection(_toy_selecting_model(2.001), tmp_path, feeds, 1e-4)
    assert not wrong["ok"] and wrong["status"] == "MISMATCH" and wrong["k"] == 1
    assert v["beyond_floor"] == [] and wrong["beyond_floor"] == [1]


def test_selection_check_needs_one_topk():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph).SerializeToString()
    with pytest.raises(ValueError, match="one TopK node, the model has 0"):
        zoo.with_selection(model, held=True)


def _toy_sampling_model(scale):
    """y = GridSample(x, g * scale): a 'predicted' grid read by a sampling."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Constant", [], ["s"], value=helper.make_tensor(
                 "s", TensorProto.FLOAT, [], [scale])),
             helper.make_node("Mul", ["g", "s"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=1)]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 96]),
        helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 8, 8, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()


def test_sampling_check_feeds_paddles_grid(tmp_path):
    """Given Paddle's grid, our sampling is compared on its own: a grid one float32 rounding
    away moves a sharp image's output far past 1e-4, yet the check passes; a wrong
    computation still disagrees."""
    rng = np.random.default_rng(3)
    x = (rng.uniform(size=(1, 1, 64, 96)) > 0.5).astype(np.float32)    # all sharp edges
    g = rng.uniform(-0.9, 0.9, (1, 8, 8, 2)).astype(np.float32)
    ours = _toy_sampling_model(1.0)
    grid = g * np.float32(1 + 3e-5)              # Paddle's grid: a few float32 ulps away
    _, (y_free,) = run_onnx(ours, {"x": x, "g": g})
    _, (y, our_grid) = run_onnx(zoo.with_sampling(ours), {"x": x, "g": g,
                                                           zoo.SAMPLING_INPUT: grid})
    np.testing.assert_array_equal(our_grid, g)
    assert zoo._rel_diff(y, y_free) > 1e-4                       # the sampling amplifies
    np.savez(tmp_path / "reference.npz", in_x=x, in_g=g, out_0=y)
    np.savez(tmp_path / zoo.SAMPLING_FILE, grid=grid, grid_f64=grid.astype(np.float64),
             out_f64_0=y.astype(np.float64))
    (tmp_path / "meta.json").write_text(json.dumps(
        {"sampling": {"grid_noise": 0.0, "paddle_noise": [0.0]}}))
    v = zoo.check_sampling(ours, tmp_path, {"x": x, "g": g}, 1e-4)
    assert v["ok"] and v["status"] == "ok" and v["names"] == ["grid", "out_0"]
    wrong = zoo.check_sampling(_toy_sampling_model(1.001), tmp_path, {"x": x, "g": g}, 1e-4)
    assert not wrong["ok"] and wrong["k"] == 0                   # its grid is off


def test_sampling_check_needs_one_grid_sample():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ValueError, match="one GridSample node, the model has 0"):
        zoo.with_sampling(helper.make_model(graph).SerializeToString())


def test_photo_like_inputs():
    """The image-like batches some detectors are tested and calibrated on: seeded, in the
    range ImageNet normalisation gives pixels in 0..1, and smooth from pixel to pixel as
    photographs are (normal noise changes by more than its std from one pixel to the next)."""
    gen = zoo._photo_like(96, 128)
    a, b = gen(np.random.default_rng(7), 2)["x"], gen(np.random.default_rng(7), 2)["x"]
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 3, 96, 128) and a.dtype == np.float32
    mean, std = (np.reshape(v, (1, 3, 1, 1)) for v in (zoo.IMAGENET_MEAN, zoo.IMAGENET_STD))
    pixels = a * std + mean
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6 and pixels.std() > 0.1
    assert not np.array_equal(a[0], a[1])
    step = np.abs(np.diff(a, axis=3)).mean() / a.std(axis=(2, 3)).mean()
    assert step < 0.1, step
    noise = np.random.default_rng(7).standard_normal(a.shape)
    assert np.abs(np.diff(noise, axis=3)).mean() / noise.std() > 1
    raw = zoo._photo_like(96, 128, zoo.UNIT_PIXELS)(np.random.default_rng(7), 2)["x"]
    np.testing.assert_allclose(raw, pixels, atol=1e-6)    # UVDoc's pixels / 255: no ImageNet
    rtdetr = zoo.test_inputs("rtdetr_r18vd_160")["x"]
    np.testing.assert_array_equal(rtdetr, zoo._photo_like(160, 160)(
        np.random.default_rng(zoo.MODELS["rtdetr_r18vd_160"].seed), 1)["x"])
