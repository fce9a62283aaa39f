"""Placement by estimated latency (partition.py, cost.py) and the whole-model report
(report.py, report_svg.py) on tiny hand-built models whose placement is known."""
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from onnx import helper

from npu_helpers import assert_close, model, three_way
from paddle_npu.cli import main as cli_main
from paddle_npu.errors import ConversionError
from paddle_npu.npu import load_target, lower
from paddle_npu.npu.chip.target import Cost, target_from_dict

W = np.random.default_rng(0).standard_normal((4, 4, 1, 1)).astype(np.float32)
X = {"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)}
TENSOR_BYTES = 4 * 8 * 8 * 4        # one [1, 4, 8, 8] float tensor


def conv(name, x, y):
    return helper.make_node("Conv", [x, "w"], [y], name=name)


def devices(report):
    return [s.device for s in report.segments]


def same_numbers(original, lowered, target):
    want, got, ref, _ = three_way(original, lowered, X, target)
    for w, o, r in zip(want, got, ref):
        assert_close(o, w, "lowered")
        assert_close(r, w, "reference")


def test_cpu_only_op_moves_to_the_edge_when_nothing_after_it_needs_it():
    # Cos (no NPU form) sits between the two Convs in the file, but only the model reads it
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["side"], name="cos"),
             conv("c1", "a", "y")]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8]), ("side", None)],
                     [("w", W)])
    lowered, report = lower(original, "npu256")
    assert devices(report) == ["npu", "cpu"]
    assert report.segments[1].nodes == ["cos"]
    assert report.cpu_reasons == {"cos": "the NPU of target 'npu256' does not run Cos"}
    same_numbers(original, lowered, "npu256")


def test_cpu_only_op_stays_between_when_the_npu_needs_its_result():
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["b"], name="cos"),
             conv("c1", "b", "y")]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])
    lowered, report = lower(original, "npu256")
    assert devices(report) == ["npu", "cpu", "npu"]
    same_numbers(original, lowered, "npu256")


def test_transfer_bytes_and_latency_are_counted_exactly():
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["b"], name="cos"),
             conv("c1", "b", "y")]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])
    target = load_target("npu256")
    c = target.cost
    _, report = lower(original, target)
    npu0, cpu, npu1 = (s.cost for s in report.segments)
    hop = c.transfer_latency_ns + TENSOR_BYTES / c.link_bytes_per_ns
    # x from the host, a to the CPU, b back to the chip, y to the host: four hand-overs
    assert (npu0["bytes_in"], npu0["bytes_out"], npu0["bytes_to_host"]) == \
        (TENSOR_BYTES, TENSOR_BYTES, 0)
    assert (cpu["bytes_in"], cpu["bytes_out"]) == (TENSOR_BYTES, TENSOR_BYTES)
    assert (npu1["bytes_in"], npu1["bytes_to_host"]) == (TENSOR_BYTES, TENSOR_BYTES)
    assert npu0["ns"]["transfers"] == cpu["ns"]["transfers"] == pytest.approx(hop)
    assert npu1["ns"]["transfers"] == pytest.approx(2 * hop)
    # each 1x1 Conv: 64 pixels x 4 outputs x 4 inputs; Cos on the CPU: 256 elements
    assert npu0["macs"] == npu1["macs"] == 1024 and cpu["macs"] == 0
    assert npu0["npu_macs"] == 1024 and cpu["npu_macs"] == 0
    assert cpu["ns"]["cpu"] == pytest.approx(256 / c.cpu_elements_per_ns)
    assert npu0["ns"]["arrays"] == pytest.approx(64 * c.array_vmm_ns)   # one tile, 64 rows
    est = report.estimate()
    assert est["transfers"] == 4 and est["bytes_crossing"] == 4 * TENSOR_BYTES
    assert est["macs"] == 2048 and est["npu_share"] == 1.0
    assert est["total_ns"] == pytest.approx(sum(s.cost["total_ns"] for s in report.segments))
    d = report.as_dict()
    assert d["estimate"] == est and d["segments"][1]["cost"] == cpu
    text = report.render()
    assert "4 hand-over(s), 4.0 KiB crossing" in text and "1 x the NPU of target" in text


def test_tensors_crossing_one_boundary_are_one_hand_over():
    nodes = [conv("c0", "x", "a"), conv("c1", "x", "b"),
             helper.make_node("Mod", ["a", "b"], ["y"], name="mod", fmod=1)]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])
    target = load_target("npu256")
    c = target.cost
    _, report = lower(original, target)
    assert devices(report) == ["npu", "cpu"]
    cpu = report.segments[1].cost
    assert (cpu["bytes_in"], cpu["transfers_in"]) == (2 * TENSOR_BYTES, 1)
    assert cpu["ns"]["transfers"] == pytest.approx(
        c.transfer_latency_ns + 2 * TENSOR_BYTES / c.link_bytes_per_ns)
    assert report.estimate()["transfers"] == 2           # x in, a and b to the CPU


def _tail_model(after):
    """Conv -> TopK (CPU only: a data-dependent selection) -> `after` nodes."""
    nodes = [conv("c0", "x", "a"), helper.make_node("Flatten", ["a"], ["f"], name="flat"),
             helper.make_node("TopK", ["f", "k"], ["top", "idx"], name="topk")] + after
    return model(nodes, [("x", [1, 4, 8, 8])], [("y", None)],
                 [("w", W), ("k", np.array([5], np.int64)),
                  ("fc", np.ones((5, 3), np.float32))])


def test_small_post_processing_after_a_cpu_only_op_joins_the_cpu_tail():
    original = _tail_model([helper.make_node("Relu", ["top"], ["r"], name="relu"),
                            helper.make_node("Mul", ["r", "r"], ["y"], name="square")])
    lowered, report = lower(original, "npu256")
    assert devices(report) == ["npu", "cpu"]
    assert report.segments[1].nodes == ["topk", "relu", "square"]
    assert report.cpu_reasons["relu"].startswith("faster on the CPU with its neighbours: ")
    assert report.cpu_reasons["relu"] == report.cpu_reasons["square"]
    same_numbers(original, lowered, "npu256")


def test_array_work_after_a_cpu_only_op_stays_on_the_npu():
    # the MatMul's weight lives on the arrays: its run is not moved (Faster R-CNN's roi head)
    original = _tail_model([helper.make_node("MatMul", ["top", "fc"], ["y"], name="head")])
    lowered, report = lower(original, "npu256")
    assert devices(report) == ["npu", "cpu", "npu"]
    assert "head" not in report.cpu_reasons
    same_numbers(original, lowered, "npu256")


def test_the_models_head_stays_on_the_npu():
    # a model of table activations only: cheaper on the CPU (no hand-overs), but the NPU
    # keeps what reads the model's inputs
    original = model([helper.make_node("Sigmoid", ["x"], ["y"], name="sig")],
                     [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])])
    _, report = lower(original, "npu256")
    assert devices(report) == ["npu"] and report.cpu_reasons == {}


def _capped(cap, **cost):
    return target_from_dict({"name": "capped", "restruct": {"max_npu_segments": cap},
                             "cost": cost}, "capped.toml")


def _three_npu_parts():
    """Conv | Cos | Relu | Cos | Conv: NPU, CPU, NPU, CPU, NPU."""
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["b"], name="cos0"),
             helper.make_node("Relu", ["b"], ["c"], name="relu"),
             helper.make_node("Cos", ["c"], ["d"], name="cos1"), conv("c1", "d", "y")]
    return model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])


def test_cheap_hand_overs_keep_a_vector_run_on_the_npu():
    # with nearly free hand-overs and a slow CPU the Relu is better on the NPU
    _, report = lower(_three_npu_parts(), _capped(0, transfer_latency_ns=1,
                                                  cpu_elements_per_ns=0.01))
    assert devices(report) == ["npu", "cpu", "npu", "cpu", "npu"]


def test_segment_cap_met_by_moving_the_cheapest_vector_run():
    original = _three_npu_parts()
    target = _capped(2, transfer_latency_ns=1, cpu_elements_per_ns=0.01)
    lowered, report = lower(original, target)
    assert devices(report) == ["npu", "cpu", "npu"]
    assert report.segments[1].nodes == ["cos0", "relu", "cos1"]
    assert report.cpu_reasons["relu"].startswith("moved to the CPU to keep within 2 NPU "
                                                 "segments (+")
    same_numbers(original, lowered, target)


def test_segment_cap_that_array_work_exceeds_is_an_error_naming_the_nodes():
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["b"], name="cos"),
             conv("c1", "b", "y")]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])
    with pytest.raises(ConversionError) as e:
        lower(original, _capped(1))
    assert str(e.value).startswith("target 'capped' runs at most 1 NPU segments, this model "
                                   "needs 2: the NPU work is split by the CPU nodes of "
                                   "segments #1: cos ")


def test_target_cost_table():
    t = target_from_dict({"cost": {"link_bytes_per_ns": 8, "transfer_latency_ns": 5000}},
                         "t.toml")
    assert t.cost == Cost(link_bytes_per_ns=8.0, transfer_latency_ns=5000.0)
    assert t.as_dict()["cost"]["link_bytes_per_ns"] == 8.0
    assert load_target("nnie").cost.transfer_latency_ns > load_target("npu256").cost \
        .transfer_latency_ns
    for bad in ({"link_bytes_per_ns": 0}, {"cpu_macs_per_ns": "fast"}, {"speed": 1}):
        with pytest.raises(ConversionError, match="t.toml: .*"):
            target_from_dict({"cost": bad}, "t.toml")


def test_svg_is_well_formed_and_names_every_segment(tmp_path):
    nodes = [conv("c0", "x", "a"), helper.make_node("Cos", ["a"], ["b"], name="cos"),
             conv("c1", "b", "y")]
    original = model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [("w", W)])
    src = tmp_path / "m.onnx"
    src.write_bytes(original.SerializeToString())
    svg, rep = tmp_path / "m.svg", tmp_path / "m.json"
    assert cli_main(["lower", str(src), "-o", str(tmp_path / "l.onnx"), "--report", str(rep),
                     "--report-svg", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    groups = root.findall(f"{ns}g")
    assert [g.get("id") for g in groups] == ["segment0", "segment1", "segment2", "chip"]
    chip = groups.pop()
    # the floor plan: the chip's 1024 arrays, c0's and c1's among them; the timeline: a
    # bar per span a unit worked, the CPU's cos among them
    titles = [t.text for t in chip.iter(f"{ns}title")]
    assert len(chip.findall(f"{ns}rect")) >= 1024
    assert titles.count("c0") == titles.count("c1") == 1
    assert any(t.startswith("cpu: ") for t in titles)
    assert any(t.startswith("c1: ") for t in titles)
    heads = [" ".join(t.text for t in g.iter(f"{ns}text")) for g in groups]
    assert [h.split(":")[0] for h in heads] == ["#0 NPU", "#1 CPU", "#2 NPU"]
    cells = [t.text for g in groups for t in g.iter(f"{ns}title")]
    assert any(c.startswith("cos (cpu, 1 node(s)): the NPU of target") for c in cells)
    assert any(c.startswith("c0 (arrays") for c in cells)
    report = json.loads(rep.read_text())
    assert report["cpu_reasons"] == {"cos": "the NPU of target 'npu256' does not run Cos"}


def test_a_node_the_lowering_refused_is_on_the_cpu_for_that_reason():
    """The placement reads the lowering's refusals from its pass result (no dict shared
    between the passes): the reason a node is on the CPU names why it was not lowered."""
    nodes = [helper.make_node("Neg", ["w0"], ["w"], name="neg"),
             helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2])]
    original = model(nodes, [("x", [1, 2, 3, 3]), ("w0", [2, 2, 2, 2])], [("y", None)])
    _, report = lower(original, "npu256")
    assert report.refusals == {"up": "ConvTranspose: the weight is not a constant"}
    assert report.cpu_reasons["up"] == "not lowered: ConvTranspose: the weight is not a constant"


def test_an_error_inside_a_pass_names_the_pass():
    from paddle_npu.npu.passes.common import NameNodes
    from paddle_npu.npu.passes.framework import Pass, Sequence

    class Broken(Pass):
        name = "broken"

        def run(self, model, result):
            raise ValueError("no such value")

    from paddle_npu.npu.pipeline import prepare
    m = prepare(model([conv("c0", "x", "y")], [("x", [1, 4, 8, 8])], [("y", None)],
                      [("w", W)]))
    with pytest.raises(ValueError, match="no such value") as caught:
        Sequence(NameNodes(), Broken())(m)
    assert caught.value.__notes__ == ["(in the stage-2 pass 'broken')"]
