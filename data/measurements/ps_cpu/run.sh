#!/usr/bin/env bash
# Fig. 4 of Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543) measured on the project's 2-core CPU machine:
# DDP iterations (after the backward pass, one bucket: mode post) with each compressor's protocol through the
# backend's collectives (gloo all-reduce / all-gather) and through one parameter server on rank 0 (--comm ps),
# at p = 2 and 3. Run from the repository root (the throttled phases as root: network namespaces + tc):
#   bash data/measurements/ps_cpu/run.sh              # every phase, in order (about 3 minutes here)
#   bash data/measurements/ps_cpu/run.sh PHASE ...    # loopback2 loopback3 net2 net3
# Every phase is bounded (timeout 300 s) and resumable: a rerun skips what ddp.jsonl holds. The load average is
# logged before and after each phase in run.log (the machine is shared; see README.md).
set -u
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
OUT=data/measurements/ps_cpu
LOG=$OUT/run.log
RATE=1                                # Gbit/s per worker link in the throttled phases
DDP="ddp --backend gloo --models mlp_large --batch-sizes 32 --modes syncsgd post
     --compressors none fp16 signsgd topk --comm collective ps
     --iters 50 --warmup 10 --budget-s 4 --min-iter 10 --quiet"
export OMP_NUM_THREADS=1              # as every worker of the throttled cluster
phase() {
  local name=$1; shift
  echo "== $name start $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
  echo "   $*" >> "$LOG"
  timeout 300 "$@" >> "$LOG" 2>&1
  echo "== $name rc=$? end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
}
run() {
  case "$1" in
    # one host's loopback, no shaping: no link is a bottleneck
    loopback2|loopback3)
      phase "$1" $PY -m torch.distributed.run --standalone --nproc-per-node "${1#loopback}" -m studykit $DDP \
        --overwrite-committed --out $OUT/ddp.jsonl ;;
    # one network namespace per worker, each worker's link shaped to RATE Gbit/s (docs/throttle.md)
    net2|net3)
      phase "$1" $PY -m studykit throttle --workers "${1#net}" --rate-gbps $RATE --timeout-s 280 \
        --overwrite-committed --out $OUT/ddp.jsonl -- $DDP --overwrite-committed ;;
    *) echo "unknown phase $1; valid: loopback2 loopback3 net2 net3" >&2; exit 2 ;;
  esac
}
if [ $# -eq 0 ]; then set -- loopback2 loopback3 net2 net3; fi
for p in "$@"; do run "$p"; done
