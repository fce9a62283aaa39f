"""Op cases for eye, empty, random fills, the old expand, repeat_interleave, tril/triu and
partial concat/sum (paddle_npu/mappers/creation.py, tensor.py). Random ops are compared by
shape, dtype and distribution (onnxruntime's generator is not Paddle's); empty by shape and
dtype (Paddle leaves it uninitialised)."""
import numpy as np

from opcase_harness import case
from opcase_layers import fcase

X = {"x": ((None, 4, 5), "float32")}

fcase("eye", X, ["eye"], lambda p, x: p.eye(3, 5) + x[0, :3, :])
# (x * 1 is there because Paddle will not save a program that ignores its input)
fcase("eye_square_int", X, ["eye"], lambda p, x: (x * 1, p.eye(4, dtype="int64")))
fcase("empty_fixed", X, ["empty"], lambda p, x: (x * 1, p.empty([3, 2], "float32")),
      compare="shape")
fcase("empty_computed_shape", X, ["empty"], lambda p, x: p.empty(p.shape(x), "int32"),
      compare="shape")
fcase("uniform_fixed", X, ["uniform_random"],
      lambda p, x: (x * 1, p.uniform([64, 64], min=-2.0, max=3.0, seed=7)),
      compare="distribution")
fcase("uniform_computed_shape", {"x": ((None, 64, 32), "float32")}, ["uniform_random"],
      lambda p, x: p.uniform(p.shape(x), dtype="float64", min=0.0, max=1.0, seed=3),
      compare="distribution")
fcase("gaussian_fixed", X, ["gaussian_random"],
      lambda p, x: (x * 1, p.tensor.random.gaussian([64, 64], mean=1.5, std=0.5, seed=11)),
      compare="distribution")
fcase("gaussian_computed_shape", {"x": ((None, 64, 32), "float32")}, ["gaussian_random"],
      lambda p, x: p.tensor.random.gaussian(p.shape(x), mean=-1.0, std=2.0, seed=5),
      compare="distribution")

case("expand_old", X, ["expand"], formats=("legacy",),
     raw=("expand", {"X": ["x"]}, {"Out": 1}, {"expand_times": [1, 2, 3]}))(None)

fcase("repeat_interleave_int", X, ["repeat_interleave"],
      lambda p, x: p.repeat_interleave(x, 3, axis=1))
fcase("repeat_interleave_last", X, ["repeat_interleave"],   # (axis=-1 aborts Paddle 3.3)
      lambda p, x: p.repeat_interleave(x, 2, axis=2))
fcase("repeat_interleave_counts", {"x": ((None, 4, 5), "float32"), "r": ((4,), "int64")},
      ["repeat_interleave"], lambda p, x, r: p.repeat_interleave(x, r, axis=1),
      values={"r": lambda rng, s: np.array([2, 0, 3, 1])})

for _name, _lower, _k in (("tril", True, 0), ("triu", False, 0), ("tril_k1", True, 1),
                          ("triu_neg2", False, -2)):
    for _dt in ("float32", "int32", "bool"):
        fcase(f"{_name}_{_dt}", {"x": ((None, 4, 5), _dt)}, ["tril_triu"],
              lambda p, x, lo=_lower, k=_k: (p.tril if lo else p.triu)(x, k), opsets=(11, 14, 17),
              raw=("tril_triu", {"X": ["x"]}, {"Out": 1}, {"lower": _lower, "diagonal": _k}))

_PARTS = {"a": ((None, 5), "float32"), "b": ((None, 5), "float32")}
for _op in ("partial_concat", "partial_sum"):
    for _start, _len in ((1, 3), (2, -1)):
        case(f"{_op}_{_start}_{_len}", _PARTS, [_op], formats=("legacy",),
             raw=(_op, {"X": ["a", "b"]}, {"Out": 1}, {"start_index": _start, "length": _len}))(None)
