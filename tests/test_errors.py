"""The exception tree."""

from __future__ import annotations

import inspect

import pytest

import rollout_kit
from rollout_kit import _errors as errors


def _error_classes() -> list[type]:
    # defined there: rollout_kit gives the ones it has loaded its own name (__module__)
    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if c.__module__ in (errors.__name__, rollout_kit.__name__)]


def test_one_tree_all_of_it_exported() -> None:
    # every class of the module is a RolloutKitError, and rollout_kit exports each one
    classes = _error_classes()
    assert len(classes) >= 25
    for cls in classes:
        assert issubclass(cls, errors.RolloutKitError), cls
        assert getattr(rollout_kit, cls.__name__) is cls and cls.__name__ in rollout_kit.__all__


@pytest.mark.parametrize(("cls", "base"), [
    (errors.InvalidTaskIdError, ValueError),
    (errors.DuplicateTaskIdError, ValueError),
    (errors.UnknownTaskIdError, KeyError),
    (errors.ConfigError, ValueError),
    (errors.TraceSchemaError, ValueError),
    (errors.EngineTimeoutError, TimeoutError),
    (errors.RolloutTimeoutError, TimeoutError),
    (errors.SyncInLoopError, RuntimeError),
    (errors.TraceStateError, errors.TraceError),
    (errors.EngineTimeoutError, errors.EngineConnectionError),
    (errors.EngineOverloadedError, errors.EngineStatusError),
    (errors.EngineStatusError, errors.EngineError),
    (errors.InvalidTaskIdError, errors.TaskIdError),
])
def test_builtin_and_tree_bases(cls: type, base: type) -> None:
    assert issubclass(cls, base)


def test_docstring_draws_every_class() -> None:
    doc = errors.__doc__ or ""
    for cls in _error_classes():
        assert cls.__name__ in doc, cls.__name__


def test_truncate() -> None:
    assert errors.truncate("abc", 5) == "abc"
    out = errors.truncate("x" * 350)
    assert out.startswith("x" * 300) and out.endswith("[50 more chars]")
    assert errors.truncate(12345, 3) == "123… [2 more chars]"


def test_status_error_carries_fields_and_truncated_body() -> None:
    e = errors.EngineOverloadedError("busy", status=503, body="b" * 1000,
                                     server="127.0.0.1:1", endpoint="/generate",
                                     retry_after=1.5)
    assert e.status == 503 and len(e.body) < 400 and e.retry_after == 1.5
    assert e.server == "127.0.0.1:1" and e.endpoint == "/generate"
    assert str(errors.UnknownTaskIdError("task 3 unknown")) == "task 3 unknown"
    w = errors.WorkflowError("failed", task_id=4, traceback="tb")
    assert w.task_id == 4 and w.traceback == "tb"


ENGINE_REASONS = [
    (errors.NoHealthyServerError("x", servers=["127.0.0.1:1"]), "no_healthy_server",
     "no healthy server (127.0.0.1:1)"),
    (errors.EngineConnectionError("x", server="h:2", endpoint="/generate"), "connection_error",
     "connection error (h:2)"),
    (errors.EngineTimeoutError("x", server="h:2"), "timeout", "timeout (h:2)"),
    (errors.EngineServerError("x", status=500, server="h:2"), "server_error",
     "server error HTTP 500 (h:2)"),
    (errors.EngineOverloadedError("x", status=503, server="h:2"), "server_overloaded",
     "server overloaded HTTP 503 (h:2)"),
    (errors.EngineBadRequestError("x", status=400), "bad_request", "bad request HTTP 400"),
    (errors.EngineStatusError("x", status=302, server="h:2"), "http_error",
     "HTTP error HTTP 302 (h:2)"),
    (errors.EngineResponseError("x", server="h:2"), "bad_response", "bad response (h:2)"),
    (errors.EngineError("x"), "engine_error", "engine error"),
    (errors.NoHealthyServerError("x", servers=[f"h:{i}" for i in range(5)]),
     "no_healthy_server", "no healthy server (h:0, h:1, h:2 +2 more)"),
]


@pytest.mark.parametrize(("err", "reason", "brief"), ENGINE_REASONS,
                         ids=[f"{type(c[0]).__name__}-{c[1]}" for c in ENGINE_REASONS])
def test_engine_errors_carry_a_failure_reason_and_a_brief(
        err: errors.EngineError, reason: str, brief: str) -> None:
    assert err.failure_reason == type(err).failure_reason == reason
    assert err.brief == brief
    assert reason in (errors.__doc__ or "")  # documented in the table


@pytest.mark.parametrize("err", [c[0] for c in ENGINE_REASONS],
                         ids=[type(c[0]).__name__ for c in ENGINE_REASONS])
def test_engine_errors_survive_pickling(err: errors.EngineError) -> None:
    import pickle

    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.args == err.args
    assert back.__dict__ == err.__dict__ and back.brief == err.brief
