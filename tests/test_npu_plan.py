"""The per-layer plan (npu/chip/plan.py): float and integer lowerings of a layer come from one plan
and one emit_matrix. Tiny hand-built models; no Paddle."""
import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from npu_helpers import assert_close
from paddle_npu.errors import ConversionError
from paddle_npu.npu import graph as g
from paddle_npu.npu import lower
from paddle_npu.npu.ops import DOMAIN
from paddle_npu.npu.chip.plan import Quantization
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.verification.reference import Reference
from paddle_npu.npu.chip.tiling import Geometry, bands, plan_tiles, tile_weight


def conv_relu_gemm():
    """x [N,3,8,8] -> Conv 3x3 (8 ch) -> Relu -> Flatten (288) -> Gemm (70): on 64 x 64
    arrays both layers need several row tiles and the Gemm two column tiles."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(8).astype(np.float32) * 0.1
    fw = rng.standard_normal((288, 70)).astype(np.float32) * 0.05
    fb = rng.standard_normal(70).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc")]
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", 1, ["N", 3, 6, 6])],
        [helper.make_tensor_value_info("y", 1, ["N", 70])],
        [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fw, "fw"),
                                                     (fb, "fb"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((16, 3, 6, 6)).astype(np.float32)}
    return model, feeds


def _tiles(model, op_type):
    """{layer: [(row_offset, weight shape)]} of a lowered model's array nodes."""
    out = {}
    for node in model.graph:
        if node.domain == DOMAIN and node.op_type == op_type:
            out.setdefault(g.source(node), []).append(
                (node.attributes.get_int("row_offset", 0), g.constant(node.inputs[1]).shape))
    return out


def _run(model, feeds):
    proto = ir.serde.serialize_model(model) if isinstance(model, ir.Model) else model
    s = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def test_float_and_integer_layers_share_one_plan():
    model, feeds = conv_relu_gemm()
    table = calibrate(model, feeds)
    fl, _ = lower(model, "npu64")
    q, _, records = quantized_lower(model, table, target="npu64")
    assert _tiles(fl, "VMM") == _tiles(q, "QVMM")
    # 288 rows in 5 tiles, 70 columns in 2: 10 arrays, one VMM per band of 2 side by side
    assert [shape for _, shape in _tiles(q, "QVMM")["fc"]] == [(64, 70)] * 4 + [(32, 70)]
    assert [(r["layer"], r["bits"], r["relu_fused"], r["tiles"]) for r in records] == \
        [("conv", 8, True, 1), ("fc", 8, False, 10)]
    ops = {(n.domain, n.op_type) for n in q.graph}
    assert ("", "Relu") not in ops and (DOMAIN, "VMM") not in ops
    # the integer layers run with their arrays, on the NPU
    assert {g.device(n) for n in q.graph if n.domain == DOMAIN} == {"npu"}
    # one function per primitive specialisation the graph calls, none left over
    called = {(n.op_type, n.overload) for n in q.graph if n.domain == DOMAIN}
    assert {(f.name, f.overload) for f in q.functions.values()} == called
    # bit-true: onnxruntime through the bodies == the NumPy reference; close to float
    proto = ir.serde.serialize_model(q)
    got = _run(proto, feeds)
    assert np.array_equal(got, Reference(proto, None).run(feeds)[0])
    want = _run(model, feeds)
    cosine = float(np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine > 0.999


def test_tiles_are_views_of_the_layer_weight():
    """A tile is a block of the layer's kernel matrix viewed in place (the lowering holds no
    second copy of the weights); block-diagonal tiles of small groups are new arrays."""
    w = np.random.default_rng(0).standard_normal((20, 6, 3, 3)).astype(np.float32)
    geo = Geometry(1, 6, 9, 20)
    kernel = w.reshape(20, -1).T
    tiles = plan_tiles(geo, "packed", 32, 8)
    assert len(tiles) == 6                    # 3 channels' rows per array, 20 columns in 3
    for t in tiles:
        got = tile_weight(w, geo, t)
        np.testing.assert_array_equal(
            got, kernel[t.row_start:t.row_start + t.rows, t.col_start:t.col_start + t.cols])
        assert np.shares_memory(got, w)
    merged = bands(tiles)       # the VMM nodes: each row range's 3 tiles side by side
    assert [(b.row_start, b.rows, b.col_start, b.cols, b.useful) for b in merged] == \
        [(0, 27, 0, 20, 540), (27, 27, 0, 20, 540)]
    for b in merged:
        np.testing.assert_array_equal(tile_weight(w, geo, b),
                                      kernel[b.row_start:b.row_start + b.rows])
        assert np.shares_memory(tile_weight(w, geo, b), w)
    depthwise = Geometry(4, 1, 9, 1)
    (block,) = plan_tiles(depthwise, "packed", 64, 64)
    assert not np.shares_memory(tile_weight(w[:4, :1], depthwise, block), w)


@pytest.mark.parametrize("given", ["proto", "bytes"])
def test_layers_reading_one_weight_run_on_one_set_of_arrays(given):
    """Two layers multiplying by one weight (tied weights): the second runs on the first's
    arrays, whether the model comes as a ModelProto or as bytes (a file's), and the report
    and the NumPy reference count those arrays once."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((300, 300)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("MatMul", ["b", "w"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", 1, [4, 300])],
                              [helper.make_tensor_value_info("y", 1, [4, 300])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lowered, report = lower(model if given == "proto" else model.SerializeToString(), "npu256")
    first, second = report.layers
    assert first.cost.arrays == 4 and second.cost.arrays == 0 and second.cost.vmm_invocations
    assert "on the arrays of first" in second.detail
    weights = {}
    for node in lowered.graph:
        if node.op_type == "VMM":
            weights.setdefault(g.source(node), []).append(node.inputs[1].name)
    # 300 rows: two bands of tiles (VMMs), each of two arrays for the 300 columns
    assert len(weights["first"]) == 2 and weights["second"] == weights["first"]
    feeds = {"x": rng.standard_normal((4, 300)).astype(np.float32)}
    proto = ir.serde.serialize_model(lowered)
    reference = Reference(proto, "npu256")
    want = _run(model, feeds)
    assert_close(_run(proto, feeds), want, "onnxruntime")
    assert_close(reference.run(feeds)[0], want, "reference")
    assert reference.array.arrays == report.totals()["arrays"] == 4


def test_a_layer_marked_for_the_cpu_stays_float():
    model, feeds = conv_relu_gemm()
    table = calibrate(model, feeds)
    model.graph.node[3].name = "fc_cpu"
    from paddle_npu.npu.passes.marks import Marks
    q, _, records = quantized_lower(model, table, target="npu64", marks=Marks())
    assert [r["layer"] for r in records] == ["conv"]
    assert {g.device(n) for n in q.graph if g.source(n) == "fc_cpu"} == {"cpu"}
    assert {n.op_type for n in q.graph if g.source(n) == "fc_cpu"} == {"VMM", "AddInTile"}


def _node(name, output, precision=None):
    node = ir.Node("", "Conv", [], name=name)
    node.outputs[0].name = output
    if precision:
        g.set_precision(node, precision)
    return node


@pytest.mark.parametrize("name,output,marked,want", [
    ("conv", "c", False, 8),            # the default
    ("conv", "c", True, 16),            # a 16-bit mark
    ("conv_hp", "c", False, 16),        # `_hp` in the name
    ("conv", "c_hp", False, 16),        # ... or the output's
    ("a", "c", True, 8),                # the precision table by layer name beats the mark
    ("b", "c", True, 16),               # the mark beats the calibration table's section
    ("b", "c", False, 8),               # the section by layer name
    ("conv", "x", False, 16),           # the precision table by output name
    ("conv", "z", False, 8),            # the section by output name
])
def test_layer_bits_first_match_wins(name, output, marked, want):
    q = Quantization({"tensors": {}, "precision": {"b": "int8", "x": "int8", "z": "int8"}},
                     bits=8, precision={"a": 8, "x": 16})
    assert q.bits_of(_node(name, output, 16 if marked else None), [output]) == want


def test_uncalibrated_input_is_named():
    model, feeds = conv_relu_gemm()
    table = calibrate(model, feeds)
    del table["tensors"]["f"]
    with pytest.raises(ConversionError, match="layer fc: its input 'f' is not in the "
                       "calibration table"):
        quantized_lower(model, table, target="npu64")


def test_cli_auto_hp_without_data_is_our_error(tmp_path, capsys):
    from paddle_npu.cli import main

    model, feeds = conv_relu_gemm()
    path = str(tmp_path / "m.onnx")
    ir.save(ir.serde.deserialize_model(model), path)
    out = str(tmp_path / "q.onnx")
    rc = main(["lower", path, "-o", out, "--quantize", "int8", "--calibration", "t.json",
               "--auto-hp", "2"])
    assert rc == 2 and not (tmp_path / "q.onnx").exists()
    assert "--auto-hp / --hp-until-cosine need --data" in capsys.readouterr().err


def test_the_planning_pass_plans_every_matrix_layer_before_any_is_lowered():
    """The plans are data made before lowering: the graph still holds the Conv and the Gemm
    when they exist; the lowering emits their tiles, and the report's layers are the costs
    computed from the same plans."""
    from paddle_npu.npu.context import LowerContext
    from paddle_npu.npu.chip.cost import layer_report
    from paddle_npu.npu.passes.framework import Pass
    from paddle_npu.npu.pipeline import LowerNodes, passes, prepare
    from paddle_npu.npu.passes.planning import PlanLayers
    from paddle_npu.npu.chip.target import load_target

    model, _ = conv_relu_gemm()
    m = prepare(model)
    target = load_target("npu64")
    steps = passes(LowerContext(m, target, "packed"))
    seen = {}

    class Look(Pass):       # looks at the graph between planning and lowering
        name = "look"

        def run(self, model, result):
            seen["ops"] = [n.op_type for n in model.graph]
    at = next(i for i, p in enumerate(steps.passes) if isinstance(p, LowerNodes))
    steps.passes.insert(at, Look())
    steps(m)
    assert {"Conv", "Gemm"} <= set(seen["ops"])     # planned before anything was lowered
    plans = steps.result(PlanLayers).plans
    assert list(plans) == ["conv", "fc"]
    conv, fc = plans["conv"], plans["fc"]
    # 27 rows in one tile of 64; Gemm: 288 rows x 70 columns on 64 x 64 arrays
    assert (len(conv.tiles), conv.vectors, conv.bits) == (1, 36, None)
    assert len(fc.tiles) == 5 * 2 and fc.vectors == 1 and fc.unit == "arrays"
    assert {layer: len(t) for layer, t in _tiles(m, "VMM").items()} == \
        {"conv": len(conv.bands), "fc": len(fc.bands)}
    _, report = lower(model, "npu64")
    assert [l.as_dict() for l in report.layers] == \
        [layer_report(p, target).as_dict() for p in (conv, fc)]
