"""Op cases for softmax_with_cross_entropy (paddle_npu/mappers/loss.py)."""
import numpy as np

from opcase_layers import fcase as _fcase


def fcase(name, inputs, ops, fn, **kw):
    """The op is softmax_with_cross_entropy in legacy programs, cross_entropy_with_softmax
    in PIR ones: one case per format."""
    _fcase(name, inputs, ops, fn, formats=("legacy",), **kw)
    _fcase(name + "_pir", inputs, ["cross_entropy_with_softmax"], fn, formats=("pir",), **kw)


_HARD = {"x": ((None, 5), "float32"), "y": ((None, 1), "int64")}
fcase("softmax_ce_hard", _HARD, ["softmax_with_cross_entropy"],
      lambda p, x, y: p.nn.functional.softmax_with_cross_entropy(x, y, return_softmax=True),
      values={"y": lambda rng, s: rng.randint(0, 5, s)}, opsets=(13, 17))
fcase("softmax_ce_ignore_index", _HARD, ["softmax_with_cross_entropy"],
      lambda p, x, y: p.nn.functional.softmax_with_cross_entropy(x, y, ignore_index=2),
      values={"y": lambda rng, s: np.array([[2], [1]])}, opsets=(13, 17))
fcase("softmax_ce_soft_axis1", {"x": ((None, 4, 3), "float32"), "y": ((None, 4, 3), "float32")},
      ["softmax_with_cross_entropy"],
      lambda p, x, y: p.nn.functional.softmax_with_cross_entropy(x, y, soft_label=True, axis=1),
      values={"y": lambda rng, s: rng.dirichlet(np.ones(4), (s[0], s[2])).transpose(0, 2, 1)},
      opsets=(13, 17))
# probabilities in, no softmax: paddle.nn.functional.cross_entropy(use_softmax=False)
fcase("cross_entropy_probabilities", {"x": ((None, 5), "float32"), "y": ((None, 1), "int64")},
      ["softmax_with_cross_entropy"],
      lambda p, x, y: p.nn.functional.cross_entropy(p.nn.functional.softmax(x), y,
                                                    use_softmax=False, reduction="none"),
      values={"y": lambda rng, s: rng.randint(0, 5, s)}, opsets=(13, 17))
