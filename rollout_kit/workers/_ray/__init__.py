"""Ray workers: run a ``RolloutController``'s rollouts on Ray actors.

The controller keeps the only :class:`~rollout_kit.TaskIdGenerator` and the only result
owner; every task id is passed down to a worker actor and echoed back. Each worker is a Ray
actor process (:class:`~.actor.RayWorker`) with its own event loop, engine,
``WorkflowExecutor`` and tracer; its controller-side :class:`RayWorkerHandle` keeps the
queue and capacity and makes ONE actor call per task, awaiting its ``ObjectRef`` (no
polling). The result comes back with its id and the task's trace record, which the handle
merges into the controller's tracer (times re-anchored on the controller's clock; the
wall-clock offset of each worker is measured at start), so ``ctl.traces()`` covers every
worker, with a ``worker`` column, indexed by the ids ``submit`` returned. Tasks still
running on a worker show up in ``traces()`` once they finish.

Usage::

    from rollout_kit import RolloutController
    from rollout_kit.workers import RayScheduler

    ctl = RolloutController(sglang=["127.0.0.1:30000"],
                            scheduler=RayScheduler(num_workers=4))
    ids = [ctl.submit(item, workflow) for item in data]
    results = ctl.wait(len(ids))

Attaching to an existing cluster: start it with ``ray start --head`` (and ``ray start
--address=<head>:6379`` on other nodes), then pass ``address="auto"`` (the cluster this
machine belongs to), ``address="<head>:6379"`` or a Ray Client URL ``"ray://<head>:10001"``.
With ``address=None`` the scheduler connects where ``RAY_ADDRESS`` points, or starts a local
Ray instance. If Ray is already initialized in this process, that connection is used as is.
Server addresses must be reachable from the worker nodes.

Semantics:

* Worker choice: ``policy="round_robin"`` or ``"least_loaded"`` among live workers; the
  controller's ``executor_config`` bounds each worker (capacity and queue are enforced on
  the controller side, capacity again inside the worker).
* Workflows, their kwargs and ``should_accept_fn`` travel by Ray's serializer (cloudpickle),
  serialized once per submit or batch call; a workflow *instance* is rebuilt once per worker
  and content and then reused, so its state persists across that worker's tasks (AReaL
  re-instantiates from an import string and loses it). An object that cannot be serialized
  fails ``submit`` with a ``ConfigError`` naming it.
* A worker that dies (actor killed, process gone) is dropped; its unfinished tasks are
  re-dispatched to live workers with the same task id (trace attributes ``redispatched``
  and ``lost_workers``); every id gets exactly one result.
* ``pause``/``resume``/``set_version``/``pause_generation``/``continue_generation`` of the
  controller fan out to every worker.

Ray stays optional: importing this package does not import Ray; creating a ``RayScheduler``
without Ray raises ``SchedulerError`` naming the extra ``pip install 'rollout-kit[ray]'``.
"""

from __future__ import annotations

from .actor import EngineFactory, RayWorker
from .engine import RayEngineProxy
from .handle import RayWorkerHandle
from .loopback import LOCAL_NODE_IP, init_local_ray, non_loopback_listeners
from .pool import RayScheduler
from .wire import import_ray

__all__ = ["LOCAL_NODE_IP", "EngineFactory", "RayEngineProxy", "RayScheduler", "RayWorker",
           "RayWorkerHandle", "import_ray", "init_local_ray", "non_loopback_listeners"]
