"""ATOMO's decomposition (``svd="gram"``: the eigendecomposition of each group's k x k Gram matrices) by each
eigensolver PyTorch offers, side by side on one GPU, group by group of ``--model``'s layout. CUDA only.

    python benchmarks/atomo_eigh.py --min-reps 5 --min-time-s 0.2 --budget-s 3 --warmup 1 --out atomo_eigh.jsonl
    python benchmarks/atomo_eigh.py --model bert_base --candidates eigh "eigh cpu" --min-reps 5 --warmup 1

ATOMO needs every singular value of every matrix (its sampling probabilities) and the vectors of the r atoms it
samples. :func:`studykit.compressors.lowrank.gram_svd` gets them from ``torch.linalg.eigh`` of the Gram matrices,
fp32 on the GPU until this comparison, where cuSOLVER's Jacobi solver took most of ATOMO's time
(``data/measurements/codec_kernels_h200/README.md``, sections ``atomo/`` and ``atomo_eigh/``). The candidates, on
the same Gram matrices (of random gradients, each group stacked as ATOMO stacks it):

* ``eigh``: what the kit did (fp32 on the GPU; it now takes ``eigh fp64`` there);
* ``eigh fp64``: the same in float64 (cuSOLVER picks its solver by precision and size);
* ``eigh magma``: fp32 with ``torch.backends.cuda.preferred_linalg_library("magma")``;
* ``eigh cpu``: fp32 on the host's cores (LAPACK), the matrices copied there and the results back;
* ``eigvalsh``: the eigenvalues alone (fp32, GPU): a bound for a method that would find the few sampled vectors
  another way;
* ``svd`` and ``svd fp64``: ATOMO's default decomposition (``svd="exact"``: ``torch.linalg.svd`` of the matrices
  themselves), in fp32 as the kit runs it and in float64; their eigenvalues are the squared singular values;
* ``svd gesvd`` and ``svd gesvd fp64``: the same with cuSOLVER's QR-based driver (``driver="gesvd"``) instead of
  the one PyTorch picks.

Per group and candidate: the median ms of its calls under ``bench``'s repetition options (plain CUDA events around
each call, which waits for the solver anyway; no L2 flush: the solvers are not bound by memory), and the largest
difference of its eigenvalues from float64's, relative to each matrix's largest.
Records of kind ``bench`` (``phase`` ``atomo_eigh``, ``params`` ``candidate``, ``batch``, ``n``, ``m``, ``k``) go to
``--out``; the table, written beside it (``.md``; ``--report-only`` rewrites it), sums the groups per candidate
and gives the total of the fastest Gram eigensolver per group.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studykit import argtypes  # noqa: E402
from studykit import models as M  # noqa: E402
from studykit.compressors import lowrank as LR  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402

CANDIDATES = ("eigh", "eigh fp64", "eigh magma", "eigh cpu", "eigvalsh", "svd", "svd fp64", "svd gesvd",
              "svd gesvd fp64")
#: the candidates that decompose the matrices themselves (``svd="exact"``), not their Gram matrices
ON_MATRICES = ("svd", "svd fp64", "svd gesvd", "svd gesvd fp64")


@contextlib.contextmanager
def _library(name: str):
    """``torch.backends.cuda.preferred_linalg_library`` set to ``name`` for the block."""
    old = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_linalg_library(old)


def candidate(name: str, x: torch.Tensor, gram: torch.Tensor):
    """``fn() -> eigenvalues`` of ``gram`` (ascending; for the SVDs the squared singular values of ``x``, whose
    Gram matrix it is) by candidate ``name``."""
    if name in ON_MATRICES:
        xx = x.double() if name.endswith("fp64") else x
        driver = "gesvd" if "gesvd" in name and x.is_cuda else None
        return lambda: torch.linalg.svd(xx, full_matrices=False, driver=driver)[1].flip(-1) ** 2
    if name == "eigh":
        return lambda: torch.linalg.eigh(gram)[0]
    if name == "eigh fp64":
        g64 = gram.double()
        return lambda: torch.linalg.eigh(g64)[0]
    if name == "eigh magma":
        def magma():
            with _library("magma"):
                return torch.linalg.eigh(gram)[0]
        return magma
    if name == "eigh cpu":
        def cpu():
            w, v = torch.linalg.eigh(gram.cpu())
            v.to(gram.device)  # ATOMO needs the vectors on the GPU: their copy back is part of the cost
            return w
        return cpu
    if name == "eigvalsh":
        return lambda: torch.linalg.eigvalsh(gram)
    raise ValueError(f"unknown candidate {name!r}; valid: {', '.join(CANDIDATES)}")


def grams(model: str, rank: int, device) -> list[tuple]:
    """``(group, matrices (B, n, m) scaled, their Gram matrices (B, k, k))`` of ATOMO's layout of ``model``'s
    gradient shapes (random gradients), formed by :func:`~studykit.compressors.lowrank.gram_matrices` as
    :func:`~studykit.compressors.lowrank.gram_svd` forms them."""
    shapes = [tuple(s) for s in M.param_shapes(model)]
    lay = LR._Layout(shapes, rank, 1.0)
    tensors = [torch.randn(s, device=device) for s in shapes]
    return [(g, *LR.gram_matrices(LR._stack(tensors, g))[:2]) for g in lay.groups]


def run(args, policy, writer, device) -> None:
    for g, x, gram in grams(args.model, args.rank, device):
        k = gram.shape[-1]
        ref = torch.linalg.eigh(gram.double().cpu())[0]
        for name in args.candidates:
            fn = candidate(name, x, gram)
            w = fn().double().cpu()
            err = float(((w - ref).abs().amax(-1) / ref.abs().amax(-1).clamp_min(1e-300)).max())
            t = time_fn(fn, device=device, **dict(policy.timing_kw(device), flush_bytes=0))
            params = {"candidate": name, "batch": g.batch, "n": g.n, "m": g.m, "k": k}
            print(f"{g.batch:3d} x {g.n:5d} x {g.m:5d} (k {k:4d}) {name:11s} {t.ms_median:9.3f} ms "
                  f"[{t.ms_q25:.3f}-{t.ms_q75:.3f}] eigenvalues off by {err:.1e} of the largest", flush=True)
            if writer:
                writer.write(make_record("bench", config_id(kind="bench", model=args.model, params=params,
                                                            phase="atomo_eigh", device_type="cuda"),
                                         timing=t, device=device, model=args.model, params=params, phase="atomo_eigh",
                                         rank=args.rank, eig_rel_err=err, cpu_threads=torch.get_num_threads(),
                                         **dict(policy.fields(device), l2_flush_bytes=0)))


# ------------------------------------------------------------------ the table
def table(records: list[dict]) -> str:
    """Markdown: per candidate, the groups' ms summed, against the kit's ``eigh``, and the worst eigenvalue error;
    then the sum of the fastest Gram eigensolver per group; then each group by candidate."""
    by: dict = {}
    for r in records:
        p = r["params"]
        by.setdefault((p["batch"], p["n"], p["m"]), {})[p["candidate"]] = r
    names = [c for c in CANDIDATES if any(c in v for v in by.values())]
    total = {c: sum(v[c]["ms_median"] for v in by.values() if c in v) for c in names}
    base = total.get("eigh")
    lines = ["| candidate | groups | sum of medians ms | / eigh | worst eigenvalue error (of the largest) |",
             "|---|---:|---:|---:|---:|"]
    for c in names:
        rows = [v[c] for v in by.values() if c in v]
        lines.append(f"| {c} | {len(rows)} | {total[c]:.1f} | {total[c] / base:.2f} | "
                     f"{max(r['eig_rel_err'] for r in rows):.1e} |" if base else
                     f"| {c} | {len(rows)} | {total[c]:.1f} | — | {max(r['eig_rel_err'] for r in rows):.1e} |")
    full = [v for v in by.values() if all(c in v for c in names)]
    if full and base:
        solvers = [c for c in names if c != "eigvalsh" and c not in ON_MATRICES]  # eigvalsh: no vectors
        best = sum(min(v[c]["ms_median"] for c in solvers) for v in full)
        picks = sorted({min(solvers, key=lambda c: v[c]["ms_median"]) for v in full})
        lines.append(f"| fastest Gram eigensolver per group ({', '.join(picks)}) | {len(full)} | {best:.1f} | "
                     f"{best / base:.2f} | — |")
    lines += ["", "| batch x n x m | k | " + " | ".join(f"{c} ms" for c in names) + " |",
              "|---|---:|" + "---:|" * len(names)]
    for (b, n, m), v in sorted(by.items(), key=lambda kv: -kv[1].get("eigh", {"ms_median": 0})["ms_median"]):
        k = next(iter(v.values()))["params"]["k"]
        cells = " | ".join(f"{v[c]['ms_median']:.2f}" if c in v else "—" for c in names)
        lines.append(f"| {b} x {n} x {m} | {k} | {cells} |")
    return "\n".join(lines)


def report(out: Path, verbose: bool = True) -> str:
    """The tables of the records in ``out``, with where they came from; written to ``out``.md."""
    records = [r for r in bench.records_of(out, "bench", "benchmarks/atomo_eigh.py") if r.get("phase") == "atomo_eigh"]
    line = bench.records_line(out, records, lambda r: f"{r['gpu']} ({r['device']}), torch {r['torch']}, model "
                                                       f"{r['model']}, rank {r['rank']}, "
                                                       f"{r['cpu_threads']} CPU threads")
    text = (f"# ATOMO's Gram eigendecompositions, by eigensolver\n\n{line}\n\n"
            f"`benchmarks/atomo_eigh.py` says what each candidate is. The groups are ATOMO's layout of the model's "
            f"matrices (random gradients), each decomposed as one batched call.\n\n{table(records)}\n")
    return bench.write_report(out, text, verbose)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/atomo_eigh.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=M.available(), help="whose layout (default resnet50)")
    ap.add_argument("--rank", type=argtypes.positive_int, default=4, help="ATOMO's rank, r (default 4)")
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES, metavar="NAME",
                    help=f"eigensolvers to time (default all: {', '.join(CANDIDATES)})")
    bench.add_candidates_args(ap, report_only=True)
    if bench.candidates_report_only(ap, argv, report):
        return 0
    args, policy, writer = bench.start_candidates(ap, argv)
    device = torch.device("cuda:0")
    run(args, policy, writer, device)
    if writer:
        report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
