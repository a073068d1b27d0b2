#!/usr/bin/env bash
# Scaling runs on one machine with 4 (or 8) GPUs: the same commands as scripts/gpu_measure.sh at
# p = 2, 4 (and 8 where present), so the performance model can be calibrated on p <= 2 and scored
# on p = 4, 8 of the SAME card (issue 9; Agarwal et al. 2022 Figs. 6-11 study the p-dependence).
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> bash scripts/gpu_scaling.sh
#
# Phases (each under a deadline; records are flushed as measured, a rerun resumes):
#   1 GPU  : tcomp (GPU 0) and profile of $COMPRESSORS (GPU 1) side by side
#   p=2,4,8: NCCL collective sweep 1K..1G; DDP iterations for syncSGD (DDP default bucket and
#            $BUCKETS_MB), PyTorch's fp16/bf16/PowerSGD hooks, and $COMPRESSORS as hook and post
# Writes tcomp.jsonl profile.jsonl sweep.jsonl ddp.jsonl run.log RUN.txt directly in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output folder}"
PY=${PYTHON:-python3}
MODELS=${MODELS:-"resnet50 resnet101 bert_base vgg19"}
COMPRESSORS=${COMPRESSORS:-"none fp16 powersgd:rank=4 signsgd topk:ratio=0.01 randomk:ratio=0.01 thc"}
BUCKETS_MB=${BUCKETS_MB:-"5 50"}
TOTAL_S=${TOTAL_S:-480}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
: "${STUDYKIT_GIT_COMMIT:=$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
export STUDYKIT_GIT_COMMIT
mkdir -p "$OUT"
LOG="$OUT/run.log"; RUN="$OUT/RUN.txt"; T0=$(date +%s)
left() { echo $((TOTAL_S - ($(date +%s) - T0))); }
NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -lt 2 ]; then echo "gpu_scaling: needs >= 2 GPUs, found ${NGPU:-0}" | tee -a "$LOG"; exit 1; fi
{
  echo "studykit gpu_scaling.sh started $(date -u +%FT%TZ) commit $STUDYKIT_GIT_COMMIT GPUs $NGPU TOTAL_S $TOTAL_S"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>/dev/null
  nvidia-smi topo -m 2>/dev/null
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
} > "$RUN" 2>&1
cat "$RUN" >> "$LOG"

phase() {  # phase NAME CAP_S CMD...: CMD under min(CAP_S, time left), output into run.log
  local name=$1 cap=$2; shift 2
  local limit; limit=$(left); [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 10 ]; then echo "== $name: skipped, deadline reached" | tee -a "$LOG" >> "$RUN"; return 0; fi
  local t=$(date +%s)
  timeout --signal=TERM --kill-after=15 "$limit" "$@" 2>&1 | sed -u "s/^/[$name] /" >> "$LOG"
  echo "== $name: rc=${PIPESTATUS[0]} in $(( $(date +%s) - t ))s" | tee -a "$LOG" >> "$RUN"
}

# shellcheck disable=SC2086
( export CUDA_VISIBLE_DEVICES=0; phase tcomp "${SINGLE_CAP_S:-100}" $PY -m studykit tcomp --models $MODELS --batch-sizes 64 \
    --budget-s 2 --min-iter 5 --out "$OUT/tcomp.jsonl" --quiet ) &
# shellcheck disable=SC2086
( export CUDA_VISIBLE_DEVICES=1; phase profile "${SINGLE_CAP_S:-100}" $PY -m studykit profile --models $MODELS \
    --compressors $COMPRESSORS --budget-s 0.6 --min-iter 2 --out "$OUT/profile.jsonl" --quiet ) &
wait

for p in 2 4 8; do
  [ "$p" -gt "$NGPU" ] && break
  TR=($PY -m torch.distributed.run --standalone --nproc-per-node "$p" -m studykit)
  phase "sweep$p" 40 "${TR[@]}" sweep --min-bytes 1K --max-bytes 1G --budget-s 0.4 --min-iter 5 \
    --out "$OUT/sweep.jsonl" --quiet
  # shellcheck disable=SC2086
  phase "ddp$p" "${DDP_CAP_S:-200}" "${TR[@]}" ddp --models $MODELS --bucket-mb $BUCKETS_MB --compressors $COMPRESSORS \
    --budget-s 0.6 --min-iter 2 --timeout-s 90 --out "$OUT/ddp.jsonl" --quiet
done
echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s" | tee -a "$LOG" >> "$RUN"
$PY - "$OUT" >> "$RUN" 2>&1 <<'PYEOF'
import collections, json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    c = collections.Counter((json.loads(l).get("world_size"), json.loads(l).get("status")) for l in f.read_text().splitlines() if l.strip())
    print(f.name, dict(c))
PYEOF
cat "$RUN"
