"""FuseLayerNorm: the layer normalisation exporters write out -> one LayerNorm primitive."""
import numpy as np
import pytest
from onnx import helper

from npu_helpers import model, readers, rewritten, same_numbers
from paddle_npu.npu import DOMAIN
from paddle_npu.npu import graph as g
from paddle_npu.npu.passes.common import FuseLayerNorm

RNG = np.random.default_rng(0)


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _written_out(square="pow", affine=("scale", "bias"), eps="eps", eps_first=False,
                 opset=11, outputs=("y",)):
    """stage 1's layer_norm before opset 17: mean, Sub, Pow 2 (or d * d), mean, Add eps,
    Sqrt, Div, [Mul scale], [Add bias], over the last axis."""
    axes = {"axes": [-1]} if opset < 18 else {}
    mean_in = ["x"] + (["axes"] if opset >= 18 else [])
    nodes = [helper.make_node("ReduceMean", mean_in, ["mean"], name="mean", **axes),
             helper.make_node("Sub", ["x", "mean"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="pow") if square == "pow" else
             helper.make_node("Mul", ["d", "d"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"] + mean_in[1:], ["var"], name="var", **axes),
             helper.make_node("Add", [eps, "var"] if eps_first else ["var", eps], ["ve"],
                              name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
             helper.make_node("Div", ["d", "std"], ["n"], name="div")]
    last = "n"
    for op in affine:
        out = "y" if op == affine[-1] else op
        nodes.append(helper.make_node("Mul" if op == "scale" else "Add",
                                      [last, "s" if op == "scale" else "b"], [out], name=op))
        last = out
    if not affine:
        nodes.append(helper.make_node("Identity", ["n"], ["y"], name="out"))
    inits = [("two", np.float32(2)), ("eps", np.float32(1e-5)), ("s", _weights(8)),
             ("b", _weights(8)), ("axes", np.array([-1], np.int64))]
    inputs = [("x", [2, 3, 8])] + ([("e", [1])] if eps == "e" else [])
    return model(nodes, inputs, [(o, [2, 3, 8]) for o in outputs], inits, opset=opset)


def _layer_norms(m):
    return [n for n in m.graph if n.domain == DOMAIN and n.op_type == "LayerNorm"]


def test_fuses_the_written_out_form():
    proto = _written_out()
    result, m = rewritten(proto, FuseLayerNorm())
    assert len(result.fired) == 1 and result.refused == {}
    (ln,) = m.graph
    assert (ln.domain, ln.op_type, ln.name) == (DOMAIN, "LayerNorm", "div/layer_norm")
    assert [v.name for v in ln.inputs] == ["x", "div.scale", "div.bias"]
    assert ln.outputs[0].name == "y" and m.graph.outputs[0] is ln.outputs[0]
    assert (ln.attributes.get_int("axis"), ln.attributes.get_float("epsilon")) == \
        (2, pytest.approx(1e-5))
    assert (g.source(ln), g.source_op(ln)) == ("div", "LayerNormalization")
    assert not {"s", "b", "eps", "two"} & set(m.graph.initializers)
    same_numbers(proto, m, {"x": _weights(2, 3, 8)})


@pytest.mark.parametrize("form, params", [
    (dict(square="mul"), 2), (dict(eps_first=True), 2), (dict(opset=18), 2),
    (dict(affine=()), 0), (dict(affine=("scale",)), 1), (dict(affine=("bias",)), 2)])
def test_its_variants(form, params):
    """d * d for the square, epsilon first, axes as an input (opset 18), and with or
    without the scale and bias after it (a bias alone: no scale input)."""
    proto = _written_out(**form)
    result, m = rewritten(proto, FuseLayerNorm())
    assert len(result.fired) == 1
    (ln,) = _layer_norms(m)
    assert len(ln.inputs) == 1 + params
    assert [n.op_type for n in m.graph] == ["LayerNorm"] + (["Identity"] if not params else [])
    same_numbers(proto, m, {"x": _weights(2, 3, 8)})


def test_a_scale_computed_at_run_time_stays_after_it():
    proto = _written_out(affine=("scale",))
    proto.graph.node[-1].input[1] = "x"                  # n * x: not a constant scale
    result, m = rewritten(proto, FuseLayerNorm())
    assert len(result.fired) == 1
    ln, mul = m.graph
    assert ln.op_type == "LayerNorm" and len(ln.inputs) == 1
    assert readers(ln.outputs[0]) == ["scale"] and mul.outputs[0].name == "y"
    same_numbers(proto, m, {"x": _weights(2, 3, 8)})


def test_a_run_time_epsilon_is_refused():
    result, m = rewritten(_written_out(eps="e"), FuseLayerNorm())
    assert result.fired == [] and list(result.refused) == ["div"]
    assert _layer_norms(m) == [] and len(list(m.graph)) == 9


def test_a_part_read_elsewhere_is_refused():
    result, m = rewritten(_written_out(outputs=("y", "d")), FuseLayerNorm())
    assert result.fired == [] and list(result.refused) == ["div"]
    assert _layer_norms(m) == []


def test_on_tiny_bert(zoo_onnx):
    onnx_bytes, feeds = zoo_onnx("tiny_bert")
    result, m = rewritten(onnx_bytes, FuseLayerNorm())
    assert len(result.fired) == 5 and result.refused == {}
    assert len(_layer_norms(m)) == 5 and "ReduceMean" not in {n.op_type for n in m.graph}
    same_numbers(onnx_bytes, m, feeds)
