#!/usr/bin/env bash
# Refresh requirements/test.lock: install paddle_npu with its test dependencies at the newest
# versions the registry serves into a new venv, write their exact versions to the lock, and run
# the test suite against them. Review `git diff requirements/test.lock` and commit it with the
# suite green: upgrading is a deliberate, tested commit.
#     bash tools/refresh_lock.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
venv=$(mktemp -d)/venv
"$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[test]"
{
    echo "# Exact versions for the tests and CI: tools/run_tests.sh installs with -c this file."
    echo "# Made by tools/refresh_lock.sh on $("$PY" -c 'import platform; print(platform.python_version())')."
    echo "pip==$("$venv/bin/python" -m pip --version | cut -d' ' -f2)"
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -v '^-e ' | sort -f
} > requirements/test.lock
echo "wrote requirements/test.lock; running the suite against it"
PADDLE_NPU_VENV="$venv" bash tools/run_tests.sh "$@"
