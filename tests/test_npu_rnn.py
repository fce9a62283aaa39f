"""LSTM and GRU unrolled over a fixed sequence length (npu/passes/rnn.py): every form stage 1 emits
for Paddle's rnn op and the ONNX attributes around it, run three ways (onnxruntime on the
ONNX node, onnxruntime and the NumPy reference on the lowered model)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from npu_helpers import assert_close, checked, op_types, serialized, three_way
from paddle_npu.compare import run_onnx
from paddle_npu.npu import DOMAIN, Reference, lower
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower

T, N, I, H = 5, 2, 6, 4


def _rnn_model(op, direction="forward", layout=0, states=False, lbr=None, extra=None):
    """One LSTM / GRU node with random constant weights; Y, Y_h (and Y_c) are outputs."""
    rng = np.random.default_rng(7)
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    w = rng.uniform(-0.5, 0.5, (dirs, gates * H, I)).astype(np.float32)
    r = rng.uniform(-0.5, 0.5, (dirs, gates * H, H)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, (dirs, 2 * gates * H)).astype(np.float32)
    x_shape = [N, T, I] if layout else [T, N, I]
    s_shape = [N, dirs, H] if layout else [dirs, N, H]
    y_shape = [N, T, dirs, H] if layout else [T, dirs, N, H]
    inputs = [("x", x_shape)] + ([("h0", s_shape)] + ([("c0", s_shape)] if op == "LSTM" else [])
                                 if states else [])
    n_states = 2 if op == "LSTM" else 1
    outs = ["y", "y_h", "y_c"][:1 + n_states]
    node_inputs = ["x", "w", "r", "b", ""] + (["h0"] + (["c0"] if op == "LSTM" else [])
                                              if states else [])
    attrs = {"hidden_size": H, "direction": direction, **(extra or {})}
    if layout:
        attrs["layout"] = 1
    if lbr is not None:
        attrs["linear_before_reset"] = lbr
    node = helper.make_node(op, node_inputs, outs, name="cell", **attrs)
    graph = helper.make_graph(
        [node], "rnn",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)] +
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, s_shape) for o in outs[1:]],
        initializer=[numpy_helper.from_array(a, n) for n, a in (("w", w), ("r", r), ("b", b))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs}
    return m, feeds


CASES = [
    ("LSTM", "forward", 0, False, None),
    ("LSTM", "reverse", 0, True, None),
    ("LSTM", "bidirectional", 0, True, None),
    ("LSTM", "bidirectional", 1, True, None),
    ("GRU", "forward", 0, False, 1),
    ("GRU", "bidirectional", 0, True, 1),
    ("GRU", "forward", 0, True, 0),
    ("GRU", "reverse", 1, False, 0),
    ("GRU", "bidirectional", 1, True, 0),
]


@pytest.mark.parametrize("op,direction,layout,states,lbr", CASES)
def test_rnn_unrolls_onto_the_npu(op, direction, layout, states, lbr):
    m, feeds = _rnn_model(op, direction, layout, states, lbr)
    lowered, report = lower(m, "npu256")
    checked(lowered)
    assert ("", op) not in op_types(lowered)
    assert {(DOMAIN, "VMM"), (DOMAIN, "Lut")} <= op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    if layout:      # onnxruntime runs layout=0 only: the same node time-major is the oracle
        want = _batch_major_oracle(m, feeds)
        _, got = run_onnx(serialized(lowered), feeds)
        ref = Reference(serialized(lowered), "npu256").run(feeds)
    else:
        want, got, ref, _ = three_way(m, lowered, feeds, "npu256")
    for k, name in enumerate(["Y", "Y_h", "Y_c"][:len(want)]):
        assert_close(got[k], want[k], f"onnxruntime {name}")
        assert_close(ref[k], want[k], f"reference {name}")


def _batch_major_oracle(m, feeds):
    """Outputs of a layout=1 model's node run time-major by onnxruntime (inputs and outputs
    transposed as the ONNX spec defines layout=1)."""
    tm = type(m)()
    tm.CopyFrom(m)
    node = tm.graph.node[0]
    del node.attribute[[a.name for a in node.attribute].index("layout")]
    for vi in list(tm.graph.input) + list(tm.graph.output):
        vi.type.tensor_type.ClearField("shape")
    feeds = {k: np.swapaxes(v, 0, 1) for k, v in feeds.items()}
    _, outs = run_onnx(tm.SerializeToString(), feeds)
    y = np.transpose(outs[0], (2, 0, 1, 3))              # [T, D, N, H] -> [N, T, D, H]
    return [y] + [np.swapaxes(o, 0, 1) for o in outs[1:]]


def test_input_projection_is_one_matrix_layer_and_recurrence_one_per_step():
    m, _ = _rnn_model("LSTM", "forward", states=True)
    lowered, report = lower(m, "npu256")
    kinds = [l.op_type for l in report.layers]
    assert kinds.count("Gemm") == 1                   # all steps' input projections
    assert kinds.count("MatMul") == T                 # H_prev @ R^T per step
    gemm = next(l for l in report.layers if l.op_type == "Gemm")
    assert gemm.cost.macs == T * N * I * 4 * H
    # a step cuts its rows of the projection and the gates i, o, f, c (5 Crops; h0 and c0
    # one each), with one sigmoid Lut over all four gates, and reshapes nothing (the
    # reshapes are of x's rows, h0, c0, Y, Y_h and Y_c)
    ops = [n.op_type for n in lowered.graph]
    assert ops.count("Crop") == 5 * T + 2
    assert ops.count("Lut") == 3 * T
    assert ops.count("DimTransform") == 6


@pytest.mark.parametrize("op,direction,lbr", [("LSTM", "forward", None),
                                               ("GRU", "bidirectional", 1),
                                               ("GRU", "reverse", 0)])
def test_every_step_multiplies_on_the_same_arrays(op, direction, lbr):
    """The recurrent weight is programmed once: every step's VMMs read the same tile
    initializers, and the report (and the NumPy reference) counts their arrays for the
    first step only (the others run on its arrays, their VMM invocations and products still
    counted)."""
    m, feeds = _rnn_model(op, direction, states=True, lbr=lbr)
    lowered, report = lower(m, "npu256")
    steps = [l for l in report.layers if l.op_type == "MatMul"]
    first = [l for l in steps if l.cost.arrays]
    # one chain of steps: a bidirectional node of this size runs both directions side by
    # side; GRU with linear_before_reset=0 multiplies by two parts of R a step
    assert len(first) == (2 if lbr == 0 else 1)
    assert all(l.cost.arrays == l.cost.cells == l.cost.weights == 0 and
               l.cost.vmm_invocations > 0 and "on the arrays of" in l.detail
               for l in steps if l not in first)
    assert report.totals()["arrays"] == sum(l.cost.arrays for l in report.layers
                                            if l.cost.plan != "vector")
    weights = {n.inputs[1].name for n in lowered.graph if n.op_type == "VMM"}
    assert len(weights) == 1 + len(first)           # the input projection's and R's
    want, got, ref, reference = three_way(m, lowered, feeds, "npu256")
    assert reference.array.arrays == report.totals()["arrays"]
    for k in range(len(want)):
        assert_close(got[k], want[k], "onnxruntime")
        assert_close(ref[k], want[k], "reference")


@pytest.mark.parametrize("op,lbr", [("LSTM", None), ("GRU", 0)])
def test_every_step_of_an_integer_plan_multiplies_on_the_same_arrays(op, lbr):
    """Quantised, the steps' recurrent weights are one set of integer tiles too (the same
    float weights at the same scales): the report and the NumPy reference count their
    arrays once, and onnxruntime still agrees with the reference bit for bit."""
    m, feeds = _rnn_model(op, states=True, lbr=lbr)
    model = m.SerializeToString()
    # (calibrated on the input itself: the model's first axis is time, one batch of it)
    lowered, report, _ = quantized_lower(model, calibrate(model, feeds), target="npu256")
    steps = [l for l in report.layers if l.op_type == "MatMul"]
    first = [l for l in steps if l.cost.arrays]
    assert len(first) == (2 if lbr == 0 else 1) and len(steps) == len(first) * T
    assert all(l.cost.arrays == 0 and "on the arrays of" in l.detail
               for l in steps if l not in first)
    weights = {n.inputs[1].name for n in lowered.graph if n.op_type == "QVMM"}
    assert len(weights) == 1 + len(first)           # the input projection's and R's
    proto = serialized(lowered)
    reference = Reference(proto, "npu256")
    ref = reference.run(feeds)
    assert reference.array.arrays == report.totals()["arrays"]
    _, got = run_onnx(proto, feeds)
    want = run_onnx(model, feeds)[1]
    for k in range(len(want)):
        assert np.array_equal(got[k], ref[k])
        cosine = np.sum(got[k] * want[k]) / np.linalg.norm(got[k]) / np.linalg.norm(want[k])
        assert cosine > 0.99


@pytest.mark.parametrize("layout", [0, 1])
def test_steps_of_an_open_batch_keep_the_time_axis(layout):
    """A batch left open (or batch-major x): a step's values keep x's time axis, size 1, so
    no step reshapes anything; Y is the steps side by side on that axis."""
    m, feeds = _rnn_model("LSTM", "reverse", layout=layout, states=True)
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[0 if layout else 1].dim_param = "n"
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    lowered, _ = lower(m, "npu256")
    ops = [n.op_type for n in lowered.graph]
    assert ops.count("Crop") == 5 * T + 2           # a step's x and gates; h0, c0
    assert ops.count("DimTransform") == 3           # x's rows, the projection, Y
    _, got = run_onnx(serialized(lowered), feeds)
    want = _batch_major_oracle(m, feeds) if layout else run_onnx(m.SerializeToString(), feeds)[1]
    for k, name in enumerate(["Y", "Y_h", "Y_c"]):
        assert_close(got[k], want[k], f"onnxruntime {name}")


@pytest.mark.parametrize("op,layout", [("LSTM", 0), ("GRU", 1)])
def test_both_directions_run_side_by_side_in_one_chain_of_steps(op, layout):
    """A bidirectional node: step k runs the forward step at time k and the backward one at
    T-1-k as one cell of 2H (one recurrent matrix layer a step, not two), all on the NPU."""
    m, feeds = _rnn_model(op, "bidirectional", layout=layout, states=True, lbr=0 if op == "GRU"
                          else None)
    lowered, report = lower(m, "npu256")
    recurrent = [l for l in report.layers if l.op_type == "MatMul"]
    assert len(recurrent) == (T if op == "LSTM" else 2 * T)   # (GRU: z, r and then h)
    assert [s.device for s in report.segments] == ["npu"]
    want = _batch_major_oracle(m, feeds) if layout else run_onnx(m.SerializeToString(), feeds)[1]
    _, got = run_onnx(serialized(lowered), feeds)
    ref = Reference(serialized(lowered), "npu256").run(feeds)
    for k, name in enumerate(["Y", "Y_h", "Y_c"][:len(want)]):
        assert_close(got[k], want[k], f"onnxruntime {name}")
        assert_close(ref[k], want[k], f"reference {name}")


def test_pair_weights_are_each_directions_per_gate():
    """The pair's R times [h_fwd | h_bwd] is, gate by gate, [h_fwd R_fwd^T | h_bwd R_bwd^T];
    its bias each gate's [Rb_fwd | Rb_bwd]."""
    from paddle_npu.npu.passes.rnn import pair_weights
    rng = np.random.default_rng(3)
    gates = 3
    r = rng.standard_normal((2, gates * H, H)).astype(np.float32)
    rb = rng.standard_normal((2, gates * H)).astype(np.float32)
    h = rng.standard_normal((2, N, H)).astype(np.float32)
    r2, rb2 = pair_weights(r, rb)
    got = np.concatenate([h[0], h[1]], -1) @ r2.T + rb2               # [N, G*2H]
    want = [h[d] @ r[d].T + rb[d] for d in range(2)]                  # [N, G*H] each
    for g in range(gates):
        for d in range(2):
            np.testing.assert_allclose(got[:, (2 * g + d) * H:(2 * g + d + 1) * H],
                                       want[d][:, g * H:(g + 1) * H], rtol=1e-5, atol=1e-6)


def test_a_wide_bidirectional_node_keeps_a_chain_a_direction():
    """Past PAIR_MAX_HIDDEN the pair's R would double what each step reads: two chains."""
    from paddle_npu.npu.passes.rnn import PAIR_MAX_HIDDEN
    rng = np.random.default_rng(4)
    hidden = PAIR_MAX_HIDDEN + 1
    nodes = [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden,
                              direction="bidirectional")]
    graph = helper.make_graph(
        nodes, "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, N, I])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(
            rng.uniform(-0.1, 0.1, (2, 4 * hidden, k)).astype(np.float32), n)
            for n, k in (("w", I), ("r", hidden))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lowered, report = lower(m, "npu256")
    assert sum(l.op_type == "MatMul" for l in report.layers) == 2 * (T - 1)
    feeds = {"x": rng.standard_normal((T, N, I)).astype(np.float32)}
    want, got, ref, _ = three_way(m, lowered, feeds, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


@pytest.mark.parametrize("extra,reason", [
    ({"clip": 3.0}, "clip is set"),
    ({"activations": ["Sigmoid", "Relu", "Tanh"]}, "activations"),
])
def test_unsupported_attributes_keep_the_node(extra, reason):
    m, _ = _rnn_model("LSTM", extra=extra)
    lowered, report = lower(m, "npu256")
    assert ("", "LSTM") in op_types(lowered)
    assert reason in report.refusals["cell"]


def test_a_target_without_a_lookup_table_keeps_the_node():
    m, _ = _rnn_model("GRU", lbr=1)
    lowered, report = lower(m, "npu256-vmm-only")
    assert ("", "GRU") in op_types(lowered)
    assert "no lookup table" in report.refusals["cell"]
    # its gate products count as the CPU's MACs: T steps x N rows x 3H x (I + H)
    assert report.npu_mac_share() == 0.0
    assert report.as_dict()["plain_macs"] == {"GRU": T * N * 3 * H * (I + H)}


def test_zero_state_of_an_open_batch_needs_no_cpu():
    """Paddle's zero initial state for a batch left open: ConstantOfShape([D, N, H]) from the
    input's shape, sliced. The unrolled cell treats it as zeros, so the shape ops die."""
    rng = np.random.default_rng(8)
    w = rng.uniform(-0.5, 0.5, (1, 4 * H, I)).astype(np.float32)
    r = rng.uniform(-0.5, 0.5, (1, 4 * H, H)).astype(np.float32)
    c = lambda name, v: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(v, np.int64)))
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), c("one", [1]), c("two", [2]),
             c("lead", [2]), c("hid", [H]), c("zero", [0]),
             helper.make_node("Slice", ["shape", "one", "two"], ["batch"]),
             helper.make_node("Concat", ["lead", "batch", "hid"], ["state_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("Slice", ["zeros", "zero", "one", "zero"], ["h0"]),
             helper.make_node("LSTM", ["x", "w", "r", "", "", "h0", "h0"], ["y"],
                              hidden_size=H, name="cell")]
    graph = helper.make_graph(
        nodes, "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, "n", I])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, 1, "n", H])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lowered, report = lower(m, "npu256")
    assert not {("", "LSTM"), ("", "ConstantOfShape"), ("", "Shape")} & op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    feeds = {"x": rng.standard_normal((T, 3, I)).astype(np.float32)}
    want, got, ref, _ = three_way(m, lowered, feeds, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


@pytest.mark.parametrize("op,lbr", [("LSTM", None), ("GRU", 1)])
def test_quantised_rnn_is_integer_and_bit_exact(op, lbr):
    """Calibration sees the unrolled steps, so every gate product is an integer matrix layer
    and every gate activation a 256-entry table; onnxruntime equals the NumPy reference."""
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.qlower import quantized_lower

    m, _ = _rnn_model(op, "bidirectional", lbr=lbr)
    # batch-major input, as Paddle's layers feed the time-major op: calibration and the
    # feeds put samples on the leading axis
    m.graph.node[0].input[0] = "x_time_major"
    m.graph.node.insert(0, helper.make_node("Transpose", ["x"], ["x_time_major"],
                                            perm=[1, 0, 2]))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = T
    for v in m.graph.output:
        v.type.tensor_type.ClearField("shape")
    rng = np.random.default_rng(9)
    table = calibrate(m, {"x": rng.standard_normal((128, T, I)).astype(np.float32)})
    assert "y/d01/t0/h" in table["tensors"] and "y/d01/t4/candidate" in table["tensors"]
    lowered, report, records = quantized_lower(m, table, 8)
    ops = op_types(lowered)
    assert {(DOMAIN, "QVMM"), (DOMAIN, "QLut")} <= ops
    assert not {(DOMAIN, "VMM"), (DOMAIN, "Lut"), ("", op)} & ops
    assert [s.device for s in report.segments] == ["npu"]
    # the projection, then R per step after the first (H_0 = 0), both directions at once
    assert len(records) == 1 + (T - 1)
    feeds = {"x": rng.standard_normal((N, T, I)).astype(np.float32)}
    want, got, ref, _ = three_way(m, lowered, feeds, "npu256")
    for w, o, r in zip(want, got, ref):
        assert np.array_equal(o, r)
        cos = float((o * w).sum() / np.linalg.norm(o) / np.linalg.norm(w))
        assert cos >= 0.999, cos        # measured: 0.99981 .. 0.99991 over Y, Y_h (, Y_c)


@pytest.mark.parametrize("op,direction,states", [("GRU", "forward", True),
                                                 ("GRU", "bidirectional", False),
                                                 ("LSTM", "forward", False)])
def test_every_mac_of_the_rnn_is_on_the_arrays(op, direction, states):
    """The unrolled layers' MACs are the RNN node's own, all on the arrays; with no initial
    state (zeros) the first step's hidden product, zero, is not computed, so the layers
    count that much less (work that does not exist, not work left off the arrays); a
    bidirectional pair's steps also multiply the zero blocks of their R."""
    import onnx_ir as ir

    from paddle_npu.npu.chip.cost import node_macs

    m, _ = _rnn_model(op, direction, states=states)
    node = next(iter(ir.from_proto(m).graph))
    _, report = lower(m, "npu256")
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    skipped = 0 if states else dirs * N * gates * H * H
    zero_blocks = (T - (0 if states else 1)) * N * 2 * gates * H * H if dirs == 2 else 0
    assert sum(l.cost.macs for l in report.layers) == node_macs(node) - skipped + zero_blocks
    assert report.npu_mac_share() == 1.0
    assert all(l.cost.plan == "packed" for l in report.layers)
