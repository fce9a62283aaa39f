"""Open dimensions the program makes equal share one ONNX symbol (shapes.input_dim_symbols):
the batch axis of every input, and the open axes of inputs that meet in an element-wise op
(a BERT's input_ids and token_type_ids, [batch, seq] both, added after their embeddings);
an open axis nothing ties keeps its own symbol. Checked on a layer Paddle exports in both
formats, run by onnxruntime against Paddle's outputs."""

import numpy as np
import onnx
import pytest

from paddle_npu.api import export
from paddle_npu.compare import agreement, run_onnx

ORACLE = r'''
import os, sys
fmt, out = sys.argv[1], sys.argv[2]
if fmt == "legacy":
    os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np
import paddle
from paddle import nn
from paddle.static import InputSpec

class Tokens(nn.Layer):
    def __init__(self):
        super().__init__()
        self.words, self.types = nn.Embedding(50, 8), nn.Embedding(2, 8)
        self.norm = nn.LayerNorm(8)
    def forward(self, input_ids, token_type_ids, extra):
        h = self.norm(self.words(input_ids) + self.types(token_type_ids))
        return nn.functional.relu(h), extra * 2.0

paddle.seed(3)
layer = Tokens()
layer.eval()
rng = np.random.default_rng(3)
feeds = {"input_ids": rng.integers(0, 50, (2, 5)), "token_type_ids": rng.integers(0, 2, (2, 5)),
         "extra": rng.standard_normal((2, 7)).astype("float32")}
outs = layer(*[paddle.to_tensor(v) for v in feeds.values()])
specs = [InputSpec([-1, -1], "int64", "input_ids"), InputSpec([-1, -1], "int64", "token_type_ids"),
         InputSpec([-1, -1], "float32", "extra")]
paddle.jit.save(paddle.jit.to_static(layer, input_spec=specs, full_graph=True),
                os.path.join(out, "model"))
np.savez(os.path.join(out, "reference.npz"), **{f"in_{k}": v for k, v in feeds.items()},
         **{f"out_{i}": o.numpy() for i, o in enumerate(outs)})
'''
MODEL_FILE = {"legacy": "model.pdmodel", "pir": "model.json"}


@pytest.fixture(scope="module")
def exports(paddle_exports):
    return paddle_exports("shared_dims", ORACLE)


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("fmt", MODEL_FILE)
def test_inputs_the_program_combines_share_symbols(exports, fmt):
    data = export(str(exports / fmt / MODEL_FILE[fmt]))
    graph = onnx.load_from_string(data).graph
    weights = {t.name for t in graph.initializer}
    dims = {v.name: _dims(v) for v in graph.input if v.name not in weights}
    assert dims == {"input_ids": ["input_ids_dim0", "input_ids_dim1"],
                    "token_type_ids": ["input_ids_dim0", "input_ids_dim1"],
                    "extra": ["input_ids_dim0", "extra_dim1"]}
    assert [_dims(v) for v in graph.output] == [["input_ids_dim0", "input_ids_dim1", 8],
                                                ["input_ids_dim0", "extra_dim1"]]
    ref = np.load(exports / fmt / "reference.npz")
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    _, outs = run_onnx(data, feeds)
    for i, got in enumerate(outs):
        assert agreement(got, ref[f"out_{i}"])["rel_diff"] <= 1e-5
