"""Notebook front-end: an ipywidgets submission panel and a live monitor.

Import by path (``from rollout_kit.notebook import SubmitPanel``); ``import rollout_kit``
never imports ipywidgets. Blocking calls inside a running kernel loop are handled by the
controller itself (through ``nest-asyncio2``).
"""

from __future__ import annotations

from ._monitor import LiveMonitor
from ._panel import SubmitPanel
from ._progress import ProgressSnapshot

__all__ = ["LiveMonitor", "ProgressSnapshot", "SubmitPanel"]
