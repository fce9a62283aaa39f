"""Stage 1 + stage 2 end to end: Paddle exports (the example and the CI zoo) converted, lowered
and verified three ways (onnxruntime before / after, NumPy reference), both runs of the
lowered model as close to the model computed in float64 as `verify` requires; and the
`paddle-npu lower / verify / targets / convert --npu` command line."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zoo
from conftest import EXAMPLE
from npu_helpers import program
from paddle_npu.api import export
from paddle_npu.npu import DOMAIN, lower, verify

CI_MODELS = zoo.select("ci")
# the float per-channel plan on small arrays, end to end on a few small models (the integer
# one runs on every family in test_quant_zoo)
PER_CHANNEL = ["lenet", "det_head", "control_flow", "tiny_bert"]


def _check(result):
    # judged by the float64 run, not by the rule for models that cannot be run in float64
    assert result["ok"] and result["within"] == "float64", \
        json.dumps({k: result[k] for k in ("outputs", "float64")}, indent=1)


def test_example_model_three_plans_agree():
    onnx_bytes = export(os.path.join(EXAMPLE, "legacy", "model.pdmodel"))
    ref = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    feeds = {"x": ref["in_x"][:16]}
    for target in ("npu256", "npu64", "npu256-vmm-only"):
        for plan in ("packed", "per-channel"):
            lowered, report = lower(onnx_bytes, target, plan)
            result = verify(onnx_bytes, lowered, target, feeds=feeds)
            _check(result)
            assert result["array"]["arrays"] == report.totals()["arrays"]
            assert result["array"]["vmm_invocations"] == 16 * report.totals()["vmm_invocations"]
    # the lowered model still classifies the digits as Paddle did
    lowered, _ = lower(onnx_bytes, "npu256")
    from npu_helpers import serialized
    from paddle_npu.compare import run_onnx
    _, (logits,) = run_onnx(serialized(lowered), {"x": ref["in_x"]})
    assert (logits.argmax(1) == ref["out_0"].argmax(1)).all()


@pytest.mark.parametrize("name", ["gru", "crnn"])
def test_zoo_rnns_lowered_at_their_input_size_verify(zoo_onnx, name):
    """Exact bodies at fixed sizes: the transposes around an unrolled RNN before a Linear
    once crashed onnxruntime 1.32 creating the session (its issue 28392; DimTransform)."""
    onnx_bytes, feeds = zoo_onnx(name)
    lowered, _ = lower(onnx_bytes, "npu256",
                       input_shape={k: list(v.shape) for k, v in feeds.items()})
    _check(verify(onnx_bytes, lowered, "npu256", feeds=feeds))


@pytest.mark.parametrize("name", CI_MODELS)
def test_zoo_onnx_lowers_and_verifies(zoo_onnx, name):
    onnx_bytes, feeds = zoo_onnx(name)
    lowered, report = lower(onnx_bytes, "npu256")
    # the NPU program is the same whatever onnxruntime emulates it with
    assert program(lower(onnx_bytes, "npu256", emulation="float32")[0]) == program(lowered)
    kinds = {(n.domain or "", n.op_type) for n in lowered.graph}
    assert not {("", "Conv"), ("", "BatchNormalization")} & kinds     # all became primitives
    _check(verify(onnx_bytes, lowered, "npu256", feeds=feeds))
    assert all(n.metadata_props["paddle_npu.device"] in ("npu", "cpu") for n in lowered.graph)
    vmms = [n for n in lowered.graph if n.domain == DOMAIN and n.op_type == "VMM"]
    # one VMM per band of arrays side by side, or per stack of such tiles [T, R, M]; VMMs
    # reading the same weights (an unrolled RNN's steps) run on the same arrays
    weights = {n.inputs[1].name: n for n in vmms}.values()
    assert sum(_stacked(n) * -(-n.inputs[1].shape[-1] // 256) for n in weights) == \
        report.totals()["arrays"]


def _stacked(vmm):
    """The tiles a VMM node stacks: T of a weight [T, R, M], 1 of one tile [R, M]."""
    dims = vmm.inputs[1].shape.dims
    return dims[0] if len(dims) == 3 else 1


@pytest.mark.parametrize("name", PER_CHANNEL)
def test_zoo_onnx_per_channel_on_small_arrays(zoo_onnx, name):
    onnx_bytes, feeds = zoo_onnx(name)
    lowered, report = lower(onnx_bytes, "npu64", "per-channel")
    _check(verify(onnx_bytes, lowered, "npu64", feeds=feeds))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "paddle_npu", *map(str, args)],
                          capture_output=True, text=True)


def test_cli_convert_lower_verify_targets(tmp_path):
    model = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
    plain, lowered = tmp_path / "digits.onnx", tmp_path / "digits.npu.onnx"
    assert cli("convert", model, "-o", plain).returncode == 0
    report = tmp_path / "r.json"
    res = cli("lower", plain, "--target", "npu64", "-o", lowered, "--plan", "per-channel",
              "--report", report, "--verify")
    assert res.returncode == 0, res.stderr
    assert "per-channel vs packed" in res.stdout and "agrees" in res.stdout
    data = json.loads(report.read_text())
    assert data["plan"] == "per-channel" and data["target"]["name"] == "npu64"
    res = cli("verify", plain, lowered, "--target", "npu64", "--json",
              "--inputs", os.path.join(EXAMPLE, "reference_io.npz"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["within"] == "float64"
    both = tmp_path / "both.onnx"
    res = cli("convert", model, "-o", both, "--npu", "npu256",
              "--reference", os.path.join(EXAMPLE, "reference_io.npz"))
    assert res.returncode == 0, res.stderr
    assert "agrees" in res.stdout
    import onnx
    assert any(n.domain == DOMAIN for n in onnx.load(str(both)).graph.node)
    res = cli("targets")
    assert res.returncode == 0 and "npu256" in res.stdout and "(default)" in res.stdout
    res = cli("targets", "--json", "--ops")
    assert {p["op_type"] for p in json.loads(res.stdout)["primitives"]} >= \
        {"Im2Col", "VMM", "AddInTile", "DimTransform"}


def test_cli_lower_progress_and_float32_emulation(tmp_path):
    plain, lowered = tmp_path / "digits.onnx", tmp_path / "digits.npu.onnx"
    assert cli("convert", os.path.join(EXAMPLE, "legacy", "model.pdmodel"), "-o",
               plain).returncode == 0
    quiet = cli("lower", plain, "-o", lowered)          # not a terminal: no progress
    assert quiet.returncode == 0 and "lower:" not in quiet.stderr
    res = cli("lower", plain, "-o", lowered, "--progress", "--emulation", "float32", "--verify")
    assert res.returncode == 0, res.stderr
    stages = [line.split()[1] for line in res.stderr.splitlines() if line.startswith("lower: ")]
    assert stages[0] == "load" and stages[-1] == "save"
    assert {"lower", "partition", "emulation"} <= set(stages)
    assert "agrees" in res.stdout
    assert "emulation float32 judged above; exact (not judged): " in res.stdout
    import onnx
    calls = {(n.op_type, n.overload) for n in onnx.load(str(lowered)).graph.node
             if n.domain == DOMAIN}
    assert {o for t, o in calls if t == "VMM"} == {"whole_f32"}
    both = tmp_path / "both.onnx"
    res = cli("convert", os.path.join(EXAMPLE, "legacy", "model.pdmodel"), "-o", both,
              "--npu", "npu256", "--progress", "-q")
    assert res.returncode == 0 and "lower:" not in res.stderr
    assert res.stdout == "" and os.path.getsize(both) > 0     # -q: nothing but errors


def test_cli_errors_are_one_line(tmp_path):
    res = cli("lower", tmp_path / "missing.onnx", "-o", tmp_path / "x.onnx")
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    (tmp_path / "t.json").write_text('{"array": {"rows": -1}}')
    plain = tmp_path / "d.onnx"
    cli("convert", os.path.join(EXAMPLE, "legacy", "model.pdmodel"), "-o", plain)
    res = cli("lower", plain, "--target", tmp_path / "t.json", "-o", tmp_path / "x.onnx")
    assert res.returncode == 2 and "positive integer" in res.stderr
