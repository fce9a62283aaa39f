"""Integer precision on the NPU.

    calibrate.py   activation ranges of a float ONNX model over a calibration set -> table
    qlower.py      quantised lowering: the calibration and precision tables and a QDQ
                   model's own scales handed to the per-layer plans (npu/chip/plan.py)
    qdq.py         the QDQ export for other runtimes; Paddle QDQ models keep their scales
    accuracy.py    layer-by-layer float vs quantised: cosine, SQNR, max abs diff, --auto-hp,
                   the per-layer SQNR plot

The integer primitives themselves (Quantize, QVMM, Requantize, Dequantize) are in
npu/ops/quant.py with the rest of the operator set.
"""
