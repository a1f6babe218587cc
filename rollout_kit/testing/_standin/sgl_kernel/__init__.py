"""An import-only stand-in for SGLang's CUDA kernel package, so SGLang's server runs on a CPU
in the tests: PyPI has no CPU build of ``sgl_kernel`` and SGLang imports its kernel names at
load time but never calls them for a tiny model served with torch-native attention; any name
returns a function that raises ``NotImplementedError`` naming the kernel when called, so a
path that does need one (AMX attention, int8 quantisation, speculative decoding, KV moves
between cache tiers) fails loudly instead of computing something wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__version__ = "0.0.0+rollout-kit-standin"


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if name.startswith("__"):  # dunder look-ups (``__path__``, ``__file__`` …) stay normal
        raise AttributeError(name)

    def kernel(*args: Any, **kwargs: Any) -> NoReturn:
        del args, kwargs
        raise NotImplementedError(
            f"sgl_kernel.{name} was called, but this sgl_kernel is rollout-kit's import-only "
            "stand-in for SGLang's CUDA kernels (no CPU build exists); this server path "
            "needs the real kernel package")

    kernel.__name__ = kernel.__qualname__ = name
    return kernel
