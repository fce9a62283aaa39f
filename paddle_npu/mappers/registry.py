"""The Paddle-op -> ONNX mapper registry.

A mapper is a class decorated with `@paddle_op("type", ...)` holding
`version_N(cls, ctx, op)` classmethods, one per ONNX opset at which its
emitted nodes change, and optionally `check(cls, op)` returning the reason an
op instance cannot be converted (or None) and `required_opset(cls, op)` when
one instance needs a newer opset than the mapper's oldest version. For a
target opset the newest `version_N` with N <= opset is used (the rule
torch.onnx, tf2onnx and the ONNX reference runtime share).

Third-party packages register the same way, either by importing a module that
uses the decorator, or through the entry-point group `paddle_npu.mappers`
(each entry point names a module, loaded the first time an op is missing).
"""
import re

ENTRY_POINT_GROUP = "paddle_npu.mappers"
_VERSION = re.compile(r"^version_(\d+)$")

_mappers = {}          # paddle op type -> mapper class
_builtin_loaded = False
_entry_points_loaded = False


class MapperError(Exception):
    """A mapper definition that breaks the registry's rules."""


class OpMapper:
    """Base class of mappers: subclasses add `version_N` classmethods."""

    op_types = ()
    versions = ()      # sorted opsets at which a version_N exists

    @classmethod
    def check(cls, op):
        return None

    @classmethod
    def required_opset(cls, op):
        return cls.versions[0]

    @classmethod
    def handler(cls, opset):
        """The version_N method for a target opset, or None if the opset is too old."""
        usable = [v for v in cls.versions if v <= opset]
        return getattr(cls, f"version_{usable[-1]}") if usable else None


def paddle_op(*op_types):
    """Class decorator registering a mapper for one or more Paddle op types."""
    if not op_types or not all(isinstance(t, str) and t for t in op_types):
        raise MapperError("@paddle_op needs one or more op type names")

    def register(cls):
        versions = sorted(int(m.group(1)) for m in map(_VERSION.match, dir(cls)) if m)
        if not versions:
            raise MapperError(f"mapper {cls.__qualname__} has no version_N classmethod")
        for op_type in op_types:
            if op_type in _mappers:
                other = _mappers[op_type]
                raise MapperError(f"Paddle op {op_type!r} is already mapped by "
                                  f"{other.__module__}.{other.__qualname__}; "
                                  f"cannot register {cls.__module__}.{cls.__qualname__} too")
        if not issubclass(cls, OpMapper):
            cls = type(cls.__name__, (cls, OpMapper), {"__module__": cls.__module__,
                                                       "__qualname__": cls.__qualname__})
        cls.op_types = tuple(op_types)
        cls.versions = tuple(versions)
        for op_type in op_types:
            _mappers[op_type] = cls
        return cls

    return register


def unregister(op_type):
    """Remove a mapper (for tests and for users replacing a built-in one on purpose)."""
    return _mappers.pop(op_type, None)


def _load_builtin():
    global _builtin_loaded
    if _builtin_loaded:
        return
    _builtin_loaded = True   # set first: a failing family must not be re-imported half-way
    from . import builtin  # noqa: F401  (importing registers the built-in mappers)


def _load_entry_points():
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points   # only when no built-in mapper fits

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def get_mapper(op_type):
    """The mapper class for a Paddle op type, or None."""
    _load_builtin()
    if op_type not in _mappers:
        _load_entry_points()
    return _mappers.get(op_type)


def supported_ops():
    """{paddle op type: [opset versions]} for every registered mapper."""
    _load_builtin()
    _load_entry_points()
    return {t: list(cls.versions) for t, cls in sorted(_mappers.items())}
