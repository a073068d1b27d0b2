"""How well does the hook timeline price a hook that coalesces DDP buckets (``register(..., coalesce_mb=)``)?

Scores the committed campaign that ran the kit's hooks with and without coalescing side by side
(``data/measurements/bandwidth/h200_p2d``: ResNet-50 b64 and BERT-base b16, p = 2, 2.5-25 Gbit/s; coalesce_mb 0 and
25) with the terms that campaign is verified with (``data/campaigns.toml``), plus ``--score-coalesced``, and
prints the extended model's error per coalescing setting. The model prices a coalesced group as one protocol run
that starts when its last bucket is ready (studykit.perfmodel.model.timeline.hook_timeline_s).

    python benchmarks/coalesce_model_check.py [--out benchmarks/coalesce_model_check.md]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARGS = ["--network-from", "probe", "--overlap", "timeline", "--sweep-from", "data/measurements/bandwidth/h200_p2",
        "--inputs-from", "data/measurements/bandwidth/h200_p2", "data/measurements/bandwidth/h200_p2b",
        "data/measurements/gpu_checks_h200b", "data/measurements/gpu_checks_h200", "--encode-decode-from",
        "host_ahead", "--holdout", "network", "--path-overhead-from", "model", "--score-coalesced", "--quiet"]
RECORDS = "data/measurements/bandwidth/h200_p2d"


def table() -> pd.DataFrame:
    from studykit.perfmodel.verify import cli
    from studykit.perfmodel.verify.files import read_predictions
    from studykit.perfmodel.verify.platform import coalesce_of

    with tempfile.TemporaryDirectory() as tmp:
        rc = cli.main(["--records", str(ROOT / RECORDS), *ARGS, "--out", tmp])
        if rc:
            raise SystemExit(f"verify failed ({rc})")
        p = read_predictions(tmp)
    h = p[(p["mode"] == "hook") & (p["variant"] == "extended")].copy()
    h["coalesce_mb"] = ["none (per bucket)" if c is None else f"{c:g}" for c in map(coalesce_of, h["config"])]
    return h


def report(h: pd.DataFrame) -> str:
    lines = ["# Does the hook timeline price a coalescing hook?", "",
             f"`python benchmarks/coalesce_model_check.py` on `{RECORDS}` (2 x NVIDIA H200; the terms of its committed "
             "verification plus `--score-coalesced`): the extended model's absolute relative error on the overlapped "
             "hook's iteration time, per coalescing setting (every model, compressor and rate).", "",
             "| coalesce_mb | configurations | median error | max error |", "|---|---:|---:|---:|"]
    for c, g in h.groupby("coalesce_mb"):
        lines.append(f"| {c} | {len(g)} | {100 * g['abs_rel_error'].median():.1f} % | "
                     f"{100 * g['abs_rel_error'].max():.1f} % |")
    worst = h.loc[h["abs_rel_error"].idxmax()]
    lines += ["", f"Largest: {worst['config']} (predicted {worst['predicted_ms']:.1f} ms, measured "
                  f"{worst['measured_ms']:.1f} ms)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="also write the report here (Markdown)")
    a = ap.parse_args(argv)
    text = report(table())
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
