"""Unary activations on the lookup-table unit (Lut): every function the table has, lowered
from its ONNX op and run three ways (onnxruntime before, onnxruntime on the function bodies
after, the NumPy reference) on tiny models built with onnx.helper."""
import numpy as np
import pytest
from onnx import helper

from npu_helpers import assert_close, checked, model, npu_ops, op_types, three_way
from paddle_npu.npu import DOMAIN, lower
from paddle_npu.npu.mappers.activation import FUNCTION_OF
from paddle_npu.npu.ops.lut import FUNCTIONS

CASES = [("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Erf", {}), ("Softplus", {}),
         ("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSigmoid", {}),
         ("Mish", {}), ("Gelu", {}), ("Log", {}), ("Sqrt", {}), ("Reciprocal", {})]
POSITIVE = {"Log", "Sqrt", "Reciprocal"}       # fed |x| + 0.1


def test_every_table_function_has_a_case():
    assert {op for op, _ in CASES} == set(FUNCTION_OF)
    assert set(FUNCTION_OF.values()) | {"swish"} == set(FUNCTIONS)


@pytest.mark.parametrize("op, attrs", CASES, ids=[f"{o}{len(a)}" for o, a in CASES])
def test_activation_lowers_to_the_table_and_matches(op, attrs):
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("Add", ["a", "c"], ["p"], name="shift")] if op in POSITIVE else []
    nodes.append(helper.make_node(op, ["p" if op in POSITIVE else "x"], ["y"], name="act",
                                  **attrs))
    inits = [("c", np.float32(0.1))] if op in POSITIVE else []
    m = model(nodes, [("x", [2, 3, 5, 7])], [("y", None)], inits, opset=20)
    lowered, report = lower(m)
    checked(lowered)
    assert (DOMAIN, "Lut") in op_types(lowered) and ("", op) not in op_types(lowered)
    assert [s.device for s in report.segments] == ["npu"]
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32) * 3
    want, got, ref, r = three_way(m, lowered, {"x": x}, None)
    assert_close(got[0], want[0], f"{op} onnxruntime")
    assert_close(ref[0], want[0], f"{op} reference")
    assert r.array.lut_elements == x.size          # its cost: one look-up per element


def test_swish_body_and_reference_agree():
    """swish has no ONNX op of its own (x * sigmoid(x)): the Lut node built directly."""
    from onnx import TensorProto

    from npu_helpers import serialized
    from paddle_npu.compare import run_onnx
    from paddle_npu.npu.emulation.registry import emulation_of_op
    from paddle_npu.npu.ops import get_primitive
    from paddle_npu.npu import Reference

    prim = get_primitive("Lut")
    emulated = emulation_of_op("Lut")
    node = helper.make_node("Lut", ["x"], ["y"], domain=DOMAIN, function="swish", name="lut")
    node.overload = emulated.overload({"function": "swish"}, [[4, 6]])
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", 1, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(DOMAIN, 1)],
                          functions=[emulated.function_proto(17, {"function": "swish"}, [[4, 6]])])
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    _, (got,) = run_onnx(serialized(m), {"x": x})
    (ref,) = Reference(serialized(m), None).run({"x": x})
    assert_close(got, x / (1 + np.exp(-x)), "body")
    assert_close(ref, x / (1 + np.exp(-x)), "reference")


def test_strict_targets_keep_their_activations():
    """nnie and npu256-vmm-only have no table: nnie's vector unit runs Sigmoid as before,
    the cautious chip leaves it to the CPU; the refusal names the missing unit."""
    m = model([helper.make_node("Sigmoid", ["x"], ["y"], name="act")], [("x", [1, 8])],
              [("y", None)])
    for target, device in (("nnie", "npu"), ("npu256-vmm-only", "cpu")):
        lowered, report = lower(m, target)
        assert not npu_ops(lowered) and [s.device for s in report.segments] == [device]
        assert report.refusals["act"] == "Sigmoid: the target has no lookup-table unit (Lut)"
