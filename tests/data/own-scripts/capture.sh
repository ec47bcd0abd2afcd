#!/usr/bin/env bash
# Captures the outputs of own_train.py (run from this folder, in the PyTorch venv of
# `make setup-torch`; CPU only, gloo, no SLURM job). stdout and stderr as the shell
# redirected them.
set -u
export OMP_NUM_THREADS=1
run() { torchrun --nproc-per-node 2 "$@"; }
# Python logging only, on every rank: torchrun --tee prefixes each rank's lines ...
run --tee 3 own_train.py --style logging --epochs 3 > logging_ddp_tee.out 2>&1
# ... and without it both ranks' lines come unprefixed: each epoch's line twice
run own_train.py --style logging --epochs 3 > logging_ddp.out 2>&1
run own_train.py --style took --epochs 3 > took.out 2>&1
run own_train.py --style fsdp --epochs 3 > fsdp_tutorial.out 2>&1
run own_train.py --style deepspeed --epochs 3 > deepspeed_words.out 2>&1
# a job killed inside an epoch: after 40 s SIGKILL to the launcher and its workers at
# once (torchrun starts each worker in a session of its own), as SLURM ends a job step
torchrun --nproc-per-node 2 own_train.py --style logging --epochs 50 --slow 0.05 \
    > logging_killed.out 2>&1 &
sleep 40
kill -KILL $! $(ps -o pid= --ppid $!)
wait
# one epoch timed by the run total each rank prints (capture_total.sh under srun -l too)
torchrun --nproc-per-node 2 own_train.py --style total --epochs 1 --slow 0.2 \
    > total_torchrun.out 2>&1
