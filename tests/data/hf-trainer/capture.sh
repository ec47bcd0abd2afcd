#!/usr/bin/env bash
# Captures trainer.out (run from this folder, in a venv with torch 2.14.1, transformers
# 5.24.0 and accelerate 1.15.0 from this machine's package mirror; CPU only, no SLURM).
set -u
python hf_train.py --epochs 2 > trainer.out 2>&1
