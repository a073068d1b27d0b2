"""What every fused kernel shares: whether the fast path may run on some tensors (:func:`enabled`), the seed a
codec's generator would get, its step read on the device (:func:`seed_of`), the once-per-process timing choice between paths that compute
the same thing (:func:`pick`, its choices kept in :data:`_PICKED`), the two ways to launch an elementwise
kernel (:func:`_launch`, :func:`_launch1`), the Triton helpers the kernels inline (masked loads and stores,
program order, Philox numbers), and two payload helpers several codecs call (:func:`rows`, :func:`abs_max`).

Code elsewhere in the package reads ``pick`` and ``_PICKED`` through this module (``common.pick``), so that
setting them on :mod:`studykit.compressors._fast` (which sets them here) reaches every caller."""
from __future__ import annotations

import os
import threading
import warnings
from typing import NamedTuple

import torch

try:  # triton ships with CUDA builds of torch; CPU machines usually lack it
    import triton
    import triton.language as tl
    HAVE_TRITON = True
except Exception:  # noqa: BLE001 - any import problem means: no fast path
    triton = None
    tl = None
    HAVE_TRITON = False

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["HAVE_TRITON", "_MAX_NUMEL", "_interpret_on_cpu", "enabled", "enabled_for", "Seed", "seed_of", "no_seed",
           "_BLOCK", "_NB", "_launch", "_launch1", "_PICKED", "pick", "pick_replayed", "pick_no_sync", "settle_generators",
           "picks_since", "abs_max", "rows"]

#: element counts from here on would overflow the kernels' int32 offsets
_MAX_NUMEL = 2**31 - 2**20


def _interpret_on_cpu() -> bool:
    return os.environ.get("STUDYKIT_FAST_INTERPRET") == "1" and os.environ.get("TRITON_INTERPRET") == "1"


def enabled(*tensors: torch.Tensor) -> bool:
    """Whether the fast path may run on ``tensors``: triton importable, ``STUDYKIT_FAST`` not 0,
    all tensors on a CUDA device (or on the CPU under the interpreter switches), and sizes in
    range."""
    if not tensors:
        return HAVE_TRITON and os.environ.get("STUDYKIT_FAST", "1") != "0"
    return all(enabled_for(t.device, t.numel()) for t in tensors)


def enabled_for(device: torch.device, numel: int) -> bool:
    """:func:`enabled` for one tensor of ``numel`` elements on ``device`` (or one a kernel is about to make)."""
    if not HAVE_TRITON or os.environ.get("STUDYKIT_FAST", "1") == "0" or numel >= _MAX_NUMEL:
        return False
    return device.type == "cuda" or (device.type == "cpu" and _interpret_on_cpu())


#: the seeds' range, [2^62, 2^63): Triton then sees one argument type (int64) for every seed and compiles once
_SEED_MASK, _SEED_BIT = 2**62 - 1, 2**62


class Seed(NamedTuple):
    """A kernel's random seed, the kernel arguments ``seed_ptr, seed_base``: the codec's step on the device
    (``step``, a 1-element int64 tensor) and what the seed adds to it (``base``, from the codec's seed and
    the rank). The kernel computes ``((base + step * 104729) mod 2^62) + 2^62`` (:func:`_philox_seed`)."""

    step: torch.Tensor
    base: int


def seed_of(comp, device: torch.device, rank: int | None = None) -> Seed:
    """The seed of ``comp``'s random numbers on ``device`` for this call, as its
    :meth:`~studykit.compressors.base.Compressor.generator` would be seeded (seed, step and, for private
    randomness, the rank), for the kernels' Philox. The step is read on the device
    (:meth:`~studykit.compressors.base.Compressor.device_step`), so a CUDA graph of the call draws the next
    call's numbers when replayed. Where the codec has no step on the device yet and a graph is being captured,
    the step is this call's, fixed: counted as a host-seeded draw (``random_draws``), so no replay is kept."""
    salt = 0 if rank is None else (rank + 1) * 1_000_003
    base = ((comp.seed * 7_919 + salt) & _SEED_MASK) | _SEED_BIT
    step = comp.device_step(device)
    if step is None:
        comp.random_draws += 1
        step = torch.full((1,), comp.step, dtype=torch.int64, device=device)
    return Seed(step, base)


_NO_SEEDS: dict = {}


def no_seed(device: torch.device) -> Seed:
    """The seed arguments of a kernel pass that draws nothing (of the type every seed has)."""
    if device not in _NO_SEEDS:
        _NO_SEEDS[device] = Seed(torch.zeros(1, dtype=torch.int64, device=device), _SEED_BIT)
    return _NO_SEEDS[device]


_BLOCK = 4096        # elements per program for elementwise kernels
_NB = 512            # bytes (8 elements each) per program for packing kernels


def _launch(kernel, full_units: int, total_units: int, block: int, *args, **meta) -> None:
    """Launch ``kernel`` over ``total_units`` in programs of ``block`` units: the programs whose
    units are all complete (``full_units``) without bounds masks, so Triton can vectorise their
    loads and stores (a mask against an ``n`` that is not a multiple of 16 makes every access
    scalar), and at most one masked program for the rest. The kernel's last runtime argument is
    the first unit it handles."""
    bulk = full_units // block
    if bulk:
        kernel[(bulk,)](*args, 0, MASKED=False, **meta)
    rest = total_units - bulk * block
    if rest > 0:
        kernel[(triton.cdiv(rest, block),)](*args, bulk * block, MASKED=True, **meta)


def _launch1(kernel, full_units: int, total_units: int, block: int, *args, reverse: bool = False, **meta) -> None:
    """Launch ``kernel`` once over ``total_units`` in programs of ``block`` units: the programs whose
    units are all complete (the first ``full_units // block``, the kernel's last runtime argument)
    take a branch without bounds masks, so Triton can vectorise their loads and stores, the last
    one the masked branch (:func:`_launch` launches twice for the same effect; each Triton launch
    costs the host time, and these codecs are launch-bound). ``reverse``: blocks handed out from
    the end (:func:`_program`)."""
    grid = triton.cdiv(total_units, block)
    if grid:
        kernel[(grid,)](*args, full_units // block, REVERSE=reverse, **meta)


if HAVE_TRITON:
    _jit_seeded = triton.jit(do_not_specialize=["seed_base", "levels", "L"])
    # integer arguments equal to 1 are compile-time constants to Triton unless listed here (levels = 1, L = 1)
    _jit_levels = triton.jit(do_not_specialize=["levels", "L"])

    @triton.jit
    def _ld(ptr, m, other, MASKED: tl.constexpr):
        if MASKED:
            return tl.load(ptr, mask=m, other=other)
        else:
            return tl.load(ptr)

    @triton.jit
    def _st(ptr, v, m, MASKED: tl.constexpr):
        if MASKED:
            tl.store(ptr, v, mask=m)
        else:
            tl.store(ptr, v)

    # ------------------------------------------------------------------ program order (see _launch1)
    @triton.jit
    def _program(REVERSE: tl.constexpr):
        """This program's block; with REVERSE the blocks are handed out from the end, so the first
        programs to run read what a preceding forward pass over the same tensor left in L2."""
        pid = tl.program_id(0)
        if REVERSE:
            pid = tl.num_programs(0) - 1 - pid
        return pid

    # ------------------------------------------------------------------ Philox, four numbers per call
    @triton.jit
    def _philox_seed(seed_ptr, seed_base):
        """A :class:`Seed`'s value: ``((base + step * 104729) mod 2^62) + 2^62``, the step read on the device."""
        step = tl.load(seed_ptr)
        return (((seed_base & 0x3FFFFFFFFFFFFFFF) + step * 104729) & 0x3FFFFFFFFFFFFFFF) | 0x4000000000000000

    @triton.jit
    def _randint8(seed, group, G: tl.constexpr):
        """(G,) group indices -> (G, 8) uint32 Philox numbers, element (g, k) for element 8 g + k:
        one Philox-4x32 call per 4 elements (``tl.rand`` runs one per element and keeps 1 of its 4)."""
        off = group[:, None] * 2 + tl.arange(0, 2)[None, :]
        r0, r1, r2, r3 = tl.randint4x(seed, off)
        return tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (G, 8))

    @triton.jit
    def _uniform8(seed, group, G: tl.constexpr):
        """(G, 8) U[0, 1) float32 (see :func:`_randint8`)."""
        return tl.uint_to_uniform_float(_randint8(seed, group, G))


# ====================================================================== choosing
_PICKED: dict = {}
#: held while a pick is made: the simulated workers of :func:`~studykit.compressors.simulate` (threads) reach the
#: same key together, and one thread's timing synchronises the device, which a CUDA graph capture made by another
#: thread does not survive (on an H200, two workers' TopK failed so: data/measurements/gpu_pytest_picks.txt).
#: Re-entrant: a candidate may pick among paths of its own.
_PICKING = threading.RLock()


def pick(key, candidates) -> int:
    """Index of the fastest of ``candidates`` (callables computing the same thing) for ``key``,
    timed once per process with CUDA events (two runs each after a warm-up) and remembered: a
    guard that keeps a fused path from ever being slower than the plain-PyTorch one it replaces.
    The plain path comes last: a candidate before it that raises (a kernel this GPU or Triton cannot
    build) is left out with a warning. Without CUDA (or under the interpreter) the first is taken."""
    return _pick_timed(key, candidates, _eager)


def pick_replayed(key, candidates) -> int:
    """:func:`pick` for calls a CUDA graph will hold: each candidate captured once (after an eager call) and its
    replays timed, so launches cost what a replay pays for them, not what an eager call's host does. A candidate
    whose capture fails (it waits for the device) is left out with a warning, as in :func:`pick`."""
    return _pick_timed(key, candidates, _captured)


def pick_no_sync(key, graph_key, candidates, device: torch.device) -> int:
    """Which of ``candidates`` (none waits for the device) to call now: under a CUDA graph capture (no timing
    there), the one the replay-timed pick made eagerly under ``graph_key`` (:func:`pick_replayed`; the last
    candidate where none was made); eager, :func:`pick`'s under ``key``, after the replay-timed pick is made on
    CUDA (a later capture reads it)."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return _PICKED.get(graph_key, len(candidates) - 1)
    if device.type == "cuda":
        pick_replayed(graph_key, candidates)
    return pick(key, candidates)


def _eager(fn):
    """:func:`pick`'s warm-up: one call; the call itself is timed."""
    fn()
    return fn


def _captured(fn):
    """:func:`pick_replayed`'s warm-up: one eager call (the picks and lazily made state a capture cannot make), the
    capture, one replay; the replay is timed. A failed capture is raised after the default generator is taken out
    of capture mode (the capture's end, which would, never ran)."""
    fn()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
    except RuntimeError:
        settle_generators(torch.device("cuda"))
        raise
    graph.replay()
    return graph.replay


def settle_generators(device: torch.device) -> None:
    """After a failed capture: PyTorch's default CUDA generator stays in capture mode (the capture's end, which
    takes it out, never ran), and every later random operation (a model's dropout) would fail; a trivial
    capture that succeeds takes it out."""
    scratch = torch.zeros(1, device=device)
    with torch.cuda.graph(torch.cuda.CUDAGraph(), capture_error_mode="thread_local"):
        scratch.add_(1)


def _pick_timed(key, candidates, warm) -> int:
    """:func:`pick` and :func:`pick_replayed`: ``warm(fn)`` readies each candidate and returns what to time. One
    pick at a time per process (:data:`_PICKING`)."""
    if key in _PICKED:
        return _PICKED[key]
    with _PICKING:
        if key in _PICKED:  # another thread made it while this one waited
            return _PICKED[key]
        if len(candidates) == 1 or not torch.cuda.is_available() or _interpret_on_cpu():
            _PICKED[key] = 0
            return 0
        times = []
        for i, fn in enumerate(candidates):
            try:
                call = warm(fn)
            except Exception as exc:  # noqa: BLE001 - e.g. a tl.dot precision this GPU or Triton lacks
                if i == len(candidates) - 1:
                    raise  # the last candidate is the plain-PyTorch path: its failure is a real error
                times.append(float("inf"))
                warnings.warn(f"fast path {key[0]!r}: candidate {i} failed ({type(exc).__name__}: {exc}); left out",
                              RuntimeWarning, stacklevel=3)
                continue
            times.append(_timed(call))
        _PICKED[key] = min(range(len(times)), key=times.__getitem__)
        return _PICKED[key]


def _timed(call) -> float:
    """Milliseconds of two calls of ``call`` back to back, by CUDA events, after the device is idle."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    call()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def picks_since(before: set) -> dict | None:
    """The choices :func:`pick` made since ``before`` (a set of its keys; ``set()``: every choice of this process):
    ``{"name/size/...": index of the candidate taken}``, the device left out; None when there were none."""
    new = {"/".join(str(p) for p in key if not isinstance(p, torch.device)): i
           for key, i in _PICKED.items() if key not in before}
    return new or None


# ====================================================================== payload helpers
def abs_max(x: torch.Tensor) -> torch.Tensor:
    """``x.abs().amax()`` as a 1-element tensor in one reduction pass (no ``|x|`` temporary); exact."""
    return torch.linalg.vector_norm(x, float("inf")).reshape(1)


def rows(gathered, i: int) -> torch.Tensor:
    """Payload ``i`` of every worker as one ``(world_size, ...)`` tensor, without a copy where
    the workers' tensors already lie back to back in one buffer (one worker; a
    :class:`~studykit.comm.TorchComm` all-gather), else stacked (as ``quantization._stack``)."""
    first = gathered[0][i]
    if len(gathered) == 1:
        return first.unsqueeze(0)
    if first.is_contiguous():
        step = first.numel() * first.element_size()
        ptr = first.data_ptr()
        if all(p[i].is_contiguous() and p[i].dtype == first.dtype and p[i].shape == first.shape
               and p[i].device == first.device and p[i].untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
               and p[i].data_ptr() == ptr + w * step for w, p in enumerate(gathered)):
            return first.as_strided((len(gathered), *first.shape), (first.numel(), *first.stride()))
    return torch.stack([p[i] for p in gathered])
