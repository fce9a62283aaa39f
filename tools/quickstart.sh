#!/usr/bin/env bash
# The Quickstart's main job on the example model shipped in examples/digits_cnn (a small CNN
# trained on scikit-learn's digits by tools/train_example.py): set up .venv (runtime
# dependencies only, no Paddle), convert both Paddle formats to ONNX and check each against
# the outputs Paddle itself recorded (reference_io.npz).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
OUT=${OUT:-out/quickstart}
mkdir -p "$OUT"
for fmt in legacy pir; do
    model=examples/digits_cnn/$fmt/model.$([ $fmt = legacy ] && echo pdmodel || echo json)
    echo "== $model"
    .venv/bin/paddle-npu inspect "$model" | head -n 8
    .venv/bin/paddle-npu convert "$model" -o "$OUT/digits_$fmt.onnx" \
        --reference examples/digits_cnn/reference_io.npz
    echo
done
