#!/usr/bin/env bash
# Captures env_echo.out on the SLURM test cluster (scripts/testcluster.sh start; run from
# this folder with the project's venv active: sbatch --wait capture.sh). One job on both
# nodes, one task per node; the job script echoes SLURM's counts, as many sites' scripts
# do, and `set -x` echoes the launch; the job's output is stored byte for byte.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 10 -o env_echo.out
set -u
export TF_CPP_MIN_LOG_LEVEL=2
echo "SLURM_NTASKS=$SLURM_NTASKS SLURM_NNODES=$SLURM_NNODES WORLD_SIZE=$SLURM_NTASKS"
set -x
srun python quiet_worker.py
