"""QDQ models in and out.

strip_qdq     a model that is already quantised (Paddle quantize_linear / dequantize_linear,
              mapped by stage 1 to QuantizeLinear / DequantizeLinear): the float model, a
              calibration table holding its activation scales (threshold = scale * qmax;
              and the observers' thresholds stage 1 kept in the model's metadata) and its
              weights' scales, so the quantised lowering keeps them.
export_qdq    the float model with the quantised lowering's scales as standard QDQ
              (QuantizeLinear / DequantizeLinear around each matrix layer, int8 / int16
              weights per output channel, int32 bias), for onnxruntime and other runtimes;
              on the graph the lowering lowered (pipeline.lowerable), so an LSTM / GRU is
              there unrolled, QDQ around each step's matrix layers, as the NPU runs it.
"""
import json

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ...errors import ConversionError
from ...mappers.quantize import FAKE_DEQUANT_KEY, FAKE_QUANT_KEY, OBSERVED_KEY
from ...naming import add_initializer
from ...onnx_io import upgrade_opset
from ...optimize import fuse_bias_into_conv_and_gemm
from ..pipeline import lowerable, prepare
from .calibrate import FORMAT

_QMAX = {ir.DataType.INT8: 127, ir.DataType.UINT8: 255, ir.DataType.INT16: 32767}


def _const(value):
    return None if value is None or value.const_value is None else value.const_value.numpy()


def _is(node, op):
    return node.op_type == op and node.domain in ("", "ai.onnx")


def _axis_shape(ndim, axis, n):
    shape = [1] * ndim
    shape[axis] = n
    return shape


def _entry(threshold, source):
    return {"min": -threshold, "max": threshold, "absmax": threshold, "threshold": threshold,
            "from": source}


def _strip_fake_quant(model, tensors, weight_scales):
    """PaddleSlim's older format as stage 1 maps it: x -> fake quantiser (integers, as floats)
    -> Conv / MatMul / Gemm with integer-valued weights -> Mul by s_w[c] / qmax_w * s_x /
    qmax_x (the dequantiser). Each such layer becomes the float layer on x with the weights
    W * s_w[c] / qmax_w (the same product), recording x's threshold s_x and the weight scales
    (in place; the quantisers nobody reads any more go with the unused nodes)."""
    graph = model.graph
    values = {v.name: v for n in graph for v in n.outputs if v.name}
    values.update({v.name: v for v in graph.inputs})
    for deq in list(graph):
        info = deq.metadata_props.get(FAKE_DEQUANT_KEY)
        layer = deq.inputs[0].producer() if info and deq.inputs[0] is not None else None
        if layer is None or layer.op_type not in ("Conv", "MatMul", "Gemm") or \
                len(list(layer.outputs[0].uses())) != 1 or layer.outputs[0].is_graph_output():
            continue
        info = json.loads(info)
        q = layer.inputs[0].producer()
        qinfo = json.loads(q.metadata_props.get(FAKE_QUANT_KEY, "null")) if q else None
        w = _const(layer.inputs[1])
        if not qinfo or qinfo["input"] not in values or w is None or \
                (_is(layer, "Gemm") and layer.attributes.get_int("transA", 0)):
            continue
        if (qinfo["threshold"], qinfo["bits"]) != (info["input_threshold"],
                                                   info["input_bits"]):
            continue      # dequantised with another scale than quantised: not one layer's
        axis = _weight_axis(layer)
        qmax_w = (1 << (info["weight_bits"] - 1)) - 1
        s_w = np.asarray(info["weight_scales"], np.float64) / qmax_w
        if s_w.size != w.shape[axis] or np.abs(w - np.rint(w)).max() > 0:
            continue
        wf = (w.astype(np.float64) * s_w.reshape(_axis_shape(w.ndim, axis, s_w.size)))
        wv = add_initializer(graph, wf.astype(np.float32), f"{layer.name}/w")
        layer.replace_input_with(0, values[qinfo["input"]])
        layer.replace_input_with(1, wv)
        ir.convenience.replace_all_uses_with(deq.outputs[0], layer.outputs[0],
                                             replace_graph_outputs=True)
        name, deq.outputs[0].name = deq.outputs[0].name, None
        layer.outputs[0].name = name
        graph.remove(deq, safe=True)
        tensors[qinfo["input"]] = _entry(qinfo["threshold"], "quantized model (fake_quantize)")
        weight_scales[wv.name] = s_w.astype(np.float32)
    common_passes.RemoveUnusedNodesPass()(model)


def strip_qdq(model):
    """(model, table or None, {weight name: scales}) with every QuantizeLinear /
    DequantizeLinear folded away (in place), and PaddleSlim's older fake_quantize layers
    turned back into float layers (`_strip_fake_quant`)."""
    graph = model.graph
    tensors, weight_scales = {}, {}
    _strip_fake_quant(model, tensors, weight_scales)
    for node in list(graph):
        if not _is(node, "DequantizeLinear"):
            continue
        x, s = _const(node.inputs[0]), _const(node.inputs[1])
        zp = _const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
            else None
        axis = node.attributes.get_int("axis", 1)
        if x is not None and s is not None:            # a quantised weight
            if zp is not None and np.any(zp != 0):
                raise ConversionError(f"{node.name}: asymmetric weights (zero point != 0) "
                                      "are not supported")
            w = x.astype(np.float32)
            scale = s.astype(np.float32)
            if scale.ndim == 1 and x.ndim > 0:
                ax = axis % x.ndim
                w = w * scale.reshape(_axis_shape(x.ndim, ax, scale.size))
            else:
                w = w * scale
            out = node.outputs[0]
            value = ir.Value(name=out.name, type=ir.TensorType(ir.DataType.FLOAT),
                             shape=ir.Shape(w.shape), const_value=ir.tensor(w, name=out.name))
            name = out.name
            out.name = None
            value.name = name
            graph.register_initializer(value)
            ir.convenience.replace_all_uses_with(out, value, replace_graph_outputs=True)
            graph.remove(node, safe=True)
            weight_scales[name] = scale.reshape(-1)
            continue
        q = node.inputs[0].producer()
        if q is None or not _is(q, "QuantizeLinear") or s is None or s.size != 1:
            continue
        if zp is not None and np.any(zp != 0):
            raise ConversionError(f"{node.name}: asymmetric activations (zero point != 0) "
                                  "are not supported")
        qmax = _QMAX.get(node.inputs[0].dtype, 127)
        thr = float(s.reshape(())) * qmax     # float64: thr / qmax gives s back exactly
        entry = _entry(thr, "quantized model")
        src = q.inputs[0]
        tensors[src.name] = entry
        tensors[node.outputs[0].name] = entry
        ir.convenience.replace_all_uses_with(node.outputs[0], src, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if not q.outputs[0].uses():
            graph.remove(q, safe=True)
    if not tensors and not weight_scales:
        return model, None, {}
    observed = model.metadata_props.get(OBSERVED_KEY)
    for name, thr in (json.loads(observed) if observed else {}).items():
        tensors.setdefault(name, _entry(thr, "quantized model (observer)"))
    table = {"format": FORMAT, "model": None, "samples": 0, "method": "quantized model",
             "tensors": tensors, "precision": {}}
    return model, table, weight_scales


def _weight_axis(node):
    if _is(node, "Conv"):
        return 0
    if _is(node, "Gemm"):
        return 0 if node.attributes.get_int("transB", 0) else 1
    return 1        # MatMul: [K, N]


def unquantised(model):
    """(ir.Model, table or None, {weight name: scales}): the float model the quantised
    lowering lowers: any QDQ folded away (`strip_qdq`), then the biases fused as in a float
    model."""
    m, table, weight_scales = strip_qdq(prepare(model))
    if table is not None:
        fuse_bias_into_conv_and_gemm(m)
    return m, table, weight_scales


def _qdq_pair(graph, value, scale, bits, name):
    """QuantizeLinear -> DequantizeLinear of `value`; returns (q output, dq output)."""
    zp = add_initializer(graph, np.zeros((), np.int8 if bits == 8 else np.int16), f"{name}/zp")
    s = add_initializer(graph, np.asarray(scale, np.float32), f"{name}/scale")
    q = ir.Node("", "QuantizeLinear", [value, s, zp], name=f"{name}/q")
    q.outputs[0].name = f"{name}/q"
    q.outputs[0].type = ir.TensorType(ir.DataType.INT8 if bits == 8 else ir.DataType.INT16)
    q.outputs[0].shape = value.shape
    dq = ir.Node("", "DequantizeLinear", [q.outputs[0], s, zp], name=f"{name}/dq")
    dq.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    dq.outputs[0].shape = value.shape
    dq.outputs[0].name = f"{name}/dq"
    return q, dq


def _dequantized(graph, name, q, scale, axis, block=None):
    """DequantizeLinear of the constant integers `q` by `scale` (along `axis`, in blocks of
    `block` entries when given; one scale when axis is None), put first in the graph: it
    reads constants only."""
    qv = add_initializer(graph, q, f"{name}q")
    sv = add_initializer(graph, np.asarray(scale, np.float32), f"{name}_scale")
    attrs = [] if axis is None else [ir.AttrInt64("axis", axis)]
    if block is not None:
        attrs.append(ir.AttrInt64("block_size", block))
    node = ir.Node("", "DequantizeLinear", [qv, sv], attributes=attrs, name=f"{name}_dq")
    node.outputs[0].name = f"{name}_dq"
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    node.outputs[0].shape = ir.Shape(q.shape)
    graph.insert_before(next(iter(graph)), node)
    return node.outputs[0]


def _operands(node, record):
    """(activation input index, weight input index, the weight as the layer multiplies it,
    axis, block): the kernel matrix's columns, which plan.py scales one by one, are the
    weight's entries along `axis` (None: one column), or with `block` its blocks of that
    many entries along axis 0 (a ConvTranspose's column is one (group, output channel,
    tap): the input channels of its group)."""
    x = next((i for i, v in enumerate(node.inputs[:2])
              if v is not None and v.name == record["input"]), None)
    if x is None:
        raise ConversionError(f"export_qdq: layer {node.name!r} does not read "
                              f"{record['input']!r}")
    wi = 1 - x if _is(node, "MatMul") else 1
    w = _const(node.inputs[wi])
    if w is None:
        raise ConversionError(f"export_qdq: layer {node.name!r} has no constant weight")
    w = w.astype(np.float64)
    if _is(node, "Conv"):
        return x, wi, w, 0, None
    if _is(node, "ConvTranspose"):
        return x, wi, w, 0, w.shape[0] // node.attributes.get_int("group", 1)
    if _is(node, "Gemm"):        # alpha is in the weight the lowering quantises
        return x, wi, w * node.attributes.get_float("alpha", 1.0), _weight_axis(node), None
    if _is(node, "MatMul"):
        if w.ndim == 1:           # [..., K] @ [K]: one column
            return x, wi, w, None, None
        return x, wi, w, w.ndim - 1 if wi == 1 else w.ndim - 2, None
    raise ConversionError(f"export_qdq: layer {node.name!r}: a quantised {node.op_type} has "
                          "no QDQ form here")


def _bias(node, n):
    """The bias [n] the lowering adds to the layer's accumulator (Gemm's beta applied), or
    None (a ConvTranspose adds its own to the float sums of its columns)."""
    if not (_is(node, "Conv") or _is(node, "Gemm")) or len(node.inputs) < 3 or \
            node.inputs[2] is None:
        return None
    b = _const(node.inputs[2])
    if b is None:
        return None
    b = b.astype(np.float64)
    if _is(node, "Gemm"):
        b = b * node.attributes.get_float("beta", 1.0)
    return np.broadcast_to(b.reshape(-1), (n,)) if b.size in (1, n) else None


def _weight_scales(w, axis, block, qmax, kept):
    """(float32 scales of the weight's columns (`_operands`) as plan.py derives them: max
    |column| / qmax, or the model's own (`kept`); the scales broadcast to the weight)."""
    if axis is None:
        colmax = np.abs(w).max()
    elif block is not None:
        colmax = np.abs(w).reshape((w.shape[0] // block, block) + w.shape[1:]).max(axis=1)
    else:
        colmax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
    if kept is not None:
        s = np.broadcast_to(np.asarray(kept, np.float64).reshape(-1), (np.size(colmax),))
        s = s.reshape(np.shape(colmax)).astype(np.float32)
    else:
        s = (np.where(colmax > 0, colmax, 1.0) / qmax).astype(np.float32)
    full = s.astype(np.float64)
    if block is not None:
        full = np.repeat(full, block, axis=0)
    elif axis is not None:
        full = full.reshape(_axis_shape(w.ndim, axis, s.size))
    return s, full


def export_qdq(model, records, target=None, preprocess=None, marks=None, enable=(),
               disable=(), input_shape=None):
    """A QDQ ModelProto of the float `model` with the scales of the quantised lowering's
    `records` (qlower.records_of), written on the graph that lowering lowered with these
    options (pipeline.lowerable), so that every record's layer is in it. An LSTM / GRU is
    there unrolled, QDQ around each step's matrix layers, as the NPU runs it."""
    m, _, weight_scales = unquantised(model)
    m = lowerable(m, target, preprocess, marks, enable, disable, input_shape)
    graph = m.graph
    nodes = {n.name: n for n in graph}
    values = {v.name: v for n in graph for v in n.outputs if v.name}
    values.update({v.name: v for v in graph.inputs})
    layers = []
    for r in records:      # each layer's operands, found before the QDQ of others rename them
        node = nodes.get(r["layer"])
        if node is None:
            raise ConversionError(f"export_qdq: layer {r['layer']!r} is not in the model")
        if r["s_y"] is not None and r["output"] not in values:
            raise ConversionError(f"export_qdq: tensor {r['output']!r} is not in the model")
        layers.append((r, node, _operands(node, r)))
    shared = {}            # one integer copy of a weight several layers read (an RNN's steps)
    for r, node, (xi, wi, w, axis, block) in layers:
        bits, name = r["bits"], r["layer"]
        qmax = (1 << (bits - 1)) - 1
        # input
        q, dq = _qdq_pair(graph, node.inputs[xi], r["s_x"], bits, f"{name}/x")
        graph.insert_before(node, [q, dq])
        node.replace_input_with(xi, dq.outputs[0])
        # weight, per output channel
        wv = node.inputs[wi]
        s_w, s_full = _weight_scales(w, axis, block, qmax, weight_scales.get(wv.name)
                                     if r["weight_scales_kept"] else None)
        key = (wv.name, bits, s_w.tobytes())
        if key not in shared:
            wq = np.clip(np.rint(w / s_full), -qmax, qmax)
            shared[key] = _dequantized(graph, f"{name}/w",
                                       wq.astype(np.int8 if bits == 8 else np.int16), s_w,
                                       axis, block)
        node.replace_input_with(wi, shared[key])
        if _is(node, "Gemm"):
            node.attributes["alpha"] = ir.AttrFloat32("alpha", 1.0)
        # bias in the accumulator's integers
        b = _bias(node, s_w.size)
        if b is not None:       # (a Conv's or Gemm's: one scale per output channel)
            sb = np.float64(np.float32(r["s_x"])) * s_w.astype(np.float64).reshape(-1)
            bq = np.rint(b / sb)
            if bits == 8:
                bias = _dequantized(graph, f"{name}/b", bq.astype(np.int32), sb, 0)
            else:      # DequantizeLinear has no int64: the int16 layer's bias as floats
                bias = add_initializer(graph, (bq * sb).astype(np.float32), f"{name}/b_f")
            node.replace_input_with(2, bias)
            if _is(node, "Gemm"):
                node.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        if r["s_y"] is None:      # the layer's output stays float (a QDQ model's last layer)
            continue
        # output (after the fused ReLU)
        y = values[r["output"]]
        users = list(y.uses())
        q, dq = _qdq_pair(graph, y, r["s_y"], bits, f"{name}/y")
        producer = y.producer()
        at = list(graph).index(producer) + 1 if producer is not None else 0
        nodes_now = list(graph)
        if at < len(nodes_now):
            graph.insert_before(nodes_now[at], [q, dq])
        else:
            graph.extend([q, dq])
        for user, idx in users:
            user.replace_input_with(idx, dq.outputs[0])
        if y.is_graph_output():
            i = [o is y for o in graph.outputs].index(True)
            graph.outputs[i] = dq.outputs[0]
            out_name, y.name = y.name, f"{y.name}/float"
            dq.outputs[0].name = out_name
    common_passes.RemoveUnusedNodesPass()(m)     # the float weights the layers no longer read
    proto = ir.serde.serialize_model(m)
    # int16 QuantizeLinear and blocked DequantizeLinear need opset 21
    if any(r["bits"] == 16 for r in records) or any(op[4] for _, _, op in layers):
        proto = _requantized_after_moves(upgrade_opset(proto, 21))
    onnx.checker.check_model(proto)
    return proto


# ops that move or pick a tensor's values without computing new ones: a quantised tensor
# through them is still on its grid
_MOVES = ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice",
          "Gather", "Split")


def _requantized_after_moves(proto):
    """`proto` (opset 21) with a Quantize / Dequantize pair of the same scale after each
    op of _MOVES that reads a dequantised int8 tensor and whose output no Quantize reads:
    exact (its values are on that grid already), and onnxruntime 1.32 then has no pair to
    move through it. Moving an int8 pair itself at opset 21 it writes a QuantizeLinear of a
    uint8 zero point and output_dtype int8, which it refuses to load."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    made = {o: n for n in graph.node for o in n.output}
    readers = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    nodes = []
    for node in graph.node:
        nodes.append(node)
        dq = made.get(node.input[0]) if node.input else None
        if node.op_type not in _MOVES or dq is None or dq.op_type != "DequantizeLinear" or \
                len(dq.input) < 3 or dq.input[2] not in inits or \
                inits[dq.input[2]].data_type != onnx.TensorProto.INT8:
            continue
        out = node.output[0]
        if any(r.op_type == "QuantizeLinear" for r in readers.get(out, ())):
            continue
        # (the op's output renamed: its readers and a graph output keep the name)
        node.output[0] = moved = f"{out}/moved"
        nodes += [onnx.helper.make_node("QuantizeLinear", [moved, dq.input[1], dq.input[2]],
                                        [f"{out}/q"], name=f"{out}/q"),
                  onnx.helper.make_node("DequantizeLinear", [f"{out}/q", dq.input[1],
                                                             dq.input[2]],
                                        [out], name=f"{out}/dq")]
    del graph.node[:]
    graph.node.extend(nodes)
    return proto
