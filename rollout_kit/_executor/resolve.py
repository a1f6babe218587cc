"""Turn the user's workflow / ``should_accept_fn`` specs into callables, or a ``ConfigError``.

A workflow spec is an instance (anything with an async ``arun_episode``), a class plus
``workflow_kwargs``, or an import path ``"pkg.mod:Name"`` / ``"pkg.mod.Name"`` naming either.
Classes are instantiated once per submitted task (AReaL semantics), instances are shared.
The :class:`WorkflowFactory` also carries the workflow's ``validate(data)`` hook (a no-op
when the workflow has none), which ``submit`` calls before a task id is taken.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from .._errors import ConfigError, RolloutKitError
from .._workflows.base import RolloutWorkflow, ValidatesData, WorkflowLike, is_workflow
from ..tracing import bridge_areal_perf_tracer

WorkflowSpec: TypeAlias = "WorkflowLike | type[Any] | str"
AcceptFn: TypeAlias = "Callable[[Any], bool | Awaitable[bool]]"
AcceptFnSpec: TypeAlias = "AcceptFn | str"


class WorkflowFactory:
    """Gives the workflow instance for each task; ``validate(data)`` checks data at submit.

    ``validate`` runs the workflow's own hook (on the instance, or on the first instance of
    a class) when it has one, so anything it raises reaches the caller as ``ConfigError``.
    """

    __slots__ = ("_hook", "_instance", "_make")

    def __init__(self, instance: WorkflowLike,
                 make: Callable[[], WorkflowLike] | None = None) -> None:
        self._instance = instance  # the shared instance, or the probe of a class
        self._make = make
        self._hook = _validate_hook(instance)  # found once here, not per submit

    def __call__(self) -> WorkflowLike:
        return self._instance if self._make is None else self._make()

    def validate(self, data: Any) -> None:
        """Run the workflow's ``validate(data)`` if it has one; raise if it refuses.

        Raises:
            ConfigError: what the hook raised (a rollout_kit error as is; any other
                exception wrapped, naming the workflow, with the original as ``__cause__``).
        """
        hook = self._hook
        if hook is None:
            return
        try:
            hook(data)
        except RolloutKitError:
            raise
        except Exception as exc:
            raise ConfigError(f"{type(self._instance).__qualname__}.validate(data) refused "
                              f"the data: {type(exc).__name__}: {exc}") from exc


def _validate_hook(instance: object) -> Callable[[Any], None] | None:
    """The workflow's ``validate``; ``None`` without one or for RolloutWorkflow's default,
    which accepts everything."""
    if not isinstance(instance, ValidatesData):
        return None
    hook = instance.validate
    if isinstance(hook, types.MethodType) and hook.__func__ is RolloutWorkflow.validate:
        return None
    return hook


@dataclass(frozen=True, slots=True, eq=False)
class Recipe:
    """A checked workflow spec: how to run the tasks of one ``submit`` or batch call.

    Made once per call by a worker pool's ``prepare`` (so a batch checks and, for remote
    workers, serializes its workflow once), then handed to the worker with every task.

    Attributes:
        workflow, workflow_kwargs, should_accept_fn: the specs as the user gave them.
        factory: gives the workflow instance of each task.
        accept_fn: the resolved ``should_accept_fn`` or ``None``.
        payload: what a pool needs to run the workflow elsewhere (the Ray pool: the
            serialized specs); ``None`` for in-process workers.
    """

    workflow: object
    workflow_kwargs: dict[str, Any] | None
    should_accept_fn: object
    factory: WorkflowFactory
    accept_fn: AcceptFn | None
    payload: object = None


def make_recipe(workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object, payload: object = None) -> Recipe:
    """Check the specs now and bundle them (raises ``ConfigError``)."""
    return Recipe(workflow, workflow_kwargs, should_accept_fn,
                  workflow_factory(workflow, workflow_kwargs),
                  resolve_accept_fn(should_accept_fn), payload)


@functools.lru_cache(maxsize=256)
def import_object(path: str) -> Any:
    """Import ``"pkg.mod:Name"`` or ``"pkg.mod.Name"`` (``Name`` may be dotted after ``:``).

    Raises:
        ConfigError: the path is malformed, the module is missing or lacks the name.
    """
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"import path must be a non-empty str, got {path!r}")
    if ":" in path:
        mod_name, _, attr = path.partition(":")
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ConfigError(f"import path {path!r} must look like 'pkg.module:Name'")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {mod_name!r} of {path!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"module {mod_name!r} has no attribute {attr!r} ({path!r})") from None
    return obj


def workflow_factory(spec: object, workflow_kwargs: dict[str, Any] | None) -> WorkflowFactory:
    """Validate a workflow spec now and return a factory giving the instance per task.

    Raises:
        ConfigError: unknown import path, an object that is not a workflow, or
            ``workflow_kwargs`` given with an instance.
    """
    target = import_object(spec) if isinstance(spec, str) else spec
    bridge_areal_perf_tracer()  # AReaL's workflows: their perf_tracer calls become phases
    if workflow_kwargs is not None and not isinstance(workflow_kwargs, dict):
        raise ConfigError(f"workflow_kwargs must be a dict, got {type(workflow_kwargs).__name__}")
    if isinstance(target, type):
        if not callable(getattr(target, "arun_episode", None)):
            raise ConfigError(
                f"{target.__qualname__} is not a workflow: it has no async arun_episode(engine, "
                "data) method"
            )
        kwargs = dict(workflow_kwargs or {})
        try:  # instantiate once now so bad kwargs fail at submit time
            first: WorkflowLike = target(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"cannot create {target.__qualname__}(**workflow_kwargs): {exc}") \
                from None
        pool = [first]

        def make() -> WorkflowLike:
            if pool:
                return pool.pop()
            inst: WorkflowLike = target(**kwargs)
            return inst

        return WorkflowFactory(first, make)
    if not is_workflow(target):
        raise ConfigError(
            f"{type(target).__name__} object {_short(target)} is not a workflow: expected an "
            "object with an async arun_episode(engine, data) method, its class, or an import "
            "path 'pkg.module:Name'"
        )
    if workflow_kwargs:
        raise ConfigError("workflow_kwargs only apply when workflow is a class or import path")
    instance: WorkflowLike = target  # type: ignore[assignment]
    return WorkflowFactory(instance)


def resolve_accept_fn(spec: object) -> AcceptFn | None:
    """Return the ``should_accept_fn`` callable (importing a path), or ``None``.

    Raises:
        ConfigError: unknown import path or not callable.
    """
    if spec is None:
        return None
    fn = import_object(spec) if isinstance(spec, str) else spec
    if not callable(fn):
        raise ConfigError(f"should_accept_fn must be callable or an import path, got {_short(fn)}")
    result: AcceptFn = fn
    return result


def _short(obj: object) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."
