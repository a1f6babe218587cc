"""Transports: how the engines' HTTP client moves bytes (see :mod:`.base`).

* :class:`LoopTransport` (default): HTTP/1.1 on the event loop's own sockets;
* :class:`AiohttpTransport`: the same through aiohttp.

:func:`make_transport` builds the one an :class:`~rollout_kit.EngineConfig` names.
"""

from __future__ import annotations

from ..._config import EngineConfig
from .aiohttp_transport import AiohttpTransport
from .base import Reply, Stream, Transport
from .loop import LoopTransport

__all__ = ["AiohttpTransport", "LoopTransport", "Reply", "Stream", "Transport",
           "make_transport"]


def make_transport(config: EngineConfig) -> Transport:
    """The transport ``config.transport`` names, sized by the config."""
    if config.transport == "aiohttp":
        return AiohttpTransport(max_connections=config.max_connections,
                                connect_timeout=config.timeouts.connect,
                                read_bufsize=config.read_bufsize)
    return LoopTransport(max_connections=config.max_connections,
                         connect_timeout=config.timeouts.connect)
