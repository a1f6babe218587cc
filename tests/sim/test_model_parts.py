"""Tokenizer, output plans, prefix cache, latency model, fault plan, config (no HTTP)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout_kit import ConfigError
from rollout_kit.sim import ByteTokenizer, FaultPlan, SimConfig
from rollout_kit.sim._generation import SamplingSpec, plan_output, sequence_key
from rollout_kit.sim._latency import LatencyModel
from rollout_kit.sim._prefix_cache import PrefixCache

TOK = ByteTokenizer()


@given(st.text())
def test_tokenizer_round_trips_any_text(text: str) -> None:
    ids = TOK.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert all(3 <= i < TOK.vocab_size for i in ids)
    assert TOK.decode(ids) == text
    assert TOK.decode([TOK.bos_token_id, *ids, TOK.eos_token_id]) == text


def test_tokenizer_specials() -> None:
    assert (TOK.pad_token_id, TOK.bos_token_id, TOK.eos_token_id) == (0, 1, 2)
    assert TOK.decode([1, *TOK.encode("hi"), 2], skip_special_tokens=False) == "<s>hi</s>"
    assert TOK.token_text(2) == "</s>"
    assert TOK.token_text(TOK.encode("a")[0]) == "a"
    assert TOK.token_text(TOK.encode("é")[0]).startswith("bytes:")


def _plan(spec: SamplingSpec, key: int = 1, answer: str | None = None):
    return plan_output(TOK, spec, key, answer=answer, mean_output_tokens=16)


def test_plan_is_deterministic_and_consistent() -> None:
    spec = SamplingSpec(max_tokens=200)
    a, b = _plan(spec), _plan(spec)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert len(a.logprobs) == len(a.token_ids) <= 200
    assert all(math.isfinite(x) and x < 0 for x in a.logprobs)
    assert a.finish == "eos" and a.token_ids[-1] == TOK.eos_token_id
    assert a.text == TOK.decode(a.token_ids)
    assert _plan(spec, key=2).token_ids != a.token_ids


def test_plan_ignore_eos_gives_exactly_max_tokens() -> None:
    p = _plan(SamplingSpec(max_tokens=300, ignore_eos=True))
    assert len(p) == 300 and p.finish == "length" and TOK.eos_token_id not in p.token_ids


def test_plan_answer_fn_then_eos_and_truncation() -> None:
    p = _plan(SamplingSpec(max_tokens=50), answer="The answer is 42.")
    assert p.text == "The answer is 42." and p.finish == "eos"
    assert p.token_ids == [*TOK.encode("The answer is 42."), TOK.eos_token_id]
    short = _plan(SamplingSpec(max_tokens=5), answer="The answer is 42.")
    assert short.text == "The a" and short.finish == "length"


def test_plan_stop_string_and_stop_token() -> None:
    p = _plan(SamplingSpec(max_tokens=50, stop=("is",)), answer="This is it")
    assert p.finish == "string" and p.matched == "is" and p.text == "Th"
    assert p.token_ids == TOK.encode("This")
    keep = _plan(SamplingSpec(max_tokens=50, stop=("is",), keep_stop=True), answer="This is")
    assert keep.text == "This"
    stop_id = TOK.encode(" ")[0]
    q = _plan(SamplingSpec(max_tokens=50, stop_token_ids=frozenset({stop_id})),
              answer="ab cd")
    assert q.finish == "token" and q.matched == stop_id
    assert q.token_ids == TOK.encode("ab ") and q.text == "ab"


def test_plan_text_at_prefixes() -> None:
    p = _plan(SamplingSpec(max_tokens=50), answer="héllo wörld")
    texts = [p.text_at(k) for k in range(len(p) + 1)]
    assert texts[-1] == "héllo wörld"
    for t in texts:
        assert p.text.startswith(t) and "\ufffd" not in t


def test_top_logprobs_include_sampled_and_sum_below_one() -> None:
    p = _plan(SamplingSpec(max_tokens=20, ignore_eos=True))
    for i in range(len(p)):
        top = p.top_logprobs(i, 5)
        assert top[0] == (p.token_ids[i], p.logprobs[i])
        assert len({t for t, _ in top}) == 6
        assert sum(math.exp(lp) for _, lp in top) <= 1.0 + 1e-9


def test_sequence_key_greedy_ignores_sample_index() -> None:
    greedy = SamplingSpec(max_tokens=4, temperature=0.0)
    sampled = SamplingSpec(max_tokens=4)
    assert sequence_key(0, [5, 6], greedy, 0, "a") == sequence_key(0, [5, 6], greedy, 3, "b")
    assert sequence_key(0, [5, 6], sampled, 0, None) != sequence_key(0, [5, 6], sampled, 1,
                                                                        None)


def test_prefix_cache_hits_on_repeated_prefix() -> None:
    cache = PrefixCache(block_size=4, capacity=100)
    prompt = list(range(3, 23))  # 20 tokens
    assert cache.lookup_and_insert(prompt) == 0
    assert cache.lookup_and_insert(prompt) == 16  # last token always computed
    assert cache.lookup_and_insert(prompt[:10] + [99] * 10) == 8
    cache.clear()
    assert cache.lookup_and_insert(prompt) == 0
    tiny = PrefixCache(block_size=4, capacity=2)
    tiny.lookup_and_insert(prompt)
    assert len(tiny) == 2


def test_latency_model_load_factor_and_jitter_mean() -> None:
    cfg = SimConfig(max_num_seqs=11, load_factor=3.0, itl_s=0.01, jitter_cv=0.2, seed=3)
    lat = LatencyModel(cfg)
    assert lat.load_factor(1) == 1.0 and lat.load_factor(11) == pytest.approx(3.0)
    assert lat.load_factor(6) == pytest.approx(2.0)
    js = [lat.jitter() for _ in range(20000)]
    assert sum(js) / len(js) == pytest.approx(1.0, abs=0.01)
    no_jitter = LatencyModel(cfg.replace(jitter_cv=0.0))
    assert no_jitter.ttft(1000) == pytest.approx(cfg.prefill_overhead_s
                                                 + 1000 * cfg.prefill_per_token_s)
    assert no_jitter.itl(11) == pytest.approx(0.03)
    scaled = LatencyModel(cfg.replace(jitter_cv=0.0, time_scale=0.5))
    assert scaled.ttft(0) == pytest.approx(cfg.prefill_overhead_s * 0.5)
    zero = LatencyModel(SimConfig(zero_latency=True))
    assert zero.ttft(1000) == 0.0 and zero.itl(5) == 0.0


def test_fault_plan_seeded_forced_and_validated() -> None:
    a, b = FaultPlan(error_rate=0.3, hang_rate=0.1, seed=7), FaultPlan(error_rate=0.3,
                                                                       hang_rate=0.1, seed=7)
    da = [a.draw() for _ in range(200)]
    assert da == [b.draw() for _ in range(200)]
    kinds = [f.kind for f in da if f is not None]
    assert 40 <= kinds.count("error") <= 80 and 5 <= kinds.count("hang") <= 40
    plan = FaultPlan()
    assert not plan.active and plan.draw() is None
    plan.force("reset", 1)
    assert plan.active
    f = plan.draw()
    assert f is not None and f.kind == "reset" and plan.draw() is None
    with pytest.raises(ConfigError):
        FaultPlan(error_rate=1.5)
    with pytest.raises(ConfigError):
        FaultPlan(error_rate=0.6, hang_rate=0.6)
    with pytest.raises(ConfigError):
        plan.force("explode")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        plan.update(nonsense=1)
    with pytest.raises(ConfigError):
        plan.update(error_statuses=[418])
    assert plan.error_statuses == (500,)


def test_fault_plan_force_order() -> None:
    plan = FaultPlan()
    plan.force("error", 2, status=503)
    plan.force("hang")
    got = [plan.draw() for _ in range(4)]
    assert [(f.kind, f.status) if f else None for f in got] == [
        ("error", 503), ("error", 503), ("hang", 500), None]


def test_sim_config_validation() -> None:
    with pytest.raises(ConfigError):
        SimConfig(max_num_seqs=0)
    with pytest.raises(ConfigError):
        SimConfig(time_scale=-1)
    with pytest.raises(ConfigError):
        SimConfig(paused_new_requests="drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        SimConfig().replace(bogus=1)
    assert SimConfig().replace(max_num_seqs=3).max_num_seqs == 3


def test_lognormal_lengths_have_the_mean_and_a_long_tail() -> None:
    spec = SamplingSpec(max_tokens=100_000)
    lengths = sorted(len(plan_output(TOK, spec, k, answer=None, mean_output_tokens=64,
                                     length_sigma=1.0)) for k in range(2000))
    mean = sum(lengths) / len(lengths)
    median = lengths[len(lengths) // 2]
    p99 = lengths[int(0.99 * len(lengths))]
    assert 54 < mean < 74  # the mean is the configured one (sampling error ~2.5 %)
    assert median < 0.75 * mean  # skewed: most outputs are short…
    assert p99 > 5 * median  # …and a few are very long
    again = [len(plan_output(TOK, spec, k, answer=None, mean_output_tokens=64,
                             length_sigma=1.0)) for k in range(20)]
    assert again == [len(plan_output(TOK, spec, k, answer=None, mean_output_tokens=64,
                                     length_sigma=1.0)) for k in range(20)]  # seeded
    fixed = {len(plan_output(TOK, spec, k, answer=None, mean_output_tokens=64,
                             length_sigma=0.0)) for k in range(50)}
    assert fixed == {64}


def test_lognormal_length_puts_the_answer_after_digit_free_filler() -> None:
    spec = SamplingSpec(max_tokens=100_000)
    plans = [plan_output(TOK, spec, k, answer="The answer is 42.", mean_output_tokens=200,
                         length_sigma=1.0) for k in range(50)]
    assert len({len(p) for p in plans}) > 10  # lengths vary per request
    for p in plans:
        assert p.finish == "eos" and p.text.endswith("The answer is 42.")
        assert not any(ch.isdigit() for ch in p.text[:-len("The answer is 42.")])
    capped = plan_output(TOK, SamplingSpec(max_tokens=5), 3, answer=None,
                         mean_output_tokens=200, length_sigma=1.0)
    assert len(capped) == 5 and capped.finish == "length"


def test_output_length_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="output_length"):
        SimConfig(output_length="pareto")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="output_length_sigma"):
        SimConfig(output_length_sigma=-1.0)
