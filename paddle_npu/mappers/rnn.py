"""Paddle's fused `rnn` op (nn.LSTM, nn.GRU, nn.SimpleRNN) -> ONNX LSTM / GRU / RNN.

The op works time-major: Input [T, N, I] (nn.* layers transpose batch-major input
around it), PreState [h] or [h, c] each [L*D, N, H], WeightList = every cell's
(weight_ih, weight_hh) then every cell's (bias_ih, bias_hh), cells ordered layer by
layer, forward before backward. Out is [T, N, D*H] (directions concatenated on the
feature axis), State the final states in PreState's layout.

One ONNX node per layer; its Y [T, D, N, H] becomes the next layer's input
[T, N, D*H]. The weights are parameters: their gate blocks are reordered here.
"""
import numpy as np

from ..errors import ConversionError
from .common import cast, reshape, slice_, squeeze
from .registry import paddle_op

# Paddle's gate blocks (rows of weight_ih / weight_hh / biases), in ONNX's order:
#   LSTM: Paddle i, f, c, o  -> ONNX i, o, f, c
#   GRU:  Paddle r, z, c     -> ONNX z, r, h
# Paddle's GRU applies the reset gate after the hidden matmul, c = tanh(x_c + r * (W_hc h +
# b_hc)): ONNX GRU with linear_before_reset=1.
_MODES = {
    "LSTM": ("LSTM", [0, 3, 1, 2]),
    "GRU": ("GRU", [1, 0, 2]),
    "RNN_TANH": ("RNN", [0]),
    "RNN_RELU": ("RNN", [0]),
}


def _gates(array, order, hidden):
    """Reorder the gate blocks (hidden rows each) along axis 0."""
    return np.concatenate([array[g * hidden:(g + 1) * hidden] for g in order], axis=0)


@paddle_op("rnn")
class Rnn:
    @classmethod
    def check(cls, op):
        mode = op.attr("mode")
        if mode not in _MODES:
            return f"mode {mode!r} is not supported (LSTM, GRU, RNN_TANH, RNN_RELU are)"
        if not op.attr("is_test", True) and op.attr("dropout_prob", 0.0) > 0 \
                and op.attr("num_layers", 1) > 1:
            return "dropout between layers in training mode (is_test=False) cannot be exported"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        onnx_type, order = _MODES[op.attr("mode")]
        layers = op.attr("num_layers", 1)
        dirs = 2 if op.attr("is_bidirec", False) else 1
        hidden = op.attr("hidden_size")
        cells = layers * dirs
        names = op.input("WeightList")
        if len(names) != 4 * cells:
            raise ConversionError(f"rnn: {len(names)} weights for {layers} layer(s) x {dirs} "
                                  f"direction(s); expected {4 * cells}")
        weights = [ctx.constant_input(op, "WeightList", i) for i in range(len(names))]
        missing = [n for n, w in zip(names, weights) if w is None]
        if missing:
            raise ConversionError(f"rnn weights must be parameters; {missing[0]!r} is computed")

        x = ctx.input(op, "Input")
        states = ctx.inputs(op, "PreState")
        lens = None
        if ctx.has_input(op, "SequenceLength"):
            lens = cast(ctx, ctx.input(op, "SequenceLength"), "int32")
        attrs = {"hidden_size": hidden, "direction": "bidirectional" if dirs == 2 else "forward"}
        if onnx_type == "GRU":
            attrs["linear_before_reset"] = 1
        elif onnx_type == "RNN":
            attrs["activations"] = ["Relu" if op.attr("mode") == "RNN_RELU" else "Tanh"] * dirs
        n_states = 2 if onnx_type == "LSTM" else 1

        finals = [[] for _ in range(n_states)]
        for layer in range(layers):
            ids = range(layer * dirs, (layer + 1) * dirs)
            w = np.stack([_gates(weights[2 * c], order, hidden) for c in ids])
            r = np.stack([_gates(weights[2 * c + 1], order, hidden) for c in ids])
            b = np.stack([np.concatenate([_gates(weights[2 * cells + 2 * c], order, hidden),
                                          _gates(weights[2 * cells + 2 * c + 1], order, hidden)])
                          for c in ids])
            init = [None] * n_states
            for k, s in enumerate(states[:n_states]):
                init[k] = s if layers == 1 else slice_(ctx, s, [layer * dirs],
                                                       [(layer + 1) * dirs], [0])
            outs = getattr(ctx.op, onnx_type)(x, ctx.const(w), ctx.const(r), ctx.const(b), lens,
                                               *init, _outputs=1 + n_states, **attrs)
            y = outs[0]                                   # [T, D, N, H]
            if dirs == 1:
                x = squeeze(ctx, y, [1])
            else:                                         # -> [T, N, D*H], forward first
                x = reshape(ctx, ctx.op.Transpose(y, perm=[0, 2, 1, 3]), [0, 0, -1])
            for k in range(n_states):
                finals[k].append(outs[1 + k])             # [D, N, H]
        ctx.set_output(op, "Out", x)
        for k, parts in enumerate(finals):
            ctx.set_output(op, "State", parts[0] if len(parts) == 1
                           else ctx.op.Concat(*parts, axis=0), k)
