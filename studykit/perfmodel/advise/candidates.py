"""The candidates :func:`~studykit.perfmodel.advise.advise` ranks: syncSGD, the fp16 baseline and each
registered compressor at each value of its main parameter, with the names every part of the package shares
(the baselines' labels, the modes' words, :class:`AdviseError`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from studykit import compressors

#: each compressor's main parameter and the three values swept (a compressor class may state its own
#: as ``main_parameter = ("rank", (1, 4, 16))``, which wins); compressors not named have no main parameter
MAIN_PARAMETER: dict[str, tuple[str, tuple]] = {
    "powersgd": ("rank", (1, 4, 16)),  # Vogels et al. 2019; Agarwal et al. 2022 Table 3 uses ranks 4, 8, 16
    "atomo": ("rank", (1, 4, 16)),
    "topk": ("ratio", (0.001, 0.01, 0.1)),  # 0.1 %, 1 %, 10 % of the entries
    "randomk": ("ratio", (0.001, 0.01, 0.1)),
    "dgc": ("ratio", (0.001, 0.01, 0.1)),
    "mstopk": ("ratio", (0.001, 0.01, 0.1)),
    "topk_chunked": ("ratio", (0.001, 0.01, 0.1)),
    "quantize": ("bits", (2, 4, 8)),
    "qsgd": ("levels", (1, 4, 16)),
    "thc": ("bits", (2, 4, 8)),
}
SYNC = "syncSGD"
FP16 = "fp16 baseline"
#: how each mode runs the compressors, in the verdict's words
MODE_WORDS = {"post": "after the backward pass", "hook": "DDP hook"}


class AdviseError(ValueError):
    """A missing or invalid input of :func:`advise`; the message names it and how to supply it."""


@dataclass(frozen=True)
class Candidate:
    """One way to synchronize: ``kind`` is ``"syncsgd"``, ``"fp16_hook"`` or ``"compressor"``. A compressor's
    ``mode`` says how it runs (:data:`MODE_WORDS`); None: as :func:`~studykit.perfmodel.advise.advise`'s
    ``mode`` asks (every mode asked, one candidate each)."""

    label: str
    kind: str
    compressor: str | None = None
    params: tuple = ()  # sorted (key, value) pairs
    mode: str | None = None

    @property
    def param_dict(self) -> dict:
        return dict(self.params)


def _main_parameter(name: str):
    own = compressors.registry.main_parameter(name)
    return own if own is not None else MAIN_PARAMETER.get(name)


def candidates(names: Sequence[str] | None = None, sweep: dict | None = None) -> list[Candidate]:
    """syncSGD, the fp16 baseline, then each compressor of ``names`` (default: every registered one)
    at each value of its main parameter (``sweep`` overrides :data:`MAIN_PARAMETER`: ``{name: (param,
    values)}``; a value the compressor refuses raises)."""
    out = [Candidate(SYNC, "syncsgd"), Candidate(FP16, "fp16_hook")]
    avail = compressors.available()
    for n in (avail if names is None else names):
        if n not in avail:
            raise AdviseError(f"unknown compressor {n!r}; available: {', '.join(avail)}")
        main = (sweep or {}).get(n) or _main_parameter(n)
        settings = [{}] if main is None else [{main[0]: v} for v in main[1]]
        for ps in settings:
            compressors.check(n, **ps)  # refuses a bad value, naming it
            label = compressors.registry.setting_label(n, ps, "kv")
            out.append(Candidate(label, "compressor", n, tuple(sorted(ps.items()))))
    return out


def check_modes(mode) -> tuple[str, ...]:
    """``mode`` (one of :data:`MODE_WORDS` or several) as a tuple without repeats, in :data:`MODE_WORDS`' order."""
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    if not modes or any(not isinstance(m, str) or m not in MODE_WORDS for m in modes):
        raise AdviseError(f"mode must be 'post', 'hook' or both, got {mode!r}")
    return tuple(m for m in MODE_WORDS if m in modes)


def in_modes(cands: Sequence[Candidate], modes: tuple[str, ...]) -> list[Candidate]:
    """Each compressor candidate without a mode once per mode of ``modes`` (labelled ``"... (hook)"`` where
    there are several); baselines and candidates with a mode as they are."""
    out = []
    for c in cands:
        if c.kind != "compressor" or c.mode is not None:
            out.append(c)
            continue
        out += [replace(c, mode=m, label=c.label if len(modes) == 1 else f"{c.label} ({m})") for m in modes]
    return out
