"""The controller: one id counter, one tracer, one result owner over its workers.

:class:`RolloutController` is the facade (:mod:`.controller`); :class:`~.results.ResultBook`
owns results; :mod:`.batching` holds ``rollout_batch`` / ``prepare_batch``.
"""

from __future__ import annotations

from .batching import workflow_error
from .controller import RolloutController
from .results import ResultBook

__all__ = ["ResultBook", "RolloutController", "workflow_error"]
