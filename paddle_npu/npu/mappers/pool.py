"""MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool (2-D) -> Pool on the vector unit."""
from ..registry import onnx_op
from ..ops.im2col import resolve_pads
from ...shape_inference import pooled_size

MODE = {"MaxPool": "max", "GlobalMaxPool": "max", "AveragePool": "avg",
        "GlobalAveragePool": "avg"}


@onnx_op(*MODE)
class Pooling:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("Pool"):
            return "the target has no Pool primitive"
        dims = ctx.static_dims(node.inputs[0], skip=(0,))
        if dims is None or len(dims) != 4:
            return "only 2-D pooling of an input with static channels and size lowers"
        if len([v for v in node.outputs if v is not None and v.name]) > 1:
            return "MaxPool's indices output has no NPU form"
        if node.op_type == "AveragePool" and max(node.attributes.get_ints("dilations",
                                                                          [1, 1])) > 1:
            return "AveragePool with dilations has no NPU form"
        if node.attributes.get_string("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") \
                and max(node.attributes.get_ints("dilations", [1, 1])) > 1:
            # runtimes disagree on it: onnxruntime pads as if the window were not dilated
            return "auto_pad with dilations is ambiguous (give explicit pads)"
        if not node.op_type.startswith("Global"):
            a = cls._window(node, dims[2:])
            sizes = [pooled_size(n, k, s, d, p0, p1, a["ceil_mode"]) for n, k, s, d, p0, p1 in
                     zip(dims[2:], a["kernel_shape"], a["strides"], a["dilations"],
                         a["pads"][:2], a["pads"][2:])]
            if min(sizes) < 1:
                return f"no window fits the padded {dims[2]}x{dims[3]} input"
        return None

    @staticmethod
    def _window(node, spatial):
        """Pool's window attributes of a MaxPool / AveragePool, auto_pad resolved."""
        a = node.attributes
        kernel = list(a.get_ints("kernel_shape"))
        strides = list(a.get_ints("strides", [1, 1]))
        dilations = list(a.get_ints("dilations", [1, 1]))
        return dict(kernel_shape=kernel, strides=strides, dilations=dilations,
                    pads=resolve_pads(node, spatial, kernel, strides, dilations),
                    ceil_mode=a.get_int("ceil_mode", 0),
                    count_include_pad=a.get_int("count_include_pad", 0))

    @classmethod
    def lower(cls, ctx, node):
        h, w = ctx.dims(node.inputs[0])[2:]
        attrs = dict(kernel_shape=[h, w]) if node.op_type.startswith("Global") else \
            cls._window(node, [h, w])
        return [ctx.npu.Pool(node.inputs[0], mode=MODE[node.op_type], **attrs, _name="pool")]
