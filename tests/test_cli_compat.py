"""What paddle2onnx users type: --version, its flags (done or refused with a reason), a
summary line after each conversion, -q, the paddle2onnx-npu command, and one Python call per
stage returning what `onnx.save` takes."""
import os

import numpy as np
import onnx
import pytest

from conftest import EXAMPLE
from paddle_npu.cli import main, paddle2onnx_main

MODEL = os.path.join(EXAMPLE, "legacy", "model.pdmodel")


def _run(fn, argv, capsys):
    try:
        code = fn(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, _ = _run(main, ["--version"], capsys)
    assert code == 0 and out.startswith("paddle-npu 0.")


def test_summary_line_notes_a_raised_opset(tmp_path, capsys):
    code, out, _ = _run(main, ["convert", MODEL, "-o", str(tmp_path / "m.onnx"),
                               "--opset", "7"], capsys)
    assert code == 0
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"converted {MODEL}: opset 9 (raised from the 7 asked), ")
    assert " nodes, " in line and f"wrote {tmp_path / 'm.onnx'} (" in line
    code, out, _ = _run(main, ["convert", MODEL, "-o", str(tmp_path / "m.onnx"), "-q"], capsys)
    assert code == 0 and out == ""


def test_no_auto_update_without_an_opset_takes_the_lowest(tmp_path, capsys):
    code, out, err = _run(main, ["convert", MODEL, "-o", str(tmp_path / "m.onnx"),
                                 "--enable_auto_update_opset", "False"], capsys)
    assert code == 0, err
    assert "opset 9," in out and "raised" not in out


@pytest.mark.parametrize("flag, value, reason", [
    ("--save_calibration_file", "calib.cache", "keeps its scales in the ONNX model"),
    ("--custom_ops", '{"my_op": "MyOp"}', "@paddle_op"),
])
def test_paddle2onnx_flags_we_do_not_do_are_refused_with_a_reason(tmp_path, capsys, flag,
                                                                   value, reason):
    code, _, err = _run(main, ["convert", MODEL, "-o", str(tmp_path / "m.onnx"), flag, value],
                        capsys)
    assert code == 2 and reason in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_external_filename_names_the_weights_file(tmp_path, capsys, monkeypatch):
    import paddle_npu.api
    monkeypatch.setattr(paddle_npu.api, "EXTERNAL_DATA_THRESHOLD", 1024)
    code, _, err = _run(paddle2onnx_main, [
        "--model_dir", os.path.dirname(MODEL), "--model_filename", "model.pdmodel",
        "--params_filename", "model.pdiparams", "--save_file", str(tmp_path / "m.onnx"),
        "--external_filename", "weights.bin"], capsys)
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "weights.bin"]
    model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert any(e.value == "weights.bin" for i in model.graph.initializer
               for e in i.external_data)


def test_paddle2onnx_command_is_convert(capsys):
    code, out, _ = _run(paddle2onnx_main, ["--version"], capsys)
    assert code == 0 and out.startswith("paddle-npu")


def test_one_call_per_stage_returns_what_onnx_save_takes(tmp_path):
    import paddle_npu
    from paddle_npu.compare import run_onnx

    stage1 = paddle_npu.export(MODEL)
    lowered, report = paddle_npu.lower(stage1, target="npu256")
    onnx.save(lowered, str(tmp_path / "l.onnx"))
    x = np.load(os.path.join(EXAMPLE, "reference_io.npz"))["in_x"][:4]
    _, (want,) = run_onnx(stage1, {"x": x})
    _, (got,) = run_onnx(str(tmp_path / "l.onnx"), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert report.as_dict()["target"]["name"] == "npu256"
