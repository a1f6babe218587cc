"""Scenario 10: bad input at every public entry point gets a clear ``RolloutKitError``.

One table: (entry point, the call, the error class, a fragment the message must contain).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_kit import (
    ConfigError,
    DuplicateTaskIdError,
    EngineConfig,
    ExecutorConfig,
    GenerationConfig,
    InvalidTaskIdError,
    ModelRequest,
    RetryPolicy,
    RolloutController,
    RolloutKitError,
    SingleTurnWorkflow,
    TaskIdGenerator,
    Timeouts,
    TraceSchemaError,
    UnknownTaskIdError,
)
from rollout_kit.engines import RemoteSGLangEngine, RemotevLLMEngine
from rollout_kit.report import write_report
from rollout_kit.sim import SimServer
from rollout_kit.tracing import Tracer, load_traces

pytestmark = pytest.mark.timeout(30)

ADDR = "127.0.0.1:9"  # never contacted: every case fails before any I/O


def reward(prompt: str, completion: str, prompt_ids: list[int],
           completion_ids: list[int], **data: Any) -> float:
    return 1.0


WF = SingleTurnWorkflow(reward)


class NotAWorkflow:
    def run(self) -> None: ...


class NeedsArg:
    def __init__(self, x: int) -> None:
        self.x = x

    async def arun_episode(self, engine: Any, data: Any) -> Any:
        return None


@pytest.fixture
def ctl() -> Iterator[RolloutController]:
    c = RolloutController(sglang=[ADDR])
    yield c
    c.close()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "pickle.jsonl").write_bytes(b"\x80\x04\x95\x00\x00\x00")
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("keep me")
    return {"dir": tmp_path, "empty": tmp_path / "empty", "notes": tmp_path / "notes.txt",
            "pickle": tmp_path / "pickle.jsonl", "full": full}


Case = tuple[str, Callable[..., Any], type[RolloutKitError], str]

CTL_CASES: list[Case] = [
    ("submit task_id=-1", lambda c: c.submit({"prompt": "x"}, WF, task_id=-1),
     InvalidTaskIdError, "non-negative"),
    ("submit task_id=True", lambda c: c.submit({"prompt": "x"}, WF, task_id=True),
     InvalidTaskIdError, "bool"),
    ("submit task_id=1.0", lambda c: c.submit({"prompt": "x"}, WF, task_id=1.0),
     InvalidTaskIdError, "float"),
    ("submit task_id='3'", lambda c: c.submit({"prompt": "x"}, WF, task_id="3"),
     InvalidTaskIdError, "str"),
    ("submit duplicate task_id", lambda c: [c.submit({"prompt": "x"}, WF, task_id=7)
                                           for _ in range(2)],
     DuplicateTaskIdError, "7"),
    ("wait_for unknown id", lambda c: c.wait_for(12345, timeout=1), UnknownTaskIdError,
     "never submitted"),
    ("peek unknown id", lambda c: c.peek(99), UnknownTaskIdError, "99"),
    ("wait(count=-1)", lambda c: c.wait(-1), ConfigError, "count"),
    ("wait(more than outstanding)", lambda c: c.wait(3, timeout=1), ConfigError,
     "outstanding"),
    ("workflow = 42", lambda c: c.submit({}, 42), ConfigError, "not a workflow"),
    ("workflow = missing module", lambda c: c.submit({}, "no_such_mod_xyz:Flow"),
     ConfigError, "cannot import"),
    ("workflow = missing name", lambda c: c.submit({}, "rollout_kit._workflows:Nope"),
     ConfigError, "no attribute"),
    ("workflow without arun_episode", lambda c: c.submit({}, NotAWorkflow), ConfigError,
     "arun_episode"),
    ("workflow class, bad kwargs", lambda c: c.submit({}, NeedsArg, {"y": 1}), ConfigError,
     "NeedsArg"),
    ("workflow_kwargs with instance", lambda c: c.submit({}, WF, {"a": 1}), ConfigError,
     "workflow_kwargs"),
    ("workflow_kwargs not a dict", lambda c: c.submit({}, NeedsArg, [1]), ConfigError,
     "dict"),
    ("should_accept_fn = 5", lambda c: c.submit({}, WF, should_accept_fn=5), ConfigError,
     "callable"),
    ("submit(worker=unknown)", lambda c: c.submit({}, WF, worker="nobody"), ConfigError,
     "no worker named"),
    ("prepare_batch(batch_size=0)", lambda c: c.prepare_batch([{}], WF, 0), ConfigError,
     "batch_size"),
    ("set_version(-1)", lambda c: c.set_version(-1), ConfigError, "version"),
]

PLAIN_CASES: list[Case] = [
    ("GenerationConfig(temperature=-1)", lambda: GenerationConfig(temperature=-1),
     ConfigError, "temperature"),
    ("GenerationConfig(top_p=0)", lambda: GenerationConfig(top_p=0), ConfigError, "top_p"),
    ("GenerationConfig(max_new_tokens=0)", lambda: GenerationConfig(max_new_tokens=0),
     ConfigError, "max_new_tokens"),
    ("GenerationConfig(n_samples=True)", lambda: GenerationConfig(n_samples=True),
     ConfigError, "n_samples"),
    ("GenerationConfig(top_k=0)", lambda: GenerationConfig(top_k=0), ConfigError, "top_k"),
    ("GenerationConfig(logprobs=1)", lambda: GenerationConfig(logprobs=1), ConfigError,  # type: ignore[arg-type]
     "logprobs must be a bool"),
    ("GenerationConfig(stop=[''])", lambda: GenerationConfig(stop=[""]),  # type: ignore[arg-type]
     ConfigError, "stop"),
    ("GenerationConfig(stop=5)", lambda: GenerationConfig(stop=5),  # type: ignore[arg-type]
     ConfigError, "stop"),
    ("GenerationConfig(stop_token_ids=[-1])", lambda: GenerationConfig(stop_token_ids=[-1]),  # type: ignore[arg-type]
     ConfigError, "stop_token_ids"),
    ("GenerationConfig(temperature=nan)", lambda: GenerationConfig(temperature=float("nan")),
     ConfigError, "temperature"),
    ("GenerationConfig.new(bogus=1)", lambda: GenerationConfig().new(bogus=1), ConfigError,
     "bogus"),
    ("ModelRequest() without prompt", lambda: ModelRequest(), ConfigError, "prompt"),
    ("ModelRequest(input_ids=[-1])", lambda: ModelRequest(input_ids=[-1]), ConfigError,
     "input_ids"),
    ("Timeouts(request=0)", lambda: Timeouts(request=0), ConfigError, "request"),
    ("RetryPolicy(max_retries=-1)", lambda: RetryPolicy(max_retries=-1), ConfigError,
     "max_retries"),
    ("EngineConfig(routing='random')", lambda: EngineConfig(routing="random"),  # type: ignore[arg-type]
     ConfigError, "routing"),
    ("EngineConfig(max_connections=-1)", lambda: EngineConfig(max_connections=-1),
     ConfigError, "max_connections"),
    ("ExecutorConfig(max_concurrent_rollouts=0)",
     lambda: ExecutorConfig(max_concurrent_rollouts=0), ConfigError, "max_concurrent"),
    ("engine address ''", lambda: RemoteSGLangEngine(""), ConfigError, "host:port"),
    ("engine addresses []", lambda: RemotevLLMEngine([]), ConfigError, "host:port"),
    ("engine address None", lambda: RemoteSGLangEngine(None), ConfigError,  # type: ignore[arg-type]
     "host:port"),
    ("engine address [5]", lambda: RemoteSGLangEngine([5]), ConfigError,  # type: ignore[list-item]
     "host:port"),
    ("engine address without port", lambda: RemoteSGLangEngine("localhost"), ConfigError,
     "host:port"),
    ("engine address port 99999", lambda: RemoteSGLangEngine("127.0.0.1:99999"), ConfigError,
     "host:port"),
    ("engine address duplicated", lambda: RemoteSGLangEngine([ADDR, ADDR]), ConfigError,
     "duplicate"),
    ("engine config = dict", lambda: RemoteSGLangEngine(ADDR, config={}),  # type: ignore[arg-type]
     ConfigError, "EngineConfig"),
    ("controller without engines", lambda: RolloutController(), ConfigError, "needs engines"),
    ("controller engines=[object()]", lambda: RolloutController([object()]),  # type: ignore[list-item]
     ConfigError, "InferenceEngine"),
    ("controller executor_config = dict",
     lambda: RolloutController(sglang=[ADDR], executor_config={}),  # type: ignore[arg-type]
     ConfigError, "ExecutorConfig"),
    ("TaskIdGenerator.claim('x')", lambda: TaskIdGenerator().claim("x"),
     InvalidTaskIdError, "str"),
    ("SimServer(port=70000)", lambda: SimServer(port=70000), ConfigError, "port"),
    ("SimServer(api='tgi')", lambda: SimServer("tgi"), ConfigError, "api"),  # type: ignore[arg-type]
    ("SingleTurnWorkflow(reward_fn=5)", lambda: SingleTurnWorkflow(5),  # type: ignore[arg-type]
     ConfigError, "callable"),
    ("Tracer(flush_threshold=0)", lambda: Tracer(flush_threshold=0), ConfigError,
     "flush_threshold"),
]

FILE_CASES: list[Case] = [
    # a missing folder is made (as --result-dir's is); a file where the folder should be is not
    ("Tracer(path=<a file>/t.jsonl)", lambda f: Tracer(path=f["notes"] / "t.jsonl"),
     ConfigError, "cannot write"),
    ("Tracer(path=<a folder>)", lambda f: Tracer(path=f["empty"]), ConfigError, "cannot write"),
    ("controller trace_path=<a file>/t.jsonl",
     lambda f: RolloutController(sglang=[ADDR], trace_path=f["notes"] / "t.jsonl"),
     ConfigError, "cannot write"),
    ("load_traces(<missing file>)", lambda f: load_traces(f["dir"] / "nope.jsonl"),
     ConfigError, "does not exist"),
    ("load_traces(<folder without traces>)", lambda f: load_traces(f["empty"]), ConfigError,
     "no trace files"),
    ("load_traces(<glob matching nothing>)", lambda f: load_traces(str(f["dir"] / "*.zzz")),
     ConfigError, "no trace files"),
    ("load_traces(<text file>)", lambda f: load_traces(f["notes"]), TraceSchemaError,
     "not JSON"),
    ("load_traces(<pickle bytes>)", lambda f: load_traces(f["pickle"]), TraceSchemaError,
     "trace"),
    ("load_traces(5)", lambda f: load_traces(5), ConfigError, "path"),  # type: ignore[arg-type]
    ("write_report(out=<a file>)", lambda f: write_report(_empty_traces(), f["notes"]),
     ConfigError, "not a folder"),
    ("write_report(out=<non-empty folder>)", lambda f: write_report(_empty_traces(), f["full"]),
     ConfigError, "--force"),
]


def _empty_traces() -> Any:
    return Tracer().frames()


def _check(call: Callable[[], Any], err: type[RolloutKitError], fragment: str) -> None:
    with pytest.raises(err) as info:
        call()
    msg = str(info.value)
    assert fragment.lower() in msg.lower(), msg
    assert len(msg) < 1000, "error messages stay short"


@pytest.mark.parametrize(("name", "call", "err", "fragment"), CTL_CASES,
                         ids=[c[0] for c in CTL_CASES])
def test_controller_entry_points(ctl: RolloutController, name: str, call: Callable[..., Any],
                                 err: type[RolloutKitError], fragment: str) -> None:
    _check(lambda: call(ctl), err, fragment)


@pytest.mark.parametrize(("name", "call", "err", "fragment"), PLAIN_CASES,
                         ids=[c[0] for c in PLAIN_CASES])
def test_constructors(name: str, call: Callable[[], Any], err: type[RolloutKitError],
                      fragment: str) -> None:
    _check(call, err, fragment)


@pytest.mark.parametrize(("name", "call", "err", "fragment"), FILE_CASES,
                         ids=[c[0] for c in FILE_CASES])
def test_file_paths(files: dict[str, Path], name: str, call: Callable[..., Any],
                    err: type[RolloutKitError], fragment: str) -> None:
    _check(lambda: call(files), err, fragment)
    assert (files["full"] / "x").read_text() == "keep me"


@pytest.mark.parametrize("data", [5, None, {}, {"prompt": ""}, {"prompt": 3}, ["a"]],
                         ids=repr)
async def test_bad_data_is_refused_at_submit_with_a_config_error(data: Any) -> None:
    """The workflow's validate(data) runs in submit: ConfigError in the caller, no id spent."""
    c = RolloutController(sglang=[ADDR])  # never initialized: no server is contacted
    try:
        with pytest.raises(ConfigError, match="data") as info:
            c.submit(data, WF)
        assert c.ids.peek == 0 and c.stats()["submitted"] == 0
    finally:
        await c.close_async()
    assert "prompt" in str(info.value)
