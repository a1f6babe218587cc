"""Security defaults: loopback binding, secret API keys, truncated payloads, text-free traces,
no code evaluation when loading traces, CLIs that do not overwrite output folders."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rollout_kit import (
    EngineConfig,
    EngineError,
    GenerationConfig,
    ModelRequest,
    RetryPolicy,
    RolloutController,
    RolloutKitError,
    SingleTurnWorkflow,
    Timeouts,
    TraceSchemaError,
)
from rollout_kit._cli import main as cli_main
from rollout_kit.sim import FaultPlan, SimServer, serve
from rollout_kit.sim._cli import add_arguments as sim_add_arguments
from rollout_kit.tracing import Tracer, load_traces

from .conftest import TOK, make_engine

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-rollout-kit-SECRET-4242"


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return 1.0


async def test_simulator_binds_loopback_by_default() -> None:
    import argparse

    assert SimServer().host == "127.0.0.1"
    parser = argparse.ArgumentParser()
    sim_add_arguments(parser)
    assert parser.parse_args([]).host == "127.0.0.1"
    async with serve("vllm", 2) as cluster:
        for s in cluster:
            assert s._runner is not None
            assert all(addr[0] == "127.0.0.1" for addr in s._runner.addresses)


async def test_api_key_never_leaks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = dict(api_key=SECRET, retry=RetryPolicy(max_retries=1, initial_delay=0.01),
               timeouts=Timeouts(request=2, total=5, setup=2, health=1))
    assert SECRET not in repr(EngineConfig(api_key=SECRET))
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=4), tokenizer=TOK)
    trace = tmp_path / "t.jsonl"
    texts: list[str] = []
    async with serve("sglang", 1, time_scale=0.01,
                     faults=FaultPlan(error_rate=0.5, error_statuses=(500,), seed=1)) as cluster, \
            make_engine("sglang", cluster.addresses, **cfg) as engine:
        texts += [repr(engine), repr(engine.config), repr(engine._http), str(engine.router)]
        async with RolloutController(engine, trace_path=trace) as ctl:
            results = await ctl.rollout_batch_async([{"prompt": f"q{i}"} for i in range(20)],
                                                    wf, timeout=30)
            texts.append(repr(ctl))
            frames = [ctl.traces(), ctl.sessions(), ctl.spans()]
        await cluster[0].stop()  # connection errors too
        with pytest.raises(EngineError) as info:
            await engine.generate_async(ModelRequest(input_ids=[1, 2]))
        texts += [str(info.value), repr(info.value)]
    assert any(r.status == "failed" for r in results), "no error path was exercised"
    for r in results:
        texts += [repr(r), str(r.error), r.traceback or "", repr(r.error)]
    texts += [df.to_csv() for df in frames]
    texts.append(trace.read_text())
    texts += [rec.getMessage() for rec in caplog.records]
    leaks = [t[:200] for t in texts if SECRET in t]
    assert not leaks, leaks


async def test_error_messages_truncate_payloads() -> None:
    huge = "X" * 100_000

    async def handler(_: web.Request) -> web.Response:
        return web.Response(status=500, text=huge)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/generate", handler)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    addr = f"127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with make_engine("sglang", [addr], retry=RetryPolicy(max_retries=0)) as engine:
            prompt = list(range(50_000))
            with pytest.raises(EngineError) as info:
                await engine.generate_async(ModelRequest(input_ids=prompt))
    finally:
        await runner.cleanup()
    err: Any = info.value
    assert err.status == 500 and addr in str(err)
    assert len(str(err)) < 1000 and len(err.body) < 1000
    assert "more chars" in str(err)  # says how much was cut


@pytest.mark.parametrize("record_text", [True, False])
async def test_record_text_off_keeps_text_out_of_traces(tmp_path: Path,
                                                        record_text: bool) -> None:
    answer = "the-completion-text-0123"
    prompt = "the-prompt-text-4567"
    trace = tmp_path / "t.jsonl"
    wf = SingleTurnWorkflow(reward, GenerationConfig(max_new_tokens=64))  # server text
    async with serve("vllm", 1, time_scale=0.01, answer_fn=lambda _p: answer) as cluster, \
            make_engine("vllm", cluster.addresses, record_text=record_text) as engine, \
            RolloutController(engine, trace_path=trace) as ctl:
        [res] = await ctl.rollout_batch_async([{"prompt": prompt}], wf, timeout=20)
        sessions = ctl.sessions()
        dumped = "".join(df.to_csv() for df in (ctl.traces(), sessions, ctl.spans()))
    assert res.status == "accepted" and res.trajectory["completions"] == [answer]
    assert int(sessions["completion_tokens"].iloc[0]) > 0  # counts are always recorded
    assert int(sessions["prompt_tokens"].iloc[0]) > 0
    dumped += trace.read_text()
    assert prompt not in dumped  # prompts are never traced
    assert (answer in dumped) is record_text


def test_trace_loading_never_evaluates_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> Any:
            return (os.mkdir, (str(marker),))

    bad = tmp_path / "evil.jsonl"
    bad.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(TraceSchemaError):
        load_traces(bad)
    code = tmp_path / "code.jsonl"
    code.write_text('{"kind": "header", "format": "__import__(\'os\').mkdir(\'x\')"}\n')
    with pytest.raises(TraceSchemaError):
        load_traces(code)
    assert not marker.exists()
    import rollout_kit.tracing as tracing_pkg

    pkg = Path(tracing_pkg.__file__).parent
    for src in pkg.glob("*.py"):
        text = src.read_text()
        for needle in ("import pickle", "read_pickle", "eval(", "exec(", "marshal"):
            assert needle not in text, f"{src.name} uses {needle}"


def _write_trace(path: Path) -> None:
    t = Tracer(path=path)
    t.register_task(0)
    t.finalize(0, "accepted")
    t.flush()


@pytest.mark.timeout(120)
def test_clis_refuse_to_overwrite_output_folders(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    for argv in (["report", str(trace), "--out", "{out}", "--no-progress"],
                 ["demo", "--tasks", "3", "--n-samples", "1", "--time-scale", "0.01",
                  "--out", "{out}", "--no-progress"]):
        out = tmp_path / f"out-{argv[0]}"
        out.mkdir()
        (out / "keep.txt").write_text("mine")
        args = [a.replace("{out}", str(out)) for a in argv]
        code = _run_cli(args)
        assert code != 0, f"{argv[0]} wrote into a non-empty folder"
        cap = capsys.readouterr()
        assert "--force" in cap.out + cap.err
        assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
        assert _run_cli([*args, "--force"]) == 0
        assert len(list(out.iterdir())) > 1 and (out / "keep.txt").read_text() == "mine"


def _run_cli(args: list[str]) -> int:
    try:
        return cli_main(args)
    except RolloutKitError as exc:  # a CLI may also raise its clear error
        print(f"error: {exc}")
        return 2
