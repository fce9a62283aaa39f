"""Op cases for scatters, slice assignment, masked selection, index_sample, argsort and unique
(paddle_npu/mappers/scatter.py, sort.py, indexing.py). Data-dependent outputs get inputs whose
answer is known: distinct values to sort, repeated values to make unique."""
import numpy as np

from opcase_harness import case
from opcase_layers import fcase


def _distinct(rng, s):
    return rng.permutation(int(np.prod(s))).reshape(s).astype(np.float64) / 7 - 3


X = {"x": ((None, 4, 5), "float32")}

# --- scatter -------------------------------------------------------------------------------
_ROWS = {"x": ((6, 3), "float32"), "ids": ((4,), "int64"), "upd": ((4, 3), "float32")}
_UNIQUE_IDS = {"ids": lambda rng, s: rng.permutation(6)[:s[0]]}
fcase("scatter_overwrite", _ROWS, ["scatter"], lambda p, x, ids, upd: p.scatter(x, ids, upd),
      values=_UNIQUE_IDS)
fcase("scatter_add_repeated_ids", _ROWS, ["scatter"],
      lambda p, x, ids, upd: p.scatter(x, ids, upd, overwrite=False),
      values={"ids": lambda rng, s: np.array([4, 1, 4, 0])}, opsets=(16, 17))
fcase("scatter_int32_ids", {**_ROWS, "ids": ((4,), "int32")}, ["scatter"],
      lambda p, x, ids, upd: p.scatter(x, ids, upd), values=_UNIQUE_IDS)
_ND = {"x": ((3, 4, 5), "float32"), "idx": ((6, 2), "int64"), "upd": ((6, 5), "float32")}
fcase("scatter_nd_add_repeated", _ND, ["scatter_nd_add"],
      lambda p, x, idx, upd: p.scatter_nd_add(x, idx, upd),
      values={"idx": lambda rng, s: np.array([[0, 1], [2, 3], [0, 1], [1, 0], [2, 3], [0, 1]])},
      opsets=(16, 17))

# --- set_value (x[...] = v in a to_static forward) -------------------------------------------


def _set_value(fn):
    def build(paddle):
        class SetValue(paddle.nn.Layer):
            def forward(self, x):
                y = x * 1.0
                fn(paddle, y)
                return y
        return SetValue()
    return build


for _name, _fn in {
    "scalar_rows": lambda p, y: y.__setitem__((slice(None), slice(1, 3)), 2.5),
    "step_and_negative": lambda p, y: y.__setitem__((slice(None), slice(None), slice(-1, 0, -2)), -1.0),
    "single_index": lambda p, y: y.__setitem__((slice(None), 2), 7.0),
    "tensor_value": lambda p, y: y.__setitem__((slice(None), slice(0, 2), slice(1, 4)),
                                               p.ones([2, 3], "float32") * 3),
    "tensor_value_decreased": lambda p, y: y.__setitem__((slice(None), 1),
                                                         p.arange(5, dtype="float32")),
}.items():
    case(f"set_value_{_name}", X, ["set_value"], opsets=(11, 17))(_set_value(_fn))
case("set_value_int64", {"x": ((None, 4, 5), "int64")}, ["set_value"], opsets=(11, 17))(
    _set_value(lambda p, y: y.__setitem__((slice(None), slice(1, 3)), 9)))

# --- masked_select, index_sample ------------------------------------------------------------
fcase("masked_select", {"x": ((None, 4, 5), "float32"), "m": ((None, 4, 5), "bool")},
      ["masked_select"], lambda p, x, m: p.masked_select(x, m))
fcase("masked_select_broadcast", {"x": ((None, 4, 5), "float32"), "m": ((5,), "bool")},
      ["masked_select"], lambda p, x, m: p.masked_select(x, m),
      values={"m": lambda rng, s: np.array([True, False, True, True, False])})
fcase("index_sample", {"x": ((None, 7), "float32"), "i": ((None, 4), "int64")},
      ["index_sample"], lambda p, x, i: p.index_sample(x, i),
      values={"i": lambda rng, s: rng.randint(0, 7, s)})
fcase("index_sample_int32", {"x": ((None, 7), "float32"), "i": ((None, 3), "int32")},
      ["index_sample"], lambda p, x, i: p.index_sample(x, i),
      values={"i": lambda rng, s: rng.randint(0, 7, s)})

# --- argsort, unique -----------------------------------------------------------------------
fcase("argsort_last", X, ["argsort"], lambda p, x: p.argsort(x), values={"x": _distinct})
fcase("argsort_axis1_desc", X, ["argsort"], lambda p, x: p.argsort(x, axis=1, descending=True),
      values={"x": _distinct})
fcase("sort_values", X, ["argsort"], lambda p, x: p.sort(x, axis=0), values={"x": _distinct})
_REPEATS = {"x": lambda rng, s: rng.randint(0, 6, s)}
fcase("unique_all_outputs", {"x": ((None, 6), "int64")}, ["unique"],
      lambda p, x: p.unique(x, return_index=True, return_inverse=True, return_counts=True),
      values=_REPEATS)
fcase("unique_float", {"x": ((None, 6), "float32")}, ["unique"], lambda p, x: p.unique(x),
      values=_REPEATS)
fcase("unique_axis0_int32_counts", {"x": ((5, 3), "int64")}, ["unique"],
      lambda p, x: p.unique(x, axis=0, return_counts=True, dtype="int32"),
      values={"x": lambda rng, s: rng.randint(0, 2, s)})
