"""Op cases for grid sampling, unpooling, unfold (im2col), temporal shift and deformable
convolution (paddle_npu/mappers/vision.py, nn.py)."""

from opcase_harness import case
from opcase_layers import fcase, fn_layer

IMG = {"x": ((None, 3, 6, 7), "float32")}

# --- grid_sample ---------------------------------------------------------------------------
_GRID = {"x": ((None, 3, 6, 7), "float32"), "g": ((None, 5, 4, 2), "float32")}
_INSIDE_AND_OUT = {"g": lambda rng, s: rng.uniform(-1.2, 1.2, s)}
for _mode in ("bilinear", "nearest"):
    for _pad in ("zeros", "border", "reflection"):
        for _ac in (True, False):
            fcase(f"grid_sample_{_mode}_{_pad}_{'ac' if _ac else 'noac'}", _GRID, ["grid_sampler"],
                  lambda p, x, g, m=_mode, pm=_pad, ac=_ac: p.nn.functional.grid_sample(
                      x, g, mode=m, padding_mode=pm, align_corners=ac),
                  values=_INSIDE_AND_OUT, opsets=(16, 20),
                  raw=("grid_sampler", {"X": ["x"], "Grid": ["g"]}, {"Output": 1},
                       {"mode": _mode, "padding_mode": _pad, "align_corners": _ac}))

# --- max_unpool2d --------------------------------------------------------------------------


def _unpool(paddle, k, s, p, out=None):
    def fn(x):
        y, idx = paddle.nn.functional.max_pool2d(x, k, s, p, return_mask=True)
        return paddle.nn.functional.max_unpool2d(y, idx, k, s, p, output_size=out)
    return fn_layer(paddle, fn)


case("unpool_k2", {"x": ((None, 3, 6, 8), "float32")}, ["unpool"])(
    lambda paddle: _unpool(paddle, 2, 2, 0))
case("unpool_k3_s2_p1", {"x": ((None, 3, 7, 7), "float32")}, ["unpool"])(
    lambda paddle: _unpool(paddle, 3, 2, 1))
case("unpool_output_size", {"x": ((None, 3, 7, 9), "float32")}, ["unpool"])(
    lambda paddle: _unpool(paddle, 2, 2, 0, out=[7, 9]))

# --- unfold --------------------------------------------------------------------------------
for _name, _kw in {"k2": dict(kernel_sizes=2), "k3_s2_p1": dict(kernel_sizes=3, strides=2, paddings=1),
                   "k2x3_pads4_d2": dict(kernel_sizes=[2, 3], paddings=[1, 0, 2, 1], dilations=2)}.items():
    fcase(f"unfold_{_name}", IMG, ["unfold"],
          lambda p, x, kw=_kw: p.nn.functional.unfold(x, **kw))

# --- temporal_shift --------------------------------------------------------------------------
for _ratio in (0.25, 0.125):
    fcase(f"temporal_shift_{_ratio}", {"x": ((None, 8, 3, 4), "float32")}, ["temporal_shift"],
          lambda p, x, r=_ratio: p.nn.functional.temporal_shift(x, seg_num=3, shift_ratio=r),
          batch=6)

# --- deformable_conv -------------------------------------------------------------------------


def _deform(paddle, with_mask, groups=1, deformable_groups=1):
    class Deform(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.vision.ops.DeformConv2D(4, 6, 3, padding=1, groups=groups,
                                                       deformable_groups=deformable_groups)

        def forward(self, x, off, mask):
            return self.conv(x, off, mask if with_mask else None)
    return Deform()


_DCN = {"x": ((None, 4, 5, 5), "float32"), "off": ((None, 18, 5, 5), "float32"),
        "mask": ((None, 9, 5, 5), "float32")}
_OFFSETS = {"off": lambda rng, s: rng.uniform(-1.5, 1.5, s), "mask": lambda rng, s: rng.uniform(0, 1, s)}
case("deformable_conv_mask", _DCN, ["deformable_conv"], values=_OFFSETS, opsets=(19, 21))(
    lambda paddle: _deform(paddle, True))
case("deformable_conv_groups", {**_DCN, "off": ((None, 36, 5, 5), "float32"),
                                "mask": ((None, 18, 5, 5), "float32")},
     ["deformable_conv"], values=_OFFSETS, opsets=(19, 21))(
    lambda paddle: _deform(paddle, True, groups=2, deformable_groups=2))
# The older op without a modulation mask (legacy programs; weights fed as an input here)
case("deformable_conv_v1", {"x": ((2, 4, 5, 5), "float32"), "off": ((2, 18, 5, 5), "float32"),
                            "w": ((6, 4, 3, 3), "float32")},
     ["deformable_conv_v1"], values=_OFFSETS, opsets=(19, 21), formats=("legacy",),
     raw=("deformable_conv_v1", {"Input": ["x"], "Offset": ["off"], "Filter": ["w"]},
          {"Output": 1}, {"strides": [1, 1], "paddings": [1, 1], "dilations": [1, 1], "groups": 1,
                          "deformable_groups": 1, "im2col_step": 1}))(None)
