#!/usr/bin/env bash
# Captures launch_lines.out: a job script's launches as its log shows them, `set -x`
# echoing each command line before it runs (run from this folder: bash capture_lines.sh >
# launch_lines.out 2>&1). mpirun is Debian's OpenMPI and runs (on one host: -N 2 with 8
# processes asks for 4 nodes, and it says so); the launchers this machine lacks (no SLURM
# cluster here, no torch, no DeepSpeed) are shell functions that print one line, so bash
# echoes their command lines exactly as it echoes a real launcher's.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
srun() { echo "(srun: no SLURM cluster on this machine)"; }
torchrun() { echo "(torchrun: not installed on this machine)"; }
deepspeed() { echo "(deepspeed: not installed on this machine)"; }
set -x
mpirun -np 8 -N 2 hostname
/usr/bin/mpirun -np 8 --map-by ppr:4:node hostname
mpirun --oversubscribe -np 4 --npernode 2 hostname
srun -N 2 --ntasks-per-node=4 python train.py --epochs 2
srun --nodes=2 --ntasks-per-node 4 python train.py --epochs 2
torchrun --nproc-per-node 4 --nnodes 2 --node-rank 0 --master-addr n1 train.py --epochs 2
torchrun --nproc_per_node=4 --nnodes=2 train.py --epochs 2
python -m torch.distributed.run --nnodes=1:2 --nproc-per-node=4 train.py --epochs 2
deepspeed --num_gpus 8 --num_nodes 2 --hostfile hostfile train.py --deepspeed --deepspeed_config ds.json
deepspeed --num_gpus=2 train.py --deepspeed_config ds.json
