"""The whole integer flow on zoo models, run as a user runs it: one `paddle-npu` process per
step, one row per model.

    python tools/quant_zoo.py [--models deploy|ci|all|a,b] [--samples 32] [--bits 8,16]
                              [--skip hp,int8pc,int16] [--work DIR] [--cache DIR] [--json OUT]

Per model (the zoo's legacy export, from --cache):

    convert      paddle-npu convert MODEL --input-shape x:1,...  (batch 1, the model's size)
    calibrate    on --samples of the zoo's own inputs (another seed): a folder of PNG images
                 with ImageNet's mean / std for a model the zoo feeds photo-like images, else
                 an .npz
    int8 / int8pc / int16
                 lower --quantize (packed plan; per-channel plan), then verify on an input of
                 the same kind the calibration never saw (verify --json: worst cosine, ok)
    report       quant-report on the evaluation set
    qdq          lower --quantize int8 --qdq, and the QDQ model run by onnxruntime
    hp           where int8 misses --min-cosine: lower --hp-until-cosine measured on the
                 calibration samples (every sample's cosine; layers ranked by the noise they
                 add: one run, where a measured ranking takes one per layer), then verify on
                 the held-out input

A row gives each step's result (ok, or the exit status and the first line of the error),
the int8 / int16 / hp cosines, and the slowest step's time and peak RSS. Exit status 1 when
any step failed or a verify disagreed.
"""
import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402
from measure import run_measured  # noqa: E402

STEPS = ("convert", "calibrate", "int8", "int8pc", "int16", "report", "qdq", "hp")


def deploy_models():
    """The zoo at deployment sizes: every model but the small-size copies (NAME_<size>) of
    another one."""
    names = list(zoo.MODELS)
    return [n for n in names
            if not any(n != b and n.startswith(b + "_") and n[len(b) + 1:].split("x")[0].isdigit()
                       for b in names)]


def select(spec):
    return deploy_models() if spec == "deploy" else zoo.select(spec)


def run(argv, log):
    """Run `paddle-npu ARGV`: (exit status, seconds, peak RSS MiB, output). Started by
    measure's launcher, so the peak is the step's own, not this process's."""
    cmd = [sys.executable, "-m", "paddle_npu"] + [str(a) for a in argv]
    with open(log, "w") as out:
        out.write("$ paddle-npu " + " ".join(shlex.quote(str(a)) for a in argv) + "\n")
    m = run_measured(cmd, log=log)
    with open(log) as out:
        text = out.read()
    return m.rc, m.seconds, m.rss / 2 ** 20, text


def error_line(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "Traceback" in ln:
            return ln.strip()[:160]
    return lines[-1].strip()[:160] if lines else ""


def image_input(model):
    """The name of the model's one [N, 3, H, W] float input with fixed H, W, else None."""
    if len(model.inputs) != 1:
        return None
    i = model.inputs[0]
    ok = len(i.shape) == 4 and i.shape[1] == 3 and np.dtype(i.dtype) == np.float32
    return i.name if ok else None


def photo_pixels(h, w, seed, count):
    """`count` photo-like RGB images [count, h, w, 3] uint8 (the zoo's _photo_like scenes)."""
    x = zoo._photo_like(h, w, zoo.UNIT_PIXELS)(np.random.default_rng(seed), count)["x"]
    return np.clip(x * 255 + 0.5, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def normalised(pixels, model):
    """Images [N, H, W, 3] uint8 as the model's input, by its preprocessing (Model.pixels)."""
    mean, std = (np.reshape(v, (1, 3, 1, 1)) for v in model.pixels)
    return ((pixels.transpose(0, 3, 1, 2) / 255 - mean) / std).astype(np.float32)


def pixel_args(model):
    """`calibrate`'s --mean and --std for the model's preprocessing, in pixel values 0..255."""
    return [a for flag, v in zip(("--mean", "--std"), model.pixels)
            for a in (flag, ",".join(f"{255 * c:g}" for c in v))]


# The zoo sets BatchNorm statistics on its inputs of seed + 1 and tests on seed + 0; the
# calibration set must be neither: a seeded network normalised on 8 inputs is normalised on
# exactly those, and another input's activations reach 10-100x theirs at small sizes, so
# ranges calibrated on them clip a new input at any bit width.
CALIBRATION_SEED, EVALUATION_SEED = 3, 2


def make_data(model, work, samples):
    """(calibration arguments, the calibration set as an .npz, evaluation .npz, verify .npz
    with one sample the others never saw) from the zoo's own inputs on seeds the zoo uses
    for nothing else: the distribution its BatchNorm statistics were set on, not the inputs
    they were set on (CALIBRATION_SEED). A
    model the zoo feeds photo-like images is calibrated on a folder of such images, as a
    user calibrates on a folder of pictures (the others on an .npz: normal noise written as
    8-bit pictures would be clipped, and a model normalised on noise is another network on
    pictures)."""
    name = image_input(model) if model.gen is not None else None
    evaluation, one = os.path.join(work, "eval.npz"), os.path.join(work, "verify.npz")
    tune = os.path.join(work, "calib.npz")
    if name is not None:
        _, _, h, w = model.inputs[0].shape
        from PIL import Image
        folder = os.path.join(work, "images")
        os.makedirs(folder, exist_ok=True)
        pixels = photo_pixels(h, w, model.seed + CALIBRATION_SEED, samples)
        for i, px in enumerate(pixels):
            Image.fromarray(px).save(os.path.join(folder, f"{i:03d}.png"))
        calib = ["--data", folder, *pixel_args(model)]
        np.savez(tune, **{name: normalised(pixels, model)})
        x = normalised(photo_pixels(h, w, model.seed + EVALUATION_SEED, 4), model)
        np.savez(evaluation, **{name: x})
        np.savez(one, **{f"in_{name}": x[:1]})
        return calib, tune, evaluation, one
    np.savez(tune, **zoo._make_inputs(model, model.seed + CALIBRATION_SEED, samples))
    feeds = zoo._make_inputs(model, model.seed + EVALUATION_SEED, 4)
    np.savez(evaluation, **feeds)
    np.savez(one, **{f"in_{k}": v[:1] for k, v in feeds.items()})
    return ["--data", tune], tune, evaluation, one


def shape_args(model):
    out = []
    for i in model.inputs:
        out += ["--input-shape", f"{i.name}:" + ",".join(str(1 if d is None else d)
                                                         for d in i.shape)]
    return out


def qdq_cosine(float_onnx, qdq_onnx, npz):
    """The QDQ model's worst output cosine to the float model, both run by onnxruntime."""
    from paddle_npu.compare import run_onnx
    from paddle_npu.npu.quant.accuracy import metrics

    with np.load(npz) as data:
        feeds = {k[3:]: data[k] for k in data.files}
    _, f = run_onnx(float_onnx, feeds)
    _, q = run_onnx(qdq_onnx, feeds)
    return min(metrics(a, b)["cosine"] for a, b in zip(f, q))


def sweep_model(name, cache, work, samples, bits, min_cosine, target, skip=()):
    """One model's row: {step: {"rc", "s", "mib", "error", ...}} and the cosines."""
    model = zoo.MODELS[name]
    work = os.path.join(work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    row = {"model": name, "steps": {}, "skipped": sorted(set(skip) & {"int8pc", "int16"})}
    log = lambda step: os.path.join(work, f"{step}.log")  # noqa: E731

    def step(key, argv):
        rc, s, mib, text = run(argv, log(key))
        row["steps"][key] = {"rc": rc, "s": round(s, 2), "mib": round(mib)}
        if rc != 0:
            row["steps"][key]["error"] = error_line(text)
        return rc, text

    def verified(key, lowered):
        rc, text = step(key + ".verify", ["verify", onnx_path, lowered, "--inputs", one,
                                          "--target", target, "--min-cosine", min_cosine,
                                          "--json"])
        try:
            result = json.loads(text[text.index("{"):])
        except ValueError:
            return None
        row["steps"][key + ".verify"]["ok"] = bool(result.get("ok"))
        return result.get("worst_cosine")

    onnx_path = os.path.join(work, "model.onnx")
    if step("convert", ["convert", os.path.join(info["dir"], info["model_file"]), "-o",
                        onnx_path, "-q"] + shape_args(model))[0]:
        return row
    calib, tune, evaluation, one = make_data(model, work, samples)
    table = os.path.join(work, "table.json")
    if step("calibrate", ["calibrate", onnx_path, "-o", table] + calib)[0]:
        return row
    plans = [("int8", 8, "packed"), ("int8pc", 8, "per-channel"), ("int16", 16, "packed")]
    for key, b, plan in plans:
        if b not in bits or key in skip:
            continue
        out = os.path.join(work, f"{key}.onnx")
        if step(key, ["lower", onnx_path, "-o", out, "--quantize", f"int{b}", "--calibration",
                      table, "--plan", plan, "--target", target])[0] == 0:
            row[f"{key}_cosine"] = verified(key, out)
    if 8 in bits:
        step("report", ["quant-report", onnx_path, "--calibration", table, "--data",
                        evaluation, "--target", target, "--top", "5"])
        qdq = os.path.join(work, "int8.qdq.onnx")
        if step("qdq", ["lower", onnx_path, "-o", os.path.join(work, "int8b.onnx"),
                        "--quantize", "int8", "--calibration", table, "--target", target,
                        "--qdq", qdq])[0] == 0:
            try:
                row["qdq_cosine"] = qdq_cosine(onnx_path, qdq, one)
            except Exception as exc:  # noqa: BLE001 - a QDQ file onnxruntime refuses is a result
                row["steps"]["qdq"].update(rc="run", error=f"onnxruntime: {exc}"[:160])
        cos = row.get("int8_cosine")
        row["hp_skipped"] = "hp" in skip and cos is not None and cos < min_cosine
        if cos is not None and cos < min_cosine and "hp" not in skip:
            out = os.path.join(work, "hp.onnx")
            rc, text = step("hp", ["lower", onnx_path, "-o", out, "--quantize", "int8",
                                   "--calibration", table, "--target", target, "--data",
                                   tune, "--hp-until-cosine", min_cosine,
                                   "--hp-rank", "added"])
            if rc == 0:
                row["hp_cosine"] = verified("hp", out)
                row["hp_layers"] = promoted_count(text)
    return row


def promoted_count(text):
    """How many layers `lower --hp-until-cosine` printed as promoted to 16 bits."""
    for line in text.splitlines():
        if "16-bit layers" in line:
            names = line.split("16-bit layers", 1)[1].strip()
            return 0 if names == "(none)" else names.count(",") + 1
    return None


def failures(row):
    """The steps of a row that failed: [(step, reason)]."""
    bad = []
    for key, s in row["steps"].items():
        if s["rc"] != 0 and not (key.endswith(".verify") and s["rc"] == 1 and "ok" in s):
            bad.append((key, s.get("error", f"exit {s['rc']}")))
        elif s.get("ok") is False and not key.startswith(("int8.", "int8pc.")):
            bad.append((key, "disagrees"))
    for key in ("int8", "int8pc"):
        s = row["steps"].get(key + ".verify")
        cos = row.get(f"{key}_cosine")
        if s and s.get("ok") is False and not (row.get("hp_cosine") is not None and
                                               row["steps"].get("hp.verify", {}).get("ok")):
            bad.append((key + ".verify", f"disagrees (cosine {cos})"))
    return bad


def render(rows):
    head = f"{'model':<24} " + " ".join(f"{s:>9}" for s in STEPS) + \
        f" {'int8 cos':>9} {'int16 cos':>9} {'hp cos':>9} {'slowest':>14}"
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<24} error: {r['error']}")
            continue
        cells = []
        for s in STEPS:
            here = [v for k, v in r["steps"].items() if k == s or k.startswith(s + ".")]
            if not here:
                cells.append("skipped" if s in r.get("skipped", ()) or
                             s == "hp" and r.get("hp_skipped") else "-")
            elif all(v["rc"] == 0 for v in here) and all(v.get("ok", True) for v in here):
                cells.append("ok")
            elif all(v["rc"] in (0, 1) for v in here) and any("ok" in v for v in here):
                cells.append("disagree")
            else:
                cells.append(f"FAIL{next(v['rc'] for v in here if v['rc'] != 0)}")
        slow = max(r["steps"].items(), key=lambda kv: kv[1]["s"])
        fmt = lambda v: "-" if v is None else f"{v:.5f}"  # noqa: E731
        lines.append(f"{r['model']:<24} " + " ".join(f"{c:>9}" for c in cells) +
                     f" {fmt(r.get('int8_cosine')):>9} {fmt(r.get('int16_cosine')):>9}"
                     f" {fmt(r.get('hp_cosine')):>9} {slow[0][:6]:>6} {slow[1]['s']:>5.1f}s"
                     f"{slow[1]['mib']:>5}M")
        for key, why in failures(r):
            lines.append(f"{'':<24}   {key}: {why}")
    return "\n".join(lines)


def rows_of(names, row, json_path=None):
    """[row(name)] for each model, one model's failure a row of its `error`; each model's
    time on stderr, and the rows so far written to `json_path` after each."""
    rows = []
    for name in names:
        start = time.perf_counter()
        try:
            rows.append(row(name))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(rows, f, indent=1)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="deploy",
                    help="deploy (every model at its deployment size), ci, all or a,b")
    ap.add_argument("--samples", type=int, default=32, help="calibration inputs")
    ap.add_argument("--bits", default="8,16")
    ap.add_argument("--target", default="npu256")
    ap.add_argument("--min-cosine", default="0.99")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "paddle_npu_quant"))
    ap.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                    os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--skip", default="", help="steps not to run: hp (the promotion search, "
                    "a quantised run of the calibration set per probe), int8pc (the "
                    "per-channel plan), int16")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    bits = {int(b) for b in args.bits.split(",")}
    rows = rows_of(select(args.models), lambda name: sweep_model(
        name, args.cache, args.work, args.samples, bits, float(args.min_cosine), args.target,
        set(args.skip.split(","))), args.json)
    print(render(rows))
    return 1 if any("error" in r or failures(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
