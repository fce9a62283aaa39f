"""The analog read-out of integer layers (ops/readout.py): weights sliced over cells, inputs
fed a few bits per cycle, column sums through an ADC; in the NumPy reference, in the
function bodies onnxruntime runs (bit for bit the same), in the mapping and the time."""
import json

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from paddle_npu.errors import ConversionError
from paddle_npu.npu.chip.cost import vector_read_ns
from paddle_npu.npu.chip.target import load_target, target_from_dict
from paddle_npu.npu.ops import ArrayModel, get_primitive
from paddle_npu.npu.ops.readout import (Readout, adc, columns_per_weight, full_scale_shifts,
                                        slice_pairs, sliced_product)
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.reference import Reference
from paddle_npu.npu.verification.verifier import verify

from test_npu_quant import run_primitive


@pytest.mark.parametrize("xbits", [8, 16])
@pytest.mark.parametrize("scheme", ["differential", "offset"])
@pytest.mark.parametrize("cell", [1, 2, 4, 0])
@pytest.mark.parametrize("dac", [1, 2, 4, 0])
def test_every_slicing_with_an_adc_that_holds_every_sum_is_the_exact_product(xbits, scheme,
                                                                           cell, dac):
    rng = np.random.default_rng(xbits + cell + 7 * dac)
    xt = np.int8 if xbits == 8 else np.int16
    x = rng.integers(np.iinfo(xt).min, np.iinfo(xt).max + 1, (3, 5, 40)).astype(xt)
    w = rng.integers(-127, 128, (40, 7)).astype(np.int8)
    exact = x.astype(np.int64) @ w.astype(np.int64)
    for adc_bits in (0, 40):
        r = Readout(cell, dac, adc_bits, scheme)
        shifts = full_scale_shifts(w, xbits, r)
        assert len(shifts) == (slice_pairs(xbits, 8, r) if adc_bits else 0)
        assert not any(shifts)
        assert np.array_equal(sliced_product(x, w, r, shifts), exact)


def test_the_adc_rounds_to_the_nearest_code_ties_to_even_and_clips():
    y = np.array([5, -5, 6, -6, 10, 100, -100, 0], np.int64)
    # steps of 4, 3 bits (codes -3 .. 3): 1.25 -> 1, 1.5 -> 2, 2.5 -> 2, 25 -> 3
    assert adc(y, 2, 3).tolist() == [4, -4, 8, -8, 8, 12, -12, 0]
    assert adc(y, 0, 8).tolist() == [5, -5, 6, -6, 10, 100, -100, 0]


def test_a_product_read_out_by_hand():
    # x = [3, -2] (int8) fed whole (dac_bits 0); w = [[5], [-6]] on 2-bit cells,
    # differential: w+ = [5, 0] in slices (1, 1) and (0, 0), w- = [0, 6] in (2, 1), (0, 1)
    r = Readout(cell_bits=2, dac_bits=0, adc_bits=3, weight_scheme="differential")
    x = np.array([[3, -2]], np.int8)
    w = np.array([[5], [-6]], np.int8)
    shifts = full_scale_shifts(w, 8, r)
    # a slice's column reaches (sum of its cells) * 128 (the whole int8 input at once);
    # w+ slice 0: 1 * 128 -> 2^e * 3 >= 128: e = 6; w- slice 0: 2 * 128: e = 7; ...
    assert shifts[:4] == [6, 7, 6, 6]
    # the sums: w+ s0: 3, w- s0: -4, w+ s1: 3, w- s1: -2; each rounds to 0 at such steps
    assert sliced_product(x, w, r, shifts).tolist() == [[0]]
    wide = Readout(2, 0, 16, "differential")
    assert sliced_product(x, w, wide, full_scale_shifts(w, 8, wide)).tolist() == [[27]]


# (the body sums the slices in int32 where they fit bytes, else in float64: whole 16-bit
# inputs, or 8-bit weights in one cell with an offset, take the second)
@pytest.mark.parametrize("scheme", ["differential", "offset"])
@pytest.mark.parametrize("acc_bits, xt", [(32, np.int8), (64, np.int16)])
@pytest.mark.parametrize("cell", [1, 2, 4, 0])
@pytest.mark.parametrize("dac", [1, 4, 0])
def test_the_body_onnxruntime_runs_is_the_reference_bit_for_bit(scheme, acc_bits, xt, cell,
                                                                dac):
    rng = np.random.default_rng(acc_bits + cell + 7 * dac)
    info = np.iinfo(xt)
    x = rng.integers(info.min, info.max + 1, (2, 6, 90)).astype(xt)
    x[0, 0, 10:20] = info.min               # the extremes: -2^(B-1) and the weights' +-max
    w = rng.integers(-info.max, info.max + 1, (64, 12)).astype(xt)
    w[:3] = info.max
    w[3:6] = -info.max
    r = Readout(cell, dac, 5, scheme)
    attrs = {"row_offset": 10, "acc_bits": acc_bits, **r.attrs(),
             "adc_shifts": full_scale_shifts(w, 8 if acc_bits == 32 else 16, r)}
    out_type = TensorProto.INT32 if acc_bits == 32 else TensorProto.INT64
    got = run_primitive("QVMM", [x, w], attrs, out_type)
    want = get_primitive("QVMM").reference(ArrayModel(64, 16), [x, w], attrs)[0]
    assert np.array_equal(got, want)
    exact = x[..., 10:74].astype(np.int64) @ w.astype(np.int64)
    assert not np.array_equal(want, exact)        # a 5-bit ADC does lose something


def test_target_precision_keys_are_read_and_checked():
    t = target_from_dict({"precision": {"cell_bits": 2, "dac_bits": 1, "adc_bits": 6,
                                        "columns_per_adc": 8, "signed_weights": "offset"},
                          "cost": {"adc_ns": 2.5}})
    assert t.readout_settings() == {"cell_bits": 2, "dac_bits": 1, "adc_bits": 6,
                                    "weight_scheme": "offset"}
    assert (t.columns_per_adc, t.cost.adc_ns) == (8, 2.5)
    assert load_target("npu256").readout_settings()["adc_bits"] == 0     # ideal by default
    with pytest.raises(ConversionError, match="signed_weights = 'twos'"):
        target_from_dict({"precision": {"signed_weights": "twos"}})
    with pytest.raises(ConversionError, match="cell_bits = 12 is not a width"):
        target_from_dict({"precision": {"cell_bits": 12}})


def _conv_model():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
        [onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = lambda n, seed: {"x": np.random.default_rng(seed).standard_normal(  # noqa: E731
        (n, 8, 6, 6)).astype(np.float32)}
    return m, feeds


def _chip(tmp_path, cost=None, **precision):
    path = tmp_path / "chip.json"
    path.write_text(json.dumps({"name": "chip", "array": {"rows": 64, "cols": 16},
                                "precision": precision, "cost": cost or {}}))
    return str(path)


def test_a_lowered_layer_reads_out_as_the_chip_and_its_two_runs_agree(tmp_path):
    m, feeds = _conv_model()
    table = calibrate(m.SerializeToString(), feeds(16, 0))
    ideal, _, _ = quantized_lower(m.SerializeToString(), table, 8, _chip(tmp_path))
    x = feeds(1, 99)
    want = Reference(ir.serde.serialize_model(ideal), None).run(x)[0]
    # slices and an ADC that holds every sum: the same integers as the ideal array
    wide, report, _ = quantized_lower(m.SerializeToString(), table, 8,
                                      _chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=16))
    proto = ir.serde.serialize_model(wide)
    qvmm = [n for n in proto.graph.node if n.op_type == "QVMM"]
    assert qvmm and all({a.name for a in n.attribute} >= {"cell_bits", "adc_shifts"}
                        for n in qvmm)
    assert np.array_equal(Reference(proto, None).run(x)[0], want)
    # 8-bit weights on 2-bit cells, differential: 8 columns a weight (72 rows x 16 weights:
    # 2 row tiles x 8 arrays)
    layer = report.layers[0]
    assert (layer.cost.arrays, layer.cost.cells_per_weight) == (16, 8)
    # a 4-bit ADC: onnxruntime and the reference agree bit for bit, and it costs accuracy
    coarse, _, _ = quantized_lower(m.SerializeToString(), table, 8,
                                   _chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=4))
    result = verify(m, coarse, target=_chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=4),
                    feeds=x, min_cosine=0.0)
    assert result["integer_mismatches"] == [] and result["integer_tensors"] > 0
    lossy = Reference(ir.serde.serialize_model(coarse), None).run(x)[0]
    float_y = ort.InferenceSession(m.SerializeToString()).run(None, x)[0]

    def cos(a, b):
        return float(a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cos(lossy, float_y) < cos(want, float_y) - 0.01


def _files(tmp_path, samples):
    """The conv model, its inputs and its calibration table as files: (model, table, data)."""
    from paddle_npu.cli import main
    m, feeds = _conv_model()
    src, table, data = tmp_path / "m.onnx", tmp_path / "t.json", tmp_path / "d.npz"
    onnx.save(m, str(src))
    np.savez(data, **feeds(samples, 1))
    assert main(["calibrate", str(src), "--data", str(data), "-o", str(table)]) == 0
    return str(src), str(table), str(data)


def test_a_vector_takes_an_input_cycle_per_dac_slice_and_the_adc_conversions(tmp_path):
    m, feeds = _conv_model()
    table = calibrate(m.SerializeToString(), feeds(4, 0))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "array": {"rows": 64, "cols": 16},
                                "precision": {"cell_bits": 2, "dac_bits": 2, "adc_bits": 6,
                                              "columns_per_adc": 8},
                                "cost": {"array_vmm_ns": 10, "adc_ns": 2}}))
    lowered, _, _ = quantized_lower(m.SerializeToString(), table, 8, str(path))
    node = next(n for n in lowered.graph if n.op_type == "QVMM")
    # 4 cycles of 2 input bits, each a read (10 ns) beside 8 conversions (2 ns each)
    assert vector_read_ns(node, load_target(str(path))) == 4 * max(10, 8 * 2)
    assert columns_per_weight(16, Readout(2, 2, 6, "offset")) == 8
    # the layer read through 9-bit ADCs: a successive-approximation ADC takes a step per bit
    finer, _, _ = quantized_lower(m.SerializeToString(), table, 8, str(path),
                                  adc_bits={"conv": 9})
    node = next(n for n in finer.graph if n.op_type == "QVMM")
    assert node.attributes["adc_bits"].value == 9
    assert vector_read_ns(node, load_target(str(path))) == 4 * max(10, 8 * 2 * 9 / 6)


def test_adc_ranges_calibrated_on_samples_are_finer_and_read_out_closer(tmp_path):
    m, feeds = _conv_model()
    onnx_bytes = m.SerializeToString()
    table = calibrate(onnx_bytes, feeds(16, 0))
    chip = _chip(tmp_path, cell_bits=2, dac_bits=0, adc_bits=5)
    full, _, _ = quantized_lower(onnx_bytes, table, 8, chip)
    tuned, _, _ = quantized_lower(onnx_bytes, table, 8, chip, adc_data=feeds(16, 0))

    def shifts(model):
        return [list(n.attributes["adc_shifts"].value) for n in model.graph
                if n.op_type == "QVMM"]
    assert all(t <= f for a, b in zip(shifts(tuned), shifts(full)) for t, f in zip(a, b))
    assert shifts(tuned) != shifts(full)
    x = feeds(1, 99)
    float_y = ort.InferenceSession(onnx_bytes).run(None, x)[0]

    def cos(model):
        y = Reference(ir.serde.serialize_model(model), None).run(x)[0]
        return float(y.ravel() @ float_y.ravel() / np.linalg.norm(y) / np.linalg.norm(float_y))
    assert cos(tuned) > cos(full) + 0.01
    result = verify(m, tuned, target=chip, feeds=x, min_cosine=0.0)
    assert result["integer_mismatches"] == []


def test_quant_report_sets_the_chip_beside_ideal_arrays(tmp_path, capsys):
    from paddle_npu.cli import main
    src, table, data = _files(tmp_path, 8)
    out = tmp_path / "r.json"
    assert main(["quant-report", src, "--calibration", table, "--data", data,
                 "--target", _chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=4),
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "the read-out of chip (2-bit cells, inputs 1 bit(s) a cycle, 4-bit ADCs)" in text
    readout = json.loads(out.read_text())["readout"]
    (layer,) = readout["layers"]
    assert layer["layer"] == "conv" and layer["chip_cosine"] < layer["ideal_cosine"]
    assert 0.0 <= layer["adc_clipped"] <= 1.0


def test_cell_noise_draws_are_seeded_and_zero_noise_is_the_exact_read_out():
    from paddle_npu.npu.ops.readout import Noise
    rng = np.random.default_rng(5)
    x = rng.integers(-127, 128, (4, 64)).astype(np.int8)
    w = rng.integers(-127, 128, (64, 8)).astype(np.int8)
    r = Readout(2, 1, 6, "differential")
    shifts = full_scale_shifts(w, 8, r)
    exact = sliced_product(x, w, r, shifts)
    assert np.array_equal(sliced_product(x, w, r, shifts, noise=Noise(0, 0, 0).of("n")), exact)

    def draw(seed):
        return sliced_product(x, w, r, shifts, noise=Noise(seed, 0.05, 0.02).of("n"))
    assert np.array_equal(draw(1), draw(1)) and not np.array_equal(draw(1), draw(2))
    assert not np.array_equal(draw(1), exact)
    with pytest.raises(ValueError, match="needs an ADC"):
        sliced_product(x, w, Readout(2, 1, 0, "differential"), [],
                       noise=Noise(0, 0.05, 0).of("n"))
    with pytest.raises(ConversionError, match="noise.read_noise must be a number >= 0"):
        target_from_dict({"noise": {"read_noise": -1}})


def test_quant_report_gives_each_outputs_accuracy_over_noise_draws(tmp_path, capsys):
    from paddle_npu.cli import main
    src, table, data = _files(tmp_path, 4)
    noisy = tmp_path / "noisy.json"
    noisy.write_text(json.dumps({"name": "noisy", "array": {"rows": 64, "cols": 16},
                                 "precision": {"cell_bits": 2, "dac_bits": 1, "adc_bits": 6},
                                 "noise": {"programming_error": 0.05, "read_noise": 0.02}}))
    out = tmp_path / "r.json"
    args = ["quant-report", src, "--calibration", table, "--data", data,
            "--noise-draws", "3", "--json", str(out)]
    assert main(args + ["--target", str(noisy)]) == 0
    noise = json.loads(out.read_text())["noise"]
    assert len(noise["draws"]) == 3
    y = noise["outputs"]["y"]
    assert y["cosine_worst"] <= y["cosine_mean"] < 0.9999
    capsys.readouterr()
    assert main(args + ["--target", _chip(tmp_path, cell_bits=2, adc_bits=6)]) == 2
    err = capsys.readouterr().err
    assert "has no cell noise" in err and err.count("\n") == 1


def test_finer_adcs_for_the_layers_that_drop_most_until_a_cosine(tmp_path, capsys):
    from paddle_npu.cli import main
    src, table, data = _files(tmp_path, 4)
    out = tmp_path / "r.json"
    args = ["quant-report", src, "--calibration", table, "--data", data,
            "--adc-until-cosine", "0.99", "--json", str(out)]
    # an ADC per array's 16 columns, 10 ns a conversion: the conversions set a cycle's pace
    chip = _chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=3, columns_per_adc=16,
                 cost={"adc_ns": 10, "array_vmm_ns": 100})
    assert main(args + ["--target", chip]) == 0
    report = json.loads(out.read_text())
    raised = report["adc_raised"]
    cost = raised.pop("cost")
    assert raised == {"raised": ["conv"], "bits": 8, "reached": True,
                      "cosine": raised["cosine"]} and raised["cosine"] >= 0.99
    # what it costs: the same arrays, each cycle's 16 conversions of 8 bits, not 3
    assert cost["arrays"][0] == cost["arrays"][1]
    assert cost["latency_ns"][1] > cost["latency_ns"][0]
    assert "cost on chip: " in capsys.readouterr().out
    assert report["readout"]["outputs"][0]["chip_cosine"] < 0.99
    capsys.readouterr()
    assert main(args + ["--target", _chip(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "the target's arrays have no ADCs" in err and err.count("\n") == 1


def test_sixteen_bits_on_top_of_raised_adcs_until_a_cosine(tmp_path, capsys):
    """--adc-until-cosine with --hp-until-cosine: where every layer's ADC raised (4 -> 6
    bits) does not reach the cosine, layers go to 16 bits on top (through the raised ADCs);
    where the ADCs reach it, none does."""
    from paddle_npu.cli import main
    src, table, data = _files(tmp_path, 4)
    out = tmp_path / "r.json"
    chip = _chip(tmp_path, cell_bits=2, dac_bits=1, adc_bits=4)
    args = ["quant-report", src, "--calibration", table, "--data", data, "--target", chip,
            "--adc-raise-to", "6", "--hp-rank", "added", "--json", str(out)]
    assert main(args + ["--adc-until-cosine", "0.99999", "--hp-until-cosine", "0.99999"]) == 0
    report = json.loads(out.read_text())
    assert report["adc_raised"]["raised"] == ["conv"]
    assert not report["adc_raised"]["reached"] and report["adc_raised"]["cosine"] < 0.99999
    hp = report["auto_hp"]
    assert hp["promoted"] == ["conv"] and hp["reached"]
    # 16-bit weights on 2-bit cells: twice the columns, so twice the arrays
    assert hp["cost"]["arrays"] == [report["adc_raised"]["cost"]["arrays"][0] * k
                                    for k in (1, 2)]
    assert min(o["cosine"] for o in hp["outputs"]) >= 0.99999
    capsys.readouterr()
    assert main(args + ["--adc-until-cosine", "0.99", "--hp-until-cosine", "0.99"]) == 0
    assert "no layer promoted, the raised ADCs reach 0.99" in capsys.readouterr().out
    assert "auto_hp" not in json.loads(out.read_text())


def test_one_sliced_body_per_rank_of_the_rows():
    """The sliced body stacks the slices in front of X's axes, so two QVMM nodes alike but
    for the rank of their rows (a conv's [N, HW, R], a Gemm's [N, R]) need bodies of their
    own (onnxruntime ran resnet50's with one body's shapes and failed)."""
    from paddle_npu.npu.emulation.registry import emulation_of_op
    r = Readout(2, 1, 6, "differential")
    attrs = {"row_offset": 0, "acc_bits": 32, **r.attrs(), "adc_shifts": [1] * 64}
    qvmm = emulation_of_op("QVMM")
    assert qvmm.overload(attrs, [[1, 4, 9], [9, 8]]) != qvmm.overload(attrs, [[1, 9], [9, 8]])
    x3 = np.random.default_rng(0).integers(-127, 128, (1, 4, 9)).astype(np.int8)
    w = np.random.default_rng(1).integers(-127, 128, (9, 8)).astype(np.int8)
    shifts = {"adc_shifts": full_scale_shifts(w, 8, r)}
    for x in (x3, x3[:, 0]):
        got = run_primitive("QVMM", [x, w], {**attrs, **shifts}, TensorProto.INT32)
        want = get_primitive("QVMM").reference(ArrayModel(64, 16), [x, w],
                                               {**attrs, **shifts})[0]
        assert np.array_equal(got, want)
