"""The chip estimate over the zoo: each model converted at its deployment size (as
quant_zoo.py converts it), lowered (float) on the chip presets and on a chip of twice the
arrays the model needs, one row per model and chip.

    python tools/bench_chip.py [--models deploy|ci|all|a,b] [--targets npu256,hermes64,isaac-tile]
                               [--cache DIR] [--json OUT]

A row: the arrays the chip has, the model needs and the mapping uses (copies included), the
groups it runs in (reprogrammings), one image's latency, the lower bound and their ratio
(with the bound's largest term: macs, data flow or a shared unit), images per second with
the copies and without (and their ratio), the peak activation memory (`!` where it is over
the chip's) and what sets the pace (the busiest unit or layer per copy, or `groups`: an
image at a time, reprogrammed). `2x` is npu256 with twice the arrays the model needs (count =
2 x needed); `2x bal` the same chip lowered with --balance (depthwise layers on spare arrays
where the vector unit sets the pace; its gain is over the `2x` lowering without copies);
`2x cores` npu256-cores with twice the arrays, and so twice the vector units (one per 16
arrays). A model refused with `--fit refuse` on hermes64 (64 arrays) shows the one line
naming the smallest chip. Exit status 1 when a lowering failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402
from quant_zoo import select, shape_args  # noqa: E402

from paddle_npu.errors import ConversionError  # noqa: E402
from paddle_npu.npu.chip.target import PRESETS, target_from_dict  # noqa: E402
from paddle_npu.npu.pipeline import lower  # noqa: E402


def convert(name, cache, work):
    model = zoo.MODELS[name]
    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    out = os.path.join(work, f"{name}.onnx")
    subprocess.run([sys.executable, "-m", "paddle_npu", "convert",
                    os.path.join(info["dir"], info["model_file"]), "-o", out, "-q"]
                   + shape_args(model), check=True, capture_output=True)
    return out, " ".join(shape_args(model)[1::2])


def chip_row(name, shape, target, onnx_path, label=None, balance=False):
    start = time.perf_counter()
    _, report = lower(onnx_path, target, balance=balance)
    chip = report.as_dict()["chip"]
    # the gain is over the lowering as it was, without copies (before --balance moved any
    # depthwise layer to the arrays)
    kept = (chip["depthwise_on_arrays"] or {}).get("before", chip)
    plain = kept["without_replication"] or kept
    term = max(chip["bounds"], key=chip["bounds"].get)
    return {"model": name, "input": shape, "target": label or target.name,
            "available": chip["arrays_available"], "needed": chip["arrays_needed"],
            "used": chip["arrays_used"], "groups": chip["groups"],
            "latency_ns": chip["latency_ns"], "bound_ns": chip["bound_ns"],
            "ratio": round(chip["latency_ns"] / chip["bound_ns"], 3) if chip["bound_ns"] else 1.0,
            "bound_term": term, "throughput": chip["throughput_per_s"],
            "paced_by": chip["paced_by"],
            "throughput_no_copies": plain["throughput_per_s"],
            "copies_gain": round(chip["throughput_per_s"] / plain["throughput_per_s"], 3)
            if plain["throughput_per_s"] else 1.0,
            "moved_to_arrays": len((chip["depthwise_on_arrays"] or {}).get("layers", [])),
            "peak_bytes": chip["memory"]["peak_bytes"],
            "spilled": chip["memory"]["spilled_bytes"],
            "seconds": round(time.perf_counter() - start, 2)}


def refusal(onnx_path):
    """The one line `--fit refuse` gives on hermes64, or None when the model fits."""
    try:
        lower(onnx_path, "hermes64", fit="refuse", name=os.path.basename(onnx_path))
    except ConversionError as exc:
        return str(exc)
    return None


def bench_model(name, cache, work, targets):
    onnx_path, shape = convert(name, cache, work)
    rows = [chip_row(name, shape, PRESETS[t], onnx_path) for t in targets]
    needed = next((r["needed"] for r in rows if r["target"] == "npu256"), None)
    if needed is None:
        needed = chip_row(name, shape, PRESETS["npu256"], onnx_path)["needed"]
    double = target_from_dict({"name": "npu256-2x", "base": "npu256",
                               "array": {"count": max(1, 2 * needed)}})
    rows.append(chip_row(name, shape, double, onnx_path, "2x"))
    rows.append(chip_row(name, shape, double, onnx_path, "2x bal", balance=True))
    cores = target_from_dict({"name": "npu256-cores-2x", "base": "npu256-cores",
                              "array": {"count": max(1, 2 * needed)}})
    rows.append(chip_row(name, shape, cores, onnx_path, "2x cores"))
    rows[-1]["refused_on_hermes64"] = refusal(onnx_path)
    return rows


def _us(ns):
    return f"{ns / 1e6:.2f}ms" if ns >= 1e6 else f"{ns / 1000:.1f}us"


def render(rows):
    head = (f"{'model':<22} {'input':<16} {'chip':<10} {'arrays':>6} {'needed':>6} {'used':>6} "
            f"{'groups':>6} {'latency':>9} {'bound':>9} {'ratio':>6} {'bound by':>9} "
            f"{'img/s':>9} {'no copies':>9} {'gain':>5} {'memory':>9}  paced by")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<22} error: {r['error']}")
            continue
        mem = f"{r['peak_bytes'] / 2**20:.2f}M" + ("!" if r["spilled"] else "")
        lines.append(
            f"{r['model']:<22} {r['input'][:16]:<16} {r['target']:<10} {r['available']:>6} "
            f"{r['needed']:>6} {r['used']:>6} {r['groups']:>6} {_us(r['latency_ns']):>9} "
            f"{_us(r['bound_ns']):>9} {r['ratio']:>6.2f} {r['bound_term']:>9} "
            f"{r['throughput']:>9.0f} {r['throughput_no_copies']:>9.0f} "
            f"{r['copies_gain']:>5.2f} {mem:>9}  {(r['paced_by'] or '-')[:24]}"
            + (f" ({r['moved_to_arrays']} depthwise on arrays)" if r["moved_to_arrays"] else ""))
        if r.get("refused_on_hermes64"):
            lines.append(f"{'':<22} --fit refuse on hermes64: {r['refused_on_hermes64']}")
    lines.append("(memory: peak activations; ! over the chip's memory, spilled to the host)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="deploy")
    ap.add_argument("--targets", default="npu256,hermes64,isaac-tile")
    ap.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                    os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix="bench_chip_") as work:
        for name in select(args.models):
            start = time.perf_counter()
            try:
                rows += bench_model(name, args.cache, work, targets)
            except Exception as exc:  # noqa: BLE001 - one model's failure is a row
                rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
                failed = True
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print(render(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
