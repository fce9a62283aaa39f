"""Paddle -> ONNX op mappers: the registry and the built-in op families."""
from .registry import OpMapper, get_mapper, paddle_op, supported_ops

__all__ = ["OpMapper", "get_mapper", "paddle_op", "supported_ops"]
