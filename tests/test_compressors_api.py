"""Properties every registered compressor must have (new compressors are covered automatically)."""
import math

import pytest
import torch

from studykit import compressors as C
from studykit.comm import LocalComm, RecordingComm, SimGroup
from studykit.compressors.base import CompressorError
from tests.conftest import worker_grads

NAMES = C.available()
REQUIRED = ["none", "fp16", "bf16", "signsgd", "ef_signsgd", "qsgd", "terngrad", "topk", "randomk", "mstopk",
            "dgc", "topk_chunked", "thc", "powersgd", "atomo", "natural", "quantize"]


def test_every_method_from_the_papers_is_registered():
    missing = sorted(set(REQUIRED) - set(NAMES))
    assert not missing, f"not registered: {missing}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_shapes_and_dtypes_preserved_and_all_workers_agree(name, dtype):
    grads = worker_grads(3, dtype=dtype)
    out = C.simulate(name, grads)
    for worker in out:
        assert [t.shape for t in worker] == [t.shape for t in grads[0]]
        assert all(t.dtype == dtype for t in worker)
        assert all(torch.isfinite(t.float()).all() for t in worker)
    for worker in out[1:]:  # every worker holds the same estimate
        for a, b in zip(worker, out[0]):
            assert torch.equal(a, b), f"{name}: workers disagree"


@pytest.mark.parametrize("name", NAMES)
def test_non_contiguous_input_same_as_contiguous(name):
    base = worker_grads(2, shapes=((5, 8),))
    nc = [[g[0].t()] for g in base]  # transposed views: non-contiguous
    assert not nc[0][0].is_contiguous()
    c = [[g[0].t().contiguous()] for g in base]
    a, b = C.simulate(name, nc), C.simulate(name, c)
    assert torch.equal(a[0][0], b[0][0])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_plan_matches_collectives_actually_issued(name, world_size):
    """plan() (run on meta tensors) equals what the protocol sends on real tensors."""
    shapes = [(6, 5), (7,), (2, 3, 4)]
    comp = C.get(name)
    planned = comp.plan(shapes, world_size)
    assert planned, f"{name} plans no communication"
    grads = worker_grads(world_size, shapes)
    group = SimGroup(world_size)
    recorded = []

    import threading

    def run(rank):
        rec = RecordingComm(group.comm(rank))
        C.get(name).reduce(grads[rank], rec)
        if rank == 0:
            recorded.extend(rec.log)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert [(c.op, c.numel, c.dtype) for c in recorded] == [(c.op, c.numel, c.dtype) for c in planned]


@pytest.mark.parametrize("name", NAMES)
def test_compression_ratio_is_dense_bytes_over_wire_bytes(name):
    shapes = [(64, 32), (32,)]
    comp = C.get(name)
    wire = sum(c.nbytes for c in comp.plan(shapes, 2))
    assert math.isclose(comp.compression_ratio(shapes, 2), 4 * (64 * 32 + 32) / wire)
    assert not hasattr(comp, "ratio") or not callable(comp.ratio)  # the one name: compression_ratio


# lossy compressors are checked against references in their family tests
@pytest.mark.parametrize("name", [n for n in ("none", "fp16", "bf16") if n in NAMES])
def test_world_size_one_estimate_is_close_to_input_in_expectation_or_exact_for_dense(name):
    g = worker_grads(1)[0]
    out = C.simulate(name, [g])[0]
    tol = {"none": 0.0, "fp16": 1e-3, "bf16": 1e-2}[name]
    for a, b in zip(out, g):
        assert torch.allclose(a, b, rtol=tol, atol=tol)


def test_dense_average_is_exact():
    grads = worker_grads(4)
    out = C.simulate("none", grads)[2]
    for i, t in enumerate(out):
        ref = sum(g[i] for g in grads) / 4
        assert torch.allclose(t, ref, atol=1e-6)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_half_precision_average_within_precision(name):
    grads = worker_grads(4)
    out = C.simulate(name, grads)[0]
    eps = {"fp16": 2**-10, "bf16": 2**-7}[name]
    for i, t in enumerate(out):
        ref = sum(g[i] for g in grads) / 4
        assert torch.allclose(t, ref, rtol=4 * eps, atol=4 * eps)


def _single_round_allreduce(name: str) -> bool:
    """An all-reduce codec with one round (multi-round protocols are checked against simulate in their
    family tests; gathering ones have no sum of payloads)."""
    comp = C.get(name, error_feedback=False)
    if not comp.allreduce_compatible:
        return False
    try:
        comp.compress(torch.zeros(8), 2)
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize("name", [n for n in NAMES if _single_round_allreduce(n)])
def test_allreduce_compatible_payloads_add_up(name):
    """For single-round all-reduce codecs: decoding the summed payloads = summing decodings."""
    comp = C.get(name, error_feedback=False)
    flat = [torch.randn(300, generator=torch.Generator().manual_seed(r)) for r in range(3)]
    payloads = [comp.compress(f, 3) for f in flat]
    ctx = payloads[0][1]
    summed = [sum(p[0][i].double() for p in payloads) for i in range(len(payloads[0][0]))]
    summed = [s.to(payloads[0][0][i].dtype) for i, s in enumerate(summed)]
    decoded_sum = comp.decompress(summed, ctx)
    sum_decoded = sum(comp.decompress(p, c) for p, c in payloads)
    tol = 2e-2 if any(p.dtype == torch.bfloat16 for p in payloads[0][0]) else 1e-3
    assert torch.allclose(decoded_sum, sum_decoded, rtol=tol, atol=tol)


# ----------------------------------------------------------------- bad input
def test_unknown_compressor_lists_valid_ones():
    with pytest.raises(CompressorError, match="available: .*fp16"):
        C.get("nope")


def test_unknown_parameter_lists_valid_ones():
    with pytest.raises(CompressorError, match=r"unknown parameter.*'bogus'.*valid"):
        C.get("none", bogus=1)


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_rejected_by_default(name):
    g = worker_grads(2)
    g[1][0][0, 0] = float("nan")
    with pytest.raises(CompressorError, match=rf"'{name}'.*NaN or Inf"):
        C.simulate(name, g)
    g[1][0][0, 0] = float("inf")
    with pytest.raises(CompressorError, match="NaN or Inf"):
        C.simulate(name, g)


def test_nonfinite_allowed_when_asked():
    g = worker_grads(2)
    g[1][0][0, 0] = float("inf")
    out = C.simulate("none", g, allow_nonfinite=True)
    assert torch.isinf(out[0][0][0, 0])


@pytest.mark.parametrize("name", NAMES)
def test_integer_and_empty_tensors_rejected(name):
    with pytest.raises(CompressorError, match="dtype"):
        C.get(name).reduce(torch.ones(4, dtype=torch.int32), LocalComm())
    with pytest.raises(CompressorError, match="empty"):
        C.get(name).reduce(torch.ones(0), LocalComm())


def test_mismatched_shapes_in_simulate():
    with pytest.raises(CompressorError, match="mismatched shapes"):
        C.simulate("none", [torch.ones(3), torch.ones(4)])
    with pytest.raises(CompressorError, match="2 gradients for 3 workers"):
        C.Simulation("none", 3).step([torch.ones(3), torch.ones(3)])


@pytest.mark.parametrize("name", C.available())
def test_metadata_is_on_the_class(name):
    """Family, key parameter and benchmark group come from the class (one place)."""
    meta = C.metadata(name)
    assert meta.family in ("precision", "quantization", "sparsification", "low-rank")
    assert meta.bench_group in ("elementwise", "topk", "lowrank", "dense")
    assert meta.key_param is None or meta.key_param in C.parameters(name)
    assert name in C.in_group(meta.bench_group)


# ------------------------------------------------------------------ error feedback: a memory the protocol calls
def _each_worker(world_size: int, fn) -> list:
    """``fn(rank, comm)`` on ``world_size`` simulated workers (threads in lockstep); results by rank."""
    import threading

    group, out, errors = SimGroup(world_size), [None] * world_size, []

    def run(rank):
        try:
            out[rank] = fn(rank, group.comm(rank))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            group.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    if errors:
        raise errors[0]
    return out


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("world_size, dtype", [(1, torch.float32), (3, torch.float32), (3, torch.float16)])
def test_error_feedback_equals_the_dense_loop_written_out(name, world_size, dtype):
    """Compressor + memory is bit for bit the error-feedback loop (Karimireddy et al. 2019,
    https://arxiv.org/abs/1901.09847, Alg. 2; Seide et al. 2014) written out around the same
    compressor without memory: p_t = g_t + e_t, send C(p_t), e_{t+1} = p_t - C(p_t), e_0 = 0."""
    with_ef = [C.get(name, error_feedback=True) for _ in range(world_size)]
    plain = [C.get(name, error_feedback=False) for _ in range(world_size)]
    residual: list = [None] * world_size
    for step in range(3):
        grads = worker_grads(world_size, shapes=((6, 5), (7,), (2, 3, 4), (12, 10)), seed=step, dtype=dtype)
        got = _each_worker(world_size, lambda r, comm, grads=grads: with_ef[r].reduce(grads[r], comm, key="b"))

        def reference(r, comm, grads=grads):
            p = [g.float() if e is None else g.float() + e for g, e in zip(grads[r], residual[r] or [None] * 4)]
            avg, sent = plain[r].reduce(p, comm, key="b", return_local=True)
            return p, avg, sent

        for r, (p, avg, sent) in enumerate(_each_worker(world_size, reference)):
            residual[r] = [a - b for a, b in zip(p, sent)]
            for a, b in zip(got[r], avg):
                assert a.dtype == dtype and torch.equal(a, b.to(dtype)), f"{name}: step {step}, worker {r}"
    for r in range(world_size):
        assert all(torch.equal(a, b) for a, b in zip(with_ef[r].memory.residuals["b"], residual[r]))


@pytest.mark.parametrize("name", NAMES)
def test_error_feedback_is_a_memory_beside_the_compressor_not_a_wrapper(name):
    """GRACE's split (Xu et al. 2021, https://github.com/sands-lab/grace): the compressor is the same
    class with or without error feedback; the memory is a separate object its protocol calls."""
    bare, with_ef = C.get(name, error_feedback=False), C.get(name, error_feedback=True)
    assert type(bare) is type(with_ef) and bare.memory is None and isinstance(with_ef.memory, C.ResidualMemory)
    assert with_ef.name == name and with_ef.error_feedback and not bare.error_feedback
    assert with_ef.params() == {**bare.params(), "error_feedback": True}
    shapes = [(6, 5), (7,), (2, 3, 4)]
    assert with_ef.plan(shapes, 4) == bare.plan(shapes, 4)  # the memory adds no traffic
    assert with_ef.memory.residuals == {}  # plan() ran on a copy with a memory of its own


def test_residual_memory_compensates_and_updates_per_key():
    mem = C.ResidualMemory()
    g = [torch.ones(3), torch.full((2,), 2.0)]
    assert [t.tolist() for t in mem.compensate(g, key="a")] == [[1.0] * 3, [2.0] * 2]  # e_0 = 0
    mem.update(g, [torch.zeros(3), torch.ones(2)], key="a")
    assert [t.tolist() for t in mem.residuals["a"]] == [[1.0] * 3, [1.0] * 2]
    assert [t.tolist() for t in mem.compensate(g, key="a")] == [[2.0] * 3, [3.0] * 2]
    assert mem.compensate(g, key="other")[0].tolist() == [1.0] * 3
    with pytest.raises(CompressorError, match=r"error-feedback memory for key 'a' has shapes \[\(3,\), \(2,\)\]"):
        mem.compensate([torch.ones(4)], key="a")


# ------------------------------------------------------------------ fast GPU kernels: overrides of the references
def test_reference_codecs_never_mention_the_kernels():
    """Each family module is plain PyTorch; the kernels attach in studykit.compressors.fastpath only."""
    import inspect


    for module in (C.base, C.precision, C.quantization, C.sparsification, C.thc, C.lowrank):
        assert "_fast" not in inspect.getsource(module), module.__name__


def test_an_override_runs_where_its_condition_holds_and_the_reference_elsewhere():
    from studykit.compressors import fastpath

    class Toy(C.Compressor):
        def compress(self, flat, world_size):
            """Reference: the input as it is."""
            return [flat], None

        def decompress(self, payload, ctx):
            return payload[0]

    ran = []

    @fastpath.override(Toy, "compress", when=lambda self, flat, world_size: flat.numel() > 3)
    def fake(self, flat, world_size):
        ran.append(flat.numel())
        return [flat * 0], None

    try:
        assert torch.equal(Toy().reduce(torch.ones(3)), torch.ones(3)) and ran == []  # condition false
        assert torch.equal(Toy().reduce(torch.ones(5)), torch.zeros(5)) and ran == [5]  # condition true
        assert fastpath.reference(Toy, "compress").__doc__ == "Reference: the input as it is."
        assert Toy.compress.__wrapped__ is fastpath.reference(Toy, "compress")  # inspect shows the reference
        assert fastpath.reference(Toy, "decompress") is Toy.decompress  # no override: the method itself
        with pytest.raises(TypeError, match="has an override already"):
            fastpath.override(Toy, "compress", when=lambda *a: True)(fake)
        with pytest.raises(TypeError, match="defines no method 'combine' of its own"):
            fastpath.override(Toy, "combine", when=lambda *a: True)(fake)
    finally:
        fastpath.OVERRIDES.pop((Toy, "compress"), None)


class _KernelCalled(Exception):
    pass


#: the kernel each registered fast codec reaches first (names in studykit.compressors._fast)
FIRST_KERNEL = {"fp16": "cast", "bf16": "cast", "signsgd": "pack", "ef_signsgd": "pack", "qsgd": "qsgd_encode",
                "terngrad": "terngrad_encode", "natural": "natural_encode", "quantize": "quantize_pack",
                "thc": "rotate_signed", "topk": "topk_abs", "mstopk": "abs_mean_max", "topk_chunked": "row_topk",
                "randomk": "uniform_positions"}


@pytest.mark.parametrize("name", sorted(FIRST_KERNEL))
def test_the_overrides_reach_their_kernels_when_the_fast_path_is_on(monkeypatch, name):
    """On CPU, with the fast-path switch forced on and every kernel replaced by a fake that reports
    its name: the dispatch picks the registered kernel (the kernels themselves: tests/test_bench.py, GPU)."""
    from studykit.compressors import _fast

    def fake(kernel):
        def called(*args, **kwargs):
            raise _KernelCalled(kernel)
        return called

    monkeypatch.setattr(_fast, "enabled", lambda *tensors: True)
    monkeypatch.setattr(_fast, "enabled_for", lambda device, numel: True)
    for kernel in set(FIRST_KERNEL.values()) | {"signs_decode", "row_scatter", "qsgd_decode", "natural_decode",
                                                  "terngrad_decode", "quantize_decode", "quantize_unpack", "thc_levels",
                                                  "thc_decode"}:
        monkeypatch.setattr(_fast, kernel, fake(kernel))
    with pytest.raises(_KernelCalled, match=f"^{FIRST_KERNEL[name]}$"):
        C.get(name, error_feedback=False).reduce(torch.randn(4096, generator=torch.Generator().manual_seed(0)))


def test_dgc_reaches_its_sample_threshold_compaction_selection_and_take_kernels_in_order(monkeypatch):
    """On CPU with the fast path forced on: DGC's select reaches the fused sample, the k-th largest, the
    compaction, the selection among the candidates and the take, in that order (each kernel reached is then
    replaced by what it computes, in PyTorch); with all five stand-ins the result is the reference's with the
    same sample (its first positions)."""
    from studykit.compressors import _fast
    from studykit.compressors.sparsification import DGC, _drop_fill

    def pad(t, room, fill):
        return torch.cat([t, torch.full((room - t.numel(),), fill, dtype=t.dtype)])

    def compact(x, t_bits, cap, room):
        pos = torch.nonzero_static(x.abs() >= t_bits.view(torch.float32), size=cap, fill_value=x.numel()).view(-1)
        bits = torch.where(pos < x.numel(), x[pos.clamp(max=x.numel() - 1)].abs(), 0.0).view(torch.int32)
        return pad(pos, room, x.numel()), pad(bits, room, 0), None

    stand_ins = {"sample_abs_bits": lambda x, count, seed, room: pad(x[:count].abs().view(torch.int32), room, 0),
                 "kth_abs": lambda x, k: torch.topk(x.abs(), k).values[-1:],
                 "compact_ge": compact,
                 "topk_abs": lambda x, k: torch.topk(x.abs(), k, sorted=False).indices,
                 "take_slots": lambda x, cand, top: _drop_fill(x, cand[top])}
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(_fast, "enabled", lambda *tensors: True)
    monkeypatch.setattr(_fast, "enabled_for", lambda device, numel: True)
    for i, name in enumerate(stand_ins):
        for later in list(stand_ins)[i:]:
            monkeypatch.setattr(_fast, later, lambda *a, _k=later: (_ for _ in ()).throw(_KernelCalled(_k)))
        with pytest.raises(_KernelCalled, match=f"^{name}$"):
            DGC(ratio=0.01).select(x, [x.numel()])
        monkeypatch.setattr(_fast, name, stand_ins[name])
    vals, idx = DGC(ratio=0.01).select(x, [x.numel()])
    monkeypatch.setattr(_fast, "enabled", lambda *tensors: False)
    monkeypatch.setattr(_fast, "enabled_for", lambda device, numel: False)
    monkeypatch.setattr(DGC, "positions", lambda self, numel, count, device: torch.arange(count))
    want_vals, want_idx = DGC(ratio=0.01).select(x, [x.numel()])
    assert idx.numel() == 1000 and torch.equal(idx.sort().values, want_idx.sort().values)
    assert torch.equal(vals[idx.argsort()], want_vals[want_idx.argsort()])


def test_mstopk_reaches_its_magnitudes_search_certain_entries_and_band_kernels_in_order(monkeypatch):
    """On CPU with the fast path forced on: MSTopK's select reaches |g| with its mean and maximum, the search, the
    compaction of its certain entries, the band fill's keys and its candidates, and the payload, in that order
    (each kernel reached is then replaced by what it computes, in PyTorch); with all the stand-ins it sends
    exactly k distinct positions, the entries at or above the threshold among them."""
    from studykit.compressors import _fast
    from studykit.compressors.fastpath import reference
    from studykit.compressors.sparsification import MSTopK

    def search(mag, k, rounds, lo, hi, count_dtype, **options):
        return reference(MSTopK, "_search")(MSTopK(samplings=rounds), mag, k, lo, hi, count_dtype)

    def compact(x, t_bits, cap):
        pos = torch.nonzero_static(x.abs() >= t_bits.view(torch.float32), size=cap, fill_value=x.numel()).view(-1)
        return pos, None, None

    stand_ins = {"abs_mean_max": lambda x: (x.abs(), x.abs().mean(), x.abs().max()),
                 "mstopk_search": search,
                 "compact_ge": compact,
                 "band_candidates": lambda mag, t1, t2, q, seed, cap, unfused: unfused(),
                 "uniform_keys": lambda numel, seed, device: torch.rand(numel,
                                                                      generator=torch.Generator().manual_seed(1)),
                 "mstopk_assemble": lambda flat, above, c1, band: reference(MSTopK, "_assemble")(None, flat, above, c1,
                                                                                               band)}
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(_fast, "enabled", lambda *tensors: True)
    monkeypatch.setattr(_fast, "enabled_for", lambda device, numel: True)
    monkeypatch.setattr(_fast, "seed_of", lambda comp, device: None)
    for i, name in enumerate(stand_ins):
        for later in list(stand_ins)[i:]:
            monkeypatch.setattr(_fast, later, lambda *a, _k=later, **kw: (_ for _ in ()).throw(_KernelCalled(_k)))
        with pytest.raises(_KernelCalled, match=f"^{name}$"):
            MSTopK(ratio=0.01).select(x, [x.numel()])
        monkeypatch.setattr(_fast, name, stand_ins[name])
    vals, idx = MSTopK(ratio=0.01).select(x, [x.numel()])
    t1 = search(x.abs(), 1000, 30, x.abs().mean(), x.abs().max(), torch.int32)[0]
    assert idx.unique().numel() == 1000 and torch.equal(vals, x[idx])
    assert set(torch.nonzero(x.abs() >= t1).view(-1).tolist()) <= set(idx.tolist())


DECODE_KERNEL = {"fp16": "cast", "bf16": "cast", "signsgd": "signs_decode", "ef_signsgd": "signs_decode",
                 "qsgd": "qsgd_decode", "terngrad": "terngrad_decode", "natural": "natural_decode",
                 "topk_chunked": "row_scatter"}


@pytest.mark.parametrize("name", sorted(DECODE_KERNEL))
def test_decoding_overrides_reach_their_kernels_when_the_fast_path_is_on(monkeypatch, name):
    from studykit.compressors import _fast

    comp = C.get(name, error_feedback=False)
    payload, ctx = comp.compress(torch.randn(4096, generator=torch.Generator().manual_seed(0)), 2)  # reference
    kernel = DECODE_KERNEL[name]
    monkeypatch.setattr(_fast, "enabled", lambda *tensors: True)
    monkeypatch.setattr(_fast, kernel, lambda *a, **k: (_ for _ in ()).throw(_KernelCalled(kernel)))
    calls = [lambda: comp.decompress(payload, ctx)]
    gathered = [payload] if name == "topk_chunked" else [payload, payload]  # its kernel decodes one payload
    calls += [lambda: comp.decompress_mean(payload, ctx, 2)] if comp.allreduce_compatible else \
        [lambda: comp.combine(gathered, ctx)]
    if comp.one_round_allreduce and ctx == 2:  # the DDP hook's decode, straight into the bucket
        calls.append(lambda: comp.decompress_mean_into(payload, ctx, 2, torch.empty(4096)))
    for call in calls:
        with pytest.raises(_KernelCalled, match=f"^{kernel}$"):
            call()


def test_every_accelerated_codec_has_its_dispatch_tested_above():
    from studykit.compressors import fastpath

    assert set(fastpath.accelerated()) == set(FIRST_KERNEL) | {"dgc"}


# ------------------------------------------------------------------ a new compressor is one class (plus one test)
def test_a_new_compressor_is_one_registered_class():
    """The package docstring's recipe: register a class and every entry point knows it (no list to update)."""
    from studykit.compressors import cli, registry

    @C.register
    class Halve(C.Compressor):
        """Test-only: sends half the gradient as fp32 (all-reduce compatible, linear)."""

        name = "halve_for_test"
        family, key_param, bench_group = "precision", None, "dense"

        def compress(self, flat, world_size):
            return [flat / 2], None

        def decompress(self, payload, ctx):
            return payload[0] * 2

    try:
        assert "halve_for_test" in C.available() and C.metadata("halve_for_test").family == "precision"
        assert C.parse_spec("halve_for_test:error_feedback=yes") == ("halve_for_test", {"error_feedback": "yes"})
        grads = worker_grads(3)
        out = C.simulate("halve_for_test", grads, error_feedback=True)[0]
        assert all(torch.allclose(o, sum(g[i] for g in grads) / 3) for i, o in enumerate(out))
        assert C.get("halve_for_test").compression_ratio([(10,)]) == 1.0
        row = next(r for r in cli.table("mlp_small", 2) if r["compressor"] == "halve_for_test")
        assert row["allreduce_compatible"] and row["ratio"] == 1.0
    finally:
        registry._REGISTRY.pop("halve_for_test", None)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FIRST_KERNEL))
def test_on_a_gpu_the_overrides_run_the_real_kernels(monkeypatch, name):
    """The GPU half of the dispatch tests above: real kernels (spied on, not faked) run for CUDA tensors.
    Each kernel's numbers against its reference: tests/test_bench.py."""
    from studykit.compressors import _fast

    if not (torch.cuda.is_available() and _fast.HAVE_TRITON):
        pytest.skip("needs a CUDA GPU with triton")
    called = []
    for kernel in set(FIRST_KERNEL.values()) | set(DECODE_KERNEL.values()):
        real = getattr(_fast, kernel)
        monkeypatch.setattr(_fast, kernel, lambda *a, _k=kernel, _f=real, **kw: called.append(_k) or _f(*a, **kw))
    x = torch.randn(70_001, generator=torch.Generator().manual_seed(0)).cuda()
    avg, local = C.get(name, error_feedback=False).reduce(x, LocalComm(), return_local=True)
    assert torch.isfinite(avg).all() and torch.isfinite(local).all()
    assert FIRST_KERNEL[name] in called and (name not in DECODE_KERNEL or DECODE_KERNEL[name] in called), called
