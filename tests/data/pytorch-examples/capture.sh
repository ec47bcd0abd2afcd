#!/usr/bin/env bash
# Captures ddp_1rank.out and ddp_2ranks.out (run from this folder, in a venv with torch
# 2.14.1 from this machine's package mirror; CPU only, gloo, no SLURM job). stdout and
# stderr as the shell redirected them.
set -u
export OMP_NUM_THREADS=1  # one thread a process at both counts (torchrun sets it only for 2)
torchrun --nproc-per-node 1 ddp_example.py --epochs 3 > ddp_1rank.out 2>&1
torchrun --nproc-per-node 2 ddp_example.py --epochs 3 > ddp_2ranks.out 2>&1
