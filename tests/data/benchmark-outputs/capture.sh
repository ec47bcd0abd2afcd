#!/usr/bin/env bash
# Horovod's own synthetic benchmark (tensorflow2_synthetic_benchmark.py, unchanged from
# horovod/horovod, see README.md) on logical CPUs, 1 and 2 ranks, with the project's
# Horovod environment (make horovod). Run from this folder.
set -eu
PY=../../../.venv-horovod/bin
export TF_CPP_MIN_LOG_LEVEL=2
FLAGS="--no-cuda --model MobileNetV2 --batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 3 --num-iters 5"
$PY/horovodrun --gloo -np 1 -H localhost:1 $PY/python tensorflow2_synthetic_benchmark.py $FLAGS \
    > horovod_synthetic_1rank.out 2>&1
$PY/horovodrun --gloo -np 2 -H localhost:2 $PY/python tensorflow2_synthetic_benchmark.py $FLAGS \
    > horovod_synthetic_2ranks.out 2>&1
