"""Shared fixtures. Matplotlib uses Agg here (not via MPLBACKEND, which would leak into the
nbval kernels and strip their figures)."""

from __future__ import annotations

from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

pytest_plugins = ["tests._vllm_fixture"]


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")
