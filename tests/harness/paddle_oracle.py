"""Paddle as the oracle, run in a subprocess (the PIR switch must be set before import).

    python tests/harness/paddle_oracle.py records OUT_DIR
        Paddle writes a combined params file holding every dtype it saves, and a
        single tensor file with a two-level LoD; OUT_DIR/expected.npz has the values.
    python tests/harness/paddle_oracle.py legacy-params MODEL OUT.npz
        Loads a legacy export with paddle.static.load_inference_model and saves every
        persistable tensor of its scope (raw bytes as uint8 + dtype names) to OUT.npz.
"""
import json
import os
import sys

os.environ.setdefault("FLAGS_enable_pir_api", "0")

import numpy as np  # noqa: E402
import paddle  # noqa: E402
from paddle.base import core  # noqa: E402

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
          "complex64", "complex128", "bfloat16"]


def records(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.RandomState(0)
    tensors, expected = [], {}
    for i, dt in enumerate(DTYPES):
        base = rng.uniform(-100, 100, size=(2, 3, i + 1)).astype("float32")
        t = paddle.to_tensor(base).astype(dt)
        tensors.append(t)
        expected[dt] = t.astype("float32").numpy() if dt == "bfloat16" else t.numpy()
    core.save_combine_func([t.get_tensor() for t in tensors], DTYPES,
                           os.path.join(out_dir, "combined.pdiparams"), True, False, False)
    lod_tensor = core.DenseTensor()
    lod_tensor.set(np.arange(12, dtype="int64").reshape(6, 2), core.CPUPlace())
    lod_tensor.set_lod([[0, 1, 3], [0, 2, 4, 6]])
    core.save_dense_tensor(lod_tensor, os.path.join(out_dir, "lod_tensor"))
    expected["lod_tensor"] = np.arange(12, dtype="int64").reshape(6, 2)
    np.savez(os.path.join(out_dir, "expected.npz"), **expected)


def legacy_params(model, out):
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        if os.path.isdir(model):
            name = "__model__" if os.path.exists(os.path.join(model, "__model__")) else "model"
            prog, _, _ = paddle.static.io.load_inference_model(model, exe, model_filename=name)
        else:
            prog, _, _ = paddle.static.load_inference_model(os.path.splitext(model)[0], exe)
        arrays, dtypes = {}, {}
        for var in prog.list_vars():
            if not var.persistable or var.name in ("feed", "fetch"):
                continue
            found = scope.find_var(var.name)
            if found is None:
                continue
            t = found.get_tensor()
            a = np.array(t)
            arrays[var.name] = np.frombuffer(a.tobytes(), np.uint8)
            dtypes[var.name] = [str(a.dtype), list(a.shape)]
    np.savez(out, __dtypes__=np.array(json.dumps(dtypes)), **arrays)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"records": records, "legacy-params": legacy_params}[cmd](*args)
