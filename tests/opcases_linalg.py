"""Op cases for products and norms: bmm, dot, mv, einsum, dist, norm
(paddle_npu/mappers/linalg.py)."""
import numpy as np

from opcase_layers import fcase


def _pair(xs, ys, dtype="float32"):
    return {"x": (xs, dtype), "y": (ys, dtype)}


# paddle.bmm / paddle.dot raise in legacy static mode: those programs are built by hand
_XY_RAW = {"X": ["x"], "Y": ["y"]}
fcase("bmm", _pair((None, 3, 4), (None, 4, 5)), ["bmm"], lambda p, x, y: p.bmm(x, y),
      raw=("bmm", _XY_RAW, {"Out": 1}, {}))
for _name, _shapes, _dt in (("dot_1d", ((6,), (6,)), "float32"),
                            ("dot_2d", ((None, 6), (None, 6)), "float32"),
                            ("dot_int64", ((None, 6), (None, 6)), "int64")):
    fcase(_name, _pair(*_shapes, _dt), ["dot"], lambda p, x, y: p.dot(x, y),
          raw=("dot", _XY_RAW, {"Out": 1}, {}))
fcase("mv", {"x": ((3, 5), "float32"), "y": ((5,), "float32")}, ["mv"],
      lambda p, x, y: p.mv(x, y))
fcase("einsum_matmul", _pair((None, 3, 4), (None, 4, 5)), ["einsum"],
      lambda p, x, y: p.einsum("bij,bjk->bik", x, y), opsets=(12, 17))
fcase("einsum_implicit_transpose", {"x": ((None, 3, 4), "float32")}, ["einsum"],
      lambda p, x: p.einsum("ijk->kji", x), opsets=(12, 17))
fcase("einsum_outer_sum", _pair((4,), (5,)), ["einsum"],
      lambda p, x, y: p.einsum("i,j", x, y), opsets=(12, 17))
for _p in (2.0, 1.0, 3.0, 0.0, float("inf"), float("-inf")):
    _name = {float("inf"): "inf", float("-inf"): "neg_inf"}.get(_p) or str(int(_p))
    fcase(f"dist_p{_name}", _pair((None, 3, 4), (4,)), ["dist"],
          lambda p, x, y, q=_p: p.dist(x, y, q),
          values={"y": lambda rng, s: np.round(rng.uniform(-2, 2, s))},
          raw=("dist", {"X": ["x"], "Y": ["y"]}, {"Out": 1}, {"p": _p}))
fcase("norm_l2_axis1", {"x": ((None, 3, 4), "float32")}, ["norm"],
      lambda p, x: p.nn.functional.normalize(x, axis=1),
      raw=("norm", {"X": ["x"]}, {"Out": 1, "Norm": 1}, {"axis": 1, "epsilon": 1e-10}),
      formats=("legacy",))
