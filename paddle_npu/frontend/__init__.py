"""Find and read a Paddle export, whatever its layout, into a `Program`.

Layouts users have:
  * Paddle 3 PIR:       model.json + model.pdiparams
  * legacy combined:    model.pdmodel + model.pdiparams   (every recent PaddleOCR/Det/Clas release)
  * old directory:      __model__ (or model) + one file per parameter, or + __params__
The format is decided by the content (a PIR program is JSON), not the file name.
"""
import os

from ..errors import PaddleFormatError
from .params import param_order, read_combined, read_single
from ..filekind import looks_like_onnx
from .legacy import read_legacy_program
from .pir import read_pir_program

_PROGRAM_NAMES = ("__model__", "model")
_COMBINED_PARAMS = ("__params__", "params")


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise PaddleFormatError(path, "file not found",
                                hint="give the .pdmodel, .json or the model directory") from None
    except IsADirectoryError:
        raise PaddleFormatError(path, "is a directory where a program file was expected") from None
    except OSError as exc:
        raise PaddleFormatError(path, f"cannot read ({exc.strerror})") from None


def find_program_file(path):
    """The program file for a file or model-directory argument."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise PaddleFormatError(path, "does not exist",
                                hint="give the .pdmodel, .json or the model directory")
    if not os.path.isdir(path):
        if not os.path.isfile(path):     # /dev/zero would be read forever
            raise PaddleFormatError(path, "is not a regular file",
                                    hint="give the .pdmodel, .json or the model directory")
        return path
    names = sorted(os.listdir(path))
    candidates = [n for n in names if n.endswith((".pdmodel", ".json")) and
                  not n.endswith(".pdiparams.info")]
    candidates = [n for n in candidates if not n.endswith(".json") or _looks_like_pir(os.path.join(path, n))]
    candidates += [n for n in _PROGRAM_NAMES if n in names]
    if not candidates:
        raise PaddleFormatError(path, "no Paddle program in this directory",
                                hint="expected a *.pdmodel, a PIR *.json, __model__ or model file")
    if len(candidates) > 1:
        preferred = [n for n in candidates if n.startswith("inference.")]
        if len(preferred) != 1:
            raise PaddleFormatError(path, f"several programs here: {', '.join(candidates)}",
                                    hint="name the one to read")
        candidates = preferred
    return os.path.join(path, candidates[0])


def _looks_like_pir(path):
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.lstrip()[:1] == b"{" and b'"base_code"' in head or b'"magic"' in head


def _refuse_other_kinds(path, data):
    """Files that are clearly something else, named for what they are."""
    if not data:
        raise PaddleFormatError(path, "is empty (0 bytes)",
                                hint="expected the .pdmodel or .json program Paddle exported")
    if looks_like_onnx(data):
        raise PaddleFormatError(path, "is an ONNX model, not a Paddle program",
                                hint="`paddle-npu lower` and `verify` take ONNX models; convert "
                                     "and inspect take the .pdmodel or .json Paddle exported")
    if data.lstrip()[:1] == b"[":
        raise PaddleFormatError(path, "is a JSON array, not a Paddle PIR program",
                                hint="a PIR program is a JSON object with a 'base_code' entry, "
                                     "as paddle.jit.save writes it")


def default_params_file(program_file):
    """Where Paddle puts the params of a program file, or None if there are none there."""
    folder = os.path.dirname(program_file)
    stem, ext = os.path.splitext(program_file)
    if ext in (".pdmodel", ".json"):
        cand = stem + ".pdiparams"
        return cand if os.path.exists(cand) else None
    for name in _COMBINED_PARAMS:
        cand = os.path.join(folder, name)
        if os.path.isfile(cand):
            return cand
    return None  # per-parameter files, or no parameters at all


def load(model, params=None, *, with_params=True):
    """Read a Paddle export into a Program.

    model:  a .pdmodel / .json / __model__ file, or a directory holding one.
    params: the params file; by default the one Paddle writes next to the model.
    """
    program_file = find_program_file(model)
    data = _read_bytes(program_file)
    _refuse_other_kinds(program_file, data)
    if data.lstrip()[:1] == b"{":
        program = read_pir_program(program_file, data)
    else:
        program = read_legacy_program(data, program_file)
    order = param_order(program)
    if not with_params or not order:
        return program
    expected = {}
    for name in order:
        var = program.var(name) or next(
            (b.vars[name] for b in program.blocks if name in b.vars), None)
        if var is not None:
            expected[name] = (var.dtype, var.shape)
    params = os.fspath(params) if params is not None else default_params_file(program_file)
    if params is not None:
        program.params = read_combined(params, order, expected)
        program.params_path = params
        return program
    folder = os.path.dirname(program_file)
    missing = [n for n in order if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise PaddleFormatError(
            program_file, f"{len(order)} parameters but no params file next to it "
            f"and {len(missing)} per-parameter files missing (first: {missing[0]!r})",
            hint="pass the params file explicitly (--params / params_filename)")
    program.params = {n: read_single(os.path.join(folder, n), n, expected) for n in order}
    program.params_path = folder
    return program
