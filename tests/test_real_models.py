"""Released Paddle models (tests/data/real_models) converted and run against the outputs
Paddle recorded for them."""
import os

import numpy as np
import pytest

from conftest import EXAMPLE, REAL_MODELS
from paddle_npu.api import export
from paddle_npu.compare import agreement, load_reference, run_onnx


@pytest.mark.parametrize("form", ["released", "translated"])
@pytest.mark.parametrize("model, opset", [
    ("ch_ppocr_mobile_v2.0_cls", None), ("ch_ppocr_mobile_v2.0_cls", 13),
    ("luotao1_example_mlp", None), ("luotao1_example_mlp", 13),
])
def test_released_model_matches_paddle(model, opset, form):
    """As released (legacy), and in the PIR form paddle.pir.translate_to_pir gives it
    (`translated/`, made by `tools/zoo.py translate`: inputs through pd_op.feed)."""
    d = os.path.join(REAL_MODELS, model)
    onnx_bytes = export(d if form == "released" else os.path.join(d, form), opset_version=opset)
    import onnx
    proto = onnx.load_from_string(onnx_bytes)
    inits = {i.name for i in proto.graph.initializer}   # IR 3 lists them as inputs too
    inputs = [i.name for i in proto.graph.input if i.name not in inits]
    outputs = [o.name for o in proto.graph.output]
    feeds, expected = load_reference(os.path.join(d, "reference_io.npz"), inputs, outputs)
    _, got = run_onnx(onnx_bytes, feeds)
    for g, e in zip(got, expected):
        a = agreement(g, e)
        assert a["rel_diff"] <= 1e-4 and a["cosine"] > 0.99999, a


@pytest.mark.parametrize("fmt, model_file", [("legacy", "model.pdmodel"), ("pir", "model.json")])
def test_example_model_accuracy_kept(fmt, model_file):
    onnx_bytes = export(os.path.join(EXAMPLE, fmt, model_file))
    ref = np.load(os.path.join(EXAMPLE, "reference_io.npz"))
    _, (out,) = run_onnx(onnx_bytes, {"x": ref["in_x"]})
    assert agreement(out, ref["out_0"])["rel_diff"] <= 1e-5
    assert (out.argmax(1) == ref["labels"]).mean() == (ref["out_0"].argmax(1) == ref["labels"]).mean()
