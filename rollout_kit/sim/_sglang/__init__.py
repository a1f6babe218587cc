"""SGLang-flavoured routes (native ``/generate`` and the control endpoints), 0.5.23 shapes.

``requests`` parses ``/generate`` bodies, ``generate`` serves it (plain and streamed),
``routes`` the control endpoints and the route table. Streams and fault effects are shared
with vLLM (``..streaming``, ``..fault_effects``).
"""

from __future__ import annotations

from .routes import add_sglang_routes

__all__ = ["add_sglang_routes"]
