"""vLLM-flavoured routes (OpenAI-compatible ``/v1/completions`` etc.), 0.32-era shapes.

``requests`` parses bodies, ``errors`` words the error answers, ``completions`` and ``chat``
serve generation (``outputs``: what both share), ``routes`` the control routes and the
route table. Streams and fault effects are shared with SGLang (``..streaming``,
``..fault_effects``).
"""

from __future__ import annotations

from .routes import add_vllm_routes

__all__ = ["add_vllm_routes"]
