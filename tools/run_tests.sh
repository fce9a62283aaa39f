#!/usr/bin/env bash
# Install paddle_npu with its test dependencies, at the exact versions of requirements/test.lock,
# into .venv and run the test suite. Works on a fresh machine; CI (.ci/run) calls exactly this.
# tools/refresh_lock.sh moves the lock to newer versions.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PADDLE_NPU_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q -c requirements/test.lock pip
"$VENV/bin/python" -m pip install -q -c requirements/test.lock -e ".[test]"
echo "== resolved versions (pip freeze) =="
"$VENV/bin/python" -m pip freeze --exclude-editable
echo "=="
# The import promise: converting never imports paddle.
"$VENV/bin/python" -c "import paddle_npu, paddle_npu.cli, paddle_npu.frontend, sys; assert 'paddle' not in sys.modules"
df -h . "${TMPDIR:-/tmp}" | sed "s/^/run_tests: /"  # the suite needs about 3.5 GB free in TMPDIR
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "run_tests: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$rc"
