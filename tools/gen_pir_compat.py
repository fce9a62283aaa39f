#!/usr/bin/env python3
"""Generate paddle_npu/frontend/pir_compat.json: how Paddle's PIR ops relate to legacy ops.

    /work/venv/bin/python tools/gen_pir_compat.py [--out PATH] [--verbose]

A PIR `model.json` records each op's operands and results only by position and
drops the legacy slot names (`Input`, `Filter`, ...); some legacy attributes
became operands fed by `pd_op.full_int_array` / `pd_op.full`. The reader needs
tables to give PIR ops their legacy shape. Every entry here is learned from
Paddle itself, nothing is typed in by hand:

1. For each legacy op type in Paddle's OpProto registry, build a one-op legacy
   program and run Paddle's own legacy->PIR translator
   (`translate_to_pir_with_param_map`). The var -> value map tells which PIR
   operand carries which legacy input slot and which PIR result carries which
   legacy output slot. The PIR op itself reports its operand/result/attribute
   names (`get_input_names()` etc.).
2. Each legacy attribute that has no same-named PIR attribute is perturbed and
   the program translated again: the PIR attribute, or the constant feeding a
   PIR operand, that changes is what that legacy attribute became.
3. Dispensable legacy inputs (`ShapeTensor`, `StartsTensor`, ...) are added one
   at a time to learn which PIR operand takes them when they are tensors.
4. Real models are exported with `paddle.jit.save` (PIR) and loaded back, to
   record the operand names of PIR ops that the translator never produces
   (e.g. `shape64`, `full_with_tensor`, in-place `relu_`).

`HINTS` below only helps step 1 build a legacy op that passes Paddle's shape
inference (input shapes/dtypes, values for attributes without defaults); it
does not decide any mapping.
"""
import argparse
import json
import os
import sys
import tempfile
import warnings
from collections import Counter, defaultdict

warnings.filterwarnings("ignore")
os.environ.setdefault("GLOG_minloglevel", "3")

import paddle  # noqa: E402
from paddle.base import core, framework, libpaddle  # noqa: E402
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
                          "Mean": ([3], F32), "Variance": ([3], F32)}},
    "sync_batch_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32),
                               "Mean": ([3], F32), "Variance": ([3], F32)}},
    "instance_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32)}},
    "group_norm": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32)}, "attrs": {"groups": 3}},
    "layer_norm": {"in": {"X": IMG, "Scale": ([64], F32), "Bias": ([64], F32)}, "attrs": {"begin_norm_axis": 2}},
    "affine_channel": {"in": {"X": IMG, "Scale": ([3], F32), "Bias": ([3], F32)}},
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
    "pad3d": {"attrs": {"paddings": [1, 1, 2, 2, 0, 0]}},
    "slice": {"attrs": {"axes": [2, 3], "starts": [1, 2], "ends": [5, 6], "infer_flags": [1, 1]}},
    "strided_slice": {"attrs": {"axes": [2, 3], "starts": [1, 2], "ends": [5, 6], "strides": [1, 2],
                                "infer_flags": [1, 1]}},
    "set_value": {"in": {"Input": IMG, "ValueTensor": ([2, 3, 4, 8], F32)},
                  "attrs": {"axes": [2], "starts": [0], "ends": [4], "steps": [1]}},
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
    "split": {"attrs": {"num": 3, "axis": 1}, "out": {"Out": 3}},
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
    "matmul": {"in": {"X": ([2, 3, 4], F32), "Y": ([2, 4, 5], F32)}},
    "matmul_v2": {"in": {"X": ([2, 3, 4], F32), "Y": ([2, 4, 5], F32)}},
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


def value_key(v):
    """A hashable identity for a PIR value (Value's == builds an op in PIR)."""
    op = v.get_defining_op()
    return (op.id() if op is not None else None, v.index() if op is not None else v.id)


def const_repr(v, depth=0):
    """repr of the constant feeding an operand, or None when it is no constant."""
    op = v.get_defining_op() if v is not None and v.initialized() else None
    if op is None or op.name() not in CONSTANT_OPS or depth > 3:
        return None
    if op.name() == "builtin.combine":
        parts = [const_repr(o.source(), depth + 1) for o in op.operands()]
        return None if any(p is None for p in parts) else repr(parts)
    return repr(sorted((k, repr(a)) for k, a in op.attrs().items() if k != "stop_gradient"))


class Case:
    """One legacy op built with chosen inputs/attrs, translated to PIR."""

    def __init__(self, op_type, proto, hint, extra_inputs=(), attr_over=None):
        self.type = op_type
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
                if o.extra and not o.intermediate:
                    continue
                n = hint.get("out", {}).get(o.name, 2 if o.duplicable else 1)
                names = [f"out_{o.name}_{k}" for k in range(n)]
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
                   if o.source() and o.source().initialized() and o.source().get_defining_op() is not None}
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
            if not src or not src.initialized():
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
            if s and s.initialized():
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
        return [[x + 1 for x in value] or [1], [2] * max(1, len(value)), [x - 1 for x in value]]
    if attr_type in (4, 12):
        return [[x + 0.5 for x in value] or [0.5]]
    if attr_type == 2:
        return [x for x in ("NHWC", "NCHW", "max", "avg", "SAME", "VALID", "bilinear", "nearest",
                            "LSTM", "GRU", "2.5", "channel", value + "_") if x != value]
    if attr_type == 5:
        return [list(value) + ["x"]]
    return []


def learn(op_type, verbose=False):
    """Everything the translator tells about one legacy op type, or None."""
    holder = framework.OpProtoHolder.instance()
    proto = holder.get_op_proto(op_type)
    hint = HINTS.get(op_type, {})
    try:
        base = Case(op_type, proto, hint)
    except Exception as e:        # needs inputs/attrs we cannot guess
        if verbose and op_type in HINTS:
            print(f"  skip {op_type}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else e}")
        return None
    pir = base.pir
    try:
        operand_names = list(pir.get_input_names())
        result_names = list(pir.get_output_names())
        attr_names = list(pir.get_attr_names())
    except Exception:
        return None
    entry = {"legacy_type": op_type, "pir": pir.name(), "operands": operand_names,
             "results": result_names, "attrs": attr_names, "inputs": {}, "list_inputs": {},
             "folds": {}, "outputs": {}, "attr_names": {}, "one_to_one": not base.others}
    if base.others:
        entry["also_emits"] = sorted(set(base.others))
    for i, slot in base.operand_slots().items():
        if i < len(operand_names):
            entry["inputs"].setdefault(operand_names[i], slot)
    # results: which legacy output slot each PIR result carries
    pir_id = pir.id()
    for slot, names in base.out_vars.items():
        for n in names:
            where = base.result_of.get(n)
            if where and where[0] == pir_id:
                idx = where[1][1] if isinstance(where[1], tuple) else where[1]
                if idx < len(result_names):
                    entry["outputs"].setdefault(result_names[idx], slot)
    # dispensable inputs one at a time: which operand takes them as tensors
    for i in proto.inputs:
        if not i.dispensable or i.extra or i.name in base.slot_vars:
            continue
        try:
            case = Case(op_type, proto, hint, extra_inputs=(i.name,))
        except Exception:
            continue
        if case.pir.name() != pir.name():
            continue
        for idx, slot in case.operand_slots().items():
            if slot == i.name and idx < len(operand_names):
                key = "list_inputs" if i.duplicable else "inputs"
                entry[key].setdefault(operand_names[idx], slot)
    # attributes: same name, or find by perturbation
    snap0 = base.snapshot()
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
            try:
                case = Case(op_type, proto, hint, attr_over={name: new})
            except Exception:
                continue
            if case.pir.name() != pir.name():
                continue
            changed = [k for k, v in case.snapshot().items() if snap0.get(k) != v]
            if not changed:
                continue
            for kind, what in changed:
                if kind == "attr" and what not in entry["attr_names"]:
                    entry["attr_names"][what] = name
                elif kind == "operand" and what < len(operand_names):
                    op_name = operand_names[what]
                    if op_name not in entry["folds"]:
                        entry["folds"][op_name] = {"attr": name, "kind": ATTR_KIND[a.type]}
            mapped.add(name)
            break
    # legacy attrs PIR does not carry: their legacy defaults, so both formats agree
    defaults = {}
    for name, a in legacy_attrs.items():
        if name in mapped or name not in legacy_defaults(op_type):
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

def zoo_layers():
    nn, F = paddle.nn, paddle.nn.functional
    spec = paddle.static.InputSpec

    class Vision(nn.Layer):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2D(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2D(8)
            self.dw = nn.Conv2D(8, 8, 3, padding=1, groups=8)
            self.ct = nn.Conv2DTranspose(8, 4, 2, stride=2)
            self.pr = nn.PReLU()
            self.ln = nn.Linear(4, 5)

        def forward(self, x):
            y = F.relu(self.bn(self.c(x)))
            y = F.hardswish(self.dw(y)) + F.relu6(y) * F.sigmoid(y)
            y = F.max_pool2d(y, 3, 2, 1) + F.avg_pool2d(y, 3, 2, 1)
            y = self.pr(self.ct(y))
            y = F.interpolate(y, scale_factor=2, mode="bilinear")
            y = F.interpolate(y, size=[8, 8], mode="nearest")
            y = F.pad(y, [1, 1, 1, 1], mode="reflect")
            y = paddle.clip(y, -1.0, 1.0)
            y = F.adaptive_avg_pool2d(y, 1).flatten(1)
            z = self.ln(y)
            return F.softmax(z, -1), paddle.argmax(z, -1), paddle.topk(z, 2)[1], z.astype("int32")

    class Tensorish(nn.Layer):
        def forward(self, x):
            a, b = paddle.split(x, 2, axis=1)
            s = paddle.stack([a, b], 0).squeeze(0) if a.shape[0] == 1 else paddle.stack([a, b], 0)
            e = paddle.expand(x.unsqueeze(0), [2, -1, -1, -1, -1])
            g = paddle.gather(x, paddle.to_tensor([0, 1]), axis=1)
            w = paddle.where(x > 0, x, paddle.zeros_like(x))
            r = paddle.reshape(x, [0, -1]).mean(-1, keepdim=True) + x.sum() + x.max() - x.min()
            sl = x[:, 1:3, ::2] + paddle.strided_slice(x, [1], [0], [2], [1])
            f = paddle.full([1], 2.0) * paddle.shape(x)[0].astype("float32")
            c = paddle.concat([x, x], 1).transpose([0, 2, 3, 1])
            cmp = paddle.logical_and(x >= 0, x < 1).astype("float32") + (x == 1).astype("float32")
            return s, e, g, w, r, sl, f, c, cmp, F.gelu(x), F.leaky_relu(x), paddle.cumsum(x, 1)

    class Text(nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0), 1)
            self.lstm = nn.LSTM(16, 8, direction="bidirect")
            self.gru = nn.GRU(16, 8)
            self.ln = nn.LayerNorm(16)

        def forward(self, ids):
            h = self.ln(self.enc(self.emb(ids)))
            a, _ = self.lstm(h)
            b, _ = self.gru(h)
            return a, b, paddle.nn.functional.one_hot(ids, 50)

    class Control(nn.Layer):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            y = self.l(x)
            if y.mean() > 0:
                y = y * 2
            else:
                y = y - 1
            i = paddle.zeros([1], "int64")
            while i < 3:
                y = F.relu_(y + 1)
                i = i + 1
            return y

    x4 = spec([None, 3, 16, 16], "float32", "x")
    return [(Vision(), [x4]), (Tensorish(), [spec([2, 3, 4, 4], "float32", "x")]),
            (Text(), [spec([None, 7], "int64", "ids")]), (Control(), [spec([None, 4], "float32", "x")])]


def harvest_exports(verbose=False):
    """PIR op name -> (operand, result, attr names) from models exported by paddle.jit.save."""
    seen = {}
    paddle.disable_static()
    layers = zoo_layers()
    with tempfile.TemporaryDirectory() as tmp:
        for k, (layer, spec) in enumerate(layers):
            layer.eval()
            path = os.path.join(tmp, f"m{k}", "model")
            try:
                paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), path)
            except Exception as e:
                if verbose:
                    print(f"  export {type(layer).__name__} failed: {e}")
                continue
            paddle.enable_static()
            exe = paddle.static.Executor(paddle.CPUPlace())
            prog, _, _ = paddle.static.load_inference_model(path, exe)
            stack = [prog.global_block()]
            while stack:
                block = stack.pop()
                for op in block.ops:
                    for sub in op.blocks():
                        stack.append(sub)
                    if not op.name().startswith("pd_op.") or op.name() in seen:
                        continue
                    try:
                        seen[op.name()] = (list(op.get_input_names()), list(op.get_output_names()),
                                           list(op.get_attr_names()))
                    except Exception:
                        pass        # ops without yaml info (if/while): handled by the reader
            paddle.disable_static()
    paddle.enable_static()
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", nargs="*", help="debug: learn only these legacy types, print, exit")
    args = ap.parse_args()
    if args.only:
        for t in args.only:
            print(json.dumps(learn(t, True), indent=1, sort_keys=True))
        return

    holder = framework.OpProtoHolder.instance()
    types = sorted(t for t in holder.op_proto_map
                   if not t.endswith(("_grad", "_grad2")) and "grad_grad" not in t
                   and t not in ("feed", "fetch", "fetch_v2"))
    by_pir = defaultdict(list)
    for t in types:
        e = learn(t, args.verbose)
        if e is not None:
            by_pir[e["pir"]].append(e)
    ops = {}
    for pir_name, cands in sorted(by_pir.items()):
        cands.sort(key=score, reverse=True)
        best = dict(cands[0])
        others = [c["legacy_type"] for c in cands[1:]]
        if others:
            best["other_legacy_types"] = others
        del best["pir"]
        ops[pir_name] = best

    # in-place variants: Paddle's op API lists `x_` next to `x`; same operands
    api = set(dir(libpaddle.pir.ops))
    for pir_name in list(ops):
        short = pir_name.split(".", 1)[1]
        if short + "_" in api and pir_name + "_" not in ops:
            ops[pir_name + "_"] = dict(ops[pir_name], inplace_of=pir_name)

    # ops met in real exports that no legacy op translates to
    for pir_name, (ins, outs, attrs) in sorted(harvest_exports(args.verbose).items()):
        if pir_name in ops:
            if ops[pir_name]["operands"] != ins:
                print(f"warning: {pir_name} operands differ: {ops[pir_name]['operands']} vs {ins}")
            continue
        ops[pir_name] = {"legacy_type": None, "operands": ins, "results": outs, "attrs": attrs}

    doc = {
        "about": "Generated by tools/gen_pir_compat.py from Paddle's own legacy->PIR translator; "
                 "do not edit by hand.",
        "paddle_version": paddle.__version__,
        "fields": {
            "legacy_type": "legacy op type this PIR op corresponds to (null: none; keep the PIR name)",
            "operands / results / attrs": "PIR operand, result and attribute names in PIR order",
            "inputs": "PIR operand -> legacy input slot",
            "list_inputs": "PIR operand -> legacy duplicable input slot used when it is a list of tensors",
            "folds": "PIR operand fed by a constant -> legacy attribute {attr, kind}",
            "outputs": "PIR result -> legacy output slot",
            "attr_names": "PIR attribute -> legacy attribute, where the names differ",
            "legacy_defaults": "legacy attributes the PIR op does not carry, with legacy defaults",
            "inplace_of": "an in-place PIR op sharing the entry of its out-of-place twin",
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
