"""Kill and restart the real vLLM CPU server (what reliability tests of the client rely on).

A restart costs a full server start (30–55 s on 2 cores), so this runs only with
``ROLLOUT_KIT_SLOW=1``; the session server is running again afterwards.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest

from rollout_kit.testing import VLLMCPUServer

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("ROLLOUT_KIT_SLOW") != "1",
                       reason="restarting the real server takes ~45 s; set ROLLOUT_KIT_SLOW=1"),
]


async def test_kill_then_restart_on_the_same_address(vllm_cpu_server: VLLMCPUServer) -> None:
    server = vllm_cpu_server
    url, pid = server.url, server.pid
    payload = {"model": "tiny", "prompt": [0, 5, 6], "max_tokens": 500, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        inflight = asyncio.create_task(http.post(f"{url}/v1/completions", json=payload))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(server.kill)
        assert not server.is_running() and server.pid is None
        with pytest.raises(aiohttp.ClientError):  # the in-flight request loses its connection
            resp = await inflight
            await resp.read()
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"{url}/health")

        await asyncio.to_thread(server.restart)
        assert server.url == url and server.pid != pid and server.healthy()
        async with http.post(f"{url}/v1/completions",
                             json={**payload, "max_tokens": 3}) as resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 3
