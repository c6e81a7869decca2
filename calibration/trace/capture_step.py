#!/usr/bin/env python3
"""Captures PyTorch profiler (Kineto) traces and step times of a small GPT on one GPU.

`python3 capture_step.py OUT [TASKS]` writes under OUT, for each task of the comma-separated
TASKS (default `ddp,fsdp,grid`):

* `ddp`, `fsdp`: `kineto-ddp.json`, `kineto-fsdp.json`, one profiled training step (shapes
  and CUDA sync events recorded) of a GPT of 12 layers, 768 wide, 12 heads, 8 x 1,024 tokens,
  under DistributedDataParallel (bf16 autocast, 25 MB buckets, fused AdamW) or FSDP2
  (`fully_shard` per block, bf16 parameters, fp32 reduction, foreach AdamW);
* `ddp-light`: the DDP step profiled without shapes or sync events (`kineto-ddp-light.json`);
* `ddp-h2048`: a 24-layer, 2,048-wide, 16-head GPT's DDP step (`kineto-ddp-h2048.json`);
* `hooks`: DDP steps of the 2,048-wide and the small GPT under each of PyTorch's DDP
  communication hooks (none, fp16, bf16, PowerSGD and batched PowerSGD at rank 4), without
  the profiler;
* `grid`: step times of 24-layer GPTs (1,024 and 2,048 wide, 1,024 and 2,048 tokens, 1-8
  samples) under DDP, without the profiler;

and, always, `steps.csv` (each task's step timed with CUDA events without the profiler:
median and minimum) and `env.json` (versions, the GPU). Each process group is NCCL over the
GPUs there are: run it as `torchrun --nproc-per-node N capture_step.py OUT` or, on one GPU,
plainly. Every model and step is this file's own; nothing is downloaded.
"""

import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
VOCAB = 50304
DEADLINE = time.time() + float(os.environ.get("CAPTURE_SECONDS", "240"))


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.out = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, h)
        self.pos = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(h)
        self.head = nn.Linear(h, VOCAB, bias=False)

    def forward(self, idx, target):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, VOCAB).float(), target.view(-1))


def hook(model, name):
    """Registers DDP's communication hook `name` (PyTorch's own) on `model`."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    if name == "fp16":
        model.register_comm_hook(None, dh.fp16_compress_hook)
    elif name == "bf16":
        model.register_comm_hook(None, dh.bf16_compress_hook)
    elif name in ("powersgd", "batched_powersgd"):
        # Compressing from the second step: the timed steps all compress.
        state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=4,
                                 start_powerSGD_iter=2)
        fn = ps.powerSGD_hook if name == "powersgd" else ps.batched_powerSGD_hook
        model.register_comm_hook(state, fn)


def build(kind, layers, h, heads, seq):
    dev = torch.device("cuda", torch.cuda.current_device())
    model = Gpt(layers, h, heads, seq).to(dev)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[dev.index], bucket_cap_mb=25)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for b in model.blocks:
            fully_shard(b, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    # Fused AdamW for DDP's plain tensors; FSDP's sharded parameters take the foreach one.
    fused = {"fused": True} if kind == "ddp" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    return model, opt


def step(model, opt, batch, kind):
    idx, target = batch
    if kind == "ddp":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, target)
    else:
        loss = model(idx, target)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def batch_of(micro, seq):
    g = torch.Generator(device="cuda").manual_seed(1 + dist.get_rank())
    idx = torch.randint(0, VOCAB, (micro, seq), device="cuda", generator=g)
    return idx, torch.roll(idx, -1, dims=1)


def time_steps(model, opt, batch, kind, warmup=3, timed=10):
    for _ in range(warmup):
        step(model, opt, batch, kind)
    torch.cuda.synchronize()
    times = []
    for _ in range(timed):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step(model, opt, batch, kind)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return times


def profile(model, opt, batch, kind, path, light=False):
    """One step under the profiler; `light` leaves out the shapes and the CUDA sync events."""
    from torch.profiler import ProfilerActivity, profile, schedule

    kw = {}
    if not light:
        try:
            kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True
            )
        except Exception as e:  # older PyTorch: no sync events
            print(f"no cuda sync events: {e}")
    sched = schedule(wait=1, warmup=2, active=1, repeat=1)
    rank0 = dist.get_rank() == 0

    def ready(p):
        if rank0:
            p.export_chrome_trace(path)

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=sched,
        record_shapes=not light,
        on_trace_ready=ready,
        **kw,
    ) as prof:
        for _ in range(4):
            step(model, opt, batch, kind)
            torch.cuda.synchronize()
            prof.step()
    if rank0:
        summarize(path)


def summarize(path):
    with open(path) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    cats = {}
    for e in ev:
        cats[e.get("cat", "?")] = cats.get(e.get("cat", "?"), 0) + 1
    print(f"{os.path.basename(path)}: {os.path.getsize(path)} bytes, {len(ev)} events {cats}")
    print("  distributedInfo:", t.get("distributedInfo") if isinstance(t, dict) else None)
    comm = [e for e in ev if "Collective name" in e.get("args", {})]
    print(f"  events with comm args: {len(comm)}")
    for e in comm[:4]:
        print("   ", e.get("cat"), e.get("name"), json.dumps(e.get("args"))[:400])
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    names = {}
    for e in gpu:
        n = e.get("name", "")[:60]
        if "nccl" in n.lower() or "Memcpy" in n or "oneRank" in n:
            names[n] = names.get(n, 0) + 1
    print(f"  GPU events: {len(gpu)}; nccl/memcpy names: {names}")
    streams = {}
    for e in gpu:
        s = e.get("args", {}).get("stream")
        streams[s] = streams.get(s, 0) + 1
    print(f"  GPU events by stream: {streams}")
    comm_names = {}
    for e in ev:
        n = e.get("name", "")
        if any(k in n for k in ("nccl", "c10d", "record_param", "Wait", "wait", "Sync")):
            key = f'{e.get("cat")}:{e.get("ph")}:{n[:50]}'
            comm_names[key] = comm_names.get(key, 0) + 1
    print(f"  comm/sync names: {comm_names}")
    sync = [e for e in ev if e.get("cat") == "cuda_sync"]
    print(f"  cuda_sync events: {len(sync)}")
    for e in sync[:3]:
        print("   ", e.get("name"), json.dumps(e.get("args"))[:300])
    if gpu:
        t0 = min(e["ts"] for e in gpu)
        t1 = max(e["ts"] + e["dur"] for e in gpu)
        busy = sum(e["dur"] for e in gpu)
        print(f"  GPU span {(t1 - t0) / 1e3:.3f} ms, busy {busy / 1e3:.3f} ms")


def main():
    if not torch.cuda.is_available():
        print("capture_step.py: no CUDA GPU here; nothing captured")
        return 1
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "RANK" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(OUT, exist_ok=True)
    if rank == 0:
        env = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "gpu": torch.cuda.get_device_name(),
            "multiprocessors": torch.cuda.get_device_properties(0).multi_processor_count,
            "world_size": world,
            "python": sys.version.split()[0],
        }
        with open(os.path.join(OUT, "env.json"), "w") as f:
            json.dump(env, f, indent=1)
        print(env)
    rows = []

    def record(kind, layers, h, heads, seq, micro, times):
        med = statistics.median(times)
        rows.append((kind, world, layers, h, heads, seq, micro, len(times), med, min(times)))
        if rank == 0:
            print(f"{kind} L{layers} h{h} a{heads} s{seq} mb{micro}: median {med:.2f} ms "
                  f"min {min(times):.2f} ms")

    tasks = sys.argv[2].split(",") if len(sys.argv) > 2 else ["ddp", "fsdp", "grid"]
    # The small GPT, profiled; "ddp-light" profiles it without shapes and sync events, and
    # "ddp-h2048" profiles a 24-layer, 2,048-wide one whose step the GPU bounds.
    shapes = {"ddp": (12, 768, 12, 1024, 8), "fsdp": (12, 768, 12, 1024, 8),
              "ddp-h2048": (24, 2048, 16, 1024, 8)}
    for task in tasks:
        if task in ("grid", "hooks"):
            continue
        kind = "fsdp" if task == "fsdp" else "ddp"
        try:
            layers, h, heads, seq, micro = shapes.get(task, shapes["ddp"])
            torch.manual_seed(0)
            model, opt = build(kind, layers, h, heads, seq)
            b = batch_of(micro, seq)
            record(task, layers, h, heads, seq, micro, time_steps(model, opt, b, kind, 5, 20))
            path = os.path.join(OUT, f"kineto-{task}.json")
            profile(model, opt, b, kind, path, light=task == "ddp-light")
            del model, opt
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()

    # "hooks": DDP's step under each communication hook, the 2,048-wide GPT and the small one.
    for name in ("none", "fp16", "bf16", "powersgd", "batched_powersgd") if "hooks" in tasks else []:
        for layers, h, heads, seq, micro in ((24, 2048, 16, 1024, 8), (12, 768, 12, 1024, 8)):
            try:
                torch.manual_seed(0)
                model, opt = build("ddp", layers, h, heads, seq)
                hook(model, name)
                record(f"ddp-{name}", layers, h, heads, seq, micro,
                       time_steps(model, opt, batch_of(micro, seq), "ddp", 5, 10))
                del model, opt
                torch.cuda.empty_cache()
            except Exception:
                traceback.print_exc()

    grid = [(l, h, a, s, m) for (l, h, a) in ((24, 1024, 16), (24, 2048, 16))
            for s in (1024, 2048) for m in (1, 2, 4, 8)]
    for layers, h, heads, seq, micro in grid if "grid" in tasks else []:
        if time.time() > DEADLINE:
            print("deadline: grid cut short")
            break
        try:
            torch.manual_seed(0)
            model, opt = build("ddp", layers, h, heads, seq)
            record("ddp", layers, h, heads, seq, micro,
                   time_steps(model, opt, batch_of(micro, seq), "ddp"))
            del model, opt
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()
    if rank == 0:
        with open(os.path.join(OUT, "steps.csv"), "w") as f:
            f.write("parallel,gpus,layers,hidden,heads,seq,micro_batch,steps,median_ms,min_ms\n")
            for r in rows:
                f.write(",".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in r) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
