"""The predictions file of a verification: ``predictions.csv.gz``, one row per scored configuration and variant.

``python -m studykit verify --out DIR`` (and ``benchmarks/own_model_check.py --out DIR``) write it gzipped: its
rows repeat long strings (``calibrated_on``, ``inputs``), so it shrinks about 19-fold, and the committed
``data/verification/`` stays small. The gzip stream is deterministic (:func:`gzip_bytes`: no file name in its
header, modification time 0), so writing the same table twice gives the same bytes. Earlier versions wrote a plain
``predictions.csv``; :func:`predictions_file` and :func:`read_predictions` still read one where no
``predictions.csv.gz`` lies beside it.

    from studykit.perfmodel.verify.files import read_predictions
    pred = read_predictions("data/verification/bandwidth/h200_p2")     # a folder, or the file itself
"""
from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd

#: the file name ``verify --out`` writes its predictions to
PREDICTIONS = "predictions.csv.gz"
#: the name earlier versions wrote (plain CSV): read where no :data:`PREDICTIONS` lies beside it, never written
OLD_PREDICTIONS = "predictions.csv"
#: how the outputs of ``verify`` print floats (6 significant digits)
FLOAT_FORMAT = "%.6g"

__all__ = ["PREDICTIONS", "OLD_PREDICTIONS", "FLOAT_FORMAT", "gzip_bytes", "write_csv_gz", "write_predictions",
           "predictions_file", "read_predictions"]


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped at level 9 with modification time 0 and no file name in the header: the same bytes in,
    the same bytes out (on any machine, at any time)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_csv_gz(frame: pd.DataFrame, path: Path | str, float_format: str = FLOAT_FORMAT) -> Path:
    """``frame`` as CSV (no index, ``float_format``, ``\\n`` line ends) gzipped by :func:`gzip_bytes` to ``path``."""
    path = Path(path)
    text = frame.to_csv(index=False, float_format=float_format, lineterminator="\n")
    path.write_bytes(gzip_bytes(text.encode("utf-8")))
    return path


def write_predictions(frame: pd.DataFrame, folder: Path | str) -> Path:
    """``frame`` written to ``folder/predictions.csv.gz`` (:func:`write_csv_gz`); an older ``predictions.csv`` of
    an earlier run in ``folder`` is removed, as this write replaces it (it would otherwise be left stale beside the
    new file). Returns the written path."""
    folder = Path(folder)
    path = write_csv_gz(frame, folder / PREDICTIONS)
    old = folder / OLD_PREDICTIONS
    if old.is_file():
        old.unlink()
    return path


def predictions_file(path: Path | str) -> Path:
    """The predictions file that ``path`` names: a folder's ``predictions.csv.gz`` (or, written by an earlier
    version, its ``predictions.csv``), or a file itself (``.csv.gz`` or ``.csv``; where a named one is missing, the
    other form beside it). ``FileNotFoundError`` naming both forms otherwise."""
    p = Path(path).expanduser()
    if p.is_dir():
        for name in (PREDICTIONS, OLD_PREDICTIONS):
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(f"{p} holds no {PREDICTIONS} (nor an older {OLD_PREDICTIONS}): give a folder that "
                                "`python -m studykit verify --out` wrote, or the file itself")
    if p.is_file():
        return p
    other = {PREDICTIONS: OLD_PREDICTIONS, OLD_PREDICTIONS: PREDICTIONS}.get(p.name)
    if other is not None and (p.parent / other).is_file():
        return p.parent / other
    raise FileNotFoundError(f"{p}: no such file or folder (verify --out writes {PREDICTIONS}; earlier versions "
                            f"wrote {OLD_PREDICTIONS})")


def read_predictions(path: Path | str) -> pd.DataFrame:
    """The predictions table at ``path`` (a folder or a file, see :func:`predictions_file`), gzipped or plain."""
    f = predictions_file(path)
    return pd.read_csv(f, compression="gzip" if f.name.endswith(".gz") else None)
