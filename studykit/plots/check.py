"""What a program can check of the figure checklist (docs/CONTRIBUTING.md, "Figures"): titles, labels
with units, legends that fit and stay small, no text cut off or overprinted (rotated tick labels too),
reference lines on the panels they belong to, measured data drawn with its spread, and axis ranges no
narrower than that spread. :func:`problems` lists what a drawn figure breaks; ``tests/test_figures.py``
runs it on every figure of :mod:`studykit.plots`, and :func:`checking_kernels` on every figure a notebook
shows (``tests/test_notebooks.py``).

Two conventions let a figure say what a program cannot guess, through the artists' ``gid``:

* ``gid="ref:<panel>"`` (:func:`ref_gid`) on a reference line that belongs to one panel (a model's paper
  value): the panel's title must name ``<panel>``;
* ``gid="measured"`` (:data:`MEASURED`, or ``"measured:<key>"``) on an artist that draws measured values:
  it must come with its spread, either as error bars of the same ``errorbar`` call (or ``bar(yerr=...)``)
  or as an artist whose gid is ``"spread"`` (``"spread:<key>"``), e.g. a ``fill_between`` band.

The rest of the checklist (log axes where data span decades, colour-blind-safe palette, references
dashed and named, markers for measurements, lines for models, what the intervals are) needs a reader.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import numpy as np

__all__ = ["MAX_LEGEND_ENTRIES", "MAX_LEGEND_FRACTION", "MEASURED", "SPREAD", "checking_kernels", "has_unit",
           "is_numeric_axis", "kernel_problems", "problems", "ref_gid", "watch_kernel"]

#: series per panel (docs/STYLE.md item 14: more wants facets)
MAX_LEGEND_ENTRIES = 6
#: the largest share of an axes' area a legend inside it may cover
MAX_LEGEND_FRACTION = 0.3
#: pixels a text may poke out of the figure, or into its neighbour, before it counts
TOLERANCE_PX = 1.5
#: gid of an artist that draws measured values (``"measured:<key>"`` pairs it with a ``"spread:<key>"`` artist)
MEASURED = "measured"
#: gid of an artist that draws a measured series' spread (a band, bars drawn apart from the points)
SPREAD = "spread"
#: gid prefix of a reference line that belongs to one panel
REF = "ref:"

_NUMBER = re.compile(r"[-+\u2212]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+\u2212]?\d+)?\s*[%x×]?")
_POWER = re.compile(r"(\d+(\.\d+)?\s*(\\times|×)\s*)?10\^\{?[-\u2212]?\d+\}?")
_UNIT = re.compile(r"\([^()]+\)|\[[^\[\]]+\]")


def ref_gid(panel: str) -> str:
    """The gid of a reference line that belongs to the panel whose title names ``panel``: ``ref:<panel>``."""
    if not panel or not str(panel).strip():
        raise ValueError("ref_gid: give the panel's name (a word of its title, e.g. the model 'bert_base')")
    return f"{REF}{panel}"


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


def _text_box(t, renderer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A drawn text as a turned rectangle: (centre, half width and height, its two unit axes as rows), in
    pixels, shrunk a little (a glyph's box is larger than its ink). The box matplotlib reports for a turned
    text is upright and larger; its centre is the turned rectangle's centre."""
    box = t.get_window_extent(renderer)
    rotation = t.get_rotation()
    if rotation % 180:
        t.set_rotation(0)  # the text's own width and height
        flat = t.get_window_extent(renderer)
        t.set_rotation(rotation)
        w, h = flat.width, flat.height
    else:
        w, h = box.width, box.height
    a = np.deg2rad(rotation)
    axes = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
    return np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]), np.array([0.49 * w, 0.45 * h]), axes


def _boxes_overlap(a, b) -> bool:
    """Two turned rectangles of :func:`_text_box` overlap by more than :data:`TOLERANCE_PX` along every
    separating direction (the separating axis test)."""
    (ca, ha, ua), (cb, hb, ub) = a, b
    d = cb - ca
    for axis in (*ua, *ub):
        ra = np.abs(ua @ axis) @ ha
        rb = np.abs(ub @ axis) @ hb
        if ra + rb - abs(d @ axis) <= TOLERANCE_PX:
            return False
    return True


def _texts_overlap(texts, renderer) -> list[tuple[str, str]]:
    """Pairs of visible texts whose (turned) boxes overlap: overprinted labels, rotated ones included."""
    boxes = [(t.get_text(), _text_box(t, renderer)) for t in texts if t.get_visible() and t.get_text().strip()]
    return [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _boxes_overlap(a[1], b[1])]


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


# ------------------------------------------------------------------ conventions: reference lines, measured data
def _gid(artist) -> str:
    gid = artist.get_gid()
    return gid if isinstance(gid, str) else ""


def _label(artist, fallback: str) -> str:
    lab = artist.get_label() if hasattr(artist, "get_label") else ""
    return lab if lab and not lab.startswith("_") else fallback


def _ref_problems(ax, name: str) -> list[str]:
    """Reference lines declared for a panel (``gid="ref:<panel>"``) on an axes whose title does not name it."""
    title = " ".join(t.get_text() for t in (ax.title, ax._left_title, ax._right_title))
    out = []
    for a in [*ax.lines, *ax.collections]:
        gid = _gid(a)
        if not gid.startswith(REF):
            continue
        panel = gid[len(REF):]
        if not re.search(rf"(?<![\w.]){re.escape(panel)}(?![\w])", title):
            out.append(f"{name}: reference line {_label(a, gid)!r} belongs to the {panel!r} panel, not to this one "
                       f"(its title does not name {panel!r})")
    return out


def _is_measured(gid: str) -> bool:
    return gid == MEASURED or gid.startswith(MEASURED + ":")


def _spread_of(gid: str) -> str:
    return SPREAD + gid[len(MEASURED):]


def _segment_lengths(collection) -> list[tuple[float, str]]:
    """(length in pixels, ``"x"`` or ``"y"``) of each drawn segment of an error-bar line collection."""
    out = []
    transform = collection.get_transform()
    for seg in collection.get_segments():
        if len(seg) < 2:
            continue
        px = transform.transform(np.asarray(seg, float))
        dx, dy = np.ptp(px[:, 0]), np.ptp(px[:, 1])
        if np.isfinite(dx) and np.isfinite(dy):
            out.append((float(dy), "y") if dy >= dx else (float(dx), "x"))
    return out


def _band_lengths(collection) -> list[tuple[float, str]]:
    """Vertical extent in pixels of a band (``fill_between``) at each of its x positions."""
    out = []
    for path in collection.get_paths():
        px = collection.get_transform().transform(path.vertices)
        px = px[np.isfinite(px).all(axis=1)]
        for x in np.unique(np.round(px[:, 0], 1)):
            ys = px[np.isclose(np.round(px[:, 0], 1), x), 1]
            out.append((float(np.ptp(ys)), "y"))
    return out


def _measured_series(ax) -> dict[str, dict]:
    """{gid: {label, lengths [(px, axis)], marker_px, cap_px, spread_artist}} of the axes' measured artists."""
    dpi = ax.figure.dpi
    series: dict[str, dict] = {}
    owned: set[int] = set()  # error bars and caps: part of a measured series, not one of their own

    def entry(gid, label):
        return series.setdefault(gid, {"label": label, "lengths": [], "marker_px": 0.0, "cap_px": 0.0,
                                       "spread_artist": False})

    for c in ax.containers:
        bars_of = None
        if hasattr(c, "has_yerr"):  # ErrorbarContainer: (data line, caps, bar collections)
            data_line, caps, bars = c.lines
            owned.update(id(a) for a in (*caps, *bars))
            if data_line is not None and _is_measured(_gid(data_line)):
                bars_of = (entry(_gid(data_line), _label(data_line, _label(c, _gid(data_line)))), data_line, caps, bars)
        elif getattr(c, "errorbar", None) is not None and c.patches and _is_measured(_gid(c.patches[0])):
            _, caps, bars = c.errorbar.lines  # bar(yerr=...)
            owned.update(id(a) for a in (*caps, *bars))
            bars_of = (entry(_gid(c.patches[0]), _label(c, _gid(c.patches[0]))), None, caps, bars)
        if bars_of is None:
            continue
        e, data_line, caps, bars = bars_of
        for lc in bars:
            e["lengths"] += _segment_lengths(lc)
        if data_line is not None and data_line.get_marker() not in (None, "", "None", " "):
            e["marker_px"] = max(e["marker_px"], data_line.get_markersize() * dpi / 72)
        if caps:
            e["cap_px"] = max(e["cap_px"], max(cap.get_markersize() for cap in caps) * dpi / 72)
    for a in [*ax.lines, *ax.collections, *ax.patches]:
        gid = _gid(a)
        if id(a) in owned or not _is_measured(gid):
            continue
        entry(gid, _label(a, gid))
    for a in [*ax.lines, *ax.collections, *ax.patches]:
        gid = _gid(a)
        if id(a) in owned or not (gid == SPREAD or gid.startswith(SPREAD + ":")):
            continue
        for mgid, e in series.items():
            if _spread_of(mgid) == gid:
                e["spread_artist"] = True
                if hasattr(a, "get_paths"):
                    e["lengths"] += _band_lengths(a) if not hasattr(a, "get_segments") else _segment_lengths(a)
    return series


def _measured_problems(ax, name: str) -> list[str]:
    """Measured series without their spread, with a spread hidden under the markers, or on an axis whose range
    is narrower than that spread."""
    out = []
    box = ax.get_window_extent()
    for gid, e in _measured_series(ax).items():
        lengths = e["lengths"]
        if not lengths and not e["spread_artist"]:
            out.append(f"{name}: measured data {e['label']!r} drawn without its spread (error bars from the same "
                       f"errorbar() call, or an artist with gid {_spread_of(gid)!r}; say which spread in the legend "
                       "or title)")
            continue
        typical = float(np.median([px for px, _ in lengths])) if lengths else 0.0
        if lengths and not e["spread_artist"] and e["marker_px"] and typical <= e["marker_px"] \
                and e["cap_px"] <= e["marker_px"]:
            out.append(f"{name}: the spread of measured data {e['label']!r} is hidden under its markers (most bars "
                       f"shorter than the {e['marker_px']:.0f} px marker, no caps wider than it): smaller markers "
                       "or wider caps")
        for which, span in (("y", box.height), ("x", box.width)):
            along = [px for px, a in lengths if a == which]
            if along and float(np.median(along)) > span + TOLERANCE_PX:
                lo, hi = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
                out.append(f"{name}: the {which} axis ({lo:.3g} to {hi:.3g}) is narrower than the spread of measured "
                           f"data {e['label']!r} (its median interval is longer than the axis): differences within "
                           "the noise fill the panel; widen the range")
    return out


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
        out += _ref_problems(ax, name)
        out += _measured_problems(ax, name)
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


# ------------------------------------------------------------------ every figure a notebook shows
#: environment variable naming the file a watched kernel writes its figures' problems to (JSON lines)
REPORT_ENV = "STUDYKIT_FIGURE_REPORT"
_STARTUP = ("import os\nfrom studykit.plots import check\ncheck.watch_kernel(os.environ[check.REPORT_ENV])\n")


def _figure_title(fig) -> str:
    sup = getattr(fig, "_suptitle", None)
    titles = [sup.get_text()] if sup is not None else []
    titles += [ax.get_title() for ax in fig.axes]
    return next((t.split("\n")[0] for t in titles if t.strip()), "untitled")


def watch_kernel(report_path: str | Path) -> None:
    """In an IPython kernel: check every figure the moment it is first rendered (``print_figure``, which the
    inline backend, ``plt.show`` and widgets all call) and append ``{"figure": n, "title", "problems"}`` (n
    counting from 1 in the order shown) to ``report_path``, one JSON line per figure. Installed by the
    startup file of :func:`checking_kernels`."""
    import weakref

    from matplotlib.backend_bases import FigureCanvasBase

    seen: weakref.WeakSet = weakref.WeakSet()
    count = [0]
    original = FigureCanvasBase.print_figure

    def print_figure(self, *args, **kwargs):
        fig = self.figure
        if fig not in seen:
            seen.add(fig)
            count[0] += 1
            try:
                found = problems(fig)
            except Exception as exc:  # a figure the checker cannot read is reported, the notebook goes on
                found = [f"the checker failed on it: {type(exc).__name__}: {exc}"]
            with open(report_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"figure": count[0], "title": _figure_title(fig), "problems": found}) + "\n")
        return original(self, *args, **kwargs)

    FigureCanvasBase.print_figure = print_figure


@contextlib.contextmanager
def checking_kernels(folder: str | Path):
    """While open, every IPython kernel this process starts (papermill, nbclient) runs :func:`watch_kernel`
    (through an IPython startup file in ``folder``); yields the report file, read by :func:`kernel_problems`.
    The environment is restored on exit."""
    folder = Path(folder)
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-studykit-figure-check.py").write_text(_STARTUP, encoding="utf-8")
    report = folder / "figures.jsonl"
    report.write_text("", encoding="utf-8")
    saved = {k: os.environ.get(k) for k in ("IPYTHONDIR", REPORT_ENV)}
    os.environ.update({"IPYTHONDIR": str(folder / "ipython"), REPORT_ENV: str(report)})
    try:
        yield report
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def kernel_problems(report: str | Path) -> list[str]:
    """The problems a watched kernel wrote (:func:`checking_kernels`), one line each: ``figure 3 ('title'):
    problem``. An empty list: every figure passed."""
    from studykit.measure.records import load_records  # the kit's one JSONL reader

    return [f"figure {r['figure']} ({r['title'][:60]!r}): {p}"
            for r in load_records(report, dedupe=False, quiet=True) for p in r["problems"]]
