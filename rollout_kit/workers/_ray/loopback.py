"""A local Ray instance that listens on loopback only, and the check that it does.

A local Ray instance this scheduler starts (:func:`init_local_ray`) listens on loopback only:
its node IP is ``127.0.0.1``, and Ray binds the GCS, the raylet, the agents and every worker's
gRPC server to loopback when the node IP is a loopback address. ``ray.init`` would replace
``127.0.0.1`` by the machine's interface IP (and then bind ``0.0.0.0``/``::``), so the switch
it consults (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, behind
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) is off during that call. The listening sockets of the
instance are checked right after it starts; any that is not on loopback is named in a
warning. A cluster given by ``address`` / ``RAY_ADDRESS`` is used as it was started.
"""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
from collections.abc import Sequence
from typing import Any

from .wire import import_ray

logger = logging.getLogger("rollout_kit.workers._ray")

#: The node IP of a Ray instance :func:`init_local_ray` starts: every server on loopback.
LOCAL_NODE_IP = "127.0.0.1"


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
