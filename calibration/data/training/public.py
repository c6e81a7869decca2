#!/usr/bin/env python3
"""Writes public.csv, the training runs `collsim validate --runs` replays, from the project's
shared developer set (../shared/data/training/public/) and this folder's transcriptions.

Run from this folder: python3 public.py [SHARED_DIR] > public.csv. Nothing is fitted or
adjusted; each row's `provenance` names the file, commit and row it comes from, and its
`note` says what was inferred rather than published.
"""

import csv
import sys

SHARED = sys.argv[1] if len(sys.argv) > 1 else "../../../../shared/data/training/public"

# The columns `collsim validate --runs` reads besides the scenario keys.
META = ["source", "series", "run", "step_s", "provenance", "note"]
KEYS = [
    "cluster.topology", "cluster.nodes",
    "workload.kind", "workload.model", "workload.sequence", "workload.micro_batch",
    "workload.grad_accumulation", "workload.precision", "workload.optimizer",
    "workload.activation_checkpointing", "workload.checkpoint_every",
    "workload.model.family", "workload.model.implementation", "workload.model.layers",
    "workload.model.hidden", "workload.model.heads", "workload.model.kv_heads",
    "workload.model.ffn", "workload.model.vocab", "workload.model.activation",
    "workload.model.bias", "workload.model.position", "workload.model.tied",
    "workload.model.dropout",
    "workload.parallel.tp", "workload.parallel.pp", "workload.parallel.cp",
    "workload.parallel.virtual_stages", "workload.parallel.sequence_parallel",
    "workload.parallel.tp_comm_overlap", "workload.parallel.distributed_optimizer",
    "workload.parallel.overlap_param_gather",
    "workload.fsdp.sharding_strategy", "workload.fsdp.param_dtype", "workload.fsdp.reduce_dtype",
]

# Megatron model shapes. Nemotron-4 15B, GPT-3 175B, Llama 3.1 8B and 70B as dgxc_megatron.csv
# writes them (its first line gives their sources); Nemotron-4 340B from its technical report
# (arXiv 2406.11704, table 1: 96 layers, hidden 18,432, 96 heads, 8 KV heads, sequence 4,096,
# 256,000-token vocabulary, squared-ReLU MLP of 73,728, RoPE, untied embeddings, no bias).
SHAPES = {
    "nemotron-4-15b": dict(family="gpt", layers=32, hidden=6144, heads=48, kv_heads=8,
                           ffn=24576, vocab=256000, activation="gelu", bias="false",
                           position="rope_fused", tied="false", seq=4096),
    "nemotron-4-340b": dict(family="gpt", layers=96, hidden=18432, heads=96, kv_heads=8,
                            ffn=73728, vocab=256000, activation="gelu", bias="false",
                            position="rope_fused", tied="false", seq=4096),
    "gpt3-175b": dict(family="gpt", layers=96, hidden=12288, heads=96, kv_heads=96,
                      ffn=49152, vocab=50257, activation="gelu", bias="true",
                      position="learned", tied="true", seq=2048),
    "llama-3.1-8b": dict(family="llama", layers=32, hidden=4096, heads=32, kv_heads=8,
                         ffn=14336, vocab=128256, activation="swiglu", bias="false",
                         position="rope_fused", tied="false", seq=8192),
    "llama-3.1-70b": dict(family="llama", layers=80, hidden=8192, heads=64, kv_heads=8,
                          ffn=28672, vocab=128256, activation="swiglu", bias="false",
                          position="rope_fused", tied="false", seq=8192),
}


def megatron(shape, gpus, tp, pp, cp, vp, mbs, accumulation, precision, seq=None):
    """A NeMo/Megatron-Core step as NeMo's performance recipes run it."""
    s = SHAPES[shape]
    row = {
        "cluster.topology": "dgx-h100", "cluster.nodes": gpus // 8, "workload.kind": "ddp",
        "workload.sequence": seq or s["seq"], "workload.micro_batch": mbs,
        "workload.grad_accumulation": accumulation, "workload.precision": precision,
        "workload.optimizer": "adam", "workload.model.implementation": "megatron",
        "workload.model.dropout": "false",
        "workload.parallel.tp": tp, "workload.parallel.pp": pp, "workload.parallel.cp": cp,
        "workload.parallel.virtual_stages": vp, "workload.parallel.sequence_parallel": "true",
        "workload.parallel.tp_comm_overlap": "true",
        "workload.parallel.distributed_optimizer": "true",
        "workload.parallel.overlap_param_gather": "true",
    }
    for k in ["family", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "activation",
              "bias", "position", "tied"]:
        row[f"workload.model.{k}"] = s[k]
    return row


def rows_of(path):
    with open(path, newline="") as f:
        lines = [l for l in f if not l.startswith("#")]
    return list(csv.DictReader(lines))


def dgxc():
    """NVIDIA DGX Cloud benchmarking: NeMo weak-scaling series on EOS (DGX H100)."""
    # (README, shape, layout (tp, pp, cp, vp, mbs, accumulation)), read from each table's
    # configuration; the global batch grows with the GPUs (accumulation fixed).
    tables = [
        ("nemotron/README_15b.md", "Nemotron4 15b 24.11", "nemotron-4-15b", (4, 1, 1, 1, 4, 4)),
        ("nemotron/README_340b.md", "Nemotron4 340b 24.11", "nemotron-4-340b",
         (8, 8, 1, 12, 1, 16)),
        ("nemo_megatron/README_175b.md", "NeMo Megatron 24.11", "gpt3-175b", (4, 8, 1, 12, 1, 64)),
        ("llama3.1/README_8b.md", "Llama 3.1 8b 24.09", "llama-3.1-8b", (1, 1, 2, 1, 1, 32)),
        ("llama3.1/README_70b.md", "Llama 3.1 70b 24.09", "llama-3.1-70b", (4, 4, 2, 5, 1, 64)),
    ]
    commit = "35a9aecc8d5b17d99d80f52f38c75ade0dbab7ae"
    src = rows_of(f"{SHARED}/nvidia_dgxc_benchmarking_scaling_tables.csv")
    out = []
    for readme, prefix, shape, (tp, pp, cp, vp, mbs, acc) in tables:
        for precision in ["bf16", "fp8"]:
            series = [r for r in src if r["file"] == readme and r["commit"] == commit
                      and r["config"].startswith(f"{prefix} {precision.upper()}")]
            assert series, (readme, precision)
            for r in sorted(series, key=lambda r: int(r["n_gpus"])):
                gpus = int(r["n_gpus"])
                step = float(r["Training step time (seconds per step)"])
                dp = gpus // (tp * pp * cp)
                seq = SHAPES[shape]["seq"]
                # The published throughput is the global batch's tokens over the step.
                tokens = float(r["Throughput in tokens per second"]) * step
                assert abs(tokens / (acc * mbs * dp * seq) - 1) < 0.01, (r, tokens)
                row = megatron(shape, gpus, tp, pp, cp, vp, mbs, acc, precision)
                row.update({
                    "source": "dgxc",
                    "series": f"dgxc {shape} {precision}",
                    "run": f"{r['config']} on {gpus} GPUs",
                    "step_s": r["Training step time (seconds per step)"],
                    "provenance": f"github.com/NVIDIA/dgxc-benchmarking {readme} @ {commit}, "
                                  f"{gpus} GPUs (nvidia_dgxc_benchmarking_scaling_tables.csv)",
                    "note": "",
                })
                out.append(row)
    return out


def mlperf():
    """MLPerf Training GPT-3 175B on EOS, the rounds whose layouts name their virtual stages."""
    src = rows_of(f"{SHARED}/mlperf_training_llm_summary.csv")
    out = []
    seen = set()
    for r in src:
        if r["benchmark"] != "gpt3" or r["submitter"] != "NVIDIA" or "H100" not in r["accelerator"]:
            continue
        if r["system"] in seen:
            continue  # v4.1 lists v4.0's 11,616-GPU result again
        seen.add(r["system"])
        cfg = dict(kv.split("=") for kv in r["parallel_cfg"].split(" | ")[0].split())
        if not cfg.get("VPP"):
            # v3.0/v3.1 leave the interleaving unsaid, and their step at 8 micro-batches a
            # pipeline of 8 (10,752 GPUs) is far shorter than 1F1B's bubble allows: not replayed.
            continue
        gpus = int(r["n_acc"])
        tp, pp, vp, mbs = (int(cfg[k]) for k in ["TP", "PP", "VPP", "MBS"])
        dp = gpus // (tp * pp)
        gbs = int(r["gbs"])
        acc = gbs // (mbs * dp)
        assert acc * mbs * dp == gbs, r
        software = r["system"].split("_")[-2]
        row = megatron("gpt3-175b", gpus, tp, pp, 1, vp, mbs, acc, "fp8", seq=int(r["seq_len"]))
        row.update({
            "source": "mlperf",
            "series": f"mlperf gpt3-175b eos {software}",
            "run": f"MLPerf v{r['version']} {r['system']} ({gpus} GPUs, GBS {gbs})",
            "step_s": r["step_time_s"],
            "provenance": f"github.com/mlcommons/training_results_v{r['version']} "
                          f"{r['result_dir']} @ {r['commit']} (mlperf_training_llm_summary.csv)",
            "note": "fp8 inferred: the precision is not in the transcription; 8.4e2 tokens/s a "
                    "GPU is 1.8x NeMo's BF16 GPT-3 recipe on the same GPUs and NVIDIA's GPT-3 "
                    "submissions run Transformer Engine's FP8; step "
                    + r["step_time_source"].split(" ")[0],
        })
        out.append(row)
    return out


def torchtitan():
    """torchtitan FSDP steps without torch.compile or Float8 (collsim models neither)."""
    out = []
    # The six of torchtitan_fsdp.csv (this folder), and table 3 of the H100 benchmark:
    # FSDP over 128 GPUs of Llama 3.1 8B with the same settings as its 8-GPU row.
    rows = rows_of("torchtitan_fsdp.csv")
    rows.append(dict(table="h100", model="llama-3-8b", gpus="128", local_batch="2", seq="8192",
                     ac="selective op", checkpoint_every="2", tokens_per_gpu_s="5605",
                     step_s=f"{2 * 8192 / 5605:.4f}"))
    for r in rows:
        gpus = int(r["gpus"])
        h100 = r["table"] == "h100"
        row = {
            "cluster.topology": "dgx-h100" if h100 else "dgx-a100", "cluster.nodes": gpus // 8,
            "workload.kind": "fsdp", "workload.model": r["model"], "workload.sequence": r["seq"],
            "workload.micro_batch": r["local_batch"], "workload.precision": "bf16",
            "workload.optimizer": "adamw",
            "workload.fsdp.sharding_strategy": "FULL_SHARD", "workload.fsdp.param_dtype": "bfloat16",
            "workload.fsdp.reduce_dtype": "float32",
        }
        if r["checkpoint_every"] != "0":
            row["workload.activation_checkpointing"] = "full"
            row["workload.checkpoint_every"] = r["checkpoint_every"]
        table = ("benchmarks/llama3_h100_202412_torchtitan.md @ "
                 "31a17bfdb70bab6f62a13d21816a5339b911d6e3, table "
                 + ("1" if gpus == 8 else "3") if h100 else
                 "docs/performance.md @ 041336434916bdc0f88c1f89fda176fd3c2092e4")
        row.update({
            "source": "torchtitan",
            "series": "torchtitan llama-3-8b fsdp h100" if h100 else "",
            "run": f"{r['model']} FSDP on {gpus} {'H100' if h100 else 'A100'} "
                   f"(local batch {r['local_batch']}, AC {r['ac']})",
            "step_s": r["step_s"],
            "provenance": f"github.com/pytorch/torchtitan {table} "
                          "(torchtitan_benchmarks.md)",
            "note": "step = local batch x sequence / tokens a GPU a second"
                    + ("; H100 96 GB at 500 W, run on the 700 W dgx-h100 preset" if h100 else ""),
        })
        out.append(row)
    return out


def main():
    rows = dgxc() + mlperf() + torchtitan()
    w = csv.DictWriter(sys.stdout, fieldnames=META + KEYS, lineterminator="\n")
    print("# SOURCE: written by calibration/data/training/public.py from the project's shared "
          "developer set (../shared/data/training/public/: NVIDIA dgxc-benchmarking scaling "
          "tables, MLPerf Training summaries, torchtitan benchmarks) and torchtitan_fsdp.csv; "
          "each row's provenance names its file, commit and row. Columns after `note` are "
          "scenario keys (an empty cell leaves the key unset).")
    w.writeheader()
    for r in rows:
        w.writerow(r)


if __name__ == "__main__":
    main()
