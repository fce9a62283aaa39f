"""ScaleLut's function body."""
from ..ops.scale import channel_shape
from ..ops.scale_lut import LEVELS
from .body import Emulated, emulates


@emulates("ScaleLut")
class ScaleLut(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"rank{len(in_shapes[0])}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        # channel c's table starts at c * 256 of the flattened tables
        starts = b.op("Range", b.const(0), b.op("Size", "T"), b.const(LEVELS))
        starts = b.op("Reshape", starts, b.const(channel_shape(len(in_shapes[0]))))
        index = b.op("Add", b.op("Cast", "X", to=7), starts)          # 7: INT64
        b.op("Gather", b.op("Reshape", "T", b.const([-1])), index, axis=0, out="Y")
