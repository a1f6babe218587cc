"""Deprecated: Ray workers moved to :mod:`rollout_kit.workers.ray`.

``from rollout_kit.ray_scheduler import RayScheduler`` keeps working for one release and
warns once; use ``from rollout_kit.workers.ray import RayScheduler``.
"""

from __future__ import annotations

from ._deprecation import warn_renamed
from .workers.ray import RayScheduler, import_ray, init_local_ray, non_loopback_listeners

__all__ = ["RayScheduler", "import_ray", "init_local_ray", "non_loopback_listeners"]

warn_renamed("rollout_kit.ray_scheduler", "rollout_kit.workers.ray")
