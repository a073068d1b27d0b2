"""Notebook tooling, apart from the library: :mod:`~studykit.nbtools.runner` (``python -m studykit
notebooks``: every notebook through papermill, index, summary) and :mod:`~studykit.nbtools.jupyter_fix`
(the nbclient lost-wake-up work-around the runner, Voila and the browser test apply)."""
