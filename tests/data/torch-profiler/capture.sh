#!/usr/bin/env bash
# How ddp_gloo_mlp.trace.json was captured (2026-11-29, this project's VM, 2 cores): a
# torch point of MLP on 2 ranks (gloo, CPUs) with analysis.breakdown's window of 2 steps,
# its trace kept; the chief's torch.profiler trace (Chrome JSON) stored unchanged.
# Needs .venv-torch (make setup-torch) and a prepared 32 px dataset in $DATA.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${OUT:-/tmp/torch-window}
PYTHONPATH="$ROOT/scripts" "$ROOT/.venv/bin/python" "$ROOT/scripts/launch.py" --plan '{"tasks":2}' -- \
    "$ROOT/.venv-torch/bin/python" "$ROOT/scripts/train.py" --model MLP --gpus 2 --keras 3 \
    --backend torch --epochs 1 --batch-per-gpu 16 --device cpu --data-dir "$DATA" \
    --out "$OUT" --image-size 32 --breakdown-steps 2 --keep-trace
cp "$OUT/trace/torch.trace.json" "$(dirname "$0")/ddp_gloo_mlp.trace.json"
