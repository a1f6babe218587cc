"""The in-loop workflow executor: runs tasks on the engine it is given, with capacity control.

See :class:`WorkflowExecutor`. Workflow specs (instance, class, import path) are resolved by
:mod:`rollout_kit._executor.resolve` into a :class:`Recipe`; the queue and capacity rule are
:class:`~rollout_kit._executor.dispatch.Dispatcher`'s, the formula lives in
:mod:`rollout_kit._executor.staleness`.
"""

from __future__ import annotations

from .core import ResultSink, WorkflowExecutor, error_text
from .dispatch import DISPATCH_SLICE, Dispatcher, Job
from .resolve import AcceptFn, AcceptFnSpec, Recipe, WorkflowSpec, import_object, make_recipe
from .staleness import capacity

__all__ = ["DISPATCH_SLICE", "AcceptFn", "AcceptFnSpec", "Dispatcher", "Job", "Recipe",
           "ResultSink", "WorkflowExecutor", "WorkflowSpec", "capacity", "error_text",
           "import_object", "make_recipe"]
