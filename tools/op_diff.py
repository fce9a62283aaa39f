"""Stage 1, op by op: each Paddle op against our ONNX for it, both fed Paddle's own inputs.

    python tools/op_diff.py MODEL.pdmodel --inputs IO.npz [--onnx OURS.onnx] [--top 20] [--json]

Runs the legacy program in Paddle's static Executor on the .npz's `in_<name>` arrays,
fetching every variable our ONNX model also names; then, per Paddle op, cuts from our
model the nodes that compute its first float output from its inputs, runs them in
onnxruntime on Paddle's values of those inputs and prints the relative diff to Paddle's
output, worst first, and the worst per op type. A mapper error shows as an op far above
rounding (~1e-6 for sums over many terms, 0 for most element-wise ops); a model whose
end-to-end difference is larger while every op agrees amplifies rounding. MatMuls are also
compared with the float64 product of the same inputs, Paddle's against ours (root-mean-
square relative error): how accurate each runtime's GEMM is on this model's data.
Without --onnx the model is converted here. Paddle is imported in legacy mode.
"""
import argparse
import json
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"  # legacy programs: must precede `import paddle`
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import utils as onnx_utils  # noqa: E402

from paddle_npu import export  # noqa: E402
from paddle_npu.compare import agreement, run_onnx  # noqa: E402


def paddle_values(model_file, feeds, wanted):
    """{variable: Paddle's value} for the feeds and every non-persistable variable in
    `wanted` the program computes, plus (program's block, ops in order, parameter reader)."""
    import paddle  # the oracle; heavy, and only here

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    prog, _, _ = paddle.static.load_inference_model(os.path.splitext(model_file)[0], exe)
    block = prog.global_block()
    ops = [op for op in block.ops if op.type not in ("feed", "fetch")]
    names = sorted({v for op in ops for v in op.output_arg_names
                    if v in wanted and block.has_var(v) and not block.var(v).persistable})
    values = dict(zip(names, exe.run(prog, feed=feeds, fetch_list=names, return_numpy=True)))
    scope = paddle.static.global_scope()
    return {**feeds, **values}, ops, lambda name: np.array(scope.find_var(name).get_tensor())


def op_diffs(model_file, feeds, onnx_bytes=None):
    """([(rel diff, op type, output name)] per Paddle op (an op our model fuses into the next
    one is compared with it, under the next one's type), [(Paddle's, ours)] MatMul errors
    against float64)."""
    onnx_bytes = onnx_bytes or export(model_file)
    model = onnx.load_from_string(onnx_bytes)
    produced = {o for n in model.graph.node for o in n.output}
    values, ops, param = paddle_values(model_file, feeds, produced)
    extractor = onnx_utils.Extractor(model)

    def ours(inputs, output):
        sub = extractor.extract_model(inputs, [output])
        fed = {i.name: values[i.name] for i in sub.graph.input}
        return run_onnx(sub.SerializeToString(), fed)[1][0]

    producer = {v: op for op in ops for v in op.output_arg_names}

    def cut(names):
        # an input our model does not name (an op we fused into the next, e.g. a conv's
        # bias add) is replaced by the inputs of the op that made it: compared as one
        found, todo, seen = set(), list(names), set()
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in values:
                found.add(v)
            elif v in producer:
                todo.extend(producer[v].input_arg_names)
        return found

    rows, gemms = [], []
    for op in ops:
        outs = [v for v in op.output_arg_names if v in values and values[v].dtype.kind == "f"]
        ins = sorted(cut(op.input_arg_names))
        if not outs or not ins:
            continue
        got = ours(ins, outs[0])
        rows.append((agreement(got, values[outs[0]])["rel_diff"], op.type, outs[0]))
        if op.type == "matmul_v2" and all(v in values or v not in producer
                                          for v in (op.input("X")[0], op.input("Y")[0])):
            a, b = (values[v] if v in values else param(v) for v in (op.input("X")[0], op.input("Y")[0]))
            a, b = a.astype(np.float64), b.astype(np.float64)
            a = np.swapaxes(a, -1, -2) if op.attr("trans_x") else a
            b = np.swapaxes(b, -1, -2) if op.attr("trans_y") else b
            exact = a @ b
            rms = lambda g: float(np.sqrt(np.mean((g - exact) ** 2) / np.mean(exact ** 2)))  # noqa: E731
            gemms.append((rms(values[outs[0]]), rms(got)))
    rows.sort(key=lambda r: -r[0])
    return rows, gemms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a legacy .pdmodel (parameters beside it)")
    ap.add_argument("--inputs", required=True, help=".npz with in_<input name> arrays")
    ap.add_argument("--onnx", help="our ONNX model of it (default: converted here)")
    ap.add_argument("--top", type=int, default=20, help="how many of the worst ops to print")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    saved = np.load(a.inputs)
    feeds = {k[3:]: saved[k] for k in saved.files if k.startswith("in_")}
    onnx_bytes = open(a.onnx, "rb").read() if a.onnx else None
    rows, gemms = op_diffs(a.model, feeds, onnx_bytes)
    worst = {}
    for diff, kind, _ in rows:
        worst[kind] = max(worst.get(kind, 0.0), diff)
    if a.json:
        print(json.dumps({"ops": [{"rel_diff": d, "type": t, "output": o} for d, t, o in rows],
                          "worst_by_type": worst,
                          "matmul_vs_float64": [{"paddle": p, "ours": o} for p, o in gemms]}))
        return 0
    print(f"{'rel diff':>9}  {'op':20} output")
    for diff, kind, out in rows[:a.top]:
        print(f"{diff:>9.1e}  {kind:20} {out}")
    print(f"\n{len(rows)} ops; worst per type: "
          + ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items(), key=lambda kv: -kv[1])))
    if gemms:
        p, o = np.mean([g[0] for g in gemms]), np.mean([g[1] for g in gemms])
        print(f"{len(gemms)} MatMuls, rms relative error against float64: Paddle {p:.2e}, "
              f"ours {o:.2e} (ours larger in {sum(g[1] > g[0] for g in gemms)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
