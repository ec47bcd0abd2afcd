#!/usr/bin/env bash
# Captures logging_srun.out on the SLURM test cluster (scripts/testcluster.sh start; from
# this folder, with the PyTorch venv's bin first on PATH: sbatch --wait capture_srun.sh).
# A logging-only DDP job as many are run: one process a task, its rank from SLURM, gloo
# across the two nodes; srun --label prefixes each task's lines.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 5 -o logging_srun.out
set -u
export OMP_NUM_THREADS=1 MASTER_PORT=29517
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun -l bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 \
    python own_train.py --style logging --epochs 3'
