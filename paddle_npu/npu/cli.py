"""The stage-2 sub-commands of `paddle-npu`: lower, verify, targets (and convert --npu).

Arguments become keywords of the library (pipeline.lower, verifier.verify, ...), which is
imported inside the commands that run it: `paddle-npu --help` builds its parser from here.
"""
import json
import sys
import time

from ..preprocess_args import add_arguments as add_preprocess_arguments
from ..preprocess_args import spec_from_args
from ..shapes import parse_input_shapes
from .chip.mapping import FITS
from .chip.target import DEFAULT, list_targets
from .chip.tiling import PLANS
from .emulation import DEFAULT as DEFAULT_EMULATION
from .emulation import EMULATIONS
from .passes.input_shapes import add_argument as add_input_shape_argument
from .quant.cli import add_commands as add_quant_commands
from .quant.cli import add_quant_options, lower_for


def add_commands(sub):
    """Register `lower`, `verify` and `targets` on the main parser's sub-parsers."""
    p = sub.add_parser("lower", help="lower an ONNX model to NPU primitives for a target",
                       description="Rewrite an ONNX model into the NPU operator set "
                                   "(Im2Col, VMM, AddInTile, DimTransform) plus what the "
                                   "target's vector unit and CPU run; print the cost report.")
    p.add_argument("model", help="the .onnx model to lower")
    p.add_argument("-o", "--output", required=True, help="the lowered .onnx to write")
    add_lowering_options(p)
    add_input_shape_argument(p)
    p.add_argument("--verify", action="store_true",
                   help="also run `verify` on the result (seeded input)")
    add_preprocess_arguments(p)
    p.set_defaults(func=cmd_lower)

    p = sub.add_parser("verify", help="compare a model and its lowered form",
                       description="onnxruntime on MODEL vs onnxruntime on LOWERED vs the NumPy "
                                   "reference of LOWERED, on the same seeded (or given) input: "
                                   "max abs diff, relative diff and cosine per output. A float "
                                   "plan agrees when both runs of LOWERED are no farther from "
                                   "MODEL computed in float64 than --factor times onnxruntime's "
                                   "float32 run of MODEL is, per output. Outputs "
                                   "computed from the picks of a TopK, ArgMax or ArgMin (rows "
                                   "taken with Gather / GatherElements, and what follows) are "
                                   "judged given MODEL's picks, fed to LOWERED in place of its "
                                   "own, since rounding may swap nearly tied candidates; the "
                                   "scores each selection ranks are judged like an output, and "
                                   "every pick LOWERED makes on its own that differs must be a "
                                   "near-tie: within twice the largest difference of the two "
                                   "models' scores.")
    p.add_argument("model", help="the model before lowering")
    p.add_argument("lowered", help="the lowered model")
    p.add_argument("--target", default=DEFAULT, help="the target it was lowered for "
                                                     "(array size of the NumPy reference)")
    p.add_argument("--inputs", metavar="NPZ",
                   help="inputs to use (in_<name> or <name> keys); outputs recorded in it "
                        "(out_<i> or <name>), e.g. Paddle's in float64, judge a float plan "
                        "beyond the model's float-noise floor only where MODEL cannot be run "
                        "in float64 (not when some output is computed from picks: their "
                        "picks are not recorded)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    p.add_argument("--factor", type=float, default=4.0,
                   help="how many times as far from MODEL computed in float64 as MODEL's own "
                        "float32 run a float plan may be (default 4)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="largest relative diff accepted between onnxruntime and the NumPy "
                        "reference on an integer plan's float outputs, and for a float plan "
                        "where MODEL cannot be run in float64 (default 1e-5)")
    p.add_argument("--min-cosine", type=float, default=0.99,
                   help="smallest output cosine to float accepted for an integer plan "
                        "(default 0.99); its integer tensors must also match the NumPy "
                        "reference bit for bit, and the float ops after (or between) its "
                        "integer layers within --tolerance of it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_input_shape_argument(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("run-segments", help="run a segmented plan (lower --segments DIR)",
                       description="Run the per-segment ONNX models of DIR in the order of "
                                   "DIR/manifest.json, passing tensors between them.")
    p.add_argument("dir", help="the directory `--segments` wrote")
    p.add_argument("--inputs", required=True, metavar="NPZ",
                   help="the model's inputs, keyed by input name")
    p.add_argument("--outputs", required=True, metavar="NPZ",
                   help="where to write the model's outputs, keyed by output name")
    p.set_defaults(func=cmd_run_segments)

    p = sub.add_parser("targets", help="list the built-in NPU targets",
                       description="The built-in target presets; --target also takes a .json "
                                   "or .toml file with the same fields (see `--json`).")
    p.add_argument("--json", action="store_true", help="the full descriptions as JSON")
    p.add_argument("--ops", action="store_true", help="also list the NPU primitives' schemas")
    p.set_defaults(func=cmd_targets)

    add_quant_commands(sub)     # calibrate, quant-report


def add_lowering_options(p, target_flag="--target"):
    """--target (or convert's --npu, which also switches stage 2 on), --plan, --report."""
    if target_flag == "--target":
        p.add_argument("--target", default=DEFAULT,
                       help=f"a preset (`paddle-npu targets`) or a target .json/.toml "
                            f"(default {DEFAULT})")
    else:
        p.add_argument(target_flag, dest="target", default=None, metavar="TARGET",
                       help="also lower the result for this NPU target (a preset or a "
                            ".json/.toml file): the file written is the lowered model")
    p.add_argument("--plan", choices=PLANS, default="packed",
                   help="how Conv weights are cut into array tiles (default packed)")
    p.add_argument("--fit", choices=FITS, default="groups",
                   help="a model needing more arrays than the target has: run it in groups, "
                        "the arrays reprogrammed between them (default), or refuse it, "
                        "naming the smallest chip that holds it")
    p.add_argument("--balance", action="store_true",
                   help="where the vector unit sets the pace and the chip has arrays to "
                        "spare, put the depthwise layers with the most vector work on "
                        "arrays instead (the lowering is repeated for a few choices; the "
                        "fastest on the chip is kept)")
    p.add_argument("--report", metavar="JSON", help="write the cost report as JSON too")
    p.add_argument("--progress", action="store_true",
                   help="one line per lowering stage on stderr (the default on a terminal; "
                        "never with convert's -q)")
    p.add_argument("--emulation", choices=EMULATIONS, default=DEFAULT_EMULATION,
                   help="the function bodies onnxruntime runs the saved model with: exact "
                        "sums, as the NumPy reference (default), or float32 sums, faster; "
                        "the NPU program is the same (`verify` reports how far each is)")
    p.add_argument("--report-svg", metavar="FILE",
                   help="draw the whole-model picture too: layers coloured by device, "
                        "segments boxed (SVG)")
    add_quant_options(p)        # --quantize, --calibration, ...
    g = p        # restructuring, placement marks and segments (NNIE-style); `p` may be a group
    g.add_argument("--restruct", metavar="PASS,...", default="",
                   help="restruct passes to run besides the target's own "
                        "(bn_collapse, merge_linear, l2norm, fc_to_conv)")
    g.add_argument("--no-restruct", metavar="PASS,...", default="",
                   help="restruct passes to switch off")
    g.add_argument("--cpu-nodes", metavar="GLOB,...", default="",
                   help="run the nodes whose names match on the CPU (as a `_cpu` suffix does)")
    g.add_argument("--hp-nodes", metavar="GLOB,...", default="",
                   help="run the nodes whose names match at 16 bits (as `_hp`; compile mode 2)")
    g.add_argument("--cpu-ops", metavar="TYPE,...", default="",
                   help="run every node of these op types on the CPU")
    g.add_argument("--compile-mode", type=int, default=None, metavar="0|1|2",
                   help="0: all at the target's precision (default), 1: all at 16 bits, "
                        "2: user-defined (`_hp` / --hp-nodes at 16 bits)")
    g.add_argument("--marks", metavar="FILE", help="marks from a .json/.toml file "
                   "(cpu_nodes, hp_nodes, cpu_ops, compile_mode)")
    g.add_argument("--segments", metavar="DIR",
                   help="also write one ONNX model per segment and DIR/manifest.json")


def _lower_and_save(source, output, args, quiet=False):
    from ..api import save_model  # the library loads when a command runs
    from ..outputs import write_text
    from .passes.marks import marks_from
    from .pipeline import lower

    marks = marks_from(args.marks, args.cpu_nodes, args.hp_nodes, args.cpu_ops,
                       args.compile_mode)
    split = lambda text: [t.strip() for t in (text or "").split(",") if t.strip()]  # noqa: E731
    if args.quantize:                            # the integer lowering
        lower = lower_for(args)                  # noqa: F811
    show = None
    if not quiet and not getattr(args, "quiet", False) and (args.progress or sys.stderr.isatty()):
        from ..progress import stage_printer
        show = stage_printer("lower")
    named = source if isinstance(source, str) else getattr(args, "model", None)
    model, report = lower(source, args.target, args.plan,
                          preprocess=spec_from_args(args, args.target), marks=marks,
                          enable=split(args.restruct), disable=split(args.no_restruct),
                          input_shape=parse_input_shapes(args.input_shape), progress=show,
                          emulation=args.emulation, fit=args.fit, name=named,
                          balance=args.balance)
    start = time.perf_counter()
    save_model(model, output)
    if show is not None:
        show("save", time.perf_counter() - start)
    if args.segments:
        from .report.segments import emit_segments  # (start-up time, as above)
        manifest = emit_segments(model, report, args.segments)
        if not quiet:
            print(f"wrote {len(manifest['segments'])} segments to {args.segments} "
                  f"({' -> '.join(s['device'].upper() for s in manifest['segments'])})")
    if not quiet:
        print(report.render())
        print(f"wrote {output}")
    if args.report:
        write_text(args.report, json.dumps(report.as_dict(), indent=1))
    if getattr(args, "report_svg", None):
        from .report.svg import render_svg  # (start-up time, as above)
        write_text(args.report_svg, render_svg(report))
    return model


def cmd_lower(args):
    _lower_and_save(args.model, args.output, args)
    if args.verify:
        from .passes.preprocess_fusion import fused_reference  # the library loads when it runs
        # as lower did: the sizes fixed, then raw uint8 images fused in
        original = fused_reference(args.model, spec_from_args(args, args.target),
                                   parse_input_shapes(args.input_shape))
        # An integer plan is checked on the inputs it is meant for when --data gives them
        # (random ones fall outside the calibrated ranges); raw images have none.
        data = args.data if args.quantize and not getattr(args, "fuse_preprocess", False) \
            else None
        return _print_verification(original, args.output, args.target, data, 0, 1e-5, False)
    return 0


def lower_converted(onnx_bytes, output, args):
    """`convert --npu NAME`: the stage-1 model (bytes) lowered and written to `output`."""
    _lower_and_save(onnx_bytes, output, args, quiet=getattr(args, "quiet", False))


def _print_verification(model, lowered, target, inputs, seed, tolerance, as_json,
                        input_shape=None, min_cosine=0.99, factor=None):
    from ..compare import load_reference  # the library loads when a command runs
    from ..onnx_io import load_header
    from .verification.verifier import render, verify

    feeds = recorded = None
    if inputs:
        graph = load_header(model).graph
        inits = {i.name for i in graph.initializer}
        feeds, recorded = load_reference(inputs, [i.name for i in graph.input
                                                  if i.name not in inits],
                                         [o.name for o in graph.output])
    result = verify(model, lowered, target, feeds=feeds, seed=seed, tolerance=tolerance,
                    input_shape=input_shape, min_cosine=min_cosine,
                    recorded=recorded, **({} if factor is None else {"factor": factor}))
    print(json.dumps(result, indent=1) if as_json else render(result))
    if result["integer"] and not result["ok"] and not inputs and not as_json:
        print("(on seeded random inputs, which an integer plan's calibrated ranges may not "
              "cover: give representative ones with --data / --inputs)")
    return 0 if result["ok"] else 1


def cmd_verify(args):
    return _print_verification(args.model, args.lowered, args.target, args.inputs, args.seed,
                               args.tolerance, args.json,
                               parse_input_shapes(args.input_shape), args.min_cosine,
                               args.factor)


def cmd_targets(args):
    from .ops import all_primitives  # the library loads when a command runs

    targets = list_targets()
    if args.json:
        out = {"targets": [t.as_dict() for t in targets], "default": DEFAULT}
        if args.ops:
            out["primitives"] = [p.schema() for p in all_primitives().values()]
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'name':<18} {'arrays':>6} {'of':>8} {'bits w/a':>9}  description")
    for t in targets:
        mark = " (default)" if t.name == DEFAULT else ""
        print(f"{t.name:<18} {t.array_count or 'any':>6} {f'{t.rows}x{t.cols}':>8} "
              f"{f'{t.weight_bits}/{t.activation_bits}':>9}  {t.description}{mark}")
    print("(the NPU primitives and ops of each: --json)")
    if args.ops:
        for p in all_primitives().values():
            s = p.schema()
            print(f"\n{s['domain']}::{s['op_type']} (version {s['version']})\n  {s['doc']}")
            for kind in ("inputs", "outputs"):
                for a in s[kind]:
                    flags = "".join(f" [{f}]" for f in ("optional", "variadic") if a.get(f))
                    print(f"  {kind[:-1]:<7} {a['name']}{flags}: {a['doc']}")
            for a in s["attributes"]:
                default = "required" if a["default"] is None else f"default {a['default']}"
                print(f"  attr    {a['name']} ({a['type']}, {default}): {a['doc']}")
    return 0


def cmd_run_segments(args):
    import numpy as np      # the library loads when a command runs

    from ..compare import load_reference
    from ..outputs import write_with
    from .report.segments import load_manifest, run_segments

    # (keys `in_<name>` or `<name>`, as verify and calibrate read them)
    feeds, _ = load_reference(args.inputs, load_manifest(args.dir)["model"]["inputs"], [])
    trace = []
    outs = run_segments(args.dir, feeds, trace)
    def save(path):                 # a file object: np.savez would add ".npz" to a name
        with open(path, "wb") as f:
            np.savez(f, **outs)
    write_with(args.outputs, save)
    for index, device, seconds in trace:
        print(f"  #{index} {device.upper():<4} {seconds * 1000:8.2f} ms")
    print(f"wrote {args.outputs} ({', '.join(outs)})")
    return 0
