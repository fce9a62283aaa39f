"""The tensor-record reader against files Paddle itself wrote."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import EXAMPLE, REAL_MODELS
from paddle_npu import PaddleFormatError, load
from paddle_npu.frontend.params import read_combined, read_records, read_single

ORACLE = os.path.join(os.path.dirname(__file__), "harness", "paddle_oracle.py")


def run_oracle(*args):
    res = subprocess.run([sys.executable, ORACLE, *map(str, args)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.fixture(scope="module")
def paddle_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("records")
    run_oracle("records", out)
    return out


def test_every_dtype_paddle_writes(paddle_records):
    expected = np.load(paddle_records / "expected.npz")
    names = ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
             "complex64", "complex128", "bfloat16"]
    params = read_combined(paddle_records / "combined.pdiparams", names)
    assert list(params) == names
    for name in names:
        got = params[name]
        assert got.dtype.name == name
        want = expected[name]
        if name == "bfloat16":
            np.testing.assert_array_equal(got.astype(np.float32), want)
        else:
            assert got.dtype == want.dtype and np.array_equal(got, want), name


def test_lod_records_are_read(paddle_records):
    (rec,) = read_records(paddle_records / "lod_tensor")
    assert [lvl.tolist() for lvl in rec.lod] == [[0, 1, 3], [0, 2, 4, 6]]
    np.testing.assert_array_equal(rec.array, np.load(paddle_records / "expected.npz")["lod_tensor"])
    np.testing.assert_array_equal(read_single(paddle_records / "lod_tensor", "t"), rec.array)


def test_arrays_are_zero_copy_views(paddle_records):
    params = read_combined(paddle_records / "combined.pdiparams",
                           ["float16", "float32", "float64", "int8", "uint8", "int16", "int32",
                            "int64", "bool", "complex64", "complex128", "bfloat16"])
    a = params["float32"]
    assert not a.flags.owndata and not a.flags.writeable


def _oracle_params(model, tmp_path):
    out = tmp_path / "paddle.npz"
    run_oracle("legacy-params", model, out)
    data = np.load(out)
    return data, json.loads(str(data["__dtypes__"]))


@pytest.mark.parametrize("model", [
    os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls", "inference.pdmodel"),
    os.path.join(REAL_MODELS, "luotao1_example_mlp"),
    os.path.join(EXAMPLE, "legacy", "model.pdmodel"),
], ids=["ppocr_cls_combined", "old_dir_per_param_files", "example_legacy"])
def test_legacy_params_bit_exact_against_paddle(model, tmp_path):
    """Our names -> arrays equal what Paddle loads into its scope, byte for byte."""
    program = load(model)
    data, dtypes = _oracle_params(model, tmp_path)
    assert set(program.params) == set(dtypes)
    for name, arr in program.params.items():
        dtype, shape = dtypes[name]
        assert arr.dtype.name == dtype and list(arr.shape) == shape, name
        assert np.ascontiguousarray(arr).tobytes() == data[name].tobytes(), name


def test___params___layout(tmp_path):
    """An old directory with a combined `__params__` file (what save_inference_model wrote
    with params_filename='__params__'): built from the per-file directory, records in
    Paddle's order."""
    src = os.path.join(REAL_MODELS, "luotao1_example_mlp")
    program = load(src)
    with open(os.path.join(src, "__model__"), "rb") as f:
        (tmp_path / "__model__").write_bytes(f.read())
    with open(tmp_path / "__params__", "wb") as out:
        for name in sorted(program.params):
            with open(os.path.join(src, name), "rb") as f:
                out.write(f.read())
    again = load(tmp_path)
    assert again.params_path.endswith("__params__")
    for name, arr in program.params.items():
        assert np.array_equal(again.params[name], arr)


def test_params_of_another_model_are_refused(tmp_path):
    model = os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls", "inference.pdmodel")
    other = os.path.join(EXAMPLE, "legacy", "model.pdiparams")
    with pytest.raises(PaddleFormatError, match="belongs to another model"):
        load(model, other)


def test_wrong_shape_names_the_parameter(tmp_path):
    src = os.path.join(EXAMPLE, "legacy")
    program = load(os.path.join(src, "model.pdmodel"))
    names = sorted(program.params)
    # Swap two records of different shapes: same count, so only the shape check can tell.
    recs = read_records(os.path.join(src, "model.pdiparams"))
    raw = open(os.path.join(src, "model.pdiparams"), "rb").read()
    chunks = [raw[r.offset:r.end] for r in recs]
    i = next(k for k in range(1, len(recs)) if recs[k].array.shape != recs[0].array.shape)
    chunks[0], chunks[i] = chunks[i], chunks[0]
    (tmp_path / "model.pdiparams").write_bytes(b"".join(chunks))
    with pytest.raises(PaddleFormatError) as err:
        load(os.path.join(src, "model.pdmodel"), tmp_path / "model.pdiparams")
    assert repr(names[0]) in str(err.value) and "byte 0" in str(err.value)


def _record(data_type, dims, payload, version=0):
    from paddle_npu.proto import framework_pb2
    import struct
    desc = framework_pb2.VarType.TensorDesc(data_type=data_type, dims=dims).SerializeToString()
    return (struct.pack("<IQI", version, 0, 0) + struct.pack("<i", len(desc)) + desc + payload)


def test_unknown_dtype_names_the_offset(tmp_path):
    ok = _record(5, [2], np.zeros(2, np.float32).tobytes())
    bad = _record(7, [2], b"\0" * 8)          # 7 is LOD_TENSOR: not a data type
    path = tmp_path / "p.pdiparams"
    path.write_bytes(ok + bad)
    with pytest.raises(PaddleFormatError) as err:
        read_combined(path, ["a", "b"])
    msg = str(err.value)
    assert "unsupported tensor data type code 7" in msg and f"byte {len(ok) + 20}" in msg
    assert str(path) in msg


def test_wrong_record_version_is_refused(tmp_path):
    path = tmp_path / "p.pdiparams"
    path.write_bytes(_record(5, [1], b"\0" * 4, version=3))
    with pytest.raises(PaddleFormatError, match="byte 0: tensor record version 3, expected 0"):
        read_records(path)


def test_declarations_paddleslim_models_differ_from_are_accepted(tmp_path):
    """Paddle's loader keeps stored tensors as they are; PaddleSlim's quantised models store
    scales declared [1] as 0-d and [C] as [1, C], and int8 weights under a float declaration.
    Those are read (scales in the declared shape, weights int8); other mismatches are not."""
    path = tmp_path / "p.pdiparams"
    path.write_bytes(_record(5, [], np.float32(2).tobytes()) +
                     _record(5, [1, 3], np.arange(3, dtype=np.float32).tobytes()) +
                     _record(21, [3, 1], np.array([1, -2, 3], np.int8).tobytes()))
    expected = {"s": ("float32", [1]), "c": ("float32", [3]), "w": ("float32", [3, 1])}
    got = read_combined(path, ["s", "c", "w"], expected)
    assert got["s"].shape == (1,) and got["c"].shape == (3,) and got["c"][2] == 2
    assert got["w"].dtype == np.int8 and got["w"].tolist() == [[1], [-2], [3]]
    for wrong in ({**expected, "c": ("float32", [2])}, {**expected, "w": ("float32", [1, 3])},
                  {**expected, "s": ("int64", [1])}):
        with pytest.raises(PaddleFormatError, match="the program declares"):
            read_combined(path, ["s", "c", "w"], wrong)
