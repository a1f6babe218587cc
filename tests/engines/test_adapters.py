"""Request building and response parsing of the SGLang and vLLM adapters (recorded bodies)."""

from __future__ import annotations

import math

import pytest

from rollout_kit import GenerationConfig
from rollout_kit.engines import SGLangBackend
from rollout_kit.engines._backend import as_stop_reason
from rollout_kit.engines._flavours.vllm import VLLMBackend, token_id_of

SG = SGLangBackend()
VL = VLLMBackend()


def test_sglang_request_ids_and_sampling() -> None:
    g = GenerationConfig(max_new_tokens=9, greedy=True, stop=("</a>",), stop_token_ids=(7,),
                         top_k=5, seed=3)
    body = SG.build_request(input_ids=[1, 2], text=None, gconfig=g, max_new_tokens=4,
                            stream=False, model="m")
    assert body["input_ids"] == [1, 2] and "text" not in body
    sp = body["sampling_params"]
    assert sp["max_new_tokens"] == 4 and sp["temperature"] == 0.0 and sp["top_k"] == 5
    assert sp["stop"] == ["</a>"] and sp["stop_token_ids"] == [7] and sp["sampling_seed"] == 3
    assert body["return_logprob"] is True and body["stream"] is False


def test_sglang_request_text_asks_prompt_ids() -> None:
    body = SG.build_request(input_ids=None, text="hi", gconfig=GenerationConfig(),
                            max_new_tokens=4, stream=True, model=None)
    assert body["text"] == "hi" and body["return_prompt_token_ids"] is True
    assert "stop" not in body["sampling_params"]
    assert "sampling_seed" not in body["sampling_params"]


SG_FULL = {
    "text": "2 + 2 = 4.",
    "output_ids": [17, 488, 151645],
    "meta_info": {
        "id": "x", "finish_reason": {"type": "stop", "matched": 151645}, "prompt_tokens": 15,
        "weight_version": "default", "input_token_logprobs": [[None, 198, None]],
        "output_token_logprobs": [[-0.5, 17, None], [-0.25, 488, None], [-0.125, 151645, None]],
        "completion_tokens": 3, "cached_tokens": 4, "e2e_latency": 0.21,
        "sim_timing": {"e2e_s": 0.2, "queue_s": 0.01},
    },
}


def test_sglang_parse_full() -> None:
    seg = SG.parse_response(SG_FULL)
    assert seg.tokens == [17, 488, 151645]
    assert seg.logprobs == [-0.5, -0.25, -0.125]
    assert seg.finish == "stop" and seg.text == "2 + 2 = 4." and seg.cached_tokens == 4
    assert seg.server_timing == {"e2e_s": 0.2, "queue_s": 0.01, "e2e_latency": 0.21}


def test_sglang_049_without_output_ids_falls_back_to_logprob_triples() -> None:
    body = {"text": "x", "meta_info": {**SG_FULL["meta_info"],  # type: ignore[dict-item]
                                      "finish_reason": {"type": "length", "length": 3}}}
    seg = SG.parse_response(body)
    assert seg.tokens == [17, 488, 151645] and seg.finish == "length"


def test_sglang_abort_before_prefill_is_empty() -> None:
    body = {"text": "", "meta_info": {"id": "r", "finish_reason": {
        "type": "abort", "message": "Abort before prefill"}, "prompt_tokens": 0,
        "completion_tokens": 0}}
    seg = SG.parse_response(body)
    assert seg.tokens == [] and seg.finish == "abort" and seg.message == "Abort before prefill"


@pytest.mark.parametrize("body", [
    [SG_FULL],
    {"text": "x"},
    {"meta_info": {"finish_reason": None, "output_token_logprobs": []}},
    {"output_ids": [1, 2], "meta_info": {"finish_reason": {"type": "stop"},
                                          "output_token_logprobs": [[-1.0, 1, None]]}},
    {"output_ids": [1], "meta_info": {"finish_reason": {"type": "weird"}}},
])
def test_sglang_parse_rejects_off_api_bodies(body: object) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        SG.parse_response(body)


def _sg_event(ids: list[int] | None, lps: list[list[object]], completed: int | None,
              text: str, finish: object = None) -> dict[str, object]:
    meta: dict[str, object] = {"finish_reason": finish, "output_token_logprobs": lps,
                               "prompt_tokens": 3}
    if completed is not None:
        meta["completion_tokens"] = completed
    ev: dict[str, object] = {"text": text, "meta_info": meta}
    if ids is not None:
        ev["output_ids"] = ids
    return ev


TOKS = [10, 11, 12, 13, 14]
LPS = [[-0.1 * (i + 1), t, None] for i, t in enumerate(TOKS)]
TEXTS = ["a", "b", "c", "d", "e"]
STOP = {"type": "stop", "matched": 14}


def _feed(events: list[dict[str, object]]) -> tuple[list[int], list[float], str | None, int]:
    parser = SG.stream_parser()
    for i, ev in enumerate(events):
        parser.feed(ev, 1000 * i)
    seg = parser.result()
    return seg.tokens, seg.logprobs, seg.text, len(seg.chunks)


@pytest.mark.parametrize("with_count", [True, False])
def test_sglang_stream_cumulative_ids(with_count: bool) -> None:  # 0.5.23 default
    events = [_sg_event(TOKS[: i + 1], LPS[: i + 1], i + 1 if with_count else None,
                        "".join(TEXTS[: i + 1]), STOP if i == 4 else None) for i in range(5)]
    toks, lps, text, chunks = _feed(events)
    assert toks == TOKS and lps == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5])
    assert text == "abcde" and chunks == 5


def test_sglang_stream_delta_ids_cumulative_logprobs() -> None:  # 0.5.2
    events = [_sg_event([TOKS[i]], LPS[: i + 1], i + 1, "".join(TEXTS[: i + 1]),
                        STOP if i == 4 else None) for i in range(5)]
    toks, lps, text, _ = _feed(events)
    assert toks == TOKS and lps == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5])
    assert text == "abcde"


def test_sglang_stream_incremental_everything_delta_multi_token_chunks() -> None:
    events = [_sg_event(TOKS[0:2], LPS[0:2], 2, "ab"),
              _sg_event(TOKS[2:4], LPS[2:4], 4, "cd"),
              _sg_event(TOKS[4:], LPS[4:], 5, "e", STOP)]
    toks, lps, text, chunks = _feed(events)
    assert toks == TOKS and len(lps) == 5 and text == "abcde" and chunks == 3


def test_sglang_stream_049_no_ids_cumulative_logprobs() -> None:
    events = [_sg_event(None, LPS[: i + 1], i + 1, "".join(TEXTS[: i + 1]),
                        STOP if i == 4 else None) for i in range(5)]
    toks, _, _, _ = _feed(events)
    assert toks == TOKS


def test_sglang_stream_inconsistent_count_is_an_error() -> None:
    parser = SG.stream_parser()
    parser.feed(_sg_event([1, 2], LPS[:2], 2, "ab"), 0)
    with pytest.raises(ValueError, match="completion_tokens"):
        parser.feed(_sg_event([1, 2, 3, 4, 5], LPS, 3, "abc"), 1)


def test_vllm_request_fields() -> None:
    g = GenerationConfig(max_new_tokens=9, stop=("x",), seed=1)
    body = VL.build_request(input_ids=[5, 6], text=None, gconfig=g, max_new_tokens=7,
                            stream=True, model="sim")
    assert body["prompt"] == [5, 6] and body["max_tokens"] == 7 and body["model"] == "sim"
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    assert body["return_token_ids"] is True and body["stream_options"] == {"include_usage": True}
    assert body["stop"] == ["x"] and body["seed"] == 1
    plain = VL.build_request(input_ids=None, text="hi", gconfig=GenerationConfig(),
                             max_new_tokens=3, stream=False, model=None)
    assert plain["prompt"] == "hi" and "model" not in plain and "stream_options" not in plain


def test_without_logprobs_both_flavours_send_what_the_bench_tools_send() -> None:
    g = GenerationConfig(logprobs=False)
    vl = VL.build_request(input_ids=[5, 6], text=None, gconfig=g, max_new_tokens=7,
                          stream=True, model="sim")
    assert "logprobs" not in vl and "return_tokens_as_token_ids" not in vl
    assert vl["return_token_ids"] is True  # the output ids still come back (vLLM >= 0.10.2)
    sg = SG.build_request(input_ids=[5, 6], text=None, gconfig=g, max_new_tokens=7,
                          stream=True, model=None)
    assert sg["return_logprob"] is False


VL_FULL = {
    "id": "cmpl-1", "object": "text_completion", "model": "m",
    "choices": [{
        "index": 0, "text": "2 + 2",
        "logprobs": {"text_offset": [0, 1], "token_logprobs": [-0.5, -0.25],
                     "tokens": ["token_id:17", "token_id:488"], "top_logprobs": []},
        "finish_reason": "length", "stop_reason": None, "token_ids": [17, 488],
        "prompt_logprobs": None, "prompt_token_ids": [1, 2, 3],
    }],
    "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2,
              "prompt_tokens_details": {"cached_tokens": 2}},
    "sim_timing": {"e2e_s": 0.5},
}


def test_vllm_parse_full() -> None:
    seg = VL.parse_response(VL_FULL)
    assert seg.tokens == [17, 488] and seg.logprobs == [-0.5, -0.25]
    assert seg.finish == "length" and seg.prompt_ids == [1, 2, 3] and seg.cached_tokens == 2
    assert seg.server_timing == {"e2e_s": 0.5} and seg.text == "2 + 2"


def test_vllm_token_id_strings_only() -> None:
    choice = dict(VL_FULL["choices"][0])  # type: ignore[index]
    del choice["token_ids"]
    seg = VL.parse_response({**VL_FULL, "choices": [choice]})
    assert seg.tokens == [17, 488]
    assert token_id_of("token_id:297") == 297


def test_vllm_stream_chunks_and_usage() -> None:
    parser = VL.stream_parser()
    chunks = [
        {"choices": [{"index": 0, "text": "2", "logprobs": {"tokens": ["token_id:17"],
                                                            "token_logprobs": [-0.5]},
                      "finish_reason": None, "prompt_token_ids": [1, 2], "token_ids": [17]}],
         "usage": None},
        {"choices": [{"index": 0, "text": " +", "logprobs": None, "finish_reason": "stop",
                      "token_ids": [488, 2]}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3},
         "sim_timing": {"e2e_s": 0.1}},
    ]
    for i, c in enumerate(chunks):
        parser.feed(c, i)
    seg = parser.result()
    assert seg.tokens == [17, 488, 2] and seg.logprobs[0] == -0.5
    assert math.isnan(seg.logprobs[1]) and seg.finish == "stop" and seg.text == "2 +"
    assert seg.prompt_ids == [1, 2] and seg.prompt_tokens == 2
    assert seg.server_timing == {"e2e_s": 0.1} and [n for _, n in seg.chunks] == [1, 2]


def test_stop_reason_mapping() -> None:
    assert as_stop_reason("repetition") == "stop"
    with pytest.raises(ValueError):
        as_stop_reason("error")


@pytest.mark.parametrize("bad", [2**64, 1.5e19, -1, True, "7"])
def test_token_ids_outside_int64_or_not_ints_are_rejected(bad: object) -> None:
    # found by the reliability fuzzer: such an id would later break the continuation request
    sg = {"text": "", "output_ids": [1, bad],
          "meta_info": {"finish_reason": {"type": "abort"}, "output_token_logprobs": []}}
    with pytest.raises(ValueError, match="token ids"):
        SGLangBackend().parse_response(sg)
    vl = {"choices": [{"index": 0, "text": "", "finish_reason": "length", "token_ids": [bad]}]}
    with pytest.raises(ValueError, match="token ids"):
        VLLMBackend().parse_response(vl)
