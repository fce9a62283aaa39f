"""The rule framework (rules.py) on toy rules: what patterns match, and the surgery done for
a rule (new nodes in, readers and output names moved, the rest dropped)."""
import numpy as np
import pytest
from onnx import helper

from npu_helpers import model, readers, rewritten, same_numbers
from paddle_npu.npu import graph as g
from paddle_npu.npu.passes.rules import Match, Rule

X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


class DoubleNeg(Rule):
    name = "double_neg"

    def pattern(self, p):
        return p.op("Neg", p.op("Neg", "x", name="inner"), name="outer")

    def rewrite(self, b, m):
        same = b.node("Identity", [m.x], name=f"{m.outer.name}/identity")
        return same.outputs[0], f"{m.names} -> {same.name}"


class Square(Rule):
    """x * x -> Pow(x, 2); an x * 0 (in either order) is refused."""
    name = "square"

    def pattern(self, p):
        return p.op("Mul", "x", "y", name="mul",
                    where=lambda node, m: m.x is m.y or g.constant(m.y) is not None)

    def check(self, m):
        return None if m.x is m.y else "not a square"

    def rewrite(self, b, m):
        two = b.initializer(np.float32(2), "two")
        return b.node("Pow", [m.x, two], name="pow").outputs[0], "squared"


class ReluRun(Rule):
    """Relu, Identity*, [Relu] -> one Relu (anchored at the first)."""
    name = "relu_run"

    def pattern(self, p):
        first = p.op("Relu", "x", name="first", anchor=True)
        same = p.repeat("Identity", first, name="same")
        return p.maybe("Relu", same, name="again")

    def rewrite(self, b, m):
        return b.node("Relu", [m.x], name="relu").outputs[0], m.names


class SumOfSquares(Rule):
    """sqrt(ReduceSumSquare(x)) or sqrt(ReduceSum(x * x)) -> ReduceL2."""
    name = "sum_of_squares"

    def pattern(self, p):
        total = p.either(p.op("ReduceSumSquare", "x", "axes", name="sum"),
                         p.op("ReduceSum", p.op("Mul", "x", "x"), "axes", name="sum"))
        return p.op("Sqrt", total, name="sqrt")

    def rewrite(self, b, m):
        node = b.node("ReduceL2", [m.x, m.axes], name="l2")
        return node.outputs[0], m.names


class NegOfAbs(Rule):
    """Neg(Abs(x)) -> x * -1 ... refusing any other Neg."""
    name = "neg_abs"
    refuse_partial = True

    def pattern(self, p):
        return p.op("Neg", p.op("Abs", "x", name="abs"), name="neg")

    def check(self, m):
        return "never"


def _negs(*extra, outputs=(("y", [2, 3]),)):
    return model([helper.make_node("Neg", ["x"], ["t"], name="neg1"),
                  helper.make_node("Neg", ["t"], ["y"], name="neg2")] + list(extra),
                 [("x", [2, 3])], list(outputs))


def test_the_replacement_takes_the_readers_the_output_and_its_name():
    proto = _negs(helper.make_node("Relu", ["y"], ["r"], name="relu"),
                  outputs=(("y", [2, 3]), ("r", [2, 3])))
    result, m = rewritten(proto, DoubleNeg())
    assert result.fired == ["neg1+neg2 -> neg2/identity"]
    same, relu = m.graph
    assert same.inputs[0].name == "x" and same.outputs[0].name == "y"
    assert readers(same.outputs[0]) == ["relu"] and m.graph.outputs[0] is same.outputs[0]
    same_numbers(proto, m, {"x": X})


def test_an_inner_value_read_elsewhere_refuses_the_match():
    result, m = rewritten(_negs(outputs=(("y", [2, 3]), ("t", [2, 3]))), DoubleNeg())
    assert result.fired == [] and list(result.refused) == ["neg2"]
    assert [n.name for n in m.graph] == ["neg1", "neg2"]


def test_marks_carried_to_the_new_nodes():
    proto = _negs()
    proto.graph.node[0].metadata_props.add(key=g.MARK, value="cpu")
    _, m = rewritten(proto, DoubleNeg())
    assert g.mark(next(iter(m.graph))) == "cpu"


def test_the_same_capture_twice_is_the_same_value_and_mul_commutes():
    both = model([helper.make_node("Mul", ["x", "x"], ["y"], name="mul")],
                 [("x", [2, 3])], [("y", [2, 3])])
    result, m = rewritten(both, Square())
    assert result.fired == ["squared"] and [n.op_type for n in m.graph] == ["Pow"]
    same_numbers(both, m, {"x": X})
    # x * a: not matched; 0 * x: matched either way round, then refused by check
    for inputs in (["x", "a"], ["zero", "x"]):
        proto = model([helper.make_node("Mul", inputs, ["y"], name="mul")],
                      [("x", [2, 3]), ("a", [2, 3])], [("y", [2, 3])],
                      [("zero", np.float32(0))])
        result, _ = rewritten(proto, Square())
        assert result.fired == [] and list(result.refused) == ["mul"] * (inputs[0] == "zero")


@pytest.mark.parametrize("between, again", [(2, True), (0, True), (1, False)])
def test_repeat_and_maybe_above_the_anchor(between, again):
    names = ["r1"] + [f"id{i}" for i in range(between)] + (["r2"] if again else [])
    ops = ["Relu"] + ["Identity"] * between + (["Relu"] if again else [])
    values = ["x"] + [f"v{i}" for i in range(len(ops) - 1)] + ["y"]
    proto = model([helper.make_node(op, [values[i]], [values[i + 1]], name=name)
                   for i, (op, name) in enumerate(zip(ops, names))],
                  [("x", [2, 3])], [("y", [2, 3])])
    result, m = rewritten(proto, ReluRun())
    assert result.fired == ["+".join(names)]
    (relu,) = m.graph
    assert relu.outputs[0].name == "y"
    same_numbers(proto, m, {"x": X})


def test_either_form_and_initializers_only_the_match_read_are_dropped():
    axes = [("axes", np.array([1], np.int64)), ("k", np.float32(3))]
    for nodes in ([helper.make_node("ReduceSumSquare", ["x", "axes"], ["s"], name="s")],
                  [helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
                   helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="s")]):
        nodes.append(helper.make_node("Sqrt", ["s"], ["y"], name="sqrt"))
        proto = model(nodes, [("x", [2, 3])], [("y", [2, 1])], axes, opset=18)
        result, m = rewritten(proto, SumOfSquares())
        assert len(result.fired) == 1 and [n.name for n in m.graph] == ["l2"]
        assert set(m.graph.initializers) == {"axes", "k"}      # k: read by none of them
        same_numbers(proto, m, {"x": X})


def test_a_partial_match_refused_when_the_rule_says_so():
    result, _ = rewritten(_negs(), NegOfAbs())
    assert result.fired == [] and set(result.refused) == {"neg1", "neg2"}


def test_a_match_is_read_only():
    m = Match({"x": None}, [], None, None)
    with pytest.raises(AttributeError):
        m.x = 1
    with pytest.raises(AttributeError):
        m.axis = 1
