"""Op cases for the core families: conv / norm / pool, activations, elementwise math."""
from opcase_harness import case
from opcase_layers import fn_layer as _fn

IMG = {"x": ((None, 4, 9, 9), "float32")}


for _name, _kw in {
    "plain": dict(), "stride2_pad1": dict(stride=2, padding=1),
    "dilation2_pad2": dict(dilation=2, padding=2), "groups2": dict(groups=2, padding=1),
    "pad_asym": dict(padding=[1, 0, 2, 1]), "same": dict(padding="SAME", stride=2),
    "valid": dict(padding="VALID"), "nobias": dict(bias_attr=False),
    "same_dilation2": dict(padding="SAME", dilation=2), "same_dilation2_stride2": dict(
        padding="SAME", dilation=2, stride=2),
}.items():
    case(f"conv2d_{_name}", IMG, ["conv2d"])(
        lambda paddle, kw=_kw: paddle.nn.Conv2D(4, 6, 3, **kw))

case("depthwise_conv2d", IMG, ["depthwise_conv2d"])(
    lambda paddle: paddle.nn.Conv2D(4, 8, 3, padding=1, groups=4))


@case("batch_norm", IMG, ["batch_norm"])
def _bn(paddle):
    bn = paddle.nn.BatchNorm2D(4, epsilon=1e-3)
    bn._mean.set_value(paddle.to_tensor([0.1, -0.2, 0.3, 0.0]))
    bn._variance.set_value(paddle.to_tensor([1.5, 0.5, 2.0, 1.0]))
    return bn


for _name, _layer in {
    "max_k2": lambda p: p.nn.MaxPool2D(2),
    "max_k3_s2_p1": lambda p: p.nn.MaxPool2D(3, stride=2, padding=1),
    "max_ceil": lambda p: p.nn.MaxPool2D(2, stride=2, ceil_mode=True),
    "avg_exclusive": lambda p: p.nn.AvgPool2D(3, stride=2, padding=1, exclusive=True),
    "avg_inclusive": lambda p: p.nn.AvgPool2D(3, stride=2, padding=1, exclusive=False),
    "adaptive_avg_3": lambda p: p.nn.AdaptiveAvgPool2D(3),
    "adaptive_avg_1": lambda p: p.nn.AdaptiveAvgPool2D(1),
    "adaptive_avg_uneven": lambda p: p.nn.AdaptiveAvgPool2D((4, 2)),    # 9 -> 4: uneven bins
    "adaptive_avg_upsample": lambda p: p.nn.AdaptiveAvgPool2D(11),      # 9 -> 11 (vgg at 64px)
}.items():
    case(f"pool2d_{_name}", IMG, ["pool2d"])(lambda paddle, f=_layer: f(paddle))

case("layer_norm", {"x": ((None, 5, 8), "float32")}, ["layer_norm"], opsets=(11, 17))(
    lambda paddle: paddle.nn.LayerNorm(8))
case("layer_norm_2d", {"x": ((None, 5, 8), "float32")}, ["layer_norm"], opsets=(11, 17))(
    lambda paddle: paddle.nn.LayerNorm([5, 8]))
case("dropout", IMG, ["dropout"], formats=("legacy",))(
    lambda paddle: paddle.nn.Dropout(0.3))

_ACTS = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "relu6": "relu6",
    "hardswish": "hard_swish", "hardsigmoid": "hard_sigmoid", "silu": "silu", "swish": "swish",
    "leaky_relu": "leaky_relu", "elu": "elu", "softplus": "softplus", "gelu": "gelu",
    "softsign": "softsign", "hardshrink": "hard_shrink", "log_softmax": "log_softmax",
    "softmax": "softmax",
}
def _unary_raw(op_type, attrs=None):
    return (op_type, {"X": ["x"]}, {"Out": 1}, attrs or {})


def _binary_raw(op_type, attrs=None):
    return (op_type, {"X": ["x"], "Y": ["y"]}, {"Out": 1}, attrs or {})


for _fname, _op in _ACTS.items():
    case(f"act_{_fname}", IMG, [_op], raw=_unary_raw(_op))(
        lambda paddle, f=_fname: _fn(paddle, getattr(paddle.nn.functional, f)))

case("gelu_tanh", IMG, ["gelu"], raw=_unary_raw("gelu", {"approximate": True}))(
    lambda paddle: _fn(paddle, lambda x: paddle.nn.functional.gelu(x, approximate=True)))
case("leaky_relu_alpha", IMG, ["leaky_relu"])(
    lambda paddle: _fn(paddle, lambda x: paddle.nn.functional.leaky_relu(x, 0.3)))
case("softmax_axis1", IMG, ["softmax"])(
    lambda paddle: _fn(paddle, lambda x: paddle.nn.functional.softmax(x, axis=1)))
case("prelu_channel", IMG, ["prelu"])(lambda paddle: paddle.nn.PReLU(4, 0.1))
case("prelu_all", IMG, ["prelu"])(lambda paddle: paddle.nn.PReLU(1, 0.2))
case("clip", IMG, ["clip"])(
    lambda paddle: _fn(paddle, lambda x: paddle.clip(x, -0.5, 1.2)))

_POS = {"x": lambda rng, s: rng.uniform(0.1, 3, s)}
for _fname, _op in {"exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "floor": "floor",
                    "ceil": "ceil", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos",
                    "erf": "erf", "sign": "sign", "round": "round", "square": "square",
                    "rsqrt": "rsqrt"}.items():
    case(f"unary_{_fname}", IMG, [_op], values=_POS, raw=_unary_raw(_op))(
        lambda paddle, f=_fname: _fn(paddle, getattr(paddle, f)))

case("pow_scalar", IMG, ["pow"], values=_POS)(
    lambda paddle: _fn(paddle, lambda x: paddle.pow(x, 2.5)))
case("scale", IMG, ["scale"])(
    lambda paddle: _fn(paddle, lambda x: paddle.scale(x, 1.5, 0.25)))
case("scale_bias_first", IMG, ["scale"])(
    lambda paddle: _fn(paddle, lambda x: paddle.scale(x, 2.0, 1.0, bias_after_scale=False)))

TWO = {"x": ((None, 3, 4, 5), "float32"), "y": ((None, 3, 4, 5), "float32")}
BCAST = {"x": ((None, 3, 4, 5), "float32"), "y": ((5,), "float32")}
_NZ = {"y": lambda rng, s: rng.uniform(0.5, 2, s) * rng.choice([-1, 1], s)}
for _fname, _op in {"add": "elementwise_add", "subtract": "elementwise_sub",
                    "multiply": "elementwise_mul", "divide": "elementwise_div",
                    "maximum": "elementwise_max", "minimum": "elementwise_min"}.items():
    case(f"binary_{_fname}", TWO, [_op], values=_NZ, raw=_binary_raw(_op))(
        lambda paddle, f=_fname: _fn(paddle, getattr(paddle, f)))
    case(f"binary_{_fname}_broadcast", BCAST, [_op], values=_NZ, raw=_binary_raw(_op))(
        lambda paddle, f=_fname: _fn(paddle, getattr(paddle, f)))

case("binary_pow", TWO, ["elementwise_pow"],
     values={"x": lambda rng, s: rng.uniform(0.1, 2, s)})(
    lambda paddle: _fn(paddle, paddle.pow))
case("binary_floor_divide", TWO, ["elementwise_floordiv"],
     values={"x": lambda rng, s: rng.randint(-20, 20, s), "y": lambda rng, s: rng.randint(1, 5, s)})(
    lambda paddle: _fn(paddle, paddle.floor_divide))
case("binary_remainder", TWO, ["elementwise_mod"], values=_NZ)(
    lambda paddle: _fn(paddle, paddle.remainder))
case("add_n", {"a": ((None, 3), "float32"), "b": ((None, 3), "float32"),
               "c": ((None, 3), "float32")}, ["sum"])(
    lambda paddle: _fn(paddle, lambda a, b, c: paddle.add_n([a, b, c])))

for _name, (_xs, _ys, _tx, _ty) in {
    "2d": ((None, 6), (6, 5), False, False),
    "batched": ((None, 3, 4, 6), (None, 3, 6, 5), False, False),
    "trans_y": ((None, 4, 6), (None, 5, 6), False, True),
    "trans_x": ((None, 6, 4), (None, 6, 5), True, False),
    "broadcast": ((None, 3, 4, 6), (6, 2), False, False),
}.items():
    case(f"matmul_{_name}", {"x": (_xs, "float32"), "y": (_ys, "float32")}, ["matmul_v2"],
         raw=_binary_raw("matmul_v2", {"trans_x": _tx, "trans_y": _ty}))(
        lambda paddle, tx=_tx, ty=_ty: _fn(
            paddle, lambda x, y: paddle.matmul(x, y, transpose_x=tx, transpose_y=ty)))

case("linear", {"x": ((None, 7), "float32")}, ["matmul_v2", "elementwise_add"])(
    lambda paddle: paddle.nn.Linear(7, 3))

VOL = {"x": ((None, 2, 5, 6, 6), "float32")}
case("conv3d", VOL, ["conv3d"])(lambda paddle: paddle.nn.Conv3D(2, 3, 3, padding=1))
case("conv3d_stride_groups", VOL, ["conv3d"])(
    lambda paddle: paddle.nn.Conv3D(2, 4, (1, 3, 3), stride=(1, 2, 2), groups=2))


def _half_weight_linear(paddle, dtype):
    """A layer keeping its weight in half precision and computing in float32."""
    class HalfWeight(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.w = self.create_parameter([64, 48], dtype=dtype)   # > 1 KiB: never folded

        def forward(self, x):
            return x @ self.w.astype("float32")
    return HalfWeight()


case("weight_float16", {"x": ((None, 64), "float32")}, ["cast", "matmul_v2"], tolerance=1e-3)(
    lambda paddle: _half_weight_linear(paddle, "float16"))
case("weight_bfloat16", {"x": ((None, 64), "float32")}, ["cast", "matmul_v2"], opsets=(13, 17),
     tolerance=1e-2)(lambda paddle: _half_weight_linear(paddle, "bfloat16"))
