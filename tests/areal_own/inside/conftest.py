"""Fixtures of the AReaL tests: AReaL's tokenizer and the data its workflows read."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture(scope="session")
def model_dir() -> str:
    return os.environ["ROLLOUT_KIT_AREAL_MODEL"]


@pytest.fixture(scope="session")
def tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
