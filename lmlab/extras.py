"""Optional extras: a feature whose package is missing is refused in one line that names the
`pip install` bringing it."""

from __future__ import annotations

import importlib
import importlib.util

from lmlab.config.training import trackers_named


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules holds None for it: imports of it are blocked
        return False


def require_extra(module: str, extra: str, needed_by: str, package: str | None = None) -> None:
    """Refuse `needed_by` in one line, naming the lmlab extra that installs it, when the
    optional `module` (of `package`, when it is named otherwise) is missing."""
    if not installed(module):
        raise ValueError(f"{needed_by} needs the {package or module} package: "
                         f"pip install 'lmlab[{extra}]'")


# The module each tracker imports to start; importing it is the check that it works.
TRACKER_MODULES = {"tensorboard": "torch.utils.tensorboard", "mlflow": "mlflow.tracking",
                   "trackio": "trackio", "wandb": "wandb"}


def require_trackers(report_to: str | None) -> tuple[str, ...]:
    """The trackers `report_to` names, each refused in one line, before anything is written,
    when its package is missing or installed but broken (it fails to import)."""
    names = trackers_named(report_to)
    for name in names:  # each tracker's package, and lmlab's extra installing it, is its name
        require_extra(name, name, f"--report-to {name}")
        try:
            importlib.import_module(TRACKER_MODULES[name])
        except Exception as error:  # whatever a broken package raises, it is one line
            raise ValueError(f"--report-to {name}: the installed {name} package fails to "
                             f"import ({_first_line(error)}); reinstall it with pip install "
                             f"--force-reinstall 'lmlab[{name}]', or leave out --report-to "
                             f"{name}") from None
    return names


def _first_line(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
