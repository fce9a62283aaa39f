import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_MODELS = os.path.join(ROOT, "tests", "data", "real_models")
EXAMPLE = os.path.join(ROOT, "examples", "digits_cnn")
sys.path.insert(0, os.path.join(ROOT, "tools"))


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    """Where zoo exports are cached: $PADDLE_NPU_ZOO_CACHE, or a per-session temp dir."""
    path = os.environ.get("PADDLE_NPU_ZOO_CACHE")
    if path:
        os.makedirs(path, exist_ok=True)
        return path
    return str(tmp_path_factory.mktemp("zoo"))
