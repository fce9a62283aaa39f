"""Small ONNX models built in the tests of stage 2, and running them three ways."""
import dataclasses

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from paddle_npu.compare import agreement, run_onnx
from paddle_npu.npu import DOMAIN, Reference
from paddle_npu.npu.chip.target import load_target

TOL = 1e-5


def model(nodes, inputs, outputs, inits=(), opset=17):
    """A ModelProto; inputs/outputs are (name, shape) float tensors (shape None: unknown)."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def on_arrays(target="npu256"):
    """`target` (a Target or a preset's name) without DepthwiseConv: a depthwise Conv lowers
    to block-diagonal array tiles there, which the tests of those tiles need."""
    t = load_target(target)
    return dataclasses.replace(t, primitives=tuple(p for p in t.primitives
                                                   if p != "DepthwiseConv"))


def serialized(m):
    return ir.serde.serialize_model(m).SerializeToString() if isinstance(m, ir.Model) \
        else m.SerializeToString()


def program(lowered):
    """A lowered ir.Model's NPU program as bytes, without its emulation: the function
    bodies, the overload each node calls and the metadata naming the emulation left out."""
    from paddle_npu.npu.emulation.functions import npu_program

    return npu_program(ir.serde.serialize_model(lowered))


def three_way(original, lowered, feeds, target):
    """(ORT original, ORT lowered, NumPy reference outputs, Reference) on the same feeds."""
    _, want = run_onnx(serialized(original), feeds)
    low = serialized(lowered)
    _, got = run_onnx(low, feeds)
    ref = Reference(low, target)
    return want, got, ref.run(feeds), ref


def assert_close(got, want, what):
    a = agreement(got, want)
    assert np.shape(got) == np.shape(want), f"{what}: shape {np.shape(got)} != {np.shape(want)}"
    assert a["rel_diff"] <= TOL, f"{what}: {a}"


def op_types(lowered):
    """{(domain, op_type)} of the main graph's nodes."""
    return {(n.domain or "", n.op_type) for n in lowered.graph}


def npu_ops(lowered):
    return {t for d, t in op_types(lowered) if d == DOMAIN}


def checked(lowered):
    """The lowered model passes onnx.checker with its functions."""
    proto = ir.serde.serialize_model(lowered)
    onnx.checker.check_model(proto, full_check=False)
    return proto


def rewritten(model, *rules, restart=False):
    """(PassResult, ir.Model): `rules` run as one RulePass over `model` (a ModelProto or
    bytes) made ready as lowering makes it."""
    from paddle_npu.npu.passes.framework import RulePass
    from paddle_npu.npu.pipeline import prepare

    m = prepare(model)
    return RulePass(rules[0].name, rules, restart=restart)(m), m


def same_numbers(before, after, feeds):
    """onnxruntime computes the same outputs on `before` (a ModelProto, bytes or an
    ir.Model) and on `after` (a rewritten ir.Model, its primitives emulated), which passes
    onnx.checker."""
    from paddle_npu.npu.emulation.functions import emulate

    want = []
    for m in (before, after):
        if isinstance(m, ir.Model):
            if any(n.domain == DOMAIN for n in m.graph):
                emulate(m)
            m.ir_version = max(m.ir_version, 10)
        data = serialized(m) if not isinstance(m, bytes) else m
        onnx.checker.check_model(onnx.load_from_string(data))
        want.append(run_onnx(data, feeds)[1])
    (want, got) = want
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, f"output {i}")


def readers(value):
    """The names of the nodes reading `value`."""
    return [u.name for u, _ in value.uses()]
