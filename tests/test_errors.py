"""The exception tree."""

from __future__ import annotations

import inspect

import pytest

from rollout_kit import errors


def test_every_exported_class_is_a_rolloutkit_error() -> None:
    classes = [getattr(errors, n) for n in errors.__all__ if inspect.isclass(getattr(errors, n))]
    assert len(classes) == len(errors.__all__) - 1  # all but truncate
    for cls in classes:
        assert issubclass(cls, errors.RolloutKitError), cls
    assert errors.__all__ == sorted(errors.__all__)


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
    for name in errors.__all__:
        if name != "truncate":
            assert name in doc, name


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
