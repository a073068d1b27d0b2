"""The measured bandwidth campaign as one figure per campaign (Agarwal et al. 2022,
https://arxiv.org/abs/2103.00543, Figs. 3 and 19, measured): iteration time and speed-up over
syncSGD against the emulated bandwidth, one column per model, the model's predictions as lines."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from studykit.measure import crossover as X
from studykit.plots.measure import measured_bandwidth_plot


def campaign_figure(table: pd.DataFrame, methods: list[str], predicted: pd.DataFrame | None = None,
                    baseline: str = "syncSGD"):
    """Two rows (iteration time; speed-up over ``baseline``) x one column per model of ``table``
    (:func:`studykit.measure.crossover.iteration_table` of one campaign: one card kind, one world size).
    ``predicted``: :func:`studykit.measure.crossover.predicted_table` of the same records, or None."""
    if table.empty:
        raise ValueError("no iteration records to draw")
    sizes = sorted(table["world_size"].unique())
    if len(sizes) != 1:
        raise ValueError(f"one world size per figure, got {sizes}: draw each campaign alone")
    speedups = X.speedup_table(table, baseline)
    models = list(table["model"].unique())
    fig, axes = plt.subplots(2, len(models), figsize=(5.2 * len(models), 8.5), squeeze=False)
    for j, model in enumerate(models):
        pm = None
        if predicted is not None:
            pm = predicted[predicted["model"] == model]
            if "world_size" in pm.columns:
                pm = pm[pm["world_size"] == sizes[0]]
        measured_bandwidth_plot(table[table["model"] == model], methods, y="ms", predicted=pm, ax=axes[0, j],
                                legend=j == 0, title=f"{model}: iteration time (forward + backward + step)")
        measured_bandwidth_plot(speedups[speedups["model"] == model], methods, y="speedup", baseline=baseline,
                                predicted=pm, ax=axes[1, j], legend=j == 0,
                                title=f"{model}: speed-up over {baseline}")
    gpus = ", ".join(sorted(table["gpu"].astype(str).unique()))
    fig.suptitle(f"Below which bandwidth does each method beat {baseline}? (measured on {sizes[0]} x {gpus})",
                 y=1.0)
    fig.tight_layout()
    return fig, axes
