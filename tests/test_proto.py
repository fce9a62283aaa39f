"""The committed framework_pb2 module is what proto/framework.proto compiles to, and the
schema agrees with the one Paddle itself uses, field by field."""
import os
import subprocess
import sys

from conftest import ROOT


def test_generated_module_matches_proto():
    res = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_proto.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# Paddle 3 renamed a few messages; the wire format (field numbers and types) is unchanged.
_RENAMED = {"DenseTensorDesc": "LoDTensorDesc", "DenseTensorArrayDesc": "LoDTensorArrayDesc"}


def _fields(desc, prefix=""):
    """{'Msg.Nested#field number': wire type, 'Msg.Enum=value number': 1} of one message."""
    name = prefix + _RENAMED.get(desc.name, desc.name)
    out = {f"{name}#{f.number}": f.type for f in desc.fields}
    for e in desc.enum_types:
        out.update({f"{name}.{e.name}={v.number}": 1 for v in e.values})
    for n in desc.nested_types:
        out.update(_fields(n, name + "."))
    return out


def _schema(module):
    out = {}
    for m in module.DESCRIPTOR.message_types_by_name.values():
        out.update(_fields(m))
    for e in module.DESCRIPTOR.enum_types_by_name.values():
        out.update({f"{e.name}={v.number}": 1 for v in e.values})
    return out


def test_schema_agrees_with_paddles_own():
    code = ("import json,sys; from paddle.base.proto import framework_pb2 as P;"
            "from test_proto import _schema; json.dump(_schema(P), sys.stdout)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(__file__))
    assert res.returncode == 0, res.stderr[-2000:]
    import json
    from paddle_npu.proto import framework_pb2 as ours
    theirs = json.loads(res.stdout)
    mine = _schema(ours)
    # Every field and enum value we declare is in Paddle's schema with the same number and
    # wire type (we declare some string fields as bytes: type 12 vs 9, same wire type).
    wire = lambda t: 12 if t in (9, 12) else t  # noqa: E731
    for key, val in mine.items():
        assert key in theirs, f"{key} is not in Paddle's framework.proto"
        assert wire(val) == wire(theirs[key]), key
    # And we leave out nothing a model file can hold.
    model_messages = ("ProgramDesc", "BlockDesc", "VarDesc", "VarType", "OpDesc", "OpVersion",
                      "OpVersionMap", "Version", "Scalar", "Complex", "AttrType")
    missing = [k for k in theirs if k.split("#")[0].split("=")[0].split(".")[0] in model_messages
               and k not in mine]
    assert not missing, missing
