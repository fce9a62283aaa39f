"""The `paddle-npu` command line. Heavy imports happen inside the sub-commands."""
import argparse
import json
import sys

from .errors import PaddleFormatError


def _cmd_inspect(args):
    from .frontend import load
    from .inspect import render, summarize

    program = load(args.model, args.params)
    summary = summarize(program)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


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
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PaddleFormatError as exc:
        print(f"paddle-npu: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `paddle-npu inspect M | head`: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
