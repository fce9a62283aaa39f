"""The @paddle_op registry: version choice, duplicates, third-party entry points, and the
all-at-once report of unsupported ops."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import EXAMPLE
from paddle_npu import ConversionError
from paddle_npu.errors import UnsupportedOpsError
from paddle_npu.exporter import choose_opset
from paddle_npu.frontend import load
from paddle_npu.mappers import get_mapper, paddle_op, supported_ops
from paddle_npu.mappers.registry import MapperError, unregister
from paddle_npu.proto import framework_pb2


def test_newest_version_not_above_opset_wins():
    @paddle_op("test_versions_op")
    class M:
        @classmethod
        def version_9(cls, ctx, op):
            return 9

        @classmethod
        def version_13(cls, ctx, op):
            return 13
    try:
        assert M.versions == (9, 13)
        assert M.handler(8) is None
        assert M.handler(9)(None, None) == 9 and M.handler(12)(None, None) == 9
        assert M.handler(13)(None, None) == 13 and M.handler(21)(None, None) == 13
        assert supported_ops()["test_versions_op"] == [9, 13]
    finally:
        unregister("test_versions_op")


def test_registering_an_op_twice_is_an_error():
    with pytest.raises(MapperError, match="'relu' is already mapped by"):
        @paddle_op("relu")
        class Again:
            @classmethod
            def version_7(cls, ctx, op):
                pass


def test_a_mapper_needs_a_version():
    with pytest.raises(MapperError, match="no version_N"):
        @paddle_op("test_no_version_op")
        class Empty:
            pass


def _renamed_example(tmp_path, renames):
    """The example program with some op types renamed to ones nobody maps."""
    src = os.path.join(EXAMPLE, "legacy")
    desc = framework_pb2.ProgramDesc.FromString(open(os.path.join(src, "model.pdmodel"), "rb").read())
    for op in desc.blocks[0].ops:
        op.type = renames.get(op.type, op.type)
    (tmp_path / "model.pdmodel").write_bytes(desc.SerializeToString())
    (tmp_path / "model.pdiparams").write_bytes(open(os.path.join(src, "model.pdiparams"), "rb").read())
    return load(tmp_path / "model.pdmodel")


def test_every_unsupported_op_is_reported_at_once_with_counts(tmp_path):
    program = _renamed_example(tmp_path, {"relu": "my_relu", "conv2d": "fancy_conv"})
    with pytest.raises(UnsupportedOpsError) as err:
        choose_opset(program)
    msg = str(err.value)
    assert "6 op(s) of 2 type(s) cannot be converted" in msg
    assert "3 x fancy_conv: no mapper registered" in msg and "3 x my_relu: no mapper registered" in msg
    assert err.value.problems == {("fancy_conv", "no mapper registered"): 3,
                                  ("my_relu", "no mapper registered"): 3}


def test_check_reasons_are_reported(tmp_path):
    src = os.path.join(EXAMPLE, "legacy")
    desc = framework_pb2.ProgramDesc.FromString(open(os.path.join(src, "model.pdmodel"), "rb").read())
    for op in desc.blocks[0].ops:
        if op.type == "conv2d":
            for a in op.attrs:
                if a.name == "data_format":
                    a.s = b"NHWC"
    (tmp_path / "model.pdmodel").write_bytes(desc.SerializeToString())
    (tmp_path / "model.pdiparams").write_bytes(open(os.path.join(src, "model.pdiparams"), "rb").read())
    with pytest.raises(UnsupportedOpsError, match=r"3 x conv2d: data_format='NHWC' is not supported"):
        choose_opset(load(tmp_path / "model.pdmodel"))


def test_lowest_covering_opset_and_upgrade_rules():
    program = load(os.path.join(EXAMPLE, "legacy", "model.pdmodel"))
    assert choose_opset(program) == 9                       # BatchNormalization-9
    assert choose_opset(program, 7) == 9                    # auto-upgraded
    assert choose_opset(program, 13) == 13
    with pytest.raises(ConversionError, match="'batch_norm' needs opset >= 9, 7 was asked"):
        choose_opset(program, 7, auto_upgrade_opset=False)
    with pytest.raises(ConversionError, match="outside 7..21"):
        choose_opset(program, 22)


def test_third_party_mapper_via_entry_point(tmp_path):
    """A package declaring the `paddle_npu.mappers` entry point is loaded when its op is met."""
    (tmp_path / "my_mappers.py").write_text(textwrap.dedent("""
        from paddle_npu.mappers import paddle_op

        @paddle_op("my_custom_op")
        class MyCustom:
            @classmethod
            def version_11(cls, ctx, op):
                ctx.set_output(op, "Out", ctx.op.Neg(ctx.input(op, "X")))
    """))
    dist = tmp_path / "my_mappers-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-mappers\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[paddle_npu.mappers]\nmine = my_mappers\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from paddle_npu.mappers.registry import get_mapper, _mappers;"
            "assert 'my_custom_op' not in _mappers;"
            "m = get_mapper('my_custom_op'); assert m is not None and m.versions == (11,);"
            "print('ok')")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_supported_ops_lists_builtin_families():
    ops = supported_ops()
    for op_type in ("conv2d", "batch_norm", "matmul_v2", "relu", "reshape2", "softmax"):
        assert op_type in ops and get_mapper(op_type) is not None
