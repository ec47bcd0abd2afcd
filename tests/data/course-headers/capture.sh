#!/usr/bin/env bash
# The course's job script shape: three runs in one job, stdout and stderr of the job
# in ResNet50_headers.out and .err (run from this folder with the project's venv).
for gpus in 1 2 4; do
    python course_run.py --n_gpus "$gpus" --batch_size 64 --epochs 3
done > ResNet50_headers.out 2> ResNet50_headers.err
