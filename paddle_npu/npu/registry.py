"""The ONNX-op -> NPU-primitive mapper registry (stage 2; stage 1's is mappers/registry.py).

A mapper is a class decorated with `@onnx_op("Conv", ...)` holding

    lower(cls, ctx, node)   emits the replacement through ctx (ctx.npu.VMM(...),
                            ctx.onnx.Relu(...)) and returns the values standing for the
                            node's outputs, in order
    check(cls, ctx, node)   optional: the reason this node cannot be lowered (the target
                            lacks a primitive, a weight is not constant, ...) or None;
                            a refused node stays a plain ONNX node, on the NPU if the
                            target's vector unit runs it, else on the CPU

Third-party packages register the same way, by importing a module that uses the decorator
or through the entry-point group `paddle_npu.npu_mappers`.
"""
ENTRY_POINT_GROUP = "paddle_npu.npu_mappers"

_mappers = {}          # (domain, op type) -> mapper class
_builtin_loaded = False
_entry_points_loaded = False


class MapperError(Exception):
    """A mapper definition that breaks the registry's rules."""


class OnnxMapper:
    op_types = ()
    domain = ""

    @classmethod
    def check(cls, ctx, node):
        return None

    @classmethod
    def lower(cls, ctx, node):
        raise NotImplementedError


def onnx_op(*op_types, domain=""):
    """Class decorator registering a lowering for one or more ONNX op types."""
    if not op_types or not all(isinstance(t, str) and t for t in op_types):
        raise MapperError("@onnx_op needs one or more op type names")

    def register(cls):
        if not callable(getattr(cls, "lower", None)) or getattr(cls, "lower") is OnnxMapper.lower:
            raise MapperError(f"mapper {cls.__qualname__} has no lower(cls, ctx, node)")
        for op_type in op_types:
            other = _mappers.get((domain, op_type))
            if other is not None:
                raise MapperError(f"ONNX op {op_type!r} is already lowered by "
                                  f"{other.__module__}.{other.__qualname__}; cannot register "
                                  f"{cls.__module__}.{cls.__qualname__} too")
        if not issubclass(cls, OnnxMapper):
            cls = type(cls.__name__, (cls, OnnxMapper), {"__module__": cls.__module__,
                                                         "__qualname__": cls.__qualname__})
        cls.op_types, cls.domain = tuple(op_types), domain
        for op_type in op_types:
            _mappers[(domain, op_type)] = cls
        return cls

    return register


def unregister(op_type, domain=""):
    return _mappers.pop((domain, op_type), None)


def _load_builtin():
    global _builtin_loaded
    if not _builtin_loaded:
        _builtin_loaded = True
        from . import mappers  # noqa: F401  (importing registers the built-in lowerings)


def _load_entry_points():
    global _entry_points_loaded
    if not _entry_points_loaded:
        _entry_points_loaded = True
        from importlib.metadata import entry_points   # only when no built-in lowering fits

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            ep.load()


def get_onnx_mapper(op_type, domain=""):
    _load_builtin()
    domain = "" if domain == "ai.onnx" else domain
    if (domain, op_type) not in _mappers:
        _load_entry_points()
    return _mappers.get((domain, op_type))


def lowered_ops():
    _load_builtin()
    _load_entry_points()
    return sorted(t for (_, t) in _mappers)
