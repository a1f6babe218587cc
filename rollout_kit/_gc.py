"""Garbage-collector settings while rollouts run: the one module that touches :mod:`gc`.

CPython's cyclic collector runs on the event loop's thread and holds it for as long as a pass
takes. With many requests in flight the default settings (a pass every 700 allocations, and
now and then a full pass over every object of the process: a notebook's pandas and
matplotlib included) stall the loop for far longer than a request's own work; with the heap
that existed before the rollouts frozen out of the passes and the youngest generation's
threshold at 10,000 the stalls stay short (the "max event-loop lag" rows of
``bench/bench_controller.py``). vLLM freezes its server's heap after start-up the same way.

While at least one :class:`GcHold` is held, in the whole process:

* the objects that existed when the first hold began are frozen (``gc.freeze()``): no pass
  visits them (unreachable cycles among them too, until the last release: the controller's
  own objects free themselves by reference counting once closed, so a closed controller
  leaves none). When the process had frozen objects itself before, the freeze is left alone;
* the youngest generation's threshold is at least :data:`YOUNG_THRESHOLD` (never lowered).

The last release restores the thresholds and unfreezes what the first hold froze (garbage
cycles among those objects are collected from then on). Nothing is collected here: starting
a hold costs microseconds, not a full pass. Thread-safe; holds nest and interleave.
"""

from __future__ import annotations

import gc
import threading
from types import TracebackType

#: The youngest generation's threshold while a hold is active (CPython's default is 700).
YOUNG_THRESHOLD = 10_000

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, int, int] | None = None
_froze = False


def holders() -> int:
    """How many holds are active now."""
    return _holders


class GcHold:
    """One hold on the tuned collector settings, taken at construction.

    :meth:`release` ends it (idempotent); a ``with`` block releases on exit.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        global _holders, _saved, _froze
        with _lock:
            if _holders == 0:
                _saved = gc.get_threshold()
                _froze = gc.get_freeze_count() == 0
                if _froze:
                    gc.freeze()
                young, *older = _saved
                gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)
            _holders += 1
        self._held = True

    @property
    def held(self) -> bool:
        """Whether this hold is still active."""
        return self._held

    def release(self) -> None:
        """End this hold; the last one restores the collector's settings."""
        global _holders, _saved, _froze
        with _lock:
            if not self._held:
                return
            self._held = False
            _holders -= 1
            if _holders == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                if _froze:
                    gc.unfreeze()
                _saved, _froze = None, False

    def __enter__(self) -> GcHold:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
