"""PowerSGD's encode/decode with fewer tensor operations (issue 19 item 2): same bits, fewer ops.

The outputs of ``PowerSGD.reduce`` (the estimate, and this worker's decoding where asked) over several
steps, seeds, world sizes (1, and 2 through :class:`~studykit.comm.SimGroup`), ranks, warm start on and
off, the low-overhead variants and error feedback are hashed and compared with the digests the kit gave
at commit ``531fb59`` (before the op cuts), float32 on CPU. BLAS libraries may round differently on
another CPU (another kernel for the same product): a canary product is hashed first, and where it
differs from the recording machine's the comparison is skipped (it says so), not failed.
"""
import hashlib
import importlib.util
import os
import threading
from pathlib import Path

import pytest
import torch

from studykit import compressors as C
from studykit import models
from studykit.comm import LocalComm, SimGroup

RESNET50 = tuple(models.param_shapes("resnet50"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: compressed at rank 2 and 4: several row counts (P is padded for Gram-Schmidt), a group whose
#: tensors have different shapes but one matrix shape ((8, 4, 3, 3) and (8, 36)), ranks clipped by
#: the matrix ((64, 3, 3, 3) at rank 4 is 64 x 27; (5, 5, 3, 3) is 5 x 45), groups of one and of
#: several matrices; dense: a bias and (3, 2)
SHAPES = ((24, 16), (7,), (8, 4, 3, 3), (8, 4, 3, 3), (8, 36), (40, 12), (3, 2), (40, 12), (24, 20),
          (16, 8, 1, 1), (5, 5, 3, 3), (64, 3, 3, 3), (16,), (40, 12))


def _bench():
    spec = importlib.util.spec_from_file_location("powersgd_ops_bench", os.path.join(ROOT, "benchmarks", "powersgd_ops.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _grads(shapes, seed: int, step: int, rank: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed * 1000 + step * 10 + rank)
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def run_protocol(shapes=SHAPES, *, world_size=1, steps=4, seed=0, keys=("k",), dtype=torch.float32,
                 return_local=False, **params) -> str:
    """Digest of every worker's outputs over ``steps`` calls per key (keys interleaved)."""
    comps = [C.get("powersgd", seed=seed, **params) for _ in range(world_size)]
    out: list = [[] for _ in range(world_size)]
    group = SimGroup(world_size) if world_size > 1 else None
    for step in range(steps):
        for key in keys:
            grads = [_grads(shapes, seed, step, r, dtype) for r in range(world_size)]

            def call(r, grads=grads, key=key):
                comm = group.comm(r) if group else LocalComm()
                res = comps[r].reduce(grads[r], comm, key=key, return_local=return_local)
                out[r].extend([*res[0], *res[1]] if return_local else res)

            if group is None:
                call(0)
            else:
                threads = [threading.Thread(target=call, args=(r,)) for r in range(world_size)]
                [t.start() for t in threads]
                [t.join() for t in threads]
    return _digest([t for per in out for t in per])


#: name -> (run_protocol arguments, digest at commit 531fb59 on the recording machine)
CASES = {
    "default_r2_ws1": ({"rank": 2}, "0fd13e579813c793"),
    "default_r4_ws1_seed3": ({"rank": 4, "seed": 3}, "c5d5681ed1cd356e"),
    "default_r2_ws2": ({"rank": 2, "world_size": 2}, "2db7c8e40aeeeb18"),
    "default_r4_ws2_local": ({"rank": 4, "world_size": 2, "return_local": True}, "df6fe11f90eb9e43"),
    "cold_r2_ws2": ({"rank": 2, "world_size": 2, "warm_start": False}, "1c546a7e5c6e4737"),
    "cold_r4_ws1_no_ef": ({"rank": 4, "warm_start": False, "error_feedback": False, "return_local": True}, "e9b72ca718313d05"),
    "once_reuse3_ws1": ({"rank": 2, "orthogonalize": "once", "reuse": 3, "steps": 5}, "e0e50e0d1809a8c6"),
    "once_reuse3_ws2": ({"rank": 4, "orthogonalize": "once", "reuse": 3, "steps": 5, "world_size": 2}, "6c18eb0d8588a8b3"),
    "reuse2_cold_ws2": ({"rank": 2, "reuse": 2, "warm_start": False, "steps": 5, "world_size": 2}, "001b303e1da40cfa"),
    "two_keys_ws2": ({"rank": 2, "world_size": 2, "keys": ("a", "b"), "steps": 3}, "18a1d5f47f18ba05"),
    "bf16_ws2": ({"rank": 2, "world_size": 2, "dtype": torch.bfloat16}, "7437140e2bcb628c"),
    "no_ef_ws1": ({"rank": 4, "error_feedback": False}, "87b33c3f3335ccab"),
    "resnet50_ws1": ({"shapes": RESNET50, "rank": 4, "steps": 2}, "19b7c38edfbe9314"),
    "resnet50_once_reuse4_ws1": ({"shapes": RESNET50, "rank": 4, "orthogonalize": "once", "reuse": 4, "steps": 5}, "6f957bf9dbf3e6e3"),
    "resnet50_ws2": ({"shapes": RESNET50, "rank": 4, "steps": 2, "world_size": 2}, "e717741a2d3193cd"),
}


#: the canary's digest on the recording machine (2-core AMD EPYC VM, torch 2.13 CPU, 2 threads)
CANARY = "4c0c452e16b003b8"


def _canary() -> str:
    g = torch.Generator().manual_seed(0)
    outs = []
    for b, n, m, r in ((1, 1000, 2048, 4), (3, 40, 12, 2), (2, 256, 576, 4), (4, 64, 27, 4)):
        a, q = torch.randn(b, n, m, generator=g), torch.randn(b, m, r, generator=g)
        outs += [torch.bmm(a, q), torch.bmm(a.transpose(1, 2), torch.bmm(a, q))]
    return _digest(outs)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.slow
def test_outputs_are_bit_identical_to_the_committed_code(name):
    if _canary() != CANARY:
        pytest.skip("this CPU's BLAS rounds the canary product differently from the recording machine: "
                    "the digests of commit 531fb59 do not apply here")
    kw, want = CASES[name]
    assert run_protocol(**kw) == want, f"{name}: PowerSGD's outputs changed bits against commit 531fb59"


if __name__ == "__main__":  # print the digests of this checkout (how CASES was filled)
    print("CANARY =", repr(_canary()))
    for name, (kw, _) in CASES.items():
        print(f"    {name!r}: {run_protocol(**kw)!r},")


# ------------------------------------------------------------------ fewer operations
def test_orthonormalize_issues_the_documented_number_of_operations():
    from studykit.compressors.lowrank import orthonormalize_
    count_ops = _bench().count_ops
    for r, passes, want in ((4, 2, 34), (4, 1, 28), (1, 2, 4), (3, 2, 24)):
        x = torch.randn(5, 12, r)
        total, by_op, _ = count_ops(lambda x=x, passes=passes: orthonormalize_(x, passes))
        assert total == 4 + (6 + 2 * passes) * (r - 1) == want, (r, passes, by_op)


def test_resnet50_call_issues_at_most_about_two_fifths_of_the_former_operations():
    """531fb59 dispatched 515 aten operations per default call on ResNet-50 (records in
    data/benchmarks/powersgd_ops_cpu/, mode 'before'); the op cuts bring it to about 200:
    per group at most 8 (stack, P, Q, decode, their views) plus one batched Gram-Schmidt."""
    count_ops = _bench().count_ops
    comp = C.get("powersgd", rank=4)
    grads = [torch.randn(s) for s in RESNET50]
    comp.reduce(grads, key="k")
    total, by_op, _ = count_ops(lambda: comp.reduce(grads, key="k"))
    groups = len(comp.layout(RESNET50).groups)
    assert total <= 8 * groups + 34 + 30, by_op
    assert by_op["bmm"] == 3 * groups + 6  # P, Q and the decode per group; Gram-Schmidt's 6 at r = 4
    assert "slice" not in by_op or by_op["slice"] <= 8  # Gram-Schmidt's columns only


def test_committed_after_records_count_what_the_code_issues():
    """The committed 'after' op counts are this code's (a change of the code must rerun the benchmark)."""
    from studykit.measure.records import load_records
    bench = _bench()
    recs = [r for r in load_records(os.path.join(ROOT, "data", "benchmarks", "powersgd_ops_cpu", "powersgd_ops.jsonl"),
                                    quiet=True) if r["mode"] == "after" and r["model"] == "resnet50"]
    assert {r["phase"] for r in recs} == set(bench.VARIANTS)
    if any(r["torch"] != torch.__version__ for r in recs):
        pytest.skip("the records were counted with another torch version")
    grads = [torch.randn(s) for s in RESNET50]
    for r in recs:
        _, call = bench.make_call(r["phase"], grads)
        for _ in range(bench.SETTLE_CALLS):
            call()
        total, _, _ = bench.count_ops(call, calls=r["calls_counted"])
        assert total == r["ops_per_call"], r["phase"]


def test_committed_table_is_generated_from_the_records(tmp_path):
    bench = _bench()
    folder = os.path.join(ROOT, "data", "benchmarks", "powersgd_ops_cpu")
    copy = tmp_path / "powersgd_ops.jsonl"
    copy.write_bytes(Path(folder, "powersgd_ops.jsonl").read_bytes())
    assert bench.report(copy, verbose=False) == Path(folder, "powersgd_ops.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ the workspace is safe to keep
def test_returned_tensors_are_not_overwritten_by_the_next_call():
    for params in ({"rank": 2}, {"rank": 2, "reuse": 2, "error_feedback": False}):
        comp = C.get("powersgd", **params)
        first = comp.reduce(_grads(SHAPES, 0, 0, 0), key="k", return_local=True)
        kept = [t.clone() for part in first for t in part]
        for step in range(1, 4):
            comp.reduce(_grads(SHAPES, 0, step, 0), key="k", return_local=True)
        assert all(torch.equal(a, b) for a, b in zip(kept, [t for part in first for t in part]))


def test_nonfinite_call_leaves_no_trace_in_the_padding():
    """The zero padding of the Gram-Schmidt batches is rewritten every call: after a NaN gradient
    (allowed), a cold-start call gives what it gives after a finite one."""
    outs = []
    for first in (float("nan"), 1.0):
        comp = C.get("powersgd", rank=2, warm_start=False, error_feedback=False, allow_nonfinite=True)
        comp.reduce([torch.full(s, first) for s in SHAPES], key="k")
        outs.append(comp.reduce(_grads(SHAPES, 1, 1, 0), key="k"))
    assert all(torch.equal(a, b) for a, b in zip(*outs))
    assert all(torch.isfinite(t).all() for t in outs[0])


def test_workspace_follows_shapes():
    """Other shapes under the same key: new buffers and a cold start (as the former state's shape check)."""
    comp = C.get("powersgd", rank=2, error_feedback=False)
    a, b = _grads(SHAPES, 0, 0, 0), _grads(SHAPES[:6], 0, 1, 0)
    comp.reduce(a, key="k")
    got = comp.reduce(b, key="k")
    fresh = C.get("powersgd", rank=2, error_feedback=False)
    fresh.step = 1  # the same shared random Q as the second call's
    want = fresh.reduce(b, key="k")
    assert all(torch.equal(x, y) for x, y in zip(got, want))
    assert comp.state["k"]["ws"].shapes == tuple(map(tuple, SHAPES[:6]))


def test_a_deep_copy_carries_its_own_workspace():
    """``copy.deepcopy`` (the training loop's shadow compressor) keeps the views inside the copy's own
    buffers: the copy and the original go on alike and independently."""
    import copy
    comp = C.get("powersgd", rank=2, reuse=2)
    comp.reduce(_grads(SHAPES, 0, 0, 0), key="k")
    twin = copy.deepcopy(comp)
    ws = twin.state["k"]["ws"]
    assert ws.ps[0].untyped_storage().data_ptr() == ws.ortho.untyped_storage().data_ptr()
    assert ws.ortho.untyped_storage().data_ptr() != comp.state["k"]["ws"].ortho.untyped_storage().data_ptr()
    for step in range(1, 4):
        grads = _grads(SHAPES, 0, step, 0)
        a, b = comp.reduce(grads, key="k"), twin.reduce(grads, key="k")
        assert all(torch.equal(x, y) for x, y in zip(a, b)), step
