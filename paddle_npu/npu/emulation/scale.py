"""Scale's function body."""
from ..ops.scale import channel_shape
from .body import Emulated, emulates


@emulates("Scale")
class Scale(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"rank{len(in_shapes[0])}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        shape = b.const(channel_shape(len(in_shapes[0])))
        s = b.op("Reshape", b.op("CastLike", "S", "X"), shape)
        t = b.op("Reshape", b.op("CastLike", "B", "X"), shape)
        b.op("Add", b.op("Mul", "X", s), t, out="Y")
