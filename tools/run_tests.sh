#!/usr/bin/env bash
# Install paddle_npu with its test dependencies into .venv and run the test suite.
# Works on a fresh machine; CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# The import promise: converting never imports paddle.
.venv/bin/python -c "import paddle_npu, paddle_npu.cli, paddle_npu.frontend, sys; assert 'paddle' not in sys.modules"
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "run_tests: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$rc"
