"""Op cases for comparisons, logical and bitwise ops, where and nonzero
(paddle_npu/mappers/logic.py)."""
from opcase_layers import fcase

TWO = {"x": ((None, 3, 4), "float32"), "y": ((None, 3, 4), "float32")}
BCAST = {"x": ((None, 3, 4), "float32"), "y": ((4,), "float32")}
INTS = {"x": ((None, 3, 4), "int64"), "y": ((None, 3, 4), "int64")}
# small integers so that equal values occur
_SMALL = {"x": lambda rng, s: rng.randint(0, 3, s), "y": lambda rng, s: rng.randint(0, 3, s)}


def _binary_raw(op_type, out_dtype="bool"):
    return (op_type, {"X": ["x"], "Y": ["y"]}, {"Out": (1, out_dtype)}, {})


_CMP = {"equal": "equal", "not_equal": "not_equal", "less_than": "less_than",
        "less_equal": "less_equal", "greater_than": "greater_than",
        "greater_equal": "greater_equal"}
for _fname, _op in _CMP.items():
    # paddle.greater_than raises in legacy static mode (the `>` operator does not)
    _raw = _binary_raw(_op) if _op == "greater_than" else None
    fcase(f"cmp_{_fname}", TWO, [_op], lambda p, x, y, f=_fname: getattr(p, f)(x, y),
          values=_SMALL, opsets=(7, 11, 12, 17), raw=_raw)
    fcase(f"cmp_{_fname}_int", INTS, [_op], lambda p, x, y, f=_fname: getattr(p, f)(x, y),
          values=_SMALL, opsets=(7, 11, 17), raw=_raw)
    fcase(f"cmp_{_fname}_bcast", BCAST, [_op], lambda p, x, y, f=_fname: getattr(p, f)(x, y),
          values=_SMALL, raw=_raw)
fcase("cmp_scalar_ne", {"ids": ((None, 6), "int64")}, ["not_equal"],
      lambda p, ids: (ids != 0).astype("float32"),
      values={"ids": lambda rng, s: rng.randint(0, 3, s)})
fcase("cmp_scalar_gt", {"x": ((None, 6), "float32")}, ["greater_than"], lambda p, x: x > 0.5)

BOOLS = {"x": ((None, 3, 4), "bool"), "y": ((None, 3, 4), "bool")}
for _op in ("logical_and", "logical_or", "logical_xor"):
    fcase(_op, BOOLS, [_op], lambda p, x, y, f=_op: getattr(p, f)(x, y),
          raw=_binary_raw(_op))
    fcase(f"{_op}_float", TWO, [_op], lambda p, x, y, f=_op: getattr(p, f)(x, y),
          values={"x": lambda rng, s: rng.choice([0.0, 1.5], s),
                  "y": lambda rng, s: rng.choice([0.0, -2.0], s)}, raw=_binary_raw(_op))
fcase("logical_not", {"x": ((None, 3, 4), "bool")}, ["logical_not"], lambda p, x: p.logical_not(x),
      raw=("logical_not", {"X": ["x"]}, {"Out": 1}, {}))

I32 = {"x": ((None, 3, 4), "int32"), "y": ((None, 3, 4), "int32")}
_ANYINT = {"x": lambda rng, s: rng.randint(-100, 100, s),
           "y": lambda rng, s: rng.randint(-100, 100, s)}
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    fcase(f"{_op}_int", I32, [_op], lambda p, x, y, f=_op: getattr(p, f)(x, y), values=_ANYINT,
          opsets=(18,))
    fcase(f"{_op}_bool", BOOLS, [_op], lambda p, x, y, f=_op: getattr(p, f)(x, y))
fcase("bitwise_not_int", {"x": ((None, 3, 4), "int64")}, ["bitwise_not"],
      lambda p, x: p.bitwise_not(x), values=_ANYINT, opsets=(18,))
fcase("bitwise_not_bool", {"x": ((None, 3, 4), "bool")}, ["bitwise_not"],
      lambda p, x: p.bitwise_not(x))

fcase("where", TWO, ["where"], lambda p, x, y: p.where(x > y, x, y), opsets=(9, 11, 17))
fcase("where_bcast", {"x": ((None, 3, 4), "float32"), "y": ((1, 4), "float32")}, ["where"],
      lambda p, x, y: p.where(x > 0, x, y))
fcase("where_int", INTS, ["where"], lambda p, x, y: p.where(x > y, x - y, y), values=_SMALL)
fcase("nonzero", {"x": ((None, 3, 4), "float32")}, ["where_index"],
      lambda p, x: p.nonzero(x > 0.5), opsets=(9, 11, 17))
fcase("nonzero_int", {"x": ((None, 5), "int64")}, ["where_index"], lambda p, x: p.nonzero(x),
      values={"x": lambda rng, s: rng.randint(0, 2, s)})
