"""`paddle-npu inspect` on real exports, and what users see on bad input."""
import json
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLE, REAL_MODELS

OCR = os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "paddle_npu", *map(str, args)],
                          capture_output=True, text=True)


def test_import_never_pulls_in_paddle():
    code = ("import sys, paddle_npu, paddle_npu.cli, paddle_npu.frontend.legacy, "
            "paddle_npu.frontend.params; paddle_npu.load(sys.argv[1]); "
            "assert 'paddle' not in sys.modules, 'paddle imported'")
    res = subprocess.run([sys.executable, "-c", code, OCR], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_inspect_json_on_real_ocr_model():
    res = cli("inspect", OCR, "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["format"] == "legacy"
    assert info["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 32, 100]}]
    assert [o["name"] for o in info["outputs"]] == ["save_infer_model/scale_0.tmp_1"]
    assert info["op_histogram"]["conv2d"] == 42 and info["op_histogram"]["depthwise_conv2d"] == 11
    assert info["parameters"]["tensors"] == 213
    assert info["parameters"]["bytes"] == 4 * info["parameters"]["elements"]
    # The params file holds exactly those bytes plus one small header per record.
    assert info["parameters"]["bytes"] < os.path.getsize(os.path.join(OCR, "inference.pdiparams"))


def test_inspect_text_on_old_directory():
    res = cli("inspect", os.path.join(REAL_MODELS, "luotao1_example_mlp"))
    assert res.returncode == 0, res.stderr
    assert "format:     legacy" in res.stdout
    assert "img" in res.stdout and "[?, 1, 28, 28]" in res.stdout
    assert "mul" in res.stdout


def test_a_reader_that_stops_reading_is_no_error():
    """`paddle-npu inspect M | head -n 0`: the output nobody reads is no error (exit 0,
    nothing on stderr), also when the pipe is found closed as the process ends."""
    p = subprocess.Popen([sys.executable, "-m", "paddle_npu", "inspect", OCR],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait() == 0 and err == b""


def test_a_profiled_command_ends_as_the_interpreter_does(tmp_path):
    """Under cProfile (or coverage, a debugger) the command's process ends the usual way,
    so the profile is written (the console scripts otherwise skip the tear-down)."""
    out = tmp_path / "inspect.prof"
    res = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "paddle_npu",
                          "inspect", OCR], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "format:     legacy" in res.stdout and out.stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["/no/such/model.pdmodel"], "does not exist"),
    ([os.path.join(EXAMPLE, "reference_io.npz")], "not a valid Paddle program"),
    ([os.path.join(OCR, "inference.pdmodel"), "--params",
      os.path.join(EXAMPLE, "legacy", "model.pdiparams")], "belongs to another model"),
])
def test_bad_input_exits_2_without_traceback(args, message):
    res = cli("inspect", *args)
    assert res.returncode == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("paddle-npu: error: ")


def test_truncated_params_names_offset(tmp_path):
    src = os.path.join(EXAMPLE, "legacy")
    (tmp_path / "model.pdmodel").write_bytes(open(os.path.join(src, "model.pdmodel"), "rb").read())
    data = open(os.path.join(src, "model.pdiparams"), "rb").read()
    (tmp_path / "model.pdiparams").write_bytes(data[:len(data) // 2])
    res = cli("inspect", tmp_path / "model.pdmodel")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "model.pdiparams, byte " in res.stderr and "truncated" in res.stderr
