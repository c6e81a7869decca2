#!/usr/bin/env bash
# Captures one training step of each model below with profile_model.py, on one GPU, inside a
# time budget, and packs what it wrote for the trip back from a lent machine.
#
#   calibration/trace/capture_models.sh WORKDIR BUDGET_S [PACK_DIR]
#
# Runs the captures in order (most wanted first), each under `timeout 100`, and starts none
# after BUDGET_S seconds. Each capture's folder gets profile_model.py's files and its log;
# WORKDIR/summary.csv has one row per capture (name, exit status, wall seconds). With
# PACK_DIR, the folders are packed as a tar split into 15 MiB parts there, with summary.csv
# beside them (unpack with `cat captures.tar.part-* | tar x`).
set -u
work=$1 budget=$2 pack=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
cfg=$here/configs
mkdir -p "$work"
start=$(date +%s)
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem,memory.total --format=csv
  python3 -m pip list 2>/dev/null | grep -iE '^(torch|torchvision|transformers|triton|nvidia-nccl-cu13|nvidia-cudnn-cu13|nvidia-cublas) '
  python3 --version
  nproc
} >"$work/machine.txt" 2>&1
echo "name,status,wall_s" >"$work/summary.csv"

capture() {
  local name=$1; shift
  local now=$(($(date +%s) - start))
  if ((now > budget)); then
    echo "$name,skipped (budget),0" >>"$work/summary.csv"
    return
  fi
  mkdir -p "$work/$name"
  local t0=$(date +%s)
  timeout 100 python3 "$here/profile_model.py" "$work/$name" --steps 20 "$@" >"$work/$name/log.txt" 2>&1
  local rc=$?
  echo "$name,$rc,$(($(date +%s) - t0))" >>"$work/summary.csv"
  echo "$name rc=$rc $(tail -1 "$work/$name/log.txt")"
}

export PYTHONUNBUFFERED=1
capture gpt2-xl-b8 --hf-config "$cfg/gpt2-xl.json" --batch 8 --seq 1024
capture gpt2-xl-b4 --hf-config "$cfg/gpt2-xl.json" --batch 4 --seq 1024 --no-snapshot
capture llama1b-b4-s2048 --hf-config "$cfg/llama-3.2-1b.json" --batch 4 --seq 2048 --no-snapshot
capture llama1b-b8-s1024 --hf-config "$cfg/llama-3.2-1b.json" --batch 8 --seq 1024 --no-snapshot
capture bert-large-b32 --hf-config "$cfg/bert-large.json" --hf-class AutoModelForMaskedLM --batch 32 --seq 512 --no-snapshot
capture resnet50-b128 --torchvision resnet50 --batch 128 --no-snapshot
capture mixtral-small-b4 --hf-config "$cfg/mixtral-small.json" --batch 4 --seq 2048 --no-snapshot
capture llama1b-b4-s2048-ckpt --hf-config "$cfg/llama-3.2-1b.json" --batch 4 --seq 2048 --checkpointing --no-snapshot
capture gpt2-b8 --hf-config "$cfg/gpt2.json" --batch 8 --seq 1024 --no-snapshot
capture gpt2-medium-b8 --hf-config "$cfg/gpt2-medium.json" --batch 8 --seq 1024 --no-snapshot
capture resnet50-b32 --torchvision resnet50 --batch 32 --no-snapshot
capture gpt2-xl-b8-ckpt --hf-config "$cfg/gpt2-xl.json" --batch 8 --seq 1024 --checkpointing --no-snapshot
capture bert-large-b8 --hf-config "$cfg/bert-large.json" --hf-class AutoModelForMaskedLM --batch 8 --seq 512 --no-snapshot

if [ -n "$pack" ]; then
  mkdir -p "$pack"
  # The allocator's history is large: kept gzipped, and only where it stays under 12 MiB.
  for f in "$work"/*/memory-snapshot.pickle; do
    [ -f "$f" ] || continue
    gzip -f "$f"
    if (($(stat -c %s "$f.gz") > 12582912)); then rm -f "$f.gz"; echo "dropped $f.gz (over 12 MiB)"; fi
  done
  cp "$work/summary.csv" "$pack/"
  tar cf - -C "$work" . | split -b 15m - "$pack/captures.tar.part-"
  ls -l "$pack"
fi
