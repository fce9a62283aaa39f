"""Moves and tables on the NPU: Slice / Split / Gather at constant positions -> Crop, Concat
-> Join, Gather from a constant table (an embedding) -> TableRead; what is constant at a
fixed input size folded; attention-mask ops (compare, select, cast, broadcast) on the vector
unit. Tiny models built with onnx.helper, lowered on npu256 and run three ways (onnxruntime
before, onnxruntime on the function bodies after, the NumPy reference), with the costs the
reference counts and the refusals."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from npu_helpers import assert_close, checked, model, npu_ops, op_types, three_way
from paddle_npu.npu import DOMAIN, lower


def _int_model(nodes, inputs, outputs, inits=()):
    """Like npu_helpers.model, inputs given as (name, shape, element type)."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_slice_split_concat_become_crop_and_join():
    """x [2, 6, 8]: rows 1, 3 of axis 1, split 3 + 5 on axis 2, joined back the other way."""
    c = lambda name, v: helper.make_node("Constant", [], [name], name=name,  # noqa: E731
                                         value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [c("st", [1]), c("en", [5]), c("ax", [1]), c("sp", [2]), c("sizes", [3, 5]),
             helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"], name="slice"),
             helper.make_node("Split", ["s", "sizes"], ["a", "b"], axis=2, name="split"),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=-1, name="concat")]
    m = model(nodes, [("x", [2, 6, 8])], [("y", [2, 2, 8])])
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"Crop", "Join"}
    assert not {op for d, op in op_types(lowered) if d == ""} & {"Slice", "Split", "Concat"}
    assert [s.device for s in report.segments] == ["npu"]
    x = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
    want, got, ref, r = three_way(m, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    np.testing.assert_array_equal(want[0], np.concatenate([x[:, 1:5:2, 3:], x[:, 1:5:2, :3]], -1))
    # their cost: the elements moved (slice 32, the two parts 32, the join 32)
    assert r.array.moved_elements == 3 * 32


def test_split_into_equal_parts():
    """No sizes: as many parts as outputs, the last one smaller (7 = 3 + 3 + 1)."""
    m = model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, name="split"),
               helper.make_node("Concat", ["c", "a", "b"], ["y"], axis=1, name="concat")],
              [("x", [2, 7])], [("y", [2, 7])], opset=18)
    m.graph.node[0].attribute.append(helper.make_attribute("num_outputs", 3))
    lowered, _ = lower(m)
    assert npu_ops(lowered) == {"Crop", "Join"}
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    want, got, ref, _ = three_way(m, lowered, {"x": x}, "npu256")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(ref[0], want[0])
    np.testing.assert_array_equal(want[0], x[:, [6, 0, 1, 2, 3, 4, 5]])


def test_embedding_lookup_reads_table_rows_and_a_constant_position_is_a_crop():
    """BERT's front and back: token embedding + position embedding, ..., the first token."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    positions = rng.standard_normal((5, 8)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embedding"),
             helper.make_node("Add", ["e", "positions"], ["h"], name="add"),
             helper.make_node("Gather", ["h", "first"], ["y"], axis=1, name="first_token")]
    m = _int_model(nodes, [("ids", [2, 5], TensorProto.INT64)], [("y", [2, 8])],
                   [("table", table), ("positions", positions), ("first", np.int64(0))])
    lowered, report = lower(m)
    checked(lowered)
    assert npu_ops(lowered) == {"TableRead", "Crop", "DimTransform"}
    assert ("", "Gather") not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    ids = rng.integers(-50, 50, (2, 5)).astype(np.int64)      # negative: from the end
    want, got, ref, r = three_way(m, lowered, {"ids": ids}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")
    assert r.array.table_rows == ids.size               # one row read per index


def test_moves_and_tables_refusals():
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="runtime_gather"),
             helper.make_node("Gather", ["g", "pick"], ["p"], axis=1, name="scattered"),
             helper.make_node("Slice", ["p", "st", "en", "ax", "sp"], ["y"], name="reversed")]
    m = _int_model(nodes, [("x", [4, 6], TensorProto.FLOAT), ("i", [3], TensorProto.INT64)],
                   [("y", None)],
                   [("pick", np.array([0, 2, 3], np.int64)), ("st", np.array([-1], np.int64)),
                    ("en", np.array([-4], np.int64)), ("ax", np.array([1], np.int64)),
                    ("sp", np.array([-1], np.int64))])
    lowered, report = lower(m)
    assert report.refusals == {
        "runtime_gather": "Gather: both the data and the indices are computed at run time",
        "reversed": "Slice: a reversed slice (step below 1) is not a crop"}
    assert any(n.op_type == "AxisResample" for n in lowered.graph)    # "scattered": a pick
    feeds = {"x": rng.standard_normal((4, 6)).astype(np.float32),
             "i": np.array([3, 0, 1], np.int64)}
    want, got, ref, _ = three_way(m, lowered, feeds, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    # a target without the moves keeps Concat as it was (nnie's vector unit runs it)
    cat = model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="concat")],
                [("a", [2, 3]), ("b", [1, 3])], [("y", [3, 3])])
    lowered, report = lower(cat, "nnie")
    assert report.refusals["concat"] == "Concat: the target has no Join"
    assert [s.device for s in report.segments] == ["npu"]


def test_position_ids_and_causal_mask_fold_at_a_fixed_size():
    """GPT's front: position ids by ConstantOfShape + CumSum of the input's shape and a
    causal mask by Greater / Not / Where over Range: constant once the size is fixed, so
    folded; the padding mask Equal / Cast / Where of the ids themselves runs on the vector
    unit. One NPU segment. At 80 tokens the position ids (1280 bytes) and the mask (6400)
    outweigh what they are made from: a fixed size folds them all the same."""
    nodes = [helper.make_node("Shape", ["ids"], ["shape"], name="shape"),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="ones",
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("CumSum", ["ones", "one"], ["pos"], name="cumsum"),
             helper.make_node("Sub", ["pos", "ones"], ["pos0"], name="from_zero"),
             helper.make_node("Gather", ["pos_table", "pos0"], ["pe"], name="pos_embedding"),
             helper.make_node("Gather", ["table", "ids"], ["te"], name="tok_embedding"),
             helper.make_node("Add", ["te", "pe"], ["h"], name="embed"),
             helper.make_node("Gather", ["pos0", "z"], ["seq"], axis=0, name="seq"),
             helper.make_node("Unsqueeze", ["seq", "zero"], ["row"], name="row"),
             helper.make_node("Unsqueeze", ["seq", "one1"], ["col"], name="col"),
             helper.make_node("Greater", ["row", "col"], ["future"], name="future"),
             helper.make_node("Not", ["future"], ["past"], name="past"),
             helper.make_node("Equal", ["ids", "pad"], ["is_pad"], name="is_pad"),
             helper.make_node("Cast", ["is_pad"], ["pad_f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Unsqueeze", ["pad_f", "two"], ["pad_col"], name="pad_col"),
             helper.make_node("Where", ["past", "zero_f", "minus"], ["causal"], name="causal"),
             helper.make_node("Mul", ["pad_col", "minus"], ["padding"], name="padding"),
             helper.make_node("Add", ["causal", "padding"], ["mask"], name="mask"),
             helper.make_node("MatMul", ["mask", "h"], ["y"], name="mix")]
    inits = [("one", np.int64(1)), ("z", np.int64(0)), ("zero", np.array([0], np.int64)),
             ("one1", np.array([1], np.int64)),
             ("two", np.array([2], np.int64)), ("pad", np.int64(0)),
             ("pos_table", np.arange(320, dtype=np.float32).reshape(80, 4) / 100),
             ("table", np.random.default_rng(3).standard_normal((9, 4)).astype(np.float32)),
             ("zero_f", np.float32(0)), ("minus", np.float32(-2.0))]
    m = _int_model(nodes, [("ids", ["b", "s"], TensorProto.INT64)], [("y", None)], inits)
    lowered, report = lower(m, input_shape={"ids": [2, 80]})
    checked(lowered)
    kept = {op for d, op in op_types(lowered) if d == ""}
    assert not kept & {"Shape", "ConstantOfShape", "CumSum", "Greater", "Not", "Unsqueeze"}
    assert {"Equal", "Cast"} <= kept
    assert [s.device for s in report.segments] == ["npu"]
    ids = np.random.default_rng(4).integers(0, 9, (2, 80)).astype(np.int64)
    want, got, ref, _ = three_way(m, lowered, {"ids": ids}, "npu256")
    assert_close(got[0], want[0], "onnxruntime")
    assert_close(ref[0], want[0], "reference")


def test_gather_at_positions_in_any_order_is_a_pick():
    """Constant positions that are no crop (repeated, out of order: the taps of a bilinear
    resize written out) -> AxisResample picking them; integer data stays a refusal."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Gather", ["x", "rows"], ["r"], axis=2, name="rows"),
             helper.make_node("Gather", ["r", "cols"], ["y"], axis=-1, name="cols"),
             helper.make_node("Gather", ["n", "rows"], ["k"], axis=0, name="ints"),
             helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT, name="as_float")]
    m = _int_model(nodes, [("x", [1, 2, 5, 4], TensorProto.FLOAT),
                           ("n", [6], TensorProto.INT64)],
                   [("y", None), ("kf", None)],
                   [("rows", np.array([4, 0, 0, 2, -1], np.int64)),
                    ("cols", np.array([3, 1], np.int64))])
    lowered, report = lower(m)
    picks = [n for n in lowered.graph if n.op_type == "AxisResample"]
    assert len(picks) == 2 and "rows" not in report.refusals and "cols" not in report.refusals
    assert report.refusals["ints"].startswith("Gather: the constant positions are not evenly")
    feeds = {"x": rng.standard_normal((1, 2, 5, 4)).astype(np.float32),
             "n": np.arange(6, dtype=np.int64) * 7}
    want, got, ref, r = three_way(m, lowered, feeds, "npu256")
    for i in range(2):
        assert np.array_equal(got[i], want[i]) and np.array_equal(ref[i], want[i])
    assert r.array.moved_elements >= want[0].size
