"""Zoo models at int8 on arrays read out through ADCs (default: the npu256-analog preset,
6-bit ADCs): per model the output cosine on ideal arrays and on the chip, the three layers
that drop most, and the fewest layers read through 8-bit ADCs (--adc-raise-to) for every
output's cosine to reach 0.99 (`quant-report --adc-until-cosine`) and, where every layer's
ADC raised does not, the fewest layers at 16 bits on top (`--hp-until-cosine`, layers
ranked by the noise they add), one `paddle-npu` process per model.

    python tools/analog_zoo.py [--models lenet,resnet18,...] [--target npu256-analog]
                               [--samples 8] [--adc-raise-to 8] [--cache DIR] [--work DIR]
                               [--json OUT]

Data as tools/quant_zoo.py makes it: the model at its deployment size, calibrated on the
zoo's own inputs (photo-like images for vision models), reported on 4 others.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402
from quant_zoo import make_data, rows_of, run, shape_args  # noqa: E402

CNN_OCR = ("lenet,resnet18,mobilenet_v1,mobilenet_v2,mobilenet_v3_small,shufflenet_v2_x0_25,"
           "squeezenet1_0,ocr_head,det_head,crnn")


def analog_model(name, cache, work, target, samples, until, raise_to=8):
    model = zoo.MODELS[name]
    work = os.path.join(work, name)
    os.makedirs(work, exist_ok=True)
    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    onnx_path, table = os.path.join(work, "model.onnx"), os.path.join(work, "table.json")
    row = {"model": name}
    rc, _, _, text = run(["convert", os.path.join(info["dir"], info["model_file"]), "-o",
                          onnx_path, "-q"] + shape_args(model), os.path.join(work, "c.log"))
    if rc:
        return {**row, "error": f"convert: {text.strip().splitlines()[-1][:160]}"}
    calib, _, evaluation, _ = make_data(model, work, samples)
    rc, _, _, text = run(["calibrate", onnx_path, "-o", table] + calib,
                         os.path.join(work, "cal.log"))
    if rc:
        return {**row, "error": f"calibrate: {text.strip().splitlines()[-1][:160]}"}
    out = os.path.join(work, "report.json")
    rc, s, mib, text = run(["quant-report", onnx_path, "--calibration", table, "--data",
                            evaluation, "--target", target, "--top", "3",
                            "--adc-until-cosine", str(until), "--adc-raise-to", str(raise_to),
                            "--hp-until-cosine", str(until),
                            "--hp-rank", "added", "--json", out],
                           os.path.join(work, "report.log"))
    if rc:
        return {**row, "error": f"quant-report: {text.strip().splitlines()[-1][:160]}"}
    rep = json.load(open(out))
    outs = rep["readout"]["outputs"]
    raised, hp = rep["adc_raised"], rep.get("auto_hp")
    return {**row, "seconds": round(s), "peak_mib": round(mib),
            "ideal_cosine": min(o["ideal_cosine"] for o in outs),
            "chip_cosine": min(o["chip_cosine"] for o in outs),
            "worst": [(r["layer"], r["chip_sqnr_db"] - r["ideal_sqnr_db"])
                      for r in rep["readout"]["layers"][:3]],
            "layers": len(rep["readout"]["layers"]), "raised": len(raised["raised"]),
            "reached": raised["reached"], "after": raised["cosine"],
            "int16": len(hp["promoted"]) if hp else 0,
            "hp_reached": hp["reached"] if hp else None,
            "hp_after": min(o["cosine"] for o in hp["outputs"]) if hp else None,
            # what the search's plan costs on the chip against plain int8: the last cost the
            # report gives ({"arrays", "latency_ns", ...}: [before, after])
            "cost": (hp or {}).get("cost") or raised.get("cost")}


def _cost(cost):
    if not cost:
        return "-"
    (a0, a1), (l0, l1) = cost["arrays"], cost["latency_ns"]
    return f"x{a1 / a0:.2f} / x{l1 / l0:.2f}" if a0 and l0 else "-"


def render(rows, until, raise_to=8):
    adc = f"{raise_to}-bit ADC layers"
    head = (f"{'model':<20} {'ideal cos':>10} {'chip cos':>10} {adc:>17} "
            f"{'cos after':>10} {'int16 layers':>15} {'cos after':>10} {'arrays / time':>15} "
            f"{'s':>5}  worst layers (SQNR drop dB)")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<20} error: {r['error']}")
            continue
        raised = f"{r['raised']}/{r['layers']}" + ("" if r["reached"] else " (not reached)")
        worst = ", ".join(f"{n} {d:.1f}" for n, d in r["worst"])
        hp = "-" if r["hp_reached"] is None else f"{r['int16']}/{r['layers']}" + (
            "" if r["hp_reached"] else " (not reached)")
        hp_after = "-" if r["hp_after"] is None else f"{r['hp_after']:.5f}"
        lines.append(f"{r['model']:<20} {r['ideal_cosine']:>10.5f} {r['chip_cosine']:>10.5f} "
                     f"{raised:>17} {r['after']:>10.5f} {hp:>15} {hp_after:>10} "
                     f"{_cost(r.get('cost')):>15} {r['seconds']:>5}  {worst}")
    lines.append(f"(cosines: the worst output and sample; {raise_to}-bit ADC layers: the fewest "
                 f"read through {raise_to}-bit ADCs for every output to reach {until}; int16 "
                 f"layers: where all of them do not, the fewest at 16 bits on top; arrays / "
                 f"time: what that plan costs on the chip against plain int8)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=CNN_OCR)
    ap.add_argument("--target", default="npu256-analog")
    ap.add_argument("--samples", type=int, default=8, help="calibration inputs")
    ap.add_argument("--until", type=float, default=0.99)
    ap.add_argument("--adc-raise-to", type=int, default=8,
                    help="the ADC bits a layer is raised to (quant-report --adc-raise-to)")
    ap.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                    os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "paddle_npu_analog"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    rows = rows_of(args.models.split(","), lambda name: analog_model(
        name, args.cache, args.work, args.target, args.samples, args.until, args.adc_raise_to),
        args.json)
    print(render(rows, args.until, args.adc_raise_to))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
