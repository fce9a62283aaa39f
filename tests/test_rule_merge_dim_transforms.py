"""MergeDimTransforms: a DimTransform and the one that only reshapes after it -> one."""
import numpy as np
import onnx_ir as ir

from npu_helpers import readers, same_numbers
from paddle_npu.npu import DOMAIN
from paddle_npu.npu import graph as g
from paddle_npu.npu.ops import VERSION
from paddle_npu.npu.passes.common import MergeDimTransforms
from paddle_npu.npu.passes.framework import RulePass

FLOAT = ir.DataType.FLOAT


def _dim_transform(x, perm, shape, name, dims):
    attrs = {"perm": perm, "shape": shape}
    node = g.make_node(DOMAIN, "DimTransform", [x], attrs, name, FLOAT, dims)
    g.set_placement(node, "npu", 0)
    return node


def _model(second_perm=(0, 1, 2, 3), first_is_output=False):
    """x [2, 3, 4, 5] -> first (axes 1 and 2 swapped) -> second (reshaped to [2, 12, 5],
    or also transposed) -> relu."""
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([2, 3, 4, 5]))
    first = _dim_transform(x, [0, 2, 1, 3], [0, 0, 0, 0], "first", [2, 4, 3, 5])
    out = [2, 12, 5] if list(second_perm) == [0, 1, 2, 3] else [2, 5, 12]
    second = _dim_transform(first.outputs[0], list(second_perm), out, "second", out)
    relu = g.make_node("", "Relu", [second.outputs[0]], {}, "relu", FLOAT, out)
    outputs = [relu.outputs[0]] + ([first.outputs[0]] if first_is_output else [])
    graph = ir.Graph([x], outputs, nodes=[first, second, relu],
                     opset_imports={"": 17, DOMAIN: VERSION}, name="moves")
    return ir.Model(graph, ir_version=10)


def _merge(m):
    return RulePass("merge_dim_transforms", [MergeDimTransforms()], restart=True)(m)


def test_merges_into_one_move():
    m = _model()
    result = _merge(m)
    assert len(result.fired) == 1 and result.refused == {}
    merged, relu = m.graph
    assert (merged.op_type, merged.name) == ("DimTransform", "second/merged")
    assert merged.inputs[0].name == "x" and readers(merged.outputs[0]) == ["relu"]
    assert list(merged.attributes.get_ints("perm")) == [0, 2, 1, 3]
    assert merged.outputs[0].name == "second" and g.dims(merged.outputs[0]) == [2, 12, 5]
    assert g.device(merged) == "npu"                     # the second's annotations
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    same_numbers(_model(), m, {"x": x})


def test_a_second_that_transposes_is_refused():
    m = _model(second_perm=(0, 2, 1))
    m.graph.node(1).attributes["shape"] = ir.AttrInt64s("shape", [2, 5, 12])
    result = _merge(m)
    assert result.fired == [] and list(result.refused) == ["second"]
    assert [n.name for n in m.graph] == ["first", "second", "relu"]


def test_a_first_read_elsewhere_is_refused():
    m = _model(first_is_output=True)
    result = _merge(m)
    assert result.fired == [] and list(result.refused) == ["second"]
    assert [n.name for n in m.graph] == ["first", "second", "relu"]
