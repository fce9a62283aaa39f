"""Op cases for corners Paddle2ONNX's op tests reach: float64 where onnxruntime has no float64
kernel, old opsets' type limits, tensors given where attributes are usual, 0-d operands,
open sizes and ceil_mode's last windows."""
import numpy as np

from opcase_harness import case
from opcase_layers import fcase, fn_layer

IMG64 = {"x": ((None, 3, 6, 7), "float64")}

# unfold is a grouped Conv, which onnxruntime has no float64 kernel for
fcase("unfold_float64", IMG64, ["unfold"],
      lambda p, x: p.nn.functional.unfold(x, 3, strides=2, paddings=1), opsets=(7, 11, 17))

# float64 max pooling: onnxruntime has no float64 GlobalMaxPool, nor MaxPool before opset 8
case("adaptive_max_pool2d_float64_global", IMG64, ["max_pool2d_with_index"],
     opsets=(7, 11))(lambda paddle: paddle.nn.AdaptiveMaxPool2D(1))
case("adaptive_max_pool2d_float64_even", IMG64, ["max_pool2d_with_index"], opsets=(7, 11))(
    lambda paddle: paddle.nn.AdaptiveMaxPool2D((3, 7)))
# float64 through ops onnxruntime runs in float32 only (PRelu before opset 16, GridSample
# before 20, Erf always)
fcase("gelu_float64", IMG64, ["gelu"], lambda p, x: p.nn.functional.gelu(x), opsets=(9, 17, 20),
      raw=("gelu", {"X": ["x"]}, {"Out": 1}, {"approximate": False}))
fcase("prelu_float64", {**IMG64, "w": ((3,), "float64")}, ["prelu"],
      lambda p, x, w: p.nn.functional.prelu(x, w), opsets=(7, 9, 16),
      values={"w": lambda rng, s: rng.uniform(0.05, 0.5, s)})
fcase("grid_sample_float64", {**IMG64, "g": ((None, 5, 4, 2), "float64")}, ["grid_sampler"],
      lambda p, x, g: p.nn.functional.grid_sample(x, g, align_corners=False),
      values={"g": lambda rng, s: rng.uniform(-1.2, 1.2, s)}, opsets=(16, 20),
      raw=("grid_sampler", {"X": ["x"], "Grid": ["g"]}, {"Output": 1},
           {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}))


# output_size with input sizes known only at run time (batch 6: each open size is 6)
@case("conv2d_transpose_output_size_open", {"x": ((None, 4, None, None), "float32")},
      ["conv2d_transpose"], batch=6, opsets=(7, 11, 17))
def _convt_out_size_open(paddle):
    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=[1, 0])

        def forward(self, x):
            return self.conv(x, output_size=[12, 13])
    return Net()


# ONNX Flatten takes only float tensors before opset 9
fcase("flatten_int32", {"x": ((None, 3, 4, 5), "int32")}, ["flatten_contiguous_range"],
      lambda p, x: p.flatten(x, 1, -1), opsets=(7, 9, 11))
case("flatten2_int32", {"x": ((None, 3, 4, 5), "int32")}, ["flatten2"], formats=("legacy",),
     opsets=(7, 11), raw=("flatten2", {"X": ["x"]}, {"Out": 1, "XShape": 1}, {"axis": 2}))(None)

# unsqueeze's axes computed at run time (Unsqueeze's axes input: opset 13), Paddle's order
for _rank in (0, 2):
    fcase(f"unsqueeze_axes_computed_rank{_rank}", {"x": ((3, 4)[:_rank], "float32")},
          ["unsqueeze2"], lambda p, x: p.unsqueeze(x, p.to_tensor([0, -1]) * 1),
          opsets=(13, 17))

# scatter of one row given as 0-d index and updates (of a 1-D x)
for _overwrite, _opsets in ((True, (11, 17)), (False, (16, 17))):
    fcase(f"scatter_0d_{'overwrite' if _overwrite else 'add'}",
          {"x": ((6,), "float32"), "ids": ((), "int64"), "upd": ((), "float32")}, ["scatter"],
          lambda p, x, ids, upd, o=_overwrite: p.scatter(x, ids, upd, overwrite=o),
          values={"ids": lambda rng, s: np.array(4)}, opsets=_opsets)
fcase("scatter_0d_index_row", {"x": ((6, 3), "float32"), "ids": ((), "int64"),
                               "upd": ((3,), "float32")}, ["scatter"],
      lambda p, x, ids, upd: p.scatter(x, ids, upd), values={"ids": lambda rng, s: np.array(2)})

# average pooling with ceil_mode whose last window Paddle keeps and onnxruntime drops (it
# starts past the input: Paddle divides its sum 0 by a count of 0, NaN, or less, 0)
_POOL_CEIL = {
    "k5_s4_p2": (5, 4, 2, (10, 11)),
    "asym_pads": (3, 2, [1, 2, 0, 1], (9, 9)),
    "stride_over_kernel": (3, 5, [1, 0, 1, 0], (9, 9)),     # along both axes: a corner too
}
for _name, (_k, _s, _p, _hw) in _POOL_CEIL.items():
    for _ex in (True, False):
        case(f"pool2d_avg_ceil_{_name}_{'exclusive' if _ex else 'inclusive'}",
             {"x": ((None, 3) + _hw, "float32")}, ["pool2d"], opsets=(10, 17))(
            lambda paddle, k=_k, s=_s, p=_p, ex=_ex: paddle.nn.AvgPool2D(
                k, stride=s, padding=p, ceil_mode=True, exclusive=ex))
for _ex in (True, False):
    case(f"pool3d_avg_ceil_k5_s4_p2_{'exclusive' if _ex else 'inclusive'}",
         {"x": ((None, 2, 10, 6, 7), "float32")}, ["pool3d"], opsets=(10, 17))(
        lambda paddle, ex=_ex: paddle.nn.AvgPool3D(5, stride=4, padding=2, ceil_mode=True,
                                                    exclusive=ex))


def _yolo_float64(paddle):
    return fn_layer(paddle, lambda x, im: paddle.vision.ops.yolo_box(
        x, im, anchors=[10, 13, 16, 30], class_num=3, conf_thresh=0.2, downsample_ratio=16,
        clip_bbox=False, scale_x_y=1.3))


case("yolo_box_float64_scale_xy", {"x": ((1, 16, 12, 12), "float64"), "im": ((1, 2), "int32")},
     ["yolo_box"], values={"im": lambda rng, s: rng.randint(320, 640, s)}, opsets=(11, 17))(
    _yolo_float64)
