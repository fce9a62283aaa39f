"""LSTM and GRU at a fixed sequence length, unrolled over time into the ops the NPU runs.

    x [T, N, I] (layout 1: [N, T, I])
      -> one matrix layer for every step's input projection: Gemm(x [T*N, I], W^T, Wb + Rb)
      -> per step t and direction: gates = slice of the projection + H_prev @ R^T (a matrix
         layer on the constant R), Sigmoid / Tanh on the lookup table, the cell's products
         and sums on the vector unit
      -> Y [T, D, N, H] (layout 1: [N, T, D, H]), Y_h and Y_c [D, N, H] by Concat

LSTM (gates i, o, f, c):  C = f * C_prev + i * tanh(c),  H = o * tanh(C)
GRU (gates z, r, h):      h' = tanh(x_h + r * (H_prev @ R_h^T + Rb_h))   linear_before_reset=1
                          h' = tanh(x_h + (r * H_prev) @ R_h^T + Rb_h)   linear_before_reset=0
                          H = h' + z * (H_prev - h')                      (= (1-z) h' + z H_prev)

A missing or all-zero initial state (a constant, or ConstantOfShape of 0 seen through
slices and reshapes, as Paddle builds one for a batch left open) skips the first step's
recurrent product.
Everything the unrolled cell computes is a plain ONNX op, so the existing lowerings take it
to VMM / Lut / vector-unit ops, float or integer alike; intermediate values are named
`<Y>/<dir>/t<step>/<role>` (Y: the node's first output), the same every time a model is
unrolled, so that a calibration table made on the unrolled float model (`unrolled_proto`)
covers them.
"""
import numpy as np
import onnx_ir as ir

from ..onnx_io import load_model, to_proto
from . import graph as g
from .ops import MIN_BODY_OPSET
from .passes import Pass

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


def _attr(node, kind, name, default):
    getter = {"int": node.attributes.get_int, "string": node.attributes.get_string,
              "strings": node.attributes.get_strings, "float": node.attributes.get_float}
    return getter[kind](name, default)


def _input(node, i):
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] is not None else None


def check(node, target=None):
    """Why this LSTM / GRU node cannot be unrolled, or None."""
    if target is not None and not (target.runs_primitive("VMM") and
                                   target.runs_primitive("Lut")):
        return "the target has no VMM or no lookup table (Lut) for the gate activations"
    if g.mark(node) == "cpu":
        return "marked for the CPU"
    op = node.op_type
    dirs = 2 if _attr(node, "string", "direction", "forward") == "bidirectional" else 1
    acts = _attr(node, "strings", "activations", None)
    if acts is not None and list(acts) != _DEFAULT_ACTIVATIONS[op] * dirs:
        return f"activations {list(acts)} (only the default {_DEFAULT_ACTIVATIONS[op]} unroll)"
    if _attr(node, "float", "clip", None) is not None:
        return "clip is set"
    if op == "LSTM" and _attr(node, "int", "input_forget", 0):
        return "input_forget=1"
    if any(g.constant(_input(node, i)) is None for i in (1, 2)):
        return "W and R must be constants"
    if _input(node, 3) is not None and g.constant(node.inputs[3]) is None:
        return "B must be a constant"
    peep = g.constant(_input(node, 7)) if op == "LSTM" else None
    if op == "LSTM" and _input(node, 7) is not None and (peep is None or np.any(peep)):
        return "peephole weights (P) are not supported"
    x = g.dims(node.inputs[0])
    if x is None or len(x) != 3:
        return "the input's rank is unknown"
    layout = _attr(node, "int", "layout", 0)
    steps, features = (x[1] if layout else x[0]), x[2]
    if not isinstance(steps, int) or not isinstance(features, int):
        return "the sequence length and input size must be static (--input-shape)"
    lens = _input(node, 4)
    if lens is not None:
        found = g.constant(lens)
        if found is None or np.any(found != steps):
            return "sequence_lens gives per-sample lengths (only the full length unrolls)"
    dtype = node.inputs[0].dtype
    if dtype is not None and dtype != ir.DataType.FLOAT:
        return f"input type {dtype} (float32 unrolls)"
    return None


class _Cell:
    """Emits the unrolled nodes of one LSTM / GRU node before it."""

    def __init__(self, graph, node):
        self.graph, self.node = graph, node
        self.build = g.Builder(graph)
        self.base = next((o.name for o in node.outputs if o.name), node.name)

    def op(self, op_type, inputs, name, **attrs):
        made = self.build.node(op_type, inputs, attrs, name=f"{self.base}/{name}",
                               dtype=ir.DataType.FLOAT)
        self.graph.insert_before(self.node, made)
        return made.outputs[0]

    def const(self, array, name):
        array = np.asarray(array)
        return g.initializer(self.graph, array, f"{self.base}/{name}")

    def ints(self, values, name):
        return self.const(np.asarray(values, np.int64), name)


def unroll(graph, node):
    """Replace one checked LSTM / GRU node by its unrolled form."""
    op = node.op_type
    a = _Cell(graph, node)
    hidden = _attr(node, "int", "hidden_size", None)
    layout = _attr(node, "int", "layout", 0)
    lbr = _attr(node, "int", "linear_before_reset", 0) if op == "GRU" else 0
    w = g.constant(node.inputs[1]).astype(np.float32)        # [D, G*H, I]
    r = g.constant(node.inputs[2]).astype(np.float32)        # [D, G*H, H]
    dirs, gh, features = w.shape
    b = g.constant(_input(node, 3))
    b = np.zeros((dirs, 2 * gh), np.float32) if b is None else b.astype(np.float32)
    wb, rb = b[:, :gh], b[:, gh:]
    x_dims = g.dims(node.inputs[0])
    steps = x_dims[1] if layout else x_dims[0]
    time_axis = 1 if layout else 0
    reverse = _attr(node, "string", "direction", "forward") == "reverse"

    # every step's input projection, all directions side by side: one matrix layer
    in_bias = wb + rb
    if op == "GRU" and lbr:              # R's h-gate bias is added inside r * (...)
        in_bias[:, 2 * hidden:] = wb[:, 2 * hidden:]
    flat = a.op("Reshape", [node.inputs[0], a.ints([-1, features], "rows_shape")], "rows")
    proj = a.op("Gemm", [flat, a.const(np.concatenate(list(w), 0).T.copy(), "w_input"),
                         a.const(in_bias.reshape(-1), "b_input")], "input_projection")
    batch = x_dims[0] if layout else x_dims[1]
    # time-major rows of a fixed batch: step t's are rows [t*N, (t+1)*N) of the projection,
    # cut as they are; otherwise a step keeps the time axis (size 1) where x has it, so that
    # no step needs a reshape of its own and Y is the steps side by side on that axis
    by_rows = not layout and isinstance(batch, int)
    a.gate_axis = 1 if by_rows else 2
    if not by_rows:
        shape = [-1, steps, dirs * gh] if layout else [steps, -1, dirs * gh]
        proj = a.op("Reshape", [proj, a.ints(shape, "projection_shape")], "projection")

    states = [_initial(_input(node, 5))]
    if op == "LSTM":
        states.append(_initial(_input(node, 6)))
    ys, finals = [], []
    for d in range(dirs):
        tag = f"d{d}"
        rt = a.const(r[d].T.copy(), f"{tag}/r")                        # [H, G*H]
        h = None if states[0] is None else _direction_state(a, states[0], d, tag, "h0", by_rows)
        c = None if op != "LSTM" or states[1] is None else \
            _direction_state(a, states[1], d, tag, "c0", by_rows)
        backward = reverse or d == 1
        outs = [None] * steps
        for step in range(steps):
            t = steps - 1 - step if backward else step
            name = f"{tag}/t{t}"
            if by_rows:
                xg = a.op("Slice", [proj, a.ints([t * batch, d * gh], f"{name}/x_start"),
                                    a.ints([(t + 1) * batch, (d + 1) * gh], f"{name}/x_end"),
                                    a.ints([0, 1], f"{name}/x_axes")], f"{name}/x")
            else:
                xg = a.op("Slice", [proj, a.ints([t, d * gh], f"{name}/x_start"),
                                    a.ints([t + 1, (d + 1) * gh], f"{name}/x_end"),
                                    a.ints([time_axis, 2], f"{name}/x_axes")], f"{name}/x")
            if op == "LSTM":
                h, c = _lstm_step(a, name, xg, h, c, rt, hidden)
            else:
                h = _gru_step(a, name, xg, h, rt, r[d], rb[d], hidden, lbr)
            outs[t] = h
        if by_rows:     # [T*N, H] -> [T, 1, N, H]
            y = a.op("Concat", outs, f"{tag}/y", axis=0)
            shape = [steps, 1, -1, hidden]
        else:           # [T, N, H] -> [T, 1, N, H]; layout 1: [N, T, H] -> [N, T, 1, H]
            y = a.op("Concat", outs, f"{tag}/y", axis=time_axis)
            shape = [-1, steps, 1, hidden] if layout else [steps, 1, -1, hidden]
        ys.append(a.op("Reshape", [y, a.ints(shape, f"{tag}/y_dir_shape")], f"{tag}/y_dir"))
        finals.append([h] + ([c] if op == "LSTM" else []))
    # Y: [T, D, N, H], layout 1: [N, T, D, H]
    y = ys[0] if dirs == 1 else a.op("Concat", ys, "y_dirs", axis=2 if layout else 1)
    results = [y]
    for k in range(len(node.outputs) - 1):       # Y_h, Y_c: [D, N, H], layout 1: [N, D, H]
        last = [f[k] for f in finals]           # [1, N, H] ([N, 1, H]) a direction
        if by_rows:                             # [N, H]
            last = [a.op("Unsqueeze", [v, a.ints([0], f"d{d}/final{k}_axis")], f"d{d}/final{k}")
                    for d, v in enumerate(last)]
        results.append(last[0] if dirs == 1 else
                       a.op("Concat", last, f"final{k}", axis=time_axis))
    for old, new in zip(node.outputs, results):
        if old.name:
            g.take_over(old, new, shape=True)
    graph.remove(node, safe=True)


def _initial(value):
    """An initial state, or None when absent or zeros."""
    return None if value is None or _zeros(value) else value


def _zeros(value):
    """Whether a value is all zeros: a constant, or ConstantOfShape of 0 (as Paddle's
    zero initial states of a batch left open are) seen through slicing and reshaping."""
    while True:
        found = g.constant(value)
        if found is not None:
            return not np.any(found)
        node = value.producer()
        if g.is_op(node, "ConstantOfShape"):
            fill = node.attributes.get("value")
            return fill is None or not np.any(fill.value.numpy())
        if not g.is_op(node, "Slice", "Squeeze", "Unsqueeze", "Reshape", "Expand", "Identity",
                       "Cast"):
            return False
        value = node.inputs[0]


def _direction_state(a, value, d, tag, what, squeeze):
    """[D, N, H] ([N, D, H] in layout 1) -> direction d's [1, N, H] ([N, 1, H]), or with
    `squeeze` its [N, H]."""
    layout = _attr(a.node, "int", "layout", 0)
    axis = 1 if layout else 0
    part = a.op("Slice", [value, a.ints([d], f"{tag}/{what}_start"),
                          a.ints([d + 1], f"{tag}/{what}_end"),
                          a.ints([axis], f"{tag}/{what}_axes")],
                f"{tag}/{what}_slice" if squeeze else f"{tag}/{what}")
    if not squeeze:
        return part
    return a.op("Squeeze", [part, a.ints([axis], f"{tag}/{what}_axis")], f"{tag}/{what}")


def _split(a, v, name, start, end):
    """Gate columns [start, end) of a step's value (on its last axis, a.gate_axis)."""
    return a.op("Slice", [v, a.ints([start], f"{name}_start"), a.ints([end], f"{name}_end"),
                          a.ints([a.gate_axis], f"{name}_axes")], name)


def _lstm_step(a, name, xg, h, c, rt, hidden):
    gates = xg if h is None else a.op("Add", [xg, a.op("MatMul", [h, rt], f"{name}/h_gates")],
                                      f"{name}/gates")
    sig = a.op("Sigmoid", [gates], f"{name}/iof")    # (its c gate columns unused)
    i = _split(a, sig, f"{name}/i", 0, hidden)
    o = _split(a, sig, f"{name}/o", hidden, 2 * hidden)
    f = _split(a, sig, f"{name}/f", 2 * hidden, 3 * hidden)
    cand = a.op("Tanh", [_split(a, gates, f"{name}/c_in", 3 * hidden, 4 * hidden)],
                f"{name}/candidate")
    new_c = a.op("Mul", [i, cand], f"{name}/ic")
    if c is not None:
        new_c = a.op("Add", [a.op("Mul", [f, c], f"{name}/fc"), new_c], f"{name}/c")
    new_h = a.op("Mul", [o, a.op("Tanh", [new_c], f"{name}/c_tanh")], f"{name}/h")
    return new_h, new_c


def _gru_step(a, name, xg, h, rt, r, rb, hidden, lbr):
    # z and r are cut from a Lut over all three gates' sums where those are at hand (its h
    # gate columns unused): no cut of the Lut's input
    x_h = _split(a, xg, f"{name}/x_h", 2 * hidden, 3 * hidden)
    rb_h = rb[2 * hidden:]            # only used with linear_before_reset=1
    if h is None:                     # H_prev = 0: R's products vanish, its h bias stays
        zr = a.op("Sigmoid", [xg], f"{name}/zr")
        inner = x_h                   # linear_before_reset=0: Rb_h is in the projection's bias
        if lbr and np.any(rb_h):
            r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
            inner = a.op("Add", [x_h, a.op("Mul", [r_gate, a.const(rb_h, f"{name}/rb_h")],
                                           f"{name}/r_hh")], f"{name}/h_in")
        cand = a.op("Tanh", [inner], f"{name}/candidate")
        z = _split(a, zr, f"{name}/z", 0, hidden)
        return a.op("Sub", [cand, a.op("Mul", [z, cand], f"{name}/z_cand")], f"{name}/h")
    if lbr:                           # one recurrent product for all three gates
        hg = a.op("MatMul", [h, rt], f"{name}/h_gates")
        zr = a.op("Sigmoid", [a.op("Add", [xg, hg], f"{name}/zr_in")], f"{name}/zr")
        r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
        hh = _split(a, hg, f"{name}/h_h", 2 * hidden, 3 * hidden)
        if np.any(rb_h):
            hh = a.op("Add", [hh, a.const(rb_h, f"{name}/rb_h")], f"{name}/h_hb")
        inner = a.op("Add", [x_h, a.op("Mul", [r_gate, hh], f"{name}/r_hh")], f"{name}/h_in")
    else:                             # the h gate's product reads r * H_prev
        rt_zr = a.const(r[:2 * hidden].T.copy(), f"{name}/r_zr")
        rt_h = a.const(r[2 * hidden:].T.copy(), f"{name}/r_h")
        x_zr = _split(a, xg, f"{name}/x_zr", 0, 2 * hidden)
        zr = a.op("Sigmoid", [a.op("Add", [x_zr, a.op("MatMul", [h, rt_zr], f"{name}/h_zr")],
                                   f"{name}/zr_in")], f"{name}/zr")
        r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
        rh = a.op("MatMul", [a.op("Mul", [r_gate, h], f"{name}/r_h_prev"), rt_h],
                  f"{name}/h_h")
        inner = a.op("Add", [x_h, rh], f"{name}/h_in")      # Rb_h: in the projection's bias
    cand = a.op("Tanh", [inner], f"{name}/candidate")
    z = _split(a, zr, f"{name}/z", 0, hidden)
    diff = a.op("Sub", [h, cand], f"{name}/h_prev_cand")
    return a.op("Add", [cand, a.op("Mul", [z, diff], f"{name}/z_diff")], f"{name}/h")


class UnrollRnn(Pass):
    """Every LSTM / GRU node at a fixed sequence length -> its unrolled form (see the module
    docstring); the others stay, with the reason (also written into `refusals`, the
    lowering's, so that the report gives it)."""
    name = "unroll_rnn"

    def __init__(self, target=None, refusals=None):
        super().__init__()
        self.target = target
        self.refusals = {} if refusals is None else refusals

    def run(self, model, result):
        graph = model.graph
        for node in list(graph):
            if not g.is_op(node, "LSTM", "GRU"):
                continue
            reason = check(node, self.target)
            if reason is not None:
                result.refused[node.name] = self.refusals[node.name] = \
                    f"{node.op_type}: {reason}"
                continue
            marks = g.marks_of(node)
            before = set(graph)
            unroll(graph, node)
            for made in graph:
                if made not in before:
                    g.copy_marks(marks, made)
            result.fired.append(node.name)


def unrolled_proto(proto):
    """The ModelProto with its LSTM / GRU nodes unrolled (for calibrating and measuring the
    float model as the lowered one computes it), or `proto` itself when it has none."""
    if not any(n.op_type in ("LSTM", "GRU") and n.domain in g.STANDARD
               for n in proto.graph.node):
        return proto
    model = load_model(proto, MIN_BODY_OPSET)     # the unrolled ops are written at this opset
    if not UnrollRnn()(model).modified:
        return proto
    return to_proto(model)
