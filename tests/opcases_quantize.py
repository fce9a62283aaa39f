"""Op cases for quantized models: quantize_linear / dequantize_linear -> ONNX QDQ."""
from opcase_harness import case

IMG = {"x": ((None, 4, 6, 6), "float32")}
# Paddle's PIR quanter allocates a persistable buffer of the activation's shape: no -1 there.
FIXED = {"x": ((2, 4, 6, 6), "float32")}


def _qdq_activation(paddle, scale):
    from paddle.nn.quant.format import LinearDequanter, LinearQuanter

    class QDQ(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.nn.Conv2D(4, 3, 3, padding=1)
            self.q = LinearQuanter([scale], zero_point=[0.0])
            self.dq = LinearDequanter([scale], zero_point=[0.0])

        def forward(self, x):
            return paddle.nn.functional.relu(self.dq(self.q(self.conv(x))))
    return QDQ()


def _qdq_weight(paddle):
    """A conv whose weight goes through per-output-channel QDQ (quant_axis 0), as
    PaddleSlim's quantized models store it."""
    from paddle.nn.quant.format import LinearDequanter, LinearQuanter

    class WQ(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.nn.Conv2D(4, 3, 3, padding=1)
            absmax = self.conv.weight.abs().reshape([3, -1]).max(axis=1).numpy().tolist()
            self.q = LinearQuanter(absmax, zero_point=[0.0] * 3, quant_axis=0)
            self.dq = LinearDequanter(absmax, zero_point=[0.0] * 3, quant_axis=0)

        def forward(self, x):
            w = self.dq(self.q(self.conv.weight))
            return paddle.nn.functional.conv2d(x, w, self.conv.bias, padding=1)
    return WQ()


# Scales small enough that values saturate at both ends, large enough to keep precision.
case("qdq_activation_per_tensor", FIXED, ["quantize_linear", "dequantize_linear"],
     opsets=(10, 13), tolerance=1e-5)(lambda paddle: _qdq_activation(paddle, 2.0))
case("qdq_activation_saturating", FIXED, ["quantize_linear", "dequantize_linear"],
     opsets=(13,), tolerance=1e-5)(lambda paddle: _qdq_activation(paddle, 0.5))
case("qdq_weight_per_channel", IMG, ["quantize_linear", "dequantize_linear", "conv2d"],
     opsets=(13, 17), formats=("pir",), tolerance=1e-5)(_qdq_weight)
