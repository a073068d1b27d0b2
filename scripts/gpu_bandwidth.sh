#!/usr/bin/env bash
# The paper's bandwidth experiment on GPUs: real DDP iterations at 1-25 Gbit/s (Agarwal et al. 2022,
# https://arxiv.org/abs/2103.00543, Sec. 3.3 and 4.2, Figs. 3 and 19), in ONE invocation, into $OUT.
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> bash scripts/gpu_bandwidth.sh
#
# Every rank runs in its own network namespace on its own GPU; NCCL talks over sockets on a veth
# (2 ranks) or bridge (3-4 ranks) shaped by tc tbf to each rate (`python -m studykit throttle --gpus`,
# docs/throttle.md). Per rate, a 64 MiB NCCL all-reduce first measures the rate the link really gives
# and checks that NCCL connected via NET/Socket (nothing bypasses the shaped link); then `ddp` times
# syncSGD (DDP's default 25 MB bucket and BUCKET2_MB), PyTorch's fp16 and PowerSGD hooks, and every
# compressor in COMPRESSORS both as a DDP comm hook (overlapped with the backward pass) and after the
# backward pass (post); `none`, the identity, measures the hook and post paths' own cost (verify fits
# it as `path_overhead`). Records stream to $OUT as measured; RESUME_FROM (a folder of earlier records,
# e.g. the committed data/measurements/bandwidth/<run>) is copied in first, so a run cut by its
# deadline resumes where it stopped. Before the throttled phases, LOCAL=1 also measures on one GPU
# (unthrottled): T_comp (tcomp) and encode/decode (profile) of the same models and compressors; SWEEP=1
# adds a collective sweep at SWEEP_RATES after them. MODES may add hook_blocking (the hook that runs
# its protocol inside DDP's callback, for an A/B against the overlapped hook). NPROC=3 or 4 puts the
# ranks on a bridge (one shaped veth per rank). BUCKET_TIMES=1 (default) adds, per syncSGD configuration,
# when each DDP bucket is ready (records of kind buckets); HOOK_TIMES=1 adds, per hook configuration (hook and
# hook_blocking), the kit's hook stamped bucket by bucket: ready, encode end, collectives, decode end, end of
# the backward pass (kind hook_times; `ddp --hook-times`). Off by default: it costs about as much again as
# timing the hooks, and with RESUME_FROM it also stamps every hook configuration already in the folder.
# ROUNDS=2 (or more) measures every rate again after the first round, round k into $OUT/round<k>/ (no bucket
# or hook stamps there): verify, which reads a folder's subfolders too, pools a configuration's rounds (the
# median of their medians), and studykit.measure.report.rerun_spread compares them (how far a run moves).
# HOOK_PROFILE=1 (default when MODES has hook) first times, on GPU 0 and unthrottled, each DDP bucket's host and
# device time of every compressor's hook protocol (`profile --ddp-buckets --bucket-times`, into
# profile_buckets.jsonl): the host chain of the hook model needs host times of the machine it predicts, since
# they differ from one lent machine to the next (the runs: data/campaigns.toml; verify --encode-decode-from buckets).
# BROADCAST_BUFFERS="1 0" times every configuration a second time per rate with `ddp --no-broadcast-buffers`
# (DDP without its buffer broadcast at every forward: the A/B of what DDP's forward costs a hook beside post;
# post does not change and is not timed again). BUCKET_VIEW=1 builds every DDP configuration with
# gradient_as_bucket_view=True (`ddp --gradient-as-bucket-view`: the gradients are views into DDP's buckets).
# PAIR_HOOK_POST=1 times each compressor's hooks right after its post (`ddp --pair-hook-post`; the default times
# every post first): on a shared machine a slow spell then falls on both sides of a hook / post ratio.
# PAIR_HOOK_POST=iterations builds them side by side and times a round of each per iteration (`ddp
# --pair-hook-post iterations`): a spell longer than one configuration's run then falls on both sides too.
# TRACE=1 also writes, in the first round, a torch.profiler trace of every DDP configuration (rank 0, 3 more
# iterations after the timed ones; `ddp --trace-dir`) into $OUT/traces/, named after the configuration and
# rate: where the iteration's time goes, stream by stream (`python benchmarks/hook_trace.py TRACES`).
#
# Needs root, python3 with torch (CUDA), torchvision, transformers, and iproute2: on machines without
# it, run scripts/fetch_iproute2.sh first (on a machine with apt) and pass the folder as IPROUTE2.
# Writes at most 8 files, directly in $OUT: ddp.jsonl (records of kinds ddp, buckets and hook_times)
# probe.jsonl tcomp.jsonl profile.jsonl profile_buckets.jsonl sweep.jsonl run.log RUN.txt; with ROUNDS > 1 also ddp.jsonl and
# probe.jsonl in $OUT/round<k>/; with TRACE=1 the traces (*.json.gz) in $OUT/traces/.
set -uo pipefail
cd "$(dirname "$0")/.."

NPROC=${NPROC:-2}
MODELS=${MODELS:-"resnet50 resnet101"}
RATES=${RATES-"25 10 5 20 15 2.5 1"}        # Gbit/s; cheap rates first, so a cut run spans the range; RATES="": no DDP phase
COMPRESSORS=${COMPRESSORS:-"none fp16 powersgd:rank=4 powersgd:rank=32 topk:ratio=0.01 topk_chunked:ratio=0.01 randomk:ratio=0.01 ef_signsgd qsgd quantize:bits=8 thc dgc:ratio=0.01"}
BUILTIN=${BUILTIN:-"torch_fp16 torch_powersgd"}
MODES=${MODES:-"syncsgd builtin hook post"}
BUCKET2_MB=${BUCKET2_MB-100}  # a second syncSGD bucket size (MB); BUCKET2_MB="": DDP's default bucket only
ITERS=${ITERS:-10}                 # timed iterations at most (fewer when slow: DDP_BUDGET_S)
WARMUP=${WARMUP:-2}                # DDP rebuilds its buckets after the first iteration
DDP_BUDGET_S=${DDP_BUDGET_S:-3}    # seconds per configuration (never below 3 timed iterations)
TOTAL_S=${TOTAL_S:-560}            # whole-run deadline (seconds)
LOCAL=${LOCAL:-0}
SWEEP=${SWEEP:-0}
SWEEP_RATES=${SWEEP_RATES:-"1 10 25"}
RESUME_FROM=${RESUME_FROM:-}
BUCKET_TIMES=${BUCKET_TIMES:-1}    # 1: syncSGD configurations also record when each DDP bucket is ready (kind buckets)
HOOK_COALESCE=${HOOK_COALESCE:-off}  # hook configurations once per value: off (a protocol per bucket) or MB (0: per iteration)
HOOK_RUNNER=${HOOK_RUNNER:-thread}  # hook configurations once per runner (and HOOK_COALESCE value): thread graph
HOOK_TIMES=${HOOK_TIMES:-0}        # 1: hook configurations also record per-bucket stamps of the kit's hook (kind hook_times)
BROADCAST_BUFFERS=${BROADCAST_BUFFERS:-1}  # per rate, once per value: 1 DDP's default, 0 --no-broadcast-buffers
BUCKET_VIEW=${BUCKET_VIEW:-0}      # 1: DDP(gradient_as_bucket_view=True) in every DDP configuration
ROUNDS=${ROUNDS:-1}                # rounds over the rates; round k > 1 into $OUT/round<k>/
PAIR_HOOK_POST=${PAIR_HOOK_POST:-0}  # 1: each compressor's hooks right after its post; iterations: also interleaved
case $PAIR_HOOK_POST in 0|1|iterations) ;; *) echo "PAIR_HOOK_POST must be 0, 1 or iterations, got '$PAIR_HOOK_POST'" >&2; exit 2;; esac
case " $MODES " in *" hook "*) HOOK_PROFILE=${HOOK_PROFILE:-1};; *) HOOK_PROFILE=${HOOK_PROFILE:-0};; esac
case $HOOK_PROFILE in 0|1) ;; *) echo "HOOK_PROFILE must be 0 or 1, got '$HOOK_PROFILE'" >&2; exit 2;; esac
case $BUCKET_VIEW in 0|1) ;; *) echo "BUCKET_VIEW must be 0 or 1, got '$BUCKET_VIEW'" >&2; exit 2;; esac
TRACE=${TRACE:-0}                  # 1: every DDP configuration of the first round also traced into $OUT/traces/
case $TRACE in 0|1) ;; *) echo "TRACE must be 0 or 1, got '$TRACE'" >&2; exit 2;; esac
case $ROUNDS in ''|*[!0-9]*|0) echo "ROUNDS must be a whole number >= 1, got '$ROUNDS'" >&2; exit 2;; esac
for bb in $BROADCAST_BUFFERS; do
  case $bb in 0|1) ;; *) echo "BROADCAST_BUFFERS must hold 1 and/or 0, got '$BROADCAST_BUFFERS'" >&2; exit 2;; esac
done
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh

if [ -n "$RESUME_FROM" ] && [ -d "$RESUME_FROM" ]; then
  # a campaign folder holds one card kind: resuming another card's records would skip what this card must measure
  have=$($PY -c 'import json,sys; print(next((json.loads(l).get("gpu") or "" for l in open(sys.argv[1]) if l.strip()), ""))' \
         "$RESUME_FROM/ddp.jsonl" 2>/dev/null)
  here=$($PY -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)
  if [ -n "$have" ] && [ "$have" != "$here" ]; then
    echo "RESUME_FROM=$RESUME_FROM holds $have records but this machine has '$here': not resuming (start a new folder)" >&2
    exit 2
  fi
  for f in ddp probe tcomp profile sweep; do
    [ -f "$RESUME_FROM/$f.jsonl" ] && [ ! -f "$OUT/$f.jsonl" ] && cp "$RESUME_FROM/$f.jsonl" "$OUT/$f.jsonl"
  done
fi
machine_summary gpu_bandwidth.sh \
  "NPROC=$NPROC MODELS=$MODELS RATES=$RATES TOTAL_S=$TOTAL_S ITERS=$ITERS WARMUP=$WARMUP DDP_BUDGET_S=$DDP_BUDGET_S" \
  "COMPRESSORS=$COMPRESSORS BUILTIN=$BUILTIN MODES=$MODES BUCKET2_MB=$BUCKET2_MB RESUME_FROM=$RESUME_FROM" \
  "BUCKET_TIMES=$BUCKET_TIMES HOOK_TIMES=$HOOK_TIMES HOOK_COALESCE=$HOOK_COALESCE HOOK_RUNNER=$HOOK_RUNNER BROADCAST_BUFFERS=$BROADCAST_BUFFERS BUCKET_VIEW=$BUCKET_VIEW ROUNDS=$ROUNDS" \
  "HOOK_PROFILE=$HOOK_PROFILE TRACE=$TRACE PAIR_HOOK_POST=$PAIR_HOOK_POST"


# shellcheck disable=SC2086
if [ "$LOCAL" = 1 ]; then
  ( export CUDA_VISIBLE_DEVICES=0
    phase tcomp 120 $PY -m studykit tcomp --models $MODELS --budget-s 2 --min-iter 5 --out "$OUT/tcomp.jsonl" --quiet
    phase profile 150 $PY -m studykit profile --models $MODELS --compressors $COMPRESSORS \
      --budget-s 0.5 --min-iter 20 --ddp-buckets --out "$OUT/profile.jsonl" --quiet )
fi

# shellcheck disable=SC2086
if [ "$HOOK_PROFILE" = 1 ]; then
  ( export CUDA_VISIBLE_DEVICES=0
    phase hook-profile 150 $PY -m studykit profile --models $MODELS --compressors $COMPRESSORS --budget-s 0.5 \
      --min-iter 20 --ddp-buckets --bucket-times 20 --no-split --out "$OUT/profile_buckets.jsonl" --quiet )
fi

# the throttled DDP iterations: per round, one throttle call per rate (and BROADCAST_BUFFERS value), each
# bounded by the time left
for round in $(seq 1 "$ROUNDS"); do
  dst=$OUT; stamps=1; tag=""
  if [ "$round" -gt 1 ]; then dst=$OUT/round$round; stamps=0; tag="-round$round"; mkdir -p "$dst"; fi
  for rate in $RATES; do
    for bb in $BROADCAST_BUFFERS; do
    name="ddp@${rate}G$tag"; [ "$bb" = 0 ] && name="$name-nobuf"
    # shellcheck disable=SC2086
    phase "$name" 100000 $PY -m studykit throttle --gpus --workers "$NPROC" "${IPR[@]}" --rate-gbps "$rate" \
      --timeout-s $(( $(left) > 40 ? $(left) - 20 : 20 )) --out "$dst/ddp.jsonl" -- \
      ddp --models $MODELS --modes $MODES --bucket-mb $BUCKET2_MB --builtin $BUILTIN --compressors $COMPRESSORS \
      --warmup "$WARMUP" --iters "$ITERS" --budget-s "$DDP_BUDGET_S" --min-iter 3 --timeout-s 300 --quiet \
      --hook-coalesce-mb $HOOK_COALESCE \
      --hook-runner $HOOK_RUNNER \
      $([ "$BUCKET_TIMES$stamps" = 11 ] && echo --bucket-times) $([ "$HOOK_TIMES$stamps" = 11 ] && echo --hook-times) \
      $([ "$bb" = 0 ] && echo --no-broadcast-buffers) $([ "$BUCKET_VIEW" = 1 ] && echo --gradient-as-bucket-view) \
      $(case $PAIR_HOOK_POST in 1) echo --pair-hook-post configs;; iterations) echo --pair-hook-post iterations;; esac) $([ "$TRACE$stamps" = 11 ] && echo --trace-dir "$OUT/traces")
    done
  done
done

if [ "$SWEEP" = 1 ]; then
  # shellcheck disable=SC2086
  phase sweep 100000 $PY -m studykit throttle --gpus --workers "$NPROC" "${IPR[@]}" --rate-gbps $SWEEP_RATES \
    --timeout-s 120 --out "$OUT/sweep.jsonl" -- sweep --ops all_reduce all_gather --min-bytes 4K --max-bytes 64M \
    --factor 4 --budget-s 1 --min-iter 3 --timeout-s 120 --quiet
fi
{
  echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s"
  for f in "$OUT"/*.jsonl "$OUT"/round*/*.jsonl; do [ -f "$f" ] && echo "${f#"$OUT"/}: $(wc -l < "$f") records"; done
} | tee -a "$LOG" >> "$RUN"
tail -n 25 "$LOG"
