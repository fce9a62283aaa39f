"""paddle_npu: PaddlePaddle exports -> ONNX -> NPU primitives, without importing Paddle.

Importing the package is light (`paddle-npu --help` starts here): export, lower and load
load their modules on first use (PEP 562, _LAZY)."""
import importlib

from ._deferred_imports import defer_sympy

defer_sympy()

from .errors import ConversionError, PaddleFormatError, UnsupportedOpsError  # noqa: E402
from .mappers import OpMapper, paddle_op, supported_ops  # noqa: E402

__version__ = "0.1.0"

# name -> (module, its name there): export / lower in api.py, load (a Paddle export read
# into a Program) in frontend/
_LAZY = {"export": (".api", "export"), "lower": (".api", "lower"),
         "load": (".frontend", "load")}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module, __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ConversionError", "OpMapper", "PaddleFormatError", "UnsupportedOpsError", "export",
           "load", "lower", "paddle_op", "supported_ops", "__version__"]
