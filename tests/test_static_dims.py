"""A size the program fixes stays fixed in the ONNX model even where the input has open sizes:
a grey image repeated to three channels (repeat_interleave with a count, as PP-FormulaNet's
encoder does) keeps 3 channels, so stage 2 lowers the Conv after it instead of leaving it on
the CPU. Checked on a layer Paddle exports in both formats, run against Paddle's outputs."""

import numpy as np
import onnx
import pytest

from paddle_npu.api import export
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.npu import lower, verify

ORACLE = r'''
import os, sys
fmt, out = sys.argv[1], sys.argv[2]
if fmt == "legacy":
    os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np
import paddle
from paddle import nn
from paddle.static import InputSpec

class Grey(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 4, 3, padding=1)
    def forward(self, x):
        return self.conv(paddle.repeat_interleave(x, 3, axis=1))

paddle.seed(5)
layer = Grey()
layer.eval()
x = np.random.default_rng(5).standard_normal((2, 1, 8, 8)).astype("float32")
y = layer(paddle.to_tensor(x))
paddle.jit.save(paddle.jit.to_static(layer, input_spec=[InputSpec([-1, 1, -1, -1], "float32",
                                                                  "x")], full_graph=True),
                os.path.join(out, "model"))
np.savez(os.path.join(out, "reference.npz"), in_x=x, out_0=y.numpy())
'''
MODEL_FILE = {"legacy": "model.pdmodel", "pir": "model.json"}


@pytest.fixture(scope="module")
def exports(paddle_exports):
    return paddle_exports("static_dims", ORACLE)


@pytest.mark.parametrize("fmt", MODEL_FILE)
def test_repeated_channels_stay_known_and_the_conv_lowers(exports, fmt):
    data = export(str(exports / fmt / MODEL_FILE[fmt]))
    graph = onnx.load_from_string(data).graph
    conv = next(n for n in graph.node if n.op_type == "Conv")
    shapes = {v.name: v.type.tensor_type.shape for v in graph.value_info}
    assert conv.input[0] in shapes, "the repeated image has no declared shape"
    assert [d.dim_value or d.dim_param for d in shapes[conv.input[0]].dim] == \
        ["x_dim0", 3, "x_dim2", "x_dim3"]
    ref = np.load(exports / fmt / "reference.npz")
    _, (got,) = run_onnx(data, {"x": ref["in_x"]})
    assert agreement(got, ref["out_0"])["rel_diff"] <= 1e-5
    lowered, _ = lower(data, "npu256", input_shape={"x": [2, 1, 8, 8]})
    assert not any(n.op_type == "Conv" for n in lowered.graph)
    result = verify(data, lowered, "npu256", feeds={"x": ref["in_x"]})
    assert result["ok"], result
