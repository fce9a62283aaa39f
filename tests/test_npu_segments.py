"""Segmented execution: a detection model (zoo det_head + NonMaxSuppression + a second-stage
FC head) lowered as NPU -> CPU -> NPU -> CPU, written one ONNX model per segment with a
manifest, run by the chain runner (Python and `paddle-npu run-segments`) and matched to the
unsplit model; the NPU segment cap with the nodes responsible."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import zoo
from npu_helpers import assert_close
from paddle_npu.api import export
from paddle_npu.compare import run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.npu import lower
from paddle_npu.npu.passes.marks import Marks
from paddle_npu.npu.report.segments import emit_segments, run_segments
from paddle_npu.npu.chip.target import target_from_dict

# NNIE-like, with only Relu on the vector unit: the YOLO decode goes to the CPU
DET_TARGET = {"base": "nnie", "name": "nnie-det", "npu": {"onnx_ops": ["Relu"]}}
# the decode's reshapes and transposes too (they would otherwise be DimTransforms on the NPU)
DET_MARKS = Marks(cpu_ops=("Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten"))


def _with_nms(det_onnx):
    """det_head's top boxes -> NonMaxSuppression -> kept boxes -> FC, Relu, FC, Softmax."""
    m = onnx.load_from_string(det_onnx)
    g = m.graph
    boxes, scores = g.output[0].name, g.output[1].name
    rng = np.random.default_rng(7)
    consts = {"roi_head.w1": rng.standard_normal((4, 16)).astype(np.float32) * 0.05,
              "roi_head.w2": rng.standard_normal((16, 3)).astype(np.float32) * 0.5,
              "nms.max": np.array([10], np.int64), "nms.iou": np.array([0.5], np.float32),
              "nms.score": np.array([0.0], np.float32), "nms.cols": np.array([0, 2], np.int64)}
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    g.node.extend([
        helper.make_node("Unsqueeze", [scores], ["nms.scores"], axes=[1], name="nms/scores"),
        helper.make_node("NonMaxSuppression", [boxes, "nms.scores", "nms.max", "nms.iou",
                                               "nms.score"], ["nms.sel"], name="nms"),
        helper.make_node("Gather", ["nms.sel", "nms.cols"], ["nms.bi"], axis=1, name="nms/index"),
        helper.make_node("GatherND", [boxes, "nms.bi"], ["kept_boxes"], name="nms/boxes"),
        helper.make_node("MatMul", ["kept_boxes", "roi_head.w1"], ["roi_head.h"],
                         name="roi_head/fc1"),
        helper.make_node("Relu", ["roi_head.h"], ["roi_head.r"], name="roi_head/relu"),
        helper.make_node("MatMul", ["roi_head.r", "roi_head.w2"], ["roi_head.logits"],
                         name="roi_head/fc2"),
        helper.make_node("Softmax", ["roi_head.logits"], ["roi_cls"], axis=-1,
                         name="roi_head/softmax")])
    g.output.extend([helper.make_tensor_value_info("kept_boxes", onnx.TensorProto.FLOAT, ["K", 4]),
                     helper.make_tensor_value_info("roi_cls", onnx.TensorProto.FLOAT, ["K", 3])])
    return m.SerializeToString()


@pytest.fixture(scope="module")
def det_nms(zoo_dir):
    info = zoo.export("det_head", "legacy", os.path.join(zoo_dir, "det_head", "legacy"))
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    return _with_nms(export(os.path.join(info["dir"], info["model_file"]))), feeds


def test_detection_runs_npu_cpu_npu_cpu(det_nms, tmp_path):
    onnx_bytes, feeds = det_nms
    lowered, report = lower(onnx_bytes, target_from_dict(DET_TARGET), marks=DET_MARKS)
    assert [s.device for s in report.segments] == ["npu", "cpu", "npu", "cpu"]
    seg_dir = str(tmp_path / "seg")
    manifest = emit_segments(lowered, report, seg_dir)
    assert json.load(open(os.path.join(seg_dir, "manifest.json"))) == manifest
    segs = manifest["segments"]
    assert [s["device"] for s in segs] == ["npu", "cpu", "npu", "cpu"]
    assert manifest["model"]["inputs"] == ["x"]
    assert segs[0]["inputs"] == ["x"] and "nms" in open(os.path.join(
        seg_dir, segs[1]["file"]), "rb").read().decode("latin-1")
    assert segs[2]["inputs"] == ["kept_boxes"] and segs[3]["outputs"] == ["roi_cls"]
    # each NPU segment keeps its primitives and runs on its own
    first = onnx.load(os.path.join(seg_dir, segs[0]["file"]))
    assert {"VMM", "Im2Col"} <= {n.op_type for n in first.graph.node}
    assert {f.name for f in first.functions} >= {"VMM", "Im2Col"}
    names, want = run_onnx(onnx_bytes, feeds)
    got = run_segments(seg_dir, feeds)
    assert list(got) == names
    for n, w in zip(names, want):
        assert_close(got[n], w, n)
    assert got["roi_cls"].shape[0] > 1              # NMS kept several boxes
    # the command line runner, on inputs keyed by name or as a reference file keys them
    for keys in ("{}", "in_{}"):
        np.savez(tmp_path / "in.npz", **{keys.format(k): v for k, v in feeds.items()})
        out = subprocess.run([sys.executable, "-m", "paddle_npu", "run-segments", seg_dir,
                              "--inputs", str(tmp_path / "in.npz"),
                              "--outputs", str(tmp_path / "out.npz")],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        with np.load(tmp_path / "out.npz") as data:
            for n, w in zip(names, want):
                assert_close(data[n], w, n)


def test_npu_segment_cap_names_the_nodes(det_nms):
    onnx_bytes, _ = det_nms
    capped = dict(DET_TARGET, restruct={"max_npu_segments": 1})
    with pytest.raises(ConversionError) as e:
        lower(onnx_bytes, target_from_dict(capped), marks=DET_MARKS)
    msg = str(e.value)
    assert msg.startswith("target 'nnie-det' runs at most 1 NPU segments, this model needs 2: "
                          "the NPU work is split by the CPU nodes of segments #1: ")
    assert "nms" in msg or "meshgrid" in msg


def test_cli_lower_segments_and_marks(tmp_path):
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv0")
    conv2 = helper.make_node("Conv", ["c", "w"], ["d"], name="conv1")
    conv3 = helper.make_node("Conv", ["d", "w"], ["y"], name="conv2")
    w = np.random.default_rng(0).standard_normal((4, 4, 1, 1)).astype(np.float32)
    g = helper.make_graph([conv, conv2, conv3], "t",
                          [helper.make_tensor_value_info("x", 1, [1, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", 1, [1, 4, 4, 4])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    cmd = [sys.executable, "-m", "paddle_npu", "lower", str(src), "-o", str(tmp_path / "l.onnx"),
           "--cpu-nodes", "conv1", "--hp-nodes", "conv2", "--compile-mode", "2",
           "--segments", str(tmp_path / "seg"), "--report", str(tmp_path / "r.json")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "wrote 3 segments" in out.stdout and "NPU -> CPU -> NPU" in out.stdout
    report = json.load(open(tmp_path / "r.json"))
    assert report["marks"]["cpu"] == {"conv1": "--cpu-nodes conv1"}
    assert report["marks"]["hp"] == ["conv2"]
    manifest = json.load(open(tmp_path / "seg" / "manifest.json"))
    assert manifest["segments"][2]["precision16"]
    x = np.random.default_rng(1).standard_normal((1, 4, 4, 4)).astype(np.float32)
    _, (want,) = run_onnx(m.SerializeToString(), {"x": x})
    assert_close(run_segments(str(tmp_path / "seg"), {"x": x})["y"], want, "y")
    # the rules' errors reach the command line
    bad = cmd[:7] + ["--hp-nodes", "conv2"]
    out = subprocess.run(bad, capture_output=True, text=True)
    assert out.returncode == 2
    assert "node 'conv2' is marked _hp (--hp-nodes conv2) but compile_mode is 0" in out.stderr


def test_cli_convert_npu_with_marks(tmp_path):
    from conftest import EXAMPLE
    model = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
    out = subprocess.run([sys.executable, "-m", "paddle_npu", "convert", model, "-o",
                          str(tmp_path / "l.onnx"), "--npu", "nnie", "--cpu-ops", "MaxPool",
                          "--segments", str(tmp_path / "seg")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    manifest = json.load(open(tmp_path / "seg" / "manifest.json"))
    assert "cpu" in [s["device"] for s in manifest["segments"]]
    ref = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    got = run_segments(str(tmp_path / "seg"), {"x": ref["in_x"][:4]})
    (name,) = manifest["model"]["outputs"]
    np.testing.assert_allclose(got[name], ref["out_0"][:4], rtol=1e-4, atol=1e-4 * np.abs(
        ref["out_0"]).max())
