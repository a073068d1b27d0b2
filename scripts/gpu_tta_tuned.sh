#!/usr/bin/env bash
# Time to accuracy against tuned baselines: every method at its own best learning rate, several seeds, runs long
# enough to plateau, DDP's real bucketing, priced at two emulated link rates (studykit.train.tuning).
#
#   export STUDYKIT_GIT_COMMIT=<sha> IPROUTE2=.iproute2     # on a lent 4-GPU machine
#   OUT=$O STAGE=sweep bash scripts/gpu_tta_tuned.sh         # call 1: every method at every LR, seed 0
#   OUT=$O STAGE=seeds SWEEP=<sweep folder> bash scripts/gpu_tta_tuned.sh   # call 2: the other seeds at the
#                                                            # best LR, then STAGE=rates' iteration times
#   # CPU smoke of the script itself (gloo, the tiny model, a few steps, one "pair" of CPU workers):
#   OUT=/tmp/t DEVICE=cpu MODEL=gpt_tiny STEPS=4 EVAL_EVERY=2 LRS="0.001 0.002" STAGE=sweep bash scripts/gpu_tta_tuned.sh
#
# Why three stages. The loss a method reaches after N iterations does not depend on the link (the same numbers
# are summed whatever carries them), so the learning-rate sweep and the seeds train over NVLink, two 2-GPU jobs
# side by side on GPUs 0-1 and 2-3. How long an iteration takes depends on the link and not on the learning rate
# or the seed, so STAGE=rates times each method (and each rung of `dynamic`) on a tc-shaped link per rate
# (`python -m studykit throttle --gpus`), 10 warm-up and 30 timed iterations. studykit.train.tuning then prices
# every round of every run at each rate (iterations x the level's median iteration time) and reads the time to
# several target losses from that.
#
# The workload (tta_workload.sh's, longer and bucketed): gpt_mini (GPT-2 small's architecture, 6 layers x 256,
# byte vocabulary, 4.87 M parameters, 19.5 MB of fp32 gradient) on the Python standard library's bytes; 5 % of the
# files held out for validation (the learning rate is chosen there) and another 5 % as the test set (reported);
# per rank 16 windows x 256 bytes, 2 ranks; AdamW (betas 0.9, 0.95) with 100 warm-up iterations and a cosine to
# 1/10 over STEPS=2000 iterations (about 1.7 passes over the training bytes); evaluation every 50; DDP buckets of
# 5 MB, so the gradient travels in several buckets as a larger model's does at DDP's 25 MB default.
# Writes $OUT/sweep/lr<LR>/METHOD.jsonl, $OUT/seeds/lr<LR>/METHOD.jsonl, $OUT/rates/<rate>g/METHOD.jsonl,
# run.log and RUN.txt. A cut call is finished by running it again with the same OUT (train --resume).
set -uo pipefail
cd "$(dirname "$0")/.."

STAGE=${STAGE:-sweep}                          # sweep | seeds (then rates) | rates
LRS=${LRS:-"0.0005 0.001 0.002"}
LRS_A=${LRS_A:-$LRS}                           # STAGE=sweep: lane A's rates (a grid extended past its edge
LRS_B=${LRS_B:-$LRS}                           # goes to the same OUT/sweep/lr*/ folders), lane B's
METHODS_A=${METHODS_A:-"none fp16 quantize8 dynamic"}              # on GPUs 0-1
METHODS_B=${METHODS_B:-"powersgd:rank=4 topk topk_chunked"}       # on GPUs 2-3
SEEDS_MORE=${SEEDS_MORE:-"1 2"}                # STAGE=seeds: beside the sweep's seed 0
RATES=${RATES-"10 2.5"}                        # Gbit/s, one per GPU pair
RATE_METHODS=${RATE_METHODS:-"none fp16 quantize:bits=4 quantize8 quantize:bits=16 powersgd:rank=4 topk topk_chunked"}
MODEL=${MODEL:-gpt_mini}
STEPS=${STEPS:-2000}
EVAL_EVERY=${EVAL_EVERY:-50}
WARMUP_LR=${WARMUP_LR:-100}
BATCH=${BATCH:-16}
SEQ_LEN=${SEQ_LEN:-256}
VAL_BYTES=${VAL_BYTES:-262144}
TEST_PERCENT=${TEST_PERCENT:-5}
BUCKET_MB=${BUCKET_MB:-5}
ACC_THRESHOLDS=${ACC_THRESHOLDS:-"0.35 0.45 0.55"}   # dynamic: next-byte validation accuracy steps
DEVICE=${DEVICE:-auto}
SWEEP=${SWEEP:-}
GPUS_A=${GPUS_A:-0,1}                          # the two lanes' GPU pairs; on a 2-GPU machine GPUS_B=0,1 runs both
GPUS_B=${GPUS_B:-2,3}                          # lanes on one pair (losses do not depend on it; the rates then
                                               # run one after the other, so their timings stay alone)
TOTAL_S=${TOTAL_S:-560}
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh
machine_summary gpu_tta_tuned.sh \
  "STAGE=$STAGE LRS_A=$LRS_A LRS_B=$LRS_B METHODS_A=$METHODS_A METHODS_B=$METHODS_B SEEDS_MORE=$SEEDS_MORE RATES=$RATES" \
  "RATE_METHODS=$RATE_METHODS MODEL=$MODEL STEPS=$STEPS EVAL_EVERY=$EVAL_EVERY WARMUP_LR=$WARMUP_LR BATCH=$BATCH" \
  "SEQ_LEN=$SEQ_LEN VAL_BYTES=$VAL_BYTES TEST_PERCENT=$TEST_PERCENT BUCKET_MB=$BUCKET_MB ACC_THRESHOLDS=$ACC_THRESHOLDS" \
  "DEVICE=$DEVICE SWEEP=$SWEEP GPUS_A=$GPUS_A GPUS_B=$GPUS_B TOTAL_S=$TOTAL_S"

workload=(--dataset text --model "$MODEL" --optimizer adamw --lr-warmup-steps "$WARMUP_LR" --lr-schedule cosine
          --batch-size "$BATCH" --seq-len "$SEQ_LEN" --limit-test "$VAL_BYTES" --test-percent "$TEST_PERCENT"
          --bucket-cap-mb "$BUCKET_MB" --acc-thresholds $ACC_THRESHOLDS --device "$DEVICE" --quiet)

# pair GPUS NAME OUTDIR LR SEEDS METHODS...: one 2-rank job on NVLink (CPU: 2 gloo workers)
pair() {
  local gpus=$1 name=$2 dir=$3 lr=$4 seeds=$5; shift 5
  local launch=("$PY" -m torch.distributed.run --standalone --nproc-per-node 2 -m studykit)
  [ "$DEVICE" = cpu ] && launch=("$PY" -m studykit)
  local extra=(); [ "$DEVICE" = cpu ] && extra=(--world-size 2)
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$gpus phase "$name" 540 "${launch[@]}" train "${workload[@]}" "${extra[@]}" --lr "$lr" \
    --steps "$STEPS" --eval-every "$EVAL_EVERY" --profile-steps 0 --seeds $seeds --methods "$@" \
    --out "$dir/" --resume
}

# lane GPUS STAGE_DIR SEEDS LRS METHODS...: the pair's jobs one after the other (LR per method: LR_OF, or every
# LR of LRS)
lane() {
  local gpus=$1 dir=$2 seeds=$3 lrs=$4; shift 4
  local lr m
  if [ -n "${LR_OF:-}" ]; then
    for m in "$@"; do
      lr=$(awk -v m="$m" '$2 == m {print $1}' <<< "$LR_OF")
      [ -n "$lr" ] || { echo "== $m: no learning rate chosen in $SWEEP, skipped" | tee -a "$LOG" "$RUN"; continue; }
      pair "$gpus" "$(basename "$dir")-$m-lr$lr" "$dir/lr$lr" "$lr" "$seeds" "$m"
    done
  else
    for lr in $lrs; do
      pair "$gpus" "$(basename "$dir")-lr$lr" "$dir/lr$lr" "$lr" "$seeds" "$@"
    done
  fi
}

# shellcheck disable=SC2086
case "$STAGE" in
  sweep)
    lane "$GPUS_A" "$OUT/sweep" 0 "$LRS_A" $METHODS_A &
    lane "$GPUS_B" "$OUT/sweep" 0 "$LRS_B" $METHODS_B &
    wait ;;
  seeds|rates)
    if [ "$STAGE" = seeds ]; then
      [ -d "$SWEEP" ] || { echo "STAGE=seeds needs SWEEP=<the sweep folder> (its lr*/ folders)" | tee -a "$RUN"; exit 2; }
      LR_OF=$("$PY" -m studykit.train.tuning best-lr "$SWEEP") || { echo "no learning rates chosen" | tee -a "$RUN"; exit 2; }
      echo "$LR_OF" | sed 's/^/chosen lr, method: /' | tee -a "$LOG" >> "$RUN"
      lane "$GPUS_A" "$OUT/seeds" "$SEEDS_MORE" "" $METHODS_A &
      lane "$GPUS_B" "$OUT/seeds" "$SEEDS_MORE" "" $METHODS_B &
      wait
    fi
    i=0
    for rate in $RATES; do
      gpus=$( ( [ $i -eq 0 ] && echo "$GPUS_A" || echo "$GPUS_B" ) | tr , ' ')
      limit=$(left)
      [ "$limit" -gt 60 ] || { echo "== rates@${rate}G: skipped, deadline reached" | tee -a "$LOG" "$RUN"; continue; }
      ( timeout --signal=TERM --kill-after=20 "$limit" \
          $PY -m studykit throttle --gpus $gpus --workers 2 "${IPR[@]}" --rate-gbps "$rate" \
          --timeout-s $(( limit > 40 ? limit - 20 : 20 )) --out "$OUT/rates/${rate}g" -- \
          train "${workload[@]}" --lr 0.001 --steps 40 --eval-every 10 --profile-steps 2 --seeds 0 \
          --methods $RATE_METHODS --resume 2>&1 | grep --line-buffered -v "NCCL INFO" \
          | sed -u "s/^/[rates@${rate}G] /" >> "$LOG"
        echo "== rates@${rate}G: rc=${PIPESTATUS[0]}" | tee -a "$LOG" >> "$RUN" ) &
      [ "$GPUS_A" = "$GPUS_B" ] && wait   # one pair: one rate at a time
      i=$((i + 1))
    done
    wait ;;
  *) echo "STAGE must be sweep, seeds or rates, got '$STAGE'" >&2; exit 2 ;;
esac
{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  for f in "$OUT"/*/*/*.jsonl; do
    [ -f "$f" ] && echo "${f#"$OUT"/}: $(grep -c '"final": true' "$f") complete runs"
  done
} | tee -a "$LOG" >> "$RUN"
tail -n 30 "$LOG"
