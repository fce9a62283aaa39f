"""Stage 2: an ONNX model -> the same model on NPU primitives, CPU segments, and a report.

    load -> opset >= MIN_BODY_OPSET -> shape inference -> name nodes -> fold BatchNorm
         -> @onnx_op mappers -> drop dead weights -> place / order / segment
         -> attach function bodies -> (ir.Model, Report)
"""
import os
import time

import onnx_ir as ir
from onnx_ir.passes import common as common_passes

from ..errors import ConversionError
from .context import LowerContext
from .functions import attach_functions
from .ops import DOMAIN, MIN_BODY_OPSET
from .partition import partition
from .passes import batchnorm_to_affine, name_nodes, upgrade_opset
from .registry import get_onnx_mapper
from .report import Report
from .target import load_target
from .tiling import PLANS

MIN_IR_VERSION = 10     # node metadata_props and function overloads


def load_proto(model):
    """A ModelProto from a path, serialized bytes, a ModelProto or an ir.Model."""
    import onnx

    if isinstance(model, ir.Model):
        return ir.serde.serialize_model(model)
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise ConversionError(f"{model}: does not exist")
        try:
            proto, problem = onnx.load(os.fspath(model)), None
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
            proto, problem = None, exc
        if proto is None or not proto.HasField("graph") or not proto.opset_import:
            from ..filekind import describe
            kind = describe(model)
            if kind == "an ONNX model":     # e.g. its external data file is missing
                raise ConversionError(f"{model}: cannot be read ({problem})")
            raise ConversionError(f"{model}: {kind}, not an ONNX model (a Paddle export "
                                  "goes through `paddle-npu convert` first)")
        return proto
    raise TypeError(f"cannot read an ONNX model from {type(model).__name__}")


def prepare(model):
    """The ir.Model the mappers work on: opset upgraded, shapes inferred, nodes named."""
    import onnx

    proto = upgrade_opset(load_proto(model), MIN_BODY_OPSET)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:   # (a model over 2 GB, an op shape inference chokes on): shapes as given
        pass
    m = ir.serde.deserialize_model(proto)
    # IR < 4 listed every initializer as a graph input too; the lowered model is IR >= 10,
    # where they are constants only (and can be dropped once unused)
    inputs = [v for v in m.graph.inputs if v.name not in m.graph.initializers]
    m.graph.inputs.clear()
    m.graph.inputs.extend(inputs)
    name_nodes(m)
    return m


def lower(model, target=None, plan="packed", preprocess=None, marks=None, enable=(),
          disable=()):
    """Lower an ONNX model (path, bytes, ModelProto or ir.Model) for a target (preset name,
    target file or Target). Returns (ir.Model, Report); the input is left unchanged.
    preprocess: a PreprocessSpec (or dict) to fuse image preprocessing in front of the
    model first (raw uint8 images in; see paddle_npu/preprocess.py).
    marks: a marks.Marks (CPU / 16-bit placement, compile_mode); enable / disable: restruct
    passes to switch on / off beyond the target's own (restruct.py)."""
    if plan not in PLANS:
        raise ConversionError(f"unknown plan {plan!r} (known: {', '.join(PLANS)})")
    start = time.perf_counter()
    target = load_target(target)
    m = prepare(model)
    fused = None
    if preprocess is not None:   # Transpose / Slice / Scale / ScaleLut / SwapChannel in front
        from ..preprocess import fuse_preprocess
        m, fused = fuse_preprocess(m, preprocess, primitives=True)
    from .marks import apply_marks, marked_sources, propagate
    from .restruct import reinfer, restruct
    from .segments import check_segment_cap

    mark_result = apply_marks(m, marks)
    passes = restruct(m, target, enable, disable)     # bn_collapse is fold_batchnorm
    if any(p.fired for p in passes if p.name != "bn_collapse"):
        m = reinfer(m)
    batchnorm_to_affine(m)
    marked = marked_sources(m)

    ctx = LowerContext(m, target, plan)
    for node in list(m.graph):
        mapper = get_onnx_mapper(node.op_type, node.domain)
        if mapper is None:
            continue
        reason = mapper.check(ctx, node)
        if reason is not None:
            ctx.refusals[node.name] = f"{node.op_type}: {reason}"
            continue
        ctx.begin(node)
        ctx.replace(node, list(mapper.lower(ctx, node)))

    common_passes.RemoveUnusedNodesPass()(m)
    common_passes.RemoveUnusedFunctionsPass()(m)
    propagate(m, marked)
    segments = partition(m, target)
    check_segment_cap(segments, target)
    attach_functions(m)
    m.ir_version = max(m.ir_version, MIN_IR_VERSION)

    devices, plain = {}, {}
    for node in m.graph:
        dev = node.metadata_props["paddle_npu.device"]
        devices[dev] = devices.get(dev, 0) + 1
        if node.domain != DOMAIN:
            where = plain.setdefault(node.op_type, {})
            where[dev] = where.get(dev, 0) + 1
    report = Report(target.as_dict(), plan, ctx.layers, segments, devices, plain,
                    ctx.refusals, time.perf_counter() - start, preprocess=fused,
                    restruct=[p.as_dict() for p in passes], marks=mark_result.as_dict())
    return m, report
