#!/usr/bin/env bash
# Captures lightning_ddp.out and torchrun_lightning.out (run from this folder, in a venv
# with torch 2.14.1 and pytorch-lightning 2.6.6 installed from this machine's package
# mirror, and for torchrun_rich.out also rich 15.0.0, which transformers brought in; CPU
# only, no SLURM job). stdout and stderr as the shell redirected them.
set -u
python lit_train.py --devices 2 --epochs 3 > lightning_ddp.out 2>&1
torchrun --nproc-per-node 2 --tee 3 lit_train.py --devices 2 --epochs 2 > torchrun_lightning.out 2>&1
torchrun --nproc-per-node 2 --tee 3 --log-line-prefix-template '[rank${rank}]:' \
    lit_train.py --devices 2 --epochs 2 > torchrun_rank_prefix.out 2>&1
# with rich installed (pip install rich): Lightning's default bar is then its Rich bar
torchrun --nproc-per-node 2 --tee 3 --log-line-prefix-template '[rank${rank}]:' \
    lit_train.py --devices 2 --epochs 2 > torchrun_rich.out 2>&1
