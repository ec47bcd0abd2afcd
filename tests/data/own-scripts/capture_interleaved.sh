#!/usr/bin/env bash
# Captures interleaved.out: two independent 2-process runs started side by side, both
# writing to one file (as an `accelerate launch` started on each node without a machine
# rank makes each node run its own job): their `Epoch k took:` lines interleave. Run
# from this folder in the PyTorch venv of `make setup-torch`; CPU only, gloo. The two
# differ in batch size (32 and 64), so their losses differ.
set -u
export OMP_NUM_THREADS=1
: > interleaved.out
torchrun --nproc-per-node 2 --master-port 29521 own_train.py --style took --epochs 3 \
    --batch-size 32 >> interleaved.out 2>&1 &
torchrun --nproc-per-node 2 --master-port 29522 own_train.py --style took --epochs 3 \
    --batch-size 64 >> interleaved.out 2>&1 &
wait
