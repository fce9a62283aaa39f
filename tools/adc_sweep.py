"""The digits example at int8 on arrays of 2-bit cells fed 1 input bit per cycle, read out
by ADCs of 4 to 8 bits (and an exact read-out): top-1 accuracy on the example's 359 digits
and the worst output cosine to the float model, as a table and a picture: with the ADCs'
ranges calibrated on the 64 digits the calibration table was made on, and with each at the
largest sum its columns can reach (full scale).

    python tools/adc_sweep.py [--bits 4,5,6,7,8] [--svg docs/adc_bits_digits.svg]

Each point is the lowered model run by the NumPy reference (the bit-true simulator) on all
359 inputs; the calibration is the Quickstart's (64 of the digits).
"""
import argparse
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np
import onnx_ir as ir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from paddle_npu.api import export  # noqa: E402
from paddle_npu.npu.quant.calibrate import calibrate  # noqa: E402
from paddle_npu.npu.quant.qlower import quantized_lower  # noqa: E402
from paddle_npu.npu.verification.reference import Reference  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "digits_cnn")


def target_file(folder, adc_bits):
    path = os.path.join(folder, f"adc{adc_bits}.json")
    precision = {"cell_bits": 2, "dac_bits": 1, "adc_bits": adc_bits} if adc_bits else {}
    with open(path, "w") as f:
        json.dump({"name": f"adc{adc_bits}", "base": "npu256", "precision": precision}, f)
    return path


def sweep(bits, calibrated):
    data = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    x, labels, want = data["in_x"], data["labels"], data["out_0"]
    model = export(os.path.join(EXAMPLE, "pir", "model.json"))
    table = calibrate(model, {"x": x[:64]})
    rows = []
    with tempfile.TemporaryDirectory(prefix="adc_sweep_") as work:
        for b in [0] + list(bits):
            lowered, _, _ = quantized_lower(model, table, 8, target_file(work, b),
                                            adc_data={"x": x[:64]} if calibrated else None)
            got = Reference(ir.serde.serialize_model(lowered), None).run({"x": x})[0]
            cos = [float(g @ w / np.linalg.norm(g) / np.linalg.norm(w))
                   for g, w in zip(got, want)]
            rows.append({"adc_bits": b, "top1": float(np.mean(got.argmax(1) == labels)),
                         "float_top1": float(np.mean(want.argmax(1) == labels)),
                         "worst_cosine": min(cos), "median_cosine": float(np.median(cos))})
    return rows


def write_svg(series, path):
    """series: {label: rows of sweep()}, each a line of top-1 against ADC bits."""
    w, h, pad = 520, 300, 50
    rows = next(iter(series.values()))
    pts = [r for r in rows if r["adc_bits"]]
    lo, hi = min(r["adc_bits"] for r in pts), max(r["adc_bits"] for r in pts)

    def xy(b, acc):
        return (pad + (b - lo) / max(hi - lo, 1) * (w - 2 * pad),
                h - pad - acc * (h - 2 * pad))
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(w), height=str(h))
    svg.set("font-family", "sans-serif")
    svg.set("font-size", "12")
    ET.SubElement(svg, "text", x=str(pad), y="20").text = \
        "digits CNN, int8 on 2-bit cells, 1-bit inputs: top-1 vs ADC bits"
    ET.SubElement(svg, "line", x1=str(pad), y1=str(h - pad), x2=str(w - pad),
                  y2=str(h - pad), stroke="#555")
    ET.SubElement(svg, "line", x1=str(pad), y1=str(pad), x2=str(pad), y2=str(h - pad),
                  stroke="#555")
    for acc in (0.0, 0.5, 1.0):
        _, y = xy(lo, acc)
        ET.SubElement(svg, "text", x="8", y=f"{y + 4:.0f}").text = f"{acc:.1f}"
    for r in pts:
        x, _ = xy(r["adc_bits"], 0)
        ET.SubElement(svg, "text", x=f"{x - 4:.1f}", y=str(h - pad + 18)).text = \
            str(r["adc_bits"])
    exact = next(r for r in rows if not r["adc_bits"])
    _, ye = xy(lo, exact["top1"])
    ET.SubElement(svg, "line", x1=str(pad), y1=f"{ye:.1f}", x2=str(w - pad), y2=f"{ye:.1f}",
                  stroke="#2ca02c", attrib={"stroke-dasharray": "4 3"})
    legend = [(f"dashed: an exact read-out, {exact['top1']:.3f}", "#2ca02c")]
    for (label, rows), colour in zip(series.items(), ("#1f5fae", "#d62728")):
        pts = [r for r in rows if r["adc_bits"]]
        line = " ".join("{:.1f},{:.1f}".format(*xy(r["adc_bits"], r["top1"])) for r in pts)
        ET.SubElement(svg, "polyline", points=line, fill="none", stroke=colour,
                      attrib={"stroke-width": "2"})
        for r in pts:
            x, y = xy(r["adc_bits"], r["top1"])
            dot = ET.SubElement(svg, "circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r="4", fill=colour)
            ET.SubElement(dot, "title").text = f"{label}, {r['adc_bits']} bits: top-1 " \
                                               f"{r['top1']:.3f}"
        legend.append((f"{label}: " + ", ".join(f"{r['top1']:.2f}" for r in pts), colour))
    for k, (text, colour) in enumerate(legend):
        ET.SubElement(svg, "text", x=str(pad + 10), y=str(h - pad - 12 - 16 * k),
                      fill=colour).text = text
    ET.SubElement(svg, "text", x=str(w // 2 - 30), y=str(h - 10)).text = "ADC bits"
    with open(path, "w") as f:
        f.write(ET.tostring(svg, encoding="unicode", xml_declaration=True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", default="4,5,6,7,8")
    ap.add_argument("--svg", help="write the picture here")
    args = ap.parse_args(argv)
    bits = [int(b) for b in args.bits.split(",")]
    series = {"ranges calibrated": sweep(bits, True), "full scale": sweep(bits, False)}
    for label, rows in series.items():
        print(f"ADC ranges: {label}")
        print(f"{'ADC bits':>8} {'top-1':>7} {'float':>7} {'worst cos':>10} {'median cos':>11}")
        for r in rows:
            print(f"{r['adc_bits'] or 'exact':>8} {r['top1']:>7.3f} {r['float_top1']:>7.3f} "
                  f"{r['worst_cosine']:>10.4f} {r['median_cosine']:>11.4f}")
    if args.svg:
        write_svg(series, args.svg)
        print(f"wrote {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
