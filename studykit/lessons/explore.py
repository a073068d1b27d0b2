"""The explorer notebook's one pure function: settings in, iteration-time breakdown out.

:func:`explore_data` computes (syncSGD, Sec. 4.1; compressor, App. B) for one
setting plus the speed-up curve over GPU counts; :func:`explore` draws it.
Under the bars, :func:`ranking` ranks syncSGD, the fp16 baseline and every compressor at the same
setting (:func:`studykit.perfmodel.whatif.ranking_at`, i.e. ``advise.advise(...).ranking(...)``, the
function ``python -m studykit advise`` and the what_if notebook use), each time with its interval from the
calibration. The notebook makes one call, :func:`app`: the sliders of :func:`controls` (every one with
``continuous_update=False``) over one output that :func:`bind`'s callback fills with the figure and the table,
when the sliders are built (so the page shows them before any slider moves) and again after every move. No
logic lives in the widget callback.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit import compressors, models
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import MIB, Hardware, Workload, predict

__all__ = ["main_param", "compressor_choices", "explore_data", "explore", "ranking", "bind", "controls", "app",
           "CURVE_GPUS", "RANKING_TOP"]

#: rows of the ranking table under the bars
RANKING_TOP = 8
#: GPU counts of the speed-up curve (powers of two: one plan() per count, cached)
CURVE_GPUS = (2, 4, 8, 16, 32, 64, 128, 256)


def main_param(compressor: str) -> tuple[str | None, object]:
    """The parameter the explorer's slider moves (rank, ratio, bits or levels) and its default."""
    if compressor == "none":
        return None, None
    params = compressors.parameters(compressor)
    key = compressors.metadata(compressor).key_param  # on the class
    if key in params:
        return key, params[key]
    for name, default in params.items():  # first numeric parameter
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            return name, default
    return None, None


def compressor_choices(calibration: Calibration, model: str) -> list[str]:
    """Compressors with an encode/decode time in the calibration (any model: scaled by size), plus 'none'."""
    names = sorted(({c for c, _ in calibration.compressors()} & set(compressors.available())) - {"none"})
    return ["none"] + names


def _params_for(compressor: str, param_value, calibration: Calibration) -> dict:
    name, default = main_param(compressor)
    if name is None:
        return {}
    if param_value is None:  # the calibration's first entry for this compressor, else the default
        for c, p in calibration.compressors():
            if c == compressor and name in p:
                return dict(p)
        return {name: default}
    value = int(round(param_value)) if isinstance(default, int) and not isinstance(default, bool) else float(param_value)
    return {name: value}


def explore_data(calibration: Calibration, model: str = "resnet101", batch_size: int = 64,
                 bandwidth_gbps: float = 10.0, world_size: int = 64, compute_speedup: float = 1.0,
                 t_comp_ms: float | None = None, bucket_mb: float = 25.0, alpha_us: float | None = None,
                 gamma: float | None = None, compressor: str = "powersgd", param_value: float | None = None) -> dict:
    """Breakdown (ms) of syncSGD and ``compressor`` at one setting, and the speed-up vs GPUs curve.

    ``t_comp_ms``/``alpha_us``/``gamma`` default to the calibration's values;
    ``param_value`` sets the compressor's main parameter (:func:`main_param`).
    """
    hw = Hardware.from_calibration(calibration, bandwidth_gbps=bandwidth_gbps, compute_speedup=compute_speedup,
                                   alpha_s=None if alpha_us is None else alpha_us * 1e-6, gamma=gamma)
    w = Workload(model, batch_size, t_comp_s=None if t_comp_ms is None else t_comp_ms / 1e3,
                 bucket_bytes=bucket_mb * MIB)
    comp = None if compressor in (None, "none") else compressor
    params = _params_for(compressor, param_value, calibration) if comp else {}
    gpus = np.array(sorted(set(CURVE_GPUS) | {int(world_size)}))
    pr = predict(w, hw, gpus, comp, params, calibration=calibration)
    i = int(np.nonzero(gpus == int(world_size))[0][0])
    s = {k: float(np.broadcast_to(v, gpus.shape)[i]) for k, v in pr.sync.items()}
    out = {"model": model, "world_size": int(world_size), "bandwidth_gbps": bandwidth_gbps,
           "linear_ms": float(pr.linear_s) * 1e3, "label": compressor,
           "sync": {"compute_ms": s["compute_s"] * 1e3, "exposed_comm_ms": s["exposed_comm_s"] * 1e3,
                    "encode_decode_ms": 0.0, "total_ms": s["total_s"] * 1e3},
           "compressed": None, "speedup": None, "notes": dict(pr.notes), "params": params}
    if comp is not None:
        c = {k: float(np.broadcast_to(v, gpus.shape)[i]) for k, v in pr.compressed.items()}
        out["label"] = f"{compressor} {params}" if params else compressor
        out["compressed"] = {"compute_ms": c["compute_s"] * 1e3, "exposed_comm_ms": c["comm_s"] * 1e3,
                             "encode_decode_ms": c["encode_decode_s"] * 1e3, "total_ms": c["total_s"] * 1e3,
                             "wire_bytes": float(np.broadcast_to(pr.wire_bytes, gpus.shape)[i])}
        sp = np.broadcast_to(pr.speedup, gpus.shape)
        out["speedup"] = float(sp[i])
        out["curve"] = pd.DataFrame({"world_size": gpus, "speedup": sp})
    return out


def explore(calibration: Calibration, model: str = "resnet101", batch_size: int = 64, bandwidth_gbps: float = 10.0,
            world_size: int = 64, compute_speedup: float = 1.0, t_comp_ms: float | None = None,
            bucket_mb: float = 25.0, alpha_us: float | None = None, gamma: float | None = None,
            compressor: str = "powersgd", param_value: float | None = None):
    """Draw :func:`explore_data`: breakdown bars (left), speed-up vs GPUs (right). Returns ``(fig, axes)``."""
    from studykit.plots import perfmodel as plots

    d = explore_data(calibration, model, batch_size, bandwidth_gbps, world_size, compute_speedup, t_comp_ms,
                     bucket_mb, alpha_us, gamma, compressor, param_value)
    fig, axes = plots.new(ncols=2, width=5.5)
    plots.breakdown_plot(d, ax=axes[0])
    if d["compressed"] is not None:
        plots.speedup_curve_plot(d["curve"], current=(d["world_size"], d["speedup"]), ax=axes[1])
        how = d["notes"].get("t_encode_decode", "").split(" (")[0]
        scaled = "; scaled by size" if "scaled by parameter count" in d["notes"].get("t_encode_decode", "") else ""
        axes[1].set_title(f"T_encode_decode = {d['compressed']['encode_decode_ms']:.0f} ms ({how}{scaled})",
                          fontsize="small")
    else:
        axes[1].set_axis_off()
    fig.suptitle(f"{model}, batch {batch_size}, {world_size} GPUs, {bandwidth_gbps:g} Gbit/s, "
                 f"compute x{compute_speedup:g}", fontsize="medium")
    fig.tight_layout()
    return fig, axes


def ranking(calibration: Calibration, model: str = "resnet101", batch_size: int = 64, bandwidth_gbps: float = 10.0,
            world_size: int = 64, compute_speedup: float = 1.0, t_comp_ms: float | None = None,
            bucket_mb: float = 25.0, alpha_us: float | None = None, gamma: float | None = None,
            top: int | None = RANKING_TOP, **_ignored):
    """The advise ranking at the sliders' setting (:func:`studykit.perfmodel.whatif.ranking_at`): a DataFrame,
    fastest first, each time with the calibration's interval (moved with the ``T_comp`` / alpha / gamma
    sliders: :func:`studykit.perfmodel.whatif.moved`). ``compute_speedup`` divides ``T_comp`` and
    ``T_encode_decode``, as in :func:`explore`; the compressor sliders do not change it."""
    from studykit.perfmodel import whatif

    df = whatif.ranking_at(model, batch_size, world_size, bandwidth_gbps, calibration,
                           t_comp_s=None if t_comp_ms is None else t_comp_ms / 1e3,
                           alpha_s=None if alpha_us is None else alpha_us * 1e-6, gamma=gamma,
                           compute_speedup=compute_speedup, bucket_bytes=bucket_mb * MIB, top=top)
    df.attrs["note"] = (f"{model}, batch {batch_size}, {world_size} GPUs, {bandwidth_gbps:.3g} Gbit/s"
                        + (f", compute x{compute_speedup:g}" if compute_speedup != 1 else "")
                        + ": fastest first; iteration time (ms) with its interval from the calibration; within the "
                        "model's error of the best: the model cannot tell them apart")
    return df


def _ranking_html(df) -> str:
    import html

    shown = df.assign(iteration_ms=df["iteration_ms"].map("{:.1f}".format),
                      low_ms=df["low_ms"].map("{:.1f}".format), high_ms=df["high_ms"].map("{:.1f}".format),
                      within_error_of_best=df["within_error_of_best"].map({True: "yes", False: ""}))
    return (f"<p class='studykit-ranking-note'>{html.escape(df.attrs.get('note', ''))}</p>"
            + shown.to_html(index=False, classes="studykit-ranking", border=0))


def bind(calibration: Calibration):
    """:func:`explore` and :func:`ranking` with the calibration fixed: the callback the explorer's sliders wrap.

    Returns one object that displays as the figure (PNG), its speed-up as text and the ranking table, so that
    ``ipywidgets.interactive(..., auto_display=True)`` sends them in one display message (every output into
    the interact's Output widget is another chance for nbclient's lost wake-up in headless runs:
    :mod:`studykit.nbtools.jupyter_fix`). The figure is closed, so nothing is left for the inline backend
    to flush after the cell.
    """
    def explore_with(**settings):
        import matplotlib.pyplot as plt

        fig, axes = explore(calibration, **settings)
        try:
            return _FigureWithCaption(fig, axes[0].get_title() or "syncSGD only", ranking(calibration, **settings))
        finally:
            plt.close(fig)

    explore_with.__name__ = explore_with.__qualname__ = "explore"
    explore_with.__doc__ = explore.__doc__
    return explore_with


class _FigureWithCaption:
    """A figure as PNG (exactly what the inline backend sends) plus a text caption, in one display message."""

    def __init__(self, fig, caption: str, table=None):
        from IPython.core.pylabtools import print_figure

        self.png = print_figure(fig, "png")
        self.caption = caption
        self.table = table

    def _repr_mimebundle_(self, include=None, exclude=None):
        import base64
        import html

        b64 = base64.b64encode(self.png).decode()
        table = "" if self.table is None else _ranking_html(self.table)
        text = self.caption if self.table is None else f"{self.caption}\n{self.table.to_string(index=False)}"
        return {"image/png": b64, "text/plain": text,
                "text/html": f"<img src='data:image/png;base64,{b64}' alt='{html.escape(self.caption)}'>"
                             f"<p class='studykit-speedup'>{html.escape(self.caption)}</p>{table}"}


def controls(calibration: Calibration, model: str = "resnet101", batch_size: int = 64, bandwidth_gbps: float = 10.0,
             world_size: int = 64, compressor: str = "powersgd", param_value: float = 4.0) -> dict:
    """The explorer's widgets (all with ``continuous_update=False``), keyed by :func:`explore`'s arguments,
    starting at the given values."""
    import ipywidgets as W

    t_comp, _ = calibration.t_comp_s(model, batch_size)
    kw = dict(continuous_update=False, style={"description_width": "initial"})
    alpha = calibration.alpha_s.value if calibration.alpha_s else 1e-5
    gamma = calibration.gamma.value if calibration.gamma else 1.05
    return {
        "model": W.Dropdown(options=[m for m in ("resnet50", "resnet101", "bert_base", "vgg19")
                                     if m in models.available()] + ([model] if models.check(model) not in
                                     ("resnet50", "resnet101", "bert_base", "vgg19") else []),
                            value=model, description="model"),
        "batch_size": W.IntSlider(value=batch_size, min=8, max=256, step=8, description="batch / GPU", **kw),
        "bandwidth_gbps": W.FloatLogSlider(value=bandwidth_gbps, base=10, min=-1, max=np.log10(400), step=0.05,
                                           description="bandwidth (Gbit/s)", **kw),
        "world_size": W.IntSlider(value=world_size, min=2, max=256, description="GPUs", **kw),
        "compute_speedup": W.FloatSlider(value=1.0, min=0.5, max=8.0, step=0.25, description="compute speed-up (x)",
                                         **kw),
        "t_comp_ms": W.FloatSlider(value=round(t_comp * 1e3, 1), min=5.0, max=1500.0, step=1.0,
                                   description="T_comp (ms)", **kw),
        "bucket_mb": W.FloatLogSlider(value=25.0, base=2, min=0, max=9, step=0.5, description="bucket (MiB)", **kw),
        "alpha_us": W.FloatLogSlider(value=alpha * 1e6, base=10, min=-1, max=3, step=0.1, description="alpha (us)",
                                     **kw),
        "gamma": W.FloatSlider(value=gamma, min=1.0, max=1.5, step=0.01, description="gamma", **kw),
        "compressor": W.Dropdown(options=compressor_choices(calibration, model), value=compressor,
                                 description="compressor"),
        "param_value": W.FloatLogSlider(value=param_value, base=2, min=-10, max=6, step=1,
                                        description="main parameter (rank / ratio / bits)", **kw),
    }


def app(calibration: Calibration, model: str = "resnet101", batch_size: int = 64, bandwidth_gbps: float = 10.0,
        world_size: int = 64, compressor: str = "powersgd", param_value: float = 4.0, interactive: bool = True):
    """The explorer: with ``interactive``, the sliders of :func:`controls` over one output holding the figure and
    the ranking (``ipywidgets.interactive`` of :func:`bind`, drawn when built and after every move; its
    ``result`` is what it shows); without, the same figure and table once, for a run with no live kernel."""
    if not interactive:
        return bind(calibration)(model=model, batch_size=batch_size, bandwidth_gbps=bandwidth_gbps,
                                 world_size=world_size, compressor=compressor, param_value=param_value)
    import ipywidgets as W

    widgets = controls(calibration, model, batch_size, bandwidth_gbps, world_size, compressor, param_value)
    return W.interactive(bind(calibration), {"auto_display": True}, **widgets)
