#!/usr/bin/env bash
# How the traces here were captured (2026-11-29, this project's VM, 2 cores): a torch point
# on 2 ranks (gloo, CPUs) with analysis.breakdown's window of 2 steps, its trace kept; the
# chief's torch.profiler trace (Chrome JSON) stored unchanged.
#   MODEL=MLP ./capture.sh        -> ddp_gloo_mlp.trace.json (batch 16, every step)
#   MODEL=resnet18 ./capture.sh   -> ddp_gloo_resnet18.trace.json (batch 8, 5 steps an epoch)
# Needs .venv-torch (make setup-torch) and a prepared 32 px dataset in $DATA.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
MODEL=${MODEL:-MLP}
OUT=${OUT:-/tmp/torch-window-$MODEL}
case $MODEL in
    MLP) more=(--batch-per-gpu 16) ;;
    *) more=(--batch-per-gpu 8 --steps-per-epoch 5) ;;
esac
PYTHONPATH="$ROOT/scripts" "$ROOT/.venv/bin/python" "$ROOT/scripts/launch.py" --plan '{"tasks":2}' -- \
    "$ROOT/.venv-torch/bin/python" "$ROOT/scripts/train.py" --model "$MODEL" --gpus 2 --keras 3 \
    --backend torch --epochs 1 "${more[@]}" --device cpu --data-dir "$DATA" \
    --out "$OUT" --image-size 32 --breakdown-steps 2 --keep-trace
cp "$OUT/trace/torch.trace.json" \
    "$(dirname "$0")/ddp_gloo_$(echo "$MODEL" | tr '[:upper:]' '[:lower:]').trace.json"
