"""The public names the packages import on first use: each is the function or class it
names, also after every module behind them is imported (a submodule that shares a public
name would take its place as the package's attribute)."""

import importlib
import pkgutil
import types

import pytest

PACKAGES = ["lmlab", "lmlab.data", "lmlab.data.preparation", "lmlab.export",
            "lmlab.objectives"]


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_stay_what_they_name_after_their_modules_load(package):
    for origin in importlib.import_module(package).__getattr__.origins.values():
        importlib.import_module(origin.partition(":")[0])
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_is_also_a_submodule(package):
    module = importlib.import_module(package)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert not submodules & set(module.__all__)
