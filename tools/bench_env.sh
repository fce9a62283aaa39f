#!/usr/bin/env bash
# The benchmarks' own environment: paddle2onnx pins an older onnx than paddle_npu uses,
# so it and the compiled PIR converter p2o get .bench-venv, apart from the product's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .bench-venv/bin/python ] || "$PY" -m venv .bench-venv
.bench-venv/bin/python -m pip install -q --upgrade pip
.bench-venv/bin/python -m pip install -q "paddle2onnx==2.1.0" "paddlepaddle==3.3.1" onnxruntime \
    "p2o==0.1.2"
echo "paddle2onnx and p2o: $(pwd)/.bench-venv/bin/"
