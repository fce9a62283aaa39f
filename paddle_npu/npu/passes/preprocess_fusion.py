"""Fused image preprocessing as a stage-2 pass: raw uint8 images in.

The model's image input (a float [N, C, H, W] input) becomes a uint8 input of the raw
image's shape and layout, under the same name; what is inserted in front of it, and why, is
in paddle_npu/preprocess.py (the spec, the arithmetic). `FusePreprocess` is the pass `lower`
runs; `fuse_preprocess` runs the same pass (and, with primitives=True, the function bodies'
attachment) on a model of its own.
"""
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ...errors import ConversionError
from ...naming import UniqueNames
from ...onnx_io import load_model
from ...preprocess import CHANNELS, MODES, affine, as_spec, crop_window, lut_tables
from ..emulation import MIN_BODY_OPSET
from ..emulation.functions import emulate
from ..ops import DOMAIN
from .common import with_input_shapes
from .framework import Pass, PassResult

MIN_IR_VERSION = 10     # function overloads
_FLOAT_TYPES = ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16")
_HOLDS_UINT8 = _FLOAT_TYPES + ("UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64")


@dataclass
class Fused(PassResult):
    fused: dict = None          # what was fused (`fuse_into`)


class FusePreprocess(Pass):
    """Transpose / Slice / Cast / Scale / ScaleLut / SwapChannel in front of the image input
    (`fuse_into`)."""
    name = "preprocess"
    Result = Fused

    def __init__(self, spec, mode=None, primitives=True):
        super().__init__()
        self.spec, self.mode, self.primitives = spec, mode, primitives

    def run(self, model, result):
        info = fuse_into(model, self.spec, self.mode, self.primitives)
        result.fused = info
        result.fired.append(f"preprocessing fused into input {info['input']!r}")


def fuse_preprocess(model, spec, mode=None, primitives=False):
    """Fuse the preprocessing `spec` describes in front of the model's image input.

    model: path, bytes, ModelProto or ir.Model (an ir.Model is rewritten in place when no
    opset upgrade is needed). spec: a PreprocessSpec or a dict of its fields. mode: "float" |
    "int8" (None: spec.mode). primitives: emit the NPU primitives Scale / ScaleLut /
    SwapChannel (domain ai.paddle_npu, the model raised to their function bodies' opset, the
    bodies attached) instead of standard ONNX ops. Returns (ir.Model, info): info says what
    was fused.
    """
    m = _load(model, primitives)
    result = FusePreprocess(spec, mode, primitives)(m)
    if primitives:
        emulate(m)
        m.ir_version = max(m.ir_version or 0, MIN_IR_VERSION)
    return m, result.fused


def fused_reference(model, spec, input_shape=None):
    """What a lowered model is verified against: the model as `lower` changed it before
    lowering, its inputs' sizes fixed (`input_shape`), then preprocessing fused with standard
    ONNX ops (a ModelProto); the model itself when neither is given."""
    if input_shape:
        model = with_input_shapes(model, input_shape)
    if spec is None:
        return model
    return ir.serde.serialize_model(fuse_preprocess(model, spec)[0])


class _Chain:
    """Builds the nodes inserted in front of the model, with types and shapes."""

    def __init__(self, graph):
        self.ir, self.graph = ir, graph
        self.nodes = []
        self.unique = UniqueNames.of_graph(graph)

    def const(self, array, suffix):
        ir = self.ir
        array = np.asarray(array)
        if not array.flags.c_contiguous:     # (np.ascontiguousarray would make a scalar 1-D)
            array = array.copy()
        name = self.unique(f"preprocess/{suffix}")
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        return value

    def op(self, op_type, inputs, attrs, dtype, shape, name, domain=""):
        ir = self.ir
        node = ir.Node(domain, op_type, inputs, ir.convenience.convert_attributes(attrs),
                       name=self.unique(f"preprocess/{name}"))
        out = node.outputs[0]
        out.name, out.type, out.shape = node.name, ir.TensorType(dtype), ir.Shape(shape)
        self.nodes.append(node)
        return out


def _load(model, primitives):
    """An ir.Model to rewrite (the given one when it is an ir.Model that can be used as is)."""
    if isinstance(model, ir.Model) and (not primitives or
                                        model.opset_imports.get("", 1) >= _body_opset()):
        return model
    return load_model(model, _body_opset() if primitives else None, infer=False)


def _body_opset():
    return MIN_BODY_OPSET


def _image_input(graph, name):
    candidates = []
    for v in graph.inputs:
        if v.name in graph.initializers:
            continue
        if name is not None and v.name != name:
            continue
        ok = v.shape is not None and len(v.shape) == 4 and v.dtype is not None and \
            v.dtype.name in _FLOAT_TYPES
        if name is not None and not ok:
            raise ConversionError(f"preprocess: input {name!r} is not a 4-D float image input "
                                  f"(shape {v.shape}, type {v.dtype})")
        if ok:
            candidates.append(v)
    if name is not None and not candidates:
        raise ConversionError(f"preprocess: the model has no input {name!r} (inputs: "
                              f"{', '.join(v.name for v in graph.inputs)})")
    if not candidates:
        raise ConversionError("preprocess: the model has no 4-D float input to take an image")
    if len(candidates) > 1:
        raise ConversionError(f"preprocess: several image-like inputs "
                              f"({', '.join(v.name for v in candidates)}): choose one with "
                              f"--preprocess-input / input")
    return candidates[0]


def _only_consumer(value):
    """The node and input index reading `value`, when exactly one node reads it once."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None, None
    return uses[0][0], uses[0][1]


def _const_of(value):
    return None if value is None or value.const_value is None else value.const_value.numpy()


def _quantize_consumer(node, index):
    """(q, zero_point, dtype) of a per-tensor QuantizeLinear reading the image, else None."""
    if node is None or index != 0 or node.op_type != "QuantizeLinear" or \
            node.domain not in ("", "ai.onnx") or node.outputs[0].is_graph_output():
        return None
    scale = _const_of(node.inputs[1])
    zp = _const_of(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
        else None
    if scale is None or scale.size != 1 or (len(node.inputs) > 2 and node.inputs[2] is not None
                                            and zp is None):
        return None
    if zp is not None and (zp.size != 1 or zp.dtype.name not in ("int8", "uint8")):
        return None
    if node.attributes.get_int("saturate", 1) != 1 or \
            node.attributes.get_int("output_dtype", 0) not in (0, 2, 3):
        return None
    dtype = zp.dtype.name if zp is not None else \
        {2: "uint8", 3: "int8"}.get(node.attributes.get_int("output_dtype", 0), "uint8")
    return float(scale.reshape(())), int(zp.reshape(())) if zp is not None else 0, dtype


def _foldable_conv(node, index, channels):
    """The Conv whose weights can absorb the channel swap, or None."""
    if node is None or index != 0 or node.op_type != "Conv" or \
            node.domain not in ("", "ai.onnx") or node.attributes.get_int("group", 1) != 1:
        return None
    w = _const_of(node.inputs[1])
    if w is None or w.ndim < 3 or w.shape[1] != channels:
        return None
    return node


def fuse_into(model, spec, mode=None, primitives=False):
    """The fusion of `fuse_preprocess` on an ir.Model, in place; returns the info."""
    spec = as_spec(spec)
    mode = mode or spec.mode
    if mode not in MODES:
        raise ConversionError(f"preprocess: mode must be one of {', '.join(MODES)}, "
                              f"not {mode!r}")
    return _Fusion(model, spec, mode, primitives).run()


def _dims(shape):
    return [d if isinstance(d, int) else str(d) for d in shape]


class _Fusion:
    """One fusion: what the spec means for this model's input, then the nodes, in order."""

    def __init__(self, model, spec, mode, primitives):
        self.np, self.ir = np, ir
        self.graph, self.spec, self.mode, self.primitives = model.graph, spec, mode, primitives
        self.opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        self.chain = _Chain(self.graph)
        self.steps, self.removed, self.quantisation = [], [], None
        self.image = image = _image_input(self.graph, spec.input)
        self.n, c, self.h, self.w = self.model_dims = list(image.shape)
        if not isinstance(c, int) or c not in (1, 3):
            raise ConversionError(f"preprocess: input {image.name!r} has {c} channels; an image "
                                  f"input has 1 (gray) or 3 (rgb / bgr)")
        self.c = c
        self.model_pf = spec.model_pixel_format or ("gray" if c == 1 else "rgb")
        self.raw_pf = spec.pixel_format or self.model_pf
        for key, pf in (("model_pixel_format", self.model_pf), ("pixel_format", self.raw_pf)):
            if CHANNELS[pf] != c:
                raise ConversionError(f"preprocess: {key} {pf} has {CHANNELS[pf]} channel(s) "
                                      f"but input {image.name!r} has {c}")
        # order[j]: the raw channel model channel j is taken from
        self.order = None if self.raw_pf == self.model_pf else [2, 1, 0]
        a, b = affine(spec, c)          # model channel order
        self.a, self.b = a.copy(), b.copy()        # raw channel order: Scale runs before the swap
        if self.order is not None:
            self.a[self.order], self.b[self.order] = a, b
        self.raw_hw, self.crop = self._crop_window()
        self.float_type = image.dtype

    def _crop_window(self):
        h, w, resize = self.h, self.w, self.spec.resize_dims
        if not (isinstance(h, int) and isinstance(w, int)):    # any size: the raw one, no crop
            return (tuple(resize) if resize else (h, w)), None
        return crop_window(h, w, resize)

    def op(self, op_type, inputs, attrs, dtype, name, primitive=False):
        return self.chain.op(op_type, inputs, attrs, dtype, self.dims, name,
                             DOMAIN if primitive else "")

    def const(self, array, name):
        return self.chain.const(array, name)

    def run(self):
        ir, spec, c = self.ir, self.spec, self.c
        raw_dims = [self.n, c, *self.raw_hw] if spec.channel_format == "nchw" \
            else [self.n, *self.raw_hw, c]
        self.raw = ir.Value(name=self.image.name, type=ir.TensorType(ir.DataType.UINT8),
                            shape=ir.Shape(raw_dims))
        self.dims = [self.n, c, *self.raw_hw]
        cur = self.layout(self.raw)
        cur = self.center_crop(cur)
        consumer, index = _only_consumer(self.image)
        quant = _quantize_consumer(consumer, index)
        if self.mode == "int8" or quant is not None:
            cur = self.scale_lut(cur, quant)
        else:
            cur = self.scale(self.cast(cur))
        if self.order is not None:
            cur = self.swap(cur, None if quant else _foldable_conv(consumer, index, c))
        if quant is not None:
            self.cancel_quantize(cur, consumer)
        elif self.quantisation is not None:
            cur = self.dequantize(cur)
        else:
            cur = self.cancel_casts(cur, consumer)
        self.rewire(cur)
        return {"input": self.raw.name, "mode": self.mode,
                "raw": {"shape": _dims(raw_dims), "dtype": "uint8",
                        "channel_format": spec.channel_format, "pixel_format": self.raw_pf},
                "model": {"shape": _dims(self.model_dims),
                          "dtype": self.float_type.name.lower(), "pixel_format": self.model_pf},
                "steps": self.steps, "removed": self.removed, "quantisation": self.quantisation,
                "ops": "npu primitives" if self.primitives else "standard onnx",
                "spec": spec.as_dict()}

    # --- the steps, in their order -------------------------------------------------------------
    def layout(self, cur):
        if self.spec.channel_format != "nhwc":
            return cur
        self.steps.append({"op": "Transpose", "detail": "NHWC -> NCHW", "perm": [0, 3, 1, 2]})
        return self.op("Transpose", [cur], {"perm": [0, 3, 1, 2]}, self.ir.DataType.UINT8,
                       "transpose")

    def center_crop(self, cur):
        if self.crop is None:
            return cur
        np, (top, left), h, w = self.np, self.crop, self.h, self.w
        self.dims = [self.n, self.c, h, w]
        starts, ends = [top, left], [top + h, left + w]
        u8 = self.ir.DataType.UINT8
        if self.opset >= 10:
            cur = self.op("Slice", [cur, self.const(np.array(starts, np.int64), "crop.starts"),
                                    self.const(np.array(ends, np.int64), "crop.ends"),
                                    self.const(np.array([2, 3], np.int64), "crop.axes")],
                          {}, u8, "crop")
        else:                      # Slice-1: the window as attributes
            cur = self.op("Slice", [cur], {"starts": starts, "ends": ends, "axes": [2, 3]}, u8,
                          "crop")
        rh, rw = self.raw_hw
        self.steps.append({"op": "Slice", "detail": f"center crop {rh}x{rw} -> {h}x{w} at "
                                                    f"({top}, {left})",
                           "offset": [top, left], "size": [h, w]})
        return cur

    def cast(self, cur):
        t = self.float_type
        self.steps.append({"op": "Cast", "detail": f"uint8 -> {t.name.lower()}",
                           "to": t.name.lower()})
        return self.op("Cast", [cur], {"to": int(t)}, t, "cast")

    def scale(self, cur):
        np = self.np
        if np.all(self.a == 1.0) and not np.any(self.b):
            self.steps.append({"op": "Scale", "skipped": "every scale is 1 and every mean 0"})
            return cur
        npt = self.float_type.numpy()
        a, b = self.a.astype(npt), self.b.astype(npt)
        if self.primitives:
            cur = self.op("Scale", [cur, self.const(a, "scale.a"), self.const(b, "scale.b")],
                          {}, self.float_type, "scale", primitive=True)
        else:                      # Mul and Add, each left out when it does nothing
            shape = (1, self.c, 1, 1)
            if np.any(a != 1):
                cur = self.op("Mul", [cur, self.const(a.reshape(shape), "scale.a")], {},
                              self.float_type, "scale")
            if np.any(b != 0):
                cur = self.op("Add", [cur, self.const(b.reshape(shape), "scale.b")], {},
                              self.float_type, "scale_add")
        fmt = lambda v: "[" + ", ".join(f"{float(x):.6g}" for x in v) + "]"  # noqa: E731
        self.steps.append({"op": "Scale", "detail": f"x * a + b per raw-image channel, "
                                                    f"a = {fmt(a)}, b = {fmt(b)}",
                           "a": [float(v) for v in a], "b": [float(v) for v in b]})
        return cur

    def scale_lut(self, cur, quant):
        np, ir, c = self.np, self.ir, self.c
        table, q, zero, qtype = lut_tables(self.a, self.b, quant)
        qdt = ir.DataType.from_numpy(np.dtype(qtype))
        self.quantisation = {
            "scale": q, "zero_point": zero, "dtype": qtype,
            "source": "the model's QuantizeLinear" if quant else
            ("unsigned: every mean is 0" if qtype == "uint8" else
             "signed, symmetric: a mean is not 0")}
        if qtype == "uint8" and np.array_equal(
                table, np.broadcast_to(np.arange(256, dtype=np.uint8), table.shape)):
            self.steps.append({"op": "ScaleLut", "skipped": "every table is the identity: the "
                                                            "pixel is its quantised value"})
            return cur
        if self.primitives:
            cur = self.op("ScaleLut", [cur, self.const(table, "scale_lut.tables")], {}, qdt,
                          "scale_lut", primitive=True)
        else:                      # table[c * 256 + pixel] of the flattened tables
            i64 = ir.DataType.INT64
            offsets = (np.arange(c, dtype=np.int64) * 256).reshape(1, c, 1, 1)
            idx = self.op("Cast", [cur], {"to": int(i64)}, i64, "scale_lut_index")
            idx = self.op("Add", [idx, self.const(offsets, "scale_lut.offsets")], {}, i64,
                          "scale_lut_entry")
            cur = self.op("Gather", [self.const(table.reshape(-1), "scale_lut.tables"), idx],
                          {"axis": 0}, qdt, "scale_lut")
        self.steps.append({"op": "ScaleLut", "detail": f"{c} x 256 {qtype} tables",
                           "tables": [c, 256], "dtype": qtype})
        return cur

    def swap(self, cur, conv):
        np, order = self.np, self.order
        what = f"{self.raw_pf} -> {self.model_pf}"
        if conv is not None:      # Conv(swap(x), W) == Conv(x, W') with W'[:, order[j]] = W[:, j]
            weight = conv.inputs[1]
            wt = _const_of(weight)
            folded = np.empty_like(wt)
            folded[:, order] = wt
            conv.replace_input_with(1, self.const(folded, f"{conv.name or 'conv'}.swapped_w"))
            _drop_if_unused(self.graph, weight)
            self.steps.append({"op": "SwapChannel", "order": order, "folded_into": conv.name,
                               "detail": f"{what}, folded into the input channels of "
                                         f"Conv {conv.name!r}'s weights"})
            return cur
        dt = cur.type.dtype
        if self.primitives:
            cur = self.op("SwapChannel", [cur], {"order": order}, dt, "swap_channel",
                          primitive=True)
        else:
            cur = self.op("Gather", [cur, self.const(np.array(order, np.int64),
                                                     "swap_channel.order")],
                          {"axis": 1}, dt, "swap_channel")
        self.steps.append({"op": "SwapChannel", "order": order,
                           "detail": f"{what} (the first op is not a Conv of group 1)"})
        return cur

    def dequantize(self, cur):
        np, ir = self.np, self.ir
        q, f32 = self.quantisation["scale"], ir.DataType.FLOAT
        scale = self.const(np.array(q, np.float32), "dequantize.scale")
        if self.opset >= 10 and not self.primitives:
            zero = self.const(np.array(0, np.dtype(self.quantisation["dtype"])),
                              "dequantize.zero_point")
            cur = self.op("DequantizeLinear", [cur, scale, zero], {}, f32, "dequantize")
        else:   # the same product (zero point 0): before opset 10, and for the NumPy reference
            # of a lowered model (onnx.reference has no DequantizeLinear before opset 19)
            cur = self.op("Cast", [cur], {"to": int(f32)}, f32, "dequantize_cast")
            cur = self.op("Mul", [cur, scale], {}, f32, "dequantize")
        self.steps.append({"op": "DequantizeLinear", "detail": f"x {q:.6g} -> float"
                           + ("" if cur.producer().op_type == "DequantizeLinear" else
                              " (as Cast and Mul)"), "scale": q})
        if self.float_type != f32:
            cur = self.op("Cast", [cur], {"to": int(self.float_type)}, self.float_type,
                          "to_model_type")
            self.steps.append({"op": "Cast", "detail": f"float -> "
                                                       f"{self.float_type.name.lower()}"})
        return cur

    # --- cast pairs that cancel -----------------------------------------------------------------
    def cancel_quantize(self, cur, quantize):
        """The model's own QuantizeLinear: the tables used its scale and zero point, so our
        DequantizeLinear and it cancel: neither is there."""
        self.ir.convenience.replace_all_uses_with(quantize.outputs[0], cur)
        params = list(quantize.inputs[1:])
        self.graph.remove(quantize, safe=True)
        for v in params:
            _drop_if_unused(self.graph, v)
        self.removed.append({"ops": ["DequantizeLinear", "QuantizeLinear"],
                             "detail": f"the model's QuantizeLinear {quantize.name!r}: the "
                                       "tables quantise with its scale and zero point"})

    def cancel_casts(self, cur, consumer):
        """Our Cast uint8 -> float straight into the model's Cast to a type holding every
        uint8 value: the model's Cast alone does both (and it goes too when it casts back to
        uint8)."""
        ir = self.ir
        mine = cur.producer()
        if consumer is None or consumer.op_type != "Cast" or \
                consumer.domain not in ("", "ai.onnx") or mine is None or \
                mine.op_type != "Cast" or mine not in self.chain.nodes or \
                ir.DataType(consumer.attributes.get_int("to")).name not in _HOLDS_UINT8:
            return cur
        to = ir.DataType(consumer.attributes.get_int("to"))
        before = mine.inputs[0]
        mine.replace_input_with(0, None)
        self.chain.nodes.remove(mine)
        self.steps = [s for s in self.steps if s["op"] != "Cast"]
        consumer.replace_input_with(0, before)
        ops = ["Cast"]
        if to == ir.DataType.UINT8 and not consumer.outputs[0].is_graph_output():
            ir.convenience.replace_all_uses_with(consumer.outputs[0], before)
            self.graph.remove(consumer, safe=True)
            ops.append("Cast")
        self.removed.append({"ops": ops,
                             "detail": f"our Cast to {self.float_type.name.lower()}"
                                       + (f" and the model's Cast {consumer.name!r} back"
                                          if len(ops) == 2 else
                                          f": the model's Cast {consumer.name!r} to "
                                          f"{to.name.lower()} reads the uint8 image")})
        return before

    def rewire(self, cur):
        """The raw image takes the float input's place and name; the new nodes go first."""
        graph, image = self.graph, self.image
        position = list(graph.inputs).index(image)
        image.name = self.chain.unique(f"{self.raw.name}/preprocessed")
        if image.uses() or image.is_graph_output():
            self.ir.convenience.replace_all_uses_with(image, cur, replace_graph_outputs=True)
        graph.inputs.pop(position)
        graph.inputs.insert(position, self.raw)
        if self.chain.nodes:
            first = next(iter(graph), None)
            if first is None:
                graph.extend(self.chain.nodes)
            else:
                graph.insert_before(first, self.chain.nodes)


def _drop_if_unused(graph, value):
    """Remove an initializer nothing reads any more."""
    if value is not None and value.name in graph.initializers and not value.uses() and \
            not value.is_graph_output():
        del graph.initializers[value.name]
