"""paddle_npu: PaddlePaddle exports -> ONNX -> NPU primitives, without importing Paddle."""
from ._deferred_imports import defer_sympy

defer_sympy()

from .api import export, lower  # noqa: E402
from .errors import ConversionError, PaddleFormatError, UnsupportedOpsError  # noqa: E402
from .mappers import OpMapper, paddle_op, supported_ops  # noqa: E402

__version__ = "0.1.0"


def load(model, params=None):
    """Read a Paddle export (legacy .pdmodel, PIR .json or old model directory) into a Program."""
    from .frontend import load as _load
    return _load(model, params)


__all__ = ["ConversionError", "OpMapper", "PaddleFormatError", "UnsupportedOpsError", "export",
           "load", "lower", "paddle_op", "supported_ops", "__version__"]
