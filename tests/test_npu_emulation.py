"""How onnxruntime emulates a lowered model (npu/emulation/): exact (float64) sums, as the
NumPy reference, or float32 sums; the NPU program the same under either, and `verify`
judging the emulation a model carries while reporting how far the other one is."""
import ast
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npu_helpers import program, serialized
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.npu import DOMAIN, all_primitives, lower, ops, verify
from paddle_npu.npu.emulation import KEY
from paddle_npu.npu.emulation.functions import emulate
from paddle_npu.npu.emulation.registry import all_emulations
from paddle_npu.npu.verification.verifier import render, seeded_inputs

K, M = 128, 4


def cancelling_matmul():
    """ones(1, K) @ W, W's column sums cancelling across the two 64-row tiles of an npu64
    array: tile 0 sums to -(2^24 - 1), tile 1 to 2^24 + 2, both representable in float32,
    so the exact bodies (each tile summed exactly, rounded once, then the tiles added) give
    the true 3; summed in float32, tile 1 passes 2^24 + 1, rounds to 2^24 and twice loses
    1, giving 1. The model before lowering sums all 128 rows in order, its running sums
    staying below 2^24: exactly 3 as well. The ones come from Sign(Abs(x)), so the model's
    float-noise floor (its output under one-ulp input nudges) is 0."""
    w = np.zeros((K, M), np.float32)
    w[0], w[64], w[65], w[66] = -(2.0 ** 24 - 1), 2.0 ** 24 - 1, 2.0, 1.0
    w *= 2.0 ** -np.arange(M, dtype=np.float32)     # each column a power of two smaller
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sign", ["a"], ["ones"]),
         helper.make_node("MatMul", ["ones", "w"], ["y"])], "cancelling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), w.astype(np.float64).sum(0)


def small_conv():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def overloads(lowered):
    """The overloads the main graph's VMM / AddInTile nodes call."""
    return {n.overload for n in lowered.graph
            if n.domain == DOMAIN and n.op_type in ("VMM", "AddInTile")}


def test_float32_sums_lose_what_exact_ones_keep_and_verify_says_which():
    """The NPU program is the same; onnxruntime's float32 sums give 1 where the model and the
    exact sums give 3. `verify` judges the emulation the model carries and reports the other."""
    original, exact_sums = cancelling_matmul()
    feeds = seeded_inputs(original)
    _, (want,) = run_onnx(original, feeds)
    np.testing.assert_array_equal(want[0], exact_sums)      # the model itself sums exactly

    lowered, report = lower(original, "npu64")
    assert report.emulation == {"emulation": "exact", "float32_nodes": 3}
    assert lowered.metadata_props[KEY] == "exact"
    assert overloads(lowered) and not any(o.endswith("f32") for o in overloads(lowered))
    _, (got,) = run_onnx(serialized(lowered), feeds)
    np.testing.assert_array_equal(got[0], exact_sums)
    result = verify(original, lowered, "npu64")
    assert result["ok"] and result["within"] == "float64"
    assert result["emulation"]["judged"] == "exact" and result["emulation"]["other"] == "float32"
    assert result["emulation"]["worst_rel_diff"] > 0.5 and not result["emulation"]["ok"]
    assert "float32 (not judged): " in render(result) and \
        "beyond the rule: keep exact for accuracy runs" in render(result)
    # the caller's model carries its own emulation again after verify ran the other one
    assert lowered.metadata_props[KEY] == "exact"
    assert not any(o.endswith("f32") for o in overloads(lowered))

    fast, report = lower(original, "npu64", emulation="float32")
    assert report.emulation["emulation"] == "float32"
    assert all(o.endswith("f32") for o in overloads(fast))
    assert program(fast) == program(lowered)
    _, (got,) = run_onnx(serialized(fast), feeds)
    assert agreement(got, want)["rel_diff"] > 0.5            # 1 for 3: far beyond 1e-5
    result = verify(original, fast, "npu64")
    assert not result["ok"] and result["emulation"] == {
        "judged": "float32", "other": "exact", "worst_rel_diff": 0.0, "worst_ratio": 0.0,
        "ok": True}


def test_emulating_again_replaces_the_bodies():
    lowered, _ = lower(cancelling_matmul()[0], "npu64")
    exact = serialized(lowered)
    assert emulate(lowered, "float32") == {"emulation": "float32", "float32_nodes": 3}
    assert all(o.endswith("f32") for o in overloads(lowered))
    emulate(lowered, "exact")
    assert serialized(lowered) == exact


def test_float32_emulation_within_the_rule_is_reported_so():
    original = small_conv()
    lowered, report = lower(original, "npu256")
    # the VMM and the Im2Col (of a picture: a one-hot Conv in float32)
    assert report.emulation == {"emulation": "exact", "float32_nodes": 2}
    result = verify(original, lowered, "npu256")
    assert result["ok"] and result["emulation"]["ok"], result["emulation"]
    assert result["emulation"]["worst_ratio"] <= 4.0
    assert "float32 (not judged): " in render(result) and "within the rule too" in render(result)


def test_unknown_emulation_refused():
    with pytest.raises(ConversionError, match="unknown emulation 'fast'"):
        lower(small_conv(), "npu256", emulation="fast")


def test_cli_emulation(tmp_path):
    from test_npu_e2e import cli

    plain, lowered = tmp_path / "conv.onnx", tmp_path / "conv.npu.onnx"
    onnx.save(small_conv(), str(plain))
    res = cli("lower", plain, "-o", lowered)
    assert res.returncode == 0, res.stderr
    assert "emulation: exact (exact sums, as the reference)" in res.stdout
    saved = onnx.load(str(lowered))
    assert {n.overload for n in saved.graph.node if n.op_type == "VMM"} == {"whole"}
    assert {p.key: p.value for p in saved.metadata_props}[KEY] == "exact"
    res = cli("lower", plain, "-o", lowered, "--emulation", "float32", "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "emulation: float32 (float32 sums, faster" in res.stdout
    assert "emulation float32 judged above; exact (not judged): " in res.stdout
    assert {n.overload for n in onnx.load(str(lowered)).graph.node
            if n.op_type == "VMM"} == {"whole_f32"}
    res = cli("lower", plain, "-o", lowered, "--emulation", "fast")
    assert res.returncode == 2 and "invalid choice: 'fast'" in res.stderr


def test_cli_verify_fixes_sizes_then_fuses_preprocessing(tmp_path):
    """`lower --verify` runs the model as lower changed it: sizes fixed, then raw images."""
    from test_npu_e2e import cli

    plain, lowered = tmp_path / "conv.onnx", tmp_path / "conv.npu.onnx"
    onnx.save(small_conv(), str(plain))
    res = cli("lower", plain, "-o", lowered, "--input-shape", "x:1,3,8,8", "--fuse-preprocess",
              "--mean", "0,0,0", "--std", "255,255,255", "--channel-format", "nhwc", "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "agrees: no farther from the model computed in float64" in res.stdout
    assert "float32 (not judged): " in res.stdout


def test_only_the_emulation_and_verify_run_onnxruntime():
    """No stage-2 module outside emulation/ and verify (verification/verifier.py,
    verification/float64.py) imports onnxruntime or the runner of paddle_npu.compare:
    lowering never runs the emulator."""
    root = pathlib.Path(ops.__file__).parent.parent
    runs = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith("emulation/") or where in ("verification/verifier.py",
                                                         "verification/float64.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and \
                    any(a.name.split(".")[0] == "onnxruntime" for a in node.names):
                runs.append(where)
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("compare") and \
                    {a.name for a in node.names} & {"run_onnx", "run_onnx_on"}:
                runs.append(where)
    assert runs == []


def test_every_primitive_has_an_emulation_and_the_operator_set_imports_none():
    """The NPU program's primitives (ops/) are what the chip runs; how onnxruntime runs them
    is the emulation's (emulation/, one module of bodies per ops/ module): every primitive
    has one, and no module of ops/ imports the emulation or onnx."""
    assert set(all_emulations()) == set(all_primitives())
    folder = pathlib.Path(ops.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any("emulation" in n or n.split(".")[0] == "onnx" for n in names), \
                (path.name, names)
        assert (folder.parent / "emulation" / path.name).exists() or path.name in (
            "__init__.py", "base.py"), path.name
