"""Edges of :class:`Arrivals`: exact error messages, boundaries at exactly the duration, one
and two requests, a limit on every kind of process, and int inputs giving float due times."""

from __future__ import annotations

import math
import re
from contextlib import AbstractContextManager

import numpy as np
import pytest

from rollout_kit import ConfigError
from rollout_kit.load import Arrivals
from rollout_kit.load._arrivals import _CHUNK


def _raises(message: str) -> AbstractContextManager[pytest.ExceptionInfo[ConfigError]]:
    """The whole message, not a part of it."""
    return pytest.raises(ConfigError, match="^" + re.escape(message) + "$")


def test_each_bad_field_is_named_with_what_it_needs() -> None:
    with _raises("rate must be > 0, got 0"):
        Arrivals(rate=0)
    with _raises("rate must be a number > 0, got '3'"):
        Arrivals(rate="3")  # type: ignore[arg-type]
    with _raises("burstiness must be > 0, got -1.0"):
        Arrivals(rate=1.0, burstiness=-1.0)
    with _raises("ramp_up must be (start_rps, end_rps), got (1.0, 2.0, 3.0)"):
        Arrivals(ramp_up=(1.0, 2.0, 3.0))  # type: ignore[arg-type]
    # a ramp's rates must be finite, unlike ``rate``
    with _raises("ramp_up start_rps must be > 0 and finite, got inf"):
        Arrivals(ramp_up=(math.inf, 5.0))
    with _raises("ramp_up end_rps must be > 0 and finite, got inf"):
        Arrivals(ramp_up=(1.0, math.inf))
    with _raises("ramp_up end_rps must be > 0 and finite, got 0.0"):
        Arrivals(ramp_up=(1.0, 0.0))
    with _raises("schedule timestamps must be numbers: could not convert string to float: "
                 "'soon'"):
        Arrivals.schedule([0.0, "soon"])  # type: ignore[list-item]
    with _raises("a schedule needs at least one timestamp"):
        Arrivals.schedule([])
    with _raises("schedule timestamps must be finite and >= 0"):
        Arrivals.schedule([-1.0])
    with _raises("schedule timestamps must be non-decreasing (sort them)"):
        Arrivals.schedule([1.0, 0.0])


@pytest.mark.parametrize("seed", [True, 1.5, "1"])
def test_a_seed_must_be_an_int(seed: object) -> None:
    with _raises(f"seed must be an int in [0, 2**32), got {seed!r}"):
        Arrivals(seed=seed)  # type: ignore[arg-type]


def test_a_timestamp_given_as_none_is_not_finite() -> None:
    with _raises("schedule timestamps must be finite and >= 0"):
        Arrivals(timestamps=(0.0, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [True, 1.5, -1])
def test_the_number_of_requests_must_be_an_int(n: object) -> None:
    with _raises(f"the number of requests must be an int >= 0, got {n!r}"):
        Arrivals(rate=1.0).offsets(n)  # type: ignore[arg-type]
    assert len(Arrivals(rate=1.0).offsets(np.int64(3))) == 3


def test_zero_requests_of_every_process() -> None:
    for arr in (Arrivals(rate=5.0), Arrivals(rate=5.0, burstiness=math.inf),
                Arrivals(ramp_up=(1.0, 2.0)), Arrivals()):
        got = arr.offsets(0)
        assert got.shape == (0,) and got.dtype == np.float64


def test_one_and_two_requests() -> None:
    # normalized, one request lands at 1 / rate, two at 1 / rate and 2 / rate (constant)
    np.testing.assert_array_equal(Arrivals(rate=2.0).offsets(1), [0.5])
    np.testing.assert_array_equal(Arrivals(rate=2.0, burstiness=math.inf).offsets(2),
                                  [0.5, 1.0])
    # a ramp of one request runs at its start rate; of two, the second at the end rate
    constant = {"burstiness": math.inf}
    np.testing.assert_array_equal(Arrivals(ramp_up=(2.0, 8.0), **constant).offsets(1), [0.5])
    np.testing.assert_allclose(Arrivals(ramp_up=(2.0, 8.0), **constant).offsets(2),
                               [0.5, 0.625])
    # three requests: the middle one at the middle rate
    np.testing.assert_allclose(Arrivals(ramp_up=(2.0, 8.0), **constant).offsets(3),
                               [0.5, 0.7, 0.825])
    rng = np.random.RandomState(4)
    np.testing.assert_allclose(Arrivals(ramp_up=(2.0, 8.0), seed=4).offsets(1),
                               rng.gamma(1.0, 1 / 2.0, 1))


def test_gaps_that_underflow_to_zero_stay_at_zero() -> None:
    """With a tiny burstiness a gamma gap can be exactly 0: nothing to rescale (no NaN)."""
    assert np.random.RandomState(1).gamma(1e-3, 1e3, 1)[0] == 0.0
    np.testing.assert_array_equal(Arrivals(rate=1.0, burstiness=1e-3, seed=1).offsets(1),
                                  [0.0])


def test_int_timestamps_give_float_due_times() -> None:
    arr = Arrivals(timestamps=(0, 1, 3))
    assert arr.offsets(3).dtype == np.float64 and arr.offsets(3).tolist() == [0.0, 1.0, 3.0]
    assert arr.until(2.0).dtype == np.float64 and arr.until(2.0).tolist() == [0.0, 1.0]


def test_until_leaves_out_an_arrival_at_exactly_the_duration() -> None:
    np.testing.assert_array_equal(Arrivals.schedule([0.0, 1.0, 2.0]).until(1.0), [0.0])
    np.testing.assert_array_equal(Arrivals(rate=2.0, burstiness=math.inf).until(1.0), [0.5])
    np.testing.assert_array_equal(Arrivals(ramp_up=(2.0, 2.0), burstiness=math.inf).until(1.0),
                                  [0.5])


def test_a_ramp_until_a_duration_moves_with_time() -> None:
    # rate 1 + 2 t / 2 at time t, constant gaps: 0 -> 1 (rate 1) -> 1.5 (rate 2)
    # -> 1.9 (rate 2.5) -> 2.24 (rate 2.9: past the end)
    got = Arrivals(ramp_up=(1.0, 3.0), burstiness=math.inf).until(2.0)
    np.testing.assert_allclose(got, [1.0, 1.5, 1.9])
    assert got.dtype == np.float64
    empty = Arrivals(ramp_up=(1.0, 3.0)).until(1e-9)
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_a_random_ramp_draws_one_gap_per_arrival() -> None:
    """The gaps are the seeded stream's draws in order, each at the rate of its time."""
    got = Arrivals(ramp_up=(5.0, 50.0), seed=9).until(3.0)
    rng = np.random.RandomState(9)
    want: list[float] = []
    t = 0.0
    while True:
        t += rng.gamma(1.0, 1.0 / (5.0 + 45.0 * t / 3.0))
        if t >= 3.0:
            break
        want.append(t)
    assert len(want) > 20
    np.testing.assert_allclose(got, want)


def test_a_limit_bounds_every_kind_of_process() -> None:
    ramp = Arrivals(ramp_up=(5.0, 50.0), seed=1)
    np.testing.assert_array_equal(ramp.until(4.0, limit=3), ramp.until(4.0)[:3])
    sched = Arrivals.schedule([0.0, 0.5, 1.5])
    np.testing.assert_array_equal(sched.until(2.0, limit=2), [0.0, 0.5])
    np.testing.assert_array_equal(sched.until(2.0), [0.0, 0.5, 1.5])
    assert Arrivals(rate=1.0).until(5.0, limit=0).shape == (0,)
    assert Arrivals(rate=1.0, seed=3).until(1e3, limit=0).shape == (0,)
    # a limit just past one chunk of draws takes its last arrival from the next chunk
    arr = Arrivals(rate=1000.0, seed=2)
    full = arr.until(10.0)
    assert len(full) > _CHUNK + 1
    np.testing.assert_array_equal(arr.until(10.0, limit=_CHUNK + 1), full[:_CHUNK + 1])


@pytest.mark.parametrize("limit", [True, 1.5, -1])
def test_a_limit_must_be_an_int(limit: object) -> None:
    with _raises(f"limit must be an int >= 0, got {limit!r}"):
        Arrivals(rate=1.0).until(1.0, limit=limit)  # type: ignore[arg-type]


def test_until_needs_a_finite_duration_and_a_bound_for_rate_inf() -> None:
    with _raises("duration must be > 0 and finite, got inf"):
        Arrivals(rate=1.0).until(math.inf)
    with _raises("duration must be > 0 and finite, got 0"):
        Arrivals(rate=1.0).until(0)
    with _raises("rate=inf (everything at t=0) needs a bound in requests (num_requests), "
                 "not only a duration"):
        Arrivals().until(1.0)


def test_offered_rate_of_a_short_run() -> None:
    arr = Arrivals(rate=4.0)
    assert arr.offered_rate(np.array([0.25, 0.5])) == 4.0
    assert arr.offered_rate(np.array([0.5, 1.0])) == 2.0
    assert math.isnan(arr.offered_rate(np.zeros(0)))


def test_a_limit_stops_the_draws_once_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to a duration with a limit, gaps are drawn a chunk at a time only until the limit
    is reached, not up to the duration (100 s at 1000 req/s would be ~25 chunks)."""
    draws: list[int] = []
    gaps = Arrivals._gaps

    def counting(self: Arrivals, rng: np.random.RandomState, rates: float,
                 size: int) -> np.ndarray:
        draws.append(size)
        return gaps(self, rng, rates, size)

    monkeypatch.setattr(Arrivals, "_gaps", counting)
    arr = Arrivals(rate=1000.0, seed=2)
    got = arr.until(100.0, limit=2 * _CHUNK)
    assert draws == [_CHUNK, _CHUNK]  # the limit reached exactly at the second chunk
    draws.clear()
    assert len(arr.until(100.0, limit=_CHUNK + 1)) == _CHUNK + 1 and len(draws) == 2
    draws.clear()
    full = arr.until(100.0)
    assert len(draws) > 20
    np.testing.assert_array_equal(got, full[:2 * _CHUNK])
