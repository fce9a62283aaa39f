"""Op cases for matrix_nms (paddle_npu/mappers/detection.py): overlapping boxes and distinct
scores, so which detections survive and their decayed scores are fixed by Paddle's rules."""
import numpy as np

from opcase_harness import case


def _boxes(rng, shape, size=(5, 30)):
    xy = rng.uniform(0, 60, shape[:-1] + (2,))
    wh = rng.uniform(*size, shape[:-1] + (2,))
    return np.concatenate([xy, xy + wh], -1)


def _pixel_boxes(rng, shape):
    """Boxes 1-4 pixels wide, where the +1 of unnormalised IoU matters."""
    xy = rng.uniform(0, 12, shape[:-1] + (2,))
    return np.concatenate([xy, xy + rng.uniform(1, 4, shape[:-1] + (2,))], -1)


def _scores(rng, shape):   # distinct: no ties to order
    return (rng.permutation(int(np.prod(shape))).reshape(shape) + 0.5) / np.prod(shape)


_IN = {"bboxes": ((None, 30, 4), "float32"), "scores": ((None, 3, 30), "float32")}
_OUTS = {"Out": 1, "Index": (1, "int32"), "RoisNum": (1, "int32")}
_ATTRS = dict(score_threshold=0.3, post_threshold=0.2, nms_top_k=12, keep_top_k=10,
              use_gaussian=False, gaussian_sigma=2.0, background_label=0, normalized=True)


def _layer(paddle, a):
    class MatrixNMS(paddle.nn.Layer):
        def forward(self, bboxes, scores):
            out, num, index = paddle.vision.ops.matrix_nms(
                bboxes, scores, a["score_threshold"], a["post_threshold"], a["nms_top_k"],
                a["keep_top_k"], use_gaussian=a["use_gaussian"],
                gaussian_sigma=a["gaussian_sigma"], background_label=a["background_label"],
                normalized=a["normalized"], return_index=True, return_rois_num=True)
            return out, index, num
    return MatrixNMS()


for _name, _kw in [
    ("linear", {}),
    ("gaussian", dict(use_gaussian=True, gaussian_sigma=1.5)),
    ("no_limits_no_background", dict(nms_top_k=-1, keep_top_k=-1, background_label=-1)),
    ("unnormalized", dict(normalized=False, background_label=1)),
    ("nothing_kept", dict(score_threshold=1.5)),
]:
    _attrs = dict(_ATTRS, **_kw)
    case(f"matrix_nms_{_name}", _IN, ["matrix_nms"], opsets=(12, 17),
         values={"bboxes": _pixel_boxes if _name == "unnormalized" else _boxes,
                 "scores": _scores},
         raw=("matrix_nms", {"BBoxes": ["bboxes"], "Scores": ["scores"]}, _OUTS, _attrs))(
        lambda paddle, a=_attrs: _layer(paddle, a))
