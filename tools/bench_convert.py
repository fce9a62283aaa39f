"""Conversion benchmark: `paddle-npu convert` beside the `paddle2onnx` CLI and the compiled
(Rust) PIR converter `p2o`, side by side on the zoo.

For each model and format, each converter that reads it (p2o: PIR only) runs --runs times,
interleaved, each a fresh process; we print the medians of wall time, CPU time (user +
system: what a run costs whatever the machine's load) and peak RSS, ours as a ratio to each
other converter, the outputs' node counts, onnxruntime latency of the models on the zoo's
test input (median over --iters), and how far each is from Paddle's outputs; then
`paddle-npu --help`'s wall time. Targets: wall time <= 0.2x paddle2onnx and <= 1.0x p2o,
peak RSS <= 250 MiB, node count <= paddle2onnx's, latency ratio <= 1.0, `--help` <= 0.2 s.

paddle2onnx pins an old onnx, so both other converters live in their own environment, made
by `tools/bench_env.sh` (.bench-venv); pass others with --paddle2onnx / --p2o.

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
    """({path: (median seconds, outputs)}, {path: why onnxruntime could not run it}), the
    sessions that run timed in alternation so that all see the same machine load."""
    runs, outs, failed = {}, {}, {}
    for p in paths:
        try:
            sess, f = _session(p, feeds)
            outs[p] = sess.run(None, f)       # (a warm-up)
            runs[p] = sess, f
        except Exception as exc:  # noqa: BLE001 - a model onnxruntime refuses is a result too
            failed[p] = str(exc).splitlines()[0][:50]
    times = {p: [] for p in runs}
    for _ in range(iters):
        for p, (sess, f) in runs.items():
            t = time.perf_counter()
            sess.run(None, f)
            times[p].append(time.perf_counter() - t)
    return {p: (statistics.median(times[p]), outs[p]) for p in runs}, failed


def _commands(args, info, out):
    """{converter: the command converting the export `info` into out(converter)} for each
    converter that reads its format."""
    model_file = os.path.join(info["dir"], info["model_file"])
    params = os.path.join(info["dir"], "model.pdiparams")
    cmds = {"ours": [sys.executable, "-m", "paddle_npu", "convert", model_file, "--params",
                     params, "-o", out("ours")],
            "paddle2onnx": [args.paddle2onnx, "--model_dir", info["dir"], "--model_filename",
                            info["model_file"], "--params_filename", "model.pdiparams",
                            "--save_file", out("paddle2onnx")]}
    if info["model_file"].endswith(".json"):
        cmds["p2o"] = [args.p2o, model_file, params, out("p2o")]
    return cmds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ci")
    ap.add_argument("--formats", default="legacy,pir")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    venv = os.path.join(ROOT, ".bench-venv", "bin")
    ap.add_argument("--paddle2onnx", default=os.path.join(venv, "paddle2onnx"),
                    help="the paddle2onnx command (default: .bench-venv, see tools/bench_env.sh)")
    ap.add_argument("--p2o", default=os.path.join(venv, "p2o"),
                    help="the p2o command (default: .bench-venv, see tools/bench_env.sh)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    start_launcher()
    for tool in (args.paddle2onnx, args.p2o):
        if not os.path.exists(tool):
            sys.exit(f"no {tool}: run `bash tools/bench_env.sh`, or pass --paddle2onnx / --p2o")
    import numpy as np

    import zoo
    from paddle_npu.compare import agreement

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
            path = {who: os.path.join(out_dir, f"{who}.onnx") for who in CONVERTERS}
            cmds = _commands(args, info, path.get)
            runs, row = {who: [] for who in cmds}, {"model": name, "format": fmt}
            for _ in range(args.runs):
                for who, cmd in cmds.items():
                    if os.path.exists(path[who]):
                        os.remove(path[who])
                    m = run_measured(cmd, env)
                    ok = m.rc == 0 and os.path.exists(path[who])
                    lines = m.stderr.strip().splitlines() or ["failed"]
                    # the error, not a warning printed after it
                    said = [ln for ln in lines if "error" in ln.lower()] or lines
                    row[who] = "ok" if ok else said[-1].strip()[:60]
                    if ok:
                        runs[who].append(m)
            converted = [who for who in cmds if runs[who]]
            for who in converted:
                row[f"{who}_s"] = statistics.median(m.seconds for m in runs[who])
                row[f"{who}_cpu_s"] = statistics.median(m.cpu for m in runs[who])
                row[f"{who}_rss_mb"] = statistics.median(m.rss for m in runs[who]) / 2**20
                row[f"{who}_nodes"] = node_count(path[who])
            ref = np.load(os.path.join(info["dir"], "reference.npz"))
            feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
            timed, failed = latencies([path[who] for who in converted], feeds, args.iters)
            for who in converted:
                if path[who] in failed:
                    row[who] += f" (ort: {failed[path[who]]})"
                    continue
                secs, outs = timed[path[who]]
                row[f"{who}_lat_ms"] = secs * 1e3
                row[f"{who}_rel_diff"] = max(agreement(o, ref[f"out_{i}"])["rel_diff"]
                                             for i, o in enumerate(outs))
            rows.append(row)
            if len(rows) == 1:
                print(load_note())
            _print_row(row, header=len(rows) == 1)
    _print_summary(rows)
    help_s = statistics.median(run_measured([sys.executable, "-m", "paddle_npu", "--help"],
                                            env).seconds for _ in range(args.runs))
    print(f"paddle-npu --help: {help_s:.3f} s (median of {args.runs}; target <= 0.2 s: "
          f"{'met' if help_s <= HELP_TARGET_S else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


CONVERTERS = ("ours", "paddle2onnx", "p2o")
# ours against each: the largest wall-time ratio met
WALL_TARGETS = {"paddle2onnx": 0.2, "p2o": 1.0}
RSS_TARGET_MIB, HELP_TARGET_S = 250, 0.2


def _ratio(row, key, other):
    a, b = row.get(f"ours_{key}"), row.get(f"{other}_{key}")
    return a / b if a is not None and b else None


def _fmt(v, spec):
    return format(v, spec) if v is not None else "-".rjust(int(spec.split(".")[0].rstrip("dfe")))


def _print_row(row, header):
    if header:
        print(f"{'model':<22} {'fmt':<6} {'converter':<11} {'wall s':>7} {'cpu s':>6} "
              f"{'MiB':>5} {'nodes':>6} {'lat ms':>7} {'rel diff':>8}  ours x: {'wall':>5} "
              f"{'cpu':>5} {'rss':>5} {'lat':>5}  status")
    for who in CONVERTERS:
        if who not in row:
            continue
        ratios = "" if who == "ours" else "  ".join(
            _fmt(_ratio(row, key, who), "5.2f") for key in ("s", "cpu_s", "rss_mb", "lat_ms"))
        first = who == "ours"
        print(f"{row['model'] if first else '':<22} {row['format'] if first else '':<6} "
              f"{who:<11} {_fmt(row.get(f'{who}_s'), '7.2f')} "
              f"{_fmt(row.get(f'{who}_cpu_s'), '6.2f')} "
              f"{_fmt(row.get(f'{who}_rss_mb'), '5.0f')} {_fmt(row.get(f'{who}_nodes'), '6d')} "
              f"{_fmt(row.get(f'{who}_lat_ms'), '7.2f')} "
              f"{_fmt(row.get(f'{who}_rel_diff'), '8.1e')}  {'':8}{ratios:<26}  {row[who]}",
              flush=True)


def _print_summary(rows):
    gmean = lambda xs: float(statistics.geometric_mean(xs)) if xs else float("nan")  # noqa: E731
    mine = [r for r in rows if "ours_s" in r]
    if mine:
        peak = max(r["ours_rss_mb"] for r in mine)
        print(f"\nours: peak RSS at most {peak:.0f} MiB (target <= {RSS_TARGET_MIB} MiB: "
              f"{'met' if peak <= RSS_TARGET_MIB else 'NOT met'})")
    for other, target in WALL_TARGETS.items():
        both = [r for r in rows if "ours_s" in r and f"{other}_s" in r]
        if not both:
            print(f"no model converted by both ours and {other}")
            continue
        wall = [_ratio(r, "s", other) for r in both]
        fewer = sum(r["ours_nodes"] <= r[f"{other}_nodes"] for r in both)
        print(f"ours / {other} over {len(both)} conversions, geometric means: wall time "
              f"x{gmean(wall):.2f} (target <= {target}: "
              f"{'met' if max(wall) <= target else 'NOT met'} by every one, the worst "
              f"x{max(wall):.2f}), "
              f"CPU time x{gmean([_ratio(r, 'cpu_s', other) for r in both]):.2f}, "
              f"peak RSS x{gmean([_ratio(r, 'rss_mb', other) for r in both]):.2f}, latency "
              f"x{gmean([x for r in both if (x := _ratio(r, 'lat_ms', other))]):.2f}; node count "
              f"<= {other}'s in {fewer}/{len(both)}")
        for r in both:
            if r["model"] == "resnet50":
                print(f"  resnet50/{r['format']}: wall x{_ratio(r, 's', other):.2f}, CPU "
                      f"x{_ratio(r, 'cpu_s', other):.2f}, peak RSS {r['ours_rss_mb']:.0f} MiB "
                      f"against {r[f'{other}_rss_mb']:.0f}")
    only = [f"{r['model']}/{r['format']}" for r in rows if "ours_s" not in r]
    if only:
        print("not converted by ours:", ", ".join(only))


if __name__ == "__main__":
    main()
