"""Op cases for corners Paddle2ONNX's op tests reach: float64 where onnxruntime has no float64
kernel, old opsets' type limits, tensors given where attributes are usual, 0-d operands,
open sizes and ceil_mode's last windows."""
from opcase_harness import case
from opcase_layers import fcase

IMG64 = {"x": ((None, 3, 6, 7), "float64")}

# unfold is a grouped Conv, which onnxruntime has no float64 kernel for
fcase("unfold_float64", IMG64, ["unfold"],
      lambda p, x: p.nn.functional.unfold(x, 3, strides=2, paddings=1), opsets=(7, 11, 17))

# float64 max pooling: onnxruntime has no float64 GlobalMaxPool, nor MaxPool before opset 8
case("adaptive_max_pool2d_float64_global", IMG64, ["max_pool2d_with_index"],
     opsets=(7, 11))(lambda paddle: paddle.nn.AdaptiveMaxPool2D(1))
case("adaptive_max_pool2d_float64_even", IMG64, ["max_pool2d_with_index"], opsets=(7, 11))(
    lambda paddle: paddle.nn.AdaptiveMaxPool2D((3, 7)))
