"""Op cases for the math and activation ops paddle2onnx maps beyond the core set:
inverse and hyperbolic trigonometry, logarithms, shrinks, atan2, NaN/Inf tests, old mean
(paddle_npu/mappers/activation.py, math.py, logic.py, reduce.py).

Paddle 3's functional APIs raise for many of these in legacy static mode, so their legacy
programs are built by hand (`raw`)."""
import numpy as np

from opcase_layers import fcase

X = {"x": ((None, 3, 4), "float32")}


def _unary_raw(op_type, attrs=None, out=1):
    return (op_type, {"X": ["x"]}, {"Out": out}, attrs or {})


def _in(lo, hi):
    return {"x": lambda rng, s: rng.uniform(lo, hi, s)}


for _name, (_op, _fn, _values, _attrs) in {
    "acos": ("acos", lambda p, x: p.acos(x), _in(-0.95, 0.95), {}),
    "asin": ("asin", lambda p, x: p.asin(x), _in(-0.95, 0.95), {}),
    "atan": ("atan", lambda p, x: p.atan(x), _in(-4, 4), {}),
    "tan": ("tan", lambda p, x: p.tan(x), _in(-1.2, 1.2), {}),
    "cosh": ("cosh", lambda p, x: p.cosh(x), _in(-3, 3), {}),
    "sinh": ("sinh", lambda p, x: p.sinh(x), _in(-3, 3), {}),
    "log2": ("log2", lambda p, x: p.log2(x), _in(0.05, 9), {}),
    "log10": ("log10", lambda p, x: p.log10(x), _in(0.05, 9), {}),
    "log1p": ("log1p", lambda p, x: p.log1p(x), _in(-0.9, 9), {}),
    "logsigmoid": ("logsigmoid", lambda p, x: p.nn.functional.log_sigmoid(x), _in(-30, 30), {}),
    "mish": ("mish", lambda p, x: p.nn.functional.mish(x), _in(-25, 25), {"threshold": 20.0}),
    "selu": ("selu", lambda p, x: p.nn.functional.selu(x, 1.2, 1.5), None,
             {"scale": 1.2, "alpha": 1.5}),
    "softshrink": ("softshrink", lambda p, x: p.nn.functional.softshrink(x, 0.7), None,
                   {"lambda": 0.7}),
    "tanh_shrink": ("tanh_shrink", lambda p, x: p.nn.functional.tanhshrink(x), None, {}),
    "thresholded_relu": ("thresholded_relu",
                         lambda p, x: p.nn.functional.thresholded_relu(x, 0.4), None,
                         {"threshold": 0.4}),
    "hardtanh": ("brelu", lambda p, x: p.nn.functional.hardtanh(x, -0.5, 1.5), None,
                 {"t_min": -0.5, "t_max": 1.5}),
}.items():
    for _dt in ("float32", "float64"):   # float64: several run in float32 in onnxruntime
        fcase(f"math_{_name}" + ("" if _dt == "float32" else "_float64"),
              {"x": ((None, 3, 4), _dt)}, [_op], _fn, values=_values or {},
              raw=_unary_raw(_op, _attrs),
              opsets=(7, 11, 17) if _op not in ("mish", "softshrink", "thresholded_relu") else
              (9, 11, 17))

_XY = {"x": ((None, 3, 4), "float32"), "y": ((None, 3, 4), "float32")}


def _quadrants(rng, s):
    """Both signs, exact zeros (atan2(0, 0) = 0, atan2(y, 0) = +-pi/2)."""
    v = rng.uniform(-3, 3, s)
    v[rng.uniform(size=s) < 0.2] = 0
    return v


fcase("math_atan2", _XY, ["atan2"], lambda p, x, y: p.atan2(x, y),
      values={"x": _quadrants, "y": _quadrants},
      raw=("atan2", {"X1": ["x"], "X2": ["y"]}, {"Out": 1}, {}))
fcase("math_atan2_float64", {"x": ((None, 5), "float64"), "y": ((None, 5), "float64")},
      ["atan2"], lambda p, x, y: p.atan2(x, y), values={"x": _quadrants, "y": _quadrants},
      raw=("atan2", {"X1": ["x"], "X2": ["y"]}, {"Out": 1}, {}))
fcase("math_atan2_int32", {"x": ((None, 5), "int32"), "y": ((None, 5), "int32")}, ["atan2"],
      lambda p, x, y: p.atan2(x, y),
      values={"x": lambda rng, s: rng.randint(-3, 4, s), "y": lambda rng, s: rng.randint(-3, 4, s)},
      raw=("atan2", {"X1": ["x"], "X2": ["y"]}, {"Out": (1, "float64")}, {}))


def _specials(rng, s):
    """Finite values with NaN, +inf and -inf scattered in."""
    v = rng.uniform(-2, 2, s)
    r = rng.uniform(size=s)
    v[r < 0.15] = np.nan
    v[(r >= 0.15) & (r < 0.3)] = np.inf
    v[(r >= 0.3) & (r < 0.4)] = -np.inf
    return v


for _fn_name, _op in {"isnan": "isnan_v2", "isinf": "isinf_v2", "isfinite": "isfinite_v2"}.items():
    for _dt in ("float32", "float16", "float64", "int32"):
        fcase(f"math_{_fn_name}_{_dt}", {"x": ((None, 3, 4), _dt)}, [_op],
              lambda p, x, f=_fn_name: getattr(p, f)(x),
              values={} if _dt == "int32" else {"x": _specials},
              raw=_unary_raw(_op, out=(1, "bool")), opsets=(11, 17, 20))

# The old `mean` op (every element): legacy programs only, Paddle 3's mean is reduce_mean.
fcase("math_mean_all_elements", X, ["mean"], lambda p, x: p.mean(x),
      raw=_unary_raw("mean"), formats=("legacy",), opsets=(7, 11, 18))
