#!/usr/bin/env bash
# Captures horovod_copies.out and horovod_twice.out (run from this folder, with the PyTorch
# venv's bin first on PATH; this VM, no SLURM): own_train.py --style horovod prints
# Horovod's synthetic benchmark's lines on every rank. Under torchrun without --tee both
# ranks' lines land unprefixed in one file: copies of one run's total, each rank's own
# figures. horovod_twice.out is a job that runs it twice, on 1 and then 2 processes.
set -u
export OMP_NUM_THREADS=1
torchrun --nproc-per-node 2 --master-port 29531 own_train.py --style horovod --epochs 5 \
    > horovod_copies.out 2>&1
echo "horovod_copies.out rc=$?"
{
  torchrun --nproc-per-node 1 --master-port 29532 own_train.py --style horovod --epochs 3
  torchrun --nproc-per-node 2 --master-port 29533 own_train.py --style horovod --epochs 3
} > horovod_twice.out 2>&1
echo "horovod_twice.out rc=$?"
