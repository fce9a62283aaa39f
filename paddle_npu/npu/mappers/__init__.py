"""The built-in stage-2 lowerings (importing registers them)."""
from . import activation, conv, layout, linear, moves, reduce  # noqa: F401
from . import conv_transpose, instance_norm, pool, resize  # noqa: F401
