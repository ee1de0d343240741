"""Outside suites read their data offline: lmlab fetches nothing from a hub, so a task's data
comes from local files or what the datasets cache already holds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hub_offline() -> Iterator[None]:
    """The Hugging Face hub and datasets libraries in offline mode for the duration. Both read
    HF_HUB_OFFLINE once, when first imported, so their flags are set, not the environment."""
    import datasets.config
    import huggingface_hub.constants

    flags = [(datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
             (huggingface_hub.constants, "HF_HUB_OFFLINE")]
    before = [getattr(module, name) for module, name in flags]
    for module, name in flags:
        setattr(module, name, True)
    try:
        yield
    finally:
        for (module, name), value in zip(flags, before, strict=True):
            setattr(module, name, value)
