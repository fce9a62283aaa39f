"""What `paddle-npu inspect` reports about a Paddle export."""
import numpy as np


def _tensor_info(program, name):
    var = program.var(name)
    return {
        "name": name,
        "dtype": var.dtype if var else None,
        "shape": list(var.shape) if var and var.shape is not None else None,
    }


def summarize(program):
    """A JSON-safe summary: format, op histogram, inputs/outputs, parameter totals."""
    params = program.params
    return {
        "format": program.format,
        "model_file": program.model_path,
        "params_file": program.params_path,
        "program_version": program.version,
        "blocks": len(program.blocks),
        "ops": sum(len(b.ops) for b in program.blocks),
        "op_histogram": program.op_histogram(),
        "inputs": [_tensor_info(program, n) for n in program.inputs],
        "outputs": [_tensor_info(program, n) for n in program.outputs],
        "parameters": {
            "tensors": len(params),
            "elements": int(sum(int(np.prod(a.shape, dtype=np.int64)) for a in params.values())),
            "bytes": int(sum(a.nbytes for a in params.values())),
            "dtypes": _count(a.dtype.name for a in params.values()),
        },
    }


def _count(items):
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _shape(info):
    if info["shape"] is None:
        return "?"
    return "[" + ", ".join("?" if d < 0 else str(d) for d in info["shape"]) + "]"


def render(summary):
    """The human-readable text of a summary."""
    p = summary["parameters"]
    lines = [
        f"model:      {summary['model_file']}",
        f"format:     {summary['format']} (program version {summary['program_version']})",
        f"params:     {summary['params_file'] or '-'}",
        f"blocks:     {summary['blocks']}    ops: {summary['ops']}",
        f"parameters: {p['tensors']} tensors, {p['elements']:,} elements, {p['bytes']:,} bytes"
        + (f"  ({', '.join(f'{k}: {v}' for k, v in p['dtypes'].items())})" if p["dtypes"] else ""),
        "inputs (shapes as the program declares them; convert --input-shape NAME:D0,D1,... "
        "sets others):",
    ]
    lines += [f"  {i['name']:<32} {i['dtype'] or '?':<10} {_shape(i)}" for i in summary["inputs"]]
    lines.append("outputs:")
    lines += [f"  {i['name']:<32} {i['dtype'] or '?':<10} {_shape(i)}" for i in summary["outputs"]]
    lines.append("op histogram:")
    lines += [f"  {count:>6}  {op}" for op, count in summary["op_histogram"].items()]
    return "\n".join(lines)
