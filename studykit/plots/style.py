"""One look for the kit's figures (docs/STYLE.md item 9): seaborn theme, units on axes, theoretical
ceilings and paper values as dashed reference lines. Every figure module of :mod:`studykit.plots`
starts from :func:`new` and marks references with :func:`ref_line`."""
from __future__ import annotations

__all__ = ["PAPER_STYLE", "finish", "new", "ref_line", "theme", "titled"]

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


def ref_line(ax, value: float, label: str | None = None, axis: str = "y", inline: bool = False, **style):
    """A dashed reference line (paper value or theoretical ceiling) at ``value``, named in the legend, or
    (``inline``) by a small label on the line itself, which keeps the legend for the data series."""
    kw = {**PAPER_STYLE, **style}
    legend_label = None if inline else label
    line = ax.axhline(value, label=legend_label, **kw) if axis == "y" else ax.axvline(value, label=legend_label, **kw)
    if inline and label:
        if axis == "y":
            ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), xytext=(0, 2),
                        textcoords="offset points", fontsize="x-small", color=kw["color"], va="bottom")
        else:
            ax.annotate(label, (value, 0.99), xycoords=("data", "axes fraction"), xytext=(2, 0),
                        textcoords="offset points", fontsize="x-small", color=kw["color"], va="top", rotation=90)
    return line


def titled(question: str, context: str | None = None) -> str:
    """A figure title: the question the figure answers, then (on a second line) its setting."""
    return question if not context else f"{question}\n{context}"


def finish(fig):
    """Lay ``fig`` out so that no label, tick or legend is cut off at its edges (tight layout, unless the
    figure already has a layout engine). Returns ``fig``."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    return fig
