#!/usr/bin/env python3
"""Generate paddle_npu/frontend/pir_compat.json: how Paddle's PIR ops relate to legacy ops.

    /work/venv/bin/python tools/gen_pir_compat.py [--out PATH] [--verbose]
    /work/venv/bin/python tools/gen_pir_compat.py --only pool2d conv2d   (print, no file)

A PIR `model.json` records each op's operands and results only by position and
drops the legacy slot names (`Input`, `Filter`, ...); some legacy attributes
became operands fed by `pd_op.full_int_array` / `pd_op.full`. The reader needs
tables to give PIR ops their legacy shape. Every entry is learned from Paddle
itself; nothing is typed in by hand:

1. For each legacy op type in Paddle's OpProto registry, build a one-op legacy
   program and run Paddle's own legacy->PIR translator
   (`translate_to_pir_with_param_map`). Its var -> value map tells which PIR
   operand carries which legacy input slot and which PIR result carries which
   legacy output slot; the PIR op reports its operand/result/attribute names
   (`get_input_names()` etc.).
2. Each legacy attribute without a same-named PIR attribute is perturbed and
   the program translated again: the PIR attribute, or the constant feeding a
   PIR operand, that now holds the new value is what the legacy attribute
   became (a rename, or a fold). Where perturbing breaks Paddle's shape
   inference, a unique equal value decides (ties broken by similar names).
3. Dispensable legacy inputs (`ShapeTensor`, `StartsTensor`, ...) are added one
   at a time: the PIR operand that takes them when they are tensors.
4. Variants that translate to another PIR op become entries of their own:
   tril_triu(lower=True) -> pd_op.tril, split(sections) -> pd_op.split, the
   in-place form (first output written into the first input) -> `relu_`.
5. Several legacy types may translate to one PIR op (elementwise_add and
   grad_add -> pd_op.add): the one Paddle writes into .pdmodel files wins, seen
   by exporting the small models below with PIR off (FLAGS_enable_pir_api=0).
6. The same models exported with PIR on name the PIR ops the translator never
   emits (shape64, full_with_tensor, assign_value_, ...).

Paddle's shape inference segfaults on a few ops, so step 1-4 run in child
processes. `HINTS` only helps build legacy ops that pass shape inference
(input shapes/dtypes, values for attributes without defaults, extra variants);
it decides no mapping.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections import Counter, defaultdict

warnings.filterwarnings("ignore")
os.environ.setdefault("GLOG_minloglevel", "3")

import paddle  # noqa: E402
from paddle.base import core, framework, libpaddle  # noqa: E402
from paddle.pir.core import vartype_to_datatype  # noqa: E402
from paddle.pir_utils import OldIrGuard  # noqa: E402

paddle.enable_static()
translate = libpaddle.pir.translate_to_pir_with_param_map

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "paddle_npu", "frontend", "pir_compat.json")

# OpProto.Attr.type enum (framework.proto AttrType) -> the Python kind the
# reader converts a folded constant to.
ATTR_KIND = {0: "int", 1: "float", 2: "str", 3: "ints", 4: "floats", 5: "strs",
             6: "bool", 7: "bools", 9: "int", 11: "ints", 12: "floats",
             15: "float", 16: "scalar", 17: "scalars"}

# PIR ops that only carry values around; never the op a legacy op became.
PLUMBING = {"pd_op.data", "builtin.parameter", "builtin.combine", "builtin.split",
            "builtin.slice", "builtin.constant"}
# PIR ops the translator emits to turn a legacy attribute into an operand.
CONSTANT_OPS = {"pd_op.full_int_array", "pd_op.full", "pd_op.assign_value",
                "pd_op.assign_value_", "builtin.combine"}

F32 = "float32"
# Construction hints: {legacy type: {"in": {slot: (shape, dtype) | [..per var..]},
#                                    "attrs": {...}, "n": {slot: count}}}
IMG = ([2, 3, 8, 8], F32)
HINTS = {
    "conv2d": {"in": {"Input": IMG, "Filter": ([4, 3, 3, 3], F32)}},
    "depthwise_conv2d": {"in": {"Input": IMG, "Filter": ([3, 1, 3, 3], F32)}, "attrs": {"groups": 3}},
    "conv2d_transpose": {"in": {"Input": IMG, "Filter": ([3, 4, 3, 3], F32)}},
    "depthwise_conv2d_transpose": {"in": {"Input": IMG, "Filter": ([3, 1, 3, 3], F32)}, "attrs": {"groups": 3}},
    "conv3d": {"in": {"Input": ([2, 3, 4, 8, 8], F32), "Filter": ([4, 3, 3, 3, 3], F32)}},
    "conv3d_transpose": {"in": {"Input": ([2, 3, 4, 8, 8], F32), "Filter": ([3, 4, 3, 3, 3], F32)}},
    "pool3d": {"in": {"X": ([2, 3, 4, 8, 8], F32)}, "attrs": {"ksize": [2, 2, 2]}},
    "pool2d": {"attrs": {"ksize": [2, 2]}},
    "batch_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32),
                          "Mean": ([3], F32), "Variance": ([3], F32)},
                   "alias": {"MeanOut": "Mean", "VarianceOut": "Variance"}},
    "sync_batch_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32),
                               "Mean": ([3], F32), "Variance": ([3], F32)},
                        "alias": {"MeanOut": "Mean", "VarianceOut": "Variance"}},
    "instance_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32)}},
    "group_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32)}, "attrs": {"groups": 3}},
    "layer_norm": {"in": {"X": IMG, "Scale": ([64], F32), "Bias": ([64], F32)}, "attrs": {"begin_norm_axis": 2}},
    "affine_channel": {"in": {"X": IMG, "Scale": ([8], F32), "Bias": ([8], F32)}, "attrs": {"data_layout": "NHWC"}},
    "prelu": {"in": {"X": IMG, "Alpha": ([1], F32)}, "attrs": {"mode": "all"}},
    "lookup_table_v2": {"in": {"Ids": ([2, 5], "int64"), "W": ([10, 4], F32)}},
    "lookup_table": {"in": {"Ids": ([2, 5, 1], "int64"), "W": ([10, 4], F32)}},
    "embedding": {"in": {"Ids": ([2, 5], "int64"), "W": ([10, 4], F32)}},
    "gather": {"in": {"X": IMG, "Index": ([2], "int64")}},
    "gather_nd": {"in": {"X": IMG, "Index": ([2, 1], "int64")}},
    "scatter": {"in": {"X": ([4, 3], F32), "Ids": ([2], "int64"), "Updates": ([2, 3], F32)}},
    "scatter_nd_add": {"in": {"X": ([4, 3], F32), "Index": ([2, 1], "int64"), "Updates": ([2, 3], F32)}},
    "index_select": {"in": {"X": IMG, "Index": ([2], "int64")}},
    "index_sample": {"in": {"X": ([2, 8], F32), "Index": ([2, 3], "int64")}},
    "take_along_axis": {"in": {"Input": IMG, "Index": ([2, 3, 8, 8], "int64")}},
    "put_along_axis": {"in": {"Input": IMG, "Index": ([2, 3, 8, 8], "int64"), "Value": IMG}},
    "where": {"in": {"Condition": ([2, 3, 8, 8], "bool"), "X": IMG, "Y": IMG}},
    "masked_select": {"in": {"X": IMG, "Mask": ([2, 3, 8, 8], "bool")}},
    "logical_and": {"in": {"X": ([2, 3], "bool"), "Y": ([2, 3], "bool")}},
    "logical_or": {"in": {"X": ([2, 3], "bool"), "Y": ([2, 3], "bool")}},
    "logical_xor": {"in": {"X": ([2, 3], "bool"), "Y": ([2, 3], "bool")}},
    "logical_not": {"in": {"X": ([2, 3], "bool")}},
    "bitwise_and": {"in": {"X": ([2, 3], "int32"), "Y": ([2, 3], "int32")}},
    "bitwise_or": {"in": {"X": ([2, 3], "int32"), "Y": ([2, 3], "int32")}},
    "bitwise_not": {"in": {"X": ([2, 3], "int32")}},
    "one_hot_v2": {"in": {"X": ([2, 5], "int64")}, "attrs": {"depth": 7}},
    "cast": {"attrs": {"in_dtype": 5, "out_dtype": 3}},
    "arg_max": {"attrs": {"axis": 1, "dtype": 3}},
    "arg_min": {"attrs": {"axis": 1, "dtype": 3}},
    "argsort": {"attrs": {"axis": 1}},
    "top_k": {"attrs": {"k": 2}},
    "top_k_v2": {"attrs": {"k": 2, "axis": 1}},
    "clip": {"attrs": {"min": -1.0, "max": 1.0}},
    "clip_by_norm": {"attrs": {"max_norm": 1.0}},
    "pad": {"in": {"X": ([2, 3], F32)}, "attrs": {"paddings": [1, 1, 2, 2]}},
    "pad2d": {"attrs": {"paddings": [1, 1, 2, 2]}},
    "pad3d": {"in": {"X": ([2, 3, 4, 8, 8], F32)}, "attrs": {"paddings": [1, 1, 2, 2, 0, 0]}},
    "slice": {"attrs": {"axes": [2, 3], "starts": [1, 2], "ends": [5, 6], "infer_flags": [1, 1]}},
    "strided_slice": {"attrs": {"axes": [2, 3], "starts": [1, 2], "ends": [5, 6], "strides": [1, 2],
                                "infer_flags": [1, 1]}},
    "set_value": {"in": {"Input": IMG},
                  "attrs": {"axes": [2], "starts": [0], "ends": [4], "steps": [1], "shape": [1],
                            "fp32_values": [1.5], "dtype": 5}},
    "expand_v2": {"attrs": {"shape": [2, 3, 8, 8]}},
    "expand": {"attrs": {"expand_times": [1, 1, 1, 2]}},
    "expand_as_v2": {"in": {"X": ([3, 8, 8], F32), "Y": IMG}, "attrs": {"target_shape": [2, 3, 8, 8]}},
    "tile": {"attrs": {"repeat_times": [1, 1, 1, 2]}},
    "reshape2": {"attrs": {"shape": [2, -1]}},
    "reshape": {"attrs": {"shape": [2, -1]}},
    "transpose2": {"attrs": {"axis": [0, 2, 3, 1]}},
    "transpose": {"attrs": {"axis": [0, 2, 3, 1]}},
    "squeeze2": {"in": {"X": ([2, 1, 8], F32)}, "attrs": {"axes": [1]}},
    "squeeze": {"in": {"X": ([2, 1, 8], F32)}, "attrs": {"axes": [1]}},
    "unsqueeze2": {"attrs": {"axes": [1]}},
    "unsqueeze": {"attrs": {"axes": [1]}},
    "flatten_contiguous_range": {"attrs": {"start_axis": 1, "stop_axis": 3}},
    "split": {"attrs": {"num": 3, "axis": 1}, "out": {"Out": 3},
              "variants": [{"attrs": {"num": 0, "sections": [1, 2]}}]},
    "unbind": {"attrs": {"axis": 1}, "out": {"Out": 3}},
    "unstack": {"attrs": {"axis": 1, "num": 3}, "out": {"Y": 3}},
    "concat": {"attrs": {"axis": 1}},
    "stack": {"attrs": {"axis": 1}},
    "fill_constant": {"attrs": {"shape": [2, 3], "value": 1.5, "dtype": 5}},
    "fill_any_like": {"attrs": {"value": 1.5, "dtype": 5}},
    "fill_constant_batch_size_like": {"attrs": {"shape": [-1, 3], "value": 1.5, "dtype": 5}},
    "fill_zeros_like": {},
    "assign_value": {"attrs": {"shape": [2], "dtype": 5, "values": [1.0, 2.0]}},
    "range": {"in": {"Start": ([1], F32), "End": ([1], F32), "Step": ([1], F32)}},
    "linspace": {"in": {"Start": ([1], F32), "Stop": ([1], F32), "Num": ([1], "int32")}, "attrs": {"dtype": 5}},
    "eye": {"attrs": {"num_rows": 3, "num_columns": 3, "dtype": 5}},
    "gaussian_random": {"attrs": {"shape": [2, 3], "dtype": 5}},
    "uniform_random": {"attrs": {"shape": [2, 3], "dtype": 5}},
    "matmul": {"in": {"X": ([2, 4, 4], F32), "Y": ([2, 4, 4], F32)}},
    "matmul_v2": {"in": {"X": ([2, 4, 4], F32), "Y": ([2, 4, 4], F32)}},
    "mul": {"in": {"X": ([2, 4], F32), "Y": ([4, 5], F32)}},
    "bmm": {"in": {"X": ([2, 3, 4], F32), "Y": ([2, 4, 5], F32)}},
    "addmm": {"in": {"Input": ([3, 5], F32), "X": ([3, 4], F32), "Y": ([4, 5], F32)}},
    "rnn": {"in": {"Input": ([5, 2, 8], F32), "PreState": [([1, 2, 16], F32), ([1, 2, 16], F32)],
                   "WeightList": [([64, 8], F32), ([64, 16], F32), ([64], F32), ([64], F32)]},
            "attrs": {"mode": "LSTM", "input_size": 8, "hidden_size": 16, "num_layers": 1},
            "out": {"State": 2}},
    "bilinear_interp_v2": {"attrs": {"out_h": 16, "out_w": 16, "interp_method": "bilinear"}},
    "nearest_interp_v2": {"attrs": {"out_h": 16, "out_w": 16, "interp_method": "nearest"}},
    "bicubic_interp_v2": {"attrs": {"out_h": 16, "out_w": 16, "interp_method": "bicubic"}},
    "linear_interp_v2": {"in": {"X": ([2, 3, 8], F32)}, "attrs": {"out_w": 16, "interp_method": "linear"}},
    "trilinear_interp_v2": {"in": {"X": ([2, 3, 4, 8, 8], F32)},
                            "attrs": {"out_d": 8, "out_h": 16, "out_w": 16, "interp_method": "trilinear"}},
    "multiclass_nms3": {"in": {"BBoxes": ([1, 10, 4], F32), "Scores": ([1, 3, 10], F32)},
                        "attrs": {"score_threshold": 0.1, "nms_top_k": 10, "keep_top_k": 5,
                                  "nms_threshold": 0.5, "background_label": 0}},
    "yolo_box": {"in": {"X": ([1, 21, 8, 8], F32), "ImgSize": ([1, 2], "int32")},
                 "attrs": {"anchors": [10, 13, 16, 30, 33, 23], "class_num": 2, "conf_thresh": 0.01,
                           "downsample_ratio": 32}},
    "prior_box": {"in": {"Input": IMG, "Image": ([2, 3, 32, 32], F32)},
                  "attrs": {"min_sizes": [4.0], "aspect_ratios": [1.0], "variances": [0.1, 0.1, 0.2, 0.2]}},
    "box_coder": {"in": {"PriorBox": ([10, 4], F32), "TargetBox": ([2, 10, 4], F32)}},
    "quantize_linear": {"in": {"X": IMG, "Scale": ([1], F32), "ZeroPoint": ([1], F32)},
                        "attrs": {"quant_axis": -1, "bit_length": 8}},
    "dequantize_linear": {"in": {"X": IMG, "Scale": ([1], F32), "ZeroPoint": ([1], F32)},
                          "attrs": {"quant_axis": -1, "bit_length": 8}},
    "dropout": {"attrs": {"dropout_prob": 0.5, "is_test": True}},
    "softmax": {"attrs": {"axis": -1}},
    "log_softmax": {"attrs": {"axis": -1}},
    "cumsum": {"attrs": {"axis": 1}},
    "p_norm": {"attrs": {"axis": 1, "porder": 2.0}},
    "norm": {"attrs": {"axis": 1}},
    "label_smooth": {"attrs": {"epsilon": 0.1}},
    "pixel_shuffle": {"in": {"X": ([2, 4, 8, 8], F32)}, "attrs": {"upscale_factor": 2}},
    "grid_sampler": {"in": {"X": IMG, "Grid": ([2, 8, 8, 2], F32)}},
    "roi_align": {"in": {"X": IMG, "ROIs": ([3, 4], F32)}, "attrs": {"pooled_height": 2, "pooled_width": 2}},
    "flip": {"attrs": {"axis": [1]}},
    "roll": {"attrs": {"shifts": [1], "axis": [1]}},
    "tril_triu": {"in": {"X": ([4, 4], F32)}},
    "meshgrid": {"in": {"X": [([3], F32), ([4], F32)]}, "out": {"Out": 2}},
    "sum": {"in": {"X": [IMG, IMG]}},
    "lrn": {"attrs": {"n": 5}},
    "increment": {"in": {"X": ([1], F32)}, "attrs": {"step": 1.0}},
    "share_data": {},
    "assign": {"in": {"X": IMG}},
    "elementwise_add": {"attrs": {"axis": -1}},
}
for _t in ("relu", "relu6", "sigmoid", "tanh", "hard_swish", "hard_sigmoid", "swish", "leaky_relu",
           "elu", "gelu", "silu", "mish", "softplus", "exp", "log", "sqrt", "rsqrt", "abs", "pow",
           "floor", "ceil", "round", "erf", "sin", "cos", "sign", "scale", "assign", "shape",
           "reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
    HINTS.setdefault(_t, {})

# Legacy attributes that are framework bookkeeping, not op semantics.
SKIP_ATTRS = {"op_role", "op_role_var", "op_namescope", "op_callstack", "op_device",
              "with_quant_attr", "use_mkldnn", "use_cudnn", "mkldnn_data_type",
              "use_quantizer", "is_test_mode"}

DUMMY = {0: 1, 1: 1.0, 2: "", 3: [1], 4: [1.0], 5: [], 6: False, 7: [], 9: 1, 11: [1],
         12: [1.0], 15: 1.0}


def present(v):
    """An operand that is set (PIR Values must not be used as booleans)."""
    return v is not None and v.initialized()


def value_key(v):
    """A hashable identity for a PIR value (Value's == builds an op in PIR)."""
    op = v.get_defining_op()
    return (op.id() if op is not None else None, v.index() if op is not None else v.id)


def const_repr(v, depth=0):
    """repr of the constant feeding an operand, or None when it is no constant."""
    op = v.get_defining_op() if present(v) else None
    if op is None or op.name() not in CONSTANT_OPS or depth > 3:
        return None
    if op.name() == "builtin.combine":
        parts = [const_repr(o.source(), depth + 1) for o in op.operands()]
        return None if any(p is None for p in parts) else repr(parts)
    return repr(sorted((k, repr(a)) for k, a in op.attrs().items() if k != "stop_gradient"))


def const_value(v):
    """The Python value of a constant operand (full_int_array / full / combine of fulls)."""
    op = v.get_defining_op() if present(v) else None
    if op is None:
        return None
    if op.name() == "builtin.combine":
        parts = [const_value(o.source()) for o in op.operands()]
        return None if any(p is None for p in parts) else [x for p in parts for x in (p if isinstance(p, list) else [p])]
    if op.name() in ("pd_op.full_int_array", "pd_op.full"):
        return op.attrs().get("value")
    return None


def carries(legacy, pir):
    """Does a PIR attribute/constant hold exactly this legacy attribute value?
    (ints vs floats, a scalar vs a 1-element list, a VarType code vs a DataType)"""
    if isinstance(legacy, bool) or isinstance(pir, bool):
        return isinstance(legacy, bool) and isinstance(pir, bool) and legacy == pir
    if isinstance(legacy, int) and type(pir).__name__ == "DataType":
        try:
            return vartype_to_datatype[core.VarDesc.VarType(legacy)] == pir
        except (KeyError, ValueError, TypeError):
            return False
    if isinstance(legacy, (int, float)) and isinstance(pir, (int, float)):
        return abs(float(legacy) - float(pir)) <= 1e-6 * max(1.0, abs(float(legacy)))
    if isinstance(legacy, (int, float)) and isinstance(pir, list) and len(pir) == 1:
        return carries(legacy, pir[0])
    if isinstance(legacy, list) and isinstance(pir, list):
        return len(legacy) == len(pir) and all(carries(a, b) for a, b in zip(legacy, pir))
    if isinstance(legacy, str) and isinstance(pir, str):
        return legacy == pir
    return False


def similar_names(a, b):
    """'sparse' ~ 'is_sparse', 'keepdim' ~ 'keep_dim': a tie-breaker for equal values."""
    a, b = a.replace("_", "").lower(), b.replace("_", "").lower()
    for pre in ("is", "use"):
        a, b = a[len(pre):] if a.startswith(pre) else a, b[len(pre):] if b.startswith(pre) else b
    return a in b or b in a


class Case:
    """One legacy op built with chosen inputs/attrs, translated to PIR."""

    def __init__(self, op_type, proto, hint, extra_inputs=(), attr_over=None, alias=None):
        self.type = op_type
        self.extra_inputs, self.attr_over, self.alias = tuple(extra_inputs), dict(attr_over or {}), alias
        alias = dict(hint.get("alias", {}), **(alias or {}))
        self.proto = proto
        ins_hint = hint.get("in", {})
        self.slot_vars = {}         # legacy input slot -> var names
        self.out_vars = {}          # legacy output slot -> var names
        self.given = set(hint.get("attrs", {}))
        with OldIrGuard():
            self.main = paddle.static.Program()
            block = self.main.global_block()
            ins = {}
            for i in proto.inputs:
                if i.extra or (i.dispensable and i.name not in extra_inputs and i.name not in ins_hint):
                    continue
                spec = ins_hint.get(i.name)
                if spec is None:
                    specs = [IMG] * (2 if i.duplicable else 1)
                    if i.name in extra_inputs:        # a tensor standing for an attribute
                        specs = [([1], "int64")] * (2 if i.duplicable else 1) if i.duplicable else [([2], "int64")]
                elif isinstance(spec, list):
                    specs = spec
                else:
                    specs = [spec]
                names = [f"in_{i.name}_{k}" for k in range(len(specs))]
                ins[i.name] = [block.create_var(name=n, shape=s, dtype=d) for n, (s, d) in zip(names, specs)]
                self.slot_vars[i.name] = names
            outs = {}
            for o in proto.outputs:
                if o.extra and o.dispensable:
                    continue
                n = hint.get("out", {}).get(o.name, 2 if o.duplicable else 1)
                names = [f"out_{o.name}_{k}" for k in range(n)]
                if o.name in alias and alias[o.name] in ins:     # output reuses an input var
                    names = self.slot_vars[alias[o.name]]
                    outs[o.name] = ins[alias[o.name]]
                    self.out_vars[o.name] = names
                    continue
                outs[o.name] = [block.create_var(name=x, shape=[2, 3, 8, 8], dtype=F32) for x in names]
                self.out_vars[o.name] = names
            attrs = {a.name: DUMMY[a.type] for a in proto.attrs
                     if not a.extra and a.type in DUMMY and a.name not in legacy_defaults(op_type)}
            self.given |= set(attrs)
            attrs.update(hint.get("attrs", {}))
            attrs.update(attr_over or {})
            self.op = block.append_op(type=op_type, inputs=ins, outputs=outs, attrs=attrs)
        self.prog, self.var_map = translate(self.main.desc)
        self._find_main()

    def _find_main(self):
        """The PIR op the legacy op became: the producer of its outputs."""
        producers = Counter()
        self.result_of = {}         # legacy output var -> (pir op id, result index)
        for slot, names in self.out_vars.items():
            for n in names:
                for v in self.var_map.get(n, []):
                    op, idx = v.get_defining_op(), v.index()
                    if op.name() == "builtin.split":        # a vector result, split apart
                        src = op.operand_source(0)
                        op, idx = src.get_defining_op(), ("vec", src.index(), v.index())
                    if op.name() in PLUMBING:
                        continue
                    producers[op.id()] += 1
                    self.result_of[n] = (op.id(), idx)
        ops = {op.id(): op for op in self.prog.global_block().ops}
        if not producers:
            raise RuntimeError("no PIR op produces the legacy outputs")
        self.pir = ops[producers.most_common(1)[0][0]]
        # other real ops (not plumbing, not constants feeding our op) mean a 1:n translation
        feeding = {o.source().get_defining_op().id() for o in self.pir.operands()
                   if present(o.source()) and o.source().get_defining_op() is not None}
        self.others = [op.name() for op in ops.values()
                       if op.id() != self.pir.id() and op.name() not in PLUMBING
                       and not (op.id() in feeding and op.name() in CONSTANT_OPS)]

    def snapshot(self):
        """What a perturbation can change: attrs and constant operands of the PIR op."""
        snap = {("attr", k): repr(v) for k, v in self.pir.attrs().items()
                if k not in ("stop_gradient", "persistable", "op_callstack", "struct_name")}
        for i, o in enumerate(self.pir.operands()):
            snap[("operand", i)] = const_repr(o.source())
        return snap

    def operand_slots(self):
        """PIR operand index -> legacy input slot, by following var -> value."""
        where = {}
        for slot, names in self.slot_vars.items():
            for n in names:
                for v in self.var_map.get(n, []):
                    where[value_key(v)] = slot
        out = {}
        for i, o in enumerate(self.pir.operands()):
            src = o.source()
            if not present(src):
                continue
            slot = self._trace(src, where)
            if slot:
                out[i] = slot
        return out

    def _trace(self, v, where, depth=0):
        key = value_key(v)
        if key in where:
            return where[key]
        op = v.get_defining_op()
        if op is None or depth > 3:
            return None
        for o in op.operands():        # through combine / inserted casts
            s = o.source()
            if present(s):
                slot = self._trace(s, where, depth + 1)
                if slot:
                    return slot
        return None


_DEFAULTS = {}


def legacy_defaults(op_type):
    """The legacy op's attribute defaults, as its checker fills them in."""
    if op_type not in _DEFAULTS:
        try:
            _DEFAULTS[op_type] = dict(core.get_op_attrs_default_value(op_type.encode()))
        except Exception:
            _DEFAULTS[op_type] = {}
    return _DEFAULTS[op_type]


def perturbations(value, attr_type):
    """A few different values of the same kind; the translator may refuse some."""
    if attr_type in (0, 9):
        return [value + 1, value - 1, 2, 3]
    if attr_type in (1, 15):
        return [value + 0.25, 0.75]
    if attr_type == 6:
        return [not value]
    if attr_type in (3, 11):
        return [[x + 1 for x in value] or [1], list(reversed(value)), list(value) + [1],
                [1] + list(value), [2] * max(1, len(value)), [x - 1 for x in value], value[:-1]]
    if attr_type in (4, 12):
        return [[x + 0.5 for x in value] or [0.5]]
    if attr_type == 2:
        return [x for x in ("NHWC", "NCHW", "max", "avg", "SAME", "VALID", "bilinear", "nearest",
                            "LSTM", "GRU", "2.5", "channel", value + "_") if x != value]
    if attr_type == 5:
        return [list(value) + ["x"]]
    return []


def learn(op_type, verbose=False):
    """Entries for one legacy op type: its base form, plus every other PIR op a
    variant of it (a dispensable tensor input, another attribute value, a
    HINTS variant) translates to, e.g. tril_triu -> triu, and tril when lower."""
    proto = framework.OpProtoHolder.instance().get_op_proto(op_type)
    hint = HINTS.get(op_type, {})
    try:
        base = Case(op_type, proto, hint)
    except Exception as e:        # needs inputs/attrs we cannot guess
        if verbose:
            print(f"  skip {op_type}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else e}")
        return
    others = {}                   # other PIR op name -> a Case variant reaching it
    entry = learn_case(base, proto, hint, others)
    if entry is None:
        return
    yield entry
    seen = {entry["pir"]}
    tries = [(c.extra_inputs, c.attr_over, None) for c in others.values()]
    tries += [(tuple(v.get("in", ())), v.get("attrs", {}), None) for v in hint.get("variants", [])]
    # the in-place form: the first output written into the first input's var
    ins = [i.name for i in proto.inputs if i.name in base.slot_vars and not i.duplicable]
    outs = [o.name for o in proto.outputs if o.name in base.out_vars and not o.duplicable]
    if ins and outs:
        tries.append(((), {}, {outs[0]: ins[0]}))
    for extra, over, alias in tries:
        try:
            case = Case(op_type, proto, hint, extra_inputs=extra, attr_over=over, alias=alias)
        except Exception:
            continue
        if case.pir.name() in seen:
            continue
        e = learn_case(case, proto, hint, {})
        if e is not None:
            e["implied_attrs"] = dict(over)
            seen.add(e["pir"])
            yield e


def learn_case(base, proto, hint, others):
    """The table entry for the PIR op `base` translated to; records in `others`
    variants of it that produce a different PIR op."""
    op_type, extra, over = base.type, base.extra_inputs, base.attr_over
    pir = base.pir
    try:
        operand_names = list(pir.get_input_names())
        result_names = list(pir.get_output_names())
        attr_names = list(pir.get_attr_names())
    except Exception:             # no yaml info: not a plain pd_op op
        return None
    entry = {"legacy_type": op_type, "pir": pir.name(), "operands": operand_names,
             "results": result_names, "attrs": attr_names, "inputs": {}, "list_inputs": {},
             "folds": {}, "outputs": {}, "attr_names": {}, "one_to_one": not base.others}
    if base.others:
        entry["also_emits"] = sorted(set(base.others))

    def variant(extra_inputs=(), attr_over=None):
        """Translate a variant; None when it fails or becomes another PIR op."""
        attrs = dict(over, **(attr_over or {}))
        try:
            case = Case(op_type, proto, hint, extra_inputs=tuple(extra) + tuple(extra_inputs),
                        attr_over=attrs, alias=base.alias)
        except Exception:
            return None
        if case.pir.name() != pir.name():
            others.setdefault(case.pir.name(), case)
            return None
        return case

    for i, slot in base.operand_slots().items():
        if i < len(operand_names):
            entry["inputs"].setdefault(operand_names[i], slot)
    # results: which legacy output slot each PIR result carries
    for slot, names in base.out_vars.items():
        for n in names:
            where = base.result_of.get(n)
            if where and where[0] == pir.id():
                idx = where[1][1] if isinstance(where[1], tuple) else where[1]
                if idx < len(result_names):
                    entry["outputs"].setdefault(result_names[idx], slot)
    # dispensable inputs one at a time: which operand takes them as tensors
    for i in proto.inputs:
        if not i.dispensable or i.extra or i.name in base.slot_vars:
            continue
        case = variant(extra_inputs=(i.name,))
        if case is None:
            continue
        for idx, slot in case.operand_slots().items():
            if slot == i.name and idx < len(operand_names):
                key = "list_inputs" if i.duplicable else "inputs"
                entry[key].setdefault(operand_names[idx], slot)
    # attributes: same name, or found by perturbation
    snap0 = base.snapshot()
    transformed = {}              # legacy attr -> PIR attr/operand holding it in another form
    legacy_attrs = {a.name: a for a in proto.attrs if not a.extra and a.name not in SKIP_ATTRS}
    mapped = set()
    for name in attr_names:
        if name in legacy_attrs:
            entry["attr_names"][name] = name
            mapped.add(name)
    for name, a in legacy_attrs.items():
        if name in mapped or a.type not in ATTR_KIND:
            continue
        try:
            current = base.op.attr(name)
        except Exception:
            continue
        for new in perturbations(current, a.type):
            case = variant(attr_over={name: new})
            if case is None:
                continue
            changed = [k for k, v in case.snapshot().items() if snap0.get(k) != v]
            if not changed:
                continue
            pir_attrs_now = case.pir.attrs()
            for kind, what in changed:
                if kind == "attr":
                    if carries(new, pir_attrs_now.get(what)):
                        entry["attr_names"].setdefault(what, name)
                    else:         # PIR keeps it in another form (force_cpu -> place)
                        transformed.setdefault(name, what)
                elif what < len(operand_names):
                    if carries(new, const_value(case.pir.operand_source(what))):
                        entry["folds"].setdefault(operand_names[what],
                                                  {"attr": name, "kind": ATTR_KIND[a.type]})
                    else:
                        transformed.setdefault(name, operand_names[what])
            mapped.add(name)
            break
    # fallback where perturbing broke shape inference: a unique equal value
    # (ties between equal values broken by similar names: sparse ~ is_sparse)
    def unique_hit(value, target):
        hits = [a for a in legacy_attrs if a not in mapped and a not in transformed
                and carries(base.op.attr(a), value)]
        if len(hits) > 1:
            hits = [a for a in hits if similar_names(a, target)]
        return hits[0] if len(hits) == 1 else None

    pir_attrs = pir.attrs()
    for target in attr_names:
        if target in entry["attr_names"] or target not in pir_attrs:
            continue
        hit = unique_hit(pir_attrs[target], target)
        if hit:
            entry["attr_names"][target] = hit
            mapped.add(hit)
    for i, o in enumerate(pir.operands()):
        if i >= len(operand_names) or operand_names[i] in entry["folds"]:
            continue
        value, target = const_value(o.source()), operand_names[i]
        hit = unique_hit(value, target) if value is not None else None
        if hit is None and target in legacy_attrs and target not in mapped and value is not None:
            hit = target                               # same name, value not telling (e.g. [])
        if hit:
            entry["folds"][target] = {"attr": hit, "kind": ATTR_KIND[legacy_attrs[hit].type]}
            mapped.add(hit)
    if transformed:
        entry["transformed"] = transformed
    # legacy attrs PIR does not carry: their legacy defaults, so both formats agree
    defaults = {}
    for name in legacy_attrs:
        if name in mapped or name in transformed or name in over or name not in legacy_defaults(op_type):
            continue
        val = legacy_defaults(op_type)[name]
        if isinstance(val, (bool, int, float, str)) or (
                isinstance(val, list) and all(isinstance(x, (bool, int, float, str)) for x in val)):
            defaults[name] = val
    entry["legacy_defaults"] = defaults
    # renames only; identity is the rule
    entry["attr_names"] = {k: v for k, v in entry["attr_names"].items() if k != v}
    return entry


def score(entry):
    """Which legacy type best matches a PIR op when several translate to it."""
    return (entry["one_to_one"],
            len(entry["inputs"]) + len(entry["list_inputs"]) + len(entry["outputs"]) + len(entry["folds"]),
            -len(entry["legacy_defaults"]),
            entry["legacy_type"])


# ---------------------------------------------------------------------------
# Step 4: PIR ops seen in real exports.

# Small models, a few ops each, so that one API failing in one mode does not
# hide the others. Module-level functions: dy2static needs their source.
F = paddle.nn.functional


def z_conv_bn(s, x): return F.relu(s.sub[1](s.sub[0](x)))
def z_depthwise(s, x): return F.hardswish(s.sub(x)) + F.relu6(x) * F.sigmoid(x)
def z_convt(s, x): return s.sub(x)
def z_prelu(s, x): return s.sub(x)
def z_pools(s, x): return F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1)
def z_adaptive(s, x): return F.adaptive_avg_pool2d(x, 1).flatten(1)
def z_bilinear(s, x): return F.interpolate(x, scale_factor=2, mode="bilinear")
def z_nearest(s, x): return F.interpolate(x, size=[4, 4], mode="nearest")
def z_pad(s, x): return F.pad(x, [1, 1, 1, 1], mode="reflect")
def z_clip(s, x): return paddle.clip(x, -1.0, 1.0)
def z_linear(s, x): return s.sub(x)
def z_softmax(s, x): return F.softmax(x, -1)
def z_gelu(s, x): return F.gelu(x)
def z_acts(s, x): return F.leaky_relu(x) + F.tanh(x) + F.silu(x) + F.elu(x) + paddle.exp(x)
def z_argmax(s, x): return paddle.argmax(x, -1)
def z_topk(s, x): return paddle.topk(x, 2)[1]
def z_cast(s, x): return x.astype("int32")
def z_add(s, x): return x + x
def z_binary(s, x): return (x - 1) * x / 2 + paddle.maximum(x, x) + paddle.pow(x, 2)
def z_matmul(s, x): return paddle.matmul(x, x, transpose_y=True)
def z_reshape(s, x): return paddle.reshape(x, [0, -1])
def z_transpose(s, x): return x.transpose([0, 2, 3, 1])
def z_concat(s, x): return paddle.concat([x, x], 1)
def z_split(s, x): return paddle.split(x, [1, 2], axis=1)[1]
def z_stack(s, x): return paddle.stack([x, x], 0)
def z_slice(s, x): return x[:, 1:3, ::2]
def z_strided(s, x): return paddle.strided_slice(x, [1], [0], [2], [1])
def z_expand(s, x): return paddle.expand(x.unsqueeze(0), [2, -1, -1, -1, -1])
def z_gather(s, x): return paddle.gather(x, paddle.to_tensor([0, 1]), axis=1)
def z_where(s, x): return paddle.where(x > 0, x, paddle.zeros_like(x))
def z_compare(s, x): return paddle.logical_and(x >= 0, x < 1).astype("float32") + (x == 1).astype("float32")
def z_reduce(s, x): return x.mean(-1, keepdim=True) + x.sum() + x.max() - x.min()
def z_full(s, x): return paddle.full([1], 2.0) * paddle.shape(x)[0].astype("float32")
def z_squeeze(s, x): return x.unsqueeze(1).squeeze(1).flatten(1)
def z_scale(s, x): return x * 2.0 + 1
def z_cumsum(s, x): return paddle.cumsum(x, 1)
def z_layer_norm(s, x): return s.sub(x)
def z_embedding(s, ids): return s.sub(ids)
def z_one_hot(s, ids): return F.one_hot(ids, 10)
def z_encoder(s, ids): return s.sub[1](s.sub[0](ids))
def z_lstm(s, x): return s.sub(x)[0]
def z_gru(s, x): return s.sub(x)[0]
def z_mobilenet(s, x): return s.sub(x)
def z_shufflenet(s, x): return s.sub(x)
def z_squeezenet(s, x): return s.sub(x)
def z_yolo_box(s, x): return paddle.vision.ops.yolo_box(
    x, paddle.full([1, 2], 64, "int32"), [10, 13, 16, 30, 33, 23], 2, 0.01, 8)[0]


def z_control(s, x):
    y = s.sub(x)
    if y.mean() > 0:
        y = y * 2
    else:
        y = y - 1
    i = paddle.zeros([1], "int64")
    while i < 3:
        y = F.relu_(y + 1)
        i = i + 1
    return y


def zoo():
    """(name, layer, input spec) for every small model."""
    nn, spec = paddle.nn, paddle.static.InputSpec

    class Zoo(nn.Layer):
        def __init__(self, fn, sub=None):
            super().__init__()
            self.fn = fn
            self.sub = nn.LayerList(sub) if isinstance(sub, list) else sub

        def forward(self, x):
            return self.fn(self, x)

    img = [spec([None, 3, 8, 8], "float32", "x")]
    img64 = [spec([None, 3, 64, 64], "float32", "x")]
    vec = [spec([None, 4], "float32", "x")]
    ids = [spec([None, 7], "int64", "ids")]
    seq = [spec([None, 5, 8], "float32", "x")]
    made = {
        "conv_bn": (z_conv_bn, img, lambda: [nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)]),
        "depthwise": (z_depthwise, img, lambda: nn.Conv2D(3, 3, 3, padding=1, groups=3)),
        "convt": (z_convt, img, lambda: nn.Conv2DTranspose(3, 4, 2, stride=2)),
        "prelu": (z_prelu, img, lambda: nn.PReLU()),
        "linear": (z_linear, vec, lambda: nn.Linear(4, 5)),
        "layer_norm": (z_layer_norm, vec, lambda: nn.LayerNorm(4)),
        "embedding": (z_embedding, ids, lambda: nn.Embedding(10, 4)),
        "encoder": (z_encoder, ids, lambda: [nn.Embedding(10, 16), nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0), 1)]),
        "lstm": (z_lstm, seq, lambda: nn.LSTM(8, 8, direction="bidirect")),
        "gru": (z_gru, seq, lambda: nn.GRU(8, 8)),
        "control": (z_control, vec, lambda: nn.Linear(4, 4)),
        "one_hot": (z_one_hot, ids, None),
        "mobilenet": (z_mobilenet, img64, lambda: paddle.vision.models.mobilenet_v3_small(num_classes=10)),
        "shufflenet": (z_shufflenet, img64, lambda: paddle.vision.models.shufflenet_v2_x0_25(num_classes=10)),
        "squeezenet": (z_squeezenet, img64, lambda: paddle.vision.models.squeezenet1_0(num_classes=10)),
        "yolo_box": (z_yolo_box, [spec([1, 21, 8, 8], "float32", "x")], None),
    }
    out = []
    for name, fn in sorted(globals().items()):
        if not name.startswith("z_"):
            continue
        key = name[2:]
        fn_, sp, sub = made.get(key, (fn, img, None))
        out.append((key, Zoo(fn_, sub() if sub else None), sp))
    return out


def export_zoo(tmp, verbose=False):
    """paddle.jit.save every zoo model (PIR or legacy, as FLAGS_enable_pir_api says)."""
    paddle.disable_static()
    paths = []
    for name, layer, spec in zoo():
        layer.eval()
        path = os.path.join(tmp, name, "model")
        try:
            paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), path)
            paths.append(path)
        except Exception as e:
            if verbose:
                print(f"  export {name} failed: {str(e).strip().splitlines()[-1][:150]}")
    paddle.enable_static()
    return paths


def legacy_zoo_types(verbose=False):
    """Legacy op types Paddle actually writes into .pdmodel files (run in a child
    process with PIR off). Used to choose among legacy types translating to one PIR op."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FLAGS_enable_pir_api="0")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--legacy-zoo", tmp],
                       env=env, stdout=subprocess.DEVNULL if not verbose else None,
                       stderr=subprocess.DEVNULL)
        try:
            return set(json.load(open(os.path.join(tmp, "types.json"))))
        except (OSError, ValueError):
            return set()


def legacy_zoo_main(tmp):
    types = set()
    for path in export_zoo(tmp):
        desc = core.ProgramDesc(open(path + ".pdmodel", "rb").read())
        for b in range(desc.num_blocks()):
            for i in range(desc.block(b).op_size()):
                types.add(desc.block(b).op(i).type())
    json.dump(sorted(types), open(os.path.join(tmp, "types.json"), "w"))


def harvest_exports(verbose=False):
    """PIR op name -> (operand, result, attr names) from the zoo exported with PIR."""
    seen = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in export_zoo(tmp, verbose):
            exe = paddle.static.Executor(paddle.CPUPlace())
            prog, _, _ = paddle.static.load_inference_model(path, exe)
            stack = [prog.global_block()]
            while stack:
                block = stack.pop()
                for op in block.ops:
                    stack.extend(op.blocks())
                    if not op.name().startswith("pd_op.") or op.name() in seen:
                        continue
                    try:
                        seen[op.name()] = (list(op.get_input_names()), list(op.get_output_names()),
                                           list(op.get_attr_names()))
                    except Exception:
                        pass        # no yaml info (if/while): the reader handles those itself
    return seen


def worker(out_path, types):
    """Learn op types, one JSON line each; a 'begin' line first so a crash is attributable."""
    with open(out_path, "a") as out:
        for t in types:
            out.write(json.dumps({"begin": t}) + "\n")
            out.flush()
            for entry in learn(t):         # each entry as soon as it is learned
                out.write(json.dumps({"type": t, "entry": entry}) + "\n")
                out.flush()
            out.write(json.dumps({"done": t}) + "\n")
            out.flush()


def learn_all(types, verbose=False):
    """Run `learn` in child processes: Paddle's shape inference segfaults on a few ops."""
    entries, todo = [], list(types)
    with tempfile.TemporaryDirectory() as tmp:
        while todo:
            out_path = os.path.join(tmp, "learned.jsonl")
            open(out_path, "w").close()
            subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", out_path] + todo,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            begun, done = [], set()
            for line in open(out_path):
                rec = json.loads(line)
                if "begin" in rec:
                    begun.append(rec["begin"])
                elif "done" in rec:
                    done.add(rec["done"])
                else:
                    entries.append(rec["entry"])
            crashed = [t for t in begun if t not in done]
            if verbose and crashed:
                print(f"  crashed in paddle: {crashed}")
            seen = set(begun)
            todo = [t for t in todo if t not in seen]
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--legacy-zoo", help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="*", help="debug: learn only these legacy types, print, exit")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], args.worker[1:])
    if args.legacy_zoo:
        return legacy_zoo_main(args.legacy_zoo)
    if args.only:                 # debugging: one JSON list of what these types teach
        print(json.dumps([e for t in args.only for e in learn(t, True)], sort_keys=True))
        return

    holder = framework.OpProtoHolder.instance()
    types = sorted(t for t in holder.op_proto_map
                   if not t.endswith(("_grad", "_grad2")) and "grad_grad" not in t
                   and t not in ("feed", "fetch", "fetch_v2"))
    by_pir = defaultdict(list)
    for e in learn_all(types, args.verbose):
        by_pir[e["pir"]].append(e)
    in_legacy_exports = legacy_zoo_types(args.verbose)
    ops = {}
    for pir_name, cands in sorted(by_pir.items()):
        cands.sort(key=lambda e: (e["legacy_type"] in in_legacy_exports,) + score(e), reverse=True)
        best = dict(cands[0])
        others = [c["legacy_type"] for c in cands[1:]]
        if others:
            best["other_legacy_types"] = others
        del best["pir"]
        ops[pir_name] = best

    # ops met in real exports that no legacy op translates to
    for pir_name, (ins, outs, attrs) in sorted(harvest_exports(args.verbose).items()):
        if pir_name in ops:
            if ops[pir_name]["operands"] != ins:
                print(f"warning: {pir_name} operands differ: {ops[pir_name]['operands']} vs {ins}")
            continue
        entry = {"legacy_type": None, "operands": ins, "results": outs, "attrs": attrs}
        # an in-place op the translator never emits (assign_value_ writes into an
        # extra `output` operand): its twin's legacy entry, for the names both share
        dialect, short = pir_name.split(".", 1)
        twin = ops.get(f"{dialect}.{short[:-1] if short.endswith('_') else short + '_'}")
        if twin and twin.get("legacy_type"):
            entry = {k: ({n: s for n, s in v.items() if n in ins + outs} if k in ("inputs", "list_inputs", "folds", "outputs") else v)
                     for k, v in twin.items() if k not in ("inplace_of", "other_legacy_types")}
            entry.update(operands=ins, results=outs, attrs=attrs,
                         twin_of=f"{dialect}.{short[:-1] if short.endswith('_') else short + '_'}")
        ops[pir_name] = entry

    doc = {
        "about": "Generated by tools/gen_pir_compat.py from Paddle's own legacy->PIR translator; "
                 "do not edit by hand.",
        "paddle_version": paddle.__version__,
        "fields": {
            "legacy_type": "legacy op type of this PIR op (null: none; the reader keeps the PIR name)",
            "operands / results / attrs": "PIR operand, result and attribute names, in PIR order",
            "inputs": "PIR operand -> legacy input slot",
            "list_inputs": "PIR operand -> legacy duplicable input slot, used when the operand is a "
                           "list of tensors (builtin.combine)",
            "folds": "PIR operand fed by a constant -> the legacy attribute {attr, kind} it was",
            "outputs": "PIR result -> legacy output slot",
            "attr_names": "PIR attribute -> legacy attribute, where the names differ",
            "legacy_defaults": "legacy attributes the PIR op does not carry, with their legacy defaults",
            "implied_attrs": "legacy attribute values that select this PIR op (tril_triu lower=true "
                             "-> pd_op.tril)",
            "transformed": "legacy attribute -> PIR attribute holding it in another form (not converted)",
            "one_to_one": "false when the translator emits further ops for this legacy op",
            "also_emits": "those further ops",
            "other_legacy_types": "other legacy types translating to this PIR op (less used in exports)",
            "twin_of": "an op seen in exports only, sharing names with its in-place/out-of-place twin",
        },
        "ops": ops,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    n_legacy = sum(1 for e in ops.values() if e.get("legacy_type"))
    print(f"wrote {args.out}: {len(ops)} PIR ops, {n_legacy} with a legacy type")


if __name__ == "__main__":
    sys.exit(main())
