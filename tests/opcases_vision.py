"""Op cases for vision layers: interpolation, padding, transposed conv, pooling variants,
pixel shuffles, instance/group norm, affine_channel."""
from opcase_harness import case
from opcase_layers import fn_layer as _fn

IMG = {"x": ((None, 4, 9, 9), "float32")}
IMG8 = {"x": ((None, 4, 8, 8), "float32")}
DYN = {"x": ((None, 3, None, None), "float32")}     # every None dim becomes `batch`
VOL = {"x": ((None, 3, 6, 7, 8), "float32")}
SEQ = {"x": ((None, 3, 10), "float32")}


def _interp(paddle, **kw):
    return _fn(paddle, lambda x: paddle.nn.functional.interpolate(x, **kw))


# --- interpolation: every coordinate mode, scale vs size, each method ---------------------------
_LEGACY_OPSETS = (7, 9, 10, 11, 17)
for _name, _kw, _ops, _opsets in [
    ("bilinear_scale2", dict(scale_factor=2, mode="bilinear"), "bilinear_interp_v2", (11, 17)),
    ("bilinear_scale_frac", dict(scale_factor=[1.7, 0.6], mode="bilinear"),
     "bilinear_interp_v2", (11, 17)),
    ("bilinear_down", dict(scale_factor=0.5, mode="bilinear"), "bilinear_interp_v2", (11, 17)),
    ("bilinear_size_align_corners", dict(size=[7, 13], mode="bilinear", align_corners=True),
     "bilinear_interp_v2", (11, 17)),
    ("bilinear_size_half_pixel", dict(size=[13, 5], mode="bilinear"), "bilinear_interp_v2",
     (11, 13, 17)),
    ("bilinear_size_one", dict(size=[1, 4], mode="bilinear"), "bilinear_interp_v2", (11, 17)),
    ("bilinear_align_mode1", dict(size=[13, 6], mode="bilinear", align_mode=1),
     "bilinear_interp_v2", (11, 17)),
    ("bilinear_align_mode1_scale2", dict(scale_factor=2, mode="bilinear", align_mode=1),
     "bilinear_interp_v2", _LEGACY_OPSETS),
    ("nearest_scale2", dict(scale_factor=2, mode="nearest"), "nearest_interp_v2", _LEGACY_OPSETS),
    ("nearest_size_x3", dict(size=[27, 18], mode="nearest"), "nearest_interp_v2", _LEGACY_OPSETS),
    ("nearest_scale_frac", dict(scale_factor=1.5, mode="nearest"), "nearest_interp_v2", (11, 17)),
    ("nearest_down", dict(size=[4, 6], mode="nearest"), "nearest_interp_v2", (11, 17)),
    ("bicubic_scale2", dict(scale_factor=2, mode="bicubic"), "bicubic_interp_v2", (11, 17)),
    ("bicubic_size", dict(size=[5, 12], mode="bicubic"), "bicubic_interp_v2", (11, 17)),
    ("bicubic_align_corners", dict(size=[7, 11], mode="bicubic", align_corners=True),
     "bicubic_interp_v2", (11, 17)),
]:
    case(f"interp_{_name}", IMG, [_ops], opsets=_opsets)(
        lambda paddle, kw=_kw: _interp(paddle, **kw))

# Paddle's own float32 arithmetic (ratio rounded to float32, then ratio * i), which Resize's
# align_corners formula misses by a few units in the last place at these sizes.
for _name, _kw in (("down", dict(scale_factor=0.5)), ("up", dict(size=[97, 61]))):
    case(f"interp_bilinear_align_corners_{_name}_as_paddle", {"x": ((None, 3, 68, 68), "float32")},
         ["bilinear_interp_v2"], tolerance=2e-7)(
        lambda paddle, kw=_kw: _interp(paddle, mode="bilinear", align_corners=True, **kw))
case("interp_bilinear_nhwc", {"x": ((None, 9, 9, 4), "float32")}, ["bilinear_interp_v2"])(
    lambda paddle: _interp(paddle, scale_factor=2, mode="bilinear", data_format="NHWC"))
case("interp_nearest_dynamic_hw", DYN, ["nearest_interp_v2"], batch=5, opsets=_LEGACY_OPSETS)(
    lambda paddle: _interp(paddle, scale_factor=3, mode="nearest"))
case("interp_linear_scale2", SEQ, ["linear_interp_v2"])(
    lambda paddle: _interp(paddle, scale_factor=2, mode="linear", data_format="NCW"))
case("interp_linear_align_corners", SEQ, ["linear_interp_v2"])(
    lambda paddle: _interp(paddle, size=[17], mode="linear", align_corners=True,
                           data_format="NCW"))
case("interp_linear_align_mode1", SEQ, ["linear_interp_v2"], opsets=(9, 11, 17))(
    lambda paddle: _interp(paddle, size=[30], mode="linear", align_mode=1, data_format="NCW"))
case("interp_trilinear", {"x": ((None, 2, 4, 5, 6), "float32")}, ["trilinear_interp_v2"])(
    lambda paddle: _interp(paddle, scale_factor=[2, 1.5, 0.5], mode="trilinear"))
case("interp_nearest_3d", {"x": ((None, 2, 4, 5, 6), "float32")}, ["nearest_interp_v2"])(
    lambda paddle: _interp(paddle, size=[8, 3, 7], mode="nearest"))


# Sizes and scales given as tensors (SizeTensor, OutSize and Scale inputs).
def _size_values(vals):
    import numpy as np
    return lambda rng, shape: np.asarray(vals).reshape(shape)


case("interp_size_tensor_list", {"x": IMG["x"], "h": ((1,), "int32"), "w": ((1,), "int32")},
     ["bilinear_interp_v2"], values={"h": _size_values([12]), "w": _size_values([7])})(
    lambda paddle: _fn(paddle, lambda x, h, w: paddle.nn.functional.interpolate(
        x, size=[h, w], mode="bilinear")))
case("interp_linear_size_tensor", {"x": SEQ["x"], "w": ((1,), "int32")}, ["linear_interp_v2"],
     values={"w": _size_values([23])})(
    lambda paddle: _fn(paddle, lambda x, w: paddle.nn.functional.interpolate(
        x, size=[w], mode="linear", data_format="NCW")))
case("interp_trilinear_scale_tensor", {"x": ((None, 2, 4, 5, 6), "float32"),
                                       "s": ((3,), "float32")},
     ["trilinear_interp_v2"], values={"s": _size_values([1.5, 2.0, 0.5])})(
    lambda paddle: _fn(paddle, lambda x, s: paddle.nn.functional.interpolate(
        x, scale_factor=s, mode="trilinear")))
case("interp_out_size_tensor", {"x": IMG["x"], "s": ((2,), "int32")}, ["nearest_interp_v2"],
     values={"s": _size_values([14, 5])})(
    lambda paddle: _fn(paddle, lambda x, s: paddle.nn.functional.interpolate(
        x, size=s, mode="nearest")))
case("interp_scale_tensor", {"x": IMG["x"], "s": ((2,), "float32")}, ["bilinear_interp_v2"],
     values={"s": _size_values([1.5, 0.7])})(
    lambda paddle: _fn(paddle, lambda x, s: paddle.nn.functional.interpolate(
        x, scale_factor=s, mode="bilinear")))

# Only hand-built programs have nearest + align_corners (the Python API refuses it).
case("interp_nearest_align_corners", IMG, ["nearest_interp_v2"], formats=("legacy",),
     raw=("nearest_interp_v2", {"X": ["x"]}, {"Out": 1},
          {"out_h": 5, "out_w": 13, "align_corners": True, "interp_method": "nearest",
           "scale": [], "data_layout": "NCHW"}))(lambda paddle: None)

case("interp_scale_tensor_one_value", {"x": IMG["x"], "s": ((1,), "float32")},
     ["nearest_interp_v2"], formats=("legacy",), values={"s": _size_values([2.5])},
     raw=("nearest_interp_v2", {"X": ["x"], "Scale": ["s"]}, {"Out": 1},
          {"interp_method": "nearest", "scale": [], "data_layout": "NCHW"}))(lambda paddle: None)

# The v1 ops, only in legacy programs (built by hand).
_V1 = {"X": ["x"]}
case("interp_v1_bilinear_size", IMG, ["bilinear_interp"], formats=("legacy",),
     raw=("bilinear_interp", _V1, {"Out": 1}, {"out_h": 13, "out_w": 6, "align_corners": False,
                                               "align_mode": 1, "interp_method": "bilinear"}),
     opsets=(11, 17))(lambda paddle: None)
case("interp_v1_bilinear_scale", IMG, ["bilinear_interp"], formats=("legacy",),
     raw=("bilinear_interp", _V1, {"Out": 1}, {"scale": 1.5, "align_corners": False,
                                               "align_mode": 0, "interp_method": "bilinear"}))(
    lambda paddle: None)
case("interp_v1_nearest_scale2", IMG, ["nearest_interp"], formats=("legacy",), opsets=(7, 10, 11),
     raw=("nearest_interp", _V1, {"Out": 1}, {"scale": 2.0, "interp_method": "nearest",
                                              "align_corners": False}))(lambda paddle: None)
case("interp_v1_nearest_align_corners", IMG, ["nearest_interp"], formats=("legacy",),
     raw=("nearest_interp", _V1, {"Out": 1}, {"out_h": 5, "out_w": 12, "align_corners": True,
                                              "interp_method": "nearest"}))(lambda paddle: None)


# --- padding ---------------------------------------------------------------------------------
for _mode in ("constant", "reflect", "replicate", "circular"):
    case(f"pad2d_{_mode}", IMG, ["pad3d"], opsets=(7, 11, 17))(
        lambda paddle, m=_mode: paddle.nn.Pad2D([1, 2, 0, 3], mode=m, value=0.5))
    case(f"pad3d_{_mode}", VOL, ["pad3d"])(
        lambda paddle, m=_mode: paddle.nn.Pad3D([1, 2, 0, 1, 2, 1], mode=m, value=-1.0))
case("pad3d_circular_dynamic", {"x": ((None, 2, None, None, None), "float32")}, ["pad3d"],
     batch=4)(lambda paddle: paddle.nn.Pad3D([1, 2, 0, 1, 2, 1], mode="circular"))
case("pad3d_ndhwc", {"x": ((None, 6, 7, 8, 3), "float32")}, ["pad3d"])(
    lambda paddle: paddle.nn.Pad3D([1, 2, 0, 1, 2, 1], mode="reflect", data_format="NDHWC"))
case("pad3d_paddings_tensor", {"x": VOL["x"], "p": ((6,), "int32")}, ["pad3d"],
     values={"p": _size_values([1, 2, 0, 1, 2, 1])})(
    lambda paddle: _fn(paddle, lambda x, p: paddle.nn.functional.pad(
        x, p, mode="replicate", data_format="NCDHW")))
case("pad_constant_all_dims", {"x": ((None, 3, 5), "float32")}, ["pad"], opsets=(7, 11, 17),
     raw=("pad", {"X": ["x"]}, {"Out": 1}, {"paddings": [0, 1, 2, 0, 1, 3], "pad_value": 0.25}))(
    lambda paddle: _fn(paddle, lambda x: paddle.nn.functional.pad(
        x, [0, 1, 2, 0, 1, 3], value=0.25, pad_from_left_axis=True)))


# --- transposed convolution ------------------------------------------------------------------
for _name, _kw in {
    "plain": dict(), "stride2_pad1_outpad1": dict(stride=2, padding=1, output_padding=1),
    "pad_asym": dict(padding=[1, 0, 2, 1]), "dilation2": dict(dilation=2, padding=1),
    "groups2": dict(groups=2, stride=2), "same_stride2": dict(padding="SAME", stride=2),
    "same_stride1": dict(padding="SAME"), "valid": dict(padding="VALID", stride=3),
    "nobias": dict(bias_attr=False, stride=[2, 1]),
}.items():
    case(f"conv2d_transpose_{_name}", IMG, ["conv2d_transpose"], opsets=(7, 11, 17))(
        lambda paddle, kw=_kw: paddle.nn.Conv2DTranspose(4, 6, 3, **kw))


@case("conv2d_transpose_output_size", IMG, ["conv2d_transpose"])
def _convt_out_size(paddle):
    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1)

        def forward(self, x):
            return self.conv(x, output_size=[18, 18])
    return Net()


case("depthwise_conv2d_transpose", IMG, ["depthwise_conv2d_transpose"])(
    lambda paddle: paddle.nn.Conv2DTranspose(4, 4, 3, stride=2, padding=1, groups=4))
case("conv3d_transpose", VOL, ["conv3d_transpose"])(
    lambda paddle: paddle.nn.Conv3DTranspose(3, 2, 3, stride=2, padding=1, output_padding=1))


# --- pooling ---------------------------------------------------------------------------------
for _name, _layer in {
    "adaptive_max_even": lambda p: p.nn.AdaptiveMaxPool2D(3),
    "adaptive_max_uneven": lambda p: p.nn.AdaptiveMaxPool2D((4, 5)),
    "adaptive_max_mixed": lambda p: p.nn.AdaptiveMaxPool2D((3, 2)),
    "adaptive_max_1": lambda p: p.nn.AdaptiveMaxPool2D(1),
    "max_mask": lambda p: p.nn.MaxPool2D(3, stride=2, padding=1, return_mask=True),
    "adaptive_max_mask": lambda p: p.nn.AdaptiveMaxPool2D(3, return_mask=True),
}.items():
    case(f"max_pool2d_with_index_{_name}", IMG, ["max_pool2d_with_index"],
         opsets=(8, 11, 18) if "mask" in _name else (7, 11, 18))(
        lambda paddle, f=_layer: f(paddle))
case("max_pool2d_with_index_dynamic", DYN, ["max_pool2d_with_index"], batch=6)(
    lambda paddle: paddle.nn.MaxPool2D(2, stride=2, return_mask=True))

for _name, _layer in {
    "max_same": lambda p: p.nn.MaxPool2D(3, stride=2, padding="SAME"),
    "avg_same": lambda p: p.nn.AvgPool2D(3, stride=2, padding="SAME"),
    "avg_same_inclusive": lambda p: p.nn.AvgPool2D(2, stride=2, padding="SAME", exclusive=False),
    "max_valid": lambda p: p.nn.MaxPool2D(3, stride=2, padding="VALID"),
    "avg_valid": lambda p: p.nn.AvgPool2D(2, padding="VALID"),
    # Paddle never counts end padding beyond the begin pad's width (exclusive=False)
    "avg_inclusive_asym": lambda p: p.nn.AvgPool2D(3, stride=2, padding=[0, 2, 1, 1],
                                                   exclusive=False),
    "avg_inclusive_asym_ceil": lambda p: p.nn.AvgPool2D(2, stride=2, padding=[0, 1, 1, 0],
                                                        exclusive=False, ceil_mode=True),
    # ceil_mode's last window past the end pad: Paddle counts it up to the begin pad's width
    "avg_inclusive_asym_ceil_past_end": lambda p: p.nn.AvgPool2D(
        3, stride=2, padding=[1, 0, 1, 0], exclusive=False, ceil_mode=True),
    # a last window that would start in the end pad: Paddle keeps it (at float32's lowest),
    # onnxruntime's MaxPool drops it
    "max_ceil_window_in_end_pad": lambda p: p.nn.MaxPool2D(2, stride=2, padding=1,
                                                           ceil_mode=True),
}.items():
    case(f"pool2d_{_name}", IMG, ["pool2d"])(lambda paddle, f=_layer: f(paddle))

for _name, _layer in {
    "max": lambda p: p.nn.MaxPool3D(2),
    "avg_pad": lambda p: p.nn.AvgPool3D(3, stride=2, padding=1),
    "avg_ceil": lambda p: p.nn.AvgPool3D(2, stride=2, ceil_mode=True),
    "avg_same_inclusive": lambda p: p.nn.AvgPool3D(3, stride=2, padding="SAME", exclusive=False),
    "adaptive_avg_uneven": lambda p: p.nn.AdaptiveAvgPool3D((4, 3, 3)),
    "adaptive_avg_1": lambda p: p.nn.AdaptiveAvgPool3D(1),
}.items():
    case(f"pool3d_{_name}", VOL, ["pool3d"],
         opsets=(11, 18) if "ceil" in _name else (7, 11, 18))(lambda paddle, f=_layer: f(paddle))
case("max_pool3d_with_index_adaptive", VOL, ["max_pool3d_with_index"])(
    lambda paddle: paddle.nn.AdaptiveMaxPool3D((3, 2, 5)))
case("max_pool3d_with_index_mask", VOL, ["max_pool3d_with_index"])(
    lambda paddle: paddle.nn.MaxPool3D(2, stride=2, return_mask=True))


# --- pixel / channel shuffles ----------------------------------------------------------------
SHUF = {"x": ((None, 8, 3, 5), "float32")}
case("pixel_shuffle", SHUF, ["pixel_shuffle"], opsets=(7, 11, 17))(
    lambda paddle: paddle.nn.PixelShuffle(2))
case("pixel_shuffle_nhwc", {"x": ((None, 3, 5, 8), "float32")}, ["pixel_shuffle"])(
    lambda paddle: paddle.nn.PixelShuffle(2, data_format="NHWC"))
case("pixel_unshuffle", {"x": ((None, 2, 6, 4), "float32")}, ["pixel_unshuffle"],
     opsets=(7, 11, 17))(lambda paddle: paddle.nn.PixelUnshuffle(2))
case("channel_shuffle", SHUF, ["channel_shuffle"], opsets=(7, 11, 17))(
    lambda paddle: paddle.nn.ChannelShuffle(4))


# --- normalisation ---------------------------------------------------------------------------
@case("instance_norm", IMG, ["instance_norm"], opsets=(7, 11, 17))
def _inorm(paddle):
    layer = paddle.nn.InstanceNorm2D(4, epsilon=1e-3)
    layer.scale.set_value(paddle.to_tensor([0.5, 1.5, -1.0, 2.0]))
    layer.bias.set_value(paddle.to_tensor([0.1, -0.2, 0.3, 0.0]))
    return layer


case("instance_norm_1d", SEQ, ["instance_norm"])(lambda paddle: paddle.nn.InstanceNorm1D(3))
case("instance_norm_no_affine", IMG, ["instance_norm"])(
    lambda paddle: paddle.nn.InstanceNorm2D(4, weight_attr=False, bias_attr=False))


@case("group_norm", {"x": ((None, 6, 5, 7), "float32")}, ["group_norm"], opsets=(7, 11, 17))
def _gnorm(paddle):
    layer = paddle.nn.GroupNorm(3, 6, epsilon=1e-4)
    layer.weight.set_value(paddle.to_tensor([0.5, 1.5, -1.0, 2.0, 1.0, 0.3]))
    layer.bias.set_value(paddle.to_tensor([0.1, -0.2, 0.3, 0.0, 0.5, -1.0]))
    return layer


case("group_norm_3d_input", {"x": ((None, 4, 10), "float32")}, ["group_norm"])(
    lambda paddle: paddle.nn.GroupNorm(2, 4))
case("group_norm_no_affine", {"x": ((None, 6, 5, 7), "float32")}, ["group_norm"])(
    lambda paddle: paddle.nn.GroupNorm(6, 6, weight_attr=False, bias_attr=False))

case("affine_channel", {"x": IMG["x"], "scale": ((4,), "float32"), "bias": ((4,), "float32")},
     ["affine_channel"], formats=("legacy",),
     raw=("affine_channel", {"X": ["x"], "Scale": ["scale"], "Bias": ["bias"]}, {"Out": 1},
          {"data_layout": "NCHW"}))(lambda paddle: None)
case("affine_channel_nhwc", {"x": ((None, 5, 5, 4), "float32"), "scale": ((4,), "float32"),
                             "bias": ((4,), "float32")},
     ["affine_channel"], formats=("legacy",),
     raw=("affine_channel", {"X": ["x"], "Scale": ["scale"], "Bias": ["bias"]}, {"Out": 1},
          {"data_layout": "NHWC"}))(lambda paddle: None)


# --- yolo_box --------------------------------------------------------------------------------
def _img_sizes(rng, shape):
    import numpy as np
    return np.asarray([[320, 416], [256, 200], [608, 608], [100, 90]])[:shape[0]]


def _yolo(paddle, **kw):
    args = dict(anchors=[10, 13, 16, 30, 33, 23], class_num=2, conf_thresh=0.5,
                downsample_ratio=8, clip_bbox=True)
    args.update(kw)
    return _fn(paddle, lambda x, im: paddle.vision.ops.yolo_box(x, im, **args))


_YOLO_IN = {"x": ((None, 21, 5, 6), "float32"), "im": ((None, 2), "int32")}
case("yolo_box", _YOLO_IN, ["yolo_box"], values={"im": _img_sizes}, opsets=(9, 11, 17))(
    lambda paddle: _yolo(paddle))
case("yolo_box_scale_xy_noclip", _YOLO_IN, ["yolo_box"], values={"im": _img_sizes})(
    lambda paddle: _yolo(paddle, scale_x_y=1.05, clip_bbox=False, conf_thresh=0.3,
                         downsample_ratio=16))
case("yolo_box_iou_aware", {"x": ((None, 24, 5, 6), "float32"), "im": ((None, 2), "int32")},
     ["yolo_box"], values={"im": _img_sizes})(
    lambda paddle: _yolo(paddle, iou_aware=True, iou_aware_factor=0.4, scale_x_y=1.1))
case("yolo_box_dynamic_grid", {"x": ((None, 21, None, None), "float32"),
                               "im": ((None, 2), "int32")},
     ["yolo_box"], values={"im": _img_sizes}, batch=4)(lambda paddle: _yolo(paddle))


# --- multiclass NMS --------------------------------------------------------------------------
def _boxes(rng, shape):
    import numpy as np
    xy = rng.uniform(0, 60, shape[:-1] + (2,))
    wh = rng.uniform(5, 30, shape[:-1] + (2,))
    return np.concatenate([xy, xy + wh], -1)


def _small_boxes(rng, shape):
    """Pixel boxes 1-4 wide, where Paddle's +1 in unnormalized IoU changes what survives."""
    import numpy as np
    xy = rng.uniform(0, 12, shape[:-1] + (2,))
    wh = rng.uniform(1, 4, shape[:-1] + (2,))
    return np.concatenate([xy, xy + wh], -1)


def _probs(rng, shape):
    return rng.uniform(0, 1, shape)


_NMS_IN = {"bboxes": ((None, 40, 4), "float32"), "scores": ((None, 4, 40), "float32")}
_NMS_OUTS = {"Out": 1, "Index": (1, "int32"), "NmsRoisNum": (1, "int32")}
_NMS_ATTRS = dict(score_threshold=0.3, nms_top_k=20, keep_top_k=10, nms_threshold=0.5,
                  normalized=True, nms_eta=1.0, background_label=0)


def _nms3_layer(paddle, a):
    class NMS(paddle.nn.Layer):
        def forward(self, bboxes, scores):
            return paddle._C_ops.multiclass_nms3(
                bboxes, scores, None, a["score_threshold"], a["nms_top_k"], a["keep_top_k"],
                a["nms_threshold"], a["normalized"], a["nms_eta"], a["background_label"])
    return NMS()


for _name, _kw, _batch in [
    ("keep_top_k", {}, 2),
    ("keep_top_k_batch1", {}, 1),
    ("no_limits_no_background", dict(nms_top_k=-1, keep_top_k=-1, background_label=-1), 2),
    ("unnormalized", dict(normalized=False, nms_threshold=0.45, keep_top_k=25), 2),
    ("eta_low_threshold", dict(nms_eta=0.7, nms_threshold=0.4, background_label=2), 2),
    ("keep_top_k_above_count", dict(keep_top_k=500, nms_top_k=5, score_threshold=0.05), 2),
    ("nothing_kept", dict(score_threshold=1.5), 2),
    ("large_m", dict(nms_top_k=300, keep_top_k=100, score_threshold=0.01), 2),
]:
    _attrs = dict(_NMS_ATTRS, **_kw)
    _inputs = _NMS_IN if _name != "large_m" else {
        "bboxes": ((None, 500, 4), "float32"), "scores": ((None, 6, 500), "float32")}
    case(f"multiclass_nms3_{_name}", _inputs, ["multiclass_nms3"], batch=_batch,
         values={"bboxes": _small_boxes if "unnormalized" in _name else _boxes,
                 "scores": _probs},
         raw=("multiclass_nms3", {"BBoxes": ["bboxes"], "Scores": ["scores"]}, _NMS_OUTS, _attrs))(
        lambda paddle, a=_attrs: _nms3_layer(paddle, a))

for _name, _kw in [("keep_top_k", {}), ("nothing_kept", dict(score_threshold=1.5))]:
    case(f"multiclass_nms_v1_{_name}", _NMS_IN, ["multiclass_nms"], formats=("legacy",),
         values={"bboxes": _boxes, "scores": _probs},
         raw=("multiclass_nms", {"BBoxes": ["bboxes"], "Scores": ["scores"]}, {"Out": 1},
              dict(_NMS_ATTRS, **_kw)))(lambda paddle: None)


# --- prior_box / box_coder / roi_align -------------------------------------------------------
_PRIOR_IN = {"feat": ((None, 4, 6, 9), "float32"), "image": ((None, 3, 24, 36), "float32")}
case("prior_box", _PRIOR_IN, ["prior_box"], opsets=(7, 11, 17))(
    lambda paddle: _fn(paddle, lambda feat, image: paddle.vision.ops.prior_box(
        feat, image, min_sizes=[4.0, 8.0], max_sizes=[8.0, 16.0], aspect_ratios=[2.0, 3.0],
        variance=[0.1, 0.1, 0.2, 0.2], flip=True, clip=True)))
case("prior_box_minmax_order_steps", _PRIOR_IN, ["prior_box"])(
    lambda paddle: _fn(paddle, lambda feat, image: paddle.vision.ops.prior_box(
        feat, image, min_sizes=[5.0, 11.0], max_sizes=[9.0, 20.0], aspect_ratios=[1.0, 2.0],
        variance=[0.1, 0.1, 0.2, 0.2], flip=False, clip=False, steps=[4.0, 3.5], offset=0.3,
        min_max_aspect_ratios_order=True)))


def _variances(rng, shape):
    return rng.uniform(0.1, 0.3, shape)


def _deltas(rng, shape):
    return rng.uniform(-1, 1, shape)


_VALS = {"prior": _boxes, "var": _variances, "target": _deltas}
case("box_coder_decode_var_tensor", {"prior": ((7, 4), "float32"), "var": ((7, 4), "float32"),
                                     "target": ((None, 7, 4), "float32")}, ["box_coder"],
     values=_VALS, opsets=(7, 11, 17))(
    lambda paddle: _fn(paddle, lambda prior, var, target: paddle.vision.ops.box_coder(
        prior, var, target, code_type="decode_center_size")))
case("box_coder_decode_axis1_unnormalized", {"prior": ((None, 4), "float32"),
                                             "target": ((None, 5, 4), "float32")},
     ["box_coder"], values=_VALS)(
    lambda paddle: _fn(paddle, lambda prior, target: paddle.vision.ops.box_coder(
        prior, [0.1, 0.1, 0.2, 0.2], target, code_type="decode_center_size",
        box_normalized=False, axis=1)))
case("box_coder_encode_var_tensor", {"prior": ((7, 4), "float32"), "var": ((7, 4), "float32"),
                                     "target": ((None, 4), "float32")}, ["box_coder"],
     values=dict(_VALS, target=_boxes))(
    lambda paddle: _fn(paddle, lambda prior, var, target: paddle.vision.ops.box_coder(
        prior, var, target, code_type="encode_center_size")))
case("box_coder_encode_unnormalized", {"prior": ((7, 4), "float32"),
                                       "target": ((None, 4), "float32")}, ["box_coder"],
     values=dict(_VALS, target=_boxes))(
    lambda paddle: _fn(paddle, lambda prior, target: paddle.vision.ops.box_coder(
        prior, [0.1, 0.1, 0.2, 0.2], target, code_type="encode_center_size",
        box_normalized=False)))


def _rois(rng, shape):
    import numpy as np
    xy = rng.uniform(-2, 20, shape[:-1] + (2,))
    wh = rng.uniform(0.5, 12, shape[:-1] + (2,))
    return np.concatenate([xy, xy + wh], -1)


_ROI_IN = {"x": ((None, 3, 12, 14), "float32"), "boxes": ((5, 4), "float32"),
           "num": ((None,), "int32")}
_ROI_VALS = {"boxes": _rois, "num": _size_values([3, 2])}
case("roi_align", _ROI_IN, ["roi_align"], values=_ROI_VALS)(
    lambda paddle: _fn(paddle, lambda x, boxes, num: paddle.vision.ops.roi_align(
        x, boxes, num, (3, 4), spatial_scale=0.5, sampling_ratio=2, aligned=False)))
case("roi_align_aligned_adaptive", _ROI_IN, ["roi_align"], values=_ROI_VALS, opsets=(16, 17))(
    lambda paddle: _fn(paddle, lambda x, boxes, num: paddle.vision.ops.roi_align(
        x, boxes, num, 2, spatial_scale=0.5, sampling_ratio=-1, aligned=True)))
