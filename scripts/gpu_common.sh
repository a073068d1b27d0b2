# Sourced by the scripts/gpu_*.sh campaign scripts (never run alone): the environment every GPU run
# needs, the kit's commit (STUDYKIT_GIT_COMMIT, also on machines without .git), the log files and the
# whole-run deadline. Before sourcing, a script sets OUT and TOTAL_S; after it, it has
#   PY, LOG ($OUT/run.log), RUN ($OUT/RUN.txt), left (seconds to the deadline), IPR (--iproute2 DIR or
#   nothing), machine_summary NAME "SETTINGS LINE"... (writes RUN.txt's header, appends it to run.log) and
#   phase NAME CAP_S CMD... (runs CMD under min(CAP_S, time left), its output prefixed into run.log; a
#   phase with less than PHASE_MIN_S (default 30) left is skipped; PHASE_RESUME says how to finish a cut one).
: "${OUT:?set OUT to the output folder}"
: "${TOTAL_S:?set TOTAL_S (whole-run deadline, seconds) before sourcing gpu_common.sh}"
PY=${PYTHON:-python3}
IPROUTE2=${IPROUTE2:-.iproute2}
export NCCL_NVLS_ENABLE=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
: "${STUDYKIT_GIT_COMMIT:=$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
export STUDYKIT_GIT_COMMIT
mkdir -p "$OUT"
LOG="$OUT/run.log"
RUN="$OUT/RUN.txt"
T0=$(date +%s)
left() { echo $((TOTAL_S - ($(date +%s) - T0))); }
IPR=()
[ -d "$IPROUTE2" ] && IPR=(--iproute2 "$IPROUTE2")

# machine_summary SCRIPT LINE...: RUN.txt = start line, the settings lines, GPUs and software versions
machine_summary() {
  local name=$1; shift
  {
    echo "studykit $name  started $(date -u +%FT%TZ)  host $(hostname)  commit $STUDYKIT_GIT_COMMIT"
    [ "$STUDYKIT_GIT_COMMIT" = unknown ] && echo "WARNING: no .git and no STUDYKIT_GIT_COMMIT: records will say git_commit unknown"
    printf '%s\n' "$@"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
    nvidia-smi topo -m 2>/dev/null
    $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")' 2>&1 | tail -1
    $PY -c 'import torchvision, transformers; print("torchvision", torchvision.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1
    $PY -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  } > "$RUN"
  cat "$RUN" >> "$LOG"
}

PHASE_MIN_S=${PHASE_MIN_S:-30}
PHASE_RESUME=${PHASE_RESUME:-"rerun with the same OUT (or RESUME_FROM) to finish"}
phase() {
  local name=$1 cap=$2; shift 2
  local limit; limit=$(left); [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt "$PHASE_MIN_S" ]; then
    echo "== $name: skipped, deadline reached" | tee -a "$LOG" "$RUN"; return 0
  fi
  local t; t=$(date +%s)
  echo "== $name (limit ${limit}s): $*" >> "$LOG"
  timeout --signal=TERM --kill-after=20 "$limit" "$@" 2>&1 | grep --line-buffered -v "NCCL INFO" | sed -u "s/^/[$name] /" >> "$LOG"
  local rc=${PIPESTATUS[0]}
  local msg="== $name: rc=$rc in $(( $(date +%s) - t ))s"
  [ "$rc" -eq 124 ] && msg="$msg (deadline: what was measured is kept; $PHASE_RESUME)"
  echo "$msg" | tee -a "$LOG" >> "$RUN"
}
