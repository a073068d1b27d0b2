"""The kit's DDP hooks on one GPU (p = 1): no byte crosses a link, so what a hook costs beside the same compressor
after the backward pass (post), beside PyTorch's hooks and beside syncSGD is the overlap itself (the protocol's
kernels inside the backward pass, DDP's bucket callbacks, the graph replays), not the network.

    python benchmarks/hook_alone.py data/measurements/hook_runner/h200_p1            # prints the table
    python benchmarks/hook_alone.py FOLDER --write                                   # also FOLDER/hook_alone.md

FOLDER holds one ``ddp`` record file per round (``ddp_r1.jsonl``, ``ddp_r2.jsonl``, ...: the same configurations
timed again in the same device call, by ``torchrun --nproc-per-node 1 -m studykit ddp``; the command is in
``data/campaigns.toml``). Each ratio pairs records of one round; a round's ratios beside the other's show how far
a rerun moves them. Ratios below 1 mean the kit's hook is faster.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hook_runner import _params  # noqa: E402  (the compressor's setting as hook_runner.py labels it)
from studykit.measure.records import load_records  # noqa: E402

#: the kit's hooks and the PyTorch hook each is set against
PYTORCH = {"fp16": "torch_fp16", "bf16": "torch_bf16", "powersgd": "torch_powersgd"}
#: what a hook is set against, with its column title
REFERENCES = (("post", "post"), ("pytorch", "PyTorch's hook"), ("syncsgd", "syncSGD"))


def round_number(file: Path) -> int:
    """The round a record file holds, from its name (``ddp_r12.jsonl``: 12)."""
    return int(file.stem.split("_r")[-1])


def round_files(folder: Path) -> list[Path]:
    """The folder's round files, in round order; an error naming what is expected where there are none."""
    files = sorted(folder.glob("ddp_r*.jsonl"), key=round_number)
    if not files:
        raise ValueError(f"{folder}: no ddp_r1.jsonl, ddp_r2.jsonl, ... (one ddp record file per round)")
    return files


def rows(records: list[dict]) -> list[dict]:
    """One row per (model, kit hook) of one round's records: the hook's median ms and, where measured, post's,
    PyTorch's hook's of the same kind and syncSGD's (medians, ms). Only world size 1 is taken."""
    ok = [r for r in records if r.get("kind") == "ddp" and r.get("status", "ok") == "ok"]
    bad = sorted({r.get("world_size") for r in ok} - {1})
    if bad:
        raise ValueError(f"hook_alone: records of world size {bad}; this table is for p = 1 only "
                         f"(benchmarks/hook_runner.py tables p >= 2)")
    by = {}
    for r in ok:
        runner = (r.get("hook_runner") or "thread") if r["mode"] == "hook" else ""
        by[(r["model"], r["mode"], r.get("compressor"), _params(r) if r["mode"] != "builtin" else "", runner)] = r
    out = []
    for (model, mode, comp, params, runner), h in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if mode != "hook" or not h.get("hook_overlap"):
            continue
        ref = {"post": by.get((model, "post", comp, params, "")), "syncsgd": by.get((model, "syncsgd", None, "", "")),
               "pytorch": by.get((model, "builtin", PYTORCH.get(comp), "", ""))}
        label = f"{comp} {params}".strip() + ("" if runner == "graph" else f" ({runner} runner)")
        out.append({"model": model, "compressor": label, "hook": h["ms_median"],
                    "n": min([h["n_iter"]] + [x["n_iter"] for x in ref.values() if x]),
                    **{k: (x["ms_median"] if x else None) for k, x in ref.items()}})
    return out


def _cells(vals, fmt) -> str:
    """The rounds' values joined by " / " (blank where a round lacks one; all blank: empty)."""
    if all(v is None for v in vals):
        return ""
    return " / ".join("" if v is None else fmt.format(v) for v in vals)


def _round_note(file: Path, records: list[dict]) -> str:
    """``ddp_r1.jsonl: first record 2026-12-02 14:05 UTC, every post, then every hook``: when the round's first
    record was written and in which order its records were (``ddp --pair-hook-post``: each compressor's hooks
    right after its post, so a slow spell of a shared machine falls on both sides of a ratio; ``ddp
    --pair-hook-post iterations``: a round of each per timed iteration, records with ``timed_with``), and how
    noisy the machine was: the iterations' spread, the median over the round's configurations of the interquartile
    range over the median (a quiet machine: a few tenths of a percent)."""
    ddp = [r for r in records if r.get("kind") == "ddp"]
    modes = [r.get("mode") for r in ddp]
    hooks = [i for i, m in enumerate(modes) if m == "hook"]
    paired = bool(hooks) and any(m == "post" for m in modes[hooks[0]:])
    stamp = min((str(r["timestamp"]) for r in ddp if r.get("timestamp")), default="")
    when = f"first record {stamp[:10]} {stamp[11:16]} UTC, " if len(stamp) >= 16 else ""
    order = "each hook right after its post" if paired else "every post, then every hook"
    if any(r.get("timed_with") for r in ddp):
        order = "each compressor's post and hooks timed iteration by iteration"
    spread = [(r["ms_q75"] - r["ms_q25"]) / r["ms_median"] for r in ddp
              if r.get("ms_q25") is not None and r.get("ms_q75") is not None and r.get("ms_median")]
    noise = f", iterations' spread {100 * statistics.median(spread):.1f} %" if spread else ""
    return f"{file.name}: {when}{order}{noise}"


def _other_runners(rounds: list[list[dict]]) -> str:
    """", and the thread runner where marked" when some hook records were run by a runner other than the graph's."""
    others = sorted({r.get("hook_runner") or "thread" for recs in rounds for r in recs
                     if r.get("kind") == "ddp" and r.get("mode") == "hook"} - {"graph"})
    return "".join(f", and the {x} runner where marked" for x in others)


def table(files: list[Path], title: str) -> str:
    """The markdown report of the rounds' record files ``files`` (in round order)."""
    rounds = [load_records(f, quiet=True) for f in files]
    per = [{(x["model"], x["compressor"]): x for x in rows(recs)} for recs in rounds]
    keys = sorted(set().union(*per))
    any_r = next(r for r in rounds[0] if r.get("kind") == "ddp")
    commits = sorted({str(r.get("git_commit")) for recs in rounds for r in recs if r.get("kind") == "ddp"})
    numbers = [round_number(f) for f in files]
    label = " / ".join(f"r{n}" for n in numbers)
    head = ["model", "kit hook", f"hook ms {label}"] + [f"{t} ms {label}" for _, t in REFERENCES] + [
        f"hook / {t} {label}" for _, t in REFERENCES]
    lines = [f"# The kit's hooks on one GPU (p = 1): {title}", "",
             f"Device: {any_r.get('world_size')} x {any_r.get('gpu')}; torch {any_r.get('torch')}, NCCL "
             f"{any_r.get('nccl')}; kit commits {', '.join(commits)}; {len(files)} rounds "
             f"({'; '.join(_round_note(f, recs) for f, recs in zip(files, rounds))}), each configuration's median "
             f"of {any_r.get('n_iter')} timed iterations after {any_r.get('n_warmup')} warm-up. Hooks: the graph "
             f"runner{_other_runners(rounds)}, DDP built with "
             f"`gradient_as_bucket_view=True, broadcast_buffers=False` (as are PyTorch's hooks and syncSGD); post "
             f"runs the plain model. Generated by `python benchmarks/hook_alone.py FOLDER --write`.", "",
             "| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    ratios = {k: [] for k, _ in REFERENCES}
    for key in keys:
        xs = [p.get(key) for p in per]
        cells = [key[0], key[1], _cells([x and x["hook"] for x in xs], "{:.2f}")]
        cells += [_cells([x and x[k] for x in xs], "{:.2f}") for k, _ in REFERENCES]
        for k, _ in REFERENCES:
            rs = [x["hook"] / x[k] if x and x[k] else None for x in xs]
            ratios[k] += [(r, key, n) for n, r in zip(numbers, rs) if r is not None]
            cells.append(_cells(rs, "{:.3f}"))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for k, title in REFERENCES:
        if ratios[k]:
            lo, hi = min(ratios[k]), max(ratios[k])
            lines.append(f"- hook / {title}: {lo[0]:.3f} ({lo[1][0]}, {lo[1][1]}, r{lo[2]}) to {hi[0]:.3f} "
                         f"({hi[1][0]}, {hi[1][1]}, r{hi[2]}) over {len(ratios[k])} pairs.")
    return "\n".join(lines) + "\n"


def report(records, verbose: bool = True) -> str:
    """The table of ``records``: a campaign folder (its round files) or a list of round files (``data regen``'s
    report generator passes the list); printed with ``verbose``."""
    files = round_files(Path(records)) if isinstance(records, (str, Path)) else [Path(f) for f in records]
    text = table(files, files[0].parent.name)
    if verbose:
        print(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="campaign folders holding ddp_r1.jsonl, ddp_r2.jsonl, ...")
    ap.add_argument("--write", action="store_true", help="write FOLDER/hook_alone.md (replacing it)")
    args = ap.parse_args(argv)
    for folder in args.folders:
        try:
            text = report(folder)
        except ValueError as exc:
            ap.error(str(exc))
        if args.write:
            (folder / "hook_alone.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
