"""Router and route_key at the edges: ties, exclusions, everything down, the sticky LRU."""

from __future__ import annotations

import logging

import pytest

from rollout_kit import ConfigError
from rollout_kit.engines._routing import (
    DEFAULT_STICKY_CAPACITY,
    ROUTE_KEY_SEPARATOR,
    Router,
    route_key,
)


def test_route_key_edges() -> None:
    assert ROUTE_KEY_SEPARATOR == ":"
    assert route_key("a:b:c") == "a:b"  # up to the last separator
    assert route_key("task7:") == "task7"
    assert route_key(":x") == ":x" and route_key("") == ""  # no head: the whole rid
    assert route_key("task7:0", {"route_key": ""}) == "task7"  # empty key: ignored
    assert route_key("task7:0", {"route_key": 5}) == "task7"  # not a str: ignored
    assert route_key("task7:0", {}) == "task7"
    assert route_key("task7:0", {"other": "k"}) == "task7"
    assert route_key("x", {"route_key": "k:1"}) == "k:1"  # taken whole, not split


def test_constructor_and_repr() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        Router([])
    with pytest.raises(ConfigError, match=r"\['a', 'b', 'a'\]"):
        Router(["a", "b", "a"])
    r = Router(["b", "a"])
    assert r.policy == "round_robin" and r.servers == ("b", "a")
    assert repr(r) == "Router(policy='round_robin', servers=['b', 'a'], down=[])"
    r.mark_down("a")
    assert repr(r) == "Router(policy='round_robin', servers=['b', 'a'], down=['a'])"
    assert r._capacity == DEFAULT_STICKY_CAPACITY == 65536


def test_health_views_keep_address_order_and_log_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rollout_kit.engines")
    r = Router(["a", "b", "c"])
    r.mark_down("c")
    r.mark_down("a")
    r.mark_down("a")  # already down: no second warning
    r.mark_down("zz")  # not one of ours: ignored
    assert r.down == ("a", "c") and r.healthy == ("b",)
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert [rec.getMessage() for rec in warnings] == [
        "server c is unreachable; taking it out of rotation",
        "server a is unreachable; taking it out of rotation"]
    r.mark_up("b")  # not down: nothing logged
    r.mark_up("a")
    infos = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.INFO]
    assert infos == ["server a is healthy again; back in rotation"]
    assert r.down == ("c",) and r.healthy == ("a", "b")


def test_in_flight_counts() -> None:
    r = Router(["a", "b"])
    assert r.in_flight("a") == 0
    r.started("a")
    r.started("a")
    r.finished("a")
    assert r.in_flight("a") == 1 and r.in_flight("b") == 0
    with pytest.raises(KeyError):
        r.in_flight("zz")


def test_round_robin_skips_excluded_and_down_servers_in_turn() -> None:
    r = Router(["a", "b", "c"])
    assert [r.choose(exclude=["b"]) for _ in range(4)] == ["a", "c", "a", "c"]
    r2 = Router(["a", "b", "c"])
    r2.mark_down("a")
    assert [r2.choose() for _ in range(4)] == ["b", "c", "b", "c"]
    # every healthy one excluded: a healthy one anyway, never a down one
    assert {r2.choose(exclude=["b", "c"]) for _ in range(4)} == {"b", "c"}


def test_everything_down_still_chooses_preferring_the_not_excluded() -> None:
    r = Router(["a", "b", "c"])
    for s in r.servers:
        r.mark_down(s)
    assert [r.choose(exclude=["a"]) for _ in range(4)] == ["b", "c", "b", "c"]
    assert {r.choose(exclude=["a", "b", "c"]) for _ in range(6)} == {"a", "b", "c"}
    assert [r.choose() for _ in range(3)] == ["a", "b", "c"]  # all of them, in turn


def test_least_in_flight_breaks_ties_by_turn() -> None:
    r = Router(["a", "b", "c"], "least_in_flight")
    r.started("b")
    # a and c tie at 0: they take turns, b (1 in flight) is never chosen
    assert [r.choose() for _ in range(4)] == ["a", "c", "a", "c"]
    r.started("a")
    r.started("c")
    r.started("c")
    assert r.choose() in ("a", "b") and {r.choose() for _ in range(4)} == {"a", "b"}
    assert r.choose(exclude=["a", "b"]) == "c"  # the only one left, however loaded


def test_prefer_wins_while_a_candidate_only() -> None:
    r = Router(["a", "b", "c"], "least_in_flight")
    r.started("b")
    assert r.choose(prefer="b") == "b"  # a continuation stays on its server
    r.mark_down("b")
    assert r.choose(prefer="b") == "a"  # down: chosen as if no preference
    assert r.choose(prefer="c", exclude=["c"]) == "a"  # excluded with others left
    assert r.choose(prefer="zz") in ("a", "c")


def test_single_server_short_cut() -> None:
    r = Router(["only"], "round_robin")
    r.mark_down("only")
    assert r.choose(exclude=["only"], prefer="zz") == "only"
    s = Router(["only"], "sticky")
    assert s.choose("k") == "only" and s.sticky_server("k") == "only"  # sticky still learns
    assert s.choose() == "only" and s.sticky_server("") is None


def test_sticky_learns_keeps_and_moves_keys() -> None:
    r = Router(["a", "b"], "sticky", sticky_capacity=3)
    r.started("a")
    assert r.choose("k1") == "b"  # first request: the least loaded
    r.started("b")
    r.started("b")
    assert r.choose("k1") == "b"  # then the same server, however loaded
    assert r.choose("k2") == "a" and r.sticky_server("k2") == "a"
    assert r.choose() in ("a", "b") and r.sticky_server("k1") == "b"  # no key: nothing learnt
    r.mark_down("b")
    assert r.choose("k1") == "a" and r.sticky_server("k1") == "a"  # moved, and remembered
    r.mark_up("b")
    assert r.choose("k1") == "a"  # stays where it moved
    assert r.choose("k3", prefer="b") == "b" and r.sticky_server("k3") == "b"  # prefer learnt


def test_sticky_lru_evicts_the_least_recently_used_key() -> None:
    r = Router(["a", "b"], "sticky", sticky_capacity=2)
    r.choose("k1")
    r.choose("k2")
    r.choose("k1")  # k1 used again: k2 is now the oldest
    r.choose("k3")
    assert r.sticky_server("k2") is None
    assert r.sticky_server("k1") is not None and r.sticky_server("k3") is not None
    assert len(r._sticky) == 2
    one = Router(["a", "b"], "sticky", sticky_capacity=1)
    one.choose("x")
    one.choose("y")
    assert one.sticky_server("x") is None and one.sticky_server("y") is not None


def test_sticky_without_a_key_balances_like_least_in_flight() -> None:
    r = Router(["a", "b"], "sticky")
    r.started("a")
    assert [r.choose() for _ in range(3)] == ["b", "b", "b"]
    assert not r._sticky


def test_round_robin_ignores_load_and_keys() -> None:
    r = Router(["a", "b"], "round_robin")
    r.started("a")
    r.started("a")
    assert [r.choose("k") for _ in range(4)] == ["a", "b", "a", "b"]
    assert r.sticky_server("k") is None  # only the sticky policy learns keys
    with pytest.raises(ConfigError, match=r"^an engine needs at least one server address$"):
        Router([])
