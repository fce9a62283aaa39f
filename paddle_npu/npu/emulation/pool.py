"""Pool's function bodies."""
from ..ops.im2col import is_nhwc
from ..ops.pool import is_global
from .body import Emulated, config_tag, emulates
from .reduce import Reduce


def _plain(v):
    return v if isinstance(v, (int, str)) else [int(i) for i in v]


@emulates("Pool")
class Pool(Emulated):
    """ONNX's MaxPool / AveragePool (NCHW: an nhwc image goes there and back, by transposes
    onnxruntime cancels against its neighbours'); a global pool of an nhwc image is Reduce's
    body over its pixels, whose float32 body sums in float32."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        a = cls.attrs_of(attrs)
        return f"{a['mode']}_{config_tag([(k, _plain(a[k])) for k in sorted(a)])}"

    @classmethod
    def body(cls, b, attrs, in_shapes, float32=False):
        if not is_nhwc(attrs):
            cls._nchw_body(b, attrs, "X", "Y")
            return
        if is_global(attrs):           # reduce over the image's pixels
            Reduce.body(b, {"function": "max" if attrs["mode"] == "max" else "mean",
                            "axes": [1, 2], "keepdims": 1}, in_shapes, float32=float32)
            return
        # ONNX pools only NCHW: the window sums run there, between two transposes (which
        # onnxruntime cancels against its neighbours')
        y = cls._nchw_body(b, attrs, b.op("Transpose", "X", perm=[0, 3, 1, 2]), None)
        b.op("Transpose", y, perm=[0, 2, 3, 1], out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        # only a global average of rows changes: it sums in float32 (Reduce's float32 body)
        cls.body(b, attrs, in_shapes, float32=True)

    @classmethod
    def _nchw_body(cls, b, attrs, x, out):
        common = dict(kernel_shape=attrs["kernel_shape"], strides=attrs["strides"],
                      pads=attrs["pads"], ceil_mode=attrs["ceil_mode"])
        if attrs["mode"] == "max":
            return b.op("MaxPool", x, out=out, dilations=attrs["dilations"], **common)
        return b.op("AveragePool", x, out=out, count_include_pad=attrs["count_include_pad"],
                    **common)
