"""The lowering report: per-layer costs, segments, what stayed plain and why; table and JSON."""
from dataclasses import dataclass
from typing import List, Optional

from ...preprocess import describe
from ..chip.cost import LayerReport
from ..chip.estimate import ChipEstimate
from ..passes.input_shapes import FLAG
from ..passes.partition import Segment


def _macs(n):
    return f"{n / 1e9:.2f} G" if n >= 1e9 else f"{n / 1e6:.2f} M" if n >= 1e6 else str(n)


def _bytes(n):
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB" if n >= 2**10 \
        else f"{n} B"


def _latency(ns, total):
    parts = ", ".join(f"{k} {v / 1000:.1f}" for k, v in ns.items() if v)
    return f"{total / 1000:.1f} us" + (f" ({parts})" if parts else "")


def _cost_line(c):
    """One segment's MACs, bytes crossing and work: each unit's time, summed
    (cost.segment_costs; the chip's schedule overlaps them: ChipEstimate's latency)."""
    return (f"{_macs(c['macs'])} MACs; in {_bytes(c['bytes_in'])}, out {_bytes(c['bytes_out'])}"
            f"; work {_latency(c['ns'], c['total_ns'])}")


def _sum(costs, key):
    return sum(getattr(c, key) for c in costs)


@dataclass
class Report:
    target: dict
    plan: str
    layers: List[LayerReport]
    segments: List[Segment]
    devices: dict                   # device -> node count
    plain: dict                     # op type -> {"npu": n, "cpu": n}
    refusals: dict                  # source node -> reason it was not lowered
    seconds: float = 0.0
    preprocess: Optional[dict] = None   # what fuse_preprocess fused in front, if anything
    restruct: Optional[list] = None     # restruct.py: per pass, what fired and what refused
    marks: Optional[dict] = None        # marks.py: compile_mode, CPU-marked and 16-bit nodes
    dynamic: Optional[dict] = None      # inputs of open size and the nodes that kept off the NPU
    plain_macs: Optional[dict] = None   # op type -> MACs of matrix layers left plain ONNX ops
    cpu_reasons: Optional[dict] = None  # node on the CPU -> why (partition.py)
    emulation: Optional[dict] = None    # emulation/: the function bodies attached for onnxruntime
    chip: Optional[ChipEstimate] = None  # the arrays mapped, the schedule simulated

    def npu_mac_share(self):
        """The NPU's share of the model's multiply-accumulates (its matrix layers', on the arrays
        or the vector unit; 1.0 with none at all)."""
        npu = self.totals()["macs"]
        rest = sum((self.plain_macs or {}).values())
        return npu / (npu + rest) if npu + rest else 1.0

    def estimate(self):
        """The whole model summed over its segments (cost.segment_costs): MACs and their NPU
        share, bytes and hand-overs crossing between chip and CPU, the work in ns per unit
        and their sum (the latency, with the units working at once, is the chip's:
        `chip`); None when the segments carry no costs."""
        costs = [s.cost for s in self.segments if s.cost is not None]
        if not costs or len(costs) != len(self.segments):
            return None
        macs = sum(c["macs"] for c in costs)
        npu = sum(c["npu_macs"] for c in costs)
        ns = {k: round(sum(c["ns"][k] for c in costs), 1) for k in costs[0]["ns"]}
        return {"macs": macs, "npu_macs": npu, "npu_share": round(npu / macs, 6) if macs else 1.0,
                "bytes_crossing": sum(c["bytes_in"] + c["bytes_to_host"] for c in costs),
                "transfers": sum(c["transfers_in"] + c["transfers_to_host"] for c in costs),
                "ns": ns, "total_ns": round(sum(ns.values()), 1)}

    def dynamic_line(self):
        """One line naming the inputs of open size, the nodes that stay off the NPU for it,
        and the flag; None when nothing is kept off."""
        if not self.dynamic:
            return None
        ins = ", ".join(f"{n} [{','.join(str(d) for d in dims) if dims else '?'}]"
                        for n, dims in self.dynamic["inputs"].items())
        kept = self.dynamic["kept_off_npu"]
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(kept.items(), key=lambda t: -t[1]))
        return (f"inputs of open size ({ins}): {sum(kept.values())} node(s) stay off the NPU "
                f"({ops}); fix the sizes with {FLAG}")

    def totals(self):
        """Sums over the layers of the plan emitted."""
        costs = [l.cost for l in self.layers]
        rows, cols = self.target["array"]["rows"], self.target["array"]["cols"]
        arrays = _sum(costs, "arrays")
        weights = _sum(costs, "weights")
        held = sum(c.weights * c.cells_per_weight for c in costs)     # cells holding them
        return {"arrays": arrays, "utilisation": round(held / (arrays * rows * cols), 6)
                if arrays else 0.0,
                "vmm_invocations": _sum(costs, "vmm_invocations"), "macs": _sum(costs, "macs"),
                "add_elements": _sum(costs, "add_elements"),
                "weight_bytes": _sum(costs, "weight_bytes")}

    def plan_totals(self):
        """Totals under each plan (layers with one plan count it under both)."""
        out = {}
        for plan in ("packed", "per-channel"):
            costs = []
            for l in self.layers:
                alt = l.alternative
                costs.append(alt if alt is not None and alt.plan == plan else l.cost)
            rows, cols = self.target["array"]["rows"], self.target["array"]["cols"]
            arrays, weights = _sum(costs, "arrays"), _sum(costs, "weights")
            util = round(weights / (arrays * rows * cols), 6) if arrays else 0.0
            out[plan] = {"arrays": arrays, "utilisation": util,
                         "vmm_invocations": _sum(costs, "vmm_invocations")}
        return out

    def as_dict(self):
        count = self.target["array"]["count"]
        totals = self.totals()
        return {"target": self.target, "plan": self.plan, "seconds": round(self.seconds, 3),
                "totals": totals, "plans": self.plan_totals(),
                "fits_on_chip": (totals["arrays"] <= count) if count else None,
                "layers": [l.as_dict() for l in self.layers],
                "segments": [s.as_dict() for s in self.segments],
                "devices": self.devices, "plain_ops": self.plain, "not_lowered": self.refusals,
                "preprocess": self.preprocess, "restruct": self.restruct, "marks": self.marks,
                "dynamic": self.dynamic, "plain_macs": self.plain_macs,
                "npu_mac_share": round(self.npu_mac_share(), 6),
                "estimate": self.estimate(), "cpu_reasons": self.cpu_reasons,
                "emulation": self.emulation,
                "chip": self.chip.as_dict() if self.chip is not None else None}

    def render(self):
        """The terminal table."""
        t = self.target
        lines = [f"target {t['name']}: {t['array']['rows']} x {t['array']['cols']} arrays, "
                 f"w{t['precision']['weight_bits']}/a{t['precision']['activation_bits']}; "
                 f"plan {self.plan}", ""]
        head = (f"{'layer':<34} {'op':<8} {'arrays':>7} {'util':>7} {'VMMs':>10} "
                f"{'weight B':>10}   {'other plan: arrays':>18} {'util':>7} {'VMMs':>10}")
        lines += [head, "-" * len(head)]
        for l in self.layers:
            c, a = l.cost, l.alternative
            other = (f"{a.arrays:>18} {a.utilisation:>7.1%} {a.vmm_invocations:>10}"
                     if a is not None else "")
            arrays, util = ("vector", "-") if c.plan == "vector" else \
                (c.arrays, f"{c.utilisation:.1%}" if c.arrays else "-")
            # (a layer on the vector unit; one running on an earlier layer's arrays)
            lines.append(f"{l.name[-34:]:<34} {l.op_type:<8} {arrays:>7} {util:>7} "
                         f"{c.vmm_invocations:>10} {c.weight_bytes:>10}   {other}")
        tot = self.totals()
        lines.append("-" * len(head))
        lines.append(f"{'total':<34} {'':<8} {tot['arrays']:>7} {tot['utilisation']:>7.1%} "
                     f"{tot['vmm_invocations']:>10} {tot['weight_bytes']:>10}")
        plans = self.plan_totals()
        pk, pc = plans["packed"], plans["per-channel"]
        if pk["arrays"]:
            lines.append(f"per-channel vs packed: {pc['arrays']} vs {pk['arrays']} arrays "
                         f"({pc['arrays'] / pk['arrays']:.1f}x), {pc['vmm_invocations']} vs "
                         f"{pk['vmm_invocations']} VMM invocations")
        if self.chip is not None:
            lines += self.chip.lines()
        if self.plain_macs:
            lines.append(f"NPU share of MACs: {self.npu_mac_share():.1%} (left as plain ops: "
                         + ", ".join(f"{op} {n}" for op, n in sorted(self.plain_macs.items()))
                         + ")")
        lines += ["", "segments:"]
        for s in self.segments:
            lines.append(f"  #{s.index} {s.device.upper():<4} {len(s.nodes):>5} nodes  "
                         f"{s.nodes[0]} .. {s.nodes[-1]}")
            if s.cost is not None:
                lines.append("      " + _cost_line(s.cost))
            if s.inputs:
                lines.append(f"      in:  {', '.join(s.inputs[:8])}"
                             + (f" (+{len(s.inputs) - 8})" if len(s.inputs) > 8 else ""))
            if s.outputs:
                lines.append(f"      out: {', '.join(s.outputs[:8])}"
                             + (f" (+{len(s.outputs) - 8})" if len(s.outputs) > 8 else ""))
        est = self.estimate()
        if est is not None:
            share = f"{est['npu_macs'] / est['macs']:.1%}" if est["macs"] else "-"
            lines.append(f"  total: {_macs(est['macs'])} MACs, {share} on the NPU; "
                         f"{est['transfers']} hand-over(s), {_bytes(est['bytes_crossing'])} "
                         f"crossing; work {_latency(est['ns'], est['total_ns'])}")
        if self.cpu_reasons:
            reasons = {}
            for name, why in self.cpu_reasons.items():
                reasons.setdefault(why, []).append(name)
            lines += ["", f"on the CPU ({len(self.cpu_reasons)} nodes):"]
            for why, names in sorted(reasons.items(), key=lambda t: -len(t[1])):
                shown = ", ".join(names[:6]) + (f" (+{len(names) - 6})" if len(names) > 6 else "")
                lines.append(f"  {len(names)} x {why}: {shown}")
        if self.plain:
            lines += ["", "plain ONNX ops: " + ", ".join(
                f"{op} ({', '.join(f'{d} {n}' for d, n in sorted(where.items()))})"
                for op, where in sorted(self.plain.items()))]
        if self.refusals:
            reasons = {}
            for name, why in self.refusals.items():
                reasons.setdefault(why, []).append(name)
            lines += ["", "not lowered:"]
            for why, names in sorted(reasons.items()):
                lines.append(f"  {len(names)} x {why} (e.g. {names[0]})")
        if self.preprocess:
            lines += ["", describe(self.preprocess)]
        for p in self.restruct or ():
            if p["fired"] or p["refused"]:
                lines.append(f"restruct {p['pass']}: {len(p['fired'])} rewritten"
                             + "".join(f"\n  refused {n}: {why}" for n, why in p["refused"].items()))
        if self.marks and (self.marks["cpu"] or self.marks["hp"] or self.marks["compile_mode"]):
            lines.append(f"marks: compile_mode {self.marks['compile_mode']}; "
                         f"{len(self.marks['cpu'])} on the CPU, {len(self.marks['hp'])} at 16 bits")
        if self.dynamic:
            lines += ["", self.dynamic_line()]
        if self.emulation and self.emulation["float32_nodes"]:
            sums = "float32 sums, faster; `verify` says how far" \
                if self.emulation["emulation"] == "float32" else "exact sums, as the reference"
            lines.append(f"emulation: {self.emulation['emulation']} ({sums})")
        lines.append(f"\nlowered in {self.seconds:.2f} s")
        return "\n".join(lines)
