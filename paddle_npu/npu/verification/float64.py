"""A model before lowering computed in float64: the exact result `verify` measures float32
runs against.

Every float32 tensor of the model (weights, constants, inputs, what each node computes)
becomes float64; attributes stay as the model states them (an epsilon, a HardSigmoid's alpha
are float32 numbers either way), so the float64 run is the model's own arithmetic without
rounding, not the framework's model it was converted from. onnx's reference evaluator runs
it (with the NumPy reference's fixes to some of its ops); onnxruntime runs the float64 copy
where the evaluator cannot, but has no float64 Conv, pooling, HardSigmoid, Erf, Clip, ...,
so it is the fallback, not the first choice.
"""
import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from ...compare import run_onnx
from ...errors import ConversionError
from ...onnx_io import load_proto
from ..ops.im2col import kernel_taps
from .reference import _standard_overrides, run_node_by_node

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def _float_only_inputs(node):
    """The positions of the inputs the ONNX specification types tensor(float) whatever the
    data's type: a Resize's or an Upsample's scales (Resize-10 has no roi before them)."""
    if node.op_type == "Resize":
        return (1,) if len(node.input) == 2 else (2,)
    return (1,) if node.op_type == "Upsample" else ()


def as_float64(model, weights=True):
    """A copy of the model (anything load_proto reads) with every float32 tensor float64;
    weights=False leaves the main graph's initializers float32 (the caller converts them)."""
    proto = load_proto(model)
    if proto is model:                  # the caller's proto: a copy (else the one just read)
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    _graph_as_float64(proto.graph, weights)
    for f in proto.functions:
        for node in f.node:
            _node_as_float64(node)
    return proto


def _graph_as_float64(graph, weights=True):
    for i, t in enumerate(graph.initializer if weights else ()):
        if t.data_type == F32:
            graph.initializer[i].CopyFrom(_tensor64(t))
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.tensor_type.elem_type == F32:
            v.type.tensor_type.elem_type = F64
    nodes = list(graph.node)
    del graph.node[:]
    for node in nodes:
        _node_as_float64(node)
        # (a scale input left float64 would break onnxruntime's type check; the values
        # are float32 numbers anyway)
        for k in _float_only_inputs(node):
            if len(node.input) > k and node.input[k]:
                name = f"{node.input[k]}__as_float32_{len(graph.node)}"
                graph.node.append(onnx.helper.make_node("Cast", [node.input[k]], [name],
                                                        to=F32))
                node.input[k] = name
        graph.node.append(node)


def _node_as_float64(node):
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR and a.t.data_type == F32:
            a.t.CopyFrom(_tensor64(a.t))
        elif a.type == AttributeProto.GRAPH:
            _graph_as_float64(a.g)
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                _graph_as_float64(g)
        elif node.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform",
                              "RandomNormalLike", "RandomUniformLike") and \
                a.name in ("to", "dtype") and a.i == F32:
            a.i = F64
    if node.op_type == "Constant":
        for a in list(node.attribute):
            if a.name in ("value_float", "value_floats"):
                value = np.array(a.f if a.name == "value_float" else list(a.floats),
                                 np.float32).astype(np.float64)
                node.attribute.remove(a)
                node.attribute.append(onnx.helper.make_attribute(
                    "value", numpy_helper.from_array(value)))


def _tensor64(t):
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)


def feeds_as_float64(feeds):
    return {k: v.astype(np.float64) if np.asarray(v).dtype == np.float32 else v
            for k, v in feeds.items()}


def float64_outputs(model, feeds):
    """(the model's outputs computed in float64 on `feeds` (float32 values, exact in float64),
    what ran it: "onnx reference" or "onnxruntime"); a one-line ConversionError when
    neither can."""
    feeds = feeds_as_float64(feeds)
    try:
        return _evaluate(as_float64(model, weights=False), feeds), "onnx reference"
    except Exception as e:  # noqa: BLE001 - an op the evaluator lacks or fails on
        first = _first_line(e)
    try:
        return run_onnx(as_float64(model).SerializeToString(), feeds)[1], "onnxruntime"
    except Exception as e:  # noqa: BLE001 - e.g. an op without a float64 kernel
        raise ConversionError(f"the model cannot be run in float64: onnx's reference "
                              f"evaluator: {first}; onnxruntime: {_first_line(e)}") from None


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _evaluate(proto, feeds):
    """onnx's reference evaluator on the model (its weights still float32: made float64 as
    arrays, one at a time, not as a second set of protobuf tensors), each tensor let go after
    its last use (run_node_by_node)."""
    from onnx.reference import ReferenceEvaluator   # (~40 ms: only when a model is run)

    ev = ReferenceEvaluator(proto, new_ops=_standard_overrides() + _window_ops())
    if len(ev.rt_nodes_) != len(proto.graph.node):     # (not one op per node: its own run)
        return ev.run(None, feeds)
    del proto.graph.initializer[:]      # (the evaluator holds them as arrays)
    for name, value in ev.rt_inits_.items():
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            ev.rt_inits_[name] = value.astype(np.float64)
    return run_node_by_node(ev, feeds)


def _window_ops():
    """Conv and AveragePool as one strided view per kernel tap, for the plain 2-D case
    (explicit pads, no ceil_mode): onnx's reference builds Conv's im2col by fancy indexing
    and loops over AveragePool's windows in Python, most of a float64 run's time on a
    detector at 640x640; anything else as onnx's reference computes it."""
    from onnx.reference.ops.op_conv import Conv as _Conv     # (loaded only when run)
    from onnx.reference.ops.op_pool_common import CommonPool

    def plain(x, auto_pad, ceil_mode=0):
        return x.ndim == 4 and not ceil_mode and auto_pad in (None, "NOTSET", b"NOTSET")

    def windows(x, kernel, pads, strides, dilations, value=0):
        """The padded image and each tap's (i, j, view) of it."""
        (pt, pl, pb, pr), (kh, kw) = pads or (0, 0, 0, 0), kernel
        (sh, sw), (dh, dw) = strides or (1, 1), dilations or (1, 1)
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value)
        oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
        ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
        return [(i, j, xp[:, :, rows, cols]) for i, j, rows, cols in
                kernel_taps((kh, kw), (sh, sw), (dh, dw), (oh, ow))]

    class Conv(_Conv):
        def _run(self, x, w, b=None, auto_pad=None, dilations=None, group=None,
                 kernel_shape=None, pads=None, strides=None):
            if not plain(x, auto_pad):
                return super()._run(x, w, b, auto_pad=auto_pad, dilations=dilations,
                                    group=group, kernel_shape=kernel_shape, pads=pads,
                                    strides=strides)
            g = group or 1
            m, per = w.shape[0] // g, w.shape[1]
            y = None
            for i, j, v in windows(x, w.shape[2:], pads, strides, dilations):
                n, _, oh, ow = v.shape
                v = v.reshape(n, g, per, oh, ow)
                # [g, m, per] x [n, g, per, oh, ow] -> [n, g, m, oh, ow]
                t = np.einsum("gmc,ngchw->ngmhw", w[:, :, i, j].reshape(g, m, per), v,
                              optimize=True)
                y = t if y is None else y + t
            y = y.reshape(y.shape[0], g * m, *y.shape[3:])
            return ((y if b is None else y + b.reshape(1, -1, 1, 1)).astype(x.dtype),)

    class AveragePool(CommonPool):
        def _run(self, x, auto_pad=None, ceil_mode=None, kernel_shape=None, pads=None,
                 strides=None, count_include_pad=None, dilations=None):
            if not plain(x, auto_pad, ceil_mode):
                return CommonPool._run(self, "AVG", count_include_pad, x, auto_pad=auto_pad,
                                       ceil_mode=ceil_mode, dilations=dilations,
                                       kernel_shape=kernel_shape, pads=pads, strides=strides)
            taps = windows(x, kernel_shape, pads, strides, dilations)
            total = sum(v for _, _, v in taps)
            if count_include_pad:
                return ((total / len(taps)).astype(x.dtype),)
            ones = np.ones((1, 1) + x.shape[2:], x.dtype)
            count = sum(v for _, _, v in windows(ones, kernel_shape, pads, strides, dilations))
            return ((total / count).astype(x.dtype),)

    return [Conv, AveragePool]
