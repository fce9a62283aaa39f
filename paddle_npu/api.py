"""The Python API, drop-in for `paddle2onnx.export`."""
import logging
import os
import warnings

import onnx
import onnx_ir as ir
from onnx.onnx_cpp2py_export import shape_inference as c_shape_inference

from . import npu  # its `lower` (npu/pipeline.py) loads on first use: convert alone needs none
from .errors import ConversionError, PaddleFormatError
from .exporter import choose_opset, name_free_dims, program_to_onnx
from .fp16 import to_float16
from .frontend import default_params_file, find_program_file, load
from .onnx_io import StreamedModel
from .optimize import optimize as optimize_model
from .outputs import check_output, write_with
from .progress import progress_bar
from .shapes import set_input_shapes

log = logging.getLogger("paddle_npu")   # verbose=True's messages (the CLI prints its own)

# Protobuf cannot hold a model of 2 GiB or more: above this, weights go to a side file.
EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3 - 64 * 1024 ** 2

# paddle2onnx.export options we accept for compatibility, with the value meaning "as usual",
# and why any other value is refused.
_P2O_NEUTRAL = {"dist_prim_all": (False,), "enable_experimental_op": (True, False),
                "custom_op_info": (None, {}), "deploy_backend": ("onnxruntime",),
                "calibration_file": ("",),
                "optimize_tool": ("polygraphy", "onnxoptimizer", "None", None)}
_P2O_WHY_NOT = {
    "custom_op_info": "an op without a mapper gets one through @paddle_op "
                      "(docs/architecture.md, 'Adding an op'); there is no renaming table",
    "calibration_file": "a quantised Paddle model keeps its scales in the ONNX model itself "
                        "(there is no TensorRT calibration cache to write); for a float model "
                        "`paddle-npu calibrate` writes a calibration table",
    "deploy_backend": "the model is written for onnxruntime, which also checks it",
    "dist_prim_all": "distributed primitive ops are not read",
}


class Float16Warning(UserWarning):
    """A weight float16 cannot hold (kept float32) or that flushes to zero in it."""


class Exported:
    """What `convert_model` made: the opset, the opset asked for, the main graph's node count,
    `data`, the serialized model (None above 2 GB, when it went to external data), made
    when first asked for (a model written to a file is never held in memory as bytes), and
    `warnings`, one line each (the float16 export's, about weights)."""

    def __init__(self, streamed, opset, asked, nodes, warnings=()):
        self._streamed, self.opset, self.asked, self.nodes = streamed, opset, asked, nodes
        self.warnings = list(warnings)

    @property
    def data(self):
        return None if self._streamed is None else self._streamed.to_bytes()

    @property
    def size(self):
        """The serialized model's size in bytes (0 above 2 GB)."""
        return 0 if self._streamed is None else self._streamed.size()


def convert_program(program, opset_version=None, auto_upgrade_opset=True, optimize=True,
                    progress=None):
    """A Program -> (ir.Model, opset used)."""
    opset = choose_opset(program, opset_version, auto_upgrade_opset)
    model = program_to_onnx(program, opset, progress=progress)
    optimize_model(model, fold=optimize)
    name_free_dims(model)
    return model, opset


def check_model(proto):
    """onnx.checker and strict shape inference on a ModelProto.

    Runs on the bytes of `proto` (the Python wrappers would serialize it once more each);
    `StreamedModel.checkable()` gives the proto of a converted model without its large
    weights' bytes, whose sizes its writer checks.
    """
    try:
        data = proto.SerializeToString()
        onnx.checker.check_model(data)
        c_shape_inference.infer_shapes(data, True, True, False)   # check_type, strict_mode
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        problems = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ConversionError(f"the converted model fails ONNX validation: {problems}") from None


def _initializer_bytes(model):
    return sum(v.const_value.nbytes for v in model.graph.initializers.values()
               if v.const_value is not None)


def save_model(model, save_file, inputs=(), external_file=""):
    """Write an ir.Model (see `outputs`: never over one of `inputs`); weights go to
    `external_file` (default `<save_file>.data`, beside it) when the model is over 2 GB."""
    if _initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD:
        # The data file's name is recorded in the model: it is written under its final name.
        data_name = os.path.basename(external_file or save_file + ".data")
        check_output(os.path.join(os.path.dirname(save_file), data_name), inputs,
                     "external data")
        return write_with(save_file, lambda tmp: ir.save(
            model, tmp, external_data=data_name, size_threshold_bytes=1024), inputs)

    return write_with(save_file, StreamedModel(model).write, inputs)


def model_files(model, params=None):
    """The program and params files a Paddle export is read from (what must never be
    overwritten), as far as they exist."""
    try:
        program_file = find_program_file(model)
    except PaddleFormatError:
        return [os.fspath(model)]
    return [f for f in (program_file, params or default_params_file(program_file)) if f]


def refuse_paddle2onnx_options(**given):
    """paddle2onnx options at a value that means something else than "as usual" here are
    refused, saying why."""
    for key, value in given.items():
        if value not in _P2O_NEUTRAL[key]:
            why = _P2O_WHY_NOT.get(key, "leave it at its default")
            raise ConversionError(f"paddle2onnx option {key}={value!r} is not supported by "
                                  f"paddle_npu: {why}")


def export(model_filename, params_filename=None, save_file=None, opset_version=7,
           auto_upgrade_opset=True, dist_prim_all=False, verbose=False, enable_onnx_checker=True,
           enable_experimental_op=True, enable_optimize=True, custom_op_info=None,
           deploy_backend="onnxruntime", calibration_file="", external_file="",
           export_fp16_model=False, optimize_tool="polygraphy", *, input_shape=None,
           keep_io_types=True):
    """Convert a Paddle export to ONNX; the signature of `paddle2onnx.export`.

    model_filename:   .pdmodel, PIR .json, __model__, or a model directory
    params_filename:  its params file ('' or None: the one Paddle wrote next to it)
    save_file:        where to write the .onnx (atomically); None: only return it
    opset_version:    the opset to use; raised to what the model needs when
                      auto_upgrade_opset (the default 7 thus means "the lowest that works")
    external_file:    the weights file's name (beside save_file) when the model is over 2 GB
    input_shape:      (keyword only, ours) {input name: [sizes]} replacing what the program
                      declares (-1 makes a size dynamic); by default the declared shapes are kept
    export_fp16_model: a model computing in float16 (paddle_npu/fp16.py): weights halved,
                      inputs and outputs float32 unless keep_io_types=False (keyword only,
                      ours); a weight float16 cannot hold stays float32 and is named in a
                      Float16Warning
    Returns the serialized model (None when it went to external data, over 2 GB).
    paddle2onnx options with no meaning here are accepted at their defaults and refused
    otherwise, saying why, so nothing is silently ignored.
    """
    refuse_paddle2onnx_options(
        dist_prim_all=dist_prim_all, enable_experimental_op=enable_experimental_op,
        custom_op_info=custom_op_info, deploy_backend=deploy_backend,
        calibration_file=calibration_file, optimize_tool=optimize_tool)
    if not isinstance(export_fp16_model, bool) or not isinstance(keep_io_types, bool):
        raise ConversionError(f"export_fp16_model and keep_io_types take True or False, not "
                              f"{export_fp16_model!r} / {keep_io_types!r}")
    done = convert_model(model_filename, params_filename, save_file, opset_version,
                         auto_upgrade_opset, verbose, enable_onnx_checker, enable_optimize,
                         external_file, input_shape=input_shape, fp16=export_fp16_model,
                         keep_io_types=keep_io_types)
    for line in done.warnings:
        warnings.warn(line, Float16Warning, stacklevel=2)
    return done.data


def convert_model(model_filename, params_filename=None, save_file=None, opset_version=None,
                  auto_upgrade_opset=True, verbose=False, enable_onnx_checker=True,
                  enable_optimize=True, external_file="", *, input_shape=None, fp16=False,
                  keep_io_types=True):
    """`export` without paddle2onnx's compatibility options; returns an `Exported`.
    opset_version None: the lowest opset that covers the model; fp16: a float16 model (inputs
    and outputs float32 unless not keep_io_types), its warnings in `Exported.warnings`."""
    inputs = model_files(model_filename, params_filename)
    if save_file is not None:
        check_output(save_file, inputs)
    program = load(model_filename, params_filename or None)
    if input_shape:
        set_input_shapes(program, input_shape)
    progress = None
    if verbose or sum(len(b.ops) for b in program.blocks) > 300:
        progress = lambda ops: progress_bar(ops, "converting", enabled=verbose or None)  # noqa: E731
    model, opset = convert_program(program, opset_version, auto_upgrade_opset,
                                   optimize=enable_optimize, progress=progress)
    notes = to_float16(model, keep_io_types) if fp16 else []
    if _initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD:
        if save_file is None:
            raise ConversionError("the model is over 2 GB: give save_file so that its weights "
                                  "can go to an external data file")
        save_model(model, save_file, inputs, external_file)
        if enable_onnx_checker:
            try:
                onnx.checker.check_model(save_file)
            except onnx.checker.ValidationError as exc:
                os.remove(save_file)
                raise ConversionError(f"the converted model fails ONNX validation: {exc}") from None
        return Exported(None, opset, opset_version, len(model.graph), notes)

    streamed = StreamedModel(model)
    if enable_onnx_checker:
        try:
            check_model(streamed.checkable())
        except ConversionError as exc:
            raise ConversionError(f"{program.model_path}: {exc}") from None
    if save_file is not None:
        write_with(save_file, streamed.write, inputs)
        if verbose:
            log.info("paddle_npu: wrote %s (opset %d)", save_file, opset)
    return Exported(streamed, opset, opset_version, len(streamed.proto.graph.node), notes)


def lower(model, target=None, plan="packed", **options):
    """Stage 2 in one call: the ONNX model (path, bytes or ModelProto) lowered for `target`,
    as (onnx.ModelProto, Report): what `onnx.save` takes, and the cost report. `options` are
    `paddle_npu.npu.lower`'s (preprocess, marks, enable, disable)."""

    lowered, report = npu.lower(model, target, plan, **options)
    return ir.serde.serialize_model(lowered), report
