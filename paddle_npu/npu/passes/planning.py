"""The planning pass: one plan per matrix layer, before any node is lowered.

Every node whose lowering has a `plan` (Conv, ConvTranspose, Gemm, MatMul) and accepts it
gets its plan.LayerPlan: the tiles and the weights each holds, bits and scales, the row
vectors, what its emission needs; in an integer lowering, a lookup table its plan.UnitPlan
(bits and scales, or why it stays float). The lowering pass emits from these plans; the costs,
the report and the quantisation records are computed from them. A layer whose tiles hold
the very weights of an earlier layer's (the steps of an unrolled RNN) is planned onto that
layer's arrays (`arrays_of`).
"""
from dataclasses import dataclass, field

from ..chip.plan import UnitPlan
from ..registry import get_onnx_mapper
from .framework import Pass, PassResult


@dataclass
class Planned(PassResult):
    plans: dict = field(default_factory=dict)     # layer -> plan.LayerPlan, in graph order


class PlanLayers(Pass):
    """See the module docstring; `ctx`: the LowerContext the lowering will use."""
    name = "plan"
    Result = Planned

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def run(self, model, result):
        held = {}       # a band's weights (plan.LayerPlan.tile_keys) -> the layer holding them
        for node in model.graph:
            mapper = get_onnx_mapper(node.op_type, node.domain)
            if mapper is None or not hasattr(mapper, "plan") or \
                    mapper.check(self.ctx, node) is not None:
                continue
            plan = mapper.plan(self.ctx, node)
            if plan is None:
                continue
            result.plans[plan.layer] = plan
            if isinstance(plan, UnitPlan):
                result.fired.append(f"{plan.layer}: {plan.op} at {plan.bits} bits" if
                                    plan.float_why is None else f"{plan.layer}: float")
                continue
            keys = plan.tile_keys() if plan.unit == "arrays" else []
            owners = [held.get(k) for k in keys]
            if owners and all(o is not None for o in owners):
                plan.arrays_of = owners[0]
            for k in keys:
                held.setdefault(k, plan.layer)
            result.fired.append(f"{plan.layer}: {plan.unit}, {len(plan.tiles)} tile(s)"
                                + (f" at {plan.bits} bits" if plan.bits else ""))
