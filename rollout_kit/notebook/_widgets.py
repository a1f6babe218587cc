"""Import-guarded access to ipywidgets (the only place rollout_kit imports it)."""

from __future__ import annotations

from typing import Any

try:
    import ipywidgets as _ipywidgets
except ImportError as exc:  # pragma: no cover - ipywidgets is a runtime dependency
    raise ImportError(
        "rollout_kit.notebook needs ipywidgets: pip install 'ipywidgets>=8.1'"
    ) from exc

widgets: Any = _ipywidgets
