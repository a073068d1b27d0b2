"""One look for the kit's figures (docs/STYLE.md item 9): seaborn theme, units on axes, theoretical
ceilings and paper values as dashed reference lines. Every figure module of :mod:`studykit.plots`
starts from :func:`new` and marks references with :func:`ref_line`."""
from __future__ import annotations

__all__ = ["theme", "new", "ref_line", "PAPER_STYLE"]

#: paper values: dashed, dark grey
PAPER_STYLE = dict(color="0.25", linestyle="--", linewidth=1.2)


def theme() -> None:
    """Apply the kit's plotting theme (seaborn whitegrid, colorblind palette)."""
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")


def new(ncols: int = 1, width: float = 6.0, height: float = 4.0, **kw):
    """A themed figure with ``ncols`` axes side by side."""
    import matplotlib.pyplot as plt

    theme()
    fig, ax = plt.subplots(1, ncols, figsize=(width * ncols, height), **kw)
    return fig, ax


def ref_line(ax, value: float, label: str | None = None, axis: str = "y", **style):
    """A dashed reference line (paper value or theoretical ceiling) at ``value``."""
    kw = {**PAPER_STYLE, **style}
    line = ax.axhline(value, label=label, **kw) if axis == "y" else ax.axvline(value, label=label, **kw)
    return line
