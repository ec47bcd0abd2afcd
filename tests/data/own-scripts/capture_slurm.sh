#!/usr/bin/env bash
# Captures logging_timelimit.out on the SLURM test cluster (scripts/testcluster.sh start;
# from this folder, with the PyTorch venv's bin first on PATH: sbatch --wait
# capture_slurm.sh). One task on one node with a time limit of one minute: SLURM ends the
# job inside an epoch, and its step's `slurmstepd` says so in the job's output.
#SBATCH -N 1 -n 1 -t 1 -o logging_timelimit.out
set -u
export OMP_NUM_THREADS=1
srun -l torchrun --nproc-per-node 2 own_train.py --style logging --epochs 100 --slow 0.05
