"""malloc tuning for the training loop: applied on glibc, skipped when turned off."""

import platform
import sys

import pytest

from lmlab.kernels.machine import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt tuning is for glibc")
def test_glibc_accepts_the_settings():
    assert keep_freed_memory() is True


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("LMLAB_MALLOC_TUNE", "0")
    assert keep_freed_memory() is False
