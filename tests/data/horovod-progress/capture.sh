#!/usr/bin/env bash
# Captures the job outputs of this folder with the project's Horovod environment (make
# horovod: Horovod 0.28.1 built with MPI and Gloo). Run from this folder. Each file is the
# launcher's stdout and stderr as a job's .out holds them, byte for byte.
set -u
PY=../../../.venv-horovod/bin
export TF_CPP_MIN_LOG_LEVEL=2
mpirun --allow-run-as-root --tag-output -np 2 $PY/python hvd_run.py --epochs 3 \
    > mpirun_tag_progress.out 2>&1
$PY/horovodrun --gloo -np 2 -H localhost:2 $PY/python hvd_run.py --epochs 3 \
    > horovodrun_progress.out 2>&1
