#!/usr/bin/env bash
# The chapter's submit.LLM.template.slurm as one point of a dlscale study: its launcher
# (torchrun under srun, one task per node, c10d rendezvous at the job's first node) and
# its flags, with the knobs the study sweeps given as arguments. benchmark.py runs
# unchanged. Outside a SLURM job (profiles/local) the agents of a point's nodes run side
# by side on this machine.
#
#   launch.sh NODES GPUS ATTN MICRO_BATCH MODEL_PRECISION MODEL_DIR OUT_DIR [benchmark flags]
#
# TORCHRUN: the torchrun to use, with what runs it (default: torchrun on PATH; on
# MareNostrum 5 "bsc_singularity exec --nv IMAGE torchrun"). MAX_STEPS, SEQUENCE_LEN:
# the template's 450 and 1024 by default. MIXED_PRECISION: no, bf16 or fp8, LIGER_KERNEL:
# false or true (the template's).
# On a CPU (DEVICE=cpu) the Trainer is told --use_cpu true --ddp_backend gloo: without it
# each rank trains alone (tests/data/llm-chapter/README.md).
set -euo pipefail
nodes=$1 gpus=$2 attn=$3 micro_batch=$4 model_precision=$5 model=$6 out=$7
shift 7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
per_node=$(( gpus / nodes ))
read -ra launcher <<< "${TORCHRUN:-torchrun}"  # words: a container's exec and torchrun
extra=()
if [ "${DEVICE:-gpu}" = cpu ]; then
    extra=(--use_cpu true --ddp_backend gloo)
fi
if [ -n "${SLURM_JOB_ID:-}" ]; then
    master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun=(srun --ntasks-per-node 1 --nodes "$nodes" --ntasks "$nodes" --kill-on-bad-exit=1)
else
    master=127.0.0.1 srun=()
fi
port=${MASTER_PORT:-$(( 20000 + ${SLURM_JOB_ID:-$$} % 20000 ))}
export ACCELERATE_MIXED_PRECISION=${MIXED_PRECISION:-no}
agent() {  # one torchrun agent a node; node_rank from each task's SLURM_PROCID, read
           # where the task runs (the template's \$SLURM_PROCID), else given
    "${srun[@]}" bash -c 'n=$1; shift; exec "${@:1:n}" --node_rank \
        "${SLURM_PROCID:-$NODE_RANK}" "${@:n+1}"' launch "${#launcher[@]}" "${launcher[@]}" \
    --nproc_per_node "$per_node" --nnodes "$nodes" \
    --rdzv_endpoint "$master:$port" --rdzv_backend c10d --max_restarts 0 --tee 3 \
    "$here/benchmark.py" --path_to_model "$model" \
    --run_name "nodes$nodes-gpus$gpus-$attn-mbs$micro_batch-$model_precision" \
    --max_steps "${MAX_STEPS:-450}" --sequence_length "${SEQUENCE_LEN:-1024}" \
    --per_device_train_batch_size "$micro_batch" --model_precision "$model_precision" \
    --attn "$attn" --torch_compile false --use_liger_kernel "${LIGER_KERNEL:-false}" \
    --optim adamw_torch --output_dir "$out/trainer" --save_strategy no --report_to none \
    "${extra[@]}" "$@"
}
if [ ${#srun[@]} -gt 0 ] || [ "$nodes" = 1 ]; then
    export NODE_RANK=0
    agent "$@"
    exit
fi
# outside SLURM, a point of several nodes runs their agents side by side on this machine
pids=()
for (( rank = 0; rank < nodes; rank++ )); do
    ( export NODE_RANK=$rank; agent "$@" ) &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=$?
done
exit "$status"
