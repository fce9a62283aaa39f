"""Op cases for edge cases of existing mappers, over dtypes and ranks 0-5: 0-d inputs
(cumsum, top_k, softmax, log_softmax), roll with computed shifts, gather with [N, 1]
indices, integer clip bounds as tensors, integer pow, flooring integer division, squeeze with
computed axes, float64 pools and yolo_box (onnxruntime computes these pools in float32 only)."""
import numpy as np

from opcase_harness import case
from opcase_layers import fcase

SHAPE = (2, 3, 2, 3, 2)
RANKS = range(6)


def _x(rank, dtype):
    return {"x": (SHAPE[:rank], dtype)}


def _unary_raw(op_type, attrs, out=1, extra_outs=None):
    return (op_type, {"X": ["x"]}, {"Out": out, **(extra_outs or {})}, attrs)


def _roll_raw(axis):   # paddle.roll with a tensor shift raises in legacy static mode
    return ("roll", {"X": ["x"], "ShiftsTensor": ["s"]}, {"Out": 1}, {"axis": axis})


for _r in RANKS:
    for _dt in ("float32", "float64", "int32", "int64"):
        fcase(f"cumsum_rank{_r}_{_dt}", _x(_r, _dt), ["cumsum"],
              lambda p, x: p.cumsum(x, axis=-1 if x.ndim else 0))
    fcase(f"cumsum_flatten_rank{_r}", _x(_r, "float32"), ["cumsum"], lambda p, x: p.cumsum(x))
    for _dt in ("float32", "float64", "int64"):
        fcase(f"topk_rank{_r}_{_dt}", _x(_r, _dt), ["top_k_v2"], lambda p, x: p.topk(x, 1),
              values={"x": lambda rng, s: rng.permutation(int(np.prod(s))).reshape(s)})
    for _dt in ("float32", "float64"):
        for _fn in ("softmax", "log_softmax"):
            fcase(f"{_fn}_rank{_r}_{_dt}", _x(_r, _dt), [_fn],
                  lambda p, x, f=_fn: getattr(p.nn.functional, f)(x),
                  raw=_unary_raw(_fn, {"axis": -1}), opsets=(7, 13))
    if _r:
        for _dt in ("float32", "int32", "int64"):
            fcase(f"roll_shift_tensor_rank{_r}_{_dt}",
                  {**_x(_r, _dt), "s": ((), "int64")}, ["roll"],
                  lambda p, x, s: p.roll(x, s), values={"s": lambda rng, s: np.array(-4)},
                  raw=_roll_raw([]))
        fcase(f"roll_axis_shift_tensor_rank{_r}", {**_x(_r, "float32"), "s": ((), "int64")},
              ["roll"], lambda p, x, s: p.roll(x, s, axis=-1),
              values={"s": lambda rng, s: np.array(5)}, raw=_roll_raw([-1]))
        for _dt in ("float32", "int32", "int64"):
            fcase(f"gather_index_n1_rank{_r}_{_dt}", {**_x(_r, _dt), "i": ((3, 1), "int64")},
                  ["gather"], lambda p, x, i: p.gather(x, i),
                  values={"i": lambda rng, s: np.array([[1], [0], [1]])})
    for _dt, _bound_dt in (("int32", "int32"), ("int64", "int32"), ("float64", "float64")):
        fcase(f"clip_tensor_bounds_rank{_r}_{_dt}",
              {**_x(_r, _dt), "lo": ((1,), _bound_dt), "hi": ((1,), _bound_dt)}, ["clip"],
              lambda p, x, lo, hi: p.clip(x, lo, hi),
              values={"x": lambda rng, s: rng.randint(-5, 6, s), "lo": lambda rng, s: [-2],
                      "hi": lambda rng, s: [3]}, opsets=(7, 11, 13))
    for _dt in ("int32", "int64", "float64"):
        fcase(f"pow_rank{_r}_{_dt}", _x(_r, _dt), ["pow"], lambda p, x: p.pow(x, 2),
              values={"x": lambda rng, s: rng.randint(-5, 6, s)}, opsets=(7, 12, 15))
        fcase(f"floor_divide_rank{_r}_{_dt}", {**_x(_r, _dt), "y": (SHAPE[:_r], _dt)},
              ["elementwise_floordiv"], lambda p, x, y: p.floor_divide(x, y),
              values={"x": lambda rng, s: rng.randint(-9, 10, s),
                      "y": lambda rng, s: rng.choice([-3, -2, -1, 1, 2, 3], s)},
              opsets=(7, 11, 17))

fcase("floor_divide_examples", {"x": ((6,), "int32"), "y": ((6,), "int32")},
      ["elementwise_floordiv"], lambda p, x, y: p.floor_divide(x, y),
      values={"x": lambda rng, s: np.array([-3, 3, -3, 3, -4, 0]),
              "y": lambda rng, s: np.array([2, 2, -2, -2, 2, -5])})

# squeeze with axes Paddle computes at run time (a tensor derived from the input)
fcase("squeeze_computed_axes", {"x": ((None, 1, 4, 1), "float32")}, ["squeeze2"],
      lambda p, x: p.squeeze(x, axis=p.shape(x)[1] + 2), formats=("pir",),
      opsets=(13, 17))

# float64 pools: AveragePool has no float64 kernel in onnxruntime; MaxPool none before opset 8
_IMG64 = {"x": ((None, 3, 7, 7), "float64")}
for _name, _layer in {
    "avg": lambda p: p.nn.AvgPool2D(3, stride=2, padding=1),
    "avg_ceil_inclusive": lambda p: p.nn.AvgPool2D(2, stride=2, ceil_mode=True, exclusive=False),
    "max": lambda p: p.nn.MaxPool2D(2),
    "adaptive_avg": lambda p: p.nn.AdaptiveAvgPool2D(3),
    "global_avg": lambda p: p.nn.AdaptiveAvgPool2D(1),
}.items():
    case(f"pool2d_float64_{_name}", _IMG64, ["pool2d"], opsets=(7, 11, 17))(
        lambda paddle, f=_layer: f(paddle))
case("pool3d_float64_avg", {"x": ((None, 2, 4, 5, 5), "float64")}, ["pool3d"],
     opsets=(7, 11))(lambda paddle: paddle.nn.AvgPool3D(2, stride=2))


def _yolo_float64(paddle):
    from opcase_layers import fn_layer
    return fn_layer(paddle, lambda x, im: paddle.vision.ops.yolo_box(
        x, im, anchors=[10, 13, 16, 30, 33, 23], class_num=2, conf_thresh=0.5,
        downsample_ratio=8, clip_bbox=True))


case("yolo_box_float64", {"x": ((None, 21, 5, 6), "float64"), "im": ((None, 2), "int32")},
     ["yolo_box"], values={"im": lambda rng, s: np.asarray([[320, 416], [256, 200]])[:s[0]]},
     opsets=(9, 11, 17))(_yolo_float64)
