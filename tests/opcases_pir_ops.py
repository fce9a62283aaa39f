"""Op cases in PIR form for ops Paddle 3.x models carry that the zoo's legacy-era layers do
not: masked_fill, swiglu and fused_rms_norm (PaddleX 3's transformer blocks; the last has no
legacy name at all), put_along_axis, index_put, addmm, logit, trunc. Found by exporting
PaddleX-style layers with the new IR and listing what the PIR reader left unmapped."""
import numpy as np

from opcase_harness import case
from opcase_layers import fcase

PIR = dict(formats=("pir",))
X = {"x": ((None, 4, 6), "float32")}


def _fused_rms_norm(p):
    return p.incubate.nn.functional.fused_rms_norm


def _weights(p, n, seed):
    return p.to_tensor(np.random.RandomState(seed).uniform(0.5, 1.5, n).astype("float32"))


# --- masked_fill ---------------------------------------------------------------------------
fcase("masked_fill_scalar", {"x": ((None, 4, 6), "float32"), "m": ((None, 4, 6), "bool")},
      ["masked_fill"], lambda p, x, m: p.masked_fill(x, m, -1.5), **PIR)
fcase("masked_fill_broadcast_mask", {"x": ((None, 4, 6), "float32"), "m": ((6,), "bool")},
      ["masked_fill"], lambda p, x, m: p.masked_fill(x, m, p.to_tensor(3.0)), **PIR)
fcase("masked_fill_int64", {"x": ((None, 4, 6), "int64"), "m": ((None, 4, 6), "bool")},
      ["masked_fill"], lambda p, x, m: p.masked_fill(x, m, 7), **PIR)

# --- swiglu, fused_rms_norm -------------------------------------------------------------------
fcase("swiglu_halves", X, ["swiglu"], lambda p, x: p.incubate.nn.functional.swiglu(x), **PIR)
fcase("swiglu_two_inputs", {"x": ((None, 4, 6), "float32"), "y": ((None, 4, 6), "float32")},
      ["swiglu"], lambda p, x, y: p.incubate.nn.functional.swiglu(x, y), **PIR)
fcase("fused_rms_norm", X, ["fused_rms_norm_quant"],
      lambda p, x: _fused_rms_norm(p)(x, _weights(p, 6, 1), None, 1e-6, 2)[0], **PIR)
fcase("fused_rms_norm_bias_residual", {"x": ((None, 4, 6), "float32"),
                                       "r": ((None, 4, 6), "float32")},
      ["fused_rms_norm_quant"],
      lambda p, x, r: _fused_rms_norm(p)(x, _weights(p, 6, 2), _weights(p, 6, 3), 1e-5, 2,
                                         residual=r), **PIR)
fcase("fused_rms_norm_two_axes", X, ["fused_rms_norm_quant"],
      lambda p, x: _fused_rms_norm(p)(x, _weights(p, 24, 4), None, 1e-6, 1)[0], **PIR)

# --- put_along_axis, index_put ----------------------------------------------------------------
_ROW_PAIRS = {"i": lambda rng, s: np.broadcast_to(np.array([4, 1]), s)}
fcase("put_along_axis_assign", {"x": ((2, 4, 6), "float32"), "i": ((2, 4, 2), "int64"),
                                "v": ((2, 4, 2), "float32")}, ["put_along_axis"],
      lambda p, x, i, v: p.put_along_axis(x, i, v, axis=2, broadcast=False),
      values=_ROW_PAIRS, **PIR)
fcase("put_along_axis_add_repeated", {"x": ((2, 4, 6), "float32"), "i": ((2, 4, 3), "int64"),
                                      "v": ((2, 4, 3), "float32")}, ["put_along_axis"],
      lambda p, x, i, v: p.put_along_axis(x, i, v, axis=2, reduce="add", broadcast=False),
      values={"i": lambda rng, s: np.broadcast_to(np.array([2, 5, 2]), s)}, opsets=(16, 17), **PIR)
fcase("index_put_rows", {"x": ((None, 6), "float32"), "v": ((6,), "float32")}, ["index_put"],
      lambda p, x, v: p.index_put(x, (p.to_tensor([0, 1]),), v), **PIR)
fcase("index_put_points_accumulate", {"x": ((3, 6), "float32"), "v": ((4,), "float32")},
      ["index_put"],
      lambda p, x, v: p.index_put(x, (p.to_tensor([0, 2, 0, 1]), p.to_tensor([5, 1, 5, 0])), v,
                                  accumulate=True), opsets=(16, 17), **PIR)

# index_put with one boolean mask: x[mask] = value, the mask over x's leading dims. Paddle
# reads the mask as the integer indices of its true positions, so value broadcasts to
# [count of trues] + the dims the mask leaves; masks computed from the data, as in layout models.
_XM = {"x": ((None, 4, 6), "float32")}
fcase("index_put_mask_computed_scalar", _XM, ["index_put"],
      lambda p, x: p.index_put(x, (x > 0.5,), p.to_tensor(-1.0)), **PIR)
fcase("index_put_mask_leading_dims_row", {**_XM, "v": ((6,), "float32")}, ["index_put"],
      lambda p, x, v: p.index_put(x, (x.sum(-1) > 0,), v), **PIR)
fcase("index_put_mask_first_dim", {"x": ((5, 4, 6), "float32"), "v": ((1,), "float32")},
      ["index_put"], lambda p, x, v: p.index_put(x, (x[:, 0, 0] > 0,), v), **PIR)
fcase("index_put_mask_input", {**_XM, "m": ((None, 4), "bool"), "v": ((1, 6), "float32")},
      ["index_put"], lambda p, x, m, v: p.index_put(x, (m,), v), **PIR)
fcase("index_put_mask_one_value_per_true", {**_XM, "y": ((None, 4, 6), "float32")},
      ["index_put"],
      lambda p, x, y: p.index_put(x, (y > 0,), p.masked_select(y, y > 0) * 3.0), **PIR)
fcase("index_put_mask_accumulate", {**_XM, "v": ((6,), "float32")}, ["index_put"],
      lambda p, x, v: p.index_put(x, (x.mean(-1) < 0,), v, accumulate=True),
      opsets=(16, 17), **PIR)
fcase("index_put_mask_int64", {"x": ((None, 4, 6), "int64")}, ["index_put"],
      lambda p, x: p.index_put(x, (x > 2,), p.to_tensor(9, "int64")), **PIR)


def _mask_setitem(paddle):
    class MaskSetItem(paddle.nn.Layer):
        def forward(self, x):
            y = x * 1.0
            y[y < 0] = 0.0                  # what x[mask] = v becomes in a to_static forward
            return y
    return MaskSetItem()


case("index_put_mask_setitem", _XM, ["index_put"], **PIR)(_mask_setitem)

# --- addmm, logit, trunc --------------------------------------------------------------------
fcase("addmm_scaled", {"c": ((3, 5), "float32"), "a": ((3, 4), "float32"),
                       "b": ((4, 5), "float32")}, ["addmm"],
      lambda p, c, a, b: p.addmm(c, a, b, beta=0.5, alpha=2.0), **PIR)
fcase("addmm_broadcast_input", {"c": ((5,), "float32"), "a": ((3, 4), "float32"),
                                "b": ((4, 5), "float32")}, ["addmm"],
      lambda p, c, a, b: p.addmm(c, a, b), **PIR)
_PROBS = {"x": lambda rng, s: rng.uniform(0.02, 0.98, s)}
fcase("logit_eps", X, ["logit"], lambda p, x: p.logit(x, 0.1), values=_PROBS, **PIR)
fcase("logit_no_eps", X, ["logit"], lambda p, x: p.logit(x), values=_PROBS, **PIR)
fcase("trunc_float", X, ["trunc"], lambda p, x: p.trunc(x * 3.0), **PIR)
fcase("trunc_int32", {"x": ((None, 4, 6), "int32")}, ["trunc"], lambda p, x: p.trunc(x), **PIR)

# --- cumprod, median ------------------------------------------------------------------------
fcase("cumprod", X, ["cumprod"], lambda p, x: p.cumprod(x, 2), **PIR)
fcase("cumprod_int64", {"x": ((None, 4, 6), "int64")}, ["cumprod"],
      lambda p, x: p.cumprod(x, 1), values={"x": lambda rng, s: rng.randint(-3, 4, s)}, **PIR)
fcase("median_even_avg", X, ["median"], lambda p, x: p.median(x, axis=-1), **PIR)
fcase("median_odd_keepdim", {"x": ((None, 5, 6), "float32")}, ["median"],
      lambda p, x: p.median(x, axis=1, keepdim=True), **PIR)
fcase("median_even_min_with_index", X, ["median"],   # mode 'min' returns (values, indices)
      lambda p, x: p.median(x, axis=2, mode="min"), **PIR)
fcase("median_odd_min", {"x": ((None, 5, 6), "float32")}, ["median"],
      lambda p, x: p.median(x, axis=1, mode="min")[0], **PIR)
fcase("median_all", {"x": ((2, 4, 6), "float32")}, ["median"], lambda p, x: p.median(x), **PIR)
