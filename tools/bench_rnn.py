"""An RNN's forms in onnxruntime, side by side: what any lowering of an LSTM or GRU can reach.

The NPU has no recurrent unit, so stage 2 writes the recurrence as plain ops, a dozen or more
a step, where onnxruntime runs its own LSTM / GRU op as one fused kernel. For one layer
(batch 1, seeded random weights, forward) this times, against that op:

    unrolled   stage 2's unrolling (`unrolled_proto`): plain ops, every step written out
    scan       the same step written once, as the body of a Scan over the steps (the input
               projection of all steps one MatMul before it, as the unrolling does)
    lowered    the NPU program (`lower`, float32 bodies): the unrolled steps as primitives

InferenceSession creation and latency (medians, `bench_npu.ort_timing`: each form in turn,
a new session each round) as multiples of the op's, and each form's worst difference from
the op's output. The unrolled and Scan forms hold no NPU primitive, so their ratios bound
what a program of primitives can reach: no fewer kernels a step.

    python tools/bench_rnn.py [--cells gru,lstm] [--sizes 10x16x24,25x96x48,80x96x96]
                              [--target npu256] [--iters 200]

A size is steps x input x hidden.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_npu import ort_timing  # noqa: E402
from measure import load_note  # noqa: E402
from paddle_npu.compare import run_onnx  # noqa: E402
from paddle_npu.npu import lower  # noqa: E402
from paddle_npu.npu.passes.rnn import unrolled_proto  # noqa: E402
from paddle_npu.onnx_io import to_proto  # noqa: E402

OPSET = 17
# gates per cell, in ONNX's order within W, R and B
GATES = {"lstm": 4, "gru": 3}
# the step's constants, read from the main graph (a Scan body sees the outer scope)
SHARED = ("Rt", "rb", "parts")


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, steps, inputs, initializers):
    graph = helper.make_graph(nodes, "rnn", [_value("x", [steps, 1, inputs])],
                              [_value("y", [1, 1, None])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def weights(cell, inputs, hidden, seed=0):
    """W [1, G*H, I], R [1, G*H, H], B [1, 2*G*H]: scaled so the gates stay in range."""
    rng = np.random.default_rng(seed)
    g = GATES[cell] * hidden
    return ((rng.standard_normal((1, g, inputs)) / np.sqrt(inputs)).astype(np.float32),
            (rng.standard_normal((1, g, hidden)) / np.sqrt(hidden)).astype(np.float32),
            (rng.standard_normal((1, 2 * g)) * 0.1).astype(np.float32))


def op_model(cell, steps, inputs, hidden, w, r, b):
    """onnxruntime's own op; y is the last hidden state [1, 1, H]."""
    outputs = ["", "y"] + (["c_last"] if cell == "lstm" else [])
    extra = {"linear_before_reset": 1} if cell == "gru" else {}
    node = helper.make_node(cell.upper(), ["x", "W", "R", "B"], outputs, hidden_size=hidden,
                            **extra)
    return _model([node], steps, inputs, [numpy_helper.from_array(w, "W"),
                                          numpy_helper.from_array(r, "R"),
                                          numpy_helper.from_array(b, "B")])


def _step(cell, h, c, xp, prefix):
    """One step's nodes: state h [1, H] (and c for an LSTM), the step's projected input xp
    [1, G*H] -> (nodes, new h, new c)."""
    def name(n):        # the step's inputs and the shared constants keep their names
        return n if n in (h, c, xp) + SHARED else prefix + n

    def node(op, inputs, output, **attrs):
        return helper.make_node(op, [name(n) for n in inputs], [prefix + output], **attrs)

    def split(value, names):
        return helper.make_node("Split", [name(value), "parts"], [prefix + n for n in names],
                                axis=1)

    nodes = [node("MatMul", [h, "Rt"], "rec0"), node("Add", ["rec0", "rb"], "rec")]
    if cell == "lstm":     # gates i, o, f, c: C = f * C_prev + i * tanh(c), H = o * tanh(C)
        return nodes + [
            node("Add", [xp, "rec"], "sum"), split("sum", ["i", "o", "f", "g"]),
            node("Sigmoid", ["i"], "si"), node("Sigmoid", ["o"], "so"),
            node("Sigmoid", ["f"], "sf"), node("Tanh", ["g"], "tg"),
            node("Mul", ["sf", c], "fc"), node("Mul", ["si", "tg"], "ig"),
            node("Add", ["fc", "ig"], "c"), node("Tanh", ["c"], "tc"),
            node("Mul", ["so", "tc"], "h")], prefix + "h", prefix + "c"
    # GRU, linear_before_reset=1: n = tanh(x_n + r * (H R_n^T + Rb_n)), H = n + z * (H - n)
    return nodes + [
        split(xp, ["xz", "xr", "xn"]),
        split("rec", ["hz", "hr", "hn"]),
        node("Add", ["xz", "hz"], "z0"), node("Sigmoid", ["z0"], "z"),
        node("Add", ["xr", "hr"], "r0"), node("Sigmoid", ["r0"], "r"),
        node("Mul", ["r", "hn"], "rn"), node("Add", ["xn", "rn"], "n0"),
        node("Tanh", ["n0"], "n"), node("Sub", [h, "n"], "d"), node("Mul", ["z", "d"], "zd"),
        node("Add", ["n", "zd"], "h")], prefix + "h", None


def scan_model(cell, steps, inputs, hidden, w, r, b):
    """The step once, as a Scan's body: states h (and c) [1, H], scanned over the projected
    inputs [T, 1, G*H] that one MatMul and Add make for every step before the Scan."""
    g = GATES[cell] * hidden
    lstm = cell == "lstm"
    body_nodes, h_out, c_out = _step(cell, "h_in", "c_in" if lstm else None, "xp_t", "s_")
    states = ["h_in"] + (["c_in"] if lstm else [])
    outs = [h_out] + ([c_out] if lstm else [])
    body = helper.make_graph(
        body_nodes, "step", [_value(s, [1, hidden]) for s in states] + [_value("xp_t", [1, g])],
        [_value(o, [1, hidden]) for o in outs])
    zeros = np.zeros((1, hidden), np.float32)
    nodes = [helper.make_node("MatMul", ["x", "Wt"], ["xw"]),
             helper.make_node("Add", ["xw", "wb"], ["xp"]),
             helper.make_node("Scan", ["h0"] + (["c0"] if lstm else []) + ["xp"],
                              ["h_last"] + (["c_last"] if lstm else []),
                              num_scan_inputs=1, body=body),
             helper.make_node("Unsqueeze", ["h_last", "axis0"], ["y"])]
    consts = {"Wt": w[0].T, "wb": b[0, :g], "Rt": r[0].T, "rb": b[0, g:], "h0": zeros,
              **({"c0": zeros} if lstm else {}), "parts": np.full(GATES[cell], hidden, np.int64),
              "axis0": np.array([0], np.int64)}
    return _model(nodes, steps, inputs, [numpy_helper.from_array(np.ascontiguousarray(v), k)
                                         for k, v in consts.items()])


def forms(cell, steps, inputs, hidden, target="npu256", seed=0):
    """{form: serialized model}: op, unrolled, scan, lowered."""
    w, r, b = weights(cell, inputs, hidden, seed)
    op = op_model(cell, steps, inputs, hidden, w, r, b)
    lowered, _ = lower(op.SerializeToString(), target, emulation="float32")
    return {"op": op.SerializeToString(),
            "unrolled": unrolled_proto(op).SerializeToString(),
            "scan": scan_model(cell, steps, inputs, hidden, w, r, b).SerializeToString(),
            "lowered": to_proto(lowered).SerializeToString()}


def bench(cell, steps, inputs, hidden, target, iters):
    models = forms(cell, steps, inputs, hidden, target)
    x = np.random.default_rng(1).standard_normal((steps, 1, inputs)).astype(np.float32)
    outs = {k: run_onnx(m, {"x": x})[1][0] for k, m in models.items()}    # y, each form's one
    timed = ort_timing(models, {"x": x}, iters)
    nodes = {k: node_count(m) for k, m in models.items()}
    return {k: {"session_s": timed[k][0], "latency_s": timed[k][1], "nodes": nodes[k],
                "diff": float(np.abs(outs[k] - outs["op"]).max())} for k in models}


def node_count(serialized):
    """The nodes of the model's graphs: a Scan's body counted once, a function call as one."""
    def count(graph):
        return sum(1 + sum(count(a.g) for a in n.attribute
                           if a.type == onnx.AttributeProto.GRAPH) for n in graph.node)
    return count(onnx.load_from_string(serialized).graph)


def render(results):
    lines = [f"{'cell':5s} {'size':>10s} {'form':9s} {'nodes':>6s} {'session ms':>10s} "
             f"{'x op':>6s} {'latency us':>10s} {'x op':>6s} {'max diff':>9s}",
             "-" * 80]
    for (cell, size), row in results.items():
        s0, l0 = row["op"]["session_s"], row["op"]["latency_s"]
        for form, r in row.items():
            lines.append(f"{cell:5s} {size:>10s} {form:9s} {r['nodes']:6d} "
                         f"{r['session_s'] * 1e3:10.2f} {r['session_s'] / s0:5.2f}x "
                         f"{r['latency_s'] * 1e6:10.1f} {r['latency_s'] / l0:5.2f}x "
                         f"{r['diff']:9.1e}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="gru,lstm")
    ap.add_argument("--sizes", default="10x16x24,25x96x48,80x96x96",
                    help="steps x input x hidden, comma-separated")
    ap.add_argument("--target", default="npu256")
    ap.add_argument("--iters", type=int, default=200, help="timed runs, the median is kept")
    args = ap.parse_args(argv)
    results = {}
    for cell in args.cells.split(","):
        for size in args.sizes.split(","):
            steps, inputs, hidden = (int(v) for v in size.split("x"))
            results[cell, size] = bench(cell, steps, inputs, hidden, args.target, args.iters)
            print(f"{cell} {size}: done", file=sys.stderr, flush=True)
    print(f"{load_note()}; ratios against onnxruntime's own op, each form timed in turn")
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
