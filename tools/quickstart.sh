#!/usr/bin/env bash
# The Quickstart's main job on the example model shipped in examples/: set up .venv
# (runtime dependencies only, no Paddle) and run paddle-npu on it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
for model in examples/digits_cnn/legacy/model.pdmodel examples/digits_cnn/pir/model.json; do
    .venv/bin/paddle-npu inspect "$model"
    echo
done
