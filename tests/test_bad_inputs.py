"""The bad-input table: every case ends in one line on stderr and exit 2 (130 for Ctrl-C), no
traceback, and no file changes that the command did not name as its output.

The commands run in-process through `paddle_npu.cli.main`, the one place exceptions become
messages; `tests/data/bad_inputs/` holds damaged files the fuzz bench found
(`tools/bench_fuzz.py`), each with the message it must give.
"""
import hashlib
import json
import os
import shutil
import stat

import numpy as np
import pytest

from conftest import EXAMPLE, ROOT
from paddle_npu.cli import main

CORPUS = os.path.join(ROOT, "tests", "data", "bad_inputs")


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace: the example model (legacy), its ONNX and lowered forms, data files."""
    d = tmp_path_factory.mktemp("bad_inputs")
    for ext in (".pdmodel", ".pdiparams"):
        shutil.copy(os.path.join(EXAMPLE, "legacy", "model" + ext), d / ("model" + ext))
    assert main(["convert", str(d / "model.pdmodel"), "-o", str(d / "m.onnx")]) == 0
    assert main(["lower", str(d / "m.onnx"), "-o", str(d / "l.onnx"),
                 "--segments", str(d / "seg")]) == 0
    x = np.load(os.path.join(EXAMPLE, "reference_io.npz"))["in_x"][:8]
    np.savez(d / "good.npz", x=x)
    assert main(["calibrate", str(d / "m.onnx"), "--data", str(d / "good.npz"), "-o",
                 str(d / "table.json")]) == 0
    np.savez(d / "wrong_shape.npz", x=np.zeros((8, 1, 5, 5), np.float32),
             in_x=np.zeros((8, 1, 5, 5), np.float32), out_0=np.zeros((8, 10), np.float32))
    np.savez(d / "no_out.npz", in_x=x)
    np.savez(d / "zero.npz", x=x[:0])
    np.savez(d / "nan.npz", x=np.full_like(x, np.nan))
    table = json.loads((d / "table.json").read_text())
    next(iter(table["tensors"].values()))["threshold"] = float("nan")
    (d / "nan_table.json").write_text(json.dumps(table))
    _other_models_segments(d)
    (d / "array.json").write_text("[1, 2, 3]")
    (d / "empty.onnx").write_bytes(b"")
    (d / "empty_params").mkdir()
    shutil.copy(d / "model.pdmodel", d / "empty_params" / "model.pdmodel")
    (d / "empty_params" / "model.pdiparams").write_bytes(b"")
    program = (d / "model.pdmodel").read_bytes()
    (d / "truncated.pdmodel").write_bytes(program[:len(program) // 2])
    (d / "file").write_bytes(b"")
    (d / "dir").mkdir()
    (d / "target_rowz.toml").write_text("[array]\nrowz = 128\n")
    (d / "target_bits.toml").write_text("[precision]\nweight_bits = 3\n")
    return d


def _other_models_segments(d):
    """seg_mixed/: the example's segment plan with its first file another model's."""
    from onnx import TensorProto, helper, numpy_helper, save
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["z"], name="mm")], "other",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2])],
        initializer=[numpy_helper.from_array(np.ones((6, 2), np.float32), "w")])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         d / "other.onnx")
    assert main(["lower", str(d / "other.onnx"), "-o", str(d / "other_l.onnx"),
                 "--segments", str(d / "seg_other")]) == 0
    shutil.copytree(d / "seg", d / "seg_mixed")
    first = json.loads((d / "seg" / "manifest.json").read_text())["segments"][0]["file"]
    shutil.copy(d / "seg_other" / "segment_0_npu.onnx", d / "seg_mixed" / first)


def _state(root):
    state = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            with open(path, "rb") as f:
                state[os.path.relpath(path, root)] = (hashlib.sha256(f.read()).hexdigest(),
                                                      st.st_mode)
    return state


# (arguments, what the message must say, outputs the command named and may leave behind)
CASES = {
    # files
    "output over the params": (["convert", "{d}/model.pdmodel", "-o", "{d}/model.pdiparams"],
                               "which this command reads", ()),
    "output over the model": (["lower", "{d}/m.onnx", "-o", "{d}/m.onnx"],
                              "which this command reads", ()),
    "calibration table over its data": (["calibrate", "{d}/m.onnx", "--data", "{d}/good.npz",
                                         "-o", "{d}/good.npz"], "which this command reads", ()),
    "output is a directory": (["convert", "{d}/model.pdmodel", "-o", "{d}/dir"],
                              "is a directory", ()),
    "output named as a folder": (["convert", "{d}/model.pdmodel", "-o", "{d}/new/"],
                                 "names a directory", ()),
    "empty output name": (["convert", "{d}/model.pdmodel", "-o", ""], "name is empty", ()),
    "output under a file": (["convert", "{d}/model.pdmodel", "-o", "{d}/file/m.onnx"],
                            "ot a directory", ()),
    "output name too long": (["convert", "{d}/model.pdmodel", "-o", "{d}/" + "x" * 300],
                             "File name too long", ()),
    "full device": (["convert", "{d}/model.pdmodel", "-o", "/dev/full"],
                    "No space left on device", ()),
    "report is a directory": (["lower", "{d}/m.onnx", "-o", "{d}/new.onnx", "--report",
                               "{d}/dir"], "--report output", ()),
    "segments into a file": (["lower", "{d}/m.onnx", "-o", "{d}/new.onnx", "--segments",
                              "{d}/file"], "is not a directory", ()),
    "two outputs, one file": (["lower", "{d}/m.onnx", "-o", "{d}/new.onnx", "--qdq",
                               "{d}/new.onnx", "--quantize", "int8"], "the same file", ()),
    "outputs over the segment plan": (["run-segments", "{d}/seg", "--inputs", "{d}/good.npz",
                                       "--outputs", "{d}/seg/manifest.json"],
                                      "which this command reads", ()),
    # flags
    "no model": (["convert"], "give the model", ()),
    "-o and --save_file": (["convert", "{d}/model.pdmodel", "-o", "{d}/a.onnx", "--save_file",
                            "{d}/b.onnx"], "give one", ()),
    "MODEL and --model_dir": (["convert", "{d}/model.pdmodel", "--model_dir", "{d}/dir"],
                              "give one", ()),
    # onnxruntime refusing the inputs
    "verify, wrong input shape": (["verify", "{d}/m.onnx", "{d}/l.onnx", "--inputs",
                                   "{d}/wrong_shape.npz"], "onnxruntime", ()),
    "calibrate, wrong input shape": (["calibrate", "{d}/m.onnx", "--data",
                                      "{d}/wrong_shape.npz", "-o", "{d}/t.json"],
                                     "onnxruntime", ()),
    "reference, wrong input shape": (["convert", "{d}/model.pdmodel", "-o", "{d}/r.onnx",
                                      "--reference", "{d}/wrong_shape.npz"], "onnxruntime",
                                     ("r.onnx",)),
    "quant-report, wrong input shape": (["quant-report", "{d}/m.onnx", "--calibration",
                                         "{d}/table.json", "--data", "{d}/wrong_shape.npz"],
                                        "onnxruntime", ()),
    "run-segments, wrong input shape": (["run-segments", "{d}/seg", "--inputs",
                                         "{d}/wrong_shape.npz", "--outputs", "{d}/o.npz"],
                                        "onnxruntime", ()),
    "reference not an npz": (["convert", "{d}/model.pdmodel", "-o", "{d}/r.onnx", "--reference",
                              "{d}/array.json"], "cannot read it as an .npz of arrays: it is a "
                                                 "JSON array", ()),
    "calibration data not an npz": (["calibrate", "{d}/m.onnx", "--data", "{d}/array.json",
                                     "-o", "{d}/t.json"], "it is a JSON array", ()),
    "marks file holding an array": (["lower", "{d}/m.onnx", "-o", "{d}/c.onnx", "--marks",
                                     "{d}/array.json"], "holds a JSON list", ()),
    "device as the model": (["convert", "/dev/zero", "-o", "{d}/c.onnx"],
                            "is not a regular file", ()),
    # checks that would pass with nothing checked
    "reference without outputs": (["convert", "{d}/model.pdmodel", "-o", "{d}/r.onnx",
                                   "--reference", "{d}/no_out.npz"], "no expected outputs",
                                  ("r.onnx",)),
    "calibrate on 0 samples": (["calibrate", "{d}/m.onnx", "--data", "{d}/zero.npz", "-o",
                                "{d}/t.json"], "0 samples", ()),
    "calibrate on NaN": (["calibrate", "{d}/m.onnx", "--data", "{d}/nan.npz", "-o",
                          "{d}/t.json"], "NaN or infinite", ()),
    # data with NaN, tables with NaN: one check for every command reading them
    "quant-report on NaN": (["quant-report", "{d}/m.onnx", "--calibration", "{d}/table.json",
                             "--data", "{d}/nan.npz"], "input 'x' has ", ()),
    "verify on NaN": (["verify", "{d}/m.onnx", "{d}/l.onnx", "--inputs", "{d}/nan.npz"],
                      "input 'x' has ", ()),
    "auto-hp on NaN": (["lower", "{d}/m.onnx", "-o", "{d}/q.onnx", "--quantize", "int8",
                        "--calibration", "{d}/table.json", "--auto-hp", "1", "--data",
                        "{d}/nan.npz"], "input 'x' has ", ()),
    "table with a NaN threshold": (["lower", "{d}/m.onnx", "-o", "{d}/q.onnx", "--quantize",
                                    "int8", "--calibration", "{d}/nan_table.json"],
                                   "has threshold nan, not a finite number", ()),
    "run-segments, inputs not an npz": (["run-segments", "{d}/seg", "--inputs",
                                         "{d}/array.json", "--outputs", "{d}/o.npz"],
                                        "array.json: cannot read it as an .npz", ()),
    "run-segments, another model's segment": (["run-segments", "{d}/seg_mixed", "--inputs",
                                               "{d}/good.npz", "--outputs", "{d}/o.npz"],
                                              "it is another model's", ()),
    # files of the wrong kind
    "ONNX to inspect": (["inspect", "{d}/m.onnx"], "is an ONNX model, not a Paddle program", ()),
    "ONNX to convert": (["convert", "{d}/m.onnx", "-o", "{d}/c.onnx"],
                        "is an ONNX model, not a Paddle program", ()),
    ".pdmodel to lower": (["lower", "{d}/model.pdmodel", "-o", "{d}/c.onnx"],
                          "a Paddle program (.pdmodel), not an ONNX model", ()),
    "empty file to lower": (["lower", "{d}/empty.onnx", "-o", "{d}/c.onnx"],
                            "an empty file (0 bytes), not an ONNX model", ()),
    "JSON array": (["inspect", "{d}/array.json"], "is a JSON array, not a Paddle PIR program",
                   ()),
    "empty params": (["inspect", "{d}/empty_params/model.pdmodel"], "is empty (0 bytes)", ()),
    "truncated program": (["inspect", "{d}/truncated.pdmodel"], "truncated.pdmodel, byte ", ()),
    # target files
    "unknown target key": (["lower", "{d}/m.onnx", "-o", "{d}/c.onnx", "--target",
                            "{d}/target_rowz.toml"], "rowz", ()),
    "implausible bits": (["lower", "{d}/m.onnx", "-o", "{d}/c.onnx", "--target",
                          "{d}/target_bits.toml"], "weight_bits", ()),
}


def _fill(args, d):
    return [a.replace("{d}", str(d)) for a in args]


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:      # argparse's usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(ws, capsys, case):
    args, message, may_write = CASES[case]
    before = _state(ws)
    code, _, err = _run(_fill(args, ws), capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("paddle-npu: error: "), err
    assert message in lines[0], err
    after = _state(ws)
    for name in may_write:
        after.pop(name, None)
        if os.path.exists(ws / name):
            os.remove(ws / name)
    assert after == before


def test_a_device_is_written_through(ws, capsys):
    code, _, err = _run(["convert", str(ws / "model.pdmodel"), "-o", os.devnull], capsys)
    assert code == 0, err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def _corpus():
    if not os.path.isdir(CORPUS):
        return []
    with open(os.path.join(CORPUS, "cases.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("entry", _corpus(), ids=lambda e: e["file"])
def test_fuzz_corpus(tmp_path, capsys, entry):
    """Damaged programs and params found by the fuzz bench, converted: one line, exit 2."""
    program = os.path.join(CORPUS, entry["file"]) if entry["kind"] == "program" else \
        os.path.join(EXAMPLE, "legacy", "model.pdmodel")
    params = os.path.join(CORPUS, entry["file"]) if entry["kind"] == "params" else \
        os.path.join(EXAMPLE, "legacy", "model.pdiparams")
    code, _, err = _run(["convert", program, "--params", params, "-o",
                         str(tmp_path / "out.onnx")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("paddle-npu: error: "), err
    assert entry["message"] in lines[0], err
    assert "unexpected" not in lines[0]
    assert os.listdir(tmp_path) == []


def test_ctrl_c_is_one_line_and_exit_130(ws, capsys, monkeypatch):
    import paddle_npu.api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(paddle_npu.api, "convert_model", interrupted)
    code, _, err = _run(["convert", str(ws / "model.pdmodel"), "-o", str(ws / "k.onnx")],
                        capsys)
    assert code == 130 and err == "paddle-npu: interrupted\n"
    assert not (ws / "k.onnx").exists()


def test_an_unexpected_error_is_one_line_naming_it_a_bug(ws, capsys, monkeypatch):
    import paddle_npu.api

    def broken(*args, **kwargs):
        raise TypeError("object of type 'NoneType' has no len()")
    monkeypatch.setattr(paddle_npu.api, "convert_model", broken)
    code, _, err = _run(["convert", str(ws / "model.pdmodel"), "-o", str(ws / "k.onnx")],
                        capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unexpected TypeError" in err and "a bug in paddle_npu" in err


def test_a_failing_mapper_names_the_op_its_type_and_the_model(ws):
    from paddle_npu.errors import ConversionError
    from paddle_npu.api import export
    from paddle_npu.mappers.registry import _mappers, get_mapper, paddle_op, unregister

    original = get_mapper("relu")
    unregister("relu")
    try:
        @paddle_op("relu")
        class CrashingRelu:
            @classmethod
            def version_7(cls, ctx, op):
                return len(None)

        with pytest.raises(ConversionError) as err:
            export(str(ws / "model.pdmodel"))
    finally:
        unregister("relu")
        _mappers["relu"] = original
    msg = str(err.value)
    assert "model.pdmodel: op #" in msg and "(relu) cannot be converted: TypeError" in msg
