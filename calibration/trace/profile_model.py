#!/usr/bin/env python3
"""Profiles one training step of any model you can build, on one GPU, for `collsim profile`.

    python3 profile_model.py OUT --hf-config config.json --batch 8 --seq 1024
    python3 profile_model.py OUT --factory mypackage.models:build --batch 8 --seq 1024
    python3 profile_model.py OUT --torchvision resnet50 --batch 64 --image 224

The model is built with random weights and nothing is downloaded:

* `--hf-config FILE`: a Hugging Face `config.json` (any `AutoModelForCausalLM` architecture,
  or `--hf-class` to name another `transformers` class), built with `from_config`;
* `--factory MODULE:FUNCTION`: your own code, called as `FUNCTION(**json.loads(--factory-args))`,
  returning a `torch.nn.Module` (its directory must be importable: `PYTHONPATH=...`);
* `--torchvision NAME`: a `torchvision.models` constructor (`weights=None`).

Inputs are random: token ids `[batch, seq]` below the model's `config.vocab_size` (or `--vocab`)
for language models, images `[batch, 3, image, image]` and labels below `--classes` for
`--torchvision` or `--image`. The loss is the model's own (`outputs.loss`, with `labels` the
token ids, as HF's causal LMs shift them) or, where the output is logits, cross entropy.

The step is what a user's DDP step is on one rank: `DistributedDataParallel` on an NCCL group of
this one GPU (25 MB buckets unless `--bucket-mb`), bf16 autocast (`--dtype fp16|fp32`), fused
AdamW, `--checkpointing` checkpointing each block (a Hugging Face model through its own
`gradient_checkpointing_enable`, any other by wrapping each child of its largest
`nn.ModuleList` in non-reentrant `torch.utils.checkpoint`). After `--warmup` steps, one step is profiled (CPU and
CUDA, `record_shapes=True`) and `--steps` more are timed with CUDA events without the profiler.

Writes under OUT:
* `trace.json.gz`: the profiled step, for `collsim profile OUT/trace.json.gz -o model.toml`;
* `memory-snapshot.pickle`: the allocator's history over the profiled step
  (`torch.cuda.memory._dump_snapshot`; view it at https://pytorch.org/memory_viz), unless
  `--no-snapshot`;
* `steps.csv`: the unprofiled steps' median and minimum (ms) with the shape, and the
  allocator's figures in bytes: `torch.cuda.memory_allocated` at a step's start and at its
  forward's end, `max_memory_allocated` over forward and backward (and warm-up) and over the
  optimizer step, `max_memory_reserved` (`collsim profile OUT/trace.json.gz --memory
  OUT/steps.csv` reads them, so that a plan can tell where the model fits);
* `step-times.csv`: every unprofiled step's time (ms), in order, for the spread of steps;
* `env.json`: PyTorch, CUDA, NCCL, the GPU, and this command line.

It takes a few minutes at most: a model that does not fit fails at its first step, with the
allocator's message in `error.txt`.
"""

import argparse
import contextlib
import gzip
import importlib
import json
import os
import shutil
import statistics
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf-config", help="a Hugging Face config.json")
    src.add_argument("--factory", help="MODULE:FUNCTION returning an nn.Module")
    src.add_argument("--torchvision", help="a torchvision.models constructor name")
    p.add_argument("--hf-class", default="AutoModelForCausalLM", help="transformers class")
    p.add_argument("--factory-args", default="{}", help="JSON keyword arguments of --factory")
    p.add_argument("--batch", type=int, required=True, help="samples per micro-batch")
    p.add_argument("--seq", type=int, help="tokens per sample (language models)")
    p.add_argument("--vocab", type=int, help="token ids below this (else config.vocab_size)")
    p.add_argument("--image", type=int, help="image side (vision models)")
    p.add_argument("--classes", type=int, default=1000, help="labels below this (vision)")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--no-snapshot", action="store_true", help="skip the allocator's history (faster)"
    )
    a = p.parse_args()
    if a.torchvision and not a.image:
        a.image = 224
    if not a.image and not a.seq:
        p.error("give --seq for a language model or --image for a vision model")
    if a.warmup < 1 or a.steps < 1:
        # The first step allocates the optimizer's state: measured before it, the step's
        # memory would leave the state out.
        p.error("--warmup and --steps must be 1 or more")
    return a


def build(a):
    if a.hf_config:
        import transformers

        # A local file: nothing is downloaded.
        config = transformers.AutoConfig.from_pretrained(a.hf_config)
        cls = getattr(transformers, a.hf_class)
        # The Auto classes build from a config with from_config, the model classes themselves
        # (GPT2LMHeadModel, BertForMaskedLM) by calling them.
        return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    if a.torchvision:
        import torchvision

        return getattr(torchvision.models, a.torchvision)(weights=None)
    module, _, function = a.factory.partition(":")
    if not function:
        raise SystemExit(f"--factory {a.factory}: give MODULE:FUNCTION")
    return getattr(importlib.import_module(module), function)(**json.loads(a.factory_args))


def checkpoint_blocks(model):
    """Checkpoints each block: a Hugging Face model its own way, any other by wrapping each
    child of its largest ModuleList in non-reentrant activation checkpointing."""
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return sum(1 for m in model.modules() if getattr(m, "gradient_checkpointing", False))
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise SystemExit("--checkpointing: the model has no nn.ModuleList of blocks")
    blocks = max(lists, key=len)
    for i, block in enumerate(blocks):

        class Checkpointed(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args, **kwargs):
                return torch.utils.checkpoint.checkpoint(
                    self.inner, *args, use_reentrant=False, **kwargs
                )

        blocks[i] = Checkpointed(block)
    return len(blocks)


def main():
    a = parse()
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    # Built on the GPU: a billion random weights initialise in seconds there, minutes on a CPU.
    with dev:
        model = build(a)
    model = model.to(dev)
    blocks = checkpoint_blocks(model) if a.checkpointing else 0
    params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[a.dtype]
    scaler = torch.amp.GradScaler("cuda") if a.dtype == "fp16" else None
    vocab = a.vocab or getattr(getattr(model, "config", None), "vocab_size", None)
    if a.seq and not a.image and not vocab:
        raise SystemExit("the model has no config.vocab_size: give --vocab")

    def batch():
        if a.image:
            x = torch.randn(a.batch, 3, a.image, a.image, device=dev)
            return x, torch.randint(0, a.classes, (a.batch,), device=dev)
        ids = torch.randint(0, vocab, (a.batch, a.seq), device=dev)
        return ids, ids

    def forward(x, y):
        """The loss, and the model's output, which a user's loop holds through backward."""
        ctx = torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()
        out = None
        with ctx:
            if a.image:
                loss = F.cross_entropy(ddp(x).float(), y)
            else:
                try:
                    out = ddp(x, labels=y)
                except TypeError:
                    out = ddp(x)
                loss = getattr(out, "loss", None)
                if loss is None:
                    logits = out.logits if hasattr(out, "logits") else out
                    loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
        return loss, out

    def update(loss):
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    def step(x, y):
        loss, out = forward(x, y)
        update(loss)
        del out

    def measured_step(x, y):
        """One step, with what the allocator holds at its start and at its forward's end, and
        its peaks over forward and backward and over the optimizer step."""
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        loss, out = forward(x, y)
        fwd = torch.cuda.memory_allocated()
        if scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        # The output (HF's logits) is held through the optimizer step, as in step().
        del loss, out
        return start, fwd, peak, torch.cuda.max_memory_allocated()

    x, y = batch()
    try:
        for _ in range(a.warmup):
            step(x, y)
        torch.cuda.synchronize()
        allocated = torch.cuda.max_memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        start_alloc, forward_alloc, step_peak, optimizer_peak = measured_step(x, y)
    except torch.cuda.OutOfMemoryError:
        with open(os.path.join(a.out, "error.txt"), "w") as f:
            f.write(traceback.format_exc())
        print("out of memory at the first steps: see error.txt", file=sys.stderr)
        return 1
    allocated = max(allocated, step_peak)
    reserved = max(reserved, torch.cuda.max_memory_reserved())

    # The profiled step, with the allocator's history.
    if not a.no_snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        with torch.profiler.record_function("ProfilerStep#0"):
            step(x, y)
        torch.cuda.synchronize()
    if not a.no_snapshot:
        torch.cuda.memory._dump_snapshot(os.path.join(a.out, "memory-snapshot.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    raw = os.path.join(a.out, "trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)

    # Unprofiled steps, timed with CUDA events.
    times = []
    for _ in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(x, y)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    with open(os.path.join(a.out, "steps.csv"), "w") as f:
        f.write(
            "batch,seq,image,params,median_ms,min_ms,start_allocated,forward_allocated,"
            "max_allocated,optimizer_max_allocated,max_reserved\n"
        )
        f.write(
            f"{a.batch},{a.seq or ''},{a.image or ''},{params},{statistics.median(times):.3f},"
            f"{min(times):.3f},{start_alloc},{forward_alloc},{allocated},{optimizer_peak},"
            f"{reserved}\n"
        )
    # Every timed step in order, for the spread of steps (the median hides it).
    with open(os.path.join(a.out, "step-times.csv"), "w") as f:
        f.write("step,ms\n")
        f.writelines(f"{i},{t:.3f}\n" for i, t in enumerate(times))
    props = torch.cuda.get_device_properties(dev)
    env = {
        "argv": sys.argv,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "gpu": props.name,
        "memory": props.total_memory,
        "checkpointed_blocks": blocks,
    }
    with open(os.path.join(a.out, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    print(
        f"{params / 1e6:.1f} M parameters; step {statistics.median(times):.2f} ms median; "
        f"{allocated / 2**30:.2f} GiB allocated, {reserved / 2**30:.2f} GiB reserved; "
        f"trace {raw}.gz"
    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
