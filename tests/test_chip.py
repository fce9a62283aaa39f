"""The chip: arrays mapped to layers (groups, copies, refusal), the row-by-row schedule's
simulation against schedules worked out by hand, and the estimate of lowered models."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from paddle_npu.errors import ConversionError
from paddle_npu.npu.chip.mapping import map_layers, replicate
from paddle_npu.npu.chip.schedule import Dep, Task, simulate
from paddle_npu.npu.chip.target import target_from_dict
from paddle_npu.npu.pipeline import lower
from paddle_npu.npu.verification.verifier import verify


# --- the simulation, on schedules worked out by hand ---------------------------------------

def test_a_chain_pipelines_row_by_row():
    # A: 4 rows of 10 ns on unit a; B reads A's rows, 4 rows of 20 ns on unit b.
    # B's row j starts when A's row j and B's row j-1 are done: 10-30, 30-50, 50-70, 70-90.
    tasks = [Task("A", "a", 40.0, rows=4, out_bytes=400),
             Task("B", "b", 80.0, rows=4, deps=[Dep(0, "rows")], out_bytes=400)]
    run = simulate(tasks, {})
    assert run.latency_ns == 90.0
    assert run.finish_ns == [40.0, 90.0]
    assert run.busy_ns == {"a": 40.0, "b": 80.0}
    # memory: A's row is freed once B is past it; B's output (nobody reads it) stays:
    # at 20: A 200 made, 100 freed; B 100 -> 200; at 40: A 400 - 300 + B 300 = 400
    assert run.peak_bytes == 400


def test_a_window_waits_for_the_rows_under_it():
    # C: a 3-row window, stride 1, padding 1, over A's 4 rows: its row 0 needs A's rows
    # 0..1, row j rows up to j+1, its last row A's last.
    tasks = [Task("A", "a", 40.0, rows=4),
             Task("C", "c", 4.0, rows=4, deps=[Dep(0, "window", (4, 4, 3, 1, 1))])]
    run = simulate(tasks, {})
    # C's rows: after A rows 1, 2, 3, 3 -> end at 21, 31, 41, 42
    assert run.latency_ns == 42.0


def test_a_residual_block_joins_both_branches():
    # A -> B (rows) and A + B -> Add (rows, vector unit): the Add's row j waits for B's.
    tasks = [Task("A", "a", 40.0, rows=4),
             Task("B", "b", 80.0, rows=4, deps=[Dep(0, "rows")]),
             Task("Add", "vector", 8.0, rows=4, deps=[Dep(0, "rows"), Dep(1, "rows")])]
    run = simulate(tasks, {})
    # B's rows end at 30, 50, 70, 90; the Add's 2 ns after each
    assert run.latency_ns == 92.0
    assert run.busy_ns["vector"] == 8.0


def test_a_shared_unit_serialises_and_a_whole_input_waits():
    # two tasks on one unit run one after the other, the later one in the program first
    # (B 0-20, A 20-50); a task needing its input whole (a global pool) starts after the
    # producer's last row
    tasks = [Task("A", "u", 30.0, rows=3), Task("B", "u", 20.0, rows=1),
             Task("G", "v", 5.0, rows=1, deps=[Dep(0, "whole")])]
    run = simulate(tasks, {})
    assert run.busy_ns == {"u": 50.0, "v": 5.0}
    assert run.finish_ns == [50.0, 20.0, 55.0]


def test_copies_serve_rows_in_turn():
    # 4 rows of 10 ns on a unit with two copies: two rows at a time
    tasks = [Task("A", "layer:A", 40.0, rows=4)]
    assert simulate(tasks, {"layer:A": 2}).latency_ns == 20.0
    assert simulate(tasks, {}).latency_ns == 40.0


def test_groups_wait_for_the_arrays_to_be_reprogrammed():
    # two layers in two groups: B's arrays are programmed (100 ns) after A read its last
    # vector, and only then does B read
    tasks = [Task("A", "layer:A", 40.0, rows=4, layer="A"),
             Task("program group 1", "program", 100.0, deps=[Dep(0, "after")]),
             Task("B", "layer:B", 40.0, rows=4, layer="B", group=1,
                  deps=[Dep(0, "rows"), Dep(1, "after")])]
    run = simulate(tasks, {})
    assert run.finish_ns == [40.0, 140.0, 180.0]


def test_the_data_flow_bound_is_never_above_the_schedule():
    # a shared unit adds waiting the data flow alone does not have
    tasks = [Task("A", "a", 40.0, rows=4), Task("B", "a", 40.0, rows=4),
             Task("C", "c", 8.0, rows=4, deps=[Dep(0, "rows"), Dep(1, "rows")])]
    shared = simulate(tasks, {})
    alone = simulate(tasks, {}, own_units=True)
    assert alone.latency_ns == 42.0 and shared.latency_ns == 82.0


# --- mapping -------------------------------------------------------------------------------

def test_a_model_larger_than_the_chip_runs_in_groups():
    m = map_layers([("a", 3), ("b", 3), ("c", 5)], 4)
    # b does not fit beside a: a group of its own; c, larger than the chip, is split
    assert m.groups == [[("a", 3)], [("b", 3), ("c", 1)], [("c", 4)]]
    assert m.needed == 11 and m.used == 4
    assert m.group_of("c") == [1, 2]
    one = map_layers([("a", 3), ("b", 1)], 4)
    assert one.groups == [[("a", 3), ("b", 1)]]


def test_refused_naming_the_smallest_chip():
    with pytest.raises(ConversionError, match="the smallest chip that holds it: 11 arrays"):
        map_layers([("a", 3), ("b", 3), ("c", 5)], 4, fit="refuse", name="m.onnx")
    map_layers([("a", 3)], 4, fit="refuse")     # a model that fits is not refused


def test_spare_arrays_copy_the_slowest_layers():
    many = {"a": 64, "b": 64}
    m = map_layers([("a", 2), ("b", 1)], 6)
    # a (100 ns) gains a copy (3 spare -> 1); then a and b tie at 50 ns, but only b's one
    # array fits
    assert replicate(m, {"a": 100.0, "b": 50.0}, many) == {"a": 2, "b": 2}
    assert m.used == 6
    # 6 spare: a (100) -> 2, b (50, by name at the tie) -> 2, a (50) -> 3, then a (33)
    # does not fit in the 1 left: b -> 3
    m = map_layers([("a", 2), ("b", 1)], 9)
    assert replicate(m, {"a": 100.0, "b": 50.0}, many) == {"a": 3, "b": 3}
    # a copy serves whole row vectors: a layer of one vector gets none
    m = map_layers([("a", 2), ("b", 1)], 9)
    assert replicate(m, {"a": 100.0, "b": 50.0}, {"a": 1, "b": 2}) == {"a": 1, "b": 2}
    # no copies on a chip of any size, nor in groups
    m = map_layers([("a", 2), ("b", 1)], 0)
    assert replicate(m, {"a": 100.0, "b": 50.0}, many) == {"a": 1, "b": 1}
    m = map_layers([("a", 2), ("b", 1)], 2)
    assert replicate(m, {"a": 100.0, "b": 50.0}, many) == {"a": 1, "b": 1}


def test_target_memory_and_count_are_read_and_checked():
    t = target_from_dict({"base": "hermes64", "array": {"count": 32},
                          "memory": {"activation_bytes": 4096}})
    assert (t.array_count, t.activation_bytes, t.rows, t.cost.array_vmm_ns) == \
        (32, 4096, 256, 133.0)
    with pytest.raises(ConversionError, match="activation_bytes must be a positive integer"):
        target_from_dict({"memory": {"activation_bytes": -1}})
    with pytest.raises(ConversionError, match=r"unknown keys \['size'\] in \[memory\]"):
        target_from_dict({"memory": {"size": 1}})


# --- lowered models ------------------------------------------------------------------------

def _two_convs(size=16):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, size, size])],
        [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _target(tmp_path, cost=None, npu=None, **array):
    path = tmp_path / "chip.json"
    path.write_text(json.dumps({"name": "chip", "array": {"rows": 16, "cols": 16, **array},
                                "cost": cost or {}, "npu": npu or {}}))
    return str(path)


def test_a_lowered_model_in_two_groups_computes_the_same(tmp_path):
    model = _two_convs()
    # conv1: 27 rows x 16 columns (2 arrays of 16 x 16); conv2: 144 x 8 (9 arrays)
    lowered, report = lower(model, _target(tmp_path, count=9))
    chip = report.as_dict()["chip"]
    assert chip["arrays_needed"] == 11 and chip["groups"] == 1
    assert chip["group_layers"] == [["conv1"], ["conv2"]]
    # conv2 reads its 256 vectors (100 ns each) after the reprogramming (16 rows x 1000 ns),
    # itself after conv1's last read
    program = 16 * 1000.0
    assert chip["latency_ns"] >= 256 * 100 * 2 + program
    assert chip["busy_ns"]["program"] == program
    assert verify(model, lowered, target=_target(tmp_path, count=9))["ok"]
    one, report1 = lower(model, _target(tmp_path, count=11))
    c1 = report1.as_dict()["chip"]
    assert c1["groups"] == 0 and c1["latency_ns"] < chip["latency_ns"] - program
    assert c1["latency_ns"] >= c1["bound_ns"]


def test_a_per_channel_integer_layer_reads_its_arrays_at_once():
    """The per-channel plan's integer layer is one stack of its tiles (a channel each), all
    read at the same time on their own arrays: each layer takes as long as under the packed
    plan, the same row vectors read once on every array (not once per tile in turn, which
    made conv2's 16 tiles 16 times as slow)."""
    from paddle_npu.npu.quant.calibrate import calibrate
    from paddle_npu.npu.quant.qlower import quantized_lower

    model = _two_convs().SerializeToString()
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    table = calibrate(model, {"x": x})
    busy = {}
    for plan in ("packed", "per-channel"):
        lowered, report, _ = quantized_lower(model, table, 8, "npu256", plan=plan)
        busy[plan] = report.as_dict()["chip"]["busy_ns"]
    assert [n.op_type for n in lowered.graph].count("QVMM") == 2     # a stack per layer
    assert busy["per-channel"] == busy["packed"]
    assert busy["packed"]["layer:conv2"] == 16 * 16 * 100     # 256 row vectors of 100 ns


def test_twice_the_arrays_give_copies_and_throughput(tmp_path):
    model = _two_convs()
    fast = {"transfer_latency_ns": 100}      # (else the hand-overs set the pace)
    _, fits = lower(model, _target(tmp_path, count=11, cost=fast))
    _, spare = lower(model, _target(tmp_path, count=22, cost=fast))
    a, b = fits.as_dict()["chip"], spare.as_dict()["chip"]
    assert a["replication"] == {}
    assert b["replication"] and b["arrays_used"] <= 22
    assert b["throughput_per_s"] >= 1.5 * a["throughput_per_s"]
    assert b["without_replication"]["throughput_per_s"] == pytest.approx(a["throughput_per_s"])


def test_cli_refuses_a_model_that_does_not_fit(tmp_path, capsys):
    from paddle_npu.cli import main
    src = tmp_path / "m.onnx"
    onnx.save(_two_convs(), str(src))
    out = tmp_path / "m_npu.onnx"
    rc = main(["lower", str(src), "-o", str(out), "--target", _target(tmp_path, count=4),
               "--fit", "refuse"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "needs 11 arrays, the target has 4: the smallest chip that holds it: 11 arrays" \
        in err and err.count("\n") == 1


def test_over_full_memory_spills_or_is_refused(tmp_path):
    model = _two_convs()
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"name": "small", "array": {"rows": 16, "cols": 16},
                                "memory": {"activation_bytes": 1024}}))
    _, report = lower(model, str(path))
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"name": "big", "array": {"rows": 16, "cols": 16}}))
    _, free = lower(model, str(big))
    chip, ref = report.as_dict()["chip"], free.as_dict()["chip"]
    spilled = chip["memory"]["spilled_bytes"]
    assert spilled == chip["memory"]["peak_bytes"] - 1024 > 0
    link = report.target["cost"]["link_bytes_per_ns"]
    assert chip["latency_ns"] == pytest.approx(ref["latency_ns"] + 2 * spilled / link)
    with pytest.raises(ConversionError, match="activations need .* bytes at once"):
        lower(model, str(path), fit="refuse")


def _max_unpooling():
    """conv -> MaxPool with indices -> conv -> max-unpooling (ScatterElements at the
    indices into a zero plane, as an ENet decoder does) -> conv."""
    rng = np.random.default_rng(1)
    w = {n: rng.standard_normal(s).astype(np.float32)
         for n, s in (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (4, 8, 3, 3)))}
    consts = {"flat": np.array([1, -1], np.int64), "plane": np.array([1, 2048], np.int64),
              "back": np.array([1, 8, 16, 16], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p", "idx"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c2", "flat"], ["c2f"], name="flat_values"),
        helper.make_node("Reshape", ["idx", "flat"], ["idxf"], name="flat_indices"),
        helper.make_node("ConstantOfShape", ["plane"], ["zeros"], name="zeros",
                         value=onnx.numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("ScatterElements", ["zeros", "idxf", "c2f"], ["u"], name="unpool",
                         axis=1),
        helper.make_node("Reshape", ["u", "back"], ["up"], name="unflatten"),
        helper.make_node("Conv", ["up", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "unpool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        [onnx.numpy_helper.from_array(a, n) for n, a in {**w, **consts}.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_scatter_gather_unit_takes_max_unpooling(tmp_path):
    model = _max_unpooling()
    _, plain = lower(model)
    assert [s.device for s in plain.segments] == ["npu", "cpu", "npu"]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps({"name": "sg", "npu": {"scatter_gather": True}}))
    lowered, report = lower(model, str(path))
    assert [s.device for s in report.segments] == ["npu"]
    chip = report.as_dict()["chip"]
    assert chip["busy_ns"]["scatter"] > 0 and "cpu" not in chip["busy_ns"]
    assert chip["latency_ns"] < plain.as_dict()["chip"]["latency_ns"]
    assert verify(model, lowered, target=str(path))["ok"]
    with pytest.raises(ConversionError, match="scatter_gather must be true or false"):
        target_from_dict({"npu": {"scatter_gather": "yes"}})


def test_a_layer_on_an_earlier_layers_arrays_after_a_later_group(tmp_path):
    """x @ A @ B @ A on a chip of one array: A and B in two groups; the last product reads
    A's arrays after B's group ran, so it runs with that group (no deadlock)."""
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("MatMul", ["x", "A"], ["h1"], name="first"),
             helper.make_node("MatMul", ["h1", "B"], ["h2"], name="second"),
             helper.make_node("MatMul", ["h2", "A"], ["y"], name="third")]
    graph = helper.make_graph(
        nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [onnx.numpy_helper.from_array(a, "A"), onnx.numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lowered, report = lower(model, _target(tmp_path, count=1))
    chip = report.as_dict()["chip"]
    assert chip["group_layers"] == [["first"], ["second"]]
    assert "on the arrays of first" in next(l.detail for l in report.layers if l.name == "third")
    # first's 4 vectors, reprogramming, second's, (no reprogramming back: the estimate
    # counts a group's programming once), third's
    assert chip["latency_ns"] >= 3 * 4 * 100 + 16 * 1000
    assert verify(model, lowered, target=_target(tmp_path, count=1))["ok"]


def _depthwise_block(size=16, channels=32):
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32)
    dw = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((8, channels, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "dw"], ["c2"], name="dw", pads=[1, 1, 1, 1],
                              group=channels),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w2"], ["y"], name="pw")]
    graph = helper.make_graph(
        nodes, "depthwise_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, size, size])],
        [onnx.numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (dw, "dw"), (w2, "w2"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_balance_puts_a_pacing_depthwise_layer_on_spare_arrays(tmp_path):
    """A vector unit of 1 element per ns sets the pace (the depthwise layer's 9 products per
    output element, the ReLUs), and copies of the array layers cannot help; with arrays to
    spare, balance lowers the depthwise layer onto block-diagonal array tiles, with copies,
    1.5x faster at least."""
    model = _depthwise_block()
    slow = {"transfer_latency_ns": 100, "vector_elements_per_ns": 1}
    big = {"rows": 64, "cols": 64}
    _, kept = lower(model, _target(tmp_path, count=2, cost=slow, **big))
    chip = kept.as_dict()["chip"]
    # conv1 27 x 32 and pw 32 x 8 on an array each; dw, 7 channels' 9 taps per array: 5
    assert chip["paced_by"] == "vector" and chip["arrays_needed"] == 2
    target = _target(tmp_path, count=16, cost=slow, **big)    # twice 2 + 5, and 2 more
    _, plain = lower(model, target)
    lowered, balanced = lower(model, target, balance=True)
    moved = balanced.as_dict()["chip"]["depthwise_on_arrays"]
    assert moved["layers"] == ["dw"] and moved["arrays"] == 5
    assert moved["before"]["throughput_per_s"] == plain.as_dict()["chip"]["throughput_per_s"]
    assert not any(n.op_type == "DepthwiseConv" for n in lowered.graph)
    gain = balanced.chip.throughput_per_s / plain.chip.without_copies["throughput_per_s"]
    assert gain >= 1.5
    assert verify(model, lowered, target=target)["ok"]
    # a chip without arrays to spare keeps the lowering as it is
    _, full = lower(model, _target(tmp_path, count=2, cost=slow, **big), balance=True)
    assert full.as_dict()["chip"]["depthwise_on_arrays"] is None
    # what the moved layers take is counted under the plan: per channel, 32 arrays, not 5
    for plan, arrays in (("packed", 5), ("per-channel", 32)):
        roomy = _target(tmp_path, count=200, cost=slow, **big)
        _, kept = lower(model, roomy, plan=plan)
        _, moved = lower(model, roomy, plan=plan, balance=True)
        record = moved.as_dict()["chip"]["depthwise_on_arrays"]
        assert record["arrays"] == arrays == moved.chip.mapping.needed - kept.chip.mapping.needed


def test_a_chip_of_cores_has_a_vector_unit_for_every_so_many_arrays(tmp_path):
    """With one vector unit for the chip, the depthwise block's vector work sets the pace
    and copies of its array layers change nothing. Built of cores of two arrays and a
    vector unit each, the same 16 arrays have 8 vector units: each works on rows of its
    own, the vector work takes an eighth of the time per image, and the copies then give
    1.5x at least. The program is the same."""
    model = _depthwise_block()
    slow = {"transfer_latency_ns": 100, "vector_elements_per_ns": 1}
    big = {"rows": 64, "cols": 64}
    one_lowered, one = lower(model, _target(tmp_path, count=16, cost=slow, **big))
    shared = one.as_dict()["chip"]
    assert shared["vector_units"] == 1 and shared["paced_by"] == "vector"
    assert shared["throughput_per_s"] == shared["without_replication"]["throughput_per_s"]
    cores = _target(tmp_path, count=16, cost=slow, npu={"arrays_per_vector_unit": 2}, **big)
    lowered, report = lower(model, cores)
    chip = report.as_dict()["chip"]
    assert chip["vector_units"] == 8
    assert chip["busy_ns"]["vector"] == shared["busy_ns"]["vector"]
    assert chip["bounds"]["shared_unit"] == shared["bounds"]["shared_unit"] / 8
    assert chip["throughput_per_s"] >= 1.5 * chip["without_replication"]["throughput_per_s"]
    assert [(n.op_type, n.name) for n in lowered.graph] == \
        [(n.op_type, n.name) for n in one_lowered.graph]
    assert verify(model, lowered, target=cores)["ok"]
    # a core count rounds up; a key that is no count is refused
    assert target_from_dict({"array": {"count": 17}, "npu": {"arrays_per_vector_unit": 2}}) \
        .vector_units(17) == 9
    with pytest.raises(ConversionError, match="arrays_per_vector_unit"):
        target_from_dict({"npu": {"arrays_per_vector_unit": -1}})
