"""What the teaching notebooks call: :mod:`~studykit.lessons.tour` (what data-parallel training sends and
what it costs), :mod:`~studykit.lessons.gallery` (what survives each compressor) and
:mod:`~studykit.lessons.explore` (the explorer's one pure function and its sliders). Their figures are
in :mod:`studykit.plots.lessons` and :mod:`studykit.plots.perfmodel`."""
