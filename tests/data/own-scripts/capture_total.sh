#!/usr/bin/env bash
# Captures total_srun.out on the SLURM test cluster (scripts/testcluster.sh start; from
# this folder, with the PyTorch venv's bin first on PATH: sbatch --wait capture_total.sh)
# and total_torchrun.out beside it (torchrun, no prefix). One epoch whose time is in a
# run total every rank prints (`Train samples ... time ...s rate ... samples/s`), after a
# set-up of 4 s between `Starting run` and `Epoch 0`; srun --label prefixes each task's lines.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 5 -o total_srun.out
set -u
export OMP_NUM_THREADS=1 MASTER_PORT=29518
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun -l bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 \
    python own_train.py --style total --epochs 1 --slow 0.2'
