"""Package attributes imported on first use, so that `lmlab --help` and `import lmlab` do not
pay for torch, numpy and tokenizers until something needs them."""

from __future__ import annotations

import importlib
import sys


def lazy_attributes(package: str, origins: dict[str, str]):
    """A module `__getattr__` for `package`: `origins` maps each public name to the module that
    defines it, as `"lmlab.model.model"` or, for a name defined under another one,
    `"lmlab.data.dataset:open_dataset"`."""

    def __getattr__(name: str):
        if name not in origins:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = origins[name].partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)  # later reads skip this function
        return value

    __getattr__.origins = origins  # for the test that every public name stays what it names
    return __getattr__
