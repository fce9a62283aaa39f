"""Command line of the integer precision work: arguments to keywords for calibrate.py,
qlower.py, promote.py and accuracy.py. The parser of `paddle-npu --help` is built from this
module, so the library (numpy, onnx) is imported inside the commands that run it.

    paddle-npu calibrate MODEL --data CALIB.npz|IMAGES/ -o TABLE.json
              [--method mse|percentile|absmax]
              [--mean .. --std .. | --preprocess-config FILE]    (for a folder of images)
    paddle-npu lower MODEL -o OUT.onnx --quantize int8 --calibration TABLE.json
              [--precision PREC.txt] [--qdq QDQ.onnx] [--auto-hp N --data CALIB.npz]
    paddle-npu quant-report MODEL --calibration TABLE.json --data EVAL.npz [--auto-hp N]
              [--plot SQNR.png] [--json OUT.json]
"""
import argparse
import json
import os
from dataclasses import replace

from ...errors import ConversionError
from ...preprocess_args import add_arguments as add_preprocess_arguments
from ...preprocess_args import settings_given, spec_from_args
from ...shapes import parse_input_shapes
from ..passes.input_shapes import add_argument as add_input_shape_argument

HP_UNTIL_HELP = ("promote the fewest of the most sensitive layers to 16 bits for every "
                 "output's cosine to float to reach C on every sample, e.g. 0.99 (needs "
                 "--data; --auto-hp N caps how many)")

HP_RANK_HELP = ("how layers are ranked for promotion: measured (default; each layer alone at "
                "16 bits, one quantised run of the data per layer) or added (the noise each "
                "layer adds, from one run: for big models)")


def _wants_hp(args):
    return bool(args.auto_hp) or args.hp_until_cosine is not None


def add_quant_options(p):
    """The integer-precision flags, in a group of their own unless `p` is already a group
    (convert's stage-2 options: argparse deprecates nesting groups)."""
    g = p.add_argument_group("integer precision") if isinstance(p, argparse.ArgumentParser) \
        else p
    g.add_argument("--quantize", choices=("int8", "int16"), default=None,
                   help="lower to integer primitives: weights per output channel, "
                        "activations per tensor, at this default width (`_hp` layers and "
                        "those in --precision at 16 bits)")
    g.add_argument("--calibration", metavar="TABLE",
                   help="the calibration table (`paddle-npu calibrate`); not needed for a "
                        "model that is already quantised (QDQ), whose scales are kept")
    g.add_argument("--precision", metavar="FILE",
                   help="per-layer precision: lines `LAYER int16` (or JSON {layer: int16})")
    g.add_argument("--qdq", metavar="OUT.onnx",
                   help="also write the model as standard QDQ ONNX with the same scales")
    g.add_argument("--auto-hp", type=int, default=0, metavar="N",
                   help="promote the N most sensitive layers to 16 bits (needs --data)")
    g.add_argument("--hp-until-cosine", type=float, default=None, metavar="C",
                   help=HP_UNTIL_HELP)
    g.add_argument("--hp-rank", choices=("measured", "added"), default="measured",
                   help=HP_RANK_HELP)
    g.add_argument("--data", metavar="NPZ",
                   help="inputs for --auto-hp's sensitivity run (keyed by input name); on a "
                        "target with ADCs, also what their ranges are calibrated on")


def add_commands(sub):
    p = sub.add_parser("calibrate", help="record activation ranges for integer lowering",
                       description="Run a calibration set through a float ONNX model and "
                                   "write per-tensor ranges (min/max, absmax, 99.99th "
                                   "percentile, MSE-optimal threshold) as an editable JSON "
                                   "table; `threshold` is what int8 uses.")
    p.add_argument("model", help="the float .onnx model")
    p.add_argument("--data", required=True, metavar="NPZ_OR_FOLDER",
                   help="calibration inputs: an .npz keyed by input name (or in_<name>) "
                        "with a leading sample axis, or a folder of images (png, jpg, ...) "
                        "with the model's normalisation given below")
    p.add_argument("-o", "--output", required=True, help="the table to write (.json)")
    p.add_argument("--method", choices=("mse", "percentile", "absmax"), default="mse",
                   help="which statistic becomes `threshold` (default mse)")
    p.add_argument("--limit", type=int, default=None, help="use the first N samples only")
    add_preprocess_arguments(p, fuse=False)
    add_input_shape_argument(p)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("quant-report", help="layer-by-layer float vs quantised accuracy",
                       description="Quantise MODEL with TABLE, run float and quantised on the "
                                   "data and print per-layer cosine / SQNR / max abs diff, "
                                   "worst layers first, with a suggestion per layer.")
    p.add_argument("model", help="the float .onnx model")
    p.add_argument("--calibration", metavar="TABLE", help="the calibration table")
    p.add_argument("--data", required=True, metavar="NPZ", help="evaluation inputs (.npz)")
    p.add_argument("--labels", default="labels",
                   help="npz key of class labels: also print top-1 accuracy (default labels)")
    p.add_argument("--quantize", choices=("int8", "int16"), default="int8")
    p.add_argument("--target", default=None, help="target preset or file")
    p.add_argument("--plan", default="packed")
    p.add_argument("--precision", metavar="FILE", help="per-layer precision table")
    p.add_argument("--auto-hp", type=int, default=0, metavar="N",
                   help="also promote the N most sensitive layers to 16 bits and compare "
                        "(sensitivity: the output's SQNR with each layer alone at 16 bits)")
    p.add_argument("--hp-until-cosine", type=float, default=None, metavar="C",
                   help=HP_UNTIL_HELP)
    p.add_argument("--hp-rank", choices=("measured", "added"), default="measured",
                   help=HP_RANK_HELP)
    p.add_argument("--write-precision", metavar="FILE",
                   help="write the promoted layers as a precision table")
    p.add_argument("--plot", metavar="PNG", help="plot per-layer SQNR")
    p.add_argument("--top", type=int, default=None, help="show only the N worst layers")
    p.add_argument("--adc-until-cosine", type=float, default=None, metavar="C",
                   help="on a target with ADCs: read the fewest layers (the largest drop "
                        "first) through finer ADCs (--adc-raise-to bits) for every output's "
                        "cosine to float to reach C; with --hp-until-cosine, where every "
                        "layer's ADC raised does not reach it, layers go to 16 bits on top")
    p.add_argument("--adc-raise-to", type=int, default=8, metavar="BITS",
                   help="the ADC bits --adc-until-cosine gives a layer (default 8)")
    p.add_argument("--noise-draws", type=int, default=0, metavar="N",
                   help="on a target with cell noise ([noise]) and ADCs: each output's "
                        "accuracy over N seeded draws of the cells' errors")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON")
    add_input_shape_argument(p)
    p.set_defaults(func=cmd_quant_report)


def _shaped(args):
    """The model with its input sizes fixed as --input-shape gives them; the data's samples
    go through in the batches it then accepts (samples.run_batches)."""
    shapes = parse_input_shapes(args.input_shape)
    if not shapes:
        return args.model
    from ..passes.common import with_input_shapes  # the library loads when a command runs
    return with_input_shapes(args.model, shapes)


def _bits(args):
    return 16 if args.quantize == "int16" else 8


def lower_for(args):
    """A `lower`-compatible function doing the quantised lowering with args' options."""
    if _wants_hp(args) and not args.data:
        raise ConversionError("--auto-hp / --hp-until-cosine need --data (inputs to "
                              "measure on)")

    def _lower(source, target=None, plan="packed", preprocess=None, **kw):
        from ...onnx_io import save_proto  # the library loads when a command runs
        from .accuracy import render
        from .promote import auto_hp
        from .qdq import export_qdq
        from .qlower import quantized_lower

        precision = args.precision
        if _wants_hp(args):
            result = auto_hp(source, args.calibration, args.data, args.auto_hp,
                             _bits(args), target, plan, precision,
                             until_cosine=args.hp_until_cosine, rank=args.hp_rank,
                             adc_data=args.data, **kw)
            model, report, records = result["model"], result["report"], result["records"]
            print(f"{_hp_label(args)}: 16-bit layers "
                  f"{', '.join(result['promoted']) or '(none)'}")
            print(render(result["after"]))
        else:
            model, report, records = quantized_lower(source, args.calibration, _bits(args),
                                                     target, plan, precision, preprocess,
                                                     adc_data=args.data, **kw)
        from .qlower import float_units_of, unit_records_of
        units = unit_records_of(model)
        n16, u16 = (sum(r["bits"] == 16 for r in rs) for rs in (records, units))
        print(f"quantised {len(records)} matrix layers: {len(records) - n16} at int8, "
              f"{n16} at int16" + (f"; {len(units)} lookup tables / written arrays: "
                                   f"{len(units) - u16} at int8, {u16} at int16"
                                   if units else ""))
        for unit in float_units_of(model):
            print(f"kept in float: {unit['layer']}: {unit['why']}")
        if args.qdq:
            # written on the graph this lowering lowered: the options that shape it
            shaping = {k: kw[k] for k in ("marks", "enable", "disable", "input_shape")
                       if k in kw}
            save_proto(export_qdq(source, records, target, preprocess, **shaping), args.qdq)
            print(f"wrote {args.qdq} (QDQ)")
        return model, report
    return _lower


def readout_report(args, proto, feeds, chip_model, chip_rep, shapes):
    """On a target whose arrays read out through ADCs: per layer, the integer plan on ideal
    arrays and on the chip (cosine to float, SQNR) and how often the chip's ADCs saturate,
    worst drop first; printed, and returned for the JSON (None on an ideal target)."""
    import onnx_ir as ir    # the library loads when a command runs

    from ..chip.target import load_target
    from ..graph import source
    from ..verification.reference import Reference
    from .accuracy import layer_report
    from .qlower import quantized_lower

    target = load_target(args.target)
    if not (target.cell_bits or target.dac_bits or target.adc_bits):
        return None
    ideal = replace(target, cell_bits=0, dac_bits=0, adc_bits=0)
    m, _, records = quantized_lower(args.model, args.calibration, _bits(args), ideal,
                                    args.plan, args.precision, input_shape=shapes)
    ideal_rep = layer_report(proto, m, feeds, records)
    ref = Reference(ir.serde.serialize_model(chip_model), target)
    ref.array.adc_clips = {}
    for batch in feeds.batches(1):
        ref.run(batch)
    clips = {}
    for node in chip_model.graph:
        counted = ref.array.adc_clips.get(node.name)
        if counted is not None:
            c = clips.setdefault(source(node), [0, 0])
            c[0] += counted[0]
            c[1] += counted[1]
    by_layer = {lay["layer"]: lay for lay in ideal_rep["layers"]}
    rows = []
    for lay in chip_rep["layers"]:
        i = by_layer.get(lay["layer"])
        if i is None:
            continue
        clipped, total = clips.get(lay["layer"], (0, 0))
        rows.append({"layer": lay["layer"], "ideal_cosine": i["cosine"],
                     "chip_cosine": lay["cosine"], "ideal_sqnr_db": i["sqnr_db"],
                     "chip_sqnr_db": lay["sqnr_db"],
                     "adc_clipped": clipped / total if total else 0.0})
    rows.sort(key=lambda r: r["ideal_sqnr_db"] - r["chip_sqnr_db"], reverse=True)
    cells = f"{target.cell_bits}-bit cells" if target.cell_bits else "a weight a cell"
    inputs = f"inputs {target.dac_bits} bit(s) a cycle" if target.dac_bits else "whole inputs"
    adcs = f"{target.adc_bits}-bit ADCs" if target.adc_bits else "exact read-out"
    print(f"\nthe read-out of {target.name} ({cells}, {inputs}, {adcs}) against ideal "
          f"arrays, the largest drop first:")
    print(f"{'layer':<34} {'ideal cos':>10} {'chip cos':>10} {'ideal dB':>9} {'chip dB':>8} "
          f"{'ADC clips':>10}")
    for r in rows[:args.top]:
        print(f"{r['layer'][-34:]:<34} {r['ideal_cosine']:>10.6f} {r['chip_cosine']:>10.6f} "
              f"{r['ideal_sqnr_db']:>9.2f} {r['chip_sqnr_db']:>8.2f} {r['adc_clipped']:>10.2%}")
    outs = [{"name": a["name"], "ideal_cosine": b["cosine"], "chip_cosine": a["cosine"]}
            for a, b in zip(chip_rep["outputs"], ideal_rep["outputs"])]
    for o in outs:
        print(f"output {o['name']}: cosine {o['ideal_cosine']:.6f} on ideal arrays, "
              f"{o['chip_cosine']:.6f} on the chip")
    return {"layers": rows, "outputs": outs}


def raised_adc_report(args, feeds, rep, readout, kw, lowering):
    """The --adc-until-cosine search (promote.raise_adc) on the read-out report's order,
    and what it costs on the chip against `lowering` (the plan's Report), printed;
    returned for the JSON."""
    from .promote import raise_adc  # the library loads when a command runs

    order = [r["layer"] for r in readout["layers"]]
    res = raise_adc(args.model, args.calibration, feeds, order, rep["_float"],
                    args.adc_until_cosine, args.adc_raise_to, _bits(args),
                    precision=args.precision, **kw)
    how = "reached" if res["reached"] else "NOT reached even with every layer"
    print(f"\n--adc-until-cosine {args.adc_until_cosine}: {len(res['raised'])} of "
          f"{len(order)} layers read through {args.adc_raise_to}-bit ADCs, worst output "
          f"cosine {res['cosine']:.6f} ({how}): {', '.join(res['raised']) or '(none)'}")
    return {"raised": res["raised"], "bits": args.adc_raise_to, "reached": res["reached"],
            "cosine": res["cosine"], "cost": chip_cost(lowering, res["report"])}


def chip_cost(before, after):
    """What a search's plan costs on the chip against the plan's own (Reports before and
    after), printed; None (and nothing printed) where the lowering has no chip estimate."""
    from ..chip.estimate import cost_change  # the library loads when a command runs

    if before.chip is None or after.chip is None:
        return None
    cost, line = cost_change(before.chip, after.chip)
    print(f"  cost on {after.target['name']}: {line}")
    return cost


def noise_report(args, feeds, chip_model, rep, labels):
    """Each output's cosine to float (mean over the samples) and top-1 where labels are
    given, over `--noise-draws` seeded draws of the cells' programming and read errors
    (the NumPy reference run once per draw); printed and returned for the JSON."""
    import numpy as np      # the library loads when a command runs
    import onnx_ir as ir

    from ..chip.target import load_target
    from ..ops.readout import Noise
    from ..verification.reference import Reference

    target = load_target(args.target)
    if not (target.programming_error or target.read_noise) or not target.adc_bits:
        raise ConversionError(f"--noise-draws: target {target.name} has no cell noise "
                              f"([noise] programming_error / read_noise) or no ADCs "
                              f"([precision] adc_bits) to read noisy sums")
    proto = ir.serde.serialize_model(chip_model)
    floats = rep["_float"]
    draws = []
    for seed in range(args.noise_draws):
        ref = Reference(proto, target)
        ref.array.noise = Noise(seed, target.programming_error, target.read_noise)
        got = [ref.run(batch) for batch in feeds.batches(1)]
        per_output = {}
        for k, name in enumerate(floats):
            y = np.concatenate([g[k] for g in got])
            f = np.asarray(floats[name]).reshape(y.shape)
            a, b = y.reshape(len(y), -1).astype(np.float64), f.reshape(len(f), -1)
            cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) *
                                               np.linalg.norm(b, axis=1), 1e-30)
            per_output[name] = {"cosine": float(cos.mean())}
            if labels is not None and k == 0:
                per_output[name]["top1"] = _accuracy(y, labels)
        draws.append(per_output)
    print(f"\nnoise: cells programmed with sigma {target.programming_error}, read with "
          f"sigma {target.read_noise} (of a cell's range), {args.noise_draws} draws:")
    summary = {}
    for name in floats:
        cos = np.array([d[name]["cosine"] for d in draws])
        summary[name] = {"cosine_mean": float(cos.mean()), "cosine_std": float(cos.std()),
                         "cosine_worst": float(cos.min())}
        line = (f"output {name}: cosine {cos.mean():.6f} +- {cos.std():.6f} (worst draw "
                f"{cos.min():.6f})")
        if "top1" in draws[0][name]:
            top1 = np.array([d[name]["top1"] for d in draws])
            summary[name].update(top1_mean=float(top1.mean()), top1_worst=float(top1.min()))
            line += f"; top-1 {top1.mean():.4f} (worst draw {top1.min():.4f})"
        print(line)
    return {"draws": draws, "outputs": summary}


def _hp_label(args):
    parts = [f"--auto-hp {args.auto_hp}"] if args.auto_hp else []
    if args.hp_until_cosine is not None:
        parts.append(f"--hp-until-cosine {args.hp_until_cosine}")
    return " ".join(parts)


def _accuracy(outs, labels):
    import numpy as np      # the library loads when a command runs
    return float((np.asarray(outs).argmax(-1) == labels).mean())


def cmd_calibrate(args):
    from .calibrate import calibrate, save_table  # the library loads when a command runs

    folder = os.path.isdir(args.data)
    if folder and not settings_given(args):     # no silent "pixels 0-255 as they are"
        raise ConversionError(f"{args.data}: calibrating on images needs the model's "
                              "normalisation: --mean/--std (or --scale; --std 1 for raw "
                              "0-255 pixels) or --preprocess-config")
    spec = spec_from_args(args, enabled=folder, needs="--data FOLDER")
    table = calibrate(_shaped(args), args.data, method=args.method, limit=args.limit,
                      preprocess=spec, progress="calibrate")
    save_table(table, args.output)
    print(f"calibrated {len(table['tensors'])} tensors on {table['samples']} samples "
          f"(threshold = {args.method}); wrote {args.output}")
    if table["non_finite"]:
        names = list(table["non_finite"])
        print(f"left out {len(names)} tensors that took NaN or infinite values (no scale "
              f"fits them): {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}")
    return 0


def cmd_quant_report(args):
    from ...compare import read_npz  # the library loads when a command runs
    from ...onnx_io import load_proto
    from ...outputs import write_text
    from .accuracy import input_floor, layer_report, plot_sqnr, render
    from .promote import auto_hp
    from .qlower import quantized_lower
    from .samples import open_samples

    proto = load_proto(_shaped(args))
    feeds = open_samples(proto, args.data)
    arrays = read_npz(args.data)
    labels = arrays[args.labels] if args.labels in arrays.files else None
    # lowered as `lower --input-shape` lowers: the pipeline fixes the sizes of the model it
    # loaded (and upgraded), not of the float reference written back at its own opset
    shapes = parse_input_shapes(args.input_shape) or None
    kw = {"target": args.target, "plan": args.plan, "input_shape": shapes,
          "adc_data": feeds}
    m, lowering, records = quantized_lower(args.model, args.calibration, _bits(args),
                                           args.target, args.plan, args.precision,
                                           input_shape=shapes, adc_data=feeds)
    rep = layer_report(proto, m, feeds, records)
    print(render(rep, args.top))
    floor = input_floor(proto, args.calibration, feeds, _bits(args))
    for o in floor:
        given = f" ({o['judged']})" if "judged" in o else ""
        print(f"floor: the float model with only its inputs rounded to the {args.quantize} "
              f"grid: output {o['name']}{given} cosine {o['cosine']:.6f}, SQNR "
              f"{o['sqnr_db']:.2f} dB")
    out = {"layers": rep["layers"], "outputs": rep["outputs"], "input_floor": floor}
    readout = readout_report(args, proto, feeds, m, rep, shapes)
    if readout is not None:
        out["readout"] = readout
    if args.adc_until_cosine is not None:
        if readout is None:
            raise ConversionError("--adc-until-cosine: the target's arrays have no ADCs "
                                  "([precision] adc_bits)")
        out["adc_raised"] = raised_adc_report(args, feeds, rep, readout, kw, lowering)
    if args.noise_draws:
        out["noise"] = noise_report(args, feeds, m, rep, labels)
    reports = {args.quantize: rep}
    if labels is not None and rep["_float"]:
        name = next(iter(rep["_float"]))
        out["accuracy"] = {"float": _accuracy(rep["_float"][name], labels),
                           args.quantize: _accuracy(rep["_quant"][name], labels)}
        print(f"top-1 accuracy: float {out['accuracy']['float']:.4f}, {args.quantize} "
              f"{out['accuracy'][args.quantize]:.4f}")
    raised = out.get("adc_raised")
    if _wants_hp(args) and raised is not None and raised["reached"]:
        print(f"{_hp_label(args)}: no layer promoted, the raised ADCs reach "
              f"{args.adc_until_cosine}")
    elif _wants_hp(args):
        if raised is not None:      # int16 layers on top of every ADC raised
            kw = {**kw, "adc_bits": {name: raised["bits"] for name in raised["raised"]}}
        res = auto_hp(args.model, args.calibration, feeds, args.auto_hp, _bits(args),
                      precision=args.precision, until_cosine=args.hp_until_cosine,
                      rank=args.hp_rank, **kw)
        after = res["after"]
        print(f"\n{_hp_label(args)}: promoted to int16: "
              f"{', '.join(res['promoted']) or '(none)'}")
        if res["reached"] is False:
            print(f"cosine {args.hp_until_cosine} not reached even with "
                  f"{len(res['promoted'])} layers at int16")
        print(render(after, args.top))
        out["auto_hp"] = {"promoted": res["promoted"], "layers": after["layers"],
                          "outputs": after["outputs"], "reached": res["reached"],
                          "cost": chip_cost(lowering, res["report"])}
        reports[f"{args.quantize} + {len(res['promoted'])} at int16"] = after
        if labels is not None and after["_quant"]:
            name = next(iter(after["_quant"]))
            out["auto_hp"]["accuracy"] = _accuracy(after["_quant"][name], labels)
            print(f"top-1 accuracy with auto-hp: {out['auto_hp']['accuracy']:.4f}")
        if args.write_precision:
            lines = ["# layers promoted by --auto-hp (paddle-npu quant-report)"]
            lines += [f"{name} {p}" for name, p in res["precision"].items()]
            write_text(args.write_precision, "\n".join(lines) + "\n")
            print(f"wrote {args.write_precision}")
    if args.plot:
        written = plot_sqnr(reports, args.plot)
        note = "" if written == args.plot else " (matplotlib is not installed: SVG instead)"
        print(f"wrote {written}{note}")
    if args.json:
        write_text(args.json, json.dumps(out, indent=1))
    return 0
