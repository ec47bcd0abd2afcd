#!/usr/bin/env bash
# Captures banner_1node_second.out: capture_banner.sh's job on one node, one process, on
# the test cluster started under another name (DLSCALE_CLUSTER_NAME=dlscalesecond
# scripts/testcluster.sh start; then sbatch --wait capture_banner_second.sh from this
# folder, the PyTorch venv's bin first on PATH): the same script's output from a second
# cluster, as a user who runs it on two machines has.
#SBATCH -N 1 -n 1 --ntasks-per-node=1 -t 5 -o banner_1node_second.out
set -u
echo "=========================================="
echo "SLURM_CLUSTER_NAME = $SLURM_CLUSTER_NAME"
echo "SLURM_JOB_NODELIST = $SLURM_JOB_NODELIST"
echo "Nodes      : $SLURM_NNODES"
echo "=========================================="
export OMP_NUM_THREADS=1 MASTER_PORT=29521
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun -l bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 \
    python own_train.py --style took --epochs 2'
