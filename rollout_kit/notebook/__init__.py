"""Notebook front-end: an ipywidgets submission panel and a live monitor.

Import by path (``from rollout_kit.notebook import SubmitPanel``); ``import rollout_kit``
never imports ipywidgets. Blocking calls inside a running kernel loop are handled by the
controller itself (``rollout_kit._loop.run_sync``).
"""

from __future__ import annotations

from .monitor import LiveMonitor
from .panel import SubmitPanel
from .progress import ProgressSnapshot

__all__ = ["LiveMonitor", "ProgressSnapshot", "SubmitPanel"]
