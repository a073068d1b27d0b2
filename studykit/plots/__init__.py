"""The kit's figures, one module per figure kind; all share :mod:`studykit.plots.style`.

* :mod:`~studykit.plots.style`: theme, a new themed figure, dashed reference lines, question titles, layout
* :mod:`~studykit.plots.check`: what a program can check of the figure checklist (docs/CONTRIBUTING.md)
* :mod:`~studykit.plots.perfmodel`: the model's predictions (the paper's figures, the explorer, claims)
* :mod:`~studykit.plots.measure`: measurements and calibrations (all-reduce fit, encode/decode, bandwidth)
* :mod:`~studykit.plots.verify`: the model scored against measurements (verify notebook)
* :mod:`~studykit.plots.train`: training curves, time to accuracy, bytes sent
* :mod:`~studykit.plots.lessons`: the tour's and the gallery's figures
"""
from studykit.plots.style import PAPER_STYLE, finish, new, ref_line, theme, titled

__all__ = ["PAPER_STYLE", "finish", "new", "ref_line", "theme", "titled"]
