#!/usr/bin/env bash
# Short GPU checks (kernels, per-bucket profiles, NVLink hooks, hook stamps, parameter server), in ONE
# invocation on a lent 2-GPU machine, into $OUT:
#
#   OUT=/path/to/out STUDYKIT_GIT_COMMIT=<sha> bash scripts/gpu_checks.sh
#
# Phases (each bounded by the time left; PHASES picks a subset, in this order):
#   kernels  - `pytest -m gpu` on the fused kernels' tests: every Triton kernel against its plain-PyTorch
#              reference on this GPU, and the host-sync tests (run first: a kernel that fails here must not run
#              in a campaign; KERNELS_S caps it, default 300 s, which leaves room for the whole suite);
#   buckets  - encode/decode profiled bucket by bucket as the DDP hook calls it (`profile --ddp-buckets`),
#              for the models of the committed bandwidth campaigns (the hook model's per-bucket input);
#   hostahead - the same codecs' device time with the host ahead of the GPU (`profile --host-ahead`, whole
#              gradient and bucket by bucket), for every campaign model: does the profile, which times a codec
#              alone with every launch gap, overstate what an iteration pays (data/verification/bandwidth)?
#   nvlink   - 2 GPUs over NVLink: DDP with the kit's and PyTorch's fp16 and PowerSGD rank-4 hooks (the hook
#              targets: PowerSGD hook <= 1.1x syncSGD, fp16 hook <= PyTorch's), and syncSGD of ResNet-50 at batches
#              8-64 with T_comp at the same batches (the small-batch regime);
#   hooks    - ResNet-50 on a link shaped to HOOK_RATE Gbit/s: the PowerSGD and top-k hooks beside their
#              post-backward path, stamped bucket by bucket (`--hook-times`), the identity compressor `none`
#              as a hook (the path overhead), then the same hooks with a 0.5 ms GIL switch interval (A/B);
#   ps       - ResNet-50 on the same link through one parameter server (`--comm collective ps`; beside Table 1);
#   hookdiag - where the overlapped hook loses to post, over NVLink: DIAG_MODELS with syncSGD, `none` and
#              PowerSGD rank 4 after the backward pass and as hooks (thread and graph runner, per bucket and
#              coalesced per iteration), 30 timed iterations after 10 warm-up, stamped bucket by bucket, each
#              configuration then traced (`--trace-dir`), and the traces set side by side
#              (`benchmarks/hook_trace.py`: compute stream, the codec's side streams and their overlap, host threads).
# Writes (directly in $OUT): kernels.xml (pytest's report), profile.jsonl, profile_host_ahead.jsonl, tcomp.jsonl,
# nvlink.jsonl, hooks.jsonl, ps.jsonl, hookdiag.jsonl, hook_trace.md (and the traces under $OUT/traces/),
# run.log, RUN.txt. Needs root (hooks, ps), python3 with torch (CUDA), torchvision, transformers, pytest,
# triton, and iproute2 (IPROUTE2, as for scripts/gpu_bandwidth.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

PHASES=${PHASES:-"kernels buckets hostahead nvlink hooks ps hookdiag"}
DIAG_MODELS=${DIAG_MODELS:-"bert_base resnet50"}
MODELS=${MODELS:-"resnet50 resnet101 bert_base"}
BUCKET_COMPRESSORS=${BUCKET_COMPRESSORS:-"fp16 powersgd:rank=4 powersgd:rank=32 powersgd:rank=32,orthogonalize=cholesky topk:ratio=0.01 topk_chunked:ratio=0.01 randomk:ratio=0.01 ef_signsgd qsgd quantize:bits=8 thc dgc:ratio=0.01"}
HOOK_RATE=${HOOK_RATE:-10}
NVLINK_ITERS=${NVLINK_ITERS:-10} NVLINK_WARMUP=${NVLINK_WARMUP:-2}  # each nvlink-phase configuration's iterations
GIL_AB=${GIL_AB-0.5}   # the hooks phase again at these GIL switch intervals (ms); GIL_AB= skips the A/B
TOTAL_S=${TOTAL_S:-560}
# shellcheck source=scripts/gpu_common.sh
. scripts/gpu_common.sh
machine_summary gpu_checks.sh "PHASES=$PHASES MODELS=$MODELS DIAG_MODELS=$DIAG_MODELS HOOK_RATE=$HOOK_RATE NVLINK_ITERS=$NVLINK_ITERS NVLINK_WARMUP=$NVLINK_WARMUP GIL_AB=$GIL_AB TOTAL_S=$TOTAL_S" \
  "BUCKET_COMPRESSORS=$BUCKET_COMPRESSORS"

want() { case " $PHASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
DDP=(ddp --warmup 2 --iters 10 --budget-s 3 --min-iter 3 --timeout-s 300 --quiet)
TORCHRUN=($PY -m torch.distributed.run --standalone --nproc-per-node 2 -m studykit)

# shellcheck disable=SC2086
{
want kernels && phase kernels "${KERNELS_S:-300}" $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_bench.py \
  tests/test_fast_elementwise.py tests/test_pack_fields.py tests/test_mstopk.py tests/test_atomo_svd.py \
  tests/test_lowrank.py tests/test_timing.py tests/test_host_sync.py --junitxml "$OUT/kernels.xml"
want buckets && CUDA_VISIBLE_DEVICES=0 phase buckets 150 $PY -m studykit profile --models $MODELS \
  --compressors $BUCKET_COMPRESSORS --budget-s 0.5 --min-iter 20 --ddp-buckets --out "$OUT/profile.jsonl" --quiet
want hostahead && CUDA_VISIBLE_DEVICES=0 phase hostahead 150 $PY -m studykit profile \
  --models $MODELS vgg19 gpt2_small --compressors $BUCKET_COMPRESSORS --budget-s 0.5 --min-iter 20 --ddp-buckets \
  --no-split --host-ahead --out "$OUT/profile_host_ahead.jsonl" --quiet
want nvlink && CUDA_VISIBLE_DEVICES=0 phase tcomp 60 $PY -m studykit tcomp --models resnet50 \
  --batch-sizes 8 16 32 64 --budget-s 1 --min-iter 5 --out "$OUT/tcomp.jsonl" --quiet
want nvlink && phase nvlink 150 "${TORCHRUN[@]}" "${DDP[@]}" --iters "$NVLINK_ITERS" --warmup "$NVLINK_WARMUP" --models $MODELS --modes syncsgd builtin hook \
  --builtin torch_fp16 torch_powersgd --compressors fp16 powersgd:rank=4 --out "$OUT/nvlink.jsonl"
want nvlink && phase batches 90 "${TORCHRUN[@]}" "${DDP[@]}" --models resnet50 --batch-sizes 8 16 32 64 \
  --modes syncsgd --compressors --bucket-times --out "$OUT/nvlink.jsonl"
for si in "" $GIL_AB; do
  want hooks && phase "hooks${si:+@gil$si}" 150 $PY -m studykit throttle --gpus --workers 2 "${IPR[@]}" \
    --rate-gbps "$HOOK_RATE" --timeout-s 140 --out "$OUT/hooks.jsonl" -- "${DDP[@]}" --models resnet50 \
    --modes syncsgd hook post --compressors none powersgd:rank=4 powersgd:rank=32 topk:ratio=0.01 \
    --bucket-times $([ -z "$si" ] && echo --hook-times) ${si:+--switch-interval-ms $si}
done
want ps && phase ps 120 $PY -m studykit throttle --gpus --workers 2 "${IPR[@]}" --rate-gbps "$HOOK_RATE" \
  --timeout-s 110 --out "$OUT/ps.jsonl" -- "${DDP[@]}" --models resnet50 --modes post \
  --compressors none fp16 signsgd topk:ratio=0.01 --comm collective ps
want hookdiag && phase hookdiag 300 "${TORCHRUN[@]}" ddp --warmup 10 --iters 30 --budget-s 1000 --min-iter 30 \
  --timeout-s 290 --quiet --models $DIAG_MODELS --modes syncsgd post hook --compressors none powersgd:rank=4 \
  --hook-runner thread graph --hook-coalesce-mb off 0 --hook-times --trace-dir "$OUT/traces" --out "$OUT/hookdiag.jsonl"
want hookdiag && [ -d "$OUT/traces" ] && phase hooktrace 60 $PY benchmarks/hook_trace.py "$OUT"/traces/*.json.gz \
  --out "$OUT/hook_trace.md"
} 2>&1
[ -f "$OUT/kernels.xml" ] && grep -o 'tests="[0-9]*" [^>]*' "$OUT/kernels.xml" | head -1 | sed 's/^/kernels: /' | tee -a "$RUN"
echo "finished $(date -u +%FT%TZ) after $(( $(date +%s) - T0 ))s" | tee -a "$RUN"
for f in profile profile_host_ahead tcomp nvlink hooks ps hookdiag; do
  [ -f "$OUT/$f.jsonl" ] && echo "$f.jsonl: $(wc -l < "$OUT/$f.jsonl") records" | tee -a "$RUN"
done
exit 0
