"""The `paddle-npu` command line. Heavy imports happen inside the sub-commands."""
import argparse
import json
import sys

from .errors import ConversionError, PaddleFormatError


def _cmd_inspect(args):
    from .frontend import load
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


def _cmd_convert(args):
    import os

    from .api import export

    model = args.model
    if args.model_dir:
        model = os.path.join(args.model_dir, args.model_filename) if args.model_filename \
            else args.model_dir
    if model is None:
        raise SystemExit("paddle-npu convert: give MODEL or --model_dir")
    params = args.params or args.params_filename
    if params and args.model_dir and not os.path.isabs(params) and not os.path.exists(params):
        params = os.path.join(args.model_dir, params)
    save_file = args.output or args.save_file
    if save_file is None:
        stem = os.path.splitext(os.path.basename(os.path.normpath(model)))[0]
        save_file = stem + ".onnx"
    from .preprocess import spec_from_args
    spec = spec_from_args(args, args.target)     # None without --fuse-preprocess
    if spec is not None and args.reference:
        raise ConversionError("--reference holds the model's float inputs: it cannot check a "
                              "model taking raw uint8 images (--fuse-preprocess)")
    from .shapes import parse_input_shapes, parse_shape_dict
    input_shape = parse_shape_dict(args.input_shape_dict) if args.input_shape_dict else {}
    input_shape.update(parse_input_shapes(args.input_shape))
    data = export(model, params, None if args.target or spec else save_file,
                  opset_version=args.opset_version or 7,
                  auto_upgrade_opset=args.enable_auto_update_opset,
                  enable_onnx_checker=args.enable_onnx_checker, verbose=args.verbose,
                  dist_prim_all=args.enable_dist_prim_all, optimize_tool=args.optimize_tool,
                  deploy_backend=args.deploy_backend, input_shape=input_shape)
    if args.target:   # --npu: stage 2 too, the file written is the lowered model
        from .npu.cli import lower_converted
        lower_converted(data, save_file, args)
    elif spec is not None:
        from .preprocess import save_fused
        save_fused(data, spec, save_file, check=args.enable_onnx_checker)
    else:
        print(f"wrote {save_file}")
    if args.reference:
        return _report_agreement(save_file, args.reference, args.tolerance)
    return 0


def _report_agreement(onnx_file, reference, tolerance):
    import onnx

    from .compare import agreement, load_reference, run_onnx

    graph = onnx.load(onnx_file, load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in inits]
    outputs = [o.name for o in graph.output]
    feeds, expected = load_reference(reference, inputs, outputs)
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


def build_parser():
    ap = argparse.ArgumentParser(
        prog="paddle-npu",
        description="Convert PaddlePaddle models to ONNX and lower them to NPU primitives.")
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
    p.add_argument("--verbose", action="store_const", const=True, help="progress bar and details")
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
    g = p.add_argument_group("stage 2 (ONNX -> NPU primitives)")
    from .npu.cli import add_commands, add_lowering_options
    add_lowering_options(g, target_flag="--npu")
    from .preprocess import add_arguments as add_preprocess_arguments
    add_preprocess_arguments(p)
    p.set_defaults(func=_cmd_convert)
    add_commands(sub)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (PaddleFormatError, ConversionError) as exc:
        print(f"paddle-npu: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `paddle-npu inspect M | head`: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
