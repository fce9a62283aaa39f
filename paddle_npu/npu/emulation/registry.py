"""Every primitive's emulation, by op type: the modules of bodies, each registering its own
(`body.emulates`). Every primitive has one: checked here, on import."""
from ..ops import all_primitives
from . import add_in_tile, col2im, depthwise, dim_transform, im2col  # noqa: F401  (register)
from . import im2col3d, instance_norm, lut, moves, pool, quant, reduce  # noqa: F401
from . import resample, runtime_vmm, scale, scale_lut, swap_channel  # noqa: F401
from . import table_read, vmm  # noqa: F401
from .body import REGISTERED

_missing = sorted(set(all_primitives()) - set(REGISTERED))
if _missing:
    raise ImportError(f"NPU primitives without an emulation: {', '.join(_missing)}")


def emulation_of_op(op_type):
    """The emulation (an `body.Emulated` class) of the primitive `op_type`, or None."""
    return REGISTERED.get(op_type)


def all_emulations():
    return dict(REGISTERED)
