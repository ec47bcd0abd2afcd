#!/usr/bin/env bash
# Captures hello_jax.out on the SLURM test cluster of scripts/testcluster.sh (run from
# this folder with the project's venv active): `sbatch --wait capture_hello.sh`. Two
# tasks, one per node, `srun -l`, each running hello_jax.py; nothing is trained.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 5
set -u
{
    echo "Job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: srun -l python hello_jax.py"
    srun -l python hello_jax.py
} > hello_jax.out 2>&1
