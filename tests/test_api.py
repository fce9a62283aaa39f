"""The paddle2onnx-compatible API and CLI: signature, outputs, options, failure modes."""
import inspect
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from conftest import EXAMPLE, REAL_MODELS
import paddle_npu
from paddle_npu import ConversionError, PaddleFormatError, export
from paddle_npu.compare import agreement, run_onnx
from paddle_npu.onnx_io import StreamedModel

LEGACY = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
LEGACY_PARAMS = os.path.join(EXAMPLE, "legacy", "model.pdiparams")
REF = np.load(os.path.join(EXAMPLE, "reference_io.npz"))

# paddle2onnx 2.1's export(), parameter for parameter (names, order, defaults).
P2O_SIGNATURE = [
    ("model_filename", inspect.Parameter.empty), ("params_filename", None), ("save_file", None),
    ("opset_version", 7), ("auto_upgrade_opset", True), ("dist_prim_all", False),
    ("verbose", False), ("enable_onnx_checker", True), ("enable_experimental_op", True),
    ("enable_optimize", True), ("custom_op_info", None), ("deploy_backend", "onnxruntime"),
    ("calibration_file", ""), ("external_file", ""), ("export_fp16_model", False),
    ("optimize_tool", "polygraphy")]


def test_export_signature_is_paddle2onnx_s():
    """paddle2onnx's parameters, then only keyword-only ones of ours (input_shape,
    keep_io_types), so every paddle2onnx call means the same here."""
    every = list(inspect.signature(export).parameters.values())
    params = [p for p in every if p.kind is not p.KEYWORD_ONLY]
    ours = [(p.name, p.default) for p in every if p.kind is p.KEYWORD_ONLY]
    assert ours == [("input_shape", None), ("keep_io_types", True)]
    assert [p.name for p in params] == [n for n, _ in P2O_SIGNATURE]
    for p, (_, default) in zip(params[2:], P2O_SIGNATURE[2:]):
        assert p.default == default, p.name


def _check(onnx_bytes):
    _, (out,) = run_onnx(onnx_bytes, {"x": REF["in_x"]})
    assert agreement(out, REF["out_0"])["rel_diff"] < 1e-5


def test_positional_call_returns_bytes_and_writes_file(tmp_path):
    data = export(LEGACY, LEGACY_PARAMS)
    _check(data)
    target = tmp_path / "sub" / "m.onnx"
    again = export(LEGACY, LEGACY_PARAMS, str(target), 11)
    assert target.read_bytes() == again
    assert onnx.load(str(target)).opset_import[0].version == 11
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["m.onnx"]


def test_params_filename_empty_means_the_one_next_to_the_model():
    _check(export(LEGACY, ""))


def test_options_with_no_meaning_here_are_refused_not_ignored():
    with pytest.raises(ConversionError, match="calibration_file='c.cache' is not supported"):
        export(LEGACY, "", calibration_file="c.cache")
    _check(export(LEGACY, "", deploy_backend="onnxruntime", optimize_tool="onnxoptimizer"))


def test_failed_conversion_leaves_no_file(tmp_path):
    target = tmp_path / "out.onnx"
    with pytest.raises(ConversionError):
        export(LEGACY, "", str(target), opset_version=7, auto_upgrade_opset=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_model_file_is_a_format_error(tmp_path):
    bad = tmp_path / "model.pdmodel"
    bad.write_bytes(b"\x0a\xff\xff\xff")
    with pytest.raises(PaddleFormatError, match="model.pdmodel"):
        export(str(bad), "")


def test_big_models_go_to_external_data(tmp_path, monkeypatch):
    """Above the protobuf limit the weights go to <file>.data (threshold lowered to test it)."""
    monkeypatch.setattr(paddle_npu.api, "EXTERNAL_DATA_THRESHOLD", 1000)
    target = tmp_path / "big.onnx"
    assert export(LEGACY, "", str(target)) is None
    assert (tmp_path / "big.onnx.data").stat().st_size > 20000
    assert target.stat().st_size < 20000
    _check(str(target))
    with pytest.raises(ConversionError, match="give save_file"):
        export(LEGACY, "")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "paddle_npu", *map(str, args)],
                          capture_output=True, text=True)


def test_cli_paddle2onnx_flags(tmp_path):
    d = os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls")
    res = cli("convert", "--model_dir", d, "--model_filename", "inference.pdmodel",
              "--params_filename", "inference.pdiparams", "--save_file", tmp_path / "m.onnx",
              "--opset_version", "11", "--enable_auto_update_opset", "True",
              "--enable_onnx_checker", "True", "--reference", os.path.join(d, "reference_io.npz"))
    assert res.returncode == 0, res.stderr
    assert "agrees with" in res.stdout
    assert onnx.load(str(tmp_path / "m.onnx")).opset_import[0].version == 11


def test_cli_plain_form_and_reference_mismatch_exit_code(tmp_path):
    res = cli("convert", LEGACY, "-o", tmp_path / "a.onnx",
              "--reference", os.path.join(EXAMPLE, "reference_io.npz"))
    assert res.returncode == 0 and "agrees with" in res.stdout, res.stderr
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, in_x=REF["in_x"], out_0=REF["out_0"] + 1.0)
    res = cli("convert", LEGACY, "-o", tmp_path / "b.onnx", "--reference", wrong)
    assert res.returncode == 1 and "DISAGREES" in res.stdout


def test_cli_refusal_is_exit_2_without_traceback(tmp_path):
    res = cli("convert", LEGACY, "-o", tmp_path / "c.onnx", "--opset", "7",
              "--enable_auto_update_opset", "False")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "needs opset >= 9" in res.stderr
    assert not (tmp_path / "c.onnx").exists()


def test_a_mapper_emitting_an_invalid_graph_is_caught_by_the_checks():
    """Strict shape inference (run on the model with its weights' bytes dropped) still sees
    type errors: a float + int64 Add from a broken mapper is refused, nothing is returned."""
    from paddle_npu.mappers.registry import _mappers, get_mapper, paddle_op, unregister

    original = get_mapper("relu")
    unregister("relu")
    try:
        @paddle_op("relu")
        class BrokenRelu:
            @classmethod
            def version_7(cls, ctx, op):
                bad = ctx.const(np.ones(1, np.int64))
                ctx.set_output(op, "Out", ctx.op.Add(ctx.input(op, "X"), bad))

        with pytest.raises(ConversionError, match="fails ONNX validation"):
            export(LEGACY, "")
    finally:
        unregister("relu")
        _mappers["relu"] = original


def test_sympy_waits_for_first_use():
    """onnx-ir imports sympy (0.25 s); paddle_npu defers it: converting never loads it, and
    symbolic-dimension arithmetic, the first real use, still works."""
    code = (
        "import sys, paddle_npu, onnx_ir as ir\n"
        "paddle_npu.export(sys.argv[1], sys.argv[2])\n"
        "assert 'Expr' not in vars(sys.modules['sympy']), 'sympy was loaded'\n"
        "assert str(ir.SymbolicDim('N') + 1) == 'N + 1'\n")
    legacy = os.path.join(EXAMPLE, "legacy")
    r = subprocess.run([sys.executable, "-c", code, os.path.join(legacy, "model.pdmodel"),
                        os.path.join(legacy, "model.pdiparams")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_an_output_dim_the_program_ties_to_an_input_shares_its_symbol():
    """The batch dim of the output is the input's (x_dim0), not a symbol of its own; a dim
    shape inference cannot tie to an input still gets a name."""
    for model in (LEGACY, os.path.join(EXAMPLE, "pir", "model.json")):
        graph = onnx.load_from_string(export(model)).graph
        (x,), (y,) = graph.input, graph.output
        assert x.type.tensor_type.shape.dim[0].dim_param == "x_dim0"
        assert y.type.tensor_type.shape.dim[0].dim_param == "x_dim0"
    ocr = onnx.load_from_string(export(os.path.join(REAL_MODELS, "ch_ppocr_mobile_v2.0_cls")))
    assert all(d.dim_value or d.dim_param for o in ocr.graph.output
               for d in o.type.tensor_type.shape.dim)


def test_streamed_model_writes_what_serialize_model_writes(tmp_path):
    """Weights written from their tensors make the same model as ir's serializer, in the
    same initializer order; a tensor whose bytes do not fit its shape is refused."""
    import onnx_ir as ir
    from paddle_npu.onnx_io import StreamedModel

    rng = np.random.default_rng(0)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 300]))
    values = {}
    for name, array in [("big", rng.standard_normal((300, 300)).astype(np.float32)),
                        ("small", np.float32([1.5])),
                        ("big16", rng.standard_normal((300,)).astype(np.float16))]:
        values[name] = ir.Value(name=name, type=ir.TensorType(ir.tensor(array).dtype),
                                shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
    mm = ir.node("MatMul", [x, values["big"]])
    add = ir.node("Add", [mm.outputs[0], values["small"]])
    cast = ir.node("Cast", [values["big16"]], attributes={"to": ir.DataType.FLOAT})
    out = ir.node("Add", [add.outputs[0], cast.outputs[0]])
    out.outputs[0].name, out.outputs[0].type = "y", ir.TensorType(ir.DataType.FLOAT)
    out.outputs[0].shape = ir.Shape([2, 300])
    graph = ir.Graph([x], out.outputs, nodes=[mm, add, cast, out],
                     initializers=list(values.values()), opset_imports={"": 17}, name="g")
    model = ir.Model(graph, ir_version=10)

    streamed = StreamedModel(model)
    path = tmp_path / "m.onnx"
    streamed.write(path)
    expected = ir.serde.serialize_model(model)
    assert onnx.load(path) == expected
    assert onnx.load_from_string(streamed.to_bytes()) == expected
    assert model.graph.initializers["big"].const_value.numpy().shape == (300, 300)  # unchanged
    onnx.checker.check_model(streamed.checkable(), full_check=True)
    model.graph.inputs.append(values["big"])      # as IR < 4 lists initializers
    inputs = [i.name for i in StreamedModel(model).checkable().graph.input]
    assert sorted(inputs) == ["big", "x"]
    model.graph.inputs.pop()

    class Short(ir.Tensor):
        def tobytes(self):
            return super().tobytes()[:-4]
    values["big"].const_value = Short(values["big"].const_value.numpy(), name="big")
    with pytest.raises(ConversionError, match=r"'big': 359996 bytes .* \(360000 expected\)"):
        StreamedModel(model).write(tmp_path / "short.onnx")


def test_load_model_reads_big_weights_into_arrays(tmp_path):
    """A model file (or its bytes, or one with external data) loads to the same ir.Model as
    from its parsed ModelProto; a file's big weights are arrays of their own (writable, so
    BatchNorm folds into them in place), small ones stay in the proto."""
    import onnx_ir as ir
    from onnx import helper, numpy_helper
    from paddle_npu.onnx_io import load_header, load_model

    rng = np.random.default_rng(0)
    inits = {"big": rng.standard_normal((300, 300)).astype(np.float32),
             "few": rng.standard_normal(300).astype(np.float32),    # 1200 bytes, 300 elements
             "half": rng.standard_normal(2000).astype(np.float16),
             "shape": np.int64([2, 300])}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "big"], ["mm"]),
         helper.make_node("Add", ["mm", "few"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 300])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 300])],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    external = tmp_path / "e.onnx"
    onnx.save(proto, external, save_as_external_data=True, location="e.data",
              size_threshold=0)
    for source, file in ((path, path), (str(path), path), (path.read_bytes(), path),
                         (external, external)):
        m = load_model(source)
        got, want = (ir.serde.serialize_model(x) for x in (m, load_model(onnx.load(file))))
        for p in (got, want):           # (a tensor set aside no longer says where it was)
            for t in p.graph.initializer:
                t.ClearField("data_location")
        assert got == want, type(source)
        for name, array in inits.items():
            np.testing.assert_array_equal(m.graph.initializers[name].const_value.numpy(), array)
    header = load_header(path)              # the structure, none of the big weights' bytes
    assert [n.op_type for n in header.graph.node] == ["MatMul", "Add", "Reshape"]
    assert [(t.name, list(t.dims)) for t in header.graph.initializer] == \
        [(n, list(a.shape)) for n, a in inits.items()]
    assert header.ByteSize() < inits["big"].nbytes // 100
    big = load_model(path).graph.initializers["big"].const_value
    assert isinstance(big, ir.Tensor) and big.numpy().flags.writeable
    assert not isinstance(load_model(path).graph.initializers["few"].const_value, ir.Tensor)


def test_streamed_model_writes_views_in_row_major_order(tmp_path):
    """A weight that is a strided view (a tile of a transposed kernel matrix) is written in
    row-major order, as ir's serializer writes it."""
    import onnx_ir as ir
    from paddle_npu.onnx_io import StreamedModel

    base = np.arange(600 * 400, dtype=np.float32).reshape(600, 400)
    values = [ir.Value(name=n, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(a.shape),
                       const_value=ir.Tensor(a, name=n))
              for n, a in (("tile", base.T[100:300, 50:350]), ("rows", base[10:20]))]
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 200]))
    mm = ir.node("MatMul", [x, values[0]])
    mm.outputs[0].name, mm.outputs[0].type = "y", ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], mm.outputs, nodes=[mm], initializers=values,
                     opset_imports={"": 17}, name="g")
    model = ir.Model(graph, ir_version=10)
    assert not values[0].const_value.numpy().flags.c_contiguous
    path = tmp_path / "m.onnx"
    StreamedModel(model).write(path)
    assert onnx.load(path) == ir.serde.serialize_model(model)
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(onnx.load(path).graph.initializer[0]),
                                  base.T[100:300, 50:350])


def test_onnxruntime_runs_an_ir_model_with_its_weights_where_they_are():
    """run_onnx on an ir.Model gives onnxruntime the big weights as the arrays they are (no
    serialized copy) and serializes the rest: a float32 weight and a float16 one given, a
    strided view given as a contiguous copy (made once for the sessions that share
    `copies`), a small tensor written into the bytes; the outputs are those of the
    serialized model, bit for bit."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 32)).astype(np.float32)
    half = rng.standard_normal((32, 32)).astype(np.float16)
    strided = rng.standard_normal((32, 64)).astype(np.float32)[:, ::2]
    nodes = [onnx.helper.make_node("MatMul", ["x", "big"], ["a"]),
             onnx.helper.make_node("Cast", ["half"], ["h32"], to=onnx.TensorProto.FLOAT),
             onnx.helper.make_node("MatMul", ["a", "h32"], ["b"]),
             onnx.helper.make_node("MatMul", ["b", "strided"], ["c"]),
             onnx.helper.make_node("Add", ["c", "small"], ["y"])]
    graph = onnx.helper.make_graph(
        nodes, "weights",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 32])],
        [onnx.numpy_helper.from_array(np.zeros((32, 32), np.float32), "strided"),
         onnx.numpy_helper.from_array(np.arange(32, dtype=np.float32), "small")])
    model = ir.serde.deserialize_model(onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    inits = model.graph.initializers
    for name, array in (("big", big), ("half", half)):
        value = ir.Value(name=name, shape=ir.Shape(array.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         const_value=ir.tensor(array, name=name))
        model.graph.register_initializer(value)
    inits["strided"].const_value = ir.Tensor(strided, name="strided")

    copies = {}
    data, given = StreamedModel(model).for_onnxruntime(copies)
    assert sorted(given) == ["big", "half", "strided"] and list(copies) == ["strided"]
    assert given["big"] is big and given["half"] is half and given["strided"] is copies[
        "strided"] and given["strided"].flags.c_contiguous
    np.testing.assert_array_equal(given["strided"], strided)
    assert StreamedModel(model).for_onnxruntime(copies)[1]["strided"] is copies["strided"]
    feeds = {"x": rng.standard_normal((2, 64)).astype(np.float32)}
    want = run_onnx(ir.serde.serialize_model(model).SerializeToString(), feeds)[1][0]
    got = run_onnx(model, feeds)[1][0]
    assert np.array_equal(got, want)
    assert np.array_equal(run_onnx(model, feeds, copies=copies)[1][0], want)
    assert np.allclose(got, ((feeds["x"] @ big) @ half.astype(np.float32)) @ strided +
                       np.arange(32), rtol=1e-5, atol=1e-4)
