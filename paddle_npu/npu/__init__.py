"""Stage 2: ONNX -> NPU primitives (Im2Col, VMM, AddInTile, DimTransform) and CPU segments.

    from paddle_npu import npu
    model, report = npu.lower("model.onnx", target="npu256", plan="packed")
    result = npu.verify("model.onnx", model, target="npu256")

Importing this package is light (no numpy / onnx): `paddle-npu --help` builds its parser
from it; the rest loads on first use.
"""
from .registry import OnnxMapper, get_onnx_mapper, lowered_ops, onnx_op
from .target import DEFAULT as DEFAULT_TARGET
from .target import PRESETS, Target, list_targets, load_target
from .tiling import PLANS

_LAZY = {"DOMAIN": ".ops", "VERSION": ".ops", "all_primitives": ".ops",
         "get_primitive": ".ops", "primitive": ".ops", "Reference": ".reference",
         "Report": ".report"}


def lower(model, target=None, plan="packed", preprocess=None, marks=None, enable=(),
          disable=(), input_shape=None):
    """(ir.Model, Report) of a model lowered for a target; see npu/pipeline.py.
    input_shape: {input name: [sizes]} fixed before lowering (npu/input_shapes.py)."""
    from .pipeline import lower as _lower
    return _lower(model, target, plan, preprocess, marks, enable, disable, input_shape)


def verify(original, lowered, target=None, feeds=None, seed=0, tolerance=1e-5,
           input_shape=None, min_cosine=0.99):
    """onnxruntime before / after lowering and the NumPy reference; see npu/verifier.py."""
    from .verifier import verify as _verify
    return _verify(original, lowered, target, feeds, seed, tolerance, input_shape, min_cosine)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_TARGET", "DOMAIN", "PLANS", "PRESETS", "VERSION", "OnnxMapper", "Reference",
           "Report", "Target", "all_primitives", "get_onnx_mapper", "get_primitive",
           "list_targets", "load_target", "lower", "lowered_ops", "onnx_op", "primitive",
           "verify"]
