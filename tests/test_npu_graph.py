"""Whole-graph parts of stage 2: BatchNorm folding, layout ops, CPU segments and what crosses
between them, node names and metadata, targets, the report."""
import dataclasses
import json

import numpy as np
import pytest
from onnx import helper

from npu_helpers import assert_close, checked, model, npu_ops, op_types, three_way
from paddle_npu.errors import ConversionError
from paddle_npu.npu import (DOMAIN, PRESETS, Target, list_targets, load_target, lower,
                            verify)
from paddle_npu.npu.pipeline import prepare
from paddle_npu.npu.passes.common import batchnorm_to_affine, fold_batchnorm
from paddle_npu.npu.ops import all_primitives
from paddle_npu.npu.passes.restruct import restruct_pass
from paddle_npu.npu.chip.target import OPERATOR_SET, RESTRUCT_PASSES, VECTOR_UNIT_OPS

RNG = np.random.default_rng(7)
BIG = Target("big")
# the presets with a vector unit that does not run Softmax: these tests need a CPU op
# between NPU work (npu256's own vector unit runs Softmax since it runs transformers whole)
SOFTMAX_ON_CPU = dataclasses.replace(PRESETS["npu256"], npu_ops=VECTOR_UNIT_OPS)
SOFTMAX_ON_CPU_64 = dataclasses.replace(PRESETS["npu64"], npu_ops=VECTOR_UNIT_OPS)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def bn_inits(prefix, c):
    return [(f"{prefix}_g", rand(c)), (f"{prefix}_b", rand(c)), (f"{prefix}_m", rand(c)),
            (f"{prefix}_v", np.abs(rand(c)) + 0.5)]


def bn(prefix, x, y):
    return helper.make_node("BatchNormalization", [x] + [f"{prefix}_{k}" for k in "gbmv"],
                            [y], name=prefix, epsilon=1e-3)


def conv_bn_relu_softmax_conv():
    """conv -> bn -> relu -> softmax (CPU) -> conv -> bn(alone after an Add) -> output."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             bn("bn1", "c1", "b1"),
             helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
             helper.make_node("Softmax", ["r1"], ["s1"], name="softmax", axis=1),
             helper.make_node("Conv", ["s1", "w2", "cb2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a2"], name="add"),
             bn("bn2", "a2", "y")]
    inits = [("w1", rand(6, 3, 3, 3)), ("w2", rand(6, 6, 1, 1)), ("cb2", rand(6))] + \
        bn_inits("bn1", 6) + bn_inits("bn2", 6)
    return model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 6, 8, 8])], inits)


def test_batchnorm_folds_into_conv_and_becomes_affine_elsewhere():
    original = conv_bn_relu_softmax_conv()
    m = prepare(original)
    assert fold_batchnorm(m) == 1                  # bn1 into conv1; bn2 follows an Add
    assert batchnorm_to_affine(m) == 1
    assert [n.op_type for n in m.graph].count("BatchNormalization") == 0
    assert next(n for n in m.graph if n.name == "conv1").metadata_props["paddle_npu.folded"] \
        == "bn1"
    feeds = {"x": rand(2, 3, 8, 8)}
    want, got, ref_out, _ = three_way(original, m, feeds, BIG)
    assert_close(got[0], want[0], "folded")
    assert_close(ref_out[0], want[0], "folded, reference")


def test_gemm_batchnorm_fold():
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g"], name="fc", transB=1, beta=0.5),
             helper.make_node("BatchNormalization", ["g", "bn_g", "bn_b", "bn_m", "bn_v"],
                              ["y"], name="bn")]
    original = model(nodes, [("x", [4, 10])], [("y", [4, 7])],
                     [("w", rand(7, 10)), ("c", rand(7))] + bn_inits("bn", 7))
    lowered, report = lower(original, BIG)
    assert op_types(lowered) == {(DOMAIN, "VMM"), (DOMAIN, "AddInTile")}
    want, got, ref_out, _ = three_way(original, lowered, {"x": rand(4, 10)}, BIG)
    assert_close(got[0], want[0], "lowered")
    assert_close(ref_out[0], want[0], "reference")


def test_segments_devices_crossings_and_names():
    original = conv_bn_relu_softmax_conv()
    lowered, report = lower(original, SOFTMAX_ON_CPU)
    proto = checked(lowered)
    devices = [s.device for s in report.segments]
    assert devices == ["npu", "cpu", "npu"]
    npu0, cpu, npu1 = report.segments
    assert cpu.nodes == ["softmax"]
    assert cpu.inputs == ["r1"] and cpu.outputs == ["s1"]
    assert "x" in npu0.inputs and "r1" in npu0.outputs
    assert set(npu1.inputs) == {"s1", "r1"} and npu1.outputs == ["y"]
    for node in proto.graph.node:      # every node: its device, segment and source
        meta = {p.key: p.value for p in node.metadata_props}
        assert meta["paddle_npu.device"] in ("npu", "cpu")
        assert int(meta["paddle_npu.segment"]) in (0, 1, 2)
        if node.domain == DOMAIN:
            src = meta["paddle_npu.source"]
            assert node.name.startswith(src + "/"), node.name
    names = [n.name for n in proto.graph.node]
    assert len(names) == len(set(names))
    assert "conv1/im2col" in names and "conv2/vmm_r0_c0" in names
    assert report.devices == {"npu": len(names) - 1, "cpu": 1}
    assert report.plain["Softmax"] == {"cpu": 1}
    assert {"x", "r1", "s1"} <= {v.name for v in proto.graph.input} | \
        {v.name for v in proto.graph.value_info} | {"x"}
    feeds = {"x": rand(1, 3, 8, 8)}
    want, got, ref_out, _ = three_way(original, lowered, feeds, "npu256")
    assert_close(got[0], want[0], "lowered")
    assert_close(ref_out[0], want[0], "reference")


def test_device_aware_order_groups_independent_branches():
    # two independent branches, each Conv -> Softmax: four segments in the original order,
    # two once the NPU work of both runs first
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="ca"),
             helper.make_node("Softmax", ["a"], ["sa"], name="sa"),
             helper.make_node("Conv", ["x", "w"], ["b"], name="cb"),
             helper.make_node("Softmax", ["b"], ["sb"], name="sb")]
    original = model(nodes, [("x", [1, 2, 4, 4])], [("sa", None), ("sb", None)],
                     [("w", rand(3, 2, 1, 1))])
    _, report = lower(original, SOFTMAX_ON_CPU)
    assert [s.device for s in report.segments] == ["npu", "cpu"]


def test_vmm_only_target_sends_the_rest_to_the_mcu():
    original = conv_bn_relu_softmax_conv()
    lowered, report = lower(original, "npu256-vmm-only")
    dev = {n.name: n.metadata_props["paddle_npu.device"] for n in lowered.graph}
    assert dev["conv1/im2col"] == "cpu" and dev["conv1/to_nchw"] == "cpu"
    assert dev["conv1/vmm_r0_c0"] == "npu" and dev["conv2/add_in_tile"] == "npu"
    assert dev["relu1"] == "cpu"
    assert len(report.segments) > 3
    want, got, ref_out, _ = three_way(original, lowered, {"x": rand(1, 3, 8, 8)},
                                      "npu256-vmm-only")
    assert_close(got[0], want[0], "lowered")
    assert_close(ref_out[0], want[0], "reference")


def test_layout_ops_become_dim_transforms():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=[0, 2, 3, 1]),
             helper.make_node("Flatten", ["t"], ["f"], name="flat", axis=1),
             helper.make_node("Unsqueeze", ["f", "ax"], ["u"], name="unsq"),
             helper.make_node("Reshape", ["u", "shape"], ["y"], name="rs")]
    original = model(nodes, [("x", ["N", 2, 3, 4])], [("y", None)],
                     [("ax", np.array([1], np.int64)), ("shape", np.array([0, 4, -1], np.int64))])
    lowered, _ = lower(original, "npu256")
    assert op_types(lowered) == {(DOMAIN, "DimTransform")}
    x = rand(3, 2, 3, 4)
    want, got, ref_out, _ = three_way(original, lowered, {"x": x}, "npu256")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(ref_out[0], want[0])


def test_an_op_no_device_runs_is_reported():
    t = Target("strict", cpu_ops=("Relu",), npu_ops=())
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    with pytest.raises(ConversionError, match="neither its NPU nor its CPU runs Softmax"):
        lower(model([node], [("x", [1, 4])], [("y", [1, 4])]), t)


def test_report_json_and_table():
    lowered, report = lower(conv_bn_relu_softmax_conv(), SOFTMAX_ON_CPU_64, plan="per-channel")
    d = json.loads(json.dumps(report.as_dict()))
    assert d["plan"] == "per-channel" and d["target"]["array"]["rows"] == 64
    assert [l["name"] for l in d["layers"]] == ["conv1", "conv2"]
    conv1 = d["layers"][0]
    assert conv1["arrays"] == 3 and conv1["alternative"]["arrays"] == 1   # 3 channels vs 27 rows
    assert conv1["vmm_invocations"] == 3 * 64
    assert conv1["weight_bytes"] == 6 * 27                                  # 8-bit weights
    assert d["totals"]["arrays"] == 3 + 6
    assert d["plans"]["packed"]["arrays"] == 2
    assert [s["device"] for s in d["segments"]] == ["npu", "cpu", "npu"]
    text = report.render()
    assert "conv1" in text and "per-channel vs packed: 9 vs 2 arrays" in text
    assert "#1 CPU" in text


def test_presets_and_target_files(tmp_path):
    assert load_target(None) is PRESETS["npu256"] is load_target("default")
    assert {t.name for t in list_targets()} >= {"npu256", "npu64", "npu256-vmm-only"}
    j = tmp_path / "chip.json"
    j.write_text(json.dumps({"name": "chip", "array": {"rows": 128, "cols": 32, "count": 16},
                             "precision": {"weight_bits": 4},
                             "npu": {"onnx_ops": ["Relu"]}}))
    t = load_target(str(j))
    assert (t.rows, t.cols, t.array_count, t.weight_bits, t.activation_bits) == \
        (128, 32, 16, 4, 8)
    assert t.npu_ops == ("Relu",) and t.primitives == PRESETS["npu256"].primitives
    toml = tmp_path / "small.toml"
    toml.write_text('name = "small"\nbase = "npu256-vmm-only"\n[array]\nrows = 32\ncols = 16\n')
    t = load_target(str(toml))
    assert (t.name, t.rows, t.cols, t.primitives) == ("small", 32, 16, ("VMM", "AddInTile"))
    for bad, msg in [({"array": {"rows": 0}}, "positive"), ({"colour": 1}, "unknown target"),
                     ({"npu": {"primitives": ["Conv"]}}, "unknown NPU primitives"),
                     ({"npu": {"primitives": ["Im2Col"]}}, "without VMM")]:
        j.write_text(json.dumps(bad))
        with pytest.raises(ConversionError, match=msg):
            load_target(str(j))
    with pytest.raises(ConversionError, match="unknown target"):
        load_target("no-such-target")


def test_lowered_model_keeps_outputs_and_value_info():
    lowered, _ = lower(conv_bn_relu_softmax_conv(), "npu256")
    proto = checked(lowered)
    assert [o.name for o in proto.graph.output] == ["y"]
    assert {o.domain: o.version for o in proto.opset_import}[DOMAIN] == 1
    assert proto.ir_version >= 10
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in proto.graph.value_info}
    assert shapes["conv1/im2col"] == ["N", 64, 27]
    assert shapes["conv1/vmm_r0_c0"] == ["N", 64, 6]
    # the softmax: its max and sum on the vector unit, exp on the table
    assert npu_ops(lowered) == {"Im2Col", "VMM", "AddInTile", "DimTransform", "Reduce", "Lut"}
    functions = {(f.name, f.overload) for f in proto.functions}
    # each array reads all of its Im2Col's columns: a bare MatMul (float32 or exact sums)
    assert {o.removesuffix("_f32") for f, o in functions if f == "VMM"} == {"whole"}
    # the image's height and width are fixed: conv1's Im2Col gathers with a constant index
    # table; conv2's is 1x1 (3 and 6 channels, fewer than 8: moved channels-last by an
    # Einsum; the channel count named, as a one-hot float32 body bakes it in)
    im2col = sorted(o for f, o in functions if f == "Im2Col")
    assert len(im2col) == 2 and im2col[0].startswith("fixed_8x8_") and \
        im2col[1] == "pointwise_c6_s1x1_einsum_pixels"


@pytest.mark.parametrize("kernel, strides, pads, dilations", [
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1]), ([2, 3], [1, 2], [0, 1, 1, 0], [2, 1]),
    ([1, 1], [1, 1], [0, 0, 0, 0], [1, 1])])
def test_reference_max_pool_matches_onnxruntime(kernel, strides, pads, dilations):
    node = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=kernel,
                            strides=strides, pads=pads, dilations=dilations)
    original = model([node], [("x", [2, 3, 9, 8])], [("y", None)])
    x = rand(2, 3, 9, 8)
    want, _, ref_out, _ = three_way(original, original, {"x": x}, BIG)
    np.testing.assert_array_equal(ref_out[0], want[0])


def test_target_vocabulary_is_the_operator_set_and_the_restruct_passes():
    # target.py spells what a target file may name, so loading one imports no rewrite or
    # primitive; these two keep it the same as what exists
    assert sorted(OPERATOR_SET) == sorted(all_primitives())
    for name in RESTRUCT_PASSES:
        assert restruct_pass(name, PRESETS["nnie"]).name == name


def test_a_bad_preprocess_table_in_a_target_file_is_named_when_used(tmp_path):
    from paddle_npu.preprocess import spec_from_settings

    bad = tmp_path / "cam.toml"
    bad.write_text('name = "cam"\n[preprocess]\nstd = [0]\n')
    target = load_target(str(bad))
    with pytest.raises(ConversionError, match=r"cam.toml \[preprocess\]: every std must be"):
        spec_from_settings({}, target=target)
    bad.write_text('name = "cam"\npreprocess = 3\n')
    with pytest.raises(ConversionError, match="preprocess is a table"):
        load_target(str(bad))


def test_example_target_file():
    import os

    from conftest import ROOT
    t = load_target(os.path.join(ROOT, "examples", "targets", "rram_mcu.toml"))
    assert (t.name, t.rows, t.cols, t.array_count, t.weight_bits) == ("rram-mcu", 128, 64, 512, 4)
    assert "MaxPool" not in t.npu_ops and t.cpu_runs("MaxPool")


def test_opset_upgrade_keeps_the_models_names():
    """onnx's version converter renames what it replaces (opset 9 Upsample -> Resize): the
    upgrade gives the tensor and the node their names back, and the lowered model computes
    what the original does."""
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["up"], name="upsample",
                              mode="nearest"),
             helper.make_node("Conv", ["up", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    original = model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 3, 8, 8])],
                     [("scales", np.array([1, 1, 2, 2], np.float32)), ("w", rand(3, 2, 3, 3))],
                     opset=9)
    m = prepare(original)
    resize = next(n for n in m.graph if n.op_type == "Resize")
    assert resize.name == "upsample" and resize.outputs[0].name == "up"
    lowered, _ = lower(original, BIG)
    x = rand(1, 2, 4, 4)
    want, got, ref, _ = three_way(original, lowered, {"x": x}, BIG)
    assert_close(got[0], want[0], "lowered vs original")


def test_opset_upgrade_leaves_names_still_defined_alone():
    """Upgrading an opset 10 Resize (X, scales) gives it an roi input that the converter
    makes: the scales keep their initializer and the roi gets a name of its own (stage 1
    writes opset 10 for a model with nothing newer, PP-OCRv5's server detector)."""
    nodes = [helper.make_node("Resize", ["x", "scales"], ["up"], name="up", mode="nearest"),
             helper.make_node("Conv", ["up", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    original = model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 3, 8, 8])],
                     [("scales", np.array([1, 1, 2, 2], np.float32)), ("w", rand(3, 2, 3, 3))],
                     opset=10)
    m = prepare(original)
    resize = next(n for n in m.graph if n.op_type == "Resize")
    assert resize.inputs[2].name == "scales" and resize.inputs[1].name != "scales"
    lowered, _ = lower(original, BIG)
    feeds = {"x": rand(1, 2, 4, 4)}
    want, got, ref, _ = three_way(original, lowered, feeds, BIG)
    assert_close(got[0], want[0], "lowered vs original")
    # onnx's reference evaluator runs the opset 10 Resize too: judged against float64
    assert verify(original, lowered, BIG, feeds=feeds)["within"] == "float64"


def test_lowering_raises_the_opset_to_17_or_else_keeps_15(monkeypatch):
    """A lowered model imports opset 17 (LayerNormalization bodies); where onnx's converter
    cannot take a model there it is lowered at 15, and computes the same."""
    from paddle_npu import onnx_io
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    original = model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 3, 4, 4])],
                     [("w", rand(3, 2, 3, 3))], opset=11)
    x = rand(1, 2, 4, 4)
    assert prepare(original).opset_imports[""] == 17
    real = onnx_io.upgrade_opset

    def no_17(proto, minimum):
        if minimum >= 17:
            raise ConversionError("cannot upgrade the model to opset 17 (test)")
        return real(proto, minimum)
    monkeypatch.setattr(onnx_io, "upgrade_opset", no_17)
    assert prepare(original).opset_imports[""] == 15
    lowered, _ = lower(original, BIG)
    assert lowered.opset_imports[""] == 15
    want, got, ref, _ = three_way(original, lowered, {"x": x}, BIG)
    assert_close(got[0], want[0], "lowered at 15 vs original")
    assert_close(ref[0], want[0], "reference at 15 vs original")
