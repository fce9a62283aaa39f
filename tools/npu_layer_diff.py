"""Where a lowered model parts from its ONNX model, layer by layer.

    python tools/npu_layer_diff.py MODEL.onnx [--input-shape x:1,3,160,160] [--inputs IO.npz]
                                   [--target npu256] [--above 1e-6]

Lowers MODEL at the given sizes, makes every float tensor both graphs share an output, and
prints per tensor (in the ONNX model's order) the lowered model's relative diff to the ONNX
model in onnxruntime beside the ONNX model's own change with graph optimisations off (its
float rounding at that layer). A lowering error shows as a layer whose diff jumps far above
that change; rounding the model amplifies grows with it. Inputs: the .npz's `in_<name>`
arrays, else seeded ones (as `verify`).
"""
import argparse
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddle_npu.compare import agreement, load_reference, run_onnx  # noqa: E402
from paddle_npu.npu import lower  # noqa: E402
from paddle_npu.npu.passes.channels_last import tensors_as_nchw  # noqa: E402
from paddle_npu.npu.passes.common import with_input_shapes  # noqa: E402
from paddle_npu.npu.verification.verifier import seeded_inputs  # noqa: E402
from paddle_npu.onnx_io import load_proto  # noqa: E402
from paddle_npu.shapes import parse_input_shapes  # noqa: E402


def with_outputs(proto, names):
    """Serialized copy of the model with `names` added to its outputs (float tensors)."""
    from onnx import TensorProto, helper

    copy = type(proto).FromString(proto.SerializeToString())
    have = {o.name for o in copy.graph.output}
    copy.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                             for n in names if n not in have)
    return copy.SerializeToString()


def layer_diffs(model, target, input_shape=None, feeds=None):
    """[(op type, tensor, lowered vs ONNX, ONNX optimised vs not)] relative diffs."""
    import onnx

    original = with_input_shapes(model, input_shape) if input_shape else load_proto(model)
    original = onnx.shape_inference.infer_shapes(original)
    lowered = load_proto(lower(original.SerializeToString(), target)[0])
    if feeds is None:
        feeds = seeded_inputs(original.SerializeToString())
    shared = {o for n in lowered.graph.node for o in n.output}
    floats = {v.name for v in original.graph.value_info
              if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    op_of = {o: n.op_type for n in original.graph.node for o in n.output}
    names = [o for n in original.graph.node for o in n.output if o in shared and o in floats]
    runs = []
    for proto, optimise in ((original, True), (original, False), (lowered, True)):
        got_names, got = run_onnx(with_outputs(proto, names), feeds, optimise)
        runs.append(dict(zip(got_names, got)))
    onnx_opt, onnx_plain, low = runs
    low = tensors_as_nchw(lowered, low)       # tensors the lowered model holds as rows
    return [(op_of[n], n, agreement(low[n], onnx_opt[n])["rel_diff"],
             agreement(onnx_plain[n], onnx_opt[n])["rel_diff"]) for n in names]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--input-shape", action="append", default=[])
    p.add_argument("--inputs", metavar="NPZ")
    p.add_argument("--target", default="npu256")
    p.add_argument("--above", type=float, default=0.0,
                   help="print only tensors whose lowered diff is above this")
    args = p.parse_args(argv)
    shapes = parse_input_shapes(args.input_shape)
    feeds = None
    if args.inputs:
        graph = load_proto(args.model).graph
        inits = {i.name for i in graph.initializer}
        feeds, _ = load_reference(args.inputs, [i.name for i in graph.input
                                                if i.name not in inits], [])
    print(f"{'op':>20} {'tensor':>32} {'lowered diff':>12} {'own rounding':>12} {'ratio':>6}")
    for op, name, diff, own in layer_diffs(args.model, args.target, shapes, feeds):
        if diff > args.above:
            ratio = diff / own if own > 0 else float("inf")
            print(f"{op:>20} {name[-32:]:>32} {diff:>12.2e} {own:>12.2e} {ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
