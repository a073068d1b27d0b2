#!/usr/bin/env bash
# Which effect of the rounding noise gives `dynamic` its lower validation loss per iteration in data/training/tta_gpu2/?
# (that README's caveat "Loss per iteration is not the same for every method"; tests/test_train_quantize.py)
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> bash scripts/gpu_tta_lr.sh      # about 6-8 minutes on 2 GPUs
#   # CPU smoke of the script itself (gloo, the tiny model, a few steps):
#   OUT=/tmp/lr DEVICE=cpu MODEL=gpt_tiny STEPS=4 EVAL_EVERY=2 SEEDS=0 LRS=0.002 bash scripts/gpu_tta_lr.sh
#
# The tta_gpu2 workload (gpt_mini on the Python standard library's bytes, 2 ranks, AdamW with 20 warm-up
# iterations and a cosine, 300 iterations, seeds 0-2) at several peak learning rates, with `none`, static 4-bit
# and 8-bit quantization and `dynamic`. Loss per iteration does not depend on the link, so nothing is throttled
# (NCCL as it comes); the times in these records are not comparable with tta_gpu2's.
# Two effects of the (unbiased) rounding noise are in play (data/training/tta_gpu2/README.md): (1) under AdamW a
# coarse rung shrinks the per-coordinate step wherever |g| is below one quantization step M / L, an effectively
# lower learning rate (tests/test_train_quantize.py); (2) the noise itself may speed the escape from the early loss
# plateau. If `dynamic` still leads `none` at `none`'s best learning rate here, (2) is the larger one; if the lead
# goes, (1). OPTIMIZER=sgd (with LRS for SGD, e.g. "0.1 0.3 1") is the control without (1). On CPU (gpt_tiny) both
# showed. Writes $OUT/lr<LR>/METHOD.jsonl, run.log and RUN.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

LRS=${LRS:-"0.002 0.001 0.0005"}
METHODS=${METHODS:-"none quantize4 quantize8 dynamic"}
# shellcheck source=scripts/tta_workload.sh
. scripts/tta_workload.sh
DEVICE=${DEVICE:-auto}
OPTIMIZER=${OPTIMIZER:-adamw}                  # sgd (momentum 0.9, with its own LRS): the control, no per-coordinate normalisation
TOTAL_S=${TOTAL_S:-570}
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh
machine_summary gpu_tta_lr.sh \
  "LRS=$LRS METHODS=$METHODS SEEDS=$SEEDS MODEL=$MODEL STEPS=$STEPS EVAL_EVERY=$EVAL_EVERY BATCH=$BATCH" \
  "SEQ_LEN=$SEQ_LEN VAL_BYTES=$VAL_BYTES ACC_THRESHOLDS=$ACC_THRESHOLDS DEVICE=$DEVICE OPTIMIZER=$OPTIMIZER TOTAL_S=$TOTAL_S"

for lr in $LRS; do
  # shellcheck disable=SC2086
  phase "lr$lr" 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 -m studykit train \
    --dataset text --model "$MODEL" --optimizer "$OPTIMIZER" --lr "$lr" --lr-warmup-steps 20 --lr-schedule cosine \
    --steps "$STEPS" --eval-every "$EVAL_EVERY" --batch-size "$BATCH" --seq-len "$SEQ_LEN" --limit-test "$VAL_BYTES" \
    --acc-thresholds $ACC_THRESHOLDS --seeds $SEEDS --methods $METHODS --device "$DEVICE" --profile-steps 0 \
    --out "$OUT/lr$lr/" --resume
done
{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  for f in "$OUT"/lr*/*.jsonl; do
    [ -f "$f" ] && echo "$f: $(grep -c '"final": true' "$f") complete runs"
  done
} | tee -a "$LOG" >> "$RUN"
tail -n 20 "$LOG"
