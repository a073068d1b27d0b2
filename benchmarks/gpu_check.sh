#!/usr/bin/env bash
# The codec and hook speed checks on one lent GPU, in one call: the GPU tests, `python -m studykit bench` (fused kernels
# and plain-PyTorch reference, the committed results), before/after against the kit as committed
# before the change, and the bench's DDP path under torchrun with one rank (NCCL, no network).
#   carry: build/bench_base, made first with
#     mkdir -p build/bench_base && git archive HEAD studykit | tar -x -C build/bench_base
#   OUT: where results go (the device tool's $OUT)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "== $1 at $(( $(date +%s) - T0 )) s"; }
stamp start
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
STEPS=${STEPS:-"tests bench before after ddp1"}
for s in $STEPS; do
  case $s in
  tests)
    stamp tests
    timeout ${T_TESTS:-80} python3 -m pytest -q -p no:cacheprovider -p no:timeout \
      tests/test_bench.py -m gpu tests/test_sparsification.py::test_cuda_matches_cpu \
      tests/test_lowrank.py::test_cuda_full_rank_is_exact_and_low_rank_is_a_projection 2>&1 | tail -30 > "$OUT/tests.txt"
    tail -4 "$OUT/tests.txt"
    ;;
  bench)
    stamp bench
    timeout ${T_BENCH:-110} python3 -m studykit bench --reference --overwrite --out-dir "$OUT/h200" \
      > "$OUT/bench.log" 2>&1; tail -45 "$OUT/bench.log"
    ;;
  before)
    stamp before
    timeout ${T_BA:-40} env PYTHONPATH=build/bench_base python3 benchmarks/before_after.py --label before \
      --out "$OUT/before_after.jsonl" > /dev/null 2>>"$OUT/ba.err"; tail -2 "$OUT/ba.err"
    ;;
  after)
    stamp after
    timeout ${T_BA:-40} env PYTHONPATH=. python3 benchmarks/before_after.py --label after \
      --out "$OUT/before_after.jsonl" > /dev/null 2>>"$OUT/ba.err"; tail -2 "$OUT/ba.err"
    ;;
  ddp1)
    stamp ddp1
    timeout ${T_DDP:-50} torchrun --standalone --nproc-per-node 1 -m studykit bench --ddp --no-codecs \
      --ddp-models resnet50 --ddp-budget-s 1 --overwrite --out-dir "$OUT/ddp1" > "$OUT/ddp1.log" 2>&1
    tail -14 "$OUT/ddp1.log"
    ;;
  esac
done
rm -f "$OUT/h200/summary.csv" "$OUT/ddp1/summary.csv" "$OUT/ddp1/codecs.jsonl"
stamp end
