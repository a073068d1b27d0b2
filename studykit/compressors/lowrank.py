"""Low-rank compressors: every gradient matrix travels as thin factors.

* ``powersgd``: one step of subspace (power) iteration per training step, warm-started
  from the previous step's Q (Vogels et al. 2019, Algorithm 1). All-reduce compatible:
  P = M Q and Q = M^T P are linear in M, so summing them over workers gives the
  factors of the summed gradient. Biased, so it runs under error feedback by default.
* ``atomo``: truncated SVD of each worker's matrix with ATOMO's unbiased sampling of
  singular components (Wang et al. 2018). Every worker has its own factors, so the
  payloads are all-gathered (Agarwal et al. 2022, Table 2: not all-reduce compatible).
  ``svd="gram"`` takes the SVD from the eigendecomposition of the smaller Gram matrix
  (:func:`gram_svd`), far cheaper than a full ``torch.linalg.svd``.

Which tensors are compressed (both methods): a tensor with ``ndim >= 2`` is viewed
as the matrix ``(shape[0], prod(shape[1:]))`` of size n x m (a conv kernel
``(out, in, kh, kw)`` becomes ``(out, in*kh*kw)``, as in Vogels et al.), its rank is
``r = min(rank, n, m)``, and it is compressed when the factors are smaller:
``n * m > min_compression * r * (n + m)``. Everything else (biases, norm weights,
matrices not worth factoring) is packed into ONE uncompressed fp32 all-reduce.

Speed: matrices of the same shape are stacked and handled by batched matmuls
(``torch.bmm``), and PowerSGD orthogonalizes all P factors of equal row count (or
rows padded with zeros up to a common count, while the padding stays cheap) in one
batched Gram-Schmidt, so the number of kernels grows with the number of distinct
shapes, not with the number of tensors. PowerSGD is launch-bound on a GPU (the host takes longer
to launch its kernels than the device takes to run them), so its per-call operations are few: its buffers and every
per-group view of them are made once per ``key`` (:class:`_Workspace`), the Ps go into their
padded Gram-Schmidt batches by one ``index_copy_``, and a round is one ``bmm`` per group
(``benchmarks/powersgd_ops.py`` counts them, before and after: ``data/benchmarks/powersgd_ops_cpu/``;
the results are bit-identical to the former code's, ``tests/test_powersgd_ops.py``).

Everything is meta-safe: payload sizes depend on shapes alone and nothing branches
on tensor values, so :meth:`Compressor.plan` runs the real protocol on ``meta`` tensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Sequence

import torch

from studykit.compressors.base import Compressor
from studykit.compressors.registry import register

__all__ = ["PowerSGD", "Atomo", "matrix_shape", "orthonormalize_", "atomo_probabilities",
           "systematic_sample", "gram_matrices", "gram_svd"]

#: column norms below this are treated as zero by Gram-Schmidt (its square, 1e-40,
#: is where fp32 sums of squares turn subnormal; a column that small is dropped
#: gracefully instead of being blown up to unit length from underflowed noise)
_NORM_EPS = 1e-20
#: padding P factors to a common row count is accepted while the padded batch has
#: at most this many elements (4 MiB of fp32) or at most twice the unpadded ones
_PAD_FREE_NUMEL = 2**20
_PAD_MAX_FACTOR = 2.0
#: how ATOMO may decompose each matrix (``Atomo(svd=...)``)
_SVD_METHODS = ("exact", "gram")
#: ATOMO divides by p_i (the exact path always has; a chosen atom has p_i > 0, this only guards 0 / 0)
_P_MIN = 1e-30


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """The matrix a gradient of ``shape`` is viewed as: ``(shape[0], prod(shape[1:]))``."""
    return int(shape[0]), int(math.prod(shape[1:]))


# ------------------------------------------------------------------ layout
@dataclass(frozen=True)
class _Group:
    """Tensors of one matrix shape ``n x m``, compressed to rank ``r`` together."""

    n: int
    m: int
    r: int
    index: tuple[int, ...]  # positions in the list of gradients
    shape: tuple[int, ...] | None  # the gradients' common shape, None if they differ
    batch: int  # len(index), read often enough per call to be stored


@dataclass(frozen=True)
class _OrthoBatch:
    """Consecutive groups whose P factors are orthonormalized in one batched call."""

    groups: tuple[int, ...]  # group positions, consecutive, all with the same r
    rows: int  # common (padded) row count: the largest n among the groups
    padded: bool  # False when all groups have n == rows (then P is a view, no copy)


class _Layout:
    """How a list of gradient shapes is split: dense tensors and groups of matrices.

    Groups are ordered by ``(r, n, m)``, so groups sharing ``(r, n)`` are adjacent in
    the concatenated P buffer and can be orthonormalized as one batch without copies.
    """

    def __init__(self, shapes: Sequence[tuple[int, ...]], rank: int, min_compression: float):
        by_matrix: dict[tuple[int, int, int], list[int]] = {}
        dense = []
        for i, shape in enumerate(shapes):
            if len(shape) >= 2:
                n, m = matrix_shape(shape)
                r = min(rank, n, m)
                if n * m > min_compression * r * (n + m):
                    by_matrix.setdefault((r, n, m), []).append(i)
                    continue
            dense.append(i)
        self.shapes = tuple(shapes)
        self.dense = tuple(dense)
        self.dense_numel = [math.prod(shapes[i]) for i in self.dense]
        self.groups = tuple(_Group(n, m, r, tuple(ix), shapes[ix[0]] if len({shapes[i] for i in ix}) == 1 else None,
                                   len(ix))
                            for (r, n, m), ix in sorted(by_matrix.items()))
        self.p_numel = [g.batch * g.n * g.r for g in self.groups]
        self.q_numel = [g.batch * g.m * g.r for g in self.groups]
        self.p_offset = _offsets(self.p_numel)
        self.q_offset = _offsets(self.q_numel)
        self.ortho = self._ortho_batches()
        # the Gram-Schmidt buffer: every ortho batch (total, rows, r) back to back; group j's P is
        # rows [:n] of batch entries ortho_start[j] .. + batch of ortho batch ortho_of[j]
        self.any_padded = any(ob.padded for ob in self.ortho)
        self.ortho_numel, self.ortho_offset = [], []
        self.ortho_of, self.ortho_start = [0] * len(self.groups), [0] * len(self.groups)
        acc = 0
        for b, ob in enumerate(self.ortho):
            start = 0
            for j in ob.groups:
                self.ortho_of[j], self.ortho_start[j] = b, start
                start += self.groups[j].batch
            self.ortho_offset.append(acc)
            self.ortho_numel.append(start * ob.rows * self.groups[ob.groups[0]].r)
            acc += self.ortho_numel[-1]
        self.ortho_offset.append(acc)

    def _ortho_batches(self) -> tuple[_OrthoBatch, ...]:
        out: list[_OrthoBatch] = []
        cur: list[int] = []

        def cost(ix):  # (padded numel, unpadded numel) of orthonormalizing groups ix together
            g = [self.groups[i] for i in ix]
            rows = max(x.n for x in g)
            return sum(x.batch for x in g) * rows * g[0].r, sum(x.batch * x.n * x.r for x in g)

        for i, g in enumerate(self.groups):
            if cur and self.groups[cur[0]].r == g.r:
                padded, actual = cost(cur + [i])
                if self.groups[cur[-1]].n == g.n or padded <= max(_PAD_FREE_NUMEL, _PAD_MAX_FACTOR * actual):
                    cur.append(i)
                    continue
            if cur:
                out.append(self._batch(cur))
            cur = [i]
        if cur:
            out.append(self._batch(cur))
        return tuple(out)

    def _batch(self, ix: list[int]) -> _OrthoBatch:
        ns = {self.groups[i].n for i in ix}
        return _OrthoBatch(tuple(ix), max(ns), len(ns) > 1)


def _scatter(out: torch.Tensor, group: _Group, tensors: Sequence[torch.Tensor], dest: list) -> None:
    """Put the rows of the batch ``out`` (B, n, m) into ``dest`` at the group's positions,
    shaped like the gradients (views, no copies)."""
    if group.shape is not None:
        if group.batch == 1:  # one view, not a view and an unbind (host time counts)
            dest[group.index[0]] = out.view(group.shape)
            return
        if len(group.shape) != 2:  # a 2-D gradient is already (n, m): unbind the batch as it is
            out = out.view(group.batch, *group.shape)
        for i, x in zip(group.index, out.unbind(0)):
            dest[i] = x
    else:
        for i, x in zip(group.index, out.unbind(0)):
            dest[i] = x.view(tensors[i].shape)


def _offsets(sizes: Sequence[int]) -> list[int]:
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out + [acc]


def _stack(tensors: Sequence[torch.Tensor], group: _Group) -> torch.Tensor:
    """The group's gradients as one contiguous fp32 batch ``(B, n, m)``."""
    if group.batch == 1:  # a view when possible: no copy for a lone big matrix
        t = tensors[group.index[0]].reshape(1, group.n, group.m)
    elif group.shape is not None:  # one stack, no per-tensor reshape (host time counts)
        t = torch.stack([tensors[i] for i in group.index]).view(group.batch, group.n, group.m)
    else:
        t = torch.stack([tensors[i].reshape(group.n, group.m) for i in group.index])
    # contiguous: non-contiguous inputs then take exactly the same kernels as contiguous ones
    return t.float().contiguous()


# ------------------------------------------------------------ shared base
class _LowRank(Compressor):
    """Parameter validation, layout cache and the dense (uncompressed) all-reduce."""

    partition_invariant = False  # works per matrix: needs the gradients' own shapes

    def __init__(self, *, rank: int = 4, min_compression: float = 1.0, seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)
        self.rank = self.int_param("rank", rank, 1)
        if (isinstance(min_compression, bool) or not isinstance(min_compression, Real)
                or not math.isfinite(min_compression) or min_compression < 0):
            raise self.error(f"min_compression must be a finite number >= 0, got {min_compression!r}")
        self.min_compression = float(min_compression)
        self._layouts: dict[tuple, _Layout] = {}

    def layout(self, shapes: Sequence[Sequence[int]]) -> _Layout:
        """Which of these gradient shapes are compressed, grouped by matrix shape (cached)."""
        shapes = tuple(shapes)  # torch.Size is a tuple: hashable, compares equal to tuples
        lay = self._layouts.get(shapes)
        if lay is None:
            lay = self._layouts[shapes] = _Layout([tuple(int(d) for d in s) for s in shapes],
                                                  self.rank, self.min_compression)
        return lay

    def _reduce_dense(self, tensors, comm, return_local: bool) -> tuple[_Layout, list, list | None]:
        """The layout of ``tensors``, and the results of its uncompressed tensors, filled in by one fp32
        all-reduce (``avg``; ``local``, where asked, is each one's input: sent exactly, so error feedback
        keeps no residual for them). The compressed groups' slots stay None for the caller."""
        lay = self.layout([t.shape for t in tensors])
        avg: list = [None] * len(tensors)
        local: list | None = [None] * len(tensors) if return_local else None
        if not lay.dense:
            return lay, avg, local
        # cat copies, so the all-reduce may work in place; one cast for all; a 1-D tensor (a bias,
        # a norm weight: most of them) goes in as it is, without a reshape (an op each: host time)
        flat = torch.cat([tensors[i] if len(lay.shapes[i]) == 1 else tensors[i].reshape(-1)
                          for i in lay.dense]).float()
        flat = comm.all_reduce(flat)
        if comm.world_size > 1:  # x / 1 == x: no pass at world size 1
            flat = flat / comm.world_size
        for i, piece in zip(lay.dense, flat.split(lay.dense_numel)):
            shape = tensors[i].shape
            avg[i] = piece if piece.shape == shape else piece.view(shape)
            if local is not None:
                local[i] = tensors[i]
        return lay, avg, local


# ---------------------------------------------------------------- PowerSGD
def orthonormalize_(x: torch.Tensor, passes: int = 2) -> torch.Tensor:
    """Orthonormalize the columns of every matrix in the batch ``x`` (B, n, r), in place.

    Classical Gram-Schmidt with re-orthogonalization ("twice is enough"): each column
    is projected off the previous ones twice, so columns stay orthogonal to working
    precision even when P is rank-deficient (a zero gradient, rank above the
    gradient's own rank); a column that is (numerically) zero stays zero. Rows of
    zeros (padding) stay zero and do not change the result. ``F.normalize(col, dim=1,
    eps=_NORM_EPS)`` written out (norm, clamp, one division straight into ``x``: the same
    arithmetic, two operations fewer per column). ``4 + (6 + 2 * passes) * (r - 1)``
    operations for the whole batch (34 at r = 4 with two passes, 28 with one), where
    ``torch.linalg.qr`` on CUDA loops over the batch.
    """
    for i in range(x.shape[-1]):
        dst = col = x[:, :, i:i + 1]
        if i:
            prev = x[:, :, :i]
            prev_t = prev.transpose(1, 2)
            for _ in range(passes):  # 2: "twice is enough"; 1: classical Gram-Schmidt
                col = torch.baddbmm(col, prev, torch.bmm(prev_t, col), alpha=-1)
        norm = torch.linalg.vector_norm(col, dim=1, keepdim=True).clamp_min_(_NORM_EPS)
        torch.div(col, norm, out=dst)
    return x


#: CholeskyQR's relative shift of the Gram matrix (float64): cond(P) up to about 1e6 orthonormalizes to
#: working precision, a column dependent on earlier ones comes out of norm about sqrt(shift), not exactly 0
_CHOL_SHIFT = 1e-12
_CHOL_TINY = 1e-300  # the shift of an all-zero P: its columns stay zero (0 / sqrt(tiny) = 0)


def orthonormalize_cholesky_(x: torch.Tensor, passes: int = 2) -> torch.Tensor:
    """Orthonormalize the columns of every matrix in the batch ``x`` (B, n, r), in place, by shifted
    CholeskyQR repeated ``passes`` times (CholeskyQR2: Yamamoto et al. 2015, "Roundoff error analysis of the
    CholeskyQR2 algorithm", ETNA 44, https://etna.math.kent.edu/vol.44.2015/pp306-326.dir/pp306-326.pdf; the
    shift: Fukaya et al. 2020, "Shifted Cholesky QR for computing the QR factorization of ill-conditioned
    matrices", SIAM J. Sci. Comput. 42(1), https://doi.org/10.1137/18M1218212).

    Each pass: ``G = X^T X + s I`` in float64 (``s`` = ``_CHOL_SHIFT`` x trace), ``G = L L^T``, ``X <- X L^-T``.
    For a P of full column rank this is the QR factor with a positive diagonal, the matrix Gram-Schmidt
    (:func:`orthonormalize_`) gives, to rounding; zero columns and zero (padding) rows stay zero. The number
    of operations does not grow with the rank (about 12 per pass, where Gram-Schmidt issues
    ``4 + (6 + 2 passes) (r - 1)``: 314 at r = 32): what matters where PowerSGD is launch-bound, bucket
    by bucket in a DDP hook. No host synchronisation (``cholesky_ex`` does not check its result)."""
    for _ in range(passes):
        xd = x.double()
        g = torch.bmm(xd.transpose(1, 2), xd)
        diag = g.diagonal(dim1=1, dim2=2)
        diag.add_(diag.sum(-1, keepdim=True).mul_(_CHOL_SHIFT).add_(_CHOL_TINY))
        low, _ = torch.linalg.cholesky_ex(g)
        x.copy_(torch.linalg.solve_triangular(low.transpose(1, 2), xd, upper=True, left=False))
    return x


class _Workspace:
    """PowerSGD's buffers for one ``key`` (Vogels et al. 2019, Algorithm 1: P, Q and the mean Q), with
    every per-group view made once: a call then issues one ``bmm`` per group and round instead of
    a slice, a view and a ``bmm`` (the codec is launch-bound, so every view costs host time).

    ``q`` is the all-reduced Q of the last call (the warm start of the next, ``state[key]["q"]``);
    ``ps`` the orthonormalized P of each group (views of ``ortho``, kept for ``reuse``). Nothing
    here is handed to the caller: the estimates are fresh tensors every call.
    """

    def __init__(self, lay: _Layout, device: torch.device):
        g = lay.groups
        self.shapes, self.device = lay.shapes, device
        self.p = torch.empty(lay.p_offset[-1], device=device)
        self.q = torch.empty(lay.q_offset[-1], device=device)
        self.has_q = False  # q holds a finished Q round (a warm start)
        self.p_views = [v.view(x.batch, x.n, x.r) for x, v in zip(g, self.p.split(lay.p_numel))]
        self.q_views = [v.view(x.batch, x.m, x.r) for x, v in zip(g, self.q.split(lay.q_numel))]
        self.q_t = [v.transpose(1, 2) for v in self.q_views]
        self._q_mean: torch.Tensor | None = None
        self.q_mean_t: list[torch.Tensor] = []
        # Gram-Schmidt runs in place on p where no batch is padded, else on a zero-padded copy
        self.ortho = torch.zeros(lay.ortho_offset[-1], device=device) if lay.any_padded else self.p
        self.ortho_views = [self.ortho[lay.ortho_offset[b]:lay.ortho_offset[b + 1]].view(-1, ob.rows, g[ob.groups[0]].r)
                            for b, ob in enumerate(lay.ortho)]
        self.ps = [self.ortho_views[lay.ortho_of[j]][lay.ortho_start[j]:lay.ortho_start[j] + x.batch, :x.n]
                   for j, x in enumerate(g)]
        self.index = None
        if lay.any_padded:  # p's element -> its place in ortho, for one index_copy_ per call
            parts = []
            for j, x in enumerate(g):
                b = lay.ortho_of[j]
                rows = lay.ortho[b].rows
                base = (lay.ortho_offset[b] + torch.arange(lay.ortho_start[j], lay.ortho_start[j] + x.batch)
                        .view(-1, 1, 1) * rows * x.r)
                parts.append((base + torch.arange(x.n).view(1, -1, 1) * x.r + torch.arange(x.r)).reshape(-1))
            self.index = torch.cat(parts).to(device)

    def q_mean(self, world_size: int) -> list[torch.Tensor]:
        """``Q / world_size`` of each group, transposed (B, r, m): the views of q at world size 1."""
        if world_size == 1:
            return self.q_t
        if self._q_mean is None:
            self._q_mean = torch.empty_like(self.q)
            self.q_mean_t = [v.view(t.shape[0], t.shape[2], t.shape[1]).transpose(1, 2)
                             for v, t in zip(self._q_mean.split([t.numel() for t in self.q_t]), self.q_t)]
        torch.div(self.q, world_size, out=self._q_mean)
        return self.q_mean_t


@register
class PowerSGD(_LowRank):
    """PowerSGD (Vogels et al. 2019, Algorithm 1): rank-``rank`` factors P, Q of each matrix.

    Protocol, per call (at most three all-reduces, all fp32):

    1. the uncompressed tensors, packed into one all-reduce (skipped if there are none);
    2. ``P = M Q`` for every compressed matrix, one all-reduce of all Ps concatenated;
    3. orthonormalize each summed P; ``Q = M^T P``, one all-reduce of all Qs concatenated;
    4. estimate ``P Q^T / world_size`` = ``P P^T mean(M)``, the mean gradient projected
       on the shared subspace. P needs no averaging (it is orthonormalized); Q is divided.

    ``warm_start=True`` reuses the summed Q of the previous call with the same ``key``
    (per tensor, kept in ``self.state[key]``; identical on every worker since it was
    all-reduced) as the next query, so successive steps continue the power iteration.
    The first Q (and every Q with ``warm_start=False``) is drawn from the generator
    shared by all workers (seed and step, no rank), so every worker starts from the same Q.

    Error feedback: the local decoding this protocol returns for a compressed matrix
    is the *aggregated* estimate ``P Q^T / world_size``, as in the reference
    implementation (epfml/powersgd ``RankKReducer``: ``memory = grad - out``; also
    PyTorch's ``powerSGD_hook``), so each worker's memory is its corrected gradient
    minus the shared estimate, and the mean of the memories is exactly the global
    compression error. Uncompressed tensors decode locally to themselves (their
    memory stays zero, as the reference zeroes the memory of rank-1 tensors).

    Low-overhead variants (Han et al. 2024, "Beyond Throughput and Compression Ratios",
    arXiv 2407.01378, https://arxiv.org/abs/2407.01378, the PowerSGD case study: PowerSGD's
    compute, above all the orthogonalization, costs end-to-end time), both off by default:

    * ``orthogonalize="once"``: one classical Gram-Schmidt pass instead of two (half the
      orthogonalization kernels; columns orthogonal to about the square root of working
      precision when P is ill-conditioned);
    * ``orthogonalize="cholesky"``: CholeskyQR2 with a shift (:func:`orthonormalize_cholesky_`) instead of
      Gram-Schmidt: the same P for a full-rank P, to rounding, in a dozen operations per pass whatever the
      rank (Gram-Schmidt's grow with it); not one of the papers' algorithms, an implementation of the same
      step for launch-bound GPUs (``data/benchmarks/powersgd_ops_cpu/``). Its launch count stays flat as
      the rank grows, so it pays at high rank (>= 16), above all in a hook that runs it bucket by bucket,
      and gains little at low rank (the GPU runs behind this advice are indexed in ``data/campaigns.toml``);
    * ``reuse=r > 1``: the orthonormalized P of a full step is reused for the next ``r - 1``
      calls with the same ``key``: those calls skip ``P = M Q``, its all-reduce and the
      orthogonalization, and send only ``Q = M^T P`` (one all-reduce of the Qs, the estimate
      is still ``P Q^T / world_size``, the projection of the mean gradient on the kept
      subspace). ``plan()`` shows a full step (it starts without state).
    """

    name = "powersgd"
    family = 'low-rank'
    key_param = 'rank'
    bench_group = 'lowrank'
    allreduce_compatible = True
    default_error_feedback = True

    def __init__(self, *, rank: int = 4, warm_start: bool = True, min_compression: float = 1.0,
                 orthogonalize: str = "twice", reuse: int = 1, seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(rank=rank, min_compression=min_compression, seed=seed, allow_nonfinite=allow_nonfinite)
        if not isinstance(warm_start, bool):
            raise self.error(f"warm_start must be True or False, got {warm_start!r}")
        self.warm_start = warm_start
        if orthogonalize not in ("twice", "once", "cholesky"):
            raise self.error(f"orthogonalize must be 'twice', 'once' or 'cholesky', got {orthogonalize!r}")
        self.orthogonalize = orthogonalize
        self.reuse = self.int_param("reuse", reuse, 1)

    def _workspace(self, lay: _Layout, key: Any, device: torch.device) -> tuple[dict, _Workspace]:
        """This key's state and buffers; new ones (no warm start, no kept P) where the shapes or the
        device changed."""
        st = self.state.get(key)
        if st is None or st["ws"].shapes != lay.shapes or st["ws"].device != device:
            st = self.state[key] = {"shapes": lay.shapes, "q": None, "ps": None, "age": 0,
                                    "ws": _Workspace(lay, device)}
        return st, st["ws"]

    def _reduce(self, tensors, comm, key, return_local):
        lay, avg, local = self._reduce_dense(tensors, comm, return_local)
        if not lay.groups:
            return avg, local
        device = tensors[0].device
        mats = [_stack(tensors, g) for g in lay.groups]
        st, ws = self._workspace(lay, key, device)
        if self.reuse > 1 and st["ps"] is not None and st["age"] + 1 < self.reuse:
            age = st["age"] + 1  # reuse the subspace (ws.ps): no P round, no orthogonalization
        else:
            if not (self.warm_start and ws.has_q):
                # shared randomness (no rank): every worker draws the same Q
                torch.randn(lay.q_offset[-1], generator=self.generator(device), out=ws.q)
            # P = M Q for every group, written straight into the buffer that is all-reduced
            for mat, q, p in zip(mats, ws.q_views, ws.p_views):
                torch.bmm(mat, q, out=p)
            _all_reduce_into(comm, ws.p)
            if lay.any_padded:  # the Ps into their zero-padded Gram-Schmidt batches, one copy
                ws.ortho.zero_()
                ws.ortho.index_copy_(0, ws.index, ws.p)
            if self.orthogonalize == "cholesky":
                for block in ws.ortho_views:
                    orthonormalize_cholesky_(block)
            else:
                passes = 2 if self.orthogonalize == "twice" else 1
                for block in ws.ortho_views:
                    orthonormalize_(block, passes)
            age = 0

        # Q = M^T P, again straight into the all-reduce buffer
        for mat, p, q in zip(mats, ws.ps, ws.q_views):
            torch.bmm(mat.transpose(1, 2), p, out=q)
        _all_reduce_into(comm, ws.q)
        ws.has_q = True
        st.update(q=ws.q, ps=ws.ps if self.reuse > 1 else None, age=age)

        for g, p, q_t in zip(lay.groups, ws.ps, ws.q_mean(comm.world_size)):
            _scatter(torch.bmm(p, q_t), g, tensors, avg)
        if local is not None:  # the aggregated estimate (see the class docstring)
            for g in lay.groups:
                for i in g.index:
                    local[i] = avg[i]
        return avg, local


def _all_reduce_into(comm, buf: torch.Tensor) -> None:
    """Sum ``buf`` over workers, the result in ``buf`` (a communicator may return another tensor)."""
    out = comm.all_reduce(buf)
    if out is not buf:
        buf.copy_(out)


# ------------------------------------------------------------------- ATOMO
def atomo_probabilities(s: torch.Tensor, budget: int) -> torch.Tensor:
    """ATOMO's sampling probabilities for singular values ``s`` (B, k), sorted descending.

    Minimizes the estimator's variance subject to ``sum(p) = budget`` and ``p <= 1``
    (Wang et al. 2018, Algorithm 2): ``p_i = 1`` for the largest values, the rest
    ``p_i = (budget - #capped) * s_i / sum(uncapped s)``. The capping is iterated a
    fixed ``min(budget, k)`` times (each pass caps at least one value until the fixed
    point, which caps at most ``budget``), so nothing branches on values. Zero
    singular values get probability 0; a matrix of rank <= budget gets all p = 1.
    """
    k = s.shape[-1]
    if s.device.type == "meta":  # plan(): no values to weigh, and the loop costs ~5 ms per group on meta
        return torch.empty_like(s)
    capped = torch.zeros_like(s, dtype=torch.bool)

    def probabilities(capped):
        left = (budget - capped.sum(-1, keepdim=True)).clamp_min(0)
        rest = torch.where(capped, 0.0, s).sum(-1, keepdim=True)
        return torch.where(capped, 1.0, left * s / rest.clamp_min(torch.finfo(s.dtype).tiny))

    for _ in range(min(budget, k)):
        capped = capped | (probabilities(capped) >= 1)
    return probabilities(capped).clamp(0, 1)


def systematic_sample(p: torch.Tensor, slots: int, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick at most ``slots`` of the k components of each row of ``p`` (B, k), component
    i with probability exactly ``p_i``, given ``u`` (B,) uniform on [0, 1).

    Systematic sampling: points ``(1 - u) + t`` for ``t = 0 .. slots-1`` on the line cut
    into intervals of lengths ``p_i``; a component is chosen when a point falls in its
    interval. As every ``p_i <= 1``, each interval holds at most one point, and it holds
    one with probability ``p_i``, so the marginals are exact (the estimate stays
    unbiased) while the number chosen never exceeds ``slots`` (``sum(p) <= slots``):
    a payload of fixed size, unlike independent coin flips. Returns (indices (B, slots),
    valid (B, slots)); an invalid slot (fewer components chosen) carries zeros.
    """
    k = p.shape[-1]
    cum = torch.cumsum(p, dim=-1)
    points = (1 - u).unsqueeze(-1) + torch.arange(slots, device=p.device, dtype=p.dtype)
    idx = torch.searchsorted(cum.contiguous(), points.contiguous())  # first i with cum_i >= point
    safe = idx.clamp(max=k - 1)
    valid = (idx < k) & (torch.gather(p, -1, safe) > 0)
    return safe, valid


def gram_matrices(mat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X, G, scale)`` of :func:`gram_svd`: each matrix of ``mat`` (B, n, m) scaled by its largest absolute entry
    (``scale`` (B, 1, 1), at least fp32's smallest normal), and the smaller Gram matrix of each, ``X X^T`` when
    ``n <= m``, else ``X^T X``."""
    n, m = mat.shape[-2:]
    scale = mat.abs().amax(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(mat.dtype).tiny)
    x = mat / scale
    return x, (torch.bmm(x, x.mT) if n <= m else torch.bmm(x.mT, x)), scale


def gram_svd(mat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Singular values and the smaller side's singular vectors of each matrix in ``mat`` (B, n, m),
    from the eigendecomposition of the smaller Gram matrix.

    With ``k = min(n, m)`` and ``X = mat / scale`` (``scale`` (B, 1, 1): each matrix's largest
    absolute entry, so the Gram matrix neither overflows nor underflows fp32): ``G = X X^T`` when
    ``n <= m`` (its eigenvectors are the left singular vectors U), else ``G = X^T X`` (the right
    ones, V); ``torch.linalg.eigh(G)`` gives ``G = W diag(w) W^T`` and ``s_i = sqrt(w_i)``, the
    singular values of X (the relation ``M M^T = U S^2 U^T`` of the thin SVD ``M = U S V^T``,
    Wang et al. 2018's spectral atoms). Returns ``(s (B, k) descending, W (B, k, k) with the
    matching columns, scale)``; ``s * scale`` are the singular values of ``mat``.

    Accuracy: forming G squares the condition number. eigh finds w to about ``eps * w_max``
    absolutely, so singular values below about ``sqrt(eps) * s_max`` (3.5e-4 of the largest in
    fp32) lose their relative accuracy; larger ones keep it. Eigenvalues under ``eps * w_max``
    are rounding noise (they may come out negative): they are raised to ``eps * w_max``, so a
    nonzero matrix never has a zero or NaN singular value here, and every atom keeps ``p_i > 0``
    in ATOMO's sampling (a zero matrix keeps s = 0). The columns of W are orthonormal to working
    precision whatever the accuracy of their w (a property of the symmetric eigensolver).

    G is formed in fp32 on every device. Its eigendecomposition runs in fp32 on the CPU (LAPACK) and in
    float64 on a GPU. On an H200, cuSOLVER's float64 solver took 0.50x the time of its fp32 Jacobi solver over
    ResNet-50's groups, and the fp32 solver's eigenvalues were off by up to 2.2e-4 of the largest, float64's by
    1e-15 (``benchmarks/atomo_eigh.py``, ``data/measurements/codec_kernels_h200/atomo_eigh/``). On the CPU,
    float64 costs several times more.
    """
    x, gram, scale = gram_matrices(mat)
    if gram.device.type == "cuda":
        w, vecs = (t.to(gram.dtype) for t in torch.linalg.eigh(gram.double()))  # ascending
    else:
        w, vecs = torch.linalg.eigh(gram)  # ascending
    w, vecs = w.flip(-1), vecs.flip(-1)
    floor = w[..., :1].clamp_min(0) * torch.finfo(w.dtype).eps
    return w.maximum(floor).sqrt(), vecs, scale


@register
class Atomo(_LowRank):
    """ATOMO with singular-value atoms (Wang et al. 2018): unbiased rank-``rank`` sketches.

    Each worker computes the thin SVD ``M = sum_i s_i u_i v_i^T`` of its own matrix,
    draws components with the probabilities of :func:`atomo_probabilities` (budget
    ``r``) and sends ``(s_i / p_i) u_i`` and ``v_i`` for each chosen component. To keep
    the payload size fixed, exactly ``r`` slots are sent per matrix and chosen by
    :func:`systematic_sample` (exact marginals ``p_i``, never more than r chosen);
    unused slots are zeros. Folding the weight ``s_i / p_i`` into ``u_i`` sends
    ``r (n + m)`` floats per matrix, the same as PowerSGD. The estimate is unbiased:
    ``E[sum_i (Z_i / p_i) s_i u_i v_i^T] = M``.

    Protocol: the uncompressed tensors in one fp32 all-reduce (exact, and cheaper than
    gathering them), then one all-gather of all factors concatenated; the estimate is
    the mean of every worker's reconstruction. Sampling uses private randomness (seed,
    step and the worker's rank).

    ``svd`` (how each group of equal-shape matrices, batched, is decomposed):

    * ``"exact"`` (default): ``torch.linalg.svd`` of every matrix: accurate, and the slowest step of
      ATOMO's encode on a GPU.
    * ``"gram"``: :func:`gram_svd`, one batched Gram product and ``torch.linalg.eigh`` of the
      k x k Gram matrix (k = min(n, m); in float64 on a GPU, where that is the faster solver). Every singular value comes out (the probabilities
      need the whole spectrum), but only the *sampled* atoms' other vectors are formed: for
      ``n <= m`` the chosen rows ``u_i^T M`` (r of them, not k), sent normalized as ``v_i``
      with weight ``||u_i^T M|| / p_i`` on ``u_i``; for ``n > m``, ``M v_i / p_i`` with ``v_i``.
      Cost in accuracy: the squared condition number (see :func:`gram_svd`): values below
      about ``sqrt(eps) * s_max`` are inaccurate, so their p_i are off. ATOMO tolerates this:
      p_i grows with s_i, so such atoms are rarely chosen and carry little of M, and the
      estimate stays unbiased. ATOMO is unbiased over any atomic decomposition ("given a
      gradient, an atomic decomposition, and a sparsity budget, ATOMO gives a random unbiased
      sparsification of the atoms", Wang et al. 2018, abstract): the atoms ``u_i (u_i^T M)`` of orthonormal u_i sum to M
      whatever the accuracy of s_i, each is sent as exactly itself divided by p_i (its
      weight is its measured norm, not the inaccurate s_i), and every atom of a nonzero
      matrix has p_i > 0. Only the variance (the optimality of p) suffers, and only through
      atoms that hold less than ~sqrt(eps) of the largest singular value. Same wire bytes and
      ``plan()``; an input that the exact path refuses is refused too.

    Not offered: a randomized or truncated SVD (``torch.svd_lowrank``). It finds the top q
    components only; the sampling probabilities need every singular value (their sum), and
    the residual ``M - Q Q^T M`` is no single rank-1 atom, so either it is dropped (the
    estimate is biased) or sent whole (the payload is no longer r (n + m) floats): ATOMO's
    unbiasedness at a fixed budget cannot be kept.
    """

    name = "atomo"
    keeps_nonfinite = False  # its SVD fails on NaN, its sampling may skip an inf
    family = 'low-rank'
    key_param = 'rank'
    bench_group = 'lowrank'
    allreduce_compatible = False
    stochastic = True
    unbiased = True

    def __init__(self, *, rank: int = 4, min_compression: float = 1.0, svd: str = "exact", seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(rank=rank, min_compression=min_compression, seed=seed, allow_nonfinite=allow_nonfinite)
        if not isinstance(svd, str) or svd not in _SVD_METHODS:
            raise self.error(f"svd must be one of {', '.join(map(repr, _SVD_METHODS))}, got {svd!r}")
        self.svd = svd

    def _reduce(self, tensors, comm, key, return_local):
        lay, avg, local = self._reduce_dense(tensors, comm, return_local)
        if not lay.groups:
            return avg, local
        device = tensors[0].device
        world_size = comm.world_size
        # payload of group j: u-slots (B, n, r) then v-slots (B, r, m)
        sizes = [g.batch * g.r * (g.n + g.m) for g in lay.groups]
        offset = _offsets(sizes)
        payload = torch.empty(offset[-1], device=device)
        starts = _offsets([g.batch for g in lay.groups])
        uniform = torch.rand(starts[-1], generator=self.generator(device, comm.rank), device=device)
        sample = self._sample_gram if self.svd == "gram" else self._sample_exact
        for j, g in enumerate(lay.groups):
            us, vs = self._slots(payload, offset[j], g)
            sample(_stack(tensors, g), g, uniform[starts[j]:starts[j + 1]], us, vs)
            if local is not None:
                _scatter(torch.bmm(us, vs), g, tensors, local)

        gathered = torch.stack(comm.all_gather(payload))  # (world_size, numel)
        for j, g in enumerate(lay.groups):
            u_all, v_all = self._slots(gathered, offset[j], g, world_size)
            # every worker's slots side by side: one bmm sums the W reconstructions
            u_cat = u_all.permute(1, 2, 0, 3).reshape(g.batch, g.n, world_size * g.r)
            v_cat = v_all.permute(1, 0, 2, 3).reshape(g.batch, world_size * g.r, g.m)
            _scatter(torch.bmm(u_cat, v_cat) / world_size, g, tensors, avg)
        return avg, local

    @staticmethod
    def _sample_exact(mat: torch.Tensor, g: _Group, uniform: torch.Tensor, us: torch.Tensor,
                      vs: torch.Tensor) -> None:
        """Write the chosen atoms of ``mat`` (B, n, m) into the slots ``us`` (B, n, r), ``vs``
        (B, r, m): ``(s_i / p_i) u_i`` and ``v_i`` from ``torch.linalg.svd``."""
        u, s, vh = torch.linalg.svd(mat, full_matrices=False)  # (B,n,k) (B,k) (B,k,m)
        p = atomo_probabilities(s, g.r)
        idx, valid = systematic_sample(p, g.r, uniform)
        weight = torch.where(valid, torch.gather(s, -1, idx) / torch.gather(p, -1, idx).clamp_min(_P_MIN), 0.0)
        torch.mul(torch.gather(u, 2, idx.unsqueeze(1).expand(g.batch, g.n, g.r)), weight.unsqueeze(1), out=us)
        vs.copy_(torch.gather(vh, 1, idx.unsqueeze(2).expand(g.batch, g.r, g.m)))

    @staticmethod
    def _sample_gram(mat: torch.Tensor, g: _Group, uniform: torch.Tensor, us: torch.Tensor,
                     vs: torch.Tensor) -> None:
        """As :meth:`_sample_exact`, from :func:`gram_svd`: only the chosen atoms' other
        singular vectors are formed, and each atom is sent as ``u_i u_i^T M / p_i`` (n <= m) or
        ``M v_i v_i^T / p_i`` (n > m), exactly the atom of the orthonormal eigenvectors, so the
        estimate is unbiased even where the eigenvalues are inaccurate (see the class docstring)."""
        s, vecs, scale = gram_svd(mat)  # s of the scaled matrix X = mat / scale: p does not depend on scale
        p = atomo_probabilities(s, g.r)
        idx, valid = systematic_sample(p, g.r, uniform)
        inv_p = torch.where(valid, 1 / torch.gather(p, -1, idx).clamp_min(_P_MIN), 0.0)  # (B, r)
        k = vecs.shape[-1]
        chosen = torch.gather(vecs, 2, idx.unsqueeze(1).expand(g.batch, k, g.r))  # (B, k, r)
        if g.n <= g.m:  # chosen = u_i: rows u_i^T M = s_i v_i^T, normalized; their norm rides on u_i
            rows = torch.bmm(chosen.mT, mat).div_(scale)  # (B, r, m) of X: the norm below cannot overflow
            norm = torch.linalg.vector_norm(rows, dim=-1)  # (B, r)
            torch.mul(chosen, (norm * scale.view(-1, 1) * inv_p).unsqueeze(1), out=us)
            torch.div(rows, norm.clamp_min(torch.finfo(norm.dtype).tiny).unsqueeze(-1), out=vs)
        else:  # chosen = v_i: M v_i = s_i u_i
            torch.mul(torch.bmm(mat, chosen), inv_p.unsqueeze(1), out=us)
            vs.copy_(chosen.mT)

    @staticmethod
    def _slots(buf: torch.Tensor, start: int, g: _Group, world_size: int | None = None):
        """Views of the u-slots (B, n, r) and v-slots (B, r, m) of group ``g`` in ``buf``
        (with a leading worker dimension when ``world_size`` is given)."""
        nu, nv = g.batch * g.n * g.r, g.batch * g.r * g.m
        if world_size is None:
            return (buf[start:start + nu].view(g.batch, g.n, g.r),
                    buf[start + nu:start + nu + nv].view(g.batch, g.r, g.m))
        return (buf[:, start:start + nu].reshape(world_size, g.batch, g.n, g.r),
                buf[:, start + nu:start + nu + nv].reshape(world_size, g.batch, g.r, g.m))
