"""Op cases for reductions, arg max/min, top-k, cumsum and norms (paddle_npu/mappers/reduce.py).

Paddle 3's paddle.sum / argmax / all / any / amax / logsumexp raise in legacy static mode,
so their legacy programs are built by hand (`raw`) with the attributes the old APIs set."""
from opcase_harness import CASES, case
from opcase_layers import fcase

X4 = {"x": ((None, 3, 4, 5), "float32")}
XB = {"x": ((None, 3, 4), "bool")}
NEAR1 = {"x": lambda rng, s: rng.uniform(0.7, 1.3, s)}


def _reduce_raw(op_type, dim, keep=False, reduce_all=False, out=None, **extra):
    attrs = {"dim": dim, "keep_dim": keep, "reduce_all": reduce_all, **extra}
    return (op_type, {"X": ["x"]}, {"Out": out or 1}, attrs)


# --- sum / mean / max / min / prod -------------------------------------------------------
fcase("sum_axis_keep", X4, ["reduce_sum"], lambda p, x: p.sum(x, axis=1, keepdim=True),
      raw=_reduce_raw("reduce_sum", [1], keep=True), opsets=(11, 13, 17))
fcase("sum_all", X4, ["reduce_sum"], lambda p, x: p.sum(x),
      raw=_reduce_raw("reduce_sum", [], reduce_all=True), opsets=(11, 13))
fcase("sum_neg_axes", X4, ["reduce_sum"], lambda p, x: p.sum(x, axis=[-1, 1]),
      raw=_reduce_raw("reduce_sum", [-1, 1]), opsets=(11, 13))
fcase("sum_int32_to_int64", {"x": ((None, 3, 4), "int32")}, ["reduce_sum"],
      lambda p, x: p.sum(x, axis=-1),
      raw=_reduce_raw("reduce_sum", [-1], out=(1, "int64"), out_dtype=3))
fcase("sum_bool", XB, ["reduce_sum"], lambda p, x: p.sum(x, axis=1),
      raw=_reduce_raw("reduce_sum", [1], out=(1, "int64"), out_dtype=3))
fcase("sum_dtype_arg", X4, ["reduce_sum"], lambda p, x: p.sum(x, axis=2, dtype="float64"),
      raw=_reduce_raw("reduce_sum", [2], out=(1, "float64"), out_dtype=6))
fcase("mean_axes", X4, ["reduce_mean"], lambda p, x: p.mean(x, axis=[1, 2]),
      opsets=(11, 17, 18))
fcase("mean_all", X4, ["reduce_mean"], lambda p, x: p.mean(x), opsets=(11, 18))
fcase("mean_keep", X4, ["reduce_mean"], lambda p, x: p.mean(x, axis=-1, keepdim=True),
      opsets=(11, 18))
fcase("max_axis_keep", X4, ["reduce_max"], lambda p, x: p.max(x, axis=-1, keepdim=True),
      opsets=(11, 18))
fcase("max_all", X4, ["reduce_max"], lambda p, x: p.max(x))
fcase("max_int64", {"x": ((None, 6), "int64")}, ["reduce_max"], lambda p, x: p.max(x, axis=1))
fcase("min_axis", X4, ["reduce_min"], lambda p, x: p.min(x, axis=2), opsets=(11, 18))
fcase("prod_axis", X4, ["reduce_prod"], lambda p, x: p.prod(x, axis=1), values=NEAR1,
      opsets=(11, 18))
fcase("prod_all_keep", X4, ["reduce_prod"], lambda p, x: p.prod(x, keepdim=True),
      values=NEAR1, tolerance=1e-4)
fcase("amax", X4, ["reduce_amax"], lambda p, x: p.amax(x, axis=[1, 3]),
      raw=_reduce_raw("reduce_amax", [1, 3]))
fcase("amin_keep", X4, ["reduce_amin"], lambda p, x: p.amin(x, axis=2, keepdim=True),
      raw=_reduce_raw("reduce_amin", [2], keep=True))

# --- all / any ---------------------------------------------------------------------------------
_BOOLS = {"x": lambda rng, s: rng.uniform(size=s) > 0.3}
fcase("all_axis", XB, ["reduce_all"], lambda p, x: p.all(x, axis=1), values=_BOOLS,
      raw=_reduce_raw("reduce_all", [1]))
fcase("all_everything", XB, ["reduce_all"], lambda p, x: p.all(x),
      values={"x": lambda rng, s: rng.uniform(size=s) > 0.01},
      raw=_reduce_raw("reduce_all", [], reduce_all=True))
fcase("any_axes_keep", XB, ["reduce_any"], lambda p, x: p.any(x, axis=[1, 2], keepdim=True),
      values={"x": lambda rng, s: rng.uniform(size=s) > 0.9},
      raw=_reduce_raw("reduce_any", [1, 2], keep=True), opsets=(11, 18))
fcase("any_float_input", {"x": ((None, 4), "float32")}, ["reduce_any"],
      lambda p, x: p.any(x, axis=-1),
      values={"x": lambda rng, s: rng.choice([0.0, 0.0, 0.0, 1.5], s)}, batch=6,
      raw=_reduce_raw("reduce_any", [-1], out=(1, "bool")))

# --- logsumexp, norms -------------------------------------------------------------------------
fcase("logsumexp_axis", X4, ["logsumexp"], lambda p, x: p.logsumexp(x, axis=1),
      raw=("logsumexp", {"X": ["x"]}, {"Out": 1},
           {"axis": [1], "keepdim": False, "reduce_all": False}), opsets=(11, 18))
fcase("logsumexp_all", X4, ["logsumexp"], lambda p, x: p.logsumexp(x),
      raw=("logsumexp", {"X": ["x"]}, {"Out": 1},
           {"axis": [], "keepdim": False, "reduce_all": True}))
for _name, (_p, _axis, _keep) in {
    "l2": (2, 1, False), "l1_keep": (1, -1, True), "inf": (float("inf"), 2, False),
    "neg_inf": (float("-inf"), 1, False), "p3": (3, 1, True), "p0": (0, -1, False),
}.items():
    fcase(f"p_norm_{_name}", X4, ["p_norm"],
          lambda p, x, q=_p, a=_axis, k=_keep: p.norm(x, p=q, axis=a, keepdim=k),
          values={"x": lambda rng, s: rng.choice([0.0, 0.5, -1.25, 2.0], s)}
          if _p == 0 else {}, opsets=(11, 18))
fcase("p_norm_vector", X4, ["p_norm"], lambda p, x: p.linalg.vector_norm(x, p=2))
fcase("frobenius_norm", X4, ["frobenius_norm"],
      lambda p, x: p.linalg.norm(x, "fro", axis=[1, 2]),
      raw=("frobenius_norm", {"X": ["x"]}, {"Out": 1},
           {"dim": [1, 2], "keep_dim": False, "reduce_all": False}), opsets=(11, 18))

# --- arg max / min ----------------------------------------------------------------------------
def _arg_raw(op_type, axis, keep=False, flatten=False, dtype=3):
    return (op_type, {"X": ["x"]}, {"Out": (1, "int64" if dtype == 3 else "int32")},
            {"axis": axis, "keepdims": keep, "flatten": flatten, "dtype": dtype})


fcase("argmax_axis", X4, ["arg_max"], lambda p, x: p.argmax(x, axis=1),
      raw=_arg_raw("arg_max", 1))
fcase("argmax_keep_int32", X4, ["arg_max"],
      lambda p, x: p.argmax(x, axis=-1, keepdim=True, dtype="int32"),
      raw=_arg_raw("arg_max", -1, keep=True, dtype=2))
fcase("argmax_flatten", X4, ["arg_max"], lambda p, x: p.argmax(x),
      raw=_arg_raw("arg_max", 0, flatten=True))
fcase("argmin_axis", X4, ["arg_min"], lambda p, x: p.argmin(x, axis=2),
      raw=_arg_raw("arg_min", 2))
fcase("argmin_flatten_keep", X4, ["arg_min"], lambda p, x: p.argmin(x, keepdim=True),
      raw=_arg_raw("arg_min", 0, keep=True, flatten=True))
fcase("argmax_ties", {"x": ((None, 6), "float32")}, ["arg_max"], lambda p, x: p.argmax(x, 1),
      values={"x": lambda rng, s: rng.randint(0, 2, s)}, raw=_arg_raw("arg_max", 1), batch=5)

# --- top-k ------------------------------------------------------------------------------------
fcase("topk_axis1", X4, ["top_k_v2"], lambda p, x: p.topk(x, 2, axis=1))
fcase("topk_last", X4, ["top_k_v2"], lambda p, x: p.topk(x, 3))
# sorted=False leaves the order to the implementation: compare what was picked, not its order
fcase("topk_unsorted", X4, ["top_k_v2"],
      lambda p, x: [p.mean(t.astype("float32"), axis=1)
                    for t in p.topk(x, 2, axis=1, sorted=False)])
fcase("topk_smallest", X4, ["top_k_v2"], lambda p, x: p.topk(x, 2, axis=2, largest=False))
fcase("topk_k_tensor", {"x": ((None, 6), "float32"), "k": ((1,), "int32")}, ["top_k_v2"],
      lambda p, x, k: p.topk(x, k), values={"k": lambda rng, s: [3]})
case("top_k_v1", X4, ["top_k"], formats=("legacy",),
     raw=("top_k", {"X": ["x"]}, {"Out": 1, "Indices": (1, "int64")}, {"k": 2}))(None)

# --- cumsum -----------------------------------------------------------------------------------
fcase("cumsum_axis", X4, ["cumsum"], lambda p, x: p.cumsum(x, axis=1))
fcase("cumsum_neg_axis", X4, ["cumsum"], lambda p, x: p.cumsum(x, axis=-1))
fcase("cumsum_flatten", X4, ["cumsum"], lambda p, x: p.cumsum(x))
fcase("cumsum_int64", {"x": ((None, 6), "int64")}, ["cumsum"], lambda p, x: p.cumsum(x, 1))
for _name, (_ex, _rev) in {"exclusive": (True, False), "reverse": (False, True),
                           "exclusive_reverse": (True, True)}.items():
    fcase(f"cumsum_{_name}", X4, ["cumsum"],
          lambda p, x, e=_ex, r=_rev: p._C_ops.cumsum(x, 2, False, e, r),
          raw=("cumsum", {"X": ["x"]}, {"Out": 1},
               {"axis": 2, "flatten": False, "exclusive": _ex, "reverse": _rev}))

# The reductions, arg max/min and norms also at opset 7 (axes as attributes).
for _name in ("sum_axis_keep", "sum_all", "mean_axes", "max_all", "prod_axis", "all_axis",
              "argmax_axis", "argmax_flatten", "p_norm_l2", "p_norm_p3", "p_norm_p0"):
    CASES[_name].opsets = (7,) + tuple(CASES[_name].opsets)
