#!/usr/bin/env bash
# The GPU check on a bare GPU machine (one H100 or H200, Python 3.12 with JAX and NVML, no
# TensorFlow, no Keras, no network): installs the wheels carried in .whl (made where pip
# reaches PyPI by `make gpu-wheels`: the pins of bench/gpu-wheels.txt) into a folder of its
# own, then runs bench/gpu_check.py. Results: $OUT (the device tool's folder) or
# results/gpu-check. Extra arguments go to gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results/gpu-check}"
site="$(mktemp -d)/site"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv \
    >"$out/nvidia-smi.csv" 2>&1 || true
python3 bench/gpu_check.py --out "$out/gpu_check.json" "$@" 2>&1 | tee "$out/gpu_check.log"
