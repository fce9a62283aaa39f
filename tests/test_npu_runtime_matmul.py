"""MatMul of two activations (attention) on arrays written at run time (RuntimeVMM): lowered
on npu256, run three ways, the write cost counted; a target without it keeps the MatMul."""
import numpy as np
from onnx import helper

from npu_helpers import assert_close, checked, model, op_types, three_way
from paddle_npu.npu import DOMAIN, lower


def _attention():
    """softmax(Q K^T) V over [batch 2, heads 3, 5 tokens, 8 dims]."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="context")]
    shape = [2, 3, 5, 8]
    return model(nodes, [("q", shape), ("k", shape), ("v", shape)], [("y", shape)])


def test_attention_runs_whole_on_the_npu():
    m = _attention()
    lowered, report = lower(m, "npu256")
    checked(lowered)
    assert (DOMAIN, "RuntimeVMM") in op_types(lowered) and ("", "MatMul") not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    layers = {l.name: l for l in report.layers}
    assert layers["scores"].cost.macs == 2 * 3 * 5 * 8 * 5      # K=8 rows, N=5 per matrix
    assert "written at run time: 240 cells per inference" in layers["scores"].detail
    assert layers["scores"].cost.arrays == 0       # no weight stays on an array
    assert report.npu_mac_share() == 1.0
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for k in "qkv"}
    want, got, ref, r = three_way(m, lowered, feeds, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.written_cells == 2 * 3 * (8 * 5 + 5 * 8)     # K^T, then V, per matrix
    assert r.array.macs == sum(l.cost.macs for l in report.layers)


def test_a_target_without_written_arrays_keeps_the_matmul():
    lowered, report = lower(_attention(), "nnie")
    assert ("", "MatMul") in op_types(lowered)
    assert "cannot be written at run time (RuntimeVMM)" in report.refusals["scores"]
    assert report.npu_mac_share() == 0.0
