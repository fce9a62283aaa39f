"""Placement marks (NNIE-style): `_cpu` / `_hp` name suffixes, --cpu-nodes / --hp-nodes /
--cpu-ops / --compile-mode, and NNIE's rules, each with its exact error message."""
import json

import numpy as np
import pytest
from onnx import helper

from npu_helpers import model, three_way, assert_close
from paddle_npu.npu import lower
from paddle_npu.npu.passes.marks import Marks, MarkError, apply_marks
from paddle_npu.npu.pipeline import prepare

W = np.random.default_rng(0).standard_normal((4, 4, 1, 1)).astype(np.float32)


def _convs(*names, tail=None, act_after=None):
    """x -> Conv names[0] -> (Relu) -> Conv names[1] ... -> y."""
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("Conv", [prev, "w"], [f"c{i}"], name=name))
        prev = f"c{i}"
        if act_after == i:
            nodes.append(helper.make_node("Relu", [prev], [f"r{i}"], name=f"relu{i}"))
            prev = f"r{i}"
    for node in tail or ():
        node.input[0] = prev
        nodes.append(node)
        prev = node.output[0]
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return model(nodes, [("x", [1, 4, 4, 4])], [("y", None)], [("w", W)])


def _marks(m, marks=None):
    ir_model = prepare(m)
    return ir_model, apply_marks(ir_model, marks)


def test_cpu_suffix_places_node_and_relu_follows():
    m = _convs("conv0", "conv1_cpu", "conv2", act_after=1)
    _, res = _marks(m)
    assert res.cpu == {"conv1_cpu": "name ends in _cpu",
                       "relu1": "in-place activation after the _cpu node 'conv1_cpu'"}
    lowered, report = lower(m, "npu256")
    dev = {n.name: n.metadata_props["paddle_npu.device"] for n in lowered.graph}
    assert {d for n, d in dev.items() if n.startswith("conv1_cpu/")} == {"cpu"}
    assert dev["relu1"] == "cpu"
    assert {d for n, d in dev.items() if n.startswith("conv2/")} == {"npu"}
    assert [s.device for s in report.segments] == ["npu", "cpu", "npu"]
    assert report.marks["cpu"]["conv1_cpu"] == "name ends in _cpu"
    x = np.random.default_rng(1).standard_normal((1, 4, 4, 4)).astype(np.float32)
    want, got, ref, _ = three_way(m, lowered, {"x": x}, "npu256")
    assert_close(got[0], want[0], "ort")
    assert_close(ref[0], want[0], "reference")


def test_cpu_nodes_glob_and_cpu_ops():
    m = _convs("conv0", "conv1", "conv2")
    _, res = _marks(m, Marks(cpu_nodes=("conv[12]",)))
    assert res.cpu == {"conv1": "--cpu-nodes conv[12]", "conv2": "--cpu-nodes conv[12]"}
    _, res = _marks(m, Marks(cpu_ops=("Identity",)))
    assert res.cpu == {"out": "--cpu-ops Identity"}


def test_hp_needs_compile_mode_2():
    m = _convs("conv0", "conv1_hp")
    with pytest.raises(MarkError) as e:
        _marks(m)
    assert str(e.value) == (
        "node 'conv1_hp' is marked _hp (name ends in _hp) but compile_mode is 0: _hp (16-bit) "
        "marks are only allowed with compile_mode = 2 (user-defined precision); compile_mode 0 "
        "runs every layer at the target's precision and 1 every layer at 16 bits")
    with pytest.raises(MarkError, match="but compile_mode is 1: _hp"):
        _marks(_convs("conv0", "conv1"), Marks(hp_nodes=("conv1",), compile_mode=1))
    _, res = _marks(m, Marks(compile_mode=2))
    assert res.hp == ["conv1_hp"]
    lowered, report = lower(m, "npu256", marks=Marks(compile_mode=2))
    hp = {n.name for n in lowered.graph if n.metadata_props.get("paddle_npu.precision") == "16"}
    assert hp and all(n.startswith("conv1_hp/") for n in hp)
    assert report.marks["hp"] == ["conv1_hp"] and report.as_dict()["marks"]["compile_mode"] == 2


def test_compile_mode_values():
    with pytest.raises(MarkError) as e:
        Marks(compile_mode=3)
    assert str(e.value) == "compile_mode must be 0, 1 or 2, not 3"
    ir_model, res = _marks(_convs("conv0", "conv1"), Marks(compile_mode=1))
    assert res.hp == [] and all(n.metadata_props["paddle_npu.precision"] == "16"
                                for n in ir_model.graph)


def test_cpu_not_on_data_layer():
    with pytest.raises(MarkError) as e:
        _marks(_convs("conv0"), Marks(cpu_nodes=("x",)))
    assert str(e.value) == ("'x' is the model's input (the data layer): it cannot be marked "
                            "_cpu (--cpu-nodes x)")


def test_cpu_not_right_after_data_layer():
    with pytest.raises(MarkError) as e:
        _marks(_convs("conv0_cpu", "conv1"))
    assert str(e.value) == ("node 'conv0_cpu' is marked _cpu (name ends in _cpu) but reads the "
                            "model input 'x' directly: a _cpu node may not follow the data layer")


def test_cpu_not_after_proposal_or_custom():
    nodes = [helper.make_node("NonMaxSuppression", ["b", "s"], ["sel"], name="nms"),
             helper.make_node("Cast", ["sel"], ["y"], to=1, name="cast_cpu")]
    m = model(nodes, [("b", [1, 5, 4]), ("s", [1, 1, 5])], [("y", None)])
    with pytest.raises(MarkError) as e:
        _marks(m)
    assert str(e.value) == ("node 'cast_cpu' is marked _cpu (name ends in _cpu) but follows the "
                            "proposal node 'nms' (NonMaxSuppression): a _cpu node may not "
                            "follow a proposal layer")
    nodes = [helper.make_node("MyOp", ["x"], ["h"], name="custom", domain="my.ops"),
             helper.make_node("Relu", ["h"], ["r"], name="pre"),
             helper.make_node("Add", ["h", "r"], ["y"], name="add_cpu")]
    m = model(nodes, [("x", [1, 4])], [("y", None)])
    m.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(MarkError) as e:
        _marks(m)
    assert str(e.value) == ("node 'add_cpu' is marked _cpu (name ends in _cpu) but follows the "
                            "custom node 'custom' (my.ops::MyOp): a _cpu node may not follow a "
                            "custom layer")


def test_cpu_not_on_inplace_activation():
    m = _convs("conv0", "conv1", act_after=0)
    with pytest.raises(MarkError) as e:
        _marks(m, Marks(cpu_nodes=("relu0",)))
    assert str(e.value) == (
        "node 'relu0' is marked _cpu (--cpu-nodes relu0) but is an in-place activation (Relu "
        "is the only reader of 'conv0''s output): _cpu cannot mark an in-place activation; "
        "mark 'conv0' instead and the activation follows it to the CPU")


def test_cpu_not_followed_by_upsample():
    up = helper.make_node("Resize", ["", "", "", ""], ["u"], mode="nearest", name="up")
    m = _convs("conv0", "conv1_cpu", tail=[up])
    m.graph.node[2].input[:] = ["c1", "", "scales"]
    m.graph.initializer.append(helper.make_tensor("scales", 1, [4], [1, 1, 2, 2]))
    with pytest.raises(MarkError) as e:
        _marks(m)
    assert str(e.value) == ("node 'conv1_cpu' runs on the CPU (name ends in _cpu) and is "
                            "followed by the upsample 'up' (Resize): a _cpu node may not be "
                            "followed by an upsample")


def test_marks_file(tmp_path):
    path = tmp_path / "marks.json"
    path.write_text(json.dumps({"cpu_nodes": ["conv1"], "compile_mode": 2,
                                "hp_nodes": "conv2"}))
    marks = Marks.from_file(str(path))
    assert marks == Marks(("conv1",), ("conv2",), (), 2)
    _, res = _marks(_convs("conv0", "conv1", "conv2"), marks)
    assert res.cpu == {"conv1": "--cpu-nodes conv1"} and res.hp == ["conv2"]
    path.write_text(json.dumps({"cpu_node": ["conv1"]}))
    with pytest.raises(MarkError, match=r"unknown mark fields \['cpu_node'\]"):
        Marks.from_file(str(path))
