#!/usr/bin/env bash
# Captures lit1-1.out, lit1-2.out and lit1-3.out: three sbatch jobs on the test cluster
# (scripts/testcluster.sh start: Debian's SLURM, two nodes, each in a network namespace of
# its own), run from a copy of this folder with LIGHTNING_PYTHON set to a venv's python
# holding torch 2.14.1 and pytorch-lightning 1.9.5 (with setuptools<70, which 1.9.5's
# pkg_resources import needs) from this machine's package mirror. SLURM names each file
# after its job ID; the job IDs were 1, 2 and 3.
set -eu
sbatch --export=ALL job.sbatch --epochs 6                          # lit1-1.out
sbatch --export=ALL job.sbatch --epochs 10 --validate 0            # lit1-2.out
sbatch --export=ALL job.sbatch --epochs 10 --validate 0 --report 0 # lit1-3.out
