"""Segmented execution: a lowered model cut at its device changes, one ONNX model per segment.

    DIR/manifest.json     {"format": "paddle_npu.segments", "version": 1, "target": ...,
                           "model": {"inputs": [...], "outputs": [...]},
                           "segments": [{"index", "device", "file", "inputs", "outputs",
                                         "nodes", "precision16"}, ...]}   (in run order)
    DIR/segment_<i>_<device>.onnx

A segment's inputs are model inputs or tensors earlier segments output; its outputs are what
later segments (or the host, for model outputs) read. NPU segments keep their primitives and
carry the function bodies, so each file runs on its own in onnxruntime. `run_segments` runs
the chain with the arrays keyed by tensor name.
"""
import json
import os
import time

import numpy as np
from onnx import helper

from ... import shape_inference
from ...errors import ConversionError
from ...onnx_io import names_read, save_proto, to_proto
from ...outputs import write_text
from ..emulation.runtime import session
from ..graph import proto_precision, proto_segment

FORMAT = "paddle_npu.segments"
MANIFEST = "manifest.json"


def _value_infos(proto):
    """{tensor name: ValueInfoProto} of a model's inputs, outputs and value_info."""
    out = {}
    for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
        out[vi.name] = vi
    return out


def _used_functions(nodes, functions):
    """The model-local functions the nodes call (and those calls inside them)."""
    by_key = {(f.domain, f.name, getattr(f, "overload", "")): f for f in functions}
    want, todo = [], list(nodes)
    seen = set()
    while todo:
        n = todo.pop()
        key = (n.domain, n.op_type, getattr(n, "overload", ""))
        if key in by_key and key not in seen:
            seen.add(key)
            want.append(by_key[key])
            todo.extend(by_key[key].node)
        for a in n.attribute:
            if a.HasField("g"):
                todo.extend(a.g.node)
            for g in a.graphs:
                todo.extend(g.node)
    return [f for f in functions if (f.domain, f.name, getattr(f, "overload", "")) in seen]


def split_model(lowered, segments):
    """One ModelProto per segment of a lowered model (ir.Model or ModelProto)."""
    proto = to_proto(lowered)
    infos = _value_infos(proto)
    missing = [n for s in segments for n in s.inputs + s.outputs if n not in infos]
    if missing:
        inferred = shape_inference.infer(proto, data_prop=False)
        infos.update(_value_infos(inferred))
    inits = {t.name: t for t in proto.graph.initializer}
    seg_of = {}
    for node in proto.graph.node:
        seg_of.setdefault(proto_segment(node), []).append(node)
    models = []
    for s in segments:
        nodes = seg_of.get(s.index, [])
        if [n.name for n in nodes] != list(s.nodes):
            raise ConversionError(f"segment {s.index}: its nodes do not match the model's")

        def info(name):
            vi = infos.get(name)
            if vi is None or not vi.type.HasField("tensor_type"):
                raise ConversionError(f"segment {s.index}: the type of '{name}' is not known")
            return vi
        read = {n for node in nodes for n in names_read(node)}
        graph = helper.make_graph(
            nodes, f"{proto.graph.name or 'model'}_segment{s.index}",
            [info(n) for n in s.inputs], [info(n) for n in s.outputs],
            initializer=[inits[n] for n in sorted(read) if n in inits])
        produced = {o for n in nodes for o in n.output}
        graph.value_info.extend(vi for name, vi in infos.items()
                                if name in produced and name not in s.outputs)
        m = helper.make_model(graph, opset_imports=list(proto.opset_import),
                              functions=_used_functions(nodes, list(proto.functions)))
        m.ir_version = proto.ir_version
        models.append(m)
    return models


def emit_segments(lowered, report, out_dir):
    """Write the per-segment models and manifest.json of a lowered model; returns the
    manifest dict."""
    os.makedirs(out_dir, exist_ok=True)
    proto = to_proto(lowered)
    models = split_model(proto, report.segments)
    hp = {}
    for node in proto.graph.node:
        if proto_precision(node) == 16:
            hp.setdefault(proto_segment(node), []).append(node.name)
    entries = []
    for s, m in zip(report.segments, models):
        name = f"segment_{s.index}_{s.device}.onnx"
        save_proto(m, os.path.join(out_dir, name))
        entries.append({"index": s.index, "device": s.device, "file": name,
                        "inputs": list(s.inputs), "outputs": list(s.outputs),
                        "nodes": len(s.nodes), "first": s.nodes[0], "last": s.nodes[-1],
                        "precision16": hp.get(s.index, [])})
    manifest = {"format": FORMAT, "version": 1, "target": report.target["name"],
                "model": {"inputs": [v.name for v in proto.graph.input],
                          "outputs": [v.name for v in proto.graph.output]},
                "segments": entries}
    write_text(os.path.join(out_dir, MANIFEST), json.dumps(manifest, indent=1))
    return manifest


def load_manifest(seg_dir):
    path = os.path.join(seg_dir, MANIFEST)
    if not os.path.exists(path):
        raise ConversionError(f"{seg_dir}: no {MANIFEST} (write one with --segments DIR)")
    with open(path, encoding="utf-8") as f:
        try:
            manifest = json.load(f)
        except ValueError as exc:
            raise ConversionError(f"{path}: not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ConversionError(f"{path}: not a paddle_npu segment manifest")
    return manifest


def run_segments(seg_dir, feeds, trace=None):
    """Run the segments of DIR in order on `feeds` ({model input name: array}); returns
    {model output name: array}. trace: a list that receives (index, device, seconds)."""

    manifest = load_manifest(seg_dir)
    missing = [n for n in manifest["model"]["inputs"] if n not in feeds]
    if missing:
        raise ConversionError(f"inputs missing: {missing} (the model takes "
                              f"{manifest['model']['inputs']})")
    env = {k: np.asarray(v) for k, v in feeds.items()}
    for seg in manifest["segments"]:
        path = os.path.join(seg_dir, seg["file"])
        sess = session(path)
        takes = sorted(i.name for i in sess.get_inputs())
        gives = {o.name for o in sess.get_outputs()}
        if takes != sorted(seg["inputs"]) or not set(seg["outputs"]) <= gives:
            raise ConversionError(
                f"{path}: its model takes {takes} and gives {sorted(gives)}, not segment "
                f"{seg['index']}'s {sorted(seg['inputs'])} -> {sorted(seg['outputs'])} of "
                f"{MANIFEST}: it is another model's; lower the model again with "
                f"--segments {seg_dir}")
        absent = [n for n in seg["inputs"] if n not in env]
        if absent:
            raise ConversionError(f"segment {seg['index']}: no earlier segment made {absent}")
        t = time.perf_counter()
        outs = sess.run(seg["outputs"], {n: env[n] for n in seg["inputs"]})
        if trace is not None:
            trace.append((seg["index"], seg["device"], time.perf_counter() - t))
        env.update(zip(seg["outputs"], outs))
    return {n: env[n] for n in manifest["model"]["outputs"]}
