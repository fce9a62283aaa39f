"""Integer precision on the NPU.

    calibrate.py   activation ranges of a float ONNX model over a calibration set -> table
    qlower.py      a lowered model -> integer primitives (int8, int16 for `_hp` layers),
                   the QDQ export for other runtimes, Paddle QDQ models keep their scales
    accuracy.py    layer-by-layer float vs quantised: cosine, SQNR, max abs diff, --auto-hp,
                   the per-layer SQNR plot

The integer primitives themselves (Quantize, QVMM, Requantize, Dequantize) are in
npu/ops/quant.py with the rest of the operator set.
"""
