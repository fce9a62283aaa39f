"""Stage 2: ONNX -> NPU primitives (Im2Col, VMM, AddInTile, DimTransform) and CPU segments.

    from paddle_npu import npu
    model, report = npu.lower("model.onnx", target="npu256", plan="packed")
    result = npu.verify("model.onnx", model, target="npu256")

Importing this package is light (no numpy / onnx): `paddle-npu --help` builds its parser
from it; the rest loads on first use (the names in _LAZY, PEP 562).
"""
import importlib

from .chip.target import DEFAULT as DEFAULT_TARGET
from .chip.target import PRESETS, Target, list_targets, load_target
from .chip.tiling import PLANS
from .registry import OnnxMapper, get_onnx_mapper, lowered_ops, onnx_op

# name -> the module defining it: lower (npu/pipeline.py: (ir.Model, Report) of a model
# lowered for a target), verify (npu/verification/verifier.py: onnxruntime before / after
# lowering and the NumPy reference), fuse_preprocess (npu/passes/preprocess_fusion.py), the
# operator set (ops/)
_LAZY = {"DOMAIN": ".ops", "VERSION": ".ops", "all_primitives": ".ops",
         "get_primitive": ".ops", "primitive": ".ops", "Reference": ".verification.reference",
         "Report": ".report", "lower": ".pipeline", "verify": ".verification.verifier",
         "fuse_preprocess": ".passes.preprocess_fusion"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_TARGET", "DOMAIN", "PLANS", "PRESETS", "VERSION", "OnnxMapper", "Reference",
           "Report", "Target", "all_primitives", "fuse_preprocess", "get_onnx_mapper",
           "get_primitive", "list_targets", "load_target", "lower", "lowered_ops", "onnx_op",
           "primitive", "verify"]
