#!/usr/bin/env bash
# Captures restarted.out: one job's output file to which each attempt appends, as a
# requeued or restarted SLURM job's .out holds them (run from this folder, in the PyTorch
# venv of `make setup-torch`; CPU only, one process, gloo). Three attempts killed inside
# their first epoch (SIGKILL 4.5 s after the start: the imports, then 3.2 s of epoch),
# then one that trains its 2 epochs; stdout and stderr as the shell redirected them.
set -u
export OMP_NUM_THREADS=1 RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29519
: > restarted.out
for attempt in 1 2 3; do
    timeout -s KILL 4.5 python own_train.py --style logging --epochs 2 --slow 0.05 \
        >> restarted.out 2>&1
done
python own_train.py --style logging --epochs 2 --slow 0.05 >> restarted.out 2>&1
