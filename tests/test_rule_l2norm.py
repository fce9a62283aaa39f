"""L2Norm / LpNormToOps: an L2 normalisation of [N, C] features rebuilt from Mul, a 1x1 Conv
summing the squares, Sqrt, Clip and Div (Concat repeating the norm without broadcast)."""
import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from npu_helpers import model, readers, rewritten, same_numbers
from paddle_npu.npu import graph as g
from paddle_npu.npu.passes.restruct import L2Norm, LpNormToOps, concat_broadcast
from paddle_npu.npu.passes.rules import Build
from paddle_npu.npu.chip.target import load_target, target_from_dict

NNIE = load_target("nnie")              # no broadcast
BROADCAST = target_from_dict({"base": "nnie", "restruct": {"broadcast": True}})
X = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)


def _rules(target=NNIE):
    return L2Norm(target), LpNormToOps(target)


def _ops(m):
    return [n.op_type for n in m.graph]


def _divided(norm_nodes, inits=(), opset=17):
    """y = x / norm, `norm_nodes` making "norm" from x [3, 40]."""
    return model(norm_nodes + [helper.make_node("Div", ["x", "norm"], ["y"], name="div")],
                 [("x", [3, 40])], [("y", [3, 40])], inits, opset=opset)


def test_lp_normalization_with_concat_broadcast():
    proto = model([helper.make_node("LpNormalization", ["x"], ["y"], name="lp", p=2, axis=1)],
                  [("x", [3, 40])], [("y", [3, 40])])
    result, m = rewritten(proto, *_rules())
    assert len(result.fired) == 1 and result.refused == {}
    ops = _ops(m)
    assert ops[:4] == ["Reshape", "Mul", "Conv", "Sqrt"] and ops[-2:] == ["Div", "Flatten"]
    assert "Concat" in ops and "LpNormalization" not in ops
    flat = list(m.graph)[-1]
    assert flat.outputs[0].name == "y" and m.graph.outputs[0] is flat.outputs[0]
    same_numbers(proto, m, {"x": X})
    result, m = rewritten(proto, *_rules(BROADCAST))
    assert _ops(m) == ["Reshape", "Mul", "Conv", "Sqrt", "Div", "Flatten"]
    same_numbers(proto, m, {"x": X})


SUM_OF_SQUARES = [helper.make_node("Pow", ["x", "two"], ["sq"], name="square"),
                  helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sum", keepdims=1)]


@pytest.mark.parametrize("nodes, clip", [
    ([helper.make_node("ReduceL2", ["x"], ["norm"], axes=[1], keepdims=1, name="l2")], False),
    ([helper.make_node("ReduceL2", ["x"], ["n"], axes=[1], keepdims=1, name="l2"),
      helper.make_node("Clip", ["n", "lo"], ["norm"], name="clip")], True),
    (SUM_OF_SQUARES + [helper.make_node("Add", ["one", "s"], ["sa"], name="plus"),
                       helper.make_node("Sqrt", ["sa"], ["norm"], name="sqrt")], False),
    ([helper.make_node("ReduceSumSquare", ["x"], ["s"], axes=[1], keepdims=1, name="sum"),
      helper.make_node("Sqrt", ["s"], ["n"], name="sqrt"),
      helper.make_node("Max", ["lo", "n"], ["norm"], name="max")], True),
    ([helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
      helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sum", keepdims=1),
      helper.make_node("Sqrt", ["s"], ["norm"], name="sqrt")], False),
], ids=["reduce_l2", "clipped", "pow_plus_one", "sum_square_max", "mul"])
def test_the_divided_forms(nodes, clip):
    used = {i for n in nodes for i in n.input}
    inits = [(k, v) for k, v in (("two", np.float32(2)), ("one", np.float32(1)),
                                 ("lo", np.float32(1e-12)), ("axes", np.array([1], np.int64)))
             if k in used]
    proto = _divided(nodes, inits)
    result, m = rewritten(proto, *_rules(BROADCAST))
    assert len(result.fired) == 1 and result.refused == {}
    assert _ops(m) == ["Reshape", "Mul", "Conv", "Sqrt"] + ["Clip"] * clip + ["Div", "Flatten"]
    conv = list(m.graph)[2]
    assert readers(conv.outputs[0]) == ["div/sqrt"]
    assert set(m.graph.initializers) == {"div.nchw", "div.sum_w", "div.plus_a"} | (
        {"div.min"} if clip else set())
    same_numbers(proto, m, {"x": X})


def test_refusals_keep_the_graph():
    lp = model([helper.make_node("LpNormalization", ["x"], ["y"], name="lp", p=1, axis=1)],
               [("x", [2, 4])], [("y", [2, 4])])
    over_batch = _divided([helper.make_node("ReduceL2", ["x"], ["norm"], axes=[0], keepdims=1,
                                            name="l2")], opset=15)
    for proto, target, refused in ((lp, NNIE, "lp"), (over_batch, NNIE, "div"),
                                   (_divided([helper.make_node("ReduceL2", ["x"], ["norm"],
                                                               axes=[1], name="l2")]),
                                    load_target("npu256"), "div")):   # npu256: no Sqrt
        result, m = rewritten(proto, *_rules(target))
        assert result.fired == [] and list(result.refused) == [refused]
        assert [n.name for n in m.graph] == [n.name for n in proto.graph.node]


def test_marked_nodes_are_refused():
    proto = _divided([helper.make_node("ReduceL2", ["x"], ["norm"], axes=[1], name="l2")])
    from paddle_npu.npu.passes.framework import RulePass
    from paddle_npu.npu.pipeline import prepare
    m = prepare(proto)
    g.set_mark(next(iter(m.graph)), "cpu", "test")
    result = RulePass("l2norm", _rules())(m)
    assert result.fired == [] and list(result.refused) == ["div"]


def test_on_face_embed(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("face_embed")
    for target, concats in ((NNIE, True), (BROADCAST, False)):
        result, m = rewritten(onnx_bytes, *_rules(target))
        assert len(result.fired) == 2 and result.refused == {}
        ops = _ops(m)
        assert "ReduceSum" not in ops and "ReduceL2" not in ops
        assert ("Concat" in ops) == concats and ops.count("Conv") == 2 + 2
        same_numbers(onnx_bytes, m, feeds)
    result, m = rewritten(onnx_bytes, *_rules(load_target("npu256")))
    assert result.fired == [] and len(result.refused) == 2


@pytest.mark.parametrize("count", [1, 2, 7, 32, 64, 100, 1024, 1030])
def test_concat_broadcast_counts(count):
    from paddle_npu.compare import run_onnx

    graph = ir.Graph([], [], nodes=[], opset_imports={"": 17}, name="b")
    x = ir.Value(name="n", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 1, 1, 1]))
    graph.inputs.append(x)
    b = Build(graph)
    nodes, out = concat_broadcast(b, x, count, 1, "b", [2, count, 1, 1], ir.DataType.FLOAT)
    assert nodes == b.made
    assert all(n.op_type == "Concat" and len(n.inputs) <= 32 for n in nodes)
    if count == 1:
        assert out is x
        return
    graph.extend(nodes)
    graph.outputs.append(out)
    proto = ir.serde.serialize_model(ir.Model(graph, ir_version=10))
    v = np.random.default_rng(0).standard_normal((2, 1, 1, 1)).astype(np.float32)
    _, (got,) = run_onnx(proto.SerializeToString(), {"n": v})
    np.testing.assert_array_equal(got, np.broadcast_to(v, (2, count, 1, 1)))
