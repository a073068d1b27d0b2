#!/usr/bin/env bash
# Throttled-network CPU records for `python -m studykit verify` (issue #5).
# Run from the repository root, as root (network namespaces + tc):
#   bash data/measurements/throttle/run.sh            # every phase, in order
#   bash data/measurements/throttle/run.sh PHASE ...  # tcomp profile ddp1 sweep-lo sweep-hi ddp-lo ddp-hi sweep4 ddp4
#                                                     # ddp-rep ddp-rep2 ddp-rep3 ddp4-rep sweep-rep
#   bash data/measurements/throttle/run.sh large      # mlp_large (4.4 MB gradient): tcomp-large profile-large
#                                                     # ddp1-large ddp-large-lo ddp-large-hi ddp-large-rep
#                                                     # (its networks use the sweeps of sweep*.jsonl)
# Every phase is bounded (timeout 470 s), runs alone (sequentially) and is resumable: a rerun
# skips the configurations already in its output file. `uptime` load is logged before and after
# each phase in run.log (the machine is shared; see README.md).
set -u
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
OUT=data/measurements/throttle
LOG=$OUT/run.log
MODEL=mlp_small                       # the largest CPU model (92 KB of gradient); see README.md
BATCH="256 1024"
COMP="none fp16 powersgd signsgd topk randomk"
TIMING="--iters 50 --warmup 10 --budget-s 3 --min-iter 10"
SWEEP="sweep --ops all_reduce all_gather --min-bytes 1K --max-bytes 64M --factor 2 --backend gloo --iters 20 --warmup 3 --budget-s 2 --min-iter 3 --quiet"
DDP="ddp --backend gloo --models $MODEL --batch-sizes $BATCH --compressors $COMP $TIMING --quiet"
MODEL_L=mlp_large                     # 40-1024-1024-10 MLP, 4.4 MB of gradient (files *_large.jsonl)
BATCH_L="256 1024"
COMP_L="none fp16 powersgd signsgd topk"
DDP_L="ddp --backend gloo --models $MODEL_L --batch-sizes $BATCH_L --compressors $COMP_L $TIMING --quiet"
export OMP_NUM_THREADS=1              # as every worker of the throttled cluster
THR="$PY -m studykit throttle"
phase() {
  local name=$1; shift
  echo "== $name start $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
  echo "   $*" >> "$LOG"
  timeout 470 "$@" >> "$LOG" 2>&1
  echo "== $name rc=$? end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
}
run() {
  case "$1" in
    # T_comp and encode/decode alone (network null) and with every worker of a 2- and 4-worker cluster
    # timing at once (network set): the CPU contention the DDP workers see
    tcomp)   phase tcomp1 $PY -m studykit tcomp --models $MODEL --batch-sizes $BATCH --device cpu $TIMING --quiet \
               --out $OUT/tcomp.jsonl
             # `tcomp` refuses to run under the harness (one device), so w plain processes time at once, each
             # to its own file (a shared file would let a late starter skip what an early one measured), with
             # 1000 iterations so that the processes overlap in steady state despite their staggered start;
             # STUDYKIT_NETWORK marks their records (workers = w, no rate: nothing is shaped)
             for w in 2 4; do
               phase tcomp-x$w bash -c "for i in \$(seq $w); do STUDYKIT_NETWORK='{\"emulated\": false, \"rate_gbps\": null, \"workers\": $w, \"concurrent_processes\": $w, \"note\": \"no network: $w tcomp processes timing at once (the CPU contention of a $w-worker run)\"}' $PY -m studykit tcomp --models $MODEL --batch-sizes $BATCH --device cpu --iters 1000 --warmup 300 --quiet --out $OUT/tcomp_x${w}_\$i.jsonl & done; wait"
             done ;;
    profile) phase profile2 $PY -m studykit profile --models $MODEL --compressors $COMP --sim-world-size 2 \
               --device cpu $TIMING --quiet --out $OUT/profile.jsonl
             phase profile4 $PY -m studykit profile --models $MODEL --compressors $COMP --sim-world-size 4 \
               --device cpu --no-split $TIMING --quiet --out $OUT/profile.jsonl ;;
    # world size 1: the non-backward overhead O (forward, step, DDP bookkeeping)
    ddp1)    phase ddp1 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m studykit ddp --backend gloo \
               --models $MODEL --batch-sizes $BATCH --modes syncsgd --compressors $TIMING --quiet --out $OUT/ddp.jsonl ;;
    sweep-lo) phase sweep-lo $THR --workers 2 --rate-gbps 0.5 1 --timeout-s 230 --out $OUT/sweep.jsonl -- $SWEEP ;;
    sweep-hi) phase sweep-hi $THR --workers 2 --rate-gbps 2.5 5 --timeout-s 230 --out $OUT/sweep.jsonl -- $SWEEP ;;
    ddp-lo)  phase ddp-lo $THR --workers 2 --rate-gbps 0.5 1 --timeout-s 230 --out $OUT/ddp.jsonl -- \
               $DDP --modes syncsgd post hook --bucket-mb 0.001 0.01 ;;
    ddp-hi)  phase ddp-hi $THR --workers 2 --rate-gbps 2.5 5 --timeout-s 230 --out $OUT/ddp.jsonl -- \
               $DDP --modes syncsgd post hook --bucket-mb 0.001 0.01 ;;
    sweep4)  phase sweep4 $THR --workers 4 --rate-gbps 1 --timeout-s 460 --out $OUT/sweep.jsonl -- $SWEEP ;;
    ddp4)    phase ddp4 $THR --workers 4 --rate-gbps 1 --timeout-s 460 --out $OUT/ddp.jsonl -- \
               $DDP --modes syncsgd post --bucket-mb 0.001 ;;
    # more passes over every rate, alternating the order, each to its own file (repeats of the same
    # configurations: verify pools them -- the minimum of ms_min, the median otherwise)
    ddp-rep|ddp-rep2|ddp-rep3)
             N=${1#ddp-rep}; R=$([ "$N" = 2 ] && echo "0.5 1 2.5 5" || echo "5 2.5 1 0.5")
             phase $1 $THR --workers 2 --rate-gbps $R --timeout-s 115 --out $OUT/ddp_repeat$N.jsonl -- \
               $DDP --modes syncsgd post hook --bucket-mb 0.001 0.01 ;;
    ddp4-rep) phase ddp4-rep $THR --workers 4 --rate-gbps 1 --timeout-s 460 --out $OUT/ddp4_repeat.jsonl -- \
               $DDP --modes syncsgd post --bucket-mb 0.001 ;;
    sweep-rep) phase sweep-rep $THR --workers 2 --rate-gbps 5 2.5 1 0.5 --timeout-s 115 --out $OUT/sweep_repeat.jsonl \
               -- $SWEEP ;;
    # mlp_large: the same measurements at 2 workers and 0.5 / 1 / 2.5 Gbit/s; the sweeps of sweep.jsonl
    # (same workers, rates and MTU) serve for its networks
    large)   for p in tcomp-large profile-large ddp1-large ddp-large-lo ddp-large-hi ddp-large-rep; do run $p; done ;;
    tcomp-large)
             phase tcomp1-large $PY -m studykit tcomp --models $MODEL_L --batch-sizes $BATCH_L --device cpu $TIMING \
               --quiet --out $OUT/tcomp_large.jsonl
             phase tcomp-x2-large bash -c "for i in 1 2; do STUDYKIT_NETWORK='{\"emulated\": false, \"rate_gbps\": null, \"workers\": 2, \"concurrent_processes\": 2, \"note\": \"no network: 2 tcomp processes timing at once (the CPU contention of a 2-worker run)\"}' $PY -m studykit tcomp --models $MODEL_L --batch-sizes $BATCH_L --device cpu --iters 200 --warmup 60 --quiet --out $OUT/tcomp_x2_\${i}_large.jsonl & done; wait" ;;
    profile-large)
             phase profile2-large $PY -m studykit profile --models $MODEL_L --compressors $COMP_L --sim-world-size 2 \
               --device cpu $TIMING --quiet --out $OUT/profile_large.jsonl ;;
    ddp1-large)
             phase ddp1-large $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m studykit ddp --backend gloo \
               --models $MODEL_L --batch-sizes $BATCH_L --modes syncsgd --compressors $TIMING --quiet \
               --out $OUT/ddp_large.jsonl ;;
    ddp-large-lo) phase ddp-large-lo $THR --workers 2 --rate-gbps 0.5 1 --timeout-s 220 --out $OUT/ddp_large.jsonl -- \
               $DDP_L --modes syncsgd post --bucket-mb 0.001 0.01 ;;
    ddp-large-hi) phase ddp-large-hi $THR --workers 2 --rate-gbps 2.5 --timeout-s 220 --out $OUT/ddp_large.jsonl -- \
               $DDP_L --modes syncsgd post --bucket-mb 0.001 0.01 ;;
    # a second pass over the three rates in the reverse order (repeats: verify pools them)
    ddp-large-rep) phase ddp-large-rep $THR --workers 2 --rate-gbps 2.5 1 0.5 --timeout-s 140 \
               --out $OUT/ddp_repeat_large.jsonl -- $DDP_L --modes syncsgd post --bucket-mb 0.001 0.01 ;;
    *) echo "unknown phase $1" >&2; exit 2 ;;
  esac
}
if [ $# -eq 0 ]; then set -- tcomp profile ddp1 sweep-lo sweep-hi ddp-lo ddp-hi sweep4 ddp4 ddp-rep ddp-rep2 ddp-rep3 ddp4-rep sweep-rep; fi
for p in "$@"; do run "$p"; done
