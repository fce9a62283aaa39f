#!/usr/bin/env bash
# The Quickstart's main job on the example model shipped in examples/digits_cnn (a small CNN
# trained on scikit-learn's digits by tools/train_example.py): set up .venv (runtime
# dependencies only, no Paddle, at the versions of requirements/test.lock), then Paddle -> ONNX -> NPU:
#   1. convert both Paddle formats to ONNX, each checked against the outputs Paddle recorded;
#   2. lower to the NPU's primitives on the default 256x256-array target, with the cost report
#      (out/quickstart/npu_report.json), and verify the lowered model against the ONNX one in
#      onnxruntime and in the NumPy NPU reference;
#   3. the same with image preprocessing fused in (--fuse-preprocess): raw uint8 images in;
#   4. an integer plan: calibrated, lowered at int8, verified, and its per-layer report with
#      top-1 accuracy against the float model.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -c requirements/test.lock pip
.venv/bin/python -m pip install -q -c requirements/test.lock -e . 2>&1 | grep -v -e '^ *!!' -e 'WheelFile' || true
OUT=${OUT:-out/quickstart}
REF=examples/digits_cnn/reference_io.npz
mkdir -p "$OUT"
for fmt in legacy pir; do
    model=examples/digits_cnn/$fmt/model.$([ $fmt = legacy ] && echo pdmodel || echo json)
    echo "== Paddle -> ONNX: $model"
    .venv/bin/paddle-npu inspect "$model" | head -n 6
    .venv/bin/paddle-npu convert "$model" -o "$OUT/digits_$fmt.onnx" --reference "$REF"
    echo
done
echo "== ONNX -> NPU (target npu256)"
.venv/bin/paddle-npu lower "$OUT/digits_pir.onnx" --target npu256 -o "$OUT/digits_npu.onnx" \
    --report "$OUT/npu_report.json"
echo
echo "== verify: ONNX model vs lowered model (onnxruntime and the NumPy NPU reference)"
.venv/bin/paddle-npu verify "$OUT/digits_pir.onnx" "$OUT/digits_npu.onnx"
echo
echo "== the same, taking raw uint8 images (digits 0..16 scaled by 1/16 inside the model)"
.venv/bin/paddle-npu lower "$OUT/digits_pir.onnx" --target npu256 -o "$OUT/digits_npu_raw.onnx" \
    --fuse-preprocess --scale 0.0625 --verify | tail -n 12
echo
echo "== integer plan: calibrated on 64 of the digits, lowered at int8, checked on all 359"
.venv/bin/paddle-npu calibrate "$OUT/digits_pir.onnx" --data "$REF" --limit 64 \
    -o "$OUT/digits_calibration.json"
.venv/bin/paddle-npu lower "$OUT/digits_pir.onnx" --target npu256 -o "$OUT/digits_npu_int8.onnx" \
    --quantize int8 --calibration "$OUT/digits_calibration.json" | tail -n 2
.venv/bin/paddle-npu verify "$OUT/digits_pir.onnx" "$OUT/digits_npu_int8.onnx" --inputs "$REF" \
    | tail -n 1
.venv/bin/paddle-npu quant-report "$OUT/digits_pir.onnx" --calibration "$OUT/digits_calibration.json" \
    --data "$REF" --top 3
