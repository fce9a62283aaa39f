"""Unique names, constants on a graph, JSON/TOML settings files: small things every stage
needs."""
import json
import os

from .errors import ConversionError


class UniqueNames:
    """`names(base)` returns base, or base_1, base_2, ... the first one not taken yet."""

    def __init__(self, taken=()):
        self.taken = set(taken)

    @classmethod
    def of_graph(cls, graph):
        """Every name an onnx_ir graph (and its sub-graphs) already uses."""
        import onnx_ir as ir    # on first use: target files (on the --help path) read this module

        taken = {v.name for v in graph.inputs} | set(graph.initializers)
        for node in ir.traversal.RecursiveGraphIterator(graph):
            taken.add(node.name)
            taken.update(v.name for v in node.outputs if v.name)
        return cls(taken)

    def __call__(self, base):
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


def add_initializer(graph, array, name):
    """A constant registered on an onnx_ir graph, under `name` or the first free name_N."""
    import numpy as np      # on first use (see UniqueNames.of_graph)
    import onnx_ir as ir

    base, n = name, 0
    while name in graph.initializers:
        n += 1
        name = f"{base}_{n}"
    array = np.ascontiguousarray(array)
    value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                     shape=ir.Shape(array.shape), const_value=ir.Tensor(array, name=name))
    graph.register_initializer(value)
    return value


def read_settings(path, what, error=ConversionError):
    """A .json or .toml settings file as a dict; `error(message)` when it can't be read or
    holds something else than a table / object."""
    data = _read_settings(path, what, error)
    if not isinstance(data, dict):
        raise error(f"{path}: a {what} holds a table / object, this one holds a JSON "
                    f"{type(data).__name__}")
    return data


def _read_settings(path, what, error):
    if not os.path.exists(path):
        raise error(f"{path}: {what} does not exist")
    if path.endswith(".toml"):
        try:
            import tomllib      # only for .toml files; stdlib from 3.11, tomli before
        except ImportError:    # Python < 3.11
            try:
                import tomli as tomllib     # the same parser, as a package
            except ImportError:
                raise error(f"{path}: reading TOML needs Python 3.11+ or the tomli package; "
                            "write it as JSON instead") from None
        with open(path, "rb") as f:
            try:
                return tomllib.load(f)
            except tomllib.TOMLDecodeError as exc:
                raise error(f"{path}: not valid TOML ({exc})") from None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as exc:
        raise error(f"{path}: not valid JSON ({exc})") from None
