"""How long a DDP comm hook holds the backward pass's host thread, bucket by bucket: the kit's hook on its two
runners (``graph``: a captured protocol replayed from DDP's callback; ``thread``: the communication thread, or for
one-round codecs such as fp16 an asynchronous all-reduce chained on the host) beside PyTorch's hook of the same
codec. DDP calls the hook on autograd's thread between two gradients; while the hook runs, no further backward
kernel is launched, so where the GPU has little queued work this host time is added to the iteration.

    python -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/hook_host.py \\
        --models resnet50 bert_base --compressors bf16 fp16 --out hook_host.jsonl
    python benchmarks/hook_host.py --table hook_host_r1.jsonl [FILE ...] [--write]   # --write: hook_host.md beside

Each configuration (model, codec, hook) is timed with ``studykit.measure.timing.time_fn`` (30 iterations after 10
warm-up by default, CUDA events) in a DDP built with ``gradient_as_bucket_view=True, broadcast_buffers=False``; a
wrapper around the registered hook stamps each call's start and return on the host (``time.perf_counter_ns``).
One JSON line per configuration, with the kit's provenance: the iteration's median, each timed iteration's hook
host time summed over its buckets, and each bucket's median host time per call. What the wrapper cannot see: work
the hook leaves to other threads (the thread runner's protocol, a chained decode that runs later).
"""
import argparse
import copy
import functools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the hooks timed per codec: the kit's two runners and PyTorch's hook of the codec
HOOKS = ("graph", "thread", "pytorch")
#: iterations run with cProfile inside the hook calls (``--python-profile``), after the timed ones
PROFILED_ITERATIONS = 10
#: codecs with a PyTorch hook of their own (``default_hooks``)
PYTORCH = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


class HookClock:
    """Stamps each call of a DDP comm hook on the host, by bucket index and iteration (``iteration``, set by the
    caller): :meth:`wrap` gives the hook to register, with the wrapped hook's name and signature (DDP checks both)."""

    def __init__(self):
        self.iteration, self.calls = 0, []
        self.profiler = None  #: a cProfile.Profile to run inside each hook call (:func:`python_profile`), or None

    def wrap(self, hook):
        @functools.wraps(hook)
        def timed(state, bucket):
            prof = self.profiler
            t0 = time.perf_counter_ns()
            if prof is not None:
                prof.enable()
            fut = hook(state, bucket)
            if prof is not None:
                prof.disable()
            self.calls.append((self.iteration, bucket.index(), (time.perf_counter_ns() - t0) / 1e3))
            return fut
        return timed

    def summary(self, first: int, last: int) -> dict:
        """Per-iteration sums (us) over iterations ``first``..``last`` and each bucket's median (us), by index."""
        kept = [c for c in self.calls if first <= c[0] <= last]
        if not kept:
            raise ValueError(f"no hook calls in iterations {first}-{last}: did DDP call the hook?")
        per_iter = [sum(us for i, _, us in kept if i == it) for it in range(first, last + 1)]
        buckets = sorted({b for _, b, _ in kept})
        per_bucket = [statistics.median(us for _, b, us in kept if b == k) for k in buckets]
        return {"hook_us_per_iter": per_iter, "hook_us_median": statistics.median(per_iter),
                "bucket_us_median": per_bucket, "buckets": len(buckets)}


def _profiler_own(function: str) -> bool:
    """Whether a profiled function is cProfile's own (its ``disable`` call at the end of each hook call)."""
    return "_lsprof" in function


def python_profile(prof, iterations: int, top: int) -> list[dict]:
    """The ``top`` functions of a cProfile run inside the hook calls of ``iterations`` iterations (cProfile's own
    calls left out), by the time spent in them alone: ``function`` (file name:line(name)), ``calls`` and ``own_us``
    per iteration. cProfile slows every Python call it sees, so these times are larger than the hook's own: read
    them as shares."""
    import pstats

    rows = []
    for (file, line, func), (_, calls, own, _cum, _) in pstats.Stats(prof).stats.items():
        if _profiler_own(func):
            continue
        rows.append({"function": f"{Path(file).name}:{line}({func})", "calls": calls / iterations,
                     "own_us": own * 1e6 / iterations})
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def _register(net, hook: str, codec: str, clock: "HookClock"):
    """Register ``hook`` for ``codec`` on ``net`` through ``clock``; returns the kit's hook state (None: PyTorch's)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from studykit import ddp as sk_ddp

    original = net.register_comm_hook

    def wrapped(state, fn):
        return original(state, clock.wrap(fn))

    net.register_comm_hook = wrapped
    if hook == "pytorch":  # run() asks only for codecs in PYTORCH
        net.register_comm_hook(None, getattr(default_hooks, PYTORCH[codec]))
        return None
    return sk_ddp.register(net, codec, runner=hook)


def run(argv=None) -> int:
    import torch

    from studykit import compressors as C
    from studykit import models as M
    from studykit.measure.records import provenance
    from studykit.measure.runtime import finish_dist, init_dist
    from studykit.measure.timing import time_fn

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=M.available())
    ap.add_argument("--compressors", nargs="+", default=["bf16", "fp16"], metavar="NAME",
                    help="codecs (default bf16 fp16); the pytorch hook only for " + ", ".join(PYTORCH))
    ap.add_argument("--hooks", nargs="+", default=list(HOOKS), choices=HOOKS)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--python-profile", type=int, default=0, metavar="N",
                    help="after the timing, 10 more iterations with cProfile inside each hook call; the record keeps "
                         "the N functions the hook spent most time in (default 0: none)")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.python_profile < 0:
        ap.error(f"--iters must be >= 1, --warmup and --python-profile >= 0, got {args.iters}, {args.warmup} and "
                 f"{args.python_profile}")
    for name in args.compressors:
        C.get(name)  # a bad name fails here, before any GPU work
    d = init_dist(require_group=True)
    if d.device.type != "cuda" and "graph" in args.hooks:
        print("hook_host: no CUDA device: the graph runner runs the thread's way; timing it anyway", file=sys.stderr)
    ok = False
    try:
        for model_name in args.models:
            torch.manual_seed(0)
            base = M.build(model_name).to(d.device).train()
            batch = M.example_batch(model_name, M.default_batch(model_name), d.device)
            for codec in args.compressors:
                for hook in args.hooks:
                    if hook == "pytorch" and (codec not in PYTORCH or d.backend != "nccl"):
                        continue  # PyTorch's 16-bit hooks: NCCL only (its bf16 hook is refused on gloo)
                    model = copy.deepcopy(base)
                    net = torch.nn.parallel.DistributedDataParallel(
                        model, device_ids=[d.device.index] if d.device.type == "cuda" else None,
                        gradient_as_bucket_view=True, broadcast_buffers=False)
                    clock = HookClock()
                    state = _register(net, hook, codec, clock)
                    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

                    def step():
                        clock.iteration += 1
                        opt.zero_grad(set_to_none=True)
                        M.loss(model_name, net, batch).backward()
                        opt.step()

                    t = time_fn(step, n_iter=args.iters, n_warmup=args.warmup, device=d.device, agree=d.agree_max)
                    summary = clock.summary(clock.iteration - args.iters + 1, clock.iteration)
                    if args.python_profile:
                        import cProfile

                        clock.profiler = prof = cProfile.Profile()
                        for _ in range(PROFILED_ITERATIONS):
                            step()
                        clock.profiler = None
                        summary["python_profile"] = python_profile(prof, PROFILED_ITERATIONS, args.python_profile)
                    if state is not None:
                        state.close()
                    if d.is_main:
                        rec = {"kind": "hook_host", "model": model_name, "batch_size": M.default_batch(model_name),
                               "compressor": codec, "hook": hook, "world_size": d.world_size,
                               "ms_median": t.ms_median, "ms_q25": t.ms_q25, "ms_q75": t.ms_q75,
                               "times_ms": list(t.times_ms), "n_iter": args.iters, "n_warmup": args.warmup,
                               **summary, **provenance(d.device)}
                        with open(args.out, "a", encoding="utf-8") as f:
                            f.write(json.dumps(rec) + "\n")
                        print(f"{model_name:10s} {codec:6s} {hook:8s} {t.ms_median:8.2f} ms/iter, hook holds the "
                              f"host {summary['hook_us_median']:8.1f} us/iter over {summary['buckets']} buckets",
                              flush=True)
                    del net, model, opt, state, step, clock
        ok = True
    finally:
        finish_dist(d, ok)
    return 0


def _load(path: Path) -> list[dict]:
    from studykit.measure.records import RecordError, load_records

    try:
        recs = load_records(path, kind="hook_host", quiet=True)
    except RecordError as exc:
        raise SystemExit(f"hook_host.py --table: {exc}") from None
    if not recs:
        raise SystemExit(f"{path}: no hook_host records (python -m torch.distributed.run ... benchmarks/hook_host.py "
                         f"--out FILE writes them)")
    return recs


def table(paths) -> str:
    """The markdown tables of one or more ``hook_host`` files (rounds, named by file): per model and codec, each
    hook's iteration and host time, then where a record has one, its ``--python-profile`` (the top 5 functions)."""
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(x) for x in paths]
    runs = [(x.stem, _load(x)) for x in paths]
    r0 = runs[0][1][0]
    commits = ", ".join(dict.fromkeys(str(r.get("git_commit")) for _, recs in runs for r in recs))
    lines = [f"# How long each hook holds the backward pass's host thread: {paths[0].parent.name}", "",
             f"Device: {r0['world_size']} x {r0.get('gpu')}; torch {r0.get('torch')}, NCCL {r0.get('nccl')}; kit "
             f"commits {commits}; median of {r0['n_iter']} timed iterations after {r0['n_warmup']} warm-up; "
             f"DDP(gradient_as_bucket_view=True, broadcast_buffers=False). Host time: what the hook call took on the "
             f"host, summed over the iteration's buckets (median over iterations), and its median per bucket call. "
             f"Generated by `python benchmarks/hook_host.py --table FILE ... --write`.", "",
             "| file | model | codec | hook | ms per iteration | hook host us per iteration | buckets | us per bucket "
             "call, median (smallest-largest) |", "|---|---|---|---|---:|---:|---:|---|"]
    for name, recs in runs:
        for r in recs:
            b = r["bucket_us_median"]
            lines.append(f"| {name} | {r['model']} | {r['compressor']} | {r['hook']} | {r['ms_median']:.2f} | "
                         f"{r['hook_us_median']:.0f} | {r['buckets']} | {statistics.median(b):.0f} ({min(b):.0f}-"
                         f"{max(b):.0f}) |")
    profiled = [(name, r) for name, recs in runs for r in recs if r.get("python_profile")]
    if profiled:
        lines += ["", f"## Where the hook calls spend their host time (`--python-profile`, {PROFILED_ITERATIONS} "
                      f"iterations under cProfile, which slows every Python call: read the times as shares)", "",
                  "| file | model | codec | hook | function | calls per iteration | own us per iteration |",
                  "|---|---|---|---|---|---:|---:|"]
        for name, r in profiled:
            for f in [f for f in r["python_profile"] if not _profiler_own(f["function"])][:5]:
                lines.append(f"| {name} | {r['model']} | {r['compressor']} | {r['hook']} | `{f['function']}` | "
                             f"{f['calls']:.0f} | {f['own_us']:.0f} |")
    return "\n".join(lines) + "\n"


def report(records, verbose: bool = False) -> str:
    """:func:`table` of ``records`` (one ``hook_host`` JSON-lines file or a list of them, as ``data regen`` passes
    a campaign's rounds), printed with ``verbose``."""
    text = table(records)
    if verbose:
        print(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--table":
        files = [Path(a) for a in sys.argv[2:] if a != "--write"]
        text = table(files)
        print(text)
        if "--write" in sys.argv[3:]:
            (files[0].parent / "hook_host.md").write_text(text, encoding="utf-8")
        sys.exit(0)
    sys.exit(run())
