#!/usr/bin/env bash
# Time to a target validation loss on a real workload, 2 GPUs, throttled network:
# Han et al. 2024's table (https://arxiv.org/abs/2407.01378: time to target against FP16, bytes, the
# iteration-time split) for syncSGD, fp16, static 8-bit, dynamic (Tirupati et al.) and the best compressors
# of the bandwidth study (PowerSGD rank 4, TopK 1 %), at emulated bandwidths (Agarwal et al. 2022,
# https://arxiv.org/abs/2103.00543, Sec. 3.3: compression pays only at low bandwidth).
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> RATES=10 bash scripts/gpu_tta.sh     # call 1
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> RATES=2.5 bash scripts/gpu_tta.sh    # call 2
#   # or both in one call on a 4-GPU machine, side by side (separate GPUs, namespaces and links):
#   OUT=$O/a RATES=10 bash scripts/gpu_tta.sh & OUT=$O/b RATES=2.5 GPUS="2 3" bash scripts/gpu_tta.sh; wait
#
# The plan (one call per bandwidth, about 9 minutes each; a call cut by its deadline is finished by
# running it again with the same OUT, or with RESUME_FROM=<folder of earlier records>: complete runs
# are skipped, `train --resume`):
#   * workload: `--dataset text`, the Python standard library's *.py as bytes (studykit.train.text: no
#     download, split by file), `--model gpt_mini`: GPT-2 small's architecture (studykit.train.nets.GPT)
#     at 6 layers x 256 wide, 4.87M parameters, a 19.5 MB fp32 gradient (GPT-2 small itself, 124M and
#     500 MB, would leave a few dozen iterations per run at 2.5 Gbit/s);
#   * 2 ranks, one GPU each, NCCL over sockets on a tc-shaped veth (`python -m studykit throttle --gpus`,
#     which first probes the link with a 64 MiB all-reduce and checks NCCL used NET/Socket only);
#   * per rank 16 windows x 256 tokens, AdamW lr 2e-3 (20 warm-up iterations, cosine to 1/10), STEPS=300
#     iterations, evaluation every 25 on 256 KiB of held-out files (1024 windows);
#   * METHODS x SEEDS (0 1 2), seed-major, so a cut call still has every method at seed 0;
#   * budget: syncSGD moves 19.5 MB per iteration and worker: ~65 ms at 2.5 Gbit/s, ~16 ms at 10, on top
#     of ~20 ms of compute; 300 iterations x 6 methods x 3 seeds come to ~4-5 min at 2.5 Gbit/s, plus
#     start-up, evaluation and profiling (2 profiled iterations per round, untimed).
# Timing keeps DDP's overlap: whole iterations are timed with CUDA events; the compute / encode /
# communicate / decode split comes from separate profiled iterations (studykit.train.loop).
#
# Needs root, python3 with torch (CUDA) and numpy, and iproute2 (or its .deb files in IPROUTE2, from
# scripts/fetch_iproute2.sh). No git needed: pass STUDYKIT_GIT_COMMIT. Writes $OUT/tta_<rate>g/METHOD.jsonl
# (one record per round, streamed, with provenance and the measured link rate), probe.jsonl there,
# run.log and RUN.txt. Commit the folders as data/training/tta_gpu2/ (notebook runs_dir="tta_gpu2/tta_10g").
set -uo pipefail
cd "$(dirname "$0")/.."

RATES=${RATES:-"10 2.5"}                       # Gbit/s; one per call is the plan (see above)
METHODS=${METHODS:-"none fp16 quantize8 dynamic powersgd:rank=4 topk"}
# shellcheck source=scripts/tta_workload.sh
. scripts/tta_workload.sh
LR=${LR:-0.002}
TOTAL_S=${TOTAL_S:-530}                        # whole-run deadline (seconds)
GPUS=${GPUS:-}                                 # the two GPU ids (default 0 1); "2 3" runs a second rate beside
                                               # a first one on a 4-GPU machine (each in its own OUT)
RESUME_FROM=${RESUME_FROM:-}
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh

if [ -n "$RESUME_FROM" ] && [ -d "$RESUME_FROM" ]; then
  for d in "$RESUME_FROM"/tta_*g; do
    [ -d "$d" ] || continue
    mkdir -p "$OUT/$(basename "$d")"
    for f in "$d"/*.jsonl; do
      [ -f "$OUT/$(basename "$d")/$(basename "$f")" ] || cp "$f" "$OUT/$(basename "$d")/"
    done
  done
fi
machine_summary gpu_tta.sh \
  "RATES=$RATES METHODS=$METHODS SEEDS=$SEEDS MODEL=$MODEL STEPS=$STEPS EVAL_EVERY=$EVAL_EVERY BATCH=$BATCH" \
  "SEQ_LEN=$SEQ_LEN LR=$LR VAL_BYTES=$VAL_BYTES ACC_THRESHOLDS=$ACC_THRESHOLDS TOTAL_S=$TOTAL_S RESUME_FROM=$RESUME_FROM" \
  "GPUS=${GPUS:-0 1}"

for rate in $RATES; do
  limit=$(left)
  if [ "$limit" -lt 60 ]; then
    echo "== tta@${rate}G: skipped, deadline reached (rerun with the same OUT to finish)" | tee -a "$LOG" >> "$RUN"
    continue
  fi
  t=$(date +%s)
  echo "== tta@${rate}G (limit ${limit}s)" >> "$LOG"
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=20 "$limit" \
    $PY -m studykit throttle --gpus $GPUS --workers 2 "${IPR[@]}" --rate-gbps "$rate" \
      --timeout-s $(( limit > 40 ? limit - 20 : 20 )) --out "$OUT/tta_${rate}g" -- \
      train --dataset text --model "$MODEL" --optimizer adamw --lr "$LR" --lr-warmup-steps 20 --lr-schedule cosine \
      --steps "$STEPS" --eval-every "$EVAL_EVERY" --batch-size "$BATCH" --seq-len "$SEQ_LEN" --limit-test "$VAL_BYTES" \
      --acc-thresholds $ACC_THRESHOLDS --seeds $SEEDS --methods $METHODS --resume \
    2>&1 | grep --line-buffered -v "NCCL INFO" | sed -u "s/^/[tta@${rate}G] /" >> "$LOG"
  rc=${PIPESTATUS[0]}
  msg="== tta@${rate}G: rc=$rc in $(( $(date +%s) - t ))s"
  [ "$rc" -eq 124 ] && msg="$msg (deadline: rerun with the same OUT to finish)"
  echo "$msg" | tee -a "$LOG" >> "$RUN"
done
{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  for d in "$OUT"/tta_*g; do
    [ -d "$d" ] || continue
    for f in "$d"/*.jsonl; do
      [ -f "$f" ] && echo "$(basename "$d")/$(basename "$f"): $(wc -l < "$f") records, $(grep -c '"final": true' "$f") complete runs"
    done
  done
} | tee -a "$LOG" >> "$RUN"
tail -n 30 "$LOG"
