"""What the vision/detection mappers refuse (check reasons) and what they accept."""
import pytest

from paddle_npu.mappers import get_mapper
from paddle_npu.program import Block, Op, Program, Var


def _op(op_type, inputs, outputs, attrs, shapes):
    """One op in a one-block Program; shapes: var name -> static shape."""
    program = Program(format="legacy", blocks=[])
    block = Block(idx=0, program=program)
    program.blocks.append(block)
    for name, shape in shapes.items():
        block.vars[name] = Var(name, "float32", tuple(shape))
    op = Op(op_type, inputs, outputs, attrs, block=block)
    block.ops.append(op)
    program.outputs = [n for names in outputs.values() for n in names]
    return op


def _check(op):
    return get_mapper(op.type).check(op)


NMS = dict(score_threshold=0.1, nms_top_k=10, keep_top_k=5, nms_threshold=0.7,
           normalized=True, nms_eta=1.0, background_label=0)
NMS_IO = ({"BBoxes": ["b"], "Scores": ["s"]}, {"Out": ["o"], "Index": ["i"], "NmsRoisNum": ["n"]})
NMS_SHAPES = {"b": (-1, 30, 4), "s": (-1, 3, 30)}


@pytest.mark.parametrize("attrs, shapes, inputs, reason", [
    (dict(nms_eta=0.9), NMS_SHAPES, None, "adaptive threshold"),
    ({}, {"b": (-1, 30, 8), "s": (-1, 3, 30)}, None, "polygons"),
    ({}, {"b": (30, 3, 4), "s": (30, 3), "r": (2,)},
     {"BBoxes": ["b"], "Scores": ["s"], "RoisNum": ["r"]}, "LoD"),
])
def test_multiclass_nms_refusals(attrs, shapes, inputs, reason):
    op = _op("multiclass_nms3", inputs or NMS_IO[0], NMS_IO[1], dict(NMS, **attrs), shapes)
    assert reason in (_check(op) or "")


def test_multiclass_nms_eta_below_one_accepted_at_low_threshold():
    # the adaptive threshold only shrinks while it is above 0.5
    op = _op("multiclass_nms3", *NMS_IO, dict(NMS, nms_eta=0.9, nms_threshold=0.5), NMS_SHAPES)
    assert _check(op) is None


def test_interp_refusals():
    attrs = dict(interp_method="bilinear", data_layout="NCHW", scale=[2.0, 2.0],
                 out_h=-1, out_w=-1, align_corners=False, align_mode=0)
    op = _op("bilinear_interp_v2", {"X": ["x"], "OutSize": ["s"]}, {"Out": ["y"]}, attrs,
             {"x": (1, 3, 8, 8), "s": (2,)})
    assert "OutSize together with a scale" in _check(op)
    op = _op("bilinear_interp_v2", {"X": ["x"]}, {"Out": ["y"]},
             dict(attrs, interp_method="area"), {"x": (1, 3, 8, 8)})
    assert "interp_method" in _check(op)


def test_interp_opset_choice():
    attrs = dict(interp_method="nearest", data_layout="NCHW", scale=[], out_h=16, out_w=24,
                 align_corners=False, align_mode=0)
    mapper = get_mapper("nearest_interp_v2")
    exact = _op("nearest_interp_v2", {"X": ["x"]}, {"Out": ["y"]}, attrs, {"x": (1, 3, 8, 8)})
    assert mapper.required_opset(exact) == 7          # whole-number ratio: Upsample is exact
    odd = _op("nearest_interp_v2", {"X": ["x"]}, {"Out": ["y"]}, dict(attrs, out_w=20),
              {"x": (1, 3, 8, 8)})
    assert mapper.required_opset(odd) == 11
    dyn = _op("nearest_interp_v2", {"X": ["x"]}, {"Out": ["y"]}, attrs, {"x": (1, 3, -1, -1)})
    assert mapper.required_opset(dyn) == 11


def test_conv_transpose_refusals():
    attrs = dict(strides=[2, 2], paddings=[1, 1], dilations=[1, 1], groups=1,
                 padding_algorithm="EXPLICIT", output_padding=[], output_size=[17, 17],
                 data_format="NCHW")
    io = ({"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]})
    # output_size with input sizes known only at run time converts (an op case checks it
    # against Paddle: opcases_corners.py)
    op = _op("conv2d_transpose", *io, attrs, {"x": (1, 4, -1, -1), "w": (4, 6, 3, 3)})
    assert _check(op) is None
    op = _op("conv2d_transpose", *io, dict(attrs, output_size=[], padding_algorithm="SAME"),
             {"x": (1, 4, -1, -1), "w": (4, 6, 3, 3)})
    assert "SAME" in _check(op)
    op = _op("conv2d_transpose", *io, dict(attrs, output_size=[], data_format="NHWC"),
             {"x": (1, 8, 8, 4), "w": (4, 6, 3, 3)})
    assert "NHWC" in _check(op)
    op = _op("conv2d_transpose", *io, dict(attrs, output_size=[]),
             {"x": (1, 4, -1, -1), "w": (4, 6, 3, 3)})
    assert _check(op) is None


def test_pooling_refusals():
    attrs = dict(ksize=[3, 3], strides=[1, 1], paddings=[0, 0], adaptive=True,
                 global_pooling=False, ceil_mode=False)
    op = _op("max_pool2d_with_index", {"X": ["x"]}, {"Out": ["y"], "Mask": ["m"]}, attrs,
             {"x": (1, 4, -1, -1)})
    assert "static input sizes" in _check(op)
    op = _op("max_pool2d_with_index", {"X": ["x"]}, {"Out": ["y"], "Mask": ["m"]}, attrs,
             {"x": (1, 4, 10, 10)})
    assert "Mask" in _check(op)           # uneven bins, and the mask is fetched
    avg = dict(ksize=[3, 3], strides=[2, 2], paddings=[0, 0], pooling_type="avg",
               padding_algorithm="SAME", exclusive=False, adaptive=False,
               global_pooling=False, data_format="NCHW")
    op = _op("pool2d", {"X": ["x"]}, {"Out": ["y"]}, avg, {"x": (1, 4, -1, -1)})
    assert "exclusive=False" in _check(op)
    op = _op("pool2d", {"X": ["x"]}, {"Out": ["y"]}, dict(avg, exclusive=True),
             {"x": (1, 4, -1, -1)})
    assert _check(op) is None


def test_misc_refusals():
    op = _op("pad3d", {"X": ["x"], "Paddings": ["p"]}, {"Out": ["y"]},
             dict(mode="circular", data_format="NCDHW", value=0.0), {"x": (1, 2, 3, 4, 5)})
    assert "circular" in _check(op)
    op = _op("prior_box", {"Input": ["f"], "Image": ["im"]},
             {"Boxes": ["b"], "Variances": ["v"]}, dict(min_sizes=[4.0], variances=[0.1] * 4),
             {"f": (1, 4, -1, -1), "im": (1, 3, 32, 32)})
    assert "static" in _check(op)
    op = _op("group_norm", {"X": ["x"]}, {"Y": ["y"]}, dict(groups=2, data_layout="NHWC"),
             {"x": (1, 4, 4, 4)})
    assert "NHWC" in _check(op)
