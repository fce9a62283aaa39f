"""InstanceNorm's function body."""
from .body import Emulated, Ref, emulates


@emulates("InstanceNorm")
class InstanceNorm(Emulated):
    """ONNX's InstanceNormalization in X's type (not the reference's float64 statistics)."""

    @classmethod
    def body(cls, b, attrs, in_shapes):
        b.op("InstanceNormalization", "X", "S", "B", out="Y", epsilon=Ref("epsilon", "float"))
