"""The pass contract of stage 2.

Every step is an onnx_ir in-place pass (`Pass`) returning one `PassResult` (a subclass
where a pass reports more, e.g. the placement's segments): the model, whether it changed,
what fired and what was refused and why. `Sequence` runs a declared list of them and keeps
every result; a pass reads what earlier ones reported from their results (`before`), never
from a dict they share; an error raised inside a pass names it. A local rewrite is a `Rule`
(rules.py: a pattern, a check that says why not, a rewrite that builds the replacement; the
surgery is the framework's), run over the graph by `RulePass`.
"""
import time
from dataclasses import dataclass, field

import onnx_ir as ir

from .rules import apply_rules


@dataclass
class PassResult(ir.passes.PassResult):
    name: str = ""
    fired: list = field(default_factory=list)      # descriptions of the rewrites done
    refused: dict = field(default_factory=dict)    # node name -> why it was left as it is
    info: dict = field(default_factory=dict)       # counts the pass reports (tests, debugging)
    # whether `refused` names nodes left as plain ONNX ops (a lowering's refusals, which the
    # placement and the report give as reasons), not rewrites that did not apply
    lowering: bool = False

    def as_dict(self):
        return {"pass": self.name, "fired": list(self.fired), "refused": dict(self.refused)}


class Pass(ir.passes.InPlacePass):
    """A stage-2 pass: `run(model, result)` rewrites the model in place and fills `result`
    (a `Result`: fired / refused / what the pass reports); the model counts as modified when
    anything fired. `lowering`: its refusals are nodes it leaves as plain ONNX ops. `before`:
    in a Sequence, the results of the passes run before it."""
    name = ""
    Result = PassResult
    lowering = False

    def __init__(self):
        super().__init__()
        self.before = ()

    def call(self, model):
        result = self.Result(model, False, self.name, lowering=self.lowering)
        self.run(model, result)
        result.modified = result.modified or bool(result.fired)
        return result

    def run(self, model, result):
        raise NotImplementedError


class Sequence(Pass):
    """Passes run in order on one model; `results` holds each one's PassResult.
    progress: None, or called with (pass name, seconds) after each pass."""
    name = "sequence"

    def __init__(self, *passes):
        super().__init__()
        self.passes = [p for p in passes if p is not None]
        self.results = []
        self.progress = None

    def run(self, model, result):
        self.results = []
        for p in self.passes:
            start = time.perf_counter()
            p.before = tuple(self.results)
            try:
                r = p(model)
            except Exception as e:
                e.add_note(f"(in the stage-2 pass {getattr(p, 'name', '') or type(p).__name__!r})")
                raise
            if not isinstance(r, PassResult):     # an onnx_ir pass: wrap its result
                r = PassResult(r.model, r.modified, type(p).__name__)
            self.results.append(r)
            result.modified = result.modified or r.modified
            if self.progress is not None:
                self.progress(r.name, time.perf_counter() - start)

    def result(self, kind):
        """The result of the pass of this type (the first), or None when none ran."""
        return next((r for p, r in zip(self.passes, self.results) if isinstance(p, kind)),
                    None)

    def not_lowered(self):
        """{node name: why} of the nodes the lowering passes left as plain ONNX ops."""
        return not_lowered(self.results)


def not_lowered(results):
    """{node name: why} from the lowering passes among `results`."""
    return {name: why for r in results if r.lowering for name, why in r.refused.items()}


class RulePass(Pass):
    """Rules (rules.py) applied at every node of the main graph, in order. `restart`: scan
    again from the top after each rewrite until nothing fires (rewrites that enable
    others)."""

    def __init__(self, name, rules, restart=False):
        super().__init__()
        self.name, self.rules, self.restart = name, list(rules), restart

    def run(self, model, result):
        apply_rules(model.graph, self.rules, result, self.restart)
