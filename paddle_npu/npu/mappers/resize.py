"""Resize of an NCHW image's H and W -> one AxisResample per resized axis on the vector unit:
nearest a pick (a move), linear and cubic a weighted sum of 2 or 4 neighbours.

The resize is separable: along one axis it is a matrix A [in, out] with Y = X A, each column
with a few non-zeros (resize_matrix, the ONNX specification's coordinate transformations and
interpolations written out in closed form); its non-zeros are AxisResample's indices and
weights. (As matrix products on the arrays the interpolation would cost one array read per row
of the image, far more than the vector unit's few multiply-adds per element.)"""
import numpy as np

from ..registry import onnx_op


def _const(ctx, node, i):
    """Input i as a constant array, an empty array when left out, None when computed."""
    if len(node.inputs) <= i or node.inputs[i] is None or not node.inputs[i].name:
        return np.zeros(0)
    return ctx.constant(node.inputs[i])


def _scales_or_sizes(ctx, node):
    """("scales" | "sizes", values, input index) of the node, or a reason string. (Models are
    loaded at opset 15 or above: an Upsample or a Resize-10 has become a Resize of this form.)"""
    scales, sizes = _const(ctx, node, 2), _const(ctx, node, 3)
    if scales is None or sizes is None:
        return "the scales or sizes are not constant"
    return ("scales", scales, 2) if scales.size else ("sizes", sizes, 3)


def _check(ctx, node):
    a = node.attributes
    dims, out = ctx.static_dims(node.inputs[0], skip=(0,)), ctx.dims(node.outputs[0])
    if dims is None or len(dims) != 4 or out is None or not all(isinstance(d, int)
                                                              for d in out[1:]):
        return "only an NCHW image of static channels and size resizes on the NPU"
    if out[1] != dims[1]:
        return "only H and W may be resized"
    if a.get_string("coordinate_transformation_mode", "") == "tf_crop_and_resize":
        return "tf_crop_and_resize has no NPU form"
    if a.get_ints("axes", None) or a.get_int("antialias", 0):
        return "axes and antialias are not supported"
    if a.get_string("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "keep_aspect_ratio_policy other than stretch is not supported"
    found = _scales_or_sizes(ctx, node)
    if isinstance(found, str):
        return found
    if found[1].size != 4:
        return f"{found[0]} of {found[1].size} values for a 4-D input"
    x = node.inputs[0]
    if x.dtype is None or not x.dtype.is_floating_point():
        return f"input type {x.dtype} is not floating point"
    return None


def axis_matrix(ctx, node, axis):
    """A [in, out] of the node's resize along `axis` (2 or 3)."""
    n_in, n_out = ctx.dims(node.inputs[0])[axis], ctx.dims(node.outputs[0])[axis]
    kind, values, _ = _scales_or_sizes(ctx, node)
    a = node.attributes
    # the attributes' defaults are the same in every Resize from opset 11 (models are loaded
    # at 15 or above)
    return resize_matrix(
        n_in, n_out, float(values[axis]) if kind == "scales" else None,
        mode=a.get_string("mode", "nearest"),
        coordinate_mode=a.get_string("coordinate_transformation_mode", "half_pixel"),
        nearest_mode=a.get_string("nearest_mode", "round_prefer_floor"),
        cubic_a=a.get_float("cubic_coeff_a", -0.75),
        exclude_outside=bool(a.get_int("exclude_outside", 0)))


def resize_matrix(n_in, n_out, scale=None, mode="nearest", coordinate_mode="half_pixel",
                  nearest_mode="round_prefer_floor", cubic_a=-0.75, exclude_outside=False):
    """A [n_in, n_out] (Y = X A) of ONNX's Resize along one axis of n_in entries to n_out:
    `scale` the node's scale for this axis, None when it gives sizes (the scale is then
    n_out / n_in). Each output entry reads the input at the coordinate the transformation
    mode gives, in float64; a neighbour past either end reads the end entry."""
    x = _source_coordinates(n_in, n_out, scale, coordinate_mode)
    base = np.floor(x)
    frac = x - base                       # past the entry below; 0 at a whole coordinate
    if mode == "nearest":
        up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5,
              "floor": np.zeros_like(frac, bool), "ceil": frac > 0}.get(nearest_mode)
        if up is None:
            raise ValueError(f"Resize: unknown nearest_mode {nearest_mode!r}")
        rows, weights = (base + up)[:, None], np.ones((n_out, 1))
    elif mode == "linear":
        rows = base[:, None] + np.array([0.0, 1.0])
        weights = np.stack([1 - frac, frac], axis=1)
    elif mode == "cubic":
        offsets = np.array([-1.0, 0.0, 1.0, 2.0])
        rows = base[:, None] + offsets
        weights = _keys_kernel(frac[:, None] - offsets, cubic_a)
    else:
        raise ValueError(f"Resize: unknown mode {mode!r}")
    rows = rows.astype(np.int64)
    if exclude_outside:                   # neighbours past the ends weigh 0, the rest sum to 1
        weights = np.where((rows < 0) | (rows >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    a = np.zeros((n_in, n_out))
    cols = np.broadcast_to(np.arange(n_out)[:, None], rows.shape)
    # clamped neighbours of one output entry land on the same end entry: their weights add
    np.add.at(a, (np.clip(rows, 0, n_in - 1), cols), weights)
    return a


def _source_coordinates(n_in, n_out, scale, mode):
    """The input coordinate of each output entry 0 .. n_out - 1 (float64)."""
    y = np.arange(n_out, dtype=np.float64)
    # the target length: n_out itself from sizes, fractional from a scale (half_pixel_symmetric
    # centres the n_out entries taken in it). align_corners and pytorch_half_pixel take the
    # output's length n_out, as the specification and onnxruntime do (onnx's reference
    # Resize takes the fractional one)
    width = float(n_out) if scale is None else scale * n_in
    if scale is None:
        scale = n_out / n_in
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return y * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return y / scale
    raise ValueError(f"Resize: coordinate_transformation_mode {mode!r} has no closed form here")


def _keys_kernel(d, a):
    """Keys' cubic convolution kernel with coefficient a at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1            # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a       # 1 < |d| < 2
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(a):
    """(indices, weights or None, taps) of AxisResample for the matrix A [in, out]: weights
    None when every column holds a single 1 (a pick)."""
    taps = max(1, int((a != 0).sum(axis=0).max()))
    idx = np.zeros((a.shape[1], taps), np.int64)
    w = np.zeros((a.shape[1], taps))
    for o in range(a.shape[1]):
        rows = np.flatnonzero(a[:, o])
        idx[o, :len(rows)], w[o, :len(rows)] = rows, a[rows, o]
    if taps == 1 and np.all(w == 1.0):
        return [int(i) for i in idx[:, 0]], None, 1
    return [int(i) for i in idx.ravel()], [float(v) for v in w.ravel()], taps


@onnx_op("Resize")
class Resize:
    @classmethod
    def check(cls, ctx, node):
        if not ctx.target.runs_primitive("AxisResample"):
            return "the target has no AxisResample (resizing)"
        return _check(ctx, node)

    @classmethod
    def lower(cls, ctx, node):
        x = node.inputs[0]
        for axis in (3, 2):
            indices, weights, taps = _taps(axis_matrix(ctx, node, axis))
            if weights is None and indices == list(range(ctx.dims(x)[axis])):
                continue                       # this axis is left as it is
            extra = {} if weights is None else {"weights": weights, "taps": taps}
            x = ctx.npu.AxisResample(x, axis=axis, indices=indices, **extra,
                                     _name=f"resample_{'nchw'[axis]}")
        if x is node.inputs[0]:
            x = ctx.npu.DimTransform(x, perm=[0, 1, 2, 3], shape=[0, 0, 0, 0], _name="same")
        return [x]
