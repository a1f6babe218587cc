"""The simulator with a real tokenizer file: token counts agree with the client's tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from rollout_kit import ConfigError
from rollout_kit.sim import FileTokenizer, SimConfig, serve
from rollout_kit.sim._tokenizer import load_tokenizer

from .helpers import post, sse

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.timeout(60)

_LINES = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 2 + 2? The answer is 4.",
    "Rollouts send prompts to an inference server and collect token ids and logprobs.",
    "Pause, abort, resume: the server keeps running while the weights change.",
] * 4
PROMPTS = ["The quick brown fox jumps over the lazy dog.",
           "Rollouts send prompts to a server; héllo wörld ✓ 12345"]


def _bpe(folder: Path, *, config: bool = True) -> Path:
    """A byte-level BPE like the vLLM CPU fixture's tiny model (<s>, </s>, <pad> = 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_LINES, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    if config:
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}))
    return folder


def _wordlevel(folder: Path) -> Path:
    """A word-level tokenizer (no byte-level decoder) with an ``<|endoftext|>`` EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "<|endoftext|>"],
                                        show_progress=False)
    tok.train_from_iterator(_LINES, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _encode(folder: Path, text: str) -> list[int]:
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids: list[int] = tok.encode(text).ids
    return ids


def test_file_tokenizer_specials_and_round_trip(tmp_path: Path) -> None:
    folder = _bpe(tmp_path / "bpe")
    tok = load_tokenizer(folder)
    assert isinstance(tok, FileTokenizer)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    assert tok.eos_token == "</s>" and tok.vocab_size == 320
    assert load_tokenizer(folder / "tokenizer.json") is tok  # loaded once
    for text in PROMPTS:
        ids = tok.encode(text)
        assert ids == _encode(folder, text)
        assert tok.decode(ids) == text
        assert b"".join(tok.token_bytes(i) for i in ids) == text.encode()
    assert tok.is_special(1) and not tok.is_special(tok.filler_ids[0])
    assert all(not any(c.isdigit() for c in tok.token_text(i)) for i in tok.pad_filler_ids)
    assert tok.token_text(1) == "</s>"
    partial = next(i for i in range(3, 320) if len(tok.token_bytes(i)) == 1
                   and tok.token_bytes(i)[0] >= 0x80)
    assert tok.token_text(partial).startswith("bytes:\\x")
    words = load_tokenizer(_wordlevel(tmp_path / "wl"))
    assert words.eos_token_id == words.encode("<|endoftext|>")[0]
    assert words.decode(words.encode("the quick brown fox")) == "the quick brown fox"


def test_bad_tokenizer_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no tokenizer file"):
        SimConfig(tokenizer=tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read tokenizer"):
        load_tokenizer(tmp_path / "bad")
    folder = _bpe(tmp_path / "noeos", config=False)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "</s>"]
    data["model"]["vocab"].pop("</s>")
    (folder / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="no EOS token"):
        load_tokenizer(folder)
    with pytest.raises(ConfigError, match="must be a path"):
        SimConfig(tokenizer=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["bpe", "wordlevel"])
async def test_vllm_flavour_counts_with_the_file(tmp_path: Path, kind: str) -> None:
    folder = _bpe(tmp_path / kind) if kind == "bpe" else _wordlevel(tmp_path / kind)
    tok = load_tokenizer(folder)
    async with serve("vllm", zero_latency=True, tokenizer=str(folder)) as c, \
            aiohttp.ClientSession() as s:
        for prompt in PROMPTS:
            want = _encode(folder, prompt)
            st, body = await post(s, c.url + "/v1/completions", {
                "model": "sim-model", "prompt": prompt, "max_tokens": 24, "ignore_eos": True,
                "return_token_ids": True, "logprobs": 2})
            assert st == 200, body
            assert body["usage"]["prompt_tokens"] == len(want)
            assert body["usage"]["completion_tokens"] == 24
            ch = body["choices"][0]
            assert ch["prompt_token_ids"] == want
            ids = ch["token_ids"]
            assert len(ids) == 24 and all(not tok.is_special(i) for i in ids)
            assert ch["text"] == tok.decode(ids)
            assert "".join(ch["logprobs"]["tokens"]) == ch["text"] or kind == "wordlevel"
            st, tk = await post(s, c.url + "/tokenize", {"prompt": prompt})
            assert st == 200 and tk["tokens"] == want and tk["count"] == len(want)
            st, dt = await post(s, c.url + "/detokenize", {"tokens": want})
            assert st == 200 and dt["prompt"] == tok.decode(want)
        # streamed deltas add up to the whole text, and usage counts the same
        st, events = await sse(s, c.url + "/v1/completions", {
            "model": "sim-model", "prompt": PROMPTS[0], "max_tokens": 16, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}})
        assert st == 200 and events[-1] == "[DONE]"
        text = "".join(e["choices"][0]["text"] for e in events[:-1] if e.get("choices"))
        usage = next(e["usage"] for e in events[:-1] if e.get("usage"))
        assert usage["prompt_tokens"] == len(_encode(folder, PROMPTS[0]))
        assert usage["completion_tokens"] == 16 and text


async def test_sglang_flavour_counts_with_the_file(tmp_path: Path) -> None:
    folder = _bpe(tmp_path / "bpe")
    tok = load_tokenizer(folder)
    async with serve("sglang", zero_latency=True, tokenizer=folder) as c, \
            aiohttp.ClientSession() as s:
        for prompt in PROMPTS:
            st, body = await post(s, c.url + "/generate", {
                "text": prompt, "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}})
            assert st == 200, body
            meta = body["meta_info"]
            assert meta["prompt_tokens"] == len(_encode(folder, prompt))
            assert meta["completion_tokens"] == 12
            assert body["text"] == tok.decode(body["output_ids"])
        # without ignore_eos the output ends with the file's EOS (id 1)
        st, body = await post(s, c.url + "/generate", {
            "text": "hello", "sampling_params": {"max_new_tokens": 400, "temperature": 0}})
        assert st == 200 and body["meta_info"]["finish_reason"]["type"] in ("stop", "length")
        if body["meta_info"]["finish_reason"]["type"] == "stop":
            assert body["output_ids"][-1] == 1


async def test_answer_model_and_stop_strings_with_a_file(tmp_path: Path) -> None:
    folder = _bpe(tmp_path / "bpe")
    tok = load_tokenizer(folder)
    async with serve("vllm", zero_latency=True, tokenizer=folder, accuracy=1.0) as c, \
            aiohttp.ClientSession() as s:
        st, body = await post(s, c.url + "/v1/completions", {
            "model": "sim-model", "prompt": "Question: What is 17+25?", "max_tokens": 40,
            "temperature": 0, "return_token_ids": True})
        assert st == 200
        assert body["choices"][0]["text"] == "The answer is 42."
        assert body["choices"][0]["token_ids"][-1] == tok.eos_token_id
        st, body = await post(s, c.url + "/v1/completions", {
            "model": "sim-model", "prompt": "Question: What is 17+25?", "max_tokens": 40,
            "temperature": 0, "stop": ["is 4"]})
        assert st == 200
        assert body["choices"][0]["text"] == "The answer "
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["choices"][0]["stop_reason"] == "is 4"


def test_cli_takes_a_tokenizer(tmp_path: Path) -> None:
    import argparse

    from rollout_kit.sim._cli import _config, add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    folder = _bpe(tmp_path / "bpe")
    args = parser.parse_args(["--api", "vllm", "--tokenizer", str(folder)])
    assert _config(args).tokenizer == str(folder)
    bad = parser.parse_args(["--tokenizer", str(tmp_path / "nope")])
    assert run(bad) == 2
    out = subprocess.run([sys.executable, "-m", "rollout_kit", "sim", "--tokenizer",
                          str(tmp_path / "nope")], capture_output=True, text=True, timeout=30,
                         check=False)
    assert out.returncode == 2 and "no tokenizer file" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
