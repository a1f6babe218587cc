"""Load datasets: every loader on tiny files built here, vllm's sampling rules, bad input."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from rollout_kit import ConfigError, DatasetError
from rollout_kit.load import (
    DATASET_NAMES,
    LoadRequest,
    load_dataset,
    read_jsonl,
    read_mooncake,
    read_sharegpt,
    shared_prefix,
    synthetic,
)
from rollout_kit.load._tokenize import ByteCounter, load_tokenizer


def _lines(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _one_line(err: pytest.ExceptionInfo[DatasetError]) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# --------------------------------------------------------------------------- LoadRequest
def test_load_request_needs_one_prompt_and_positive_lengths() -> None:
    assert LoadRequest(prompt="hi").input_len is None
    assert LoadRequest(prompt_ids=(5, 6, 7)).input_len == 3
    with pytest.raises(ConfigError):
        LoadRequest()
    with pytest.raises(ConfigError):
        LoadRequest(prompt="a", prompt_ids=(1,))
    with pytest.raises(ConfigError):
        LoadRequest(prompt="a", output_len=0)


def test_dataset_error_is_a_config_error() -> None:
    assert issubclass(DatasetError, ConfigError)
    assert issubclass(DatasetError, ValueError)


# --------------------------------------------------------------------------- JSONL
def test_jsonl_prompts_and_output_lengths(tmp_path: Path) -> None:
    p = _lines(tmp_path / "p.jsonl", [
        {"prompt": "What is the capital of India?", "output_tokens": 10},
        "",
        {"prompt": "héllo", "output_len": 3},
        {"prompt": "no length"},
    ])
    reqs = read_jsonl(p)
    assert [r.prompt for r in reqs] == ["What is the capital of India?", "héllo", "no length"]
    assert [r.output_len for r in reqs] == [10, 3, None]
    assert all(r.prompt_len is None and not r.ignore_eos for r in reqs)
    counted = read_jsonl(p, tokenizer=ByteCounter(), output_len=7, ignore_eos=True)
    assert [r.prompt_len for r in counted] == [29, 6, 9]  # UTF-8 bytes (é is 2)
    assert all(r.output_len == 7 and r.ignore_eos for r in counted)
    assert len(read_jsonl(p, num=2)) == 2
    over = read_jsonl(p, num=7, seed=3)
    assert len(over) == 7 and over[:3] == reqs
    custom = _lines(tmp_path / "c.jsonl", [{"text": "a", "n": 2}])
    assert read_jsonl(custom, prompt_key="text", output_len_key="n")[0].output_len == 2


@pytest.mark.parametrize(("rows", "expect"), [
    ([{"prompt": "ok"}, "{not json"], "p.jsonl:2: not valid JSON"),
    ([{"prompt": "ok"}, {"prompt": "x"}, [1, 2]], "p.jsonl:3: expected a JSON object"),
    ([{"text": "x"}], "p.jsonl:1: missing key 'prompt'"),
    ([{"prompt": 5}], "p.jsonl:1: 'prompt' must be a non-empty string"),
    ([{"prompt": "a", "output_tokens": 0}], "p.jsonl:1: 'output_tokens' must be positive"),
    ([{"prompt": "a", "output_tokens": -3}], "p.jsonl:1: 'output_tokens' must be positive"),
    ([{"prompt": "a", "output_tokens": "many"}], "p.jsonl:1: 'output_tokens' must be an int"),
    (["", "  "], "p.jsonl: empty dataset"),
])
def test_jsonl_bad_input(tmp_path: Path, rows: list[object], expect: str) -> None:
    p = _lines(tmp_path / "p.jsonl", rows)
    with pytest.raises(DatasetError) as err:
        read_jsonl(p)
    assert expect in _one_line(err)
    assert err.value.path == str(p)


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such dataset file"):
        read_jsonl(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(DatasetError, match="empty dataset"):
        read_jsonl(tmp_path / "e.jsonl")


# --------------------------------------------------------------------------- ShareGPT
def _conv(human: str, gpt: str, *extra: dict[str, str]) -> dict[str, object]:
    return {"conversations": [{"from": "human", "value": human},
                              {"from": "gpt", "value": gpt}, *extra]}


def _sharegpt(tmp_path: Path, entries: list[object]) -> Path:
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(entries, indent=1))
    return p


def test_sharegpt_first_human_turn_and_reply_length(tmp_path: Path) -> None:
    entries = [
        _conv("Tell me a joke about cats.", "Why did the cat sit on the computer?",
              {"from": "human", "value": "another"}, {"from": "gpt", "value": "no"}),
        {"conversations": [{"from": "system", "value": "be nice"},
                           {"from": "human", "value": "Summarise this text."},
                           {"from": "gpt", "value": "It says hello."}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},  # dropped (< 2)
        _conv("hi", "a long enough reply"),                       # prompt < 4 tokens: skipped
        _conv("A question long enough", "ok"),                    # reply < 4 tokens: skipped
    ]
    reqs = read_sharegpt(_sharegpt(tmp_path, entries), shuffle=False)
    assert [(r.prompt, r.prompt_len, r.output_len) for r in reqs] == [
        ("Tell me a joke about cats.", 26, 36),
        ("Summarise this text.", 20, 14),
    ]
    fixed = read_sharegpt(_sharegpt(tmp_path, entries), shuffle=False, output_len=2)
    # with a fixed output length the reply minimum does not apply (as vllm)
    assert [r.output_len for r in fixed] == [2, 2, 2]
    assert fixed[2].prompt == "A question long enough"


def test_sharegpt_matches_vllm_sampling(tmp_path: Path) -> None:
    # vllm: filter >= 2 turns, random.seed(seed); random.shuffle; take; prune; oversample
    entries: list[object] = [_conv(f"Prompt number {i} " + "x" * i, "Reply " + "y" * (i % 7))
                             for i in range(30)]
    entries.insert(5, {"conversations": []})
    p = _sharegpt(tmp_path, entries)
    got = read_sharegpt(p, num=12, seed=7)
    kept = [e for e in entries if isinstance(e, dict) and len(e["conversations"]) >= 2]
    random.seed(7)
    random.shuffle(kept)
    want = [str(e["conversations"][0]["value"]) for e in kept][:12]  # all pass the pruning
    assert [r.prompt for r in got] == want
    over = read_sharegpt(p, num=40, seed=7)
    rng = random.Random(7)
    base = read_sharegpt(p, seed=7)
    assert over[:30] == base and over[30:] == [rng.choice(base) for _ in range(10)]


def test_sharegpt_lengths_with_a_tokenizer(tmp_path: Path) -> None:
    tok_path = _train_tokenizer(tmp_path)
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tok_path))
    p = _sharegpt(tmp_path, [_conv("the quick brown fox jumps", "over the lazy dog again")])
    (req,) = read_sharegpt(p, tokenizer=tok_path)
    assert req.prompt_len == len(hf.encode("the quick brown fox jumps").ids)
    assert req.output_len == len(hf.encode("over the lazy dog again").ids)
    assert read_sharegpt(p, tokenizer=tmp_path)[0] == req  # the folder works too


@pytest.mark.parametrize(("content", "expect"), [
    ('[\n {"conversations": [\n  }\n]', "sg.json:3: not valid JSON"),
    ('{"conversations": []}', "expected a JSON list"),
    ("[]", "empty dataset"),
    ('[{"conversations": []}, {"id": 1}]', "sg.json: entry 2: missing key 'conversations'"),
    ('[{"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]',
     "entry 1: a turn lacks the key 'value'"),
    ('[{"conversations": [{"from": "human", "value": "a"}]}]', "no usable conversation"),
])
def test_sharegpt_bad_input(tmp_path: Path, content: str, expect: str) -> None:
    p = tmp_path / "sg.json"
    p.write_text(content)
    with pytest.raises(DatasetError) as err:
        read_sharegpt(p)
    assert expect in _one_line(err)


# --------------------------------------------------------------------------- synthetic
def test_synthetic_fixed_lengths_are_exact_token_ids() -> None:
    reqs = synthetic(5, input_len=17, output_len=9, seed=1)
    assert len(reqs) == 5
    for r in reqs:
        assert r.prompt is None and r.prompt_ids is not None
        assert r.prompt_len == len(r.prompt_ids) == 17
        assert r.output_len == 9 and r.ignore_eos
        assert all(3 <= i < 259 for i in r.prompt_ids)
    assert synthetic(5, input_len=17, output_len=9, seed=1) == reqs
    assert synthetic(5, input_len=17, output_len=9, seed=2) != reqs


def test_synthetic_uniform_follows_vllm_random_dataset() -> None:
    reqs = synthetic(200, input_len=100, output_len=20, dist="uniform", range_ratio=0.5, seed=3)
    # vllm's get_sampling_params + RandomDataset.generate_token_sequence, by hand
    rng = np.random.default_rng(3)
    in_lens = rng.integers(50, 150 + 1, size=200)
    out_lens = rng.integers(10, 30 + 1, size=200)
    offsets = rng.integers(0, 259, size=200)
    allowed = np.arange(3, 259)
    for i, r in enumerate(reqs):
        assert r.prompt_len == in_lens[i] and r.output_len == out_lens[i]
        ids = allowed[(offsets[i] + i + np.arange(in_lens[i])) % len(allowed)]
        assert r.prompt_ids == tuple(ids.tolist())
    lens = [r.prompt_len or 0 for r in reqs]
    assert min(lens) >= 50 and max(lens) <= 150 and len(set(lens)) > 20
    split = synthetic(50, input_len=100, output_len=20, dist="uniform", range_ratio=(0.0, 0.5))
    assert {r.prompt_len for r in split} == {100}
    assert len({r.output_len for r in split}) > 1


def test_synthetic_normal_and_vocab() -> None:
    reqs = synthetic(2000, input_len=300, output_len=40, dist="normal", std=(30.0, 0.0), seed=4)
    lens = np.array([r.prompt_len for r in reqs])
    assert abs(lens.mean() - 300) < 3 and abs(lens.std() - 30) < 3
    assert {r.output_len for r in reqs} == {40}
    tiny = synthetic(3, input_len=1, output_len=1, dist="normal", std=50.0)
    assert all(r.prompt_len is not None and r.prompt_len >= 1 for r in tiny)
    v = synthetic(4, input_len=64, output_len=2, vocab_size=10, special_ids=(0, 9))
    assert {i for r in v for i in r.prompt_ids or ()} <= set(range(1, 9))


@pytest.mark.parametrize(("kwargs", "expect"), [
    ({"num": 0}, "num must be an int >= 1"),
    ({"input_len": 0}, "input_len must be an int >= 1"),
    ({"output_len": -1}, "output_len must be an int >= 1"),
    ({"dist": "zipf"}, "dist must be"),
    ({"dist": "uniform", "range_ratio": 1.0}, "range_ratio must be in [0, 1)"),
    ({"dist": "normal", "std": -1.0}, "std must be >= 0"),
    ({"std": math.nan}, "std must be a finite number"),
])
def test_synthetic_bad_input(kwargs: dict[str, object], expect: str) -> None:
    args: dict[str, object] = {"num": 3, "input_len": 8, "output_len": 4, **kwargs}
    with pytest.raises(DatasetError) as err:
        synthetic(**args)  # type: ignore[arg-type]
    assert expect in _one_line(err)


# --------------------------------------------------------------------------- shared prefix
def test_shared_prefix_groups() -> None:
    reqs = shared_prefix(num_groups=3, prompts_per_group=4, prefix_len=20, suffix_len=5,
                         output_len=8, seed=0)
    assert len(reqs) == 12
    assert [r.group for r in reqs] != sorted(r.group or 0 for r in reqs)  # shuffled, as vllm
    by_group: dict[int, list[tuple[int, ...]]] = {}
    for r in reqs:
        assert r.prompt_ids is not None and r.prompt_len == 25 and r.output_len == 8
        by_group.setdefault(r.group or 0, []).append(r.prompt_ids)
    assert sorted(by_group) == [0, 1, 2]
    prefixes = {g: {ids[:20] for ids in v} for g, v in by_group.items()}
    assert all(len(p) == 1 for p in prefixes.values())
    assert len({next(iter(p)) for p in prefixes.values()}) == 3
    suffixes = [ids[20:] for v in by_group.values() for ids in v]
    assert len(set(suffixes)) == 12
    ordered = shared_prefix(num_groups=3, prompts_per_group=4, prefix_len=20, suffix_len=5,
                            output_len=8, shuffle=False)
    assert [r.group for r in ordered] == [0] * 4 + [1] * 4 + [2] * 4
    with pytest.raises(DatasetError, match="distinct suffixes"):
        shared_prefix(num_groups=1, prompts_per_group=5, prefix_len=2, suffix_len=1,
                      output_len=1, vocab_size=5, special_ids=(0,))


def test_prefix_repetition_by_name_uses_vllm_defaults() -> None:
    reqs = load_dataset("prefix_repetition", num=25, seed=1)
    assert len(reqs) == 20  # 25 // 10 prompts per prefix
    assert {r.prompt_len for r in reqs} == {512} and {r.output_len for r in reqs} == {128}
    with pytest.raises(DatasetError, match="must be >= num_prefixes"):
        load_dataset("prefix_repetition", num=5)


# --------------------------------------------------------------------------- Mooncake
def test_mooncake_trace_timestamps_and_shared_blocks(tmp_path: Path) -> None:
    p = _lines(tmp_path / "trace.jsonl", [
        {"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]},
        {"timestamp": 1500, "input_length": 9, "output_length": 4, "hash_ids": [7, 8, 11]},
        {"timestamp": 1200, "input_length": 6, "output_length": 2, "hash_ids": [7, 8]},
        {"timestamp": 2500, "input_length": 5, "output_length": 1, "hash_ids": [1]},
    ])
    reqs = read_mooncake(p, block_size=4, time_scale=0.5)
    assert [r.timestamp for r in reqs] == [0.0, 0.1, 0.25, 0.75]  # sorted, rebased, scaled
    a, c, b, d = reqs
    assert [r.prompt_len for r in reqs] == [10, 6, 9, 5]
    assert all(r.prompt_ids is not None and len(r.prompt_ids) == r.prompt_len for r in reqs)
    assert a.prompt_ids is not None and b.prompt_ids is not None and c.prompt_ids is not None
    assert a.prompt_ids[:8] == b.prompt_ids[:8]       # blocks 7 and 8 shared
    assert a.prompt_ids[8:] != b.prompt_ids[8:9]      # block 9 vs block 11
    assert c.prompt_ids == a.prompt_ids[:6]            # a partial block starts its hash's block
    assert d.prompt_ids is not None and d.prompt_ids[:4] != a.prompt_ids[:4]
    assert [r.group for r in reqs] == [7, 7, 7, 1]
    assert all(r.ignore_eos for r in reqs) and [r.output_len for r in reqs] == [3, 2, 4, 1]
    raw = read_mooncake(p, block_size=4, rebase=False)
    assert raw[0].timestamp == 1.0 and raw[-1].timestamp == 2.5
    assert read_mooncake(p, block_size=4) == read_mooncake(p, block_size=4)
    assert len(load_dataset("mooncake", p, block_size=4, num=2)) == 2


def test_mooncake_without_enough_hash_ids_pads_with_unique_tokens(tmp_path: Path) -> None:
    p = _lines(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 7, "output_length": 1, "hash_ids": [3]},
        {"timestamp": 0, "input_length": 7, "output_length": 1, "hash_ids": [3]},
        {"timestamp": 0, "input_length": 5, "output_length": 1},
    ])
    a, b, c = read_mooncake(p, block_size=4)
    assert a.prompt_ids is not None and b.prompt_ids is not None
    assert a.prompt_ids[:4] == b.prompt_ids[:4] and a.prompt_ids[4:] != b.prompt_ids[4:]
    assert c.prompt_len == 5 and c.group is None


@pytest.mark.parametrize(("row", "expect"), [
    ({"input_length": 5, "output_length": 1}, "t.jsonl:2: missing key 'timestamp'"),
    ({"timestamp": 1, "output_length": 1}, "t.jsonl:2: missing key 'input_length'"),
    ({"timestamp": 1, "input_length": 0, "output_length": 1}, "'input_length' must be positive"),
    ({"timestamp": 1, "input_length": 3, "output_length": -2}, "'output_length' must be pos"),
    ({"timestamp": -1, "input_length": 3, "output_length": 2}, "'timestamp' must be >= 0"),
    ({"timestamp": "x", "input_length": 3, "output_length": 2}, "'timestamp' must be a number"),
    ({"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": ["a"]}, "'hash_ids'"),
    ("[1, 2", "t.jsonl:2: not valid JSON"),
])
def test_mooncake_bad_input(tmp_path: Path, row: object, expect: str) -> None:
    good = {"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": [1]}
    p = _lines(tmp_path / "t.jsonl", [good, row])
    with pytest.raises(DatasetError) as err:
        read_mooncake(p)
    assert expect in _one_line(err)
    assert err.value.line == 2
    with pytest.raises(DatasetError, match="time_scale"):
        read_mooncake(p, time_scale=0)


# --------------------------------------------------------------------------- by name
def test_load_dataset_by_name(tmp_path: Path) -> None:
    assert set(DATASET_NAMES) >= {"random", "sharegpt", "prefix_repetition", "mooncake",
                                  "trace", "jsonl", "custom"}
    reqs = load_dataset("random", num=4, input_len=16, output_len=4)
    assert [r.prompt_len for r in reqs] == [16] * 4
    assert load_dataset("random", num=4, input_len=16, output_len=4) == synthetic(
        4, input_len=16, output_len=4, dist="uniform")
    p = _lines(tmp_path / "p.jsonl", [{"prompt": "x"}])
    assert load_dataset("custom", p)[0].prompt == "x"
    assert load_dataset("jsonl", str(p), num=3)[2].prompt == "x"
    with pytest.raises(DatasetError, match="unknown dataset 'sonnet'"):
        load_dataset("sonnet")
    with pytest.raises(DatasetError, match="takes no option"):
        load_dataset("random", num=3, input_lenn=4)
    with pytest.raises(DatasetError, match="needs a path"):
        load_dataset("sharegpt")
    with pytest.raises(DatasetError, match="takes no path"):
        load_dataset("random", p, num=2)


# --------------------------------------------------------------------------- tokenizers
def _train_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 5, trainer=trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


def test_synthetic_vocabulary_from_a_tokenizer(tmp_path: Path) -> None:
    path = _train_tokenizer(tmp_path)
    tok = load_tokenizer(path)
    assert tok.special_ids == {0, 1, 2}
    reqs = synthetic(20, input_len=50, output_len=2, tokenizer=path)
    ids = {i for r in reqs for i in r.prompt_ids or ()}
    assert ids <= set(range(3, tok.vocab_size)) and len(ids) > 100
    with pytest.raises(DatasetError, match="no tokenizer file"):
        synthetic(1, input_len=1, output_len=1, tokenizer=tmp_path / "missing")
