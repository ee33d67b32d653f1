"""Test configuration: the ``gpu`` marker skips cleanly where no CUDA GPU is usable."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def _gpu_state() -> tuple[bool, str]:
    from tracekit.kernels.backend import cupy_usable

    return cupy_usable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    ok, why = _gpu_state()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
