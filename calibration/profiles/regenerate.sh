#!/usr/bin/env bash
# Regenerates the shipped calibrated profiles from the logs they were fitted on (run from the
# repository root). Each is `collsim calibrate`'s stdout; its report (fitted parameters, size
# bands, errors before and after on the fit and held-out logs) goes to stderr.
# tests/it/calibrate.rs reruns the aws-p5 and dgx-h100 commands and compares the bytes.
# dgx-a100 is fitted on one cluster (CRUSOE) for use on others (checked on ALCF Sophia), so it
# keeps the fitted parameters only (--no-correction): CRUSOE's size-band factors doubled the
# held-out error there (7.4 -> 14.4 % median on Sophia's all_reduce).
set -euo pipefail
cd "$(dirname "$0")/../.."
d=calibration/data
cs="cargo run --release --quiet --"
p5_env=(--nccl NCCL_BUFFSIZE=8388608 --nccl NCCL_NVLS_CHUNKSIZE=524288 --nccl NCCL_NVLSTREE_MAX_CHUNKSIZE=524288)

$cs calibrate --from-log $d/H100_2N8G_AR_AWSP5_A.log \
    --check-log $d/H100_2N8G_AR_AWSP5_B.log $d/H100_2N8G_AR_AWSP5_C.log \
    --topology aws-p5 --nodes 2 --gpus-per-node 8 "${p5_env[@]}" > calibration/profiles/aws-p5.toml

$cs calibrate --from-log $d/H100_1N8G_ALL_REDUCE_XXRJUN.log@all_reduce \
    --check-log $d/H100_1N8G_ALL_REDUCE_XXRJUN.log@all_gather $d/H100_1N8G_ALL_REDUCE_XXRJUN.log@reduce_scatter \
    --topology dgx-h100 --nodes 1 --gpus-per-node 8 > calibration/profiles/dgx-h100.toml

$cs calibrate --from-log $d/A100SXM80_2N8G_AR_CRUSOE_DSTACK.log \
    --check-log $d/A100SXM40_2N8G_ALL_REDUCE_SOPHIA.log $d/A100SXM40_2N8G_ALL_GATHER_SOPHIA.log@all_gather \
    --topology dgx-a100 --nodes 2 --gpus-per-node 8 --no-correction > calibration/profiles/dgx-a100.toml

$cs calibrate --from-log $d/H100_2N8G_AR_GCPA3MEGA_ZTAN.log@all_reduce \
    --check-log $d/H100_2N8G_AG_GCPA3MEGA_DSTACK.log@all_gather \
    --topology gcp-a3-megagpu-8g --nodes 2 --gpus-per-node 8 > calibration/profiles/gcp-a3-mega.toml

# The leave-one-cluster-out calibrations `validate --manifest` reads instead of fitting again
# (about four minutes on two cores); the long tier (tests/it/accuracy.rs) makes them again and
# compares the bytes.
rm -rf $d/held-out-fits
$cs validate --manifest $d/manifest.csv --refit --fits-dir $d/held-out-fits > /dev/null
