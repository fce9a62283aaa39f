"""The layout pass (npu/passes/channels_last.py): a matrix layer's rows stay channels-last between
NPU layers, with a move to NCHW only where something needs NCHW. Every model here is run by
onnxruntime before lowering and against onnxruntime and the NumPy reference after."""
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from npu_helpers import assert_close, model, on_arrays, serialized, three_way
from onnx import helper

from paddle_npu.compare import run_onnx
from paddle_npu.npu import DOMAIN, lower
from paddle_npu.npu import graph as g
from paddle_npu.npu.passes.channels_last import ChannelsLast
from paddle_npu.npu.context import LowerContext
from paddle_npu.npu.emulation.functions import emulate
from paddle_npu.npu.pipeline import MIN_IR_VERSION, passes, prepare
from paddle_npu.npu.quant.accuracy import layer_report
from paddle_npu.npu.quant.calibrate import calibrate
from paddle_npu.npu.quant.qlower import quantized_lower
from paddle_npu.npu.chip.target import load_target


def _rng_weights(seed, *shape):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


def _conv(name, x, c_in, c_out, k, seed, stride=1, pad=None, group=1):
    pad = k // 2 if pad is None else pad
    inits = [(f"{name}.w", _rng_weights(seed, c_out, c_in // group, k, k)),
             (f"{name}.b", _rng_weights(seed + 100, c_out))]
    node = helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], name=name,
                            kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                            group=group)
    return [node], inits


def _nodes(steps, inits=()):
    """The nodes and initializers of `steps`: nodes, and _conv's (nodes, initializers)."""
    nodes, inits = [], list(inits)
    for step in steps:
        if isinstance(step, tuple):
            nodes += step[0]
            inits += step[1]
        else:
            nodes.append(step)
    return nodes, inits


def _agrees_in_float32(proto, lowered, x):
    """onnxruntime on the lowered model (float32 bodies) against the model, on x."""
    _, want = run_onnx(serialized(proto), {"x": x})
    _, got = run_onnx(ir.serde.serialize_model(lowered).SerializeToString(), {"x": x})
    assert_close(got[0], want[0], "onnxruntime, float32 bodies")


def _lower(proto, target="npu256"):
    """The lowered ir.Model and the layout pass's result."""
    m = prepare(proto)
    steps = passes(LowerContext(m, load_target(target), "packed"))
    steps(m)
    m.ir_version = max(m.ir_version, MIN_IR_VERSION)
    emulate(m)
    return m, steps.result(ChannelsLast)


def _of(lowered, op_type):
    return [n for n in lowered.graph if n.domain == DOMAIN and n.op_type == op_type]


def _moves(lowered):
    """The DimTransforms that move elements (the others only reshape)."""
    return [n for n in _of(lowered, "DimTransform")
            if list(n.attributes["perm"].value) != sorted(n.attributes["perm"].value)]


def _check(proto, lowered, feeds):
    want, got, ref, _ = three_way(proto, lowered, feeds, "npu256")
    for w, o, r in zip(want, got, ref):
        assert_close(o, w, "onnxruntime")
        assert_close(r, w, "reference")


def _network():
    """Convs with what sits between them in CNNs: activations, per-channel and scalar
    constants, a residual Add, a strided 1x1, a max pool, a channel concat, a global
    pool with a squeeze-excite gate, a flatten; and an activation as a second output."""
    inits = [("scale", _rng_weights(7, 8, 1, 1)), ("shift", np.float32(0.5)),
             ("slope", np.abs(_rng_weights(8, 8, 1, 1))),
             ("lo", np.float32(0)), ("hi", np.float32(6))]
    steps = [
        _conv("a", "x", 3, 8, 3, 1),
        helper.make_node("Relu", ["a"], ["relu"], name="relu"),
        helper.make_node("Mul", ["relu", "scale"], ["m1"], name="per_channel"),
        helper.make_node("Add", ["m1", "shift"], ["s1"], name="scalar"),
        helper.make_node("Relu", ["s1"], ["side"], name="side"),
        _conv("b", "s1", 8, 8, 3, 2, stride=2),
        helper.make_node("Clip", ["b", "lo", "hi"], ["r"], name="clip"),
        _conv("c", "r", 8, 8, 1, 3),
        helper.make_node("Add", ["c", "r"], ["res"], name="residual"),
        helper.make_node("PRelu", ["res", "slope"], ["p"], name="prelu"),
        _conv("d", "p", 8, 8, 1, 4, stride=2),
        _conv("dw", "d", 8, 8, 3, 5, group=8),
        helper.make_node("MaxPool", ["dw"], ["mp"], name="maxpool", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["mp", "d"], ["cat"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"], name="gap"),
        _conv("e", "g", 16, 16, 1, 6),
        helper.make_node("Sigmoid", ["e"], ["gate"], name="gate"),
        helper.make_node("Mul", ["cat", "gate"], ["se"], name="excite"),
        helper.make_node("Flatten", ["se"], ["y"], name="flatten"),
    ]
    nodes, inits = _nodes(steps, inits)
    return model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 16 * 2 * 2]), ("side", [1, 8, 8, 8])],
                 inits)


def test_rows_stay_channels_last_between_layers():
    proto = _network()
    lowered, result = _lower(proto)
    # the five convs on the arrays moved their rows to NCHW (dw runs on the vector unit);
    # now the rows of two values: the flatten's input, and `s1` (read by b's Im2Col as rows,
    # by `side`, a graph output, as NCHW)
    assert result.info == {"moves_before": 5, "moves_after": 2}
    assert len(_moves(lowered)) == 2
    # the rows [N, H*W, C] of a, b and d (Im2Col's) reshaped to images [N, H, W, C]; c's and
    # e's VMMs read the rows as they are, and make such images themselves
    assert len(_of(lowered, "DimTransform")) == 2 + 3
    layouts = sorted(n.attributes["layout"].value if "layout" in n.attributes else "nchw"
                     for n in _of(lowered, "Im2Col"))
    # a reads the model's input; b and d (strided 1x1) read rows; c and e (1x1) need none
    assert layouts == ["nchw", "nhwc", "nhwc"]
    windows = _of(lowered, "Pool") + _of(lowered, "DepthwiseConv")
    assert len(windows) == 3 and all(n.attributes["layout"].value == "nhwc" for n in windows)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_rows_reach_the_tiles_of_a_depthwise_conv():
    proto = _network()
    lowered, result = _lower(proto, on_arrays())
    assert result.info == {"moves_before": 6, "moves_after": 2}      # dw on the arrays too
    layouts = sorted(n.attributes["layout"].value if "layout" in n.attributes else "nchw"
                     for n in _of(lowered, "Im2Col"))
    assert layouts == ["nchw", "nhwc", "nhwc", "nhwc"]               # dw's Im2Col reads rows
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_rows_with_an_open_batch():
    proto = _network()
    for v in list(proto.graph.input) + list(proto.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    lowered, result = _lower(proto)
    assert result.info["moves_after"] == 2
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_channel_crops_and_pixel_means_run_on_rows():
    """A split of channels (Crop) and a mean over the pixels (Reduce) run on the rows' axes,
    and the 1x1 conv after them reads the rows; a reduction over channels keeps NCHW."""
    nodes, inits = _conv("a", "x", 3, 8, 3, 1)
    inits += [("starts", np.array([0], np.int64)), ("ends", np.array([4], np.int64)),
              ("axis1", np.array([1], np.int64))]
    nodes += [
        helper.make_node("Slice", ["a", "starts", "ends", "axis1"], ["half"], name="half"),
        helper.make_node("ReduceMean", ["half"], ["pooled"], name="pixels", axes=[2, 3],
                         keepdims=1),
        helper.make_node("ReduceMax", ["a"], ["peak"], name="peak", axes=[1], keepdims=1),
    ]
    part = _conv("e", "pooled", 4, 5, 1, 2)
    proto = model(nodes + part[0], [("x", [2, 3, 6, 6])],
                  [("e", [2, 5, 1, 1]), ("peak", [2, 1, 6, 6])], inits + part[1])
    lowered, result = _lower(proto)
    assert {"half/crop on rows", "pixels/reduce on rows",
            "e/im2col dropped: its output is the rows"} <= set(result.fired)
    assert result.refused == {"peak/reduce": "Reduce over these axes has no rows form"}
    assert result.info == {"moves_before": 2, "moves_after": 2}   # a's for peak; e's output
    x = np.random.default_rng(6).standard_normal((2, 3, 6, 6)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_what_needs_nchw_gets_it():
    """A reshape (its element order depends on the layout), an operand that is NCHW and a
    constant varying over height alone keep NCHW, with the reason; so does an activation
    making a graph output (the conv's move stays before it). The Relu before the reshape runs
    on rows: the move after it merges with the reshape."""
    nodes, inits = [], []
    for c in "abcd":
        part = _conv(c, "x", 3, 4, 3, ord(c))
        nodes += part[0]
        inits += part[1]
    inits += [("to", np.array([1, 4, 16], np.int64)), ("rows_of_h", _rng_weights(2, 1, 1, 4, 1))]
    nodes += [
        helper.make_node("Relu", ["a"], ["relu"], name="relu"),
        helper.make_node("Reshape", ["relu", "to"], ["flat"], name="flat"),
        helper.make_node("Add", ["b", "z"], ["plus_input"], name="plus_input"),
        helper.make_node("Mul", ["c", "rows_of_h"], ["by_h"], name="by_h"),
        helper.make_node("Sigmoid", ["d"], ["d_out"], name="d_out"),
        helper.make_node("Relu", ["d_out"], ["also_nchw"], name="also_nchw"),
    ]
    proto = model(nodes, [("x", [1, 3, 4, 4]), ("z", [1, 4, 4, 4])],
                  [("flat", [1, 4, 16]), ("plus_input", [1, 4, 4, 4]), ("by_h", [1, 4, 4, 4]),
                   ("d_out", [1, 4, 4, 4]), ("also_nchw", [1, 4, 4, 4])], inits)
    lowered, result = _lower(proto)
    assert result.refused == {
        "flat/dim_transform": "DimTransform reads NCHW (its element order depends on the "
                              "layout)",
        "plus_input": "operand z is NCHW, not a matrix layer's rows",
        "by_h": "constant rows_of_h of shape [1, 1, 4, 1] has no rows form",
        "d_out/lut": "its output is needed in NCHW, and no Im2Col reads it"}
    assert result.fired[0] == "relu on rows"
    assert "flat/dim_transform/merged" in [n.name for n in _of(lowered, "DimTransform")]
    assert result.info == {"moves_before": 4, "moves_after": 4}
    rng = np.random.default_rng(2)
    _check(proto, lowered, {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32),
                            "z": rng.standard_normal((1, 4, 4, 4)).astype(np.float32)})


def test_conv_transpose_reads_the_rows():
    """ConvTranspose multiplies each pixel's channels: the move of its input to rows
    [N, H*W, C] becomes a reshape when the input already is rows, and the conv's move to
    NCHW goes."""
    nodes, inits = _conv("a", "x", 3, 4, 3, 1)
    inits.append(("up.w", _rng_weights(2, 4, 2, 3, 3)))
    nodes += [helper.make_node("Relu", ["a"], ["relu"], name="relu"),
              helper.make_node("ConvTranspose", ["relu", "up.w"], ["y"], name="up",
                               strides=[2, 2], pads=[1, 1, 1, 1])]
    proto = model(nodes, [("x", [1, 3, 5, 5])], [("y", [1, 2, 9, 9])], inits)
    lowered, result = _lower(proto)
    assert "up/to_rows reshapes the rows" in result.fired
    assert result.info == {"moves_before": 1, "moves_after": 0}
    assert _moves(lowered) == []
    x = np.random.default_rng(5).standard_normal((1, 3, 5, 5)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_resizing_runs_on_rows():
    """A neck's upsampling (nearest and bilinear Resize: one AxisResample per axis) runs on
    the rows' height and width axes: the rows go through it into the residual Add, the
    channel concat and the next conv's Im2Col, with no move to NCHW but the output's."""
    nodes, inits = [], []
    for name, size in (("big", 8), ("small", 4)):
        part = _conv(name, f"x_{name}", 3, 4, 3, ord(name[0]))
        nodes += part[0]
        inits += part[1]
    inits += [("twice", np.array([1, 1, 2, 2], np.float32)),
              ("to_12x10", np.array([1, 4, 12, 10], np.int64))]
    nodes += [
        helper.make_node("Resize", ["small", "", "twice"], ["up"], name="up", mode="nearest"),
        helper.make_node("Add", ["big", "up"], ["sum"], name="sum"),
        helper.make_node("Resize", ["sum", "", "", "to_12x10"], ["wide"], name="wide",
                         mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Resize", ["big", "", "", "to_12x10"], ["wide_big"], name="wide_big",
                         mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Concat", ["wide", "wide_big"], ["cat"], name="cat", axis=1),
    ]
    part = _conv("head", "cat", 8, 2, 3, 9)
    proto = model(nodes + part[0], [("x_big", [1, 3, 8, 8]), ("x_small", [1, 3, 4, 4])],
                  [("head", [1, 2, 12, 10])], inits + part[1])
    lowered, result = _lower(proto)
    assert {"up/resample_h on rows", "up/resample_w on rows", "wide/resample_h on rows",
            "wide_big/resample_w on rows", "sum on rows", "cat/join on rows",
            "head/im2col reads rows"} <= set(result.fired)
    assert result.refused == {}
    assert result.info == {"moves_before": 3, "moves_after": 1}          # the output's
    resample = _of(lowered, "AxisResample")
    assert sorted(n.attributes["axis"].value for n in resample) == [1, 1, 1, 2, 2, 2]
    rng = np.random.default_rng(8)
    feeds = {"x_big": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "x_small": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}
    _check(proto, lowered, feeds)


def test_a_big_image_stays_in_rows():
    """Past Im2Col's TABLE_LIMIT (a 3x3 kernel at 176x176) the rows stay rows too: the
    gather's table is held as its terms (see test_npu_ops), not computed at every run."""
    nodes, inits = _conv("a", "x", 1, 2, 3, 1)
    part = _conv("b", "a", 2, 2, 3, 2)
    proto = model(nodes + part[0], [("x", [1, 1, 176, 176])], [("b", [1, 2, 176, 176])],
                  inits + part[1])
    lowered, result = _lower(proto)
    assert result.refused == {}
    assert result.info == {"moves_before": 2, "moves_after": 1}          # the output's
    x = np.random.default_rng(3).standard_normal((1, 1, 176, 176)).astype(np.float32)
    _check(proto, lowered, {"x": x})


def test_integer_layers_keep_rows_too(monkeypatch):
    """int8: the Quantize before each Im2Col runs on rows, the layers stay bit-true between
    onnxruntime and the reference, close to the float model, and compute the very integers
    they compute without the pass."""
    a, b, c = (_conv("a", "x", 3, 8, 3, 1), _conv("b", "ra", 8, 8, 3, 2),
               _conv("c", "res", 8, 4, 1, 3))
    nodes = a[0] + [helper.make_node("Relu", ["a"], ["ra"], name="relu_a")] + b[0] + \
        [helper.make_node("Add", ["b", "ra"], ["res"], name="residual")] + c[0]
    inits = a[1] + b[1] + c[1]
    proto = model(nodes, [("x", ["N", 3, 8, 8])], [("c", ["N", 4, 8, 8])], inits)
    rng = np.random.default_rng(4)
    table = calibrate(proto.SerializeToString(),
                      {"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)})
    lowered, _, _ = quantized_lower(proto.SerializeToString(), table)
    assert len(_moves(lowered)) == 1            # the output's
    assert any(n.attributes["layout"].value == "nhwc" for n in _of(lowered, "Im2Col")
               if "layout" in n.attributes)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want, got, ref, _ = three_way(proto, lowered, {"x": x}, "npu256")
    np.testing.assert_array_equal(got[0], ref[0])            # bit-true
    cosine = float(np.sum(got[0] * want[0]) / np.linalg.norm(got[0]) / np.linalg.norm(want[0]))
    assert cosine > 0.99
    # the layers' outputs ra (ReLU folded) and b are held only as rows, under their names: the
    # per-layer report reads them back as NCHW
    proto_low = ir.serde.serialize_model(lowered)
    held = {n.output[0] for n in proto_low.graph.node if g.proto_rows_size(n) == (8, 8)}
    assert {"ra", "b"} <= held
    report = layer_report(proto, proto_low, {"x": x})
    assert [lay["tensor"] for lay in report["layers"]] == ["ra", "b", "c"]
    assert all(lay["sqnr_db"] > 20 for lay in report["layers"])
    monkeypatch.setattr(ChannelsLast, "run", lambda self, m, result: None)
    plain, _, _ = quantized_lower(proto.SerializeToString(), table)
    assert len(_of(plain, "DimTransform")) == 3
    np.testing.assert_array_equal(run_onnx(serialized(plain), {"x": x})[1][0], got[0])


def _mobile_blocks():
    """A stem conv, then two depthwise + pointwise blocks of 96 channels (on npu64 each
    pointwise layer's 96 rows are two bands, each a Slice of the rows), a ReLU after each."""
    steps = [_conv("stem", "x", 3, 96, 3, 1, stride=2)]
    x = "stem"
    for i in range(2):
        steps += [helper.make_node("Relu", [x], [f"r{i}"], name=f"r{i}"),
                  _conv(f"dw{i}", f"r{i}", 96, 96, 3, 10 + i, group=96),
                  helper.make_node("Relu", [f"dw{i}"], [f"q{i}"], name=f"q{i}"),
                  _conv(f"pw{i}", f"q{i}", 96, 96, 1, 20 + i)]
        x = f"pw{i}"
    nodes, inits = _nodes(steps)
    return model(nodes, [("x", [1, 3, 16, 16])], [(x, [1, 96, 8, 8])], inits)


def test_a_chain_of_depthwise_and_pointwise_layers_is_one_image_in_onnxruntime(tmp_path):
    """The pointwise layers' VMMs read the rows as an image (their float32 bodies 1x1
    Convs); onnxruntime cancels the transposes between them and the depthwise layers' Convs
    (no Reshape stands between them), and runs the chain as the Convs the model had; the
    outputs agree with the model's."""
    proto = _mobile_blocks()
    lowered, _ = lower(proto, "npu64", emulation="float32")
    vmm = {n.name: n.overload for n in lowered.graph if n.op_type == "VMM"}
    pointwise = {k: v for k, v in vmm.items() if k.startswith("pw")}
    assert len(pointwise) == 4 and all("_image" in v for v in pointwise.values())
    assert not any("_image" in v for k, v in vmm.items() if k.startswith("stem"))
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    data = ir.serde.serialize_model(lowered).SerializeToString()
    ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    optimized = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    # the stem's Im2Col (of a picture: a one-hot Conv), the depthwise layers, and 2 bands
    # per pointwise one
    assert optimized.count("Conv") == 1 + 2 + 2 * 2
    assert "Transpose" not in optimized
    _agrees_in_float32(proto, lowered,
                       np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32))


def test_only_layers_next_to_images_read_the_rows_as_images():
    """A 1x1 layer between layers that gather their rows (Im2Col) keeps its MatMul body, as
    does one before a global pool (a Reduce) or after a residual Add of a gathered layer; one
    after a max pool reads its rows as an image. The outputs agree either way."""
    steps = [_conv("a", "x", 3, 16, 3, 1),
             _conv("p1", "a", 16, 16, 1, 2),             # between a and b: MatMul
             _conv("b", "p1", 16, 16, 3, 3),
             helper.make_node("MaxPool", ["b"], ["mp"], name="mp", kernel_shape=[2, 2],
                              strides=[2, 2]),
             _conv("p2", "mp", 16, 16, 1, 4),             # after a pool: an image
             _conv("c", "p2", 16, 16, 3, 5),
             helper.make_node("Add", ["c", "p2"], ["res"], name="res"),
             _conv("p3", "res", 16, 16, 1, 6),            # after c's residual Add: MatMul
             helper.make_node("GlobalAveragePool", ["p3"], ["y"], name="gap")]
    nodes, inits = _nodes(steps)
    proto = model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 16, 1, 1])], inits)
    lowered, _ = lower(proto, "npu256", emulation="float32")
    images = {n.name.split("/")[0] for n in lowered.graph
              if n.op_type == "VMM" and "_image" in n.overload}
    assert images == {"p2"}
    _agrees_in_float32(proto, lowered,
                       np.random.default_rng(8).standard_normal((1, 3, 8, 8)).astype(np.float32))
