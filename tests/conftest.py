import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_MODELS = os.path.join(ROOT, "tests", "data", "real_models")
EXAMPLE = os.path.join(ROOT, "examples", "digits_cnn")
# Helpers that are not tests (op-case harness, Paddle oracle, NPU test helpers) live in
# tests/harness/ and, like tools/zoo.py, are imported by their module names
# (`from npu_helpers import ...`): pytest.ini puts both folders on the path.


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    """Where zoo exports are cached: $PADDLE_NPU_ZOO_CACHE, or a per-session temp dir."""
    path = os.environ.get("PADDLE_NPU_ZOO_CACHE")
    if path:
        os.makedirs(path, exist_ok=True)
        return path
    return str(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def zoo_onnx(zoo_dir):
    """zoo_onnx(name, fmt="legacy") -> (ONNX bytes from our converter, the zoo's test feeds)."""
    import numpy as np

    import zoo
    from paddle_npu.api import export

    done = {}

    def get(name, fmt="legacy"):
        if (name, fmt) not in done:
            info = zoo.export(name, fmt, os.path.join(zoo_dir, name, fmt))
            ref = np.load(os.path.join(info["dir"], "reference.npz"))
            feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
            done[name, fmt] = export(os.path.join(info["dir"], info["model_file"])), feeds
        return done[name, fmt]
    return get


@pytest.fixture(scope="session")
def paddle_exports(tmp_path_factory):
    """paddle_exports(name, script) -> a directory holding legacy/ and pir/: the Paddle
    script run once per format as `python script FMT OUT/FMT` (a subprocess each: the
    legacy switch must be set before `import paddle`)."""
    import subprocess

    def run(name, script):
        out = tmp_path_factory.mktemp(name)
        path = out / "oracle.py"
        path.write_text(script)
        env = dict(os.environ)
        env.pop("FLAGS_enable_pir_api", None)
        for fmt in ("legacy", "pir"):
            proc = subprocess.run([sys.executable, str(path), fmt, str(out / fmt)], env=env,
                                  capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stderr[-3000:]
        return out
    return run
