"""The restruct passes a target selects, and a model lowered through all of them. Each
rule on its own: tests/test_rule_<name>.py."""
import pytest

from paddle_npu.errors import ConversionError
from paddle_npu.npu import lower, verify
from paddle_npu.npu.passes.restruct import selected
from paddle_npu.npu.chip.target import load_target, target_from_dict

NNIE = load_target("nnie")


def test_pass_selection_and_switches():
    assert selected(NNIE) == ["bn_collapse", "merge_linear", "l2norm", "fc_to_conv"]
    assert selected(load_target("npu256")) == ["bn_collapse"]
    assert selected(load_target("npu256"), enable=["fc_to_conv"]) == ["bn_collapse", "fc_to_conv"]
    assert selected(NNIE, disable=["l2norm", "merge_linear"]) == ["bn_collapse", "fc_to_conv"]
    with pytest.raises(ConversionError, match="unknown restruct pass 'pca'"):
        selected(NNIE, enable=["pca"])
    with pytest.raises(ConversionError, match=r"unknown restruct passes \['pca'\]"):
        target_from_dict({"restruct": {"passes": ["pca"]}})


def test_face_embed_lowered_for_nnie(zoo_onnx):
    """All four passes by default on the NNIE preset: the whole model then runs on the NPU
    (norms included) and verifies three ways."""
    onnx_bytes, feeds = zoo_onnx("face_embed")
    lowered, report = lower(onnx_bytes, "nnie")
    fired = {p["pass"]: len(p["fired"]) for p in report.restruct}
    assert fired == {"bn_collapse": 3, "merge_linear": 1, "l2norm": 2, "fc_to_conv": 1}
    assert [s.device for s in report.segments] == ["npu"]
    result = verify(onnx_bytes, lowered, "nnie", feeds=feeds)
    assert result["ok"], result
    # switched off: the BatchNormalization of the FC stays (as Mul + Add), norms go to the CPU
    lowered, report = lower(onnx_bytes, "nnie", disable=["bn_collapse", "l2norm"])
    assert [p["pass"] for p in report.restruct] == ["merge_linear", "fc_to_conv"]
    assert "cpu" in {s.device for s in report.segments}
    assert verify(onnx_bytes, lowered, "nnie", feeds=feeds)["ok"]
