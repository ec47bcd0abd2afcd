#!/usr/bin/env bash
# Captures srun_copies.out on the SLURM test cluster (run from this folder with the
# project's venv active): `sbatch --wait capture_copies.sh`. Eight tasks over the two
# nodes, no --label: every task prints the whole Keras output of its own training.
#SBATCH -N 2 -n 8 --ntasks-per-node=4 -t 10
set -u
export TF_CPP_MIN_LOG_LEVEL=2
{
    echo "Job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: python copies.py --n_gpus 8 --epochs 3"
    srun python copies.py --epochs 3
} > srun_copies.out 2>&1
