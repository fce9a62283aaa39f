"""Which layers to promote to 16 bits: measured sensitivity and the search for the fewest.

    auto_hp(model, table, data, n)      quantise, rank the int8 layers, promote the n most
                                        sensitive (or, with until_cosine, the fewest that
                                        reach it) and quantise again
    layer_sensitivity(...)              the output's SQNR with each layer alone at 16 bits
"""
import math

import numpy as np
import onnx_ir as ir

from ...errors import ConversionError
from ...onnx_io import load_proto
from ..passes.channels_last import tensors_as_nchw
from ..passes.common import with_input_shapes
from ..verification.selection import RANKED, find_selections, hold, link_lowered, steps_exposed
from .accuracy import (layer_report, metrics, run_tensors, tensors_by_sample, with_held,
                       worst_layers)
from .calibrate import load_precision
from .qlower import quantized_lower, unit_records_of
from .samples import SampleFiles, Samples, open_samples

SENSITIVITY_SAMPLES = 64      # inputs the per-layer sensitivity runs use (the first ones)


def _output_sqnr(fouts, qouts):
    """SQNR (dB) over all the model's outputs together."""
    signal = noise = 0.0
    for name, f in fouts.items():
        if name not in qouts:
            continue
        f = np.asarray(f, np.float64)
        signal += float(np.sum(f ** 2))
        noise += float(np.sum((f - np.asarray(qouts[name], np.float64)) ** 2))
    if math.isnan(noise) or math.isnan(signal):
        return math.nan
    if noise == 0:
        return float("inf")
    return 10 * math.log10(signal / noise) if signal > 0 else -float("inf")


def layer_sensitivity(model, table, data, layers, bits=8, target=None, plan="packed",
                      precision=None, samples=SENSITIVITY_SAMPLES, **kw):
    """{layer: output SQNR (dB) of the quantised model with that layer alone promoted to 16
    bits}, measured end to end (one quantised lowering and run per layer, on the first
    `samples` inputs). This, not a layer's own SQNR drop, says what promoting it buys: in a
    deep chain that amplifies perturbations, an early layer's rounding noise grows layer by
    layer, so the late layers show the large drops while the early ones are the cause."""
    proto = load_proto(model)
    feeds = open_samples(proto, data)
    if samples and samples < feeds.count:
        feeds = Samples(feeds.names, samples, feeds.read, feeds.where, feeds.whole)
    outputs = [o.name for o in proto.graph.output]
    fouts = run_tensors(proto.SerializeToString(), feeds, outputs)
    base = dict(load_precision(precision)) if precision else {}
    out = {}
    for name in layers:
        m, _, _ = quantized_lower(proto, table, bits, target, plan, {**base, name: "int16"},
                                  **kw)
        qouts = run_tensors(ir.serde.serialize_model(m).SerializeToString(), feeds, outputs)
        out[name] = _output_sqnr(fouts, qouts)
    return out


def min_cosine(fouts, qouts, samples=1):
    """The smallest cosine to float of the outputs both runs have, sample by sample when
    their leading axis holds the `samples` samples (as `verify` judges one input: a pooled
    cosine is carried by the samples of most energy and promises less on a new input)."""
    worst = float("inf")
    for name, f in fouts.items():
        if name not in qouts:
            continue
        q = qouts[name]
        parts = zip(f, q) if samples > 1 and len(f) == samples == len(q) else [(f, q)]
        for a, b in parts:
            cos = metrics(a, b)["cosine"]
            _measurable(cos, f"output {name!r}")
            worst = min(worst, cos)
    return worst


def _held(proto, feeds, outputs):
    """(the selections some output hinges on (selection.py), the feeds with the float
    model's picks of each added, the float model's `outputs`, scores and grids sample by
    sample (SampleFiles), the scores and grids by the names the held quantised model shows
    them under; `outputs` as they are without selections): the promotion search judges
    outputs as `verify` does, given the float model's picks and grids (near-tied scores swap
    picks at any precision, and an output computed from other picks differs wholesale), and
    the scores and grids themselves like outputs. A decoder's scores of every step are hundreds of MB a
    sample: they wait in files for the sample being judged."""
    selections = find_selections(proto.graph)
    if not selections:
        return selections, feeds, outputs
    names = list(outputs) + [n for s in selections for n in (s.picks, s.scores)]
    judged, picks = SampleFiles(), {s.picks: [] for s in selections}
    for _, got in tensors_by_sample(steps_exposed(proto, selections).SerializeToString(),
                                    feeds, names, range(feeds.count)):
        for s in selections:
            picks[s.picks].append(got[s.picks])
        judged.append({**{n: got[n] for n in outputs if n in got},
                       **{s.picks + RANKED: got[s.scores] for s in selections}})
    picks = {name: np.concatenate(parts) for name, parts in picks.items()}
    return selections, with_held(feeds, picks), judged


class Probe:
    """The worst cosine to float (`min_cosine`) of a quantised model's outputs, judged as
    `verify` judges them (given the float model's picks and grids, which `held` then
    holds), against `judged`: the float model's outputs over `count` samples, or for a
    model with selections each sample's (`_held`).

    `worst(model, bound)`: the samples run one at a time (where the outputs have them on
    their leading axis, or are kept sample by sample), the one that last fell below a bound
    first; with a bound the run stops at the first sample below it: in a bisection about
    half the probes fail, each on the sample the one before failed on, so a failing probe
    costs one run rather than one per sample. Without a bound every sample runs and the
    value is exact; so it is where the outputs hold no sample axis to judge them by, the
    samples then run together."""

    def __init__(self, held, judged, selections, count):
        self.held, self.judged, self.selections, self.count = held, judged, selections, count
        self.order = list(range(count))
        self.kept = isinstance(judged, SampleFiles)
        self.names = judged.names if self.kept else list(judged)
        self.by_sample = self.kept or count > 1 and not held.whole and all(
            len(f) == count for f in judged.values())

    def worst(self, model, bound=None):
        proto = ir.serde.serialize_model(model)
        if self.selections:
            link_lowered(self.selections, proto.graph, "the quantised model")
            proto = hold(proto, self.selections, lowered=True)
        if not self.by_sample:
            return min_cosine(self.judged, tensors_as_nchw(proto, run_tensors(
                proto.SerializeToString(), self.held, self.names)), self.count)
        worst = float("inf")
        for i, got in tensors_by_sample(proto.SerializeToString(), self.held, self.names,
                                        list(self.order)):
            judged = self.judged[i] if self.kept else {
                k: f[i:i + 1] for k, f in self.judged.items()}
            cos = min_cosine(judged, tensors_as_nchw(proto, got))
            worst = min(worst, cos)
            if bound is not None and cos < bound:
                self.order.remove(i)
                self.order.insert(0, i)
                break
        return worst


def _measurable(value, what):
    """A NaN measure ranks nothing (every comparison with it is false): refuse it."""
    if math.isnan(value):
        raise ConversionError(f"{what}: its cosine / SQNR to float is NaN on this data (the "
                              "float or the quantised model computes NaN there), so no layer "
                              "can be chosen for 16 bits by it; check the data and the "
                              "model's float outputs")


def auto_hp(model, table, data, n, bits=8, target=None, plan="packed", precision=None,
            rank="measured", until_cosine=None, **kw):
    """Quantise, rank the int8 layers by sensitivity, promote the N most sensitive to 16 bits
    and quantise again. rank="measured" (default): by the model output's SQNR with each layer
    alone promoted (`layer_sensitivity`, one extra quantised run per layer); rank="added":
    by the noise each layer's output adds over its input's in one run (`worst_layers`:
    cheap, but blind to how much the layers downstream amplify a layer's noise).
    until_cosine: promote the fewest of the ranked layers (at most N when N > 0) for every
    output's cosine to float to reach it on every sample, found by bisection on the count
    (a quantised run per probe, `Probe`; more promoted layers measure better, the search
    assumes it). Returns a dict
    with both reports, the final model and `reached` (None without until_cosine)."""
    if rank not in ("measured", "added"):
        raise ValueError(f"unknown ranking {rank!r} (measured / added)")
    proto = load_proto(model)
    feeds = open_samples(proto, data)
    count = 1 if feeds.whole else feeds.count
    m, report, records = quantized_lower(proto, table, bits, target, plan, precision, **kw)
    # the float model at the sizes it was lowered at (`verify`'s reference): an LSTM / GRU
    # unrolls for the report only at a fixed sequence length
    shapes = kw.get("input_shape")
    reference = with_input_shapes(proto, shapes) if shapes else proto
    before = layer_report(reference, m, feeds, records)
    for lay in before["layers"]:
        for key in ("cosine", "sqnr_db"):
            _measurable(lay[key], f"layer {lay['layer']} (output {lay['tensor']!r})")
    for out in before["outputs"]:
        for key in ("cosine", "sqnr_db"):
            _measurable(out[key], f"output {out['name']!r}")
    # the 8-bit layers the report could not see (their output exists in no form both models
    # have) lead the ranking by added noise: nothing shows them harmless
    seen = {lay["layer"] for lay in before["layers"]}
    unseen = [r["layer"] for r in records + unit_records_of(m)
              if r["bits"] == 8 and r["layer"] not in seen]
    worst = unseen + [lay["layer"] for lay in worst_layers(before) if lay["bits"] == 8]
    if until_cosine is not None and n <= 0:
        n = len(worst)
    sens = None
    if rank == "measured" and n > 0 and worst:
        sens = layer_sensitivity(proto, table, feeds, worst, bits, target, plan, precision,
                                 **kw)
        for name, sqnr in sens.items():
            _measurable(sqnr, f"the model with layer {name} at 16 bits")
        order = {name: i for i, name in enumerate(worst)}
        worst = sorted(worst, key=lambda name: (-sens[name], order[name]))
    worst = worst[:n]
    base = dict(load_precision(precision)) if precision else {}

    def quantise(k):
        prec = {**base, **{name: "int16" for name in worst[:k]}}
        return (prec,) + quantized_lower(proto, table, bits, target, plan, prec, **kw)

    fouts = before["_float"]
    first = (base, m, report, records)
    kept = {}               # the lowering of the count found to meet it (one model held)
    k, reached = len(worst), None
    if until_cosine is not None:
        # a probe runs the quantised model's outputs only, against the float outputs of the
        # first report: the layer report (every layer's tensors, both models) is made once
        # more, for the count chosen
        selections, held, judged = _held(reference, feeds, fouts)
        probe = Probe(held, judged, selections, count)

        def meets(model):
            if model is m and not selections:       # the first report ran it already
                return min_cosine(fouts, before["_quant"], count) >= until_cosine
            return probe.worst(model, until_cosine) >= until_cosine
        k, found = fewest(len(worst), lambda mid: first if mid == 0 else quantise(mid),
                          lambda probe: meets(probe[1]))
        kept = {} if found is None else {k: found}
    prec, m2, report2, records2 = kept[k] if k in kept else first if k == 0 else quantise(k)
    after = before if k == 0 else layer_report(reference, m2, feeds, records2)
    if until_cosine is not None:
        reached = k in kept or meets(m2)
    return {"model": m2, "report": report2, "records": records2, "promoted": worst[:k],
            "precision": prec, "before": before, "after": after, "model_before": m,
            "sensitivity": sens, "reached": reached}


def raise_adc(model, table, feeds, order, float_outputs, until_cosine, raise_to, bits=8,
              target=None, plan="packed", precision=None, **kw):
    """Read the fewest of `order`'s layers (the largest drop from ideal arrays first)
    through ADCs of `raise_to` bits for every output's cosine to float (`float_outputs`,
    the float model's on `feeds`) to reach `until_cosine` on every sample: bisection on the
    count, a quantised run per probe. Returns {"raised", "reached", "model", "report" (the
    lowering's), "cosine"}."""
    proto = load_proto(model)
    count = 1 if feeds.whole else feeds.count
    shapes = kw.get("input_shape")
    reference = with_input_shapes(proto, shapes) if shapes else proto
    selections, held, judged = _held(reference, feeds, float_outputs)
    judge = Probe(held, judged, selections, count)

    def probe(k, bound=until_cosine):
        m, report, _ = quantized_lower(proto, table, bits, target, plan, precision,
                                       adc_bits={name: raise_to for name in order[:k]}, **kw)
        return m, report, judge.worst(m, bound)
    k, found = fewest(len(order), probe, lambda p: p[2] >= until_cosine)
    # (a probe that met the bound ran every sample: its cosine is the worst one)
    m, report, c = found if found is not None else probe(k, None)
    return {"raised": order[:k], "reached": c >= until_cosine, "model": m, "report": report,
            "cosine": c}


def fewest(n, probe, meets):
    """(the fewest k of 0..n for which meets(probe(k)), found by bisection on the count,
    which assumes more never measures worse; that probe, or None where k = n was never
    probed)."""
    lo, hi, found = -1, n, None         # hi: the fewest known to meet it (or n)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        p = probe(mid)
        if meets(p):
            hi, found = mid, p
        else:
            lo = mid
    return hi, found
