#!/usr/bin/env bash
# Codec speed and its repeatability on one lent GPU (H100/H200), in ONE invocation, into $OUT:
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_codecs.sh
#
# 1. codecs - benchmarks/codec_repeat.py: every codec's encode+decode on the flat ResNet-50 gradient
#             (25.6 M fp32; PowerSGD and ATOMO on its real shapes), the fused GPU kernels on, each timed
#             by bench's repetition policy (>= MIN_REPS repetitions and >= MIN_TIME_S s of timed calls,
#             whichever is more, at most BUDGET_S s; 256 MiB written before every repetition to flush
#             the L2; CUDA events), beside the memory floor (one read + one write of the fp32 gradient at
#             the copy bandwidth measured in the same run) -- twice in one process (repeat 1, then
#             repeat 2), the building blocks (torch.topk alone, THC's rotation, ...) in the first run;
#             HOST_AHEAD=1 times each repetition's device work with the host ahead of the GPU (a GPU sleep
#             before it), not the host's launch gaps (codecs whose host time exceeds their device time);
#             GRAPH=1 captures each call once as a CUDA graph and times its replays, host side included, as
#             the DDP hook's graph runner pays them (a call it cannot replay: eagerly, timer cuda_events_eager);
# 2. report - the two runs side by side (both medians with IQR and n, their ratio, within 10 %?) and
#             the codecs' speed-target table with PASS/MISS (the targets are data in
#             studykit/measure/bench/targets.py, SPEED_TARGETS; the worst of the two runs is judged).
#
# Whole-run deadline TOTAL_S (default 500 s): the codecs phase gets what is left after REPORT_S. Records
# stream to $OUT/codecs.jsonl as measured, so a cut run keeps everything it measured and the report is
# still made from it; running the script again with the same OUT resumes where it stopped.
#
# Writes (directly in $OUT): codecs.jsonl (records), codecs.md (the two tables), run.log (all output),
# RUN.txt (machine, versions, commit, settings, phase times, the tables).
# Needs python3 with torch (CUDA) and triton; no .git needed: pass the kit's commit as STUDYKIT_GIT_COMMIT.
# Dry run without a GPU (what tests/test_bench.py runs):
#   OUT=/tmp/x DEVICE=cpu MODEL=mlp_small COMPRESSORS="fp16 topk" MIN_TIME_S=0 MIN_REPS=3 bash scripts/gpu_codecs.sh
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-resnet50}
COMPRESSORS=${COMPRESSORS:-}      # empty: every registered codec, quantize at every b, ATOMO last
PHASES=${PHASES:-encdec}
MIN_REPS=${MIN_REPS:-100}
MIN_TIME_S=${MIN_TIME_S:-1}
BUDGET_S=${BUDGET_S:-20}          # per codec configuration; ATOMO (its exact SVD) is the one it cuts
WARMUP=${WARMUP:-10}
COMPONENTS=${COMPONENTS:-1}       # 1: time the building blocks in the first run (the measured bounds)
HOST_AHEAD=${HOST_AHEAD:-0}       # 1: each repetition's device time with the host ahead of the GPU (--host-ahead)
GRAPH=${GRAPH:-0}                 # 1: each call captured as a CUDA graph, its replays timed (--graph)
TOTAL_S=${TOTAL_S:-500}           # whole-run deadline (seconds)
REPORT_S=${REPORT_S:-40}          # kept back for the report
PHASE_MIN_S=5
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh
machine_summary gpu_codecs.sh \
  "DEVICE=$DEVICE MODEL=$MODEL PHASES=$PHASES MIN_REPS=$MIN_REPS MIN_TIME_S=$MIN_TIME_S BUDGET_S=$BUDGET_S WARMUP=$WARMUP" \
  "COMPONENTS=$COMPONENTS HOST_AHEAD=$HOST_AHEAD GRAPH=$GRAPH TOTAL_S=$TOTAL_S COMPRESSORS=${COMPRESSORS:-<all, quantize at every b>}"

if [ "$DEVICE" != cpu ] && ! $PY -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_codecs: no CUDA GPU visible to $PY; nothing measured (DEVICE=cpu for a dry run)" | tee -a "$LOG" "$RUN"
  exit 1
fi


# shellcheck disable=SC2086
ARGS=(--device "$DEVICE" --model "$MODEL" --phases $PHASES --min-reps "$MIN_REPS" --min-time-s "$MIN_TIME_S"
      --budget-s "$BUDGET_S" --warmup "$WARMUP" --out "$OUT/codecs.jsonl")
[ "$COMPONENTS" = 1 ] && ARGS+=(--components)
[ "$HOST_AHEAD" = 1 ] && ARGS+=(--host-ahead)
[ "$GRAPH" = 1 ] && ARGS+=(--graph)
# shellcheck disable=SC2086
[ -n "$COMPRESSORS" ] && ARGS+=(--compressors $COMPRESSORS)
phase codecs $(( $(left) - REPORT_S )) $PY benchmarks/codec_repeat.py "${ARGS[@]}"

# the tables, from the records alone (also after a cut run): REPORT_S was kept back for this
if [ -f "$OUT/codecs.jsonl" ]; then
  echo "== report: $PY benchmarks/codec_repeat.py --report-only" >> "$LOG"
  timeout --kill-after=5 "$REPORT_S" $PY benchmarks/codec_repeat.py --report-only --out "$OUT/codecs.jsonl" \
    2>&1 | sed -u "s/^/[report] /" >> "$LOG"
  echo "== report: rc=${PIPESTATUS[0]}" | tee -a "$LOG" >> "$RUN"
else
  echo "== report: no records to report" | tee -a "$LOG" >> "$RUN"
fi
{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  [ -f "$OUT/codecs.jsonl" ] && echo "codecs.jsonl: $(wc -l < "$OUT/codecs.jsonl") records"
  [ -f "$OUT/codecs.md" ] && cat "$OUT/codecs.md"
} 2>&1 | tee -a "$LOG" >> "$RUN"
cat "$RUN"
