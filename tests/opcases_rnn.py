"""Op cases for the fused `rnn` op: paddle.nn.LSTM / GRU / SimpleRNN in the configurations
real models use (1-2 layers, forward / bidirectional, batch- or time-major, given or zero
initial states, padded sequences with lengths). Every case returns the output sequence and
the final states."""
import os

import numpy as np

from opcase_harness import case

T, I, H = 5, 3, 4   # sequence length, input size, hidden size


def _legacy_ready(paddle):
    """Legacy to_static reads every attribute of the layers' uninitialised `_dropout_state`,
    whose `.device` raises in Paddle 3.3 (the same fix as tools/zoo.py's shims)."""
    if os.environ.get("FLAGS_enable_pir_api") != "0" or getattr(paddle, "_npu_rnn_fixed", False):
        return
    device = paddle.Tensor.device
    paddle.Tensor.device = property(lambda t: device.fget(t) if t._is_initialized() else None)
    paddle._npu_rnn_fixed = True


def _wrap(paddle, rnn, n_states, with_lens=False):
    """A layer calling `rnn` with its inputs (x, initial states..., lengths) and returning
    (out, final states...)."""
    def run(x, states, lens):
        init = None if not states else (states[0] if len(states) == 1 else tuple(states))
        y, h = rnn(x, init, lens) if lens is not None else rnn(x, init)
        return (y,) + (tuple(h) if isinstance(h, (tuple, list)) else (h,))

    class S0(paddle.nn.Layer):
        def forward(self, x):
            return run(x, [], None)

    class S1(paddle.nn.Layer):
        def forward(self, x, h0):
            return run(x, [h0], None)

    class S2(paddle.nn.Layer):
        def forward(self, x, h0, c0):
            return run(x, [h0, c0], None)

    class L0(paddle.nn.Layer):
        def forward(self, x, lens):
            return run(x, [], lens)

    layer = (L0 if with_lens else [S0, S1, S2][n_states])()
    layer.rnn = rnn   # registers the parameters
    return layer


def rnn_case(name, kind, layers=1, direction="forward", time_major=False, init=True,
             lens=False, **kw):
    dirs = 2 if direction == "bidirect" else 1
    x_shape = (T, None, I) if time_major else (None, T, I)
    inputs = {"x": (x_shape, "float32")}
    n_states = (2 if kind == "LSTM" else 1) if init else 0
    for k in range(n_states):
        inputs[f"h{k}"] = ((layers * dirs, None, H), "float32")
    values = {}
    if lens:
        inputs["lens"] = ((None,), "int64")
        values["lens"] = lambda rng, s: np.arange(s[0]) * 2 % T + 1   # 1, 3, 5: full and short
    opsets = (7, 11, 17) if init and not lens else (9, 17)   # zero states need ConstantOfShape

    @case(name, inputs, ["rnn"], opsets=opsets, values=values, batch=3, **kw)
    def build(paddle):
        _legacy_ready(paddle)
        cls = {"LSTM": paddle.nn.LSTM, "GRU": paddle.nn.GRU, "RNN_TANH": paddle.nn.SimpleRNN,
               "RNN_RELU": paddle.nn.SimpleRNN}[kind]
        extra = {"activation": "relu"} if kind == "RNN_RELU" else {}
        rnn = cls(I, H, num_layers=layers, direction=direction, time_major=time_major, **extra)
        return _wrap(paddle, rnn, n_states, lens)
    return build


for _kind in ("LSTM", "GRU", "RNN_TANH"):
    _k = _kind.lower()
    rnn_case(f"{_k}_1layer", _kind)
    rnn_case(f"{_k}_2layers_bidirect", _kind, layers=2, direction="bidirect")
    rnn_case(f"{_k}_bidirect_time_major", _kind, direction="bidirect", time_major=True)
    rnn_case(f"{_k}_2layers_zero_state", _kind, layers=2, init=False)
    rnn_case(f"{_k}_bidirect_zero_state", _kind, direction="bidirect", init=False)
    rnn_case(f"{_k}_2layers_time_major", _kind, layers=2, time_major=True)
    rnn_case(f"{_k}_bidirect_lengths", _kind, direction="bidirect", init=False, lens=True)

rnn_case("lstm_2layers_lengths", "LSTM", layers=2, init=False, lens=True)
rnn_case("rnn_relu_2layers_bidirect", "RNN_RELU", layers=2, direction="bidirect")
rnn_case("rnn_relu_zero_state", "RNN_RELU", init=False)
