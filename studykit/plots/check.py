"""What a program can check of the figure checklist (docs/CONTRIBUTING.md, "Figures"): titles, labels
with units, legends that fit and stay small, no text cut off or overprinted. :func:`problems` lists what
a drawn figure breaks; ``tests/test_figures.py`` runs it on every figure of :mod:`studykit.plots`.

The rest of the checklist (log axes where data span decades, colour-blind-safe palette, references
dashed and named, markers for measurements, lines for models, intervals) needs a reader.
"""
from __future__ import annotations

import re

__all__ = ["MAX_LEGEND_ENTRIES", "MAX_LEGEND_FRACTION", "has_unit", "is_numeric_axis", "problems"]

#: series per panel (docs/STYLE.md item 14: more wants facets)
MAX_LEGEND_ENTRIES = 6
#: the largest share of an axes' area a legend inside it may cover
MAX_LEGEND_FRACTION = 0.3
#: pixels a text may poke out of the figure, or into its neighbour, before it counts
TOLERANCE_PX = 1.5

_NUMBER = re.compile(r"[-+\u2212]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+\u2212]?\d+)?\s*[%x×]?")
_POWER = re.compile(r"(\d+(\.\d+)?\s*(\\times|×)\s*)?10\^\{?[-\u2212]?\d+\}?")
_UNIT = re.compile(r"\([^()]+\)|\[[^\[\]]+\]")


def _clean(label: str) -> str:
    return label.replace("$", "").replace("\\mathdefault{", "").replace("\\mathdefault", "").strip().rstrip("}")


def is_numeric_axis(ticklabels) -> bool:
    """True when every non-empty tick label is a number (``12``, ``0.5``, ``1e3``, ``10^{2}``, ``80%``)."""
    texts = [_clean(t.get_text()) for t in ticklabels if t.get_visible() and t.get_text().strip()]
    return bool(texts) and all(_NUMBER.fullmatch(t) or _POWER.fullmatch(t) for t in texts)


def has_unit(label: str) -> bool:
    """A unit (or ``x`` for a ratio, ``%``, ``count``) in brackets or parentheses: ``time (ms)``."""
    return bool(_UNIT.search(label))


def _overlap(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def _texts_overlap(texts, renderer) -> list[tuple[str, str]]:
    # rotated labels are skipped: their axis-aligned boxes overlap although the slanted texts do not
    boxes = [(t.get_text(), t.get_window_extent(renderer).shrunk(0.98, 0.9)) for t in texts
             if t.get_visible() and t.get_text().strip() and t.get_rotation() % 180 == 0]
    return [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if _overlap(a[1], b[1]) > TOLERANCE_PX ** 2]


def _ticklabels(axis) -> list:
    """The tick labels matplotlib draws (those within the view limits; the axis keeps stale ones too)."""
    ticks = axis._update_ticks()  # the ticks draw() uses
    return [lab for t in ticks for lab in (t.label1, t.label2) if lab.get_visible() and lab.get_text().strip()]


def _drawn_texts(fig) -> list:
    """Every text the figure shows: titles, axis and tick labels, annotations, legends, figure texts."""
    out = [t for t in (getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None),
                       getattr(fig, "_supylabel", None)) if t is not None]
    out += list(fig.texts)
    for leg in fig.legends:
        out += [*leg.get_texts(), leg.get_title()]
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        out += _ticklabels(ax.xaxis) + _ticklabels(ax.yaxis)
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            out += [*leg.get_texts(), leg.get_title()]
    return [t for t in out if t.get_visible() and t.get_text().strip()]


def _is_colorbar(ax) -> bool:
    return getattr(ax, "_colorbar", None) is not None


def problems(fig, max_entries: int = MAX_LEGEND_ENTRIES, max_legend_fraction: float = MAX_LEGEND_FRACTION
             ) -> list[str]:
    """Everything ``fig`` breaks of the checkable rules, one sentence each (an empty list: it passes).

    Draws the figure first (``fig.canvas.draw()``) so that positions are final."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out: list[str] = []
    fbox = fig.bbox
    titles = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) is not None else []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        name = f"axes {i} ({ax.get_title() or ax.get_ylabel() or 'untitled'!r})"
        if _is_colorbar(ax):
            cb = ax._colorbar
            label = (cb.ax.get_ylabel() if cb.orientation == "vertical" else cb.ax.get_xlabel())
            if not label or not has_unit(label):
                out.append(f"{name}: colour bar without a label with a unit in brackets")
            continue
        titles.append(ax.get_title())
        if not ax.get_title().strip():
            out.append(f"{name}: no title")
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            label = axis.get_label_text()
            ticks = _ticklabels(axis)
            shared_hidden = not ticks
            if not label.strip():
                if not shared_hidden:
                    out.append(f"{name}: no {which} label")
            elif is_numeric_axis(ticks) and not has_unit(label):
                out.append(f"{name}: numeric {which} axis {label!r} has no unit in brackets or parentheses")
            for a, b in _texts_overlap(ticks, renderer):
                out.append(f"{name}: {which} tick labels {a!r} and {b!r} overlap")
        for a, b in _texts_overlap(ax.texts, renderer):
            out.append(f"{name}: labels {a!r} and {b!r} overlap")
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            n = len([t for t in leg.get_texts() if t.get_text()])
            if n > max_entries:
                out.append(f"{name}: {n} legend entries (at most {max_entries}: facet instead)")
            lbox, abox = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
            share = _overlap(lbox, abox) / max(abox.width * abox.height, 1.0)
            if share > max_legend_fraction:
                out.append(f"{name}: the legend covers {share:.0%} of the axes (at most {max_legend_fraction:.0%}: "
                           "move it outside or shorten it)")
    labels = [t for ax in fig.axes if ax.get_visible() and ax.axison
              for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    for a, b in _texts_overlap(labels, renderer):
        out.append(f"axis labels or titles {a[:40]!r} and {b[:40]!r} overlap")
    axis_texts = [t for ax in fig.axes if ax.get_visible() and ax.axison
                  for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *_ticklabels(ax.xaxis), *_ticklabels(ax.yaxis))
                  if t.get_visible() and t.get_text().strip()]
    for leg in fig.legends:
        n = len([t for t in leg.get_texts() if t.get_text()])
        if n > max_entries:
            out.append(f"figure legend: {n} entries (at most {max_entries})")
        lbox = leg.get_window_extent(renderer)
        hidden = [t.get_text() for t in axis_texts if _overlap(lbox, t.get_window_extent(renderer)) > TOLERANCE_PX ** 2]
        if hidden:
            out.append(f"figure legend covers axis text {hidden[0][:40]!r}" + (f" (and {len(hidden) - 1} more)"
                                                                                 if len(hidden) > 1 else ""))
    if not any("?" in t for t in titles):
        out.append("no title asks the figure's question (a '?' in a title or the suptitle)")
    for t in _drawn_texts(fig):
        box = t.get_window_extent(renderer)
        if (box.x0 < fbox.x0 - TOLERANCE_PX or box.y0 < fbox.y0 - TOLERANCE_PX
                or box.x1 > fbox.x1 + TOLERANCE_PX or box.y1 > fbox.y1 + TOLERANCE_PX):
            out.append(f"text {t.get_text()[:40]!r} lies (partly) outside the figure")
    return out
