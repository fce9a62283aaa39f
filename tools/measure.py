"""Wall time and peak RSS of a command in a process of its own, for the benchmarks.

A child's peak RSS (ru_maxrss) includes what it had before exec, i.e. the RSS of the process
that forked it, and a benchmark grows big (onnxruntime, models). So commands are started by a
small launcher process of their own: every command is measured from the same ~10 MB
baseline, whatever the benchmark holds.

    start_launcher()                  once, before the first command
    run_measured(cmd, env=None, log=None)
                                      -> Measured(seconds, rss, rc, stderr, cpu); with log,
                                         the command's stdout and stderr go to that file
    installed_env(root)               the environment to run this checkout's paddle-npu in

`cpu` (user + system seconds) is what the command costs whatever the machine's load: on a
shared machine the wall time is that much or more.

A checkout run from its sources is not what a user runs: `pip install` compiles a package's
bytecode once, and paddle2onnx's is compiled in its environment. With
PYTHONDONTWRITEBYTECODE set (as on this machine) an editable checkout would compile its ~50
modules again in every process (about 0.13 s of a `convert`). `installed_env` compiles them
once into the checkout's __pycache__ folders (ignored by git), as Python does by default.
"""
import json
import os
import subprocess
import sys
from typing import NamedTuple

_LAUNCHER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    start = time.perf_counter()
    log = open(job["log"], "a") if job["log"] else None
    proc = subprocess.Popen(job["cmd"], stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if log else subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=job["env"])
    err = b"" if log else proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    print(json.dumps({"seconds": time.perf_counter() - start, "rss": usage.ru_maxrss * 1024,
                      "rc": os.waitstatus_to_exitcode(status),
                      "cpu": usage.ru_utime + usage.ru_stime,
                      "stderr": err.decode(errors="replace")[-2000:]}), flush=True)
    if log:
        log.close()
"""
_launcher = None


def start_launcher():
    global _launcher
    if _launcher is None:
        _launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)


class Measured(NamedTuple):
    seconds: float      # wall
    rss: int            # peak RSS, bytes
    rc: int
    stderr: str         # its last 2000 characters
    cpu: float          # user + system seconds


def run_measured(cmd, env=None, log=None):
    """Measured of one command in its own process (its output appended to the file log)."""
    start_launcher()
    _launcher.stdin.write(json.dumps({"cmd": cmd, "env": dict(env or os.environ),
                                      "log": log}) + "\n")
    _launcher.stdin.flush()
    return Measured(**json.loads(_launcher.stdout.readline()))


def installed_env(root):
    """os.environ with `root` on PYTHONPATH, its paddle_npu package's bytecode compiled."""
    env = dict(os.environ, PYTHONPATH=root)
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    os.path.join(root, "paddle_npu")], env=env, check=True)
    return env


def load_note():
    """The machine's load, for a benchmark's header: timings on a shared machine vary."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
