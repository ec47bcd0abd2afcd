#!/usr/bin/env bash
# Re-run the captures in this folder: HPC4AIbook Chapter.15 benchmark.py, UNCHANGED,
# on CPU under torchrun, with a tiny random Llama made by make_tiny_llama.py.
# Each run's stdout+stderr goes to one .out file exactly as the shell redirects it.
#
#   VENV=/tmp/llm-helper/venv WORK=/tmp/llm-helper bash capture.sh
#
# VENV: a venv with torch==2.14.1 transformers==5.23.0 accelerate==1.15.0
# WORK: scratch dir (tiny model, Trainer output_dir, cwd of the runs)
# OUT:  where the .out files are written (default: this folder)
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHAPTER="$HERE/../../../examples/hpc4ai-chapter15"  # the chapter's scripts, byte for byte
VENV="${VENV:-/tmp/llm-helper/venv}"
WORK="${WORK:-/tmp/llm-helper}"
OUT="${OUT:-$HERE}"
# Optional: a folder made with
#   pip download --no-deps liger-kernel && pip install --no-deps --target "$LIGER_PKGS" liger_kernel-*.whl
# (liger-kernel 0.8.5 used); put on PYTHONPATH for the last run only.
LIGER_PKGS="${LIGER_PKGS:-$WORK/liger-pkgs}"
MODEL="$WORK/tiny-llama"
BENCH="$CHAPTER/benchmark.py"
TORCHRUN="$VENV/bin/torchrun"

mkdir -p "$WORK" "$OUT"
[ -f "$MODEL/config.json" ] || "$VENV/bin/python" "$CHAPTER/make_tiny_llama.py" "$MODEL"
cd "$WORK"
export OMP_NUM_THREADS=1

# Flags as in submit.LLM.template.slurm, with CPU-sized values;
# --use_cpu true --ddp_backend gloo make the Trainer use real DDP over gloo on CPU.
common() {  # $1=micro batch  $2=model precision  $3=attn  $4=liger
  echo --path_to_model "$MODEL" \
    --run_name "cpu-capture" \
    --max_steps 60 \
    --sequence_length 256 \
    --per_device_train_batch_size "$1" \
    --model_precision "$2" \
    --attn "$3" \
    --torch_compile false \
    --use_liger_kernel "$4" \
    --optim adamw_torch \
    --output_dir "$WORK/output" \
    --save_strategy no \
    --report_to none
}

run() {  # $1=out name  $2=nproc  rest=benchmark args
  local name="$1" np="$2"; shift 2
  ACCELERATE_MIXED_PRECISION=no "$TORCHRUN" --nproc_per_node "$np" --tee 3 "$BENCH" "$@" > "$OUT/$name" 2>&1
  echo "$name rc=$?"
}

CPU="--use_cpu true --ddp_backend gloo"

run tokens_1rank_sdpa_b2_fp32.out  1 $(common 2 fp32 sdpa false) $CPU
run tokens_2rank_sdpa_b2_fp32.out  2 $(common 2 fp32 sdpa false) $CPU
run tokens_1rank_eager_b2_fp32.out 1 $(common 2 fp32 eager false) $CPU
run tokens_2rank_eager_b2_fp32.out 2 $(common 2 fp32 eager false) $CPU
run tokens_1rank_sdpa_b4_fp32.out  1 $(common 4 fp32 sdpa false) $CPU
run tokens_2rank_sdpa_b4_fp32.out  2 $(common 4 fp32 sdpa false) $CPU
run tokens_1rank_sdpa_b2_bf16.out  1 $(common 2 bf16 sdpa false) $CPU
run tokens_2rank_sdpa_b2_bf16.out  2 $(common 2 bf16 sdpa false) $CPU

# Template flags only (no --use_cpu): on a CPU-only host each torchrun rank trains
# on its own (ParallelMode.NOT_PARALLEL, no gradient all-reduce) and each prints its dict.
run tokens_2rank_sdpa_b2_fp32_nousecpu.out 2 $(common 2 fp32 sdpa false)

# Knobs that need a GPU stack: expected to fail on CPU.
run fail_1rank_liger.out 1 $(common 2 fp32 sdpa true) $CPU
run fail_1rank_flash_attention_2.out 1 $(common 2 bf16 flash_attention_2 false) $CPU

# liger-kernel installed (not in the venv, via PYTHONPATH): its Triton kernels find no GPU driver.
if [ -d "$LIGER_PKGS/liger_kernel" ]; then
  PYTHONPATH="$LIGER_PKGS" run fail_1rank_liger_installed.out 1 $(common 2 fp32 sdpa true) $CPU
fi
