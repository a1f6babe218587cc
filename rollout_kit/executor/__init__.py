"""The in-loop workflow executor: capacity and staleness control, filtering, batch calls.

See :class:`WorkflowExecutor`. Workflow specs (instance, class, import path) are resolved by
:mod:`rollout_kit.executor.resolve`; the capacity formula lives in
:mod:`rollout_kit.executor.staleness`.
"""

from __future__ import annotations

from .core import WorkflowExecutor
from .resolve import AcceptFn, AcceptFnSpec, WorkflowSpec, import_object
from .staleness import capacity

__all__ = ["AcceptFn", "AcceptFnSpec", "WorkflowExecutor", "WorkflowSpec", "capacity",
           "import_object"]
