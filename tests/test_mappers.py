"""Every mapper against Paddle: tiny op cases (tests/opcases_*.py) exported by Paddle in both
formats, converted at several opsets, run in onnxruntime and compared with Paddle's eager
outputs on the same input."""
import glob
import os

import numpy as np
import pytest

from opcase_harness import CASES, MODEL_FILE, ensure_exports, load_modules
from paddle_npu import load
from paddle_npu.api import export
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.mappers import supported_ops

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(HERE, "opcases_*.py")))
if os.environ.get("OPCASE_MODULES"):   # while working on one family: OPCASE_MODULES=opcases_nn
    MODULES = os.environ["OPCASE_MODULES"].split(",")
load_modules(MODULES)

# Registered op types exercised by the real released models in tests/data instead (Paddle 3
# no longer emits them), with the test that covers them.
COVERED_ELSEWHERE = {     # mappers whose numerical tests against Paddle live in other files
    "mul": "test_real_models.py (luotao1_example_mlp)",
    "matmul": "test_real_models.py (ch_ppocr_mobile_v2.0_cls)",
    # legacy-static-only ops: a Paddle-quantised model and a hand-built program
    "fake_quantize_range_abs_max": "test_npu_quant.py (PTQ model, every half step)",
    "fake_quantize_moving_average_abs_max": "test_npu_quant.py (every half step)",
    "fake_quantize_abs_max": "test_npu_quant.py (every half step)",
    "fake_dequantize_max_abs": "test_npu_quant.py (every half step)",
    "fake_channel_wise_dequantize_max_abs": "test_npu_quant.py (PTQ model, older format)",
    # ops Paddle 3 no longer registers: hand-built programs against Paddle's kernel formula
    "data_norm": "test_mappers.py (test_data_norm_against_paddles_formula)",
    "fill_zeros_like": "test_mappers.py (test_fill_zeros_like_gives_zeros_of_its_input)",
}

PARAMS = [(name, fmt, opset) for name, c in CASES.items() for fmt in c.formats
          for opset in c.opsets]


@pytest.fixture(scope="session")
def case_exports(zoo_dir):
    return ensure_exports(zoo_dir, MODULES)


def _case_dir(case_exports, name, fmt):
    d = os.path.join(case_exports[fmt], name)
    err = os.path.join(d, "error.txt")
    if os.path.exists(err):
        pytest.fail(f"Paddle could not export {name} as {fmt}:\n" + open(err).read()[-3000:])
    return d


@pytest.mark.parametrize("name, fmt, opset", PARAMS,
                         ids=[f"{n}-{f}-opset{o}" for n, f, o in PARAMS])
def test_op_case(case_exports, name, fmt, opset):
    c = CASES[name]
    d = _case_dir(case_exports, name, fmt)
    model_file = os.path.join(d, MODEL_FILE[fmt])
    program = load(model_file)
    present = {op.type for op in program.all_ops()}
    missing = [t for t in c.ops if t not in present]
    assert not missing, f"case does not exercise {missing} in {fmt}; its ops: {sorted(present)}"
    onnx_bytes = export(model_file, opset_version=opset)
    ref = np.load(os.path.join(d, "reference.npz"))
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    _, outs = run_onnx(onnx_bytes, feeds)
    n_ref = len([k for k in ref.files if k.startswith("out_")])
    assert len(outs) == n_ref
    for i, got in enumerate(outs):
        want = ref[f"out_{i}"]
        assert got.shape == want.shape, f"output {i}: shape {got.shape} vs Paddle {want.shape}"
        if c.compare != "values":
            assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} vs Paddle {want.dtype}"
            if c.compare == "distribution":
                _assert_same_distribution(got, want)
            continue
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want)
            continue
        # a float64 result narrowed to float32 on the way would hide in the comparison below
        if want.dtype == np.float64:
            assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} vs Paddle float64"
        # NaN where Paddle gives NaN (and nowhere else); the rest compared as usual
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan, f"output {i}: NaN positions")
        got, want = got[~nan], want[~nan]
        a = agreement(got, want)
        assert a["rel_diff"] <= c.tolerance, f"output {i}: {a}"


def _assert_same_distribution(got, want):
    """Two samples of one distribution (thousands of elements): within their range, means
    within 0.1 standard deviations (7 standard errors at 4096 elements), spreads within 10%."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    lo, hi, spread = want.min(), want.max(), want.std()
    margin = 0.2 * (hi - lo)
    assert lo - margin <= got.min() and got.max() <= hi + margin, (got.min(), got.max(), lo, hi)
    assert abs(got.mean() - want.mean()) <= 0.1 * spread, (got.mean(), want.mean(), spread)
    assert abs(got.std() / spread - 1) <= 0.1, (got.std(), spread)


def _one_op_program(path, op_type, inputs, outputs, attrs):
    """A legacy program holding one op, written with our schema, for ops Paddle 3 no longer
    registers (nothing can export or run them). inputs / outputs: {slot: (name, dims)},
    all float32 and fed as model inputs; attrs: {name: bool | float}."""
    from paddle_npu.proto import framework_pb2 as pb

    desc = pb.ProgramDesc()
    block = desc.blocks.add(idx=0, parent_idx=-1)
    for name, kind in (("feed", pb.VarType.FEED_MINIBATCH), ("fetch", pb.VarType.FETCH_LIST)):
        block.vars.add(name=name, persistable=True).type.type = kind
    for name, dims in list(inputs.values()) + list(outputs.values()):
        var = block.vars.add(name=name, persistable=False)
        var.type.type = pb.VarType.LOD_TENSOR
        var.type.lod_tensor.tensor.data_type = pb.VarType.FP32
        var.type.lod_tensor.tensor.dims.extend(dims)

    def add_op(type_, ins, outs, op_attrs=()):
        op = block.ops.add(type=type_)
        for slot, args in ins.items():
            op.inputs.add(parameter=slot, arguments=args)
        for slot, args in outs.items():
            op.outputs.add(parameter=slot, arguments=args)
        for attr in op_attrs:
            op.attrs.append(attr)
        return op
    for col, (name, _) in enumerate(inputs.values()):
        add_op("feed", {"X": ["feed"]}, {"Out": [name]}, [pb.OpDesc.Attr(name="col", type=0, i=col)])
    add_op(op_type, {slot: [n] for slot, (n, _) in inputs.items()},
           {slot: [n] for slot, (n, _) in outputs.items()},
           [pb.OpDesc.Attr(name=k, type=6, b=v) if isinstance(v, bool) else
            pb.OpDesc.Attr(name=k, type=1, f=v) for k, v in attrs.items()])
    for col, (name, _) in enumerate(outputs.values()):
        add_op("fetch", {"X": [name]}, {"Out": ["fetch"]}, [pb.OpDesc.Attr(name="col", type=0, i=col)])
    with open(path, "wb") as f:
        f.write(desc.SerializeToString())
    return path


@pytest.mark.parametrize("opset", [7, 13])
@pytest.mark.parametrize("shift", [False, True])
def test_data_norm_against_paddles_formula(tmp_path, opset, shift):
    """Paddle's data_norm kernel: means = BatchSum / BatchSize, scales = sqrt(BatchSize /
    BatchSquareSum), Y = (X - means) * scales (* scale_w + bias with enable_scale_and_shift)."""
    c = 5
    ins = {"X": ("x", [-1, c]), "BatchSize": ("size", [c]), "BatchSum": ("total", [c]),
           "BatchSquareSum": ("square", [c])}
    if shift:
        ins.update(scale_w=("w", [c]), bias=("b", [c]))
    outs = {"Y": ("y", [-1, c]), "Means": ("means", [c]), "Scales": ("scales", [c])}
    model = _one_op_program(str(tmp_path / "model.pdmodel"), "data_norm", ins, outs,
                            {"epsilon": 1e-4, "enable_scale_and_shift": shift})
    rng = np.random.RandomState(0)
    feeds = {"x": rng.uniform(-3, 3, (4, c)), "size": rng.uniform(1e3, 1e4, c),
             "total": rng.uniform(-1e3, 1e3, c), "square": rng.uniform(1e3, 1e4, c),
             "w": rng.uniform(0.5, 2, c), "b": rng.uniform(-1, 1, c)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items() if k in {n for n, _ in ins.values()}}
    _, (y, means, scales) = run_onnx(export(model, opset_version=opset), feeds)
    want_means = feeds["total"] / feeds["size"]
    want_scales = np.sqrt(feeds["size"] / feeds["square"])
    want = (feeds["x"] - want_means) * want_scales
    if shift:
        want = want * feeds["w"] + feeds["b"]
    np.testing.assert_allclose(means, want_means, rtol=1e-6)
    np.testing.assert_allclose(scales, want_scales, rtol=1e-6)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_fill_zeros_like_gives_zeros_of_its_input(tmp_path):
    model = _one_op_program(str(tmp_path / "model.pdmodel"), "fill_zeros_like",
                            {"X": ("x", [-1, 3])}, {"Out": ("out", [-1, 3])}, {})
    x = np.random.RandomState(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    _, (out,) = run_onnx(export(model, opset_version=11), {"x": x})
    assert out.dtype == np.float32 and out.shape == (4, 3) and not out.any()


@pytest.mark.skipif("qdq_weight_per_channel" not in CASES, reason="case module not loaded")
def test_quantized_weights_stay_int8_behind_dequantize_linear(case_exports):
    import onnx
    from onnx import numpy_helper

    model_file = os.path.join(_case_dir(case_exports, "qdq_weight_per_channel", "pir"), "model.json")
    proto = onnx.load_from_string(export(model_file, opset_version=13))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    dq = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and inits[dq[0].input[0]].dtype == np.int8
    assert [n.op_type for n in proto.graph.node].count("QuantizeLinear") == 0


@pytest.mark.skipif("weight_float16" not in CASES, reason="case module not loaded")
@pytest.mark.parametrize("name, dtype", [("weight_float16", np.float16),
                                         ("weight_bfloat16", None)])
def test_half_precision_weights_stay_in_their_dtype(case_exports, name, dtype):
    import onnx
    from onnx import TensorProto

    for fmt in ("legacy", "pir"):
        d = _case_dir(case_exports, name, fmt)
        proto = onnx.load_from_string(export(os.path.join(d, MODEL_FILE[fmt]), opset_version=13))
        (weight,) = [i for i in proto.graph.initializer if len(i.dims) == 2]
        want = TensorProto.FLOAT16 if dtype is np.float16 else TensorProto.BFLOAT16
        assert weight.data_type == want, (fmt, weight.data_type)


@pytest.mark.skipif(bool(os.environ.get("OPCASE_MODULES")), reason="only some case modules loaded")
def test_every_registered_mapper_has_a_case():
    exercised = {t for c in CASES.values() for t in c.ops} | set(COVERED_ELSEWHERE)
    untested = sorted(set(supported_ops()) - exercised)
    assert not untested, f"mappers without an op case: {untested}"
