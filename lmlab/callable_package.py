"""A package that is also a function: `lmlab.finetune(...)` and `lmlab.compare(...)` are verbs,
yet `lmlab.finetune` and `lmlab.compare` are packages too, and importing any of their modules
binds the package to that name on `lmlab`, over a function of the same name. Giving the
package a `__call__` makes both readings the same object."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable


def make_callable(package: str, function: Callable) -> None:
    """Calling the module `package` calls `function` (lazily imported work stays lazy)."""

    class CallablePackage(types.ModuleType):
        __call__ = staticmethod(function)

    sys.modules[package].__class__ = CallablePackage
