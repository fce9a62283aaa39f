"""onnx's shape inference with onnxruntime's pool sizes: what both stages infer shapes with.

onnx's C++ inference (1.23) sizes a ceil_mode MaxPool / AveragePool as ceil((size + pads -
span) / stride) + 1; onnxruntime, which runs the model, drops a last window that would start
in the end padding or past the input (`pooled_size`). A model that leaves such a pool's size
to inference would be declared one row or column larger than what it computes. `infer`
corrects those sizes and infers again from them: non-strict inference keeps a declared size
where it disagrees and carries it onward.
"""
import onnx
from onnx import helper

POOLS = ("MaxPool", "AveragePool")


def pooled_size(size, k, s, d, p0, p1, ceil):
    """onnxruntime's output size: (size + pads - span) / s + 1, the division rounded toward
    zero (a C++ integer division: a window longer than the padded image still gives one
    output, as a 2x2 stride-2 pool of a height-1 image does, where floor would give none)
    or, with ceil_mode, up, a last window then starting inside the image or its begin
    padding (below 1: no window, which onnxruntime refuses or leaves empty)."""
    span = d * (k - 1) + 1
    room = size + p0 + p1 - span
    if not ceil:
        return (room // s if room >= 0 else -(-room // s)) + 1
    out = -(-room // s) + 1
    return out - 1 if (out - 1) * s >= size + p0 else out


def infer(proto, check_type=False, strict_mode=False, data_prop=True):
    """onnx.shape_inference.infer_shapes(proto, ...) with the outputs of the main graph's
    MaxPool / AveragePool nodes sized as onnxruntime sizes them, and every shape after
    them inferred from those sizes."""
    def onnx_infer(p):
        return onnx.shape_inference.infer_shapes(p, check_type=check_type,
                                                 strict_mode=strict_mode, data_prop=data_prop)
    inferred = onnx_infer(proto)
    for _ in range(sum(n.op_type in POOLS for n in proto.graph.node)):
        fixes = _pool_size_fixes(inferred.graph)
        if not fixes:
            break
        proto = _declared(proto, fixes)
        inferred = onnx_infer(proto)
    return inferred


def _pool_size_fixes(graph):
    """{output name: its TypeProto at onnxruntime's size} of the pools whose inferred output
    size is not onnxruntime's (input sizes static along the pooled axes)."""
    types = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
    types.update((t.name, helper.make_tensor_type_proto(t.data_type, t.dims))
                 for t in graph.initializer)
    fixes = {}
    for node in graph.node:
        if node.op_type not in POOLS or not node.output or node.output[0] not in types or \
                node.input[0] not in types:
            continue
        want = _onnxruntime_dims(node, _dims(types[node.input[0]]))
        have = types[node.output[0]]
        dims = _dims(have)
        if want is None or dims is None or len(dims) != len(want):
            continue
        if any(w is not None and w != d for w, d in zip(want, dims)):
            fixed = onnx.TypeProto()
            fixed.CopyFrom(have)
            for dim, w in zip(fixed.tensor_type.shape.dim, want):
                if w is not None:
                    dim.Clear()
                    dim.dim_value = w
            fixes[node.output[0]] = fixed
    return fixes


def _dims(type_proto):
    """Ints per axis (None where not static), None when the rank is unknown."""
    if not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None
            for d in type_proto.tensor_type.shape.dim]


def _onnxruntime_dims(node, dims):
    """The output dims onnxruntime gives a MaxPool / AveragePool on an input of `dims`, the
    spatial ones where their input sizes are static (None elsewhere); None when not known
    (SAME auto_pad: onnx and onnxruntime agree there)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    kernel = list(attrs.get("kernel_shape", []))
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if dims is None or not kernel or len(dims) != len(kernel) + 2 or \
            auto not in ("NOTSET", "", "VALID"):
        return None
    n = len(kernel)
    strides = list(attrs.get("strides", [1] * n))
    dilations = list(attrs.get("dilations", [1] * n))
    pads = list(attrs.get("pads", [0] * 2 * n)) if auto != "VALID" else [0] * 2 * n
    ceil = attrs.get("ceil_mode", 0)
    spatial = [pooled_size(size, k, s, d, p0, p1, ceil) if size is not None else None
               for size, k, s, d, p0, p1 in zip(dims[2:], kernel, strides, dilations,
                                                 pads[:n], pads[n:])]
    if any(size is not None and size < 0 for size in spatial):
        return None     # onnxruntime refuses it
    return [None, None] + spatial


def _declared(proto, fixes):
    """A copy of `proto` declaring the pool outputs of `fixes` at onnxruntime's size, with
    what it declared after them (inference's earlier sizes) left to be inferred again."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    after = _downstream(graph, set(fixes))
    kept = [v for v in graph.value_info if v.name not in after or v.name in fixes]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    declared = {v.name: v for v in graph.value_info}
    outputs = {v.name: v for v in graph.output}
    for name, type_proto in fixes.items():
        target = outputs.get(name) or declared.get(name) or graph.value_info.add(name=name)
        target.type.CopyFrom(type_proto)
    for v in graph.output:
        if v.name in after and v.name not in fixes and v.type.tensor_type.HasField("shape"):
            for dim in v.type.tensor_type.shape.dim:     # symbolic names kept
                if dim.HasField("dim_value"):
                    dim.Clear()
    return out


def _downstream(graph, names):
    """`names` and every value the main graph's nodes compute from them."""
    reached = set(names)
    for node in graph.node:         # (nodes are topologically sorted)
        if any(i in reached for i in node.input):
            reached.update(o for o in node.output if o)
    return reached

