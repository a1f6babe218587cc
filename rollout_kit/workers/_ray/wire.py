"""What travels between the controller and a Ray worker actor, and how Ray is imported.

* :class:`Shipment`: a workflow spec ``(workflow, workflow_kwargs, should_accept_fn)``
  serialized once per submit or batch call (it is the ``payload`` of the call's
  :class:`~rollout_kit._executor.Recipe`), keyed by a hash of its bytes so a worker rebuilds
  each distinct spec once.
* :class:`RemoteOutcome`: what the actor returns for one task: the echoed id, the result
  and the task's trace record.

Nothing here imports Ray at import time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..._errors import ConfigError, SchedulerError, WorkflowError
from ..._io import Status

INSTALL_HINT = "pip install 'rollout-kit[ray]'"


def import_ray() -> Any:
    """Import Ray, or raise ``SchedulerError`` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise SchedulerError(
            f"RayScheduler needs Ray, which is not installed ({exc}); install the extra: "
            f"{INSTALL_HINT}"
        ) from None
    return ray


@dataclass(frozen=True, slots=True)
class Shipment:
    """A serialized ``(workflow, workflow_kwargs, should_accept_fn)``.

    Attributes:
        key: a hash of ``blob`` (the worker's cache key).
        blob: the cloudpickle bytes.
    """

    key: str
    blob: bytes


def _dumps(obj: object) -> bytes:
    from ray import cloudpickle

    blob: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    return blob


def ship(workflow: object, workflow_kwargs: dict[str, Any] | None,
         should_accept_fn: object) -> Shipment:
    """Serialize a workflow spec for the workers.

    Raises:
        ConfigError: a part cannot be serialized; the message names it.
    """
    try:
        blob = _dumps((workflow, workflow_kwargs, should_accept_fn))
    except Exception as first:
        what, obj, err = "workflow", workflow, first
        for name, part in (("workflow", workflow), ("workflow_kwargs", workflow_kwargs),
                           ("should_accept_fn", should_accept_fn)):
            try:
                _dumps(part)
            except Exception as inner:
                what, obj, err = name, part, inner
                break
        raise ConfigError(
            f"{what} {obj!r} cannot be serialized for Ray workers "
            f"({type(err).__name__}: {err}); make it picklable (no open sockets, locks, "
            "running loops) or create such members lazily inside arun_episode"
        ) from None
    return Shipment(hashlib.blake2b(blob, digest_size=16).hexdigest(), blob)


def shippable(error: BaseException | None) -> BaseException | None:
    """``error`` if it pickles, else a ``WorkflowError`` carrying its text."""
    if error is None:
        return None
    try:
        _dumps(error)
    except Exception:
        return WorkflowError(f"{type(error).__name__}: {error}")
    return error


@dataclass(slots=True)
class RemoteOutcome:
    """What a worker sends back for one task: the echoed id, the result and its trace.

    Attributes:
        task_id: the id the controller passed in (echoed).
        status, reason, error, traceback, trajectory: as in ``RolloutResult``.
        worker: the worker that ran the task.
        header: the worker tracer's header record (its clock anchor).
        record: the task's trace record (``Tracer.drain_records`` format) or ``None``.
    """

    task_id: int
    status: Status
    reason: str | None
    error: BaseException | None
    traceback: str | None
    trajectory: Any
    worker: str
    header: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None
