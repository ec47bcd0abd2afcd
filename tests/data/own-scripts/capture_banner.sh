#!/usr/bin/env bash
# Captures banner_2nodes.out on the SLURM test cluster (scripts/testcluster.sh start; from
# this folder, with the PyTorch venv's bin first on PATH: sbatch --wait capture_banner.sh):
# a job script that echoes its allocation as many sites' templates do (the cluster's
# name, the node list, a banner's node count), then the `took` style under srun -l, one
# process a node, gloo between the nodes. banner_1node_second.out is the same job on one
# node of the cluster started under another name: DLSCALE_CLUSTER_NAME=dlscalesecond
# scripts/testcluster.sh start; sbatch --wait -N 1 -n 1 -o banner_1node_second.out
# capture_banner.sh (the command line's options win over the #SBATCH line).
#SBATCH -N 2 -n 2 --ntasks-per-node=1 -t 5 -o banner_2nodes.out
set -u
echo "=========================================="
echo "SLURM_CLUSTER_NAME = $SLURM_CLUSTER_NAME"
echo "SLURM_JOB_NODELIST = $SLURM_JOB_NODELIST"
echo "Nodes      : $SLURM_NNODES"
echo "=========================================="
export OMP_NUM_THREADS=1 MASTER_PORT=29520
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun -l bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 \
    python own_train.py --style took --epochs 2'
