"""The NumPy reference of a lowered model: NPU primitives by their NumPy reference (counting
what the arrays do), every other node by the ONNX reference implementation.

Function bodies are not used here, so the reference is independent of onnxruntime's run
of the same model.
"""
import contextlib
import time

import numpy as np

from ...onnx_io import graph_inputs, load_proto, names_read
from ..chip.target import load_target
from ..ops import DOMAIN, ArrayModel, all_primitives
from ..ops.im2col import kernel_taps
from .reference_layers import LAYER_DOMAIN, fuse_matrix_layers, layer_op_class


def _op_class(prim, array, given):
    from onnx.reference.op_run import OpRun     # (onnx.reference is slow to import: only
                                                # when a reference runs, not for `lower`)

    def _run(self, *inputs, **attrs):
        if given:
            inputs = [given.get(n, v) for n, v in zip(self.onnx_node.input, inputs)]
        attrs = {k: (list(v) if isinstance(v, (list, tuple, np.ndarray)) else v)
                 for k, v in attrs.items() if not k.startswith("_")}
        attrs["_node"] = self.onnx_node.name
        # the arrays a VMM runs on are its weight's: nodes reading one weight share them
        attrs["_arrays"] = self.onnx_node.input[1] if len(self.onnx_node.input) > 1 else \
            self.onnx_node.name
        t = time.perf_counter()
        out = prim.reference(array, list(inputs), attrs)
        array.seconds[prim.op_type] = array.seconds.get(prim.op_type, 0.0) + \
            time.perf_counter() - t
        return tuple(out)

    return type(prim.op_type, (OpRun,), {"op_domain": DOMAIN, "_run": _run})


def _standard_overrides():
    """Standard ops whose onnx.reference implementation falls short on real models."""
    from onnx.reference.op_run import OpRun     # (see _op_class)
    from onnx.reference.ops.op_grid_sample import GridSample as _GridSample
    from onnx.reference.ops.op_loop import Loop as _Loop
    from onnx.reference.ops.op_max_pool import MaxPool as _MaxPool
    from onnx.reference.ops.op_resize import Resize as _Resize

    class GatherElements(OpRun):
        # onnx.reference uses np.choose, limited to 64 entries along the axis
        def _run(self, data, indices, axis=None):
            axis = axis or 0
            indices = np.where(indices < 0, indices + data.shape[axis], indices)
            return (np.take_along_axis(data, indices, axis=axis),)

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
            for _, _, rows, cols in kernel_taps((kh, kw), (sh, sw), (dh, dw), (oh, ow)):
                v = xp[:, :, rows, cols]
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

    class GridSample(_GridSample):
        # onnx.reference visits every output pixel in Python (minutes for a TPS rectifier) and
        # knows only opset 20's mode names: opset 16's "bilinear"/"bicubic" are renamed, and
        # 2-D nearest/linear sampling is vectorised with the same arithmetic
        def _run(self, x, grid, align_corners=None, mode=None, padding_mode=None):
            mode = mode or self.mode
            mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
            padding = padding_mode or self.padding_mode
            corners = bool(self.align_corners if align_corners is None else align_corners)
            if x.ndim != 4 or mode == "cubic":
                return super()._run(x, grid, align_corners=corners, mode=mode,
                                    padding_mode=padding)
            return (_grid_sample_2d(x, grid, corners, mode, padding),)

    class Resize(_Resize):
        # onnx.reference reads every Resize as opset 11's (X, roi, scales, sizes): opset 10's
        # (X, scales) ran as an roi without scales. Opset 10 resizes as onnxruntime does it:
        # asymmetric coordinates, nearest rounding down when enlarging, up when shrinking
        def _run(self, x, *args, **kw):
            if len(self.onnx_node.input) != 2:
                return super()._run(x, *args, **kw)
            scales = args[0]
            kw.update(coordinate_transformation_mode="asymmetric",
                      nearest_mode="ceil" if np.any(scales < 1) else "floor")
            return super()._run(x, None, scales, **kw)

    class Loop(_Loop):
        # onnx.reference joins the steps' scan outputs along their first axis (np.vstack);
        # ONNX stacks them on a new one: [steps] + a step's shape
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            run_body = self._run_body       # (set per instance, for the body attribute)

            def counted(*a, **k):
                outputs = run_body(*a, **k)
                self.steps += 1
                self.scan_shapes = [np.shape(o) for o in outputs[len(outputs) - self.K:]]
                return outputs
            self._run_body = counted

        def _run(self, *args, **kw):
            self.steps = 0
            outputs = super()._run(*args, **kw)
            if not self.steps or not self.K:
                return outputs
            return tuple(outputs[:-self.K]) + tuple(
                np.reshape(o, (self.steps,) + shape)
                for o, shape in zip(outputs[-self.K:], self.scan_shapes))

    return [GatherElements, MaxPool, BatchNormalization, GridSample, Resize, Loop]


def _reflect(v, lo, hi):
    """Fold coordinates outside [lo, hi] back in, as often as it takes."""
    span = hi - lo
    below, above = v < lo, v > hi
    d = np.where(below, lo - v, v - hi)
    n = np.floor(d / span)
    r = d - n * span
    even = n % 2 == 0
    folded = np.where(below, np.where(even, lo + r, hi - r), np.where(even, hi - r, lo + r))
    return np.where(below | above, folded, v)


def _grid_sample_2d(x, grid, corners, mode, padding):
    n, _, h, w = x.shape
    lows = (0.0, 0.0) if corners else (-0.5, -0.5)
    highs = (w - 1.0, h - 1.0) if corners else (w - 0.5, h - 0.5)
    coords = []
    for axis, size in ((0, w), (1, h)):        # grid[..., 0] is x (width), [..., 1] is y
        g = grid[..., axis].astype(np.float32)
        c = (g + 1) / 2 * (size - 1) if corners else ((g + 1) * size - 1) / 2
        c = c.astype(np.float32)
        if mode == "nearest":
            c = np.rint(c)
        lo, hi = lows[axis], highs[axis]
        outside = (c < lo) | (c > hi)
        if padding == "border":
            c = np.where(outside, np.clip(c, 0, size - 1), c)
        elif padding == "reflection":
            c = _reflect(c, lo, hi).astype(np.float32)
        coords.append(c)
    batch = np.arange(n).reshape(n, 1, 1)

    def pixels(ix, iy):                         # (N, C, Ho, Wo) values at integer positions
        if padding == "zeros":
            valid = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        elif padding == "reflection":
            ix = np.trunc(_reflect(ix.astype(np.float64), lows[0], highs[0])).astype(np.int64)
            iy = np.trunc(_reflect(iy.astype(np.float64), lows[1], highs[1])).astype(np.int64)
        v = x[batch, :, np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]
        if padding == "zeros":
            v = v * valid[..., None]
        return np.moveaxis(v, -1, 1)

    cx, cy = coords
    if mode == "nearest":
        return pixels(cx.astype(np.int64), cy.astype(np.int64)).astype(x.dtype)
    x0, y0 = np.floor(cx), np.floor(cy)
    wx1, wy1 = (cx - x0).astype(x.dtype)[:, None], (cy - y0).astype(x.dtype)[:, None]
    wx0, wy0 = 1 - wx1, 1 - wy1
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    top = wx0 * pixels(x0, y0) + wx1 * pixels(x0 + 1, y0)
    bottom = wx0 * pixels(x0, y0 + 1) + wx1 * pixels(x0 + 1, y0 + 1)
    return (wy0 * top + wy1 * bottom).astype(x.dtype)


class Reference:
    """`Reference(lowered, target).run(feeds)` -> outputs; `.array` holds the counts.
    fuse_layers: run each matrix layer's VMM tiles and AddInTile as one computation with the
    same arithmetic (reference_layers.py; `.layers` holds their plans); False runs every node
    on its own."""

    def __init__(self, model, target, fuse_layers=True):
        # {tensor name: array} the primitives read instead of what the reference computed
        # (verify gives them onnxruntime's float tensors where the integer layers start)
        self.given = {}
        target = load_target(target)
        stripped = load_proto(model)
        if stripped is model:               # the caller's proto: edit a copy (a file or bytes
            stripped = type(model)()        # were parsed for us: edit that, no second copy)
            stripped.CopyFrom(model)
        del stripped.functions[:]          # the primitives run as NumPy, not as their bodies
        self.array = ArrayModel(target.rows, target.cols)
        self.output_names = [o.name for o in stripped.graph.output]
        self.input_sizes = _input_sizes(stripped.graph)
        self.layers = fuse_matrix_layers(stripped.graph) if fuse_layers else {}
        if self.layers:
            stripped.opset_import.add(domain=LAYER_DOMAIN, version=1)
        from onnx.reference import ReferenceEvaluator      # (see _op_class)
        self._ev = ReferenceEvaluator(
            stripped, new_ops=[_op_class(p, self.array, self.given)
                               for p in all_primitives().values()]
            + [layer_op_class(self.layers, self.array)] + _standard_overrides())

    def run(self, feeds, keep=None):
        """The outputs for `feeds` ({input name: array}); a batch runs as one (each layer's
        weights read once), when the model's batch size is left open or fixed to it.
        keep: see run_node_by_node (each tensor is let go after its last reader)."""
        for name, sizes in self.input_sizes.items():
            if name in feeds:
                _check_sizes(name, np.shape(feeds[name]), sizes)
        self.array.reset()
        with _one_blas_thread():
            return run_node_by_node(self._ev, feeds, keep)


def run_node_by_node(ev, feeds, keep=None):
    """Runs onnx's ReferenceEvaluator `ev` (one runner per node of its graph) on `feeds`,
    letting each tensor go after the last node reading it: the evaluator's own run holds
    every one to its end, all of a big model's activations at once. Returns the graph's
    outputs; given keep, a function of each node ((domain, op, inputs, outputs); a matrix
    layer the reference fuses is one node, its tiles' partial sums not among its tensors)
    and {name: array} of the tensors so far (its inputs and outputs among them) that names
    those to hold to the end: (the outputs, {name: array} of those held)."""
    graph = ev.onnx_graph_
    outputs = [o.name for o in graph.output]
    values = {"": None, **ev.rt_inits_, **feeds}
    held = {}
    for node, proto, gone in zip(ev.rt_nodes_, graph.node, _last_readers(graph, outputs)):
        inputs = [values[n] for n in node.input]
        # (If, Loop and Scan read what their subgraphs take from outside them here)
        got = node.run(*inputs, context=values) if node.need_context() else node.run(*inputs)
        values.update(zip(node.output, got))
        if keep:
            info = (proto.domain, proto.op_type, list(proto.input), list(proto.output))
            held.update((n, values[n]) for n in keep(info, values))
        for name in gone:
            values.pop(name, None)
    outputs = [values[n] for n in outputs]
    return (outputs, held) if keep else outputs


def _last_readers(graph, outputs):
    """Per node of `graph`, the tensors no later node reads (inputs, weights and what nodes
    compute, subgraphs' reads from outside them included), but for the names `outputs`."""
    last = {}
    for k, node in enumerate(graph.node):
        for name in list(names_read(node)) + list(node.output):
            last[name] = k
    gone = [[] for _ in graph.node]
    for name, k in last.items():
        if name and name not in outputs:
            gone[k].append(name)
    return gone


def _input_sizes(graph):
    """{input name: [size or None (left open)]} of the graph inputs whose rank is known."""
    return {name: dims for name, _, dims in graph_inputs(graph) if dims is not None}


def _check_sizes(name, shape, sizes):
    """Raises, naming the input, when an array's shape does not fit the sizes the lowered
    model was made for (the primitives would fail deep inside, or read it wrong)."""
    if len(shape) == len(sizes) and all(s is None or s == n for s, n in zip(sizes, shape)):
        return
    want = "x".join("?" if s is None else str(s) for s in sizes)
    hint = ""
    if len(shape) == len(sizes) and sizes[0] is not None and sizes[0] != shape[0] and \
            all(s is None or s == n for s, n in zip(sizes[1:], shape[1:])):
        rest = ",".join("-1" if s is None else str(s) for s in sizes[1:])
        hint = (f"; to run a batch of {shape[0]} at once, lower with the batch left open "
                f"(--input-shape {name}:-1,{rest})")
    raise ValueError(f"input {name!r} is {'x'.join(map(str, shape))}, but the lowered model "
                     f"was made for {want}{hint}")


_BLAS_CONTROL = []     # threadpoolctl's controller, made once: making one scans the process


def _one_blas_thread():
    """BLAS on one thread while the reference runs (with threadpoolctl, when installed): each
    product is one layer of a small model or one array tile, too small for BLAS's threads to
    gain what their hand-offs cost, and on a busy machine those cost far more."""
    try:     # optional, not a dependency: without it BLAS keeps its threads
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return contextlib.nullcontext()
    if not _BLAS_CONTROL:
        _BLAS_CONTROL.append(ThreadpoolController())
    return _BLAS_CONTROL[0].limit(limits=1, user_api="blas")
