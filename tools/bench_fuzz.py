"""Fuzz the converter with damaged programs and parameter files (hypothesis), and count what
comes out: a converted model, one of our documented errors (PaddleFormatError,
ConversionError), or anything else -- which is a bug, saved for the bad-input table.

    python tools/bench_fuzz.py [--cases 100000] [--seed 0] [--save DIR]

Runs of several seeds can share the cases between processes (`--cases 50000 --seed 1` and
`--seed 2`); each prints its counts.

Each case takes one of the example exports (legacy .pdmodel, PIR .json, an old __model__
directory), damages its program or its params file (byte flips, a truncation, inserted or
deleted bytes, a spliced run of random bytes) and converts it with `paddle_npu.export`,
ONNX checks on. A case running longer than --timeout seconds counts as a hang.
"""
import argparse
import collections
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXAMPLE = os.path.join(ROOT, "examples", "digits_cnn")
MLP = os.path.join(ROOT, "tests", "data", "real_models", "luotao1_example_mlp")
# (name, program file, params file or None for per-parameter files)
SOURCES = [
    ("legacy", os.path.join(EXAMPLE, "legacy", "model.pdmodel"),
     os.path.join(EXAMPLE, "legacy", "model.pdiparams")),
    ("pir", os.path.join(EXAMPLE, "pir", "model.json"),
     os.path.join(EXAMPLE, "pir", "model.pdiparams")),
    ("old_dir", os.path.join(MLP, "__model__"), None),
]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def mutations(st, size):
    """A hypothesis strategy of (kind, edits) damaging `size` bytes."""
    pos = st.integers(0, max(size - 1, 0))
    byte = st.integers(0, 255)
    return st.one_of(
        st.tuples(st.just("flip"), st.lists(st.tuples(pos, byte), min_size=1, max_size=4)),
        st.tuples(st.just("truncate"), pos),
        st.tuples(st.just("insert"), st.tuples(pos, st.binary(min_size=1, max_size=8))),
        st.tuples(st.just("delete"), st.tuples(pos, st.integers(1, 16))),
        st.tuples(st.just("splice"), st.tuples(pos, st.binary(min_size=1, max_size=64))),
    )


def damage(data, mutation):
    kind, arg = mutation
    data = bytearray(data)
    if kind == "flip":
        for i, b in arg:
            data[i] = b
    elif kind == "truncate":
        del data[arg:]
    elif kind == "insert":
        data[arg[0]:arg[0]] = arg[1]
    elif kind == "delete":
        del data[arg[0]:arg[0] + arg[1]]
    else:
        data[arg[0]:arg[0] + len(arg[1])] = arg[1]
    return bytes(data)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=30, help="seconds a case may take")
    ap.add_argument("--save", metavar="DIR", help="save the files of undocumented failures")
    ap.add_argument("--every", type=int, default=5000, help="print counts every N cases")
    args = ap.parse_args(argv)

    import logging
    logging.getLogger("onnx_ir").setLevel(logging.CRITICAL)   # as the CLI does

    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from paddle_npu.api import export
    from paddle_npu.errors import ConversionError, PaddleFormatError

    # The damaged files are rewritten for every case: in memory where there is a tmpfs.
    work = tempfile.mkdtemp(prefix="paddle_npu_fuzz.",
                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    originals, program_of = {}, {}
    for name, program, params in SOURCES:
        folder = os.path.join(work, name)
        if params is None:
            shutil.copytree(os.path.dirname(program), folder)
        else:
            os.makedirs(folder)
            shutil.copy(params, os.path.join(folder, os.path.basename(params)))
        shutil.copy(program, os.path.join(folder, os.path.basename(program)))
        targets = [os.path.join(folder, os.path.basename(program))]
        targets += [os.path.join(folder, os.path.basename(params))] if params else \
            [os.path.join(folder, "fc_0.w_0"), os.path.join(folder, "fc_1.b_0")]
        for path in targets:
            program_of[path] = targets[0]
            with open(path, "rb") as f:
                originals[path] = f.read()
    files = sorted(originals)
    counts = collections.Counter()
    undocumented = collections.Counter()
    examples = {}
    done = [0]
    start = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)

    def report(final=False):
        elapsed = time.monotonic() - start
        print(f"{'final' if final else 'after'} {done[0]} cases, {elapsed:.0f} s: "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
        for key, n in undocumented.most_common():
            print(f"  undocumented {n} x {key}: {examples[key][0]}", flush=True)

    @seed(args.seed)
    @settings(max_examples=args.cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def case(data):
        path = data.draw(st.sampled_from(files))
        original = originals[path]
        damaged = damage(original, data.draw(mutations(st, len(original))))
        with open(path, "wb") as f:
            f.write(damaged)
        outcome = "converted"
        signal.alarm(args.timeout)
        try:
            export(program_of[path])
        except PaddleFormatError:
            outcome = "PaddleFormatError"
        except ConversionError:
            outcome = "ConversionError"
        except Hang:
            outcome = "hang"
        except Exception as exc:  # noqa: BLE001 - what the bench is looking for
            outcome = "undocumented"
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} at {os.path.relpath(frame.filename, ROOT)}:{frame.lineno}"
            undocumented[key] += 1
            if key not in examples:
                examples[key] = (f"{type(exc).__name__}: {exc}"[:200], path, damaged)
                if args.save:
                    os.makedirs(args.save, exist_ok=True)
                    stem = f"{len(examples):03d}_{os.path.basename(os.path.dirname(path))}_" \
                           f"{os.path.basename(path)}"
                    with open(os.path.join(args.save, stem), "wb") as f:
                        f.write(damaged)
        finally:
            signal.alarm(0)
            with open(path, "wb") as f:
                f.write(original)
        if outcome == "hang":
            undocumented["hang"] += 1
            examples.setdefault("hang", (f"over {args.timeout} s", path, damaged))
        counts[outcome] += 1
        done[0] += 1
        if done[0] % args.every == 0:
            report()

    try:
        case()
    finally:
        report(final=True)
        shutil.rmtree(work, ignore_errors=True)
    outside = sum(undocumented.values())
    print(f"{done[0]} cases: {outside} ended in an exception outside our documented types "
          "(PaddleFormatError, ConversionError) or a hang")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
