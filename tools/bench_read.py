"""Reader benchmark: paddle_npu.load vs Paddle loading the same export, side by side.

For each format of a zoo model (ResNet-50 by default) it runs, each in a fresh
process so the numbers include imports and the peak RSS is the process's own:
  ours:   import paddle_npu; read program + every parameter (and touch every byte)
  paddle: import paddle; paddle.jit.load (program + parameters into tensors)
and prints wall time and peak RSS medians over --runs, and the ratios.
Targets: ours peak RSS <= params size + 100 MB, time <= 0.2x Paddle's.

    python tools/bench_read.py [--model resnet50] [--runs 3] [--cache DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# Each child prints {"seconds": wall time from interpreter start, "rss": peak RSS bytes}.
_CHILD_PRELUDE = """
import json, resource, sys, time
t0 = time.perf_counter()
"""
_CHILD_EPILOGUE = """
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "rss": rss, "checksum": checksum}))
"""
OURS = _CHILD_PRELUDE + """
sys.path.insert(0, ROOT)
import numpy as np
import paddle_npu
program = paddle_npu.load(MODEL)
# Touch every byte: a lazy mmap alone would flatter us.
checksum = float(sum(float(np.sum(a, dtype=np.float64)) for a in program.params.values()))
""" + _CHILD_EPILOGUE
PADDLE = _CHILD_PRELUDE + """
import numpy as np
import paddle
layer = paddle.jit.load(PREFIX)
checksum = float(sum(float(np.sum(v.numpy(), dtype=np.float64))
                     for v in layer.state_dict().values()))
""" + _CHILD_EPILOGUE


def _run(code, env_extra, **names):
    header = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    env = dict(os.environ, GLOG_minloglevel="2", **env_extra)
    res = subprocess.run([sys.executable, "-c", header + code], capture_output=True, text=True,
                         env=env)
    if res.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench(model_dir, fmt, runs):
    model_file = os.path.join(model_dir, "model.pdmodel" if fmt == "legacy" else "model.json")
    params_bytes = os.path.getsize(os.path.join(model_dir, "model.pdiparams"))
    flag = {"FLAGS_enable_pir_api": "0" if fmt == "legacy" else "1"}
    ours, theirs = [], []
    for _ in range(runs):   # interleaved, so both see the same machine state
        ours.append(_run(OURS, {}, ROOT=ROOT, MODEL=model_file))
        theirs.append(_run(PADDLE, flag, PREFIX=os.path.join(model_dir, "model")))
    rel = abs(ours[0]["checksum"] - theirs[0]["checksum"]) / max(1.0, abs(theirs[0]["checksum"]))
    if rel > 1e-6:
        raise SystemExit(f"{fmt}: parameter checksums differ: {ours[0]['checksum']} vs "
                         f"{theirs[0]['checksum']}")
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"format": fmt, "params_mb": params_bytes / 2**20,
            "ours_s": med(ours, "seconds"), "paddle_s": med(theirs, "seconds"),
            "ours_rss_mb": med(ours, "rss") / 2**20, "paddle_rss_mb": med(theirs, "rss") / 2**20}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    args = ap.parse_args()
    import zoo

    rows = []
    for fmt in ("legacy", "pir"):
        info = zoo.export(args.model, fmt, os.path.join(args.cache, args.model, fmt))
        rows.append(bench(info["dir"], fmt, args.runs))
    print(f"\n{args.model}: median of {args.runs} runs, each in a fresh process (imports included)")
    print(f"{'format':<7} {'params MB':>9} {'ours s':>7} {'paddle s':>8} {'time ratio':>10} "
          f"{'ours RSS MB':>11} {'paddle RSS MB':>13} {'RSS - params MB':>15}")
    for r in rows:
        print(f"{r['format']:<7} {r['params_mb']:>9.1f} {r['ours_s']:>7.3f} {r['paddle_s']:>8.3f} "
              f"{r['ours_s'] / r['paddle_s']:>10.3f} {r['ours_rss_mb']:>11.1f} "
              f"{r['paddle_rss_mb']:>13.1f} {r['ours_rss_mb'] - r['params_mb']:>15.1f}")
    ok = all(r["ours_s"] <= 0.2 * r["paddle_s"] and r["ours_rss_mb"] <= r["params_mb"] + 100
             for r in rows)
    print("targets (time <= 0.2x Paddle, RSS <= params + 100 MB):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
