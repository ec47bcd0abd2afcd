#!/usr/bin/env bash
# Captures the job outputs of this folder on the SLURM test cluster (scripts/testcluster.sh
# start; run from this folder with the project's venv active). One job on both nodes,
# one task per node; each output is the job step's stdout and stderr as a .out holds them.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 10
set -u
export TF_CPP_MIN_LOG_LEVEL=1
srun -l python mw_run.py --epochs 2 > srun_label.out 2>&1
srun python mw_run.py --epochs 1 > srun_plain.out 2>&1
mpirun --allow-run-as-root --tag-output -np 2 python mw_run.py --epochs 2 > mpirun_tag.out 2>&1
mpirun --allow-run-as-root --tag-output --timestamp-output -np 2 python mw_run.py --epochs 2 \
    > mpirun_timestamp.out 2>&1
