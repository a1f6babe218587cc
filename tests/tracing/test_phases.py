"""Phase registry."""

from __future__ import annotations

import pytest

from rollout_kit import ConfigError
from rollout_kit.tracing import phase_color, register_phase, registered_phases, schema


def test_builtins_first_with_fixed_colors() -> None:
    assert registered_phases()[:3] == list(schema.BUILTIN_PHASES)
    assert phase_color("generate") == "#2563eb"
    assert phase_color("reward") == "#dc2626"
    assert phase_color("toolcall") == "#f59e0b"


def test_register_is_idempotent_and_colors() -> None:
    register_phase("judge_ph")
    c = phase_color("judge_ph")
    register_phase("judge_ph")
    assert registered_phases().count("judge_ph") == 1 and phase_color("judge_ph") == c
    register_phase("judge_ph", color="#000000")
    assert phase_color("judge_ph") == "#000000"
    register_phase("other_ph")
    assert phase_color("other_ph") != phase_color("generate")


@pytest.mark.parametrize("bad", ["", "has space", "1abc", 3, None, "x" * 65])
def test_bad_names(bad: object) -> None:
    with pytest.raises(ConfigError):
        register_phase(bad)  # type: ignore[arg-type]


def test_unknown_color_lookup_and_bad_color() -> None:
    with pytest.raises(ConfigError, match="not registered"):
        phase_color("never_registered_ph")
    with pytest.raises(ConfigError):
        register_phase("colored_ph", color=123)  # type: ignore[arg-type]
