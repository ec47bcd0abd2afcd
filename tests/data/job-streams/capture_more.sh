#!/usr/bin/env bash
# Captures more job outputs of this folder on the SLURM test cluster, as capture.sh does
# (run from this folder with the project's venv active): `sbatch --wait capture_more.sh`.
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 10
set -u
export TF_CPP_MIN_LOG_LEVEL=1
# settings the job script prints itself, unprefixed, before srun --label's tasks
{
    echo "Job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: python mw_more.py --n_gpus 2 --epochs 2"
    srun -l python mw_more.py --epochs 2
} > srun_label_header.out 2>&1
# each worker its own srun -n 1: both labelled 0:
{
    WORKER=0 WORKERS=2 srun -l -N 1 -n 1 -r 0 python mw_more.py --epochs 3 --devices &
    WORKER=1 WORKERS=2 srun -l -N 1 -n 1 -r 1 python mw_more.py --epochs 3 --devices &
    wait
} > srun_two_zero.out 2>&1
# one worker cut inside epoch 2 (SIGKILL) and started again: BackupAndRestore resumes it
backup=$(mktemp -d)
{
    srun -N 1 -n 1 python mw_more.py --epochs 3 --backup "$backup" --die-in-epoch 2 ||
        srun -N 1 -n 1 python mw_more.py --epochs 3 --backup "$backup"
} > resumed_single.out 2>&1
rm -rf "$backup"
