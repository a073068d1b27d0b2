"""``python -m studykit.measure.bench``: the same command as ``python -m studykit bench``."""
from studykit.measure.bench.cli import main

raise SystemExit(main())
