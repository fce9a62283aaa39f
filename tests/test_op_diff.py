"""tools/op_diff.py: each Paddle op against our ONNX for it, fed Paddle's own inputs."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

import zoo
from paddle_npu.api import export

TOOL = os.path.join(os.path.dirname(zoo.ZOO_FILE), "op_diff.py")


def _op_diff(info, onnx_file=None):
    model = os.path.join(info["dir"], info["model_file"])
    cmd = [sys.executable, TOOL, model, "--inputs", os.path.join(info["dir"], "reference.npz"),
           "--json"] + (["--onnx", str(onnx_file)] if onnx_file else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_every_op_agrees_and_a_wrong_weight_is_found(zoo_dir, tmp_path):
    info = zoo.export("lenet", "legacy", os.path.join(zoo_dir, "lenet", "legacy"))
    result = _op_diff(info)
    assert {"elementwise_add", "relu", "pool2d"} <= set(result["worst_by_type"])
    assert all(r["rel_diff"] <= 1e-5 for r in result["ops"]), result["ops"][:3]

    model = onnx.load_from_string(export(os.path.join(info["dir"], info["model_file"])))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    weight = next(t for t in model.graph.initializer if t.name == conv.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.01),
                                            weight.name))
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))
    worst = _op_diff(info, broken)["ops"][0]
    # the conv and its bias add are one Conv in our model: compared as the add
    assert worst["type"] == "elementwise_add" and worst["rel_diff"] > 1e-3, worst


def test_matmuls_compared_with_float64(zoo_dir):
    """Attention's MatMuls (not folded into a Gemm) are also checked against the float64
    product of the same inputs, Paddle's GEMM and onnxruntime's each within rounding."""
    info = zoo.export("transformer_encoder", "legacy",
                      os.path.join(zoo_dir, "transformer_encoder", "legacy"))
    result = _op_diff(info)
    assert all(r["rel_diff"] <= 1e-5 for r in result["ops"]), result["ops"][:3]
    gemms = result["matmul_vs_float64"]
    assert len(gemms) >= 2
    assert all(0 < g["paddle"] < 1e-6 and 0 < g["ours"] < 1e-6 for g in gemms), gemms
