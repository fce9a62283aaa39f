"""Integer forms of the lookup table and of arrays written at run time: QLut (a 2^bits-entry
table) and QRuntimeVMM (both operands quantised), their bodies against their references, and
a quantised lowering keeping activations and attention on the NPU, bit-exact between
onnxruntime and the NumPy reference."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from npu_helpers import model
from paddle_npu.compare import run_onnx
from paddle_npu.npu.ops import ArrayModel, get_primitive
from paddle_npu.npu.ops.lut import FUNCTIONS, lut_table
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.reference import Reference
from test_npu_quant import run_primitive


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("function", ["sigmoid", "tanh", "gelu", "log", "hardsigmoid"])
def test_qlut_body_equals_reference_and_table(function, bits):
    lo, hi = -(1 << bits - 1), (1 << bits - 1) - 1
    s_x, s_y = np.float32(6 / hi), np.float32(1.5 / hi)
    table = lut_table(function, s_x, s_y, bits)
    assert table.shape == (1 << bits,) and table.dtype == (np.int8 if bits == 8 else np.int16)
    x = np.arange(lo, hi + 1).astype(table.dtype).reshape(-1, 4)      # every input value
    got = run_primitive("QLut", [x, table], {"bits": bits},
                        onnx.TensorProto.INT8 if bits == 8 else onnx.TensorProto.INT16)
    ref = get_primitive("QLut").reference(ArrayModel(4, 4), [x, table], {"bits": bits})[0]
    assert got.dtype == ref.dtype and np.array_equal(got, ref)
    # each entry is f on the input's grid rounded to the output's, where f is defined
    with np.errstate(divide="ignore", invalid="ignore"):
        f = FUNCTIONS[function](x.astype(np.float64) * s_x, 0.2, 0.5) / s_y
    ok = np.isfinite(f)
    assert np.array_equal(ref[ok], np.clip(np.rint(f[ok]), lo, hi))


@pytest.mark.parametrize("bits", [8, 16])
def test_qruntime_vmm_body_equals_reference_exactly(bits):
    rng = np.random.default_rng(3)
    hi = (1 << bits - 1) - 1
    dtype = np.int8 if bits == 8 else np.int16
    x = rng.integers(-hi - 1, hi + 1, size=(2, 3, 5, 300)).astype(dtype)
    w = rng.integers(-hi - 1, hi + 1, size=(2, 3, 300, 7)).astype(dtype)
    acc_bits = 32 if bits == 8 else 64
    got = run_primitive("QRuntimeVMM", [x, w], {"acc_bits": acc_bits},
                        onnx.TensorProto.INT32 if bits == 8 else onnx.TensorProto.INT64)
    array = ArrayModel(256, 256)
    ref = get_primitive("QRuntimeVMM").reference(array, [x, w], {"acc_bits": acc_bits})[0]
    want = x.astype(np.int64) @ w.astype(np.int64)
    assert np.array_equal(got, want) and np.array_equal(ref, want)
    assert ref.dtype == (np.int32 if bits == 8 else np.int64)
    assert array.written_cells == 2 * 3 * 300 * 7 and array.vmm_invocations == 2 * 3 * 5 * 2


def _block():
    """A projection with a constant weight, a GELU, and attention softmax(Q K^T) V on it."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 8)).astype(np.float32) / 3
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Sigmoid", ["h"], ["g"], name="gate"),
             helper.make_node("Mul", ["h", "g"], ["a"], name="swish"),
             helper.make_node("Transpose", ["a"], ["at"], perm=[0, 2, 1], name="at"),
             helper.make_node("MatMul", ["a", "at"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "a"], ["y"], name="context"),
             helper.make_node("Tanh", ["y"], ["out"], name="squash")]
    return model(nodes, [("x", ["n", 6, 8])], [("out", ["n", 6, 8])], [("w", w)])


@pytest.mark.parametrize("bits", [8, 16])
def test_quantised_activations_and_attention_stay_on_the_npu_bit_exact(bits):
    m = _block()
    rng = np.random.default_rng(5)
    calib = {"x": rng.standard_normal((128, 6, 8)).astype(np.float32)}
    table = calibrate(m, calib)
    lowered, report, _ = quantized_lower(m, table, bits)
    proto = ir.serde.serialize_model(lowered)
    ops = {n.op_type for n in proto.graph.node}
    assert {"QLut", "QRuntimeVMM", "QVMM"} <= ops
    assert not ops & {"RuntimeVMM", "VMM", "Sigmoid", "Tanh", "MatMul"}
    # the gate and the squash are integer tables; a float table is only Softmax's exp, which
    # runs on the vector unit's float data between the integer layers
    assert {n.name.split("/")[0] for n in proto.graph.node if n.op_type == "Lut"} <= {"softmax"}
    assert [s.device for s in report.segments] == ["npu"]
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    (want,) = run_onnx(m.SerializeToString(), {"x": x})[1]
    (got,) = run_onnx(proto.SerializeToString(), {"x": x})[1]
    (ref,) = Reference(proto, None).run({"x": x})
    assert np.array_equal(got, ref)                # onnxruntime == the NumPy reference
    cos = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    # measured: 0.99939 (int8), 1.0 as printed (int16)
    assert cos >= (0.999 if bits == 8 else 0.999999)


def test_agreement_summed_by_batches_is_the_metrics_of_the_whole():
    from paddle_npu.npu.quant.accuracy import Agreement, metrics

    rng = np.random.default_rng(5)
    f = rng.standard_normal((6, 40))
    q = f + 0.05 * rng.standard_normal((6, 40))
    summed = Agreement()
    for start in range(0, 6, 4):            # batches of 4 and 2
        summed.add(f[start:start + 4], q[start:start + 4])
    whole = metrics(f, q)
    assert summed.result() == pytest.approx(whole, rel=1e-12)
    assert whole["max_abs_diff"] == np.max(np.abs(f - q))


def test_hp_target_is_met_by_every_sample_not_the_pooled_cosine():
    """A loud sample that agrees and a quiet one that does not: pooled, the cosine looks
    fine; sample by sample (what --hp-until-cosine asks) it is the quiet one's."""
    from paddle_npu.npu.quant.accuracy import metrics
    from paddle_npu.npu.quant.promote import min_cosine

    rng = np.random.default_rng(6)
    f = np.stack([100 * rng.standard_normal(50), rng.standard_normal(50)])
    q = f + np.stack([np.zeros(50), rng.standard_normal(50)])
    pooled = min_cosine({"y": f}, {"y": q})
    per_sample = min_cosine({"y": f}, {"y": q}, samples=2)
    assert pooled > 0.999 and per_sample == pytest.approx(metrics(f[1], q[1])["cosine"])
    assert per_sample < 0.8


def test_lookup_tables_are_layers_of_the_report_and_promotion_candidates():
    """A QLut is a layer as a matrix layer is: recorded with its bits and tensors, measured
    by the layer report, and raised to 16 bits by a precision entry naming its node (what
    --auto-hp / --hp-until-cosine promote)."""
    from paddle_npu.npu.quant.accuracy import layer_report
    from paddle_npu.npu.quant.promote import auto_hp
    from paddle_npu.npu.quant.qlower import unit_records_of

    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
               helper.make_node("HardSigmoid", ["h"], ["y"], name="gate")],
              [("x", [None, 16])], [("y", None)], [("w", w)])
    data = m.SerializeToString()
    feeds = {"x": rng.standard_normal((32, 16)).astype(np.float32)}
    table = calibrate(data, feeds)
    lowered, _, records = quantized_lower(data, table, 8)
    units = unit_records_of(ir.serde.serialize_model(lowered))
    assert [(r["layer"], r["op"], r["bits"], r["input"], r["output"]) for r in units] == \
        [("gate", "Lut", 8, "h", "y")]
    rep = layer_report(data, lowered, feeds, records)
    assert [(lay["layer"], lay["op"]) for lay in rep["layers"]] == [("fc", "MatMul"),
                                                                     ("gate", "Lut")]
    promoted, _, _ = quantized_lower(data, table, 8, precision={"gate": "int16"})
    bits = {n.op_type: n.attributes["bits"].as_int() for n in promoted.graph
            if n.op_type == "QLut"}
    assert bits == {"QLut": 16}
    ranked = auto_hp(data, table, feeds, 2)
    assert sorted(ranked["promoted"]) == ["fc", "gate"]


@pytest.mark.parametrize("function, lo, hi, bits, coarse", [
    ("log", 1e-5, 1e5, 16, True),          # an inverse sigmoid's ratio: decades in one cell
    ("log", 1e-3, 1e3, 8, True),
    ("reciprocal", 1e-3, 10.0, 16, True),
    ("log", 0.5, 4.0, 8, False),           # away from 0: a fine table
    ("reciprocal", 1.0, 10.0, 8, False),
    ("sqrt", 0.0, 100.0, 8, False),        # unbounded slope at 0, yet a bounded change
    ("sqrt", 0.0, 100.0, 16, False),
    ("sigmoid", -8.0, 8.0, 8, False),
    ("exp", -10.0, 2.0, 8, False),
    ("gelu", -10.0, 10.0, 8, False),
    # a relation bias's log of box ratios, multiplied by 100 into a sine: a 16-bit input step
    # near its low end moves the log by 1/50 of its range, 1/8 at 8 bits
    ("log", 0.0194, 54.3, 16, True),
    ("log", 0.0194, 54.3, 8, True),
    ("sigmoid", -8.0, 8.0, 16, False),
    ("exp", -10.0, 2.0, 16, False),
    ("gelu", -10.0, 10.0, 16, False),
    ("log", 0.5, 4.0, 16, False),
])
def test_coarse_step_finds_where_a_table_cannot_stand_for_the_function(function, lo, hi,
                                                                        bits, coarse):
    """The input step is the calibrated range's on the grid; where f moves by more than
    coarse_share(bits) of the output grid's range within one step, the table is refused. Checked
    against the function evaluated densely: the largest change within one input step."""
    from paddle_npu.npu.ops.lut import coarse_share, coarse_step
    from paddle_npu.npu.ops.quant import qrange

    qhi = qrange(bits)[1]
    f = FUNCTIONS[function]
    s_x = max(abs(lo), abs(hi)) / qhi
    with np.errstate(divide="ignore"):
        dense = f(np.linspace(lo, hi, 2_000_001), 0.2, 0.5)
    s_y = np.max(np.abs(dense[np.isfinite(dense)])) / qhi
    at = coarse_step(function, lo, hi, s_x, s_y, bits)
    assert (at is not None) == coarse
    if coarse:
        assert lo <= at <= hi
        b = min(at + s_x, hi)
        with np.errstate(divide="ignore"):
            assert abs(f(np.float64(b), 0.2, 0.5) - f(np.float64(at), 0.2, 0.5)) > \
                coarse_share(bits) * s_y * qhi


def _inverse_sigmoid():
    """log(x / (1 - x)) with both clipped away from 0, as DETR-style decoders refine boxes."""
    eps = np.array(1e-5, np.float32)
    one = np.array(1.0, np.float32)
    nodes = [helper.make_node("Clip", ["x", "eps", "one"], ["xc"]),
             helper.make_node("Sub", ["one", "x"], ["r"]),
             helper.make_node("Clip", ["r", "eps", "one"], ["rc"]),
             helper.make_node("Div", ["xc", "rc"], ["ratio"]),
             helper.make_node("Log", ["ratio"], ["y"], name="inverse")]
    return model(nodes, [("x", ["n", 64])], [("y", ["n", 64])], [("eps", eps), ("one", one)])


@pytest.mark.parametrize("bits", [8, 16])
def test_a_table_too_coarse_for_its_data_stays_float(bits):
    """Box coordinates near 0 and 1: the ratio spans ten decades, so every ratio below one
    input step shares the first entry. The Log stays a float table, said in the model's
    quantisation record, and the output keeps its float accuracy."""
    from paddle_npu.npu.quant.qlower import float_units_of

    m = _inverse_sigmoid()
    rng = np.random.default_rng(6)

    def boxes(n):
        return (1 / (1 + np.exp(-rng.normal(0, 4, (n, 64))))).astype(np.float32)
    table = calibrate(m, {"x": boxes(128)})
    lowered, _, _ = quantized_lower(m, table, bits)
    proto = ir.serde.serialize_model(lowered)
    x = boxes(4)
    (want,) = run_onnx(m.SerializeToString(), {"x": x})[1]
    (got,) = run_onnx(proto.SerializeToString(), {"x": x})[1]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
    # (a float table: onnxruntime's float32 log against the reference's float64 one)
    assert np.allclose(got, Reference(proto, None).run({"x": x})[0], rtol=1e-6, atol=0)
    assert [u["layer"] for u in float_units_of(lowered)] == ["inverse"]
    assert not {n.op_type for n in proto.graph.node} & {"QLut"}
