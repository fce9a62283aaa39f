"""int8 (or int16) on zoo models: each one calibrated, lowered with `--quantize` at the zoo's
test input size and checked as `paddle-npu verify` checks an integer plan.

    python tools/quant_zoo.py [--models ci|all|a,b] [--bits 8] [--samples 64] [--cache DIR]
                              [--target npu256] [--json OUT]

Per model: the calibration set is the zoo's own input generator on another seed (`--samples`
inputs), the test batch is the zoo's reference input. Printed: every output's worst cosine
and SQNR to the float model, whether onnxruntime (function bodies) and the NumPy reference
agree bit for bit and else their relative difference (float ops between the integer ones,
Softmax or LayerNorm, round differently in the two), the NPU segments, the integer units
used (matrix layers, lookup tables, arrays written at run time) and the float ones left
(Lut / RuntimeVMM / VMM), and the plain ops left on the CPU. Below --min-cosine, the layers costing the most (the quant-report's
per-layer SQNR drop) are named.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zoo  # noqa: E402
from paddle_npu.api import export  # noqa: E402
from paddle_npu.npu import DOMAIN, verify  # noqa: E402
from paddle_npu.npu.quant.accuracy import layer_report, worst_layers  # noqa: E402
from paddle_npu.npu.quant.calibrate import calibrate  # noqa: E402
from paddle_npu.npu.quant.qlower import quantized_lower  # noqa: E402

UNITS = {"QVMM": "int matrix", "QLut": "int table", "QRuntimeVMM": "int written",
         "VMM": "float matrix", "Lut": "float table", "RuntimeVMM": "float written"}


def measure(name, cache, bits, samples, target, min_cosine):
    import numpy as np

    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    onnx_bytes = export(os.path.join(info["dir"], info["model_file"]))
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    model = zoo.MODELS[name]
    calib = zoo._make_inputs(model, model.seed + 1, samples)
    table = calibrate(onnx_bytes, calib)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    lowered, report, records = quantized_lower(onnx_bytes, table, bits, target,
                                               input_shape=shapes)
    result = verify(onnx_bytes, lowered, target, feeds=feeds, input_shape=shapes,
                    min_cosine=min_cosine)
    from paddle_npu.compare import agreement, run_onnx
    from paddle_npu.npu import Reference
    from paddle_npu.onnx_io import load_proto

    proto = load_proto(lowered)
    _, got = run_onnx(proto.SerializeToString(), feeds)
    ref = Reference(proto, target).run(feeds)
    units = {}
    for node in lowered.graph:
        if node.domain == DOMAIN and node.op_type in UNITS:
            units[UNITS[node.op_type]] = units.get(UNITS[node.op_type], 0) + 1
    row = {"model": name, "worst_cosine": result["worst_cosine"],
           "sqnr_db": min(o["sqnr_db"] for o in result["outputs"]),
           "bit_exact": all(o["bit_exact"] for o in result["outputs"]),
           # where not: float ops (Softmax, LayerNorm, ...) round differently in onnxruntime
           "ort_vs_reference": max(agreement(o, r)["rel_diff"] for o, r in zip(got, ref)),
           "segments": [s.device for s in report.segments], "units": units,
           "cpu_ops": {op: n["cpu"] for op, n in report.plain.items() if "cpu" in n},
           "matrix_layers": len(records)}
    if result["worst_cosine"] < min_cosine:
        rep = layer_report(onnx_bytes, lowered, feeds, records)
        row["worst_layers"] = [{"layer": l["layer"], "op": l["op"], "sqnr_db": l["sqnr_db"],
                                "drop_db": l["drop_db"]} for l in worst_layers(rep, 3)]
    return row


def render(rows, min_cosine):
    lines = [f"{'model':<22} {'cosine':>9} {'SQNR dB':>8} {'bit-exact':>9} {'ort~ref':>8} "
             f"{'NPU segs':>8} "
             f"{'segs':>4}  units / CPU ops"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<22} error: {r['error']}")
            continue
        units = ", ".join(f"{k} {v}" for k, v in sorted(r["units"].items()))
        cpu = ", ".join(f"{k} {v}" for k, v in sorted(r["cpu_ops"].items()))
        lines.append(f"{r['model']:<22} {r['worst_cosine']:>9.5f} {r['sqnr_db']:>8.2f} "
                     f"{'yes' if r['bit_exact'] else 'NO':>9} {r['ort_vs_reference']:>8.1e} "
                     f"{r['segments'].count('npu'):>8} "
                     f"{len(r['segments']):>4}  {units}" + (f" | CPU: {cpu}" if cpu else ""))
        for l in r.get("worst_layers", []):
            lines.append(f"{'':<22} below {min_cosine}: {l['layer']} ({l['op']}) SQNR "
                         f"{l['sqnr_db']:.2f} dB, drop {l['drop_db']:.2f} dB")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ci")
    ap.add_argument("--bits", type=int, default=8, choices=(8, 16))
    ap.add_argument("--samples", type=int, default=64, help="calibration inputs")
    ap.add_argument("--target", default="npu256")
    ap.add_argument("--min-cosine", type=float, default=0.99)
    ap.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                    os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    rows = []
    for name in zoo.select(args.models):
        try:
            rows.append(measure(name, args.cache, args.bits, args.samples, args.target,
                                args.min_cosine))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"})
        print(f"{name}: done", file=sys.stderr)
    print(render(rows, args.min_cosine))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
