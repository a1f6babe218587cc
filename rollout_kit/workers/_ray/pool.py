"""``RayScheduler``: a :class:`~rollout_kit.workers.WorkerPool` whose workers are Ray actors.

:meth:`RayScheduler.create_workers` starts ``num_workers`` actors (:class:`~.actor.
RayWorker`), each building its own engine from the controller's ``sglang=`` / ``vllm=``
addresses (or ``engine_factory``), and returns their controller-side
:class:`~.handle.RayWorkerHandle` s; :meth:`~RayScheduler.prepare` checks a workflow spec
and serializes it once per submit or batch call (the recipe's ``payload``);
:meth:`~RayScheduler.choose` picks among live workers.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._config import EngineConfig, ExecutorConfig
from ..._errors import ConfigError, SchedulerError
from ..._executor import Recipe, make_recipe
from .._local import LocalScheduler, SchedulePolicy
from .actor import EngineFactory, RayWorker, worker_config
from .handle import RayWorkerHandle
from .loopback import init_local_ray
from .wire import import_ray, ship

if TYPE_CHECKING:
    from ...engines import InferenceEngine
    from .._base import Worker, WorkerSpec



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


def connect(address: str | None, init_kwargs: Mapping[str, Any]) -> Any:
    """Connect to (or start) the Ray cluster unless Ray is initialized; return ``ray``.

    Raises:
        SchedulerError: Ray is missing, or the cluster cannot be reached.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    _probe(address)
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    kwargs.update(init_kwargs)
    local = address == "local" or (address is None and not os.environ.get("RAY_ADDRESS"))
    try:
        if local:  # a cluster of our own listens on loopback only
            init_local_ray(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except Exception as exc:
        where = address if address is not None else "RAY_ADDRESS or local"
        raise SchedulerError(
            f"cannot connect to the Ray cluster at {where!r}: {type(exc).__name__}: {exc}"
        ) from None
    return ray


@dataclass(frozen=True, slots=True)
class _AddressEngines:
    """Picklable default engine factory: one remote engine per worker over the addresses."""

    kind: str
    addresses: tuple[str, ...]
    config: EngineConfig | None
    partition: bool
    num_workers: int

    def __call__(self, index: int) -> InferenceEngine:
        from ...engines import make_engine

        addrs = self.addresses
        if self.partition:
            addrs = addrs[index % len(addrs)::self.num_workers] or addrs
        return make_engine(self.kind, list(addrs), config=self.config, name=self.kind)


class RayScheduler:
    """Starts Ray worker actors for a ``RolloutController`` and picks one per task.

    Args:
        num_workers: how many worker actors.
        address: ``None`` (``RAY_ADDRESS`` or a local instance), ``"auto"``,
            ``"host:port"`` or ``"ray://host:port"``.
        resources_per_worker: Ray resources of each actor, e.g. ``{"CPU": 1}``,
            ``{"GPU": 1}`` or custom ones (default: Ray's actor default).
        engine_factory: ``fn(index) -> InferenceEngine`` run inside each worker; default:
            one engine over the controller's server addresses (one flavour).
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
        self.workers: list[RayWorkerHandle] = []

    @property
    def policy(self) -> SchedulePolicy:
        """The worker choice policy."""
        return self._local.policy

    # -- workers -------------------------------------------------------------------------
    def _factory(self, spec: WorkerSpec) -> EngineFactory:
        if spec.engines:
            raise ConfigError("RayScheduler builds its engines inside the workers: pass "
                              "server addresses or an engine_factory, not engines")
        if self.engine_factory is not None:
            return self.engine_factory
        given = {flavour: addrs for flavour, addrs in spec.servers.items() if addrs}
        if len(given) != 1:
            raise ConfigError("RayScheduler needs the addresses of exactly one flavour "
                              f"(or an engine_factory), got {sorted(given) or 'none'}")
        [(kind, addrs)] = given.items()
        return _AddressEngines(kind, tuple(addrs), spec.engine_config, self.partition_servers,
                               self.num_workers)

    def _actor_options(self, config: ExecutorConfig | None) -> dict[str, Any]:
        res = dict(self.resources_per_worker)
        cap = (config or ExecutorConfig()).max_concurrent_rollouts
        opts: dict[str, Any] = {"max_concurrency": max(1000, 2 * cap + 16)}
        if "CPU" in res:
            opts["num_cpus"] = res.pop("CPU")
        if "GPU" in res:
            opts["num_gpus"] = res.pop("GPU")
        if res:
            opts["resources"] = res
        return opts

    def create_workers(self, spec: WorkerSpec) -> list[Worker]:
        """Start ``num_workers`` actors; return their controller-side handles.

        Raises:
            ConfigError: ``spec.engines`` given, no engine source, or both ``sglang`` and
                ``vllm`` without a factory; this scheduler already started workers; the
                tracer has a trajectory dump (recorded by in-process workers only).
            SchedulerError: the cluster cannot be reached.
        """
        if spec.tracer.dump is not None:
            raise ConfigError("trajectory dumps are recorded by in-process workers only "
                              "(LocalScheduler); Ray workers trace in their own processes")
        if self.workers:
            raise ConfigError("this RayScheduler already started its workers; create a new one "
                              "for another controller")
        factory = self._factory(spec)
        ray = connect(self.address, self.init_kwargs)
        actor_cls = ray.remote(RayWorker).options(**self._actor_options(spec.executor_config))
        wcfg = worker_config(spec.executor_config)
        for i in range(self.num_workers):
            name = f"{self.name_prefix}{i}"
            actor = actor_cls.remote(name, i, factory, wcfg)
            self.workers.append(RayWorkerHandle(name, actor, spec, reroute=self.live_worker))
        return list(self.workers)

    def live_workers(self) -> list[RayWorkerHandle]:
        """The workers not known to be dead."""
        return [w for w in self.workers if w.alive]

    def live_worker(self) -> RayWorkerHandle:
        """A live worker to move a dead worker's task to (by the choice policy).

        Raises:
            SchedulerError: every worker died.
        """
        chosen = self.choose(self.workers)
        assert isinstance(chosen, RayWorkerHandle)
        return chosen

    def choose(self, workers: Sequence[Worker]) -> Worker:
        """The live worker for the next task (round robin or least loaded).

        Raises:
            SchedulerError: every worker died.
        """
        alive = [w for w in workers if not isinstance(w, RayWorkerHandle) or w.alive]
        if not alive:
            raise SchedulerError(f"all {len(workers)} Ray workers died; nothing can run")
        return self._local.choose(alive)

    def prepare(self, workflow: object, workflow_kwargs: dict[str, Any] | None,
                should_accept_fn: object) -> Recipe:
        """Check the specs and serialize them for the workers, once per call.

        Raises:
            ConfigError: a bad spec, or one that cannot be serialized (the message names it).
        """
        recipe = make_recipe(workflow, workflow_kwargs, should_accept_fn)
        return dataclasses.replace(recipe, payload=ship(workflow, workflow_kwargs,
                                                        should_accept_fn))

    def __repr__(self) -> str:
        return (f"RayScheduler(num_workers={self.num_workers}, address={self.address!r}, "
                f"policy={self.policy!r}, live={len(self.live_workers())})")
