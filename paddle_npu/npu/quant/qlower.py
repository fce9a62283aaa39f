"""Quantised lowering: the float NPU plan of each matrix layer -> integer primitives.

Per lowered Conv / Gemm / MatMul layer (the nodes sharing one `paddle_npu.source`):

    x (float) -Quantize(s_x)-> Im2Col -> QVMM per tile (int8 x int8 -> int32)
      -> AddInTile (+ int32 bias) -> Requantize (M / 2^shift per column) -Dequantize(s_y)->

    s_x = threshold(x) / qmax          activations: per tensor, from the calibration table
    s_w[m] = max |W[:, m]| / qmax_w     weights: per output channel (qmax_w = 127 / 32767)
    bias_q[m] = round(b[m] / (s_x s_w[m]))   in the accumulator's type
    M[m] / 2^shift[m] ~= s_x s_w[m] / s_y   M an integer of up to 31 bits (fewer when the
                                          accumulator bound would overflow int64)

Bits per layer: the default (8), 16 for layers marked high precision (`_hp`: node name or
output name ending `_hp`, or a 16-bit precision mark (graph.precision)) and for
layers listed in a precision table. int16 layers accumulate in
64 bits. A ReLU that alone consumes a layer's output is fused into Requantize (saturating at
0, on the ReLU output's range). Between matrix layers values are dequantised: the vector
unit's ops (pooling, Add, ...) and the CPU see exactly the integer grid's values.
"""
import json

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ...errors import ConversionError
from ...naming import add_initializer
from .. import graph as g
from ..ops import DOMAIN, get_primitive
from ..ops.quant import qrange
from .calibrate import load_precision, load_table

QUANT_KEY = g.QUANTIZATION     # model metadata: the per-layer scales (JSON)
HP_SUFFIX = "_hp"
MULT_BITS = 31


def layer_bits_from_marks(model):
    """{node name: 16} for nodes marked high precision (names / metadata)."""
    out = {}
    for node in model.graph:
        if node.name.endswith(HP_SUFFIX) or any(v.name and v.name.endswith(HP_SUFFIX)
                                                for v in node.outputs) or \
                g.precision(node) == 16:
            out[node.name] = 16
    return out


def fixed_point(real, acc_bound):
    """(M, D = 2^shift) int64 arrays with M / D ~= real (> 0), |acc| * M < 2^62."""
    mbits = int(min(MULT_BITS, 62 - np.ceil(np.log2(max(acc_bound, 2)))))
    if mbits < 8:
        raise ConversionError(f"accumulator bound {acc_bound:.3g} leaves no room for the "
                              "requantisation multiplier")
    real = np.asarray(real, np.float64)
    exp = np.floor(np.log2(np.maximum(real, 1e-300)))
    shift = np.clip(mbits - 1 - exp, 1, 62).astype(np.int64)
    mult = np.rint(real * np.exp2(shift)).astype(np.int64)
    return mult, (np.int64(1) << shift)


def _producer(value, source, op_type):
    p = value.producer() if value is not None else None
    if p is not None and p.domain == DOMAIN and p.op_type == op_type and \
            g.source(p) == source:
        return p
    return None


class _Layer:
    """The nodes of one lowered matrix layer."""

    def __init__(self, source, vmms):
        self.source, self.vmms = source, vmms
        self.op = g.source_op(vmms[0]) or ""
        xs = {v.inputs[0] for v in vmms}
        if len(xs) != 1:
            raise ConversionError(f"{source}: the VMM tiles read different rows")
        self.rows = vmms[0].inputs[0]
        self.im2col = _producer(self.rows, source, "Im2Col")
        self.entry = self.im2col.inputs[0] if self.im2col else self.rows
        outs = [v.outputs[0] for v in vmms]
        users = {u for o in outs for u, _ in o.uses()}
        self.add = None
        if len(users) == 1:
            u = next(iter(users))
            if u.domain == DOMAIN and u.op_type == "AddInTile" and \
                    g.source(u) == source:
                self.add = u
        if self.add is None and len(vmms) != 1:
            raise ConversionError(f"{source}: {len(vmms)} VMM tiles but no AddInTile")
        self.acc = self.add.outputs[0] if self.add else outs[0]
        nxt = g.single_user(self.acc)
        self.to_out = nxt if nxt is not None and nxt.domain == DOMAIN and \
            nxt.op_type == "DimTransform" and g.source(nxt) == source \
            else None
        self.out = self.to_out.outputs[0] if self.to_out else self.acc
        nxt = g.single_user(self.out)
        self.relu = nxt if nxt is not None and nxt.op_type == "Relu" and \
            nxt.domain in ("", "ai.onnx") else None

    def offsets(self):
        if self.add is None:
            return [0]
        offs = self.add.attributes.get_ints("offsets", [])
        return list(offs) or [0] * len(self.vmms)

    def width(self):
        if self.add is None:
            return g.constant(self.vmms[0].inputs[1]).shape[1]
        return self.add.attributes.get_int("width", 0) or max(
            o + g.constant(p.inputs[1]).shape[1] for o, p in zip(self.offsets(), self.vmms))

    def input_name(self, table):
        """The calibrated tensor the layer's rows come from (through its own reshapes)."""
        v = self.entry
        while v.name not in table:
            p = _producer(v, self.source, "DimTransform")
            if p is None:
                raise ConversionError(f"layer {self.source}: its input {self.entry.name!r} "
                                      "is not in the calibration table")
            v = p.inputs[0]
        return v.name


def _node(graph, before, domain, op_type, inputs, attrs, name, like, dtype, shape):
    """An integer primitive standing in for part of the layer `like` (a node of it)."""
    node = g.make_node(domain, op_type, inputs, attrs, name, dtype)
    node.overload = get_primitive(op_type).overload(attrs, [g.dims(v) for v in inputs])
    g.copy_annotations(like, node)
    out = node.outputs[0]
    out.shape = shape
    if before is None:
        graph.append(node)
    else:
        graph.insert_before(before, node)
    return out


def _threshold(entry, bits):
    return float(entry["absmax"] if bits > 8 else entry["threshold"])


def quantize_lowered(model, table, bits=8, layer_bits=None, weight_scales=None,
                     float_outputs=False):
    """Rewrite a lowered ir.Model's matrix layers in place to integer primitives.
    table: calibration table (dict or path); layer_bits: {layer or output name: 8 | 16};
    weight_scales: {layer: per-output-channel scales} to keep (a quantised Paddle model's);
    float_outputs: a layer whose output has no scale in the table (a QDQ model quantises its
    layers' inputs, not always their outputs: the last layer's logits) reads its accumulator
    out as floats (Dequantize by s_x * s_w per column) instead of failing.
    Returns the per-layer quantisation records (also stored in the model's metadata)."""
    from ..functions import attach_functions

    table = load_table(table)
    tensors = table["tensors"]
    layer_bits = dict(layer_bits or {})
    for name, p in table.get("precision", {}).items():
        layer_bits.setdefault(name, 16 if p == "int16" else 8)
    weight_scales = weight_scales or {}
    graph = model.graph
    by_source = {}
    for node in graph:
        if node.domain == DOMAIN and node.op_type == "VMM":
            by_source.setdefault(g.source(node), []).append(node)
    records = []
    for source, vmms in by_source.items():
        meta = vmms[0]
        if g.mark(meta) == "cpu":
            continue                # `_cpu` layers stay float, on the CPU
        if g.precision(meta) == 16:
            layer_bits.setdefault(source, 16)      # an `_hp` mark (marks.py)
        layer = _Layer(source, vmms)
        out_value = layer.relu.outputs[0] if layer.relu else layer.out
        if out_value.name not in tensors and float_outputs:
            layer.relu = None             # the ReLU stays a vector op on the float output
            out_value = layer.out
        out_name = out_value.name
        float_out = float_outputs and out_name not in tensors
        lb = layer_bits.get(source, layer_bits.get(out_name, layer_bits.get(layer.out.name,
                                                                            bits)))
        if lb not in (8, 16):
            raise ConversionError(f"layer {source}: {lb}-bit integers are not supported")
        in_name = layer.input_name(tensors)
        if out_name not in tensors and not float_out:
            raise ConversionError(f"layer {source}: its output {out_name!r} is not in the "
                                  "calibration table")
        a_lo, a_hi = qrange(lb)
        w_hi = a_hi
        s_x = np.float32(max(_threshold(tensors[in_name], lb), 1e-12) / a_hi)
        s_y = None if float_out else \
            np.float32(max(_threshold(tensors[out_name], lb), 1e-12) / a_hi)
        offsets, width = layer.offsets(), layer.width()
        tiles = [g.constant(v.inputs[1]).astype(np.float64) for v in vmms]
        colmax = np.zeros(width)
        for off, w in zip(offsets, tiles):
            colmax[off:off + w.shape[1]] = np.maximum(colmax[off:off + w.shape[1]],
                                                      np.abs(w).max(axis=0))
        kept = weight_scales.get(source)
        s_w = None
        if kept is not None:
            s_w = np.broadcast_to(np.asarray(kept, np.float64).reshape(-1), (width,))
            if np.any(colmax / np.maximum(s_w, 1e-30) > w_hi + 0.5) or any(
                    np.abs(w / s_w[o:o + w.shape[1]] - np.rint(w / s_w[o:o + w.shape[1]]))
                    .max() > 1e-3 for o, w in zip(offsets, tiles)):
                s_w = None            # weights changed since (BatchNorm folded): re-derive
        kept_scales = s_w is not None
        if s_w is None:
            s_w = np.where(colmax > 0, colmax, 1.0) / w_hi
        s_w = s_w.astype(np.float32).astype(np.float64)
        acc_bits = 32 if lb == 8 else 64
        acc_type = ir.DataType.INT32 if acc_bits == 32 else ir.DataType.INT64
        int_type = ir.DataType.INT8 if lb == 8 else ir.DataType.INT16
        np_int = np.int8 if lb == 8 else np.int16

        # int8: quantised before Im2Col (which moves int8). int16: after it, the same
        # values (Im2Col copies, its padding quantises to 0), as onnxruntime's Pad has no
        # int16 kernel for the function body
        early = layer.im2col is not None and lb == 8
        at = layer.entry if early else layer.rows
        xq = _node(graph, layer.im2col if early else vmms[0], DOMAIN, "Quantize",
                   [at, add_initializer(graph, np.asarray(s_x), f"{source}/s_x")],
                   {"bits": lb}, f"{source}/quantize", meta, int_type, at.shape)
        if early:
            layer.im2col.replace_input_with(0, xq)
            layer.im2col.outputs[0].type = ir.TensorType(int_type)
            rows = layer.im2col.outputs[0]
        else:
            rows = xq
        partials, k_rows = [], 0
        for v, off, w in zip(vmms, offsets, tiles):
            wq = np.clip(np.rint(w / s_w[off:off + w.shape[1]]), -w_hi, w_hi).astype(np_int)
            k_rows = max(k_rows, w.shape[0])
            wv = add_initializer(graph, wq, f"{v.name}/wq")
            partials.append(_node(graph, v, DOMAIN, "QVMM", [rows, wv],
                                  {"row_offset": v.attributes.get_int("row_offset", 0),
                                   "acc_bits": acc_bits}, f"{v.name}/q", meta, acc_type,
                                  v.outputs[0].shape))
        k_total = sum(w.shape[0] for w in tiles)
        acc_bound = (k_total * (-a_lo) * w_hi)
        insert_at = _next_node(graph, layer.add or vmms[-1])
        bias = g.constant(layer.add.inputs[0]) if layer.add is not None and \
            layer.add.inputs[0] is not None else None
        if layer.add is not None:
            bq = None
            if bias is not None:
                bq = np.rint(bias.astype(np.float64) / (np.float64(s_x) * s_w))
                info = np.iinfo(np.int32 if acc_bits == 32 else np.int64)
                bq = np.clip(bq, info.min, info.max).astype(info.dtype)
                acc_bound += float(np.abs(bq).max())
                bq = add_initializer(graph, bq, f"{source}/bias_q")
            acc = _node(graph, insert_at, DOMAIN, "AddInTile", [bq, *partials],
                        {"offsets": offsets, "width": width}, f"{source}/add_in_tile_q", meta,
                        acc_type, layer.acc.shape)
        else:
            acc = partials[0]
        if float_out:       # no scale to requantise to: the accumulator read out as floats
            y = _node(graph, insert_at, DOMAIN, "Dequantize",
                      [acc, add_initializer(graph, (np.float64(s_x) * s_w).astype(np.float32),
                                            f"{source}/s_acc")], {},
                      f"{source}/dequantize", meta, ir.DataType.FLOAT, layer.acc.shape)
        else:
            real = np.float64(s_x) * s_w / np.float64(s_y)
            mult, div = fixed_point(real, acc_bound)
            yq = _node(graph, insert_at, DOMAIN, "Requantize",
                       [acc, add_initializer(graph, mult, f"{source}/rq_mult"),
                        add_initializer(graph, div, f"{source}/rq_div")],
                       {"bits": lb, "relu": 1 if layer.relu else 0}, f"{source}/requantize",
                       meta, int_type, layer.acc.shape)
            y = _node(graph, insert_at, DOMAIN, "Dequantize",
                      [yq, add_initializer(graph, np.asarray(s_y), f"{source}/s_y")], {},
                      f"{source}/dequantize", meta, ir.DataType.FLOAT, layer.acc.shape)
        g.take_over(layer.acc, y)
        if layer.relu is not None:      # fused: the ReLU's consumers read the layer directly
            g.take_over(layer.relu.outputs[0], layer.out if layer.to_out else y)
        records.append({"layer": source, "op": layer.op, "bits": lb, "input": in_name,
                        "output": out_name, "relu_fused": layer.relu is not None,
                        "s_x": float(s_x), "s_y": None if float_out else float(s_y),
                        "s_w_min": float(s_w.min()), "s_w_max": float(s_w.max()),
                        "weight_scales_kept": kept_scales, "acc_bits": acc_bits,
                        "k": k_total, "tiles": len(vmms)})
    common_passes.RemoveUnusedNodesPass()(model)
    attach_functions(model)
    common_passes.RemoveUnusedFunctionsPass()(model)
    model.metadata_props[QUANT_KEY] = json.dumps({"bits": bits, "layers": records})
    return records


def _next_node(graph, node):
    nodes = list(graph)
    i = nodes.index(node)
    return nodes[i + 1] if i + 1 < len(nodes) else None


def records_of(model):
    """The per-layer quantisation records stored in a quantised model (path / proto / ir)."""
    from ...onnx_io import load_proto

    proto = load_proto(model)
    for p in proto.metadata_props:
        if p.key == QUANT_KEY:
            return json.loads(p.value)["layers"]
    return None


def quantized_lower(model, table=None, bits=8, target=None, plan="packed", precision=None,
                    preprocess=None, **lower_options):
    """Lower an ONNX model and quantise it: (ir.Model, Report, records).
    table: calibration table (path / dict); None for a model already quantised (QDQ) whose
    scales it then keeps. precision: a precision table (path / dict {name: int8|int16})."""
    from ...optimize import fuse_bias_into_conv_and_gemm
    from ..pipeline import lower, prepare
    from .qdq import strip_qdq

    m = prepare(model)
    m, qdq_table, weight_scales = strip_qdq(m)
    if qdq_table is not None:     # with the weights constant again, the biases fuse as usual
        fuse_bias_into_conv_and_gemm(m)
    if table is None:
        if qdq_table is None:
            raise ConversionError("the model is not quantised: give a calibration table "
                                  "(`paddle-npu calibrate`)")
        table = qdq_table
    else:
        table = load_table(table)
        if qdq_table is not None:          # the model's own scales win over calibration
            table = dict(table, tensors={**table["tensors"], **qdq_table["tensors"]})
    layer_bits = layer_bits_from_marks(m)
    if precision:
        for name, p in load_precision(precision).items():
            layer_bits[name] = 16 if p == "int16" else 8
    source_weight = {}
    for node in m.graph:
        if node.op_type in ("Conv", "Gemm", "MatMul") and len(node.inputs) > 1 and \
                node.inputs[1] is not None and node.inputs[1].name in weight_scales:
            source_weight[node.name] = weight_scales[node.inputs[1].name]
    lowered, report = lower(m, target, plan, preprocess, **lower_options)
    records = quantize_lowered(lowered, table, bits, layer_bits, source_weight,
                               float_outputs=qdq_table is not None)
    return lowered, report, records
