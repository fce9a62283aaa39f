"""Write tests/data/bad_inputs/: damaged copies of the example program (each one field changed,
as a bit flip does) with the message converting them must give; run once, files committed.

    python tools/make_bad_inputs.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
OUT = os.path.join(ROOT, "tests", "data", "bad_inputs")
PROGRAM = os.path.join(ROOT, "examples", "digits_cnn", "legacy", "model.pdmodel")


def _var(desc, name):
    return next(v for v in desc.blocks[0].vars if v.name == name)


def _tensor(desc, name):
    return _var(desc, name).type.lod_tensor.tensor


# file: (what is changed, the change, what the one-line error must say)
CASES = {
    "shape_unknown.pdmodel": (
        "the flatten's input loses its tensor description (shape unknown)",
        lambda d: _var(d, "pool2d_1.tmp_0").type.ClearField("lod_tensor"),
        "op #17 (flatten_contiguous_range) cannot be converted: TypeError"),
    "bool_input.pdmodel": (
        "the model input's dtype becomes bool",
        lambda d: setattr(_tensor(d, "x"), "data_type", 0),
        "fails ONNX validation"),
    "rank_lost.pdmodel": (
        "the flatten's input loses its dims",
        lambda d: _tensor(d, "pool2d_1.tmp_0").ClearField("dims"),
        "fails ONNX validation"),
}


def main():
    from paddle_npu.proto import framework_pb2

    os.makedirs(OUT, exist_ok=True)
    with open(PROGRAM, "rb") as f:
        original = f.read()
    index = []
    for name, (what, edit, message) in CASES.items():
        desc = framework_pb2.ProgramDesc.FromString(original)
        edit(desc)
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(desc.SerializeToString())
        index.append({"file": name, "kind": "program", "damage": what, "message": message})
    truncated = "truncated.pdmodel"
    with open(os.path.join(OUT, truncated), "wb") as f:
        f.write(original[:len(original) * 2 // 3])
    index.append({"file": truncated, "kind": "program", "damage": "cut at two thirds",
                  "message": "truncated.pdmodel, byte "})
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(f"wrote {len(index)} cases to {OUT}")


if __name__ == "__main__":
    main()
