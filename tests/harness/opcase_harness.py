"""Per-op unit cases: tiny Paddle layers exported in both formats, many per subprocess.

A case is a function `build(paddle) -> paddle.nn.Layer` registered with `@case`, plus
its inputs. Case modules (`tests/opcases_*.py`) only import paddle inside `build`, so
pytest can collect them without Paddle; the exports run in one subprocess per format
(the PIR switch must be set before `import paddle`):

    python tests/harness/opcase_harness.py export FORMAT OUT_DIR MODULE [MODULE ...]

writes OUT_DIR/<case>/{model.pdmodel|model.json, model.pdiparams, reference.npz}
(reference.npz: `in_<name>` inputs and `out_<i>` Paddle's eager outputs) and
OUT_DIR/<case>/error.txt when Paddle itself cannot export the case in that format.
"""
import hashlib
import importlib
import json
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.dirname(HERE)       # tests/: the opcases_*.py modules
FORMATS = ("legacy", "pir")
MODEL_FILE = {"legacy": "model.pdmodel", "pir": "model.json"}


@dataclass
class Case:
    name: str
    build: Callable
    inputs: Dict[str, Tuple[tuple, str]]      # name -> (shape with None for dynamic, dtype)
    ops: Tuple[str, ...]                      # legacy op types this case exercises
    formats: Tuple[str, ...] = FORMATS
    opsets: Tuple[int, ...] = (11, 17)
    values: Dict[str, Callable] = field(default_factory=dict)   # name -> rng -> array
    batch: int = 2
    tolerance: float = 1e-5                   # max abs diff relative to the output scale
    # "values": compared element-wise; "shape": shape and dtype only (uninitialised memory);
    # "distribution": shape, dtype, range, mean and spread (random ops: other generators)
    compare: str = "values"
    # For the legacy format, where Paddle 3's functional APIs raise in legacy static mode:
    # the op appended by hand, (type, {slot: [input names]}, {slot: n outputs}, attrs); the
    # reference then comes from Paddle's static executor running that program. An output
    # count may also be (n, dtype) for outputs whose dtype differs from the first input's.
    raw: tuple = None


CASES: Dict[str, Case] = {}


def case(name, inputs, ops, **kw):
    """Register `build(paddle) -> Layer` as an op case."""
    def deco(build):
        if name in CASES:
            raise ValueError(f"duplicate op case {name!r}")
        CASES[name] = Case(name, build, inputs, tuple(ops), **kw)
        return build
    return deco


def load_modules(modules):
    for m in modules:
        importlib.import_module(m)
    return CASES


def make_inputs(c, seed=0):
    import numpy as np

    rng = np.random.RandomState(seed)
    feeds = {}
    for name, (shape, dtype) in c.inputs.items():
        concrete = tuple(c.batch if d is None else d for d in shape)
        if name in c.values:
            arr = c.values[name](rng, concrete)
        elif dtype.startswith("float"):
            arr = rng.uniform(-2, 2, concrete)
        elif dtype == "bool":
            arr = rng.uniform(size=concrete) > 0.5
        else:
            arr = rng.randint(0, 5, concrete)
        feeds[name] = np.asarray(arr).astype(dtype)
    return feeds


def _export_one(paddle, c, out_dir):
    import numpy as np

    paddle.seed(abs(hash(c.name)) % (2 ** 31))
    layer = c.build(paddle)
    layer.eval()
    feeds = make_inputs(c)
    outs = layer(*[paddle.to_tensor(v) for v in feeds.values()])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    specs = [paddle.static.InputSpec(list(shape), dtype, name)
             for name, (shape, dtype) in c.inputs.items()]
    static = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
    paddle.jit.save(static, os.path.join(out_dir, "model"))
    np.savez(os.path.join(out_dir, "reference.npz"),
             **{f"in_{k}": v for k, v in feeds.items()},
             **{f"out_{i}": o.numpy() for i, o in enumerate(outs)})


def _export_raw(paddle, c, out_dir):
    """Legacy: a hand-built static program with one op, saved by save_inference_model."""
    import numpy as np

    op_type, in_slots, out_slots, attrs = c.raw
    feeds = make_inputs(c)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        data = {name: paddle.static.data(name, list(shape), dtype)
                for name, (shape, dtype) in c.inputs.items()}
        helper = paddle.base.layer_helper.LayerHelper(op_type)
        outs = {}
        for slot, spec in out_slots.items():
            n, dtype = spec if isinstance(spec, tuple) else (spec, next(iter(data.values())).dtype)
            outs[slot] = [helper.create_variable_for_type_inference(dtype=dtype) for _ in range(n)]
        helper.append_op(type=op_type,
                         inputs={slot: [data[n] for n in names] for slot, names in in_slots.items()},
                         outputs=outs, attrs=attrs)
        # XShape (reshape2/flatten2/squeeze2/...: a shape carrier for training) and norm's Norm
        # are created because the op requires them, but inference programs drop them: not fetched.
        fetch = [v for slot, vs in outs.items() if slot not in ("XShape", "Norm") for v in vs]
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    # return_numpy=False: outputs holding LoD (old detection ops) can't be fetched as arrays
    results = exe.run(main, feed=feeds, fetch_list=fetch, return_numpy=False)
    paddle.static.save_inference_model(os.path.join(out_dir, "model"), list(data.values()), fetch,
                                       exe, program=main)
    np.savez(os.path.join(out_dir, "reference.npz"),
             **{f"in_{k}": v for k, v in feeds.items()},
             **{f"out_{i}": np.asarray(o) for i, o in enumerate(results)})


def export_all(fmt, out_dir, modules):
    """Runs in the subprocess: export every case of the modules in one format."""
    import paddle

    load_modules(modules)
    for name, c in CASES.items():
        if fmt not in c.formats:
            continue
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        try:
            if fmt == "legacy" and c.raw is not None:
                paddle.enable_static()
                try:
                    _export_raw(paddle, c, d)
                finally:
                    paddle.disable_static()
            else:
                _export_one(paddle, c, d)
        except Exception:
            with open(os.path.join(d, "error.txt"), "w") as f:
                f.write(traceback.format_exc())


def cache_key(modules):
    """Changes when a case module or the harness changes."""
    h = hashlib.sha256()
    for path in [__file__] + [os.path.join(CASES_DIR, m.split(".")[-1] + ".py")
                              for m in modules]:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def ensure_exports(root, modules):
    """Export (once per cache key) every case in both formats; returns {fmt: dir}."""
    key = cache_key(modules)
    dirs = {}
    for fmt in FORMATS:
        d = os.path.join(root, f"opcases-{key}", fmt)
        done = os.path.join(d, ".complete")
        if not os.path.exists(done):
            os.makedirs(d, exist_ok=True)
            # the harness, the case modules and tools/ (the zoo's shims) importable there
            path = [HERE, CASES_DIR, os.path.join(os.path.dirname(CASES_DIR), "tools")]
            env = dict(os.environ, FLAGS_enable_pir_api="0" if fmt == "legacy" else "1",
                       PYTHONPATH=os.pathsep.join(path + [os.environ.get("PYTHONPATH", "")]))
            res = subprocess.run([sys.executable, __file__, "export", fmt, d, *modules],
                                 env=env, cwd=CASES_DIR, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"op case export ({fmt}) failed:\n{res.stderr[-4000:]}")
            with open(done, "w") as f:
                json.dump({"modules": modules}, f)
        dirs[fmt] = d
    return dirs


if __name__ == "__main__":
    cmd, fmt, out, *mods = sys.argv[1:]
    assert cmd == "export"
    import opcase_harness  # the case modules register into this module, not __main__
    opcase_harness.export_all(fmt, out, mods)
