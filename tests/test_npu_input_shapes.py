"""Fixed input sizes for stage 2 (`--input-shape`, `lower(..., input_shape=)`): a Conv on an
input of open height and width lowers once they are fixed, the shape sub-graph after it folds,
and lowering without them names the flag. Tiny models built with onnx.helper, no Paddle."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from npu_helpers import assert_close, model, npu_ops, three_way
from paddle_npu.errors import ConversionError
from paddle_npu.npu import lower
from paddle_npu.shapes import parse_input_shape, parse_input_shapes
from paddle_npu.npu.passes.common import with_input_shapes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dynamic_conv():
    """Conv on [1, 3, h, w], then Reshape to its own Shape (a shape sub-graph) and Relu."""
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Shape", ["c"], ["s"], name="shape"),
             helper.make_node("Reshape", ["c", "s"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    return model(nodes, [("x", [1, 3, "h", "w"])], [("y", None)], [("w", w)])


def test_parse_input_shape():
    assert parse_input_shape("x:1,3,640,640") == ("x", [1, 3, 640, 640])
    assert parse_input_shape("a:b:-1,3,?,32") == ("a:b", [-1, 3, -1, 32])
    assert parse_input_shapes(["x:1,3", "y:2"]) == {"x": [1, 3], "y": [2]}
    for bad in ("x", "x:", ":1,2", "x:1,0", "x:1,a", "x:-2"):
        with pytest.raises(ConversionError, match="expected NAME:D0,D1"):
            parse_input_shape(bad)
    with pytest.raises(ConversionError, match="given twice for input 'x'"):
        parse_input_shapes(["x:1", "x:2"])


def test_fixed_sizes_lower_the_conv_and_fold_the_shape_subgraph():
    m = _dynamic_conv()
    _, report = lower(m)
    line = report.dynamic_line()
    assert line == ("inputs of open size (x [1,3,h,w]): 1 node(s) stay off the NPU (Conv x1); "
                    "fix the sizes with --input-shape NAME:D0,D1,...")
    assert line in report.render()
    assert report.as_dict()["dynamic"]["kept_off_npu"] == {"Conv": 1}

    lowered, report = lower(m, input_shape={"x": [1, 3, 12, 20]})
    assert report.dynamic is None and report.dynamic_line() is None
    assert {"Im2Col", "VMM", "DimTransform"} <= npu_ops(lowered)
    assert [s.device for s in report.segments] == ["npu"]       # Shape folded away
    assert not any(n.op_type in ("Conv", "Shape", "Reshape") for n in lowered.graph)
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 20)).astype(np.float32)
    want, got, ref, _ = three_way(m, lowered, {"x": x}, None)
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


def test_a_fixed_size_may_be_replaced_and_one_left_open():
    """A model declaring 16 x 16 lowered at 8 x 24; a dynamic batch stays dynamic and a
    Conv lowers anyway (only channels and spatial sizes must be fixed)."""
    w = np.ones((2, 3, 1, 1), np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
              [("x", [1, 3, 16, 16])], [("y", [1, 2, 16, 16])], [("w", w)])
    lowered, report = lower(m, input_shape={"x": [-1, 3, 8, 24]})
    assert list(lowered.graph.outputs[0].shape)[1:] == [2, 8, 24]
    assert "VMM" in npu_ops(lowered) and report.dynamic is None
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 24)).astype(np.float32)
    before = with_input_shapes(m, {"x": [-1, 3, 8, 24]})     # what `verify` runs
    want, got, ref, _ = three_way(before, lowered, {"x": x}, None)
    assert_close(want[0], np.einsum("nchw->nhw", x)[:, None].repeat(2, 1), "the 1x1 Conv")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


@pytest.mark.parametrize("shapes, message", [
    ({"image": [1, 3, 8, 8]}, "'image', not an input of the model \\(its inputs: x\\)"),
    ({"x": [1, 3, 8]}, "has rank 3, the model's input has rank 4"),
    ({"x": [1, 3, 0, 8]}, "has a size below 1"),
])
def test_bad_input_shapes_are_named(shapes, message):
    with pytest.raises(ConversionError, match=message):
        lower(_dynamic_conv(), input_shape=shapes)


def test_an_input_too_small_for_a_window_is_named():
    """A 3x3 window at stride 2 without padding on a 2x2 input has no output (onnx's shape
    inference rounds it up to 1x1): an error naming the layer and what to do, not a
    traceback. At 3x3 the same model lowers."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], name="stem")],
              [("x", [1, 3, "h", "w"])], [("y", [1, 4, None, None])], [("w", w)])
    with pytest.raises(ConversionError, match=r"lowering stem: its 3x3 window \(strides "
                       r"\[2, 2\], pads \[0, 0, 0, 0\]\) does not fit the 2x2 input: the output "
                       r"would be empty; give the model a larger input"):
        lower(m, input_shape={"x": [1, 3, 2, 2]})
    lowered, _ = lower(m, input_shape={"x": [1, 3, 3, 3]})
    assert "VMM" in npu_ops(lowered)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "paddle_npu", *map(str, args)], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True)


def test_cli_lower_verify_calibrate_quant_report(tmp_path):
    (tmp_path / "m.onnx").write_bytes(_dynamic_conv().SerializeToString())
    r = _cli("lower", "m.onnx", "-o", "open.onnx", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fix the sizes with --input-shape NAME:D0,D1,..." in r.stdout

    r = _cli("lower", "m.onnx", "-o", "l.onnx", "--input-shape", "x:1,3,12,20", "--verify",
             "--report", "rep.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--input-shape" not in r.stdout and "agrees" in r.stdout
    rep = json.load(open(tmp_path / "rep.json"))
    assert [s["device"] for s in rep["segments"]] == ["npu"] and rep["dynamic"] is None
    r = _cli("verify", "m.onnx", "l.onnx", "--input-shape", "x:1,3,12,20", cwd=tmp_path)
    assert r.returncode == 0 and "agrees" in r.stdout, r.stdout + r.stderr

    # calibration and the quantised report at that size (the data's leading axis: samples)
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((4, 3, 12, 20)).astype(np.float32))
    r = _cli("calibrate", "m.onnx", "--data", "calib.npz", "-o", "t.json",
             "--input-shape", "x:1,3,12,20", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "y" in json.load(open(tmp_path / "t.json"))["tensors"]
    r = _cli("lower", "m.onnx", "-o", "q.onnx", "--input-shape", "x:1,3,12,20",
             "--quantize", "int8", "--calibration", "t.json", cwd=tmp_path)
    assert r.returncode == 0 and "1 at int8" in r.stdout, r.stdout + r.stderr
    r = _cli("quant-report", "m.onnx", "--calibration", "t.json", "--data", "calib.npz",
             "--input-shape", "x:1,3,12,20", "--json", "q.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.load(open(tmp_path / "q.json"))["outputs"][0]["cosine"] > 0.99

    r = _cli("lower", "m.onnx", "-o", "bad.onnx", "--input-shape", "x:1,3,12", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "has rank 3, the model's input has rank 4" in r.stderr + r.stdout
    assert not os.path.exists(tmp_path / "bad.onnx")
