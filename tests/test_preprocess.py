"""Fused image preprocessing: the same photographs through the original float model
with the preprocessing done in NumPy, and through the fused model taking the raw uint8 image,
in onnxruntime (standard ops; NPU primitives by their function bodies) and in the NumPy
reference of the primitives. Float mode within 1e-5 relative; int8 (ScaleLut) mode within
half a quantisation step of the normalised input."""
import json
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from conftest import EXAMPLE
from paddle_npu.api import export
from paddle_npu.cli import main
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.errors import ConversionError
from paddle_npu.npu import DOMAIN, Reference, get_primitive, lower
from paddle_npu.npu.emulation.registry import emulation_of_op
from paddle_npu.npu.ops import ArrayModel
from paddle_npu.npu.passes.preprocess_fusion import fuse_preprocess
from paddle_npu.preprocess import PreprocessSpec, affine, describe, lut_tables
from paddle_npu.preprocess_args import spec_from_args

TOL = 1e-5
IMAGENET = {"mean": (123.675, 116.28, 103.53), "std": (58.395, 57.12, 57.375)}


# --- photographs and the NumPy preprocessing they are compared against ----------------------
def photo(seed, h, w):
    """A synthetic RGB photograph [h, w, 3] uint8: sky-to-ground gradient, a lit disc, a
    dark box, texture noise, and one pure black and one pure white pixel (the tables' ends)."""
    rng = np.random.default_rng(seed)
    y, x = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    img = np.stack([70 + 150 * (1 - y), 80 + 120 * x * (1 - y), 210 - 150 * y], axis=-1)
    cy, cx, r = rng.uniform(0.25, 0.75), rng.uniform(0.25, 0.75), rng.uniform(0.1, 0.3)
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    disc = d2 < r * r
    img[disc] = rng.uniform(40, 255, 3) * (1.0 - 0.5 * (d2[disc] / (r * r)))[:, None]
    t, l = rng.integers(0, h // 2), rng.integers(0, w // 2)
    img[t:t + h // 3, l:l + w // 4] = rng.uniform(0, 60, 3)
    img += rng.normal(0, 6, img.shape)
    img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    img[0, 0], img[-1, -1] = 0, 255
    return img


def raw_batch(n, h, w, pixel_format="rgb", channel_format="nchw", seed=0):
    """n photographs as the camera hands them over: [n, h, w, 3] RGB reordered / transposed."""
    imgs = np.stack([photo(seed + i, h, w) for i in range(n)])
    if pixel_format == "bgr":
        imgs = imgs[..., ::-1]
    if channel_format == "nchw":
        imgs = imgs.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(imgs)


def numpy_preprocess(raw, size, channel_format="nchw", pixel_format="rgb",
                     model_pixel_format="rgb", mean=(0.0,), std=None, scale=None):
    """What a user's own preprocessing does, written out: center crop, reorder to the
    model's channels, normalise in float64, NCHW float32."""
    img = raw if channel_format == "nhwc" else raw.transpose(0, 2, 3, 1)      # NHWC
    h, w = size
    top, left = (img.shape[1] - h) // 2, (img.shape[2] - w) // 2
    img = img[:, top:top + h, left:left + w].astype(np.float64)
    if pixel_format != model_pixel_format:
        img = img[..., ::-1]
    mean = np.asarray(mean, dtype=np.float64)
    img = (img - mean) * np.asarray(scale, dtype=np.float64) if scale is not None \
        else (img - mean) / np.asarray(std if std is not None else (1.0,), dtype=np.float64)
    return np.ascontiguousarray(img.transpose(0, 3, 1, 2)).astype(np.float32)


def serialized(m):
    return ir.serde.serialize_model(m).SerializeToString() if isinstance(m, ir.Model) \
        else m.SerializeToString() if isinstance(m, onnx.ModelProto) else m


def run(m, feeds):
    return run_onnx(serialized(m), feeds)[1]


def assert_close(got, want, what, tol=TOL):
    a = agreement(got, want)
    assert np.shape(got) == np.shape(want), f"{what}: {np.shape(got)} != {np.shape(want)}"
    assert a["rel_diff"] <= tol, f"{what}: {a}"


def node_types(m):
    return [(n.domain or "", n.op_type) for n in m.graph]


# --- small hand-made models ---------------------------------------------------------------
def make_model(nodes, inits, out_shape, size=(16, 16), channels=3, opset=13, out_type=None):
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", channels, *size])],
        [helper.make_tensor_value_info("y", out_type or TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def conv_first(opset=13, size=(16, 16)):
    """Conv (group 1) -> Relu -> Conv: the swap folds into the first Conv."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.standard_normal((6, 3, 3, 3)).astype(np.float32),
             "b1": rng.standard_normal(6).astype(np.float32),
             "w2": rng.standard_normal((4, 6, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                              name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], strides=[2, 2], name="conv2")]
    return make_model(nodes, inits, ["N", 4, (size[0] - 3) // 2 + 1, (size[1] - 3) // 2 + 1],
                      size, opset=opset)


def pool_first():
    """AveragePool first: the swap stays a node."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("AveragePool", ["image"], ["p"], kernel_shape=[2, 2],
                              strides=[2, 2], name="pool"),
             helper.make_node("Conv", ["p", "w"], ["y"], name="conv")]
    return make_model(nodes, {"w": rng.standard_normal((5, 3, 3, 3)).astype(np.float32)},
                      ["N", 5, 6, 6])


def depthwise_first():
    """A depthwise Conv (group 3) first: permuting its weights' input axis is no fold."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["image", "w"], ["y"], group=3, pads=[1, 1, 1, 1],
                              name="dw")]
    return make_model(nodes, {"w": rng.standard_normal((3, 1, 3, 3)).astype(np.float32)},
                      ["N", 3, 16, 16])


def two_readers():
    """The image read by a Conv and by a residual Add: no single first op to fold into."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Add", ["c", "image"], ["y"], name="add")]
    return make_model(nodes, {"w": rng.standard_normal((3, 3, 3, 3)).astype(np.float32)},
                      ["N", 3, 16, 16])


def identity_model(channels=3, size=(16, 16)):
    """The model's output is its input: the fused model shows the normalised image itself."""
    return make_model([helper.make_node("Identity", ["image"], ["y"], name="id")], {},
                      ["N", channels, *size], size, channels)


def qdq_model():
    """A QDQ model: it quantises its own input (uint8, zero point 3) before a Conv."""
    rng = np.random.default_rng(5)
    inits = {"s": np.array(0.02, np.float32), "z": np.array(3, np.uint8),
             "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["image", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dequant"),
             helper.make_node("Conv", ["dq", "w"], ["y"], name="conv")]
    return make_model(nodes, inits, ["N", 4, 14, 14])


def cast_model():
    """The model casts its float input to int32 itself."""
    nodes = [helper.make_node("Cast", ["image"], ["y"], to=TensorProto.INT32, name="cast")]
    return make_model(nodes, {}, ["N", 3, 16, 16], out_type=TensorProto.INT32)


# --- the spec ------------------------------------------------------------------------------
def test_spec_from_strings_and_dicts():
    s = PreprocessSpec.from_dict({"mean": "123.675,116.28,103.53", "std": [58.395, 57.12, 57.375],
                                  "pixel-format": "BGR", "channel_format": "nhwc",
                                  "resize_dims": "256,256", "mode": "int8"})
    assert s.mean == (123.675, 116.28, 103.53) and s.std == (58.395, 57.12, 57.375)
    assert (s.pixel_format, s.channel_format, s.resize_dims, s.mode) == \
        ("bgr", "nhwc", (256, 256), "int8")
    assert PreprocessSpec.from_dict(s.as_dict()) == s
    a, b = affine(PreprocessSpec(mean=(128,), scale=(1 / 128,)), 3)
    np.testing.assert_allclose(a, [1 / 128] * 3)
    np.testing.assert_allclose(b, [-1.0] * 3)


@pytest.mark.parametrize("data, message", [
    ({"std": [1, 2, 3], "scale": [1, 2, 3]}, "std or scale, not both"),
    ({"std": "1,0,1"}, "every std must be positive"),
    ({"scale": [-1]}, "every scale must be positive"),
    ({"mean": "1,x,3"}, "mean must be numbers"),
    ({"mean": [1, float("nan"), 3]}, "must be finite"),
    ({"pixel_format": "yuv"}, "pixel_format must be one of rgb, bgr, gray"),
    ({"channel_format": "chw"}, "channel_format must be one of nchw, nhwc"),
    ({"resize_dims": "256"}, "two positive sizes"),
    ({"resize_dims": "256.5,3"}, "resize_dims must be integers"),
    ({"mode": "int4"}, "mode must be one of float, int8"),
    ({"mean": [1, 2], "std": [1, 2, 3]}, "different numbers of channels"),
    ({"means": [1, 2, 3]}, "unknown preprocess settings ['means']"),
])
def test_spec_errors_say_what_is_wrong(data, message):
    with pytest.raises(ConversionError, match=None) as exc:
        PreprocessSpec.from_dict(data, "my.toml")
    assert message in str(exc.value) and "my.toml" in str(exc.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"mean": (1, 2)}, "mean has 2 values for a model input of 3 channels"),
    ({"pixel_format": "gray"}, "pixel_format gray has 1 channel(s) but input 'image' has 3"),
    ({"resize_dims": (12, 20)}, "resize_dims 12,20 is smaller than the model's input 16x16"),
    ({"input": "nope"}, "the model has no input 'nope'"),
])
def test_fusion_errors_name_the_model_mismatch(kwargs, message):
    with pytest.raises(ConversionError) as exc:
        fuse_preprocess(conv_first(), PreprocessSpec(**kwargs))
    assert message in str(exc.value)


# --- float mode ----------------------------------------------------------------------------
@pytest.mark.parametrize("primitives", [False, True], ids=["onnx", "npu"])
@pytest.mark.parametrize("resize", [None, (21, 19)], ids=["nocrop", "crop"])
@pytest.mark.parametrize("formats", [("rgb", "rgb"), ("bgr", "rgb"), ("rgb", "bgr")],
                         ids=["rgb", "bgr2rgb", "rgb2bgr"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float_fusion_with_weight_fold_matches_numpy(layout, formats, resize, primitives):
    raw_pf, model_pf = formats
    spec = PreprocessSpec(**IMAGENET, pixel_format=raw_pf, model_pixel_format=model_pf,
                          channel_format=layout, resize_dims=resize)
    original = conv_first()
    fused, info = fuse_preprocess(original.SerializeToString(), spec, primitives=primitives)
    onnx.checker.check_model(ir.serde.serialize_model(fused))
    raw = raw_batch(2, *(resize or (16, 16)), raw_pf, layout)
    x = numpy_preprocess(raw, (16, 16), layout, raw_pf, model_pf, **IMAGENET)
    (want,) = run(original, {"image": x})
    (got,) = run(fused, {"image": raw})
    assert_close(got, want, "fused vs numpy + original")
    if primitives:     # and the NumPy reference of the primitives agrees
        (ref,) = Reference(serialized(fused), "npu256").run({"image": raw})
        assert_close(ref, want, "NumPy reference vs numpy + original")

    kinds = node_types(fused)
    assert (("", "Transpose") in kinds) == (layout == "nhwc")
    assert (("", "Slice") in kinds) == (resize is not None)
    assert ((DOMAIN, "Scale") in kinds) == primitives
    assert not {("", "Gather"), (DOMAIN, "SwapChannel")} & set(kinds)   # folded, no node
    steps = {s["op"]: s for s in info["steps"]}
    assert ("folded_into" in steps.get("SwapChannel", {})) == (raw_pf != model_pf)
    assert info["raw"]["shape"] == ["N", 3, *(resize or (16, 16))] if layout == "nchw" else \
        ["N", *(resize or (16, 16)), 3]
    inp = fused.graph.inputs[0]
    assert inp.name == "image" and inp.dtype == ir.DataType.UINT8


@pytest.mark.parametrize("primitives", [False, True], ids=["onnx", "npu"])
@pytest.mark.parametrize("build", [pool_first, depthwise_first, two_readers])
def test_swap_stays_a_node_when_the_first_op_is_no_plain_conv(build, primitives):
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", channel_format="nhwc",
                          resize_dims=(18, 17))
    original = build()
    fused, info = fuse_preprocess(original, spec, primitives=primitives)
    raw = raw_batch(2, 18, 17, "bgr", "nhwc", seed=7)
    (want,) = run(original, {"image": numpy_preprocess(raw, (16, 16), "nhwc", "bgr", "rgb",
                                                       **IMAGENET)})
    (got,) = run(fused, {"image": raw})
    assert_close(got, want, build.__name__)
    swap = (DOMAIN, "SwapChannel") if primitives else ("", "Gather")
    assert node_types(fused).count(swap) == 1
    assert "folded_into" not in [s for s in info["steps"] if s["op"] == "SwapChannel"][0]
    if primitives:
        (ref,) = Reference(serialized(fused), "npu256").run({"image": raw})
        assert_close(ref, want, f"{build.__name__}: NumPy reference")


def test_a_scale_that_does_nothing_is_not_inserted():
    fused, info = fuse_preprocess(conv_first(), PreprocessSpec())      # mean 0, std 1
    assert [t for _, t in node_types(fused)][:2] == ["Cast", "Conv"]
    assert {"op": "Scale", "skipped": "every scale is 1 and every mean 0"} in info["steps"]
    raw = raw_batch(1, 16, 16)
    (want,) = run(conv_first(), {"image": raw.astype(np.float32)})
    assert_close(run(fused, {"image": raw})[0], want, "identity scale")
    # a scale of one third is not nothing; with mean 0 there is nothing to add
    fused, _ = fuse_preprocess(conv_first(), PreprocessSpec(scale=(1 / 3,)))
    assert ("", "Mul") in node_types(fused) and ("", "Add") not in node_types(fused)
    assert_close(run(fused, {"image": raw})[0],
                 run(conv_first(), {"image": (raw / 3.0).astype(np.float32)})[0], "scale 1/3")


@pytest.mark.parametrize("resize", [None, (24, 20)])
def test_a_model_of_any_image_size_takes_the_raw_size_uncropped(resize):
    rng = np.random.default_rng(6)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["y"], name="conv")], "t",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, "H1", "W1"])],
        initializer=[numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3))
                                             .astype(np.float32), "w")])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    original.ir_version = 7
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", channel_format="nhwc",
                          resize_dims=resize)
    fused, info = fuse_preprocess(original, spec)
    assert info["raw"]["shape"] == ["N", *(resize or ("H", "W")), 3]
    assert ("", "Slice") not in node_types(fused)
    raw = raw_batch(1, 24, 20, "bgr", "nhwc")
    x = numpy_preprocess(raw, (24, 20), "nhwc", "bgr", "rgb", **IMAGENET)
    assert_close(run(fused, {"image": raw})[0], run(original, {"image": x})[0], "any size")


def test_old_opsets_get_slice_attributes_and_a_cast_multiply():
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", resize_dims=(20, 20))
    original = conv_first(opset=9)
    raw = raw_batch(2, 20, 20, "bgr")
    x = numpy_preprocess(raw, (16, 16), "nchw", "bgr", "rgb", **IMAGENET)
    (want,) = run(original, {"image": x})
    fused, _ = fuse_preprocess(original, spec)
    assert fused.opset_imports[""] == 9
    crop = [n for n in fused.graph if n.op_type == "Slice"][0]
    assert list(crop.attributes["starts"].value) == [2, 2] and len(crop.inputs) == 1
    assert_close(run(fused, {"image": raw})[0], want, "opset 9")
    fused8, info = fuse_preprocess(original, spec, mode="int8")
    kinds = [t for _, t in node_types(fused8)]
    assert "DequantizeLinear" not in kinds and kinds[4:6] == ["Cast", "Mul"]   # opset < 10
    q = info["quantisation"]["scale"]
    xq = (np.rint(x.astype(np.float64) / q) * q).astype(np.float32)
    assert_close(run(fused8, {"image": raw})[0], run(original, {"image": xq})[0], "opset 9 int8")


def test_cast_pair_that_cancels_is_removed():
    fused, info = fuse_preprocess(cast_model(), PreprocessSpec())
    assert [t for _, t in node_types(fused)] == ["Cast"]              # uint8 -> int32, once
    assert info["removed"] and info["removed"][0]["ops"] == ["Cast"]
    raw = raw_batch(2, 16, 16)
    np.testing.assert_array_equal(run(fused, {"image": raw})[0], raw.astype(np.int32))
    # a model casting to uint8 and going on: no Cast at all
    nodes = [helper.make_node("Cast", ["image"], ["u"], to=TensorProto.UINT8, name="to_u8"),
             helper.make_node("Cast", ["u"], ["y"], to=TensorProto.INT32, name="to_i32")]
    fused, info = fuse_preprocess(make_model(nodes, {}, ["N", 3, 16, 16],
                                             out_type=TensorProto.INT32), PreprocessSpec())
    assert [n.name for n in fused.graph] == ["to_i32"] and info["removed"][0]["ops"] == \
        ["Cast", "Cast"]
    np.testing.assert_array_equal(run(fused, {"image": raw})[0], raw.astype(np.int32))


# --- int8 mode: ScaleLut -------------------------------------------------------------------
def test_lut_tables_are_within_half_a_step():
    for mean, a in (((0, 0, 0), (1 / 255, 1 / 128, 1 / 58)), (IMAGENET["mean"], None)):
        spec = PreprocessSpec(mean=mean, **({"scale": a} if a else {"std": IMAGENET["std"]}))
        sa, sb = affine(spec, 3)
        table, q, zero, dtype = lut_tables(sa, sb)
        values = np.arange(256)[None, :] * sa[:, None] + sb[:, None]
        assert dtype == ("uint8" if not any(mean) else "int8") and zero == 0
        assert table.shape == (3, 256) and table.dtype == np.dtype(dtype)
        assert np.abs(table.astype(np.float64) * q - values).max() <= q / 2 * (1 + 1e-9)
        assert np.abs(table).max() == (255 if dtype == "uint8" else 127)   # the range is used


@pytest.mark.parametrize("primitives", [False, True], ids=["onnx", "npu"])
@pytest.mark.parametrize("norm", ["signed", "unsigned"])
@pytest.mark.parametrize("case", [("nchw", "rgb", None), ("nhwc", "bgr", (20, 18))],
                         ids=["nchw_rgb", "nhwc_bgr_crop"])
def test_lut_output_is_within_half_a_step_of_the_normalised_image(case, norm, primitives):
    layout, raw_pf, resize = case
    stats = IMAGENET if norm == "signed" else {"scale": (1 / 255, 1 / 200, 1 / 230)}
    spec = PreprocessSpec(**stats, pixel_format=raw_pf, channel_format=layout,
                          resize_dims=resize, mode="int8")
    fused, info = fuse_preprocess(identity_model(), spec, primitives=primitives)
    qz = info["quantisation"]
    assert qz["dtype"] == ("int8" if norm == "signed" else "uint8")
    tables = [v.const_value.numpy() for k, v in fused.graph.initializers.items()
              if "scale_lut.tables" in k]
    assert len(tables) == 1 and tables[0].dtype == np.dtype(qz["dtype"])
    lut = (DOMAIN, "ScaleLut") if primitives else ("", "Gather")
    kinds = node_types(fused)
    before_lut = list(fused.graph)[:kinds.index(lut)]         # integers only up to the table
    assert not [n for n in before_lut if n.outputs[0].dtype.is_floating_point()]
    raw = raw_batch(3, *(resize or (16, 16)), raw_pf, layout, seed=11)
    want = numpy_preprocess(raw, (16, 16), layout, raw_pf, "rgb", **stats).astype(np.float64)
    (got,) = run(fused, {"image": raw})
    q = qz["scale"]
    err = np.abs(got.astype(np.float64) - want).max()
    assert err <= q / 2 + 1e-6 * np.abs(want).max(), (err, q)
    assert err > q / 8          # it did quantise: the bound is not met by accident
    if primitives:
        (ref,) = Reference(serialized(fused), "npu256").run({"image": raw})
        np.testing.assert_array_equal(ref, got)       # integer tables: bit for bit


@pytest.mark.parametrize("primitives", [False, True], ids=["onnx", "npu"])
def test_lut_model_output_is_the_model_on_the_quantised_input(primitives):
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", channel_format="nhwc",
                          resize_dims=(19, 18), mode="int8")
    original = conv_first()
    fused, info = fuse_preprocess(original, spec, primitives=primitives)
    assert "folded_into" in [s for s in info["steps"] if s["op"] == "SwapChannel"][0]
    raw = raw_batch(2, 19, 18, "bgr", "nhwc", seed=3)
    x = numpy_preprocess(raw, (16, 16), "nhwc", "bgr", "rgb", **IMAGENET)
    q = info["quantisation"]["scale"]
    xq = (np.rint(x.astype(np.float64) / q) * q).astype(np.float32)   # what the tables hold
    (got,) = run(fused, {"image": raw})
    assert_close(got, run(original, {"image": xq})[0], "model on the quantised input")
    assert agreement(got, run(original, {"image": x})[0])["cosine"] > 0.999


@pytest.mark.parametrize("mode", ["float", "int8"])
def test_the_models_own_quantize_cancels_our_dequantize(mode):
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", mode=mode)
    original = qdq_model()
    fused, info = fuse_preprocess(original, spec)
    kinds = [t for _, t in node_types(fused)]
    assert "QuantizeLinear" not in kinds and kinds.count("DequantizeLinear") == 1   # the model's
    assert not [n for n in fused.graph if n.op_type == "Cast" and
                n.outputs[0].dtype.is_floating_point()]                   # no float before it
    assert info["removed"][0]["ops"] == ["DequantizeLinear", "QuantizeLinear"]
    assert info["quantisation"] == {"scale": pytest.approx(0.02), "zero_point": 3,
                                    "dtype": "uint8", "source": "the model's QuantizeLinear"}
    raw = raw_batch(2, 16, 16, "bgr", seed=5)
    x = numpy_preprocess(raw, (16, 16), "nchw", "bgr", "rgb", **IMAGENET)
    # the quantised input itself: the model's DequantizeLinear output, made a graph output
    probe = onnx.ModelProto()
    probe.CopyFrom(original)
    probe.graph.output.append(helper.make_tensor_value_info("dq", TensorProto.FLOAT, None))
    fused_probe, _ = fuse_preprocess(probe, spec)
    want_y, want_dq = run(probe, {"image": x})
    got_y, got_dq = run(fused_probe, {"image": raw})
    steps = np.rint(np.abs(got_dq - want_dq) / 0.02)
    assert steps.max() <= 1 and (steps == 0).mean() > 0.99   # ties may round the other way
    assert_close(got_y, run(original, {"image": got_dq})[0], "the model after the table")


# --- through the NPU lowering --------------------------------------------------------------
@pytest.mark.parametrize("mode", ["float", "int8"])
@pytest.mark.parametrize("build", [conv_first, pool_first])
def test_lowered_model_three_ways(build, mode):
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", channel_format="nhwc",
                          resize_dims=(20, 20), mode=mode)
    original = build()
    lowered, report = lower(original.SerializeToString(), "npu256", preprocess=spec)
    raw = raw_batch(2, 20, 20, "bgr", "nhwc", seed=9)
    x = numpy_preprocess(raw, (16, 16), "nhwc", "bgr", "rgb", **IMAGENET)
    reference_fused, _ = fuse_preprocess(original, spec)        # standard ops, not lowered
    (want,) = run(reference_fused, {"image": raw})
    (got,) = run(lowered, {"image": raw})
    (ref,) = Reference(serialized(lowered), "npu256").run({"image": raw})
    assert_close(got, want, "onnxruntime, lowered")
    assert_close(ref, want, "NumPy reference, lowered")
    if mode == "float":
        assert_close(got, run(original, {"image": x})[0], "lowered vs numpy + original")
    prims = {n.op_type: n.metadata_props["paddle_npu.device"] for n in lowered.graph
             if n.domain == DOMAIN}
    assert prims.get("Scale" if mode == "float" else "ScaleLut") == "npu"
    assert ("SwapChannel" in prims) == (build is pool_first)
    assert prims["DimTransform"] == "npu"                     # the NHWC -> NCHW Transpose
    d = report.as_dict()["preprocess"]
    assert d["mode"] == mode and d["ops"] == "npu primitives"
    assert "fused preprocessing" in report.render()


# --- the primitives on their own -----------------------------------------------------------
def run_primitive(op_type, inputs, attrs, consts=(), out_dtype=np.float32):
    """onnxruntime on a one-node model calling the primitive's function body."""
    prim = get_primitive(op_type)
    emulated = emulation_of_op(op_type)
    names = [f"i{k}" for k in range(len(inputs))]
    shapes = [list(x.shape) for x in inputs]
    node = helper.make_node(op_type, names, ["y"], domain=DOMAIN, **attrs)
    node.overload = emulated.overload(attrs, shapes)
    feeds = {n: x for k, (n, x) in enumerate(zip(names, inputs)) if k not in consts}
    inits = [numpy_helper.from_array(x, n) for k, (n, x) in enumerate(zip(names, inputs))
             if k in consts]
    elem = lambda a: helper.np_dtype_to_tensor_dtype(a.dtype)  # noqa: E731
    graph = helper.make_graph(
        [node], "p", [helper.make_tensor_value_info(n, elem(x), x.shape) for n, x in feeds.items()],
        [helper.make_tensor_value_info("y", elem(np.zeros(0, out_dtype)), None)],
        initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15),
                                                helper.make_opsetid(DOMAIN, 1)],
                          functions=[emulated.function_proto(15, attrs, shapes)])
    m.ir_version = 10
    return run_onnx(m.SerializeToString(), feeds)[1][0]


SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(n=st.integers(1, 2), c=st.integers(1, 4), h=st.integers(1, 5), seed=st.integers(0, 99))
def test_scale_body_and_reference_are_the_multiply_add(n, c, h, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 255, (n, c, h, 3)).astype(np.float32)
    s, b = rng.uniform(0.001, 0.1, c).astype(np.float32), rng.uniform(-3, 3, c).astype(np.float32)
    want = x * s[:, None, None] + b[:, None, None]
    ref = get_primitive("Scale").reference(ArrayModel(4, 4), [x, s, b], {})[0]
    assert ref.dtype == np.float32
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run_primitive("Scale", [x, s, b], {}, consts=(1, 2)), ref,
                               rtol=1e-6, atol=1e-6)


@SETTINGS
@given(c=st.integers(1, 4), signed=st.booleans(), seed=st.integers(0, 99))
def test_scale_lut_body_and_reference_look_up_each_channel(c, signed, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (2, c, 3, 4)).astype(np.uint8)
    table = rng.integers(-128, 128, (c, 256)).astype(np.int8) if signed else \
        rng.integers(0, 256, (c, 256)).astype(np.uint8)
    want = np.empty_like(x, dtype=table.dtype)
    for k in range(c):
        want[:, k] = table[k][x[:, k]]
    ref = get_primitive("ScaleLut").reference(ArrayModel(4, 4), [x, table], {})[0]
    np.testing.assert_array_equal(ref, want)
    got = run_primitive("ScaleLut", [x, table], {}, consts=(1,), out_dtype=table.dtype)
    assert got.dtype == table.dtype
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(order=st.permutations([0, 1, 2]), seed=st.integers(0, 99))
def test_swap_channel_body_and_reference_reorder(order, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, 4, 5)).astype(np.float32)
    array = ArrayModel(4, 4)
    ref = get_primitive("SwapChannel").reference(array, [x], {"order": list(order)})[0]
    np.testing.assert_array_equal(ref, x[:, list(order)])
    np.testing.assert_array_equal(run_primitive("SwapChannel", [x], {"order": list(order)}),
                                  ref)
    assert array.moved_elements == x.size
    assert get_primitive("SwapChannel").infer([["N", 3, 4, 5]], {"order": [2, 1, 0]}) == \
        [["N", 3, 4, 5]]


# --- the example and the zoo ---------------------------------------------------------------
def digits_raw(crop_pad=0):
    """The example's test digits as a camera would hand them over: uint8 0..16 (the digits'
    own scale), optionally framed by a border of `crop_pad` pixels of random clutter."""
    ref = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    digits = np.rint(ref["in_x"] * 16).astype(np.uint8)
    assert np.array_equal(digits / 16.0, ref["in_x"].astype(np.float64))
    if crop_pad:
        rng = np.random.default_rng(0)
        n = len(digits)
        big = rng.integers(0, 17, (n, 1, 8 + 2 * crop_pad, 8 + 2 * crop_pad)).astype(np.uint8)
        big[:, :, crop_pad:crop_pad + 8, crop_pad:crop_pad + 8] = digits
        digits = big
    return digits, ref


@pytest.mark.parametrize("mode", ["float", "int8"])
def test_example_digits_take_raw_images(mode):
    onnx_bytes = export(os.path.join(EXAMPLE, "legacy", "model.pdmodel"))
    raw, ref = digits_raw(crop_pad=2)
    spec = PreprocessSpec(scale=(1 / 16,), resize_dims=(12, 12), mode=mode)
    fused, info = fuse_preprocess(onnx_bytes, spec)
    assert info["model"]["pixel_format"] == "gray" and info["raw"]["shape"][1:] == [1, 12, 12]
    (got,) = run(fused, {"x": raw})
    (want,) = run(onnx_bytes, {"x": ref["in_x"]})
    assert_close(got, want, "fused digits vs the converted model")
    assert_close(got, ref["out_0"], "fused digits vs Paddle's outputs", tol=1e-4)
    if mode == "int8":       # 1/16 is exactly the quantisation step: the table is the identity
        assert info["quantisation"]["scale"] == 1 / 16
        assert [s for s in info["steps"] if s["op"] == "ScaleLut"][0].get("skipped")


ZOO_CASES = [  # model, format, spec, lower too
    ("mobilenet_v1", "pir", dict(IMAGENET, pixel_format="bgr", channel_format="nhwc",
                                 resize_dims=(72, 70)), True),
    ("mobilenet_v1", "pir", dict(IMAGENET, channel_format="nchw", resize_dims=(80, 64),
                                 mode="int8"), True),
    ("resnet18", "legacy", dict(mean=(127.5,), scale=(1 / 127.5,), pixel_format="bgr"), False),
    ("resnet18", "legacy", dict(IMAGENET, pixel_format="rgb", model_pixel_format="bgr",
                                channel_format="nhwc", resize_dims=(66, 66), mode="int8"),
     False),
]


@pytest.mark.parametrize("name, fmt, kwargs, lowered", ZOO_CASES, ids=[
    f"{c[0]}-{c[2].get('mode', 'float')}-{c[2].get('channel_format', 'nchw')}" for c in ZOO_CASES])
def test_zoo_models_take_raw_images(zoo_onnx, name, fmt, kwargs, lowered):
    onnx_bytes, _ = zoo_onnx(name, fmt)
    spec = PreprocessSpec(**kwargs)
    fused, info = fuse_preprocess(onnx_bytes, spec)
    layout = spec.channel_format
    raw = raw_batch(2, *(spec.resize_dims or (64, 64)), spec.pixel_format or "rgb", layout,
                    seed=21)
    model_pf = spec.model_pixel_format or "rgb"
    stats = {k: getattr(spec, k) for k in ("mean", "std", "scale") if getattr(spec, k)}
    x = numpy_preprocess(raw, (64, 64), layout, spec.pixel_format or model_pf, model_pf,
                         **stats)
    (want,) = run(onnx_bytes, {"x": x})
    (got,) = run(fused, {"x": raw})
    swap = [s for s in info["steps"] if s["op"] == "SwapChannel"]
    assert not swap or "folded_into" in swap[0]     # these models begin with a plain Conv
    if spec.mode == "float":
        assert_close(got, want, f"{name}: fused vs numpy + original")
    else:
        q = info["quantisation"]["scale"]
        xq = (np.rint(x.astype(np.float64) / q) * q).astype(np.float32)
        assert_close(got, run(onnx_bytes, {"x": xq})[0], f"{name}: on the quantised input")
        # the first layer's input: within half a quantisation step of the float normalisation
        dq = [n for n in fused.graph if n.name == "preprocess/dequantize"][0].outputs[0]
        fused.graph.outputs.append(dq)
        first = run(fused, {"x": raw})[-1].astype(np.float64)
        if swap:                  # folded into the Conv: its input is in the raw order
            first = first[:, swap[0]["order"]]
        err = np.abs(first - x.astype(np.float64)).max()
        assert q / 8 < err <= q / 2 + 1e-6 * np.abs(x).max(), (err, q)
    if lowered:
        low, report = lower(onnx_bytes, "npu256", preprocess=spec)
        (got_low,) = run(low, {"x": raw})
        assert_close(got_low, got, f"{name}: lowered, onnxruntime")
        (ref,) = Reference(serialized(low), "npu256").run({"x": raw})
        assert_close(ref, got, f"{name}: lowered, NumPy reference")
        assert report.preprocess["steps"] == info["steps"]


# --- the command line ----------------------------------------------------------------------
def test_cli_convert_fuses_with_one_flag(tmp_path, capsys):
    out = str(tmp_path / "digits_raw.onnx")
    model = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
    assert main(["convert", model, "-o", out, "--fuse-preprocess", "--scale", "0.0625"]) == 0
    text = capsys.readouterr().out
    assert "fused preprocessing (float, standard onnx) into input 'x'" in text
    assert "Scale" in text and f"wrote {out}" in text
    m = onnx.load(out)
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    raw, ref = digits_raw()
    (got,) = run_onnx(out, {"x": raw})[1]
    assert_close(got, ref["out_0"], "CLI-fused digits vs Paddle", tol=1e-4)
    # convert --npu: fused in front of the lowered model, the report says so
    out = str(tmp_path / "digits_npu.onnx")
    assert main(["convert", model, "-o", out, "--npu", "npu256", "--fuse-preprocess",
                 "--scale", "0.0625", "--preprocess-mode", "int8"]) == 0
    text = capsys.readouterr().out
    assert "fused preprocessing (int8, npu primitives)" in text and "segments:" in text
    assert_close(run_onnx(out, {"x": raw})[1][0], ref["out_0"], "--npu digits", tol=1e-4)


def test_cli_lower_reads_preprocess_from_target_and_config_files(tmp_path, capsys):
    onnx_file = str(tmp_path / "digits.onnx")
    with open(onnx_file, "wb") as f:
        f.write(export(os.path.join(EXAMPLE, "legacy", "model.pdmodel")))
    target = tmp_path / "cam.toml"
    target.write_text('name = "cam"\n[preprocess]\nscale = [0.0625]\nresize_dims = [12, 12]\n')
    out = str(tmp_path / "low.onnx")
    report = str(tmp_path / "report.json")
    assert main(["lower", onnx_file, "-o", out, "--target", str(target), "--fuse-preprocess",
                 "--report", report, "--verify"]) == 0
    text = capsys.readouterr().out
    assert "center crop 12x12 -> 8x8 at (2, 2)" in text and "agrees" in text
    with open(report) as f:
        assert json.load(f)["preprocess"]["spec"]["resize_dims"] == [12, 12]
    raw, ref = digits_raw(crop_pad=2)
    assert_close(run_onnx(out, {"x": raw})[1][0], ref["out_0"], "lowered digits", tol=1e-4)
    # a config file and flags on top of the target's table: flags win, std replaces scale
    config = tmp_path / "pre.json"
    config.write_text(json.dumps({"preprocess": {"mean": [8], "mode": "int8"}}))
    assert main(["lower", onnx_file, "-o", out, "--target", str(target), "--fuse-preprocess",
                 "--preprocess-config", str(config), "--std", "8"]) == 0
    text = capsys.readouterr().out
    assert "ScaleLut" in text and "int8, scale" in text and "12x12" in text


@pytest.mark.parametrize("argv, message", [
    (["--mean", "1"], "--mean: preprocessing options, they need --fuse-preprocess"),
    (["--fuse-preprocess", "--std", "1,2,3", "--scale", "1"], "std or scale, not both"),
    (["--fuse-preprocess", "--pixel-format", "bgr"], "pixel_format bgr has 3 channel(s)"),
    (["--fuse-preprocess", "--reference", os.path.join(EXAMPLE, "reference_io.npz")],
     "--reference holds the model's float inputs"),
])
def test_cli_errors(tmp_path, capsys, argv, message):
    model = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
    assert main(["convert", model, "-o", str(tmp_path / "x.onnx")] + argv) == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.onnx")


def test_target_file_preprocess_table_is_validated(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"preprocess": {"std": [0, 1, 1]}}))
    with pytest.raises(ConversionError, match=r"bad.json \[preprocess\]: every std must be"):
        spec_from_args(type("A", (), {"fuse_preprocess": True})(), str(bad))


def test_describe_names_every_step():
    spec = PreprocessSpec(**IMAGENET, pixel_format="bgr", channel_format="nhwc",
                          resize_dims=(20, 20), mode="int8")
    _, info = fuse_preprocess(pool_first(), spec)
    text = describe(info)
    for word in ("Transpose", "Slice", "ScaleLut", "SwapChannel", "DequantizeLinear",
                 "quantisation: int8", "NHWC BGR"):
        assert word in text, word


# --- image files for calibration (read_images): the fused chain's arithmetic, from files ----
@pytest.mark.parametrize("model_pf, channels", [("rgb", 3), ("bgr", 3), ("gray", 1)])
@pytest.mark.parametrize("resize", [None, (21, 19)], ids=["nocrop", "crop"])
def test_read_images_is_what_the_fused_model_sees(tmp_path, model_pf, channels, resize):
    """Image files of other sizes, read into the model's float input, equal what the fused
    preprocessing computes from the same pixels handed over raw (resized to the raw size)."""
    from PIL import Image

    from paddle_npu.preprocess import image_files, read_images

    raw_hw = resize or (16, 16)
    for i, (h, w) in enumerate([(30, 24), (16, 16), (40, 52)]):
        Image.fromarray(photo(i, h, w)).save(tmp_path / f"img{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    norm = IMAGENET if channels == 3 else {"mean": (120.0,), "std": (60.0,)}
    spec = PreprocessSpec(**norm, model_pixel_format=model_pf, channel_format="nhwc",
                          pixel_format=model_pf, resize_dims=resize)
    paths = image_files(str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["img0.png", "img1.png", "img2.png"]
    x = read_images(paths, spec, [1, channels, 16, 16])
    assert x.shape == (3, channels, 16, 16) and x.dtype == np.float32

    raw = []          # what a camera in the model's channel order would hand over
    for p in paths:
        img = Image.open(p).convert("L" if channels == 1 else "RGB")
        pix = np.asarray(img.resize(raw_hw[::-1], Image.BILINEAR)).reshape(*raw_hw, channels)
        raw.append(pix[..., ::-1] if model_pf == "bgr" else pix)
    fused, _ = fuse_preprocess(identity_model(channels), spec)
    (want,) = run(fused, {"image": np.stack(raw)})
    assert_close(x, want, "read_images vs fused preprocessing")


def test_read_images_errors_name_the_file(tmp_path):
    from paddle_npu.preprocess import image_files, read_images

    with pytest.raises(ConversionError, match="no image files"):
        image_files(str(tmp_path))
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ConversionError, match=r"broken.png: cannot read the image"):
        read_images(image_files(str(tmp_path)), PreprocessSpec(), [1, 3, 8, 8])
    with pytest.raises(ConversionError, match="smaller than the model's input"):
        read_images([], PreprocessSpec(resize_dims=(4, 4)), [1, 3, 8, 8])
    with pytest.raises(ConversionError, match="fixed size"):
        read_images([], PreprocessSpec(), [1, 3, None, 8])
