"""Keep sympy off start-up.

onnx-ir (1.x) imports sympy, and builds a table of sympy functions in its
`_symbolic_shapes` module, when it is imported: about 0.25 s on every command, for
arithmetic on symbolic dimensions that we never do. Both modules are registered here as
modules that load themselves the first time one of their attributes is missing (any real
use), so nothing changes but when the cost is paid. Called before anything imports onnx_ir;
it does nothing if either is already imported or cannot be found.
"""
import importlib.machinery
import importlib.util
import sys
import types


class _LoadOnFirstUse(types.ModuleType):
    def __getattr__(self, attr):
        self.__class__ = types.ModuleType          # from here on an ordinary module
        self.__spec__.loader.exec_module(self)
        return getattr(self, attr)


def _register(spec):
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LoadOnFirstUse
    sys.modules[spec.name] = module


def defer_sympy():
    if "sympy" in sys.modules or "onnx_ir" in sys.modules:
        return
    try:
        sympy = importlib.util.find_spec("sympy")
        onnx_ir = importlib.util.find_spec("onnx_ir")
        shapes = onnx_ir and importlib.machinery.PathFinder.find_spec(
            "onnx_ir._symbolic_shapes", onnx_ir.submodule_search_locations)
    except (ImportError, ValueError):
        return
    if sympy is None or shapes is None:
        return
    _register(sympy)
    _register(shapes)
