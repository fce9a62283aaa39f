"""The Python API, drop-in for `paddle2onnx.export`."""
import os
import sys
import tempfile

from .errors import ConversionError

# Protobuf cannot hold a model of 2 GiB or more: above this, weights go to a side file.
EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3 - 64 * 1024 ** 2

# paddle2onnx options we accept for compatibility, with the value that means "as usual".
_P2O_DEFAULTS = {"enable_experimental_op": True, "deploy_backend": "onnxruntime",
                 "calibration_file": "", "external_file": "", "export_fp16_model": False,
                 "custom_op_info": None}


def convert_program(program, opset_version=None, auto_upgrade_opset=True, optimize=True,
                    progress=None):
    """A Program -> (ir.Model, opset used)."""
    from .exporter import choose_opset, program_to_onnx
    from .optimize import optimize as optimize_model

    opset = choose_opset(program, opset_version, auto_upgrade_opset)
    model = program_to_onnx(program, opset, progress=progress)
    optimize_model(model, fold=optimize)
    return model, opset


def check_model(proto):
    """onnx.checker and strict shape inference; a ConversionError names what failed."""
    import onnx

    try:
        onnx.checker.check_model(proto)
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ConversionError(f"the converted model fails ONNX validation: {exc}") from None


def _initializer_bytes(model):
    return sum(v.const_value.nbytes for v in model.graph.initializers.values()
               if v.const_value is not None)


def save_model(model, save_file):
    """Write atomically: a temp file in the target folder, renamed when complete."""
    import onnx_ir as ir

    save_file = os.path.abspath(save_file)
    folder = os.path.dirname(save_file)
    os.makedirs(folder, exist_ok=True)
    external = _initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD
    fd, tmp = tempfile.mkstemp(prefix=".paddle_npu.", suffix=".onnx", dir=folder)
    os.close(fd)
    data_name = os.path.basename(save_file) + ".data"
    try:
        if external:
            # The data file name is recorded inside the model: write it under its final name.
            ir.save(model, tmp, external_data=data_name, size_threshold_bytes=1024)
        else:
            ir.save(model, tmp)
        os.replace(tmp, save_file)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return save_file


def export(model_filename, params_filename=None, save_file=None, opset_version=None,
           auto_upgrade_opset=True, verbose=False, enable_onnx_checker=True,
           enable_optimize=True, **paddle2onnx_options):
    """Convert a Paddle export to ONNX, like `paddle2onnx.export`.

    model_filename:   .pdmodel, PIR .json, __model__, or a model directory
    params_filename:  its params file ('' or None: the one Paddle wrote next to it)
    save_file:        where to write the .onnx; None returns the serialized bytes
    opset_version:    None picks the lowest opset covering the model; a number is used as
                      is, or raised to what the model needs when auto_upgrade_opset is True
    """
    import onnx_ir as ir

    from .frontend import load

    for key, value in paddle2onnx_options.items():
        if key not in _P2O_DEFAULTS:
            raise TypeError(f"export() got an unexpected keyword argument {key!r}")
        if value != _P2O_DEFAULTS[key] and value not in ("", None):
            raise ConversionError(f"paddle2onnx option {key}={value!r} is not supported by "
                                  "paddle_npu; leave it at its default")
    program = load(model_filename, params_filename or None)
    progress = None
    if verbose or sum(len(b.ops) for b in program.blocks) > 300:
        from .progress import progress_bar
        progress = lambda ops: progress_bar(ops, "converting", enabled=verbose or None)  # noqa: E731
    model, opset = convert_program(program, opset_version, auto_upgrade_opset,
                                   optimize=enable_optimize, progress=progress)
    big = _initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD
    if save_file is None:
        if big:
            raise ConversionError("the model is over 2 GB: give save_file so that its weights "
                                  "can go to an external data file")
        proto = ir.serde.serialize_model(model)
        if enable_onnx_checker:
            check_model(proto)
        return proto.SerializeToString()
    if enable_onnx_checker and not big:
        check_model(ir.serde.serialize_model(model))
    save_model(model, save_file)
    if verbose:
        print(f"paddle_npu: wrote {save_file} (opset {opset})", file=sys.stderr)
    return None
