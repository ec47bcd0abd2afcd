#!/usr/bin/env bash
# Captures chapter 11's train.py output unchanged on CPU (examples/hpc4ai-chapter11: the
# book's files byte for byte). Needs .venv-torch and scikit-learn (train.py imports
# sklearn.metrics; a capture-only install: pip install --target /tmp/sk scikit-learn,
# then SKLEARN=/tmp/sk). From the repository's root: bash tests/data/chapter11/capture.sh
set -euo pipefail
here=tests/data/chapter11
ex=examples/hpc4ai-chapter11
data=$(mktemp -d)
.venv-torch/bin/python "$ex/make_folder.py" "$data" --classes 4 --train 64 --val 16
# ONLY=name captures that file alone (the others kept as they were captured)
run() {  # name, train.py's flags
    local name=$1; shift
    [ -z "${ONLY:-}" ] || [ "$ONLY" = "$name" ] || return 0
    PYTHONPATH="${SKLEARN:-}" OMP_NUM_THREADS=2 .venv-torch/bin/python "$ex/train.py" \
        --dataset "$data" --model_name custom --resolution 32 --num_epochs 4 --epochs_eval 2 \
        --iteration_logging 8 "$@" > "$here/$name.out" 2>&1 || echo "exit $?" >> "$here/$name.out"
}
run custom_b16_w0 --batch_size 16 --num_workers 0
run custom_b32_w2 --batch_size 32 --num_workers 2
run custom_b16_w0_compile --batch_size 16 --num_workers 0 --compile
# the chapter's precision knob: autocast(device_type="cuda") on a CPU (2026-12-08)
run custom_b16_w0_bf16 --batch_size 16 --num_workers 0 --mixed_precision bf16
rm -rf "$data"
