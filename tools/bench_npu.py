"""Stage-2 benchmark: the per-channel plan (one input channel per tile) against the packed plan on real models.

For each model (zoo exports, converted by stage 1): arrays used, utilisation and VMM
invocations under both plans and their ratio, the lowering time of each plan, and the
NumPy reference's throughput (useful MACs per second) running the lowered model, and in
onnxruntime the lowered model's session creation time and latency (median over --iters) beside
the ONNX model's, timed in turn (`ort_timing`), with their ratios, under each emulation
(`lower --emulation exact|float32`: the function bodies onnxruntime runs the NPU program
with), and how far each is from the ONNX model's outputs, and `nodes x`: the nodes
onnxruntime builds the lowered model's session of (its functions inlined) as a multiple of
the ONNX model's, which session creation follows,
and `prog x`: the NPU program's own nodes (each primitive one node: a band of array tiles is
one) as a multiple of the ONNX model's, what the nodes would be if every body were one node.
Beside them the lowered model's floor: the time this machine takes, measured in the same
run, to write once the rows each Im2Col produces (NumPy filling a buffer of that size, best
of several: in cache when it fits) and to do the arrays' products, zeros included, and the
vector unit's depthwise multiply-adds (at the rate of onnxruntime's float32 MatMul on
[4096, 256] x [256, 256]), as a multiple of the ONNX model's latency. No run of the
lowered model can be faster: those rows and products are its NPU program's, and the count
leaves out all else it does. `+calls x` adds to that floor onnxruntime's least time per kernel call
(measured in the same run on a chain of Relus of eight floats) times the `kernels` it runs
for those bodies (the nodes of the graph it optimises the lowered model to): the floor of
that program with those bodies in onnxruntime, which decides for a model of microseconds
(an RNN unrolled over its steps is hundreds of kernels where onnxruntime's own LSTM is one).
`layers x` is the part of the latency ratio that the lowered model's matrix layers take
(its Im2Col, VMM, AddInTile, DepthwiseConv... kernels and the products onnxruntime fused
into a plain op: their share of its kernel time in onnxruntime's profile, `profile`,
times the ratio).
Then `paddle-npu lower` itself (the default packed plan), each run a fresh process: wall time
and peak RSS of the whole process (median of --process-runs), with and without `--verify`,
beside the targets for ResNet-50 (<= 1 s, <= 300 MiB).

    python tools/bench_npu.py [--models resnet50,mobilenet_v3_large] [--target npu256]
                              [--cache DIR] [--json OUT] [--reference-plans packed,per-channel]
                              [--ort-plans packed] [--iters 20] [--process-runs 3]
                              [--input-shape x:1,3,224,224] [--quantize int8]
                              [--whole] [--lower-times]

The reference's throughput is measured twice, runs in turn: as it runs (each matrix layer's
tiles fused, `Reference`) and node by node (`Reference(fuse_layers=False)`, every VMM tile
then AddInTile: the arithmetic both share); "CPU GMAC/s" is the fused run by its process
CPU time (on a shared machine its wall time also counts the others' work). --input-shape
runs the lowering, the reference and onnxruntime at other input sizes (random inputs, seed
0; the ONNX model timed at the same fixed sizes); --quantize lowers with int8 / int16 matrix
layers (calibrated on the zoo's generator, 8 inputs at the export's size), and onnxruntime
is then not timed (its table compares float lowerings).

With --whole, the whole-model story instead, per zoo model (`--models ci|all|a,b`): the
NPU's share of the MACs and the segments, lowered as exported (sizes left open) and at the
zoo's test input size (--input-shape), the arrays, the latency at that size (the chip's
simulated schedule, chip/estimate.py; with the number of hand-overs between chip and CPU),
the lowering time and how the lowered model agrees with the ONNX one
(onnxruntime and the NumPy reference, worst relative diff), and how many times as far from
the ONNX model computed in float64 as the ONNX model's own float32 run it is (`f64 x`;
agrees: yes within verify's factor, NO otherwise; where the model cannot be run in float64,
verify's rule before: tol within 1e-5, floor within its float-noise floor, rec no farther
from Paddle's float64 outputs than the ONNX model).

With --lower-times, per zoo model (`--models deploy|ci|all|a,b`) converted at its deployment
size (`paddle-npu convert --input-shape`, batch 1, as quant_zoo.py converts it), a plain
`paddle-npu lower` (no --verify) in a process of its own: wall and CPU seconds and peak RSS
(median of --process-runs), against the target of at most 5 s on every model; and whether
`lower --emulation float32` writes the same NPU program (function bodies aside).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.inliner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zoo  # noqa: E402
from measure import installed_env, load_note, run_measured, start_launcher  # noqa: E402
from quant_zoo import CALIBRATION_SEED  # noqa: E402
from paddle_npu.api import export  # noqa: E402
from paddle_npu.npu import Reference, load_target, lower  # noqa: E402
from paddle_npu.npu.emulation import EMULATIONS  # noqa: E402
from paddle_npu.npu.emulation.functions import emulate, npu_program  # noqa: E402
from paddle_npu.npu.passes.common import with_input_shapes  # noqa: E402
from paddle_npu.npu.passes.input_shapes import (  # noqa: E402
    add_argument as add_input_shape_argument)
from paddle_npu.npu.quant.calibrate import calibrate  # noqa: E402
from paddle_npu.npu.quant.qlower import quantized_lower  # noqa: E402
from paddle_npu.onnx_io import load_proto  # noqa: E402
from paddle_npu.shapes import parse_input_shapes  # noqa: E402


# What profile counts for the matrix layers (what a Conv, MatMul or Gemm becomes): their
# primitives, and the products onnxruntime fused into a plain op. `layers x` is their part of
# the latency ratio.
LAYER_SHARES = ("Im2Col", "Im2Col3D", "VMM", "AddInTile", "Col2Im", "DepthwiseConv",
                "RuntimeVMM", "products")
PRODUCT_KERNELS = ("Conv", "FusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "Gemm")


def _feeds(info):
    ref = np.load(os.path.join(info["dir"], "reference.npz"))
    return {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}


def inlined_nodes(model):
    """The nodes onnxruntime builds a session of: the main graph's, each call of a model-local
    function replaced by its body (session creation grows with them)."""
    return len(onnx.inliner.inline_local_functions(load_proto(model)).graph.node)


def ort_timing(models, feeds, iters, rounds=3, session_rounds=9):
    """{label: (median InferenceSession creation seconds, median latency seconds)} of
    serialized models, timed side by side with onnxruntime's default options: in each of
    `session_rounds` rounds, each model in turn gets a new session (timed: a small model's
    takes milliseconds, and a median of three moved with one slow creation), and in the
    first `rounds` of them a warm-up run and iters / rounds timed runs; its session is gone
    before the next model's is made. So a ratio is not taken minutes apart on a shared
    machine, and no session's idle threads (onnxruntime's spin between runs) take the cores
    from another's runs."""
    import gc

    import onnxruntime as ort   # heavy, and only for timing

    made = {label: [] for label in models}
    times = {label: [] for label in models}
    for r in range(max(rounds, session_rounds)):
        for label, model in models.items():
            t0 = time.perf_counter()
            session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            made[label].append(time.perf_counter() - t0)
            if r < rounds:
                session.run(None, feeds)           # warm-up
                for _ in range(max(1, iters // rounds)):
                    t0 = time.perf_counter()
                    session.run(None, feeds)
                    times[label].append(time.perf_counter() - t0)
            del session
            gc.collect()                           # its threads end with it
    return {label: (statistics.median(made[label]), statistics.median(times[label]))
            for label in models}


def write_seconds(nbytes, runs=20):
    """The least time NumPy takes to write `nbytes` once: filling a buffer of that size, best
    of `runs` (in cache when it fits, as a small Im2Col's rows may be)."""
    buffer = np.empty(nbytes, np.uint8)
    took = []
    for i in range(runs):
        t0 = time.perf_counter()
        buffer.fill(i)
        took.append(time.perf_counter() - t0)
    return min(took)


def machine_rates():
    """{"write_bytes_s", "matmul_macs_s", "call_s"}: this machine's rates, measured now (best
    of several runs): NumPy filling 64 MiB (shown for scale; the floor times each Im2Col's own
    size, write_seconds), onnxruntime's float32 MatMul [4096, 256] x [256, 256] with the
    weight a constant (its best case), at which the floor counts the array products, and
    onnxruntime's least time per kernel it runs (call_seconds)."""
    import onnx
    from onnx import helper, numpy_helper

    x = np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)
    w = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [w])
    product = least_run_seconds(graph, {"x": x})
    return {"write_bytes_s": (64 << 20) / write_seconds(64 << 20, 10),
            "matmul_macs_s": x.size * 256 / product, "call_s": call_seconds()}


def call_seconds(calls=1000, runs=50):
    """onnxruntime's least time per kernel call: a run of a chain of `calls` Relus on eight
    floats (no kernel does less), divided by `calls`, best of `runs`."""
    import onnx
    from onnx import helper

    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(calls)]
    graph = helper.make_graph(
        nodes, "calls", [helper.make_tensor_value_info("v0", onnx.TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info(f"v{calls}", onnx.TensorProto.FLOAT, [1, 8])])
    return least_run_seconds(graph, {"v0": np.ones((1, 8), np.float32)}, runs) / calls


def least_run_seconds(graph, feeds, runs=50):
    """The least time onnxruntime takes to run a GraphProto (opset 17) on `feeds`: a warm-up
    run, then the best of `runs`."""
    import onnxruntime as ort
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    took = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        took.append(time.perf_counter() - t0)
    return min(took)


def program_work(serialized, feeds):
    """{"im2col_bytes": [bytes each Im2Col node writes], "array_macs", "vector_macs"} of one
    run of a lowered model (array_macs: its VMM nodes' products, zeros included, every
    result element a sum over its weight's rows; vector_macs: its DepthwiseConv nodes',
    every result element a sum over its channel's taps), read off onnxruntime running it
    with those tensors as outputs."""
    import onnx
    import onnxruntime as ort

    model = onnx.load_from_string(serialized)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    im2col = [n.output[0] for n in model.graph.node if n.op_type == "Im2Col"]
    vmm = [(n.output[0], n.input[1]) for n in model.graph.node if n.op_type == "VMM"]
    depthwise = [(n.output[0], n.input[1]) for n in model.graph.node
                 if n.op_type == "DepthwiseConv"]          # taps [C, 1, KH, KW], constant
    wanted = im2col + [y for y, _ in vmm + depthwise] + [w for _, w in vmm if w not in weights]
    types = {v.name: v.type for v in model.graph.value_info}
    del model.graph.output[:]
    for name in dict.fromkeys(wanted):
        out = model.graph.output.add()
        out.name = name
        if name in types:
            out.type.CopyFrom(types[name])
        else:       # a primitive's result: float, as the float lowerings timed here give
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    names = [o.name for o in model.graph.output]
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    got = dict(zip(names, session.run(names, feeds)))
    rows = {w: (weights[w] if w in weights else list(got[w].shape))[-2] for _, w in vmm}
    return {"im2col_bytes": [int(got[y].nbytes) for y in im2col],
            "array_macs": int(sum(got[y].size * rows[w] for y, w in vmm)),
            "vector_macs": int(sum(got[y].size * weights[w][2] * weights[w][3]
                                   for y, w in depthwise))}


PROFILE_SECONDS = 2.0


def profile(serialized, feeds, runs=20):
    """One onnxruntime session of a lowered model (default options), profiled over a
    warm-up and `runs` runs: {"outputs": the warm-up's, "kernels": the nodes of the graph
    onnxruntime optimises it to (its functions inlined, its fusions made), "shares":
    {primitive (op type), "products" or "other": its share of the kernel time}}. Each kernel
    counts for the primitive whose function body it ran (the bodies' nodes are named, so
    onnxruntime names their kernels "_inlfunc_<primitive>_..."); "products" for the other
    kernels of PRODUCT_KERNELS (a body's Conv that onnxruntime fused with the plain Clip or
    Relu after it is named after that op; a layer left to the CPU), "other" for the rest:
    the plain ONNX ops and the kernels onnxruntime adds itself (its NCHWc reorders)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="bench_npu_profile_") as work:
        options = ort.SessionOptions()
        options.log_severity_level = 3      # (its warning that the graph fits this machine)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(work, "profile")
        options.optimized_model_filepath = os.path.join(work, "optimized.onnx")
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "weights.bin")
        session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
        kernels = len(onnx.load(options.optimized_model_filepath,
                                load_external_data=False).graph.node)
        outputs = session.run(None, feeds)
        for _ in range(runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    took = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        if name.startswith("_inlfunc_"):
            owner = name[len("_inlfunc_"):].split("_")[0]
        else:
            owner = "products" if e["args"]["op_name"] in PRODUCT_KERNELS else "other"
        took[owner] = took.get(owner, 0) + e["dur"]
    total = sum(took.values())
    return {"outputs": outputs, "kernels": kernels,
            "shares": {k: v / total for k, v in took.items()}}


def _reference_speed(lowered, target, feeds, macs, repeat):
    """The reference's best time over `repeat` runs, fused and node by node in turn (and
    the fused run's CPU time: on a shared machine, wall time also counts the others' work)."""
    refs = {"fused": Reference(load_proto(lowered), target),
            "by_node": Reference(load_proto(lowered), target, fuse_layers=False)}
    best, cpu = {}, None
    for _ in range(repeat):
        for how, ref in refs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            ref.run(feeds)
            took = time.perf_counter() - t0
            if how == "fused":
                cpu = min(cpu or took, time.process_time() - c0)
            if how not in best or took < best[how][0]:
                best[how] = took, sum(ref.array.seconds.values())
    (fused, prims), (by_node, _) = best["fused"], best["by_node"]
    ref = refs["fused"]
    return {"reference_seconds": round(fused, 4),
            "reference_gmac_s": round(macs / fused / 1e9, 3),
            "primitives_seconds": round(prims, 4),
            "primitives_gmac_s": round(macs / prims / 1e9, 3),
            "reference_cpu_gmac_s": round(macs / cpu / 1e9, 3),
            "by_node_seconds": round(by_node, 4),
            "by_node_gmac_s": round(macs / by_node / 1e9, 3),
            "reference_arrays": ref.array.arrays,
            "reference_vmm_invocations": ref.array.vmm_invocations}


# `paddle-npu lower` on ResNet-50 as a whole process: the targets
LOWER_TARGET_S, LOWER_TARGET_MIB = 1.0, 300


def lower_process(onnx_bytes, target, runs):
    """{"lower": ..., "lower --verify": ...}: median wall seconds and peak RSS MiB of
    `paddle-npu lower` in processes of their own (a file in, a file out), runs in turn."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = installed_env(root)
    found = {"lower": [], "lower --verify": []}
    with tempfile.TemporaryDirectory(prefix="bench_npu_") as work:
        model, out = os.path.join(work, "model.onnx"), os.path.join(work, "lowered.onnx")
        with open(model, "wb") as f:
            f.write(onnx_bytes)
        cmd = [sys.executable, "-m", "paddle_npu", "lower", model, "-o", out, "--target", target]
        for _ in range(runs):
            for key, extra in (("lower", []), ("lower --verify", ["--verify"])):
                run = run_measured(cmd + extra, env)
                if run.rc != 0:
                    raise RuntimeError(f"paddle-npu {key} failed ({run.rc}): "
                                       f"{run.stderr.strip()[-300:]}")
                found[key].append(run)
    return {key: {"seconds": round(statistics.median(r.seconds for r in got), 3),
                  "cpu_seconds": round(statistics.median(r.cpu for r in got), 3),
                  "peak_mib": round(statistics.median(r.rss for r in got) / 2**20, 1)}
            for key, got in found.items()}


# plain `paddle-npu lower` of every zoo model at its deployment size: the target
DEPLOYED_LOWER_S = 5.0


def deployed_lower(name, target, cache, runs):
    """{"model", "input_shape", "seconds", "cpu_seconds", "peak_mib", "same_program"}:
    `paddle-npu lower` (no --verify) of zoo model `name` converted at its deployment size,
    in processes of their own (median of `runs`), and whether `--emulation float32` writes
    the same NPU program (emulation.functions.npu_program)."""
    from quant_zoo import shape_args

    model = zoo.MODELS[name]
    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    env = installed_env(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    npu = [sys.executable, "-m", "paddle_npu"]
    shapes = shape_args(model)
    with tempfile.TemporaryDirectory(prefix="bench_npu_") as work:
        onnx_path, out = os.path.join(work, "model.onnx"), os.path.join(work, "lowered.onnx")
        run = run_measured(npu + ["convert", os.path.join(info["dir"], info["model_file"]),
                                  "-o", onnx_path, "-q"] + shapes, env)
        if run.rc != 0:
            raise RuntimeError(f"paddle-npu convert failed ({run.rc}): "
                               f"{run.stderr.strip()[-300:]}")
        got = []
        for _ in range(runs):
            run = run_measured(npu + ["lower", onnx_path, "-o", out, "--target", target], env)
            if run.rc != 0:
                raise RuntimeError(f"paddle-npu lower failed ({run.rc}): "
                                   f"{run.stderr.strip()[-300:]}")
            got.append(run)
        fast = os.path.join(work, "lowered_f32.onnx")
        run = run_measured(npu + ["lower", onnx_path, "-o", fast, "--target", target,
                                  "--emulation", "float32"], env)
        if run.rc != 0:
            raise RuntimeError(f"paddle-npu lower --emulation float32 failed ({run.rc}): "
                               f"{run.stderr.strip()[-300:]}")
        same = npu_program(onnx.load(out)) == npu_program(onnx.load(fast))
    return {"model": name, "input_shape": " ".join(shapes[1::2]),
            "seconds": round(statistics.median(r.seconds for r in got), 2),
            "cpu_seconds": round(statistics.median(r.cpu for r in got), 2),
            "peak_mib": round(statistics.median(r.rss for r in got) / 2**20, 1),
            "same_program": same}



def render_deployed(rows):
    head = (f"{'paddle-npu lower':<22} {'at deployment size':<38} {'wall s':>7} {'cpu s':>6} "
            f"{'peak MiB':>9}  <= {DEPLOYED_LOWER_S:g} s  same program")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<22} FAILED: {r['error'].splitlines()[0][:200]}")
            continue
        met = "met" if r["seconds"] <= DEPLOYED_LOWER_S else "NOT met"
        lines.append(f"{r['model']:<22} {r['input_shape']:<38} {r['seconds']:>7.2f} "
                     f"{r['cpu_seconds']:>6.2f} {r['peak_mib']:>9.0f}  {met:<7}  "
                     f"{'yes' if r['same_program'] else 'NO'}")
    slow = [r["model"] for r in rows if "error" in r or r["seconds"] > DEPLOYED_LOWER_S]
    lines.append(f"every model lowered in <= {DEPLOYED_LOWER_S:g} s: "
                 + ("met" if not slow else f"NOT met ({', '.join(slow)})"))
    other = [r["model"] for r in rows if "error" not in r and not r["same_program"]]
    lines.append("every model's NPU program the same under both emulations: "
                 + ("met" if not other else f"NOT met ({', '.join(other)})"))
    return "\n".join(lines)


def _lower_met(entry):
    return entry["seconds"] <= LOWER_TARGET_S and entry["peak_mib"] <= LOWER_TARGET_MIB


def bench_model(name, target, cache, reference_plans, repeat, ort_plans=(), iters=20,
                input_shape=None, quantize=None, process_runs=0, rates=None):
    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    onnx_bytes = export(os.path.join(info["dir"], info["model_file"]))
    feeds = _feeds(info)
    table = None
    if quantize:
        model = zoo.MODELS[name]
        table = calibrate(onnx_bytes, zoo._make_inputs(model, model.seed + CALIBRATION_SEED, 8))
    if input_shape:
        rng = np.random.default_rng(0)
        feeds.update({k: rng.standard_normal(shape).astype(feeds[k].dtype)
                      for k, shape in input_shape.items()})
    if quantize:
        ort_plans = ()              # onnxruntime's table: float lowerings
    shapes = {k: list(v.shape) for k, v in feeds.items()} if input_shape else None
    # the ONNX model the lowered one is run and timed beside, at the same fixed sizes
    onnx_at_size = with_input_shapes(onnx_bytes, shapes).SerializeToString() \
        if shapes and ort_plans else onnx_bytes
    batch = next(iter(feeds.values())).shape[0]
    row = {"model": name, "target": target.name, "batch": batch, "plans": {},
           "input_shape": {k: list(v.shape) for k, v in feeds.items()},
           "quantize": quantize}
    if process_runs and not (quantize or input_shape):
        row["process"] = lower_process(onnx_bytes, target.name, process_runs)
    for plan in ("packed", "per-channel"):
        t0 = time.perf_counter()
        if quantize:
            lowered, report, _ = quantized_lower(onnx_bytes, table, int(quantize[3:]), target,
                                                 plan, input_shape=shapes)
        else:
            lowered, report = lower(onnx_bytes, target, plan, input_shape=shapes)
        seconds = time.perf_counter() - t0
        totals = report.totals()
        entry = {"lower_seconds": round(seconds, 3), "nodes": len(list(lowered.graph)),
                 "arrays": totals["arrays"], "utilisation": totals["utilisation"],
                 "vmm_invocations": totals["vmm_invocations"], "macs": totals["macs"],
                 "segments": len(report.segments)}
        if plan in reference_plans:
            macs = totals["macs"] * (1 if shapes else batch)   # fixed sizes: the batch counted
            entry.update(_reference_speed(lowered, target, feeds, macs, repeat))
        if plan in ort_plans:
            import onnx_ir as ir

            from paddle_npu.compare import agreement, run_onnx

            want = run_onnx(onnx_at_size, feeds)[1]
            rates = rates or machine_rates()
            emulate(lowered, "float32")     # (any emulation: the same tensors)
            work = program_work(ir.serde.serialize_model(lowered).SerializeToString(), feeds)
            floor = sum(write_seconds(b) for b in work["im2col_bytes"]) + \
                (work["array_macs"] + work["vector_macs"]) / rates["matmul_macs_s"]
            entry["floor"] = {**work, **rates, "floor_ms": round(floor * 1e3, 3)}
            for emulation in EMULATIONS:
                emulate(lowered, emulation)
                serialized = ir.serde.serialize_model(lowered).SerializeToString()
                # the ONNX model timed beside each lowered one, in turn
                timed = ort_timing({"onnx": onnx_at_size, "lowered": serialized}, feeds, iters)
                (onnx_created, onnx_latency), (created, latency) = \
                    timed["onnx"], timed["lowered"]
                # about PROFILE_SECONDS of runs: onnxruntime's profiler keeps a million
                # events at most, which a slow model's 20 runs (SLANet's decoding loop) pass
                profiled = profile(serialized, feeds,
                                   runs=max(3, min(20, round(PROFILE_SECONDS / latency))))
                got, kernels, shares = (profiled[k] for k in ("outputs", "kernels", "shares"))
                layers = sum(shares.get(p, 0) for p in LAYER_SHARES)
                nodes = (inlined_nodes(serialized), inlined_nodes(onnx_at_size))
                with_calls = floor + kernels * rates["call_s"]
                entry.setdefault("ort", {})[emulation] = {
                    "inlined_nodes": nodes[0], "onnx_nodes": nodes[1],
                    "nodes_ratio": round(nodes[0] / nodes[1], 2),
                    "program_nodes": len(lowered.graph),
                    "program_ratio": round(len(lowered.graph) / nodes[1], 2),
                    "session_seconds": round(created, 3), "latency_ms": round(latency * 1e3, 3),
                    "onnx_session_seconds": round(onnx_created, 3),
                    "onnx_latency_ms": round(onnx_latency * 1e3, 3),
                    "session_ratio": round(created / onnx_created, 2),
                    "latency_ratio": round(latency / onnx_latency, 2),
                    "kernel_shares": {k: round(v, 4) for k, v in shares.items()},
                    "layers_ratio": round(layers * latency / onnx_latency, 2),
                    "floor_ratio": round(floor / onnx_latency, 2),
                    "kernels": kernels, "calls_floor_ms": round(with_calls * 1e3, 3),
                    "calls_floor_ratio": round(with_calls / onnx_latency, 2),
                    "worst_rel_diff": max(agreement(a, b)["rel_diff"] for a, b in zip(got, want))}
        row["plans"][plan] = entry
    pk, pc = row["plans"]["packed"], row["plans"]["per-channel"]
    row["ratio"] = {"arrays": round(pc["arrays"] / pk["arrays"], 2),
                    "vmm_invocations": round(pc["vmm_invocations"] / pk["vmm_invocations"], 2)}
    return row


def whole_model(name, target, cache):
    from paddle_npu.npu import verify

    info = zoo.export(name, "legacy", os.path.join(cache, name, "legacy"))
    onnx_bytes = export(os.path.join(info["dir"], info["model_file"]))
    feeds = _feeds(info)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    row = {"model": name, "input_shape": shapes}
    for key, given in (("open", None), ("fixed", shapes)):
        t0 = time.perf_counter()
        lowered, report = lower(onnx_bytes, target, input_shape=given)
        seconds = time.perf_counter() - t0
        devices = [s.device for s in report.segments]
        row[key] = {"npu_mac_share": round(report.npu_mac_share(), 4),
                    "segments": len(devices), "npu_segments": devices.count("npu"),
                    "arrays": report.totals()["arrays"], "lower_seconds": round(seconds, 2),
                    "estimate": report.estimate(), "latency_ns": report.chip.latency_ns,
                    "cpu_ops": {op: n["cpu"] for op, n in report.plain.items() if "cpu" in n}}
    path = os.path.join(info["dir"], "truth.npz")     # Paddle in float64
    truth = None
    if os.path.exists(path):
        with np.load(path) as t:
            truth = [t[f"out_{i}"] for i in range(len(t.files))]
    result = verify(onnx_bytes, lowered, target, feeds=feeds, recorded=truth)
    row["fixed"]["worst_rel_diff"] = result["worst_rel_diff"]
    row["fixed"]["f64_ratio"] = result["float64"].get("worst_ratio")
    row["fixed"]["agrees"] = {"float64": "yes", "tolerance": "tol", "floor": "floor",
                              "recorded": "rec"}.get(result["within"], "NO")
    return row


def _ratio(r):
    return "-" if r is None else f"{r:.2f}"


def render_whole(rows):
    head = (f"{'model':<20} {'MACs on NPU':>11} {'segments':>8}   {'at fixed size:':<14} "
            f"{'MACs on NPU':>11} {'segments':>8} {'NPU segs':>8} {'arrays':>7} {'est us':>9} "
            f"{'hand-overs':>10} {'lower s':>7} {'rel diff':>9} {'f64 x':>6} {'agrees':>6}  CPU ops")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<20} FAILED: {r['error'].splitlines()[0][:200]}")
            continue
        o, f = r["open"], r["fixed"]
        cpu = ", ".join(f"{op} {n}" for op, n in sorted(f["cpu_ops"].items()))
        lines.append(f"{r['model']:<20} {o['npu_mac_share']:>11.1%} {o['segments']:>8}   "
                     f"{'':<14} {f['npu_mac_share']:>11.1%} {f['segments']:>8} "
                     f"{f['npu_segments']:>8} {f['arrays']:>7} "
                     f"{f['latency_ns'] / 1000:>9.1f} {f['estimate']['transfers']:>10} "
                     f"{f['lower_seconds']:>7.2f} "
                     f"{f['worst_rel_diff']:>9.1e} {_ratio(f['f64_ratio']):>6} "
                     f"{f['agrees']:>6}  {cpu}")
    return "\n".join(lines)


def render(rows):
    lines = []
    head = (f"{'model':<20} {'plan':<12} {'arrays':>8} {'util':>7} {'VMM invocations':>16} "
            f"{'lower s':>8} {'nodes':>7} {'ref s':>8} {'ref GMAC/s':>10} {'prim GMAC/s':>11} "
            f"{'by node GMAC/s':>14} {'CPU GMAC/s':>10}")
    lines += [head, "-" * len(head)]
    for r in rows:
        shapes = "; ".join(f"{k} {'x'.join(map(str, v))}" for k, v in r["input_shape"].items())
        lines.append(f"{r['model']}: {shapes}" + (f", {r['quantize']}" if r["quantize"] else ""))
        for plan, e in r["plans"].items():
            ref = (f"{e['reference_seconds']:>8.3f} {e['reference_gmac_s']:>10.2f} "
                   f"{e['primitives_gmac_s']:>11.2f} {e['by_node_gmac_s']:>14.2f} "
                   f"{e['reference_cpu_gmac_s']:>10.2f}") \
                if "reference_seconds" in e else ""
            lines.append(f"{r['model']:<20} {plan:<12} {e['arrays']:>8} {e['utilisation']:>7.1%} "
                         f"{e['vmm_invocations']:>16} {e['lower_seconds']:>8.2f} {e['nodes']:>7} "
                         f"{ref}")
        lines.append(f"{'':<20} {'ratio pc/pk':<12} {r['ratio']['arrays']:>7.1f}x {'':>7} "
                     f"{r['ratio']['vmm_invocations']:>15.1f}x")
    timed = [(r, plan, emulation, t, e["floor"]) for r in rows for plan, e in r["plans"].items()
             for emulation, t in e.get("ort", {}).items()]
    if timed:
        head = (f"{'onnxruntime':<20} {'plan':<12} {'emulation':<10} {'session s':>9} "
                f"{'ONNX s':>7} {'ratio':>6} {'nodes x':>7} {'prog x':>6} "
                f"{'latency ms':>10} {'ONNX ms':>8} {'ratio':>6} {'layers x':>8} "
                f"{'floor ms':>8} {'floor x':>7} {'kernels':>7} {'+calls x':>8} "
                f"{'rel diff':>9}")
        lines += ["", head, "-" * len(head)]
        for r, plan, emulation, e, floor in timed:
            lines.append(f"{r['model']:<20} {plan:<12} {emulation:<10} "
                         f"{e['session_seconds']:>9.3f} "
                         f"{e['onnx_session_seconds']:>7.3f} {e['session_ratio']:>5.2f}x "
                         f"{e['nodes_ratio']:>6.2f}x {e['program_ratio']:>5.2f}x "
                         f"{e['latency_ms']:>10.2f} {e['onnx_latency_ms']:>8.2f} "
                         f"{e['latency_ratio']:>5.2f}x {e['layers_ratio']:>7.2f}x "
                         f"{floor['floor_ms']:>8.2f} "
                         f"{e['floor_ratio']:>6.2f}x {e['kernels']:>7} "
                         f"{e['calls_floor_ratio']:>7.2f}x {e['worst_rel_diff']:>9.1e}")
    measured = [r for r in rows if "process" in r]
    if measured:
        head = (f"{'paddle-npu (process)':<20} {'command':<16} {'wall s':>7} {'cpu s':>6} "
                f"{'peak MiB':>9}  target")
        lines += ["", head, "-" * len(head)]
        for r in measured:
            for key, e in r["process"].items():
                aim = ""
                if r["model"] == "resnet50" and key == "lower":
                    aim = (f"<= {LOWER_TARGET_S:g} s, <= {LOWER_TARGET_MIB} MiB: "
                           f"{'met' if _lower_met(e) else 'NOT met'}")
                lines.append(f"{r['model']:<20} {key:<16} {e['seconds']:>7.2f} "
                             f"{e['cpu_seconds']:>6.2f} {e['peak_mib']:>9.0f}  {aim}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,mobilenet_v3_large",
                    help="zoo models: comma-separated names, 'ci' or 'all' ('deploy' with "
                         "--lower-times: every model at its deployment size)")
    ap.add_argument("--target", default="npu256")
    ap.add_argument("--cache", default=os.environ.get("PADDLE_NPU_ZOO_CACHE") or
                    os.path.join(tempfile.gettempdir(), "paddle_npu_zoo"))
    ap.add_argument("--reference-plans", default="packed",
                    help="plans whose lowered model the NumPy reference runs (comma-separated)")
    ap.add_argument("--repeat", type=int, default=3, help="reference runs, the best is kept")
    ap.add_argument("--ort-plans", default="packed",
                    help="plans whose lowered model onnxruntime times beside the ONNX model "
                         "(comma-separated; empty: none)")
    ap.add_argument("--iters", type=int, default=20, help="onnxruntime runs, the median is kept")
    ap.add_argument("--process-runs", type=int, default=3,
                    help="`paddle-npu lower` runs (fresh processes) per model, the median is "
                         "kept (0: none)")
    ap.add_argument("--json", help="also write the numbers here")
    add_input_shape_argument(ap)
    ap.add_argument("--quantize", choices=("int8", "int16"),
                    help="lower with integer matrix layers (the reference runs them)")
    ap.add_argument("--whole", action="store_true",
                    help="per model: NPU share of MACs and segments, sizes open vs fixed")
    ap.add_argument("--lower-times", action="store_true",
                    help="per model: plain `paddle-npu lower` time at its deployment size "
                         f"(target <= {DEPLOYED_LOWER_S:g} s)")
    args = ap.parse_args(argv)
    start_launcher()
    target = load_target(args.target)
    if args.lower_times:
        from quant_zoo import select

        rows = []
        for name in select(args.models):
            try:                      # one model's failure is a row of the table
                rows.append(deployed_lower(name, target.name, args.cache,
                                           max(1, args.process_runs)))
            except Exception as e:    # noqa: BLE001 - reported, and the exit code says so
                rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            print(f"{name}: done", file=sys.stderr, flush=True)
        print(f"target {target.name}; {load_note()}")
        print(render_deployed(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 1 if any("error" in r or r["seconds"] > DEPLOYED_LOWER_S or not r["same_program"]
                        for r in rows) else 0
    names = zoo.select(args.models)
    ort_plans = [p for p in args.ort_plans.split(",") if p]
    rates = machine_rates() if ort_plans and not (args.whole or args.quantize) else None
    rows = []
    for name in names:
        if args.whole:
            try:                      # one model's failure is a row of the table, not the end
                rows.append(whole_model(name, target, args.cache))
            except Exception as e:    # noqa: BLE001 - reported, and the exit code says so
                rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
        else:
            rows.append(bench_model(name, target, args.cache, args.reference_plans.split(","),
                                    args.repeat, ort_plans, args.iters,
                                    parse_input_shapes(args.input_shape), args.quantize,
                                    args.process_runs, rates))
        print(f"{name}: done", file=sys.stderr, flush=True)
    print(f"target {target.name}: {target.rows} x {target.cols} arrays; {load_note()}")
    if rates:
        print(f"floor rates: writing 64 MiB {rates['write_bytes_s'] / 1e9:.1f} GB/s (each "
              f"Im2Col timed at its own size), onnxruntime MatMul "
              f"{rates['matmul_macs_s'] / 1e9:.1f} GMAC/s, onnxruntime "
              f"{rates['call_s'] * 1e6:.2f} us a kernel call")
    print(render_whole(rows) if args.whole else render(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.whole:
        return 1 if any("error" in r for r in rows) else 0
    if "resnet50" in args.models.split(",") and target.rows == target.cols == 256:
        r = next(r for r in rows if r["model"] == "resnet50")
        ok = r["ratio"]["arrays"] >= 10
        print(f"ResNet-50: packed uses {r['ratio']['arrays']:.1f}x fewer arrays than per-channel "
              f"(target >= 10x): {'met' if ok else 'NOT met'}")
        if "process" in r:
            e = r["process"]["lower"]
            met = _lower_met(e)
            print(f"ResNet-50: `paddle-npu lower` {e['seconds']:.2f} s ({e['cpu_seconds']:.2f} s "
                  f"of CPU), {e['peak_mib']:.0f} MiB peak RSS (target <= {LOWER_TARGET_S:g} s, "
                  f"<= {LOWER_TARGET_MIB} MiB): "
                  f"{'met' if met else 'NOT met'}")
            ok = ok and met
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
