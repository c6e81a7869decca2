#!/usr/bin/env bash
# Installs a CUDA compiler, runtime headers, CCCL and NCCL from PyPI wheels into $TOOLCHAIN
# (default: .toolchain/ beside this script): enough to build collsim-bench on a machine without a
# GPU or a CUDA install. Versions are pinned so that every build compiles against the same
# headers; a folder that already holds them is kept as it is.
set -euo pipefail
cd "$(dirname "$0")"
dest="${TOOLCHAIN:-.toolchain}"
if [ -x "$dest"/nvidia/cu13/bin/nvcc ] && [ -f "$dest"/nvidia/nccl/include/nccl.h ]; then
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
  --root-user-action=ignore \
  --target "$dest" \
  "nvidia-cuda-nvcc==13.5.37" "nvidia-cuda-runtime==13.5.37" "nvidia-cuda-cccl==13.3.5.0.6" \
  "nvidia-nccl-cu13==2.32.3"
