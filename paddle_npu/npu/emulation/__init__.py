"""How onnxruntime runs a lowered model: the emulator, apart from the NPU program.

The lowered model is what the chip runs; the NumPy reference (reference.py) is its bit-true
simulator. onnxruntime runs the same program through one model-local ONNX function per
primitive (per specialisation: an overload), attached after lowering. Everything that exists
for onnxruntime lives here: the function bodies, their variants, the sessions. An emulation
never changes the program (nodes, attributes, weights, order, annotations); it only chooses
the bodies its nodes call:

    exact    the primitives that sum (VMM, AddInTile, Col2Im, RuntimeVMM, Reduce, LayerNorm,
             Pool's global average, AxisResample's weighted resizes) accumulate in float64
             and round once, as the reference does: the emulator computes what the simulator
             computes. The default: an accuracy run on it is the chip's accuracy.
    float32  the same primitives sum in float32, as onnxruntime's own Conv / MatMul do:
             faster, and as far from exact sums as the model's own float32 run is on most
             models; `verify` reports how far it is on each.

Integer primitives compute in integers under either (bit for bit the reference's).
Each primitive's bodies are in the module named as its ops/ module (emulation/vmm.py for
ops/vmm.py), registered by `body.emulates`. This module holds only the settings (the
command line reads them); `functions.emulate` attaches the bodies.
"""
from ...errors import ConversionError

EMULATIONS = ("exact", "float32")
DEFAULT = "exact"
KEY = "paddle_npu.emulation"        # the model's metadata naming the emulation attached
# The opset the function bodies are written against, the least a lowered model imports:
# CastLike; Unsqueeze axes and Pad pads as inputs; Constant value_ints
MIN_BODY_OPSET = 15


def check_emulation(emulation):
    if emulation not in EMULATIONS:
        raise ConversionError(f"unknown emulation {emulation!r} (known: "
                              f"{', '.join(EMULATIONS)})")
