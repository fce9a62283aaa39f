"""Importing this module registers every built-in mapper: each module of this package
other than the registry machinery is an op family."""
import importlib
import os
import pkgutil

_NOT_FAMILIES = {"registry", "common", "builtin"}

for _info in pkgutil.iter_modules([os.path.dirname(__file__)]):
    if _info.name not in _NOT_FAMILIES:
        importlib.import_module(f"{__package__}.{_info.name}")
