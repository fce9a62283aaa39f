"""LSTM and GRU at a fixed sequence length, unrolled over time into the ops the NPU runs.

    x [T, N, I] (layout 1: [N, T, I])
      -> one matrix layer for every step's input projection: Gemm(x [T*N, I], W^T, Wb + Rb)
      -> per step t and direction: gates = slice of the projection + H_prev @ R^T (a matrix
         layer on the constant R), Sigmoid / Tanh on the lookup table, the cell's products
         and sums on the vector unit
      -> Y [T, D, N, H] (layout 1: [N, T, D, H]), Y_h and Y_c [D, N, H] by Concat
    A bidirectional node of hidden size up to PAIR_MAX_HIDDEN runs its two directions as one
    chain of T steps (_unroll_pair): step k is the forward step at time k beside the
    backward one at T-1-k, one cell of 2H whose gates are [forward | backward] each and
    whose R is block-diagonal. Half the steps and the same arrays; the zero blocks count as
    MACs, and the cost report (which adds up every op's time) moves by a few percent.

LSTM (gates i, o, f, c):  C = f * C_prev + i * tanh(c),  H = o * tanh(C)
GRU (gates z, r, h):      h' = tanh(x_h + r * (H_prev @ R_h^T + Rb_h))   linear_before_reset=1
                          h' = tanh(x_h + (r * H_prev) @ R_h^T + Rb_h)   linear_before_reset=0
                          H = h' + z * (H_prev - h')                      (= (1-z) h' + z H_prev)

A missing or all-zero initial state (a constant, or ConstantOfShape of 0 seen through
slices and reshapes, as Paddle builds one for a batch left open) skips the first step's
recurrent product.
Everything the unrolled cell computes is a plain ONNX op, so the existing lowerings take it
to VMM / Lut / vector-unit ops, float or integer alike; intermediate values are named
`<Y>/<dir>/t<step>/<role>` (Y: the node's first output; <dir> d0, d1, or d01 for a pair),
the same every time a model is unrolled, so that a calibration table made on the unrolled
float model (`unrolled_proto`) covers them.
"""
import numpy as np
import onnx_ir as ir

from ...onnx_io import load_model, to_proto
from .. import graph as g
from ..emulation import MIN_BODY_OPSET
from .framework import Pass

# A bidirectional node of at most this hidden size runs both directions in one chain of
# steps (_unroll_pair): half the steps, R's tiles [2H, 8H] with zero blocks; past it, R's
# weights would double what every step reads.
PAIR_MAX_HIDDEN = 128

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
        self.layout = _attr(node, "int", "layout", 0)
        self.time_axis = 1 if self.layout else 0     # x's and Y's (layout 1: batch-major)
        self.gate_axis = None       # a step's gate columns: 1 ([N, G*H]) or 2 (time axis kept)

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
    layout = a.layout
    lbr = _attr(node, "int", "linear_before_reset", 0) if op == "GRU" else 0
    w = g.constant(node.inputs[1]).astype(np.float32)        # [D, G*H, I]
    r = g.constant(node.inputs[2]).astype(np.float32)        # [D, G*H, H]
    dirs, gh, features = w.shape
    b = g.constant(_input(node, 3))
    b = np.zeros((dirs, 2 * gh), np.float32) if b is None else b.astype(np.float32)
    wb, rb = b[:, :gh], b[:, gh:]
    x_dims = g.dims(node.inputs[0])
    steps = x_dims[1] if layout else x_dims[0]
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
    if dirs == 2 and hidden <= PAIR_MAX_HIDDEN:
        results = _unroll_pair(a, op, proj, r, rb, states, steps, batch, by_rows, lbr)
    else:
        results = _unroll_directions(a, op, proj, r, rb, states, steps, batch, by_rows, lbr,
                                     reverse)
    for old, new in zip(node.outputs, results):
        if old.name:
            g.take_over(old, new, shape=True)
    graph.remove(node, safe=True)


def _step_x(a, proj, name, t, batch, by_rows, first, width):
    """Step t's gate inputs: columns [first, first + width) of its rows of the projection."""
    if by_rows:
        return a.op("Slice", [proj, a.ints([t * batch, first], f"{name}/x_start"),
                              a.ints([(t + 1) * batch, first + width], f"{name}/x_end"),
                              a.ints([0, 1], f"{name}/x_axes")], f"{name}/x")
    return a.op("Slice", [proj, a.ints([t, first], f"{name}/x_start"),
                          a.ints([t + 1, first + width], f"{name}/x_end"),
                          a.ints([a.time_axis, 2], f"{name}/x_axes")], f"{name}/x")


def _unroll_directions(a, op, proj, r, rb, states, steps, batch, by_rows, lbr, reverse):
    """Each direction's chain of steps on its own; returns Y (, Y_h, Y_c)."""
    node, layout, time_axis = a.node, a.layout, a.time_axis
    dirs, gh, hidden = r.shape
    ys, finals = [], []
    for d in range(dirs):
        tag = f"d{d}"
        # made once for all the steps: R^T [H, G*H] (a GRU's parts of it: _gru_weights)
        recurrent = a.const(r[d].T.copy(), f"{tag}/r") if op == "LSTM" else \
            _gru_weights(a, tag, r[d], rb[d], hidden, lbr)
        h = None if states[0] is None else _direction_state(a, states[0], d, tag, "h0", by_rows)
        c = None if op != "LSTM" or states[1] is None else \
            _direction_state(a, states[1], d, tag, "c0", by_rows)
        backward = reverse or d == 1
        outs = [None] * steps
        for step in range(steps):
            t = steps - 1 - step if backward else step
            name = f"{tag}/t{t}"
            xg = _step_x(a, proj, name, t, batch, by_rows, d * gh, gh)
            if op == "LSTM":
                h, c = _lstm_step(a, name, xg, h, c, recurrent, hidden)
            else:
                h = _gru_step(a, name, xg, h, recurrent, hidden, lbr)
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
    return results


def _unroll_pair(a, op, proj, r, rb, states, steps, batch, by_rows, lbr):
    """Both directions as one chain of steps: step k runs the forward step at time k and the
    backward one at time T-1-k side by side, as one cell of 2H whose every gate is
    [forward | backward] and whose R is block-diagonal (pair_weights); returns Y (, Y_h,
    Y_c). The program has half the steps; the arrays hold the zero blocks of R."""
    node, layout, time_axis = a.node, a.layout, a.time_axis
    _, gh, hidden = r.shape
    gates = gh // hidden
    if by_rows:
        proj = a.op("Reshape", [proj, a.ints([steps, batch, 2 * gh], "pair/projection_shape")],
                    "pair/projection")
    # the backward direction's projection in its own time order (step k reads its time
    # T-1-k: the steps' rows joined in reverse; the NPU has no reversed crop), each gate
    # beside the forward one's: [..., G, 2, H]
    fwd = a.op("Slice", [proj, a.ints([0], "pair/fwd_start"), a.ints([gh], "pair/fwd_end"),
                         a.ints([2], "pair/fwd_axes")], "pair/fwd")
    bwd = a.op("Concat", [a.op("Slice", [proj, a.ints([t, gh], f"pair/bwd{t}_start"),
                                         a.ints([t + 1, 2 * gh], f"pair/bwd{t}_end"),
                                         a.ints([time_axis, 2], f"pair/bwd{t}_axes")],
                               f"pair/bwd{t}") for t in reversed(range(steps))],
               "pair/bwd", axis=time_axis)
    split = a.ints([0, 0, gates, 1, hidden], "pair/gate_shape")
    both = a.op("Concat", [a.op("Reshape", [fwd, split], "pair/fwd_gates"),
                           a.op("Reshape", [bwd, split], "pair/bwd_gates")], "pair/gates",
                axis=3)
    flat = [steps * batch, 2 * gh] if by_rows else [0, 0, 2 * gh]
    proj = a.op("Reshape", [both, a.ints(flat, "pair/x_shape")], "pair/x")
    r2, rb2 = pair_weights(r, rb)
    # made once for all the steps: R^T [2H, G*2H] (a GRU's parts of it: _gru_weights)
    recurrent = a.const(r2.T.copy(), "d01/r") if op == "LSTM" else \
        _gru_weights(a, "d01", r2, rb2, 2 * hidden, lbr)
    h = None if states[0] is None else _pair_state(a, states[0], "h0", by_rows)
    c = None if op != "LSTM" or states[1] is None else _pair_state(a, states[1], "c0", by_rows)
    outs = []
    for t in range(steps):
        name = f"d01/t{t}"
        xg = _step_x(a, proj, name, t, batch, by_rows, 0, 2 * gh)
        if op == "LSTM":
            h, c = _lstm_step(a, name, xg, h, c, recurrent, 2 * hidden)
        else:
            h = _gru_step(a, name, xg, h, recurrent, 2 * hidden, lbr)
        outs.append(h)
    # the forward halves in time order, the backward ones joined in reverse (back in theirs)
    halves = []
    for d, (order, first) in enumerate(((outs, 0), (outs[::-1], hidden))):
        y = a.op("Concat", order, f"d{d}/y_steps", axis=0 if by_rows else time_axis)
        if by_rows:
            y = a.op("Reshape", [y, a.ints([steps, batch, 2 * hidden], f"d{d}/y_shape")],
                     f"d{d}/y_time")
        halves.append(a.op("Slice", [y, a.ints([first], f"d{d}/y_start"),
                                     a.ints([first + hidden], f"d{d}/y_end"),
                                     a.ints([2], f"d{d}/y_axes")], f"d{d}/y"))
    y_f, y_b = halves
    shape = a.ints([-1, steps, 1, hidden] if layout else [steps, 1, -1, hidden], "y_dir_shape")
    results = [a.op("Concat", [a.op("Reshape", [y_f, shape], "d0/y_dir"),
                               a.op("Reshape", [y_b, shape], "d1/y_dir")], "y_dirs",
                    axis=2 if layout else 1)]
    # Y_h, Y_c: the last step's [forward at T-1 | backward at 0], each direction's final
    for k, v in enumerate([h, c][:len(node.outputs) - 1]):
        v = a.op("Reshape", [v, a.ints([-1, 2, hidden], f"final{k}_shape")], f"final{k}_pair")
        results.append(v if layout else
                       a.op("Transpose", [v], f"final{k}", perm=[1, 0, 2]))   # [D, N, H]
    return results


def pair_weights(r, rb):
    """R [2, G*H, H] and Rb [2, G*H] of a bidirectional node -> those of the pair's cell of
    2H: R [G*2H, 2H], each gate's block [[R_fwd, 0], [0, R_bwd]], and Rb [G*2H], each gate's
    [Rb_fwd | Rb_bwd]."""
    _, gh, hidden = r.shape
    gates = gh // hidden
    per_gate = r.reshape(2, gates, hidden, hidden)
    pair = np.zeros((gates, 2, hidden, 2, hidden), np.float32)
    for d in range(2):
        pair[:, d, :, d, :] = per_gate[d]
    return (pair.reshape(gates * 2 * hidden, 2 * hidden),
            rb.reshape(2, gates, hidden).transpose(1, 0, 2).reshape(-1).copy())


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
    axis = a.time_axis
    part = a.op("Slice", [value, a.ints([d], f"{tag}/{what}_start"),
                          a.ints([d + 1], f"{tag}/{what}_end"),
                          a.ints([axis], f"{tag}/{what}_axes")],
                f"{tag}/{what}_slice" if squeeze else f"{tag}/{what}")
    if not squeeze:
        return part
    return a.op("Squeeze", [part, a.ints([axis], f"{tag}/{what}_axis")], f"{tag}/{what}")


def _pair_state(a, value, what, by_rows):
    """A bidirectional initial state [2, N, H] ([N, 2, H] in layout 1) -> the pair's
    [N, 2H] ([1, N, 2H] with the time axis, [N, 1, 2H] in layout 1)."""
    hidden = _attr(a.node, "int", "hidden_size", None)
    if a.layout:
        return a.op("Reshape", [value, a.ints([0, 1, 2 * hidden], f"d01/{what}_shape")],
                    f"d01/{what}")
    v = a.op("Transpose", [value], f"d01/{what}_batch_first", perm=[1, 0, 2])
    shape = [-1, 2 * hidden] if by_rows else [1, -1, 2 * hidden]
    return a.op("Reshape", [v, a.ints(shape, f"d01/{what}_shape")], f"d01/{what}")


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


def _gru_weights(a, tag, r, rb, hidden, lbr):
    """The constants every GRU step of a chain reads, made once (every step multiplies on the
    same arrays): {"rt": R^T} and, where it is not zero, {"rb_h": Rb_h} with
    linear_before_reset=1; {"rt_zr", "rt_h"}: R^T's z and r gates, its h gate, with 0."""
    if not lbr:
        return {"rt_zr": a.const(r[:2 * hidden].T.copy(), f"{tag}/r_zr"),
                "rt_h": a.const(r[2 * hidden:].T.copy(), f"{tag}/r_h")}
    rb_h = rb[2 * hidden:]
    return {"rt": a.const(r.T.copy(), f"{tag}/r"),
            **({"rb_h": a.const(rb_h, f"{tag}/rb_h")} if np.any(rb_h) else {})}


def _gru_step(a, name, xg, h, weights, hidden, lbr):
    # z and r are cut from a Lut over all three gates' sums where those are at hand (its h
    # gate columns unused): no cut of the Lut's input
    x_h = _split(a, xg, f"{name}/x_h", 2 * hidden, 3 * hidden)
    rb_h = weights.get("rb_h")        # only with linear_before_reset=1
    if h is None:                     # H_prev = 0: R's products vanish, its h bias stays
        zr = a.op("Sigmoid", [xg], f"{name}/zr")
        inner = x_h                   # linear_before_reset=0: Rb_h is in the projection's bias
        if rb_h is not None:
            r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
            inner = a.op("Add", [x_h, a.op("Mul", [r_gate, rb_h], f"{name}/r_hh")],
                         f"{name}/h_in")
        cand = a.op("Tanh", [inner], f"{name}/candidate")
        z = _split(a, zr, f"{name}/z", 0, hidden)
        return a.op("Sub", [cand, a.op("Mul", [z, cand], f"{name}/z_cand")], f"{name}/h")
    if lbr:                           # one recurrent product for all three gates
        hg = a.op("MatMul", [h, weights["rt"]], f"{name}/h_gates")
        zr = a.op("Sigmoid", [a.op("Add", [xg, hg], f"{name}/zr_in")], f"{name}/zr")
        r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
        hh = _split(a, hg, f"{name}/h_h", 2 * hidden, 3 * hidden)
        if rb_h is not None:
            hh = a.op("Add", [hh, rb_h], f"{name}/h_hb")
        inner = a.op("Add", [x_h, a.op("Mul", [r_gate, hh], f"{name}/r_hh")], f"{name}/h_in")
    else:                             # the h gate's product reads r * H_prev
        x_zr = _split(a, xg, f"{name}/x_zr", 0, 2 * hidden)
        zr = a.op("Sigmoid", [a.op("Add", [x_zr, a.op("MatMul", [h, weights["rt_zr"]],
                                                      f"{name}/h_zr")],
                                   f"{name}/zr_in")], f"{name}/zr")
        r_gate = _split(a, zr, f"{name}/r", hidden, 2 * hidden)
        rh = a.op("MatMul", [a.op("Mul", [r_gate, h], f"{name}/r_h_prev"), weights["rt_h"]],
                  f"{name}/h_h")
        inner = a.op("Add", [x_h, rh], f"{name}/h_in")      # Rb_h: in the projection's bias
    cand = a.op("Tanh", [inner], f"{name}/candidate")
    z = _split(a, zr, f"{name}/z", 0, hidden)
    diff = a.op("Sub", [h, cand], f"{name}/h_prev_cand")
    return a.op("Add", [cand, a.op("Mul", [z, diff], f"{name}/z_diff")], f"{name}/h")


class UnrollRnn(Pass):
    """Every LSTM / GRU node at a fixed sequence length -> its unrolled form (see the module
    docstring); the others stay, with the reason (a lowering's refusal: the report gives
    it)."""
    name = "unroll_rnn"
    lowering = True

    def __init__(self, target=None):
        super().__init__()
        self.target = target

    def run(self, model, result):
        graph = model.graph
        for node in list(graph):
            if not g.is_op(node, "LSTM", "GRU"):
                continue
            reason = check(node, self.target)
            if reason is not None:
                result.refused[node.name] = f"{node.op_type}: {reason}"
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
