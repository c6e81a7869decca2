#!/bin/bash
# Evaluate a collsim plan as a Slurm job array: each array task is one shard of the candidates
# and appends its results to its own file; `collsim plan merge` then prints the report a single
# run would. A task that is pre-empted or killed and requeued resumes where it stopped
# (--resume keeps the candidates already in its file).
#
#   sbatch scenarios/plan-gpt2xl.slurm.sh                  # 3 tasks: --array=0-2 below
#   collsim plan merge results-0.jsonl results-1.jsonl results-2.jsonl
#
# --shard auto reads SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT, so
# changing --array is all it takes to use more or fewer tasks. collsim must be on PATH
# (cargo install --path . in the repository).
#SBATCH --job-name=collsim-plan
#SBATCH --array=0-2
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
#SBATCH --requeue
#SBATCH --output=collsim-plan-%A_%a.log
set -euo pipefail
PLAN=${PLAN:-scenarios/plan-gpt2xl.toml}
export RAYON_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
collsim plan "$PLAN" --shard auto --resume -o "results-${SLURM_ARRAY_TASK_ID}.jsonl"
