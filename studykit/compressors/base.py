"""The one compressor API: GRACE's shape, written against a communicator.

A compressor turns every worker's gradient tensors into an estimate of their
*average* (what DDP hands the optimizer). Single-round methods implement only
``compress``/``decompress`` (and ``combine`` for all-gather methods); multi-round
methods (PowerSGD, THC) override ``_reduce`` and issue their collectives in order.
Because the protocol is written against :class:`studykit.comm.Communicator`, the
same code serves real training, profiling (world size 1) and the performance
model (:meth:`Compressor.plan`, which records the collectives issued on ``meta``
tensors, so the model's communication term is the code's own).
"""
from __future__ import annotations

import copy
import functools
import inspect
import math
import numbers
from typing import Any, ClassVar, Sequence

import torch

from studykit.comm import Collective, Communicator, LocalComm, RecordingComm
from studykit.compressors.memory import ResidualMemory
from studykit.compressors.registry import CompressorError  # defined where the registry needs it (no torch there)

__all__ = ["Compressor", "CompressorError", "FLOAT_DTYPES", "MAX_WORLD_SIZE", "views", "copy_back"]

#: the largest world size :meth:`Compressor.plan` simulates (it builds one payload per worker)
MAX_WORLD_SIZE = 2**18

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Compressor:
    """Base class. Subclasses set ``name`` and ``allreduce_compatible``.

    Generic parameters (every compressor accepts them through
    :func:`studykit.compressors.get`):

    * ``seed``: base seed of the compressor's randomness (shared randomness such as
      RandomK's indices uses ``seed`` and the step; private randomness such as
      stochastic rounding also mixes in the worker's rank); any integer.
    * ``allow_nonfinite``: by default NaN/Inf gradients raise (a host synchronisation per call);
      ``True`` lets them through (the result is then whatever the arithmetic gives; see
      :attr:`keeps_nonfinite`). :mod:`studykit.ddp`'s hook and reducer set it from their ``check_finite``.
      A codec whose payload has a narrower range than float32 also raises, by default, on a finite
      gradient it would turn into inf (:meth:`check`; fp16).
    * ``error_feedback``: :func:`studykit.compressors.get` puts a
      :class:`~studykit.compressors.memory.ResidualMemory` in :attr:`memory` (default: the
      class's ``default_error_feedback``); :meth:`reduce` then compensates the gradient before
      the protocol and updates the residual after it. The class stays the same.
    """

    name: ClassVar[str] = ""
    allreduce_compatible: ClassVar[bool] = True
    #: whether ``get(name)`` gives this compressor an error-feedback memory by default
    default_error_feedback: ClassVar[bool] = False
    #: whether the estimate is random (unbiasedness is then tested over seeds)
    stochastic: ClassVar[bool] = False
    #: whether an inf/NaN in any worker's gradient always leaves an inf/NaN in every worker's estimate
    #: (``allow_nonfinite=True``): sums, casts, scales and magnitude-ordered selection carry it. False where a
    #: random or sampled selection may drop it or a factorisation fails on it; :mod:`studykit.ddp` then sends a
    #: one-element finiteness flag beside the protocol, so that ``torch.amp.GradScaler`` still skips the step
    keeps_nonfinite: ClassVar[bool] = True
    #: whether the codec's estimate is unbiased in expectation (tested for stochastic ones; with an
    #: error-feedback :attr:`memory` the step's estimate is not, whatever the codec)
    unbiased: ClassVar[bool] = False
    #: whether the result depends only on the concatenated gradient, not on how it is cut into
    #: tensors: then a caller holding one flat buffer (a DDP bucket) may pass it whole and get
    #: the same numbers as from the per-tensor views (layer-wise methods set this False)
    partition_invariant: ClassVar[bool] = True
    #: metadata read by reports, the tour, the explorer and the benchmark (one place, on the class):
    #: the family the papers group it in (Agarwal et al. 2022, Table 2): "precision", "quantization",
    #: "sparsification" or "low-rank"
    family: ClassVar[str] = "precision"
    #: the constructor parameter that sets how hard it compresses (``None``: it has none)
    key_param: ClassVar[str | None] = None
    #: the group of ``python -m studykit bench``: "elementwise", "topk", "lowrank" or "dense"
    bench_group: ClassVar[str] = "dense"

    def __init__(self, *, seed: int = 0, allow_nonfinite: bool = False):
        self.seed = self.int_param("seed", seed)
        self.allow_nonfinite = bool(allow_nonfinite)
        #: the step on each device a fused kernel drew random numbers on (:meth:`device_step`)
        self._device_steps: dict[torch.device, torch.Tensor] = {}
        self._step = 0
        #: generators and kernel seeds handed out with the step on the host (a CUDA graph cannot replay them)
        self.random_draws = 0
        self.state: dict[Any, Any] = {}
        #: the error-feedback memory the protocol calls (``None``: no error feedback)
        self.memory: ResidualMemory | None = None

    @property
    def error_feedback(self) -> bool:
        """Whether this compressor keeps an error-feedback memory."""
        return self.memory is not None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        guard_inputs(cls)

    # ------------------------------------------------------------------ helpers
    def error(self, msg: str) -> CompressorError:
        return CompressorError(f"compressor {self.name!r}: {msg}")

    def int_param(self, name: str, value, low: int | None = None, high: int | None = None) -> int:
        """``value`` of integer parameter ``name`` as an int, checked to lie in ``[low, high]`` (None: unbounded);
        anything else (a bool, a float, a string) raises naming the compressor, the parameter and what is valid.
        The one check of every integer parameter: constructors call it with their range."""
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and (low is None or value >= low) and (high is None or value <= high)
        if not ok:
            if low is None:
                rng = "an integer (any)" if high is None else f"an integer <= {high}"
            else:
                rng = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
            raise self.error(f"{name} must be {rng}, got {value!r}")
        return int(value)

    def params(self) -> dict:
        """The constructor parameters of this instance (for records and plots), and
        ``error_feedback: True`` when it keeps an error-feedback memory."""
        sig = inspect.signature(type(self).__init__)
        out = {k: getattr(self, k) for k in sig.parameters
               if k not in ("self", "allow_nonfinite") and hasattr(self, k)}
        return {**out, "error_feedback": True} if self.memory is not None else out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    @property
    def step(self) -> int:
        """Calls of :meth:`reduce` so far: with ``seed`` (and the rank) it seeds the randomness of a call."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = int(value)
        for t in self._device_steps.values():
            t.fill_(self._step)

    def advance(self, replayed: bool = False) -> None:
        """Count one call: the step on the host and, unless ``replayed`` (a CUDA graph of the call advanced
        them), on every device (:meth:`device_step`), in stream order after the call's kernels."""
        self._step += 1
        if not replayed:
            for t in self._device_steps.values():
                t.add_(1)

    def device_step(self, device: torch.device) -> torch.Tensor | None:
        """The step as a 1-element int64 tensor on ``device``, which the fused kernels read to seed their
        random numbers (:mod:`studykit.compressors.fastpath`) and :meth:`advance` increments on the
        device: a CUDA graph of a call replays with the next call's numbers. Made on first use; ``None``
        while a CUDA graph is being captured and it does not exist yet (its value would be the capture's)."""
        t = self._device_steps.get(device)
        if t is None:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                return None
            t = self._device_steps[device] = torch.full((1,), self._step, dtype=torch.int64, device=device)
        return t

    def generator(self, device: torch.device, rank: int | None = None) -> torch.Generator | None:
        """A generator seeded by (seed, step[, rank]); ``None`` on the meta device."""
        if device.type == "meta":
            return None
        self.random_draws += 1
        g = torch.Generator(device=device)
        salt = 0 if rank is None else (rank + 1) * 1_000_003
        g.manual_seed((self.seed * 7_919 + self.step * 104_729 + salt) % (2**63 - 1))
        return g

    # --------------------------------------------------- single-round codec API
    def compress(self, flat: torch.Tensor, world_size: int) -> tuple[list[torch.Tensor], Any]:
        """Encode a 1-D float32 tensor into payload tensors (sent as they are) and a context."""
        raise NotImplementedError

    def decompress(self, payload: Sequence[torch.Tensor], ctx: Any) -> torch.Tensor:
        """Decode payload(s) to a 1-D float32 tensor. For all-reduce compatible codecs
        this is linear: decoding a *sum* of payloads gives the sum of the decodings."""
        raise NotImplementedError

    def combine(self, gathered: Sequence[Sequence[torch.Tensor]], ctx: Any) -> torch.Tensor:
        """All-gather codecs: every worker's payload (rank order) -> average estimate."""
        out = self.decompress(gathered[0], ctx).clone()
        for p in gathered[1:]:
            out += self.decompress(p, ctx)
        return out / len(gathered)

    # ----------------------------------------------------------------- protocol
    def reduce(self, tensors: torch.Tensor | Sequence[torch.Tensor], comm: Communicator | None = None,
               *, key: Any = None, return_local: bool = False):
        """Run the protocol: every worker calls this with its own gradients.

        Returns the estimate of the average gradient (same shapes and dtypes as the
        input), and with ``return_local=True`` also this worker's own decoded
        contribution (what error feedback subtracts).
        """
        comm = comm if comm is not None else LocalComm()
        single = isinstance(tensors, torch.Tensor)
        if not single and not isinstance(tensors, (list, tuple)):
            raise self.error(f"reduce expects a torch.Tensor or a list of them, got {type(tensors).__name__}")
        tensors = [tensors] if single else list(tensors)
        self.check(tensors, comm.world_size)
        # detach only what needs it (a call per tensor costs host time at 100+ tensors)
        grads = [t.detach() if t.requires_grad else t for t in tensors]
        if self.memory is None:
            avg, local = self._reduce(grads, comm, key, return_local)
        else:
            avg, local = self._reduce_with_memory(grads, comm, key, return_local)
        self.advance()
        avg = _like(avg, tensors)
        if return_local:
            local = _like(local, tensors)
            return (avg[0], local[0]) if single else (avg, local)
        return avg[0] if single else avg

    def _reduce_with_memory(self, tensors, comm, key, return_local):
        """The protocol between the memory's two calls (error feedback, :mod:`~studykit.compressors.memory`):
        ``p = g + e``, send ``C(p)``, ``e = p - C(p)``, with ``C(p)`` this worker's own decoded payload."""
        try:
            corrected = self.memory.compensate(tensors, key, reuse=not return_local)
        except CompressorError as exc:  # a residual of other shapes: name this compressor
            raise self.error(str(exc)) from None
        avg, sent = self._reduce(corrected, comm, key, True)
        sent = [s.float() for s in sent]
        self.memory.update(corrected, sent, key, estimate=avg)
        return avg, (sent if return_local else None)

    def _reduce(self, tensors, comm, key, return_local):
        """Default single-round protocol on the flattened float32 gradient."""
        flat = flatten(tensors)
        payload, ctx = self.compress(flat, comm.world_size)
        # this worker's own decoding first: an all-reduce may then sum into the payload in place
        local = self.decompress(payload, ctx) if return_local else None
        if self.allreduce_compatible:
            # a payload that shares memory with the input or the local decoding is copied first
            summed = [comm.all_reduce(p.clone() if _shares_memory(p, flat, local) else p) for p in payload]
            avg = self.decompress_mean(summed, ctx, comm.world_size)
        else:
            per_payload = [comm.all_gather(p) for p in payload]
            avg = self.combine([list(ws) for ws in zip(*per_payload)], ctx)
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)

    @property
    def one_round_allreduce(self) -> bool:
        """Whether the whole protocol is encode, all-reduce of each payload, decode (the default
        :meth:`_reduce` of an all-reduce-compatible, partition-invariant codec without error feedback):
        a DDP hook can then issue the all-reduces asynchronously and decode when they complete."""
        return (self.allreduce_compatible and self.partition_invariant and self.memory is None
                and type(self)._reduce is Compressor._reduce)

    def decompress_mean(self, summed: Sequence[torch.Tensor], ctx: Any, world_size: int) -> torch.Tensor:
        """All-reduce codecs: the summed payloads -> the average (``decompress(summed) / world_size``).
        Codecs may override it to fold the division into their decoding pass."""
        out = self.decompress(summed, ctx)
        return out if world_size == 1 else out / world_size

    def decompress_mean_into(self, summed: Sequence[torch.Tensor], ctx: Any, world_size: int,
                             out: torch.Tensor) -> torch.Tensor:
        """:meth:`decompress_mean` written into ``out`` (a DDP bucket, any shape with as many elements); returns
        ``out``. A hook decodes in its all-reduce future's callback, which runs on a stream taken from CUDA's
        global pool, a different one each call: a temporary allocated there is not reused from one call to the
        next by PyTorch's caching allocator. Codecs whose decoding is one pass override it to write ``out``
        directly (PyTorch's fp16 hook does ``bucket.copy_(summed)``)."""
        return out.copy_(self.decompress_mean(summed, ctx, world_size).reshape(out.shape))

    # ------------------------------------------------------------- validation
    def check(self, tensors: Sequence[torch.Tensor], world_size: int | None = None) -> torch.Tensor | None:
        """Refuse gradients the protocol cannot take: not float tensors, empty ones, and (unless
        ``allow_nonfinite``) ones holding inf/NaN, at the cost of one host synchronisation. Returns each tensor's
        largest magnitude (float32, on their device) when it looked at the values, else None; codecs whose payload
        overflows for ``world_size`` workers (None: not known here) extend it to refuse that too."""
        if not tensors:
            raise self.error("got no tensors to reduce")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise self.error(f"tensor {i} is a {type(t).__name__}, expected a torch.Tensor")
            if t.dtype not in FLOAT_DTYPES:
                raise self.error(f"tensor {i} has dtype {t.dtype}; valid dtypes are float32, float16, bfloat16")
            if t.numel() == 0:
                raise self.error(f"tensor {i} is empty (shape {tuple(t.shape)}); gradients must have elements")
        if self.allow_nonfinite or tensors[0].device.type == "meta":
            return None
        peaks = _peaks(tensors)
        if not bool(torch.isfinite(peaks).all()):  # the host synchronisation
            i = int((~torch.isfinite(peaks)).nonzero()[0])
            raise self.error(f"tensor {i} contains NaN or Inf; pass allow_nonfinite=True to let them through")
        return peaks

    # -------------------------------------------------------- wire accounting
    def plan(self, shapes: Sequence[Sequence[int]] | Sequence[int], world_size: int = 2,
             dtype: torch.dtype = torch.float32) -> list[Collective]:
        """The collectives one call of :meth:`reduce` issues for gradients of ``shapes``.

        Runs the real protocol on ``meta`` tensors (no data, no compute) under a
        :class:`RecordingComm`, so it cannot drift from what the code sends.
        """
        shapes = _as_shapes(shapes)
        world_size = self._check_world_size(world_size)
        # a copy with empty state (the live state is not copied) and no error-feedback memory: the
        # memory adds no collective (test_plan_matches_collectives_actually_issued runs it on real
        # tensors), and its update on meta tensors was most of plan()'s time
        clone = copy.deepcopy(self, {id(self.state): {}, id(self.memory): None, id(self._device_steps): {}})
        clone.allow_nonfinite = True
        rec = RecordingComm(LocalComm(), world_size=world_size)
        clone.reduce([torch.empty(s, dtype=dtype, device="meta") for s in shapes], rec)
        return rec.log

    def _check_world_size(self, world_size) -> int:
        # plan() builds one payload per simulated worker: 1e9 workers would exhaust memory
        if isinstance(world_size, bool) or not isinstance(world_size, numbers.Integral) \
                or not 1 <= world_size <= MAX_WORLD_SIZE:
            raise self.error(f"world_size must be an integer in [1, {MAX_WORLD_SIZE}], got {world_size!r}")
        return int(world_size)

    def wire_bytes(self, shapes, world_size: int = 2, dtype: torch.dtype = torch.float32) -> int:
        """Bytes this worker puts into collectives per step (each worker's share)."""
        return sum(c.nbytes for c in self.plan(shapes, world_size, dtype))

    def compression_ratio(self, shapes, world_size: int = 2) -> float:
        """Compression ratio: dense bytes / wire bytes, i.e. the bytes of the fp32 all-reduce of the
        same gradients (4 per element) over this worker's :meth:`wire_bytes`."""
        shapes = _as_shapes(shapes)
        dense = 4 * sum(math.prod(s) for s in shapes)
        return dense / self.wire_bytes(shapes, world_size)


#: the codec methods that check their input first (:func:`guard_inputs`): the halves of GRACE's API
CHECKED_METHODS = ("compress", "decompress")
_GUARDS: set = set()  # the checking wrappers guard_inputs installed


def guard_inputs(cls: type) -> None:
    """Make ``cls``'s own ``compress`` and ``decompress`` (:data:`CHECKED_METHODS`; whatever is installed now, a
    fast path's dispatcher included) refuse a non-tensor first, naming the compressor, the method and the type
    given, instead of failing somewhere inside the codec. Every subclass gets it when it is defined; call it again
    after replacing one of those methods on a class."""
    for method in CHECKED_METHODS:
        fn = cls.__dict__.get(method)
        if callable(fn) and fn not in _GUARDS:
            guard = _guard_compress(fn) if method == "compress" else _guard_decompress(fn)
            _GUARDS.add(guard)
            setattr(cls, method, guard)


def _guard_compress(fn):
    @functools.wraps(fn)
    def compress(self, flat, *args, **kwargs):
        if not isinstance(flat, torch.Tensor):
            raise self.error(f"compress expects a torch.Tensor, got {type(flat).__name__}")
        return fn(self, flat, *args, **kwargs)
    return compress


def _guard_decompress(fn):
    @functools.wraps(fn)
    def decompress(self, payload, *args, **kwargs):
        if not isinstance(payload, (list, tuple)):
            raise self.error(f"decompress expects a list of payload tensors (what compress returned), "
                             f"got {type(payload).__name__}")
        for i, p in enumerate(payload):
            if not isinstance(p, torch.Tensor):
                raise self.error(f"decompress: payload {i} expects a torch.Tensor, got {type(p).__name__}")
        return fn(self, payload, *args, **kwargs)
    return decompress


def _peaks(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``max |x|`` of each tensor, float32, stacked (NaN/Inf iff the tensor holds one): one fused pass, no sync."""
    return torch.stack([m.float() for m in torch._foreach_max(torch._foreach_abs(list(tensors)))])


def all_finite(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Whether every element of ``tensors`` is finite, as a 0-dim bool tensor on their device (no host sync)."""
    return torch.isfinite(_peaks(tensors)).all()


def reciprocal(k: int) -> float:
    """``1 / k`` rounded once to float32, as a Python float (exactly representable in float32).

    Decoders write ``x / k`` (``k`` a level count or the world size) as ``x * reciprocal(k)``: CUDA
    PyTorch itself computes ``x / k`` for a Python-number ``k`` as that product (one rounding of ``1 / k``,
    then a multiply), the CPU as a true division. The product gives the same bits on every device and
    in the fused Triton kernels, so a decoder's fast path can be tested bit for bit against its reference."""
    return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(float(k), dtype=torch.float32))


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """All tensors as one 1-D float32 tensor (inputs may be non-contiguous).

    One contiguous float32 tensor comes back as a *view* (no copy: a pass over the gradient
    saved); codecs read ``flat`` and never write to it, and the protocol copies a payload that
    shares its memory before an all-reduce could sum into it. Anything else is copied.
    """
    if len(tensors) == 1:
        t = tensors[0]
        if t.dtype == torch.float32 and t.is_contiguous():
            return t.view(-1)
        return t.reshape(-1).float().contiguous()  # a copy either way (non-contiguous, or a cast)
    return torch.cat([t.reshape(-1).float() for t in tensors])


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Split a 1-D tensor back into tensors shaped like ``like`` (float32)."""
    out, i = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[i:i + n].reshape(t.shape))
        i += n
    return out


def views(flat: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    """Views of a 1-D tensor shaped ``shapes`` in order (a DDP bucket's per-parameter gradients)."""
    out, i = [], 0
    for s in shapes:
        n = s.numel()
        out.append(flat[i:i + n].view(s))
        i += n
    return out


def copy_back(dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor]) -> None:
    """``d.copy_(s)`` for every pair, as few kernels as possible (one multi-tensor copy)."""
    pairs = [(d, s) for d, s in zip(dst, src) if d is not s]
    if not pairs:
        return
    d, s = zip(*pairs)
    try:
        torch._foreach_copy_(list(d), list(s))
    except (RuntimeError, AttributeError):  # mixed devices/dtypes or an old torch: one by one
        for a, b in pairs:
            a.copy_(b)


def _like(out: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``out`` cast and shaped like ``like`` (no dispatcher call where they already match)."""
    return [a if (a.dtype == t.dtype and a.shape == t.shape) else a.to(t.dtype).reshape(t.shape)
            for a, t in zip(out, like)]


def _shares_memory(p: torch.Tensor, *others) -> bool:
    """Whether ``p`` lives in the same storage as any of ``others`` (``None`` skipped; always
    True on the meta device, where storages cannot be told apart: a copy of nothing is free)."""
    if p.device.type == "meta":
        return True
    ptr = p.untyped_storage().data_ptr()
    return any(o is not None and o.untyped_storage().data_ptr() == ptr for o in others)


def _as_shapes(shapes) -> list[tuple[int, ...]]:
    if len(shapes) and isinstance(shapes[0], int):
        return [tuple(shapes)]
    return [tuple(int(d) for d in s) for s in shapes]
