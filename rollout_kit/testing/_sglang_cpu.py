"""A real SGLang server on CPU, for tests and local experiments (``rollout-kit serve``).

Three steps, each idempotent and cached outside the repository:

1. :func:`~rollout_kit.testing.ensure_sglang_cpu_env` creates a separate virtual environment
   with SGLang 0.5.23 on the CPU torch (:mod:`rollout_kit.testing._sglang_venv`);
2. :func:`~rollout_kit.testing.build_tiny_model` writes the tiny Llama of the vLLM server, with
   seeded random weights saved beside it (SGLang loads them from disk, and
   ``/update_weights_from_disk`` can swap in another seed's);
3. :class:`SGLangCPUServer` starts ``python -m sglang.launch_server`` on a free loopback port
   with ``SGLANG_USE_CPU_ENGINE=1``, the import-only ``sgl_kernel`` stand-in first on
   ``PYTHONPATH``, a small KV cache, ``--enable-metrics`` and ``--sleep-on-idle``, and waits
   for ``/health``.

:func:`start_sglang_cpu_server` does all three. The pytest plugin's ``sglang_cpu_server``
fixture (:mod:`rollout_kit.testing._plugin`) runs one per test session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._server_process import HOST, ServerProcess
from ._sglang_venv import STANDIN_DIR, default_sglang_cache_dir, ensure_sglang_cpu_env
from ._tiny_model import build_tiny_model
from ._venv import venv_python

SGLANG_MODEL_NAME = "tiny"
#: The torch seed of the weights the server starts with (another seed's folder is another
#: weight version for ``/update_weights_from_disk``).
WEIGHTS_SEED = 0


class SGLangCPUServer(ServerProcess):
    """A real SGLang server on CPU (native ``/generate`` and OpenAI routes) with a tiny Llama.

    The server listens on ``127.0.0.1`` only, runs in its own process group (launcher,
    scheduler and detokenizer stop together), logs to ``log_path`` and exports
    ``sglang:*`` metrics on ``/metrics``. Its KV cache is bounded by ``max_total_tokens``
    (without a bound SGLang sizes it from the machine's memory: 13 GB here). ``/health``
    takes about a second to answer on a CPU, hence the longer health timeout.

    Usage::

        venv = ensure_sglang_cpu_env()
        model = build_tiny_model(default_sglang_cache_dir() / "tiny-llama-w0",
                                 venv_python(venv), weights_seed=0)
        with SGLangCPUServer(venv, model) as server:
            print(server.url)    # http://127.0.0.1:PORT

    Attributes:
        venv: the virtual environment with SGLang.
        model_dir: the model folder (with weights).
        port: the port (chosen free at construction time unless given).
        model: the served model name (``"tiny"``).
        log_path: the server's log file (appended to on every start).
        startup_timeout: seconds to wait for ``/health`` on each start.
        vocab_size: the model's vocabulary size.
        context_length: the server's context length.
        max_total_tokens: the KV cache's size in tokens.
        max_running_requests: the most requests in one batch (more wait in its queue).
    """

    label = "SGLang CPU server"
    log_prefix = "sglang"
    health_timeout = 5.0

    def __init__(self, venv: Path, model_dir: Path, *, port: int | None = None,
                 log_path: Path | None = None, startup_timeout: float = 240.0,
                 context_length: int = 1024, max_total_tokens: int = 8192,
                 max_running_requests: int = 8, extra_args: Sequence[str] = ()) -> None:
        super().__init__(venv, model_dir, port=port, log_path=log_path,
                         startup_timeout=startup_timeout, extra_args=extra_args)
        self.model = SGLANG_MODEL_NAME
        self.context_length = context_length
        self.max_total_tokens = max_total_tokens
        self.max_running_requests = max_running_requests

    def command(self) -> list[str]:
        """The command line that starts the server. ``--sleep-on-idle``: an idle scheduler
        otherwise polls its sockets in a busy loop and holds one core at 100 % for as long as
        the server runs, which a test session sharing it for half an hour on 2 cores feels."""
        return [str(venv_python(self.venv)), "-m", "sglang.launch_server",
                "--model-path", str(self.model_dir), "--served-model-name", self.model,
                "--device", "cpu", "--host", HOST, "--port", str(self.port),
                "--context-length", str(self.context_length),
                "--max-total-tokens", str(self.max_total_tokens),
                "--max-running-requests", str(self.max_running_requests),
                "--enable-metrics", "--sleep-on-idle", *self.extra_args]

    def environment(self) -> dict[str, str]:
        """The server's environment: the CPU engine, offline, the ``sgl_kernel`` stand-in, and
        torch.distributed initialised from a file: its default TCP store listens on every
        interface (``::``), not on loopback only."""
        store = self.log_path.parent / f"sglang-{self.port}.distinit"
        store.parent.mkdir(parents=True, exist_ok=True)
        store.unlink(missing_ok=True)  # a FileStore's file must not outlive its run
        return {**super().environment(), "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
                "PYTHONPATH": str(STANDIN_DIR),
                "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE": f"file://{store}"}

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"SGLangCPUServer({self.url}, model={self.model!r}, {state})"


def sglang_model_dir(cache: Path, seed: int = WEIGHTS_SEED) -> Path:
    """Build (once) and return the tiny model folder with the weights of torch seed ``seed``."""
    venv = ensure_sglang_cpu_env(cache)
    return build_tiny_model(cache / f"tiny-llama-w{seed}", venv_python(venv), weights_seed=seed)


def start_sglang_cpu_server(cache_dir: Path | None = None, *, port: int | None = None,
                            startup_timeout: float = 240.0, context_length: int = 1024,
                            max_total_tokens: int = 8192, max_running_requests: int = 8,
                            extra_args: Sequence[str] = ()) -> SGLangCPUServer:
    """Set up (cached) the venv and the tiny model, then start a :class:`SGLangCPUServer`.

    Args:
        cache_dir: the cache folder; default
            :func:`~rollout_kit.testing.default_sglang_cache_dir`.
        port: as for :class:`SGLangCPUServer` (so are the other keyword arguments:
            ``startup_timeout``, ``context_length``, ``max_total_tokens``,
            ``max_running_requests``, ``extra_args``).

    Returns:
        The running server (stop it with :meth:`SGLangCPUServer.stop`, or use it in
        ``with``).
    """
    cache = (cache_dir or default_sglang_cache_dir()).expanduser().resolve()
    venv = ensure_sglang_cpu_env(cache)
    model = sglang_model_dir(cache)
    return SGLangCPUServer(venv, model, port=port, startup_timeout=startup_timeout,
                           context_length=context_length, max_total_tokens=max_total_tokens,
                           max_running_requests=max_running_requests,
                           extra_args=extra_args).start()
