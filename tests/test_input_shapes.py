"""Input shapes the user gives (paddle_npu/shapes.py): `input_shape=` / `--input-shape` /
`--input_shape_dict`, against Paddle's own outputs at the size the model is run at.

Two layers Paddle exports in both formats (a subprocess each: the legacy switch must be set
before `import paddle`); the references are Paddle's eager outputs at 64x64 and 62x62:
  * declared_960: declares [-1, 3, 960, 960] (as released PP-OCR det programs do) and runs at
    any size; upsamples back to the input's size through a shape sub-graph.
  * adaptive_dynamic: declares [-1, 3, -1, -1] and pools to 3x3 and 2x2 grids (PP-LiteSeg's
    pyramid pooling), which needs sizes the program leaves open.
  * adaptive_declared_960: the same declaring [-1, 3, 960, 960]: the pools' input sizes Paddle
    recorded (480) no longer hold once the user replaces the declared size.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from paddle_npu import ConversionError
from paddle_npu.api import export
from paddle_npu.cli import main
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.errors import UnsupportedOpsError
from paddle_npu.shapes import parse_input_shape, parse_shape_dict

SIZES = (64, 62)

ORACLE = r'''
import os, sys
fmt, out = sys.argv[1], sys.argv[2]
if fmt == "legacy":
    os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

class Declared960(nn.Layer):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2D(3, 8, 3, stride=2, padding=1), nn.BatchNorm2D(8)
        self.c2 = nn.Conv2D(8, 2, 1)
    def forward(self, x):
        y = self.c2(F.relu(self.bn(self.c1(x))))
        return F.hardsigmoid(F.interpolate(y, size=paddle.shape(x)[2:], mode="bilinear"))

class AdaptiveDynamic(nn.Layer):
    def __init__(self):
        super().__init__()
        # weights over 1024 values: shape inference sees only their shapes
        self.c1, self.c2 = nn.Conv2D(3, 48, 3, stride=2, padding=1), nn.Conv2D(48, 8, 1)
    def forward(self, x):
        y = F.relu(self.c1(x))
        size = paddle.shape(y)[2:]
        a = F.interpolate(F.adaptive_avg_pool2d(y, 3), size=size, mode="bilinear")
        m = F.interpolate(F.adaptive_max_pool2d(y, 2), size=size, mode="nearest")
        return self.c2(y + a + m)

paddle.seed(7)
for name, cls, shape in [("declared_960", Declared960, [-1, 3, 960, 960]),
                         ("adaptive_dynamic", AdaptiveDynamic, [-1, 3, -1, -1]),
                         ("adaptive_declared_960", AdaptiveDynamic, [-1, 3, 960, 960])]:
    layer = cls()
    layer.eval()
    refs = {}
    for size in (64, 62):
        x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype("float32")
        refs[f"in_x_{size}"] = x
        refs[f"out_{size}"] = layer(paddle.to_tensor(x)).numpy()
    static = paddle.jit.to_static(layer, input_spec=[InputSpec(shape, "float32", "x")],
                                  full_graph=True)
    paddle.jit.save(static, os.path.join(out, name, "model"))
    np.savez(os.path.join(out, name, "reference.npz"), **refs)
'''
MODEL_FILE = {"legacy": "model.pdmodel", "pir": "model.json"}


@pytest.fixture(scope="module")
def exports(paddle_exports):
    return paddle_exports("input_shapes", ORACLE)


def _model(exports, fmt, name):
    return str(exports / fmt / name / MODEL_FILE[fmt])


def _agrees(onnx_bytes, ref, size):
    _, (got,) = run_onnx(onnx_bytes, {"x": ref[f"in_x_{size}"]})
    want = ref[f"out_{size}"]
    assert got.shape == want.shape
    a = agreement(got, want)
    assert a["rel_diff"] <= 1e-5, a


def _input_dims(onnx_bytes):
    dims = onnx.load_from_string(onnx_bytes).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


@pytest.mark.parametrize("fmt", MODEL_FILE)
def test_declared_fixed_size_is_kept_unless_overridden(exports, fmt):
    path = _model(exports, fmt, "declared_960")
    ref = np.load(exports / fmt / "declared_960" / "reference.npz")
    kept = export(path)
    assert _input_dims(kept)[1:] == [3, 960, 960]
    with pytest.raises(Exception, match="960|dimension|shape"):    # onnxruntime refuses 64x64
        run_onnx(kept, {"x": ref["in_x_64"]})
    dynamic = export(path, input_shape={"x": [-1, 3, -1, -1]})
    assert all(isinstance(d, str) for d in _input_dims(dynamic)[2:])
    for size in SIZES:
        _agrees(dynamic, ref, size)
        fixed = export(path, input_shape={"x": [1, 3, size, size]})   # 960 overridden
        assert _input_dims(fixed) == [1, 3, size, size]
        _agrees(fixed, ref, size)
        # the shape sub-graph feeding the upsample folded away at a fixed size
        ops = {n.op_type for n in onnx.load_from_string(fixed).graph.node}
        assert "Shape" not in ops, ops


@pytest.mark.parametrize("fmt", MODEL_FILE)
def test_adaptive_pool_on_dynamic_input_converts_at_a_fixed_size(exports, fmt):
    path = _model(exports, fmt, "adaptive_dynamic")
    ref = np.load(exports / fmt / "adaptive_dynamic" / "reference.npz")
    with pytest.raises(UnsupportedOpsError) as err:
        export(path)
    assert "adaptive pooling to [3, 3] needs static input sizes" in str(err.value)
    assert "--input-shape" in str(err.value)
    for size in SIZES:     # 64: bins of equal size (AveragePool); 62: uneven bins (per bin)
        _agrees(export(path, input_shape={"x": [1, 3, size, size]}), ref, size)


@pytest.mark.parametrize("fmt", MODEL_FILE)
def test_replaced_declared_size_is_not_trusted_downstream(exports, fmt):
    path = _model(exports, fmt, "adaptive_declared_960")
    ref = np.load(exports / fmt / "adaptive_declared_960" / "reference.npz")
    assert _input_dims(export(path))[1:] == [3, 960, 960]
    for size in SIZES:
        _agrees(export(path, input_shape={"x": [1, 3, size, size]}), ref, size)
    with pytest.raises(UnsupportedOpsError, match="--input-shape"):   # pools need sizes
        export(path, input_shape={"x": [-1, 3, -1, -1]})


def test_cli_flags(exports, tmp_path, capsys):
    path = _model(exports, "pir", "adaptive_dynamic")
    ref = np.load(exports / "pir" / "adaptive_dynamic" / "reference.npz")
    assert main(["convert", path, "-o", str(tmp_path / "no.onnx")]) == 2
    assert "--input-shape NAME:D0,D1,..." in capsys.readouterr().err
    assert not (tmp_path / "no.onnx").exists()
    out = tmp_path / "fixed.onnx"
    assert main(["convert", path, "-o", str(out), "--input-shape", "x:1,3,62,62"]) == 0
    _agrees(out.read_bytes(), ref, 62)
    out2 = tmp_path / "p2o.onnx"
    assert main(["convert", "--model_dir", os.path.dirname(path), "--model_filename",
                 "model.json", "--save_file", str(out2),
                 "--input_shape_dict", "{'x': [1, 3, 64, 64]}"]) == 0
    _agrees(out2.read_bytes(), ref, 64)
    assert main(["inspect", path]) == 0
    text = capsys.readouterr().out
    assert "[?, 3, ?, ?]" in text and "--input-shape" in text


def test_bad_shapes_are_clear_errors(exports):
    path = _model(exports, "pir", "declared_960")
    with pytest.raises(ConversionError, match="'y'.*not an input.*its inputs: x"):
        export(path, input_shape={"y": [1, 3, 8, 8]})
    with pytest.raises(ConversionError, match="rank 3.*rank 4"):
        export(path, input_shape={"x": [3, 8, 8]})
    with pytest.raises(ConversionError, match="below 1"):
        export(path, input_shape={"x": [1, 3, 0, 8]})
    assert parse_input_shape("x:1,3,-1,?") == ("x", [1, 3, -1, -1])
    assert parse_input_shape("a:b:2") == ("a:b", [2])
    for bad in ("x", "x:", "x:1,a", ":1,2", "x:1,-2"):
        with pytest.raises(ConversionError, match="NAME:D0,D1"):
            parse_input_shape(bad)
    assert parse_shape_dict("{'x': [1, 3, 64, 64]}") == {"x": [1, 3, 64, 64]}
    for bad in ("[1, 2]", "{'x': 'a'}", "{'x': []}", "{x: [1]}", "{'x': [True]}"):
        with pytest.raises(ConversionError, match="input_shape_dict"):
            parse_shape_dict(bad)


PREDICT = r'''
import sys, numpy as np
import paddle.inference as pi
model, params, out = sys.argv[1:4]
config = pi.Config(model, params)
config.disable_gpu()
predictor = pi.create_predictor(config)
x = np.random.default_rng(3).standard_normal((1, 3, 48, 192)).astype("float32")
predictor.get_input_handle(predictor.get_input_names()[0]).copy_from_cpu(x)
predictor.run()
y = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
np.savez(out, in_x=x, out_0=y)
'''


@pytest.mark.parametrize("form", ["released", "translated"])
def test_released_model_at_another_size(tmp_path, form):
    """The released PP-OCR classifier declares [-1, 3, 32, 100]; Paddle Inference runs it at
    48x192 (PP-OCR's own size) and so does our model with the size replaced or opened."""
    from conftest import REAL_MODELS
    d = os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls")
    script, ref_file = tmp_path / "predict.py", tmp_path / "ref.npz"
    script.write_text(PREDICT)
    proc = subprocess.run([sys.executable, str(script), os.path.join(d, "inference.pdmodel"),
                           os.path.join(d, "inference.pdiparams"), str(ref_file)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = np.load(ref_file)
    model = d if form == "released" else os.path.join(d, "translated")
    for shape in ([1, 3, 48, 192], [-1, 3, -1, -1]):
        _, (got,) = run_onnx(export(model, input_shape={"x": shape}), {"x": ref["in_x"]})
        assert agreement(got, ref["out_0"])["rel_diff"] <= 1e-5
