"""``RayScheduler``: run a ``RolloutController``'s rollouts on Ray actor workers.

The controller keeps the only :class:`~rollout_kit.ids.TaskIdGenerator`; every task id is
passed down to a worker actor and echoed back. Each worker (:class:`~rollout_kit.ray_worker.
RayWorker`) is a Ray actor process with its own event loop, engine, ``WorkflowExecutor`` and
tracer buffer. Each dispatched task is ONE actor call whose ``ObjectRef`` the controller
awaits (no polling); the result comes back with its id and the task's trace record, which the
controller merges into its tracer (times re-anchored on the controller's clock; the wall-clock
offset of each worker is measured at start), so ``ctl.traces()`` covers every worker, with a
``worker`` column, indexed by the ids ``submit`` returned. Tasks still running on a worker
show up in ``traces()`` once they finish.

Usage::

    from rollout_kit import RolloutController
    from rollout_kit.ray_scheduler import RayScheduler

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

A local Ray instance this scheduler starts (:func:`init_local_ray`) listens on loopback only:
its node IP is ``127.0.0.1``, and Ray binds the GCS, the raylet, the agents and every worker's
gRPC server to loopback when the node IP is a loopback address. ``ray.init`` would replace
``127.0.0.1`` by the machine's interface IP (and then bind ``0.0.0.0``/``::``), so the switch
it consults (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, behind
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) is off during that call. The listening sockets of the
instance are checked right after it starts; any that is not on loopback is named in a
warning. A cluster given by ``address`` / ``RAY_ADDRESS`` is used as it was started.

Semantics:

* Worker choice: ``policy="round_robin"`` or ``"least_loaded"`` among live workers; the
  controller's ``executor_config`` bounds each worker (capacity and queue are enforced on
  the controller side, capacity again inside the worker).
* Workflows, their kwargs and ``should_accept_fn`` travel by Ray's serializer (cloudpickle)
  at every submit; a workflow *instance* is rebuilt once per worker and content and then
  reused, so its state persists across that worker's tasks (AReaL re-instantiates from an
  import string and loses it). An object that cannot be serialized fails ``submit`` with a
  ``ConfigError`` naming it.
* A worker that dies (actor killed, process gone) is dropped; its unfinished tasks are
  re-dispatched to live workers with the same task id (trace attributes ``redispatched``
  and ``lost_workers``); every id gets exactly one result.
* ``pause``/``resume``/``set_version``/``pause_generation``/``continue_generation`` of the
  controller fan out to every worker.

Ray stays optional: importing this module does not import Ray; creating a ``RayScheduler``
without Ray raises ``SchedulerError`` naming the extra ``pip install 'rollout-kit[ray]'``.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import ipaddress
import itertools
import logging
import os
import socket
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import EngineConfig, ExecutorConfig
from .engines.base import InferenceEngine
from .errors import ConfigError, ControllerStateError, SchedulerError, TaskIdMismatchError
from .executor import WorkflowExecutor
from .executor.core import _Task
from .io import ModelRequest, ModelResponse, Status
from .ray_worker import EngineFactory, RayWorker, RemoteOutcome, worker_config
from .scheduler import LocalScheduler, SchedulePolicy
from .tracing import Tracer
from .tracing.schema import SCHEMA_VERSION
from .tracing.store import FORMAT

if TYPE_CHECKING:
    import pandas as pd

    from .executor import AcceptFnSpec, WorkflowSpec
    from .ids import TaskIdGenerator

__all__ = ["LOCAL_NODE_IP", "RayScheduler", "RayWorkerEngine", "import_ray", "init_local_ray",
           "non_loopback_listeners"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = "pip install 'rollout-kit[ray]'"
#: The node IP of a Ray instance :func:`init_local_ray` starts: every server on loopback.
LOCAL_NODE_IP = "127.0.0.1"
_CONSUME = 4  # index of the consume mark in a task record


def import_ray() -> Any:
    """Import Ray, or raise ``SchedulerError`` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise SchedulerError(
            f"RayScheduler needs Ray, which is not installed ({exc}); install the extra: "
            f"{_INSTALL_HINT}"
        ) from None
    return ray


def _is_loopback(host: str) -> bool:
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def non_loopback_listeners(pids: Sequence[int], *, descendants: bool = True) -> list[str]:
    """The listening TCP sockets of ``pids`` (and their descendants) not bound to loopback.

    Args:
        pids: the processes to look at.
        descendants: also every descendant of each.

    Returns:
        ``"<name> (pid <pid>) listens on <ip>:<port>"`` for each; empty if all are on
        loopback. Processes that vanish or cannot be inspected are skipped.
    """
    psutil = _psutil()
    procs: dict[int, Any] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            procs[pid] = proc
            if descendants:
                procs.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    found: list[str] = []
    for pid, proc in sorted(procs.items()):
        try:
            name = proc.name()
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and not _is_loopback(c.laddr.ip):
                host = f"[{c.laddr.ip}]" if ":" in c.laddr.ip else c.laddr.ip
                found.append(f"{name} (pid {pid}) listens on {host}:{c.laddr.port}")
    return found


def _psutil() -> Any:
    """``psutil`` (a dependency of Ray), imported untyped (no stubs needed)."""
    return importlib.import_module("psutil")


def _children() -> set[int]:
    psutil = _psutil()
    try:
        return {c.pid for c in psutil.Process().children()}
    except psutil.Error:
        return set()


def init_local_ray(**init_kwargs: Any) -> None:
    """Start a local Ray instance whose servers all listen on loopback (``127.0.0.1``).

    Args:
        init_kwargs: further ``ray.init`` arguments (``num_cpus``, ``log_to_driver``, …);
            ``include_dashboard`` defaults to False. An explicit ``_node_ip_address`` is
            passed on as given (then Ray may bind other interfaces).

    Logs a warning naming every Ray process socket that listens elsewhere than loopback.

    Raises:
        SchedulerError: Ray is not installed.
    """
    ray = import_ray()
    kwargs: dict[str, Any] = {"include_dashboard": False}
    kwargs.update(init_kwargs)
    kwargs.setdefault("_node_ip_address", LOCAL_NODE_IP)
    before = _children()
    try:
        consts: Any = importlib.import_module("ray._private.ray_constants")
    except ImportError:
        consts = None
    cluster = getattr(consts, "ENABLE_RAY_CLUSTER", None)
    if cluster is not None:  # else ray.init maps 127.0.0.1 to the interface IP
        consts.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address="local", **kwargs)  # "local": a new instance even if RAY_ADDRESS is set
    finally:
        if cluster is not None:
            consts.ENABLE_RAY_CLUSTER = cluster
    started = sorted(_children() - before)  # GCS, raylet, monitors; workers below the raylet
    try:
        exposed = (non_loopback_listeners([os.getpid()], descendants=False)
                   + non_loopback_listeners(started))
    except Exception as exc:  # the check is best effort; Ray runs either way
        logger.debug("could not list the sockets of the local Ray instance: %s", exc)
        return
    if exposed:
        logger.warning(
            "the local Ray instance listens beyond loopback (node IP %s): %s; other "
            "machines may reach it: firewall these ports, or start the cluster yourself "
            "and pass its address", kwargs["_node_ip_address"], "; ".join(exposed))
    else:
        logger.info("started a local Ray instance listening on loopback only (%s)",
                    kwargs["_node_ip_address"])


@dataclass(frozen=True, slots=True)
class _AddressEngines:
    """Picklable default engine factory: one remote engine per worker over the addresses."""

    kind: str
    addresses: tuple[str, ...]
    config: EngineConfig | None
    partition: bool
    num_workers: int

    def __call__(self, index: int) -> InferenceEngine:
        from .engines import RemoteSGLangEngine, RemotevLLMEngine

        addrs = self.addresses
        if self.partition:
            addrs = addrs[index % len(addrs)::self.num_workers] or addrs
        cls = RemoteSGLangEngine if self.kind == "sglang" else RemotevLLMEngine
        return cls(list(addrs), config=self.config, name=self.kind)


@dataclass(frozen=True, slots=True)
class _Shipment:
    """A serialized ``(workflow, workflow_kwargs, should_accept_fn)`` for one task."""

    key: str
    blob: bytes

    async def arun_episode(self, engine: Any, data: Any) -> Any:  # noqa: ARG002
        raise ControllerStateError("a shipped workflow only runs on a Ray worker")


def _dumps(obj: object) -> bytes:
    from ray import cloudpickle

    blob: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    return blob


def _ship(workflow: object, workflow_kwargs: dict[str, Any] | None,
          should_accept_fn: object) -> _Shipment:
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
    return _Shipment(hashlib.blake2b(blob, digest_size=16).hexdigest(), blob)


def _probe(address: str | None, timeout: float = 3.0) -> None:
    """Fail fast when an explicit ``host:port`` / ``ray://host:port`` does not answer."""
    if address is None or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise SchedulerError(
            f"cannot reach the Ray cluster at {address!r}: {exc}; start it with "
            "'ray start --head' or check the address"
        ) from None


class _ProxyExecutor(WorkflowExecutor):
    """Controller-side executor of one Ray worker: queue and capacity here, runs there.

    It records into a private tracer; the merged trace of each task (controller submit and
    dispatch marks + the worker's record) goes into the controller's tracer when it ends.
    """

    def __init__(self, engine: RayWorkerEngine, *, main_tracer: Tracer,
                 config: ExecutorConfig | None, id_generator: TaskIdGenerator | None,
                 worker: str) -> None:
        super().__init__(engine, config=config, tracer=Tracer(worker=worker),
                         id_generator=id_generator, worker=worker)
        self.proxy = engine
        self.main_tracer = main_tracer
        self._outcomes: dict[int, RemoteOutcome] = {}

    async def _run(self, task: _Task) -> None:
        tid = task.task_id
        self.tracer.mark(tid, "start")
        ship = task.factory()
        assert isinstance(ship, _Shipment)
        try:
            out = await self.proxy.scheduler.execute(self.proxy, tid, ship, task.data)
        except asyncio.CancelledError:
            self.proxy.scheduler.cancel_remote(tid)
            self._finish(task, "cancelled", "cancelled")
            return
        except Exception as exc:
            self._finish(task, "failed", "worker_error", error=exc, tb=traceback.format_exc())
            return
        if out.task_id != tid:
            err = TaskIdMismatchError(f"worker {out.worker!r} echoed task_id {out.task_id} "
                                      f"for task {tid}")
            self._finish(task, "failed", "task_id_mismatch", error=err)
            return
        self._outcomes[tid] = out
        self._finish(task, out.status, out.reason, error=out.error, tb=out.traceback,
                     trajectory=out.trajectory)

    def _finish(self, task: _Task, status: Status, reason: str | None, *,
                error: BaseException | None = None, tb: str | None = None,
                trajectory: Any = None) -> None:
        tid = task.task_id
        out = self._outcomes.pop(tid, None)
        super()._finish(task, status, reason, error=error, tb=tb, trajectory=trajectory)
        if out is not None and task.result is not None:
            task.result.worker = out.worker
        self._publish(tid, out)

    def _publish(self, tid: int, out: RemoteOutcome | None) -> None:
        recs = self.tracer.drain_records()
        if not recs:
            return
        head = recs[0]
        mine = next((r for r in recs[1:] if r.get("kind") == "task"
                     and r.get("task_id") == tid), None)
        if mine is None:
            return
        if out is None or out.record is None or not out.header:
            self.main_tracer.ingest([head, mine])
            return
        whead = dict(out.header)
        whead["wall_epoch"] = float(whead["wall_epoch"]) - self.proxy.scheduler.offset(
            out.worker)
        shift = round((float(head["wall_epoch"]) - whead["wall_epoch"]) * 1e9)
        rec = dict(out.record)
        marks = list(rec["marks"])
        for i in (0, 1):  # submit and dispatch as the controller saw them
            if mine["marks"][i] is not None:
                marks[i] = int(mine["marks"][i]) + shift
        marks[_CONSUME] = None
        rec["marks"] = marks
        self.main_tracer.ingest([whead, rec])

    def take(self, task_id: int) -> Any:
        result = super().take(task_id)
        worker = result.worker or self.worker
        self.tracer.drain_records()  # drop the private consume mark
        now = time.perf_counter_ns() - self.main_tracer.epoch_ns
        self.main_tracer.ingest([
            {"kind": "header", "format": FORMAT, "schema": SCHEMA_VERSION,
             "wall_epoch": self.main_tracer.wall_epoch, "worker": worker},
            {"kind": "mark", "task_id": task_id, "worker": worker, "event": "consume",
             "ts": now},
        ])
        return result

    def pause(self) -> None:
        super().pause()
        self.proxy.send_paused(True)

    def resume(self) -> None:
        super().resume()
        self.proxy.send_paused(False)


class RayWorkerEngine(InferenceEngine):
    """The controller-side handle of one Ray worker actor (an ``InferenceEngine``).

    ``submit`` serializes the workflow and queues the task in a controller-side executor
    that dispatches it to the actor; the engine methods (``agenerate``, ``health``, …) are
    forwarded to the worker's engine. Created by :meth:`RayScheduler.create_workers`.
    """

    def __init__(self, scheduler: RayScheduler, name: str, actor: Any) -> None:
        self.scheduler = scheduler
        self.name = name
        self.actor = actor
        self.alive = True
        self.pid: int | None = None
        self._version = 0
        self._seq = itertools.count()
        self._started: asyncio.Future[Any] | None = None

    # -- executor ------------------------------------------------------------------------
    def configure_executor(self, *, config: ExecutorConfig | None = None,
                           tracer: Tracer | None = None,
                           id_generator: TaskIdGenerator | None = None,
                           worker: str | None = None) -> WorkflowExecutor:
        """Create the controller-side executor; merged traces go to ``tracer``."""
        ex = _ProxyExecutor(self, main_tracer=tracer if tracer is not None else Tracer(),
                            config=config, id_generator=id_generator,
                            worker=worker or self.name)
        self.attach_executor(ex)
        return ex

    def submit(self, data: Any, workflow: WorkflowSpec,
               workflow_kwargs: dict[str, Any] | None = None,
               should_accept_fn: AcceptFnSpec | None = None,
               task_id: int | None = None) -> int:
        """Serialize the workflow now (``ConfigError`` naming it if it cannot be) and queue."""
        self.workflow_executor.check_specs(workflow, workflow_kwargs, should_accept_fn)
        ship = self.scheduler.shipment(workflow, workflow_kwargs, should_accept_fn)
        return self.workflow_executor.submit(data, ship, task_id=task_id)

    # -- actor lifecycle -----------------------------------------------------------------
    async def ensure_started(self) -> None:
        """Start the worker (engine init) and measure its clock offset, once."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        info = await self.actor.start.remote()
        self.pid = int(info["pid"])
        best: tuple[float, float] | None = None
        for _ in range(3):
            t0 = time.time()
            w = float(await self.actor.clock.remote())
            t1 = time.time()
            rtt = t1 - t0
            off = w - (t0 + t1) / 2
            if best is None or rtt < best[0]:
                best = (rtt, off)
        assert best is not None
        rtt, off = best
        self.scheduler.offsets[self.name] = 0.0 if abs(off) <= rtt / 2 else off

    async def initialize(self) -> None:
        """Start the actor's engine (health checks run in the worker)."""
        try:
            await self.ensure_started()
        except Exception as exc:
            raise SchedulerError(f"Ray worker {self.name!r} failed to start: {exc}") from exc

    def mark_dead(self) -> None:
        """Drop this worker: never chosen again, its actor killed for good."""
        if not self.alive:
            return
        self.alive = False
        try:
            import_ray().kill(self.actor, no_restart=True)
        except Exception:
            pass

    async def aclose(self) -> None:
        """Close the worker's engine and kill its actor. Idempotent."""
        if self.alive and self._started is not None:
            try:
                await asyncio.wait_for(self.actor.close.remote(), timeout=10)
            except Exception:
                pass
        self.mark_dead()

    # -- control fan-out -----------------------------------------------------------------
    def send_paused(self, paused: bool) -> None:
        """Pause/resume dispatch inside the worker (ordered by a sequence number)."""
        if self.alive:
            self.actor.set_paused.remote(paused, next(self._seq))

    def get_version(self) -> int:
        """The weight version last set."""
        return self._version

    def set_version(self, version: int) -> None:
        """Set the weight version here and in the worker."""
        self._version = version
        if self.alive:
            self.actor.set_version.remote(version, next(self._seq))

    async def remote_stats(self) -> dict[str, Any]:
        """The worker-side executor counters (``paused``, ``version``, ``pid``, …)."""
        return dict(await self.actor.stats.remote())

    async def pause_generation(self) -> None:
        """Server side pause through the worker's engine."""
        if self.alive:
            await self.actor.pause_generation.remote()

    async def continue_generation(self) -> None:
        """Undo :meth:`pause_generation` through the worker's engine."""
        if self.alive:
            await self.actor.continue_generation.remote()

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """One generation on the worker's engine."""
        resp: ModelResponse = await self.actor.agenerate.remote(req)
        return resp

    async def health(self) -> dict[str, bool]:
        """The worker engine's server health."""
        return dict(await self.actor.health.remote())

    async def server_metrics(self) -> pd.DataFrame:
        """The worker engine's server metrics."""
        df: pd.DataFrame = await self.actor.server_metrics.remote()
        return df

    def __repr__(self) -> str:
        return f"RayWorkerEngine(name={self.name!r}, alive={self.alive}, pid={self.pid})"


class RayScheduler:
    """Starts Ray worker actors for a ``RolloutController`` and picks one per task.

    Args:
        num_workers: how many worker actors.
        address: ``None`` (``RAY_ADDRESS`` or a local instance), ``"auto"``,
            ``"host:port"`` or ``"ray://host:port"``; see the module docstring.
        resources_per_worker: Ray resources of each actor, e.g. ``{"CPU": 1}``,
            ``{"GPU": 1}`` or custom ones (default: Ray's actor default).
        engine_factory: ``fn(index) -> InferenceEngine`` run inside each worker; default:
            one engine over the controller's ``sglang=`` / ``vllm=`` addresses.
        partition_servers: give worker ``i`` every ``num_workers``-th address instead of all.
        policy: ``"round_robin"`` or ``"least_loaded"``.
        init_kwargs: extra keyword arguments for ``ray.init`` (when this starts Ray).
        name_prefix: worker names are ``<prefix><i>``.

    Raises:
        SchedulerError: Ray is not installed. ConfigError: bad arguments.
    """

    def __init__(self, num_workers: int = 2, *, address: str | None = None,
                 resources_per_worker: Mapping[str, float] | None = None,
                 engine_factory: EngineFactory | None = None,
                 partition_servers: bool = False, policy: SchedulePolicy = "round_robin",
                 init_kwargs: Mapping[str, Any] | None = None,
                 name_prefix: str = "ray") -> None:
        import_ray()
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ConfigError(f"num_workers must be an int >= 1, got {num_workers!r}")
        if engine_factory is not None and not callable(engine_factory):
            raise ConfigError(f"engine_factory must be callable, got {engine_factory!r}")
        self.num_workers = num_workers
        self.address = address
        self.resources_per_worker = dict(resources_per_worker or {})
        self.engine_factory = engine_factory
        self.partition_servers = partition_servers
        self.init_kwargs = dict(init_kwargs or {})
        self.name_prefix = name_prefix
        self._local = LocalScheduler(policy)
        self.workers: list[RayWorkerEngine] = []
        self.offsets: dict[str, float] = {}
        self._inflight: dict[int, RayWorkerEngine] = {}
        self._last: tuple[tuple[int, int, int], _Shipment] | None = None

    @property
    def policy(self) -> SchedulePolicy:
        """The worker choice policy."""
        return self._local.policy

    # -- workers -------------------------------------------------------------------------
    def _connect(self) -> Any:
        ray = import_ray()
        if ray.is_initialized():
            return ray
        _probe(self.address)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        kwargs.update(self.init_kwargs)
        local = self.address == "local" or (self.address is None
                                            and not os.environ.get("RAY_ADDRESS"))
        try:
            if local:  # a cluster of our own listens on loopback only
                init_local_ray(**kwargs)
            else:
                ray.init(address=self.address, **kwargs)
        except Exception as exc:
            where = self.address if self.address is not None else "RAY_ADDRESS or local"
            raise SchedulerError(
                f"cannot connect to the Ray cluster at {where!r}: {type(exc).__name__}: "
                f"{exc}"
            ) from None
        return ray

    def _actor_options(self) -> dict[str, Any]:
        res = dict(self.resources_per_worker)
        opts: dict[str, Any] = {}
        if "CPU" in res:
            opts["num_cpus"] = res.pop("CPU")
        if "GPU" in res:
            opts["num_gpus"] = res.pop("GPU")
        if res:
            opts["resources"] = res
        return opts

    def create_workers(self, *, sglang: str | Sequence[str] = (),
                       vllm: str | Sequence[str] = (),
                       engine_config: EngineConfig | None = None,
                       executor_config: ExecutorConfig | None = None) -> list[InferenceEngine]:
        """Start ``num_workers`` actors; return their controller-side engines.

        Called by ``RolloutController`` with its address and config arguments.

        Raises:
            ConfigError: no engine source, or both ``sglang`` and ``vllm`` without a factory.
            SchedulerError: the cluster cannot be reached.
        """
        if self.workers:
            raise ConfigError("this RayScheduler already started its workers; create a new one "
                              "for another controller")
        factory = self.engine_factory
        if factory is None:
            sg = [sglang] if isinstance(sglang, str) else list(sglang)
            vl = [vllm] if isinstance(vllm, str) else list(vllm)
            if bool(sg) == bool(vl):
                raise ConfigError("RayScheduler needs exactly one of sglang= / vllm= addresses "
                                  "(or an engine_factory)")
            kind, addrs = ("sglang", sg) if sg else ("vllm", vl)
            factory = _AddressEngines(kind, tuple(addrs), engine_config,
                                      self.partition_servers, self.num_workers)
        ray = self._connect()
        cap = (executor_config or ExecutorConfig()).max_concurrent_rollouts
        actor_cls = ray.remote(RayWorker).options(max_concurrency=max(1000, 2 * cap + 16),
                                                  **self._actor_options())
        wcfg = worker_config(executor_config)
        for i in range(self.num_workers):
            name = f"{self.name_prefix}{i}"
            actor = actor_cls.remote(name, i, factory, wcfg)
            self.workers.append(RayWorkerEngine(self, name, actor))
        return list(self.workers)

    def live_workers(self) -> list[RayWorkerEngine]:
        """The workers not known to be dead."""
        return [w for w in self.workers if w.alive]

    def choose(self, workers: Sequence[InferenceEngine]) -> InferenceEngine:
        """The live worker for the next task (round robin or least loaded).

        Raises:
            SchedulerError: every worker died.
        """
        alive = [w for w in workers if getattr(w, "alive", True)]
        if not alive:
            raise SchedulerError(f"all {len(workers)} Ray workers died; nothing can run")
        return self._local.choose(alive)

    def check_specs(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                    should_accept_fn: object) -> None:
        """Serialize the spec now (the controller calls this before taking a task id).

        Raises:
            ConfigError: something cannot be serialized; the message names it.
        """
        self._last = ((id(workflow), id(workflow_kwargs), id(should_accept_fn)),
                      _ship(workflow, workflow_kwargs, should_accept_fn))

    def shipment(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                 should_accept_fn: object) -> _Shipment:
        """The serialized spec: the one :meth:`check_specs` just made for these objects."""
        last, self._last = self._last, None
        key = (id(workflow), id(workflow_kwargs), id(should_accept_fn))
        if last is not None and last[0] == key:
            return last[1]
        return _ship(workflow, workflow_kwargs, should_accept_fn)

    def offset(self, worker: str) -> float:
        """Measured wall-clock offset (worker minus controller, seconds) of ``worker``."""
        return self.offsets.get(worker, 0.0)

    # -- running -------------------------------------------------------------------------
    async def execute(self, origin: RayWorkerEngine, task_id: int, ship: _Shipment,
                      data: Any) -> RemoteOutcome:
        """Run one task on ``origin``, moving it to live workers while workers die."""
        ray = import_ray()
        worker = origin
        lost: list[str] = []
        while True:
            if not worker.alive:
                chosen = self.choose(self.workers)
                assert isinstance(chosen, RayWorkerEngine)
                worker = chosen
            self._inflight[task_id] = worker
            try:
                await worker.ensure_started()
                ref = worker.actor.run.remote(task_id, ship.key, ship.blob, data, len(lost),
                                              tuple(lost))
                out: RemoteOutcome = await ref
            except ray.exceptions.RayActorError:
                self._inflight.pop(task_id, None)
                worker.mark_dead()
                lost.append(worker.name)
                continue
            except ray.exceptions.RayTaskError as exc:
                self._inflight.pop(task_id, None)
                raise exc.as_instanceof_cause() from None
            self._inflight.pop(task_id, None)
            return out

    def cancel_remote(self, task_id: int) -> None:
        """Ask the worker running ``task_id`` to cancel it (fire and forget)."""
        worker = self._inflight.pop(task_id, None)
        if worker is not None and worker.alive:
            worker.actor.cancel.remote(task_id)

    def __repr__(self) -> str:
        return (f"RayScheduler(num_workers={self.num_workers}, address={self.address!r}, "
                f"policy={self.policy!r}, live={len(self.live_workers())})")

