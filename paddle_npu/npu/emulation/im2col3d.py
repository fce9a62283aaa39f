"""Im2Col3D's function body."""
import numpy as np

from ..ops.im2col3d import output_sizes
from .body import Emulated, config_tag, emulates


@emulates("Im2Col3D")
class Im2Col3D(Emulated):
    """The padded volume gathered by constant index grids along D, H and W in turn."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        return config_tag([(k, [int(v) for v in a[k]]) for k in sorted(a)],
                          list(in_shapes[0][1:]))

    @classmethod
    def body(cls, b, attrs, in_shapes):
        c, *spatial = in_shapes[0][1:]
        k, s, d, p = (attrs[key] for key in ("kernel_shape", "strides", "dilations", "pads"))
        outs = output_sizes(spatial, attrs)
        x = b.op("Pad", "X", b.const([0, 0] + list(p[:3]) + [0, 0] + list(p[3:])))
        # [N, C, D', H', W'] -> gather (o, k) index grids along D, H, W in turn
        for i, axis in enumerate((2, 4, 6)):
            grid = np.arange(outs[i])[:, None] * s[i] + np.arange(k[i])[None, :] * d[i]
            x = b.op("Gather", x, b.const(grid), axis=axis)
        x = b.op("Transpose", x, perm=[0, 2, 4, 6, 1, 3, 5, 7])  # [N, OD, OH, OW, C, KD, KH, KW]
        b.op("Reshape", x, b.const([0, int(np.prod(outs)), c * int(np.prod(k))]), out="Y")
