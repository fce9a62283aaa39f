"""The NumPy reference of a lowered model: NPU primitives by their NumPy reference (counting
what the arrays do), every other node by the ONNX reference implementation.

Function bodies are not used here, so the reference is independent of onnxruntime's run
of the same model.
"""
import time

import numpy as np

from .ops import DOMAIN, ArrayModel, all_primitives


def _op_class(prim, array):
    from onnx.reference.op_run import OpRun

    def _run(self, *inputs, **attrs):
        attrs = {k: (list(v) if isinstance(v, (list, tuple, np.ndarray)) else v)
                 for k, v in attrs.items() if not k.startswith("_")}
        attrs["_node"] = self.onnx_node.name
        t = time.perf_counter()
        out = prim.reference(array, list(inputs), attrs)
        array.seconds[prim.op_type] = array.seconds.get(prim.op_type, 0.0) + \
            time.perf_counter() - t
        return tuple(out)

    return type(prim.op_type, (OpRun,), {"op_domain": DOMAIN, "_run": _run})


def _standard_overrides():
    """Standard ops whose onnx.reference implementation falls short on real models."""
    from onnx.reference.op_run import OpRun

    class GatherElements(OpRun):
        # onnx.reference uses np.choose, limited to 64 entries along the axis
        def _run(self, data, indices, axis=None):
            axis = axis or 0
            indices = np.where(indices < 0, indices + data.shape[axis], indices)
            return (np.take_along_axis(data, indices, axis=axis),)

    from onnx.reference.ops.op_max_pool import MaxPool as _MaxPool

    class MaxPool(_MaxPool):
        # onnx.reference loops over output positions in Python: strided views instead, for
        # the common case (2-D, one output, explicit pads); anything else as before
        def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None,
                 pads=None, storage_order=None, strides=None):
            simple = (len(self.onnx_node.output) == 1 and x.ndim == 4 and not ceil_mode
                      and auto_pad in (None, "NOTSET", b"NOTSET"))
            if not simple:
                return super()._run(x, auto_pad=auto_pad, ceil_mode=ceil_mode,
                                    dilations=dilations, kernel_shape=kernel_shape, pads=pads,
                                    storage_order=storage_order, strides=strides)
            kh, kw = kernel_shape
            sh, sw = strides or (1, 1)
            dh, dw = dilations or (1, 1)
            pt, pl, pb, pr = pads or (0, 0, 0, 0)
            lowest = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=lowest)
            oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
            ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
            y = None
            for i in range(kh):
                for j in range(kw):
                    v = xp[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                           j * dw: j * dw + (ow - 1) * sw + 1: sw]
                    y = v.copy() if y is None else np.maximum(y, v)
            return (y,)

    class BatchNormalization(OpRun):
        # onnx.reference runs opset 6-9 BatchNormalization in training mode whenever momentum
        # is set, and it has a default: a one-output node is inference (running statistics)
        def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, spatial=None,
                 training_mode=None, is_test=None):
            if len(self.onnx_node.output) != 1 or training_mode:
                raise NotImplementedError("BatchNormalization in training mode")
            shape = (1, -1) + (1,) * (x.ndim - 2)
            eps = 1e-5 if epsilon is None else epsilon
            y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * \
                scale.reshape(shape) + bias.reshape(shape)
            return (y.astype(x.dtype),)

    return [GatherElements, MaxPool, BatchNormalization]


class Reference:
    """`Reference(lowered, target).run(feeds)` -> outputs; `.array` holds the counts."""

    def __init__(self, model, target):
        from onnx.reference import ReferenceEvaluator

        from ..onnx_io import load_proto
        from .target import load_target

        target = load_target(target)
        proto = load_proto(model)
        stripped = type(proto)()
        stripped.CopyFrom(proto)
        del stripped.functions[:]          # the primitives run as NumPy, not as their bodies
        self.array = ArrayModel(target.rows, target.cols)
        self.output_names = [o.name for o in stripped.graph.output]
        self._ev = ReferenceEvaluator(
            stripped, new_ops=[_op_class(p, self.array) for p in all_primitives().values()]
            + _standard_overrides())

    def run(self, feeds):
        self.array.reset()
        with _one_blas_thread():
            return self._ev.run(None, feeds)


def _one_blas_thread():
    """BLAS on one thread while the reference runs (with threadpoolctl, when installed): each
    product is one array tile, too small for BLAS's threads to gain what their hand-offs
    cost, and on a busy machine those cost far more (ResNet-50 at 64x64 on 2 shared cores,
    runs in turn: 0.85 s with two threads, 0.20 s with one)."""
    import contextlib

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")
