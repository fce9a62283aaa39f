"""The NPU operator set: domain `ai.paddle_npu`, version 1 (one module per primitive)."""
from . import add_in_tile, dim_transform, im2col, vmm  # noqa: F401  (registers them)
from . import scale, scale_lut, swap_channel  # noqa: F401  (fused preprocessing)
from . import quant  # noqa: F401  (integer primitives)
from . import lut, runtime_vmm  # noqa: F401  (the lookup-table unit, arrays written at run time)
from . import col2im, depthwise, im2col3d, instance_norm, pool, resample  # noqa: F401  (spatial)
from . import moves, table_read  # noqa: F401  (Crop / Join moves, embedding tables)
from . import reduce  # noqa: F401  (the vector unit's reductions, LayerNorm)
from .base import DOMAIN, VERSION, ArrayModel, Primitive, all_primitives, get_primitive, primitive

__all__ = ["DOMAIN", "VERSION", "ArrayModel", "Primitive", "all_primitives", "get_primitive",
           "primitive"]
