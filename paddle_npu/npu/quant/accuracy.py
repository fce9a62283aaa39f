"""Layer-by-layer accuracy of a quantised model against its float model.

For every quantised layer, the float model's tensor and the quantised model's tensor of the
same name (the layer's output; after a fused ReLU, the ReLU's) on the same inputs:

    cosine       <f, q> / (|f| |q|)
    SQNR (dB)    10 log10(sum f^2 / sum (f - q)^2)      (inf when equal)
    max abs diff
    drop (dB)    SQNR of the layer's input - SQNR of its output
    added NSR    noise-to-signal power ratio of the output minus that of the input: roughly
                 the noise the layer itself adds, plus what it amplifies of its input's
                 (the report's order, worst first). `--auto-hp N` does not promote by it: in
                 a deep chain that amplifies perturbations (a network with random weights)
                 the late layers top this list while the early ones cause the noise, so it
                 measures each layer's promotion end to end (promote.layer_sensitivity)

Errors accumulate: a layer's numbers include what its inputs brought. The suggestion per
layer: int16 (`_hp`) when the layer adds a large share (HP_SHARE) of the noise all layers
add, or its output is below LOW_SQNR_DB; `_cpu` (float on the CPU) for a 16-bit layer still
that noisy. A ranking by measured effect on the output is `--auto-hp` / `--hp-until-cosine`.
"""
import math

import numpy as np
import onnx

from ...onnx_io import load_proto, own_proto
from ...outputs import write_text, write_with
from ..chip.plan import threshold_of
from ..emulation.runtime import session
from ..ops.quant import qrange
from ..passes.channels_last import tensors_as_nchw
from ..passes.rnn import unrolled_proto
from ..verification.selection import (HELD, expose_steps, find_selections, held_as, hold,
                                      link_lowered)
from .calibrate import load_table
from .qlower import records_of, unit_records_of
from .samples import Samples, accepted_batch, open_samples, run_batches

SQNR_CAP = 100.0           # dB reported for an exact tensor (the model input)


class Agreement:
    """`metrics` of a float tensor and its quantised form, summed batch by batch (so a report
    over many samples never holds more than one batch of every tensor)."""

    def __init__(self):
        self.signal = self.quant = self.dot = self.noise = self.worst = 0.0
        self.size = 0

    def add(self, f, q):
        f = np.asarray(f, np.float64).reshape(-1)
        q = np.asarray(q, np.float64).reshape(-1)
        d = f - q
        self.signal += float(f @ f)
        self.quant += float(q @ q)
        self.dot += float(f @ q)
        self.noise += float(d @ d)
        if d.size:
            self.worst = max(self.worst, float(np.max(np.abs(d))))
        self.size += f.size

    def result(self):
        if math.isnan(self.noise) or math.isnan(self.signal):
            return {"cosine": math.nan, "sqnr_db": math.nan, "max_abs_diff": math.nan}
        nf, nq = math.sqrt(self.signal), math.sqrt(self.quant)
        cos = self.dot / (nf * nq) if nf > 0 and nq > 0 else float(nf == nq)
        sqnr = SQNR_CAP if self.noise == 0 else (
            10 * math.log10(self.signal / self.noise) if self.signal > 0 else -SQNR_CAP)
        return {"cosine": cos, "sqnr_db": min(sqnr, SQNR_CAP),
                "max_abs_diff": self.worst if self.size else 0.0}


def metrics(f, q):
    agreement = Agreement()
    agreement.add(f, q)
    return agreement.result()


def run_tensors(model_bytes, feeds, names):
    """{name: array over all samples} of the tensors `names` (computed ones or inputs) of a
    model run on `feeds` (a dict or samples.Samples) in the batches it accepts."""
    sess, names = _session_for(onnx.load_from_string(model_bytes), names)
    return _tensors_of(sess, feeds, names)


def _tensors_of(sess, feeds, names):
    out = {}
    for given, part in run_batches(sess, feeds):
        for k, v in _named(part, given, names).items():
            out.setdefault(k, []).append(np.asarray(v))
    return {k: _joined(v) for k, v in out.items()}


def tensors_by_sample(model_bytes, feeds, names, order):
    """Yield (i, {name: array}) for each sample i of `order` (indices into the Samples
    `feeds`), the model run on that sample alone, in that order and in one session: a
    search that stops at the first sample failing a bound runs no more than it needs. A
    model that fixes its batch above 1 runs in its batches, the samples then given in order."""
    sess, names = _session_for(onnx.load_from_string(model_bytes), names)
    if accepted_batch(sess, feeds.where) not in (None, 1):
        tensors = _tensors_of(sess, feeds, names)
        for i in order:
            yield i, {k: v[i:i + 1] for k, v in tensors.items()}
        return
    outputs = [o.name for o in sess.get_outputs()]
    for i in order:
        given = feeds.read(i, i + 1)
        yield i, _named(dict(zip(outputs, sess.run(None, given))), given, names)


def layer_report(float_model, quant_model, feeds, records=None):
    """{"layers": [...graph order...], "outputs": [...]}: per-layer metrics of the quantised
    model (path / proto / ir.Model, run by onnxruntime through its function bodies)."""
    # the float model as stage 2 computes it: an unrolled LSTM / GRU's steps are layers too
    fproto, qproto = unrolled_proto(load_proto(float_model)), load_proto(quant_model)
    records = records if records is not None else records_of(qproto)
    if records is None:
        raise ValueError("the model carries no quantisation records (not quantised?)")
    # the lookup tables and written arrays are layers of the report too, in graph order
    order = {name: i for i, node in enumerate(fproto.graph.node) for name in node.output}
    records = sorted(list(records) + unit_records_of(qproto),
                     key=lambda r: order.get(r["output"], len(order)))
    outputs = [o.name for o in qproto.graph.output]
    # a layer's output the lowering moved straight into another layout (a transpose merged
    # with the reshape after it) is measured where the float model has the moved tensor too
    held = _held_at(fproto, qproto, [r[k] for r in records for k in ("output", "input")])
    records = [dict(r, output=held.get(r["output"], r["output"]),
                    input=held.get(r["input"], r["input"])) for r in records]
    names = [r["output"] for r in records] + [r["input"] for r in records] + outputs
    feeds = open_samples(fproto, feeds)
    # outputs that hinge on a selection (a detector's top-k, a sampling grid) are judged as
    # verify judges them: the quantised model given the float model's picks, batch by batch
    selections = find_selections(fproto.graph)
    if selections:
        link_lowered(selections, qproto.graph, "the quantised model")
        qproto = hold(own_proto(quant_model, qproto), selections, lowered=True)
        fproto = expose_steps(own_proto(float_model, fproto), selections)
    # both models batch by batch, in step: every tensor's agreement summed as it comes, the
    # outputs kept (the callers judge them sample by sample)
    # (every layer's tensors returned a batch at a time: no arena holding a run's peak
    # once more for the sessions' life)
    sessions = [_session_for(fproto, names + [s.picks for s in selections], arena=False),
                _session_for(qproto, names, arena=False)]
    agreements, kept = {}, ({}, {})
    for given, fpart in run_batches(sessions[0][0], feeds):
        fvals = _named(fpart, given, sessions[0][1])
        qgiven = {**given, **{s.picks + HELD: fpart[s.picks] for s in selections}}
        qpart = dict(zip([o.name for o in sessions[1][0].get_outputs()],
                         sessions[1][0].run(None, qgiven)))
        qvals = tensors_as_nchw(qproto, _named(qpart, given, sessions[1][1]))
        for name, f in fvals.items():
            if name in qvals:
                agreements.setdefault(name, Agreement()).add(f, qvals[name])
        for vals, keep in zip((fvals, qvals), kept):
            for name in outputs:
                if name in vals:
                    keep.setdefault(name, []).append(np.asarray(vals[name]))
        # (this batch's tensors go before the next batch runs, not after it)
        del fpart, qpart, fvals, qvals, vals
    measured = {name: a.result() for name, a in agreements.items()}

    def sq(name):
        return measured[name]["sqnr_db"] if name in measured else SQNR_CAP

    layers = []
    for r in records:
        if r["output"] not in measured:
            continue
        m = dict(measured[r["output"]])
        m.update(layer=r["layer"], op=r["op"], bits=r["bits"], tensor=r["output"],
                 input_sqnr_db=sq(r["input"]))
        m["drop_db"] = m["input_sqnr_db"] - m["sqnr_db"]
        m["added_nsr"] = 10 ** (-m["sqnr_db"] / 10) - 10 ** (-m["input_sqnr_db"] / 10)
        layers.append(m)
    outs = [dict(measured[n], name=n, **({"judged": held_as(selections)} if selections else {}))
            for n in outputs if n in measured]
    joined = [{n: _joined(v) for n, v in keep.items()} for keep in kept]
    return {"layers": layers, "outputs": outs, "_float": joined[0], "_quant": joined[1]}


# ops that only move a tensor's elements: any of the metrics is the same on their output
MOVES = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")


def _held_at(fproto, qproto, names):
    """{name: the tensor to measure it at} for those of `names` the quantised model does not
    have: the first tensor both models have on the float model's chain of single-reader
    moves from it (its elements in another order). Names without one are left out."""
    present = {v for n in qproto.graph.node for v in n.output} | \
        {i.name for i in qproto.graph.input}
    readers = {}
    for node in fproto.graph.node:
        for v in node.input:
            readers.setdefault(v, []).append(node)
    held = {}
    for name in names:
        at = name
        while at not in present and len(readers.get(at, ())) == 1 and \
                readers[at][0].op_type in MOVES and readers[at][0].input[0] == at:
            at = readers[at][0].output[0]
        if at != name and at in present:
            held[name] = at
    return held


def _session_for(proto, names, arena=True):
    """(an onnxruntime session computing those of `names` the model has, those names)."""
    inputs = {i.name for i in proto.graph.input}
    present = {v for n in proto.graph.node for v in n.output} | inputs
    names = [n for n in dict.fromkeys(names) if n in present]
    return session(proto, [n for n in names if n not in inputs], arena), names


def _named(part, given, names):
    """{name: value} of `names` from a batch's outputs, or its inputs."""
    return {k: given[k] if k in given else part[k] for k in names
            if k in given or part.get(k) is not None}


def _joined(parts):
    # (a scalar tensor, one per batch, is stacked: the metrics read every value alike)
    return np.concatenate(parts) if parts[0].ndim else np.stack(parts)


def input_floor(float_model, table, feeds, bits=8):
    """How much the float model itself loses to its inputs alone being rounded to the
    `bits`-bit grid the quantised model uses for them (per tensor, the calibrated threshold):
    [{name, cosine, sqnr_db, max_abs_diff}] per output. The quantised model rounds at every
    layer on top of this, so it rarely does better: a model whose floor is already low
    amplifies small perturbations (a chaotic network), and no integer width that rounds its
    input can fix that."""
    proto = load_proto(float_model)
    tensors = load_table(table)["tensors"]
    _, hi = qrange(bits)
    feeds = open_samples(proto, feeds)

    def round_batch(start, stop):
        rounded = {}
        for name, x in feeds.read(start, stop).items():
            entry = tensors.get(name)
            if entry is None or x.dtype.kind != "f":
                rounded[name] = x
                continue
            limit = threshold_of(entry, bits)
            step = max(limit, 1e-12) / hi
            rounded[name] = (np.clip(np.rint(x / step), -hi - 1, hi) * step).astype(x.dtype)
        return rounded
    outputs = [o.name for o in proto.graph.output]
    # (given the exact run's picks where outputs hinge on a selection, as layer_report)
    selections = find_selections(proto.graph)
    picks = [s.picks for s in selections]
    if selections:      # (one copy of the model, its picks shown, then held)
        proto = expose_steps(own_proto(float_model, proto), selections)
    exact = run_tensors(proto.SerializeToString(), feeds, outputs + picks)
    near_model = hold(proto, selections, lowered=False) if selections else proto
    rounded = with_held(Samples(feeds.names, feeds.count, round_batch, feeds.where,
                                feeds.whole), {name: exact[name] for name in picks})
    near = run_tensors(near_model.SerializeToString(), rounded, outputs)
    judged = {"judged": held_as(selections)} if selections else {}
    return [dict(metrics(exact[n], near[n]), name=n, **judged) for n in outputs if n in exact]


def with_held(feeds, values):
    """`feeds` (Samples) with each of `values` {name: the float model's picks or grid over
    all the samples} fed as name + HELD, sample by sample: a grid's leading axis holds a
    row block per sample (a deformable attention's: the heads of each image)."""
    def read(start, stop):
        held = {}
        for name, v in values.items():
            rows = len(v) // feeds.count if not feeds.whole else 0
            held[name + HELD] = v[start * rows:stop * rows] if rows else v
        return {**feeds.read(start, stop), **held}
    return Samples(feeds.names + [n + HELD for n in values], feeds.count, read, feeds.where,
                   feeds.whole)


def worst_layers(report, n=None):
    """The layers, most sensitive first: largest noise-to-signal ratio added by the layer
    itself (its output's NSR minus its input's), then lowest SQNR."""
    ranked = sorted(report["layers"], key=lambda m: (-m["added_nsr"], m["sqnr_db"]))
    return ranked if n is None else ranked[:n]


HP_SHARE = 0.2       # a layer adding this share of all the added noise is worth 16 bits
LOW_SQNR_DB = 20.0   # and so is one whose output is this noisy, whatever brought it


def suggest(layer, total_added_nsr, hp_available=True):
    """What to do with a layer, from its share of the noise all layers add and its SQNR."""
    if layer["bits"] == 16:
        return "16-bit: mark `_cpu` (float on the CPU) if still too lossy" \
            if layer["sqnr_db"] < LOW_SQNR_DB else "fine at int16"
    share = layer["added_nsr"] / total_added_nsr if total_added_nsr > 0 else 0.0
    if share < HP_SHARE and layer["sqnr_db"] >= LOW_SQNR_DB:
        return "fine at int8"
    why = f"adds {share:.0%} of the noise" if share >= HP_SHARE else "noisy output"
    return f"mark `_hp` (16-bit): {why}" if hp_available else \
        f"mark `_cpu` (float on the CPU): {why}"


def render(report, top=None):
    lines = [f"{'layer':<28} {'op':<6} {'bits':>4} {'cosine':>9} {'SQNR dB':>8} "
             f"{'drop dB':>8} {'max|diff|':>10}  suggestion"]
    total = sum(max(m["added_nsr"], 0.0) for m in report["layers"])
    for m in worst_layers(report, top):
        lines.append(f"{m['layer'][-28:]:<28} {m['op'][:6]:<6} {m['bits']:>4} "
                     f"{m['cosine']:>9.6f} {m['sqnr_db']:>8.2f} {m['drop_db']:>8.2f} "
                     f"{m['max_abs_diff']:>10.4g}  {suggest(m, total)}")
    for o in report["outputs"]:
        given = f" ({o['judged']})" if "judged" in o else ""
        lines.append(f"output {o['name']}{given}: cosine {o['cosine']:.6f}, SQNR "
                     f"{o['sqnr_db']:.2f} dB, max abs diff {o['max_abs_diff']:.4g}")
    return "\n".join(lines)


def plot_sqnr(reports, path):
    """Per-layer SQNR (graph order) of one or more reports {label: report} as PNG; without
    matplotlib an SVG is written next to it instead. Returns the path written."""
    try:
        import matplotlib       # optional: only for this picture
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt     # (after the backend is chosen)
    except ImportError:
        svg = path.rsplit(".", 1)[0] + ".svg"
        _write_svg(reports, svg)
        return svg
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * max(len(r["layers"]) for r in
                                                          reports.values())), 4))
    for label, rep in reports.items():
        ax.plot([m["sqnr_db"] for m in rep["layers"]], marker="o", ms=3, label=label)
    first = next(iter(reports.values()))["layers"]
    ax.set_xticks(range(len(first)))
    ax.set_xticklabels([m["layer"][-18:] for m in first], rotation=90, fontsize=6)
    ax.set_ylabel("SQNR vs float (dB)")
    ax.set_title("per-layer SQNR of the quantised model")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    write_with(path, lambda file_path: fig.savefig(file_path, dpi=120))
    plt.close(fig)
    return path


def _write_svg(reports, path):
    w, h, pad = 800, 360, 40
    n = max(len(r["layers"]) for r in reports.values())
    vals = [m["sqnr_db"] for r in reports.values() for m in r["layers"]] or [0]
    top = max(vals) + 5
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">',
             f'<text x="{pad}" y="20" font-size="14">per-layer SQNR (dB), 0..{top:.0f}</text>']
    for k, (label, rep) in enumerate(reports.items()):
        pts = " ".join(
            f"{pad + i * (w - 2 * pad) / max(n - 1, 1):.1f},"
            f"{h - pad - max(m['sqnr_db'], 0) / top * (h - 2 * pad):.1f}"
            for i, m in enumerate(rep["layers"]))
        c = colors[k % len(colors)]
        parts.append(f'<polyline fill="none" stroke="{c}" points="{pts}"/>')
        parts.append(f'<text x="{w - 200}" y="{20 + 16 * k}" fill="{c}" font-size="12">'
                     f'{label}</text>')
    parts.append("</svg>")
    write_text(path, "\n".join(parts))
