#!/usr/bin/env bash
# Scaling runs on one machine with 4 (or 8) GPUs: the same commands as scripts/gpu_measure.sh at
# p = 2, 4 (and 8 where present), so the performance model can be calibrated on p <= 2 and scored
# on p = 4, 8 of the SAME card (a holdout in world size; Agarwal et al. 2022 Figs. 6-11 study the p-dependence).
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
MODELS=${MODELS:-"resnet50 resnet101 bert_base vgg19"}
COMPRESSORS=${COMPRESSORS:-"none fp16 powersgd:rank=4 signsgd topk:ratio=0.01 randomk:ratio=0.01 thc"}
BUCKETS_MB=${BUCKETS_MB:-"5 50"}
TOTAL_S=${TOTAL_S:-480}
PHASE_MIN_S=10
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh
NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -lt 2 ]; then echo "gpu_scaling: needs >= 2 GPUs, found ${NGPU:-0}" | tee -a "$LOG"; exit 1; fi
machine_summary gpu_scaling.sh "GPUs $NGPU TOTAL_S $TOTAL_S MODELS=$MODELS COMPRESSORS=$COMPRESSORS BUCKETS_MB=$BUCKETS_MB"


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
