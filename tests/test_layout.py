"""The package's module graph: no import loop, and no import hidden in a function to dodge one.

Inside a function, a paddle_npu module may be imported only by the command-line modules
(the parser of `paddle-npu --help` is built from them, so the library loads when a command
runs) and by the registries loading their built-in plug-ins; a third-party import there
says why in a comment (a heavy or optional module, kept off start-up)."""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "paddle_npu")

# module -> why it may import paddle_npu modules inside functions
DEFERRING = {
    "paddle_npu.cli": "command line: the library loads when a command runs, not for --help",
    "paddle_npu.npu.cli": "command line (as paddle_npu.cli)",
    "paddle_npu.npu.quant.cli": "command line (as paddle_npu.cli)",
}
# (module, what it imports) -> why
PLUGINS = {
    ("paddle_npu.mappers.registry", "paddle_npu.mappers.builtin"):
        "the stage-1 registry imports its built-in mappers on the first lookup",
    ("paddle_npu.npu.registry", "paddle_npu.npu.mappers"):
        "the stage-2 registry imports its built-in lowerings on the first lookup",
}


def _modules():
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py") and not f.endswith("_pb2.py"):
                path = os.path.join(folder, f)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """[(module imported, line, inside a function, the statement's source lines)]."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path) as f:
        source = f.read()
    lines = source.split("\n")
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package
                    for _ in range(child.level - 1):
                        base = base.rpartition(".")[0]
                    module = f"{base}.{child.module}" if child.module else base
                else:
                    module = child.module
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module
                           for a in child.names]
            else:
                visit(child, inner)
                continue
            text = lines[child.lineno - 2:child.end_lineno]     # with the line before
            for t in targets:
                found.append((t, child.lineno, in_function, text))
    visit(ast.parse(source), False)
    return found


def _ours(target):
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def test_no_function_level_import_of_our_modules_outside_the_command_line():
    hidden = []
    for name, path in MODULES.items():
        for target, line, in_function, _ in _imports(name, path):
            ours = _ours(target)
            if in_function and ours and name not in DEFERRING and (name, ours) not in PLUGINS:
                hidden.append(f"{os.path.relpath(path, ROOT)}:{line} imports {ours}")
    assert not hidden, "imports inside functions (move them to the top of the module):\n" + \
        "\n".join(hidden)


def test_every_deferred_import_says_why():
    silent = []
    for name, path in MODULES.items():
        for target, line, in_function, text in _imports(name, path):
            if not in_function or not target or target.startswith("paddle_npu"):
                continue
            # the comment is on the statement, the line before it, or the first import of
            # the block of deferred imports it belongs to
            if "#" not in "\n".join(text) and not _commented_group(path, line):
                silent.append(f"{os.path.relpath(path, ROOT)}:{line} imports {target}")
    assert not silent, "deferred imports without a comment saying why:\n" + "\n".join(silent)


def _commented_group(path, line):
    """Whether an import at `line` follows, with only imports and blank lines between, an
    import line carrying a comment (one comment for a block of deferred imports)."""
    with open(path) as f:
        lines = f.read().split("\n")
    i = line - 2
    while i >= 0 and (not lines[i].strip() or lines[i].strip().startswith(("import ", "from "))):
        if "#" in lines[i]:
            return True
        i -= 1
    return False


def test_the_module_graph_has_no_cycle():
    graph = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _, in_function, _ in _imports(name, path):
            ours = _ours(target)
            if ours and ours != name and not in_function:
                graph[name].add(ours)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import loop: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_the_command_line_and_the_stage2_package_import_light():
    code = ("import sys\n"
            "import paddle_npu.cli, paddle_npu.npu\n"
            "heavy = [m for m in ('numpy', 'onnx', 'onnx_ir', 'onnxruntime', 'paddle') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
