"""The `paddle-npu` command line: arguments to keywords of the library, which is imported
inside the sub-commands that run it (`paddle-npu --help` must stay quick)."""
import argparse
import json
import logging
import os
import sys
import time
import traceback

from . import __version__
from .errors import ConversionError, PaddleFormatError
from .npu.cli import add_commands, add_lowering_options, lower_converted
from .outputs import check_output, check_output_dir
from .preprocess import describe
from .preprocess_args import add_arguments as add_preprocess_arguments
from .preprocess_args import spec_from_args
from .shapes import parse_input_shapes, parse_shape_dict


def _cmd_inspect(args):
    from .frontend import load  # the library loads when a command runs
    from .inspect import render, summarize

    program = load(args.model, args.params)
    summary = summarize(program)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


def _flag(text):
    """paddle2onnx's boolean flags take a value: --enable_onnx_checker True."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


_GENERIC_STEMS = ("inference", "model", "__model__", "")


def default_output(model):
    """The .onnx name `convert` writes without -o: the model's own name (its folder's when the
    file has Paddle's generic name), in the current directory."""
    path = os.path.normpath(os.path.abspath(model))
    stem = os.path.splitext(os.path.basename(path))[0] if not os.path.isdir(path) \
        else os.path.basename(path)
    if stem in _GENERIC_STEMS:
        stem = os.path.basename(os.path.dirname(path)) or "model"
    return stem + ".onnx"


def _prepare_convert(args):
    """Resolve MODEL / --model_dir, the params and the output name (flags that contradict
    each other are refused, not silently chosen between)."""
    if args.model and args.model_dir:
        raise ConversionError(f"both MODEL ({args.model}) and --model_dir ({args.model_dir}) "
                              "were given; give one")
    if args.output and args.save_file and args.output != args.save_file:
        raise ConversionError(f"both -o ({args.output}) and --save_file ({args.save_file}) "
                              "were given; give one")
    if args.params and args.params_filename and args.params != args.params_filename:
        raise ConversionError("both --params and --params_filename were given; give one")
    model = args.model
    if args.model_dir:
        model = os.path.join(args.model_dir, args.model_filename) if args.model_filename \
            else args.model_dir
    elif args.model_filename:
        model = args.model_filename
    if model is None:
        raise ConversionError("convert: give the model (MODEL, or paddle2onnx's --model_dir "
                              "and --model_filename); see `paddle-npu convert --help`")
    params = args.params or args.params_filename
    if params and args.model_dir and not os.path.isabs(params) and not os.path.exists(params):
        params = os.path.join(args.model_dir, params)
    output = args.output if args.output is not None else args.save_file
    if output is None:
        output = default_output(model)
        if os.path.lexists(output):
            raise ConversionError(f"{output} exists (the default output name for {model}); "
                                  "name it with -o to replace it, or choose another name")
    args.model, args.params, args.output = model, params, output


def _cmd_convert(args):
    from .api import convert_model, refuse_paddle2onnx_options  # (start-up time, as above)

    model, params, save_file = args.model, args.params, args.output
    refuse_paddle2onnx_options(
        dist_prim_all=args.enable_dist_prim_all, optimize_tool=args.optimize_tool,
        deploy_backend=args.deploy_backend,
        calibration_file=args.save_calibration_file, custom_op_info=args.custom_ops)
    fp16 = args.export_fp16_model
    if args.fp16_io and not fp16:
        raise ConversionError("--fp16-io makes a float16 model's inputs and outputs float16: "
                              "give it with --fp16 (or --export_fp16_model True)")
    if fp16 and (args.target or args.fuse_preprocess):
        raise ConversionError("--fp16 makes a float16 ONNX model; the NPU path (--npu) and "
                              "--fuse-preprocess take the float32 one: give one or the other")
    if args.reference:     # unreadable: say so before converting, not after
        from .compare import load_reference  # (start-up time, as above)
        load_reference(args.reference, [], [])
    start = time.perf_counter()
    spec = spec_from_args(args, args.target)     # None without --fuse-preprocess
    if spec is not None and args.reference:
        raise ConversionError("--reference holds the model's float inputs: it cannot check a "
                              "model taking raw uint8 images (--fuse-preprocess)")
    input_shape = parse_shape_dict(args.input_shape_dict) if args.input_shape_dict else {}
    input_shape.update(parse_input_shapes(args.input_shape))
    done = convert_model(model, params, None if args.target or spec else save_file,
                         opset_version=args.opset_version,
                         auto_upgrade_opset=args.enable_auto_update_opset,
                         enable_onnx_checker=args.enable_onnx_checker, verbose=args.verbose,
                         external_file=args.external_filename or "", input_shape=input_shape,
                         fp16=fp16, keep_io_types=not args.fp16_io)
    if not args.quiet:
        for line in done.warnings:
            print(f"paddle-npu: warning: {line}", file=sys.stderr)
    if args.target:   # --npu: stage 2 too, the file written is the lowered model
        lower_converted(done.data, save_file, args)
    elif spec is not None:
        _save_fused(done.data, spec, save_file, check=args.enable_onnx_checker)
    if not args.quiet:
        raised = f" (raised from the {done.asked} asked)" if done.asked and \
            done.opset > done.asked else ""
        size = os.path.getsize(save_file) if os.path.isfile(save_file) else done.size
        print(f"converted {model}: opset {done.opset}{raised}, {done.nodes} nodes, "
              f"{time.perf_counter() - start:.2f} s; wrote {save_file} ({_size(size)})")
    if args.reference:
        return _report_agreement(save_file, args.reference, args.tolerance)
    return 0


def _save_fused(onnx_bytes, spec, save_file, check=True):
    """`convert --fuse-preprocess`: fuse with standard ONNX ops, check, write, say what."""
    import onnx_ir as ir    # the library loads when a command runs

    from .api import check_model, save_model
    from .npu.passes.preprocess_fusion import fuse_preprocess

    if onnx_bytes is None:
        raise ConversionError("--fuse-preprocess: the model is over 2 GB (external data); "
                              "convert it first, then fuse with `paddle-npu lower`")
    model, info = fuse_preprocess(onnx_bytes, spec)
    if check:
        check_model(ir.serde.serialize_model(model))
    save_model(model, save_file)
    print(describe(info))
    print(f"wrote {save_file}")


def _size(n):
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def _report_agreement(onnx_file, reference, tolerance):
    import onnx     # the library loads when a command runs

    from .compare import agreement, load_reference, run_onnx

    graph = onnx.load(onnx_file, load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in inits]
    outputs = [o.name for o in graph.output]
    feeds, expected = load_reference(reference, inputs, outputs)
    if all(e is None for e in expected):
        raise ConversionError(f"{reference}: no expected outputs to compare with (keys "
                              f"out_0..out_{len(outputs) - 1} or the output names "
                              f"{', '.join(outputs)}); the model was written but not checked")
    _, got = run_onnx(onnx_file, feeds)
    worst = 0.0
    print(f"{'output':<36} {'max abs diff':>13} {'rel diff':>10} {'cosine':>10}")
    for name, g, e in zip(outputs, got, expected):
        if e is None:
            print(f"{name:<36} {'(no reference)':>13}")
            continue
        a = agreement(g, e)
        worst = max(worst, a["rel_diff"])
        print(f"{name:<36} {a['max_abs_diff']:>13.3e} {a['rel_diff']:>10.2e} {a['cosine']:>10.6f}")
    ok = worst <= tolerance
    print(f"{'agrees' if ok else 'DISAGREES'} with {reference} "
          f"(worst relative diff {worst:.2e}, tolerance {tolerance:g})")
    return 0 if ok else 1


# Where each command's arguments name files: the outputs are all checked (against each other
# and the inputs, see `outputs.check_output`) before the command starts.
_OUTPUT_ARGS = {"output": "-o", "report": "--report", "report_svg": "--report-svg",
                "qdq": "--qdq", "json": "--json",
                "write_precision": "--write-precision", "plot": "--plot",
                "outputs": "--outputs"}
_OUTPUT_DIR_ARGS = {"segments": "--segments"}
_INPUT_ARGS = ("model", "params", "lowered", "data", "calibration", "reference", "inputs",
               "precision", "marks", "preprocess_config", "dir", "target")


def check_files(args):
    """Every output the command names can be written, none is one of its inputs and no two
    are the same file: checked before anything is read or written."""
    prepare = getattr(args, "prepare", None)
    if prepare is not None:
        prepare(args)
    inputs = [v for v in (getattr(args, k, None) for k in _INPUT_ARGS)
              if isinstance(v, str) and os.path.exists(v)]
    if args.command == "convert":
        from .api import model_files  # (start-up time: only for convert)
        inputs += model_files(args.model, args.params)
    if args.command == "run-segments" and os.path.isdir(args.dir):   # the plan's files
        inputs += [os.path.join(args.dir, name) for name in os.listdir(args.dir)]
    seen = {}
    for table, check in ((_OUTPUT_ARGS, check_output), (_OUTPUT_DIR_ARGS, check_output_dir)):
        for key, flag in table.items():
            path = getattr(args, key, None)
            if not isinstance(path, str):       # unset, or a switch (`verify --json`)
                continue
            check(path, inputs, f"{flag} output")
            real = os.path.realpath(path)
            if real in seen:
                raise ConversionError(f"{seen[real]} and {flag} name the same file ({path}); "
                                      "give each output its own name")
            seen[real] = flag


def describe_error(exc):
    """One line for any exception reaching the command line."""
    if isinstance(exc, (PaddleFormatError, ConversionError)):
        return str(exc)
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        return f"{exc.filename}: {reason}" if exc.filename else reason
    text = " ".join(str(exc).split())
    if type(exc).__module__.startswith("onnxruntime"):
        return (f"onnxruntime cannot run the model on these inputs: {text} (check the inputs' "
                "names, shapes and dtypes against the model's)")
    return (f"unexpected {type(exc).__name__}: {text} -- a bug in paddle_npu; please report "
            "it with the command that caused it (PADDLE_NPU_TRACEBACK=1 shows where)")


def build_parser():
    ap = argparse.ArgumentParser(
        prog="paddle-npu",
        description="Convert PaddlePaddle models to ONNX and lower them to NPU primitives.")
    ap.add_argument("--version", action="version", version=f"paddle-npu {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("inspect", help="describe a Paddle export (format, ops, inputs, parameters)")
    p.add_argument("model", help="a .pdmodel, PIR .json, __model__ file, or a directory holding one")
    p.add_argument("--params", help="the params file (default: the one next to the model)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser(
        "convert", help="convert a Paddle export to ONNX (paddle2onnx's flags work too)",
        description="Convert a Paddle export to ONNX. Either `convert MODEL -o OUT.onnx` or "
                    "paddle2onnx's `--model_dir D --model_filename F --params_filename P "
                    "--save_file OUT.onnx`.")
    p.add_argument("model", nargs="?", help="a .pdmodel, PIR .json, __model__ or model directory")
    p.add_argument("-o", "--output", help="the .onnx to write (default: MODEL's name + .onnx)")
    p.add_argument("--params", help="the params file (default: the one next to the model)")
    p.add_argument("--opset", "--opset_version", dest="opset_version", type=int, default=None,
                   help="ONNX opset (default: the lowest that covers the model)")
    p.add_argument("--enable_auto_update_opset", "--auto-upgrade-opset", type=_flag,
                   default=True, metavar="BOOL",
                   help="raise the opset when an op needs a newer one (default True)")
    p.add_argument("--enable_onnx_checker", "--check", type=_flag, default=True, metavar="BOOL",
                   help="validate the result with onnx.checker and shape inference (default True)")
    p.add_argument("--reference", metavar="NPZ",
                   help="recorded inputs/outputs (in_<name>, out_<i>) to check the result against")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest max-abs-diff relative to the output scale for --reference")
    p.add_argument("-v", "--verbose", action="store_const", const=True,
                   help="progress bar and details")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (and --reference's table)")
    p.add_argument("--fp16", dest="export_fp16_model", action="store_const", const=True,
                   help="a model computing in float16, inputs and outputs float32 (weights "
                        "float16 cannot hold stay float32 and are named); compare it with "
                        "--reference at a float16 --tolerance")
    p.add_argument("--fp16-io", action="store_true",
                   help="with --fp16: its inputs and outputs float16 too")
    p.add_argument("--input-shape", action="append", metavar="NAME:D0,D1,...",
                   help="the input's shape instead of the one the program declares (-1: a "
                        "dynamic size); repeat per input")
    g = p.add_argument_group("paddle2onnx compatibility")
    g.add_argument("--model_dir")
    g.add_argument("--model_filename")
    g.add_argument("--params_filename")
    g.add_argument("--save_file", "-s")
    g.add_argument("--input_shape_dict", metavar="DICT",
                   help="input shapes as a dict, e.g. \"{'x': [1, 3, 640, 640]}\"")
    g.add_argument("--enable_verbose", dest="verbose", type=_flag, default=False, metavar="BOOL")
    g.add_argument("--enable_dist_prim_all", type=_flag, default=False, metavar="BOOL",
                   help="accepted for compatibility; must stay False")
    g.add_argument("--optimize_tool", default="polygraphy",
                   help="accepted for compatibility: paddle_npu always folds constants itself")
    g.add_argument("--enable_dev_version", type=_flag, default=True, help=argparse.SUPPRESS)
    g.add_argument("--deploy_backend", default="onnxruntime", help=argparse.SUPPRESS)
    g.add_argument("--external_filename", metavar="NAME",
                   help="the weights file (beside the output) of a model over 2 GB "
                        "(default: OUTPUT.data)")
    g.add_argument("--export_fp16_model", type=_flag, default=False, metavar="BOOL",
                   help="True: as --fp16")
    g.add_argument("--save_calibration_file", default="", metavar="FILE",
                   help="refused: quantised models keep their scales in the ONNX model")
    g.add_argument("--custom_ops", default=None, metavar="JSON",
                   help="refused: add a mapper with @paddle_op instead")
    g = p.add_argument_group("stage 2 (ONNX -> NPU primitives)")
    add_lowering_options(g, target_flag="--npu")
    add_preprocess_arguments(p)
    p.set_defaults(func=_cmd_convert, prepare=_prepare_convert)
    add_commands(sub)
    return ap


def main(argv=None):
    """Run one command. Every failure ends here as one message on stderr and exit status 2
    (130 for Ctrl-C); PADDLE_NPU_TRACEBACK=1 shows the traceback of an unexpected one."""
    # Libraries' logged warnings (onnx_ir's failed shape inference prints a traceback) are
    # not for users: what matters reaches them as our error.
    logging.getLogger("onnx_ir").setLevel(logging.CRITICAL)
    try:
        args = build_parser().parse_args(argv)
        check_files(args)
        return args.func(args)
    except KeyboardInterrupt:
        print("paddle-npu: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `paddle-npu inspect M | head`: not an error
        sys.stderr.close()
        return 0
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: one line, never a traceback
        print(f"paddle-npu: error: {describe_error(exc)}", file=sys.stderr)
        if os.environ.get("PADDLE_NPU_TRACEBACK"):
            traceback.print_exc()
        return 2


def paddle2onnx_main(argv=None):
    """`paddle2onnx-npu`: paddle2onnx's command line, `paddle-npu convert` underneath."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return main(argv if argv == ["--version"] else ["convert", *argv])


def run():
    """`paddle-npu` and `python -m paddle_npu`: main(), and the process ends (exit_now)."""
    exit_now(main())


def run_paddle2onnx():
    """`paddle2onnx-npu`: paddle2onnx_main(), and the process ends (exit_now)."""
    exit_now(paddle2onnx_main())


def exit_now(code):
    """End the process of a finished command with exit status `code`, without the
    interpreter's tear-down, which frees every object module by module (0.1-0.15 s after
    `lower` of MobileNetV1 or ResNet-50). The command has closed the files it wrote;
    stdout and stderr are flushed here, and logging's handlers shut down. Under a profiler,
    coverage or a debugger, which write their results as the interpreter ends, it ends so."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe (`| head`) or stream: nothing to add
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
