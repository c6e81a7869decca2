#!/usr/bin/env python3
"""Writes step-spread.csv: how much the whole-step times of each MLPerf Training LLM run
spread, from the project's shared developer set (../shared/data/training/public/), for the
default per-rank spread of compute time (`rank_skew_cv`, src/workload/skew.rs).

Run from this folder: python3 step-spread.py [SHARED_DIR] > step-spread.csv. One row per run
with at least 20 logged steps (the first step is already dropped in the source): its median,
10th and 90th percentile step time (Python's statistics.quantiles, n = 10, its default
exclusive method). Nothing is fitted here; collsim's test `rank_skew_default` reads this file
and solves each run's spread for the per-rank one.
"""

import csv
import collections
import statistics
import sys

SHARED = sys.argv[1] if len(sys.argv) > 1 else "../../../../shared/data/training/public"


def rows(name):
    with open(f"{SHARED}/{name}") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


runs = {r["path"]: r for r in rows("mlperf_training_llm_runs.csv")}
steps = collections.defaultdict(list)
for r in rows("mlperf_training_llm_per_step_times.csv"):
    steps[r["path"]].append(float(r["train_step_time_s"]))

out = csv.writer(sys.stdout, lineterminator="\n")
print(
    "# SOURCE: ../shared/data/training/public/mlperf_training_llm_per_step_times.csv and "
    "mlperf_training_llm_runs.csv (github.com/mlcommons/training_results_v3.0..v5.0, commits "
    "per row); written by step-spread.py"
)
out.writerow(["version", "commit", "path", "benchmark", "submitter", "system", "gpus", "steps",
              "median_s", "p10_s", "p90_s"])
for path in sorted(steps):
    v = steps[path]
    r = runs.get(path)
    if r is None or len(v) < 20:
        continue
    q = statistics.quantiles(v, n=10)
    out.writerow([r["version"], r["commit"], path, r["benchmark"], r["submitter"], r["system"],
                  r["n_acc"], len(v), f"{statistics.median(v):.6f}", f"{q[0]:.6f}",
                  f"{q[8]:.6f}"])
