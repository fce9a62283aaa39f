"""Importing this module registers every built-in mapper."""
from . import activation, math, nn, tensor  # noqa: F401
