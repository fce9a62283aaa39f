"""`verify` on outputs that hinge on a discrete choice (a TopK's or ArgMax's picks, rows taken
with GatherElements): judged given the float model's picks, plus the scores ranked and how
many of the picks the lowered model makes on its own; and on samples taken at computed
places (GridSample): given the float model's grid, the grid judged itself."""
import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.verifier import render, verify
from paddle_npu.onnx_io import load_proto

from npu_helpers import serialized

N, D, C, K = 12, 8, 3, 4
STEP = 0.05         # the int8 step of the input (its calibrated threshold is 127 steps)


def _detector(values=True):
    """x [1, N, D] -> scores (MatMul), boxes (MatMul), class ids (ArgMax of a MatMul); the
    top K scores pick boxes and class ids (GatherElements, as Paddle's take_along_axis).
    Candidates 5 and 6 compete for the K-th place: the same on the int8 grid in the features
    the scores read, 6 a fifth of a step higher in float (so the float model picks 6, the
    int8 one, seeing a tie, 5), opposite in the features only boxes and classes read.
    values: the top K scores are an output too."""
    rng = np.random.default_rng(0)
    ws = np.zeros((D, 1), np.float32)
    ws[:4, 0] = [1.0, 0.5, -0.5, 0.25]
    wb = rng.standard_normal((D, 4)).astype(np.float32)
    wb[4:] *= 4
    wc = rng.standard_normal((D, C)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "ws"], ["scores"], name="score"),
        helper.make_node("MatMul", ["x", "wb"], ["boxes"], name="box"),
        helper.make_node("MatMul", ["x", "wc"], ["logits"], name="cls"),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=2, keepdims=1, name="argmax"),
        helper.make_node("TopK", ["scores", "k"], ["top", "picks"], axis=1, name="topk"),
        helper.make_node("Expand", ["picks", "shape4"], ["picks4"], name="expand"),
        helper.make_node("GatherElements", ["boxes", "picks4"], ["picked_boxes"], axis=1,
                         name="take_boxes"),
        helper.make_node("GatherElements", ["ids", "picks"], ["picked_ids"], axis=1,
                         name="take_ids")]
    outputs = [helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, K, 1])] * values + \
        [helper.make_tensor_value_info("picked_boxes", TensorProto.FLOAT, [1, K, 4]),
         helper.make_tensor_value_info("picked_ids", TensorProto.INT64, [1, K, 1])]
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N, D])],
        outputs,
        [numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(wb, "wb"),
         numpy_helper.from_array(wc, "wc"), numpy_helper.from_array(np.array([K]), "k"),
         numpy_helper.from_array(np.array([1, K, 4]), "shape4")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.round(rng.standard_normal((1, N, D)) / STEP) * STEP      # on the int8 grid
    x[0, 0, 0] = 127 * STEP
    x[0, 5, :4] = [0.9, 0, 0, 0.2]                                  # score 0.95
    x[0, 6, :4] = x[0, 5, :4]
    x[0, 6, 4:] = -x[0, 5, 4:]
    x = x.astype(np.float32)
    x[0, 6, 0] += np.float32(STEP / 5)                              # score 0.96
    return model.SerializeToString(), {"x": x}


def _int8(model, feeds):
    table = calibrate(model, feeds)
    table["tensors"]["x"]["threshold"] = 127 * STEP
    lowered, _, _ = quantized_lower(model, table, 8, "npu256")
    return model, load_proto(lowered), feeds


@pytest.fixture(scope="module")
def detector():
    return _int8(*_detector())


def _with_weight(lowered, name, change):
    proto = type(lowered)()
    proto.CopyFrom(lowered)
    weight = next(t for t in proto.graph.initializer if t.name == name)
    w = numpy_helper.to_array(weight).copy()
    change(w)
    weight.CopyFrom(numpy_helper.from_array(w, name))
    return proto


def test_int8_swapping_a_near_tie_agrees_given_the_float_picks(detector):
    model, lowered, feeds = detector
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    top, boxes, ids = result["outputs"]
    # free running, the int8 model picks candidate 5 for the last place: another box, another
    # class, which cosine would call a failure
    assert boxes["selection"]["free_running"]["cosine"] < 0.9
    assert ids["selection"]["free_running"]["cosine"] == 0
    assert boxes["selection"]["picks"] == K and boxes["selection"]["picks_same"] == K - 1
    assert boxes["onnxruntime"]["cosine"] > 0.999 and ids["bit_exact"]
    assert top["selection"] is None
    argmax, topk = result["selections"]
    assert (argmax["op"], argmax["picks"], argmax["picks_same"]) == ("ArgMax", N, N)
    assert (topk["op"], topk["picks_same"], topk["in_place"]) == ("TopK", K - 1, K - 1)
    assert topk["explained"] and 0.009 < topk["near_tie"] < 0.011     # 0.96 vs 0.95
    assert topk["near_tie"] <= 2 * topk["score_error"]
    assert topk["scores"]["name"] == "scores" and topk["scores"]["onnxruntime"]["cosine"] > 0.999
    text = render(result)
    assert "TopK topk of scores: 3 of 4 picks the same (3 in place); the others are " \
           "near-ties: within 1.0e-02" in text
    assert "ArgMax argmax of logits: all 12 picks the same" in text
    assert "picked_boxes cosine 0.7" in text and text.splitlines()[-1].startswith("agrees")


def test_candidates_off_disagree_naming_the_output_taken_from_them(detector):
    model, lowered, feeds = detector

    def drop_features(w):       # the boxes lose the features only they read
        w[4:] = 0

    result = verify(model, _with_weight(lowered, "box/wq_r0_c0", drop_features), "npu256",
                    feeds=feeds)
    assert not result["ok"]
    assert result["outputs"][1]["onnxruntime"]["cosine"] < 0.99
    assert "DISAGREES (integer plan): worst cosine to float" in render(result)
    assert "at picked_boxes (at least 0.99)" in render(result)


def test_scores_off_disagree_naming_them(detector):
    model, lowered, feeds = detector

    def flip(w):
        w[1] = -w[1]

    result = verify(model, _with_weight(lowered, "score/wq_r0_c0", flip), "npu256", feeds=feeds)
    assert not result["ok"]
    assert result["selections"][1]["scores"]["onnxruntime"]["cosine"] < 0.99
    assert "at scores (ranked by TopK topk) (at least 0.99)" in render(result)


def test_a_selection_lowered_wrong_disagrees():
    model, lowered, feeds = _int8(*_detector(values=False))
    wrong = type(lowered)()
    wrong.CopyFrom(lowered)
    topk = next(n for n in wrong.graph.node if n.op_type == "TopK")
    topk.attribute.append(helper.make_attribute("largest", 0))
    result = verify(model, wrong, "npu256", feeds=feeds)
    # given the float picks every output and the scores agree: only the picks tell
    assert result["worst_cosine"] > 0.999 and not result["ok"]
    topk = result["selections"][1]
    assert topk["picks_same"] == 0 and not topk["explained"]
    assert topk["scores"]["onnxruntime"]["cosine"] > 0.999
    assert topk["near_tie"] > 2 * topk["score_error"]
    assert "the others are NOT near-ties" in render(result)
    assert "DISAGREES (integer plan): the picks of TopK topk differ beyond near-ties" in \
        render(result)


def test_an_arg_max_output_is_judged_by_the_scores_it_ranks():
    """A classifier whose output is its ArgMax: one label in 64 flips at int8 (two logits
    0.12 apart, the logits up to 0.15 off), the logits agree."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 10)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
         helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0, name="label")],
        "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 16])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [64])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = model.SerializeToString()
    x = rng.standard_normal((64, 16)).astype(np.float32)
    lowered, _, _ = quantized_lower(model, calibrate(model, {"x": x}), 8, "npu256")
    result = verify(model, lowered, "npu256", feeds={"x": x})
    assert result["ok"], render(result)
    (label,) = result["outputs"]
    assert label["selection"]["free_running"]["cosine"] == 0 and label["bit_exact"]
    (argmax,) = result["selections"]
    assert (argmax["picks"], argmax["picks_same"]) == (64, 63) and argmax["explained"]
    assert 0.999 < result["worst_cosine"] < 1
    assert "at logits (ranked by ArgMax label)" in render(result)


def test_a_float_plan_makes_the_same_picks():
    from paddle_npu.npu import lower

    model, feeds = _detector()
    lowered, _ = lower(model, "npu256")
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"] and result["within"] == "float64", render(result)
    assert all(s["picks_same"] == s["in_place"] == s["picks"] for s in result["selections"])
    assert "TopK topk of scores: all 4 picks the same" in render(result)


def test_verify_command_json_reports_the_selection(detector, tmp_path, capsys):
    from paddle_npu.cli import main

    model, lowered, feeds = detector
    m, low, data = tmp_path / "m.onnx", tmp_path / "l.onnx", tmp_path / "io.npz"
    m.write_bytes(model)
    low.write_bytes(lowered.SerializeToString())
    np.savez(data, in_x=feeds["x"])
    capsys.readouterr()
    assert main(["verify", str(m), str(low), "--inputs", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and [o["name"] for o in result["outputs"]] == \
        ["top", "picked_boxes", "picked_ids"]
    ids = result["outputs"][2]["selection"]
    assert ids["judged"] == "given the float model's picks"
    assert ids["picks_names"] == ["ids", "picks"]
    assert (ids["picks"], ids["picks_same"]) == (N + K, N + K - 1)


def _unwarper():
    """x [1, 1, H, W], a white-noise image -> a grid of places computed from it (a 1x1 Conv to
    two channels, Tanh, moved to [1, H, W, 2]) -> the image read at those places
    (GridSample): as an unwarping model or a deformable attention reads its map. One pixel
    of a place is two grid units in H: on white noise the samples then differ wholesale."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((2, 1, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["offsets"], name="offset"),
             helper.make_node("Tanh", ["offsets"], ["places"], name="tanh"),
             helper.make_node("Transpose", ["places"], ["grid"], perm=[0, 2, 3, 1],
                              name="to_grid"),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=1,
                              name="sample")]
    graph = helper.make_graph(
        nodes, "unwarper", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 64])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    x = rng.standard_normal((1, 1, 64, 64)).astype(np.float32)
    return model.SerializeToString(), {"x": x}


def test_samples_are_judged_given_the_float_grid_and_the_grid_itself():
    """The int8 plan computes the places a step off: free-running, the samples of white
    noise at them are far from float's; given the float model's grid they are float's
    exactly (GridSample reads the image itself), and the grid is judged as an output."""
    model, feeds = _unwarper()
    table = calibrate(model, feeds)
    lowered = load_proto(quantized_lower(model, table, 8, "npu256")[0])
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    (y,) = result["outputs"]
    assert y["selection"]["judged"] == "given the float model's sampling grids"
    assert y["selection"]["free_running"]["cosine"] < 0.99
    assert y["onnxruntime"]["max_abs_diff"] == 0
    (grid,) = result["selections"]
    assert grid["grid"] and grid["scores"]["name"] == "grid"
    assert 0.99 < grid["scores"]["onnxruntime"]["cosine"] < 1
    assert "GridSample sample of grid: its grid judged as an output" in render(result)

    def off(w):                 # the places mirrored: the grid is wrong
        w[:] = -w

    wrong = verify(model, _with_weight(lowered, next(
        t.name for t in lowered.graph.initializer if t.name.startswith("offset/wq")), off),
        "npu256", feeds=feeds)
    assert not wrong["ok"]
    assert "at grid (ranked by GridSample sample)" in render(wrong)


def test_the_promotion_search_judges_the_grid_as_verify_does():
    """Given the float grid the samples are exact at any precision; the int8 grid itself is
    not at 0.9999. The search judges the grid too, so it promotes until verify would agree
    (judging the samples alone, it stopped at none)."""
    from paddle_npu.npu.quant.promote import auto_hp

    model, feeds = _unwarper()
    table = calibrate(model, feeds)
    res = auto_hp(model, table, feeds, 0, until_cosine=0.9999, rank="added")
    assert res["reached"] is True and res["promoted"]
    result = verify(model, load_proto(serialized(res["model"])), "npu256", feeds=feeds,
                    min_cosine=0.9999)
    assert result["ok"], render(result)


def _greedy_decoder(opset=13, v=6):
    """x [1, 8] -> a state (MatMul, the layer lowered), then a Loop of 5 greedy steps: the
    token picked last (from 0) embedded and added to the state times a recurrent weight,
    Tanh, logits over `v` tokens, their ArgMax the next token. Outputs the tokens gathered
    over the steps [5, 1] and the last state. Tokens 0 and 1 have nearly the same output
    weights, so some step's two best logits nearly tie."""
    rng = np.random.default_rng(0)
    d, h, steps = 8, 16, 5
    we = (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32)
    wh = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    emb = rng.standard_normal((v, h)).astype(np.float32)
    wo = rng.standard_normal((h, v)).astype(np.float32)
    wo[:, 1] = wo[:, 0] + 0.1 * rng.standard_normal(h).astype(np.float32)
    info = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Gather", ["emb", "token"], ["embedded"], axis=0),
         helper.make_node("MatMul", ["state", "wh"], ["recurrent"]),
         helper.make_node("Add", ["recurrent", "embedded"], ["summed"]),
         helper.make_node("Tanh", ["summed"], ["next_state"]),
         helper.make_node("MatMul", ["next_state", "wo"], ["logits"]),
         helper.make_node("ArgMax", ["logits"], ["next"], axis=1, keepdims=0, name="greedy"),
         helper.make_node("Identity", ["go_on"], ["still"]),
         helper.make_node("Identity", ["next"], ["gathered"])], "step",
        [info("i", TensorProto.INT64, []), info("go_on", TensorProto.BOOL, []),
         info("state", TensorProto.FLOAT, [1, h]), info("token", TensorProto.INT64, [1])],
        [info("still", TensorProto.BOOL, []), info("next_state", TensorProto.FLOAT, [1, h]),
         info("next", TensorProto.INT64, [1]), info("gathered", TensorProto.INT64, [1])])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "we"], ["state0"], name="encode"),
         helper.make_node("Loop", ["steps", "true", "state0", "start"],
                          ["last_state", "last_token", "tokens"], body=body, name="decode")],
        "decoder", [info("x", TensorProto.FLOAT, [1, d])],
        [info("tokens", TensorProto.INT64, [steps, 1]),
         info("last_state", TensorProto.FLOAT, [1, h])],
        [numpy_helper.from_array(a, n) for a, n in (
            (we, "we"), (wh, "wh"), (emb, "emb"), (wo, "wo"),
            (np.array(steps, np.int64), "steps"), (np.array(True), "true"),
            (np.zeros(1, np.int64), "start"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = model.SerializeToString()
    table = calibrate(model, {"x": np.random.default_rng(100).standard_normal(
        (8, d)).astype(np.float32)})
    lowered = load_proto(quantized_lower(model, table, 8, "npu256")[0])
    return model, table, lowered, {"x": rng.standard_normal((1, d)).astype(np.float32)}


# (opset 9: the steps moved behind the samples with Slice's attributes, not its inputs)
@pytest.fixture(scope="module", params=[13, 9])
def decoder(request):
    return _greedy_decoder(request.param)


def test_greedy_decoding_is_judged_given_the_float_models_tokens(decoder):
    """int8 rounding of the state moves step 3's two best logits past each other: free
    running, every token after it differs. Held step by step (teacher forcing), the
    lowered model decodes the float model's tokens, and its logits at every step are
    judged (the NumPy reference stacks the steps as onnxruntime does)."""
    import onnxruntime as ort

    model, _, lowered, feeds = decoder
    free = [ort.InferenceSession(m).run(["tokens"], feeds)[0].ravel().tolist()
            for m in (model, lowered.SerializeToString())]
    assert free == [[4, 1, 3, 2, 4], [4, 1, 2, 2, 2]]
    result = verify(model, lowered, "npu256", feeds=feeds)
    assert result["ok"], render(result)
    tokens, state = result["outputs"]
    assert tokens["bit_exact"] and tokens["onnxruntime"]["cosine"] == 1
    assert tokens["selection"]["free_running"]["cosine"] == 0
    assert state["selection"]["judged"] == "given the float model's picks"
    (greedy,) = result["selections"]
    assert (greedy["op"], greedy["picks_name"]) == ("ArgMax", "next/steps")
    assert (greedy["picks"], greedy["picks_same"]) == (5, 4) and greedy["explained"]
    scores = greedy["scores"]
    assert scores["name"] == "logits/steps" and scores["shape"] == [1, 5, 6]
    # (the steps' float ops round a little differently in the two: float32 apart)
    assert scores["reference"]["max_abs_diff"] == pytest.approx(
        scores["onnxruntime"]["max_abs_diff"], abs=1e-5)
    assert 0.999 < scores["onnxruntime"]["cosine"] < 1
    assert "ArgMax greedy of logits/steps: 4 of 5 picks the same (4 in place); the others " \
           "are near-ties" in render(result)


def test_a_greedy_decoder_lowered_wrong_disagrees_at_its_logits(decoder):
    model, _, lowered, feeds = decoder

    def flip(w):
        w[:4] = -w[:4]

    result = verify(model, _with_weight(lowered, "encode/wq_r0_c0", flip), "npu256",
                    feeds=feeds)
    assert not result["ok"]
    assert result["selections"][0]["scores"]["onnxruntime"]["cosine"] < 0.99
    assert "at logits/steps (ranked by ArgMax greedy)" in render(result)


def test_quant_report_and_the_promotion_search_hold_the_tokens(decoder):
    """The layer report, the input floor and --hp-until-cosine judge a decoder's outputs
    given the float model's tokens too: at int8 it meets 0.99 with nothing promoted."""
    from paddle_npu.npu.quant.accuracy import input_floor, layer_report
    from paddle_npu.npu.quant.promote import auto_hp

    model, table, lowered, feeds = decoder
    for outputs in (layer_report(model, lowered, feeds)["outputs"],
                    input_floor(model, table, feeds)):
        assert [o["name"] for o in outputs] == ["tokens", "last_state"]
        assert all(o["judged"] == "given the float model's picks" for o in outputs)
        assert outputs[0]["cosine"] == 1 and outputs[1]["cosine"] > 0.9999
    result = auto_hp(model, table, feeds, 0, until_cosine=0.99, rank="added")
    assert result["reached"] and result["promoted"] == []


def test_the_promotion_search_holds_one_samples_step_scores_at_a_time():
    """A decoder's scores of every step over its vocabulary (200 MB a sample for a formula
    recogniser's 50000 tokens over 1024 steps) are judged one sample at a time, from files:
    --hp-until-cosine's memory does not grow with the number of samples."""
    import gc
    import tracemalloc

    from paddle_npu.npu.quant.promote import auto_hp

    vocab = 20000
    model, table, _, _ = _greedy_decoder(v=vocab)
    per_sample = 5 * vocab * 4          # the float32 scores of one sample's 5 steps

    def peak(count):
        feeds = {"x": np.random.default_rng(1).standard_normal((count, 8)).astype(np.float32)}
        gc.collect()        # (what an earlier run left for the collector is not this run's)
        tracemalloc.start()
        try:
            result = auto_hp(model, table, feeds, 0, until_cosine=0.99, rank="added")
            return tracemalloc.get_traced_memory()[1], result
        finally:
            tracemalloc.stop()

    (few, r4), (many, r32) = peak(4), peak(32)
    assert r4["reached"] and r32["reached"]
    # 28 samples more: their scores would add 28 x 400 kB held
    assert many - few < 4 * per_sample, (few, many)
