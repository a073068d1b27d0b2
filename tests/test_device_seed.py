"""The step on the device: the fused kernels seed their random numbers from a step the device holds and a call
advances on the device, so a CUDA graph of a stochastic codec's call (the DDP hook's graph runner, ``bench
--graph``) draws the next call's numbers when replayed, and the seeds are the ones the host formula gives."""
import pytest
import torch

from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.compressors import _fast
from studykit.ddp.hook import replay_fingerprint
from tests.test_bench import _x, dev  # noqa: F401 - the kernel tests' fixture (a GPU, or Triton's interpreter)

#: the codecs whose fused kernels draw random numbers (their reference draws from torch.Generator on the host)
STOCHASTIC_FAST = [("quantize", {"bits": 4}), ("qsgd", {}), ("terngrad", {}), ("natural", {}), ("thc", {}),
                   ("randomk", {"ratio": 0.01, "error_feedback": False}),
                   ("dgc", {"ratio": 0.01, "error_feedback": False}),
                   ("mstopk", {"ratio": 0.01, "error_feedback": False})]
#: DGC's random sample only sets a threshold: its exact top-k among the candidates is the same set for most samples;
#: MSTopK's keys only pick among the entries of its band, which 30 search steps leave at a few entries or none
SAME_SET_MOSTLY = ("dgc", "mstopk")


def _host_seed(seed: int, step: int, rank) -> int:
    """The seed :meth:`Compressor.generator` gives a torch.Generator, in the kernels' range [2^62, 2^63)."""
    salt = 0 if rank is None else (rank + 1) * 1_000_003
    return ((seed * 7_919 + step * 104_729 + salt) % 2**62) | 2**62


# ------------------------------------------------------------------------------------------ the step on the device
def test_the_step_on_the_device_follows_every_call_and_every_setting():
    comp = C.get("quantize", bits=4)
    dev_step = comp.device_step(torch.device("cpu"))
    assert dev_step.dtype == torch.int64 and dev_step.tolist() == [0]
    comm = LocalComm()
    for _ in range(3):
        comp.reduce(torch.randn(100), comm)
    assert comp.step == 3 and dev_step.tolist() == [3]
    comp.advance(replayed=True)  # a replayed graph advanced the device itself
    assert comp.step == 4 and dev_step.tolist() == [3]
    comp.step = 7
    assert dev_step.tolist() == [7] and comp.device_step(torch.device("cpu")) is dev_step  # the same tensor
    comp.advance()
    assert comp.step == 8 and dev_step.tolist() == [8]


def test_planning_a_call_leaves_the_step_on_the_device_alone():
    comp = C.get("quantize", bits=4)
    dev_step = comp.device_step(torch.device("cpu"))
    comp.plan([[1000]], world_size=4)
    assert comp.step == 0 and dev_step.tolist() == [0]


# ------------------------------------------------------------------------------------------ the kernels (GPU or interpreter)
if _fast.HAVE_TRITON:
    from studykit.compressors._fast.common import _philox_seed, tl, triton

    @triton.jit
    def seed_kernel(seed_ptr, seed_base, out_ptr):
        tl.store(out_ptr, _philox_seed(seed_ptr, seed_base))


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 3, 2**40 + 7, 10**20])
@pytest.mark.parametrize("rank", [None, 0, 5])
def test_the_kernel_seed_is_the_seed_the_host_formula_gives(dev, seed, rank):
    comp = C.get("quantize", seed=seed)
    out = torch.zeros(1, dtype=torch.int64, device=dev)
    for step in (0, 1, 1000, 2**30):
        comp.step = step
        seed_kernel[(1,)](*_fast.seed_of(comp, torch.device(dev), rank), out)
        assert out.item() == _host_seed(seed, step, rank), (seed, step, rank)


@pytest.mark.gpu
@pytest.mark.parametrize("name, kw", STOCHASTIC_FAST)
def test_a_fused_stochastic_call_draws_nothing_on_the_host_and_a_step_gives_the_same_numbers(dev, name, kw):
    """The fused path's noise comes from the step on the device: no host-seeded draw (the fingerprint the graph
    runner checks stays), each call's noise is new, and setting the step back gives that step's numbers again."""
    comp = C.get(name, allow_nonfinite=True, **kw)
    x = _x(4096 + 13, dev, seed=1)
    comm = LocalComm()
    first = comp.reduce(x, comm, key=0)
    before = replay_fingerprint(comp, 0)
    second = comp.reduce(x, comm, key=0)
    assert replay_fingerprint(comp, 0) == before and comp.random_draws == 0, f"{name} drew on the host"
    if name not in SAME_SET_MOSTLY:
        assert not torch.equal(first, second), f"{name}: the second call repeated the first call's noise"
    assert comp.device_step(torch.device(dev)).item() == comp.step == 2
    comp.step = 0
    assert torch.equal(comp.reduce(x, comm, key=0), first), f"{name}: step 0 gave other numbers"


@pytest.mark.gpu
def test_positions_drawn_on_the_device_are_uniform_and_a_step_repeats_them(dev):
    """RandomK's and DGC's positions from one kernel: in range, each of 1000 positions drawn about equally often
    (within 5 standard deviations of 200 in 200,000 draws), the same for the same step, new for the next."""
    comp = C.get("randomk", ratio=0.01)
    device = torch.device(dev)
    pos = comp.positions(1000, 200_000, device)
    assert pos.dtype == torch.int64 and int(pos.min()) >= 0 and int(pos.max()) < 1000
    counts = torch.bincount(pos.cpu(), minlength=1000).float()
    assert (counts - 200).abs().max() < 5 * 200**0.5
    assert torch.equal(comp.positions(1000, 200_000, device), pos)
    comp.advance()
    assert not torch.equal(comp.positions(1000, 200_000, device), pos)


@pytest.mark.gpu
def test_band_keys_drawn_on_the_device_are_uniform_and_a_step_repeats_them(dev):
    """MSTopK's band-fill keys from one kernel: in [0, 1), each tenth of the range holding about a tenth of
    200,003 keys (within 5 standard deviations), the same for the same step, new for the next."""
    comp = C.get("mstopk", ratio=0.01)
    device = torch.device(dev)
    keys = comp.keys(200_003, device)
    assert keys.dtype == torch.float32 and keys.shape == (200_003,)
    assert float(keys.min()) >= 0 and float(keys.max()) < 1 and comp.random_draws == 0
    counts = torch.histc(keys.cpu(), bins=10, min=0, max=1)
    sd = (200_003 * 0.1 * 0.9) ** 0.5
    assert (counts - 20_000.3).abs().max() < 5 * sd
    assert torch.equal(comp.keys(200_003, device), keys)
    comp.advance()
    assert not torch.equal(comp.keys(200_003, device), keys)
