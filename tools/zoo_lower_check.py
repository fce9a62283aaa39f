"""Before/after check of stage 2: lower every zoo model and compare the lowered outputs exactly.

    python tools/zoo_lower_check.py run --models all --cache DIR -o BEFORE.npz [--as-cached]
    python tools/zoo_lower_check.py compare BEFORE.npz AFTER.npz

`run` converts each zoo model (its legacy export) with stage 1, lowers it for the default
target at the zoo's test input size (`input_shape=` fixed, so the big models lower at their
registered size), runs the lowered model in onnxruntime on the zoo's test inputs and writes
the outputs to an .npz, with a hash of the export it read. Run it once on each of two
checkouts (`PYTHONPATH=CHECKOUT python tools/zoo_lower_check.py run ...` picks whose
paddle_npu lowers) and `compare` prints, per model, the largest absolute difference between
the two; it exits with 1 unless every model is bit-identical. `--as-cached` uses an export
found in DIR as it is, even when another version of zoo.py wrote it, instead of exporting
again (both runs must then read the same directory: the hashes show that they did).
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402

META = "__meta__"


def _export_dir(name, cache, as_cached):
    """(directory, meta.json) of the model's legacy export."""
    path = os.path.join(cache, name, "legacy")
    if as_cached and os.path.isfile(os.path.join(path, "meta.json")):
        with open(os.path.join(path, "meta.json")) as f:
            return path, json.load(f)
    info = zoo.export(name, "legacy", path)
    return info["dir"], info


def _digest(path, files):
    h = hashlib.sha256()
    for f in files:
        with open(os.path.join(path, f), "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def lower_and_run(name, cache, as_cached):
    """(outputs, record) of one model lowered for the default target and run in onnxruntime."""
    import onnx_ir as ir
    import onnxruntime as ort

    from paddle_npu.api import export
    from paddle_npu.npu import lower

    path, meta = _export_dir(name, cache, as_cached)
    ref = np.load(os.path.join(path, "reference.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    record = {"export": _digest(path, [meta["model_file"], "model.pdiparams", "reference.npz"]),
              "input_shape": {k: list(v.shape) for k, v in feeds.items()}}
    t0 = time.perf_counter()
    onnx_bytes = export(os.path.join(path, meta["model_file"]))
    lowered, _ = lower(onnx_bytes, input_shape=record["input_shape"])
    record["lower_seconds"] = round(time.perf_counter() - t0, 2)
    proto = ir.serde.serialize_model(lowered).SerializeToString()
    record["lowered_sha"] = hashlib.sha256(proto).hexdigest()[:16]
    session = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    record["outputs"] = [o.name for o in session.get_outputs()]
    return outputs, record


def _save(path, arrays, meta):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=folder)
    os.close(fd)
    np.savez(tmp, **arrays, **{META: np.array(json.dumps(meta))})
    os.replace(tmp, path)


def run(names, cache, out, as_cached):
    import paddle_npu

    arrays, meta = {}, {"paddle_npu": os.path.dirname(paddle_npu.__file__), "models": {}}
    for name in names:
        try:
            outputs, record = lower_and_run(name, cache, as_cached)
            for i, o in enumerate(outputs):
                arrays[f"{name}/{i}"] = o
        except Exception as exc:   # one failing model must not hide the others
            record = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            if os.environ.get("PADDLE_NPU_TRACEBACK"):
                traceback.print_exc()
        meta["models"][name] = record
        _save(out, arrays, meta)
        print(f"{name}: {record.get('error') or str(record['lower_seconds']) + ' s'}",
              file=sys.stderr, flush=True)
    return 0


def _load(path):
    data = np.load(path)
    meta = json.loads(str(data[META]))
    return data, meta


def compare(before_path, after_path):
    before, mb = _load(before_path)
    after, ma = _load(after_path)
    print(f"before: {mb['paddle_npu']}\nafter:  {ma['paddle_npu']}")
    head = (f"{'model':<24} {'outputs':>7} {'elements':>10} {'max abs diff':>12}  "
            "same lowered model  verdict")
    print(head + "\n" + "-" * len(head))
    names = list(mb["models"]) + [n for n in ma["models"] if n not in mb["models"]]
    bad = same = both_fail = 0
    for name in names:
        b, a = mb["models"].get(name), ma["models"].get(name)
        if b is None or a is None:
            verdict, cols = "only in " + ("after" if b is None else "before"), ("", "", "")
        elif "error" in b or "error" in a:
            same_error = b.get("error") == a.get("error")
            verdict = ("fails in both: " if same_error else "error: ") + (a.get("error") or b["error"])
            cols = ("", "", "")
        elif b["export"] != a["export"]:
            verdict, cols = "read different exports", ("", "", "")
        else:
            n = len(b["outputs"])
            worst, elements, identical = 0.0, 0, len(a["outputs"]) == n
            for i in range(min(n, len(a["outputs"]))):
                x, y = before[f"{name}/{i}"], after[f"{name}/{i}"]
                elements += x.size
                if x.shape != y.shape or x.dtype != y.dtype:
                    identical = False
                    continue
                identical &= bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
                if x.size and x.dtype.kind in "fiu":
                    d = np.abs(x.astype(np.float64) - y.astype(np.float64))
                    worst = max(worst, float(np.nanmax(d)) if np.isfinite(d).any() else 0.0)
            verdict = "identical" if identical else "DIFFERENT"
            same_model = "yes" if b["lowered_sha"] == a["lowered_sha"] else "no"
            cols = (str(n), str(elements), f"{worst:.3g}", same_model)
        same += verdict == "identical"
        both_fail += verdict.startswith("fails in both")
        bad += verdict != "identical" and not verdict.startswith("fails in both")
        cols = cols + ("",) * (4 - len(cols))
        print(f"{name:<24} {cols[0]:>7} {cols[1]:>10} {cols[2]:>12}  {cols[3]:<18}  {verdict}")
    print(f"\n{same} of {len(names)} models give bit-identical outputs before and after"
          + (f"; {both_fail} fail the same way in both" if both_fail else "")
          + (f"; {bad} differ or fail in one only" if bad else ""))
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="lower the zoo models and write their outputs")
    r.add_argument("--models", default="all", help="all, ci or a comma list (zoo.py list)")
    r.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                   os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    r.add_argument("-o", "--out", required=True, help="the .npz to write")
    r.add_argument("--as-cached", action="store_true",
                   help="use the exports in --cache as they are (no re-export)")
    c = sub.add_parser("compare", help="compare two files written by run")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        return run(zoo.select(args.models), args.cache, args.out, args.as_cached)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
