"""User placement marks (NNIE-style): which nodes run on the CPU, which at 16-bit precision.

A node is marked
    for the CPU  when its name ends in `_cpu`, matches a `cpu_nodes` glob or its op type is in
                 `cpu_ops`;
    16-bit       when its name ends in `_hp` or matches an `hp_nodes` glob.
The same can come from a config file (JSON / TOML: cpu_nodes, hp_nodes, cpu_ops, compile_mode)
or the command line (`--cpu-nodes`, `--hp-nodes`, `--cpu-ops`, `--compile-mode`).

compile_mode (as NNIE's mapper has it):
    0  every layer at the target's precision (low precision; `_hp` marks are an error)
    1  every layer at 16 bits (high precision; `_hp` marks are an error)
    2  user-defined: `_hp` layers at 16 bits, the rest at the target's precision

NNIE's rules for `_cpu`, as they map to an ONNX graph (which has no data layers and no
in-place ops):
    1. not on the data layer: a model input cannot be marked;
    2. not right after a data / custom / proposal layer: a CPU-marked node may not read a
       model input, the output of a custom-domain node, or a proposal-like op's output
       (NonMaxSuppression, RoiAlign, MaxRoiPool);
    3. not on an in-place activation: in ONNX an activation whose input comes from a node and
       is read by nothing else is the in-place one; mark the node feeding it instead;
    4. an in-place activation after a CPU node goes to the CPU with it: an activation
       directly fed by a CPU-marked node (its only reader) follows it;
    5. a CPU node may not be followed by an upsample (Resize / Upsample).

Marks are node annotations (graph.py: `set_mark`, `set_precision`); lowering copies them
to the nodes a marked node becomes.
"""
import fnmatch
from dataclasses import dataclass, field

from ...errors import ConversionError
from ...naming import read_settings
from .. import graph as g
from .framework import Pass, PassResult

COMPILE_MODES = {0: "every layer at the target's precision",
                 1: "every layer at 16 bits",
                 2: "user-defined: `_hp` layers at 16 bits"}
ACTIVATIONS = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
               "HardSwish", "Elu", "Selu", "Softplus", "Softsign", "ThresholdedRelu", "Gelu",
               "Mish", "Celu")
PROPOSAL_OPS = ("NonMaxSuppression", "RoiAlign", "MaxRoiPool")
UPSAMPLE_OPS = ("Resize", "Upsample")
_STD = ("", "ai.onnx", "ai.paddle_npu")


class MarkError(ConversionError):
    """A mark breaks one of NNIE's rules."""


@dataclass
class Marks:
    cpu_nodes: tuple = ()       # globs over node names
    hp_nodes: tuple = ()
    cpu_ops: tuple = ()         # op types
    compile_mode: int = 0

    def __post_init__(self):
        if self.compile_mode not in COMPILE_MODES or isinstance(self.compile_mode, bool):
            raise MarkError(f"compile_mode must be 0, 1 or 2, not {self.compile_mode!r}")

    @classmethod
    def from_dict(cls, data, source="<dict>"):
        if not isinstance(data, dict):
            raise MarkError(f"{source}: marks are a table / object")
        known = {"cpu_nodes", "hp_nodes", "cpu_ops", "compile_mode"}
        bad = sorted(set(data) - known)
        if bad:
            raise MarkError(f"{source}: unknown mark fields {bad} (known: {sorted(known)})")
        out = {}
        for key in ("cpu_nodes", "hp_nodes", "cpu_ops"):
            v = data.get(key, ())
            if isinstance(v, str):
                v = split_list(v)
            if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
                raise MarkError(f"{source}: {key} must be a list of strings")
            out[key] = tuple(v)
        mode = data.get("compile_mode", 0)
        if not isinstance(mode, int) or isinstance(mode, bool):
            raise MarkError(f"{source}: compile_mode must be 0, 1 or 2, not {mode!r}")
        return cls(compile_mode=mode, **out)

    @classmethod
    def from_file(cls, path):
        data = read_settings(path, "marks file", MarkError)
        return cls.from_dict(data.get("marks", data), path)

    def merged(self, other):
        """These marks plus other's lists; other's compile_mode wins when not 0."""
        return Marks(self.cpu_nodes + other.cpu_nodes, self.hp_nodes + other.hp_nodes,
                     self.cpu_ops + other.cpu_ops, other.compile_mode or self.compile_mode)

    def as_dict(self):
        return {"cpu_nodes": list(self.cpu_nodes), "hp_nodes": list(self.hp_nodes),
                "cpu_ops": list(self.cpu_ops), "compile_mode": self.compile_mode}


def split_list(text):
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


@dataclass
class MarkResult:
    compile_mode: int
    cpu: dict = field(default_factory=dict)      # node -> why it is on the CPU
    hp: list = field(default_factory=list)       # nodes at 16 bits (compile_mode 2)

    def as_dict(self):
        return {"compile_mode": self.compile_mode,
                "compile_mode_meaning": COMPILE_MODES[self.compile_mode],
                "cpu": dict(self.cpu), "hp": list(self.hp)}


def _users(value):
    return [u for u, _ in value.uses()]


def _is_inplace_activation(node):
    """An activation a Caffe graph would run in place: fed by a node, its only reader."""
    if node.op_type not in ACTIVATIONS or node.domain not in ("", "ai.onnx"):
        return False
    x = node.inputs[0] if node.inputs else None
    if x is None or x.producer() is None or x.is_graph_output():
        return False
    return len({u for u in _users(x)}) == 1


def apply_marks(model, marks=None):
    """Mark the nodes of an ir.Model (before lowering) and enforce the rules; returns a
    MarkResult. Raises MarkError naming the node and the rule it breaks."""
    marks = marks or Marks()
    graph = model.graph
    mode = marks.compile_mode
    result = MarkResult(mode)
    inputs = {v.name for v in graph.inputs}
    for pattern in marks.cpu_nodes:
        hit = [n for n in inputs if fnmatch.fnmatchcase(n, pattern)]
        if hit:
            raise MarkError(f"'{hit[0]}' is the model's input (the data layer): it cannot be "
                            f"marked _cpu (--cpu-nodes {pattern})")
    hp, cpu = [], {}
    for node in graph:
        name = node.name or ""
        if name.endswith("_hp"):
            hp.append((node, "name ends in _hp"))
        else:
            pat = next((p for p in marks.hp_nodes if fnmatch.fnmatchcase(name, p)), None)
            if pat is not None:
                hp.append((node, f"--hp-nodes {pat}"))
        if name.endswith("_cpu"):
            cpu[node] = "name ends in _cpu"
        else:
            pat = next((p for p in marks.cpu_nodes if fnmatch.fnmatchcase(name, p)), None)
            if pat is not None:
                cpu[node] = f"--cpu-nodes {pat}"
            elif node.op_type in marks.cpu_ops:
                cpu[node] = f"--cpu-ops {node.op_type}"
    if hp and mode != 2:
        node, why = hp[0]
        raise MarkError(f"node '{node.name}' is marked _hp ({why}) but compile_mode is {mode}: "
                        "_hp (16-bit) marks are only allowed with compile_mode = 2 "
                        "(user-defined precision); compile_mode 0 runs every layer at the "
                        "target's precision and 1 every layer at 16 bits")
    for node, why in cpu.items():
        for v in node.inputs:
            if v is None:
                continue
            if v.name in inputs:
                raise MarkError(f"node '{node.name}' is marked _cpu ({why}) but reads the model "
                                f"input '{v.name}' directly: a _cpu node may not follow the "
                                "data layer")
            prod = v.producer()
            if prod is None:
                continue
            if prod.domain not in _STD:
                raise MarkError(f"node '{node.name}' is marked _cpu ({why}) but follows the "
                                f"custom node '{prod.name}' ({prod.domain}::{prod.op_type}): "
                                "a _cpu node may not follow a custom layer")
            if prod.op_type in PROPOSAL_OPS:
                raise MarkError(f"node '{node.name}' is marked _cpu ({why}) but follows the "
                                f"proposal node '{prod.name}' ({prod.op_type}): a _cpu node "
                                "may not follow a proposal layer")
        if _is_inplace_activation(node):
            src = node.inputs[0].producer()
            raise MarkError(f"node '{node.name}' is marked _cpu ({why}) but is an in-place "
                            f"activation ({node.op_type} is the only reader of "
                            f"'{src.name}''s output): _cpu cannot mark an in-place activation; "
                            f"mark '{src.name}' instead and the activation follows it to the "
                            "CPU")
    # rule 4: in-place activations follow their CPU node (transitively)
    todo = list(cpu)
    while todo:
        node = todo.pop()
        for out in node.outputs:
            for user in _users(out):
                if user not in cpu and _is_inplace_activation(user):
                    cpu[user] = f"in-place activation after the _cpu node '{node.name}'"
                    todo.append(user)
    for node, why in cpu.items():
        for out in node.outputs:
            for user in _users(out):
                if user.op_type in UPSAMPLE_OPS:
                    raise MarkError(f"node '{node.name}' runs on the CPU ({why}) and is "
                                    f"followed by the upsample '{user.name}' "
                                    f"({user.op_type}): a _cpu node may not be followed by an "
                                    "upsample")
    for node, why in cpu.items():
        g.set_mark(node, "cpu", why)
        result.cpu[node.name] = why
    if mode == 1:
        hp = [(n, "compile_mode 1") for n in graph]
    for node, _ in hp:
        g.set_precision(node, 16)
    result.hp = [n.name for n, _ in hp] if mode == 2 else []
    return result


@dataclass
class MarksApplied(PassResult):
    marks: object = None        # the MarkResult


class ApplyMarks(Pass):
    """The user's placement marks as node annotations (`apply_marks`)."""
    name = "marks"
    Result = MarksApplied

    def __init__(self, marks=None):
        super().__init__()
        self.marks = marks

    def run(self, model, result):
        marks = apply_marks(model, self.marks)
        result.marks = marks
        result.fired.extend(f"{name}: cpu ({why})" for name, why in marks.cpu.items())
        result.fired.extend(f"{name}: 16 bits" for name in marks.hp)


def marks_from(file=None, cpu_nodes="", hp_nodes="", cpu_ops="", compile_mode=None):
    """Marks from a marks file (first) and comma-separated globs / op types (the command
    line's --marks, --cpu-nodes, --hp-nodes, --cpu-ops, --compile-mode)."""
    marks = Marks.from_file(file) if file else Marks()
    flags = Marks(split_list(cpu_nodes), split_list(hp_nodes), split_list(cpu_ops),
                  0 if compile_mode is None else _mode(compile_mode))
    return marks.merged(flags)


def _mode(value):
    if value not in COMPILE_MODES:
        raise MarkError(f"compile_mode must be 0, 1 or 2, not {value!r}")
    return value
