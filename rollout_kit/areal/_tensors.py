"""AReaL's batch layout: trajectories that are dicts of ``[B, L, ...]`` torch tensors.

:func:`concat_padded_tensors` is AReaL's ``areal.utils.data.concat_padded_tensors``, written
out so a batch can be built without importing AReaL: tensors are right-padded on every
dimension after the first to the largest size among the dicts and concatenated along the
first (``attention_mask`` is padded with zeros whatever ``pad_value`` is), lists are
concatenated, other values are taken from the first dict. torch is imported only here, and
only when a trajectory holds tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError


def require_torch(what: str) -> Any:
    """The torch module, or :class:`ConfigError` saying that ``what`` needs it."""
    try:
        import torch
    except ImportError:
        raise ConfigError(f"{what} needs torch: pip install torch") from None
    return torch


def holds_tensors(trajectory: Any) -> bool:
    """Whether ``trajectory`` is a dict with at least one torch tensor value (without
    importing torch: a value's type is looked at by name)."""
    return isinstance(trajectory, dict) and any(
        type(v).__module__ == "torch" and type(v).__name__ == "Tensor"
        for v in trajectory.values())


def _pad_cat(torch: Any, tensors: list[Any], pad_value: float) -> Any:
    ndim = tensors[0].ndim
    if any(t.ndim != ndim for t in tensors):
        raise ConfigError(f"cannot concatenate tensors of {sorted({t.ndim for t in tensors})} "
                          "dimensions")
    if ndim <= 1:
        return torch.cat(tensors, dim=0)
    most = [max(t.shape[i] for t in tensors) for i in range(1, ndim)]
    padded = []
    for t in tensors:
        pad: list[int] = []
        for i in reversed(range(1, ndim)):  # F.pad takes the innermost dimension first
            pad += [0, most[i - 1] - t.shape[i]]
        padded.append(torch.nn.functional.pad(t, pad, value=pad_value) if any(pad) else t)
    return torch.cat(padded, dim=0)


def concat_padded_tensors(trajectories: Sequence[dict[str, Any]],
                          pad_value: float = 0.0) -> dict[str, Any]:
    """One batch dict from trajectory dicts, as AReaL's function of the same name builds it.

    Raises:
        ConfigError: the dicts have different keys, tensors of different ranks, or torch is
            not installed.
    """
    if not trajectories:
        return {}
    if len(trajectories) == 1:
        return dict(trajectories[0])
    keys = set(trajectories[0])
    for i, d in enumerate(trajectories[1:], 1):
        if set(d) != keys:
            raise ConfigError(f"trajectory {i} has keys {sorted(d)}, trajectory 0 has "
                              f"{sorted(keys)}: they cannot be concatenated")
    torch = require_torch("concatenating tensors") if holds_tensors(trajectories[0]) else None
    out: dict[str, Any] = {}
    for key in trajectories[0]:
        values = [d[key] for d in trajectories]
        if torch is not None and isinstance(values[0], torch.Tensor):
            out[key] = _pad_cat(torch, values, 0.0 if key == "attention_mask" else pad_value)
        elif isinstance(values[0], list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = values[0]
    return out
