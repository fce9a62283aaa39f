"""Evidence for integer precision on the NPU, float vs int8 vs int8 + N layers at int16.

    python tools/quant_report.py [--zoo DIR] [--models lenet,resnet18,...] [--auto-hp 2]
                                 [--until 0.99] [--no-dscnn] [--out DIR]

digits CNN (examples/digits_cnn) and dscnn (a MobileNet-v1-style depthwise-separable CNN
trained here for a minute, `train_example.py --arch dscnn`): calibrated on 512 images of
the TRAIN split (regenerated with scikit-learn's load_digits exactly as
tools/train_example.py splits it), evaluated on the test split: top-1 accuracy float / int8 /
int8 + auto-hp, and the output's cosine and SQNR against float.
zoo models (random weights, from `python tools/zoo.py export --formats legacy --out DIR`):
calibrated on 64 seeded normal inputs, evaluated on 32 others: output cosine / SQNR.
ocr_cls: a released, trained MobileNetV3 (PaddleOCR's direction classifier), calibrated from a
folder of synthetic text-line images (`calibrate --data FOLDER`'s path) and evaluated on others.
The example quantised by Paddle (tools/ptq_example.py, both PaddleSlim formats) is compared
with Paddle's own run of it: stage 1, and the NPU lowering on the model's own scales.
Every model also shows its floor: the float model with only its input rounded to the int8
grid (accuracy.input_floor). A random-weight network with BatchNorm after every layer can
be chaotic (mobilenet_v1: 1 % input noise -> cosine 0.95 in float): no int8 model reaches
more than its floor.
Every quantised model is run by onnxruntime through the primitives' function bodies (the
integer arithmetic); the NumPy simulator is checked bit-exact against it on the digits.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))


def _convert(model_dir, out):
    from paddle_npu import export

    export(os.path.join(model_dir, "model.pdmodel"), os.path.join(model_dir, "model.pdiparams"),
           save_file=out)
    return out


def _row(label, outputs, acc=None):
    """One line per model output (a model with several names each)."""
    extra = f"  top-1 {acc:.4f}" if acc is not None else ""
    return "\n".join(
        f"  {label:<26} output{'' if len(outputs) == 1 else ' ' + o['name']} cosine "
        f"{o['cosine']:.6f}  SQNR {o['sqnr_db']:6.2f} dB{extra if k == 0 else ''}"
        for k, o in enumerate(outputs))


UNTIL = None     # --until C: also the fewest int16 layers for the output cosine to reach C


def evaluate(name, onnx_path, calib, evalset, n_hp, labels=None, plot=None):
    from paddle_npu.npu.quant.accuracy import input_floor, plot_sqnr
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.promote import auto_hp

    table = calibrate(onnx_path, calib)
    floor = input_floor(onnx_path, table, evalset)
    res = auto_hp(onnx_path, table, evalset, n_hp)
    before, after = res["before"], res["after"]
    print(f"{name}: {len(before['layers'])} quantised layers" +
          (f"; promoted to int16: {', '.join(res['promoted'])}" if n_hp else ""))
    print(_row("floor (float, input int8)", floor))
    acc = {}
    if labels is not None:
        key = next(iter(before["_float"]))
        acc = {"float": float((before["_float"][key].argmax(-1) == labels).mean()),
               "int8": float((before["_quant"][key].argmax(-1) == labels).mean()),
               "hp": float((after["_quant"][key].argmax(-1) == labels).mean())}
        print(f"  {'float':<26} top-1 {acc['float']:.4f}")
    print(_row("int8", before["outputs"], acc.get("int8")))
    if n_hp:
        print(_row(f"int8 + {n_hp} layers int16", after["outputs"], acc.get("hp")))
    if UNTIL and min(o["cosine"] for o in before["outputs"]) < UNTIL:
        res_u = auto_hp(onnx_path, table, evalset, 0, until_cosine=UNTIL)
        print(_row(f"int8 + {len(res_u['promoted'])} of {len(before['layers'])} int16",
                   res_u["after"]["outputs"]) + f"  (--hp-until-cosine {UNTIL}"
              f"{'' if res_u['reached'] else ': not reached'})")
    if plot:
        print(f"  plot: {plot_sqnr({'int8': before, f'+{n_hp} int16': after}, plot)}")
    return res, acc


def trained(name, model_dir, out_dir, n_hp, check_simulator=False):
    """A model trained on the digits (model_dir/legacy + reference_io.npz): calibrated on 512
    train images, evaluated on the test split."""
    from train_example import load_digits_split

    from paddle_npu.npu.verification.reference import Reference
    import onnx_ir as ir
    import onnxruntime as ort

    onnx_path = _convert(os.path.join(model_dir, "legacy"), os.path.join(out_dir, f"{name}.onnx"))
    (xtr, _), _ = load_digits_split()
    ref = np.load(os.path.join(model_dir, "reference_io.npz"))
    res, _ = evaluate(name, onnx_path, {"x": xtr[:512]}, {"x": ref["in_x"]}, n_hp,
                      labels=ref["labels"], plot=os.path.join(out_dir, f"{name}_sqnr.png"))
    if check_simulator:      # the simulator against onnxruntime on the same quantised model
        proto = ir.serde.serialize_model(res["model"])
        sim = Reference(proto, None).run({"x": ref["in_x"]})[0]
        got = ort.InferenceSession(proto.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, {"x": ref["in_x"]})[0]
        print(f"  simulator vs onnxruntime (function bodies): bit-exact "
              f"{np.array_equal(sim, got)}")


def dscnn(out_dir, n_hp, epochs=6):
    """The MobileNet-v1-style depthwise-separable CNN, trained here on the digits (about a
    minute): the quantiser on that family with trained, not random, weights."""
    import subprocess

    model_dir = os.path.join(out_dir, "dscnn")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "train_example.py"), "--arch",
                    "dscnn", "--epochs", str(epochs), "--out", model_dir], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trained("dscnn", model_dir, out_dir, n_hp)


def paddle_quantised(out_dir):
    """The example quantised by Paddle itself (tools/ptq_example.py, both PaddleSlim formats)
    against Paddle's own run of it: stage 1, and the NPU lowering on the model's scales (no
    calibration)."""
    import subprocess

    import onnx_ir as ir
    import onnxruntime as ort

    from paddle_npu.npu.quant.qlower import quantized_lower

    def run(proto_bytes, x):
        return ort.InferenceSession(proto_bytes, providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]

    for fmt in ("onnx", "fake"):
        d = os.path.join(out_dir, f"ptq_{fmt}")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ptq_example.py"), "--out",
                        d, "--format", fmt], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        ref = np.load(os.path.join(d, "reference_io.npz"))
        x, want = ref["in_x"], ref["out_0"]
        path = _convert(d, os.path.join(out_dir, f"ptq_{fmt}.onnx"))
        with open(path, "rb") as f:
            stage1 = run(f.read(), x)
        m, _, _ = quantized_lower(path, None)
        npu = run(ir.serde.serialize_model(m).SerializeToString(), x)
        print(f"digits CNN quantised by Paddle ({fmt} format): Paddle's top-1 "
              f"{(want.argmax(1) == ref['labels']).mean():.4f}")
        for label, got in (("stage 1 (ONNX)", stage1), ("NPU int8, model's scales", npu)):
            cos = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
            same = (got.argmax(1) == want.argmax(1)).mean()
            print(f"  {label:<26} vs Paddle: cosine {cos:.6f}, max abs diff "
                  f"{np.abs(got - want).max():.3g}, same class {same:.4f}")


def _text_lines(folder, n, seed):
    """n synthetic text-line images (seeded): dark characters on a light background, every
    other one upside down, written as PNG files."""
    from PIL import Image, ImageDraw, ImageFont

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    try:
        font = ImageFont.load_default(size=18)
    except TypeError:                                   # Pillow < 10.1: the bitmap font
        font = ImageFont.load_default()
    chars = list("0123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz")
    for i in range(n):
        bg, fg = int(rng.integers(150, 256)), int(rng.integers(0, 100))
        img = Image.new("RGB", (int(rng.integers(120, 260)), 40), (bg, bg, bg))
        ImageDraw.Draw(img).text((int(rng.integers(0, 12)), int(rng.integers(4, 12))),
                                 "".join(rng.choice(chars, int(rng.integers(4, 9)))),
                                 fill=(fg, fg, fg), font=font)
        (img.rotate(180) if i % 2 else img).save(os.path.join(folder, f"{i:04d}.png"))
    return folder


def ocr_classifier(out_dir, n_hp):
    """A released, trained model: PaddleOCR's text-direction classifier (MobileNetV3, in
    tests/data/real_models), calibrated from a folder of synthetic text-line images through
    its own preprocessing ((pixel - 127.5) / 127.5, BGR) and evaluated on others. Its
    output is a softmax; the logits are the last matrix layer's output."""
    import onnx

    from paddle_npu import export
    from paddle_npu.npu.quant.calibrate import load_feeds
    from paddle_npu.preprocess import PreprocessSpec

    model_dir = os.path.join(ROOT, "tests", "data", "real_models", "ch_ppocr_mobile_v2.0_cls")
    path = os.path.join(out_dir, "ocr_cls.onnx")
    export(os.path.join(model_dir, "inference.pdmodel"),
           os.path.join(model_dir, "inference.pdiparams"), save_file=path)
    spec = PreprocessSpec(mean=(127.5,), std=(127.5,), model_pixel_format="bgr")
    proto = onnx.load(path)
    calib = load_feeds(proto, _text_lines(os.path.join(out_dir, "text_calib"), 128, 1),
                       preprocess=spec)
    evalset = load_feeds(proto, _text_lines(os.path.join(out_dir, "text_eval"), 64, 2),
                         preprocess=spec)
    res, _ = evaluate("ocr_cls (released, trained)", path, calib, evalset, n_hp)
    for label, rep in (("int8", res["before"]), (f"int8 + {n_hp} layers int16", res["after"])):
        last = rep["layers"][-1]
        print(f"  {label:<26} logits ({last['layer']}) cosine {last['cosine']:.6f}  SQNR "
              f"{last['sqnr_db']:6.2f} dB")


def zoo(zoo_dir, models, out_dir, n_hp):
    for name in models:
        d = os.path.join(zoo_dir, name, "legacy")
        if not os.path.isdir(d):
            print(f"{name}: not exported in {zoo_dir} (python tools/zoo.py export --models "
                  f"{name} --formats legacy --out {zoo_dir})")
            continue
        onnx_path = _convert(d, os.path.join(out_dir, f"{name}.onnx"))
        import onnx
        shape = [dim.dim_value or 1 for dim in
                 onnx.load(onnx_path).graph.input[0].type.tensor_type.shape.dim]
        iname = onnx.load(onnx_path).graph.input[0].name
        rng = np.random.default_rng(1)
        calib = {iname: rng.standard_normal([64] + shape[1:]).astype(np.float32)}
        evalset = {iname: rng.standard_normal([32] + shape[1:]).astype(np.float32)}
        evaluate(name, onnx_path, calib, evalset, n_hp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", default=None, help="a tools/zoo.py export directory")
    ap.add_argument("--models", default="lenet,resnet18,mobilenet_v1,squeezenet1_0")
    ap.add_argument("--auto-hp", type=int, default=2)
    ap.add_argument("--until", type=float, default=None, metavar="C",
                    help="for models below cosine C at int8: the fewest int16 layers "
                         "(--hp-until-cosine) that reach it")
    ap.add_argument("--no-dscnn", action="store_true",
                    help="skip training the depthwise-separable CNN")
    ap.add_argument("--out", default=None, help="where models and plots go (default: temp)")
    args = ap.parse_args(argv)
    global UNTIL
    UNTIL = args.until
    out = args.out or tempfile.mkdtemp(prefix="quant_report_")
    os.makedirs(out, exist_ok=True)
    trained("digits_cnn", os.path.join(ROOT, "examples", "digits_cnn"), out, args.auto_hp,
            check_simulator=True)
    paddle_quantised(out)
    ocr_classifier(out, args.auto_hp)
    if not args.no_dscnn:
        dscnn(out, args.auto_hp)
    if args.zoo:
        zoo(args.zoo, [m for m in args.models.split(",") if m], out, args.auto_hp)
    print(f"files in {out}")


if __name__ == "__main__":
    main()
