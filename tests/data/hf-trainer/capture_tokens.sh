#!/usr/bin/env bash
# Captures tokens_1proc.out and tokens_2proc.out (run from this folder, in a venv with
# torch 2.14.1, transformers 5.23.0 and accelerate 1.15.0 as `make setup-torch` installs
# them; CPU only, no SLURM): hf_tokens.py under torchrun as its users start it, without
# --tee (rank 0's dicts, every rank's warnings, no prefixes), 200 steps.
set -u
TORCHRUN="${TORCHRUN:-torchrun}"
export OMP_NUM_THREADS=1
for n in 1 2; do
  "$TORCHRUN" --nproc_per_node "$n" hf_tokens.py --max-steps 200 > "tokens_${n}proc.out" 2>&1
  echo "tokens_${n}proc.out rc=$?"
done
