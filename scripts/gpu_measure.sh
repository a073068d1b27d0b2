#!/usr/bin/env bash
# Every studykit measurement for one GPU machine, in ONE invocation, into $OUT.
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> bash scripts/gpu_measure.sh
#
# 1 GPU : profile  - encode/decode of every compressor + the paper's Table 2-3 settings on the
#                    gradient shapes of resnet50, resnet101, bert_base, vgg19 (and resnet50 decoding
#                    64 workers' payloads, the paper's Table 2 setting); device copy bandwidth
#         tcomp    - forward+backward and backward-only time, 4 models x batch 16/32/64;
#                    DDP syncSGD at world size 1 (DDP's overhead over the plain backward)
# 2+ GPUs (also): sweep - all_reduce, all_gather, PS emulations, 1K..1G, NCCL
#         ddp      - DDP iterations of the 4 models: syncSGD at DDP's default bucket and at
#                    1/5/50/100 MB, PyTorch's fp16/bf16/PowerSGD-rank-4 hooks, every compressor
#                    after the backward (post) and as a DDP comm hook (overlapped)
#
# Budget: about 8 minutes on 2 x H100 (TOTAL_S=480). With 2+ GPUs, profile (GPU 0) and tcomp
# (GPU 1) run side by side. Each configuration is capped by --budget-s (fewer timed iterations
# for slow codecs, never below --min-iter; n_iter/n_warmup in every record say what ran), each
# phase by a deadline; ATOMO (seconds per call) runs last in its phases. Records are flushed as
# measured and a rerun with the same OUT resumes where the last one stopped, so a cut phase
# loses nothing: run the script again to finish it.
#
# Writes (at most 6 files, all directly in $OUT): profile.jsonl tcomp.jsonl sweep.jsonl ddp.jsonl,
# run.log (every phase's output, prefixed) and RUN.txt (machine, versions, phase times, counts).
# Needs python3 with torch (CUDA), torchvision, transformers; tqdm is optional.
set -uo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-"resnet50 resnet101 bert_base vgg19"}
TOTAL_S=${TOTAL_S:-480}           # whole-run deadline (seconds)
PROFILE_BUDGET_S=${PROFILE_BUDGET_S:-0.6}
TCOMP_BUDGET_S=${TCOMP_BUDGET_S:-2}
SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-0.5}
DDP_BUDGET_S=${DDP_BUDGET_S:-0.8}
SWEEP_MAX=${SWEEP_MAX:-1G}
BUCKETS_MB=${BUCKETS_MB:-"1 5 50 100"}
TCOMP_BATCHES=${TCOMP_BATCHES:-"16 32 64"}
PROFILE64_MODEL=${PROFILE64_MODEL-resnet50}   # decode 64 workers' payloads (Table 2's 64 GPUs); empty: skip
PHASE_MIN_S=10
PHASE_RESUME="rerun the script to resume"
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh

NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -lt 1 ]; then
  echo "gpu_measure: no CUDA GPU visible to $PY; nothing measured" | tee -a "$LOG"
  exit 1
fi
NPROC=${NPROC:-$((NGPU < 2 ? NGPU : 2))}   # the paper's collectives/DDP on 2 GPUs by default

machine_summary gpu_measure.sh \
  "GPUs: $NGPU (using $NPROC for sweep/ddp)  MODELS=$MODELS  TOTAL_S=$TOTAL_S" \
  "budgets per configuration (s): profile $PROFILE_BUDGET_S tcomp $TCOMP_BUDGET_S sweep $SWEEP_BUDGET_S ddp $DDP_BUDGET_S"

ALL=$($PY -c 'from studykit import compressors as C; print(" ".join(C.available()))')
FAST=$(echo "$ALL" | tr ' ' '\n' | grep -vx atomo | tr '\n' ' ')
HAS_ATOMO=$(echo "$ALL" | tr ' ' '\n' | grep -cx atomo)


COMMON=(--quiet)
profile_all() {
  local o=(--out "$OUT/profile.jsonl" --budget-s "$PROFILE_BUDGET_S" --min-iter 2 "${COMMON[@]}")
  # shellcheck disable=SC2086
  phase profile 600 $PY -m studykit profile --models $MODELS --compressors $FAST --paper "${o[@]}"
  if [ -n "$PROFILE64_MODEL" ]; then
    phase profile64 600 $PY -m studykit profile --models "$PROFILE64_MODEL" --compressors $FAST --paper --no-split \
      --sim-world-size 64 "${o[@]}"
  fi
  if [ "$HAS_ATOMO" = 1 ]; then
    # shellcheck disable=SC2086
    phase profile-atomo 600 $PY -m studykit profile --models $MODELS --compressors atomo "${o[@]}"
  fi
}
tcomp_all() {
  # shellcheck disable=SC2086
  phase tcomp 600 $PY -m studykit tcomp --models $MODELS --batch-sizes $TCOMP_BATCHES \
    --budget-s "$TCOMP_BUDGET_S" --min-iter 5 --out "$OUT/tcomp.jsonl" "${COMMON[@]}"
  # DDP at world size 1 (a group of one): DDP's own overhead over the plain backward (gamma fit)
  # shellcheck disable=SC2086
  phase ddp1 600 $PY -m studykit ddp --models $MODELS --modes syncsgd --budget-s "$DDP_BUDGET_S" --min-iter 2 \
    --out "$OUT/ddp.jsonl" "${COMMON[@]}"
}

# ---- single-GPU phases (side by side on two GPUs)
SINGLE_CAP=$(( NGPU >= 2 ? 170 : 300 ))
if [ "$NGPU" -ge 2 ]; then
  ( export CUDA_VISIBLE_DEVICES=0; TOTAL_S=$(( $(date +%s) - T0 + SINGLE_CAP )); profile_all ) &
  P1=$!
  ( export CUDA_VISIBLE_DEVICES=1; TOTAL_S=$(( $(date +%s) - T0 + SINGLE_CAP )); tcomp_all ) &
  P2=$!
  wait $P1 $P2
else
  TOTAL_S_SAVE=$TOTAL_S; TOTAL_S=$(( $(date +%s) - T0 + SINGLE_CAP ))
  profile_all; tcomp_all
  TOTAL_S=$TOTAL_S_SAVE
fi

# ---- multi-GPU phases
if [ "$NPROC" -ge 2 ]; then
  TR=($PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m studykit)
  phase sweep 60 "${TR[@]}" sweep --min-bytes 1K --max-bytes "$SWEEP_MAX" --budget-s "$SWEEP_BUDGET_S" \
    --min-iter 5 --out "$OUT/sweep.jsonl" "${COMMON[@]}"
  DDP=(--models $MODELS --budget-s "$DDP_BUDGET_S" --min-iter 2 --timeout-s 120 --out "$OUT/ddp.jsonl" "${COMMON[@]}")
  # shellcheck disable=SC2086
  phase ddp 600 "${TR[@]}" ddp --bucket-mb $BUCKETS_MB --compressors $FAST "${DDP[@]}"
  if [ "$HAS_ATOMO" = 1 ]; then
    phase ddp-atomo 600 "${TR[@]}" ddp --modes post hook --compressors atomo "${DDP[@]}"
  fi
else
  echo "== sweep, ddp: skipped (one GPU)" | tee -a "$LOG" >> "$RUN"
fi

{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  $PY - "$OUT" <<'EOF'
import collections, json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    counts = collections.Counter()
    for line in f.read_text().splitlines():
        try:
            counts[json.loads(line).get("status")] += 1
        except json.JSONDecodeError:
            counts["unparsable"] += 1
    print(f"{f.name}: {dict(counts)}")
EOF
} 2>&1 | tee -a "$LOG" >> "$RUN"
cat "$RUN"
