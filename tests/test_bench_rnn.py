"""tools/bench_rnn.py's forms of one RNN layer: each computes what onnxruntime's own LSTM /
GRU op computes, the Scan form holds one step (its body) and the lowered form no RNN op."""
import numpy as np
import onnx
import pytest
from bench_rnn import forms, node_count

from paddle_npu.compare import run_onnx


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_every_form_gives_the_ops_last_hidden_state(cell):
    steps, inputs, hidden = 4, 6, 5
    models = forms(cell, steps, inputs, hidden, seed=3)
    x = np.random.default_rng(4).standard_normal((steps, 1, inputs)).astype(np.float32)
    outs = {k: run_onnx(m, {"x": x})[1][0] for k, m in models.items()}    # y, the one output
    assert outs["op"].shape == (1, 1, hidden) and np.abs(outs["op"]).max() > 0.1
    for form in ("unrolled", "scan", "lowered"):
        np.testing.assert_allclose(outs[form], outs["op"], rtol=1e-5, atol=1e-6,
                                   err_msg=form)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_scan_runs_one_step_the_unrolled_form_every_step(cell):
    """The Scan's body is one step's nodes; the unrolled form has them once a step, so it
    grows with the steps and the Scan form does not."""
    short, long = (forms(cell, steps, 6, 5) for steps in (2, 6))
    for models in (short, long):
        ops = {n.op_type for n in onnx.load_from_string(models["lowered"]).graph.node}
        assert not ops & {"LSTM", "GRU"}
        scans = [n for n in onnx.load_from_string(models["scan"]).graph.node
                 if n.op_type == "Scan"]
        assert len(scans) == 1
    assert node_count(short["scan"]) == node_count(long["scan"])
    assert node_count(long["unrolled"]) > 2 * node_count(short["unrolled"])
