# Sourced by scripts/gpu_tta.sh and scripts/gpu_tta_lr.sh (never run alone): the one definition of the
# time-to-target workload of data/training/tta_gpu2/ (gpt_mini on the Python standard library's bytes),
# so that a learning-rate sweep trains exactly what the committed runs trained. Each can be overridden.
SEEDS=${SEEDS:-"0 1 2"}
MODEL=${MODEL:-gpt_mini}
STEPS=${STEPS:-300}
EVAL_EVERY=${EVAL_EVERY:-25}
BATCH=${BATCH:-16}
SEQ_LEN=${SEQ_LEN:-256}
VAL_BYTES=${VAL_BYTES:-262144}
ACC_THRESHOLDS=${ACC_THRESHOLDS:-"0.35 0.45 0.55"}   # dynamic: next-byte validation accuracy steps
