"""Numerical agreement of two sets of outputs, and reference files of recorded I/O.

A reference file is an .npz with the inputs as `in_<input name>` (or `<input name>`)
and the expected outputs as `out_<i>` (or `<output name>`), the layout of the
`reference_io.npz` files Paddle's outputs are recorded in.
"""
import numpy as np
import onnx_ir as ir

from .errors import ConversionError
from .filekind import describe
from .onnx_io import StreamedModel


def agreement(got, want):
    """max abs diff, that relative to the reference's scale, and cosine similarity."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return {"max_abs_diff": float("inf"), "rel_diff": float("inf"), "cosine": 0.0,
                "shape_mismatch": True}
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    denom = float(np.linalg.norm(got) * np.linalg.norm(want))
    cos = float(np.dot(got, want) / denom) if denom > 0 else float(np.array_equal(got, want))
    return {"max_abs_diff": diff, "rel_diff": diff / scale if scale > 0 else diff, "cosine": cos}


def read_npz(path):
    """An .npz file's arrays (np.load's lazy NpzFile), or a one-line error naming the file."""
    try:
        data = np.load(path)
    except (OSError, ValueError):
        raise ConversionError(f"{path}: cannot read it as an .npz of arrays: it is "
                              f"{describe(path)}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):     # a single array saved with np.save
        raise ConversionError(f"{path}: holds one array, not an .npz of arrays keyed by "
                              "input name (save them with numpy.savez)")
    return data


def npz_array(data, key, path):
    """One array of a read_npz file; pickled Python objects are refused, not unpickled."""
    try:
        return data[key]
    except ValueError:
        raise ConversionError(f"{path}: array {key!r} holds Python objects; save the inputs "
                              "as numeric arrays") from None


def check_finite(batches, where):
    """Refuse model inputs holding NaN or infinite values, naming the input and how many:
    `batches` is an iterable of {input name: array} (all the data, or it batch by batch),
    counted to the end before refusing. Every command that reads data checks it so."""
    bad, total = {}, {}
    for feeds in batches:
        for name, arr in feeds.items():
            arr = np.asarray(arr)
            total[name] = total.get(name, 0) + arr.size
            if arr.dtype.kind in "fc":
                bad[name] = bad.get(name, 0) + int(np.count_nonzero(~np.isfinite(arr)))
    for name, count in bad.items():
        if count:
            raise ConversionError(f"{where}: input {name!r} has {count} NaN or infinite "
                                  f"values (of {total[name]}); give inputs the model is "
                                  "meant for")


def load_reference(path, input_names, output_names):
    """(feeds, expected outputs) from a reference .npz; a clear error when keys are missing
    or the inputs hold NaN / infinite values."""
    data = read_npz(path)
    feeds = {}
    for name in input_names:
        for key in (f"in_{name}", name):
            if key in data:
                feeds[name] = npz_array(data, key, path)
                break
        else:
            raise ConversionError(f"{path}: no array for input {name!r} (expected key "
                                  f"'in_{name}' or '{name}'; has {sorted(data.files)})")
    expected = []
    for i, name in enumerate(output_names):
        for key in (f"out_{i}", name):
            if key in data:
                expected.append(npz_array(data, key, path))
                break
        else:
            expected.append(None)
    check_finite([feeds], path)
    return feeds, expected


def run_onnx(model, feeds, graph_optimizations=True, copies=None):
    """(output names, outputs) of onnxruntime on the CPU (model: bytes, a path, or an
    ir.Model, whose weights the session reads where they are, `copies` holding contiguous
    copies of its strided ones for the next session: StreamedModel.for_onnxruntime);
    graph_optimizations=False runs the graph as written (their difference is part of a
    model's float-noise floor)."""
    names, (outputs,) = run_onnx_on(model, [feeds], graph_optimizations, copies)
    return names, outputs


def run_onnx_on(model, feeds_list, graph_optimizations=True, copies=None):
    """(output names, [outputs per feeds]): run_onnx on several inputs, one session."""
    import onnxruntime as ort   # heavy, and only for running a model

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not graph_optimizations:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    given = {}
    if isinstance(model, ir.Model):
        model, given = StreamedModel(model).for_onnxruntime(copies)
    # (the OrtValues view the arrays; both live as long as the session)
    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in given.values()]
    if given:
        opts.add_external_initializers(list(given), values)
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, [sess.run(None, feeds) for feeds in feeds_list]
