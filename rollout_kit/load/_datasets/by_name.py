"""Datasets by name: :func:`load_dataset`, as ``vllm bench serve --dataset-name``.

The names (:data:`DATASET_NAMES`) map to the loaders of :mod:`.synthetic`, :mod:`.text` and
:mod:`.traces`; ``random`` and ``prefix_repetition`` take vllm's defaults and option names.
Options are checked against the loader's signature, so an unknown one is a one-line
:class:`~rollout_kit.DatasetError` listing those it takes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._tokenize import TextTokenizer
from .common import SPECIAL_IDS, VOCAB_SIZE, fail, positive
from .multiturn import (
    read_agent_trace,
    read_multiturn_json,
    read_sharegpt_conversations,
    synthetic_conversations,
)
from .request import LoadRequest
from .synthetic import shared_prefix, synthetic
from .text import read_jsonl, read_sharegpt
from .traces import read_mooncake


def _random(num: int, *, input_len: int = 1024, output_len: int = 128,
            range_ratio: float | tuple[float, float] = 0.0, seed: int = 0,
            vocab_size: int = VOCAB_SIZE, special_ids: Sequence[int] = SPECIAL_IDS,
            tokenizer: TextTokenizer | str | Path | object | None = None,
            ) -> list[LoadRequest]:
    return synthetic(num, input_len=input_len, output_len=output_len, dist="uniform",
                     range_ratio=range_ratio, seed=seed, vocab_size=vocab_size,
                     special_ids=special_ids, tokenizer=tokenizer)


def _prefix_repetition(num: int | None = None, *, num_prefixes: int = 10,
                       prefix_len: int = 256, suffix_len: int = 256, output_len: int = 128,
                       prompts_per_group: int | None = None, seed: int = 0,
                       shuffle: bool = True, vocab_size: int = VOCAB_SIZE,
                       special_ids: Sequence[int] = SPECIAL_IDS,
                       tokenizer: TextTokenizer | str | Path | object | None = None,
                       ) -> list[LoadRequest]:
    if prompts_per_group is None:
        if num is None:
            raise fail("prefix_repetition needs num (or prompts_per_group)")
        prompts_per_group = positive(num, "num") // positive(num_prefixes, "num_prefixes")
        if prompts_per_group == 0:
            raise fail(f"num ({num}) must be >= num_prefixes ({num_prefixes})")
    return shared_prefix(num_groups=num_prefixes, prompts_per_group=prompts_per_group,
                         prefix_len=prefix_len, suffix_len=suffix_len, output_len=output_len,
                         seed=seed, shuffle=shuffle, vocab_size=vocab_size,
                         special_ids=special_ids, tokenizer=tokenizer)


_BY_NAME: dict[str, tuple[Callable[..., list[Any]], bool]] = {
    # name -> (loader, takes a path)
    "random": (_random, False),
    "synthetic": (synthetic, False),
    "prefix_repetition": (_prefix_repetition, False),
    "shared_prefix": (shared_prefix, False),
    "sharegpt": (read_sharegpt, True),
    "jsonl": (read_jsonl, True),
    "custom": (read_jsonl, True),
    "mooncake": (read_mooncake, True),
    "trace": (read_mooncake, True),
    "sharegpt_multiturn": (read_sharegpt_conversations, True),
    "multi_turn": (read_multiturn_json, True),
    "synthetic_multiturn": (synthetic_conversations, False),
    "agent_trace": (read_agent_trace, True),
}

#: the names :func:`load_dataset` knows (``vllm bench serve --dataset-name`` where shared)
DATASET_NAMES: tuple[str, ...] = tuple(_BY_NAME)


def _key(name: str) -> str:
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in _BY_NAME:
        raise fail(f"unknown dataset {name!r} (known: {', '.join(DATASET_NAMES)})")
    return key


def dataset_takes_path(name: str) -> bool:
    """Whether dataset ``name`` is read from a file (else it is generated).

    Raises:
        DatasetError: an unknown name (the message lists the known ones).
    """
    return _BY_NAME[_key(name)][1]


def load_dataset(name: str, path: str | Path | None = None, **options: Any) -> list[Any]:
    """A dataset by ``vllm bench serve``'s ``--dataset-name``.

    ``"random"`` (uniform lengths with ``range_ratio``; defaults ``input_len=1024``,
    ``output_len=128`` as vllm), ``"synthetic"`` (:func:`synthetic`), ``"prefix_repetition"``
    (``num // num_prefixes`` prompts per prefix, vllm's defaults 10 prefixes of 256 tokens,
    256-token suffixes, 128 output tokens), ``"shared_prefix"`` (:func:`shared_prefix`),
    ``"sharegpt"``, ``"jsonl"`` / ``"custom"``, ``"mooncake"`` / ``"trace"`` (files at
    ``path``). ``options`` go to the loader (``num``, ``seed``, lengths, ``tokenizer``…).
    These return ``list[LoadRequest]``; the conversation datasets return
    ``list[Conversation]`` (:mod:`.multiturn`): ``"sharegpt_multiturn"``, ``"multi_turn"``
    (vLLM's ``benchmarks/multi_turn`` JSON), ``"synthetic_multiturn"`` and
    ``"agent_trace"``.

    Raises:
        DatasetError: an unknown name or option, a missing or needless path, bad input.
    """
    key = _key(name)
    fn, takes_path = _BY_NAME[key]
    params = inspect.signature(fn).parameters
    unknown = sorted(k for k in options if k not in params or k == "path")
    if unknown:
        known = ", ".join(k for k in params if k != "path")
        raise fail(f"dataset {key!r} takes no option(s) {', '.join(unknown)} (known: {known})")
    if takes_path:
        if path is None:
            raise fail(f"dataset {key!r} needs a path")
        return fn(path, **options)
    if path is not None:
        raise fail(f"dataset {key!r} is generated; it takes no path")
    return fn(**options)
