"""How outputs are written (paddle_npu/outputs.py) and what the CLI checks before it writes."""
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from conftest import EXAMPLE
from paddle_npu.errors import OutputError
from paddle_npu.outputs import check_output, write_bytes

LEGACY = os.path.join(EXAMPLE, "legacy")


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "paddle_npu", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_the_umask_s_mode(tmp_path, umask, mask, mode):
    umask(mask)
    write_bytes(tmp_path / "out.onnx", b"data")
    assert _mode(tmp_path / "out.onnx") == mode
    assert os.listdir(tmp_path) == ["out.onnx"]          # no temp file left


def test_an_existing_file_keeps_its_mode(tmp_path, umask):
    umask(0o077)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    write_bytes(out, b"new")
    assert out.read_bytes() == b"new" and _mode(out) == 0o640


def test_a_symlink_is_written_through(tmp_path):
    (tmp_path / "real.onnx").write_bytes(b"old")
    os.symlink("real.onnx", tmp_path / "link.onnx")
    write_bytes(tmp_path / "link.onnx", b"new")
    assert os.path.islink(tmp_path / "link.onnx")
    assert (tmp_path / "real.onnx").read_bytes() == b"new"


def test_a_pipe_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    write_bytes(fifo, b"through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_null_is_a_device_destination():
    dest = check_output(os.devnull)
    assert dest.device and dest.target == os.devnull


@pytest.mark.parametrize("name, message", [
    ("dir", "is a directory"),
    ("file/out.onnx", "[Nn]ot a directory"),
    ("x" * 300 + ".onnx", "File name too long"),
])
def test_paths_that_cannot_be_written_are_refused_before_writing(tmp_path, name, message):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OutputError, match=message):
        check_output(tmp_path / name)


def test_an_input_is_never_overwritten(tmp_path):
    model = tmp_path / "model.pdmodel"
    model.write_bytes(b"model")
    os.symlink(model, tmp_path / "alias.onnx")
    for name in ("model.pdmodel", "alias.onnx"):
        with pytest.raises(OutputError, match="which this command reads"):
            write_bytes(tmp_path / name, b"x", inputs=[str(model)])
    assert model.read_bytes() == b"model"


def _copy_model(folder, stem="model"):
    folder.mkdir(parents=True, exist_ok=True)
    for ext in (".pdmodel", ".pdiparams"):
        shutil.copy(os.path.join(LEGACY, "model" + ext), folder / (stem + ext))
    return folder / (stem + ".pdmodel")


@pytest.mark.parametrize("output", ["model.pdiparams", "model.pdmodel"])
def test_convert_refuses_to_write_over_its_own_model(tmp_path, output):
    model = _copy_model(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    res = cli("convert", model, "-o", tmp_path / output)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "which this command reads" in res.stderr
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_convert_without_output_names_the_file_after_the_model(tmp_path):
    ocr = _copy_model(tmp_path / "ocr_cls", "inference")
    digits = _copy_model(tmp_path / "models", "digits")
    work = tmp_path / "work"
    work.mkdir()
    assert cli("convert", ocr, cwd=work).returncode == 0
    assert cli("convert", digits, cwd=work).returncode == 0
    assert sorted(os.listdir(work)) == ["digits.onnx", "ocr_cls.onnx"]
    # The default name never replaces a file the user did not name.
    res = cli("convert", ocr, cwd=work)
    assert res.returncode == 2 and "ocr_cls.onnx exists" in res.stderr


def test_every_output_is_checked_before_the_first_is_written(tmp_path):
    onnx_file = tmp_path / "m.onnx"
    assert cli("convert", os.path.join(LEGACY, "model.pdmodel"), "-o", onnx_file).returncode == 0
    (tmp_path / "report_dir").mkdir()
    res = cli("lower", onnx_file, "-o", tmp_path / "l.onnx", "--report", tmp_path / "report_dir")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--report output" in res.stderr and "is a directory" in res.stderr
    assert not (tmp_path / "l.onnx").exists()
    res = cli("lower", onnx_file, "-o", tmp_path / "l.onnx", "--report", tmp_path / "l.onnx")
    assert res.returncode == 2 and "name the same file" in res.stderr
    assert not (tmp_path / "l.onnx").exists()
