"""The figure of the many-panel plots (:func:`~rollout_kit.plotting.dashboard`,
:func:`~rollout_kit.plotting.load_sweep_figure`,
:func:`~rollout_kit.plotting.conversation_figure`): shown once in a notebook.

A figure made through pyplot is shown by the inline backend at the end of the cell, and the
cell's value is shown too: ``load_sweep_figure(...)`` as a cell's last line drew the figure
twice. :class:`PyplotFigure` shows its PNG when IPython displays it and closes itself in
pyplot, so the end-of-cell flush does not show it again.
"""

from __future__ import annotations

import io

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure


class PyplotFigure(Figure):
    """A :class:`~matplotlib.figure.Figure` that IPython displays once, not twice."""

    def _ipython_display_(self) -> None:
        from IPython.display import Image, display

        if "inline" not in matplotlib.get_backend():  # a window or a widget shows it itself
            display({"text/plain": repr(self)}, raw=True)  # type: ignore[no-untyped-call]
            return
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")  # as the inline backend does
        display(Image(data=buf.getvalue(), format="png"))  # type: ignore[no-untyped-call]
        manager = self.canvas.manager
        if manager is not None and plt.fignum_exists(manager.num):
            plt.close(self)  # shown: the cell's end would show it again


def new_figure(figsize: tuple[float, float], pyplot: bool) -> Figure:
    """A constrained-layout figure: through pyplot (inline in notebooks, shown once), or a
    standalone one for scripts that only save it."""
    if pyplot:
        fig = plt.figure(figsize=figsize, layout="constrained", FigureClass=PyplotFigure)
        assert isinstance(fig, Figure)
        return fig
    return Figure(figsize=figsize, layout="constrained")
