"""Conversion benchmark: `paddle-npu convert` vs the `paddle2onnx` CLI, side by side on the zoo.

For each model and format: both CLIs run --runs times (interleaved), each a fresh process;
we print the medians of wall time and peak RSS and their ratios, both outputs' node counts,
onnxruntime latency of both models on the zoo's test input (median over --iters), and
whether both agree with Paddle's outputs; then `paddle-npu --help`'s wall time. Targets:
wall time <= 0.2x paddle2onnx, peak RSS <= 250 MiB, node count <= paddle2onnx's, latency
ratio <= 1.0, `--help` <= 0.2 s.

paddle2onnx pins an old onnx, so it lives in its own environment, made by
`tools/bench_env.sh` (.bench-venv); pass another with --p2o.

    python tools/bench_convert.py [--models ci|all|a,b] [--formats legacy,pir] [--runs 3]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from measure import installed_env, load_note, run_measured, start_launcher  # noqa: E402


def node_count(path):
    import onnx

    def count(graph):
        n = 0
        for node in graph.node:
            n += 1
            for attr in node.attribute:
                if attr.g.node:
                    n += count(attr.g)
                for g in attr.graphs:
                    n += count(g)
        return n
    return count(onnx.load(path, load_external_data=False).graph)


def _session(path, feeds):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess, {k: v for k, v in feeds.items() if k in names}


def latencies(paths, feeds, iters):
    """{path: (median seconds, outputs)}, the sessions timed in alternation so that both
    see the same machine load."""
    runs = {p: _session(p, feeds) for p in paths}
    outs = {p: sess.run(None, f) for p, (sess, f) in runs.items()}   # warm-up
    times = {p: [] for p in paths}
    for _ in range(iters):
        for p, (sess, f) in runs.items():
            t = time.perf_counter()
            sess.run(None, f)
            times[p].append(time.perf_counter() - t)
    return {p: (statistics.median(times[p]), outs[p]) for p in paths}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ci")
    ap.add_argument("--formats", default="legacy,pir")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--p2o", default=os.path.join(ROOT, ".bench-venv", "bin", "paddle2onnx"),
                    help="the paddle2onnx command (default: .bench-venv, see tools/bench_env.sh)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    start_launcher()
    if not os.path.exists(args.p2o):
        sys.exit(f"no paddle2onnx at {args.p2o}: run `bash tools/bench_env.sh` or pass --p2o")
    import numpy as np

    import zoo
    from paddle_npu.compare import agreement

    ours_cmd = [sys.executable, "-m", "paddle_npu", "convert"]
    env = dict(installed_env(ROOT), GLOG_minloglevel="3")
    rows = []
    out_dir = tempfile.mkdtemp(prefix="bench_convert_")
    for name in zoo.select(args.models):
        for fmt in args.formats.split(","):
            try:
                info = zoo.export(name, fmt, os.path.join(args.cache, name, fmt))
            except zoo.ExportError as exc:
                print(f"{name}/{fmt}: export failed: {exc}", file=sys.stderr)
                continue
            model_file = os.path.join(info["dir"], info["model_file"])
            params = os.path.join(info["dir"], "model.pdiparams")
            mine, theirs = os.path.join(out_dir, "ours.onnx"), os.path.join(out_dir, "p2o.onnx")
            ours_t, p2o_t, status = [], [], {}
            for _ in range(args.runs):
                for who, cmd, target, acc in (
                        ("ours", ours_cmd + [model_file, "--params", params, "-o", mine], mine, ours_t),
                        ("p2o", [args.p2o, "--model_dir", info["dir"], "--model_filename",
                                 info["model_file"], "--params_filename", "model.pdiparams",
                                 "--save_file", theirs], theirs, p2o_t)):
                    if os.path.exists(target):
                        os.remove(target)
                    secs, rss, rc, err, _ = run_measured(cmd, env)
                    ok = rc == 0 and os.path.exists(target)
                    status[who] = "ok" if ok else (err.strip().splitlines() or ["failed"])[-1][:60]
                    if ok:
                        acc.append((secs, rss))
            ref = np.load(os.path.join(info["dir"], "reference.npz"))
            feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
            row = {"model": name, "format": fmt, "ours": status["ours"], "p2o": status["p2o"]}
            converted = [(who, path, acc) for who, path, acc in
                         (("ours", mine, ours_t), ("p2o", theirs, p2o_t)) if acc]
            for who, path, acc in converted:
                row[f"{who}_s"] = statistics.median(a for a, _ in acc)
                row[f"{who}_rss_mb"] = statistics.median(b for _, b in acc) / 2**20
                row[f"{who}_nodes"] = node_count(path)
            try:
                lat = latencies([path for _, path, _ in converted], feeds, args.iters)
            except Exception as exc:  # a model a runtime cannot load is a result too
                lat = {}
                row["ours"] += f" (ort: {str(exc).splitlines()[0][:50]})"
            for who, path, _ in converted:
                if path in lat:
                    secs, outs = lat[path]
                    row[f"{who}_lat_ms"] = secs * 1e3
                    row[f"{who}_rel_diff"] = max(agreement(o, ref[f"out_{i}"])["rel_diff"]
                                                 for i, o in enumerate(outs))
            rows.append(row)
            if len(rows) == 1:
                print(load_note())
            _print_row(row, header=len(rows) == 1)
    _print_summary(rows)
    help_s = statistics.median(run_measured(ours_cmd[:-1] + ["--help"], env).seconds
                               for _ in range(args.runs))
    print(f"paddle-npu --help: {help_s:.3f} s (median of {args.runs}; target <= 0.2 s: "
          f"{'met' if help_s <= HELP_TARGET_S else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


WALL_TARGET, RSS_TARGET_MIB, HELP_TARGET_S = 0.2, 250, 0.2


def _ratio(row, key):
    a, b = row.get(f"ours_{key}"), row.get(f"p2o_{key}")
    return a / b if a is not None and b else None


def _fmt(v, spec):
    return format(v, spec) if v is not None else "-".rjust(int(spec.split(".")[0].rstrip("df")))


def _print_row(row, header):
    if header:
        print(f"{'model':<22} {'fmt':<6} {'ours s':>7} {'p2o s':>7} {'time x':>6} {'ours MiB':>8} "
              f"{'p2o MiB':>8} {'rss x':>6} {'nodes':>6} {'p2o':>6} {'lat ms':>7} {'p2o ms':>7} "
              f"{'lat x':>6} {'ours diff':>9} {'p2o diff':>9}  status")
    print(f"{row['model']:<22} {row['format']:<6} {_fmt(row.get('ours_s'), '7.2f')} "
          f"{_fmt(row.get('p2o_s'), '7.2f')} {_fmt(_ratio(row, 's'), '6.2f')} "
          f"{_fmt(row.get('ours_rss_mb'), '8.0f')} {_fmt(row.get('p2o_rss_mb'), '8.0f')} "
          f"{_fmt(_ratio(row, 'rss_mb'), '6.2f')} {_fmt(row.get('ours_nodes'), '6d')} "
          f"{_fmt(row.get('p2o_nodes'), '6d')} {_fmt(row.get('ours_lat_ms'), '7.2f')} "
          f"{_fmt(row.get('p2o_lat_ms'), '7.2f')} {_fmt(_ratio(row, 'lat_ms'), '6.2f')} "
          f"{_fmt(row.get('ours_rel_diff'), '9.1e')} {_fmt(row.get('p2o_rel_diff'), '9.1e')}  "
          f"ours={row['ours']} p2o={row['p2o']}", flush=True)


def _print_summary(rows):
    both = [r for r in rows if "ours_s" in r and "p2o_s" in r]
    if not both:
        print("no model converted by both tools")
        return
    gmean = lambda xs: float(statistics.geometric_mean(xs)) if xs else float("nan")  # noqa: E731
    t = gmean([_ratio(r, "s") for r in both])
    rss = gmean([_ratio(r, "rss_mb") for r in both])
    lat = gmean([_ratio(r, "lat_ms") for r in both if _ratio(r, "lat_ms")])
    fewer = sum(r["ours_nodes"] <= r["p2o_nodes"] for r in both)
    peak = max(r["ours_rss_mb"] for r in both)
    slowest = max(_ratio(r, "s") for r in both)
    print(f"\n{len(both)} conversions by both; geometric means: wall time x{t:.2f} (target <= "
          f"{WALL_TARGET}: {'met' if slowest <= WALL_TARGET else 'NOT met'} by every one, the "
          f"worst x{slowest:.2f}), peak RSS x{rss:.2f} (ours at most {peak:.0f} MiB, target <= "
          f"{RSS_TARGET_MIB} MiB: {'met' if peak <= RSS_TARGET_MIB else 'NOT met'}), latency "
          f"x{lat:.2f} (target <= 1.0); node count <= paddle2onnx's in {fewer}/{len(both)}")
    only = [f"{r['model']}/{r['format']}" for r in rows if r not in both]
    if only:
        print("not converted by both:", ", ".join(only))


if __name__ == "__main__":
    main()
