#!/usr/bin/env python3
"""Times and profiles a Megatron-LM-style GPT training step on one GPU, to split it into the
transformer layers and what lies outside them (embedding, final norm, tied head, Megatron's
vocab-parallel cross entropy, the fp16 optimizer, the per-micro-batch data path).

`python3 megatron_step.py OUT` writes under OUT:

* `steps.csv`: for each shape (layers, hidden, heads, sequence, micro-batch, checkpointing), the
  wall time of one micro-batch's forward and backward with the host syncing at each micro-batch
  boundary as Megatron's `get_batch` does (median of 8), the same without that sync, and the
  optimizer step's wall time (median of 3);
* `profile-*.json.gz`: PyTorch profiler traces of one micro-batch and one optimizer step;
* `profile-summary.txt`: each trace's GPU kernels by total time, and its GPU busy time against
  its span;
* `env.json`: versions and the GPU.

The model follows Megatron-LM's GPT as of the Megatron-DeepSpeed fork (pre-LN blocks in
[s, b, h] layout, fused QKV, CoreAttention without flash attention: baddbmm scores, masked
softmax, dropout, bmm; bias-dropout-add; tanh GELU; tied head; `vocab_parallel_cross_entropy`
on the fp32 logits with its in-place passes; full activation checkpointing one layer a chunk;
fp16 parameters with fp32 master weights, unscale and inf check, gradient clipping and Adam).
It is this file's own re-implementation in plain PyTorch: Megatron's fused softmax and its
TorchScript bias-dropout-add and bias-GELU fusions run here as PyTorch's separate kernels.
"""

import gzip
import json
import math
import os
import shutil
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
VOCAB = 50304  # GPT-2's 50,257 padded to a multiple of 128
DEADLINE = time.time() + float(os.environ.get("CAPTURE_SECONDS", "200"))


class Layer(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.out = nn.Linear(4 * h, h)

    def forward(self, x, mask):
        sq, b, h = x.shape
        n = self.heads
        hn = h // n
        mixed = self.qkv(self.ln1(x)).view(sq, b, n, 3 * hn)
        q, k, v = mixed.split(hn, dim=3)
        q = q.reshape(sq, b * n, hn).transpose(0, 1)
        k = k.reshape(sq, b * n, hn).transpose(0, 1)
        v = v.reshape(sq, b * n, hn).transpose(0, 1)
        buf = torch.empty(b * n, sq, sq, dtype=x.dtype, device=x.device)
        scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(hn))
        probs = torch.softmax(scores.view(b, n, sq, sq).masked_fill(mask, -10000.0), dim=-1)
        probs = F.dropout(probs, 0.1, True)
        ctx = torch.bmm(probs.view(b * n, sq, sq), v)
        ctx = ctx.view(b, n, sq, hn).permute(2, 0, 1, 3).contiguous().view(sq, b, h)
        x = x + F.dropout(F.linear(ctx, self.proj.weight) + self.proj.bias, 0.1, True)
        m = F.gelu(F.linear(self.ln2(x), self.fc.weight) + self.fc.bias, approximate="tanh")
        return x + F.dropout(F.linear(m, self.out.weight) + self.out.bias, 0.1, True)


class VocabCrossEntropy(torch.autograd.Function):
    """Megatron's vocab_parallel_cross_entropy at tensor parallelism 1, pass for pass."""

    @staticmethod
    def forward(ctx, logits, target):
        logits_max = torch.max(logits, dim=-1)[0]
        logits.sub_(logits_max.unsqueeze(dim=-1))
        target_mask = (target < 0) | (target >= logits.size(-1))
        masked = target.clone()
        masked[target_mask] = 0
        logits_2d = logits.view(-1, logits.size(-1))
        masked_1d = masked.view(-1)
        arange_1d = torch.arange(0, logits_2d.size(0), device=logits.device)
        predicted = logits_2d[arange_1d, masked_1d].clone().contiguous().view_as(target)
        predicted[target_mask] = 0.0
        exp_logits = logits
        torch.exp(logits, out=exp_logits)
        sum_exp = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        exp_logits.div_(sum_exp.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_1d = ctx.saved_tensors
        grad_2d = softmax.view(-1, softmax.size(-1))
        arange_1d = torch.arange(0, grad_2d.size(0), device=grad_2d.device)
        grad_2d[arange_1d, masked_1d] -= 1.0 - target_mask.view(-1).float()
        softmax.mul_(grad_output.unsqueeze(dim=-1))
        return softmax, None


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, seq, recompute):
        super().__init__()
        self.recompute = recompute
        self.wte = nn.Embedding(VOCAB, h)
        self.wpe = nn.Embedding(seq, h)
        self.layers = nn.ModuleList(Layer(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, tokens, labels, loss_mask, mask):
        pos = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        x = F.dropout(self.wte(tokens) + self.wpe(pos), 0.1, True)
        x = x.transpose(0, 1).contiguous()
        for layer in self.layers:
            if self.recompute:
                x = checkpoint(layer, x, mask, use_reentrant=True)
            else:
                x = layer(x, mask)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        loss = VocabCrossEntropy.apply(logits.float(), labels.transpose(0, 1).contiguous())
        losses = loss.transpose(0, 1).contiguous().float()
        return torch.sum(losses.view(-1) * loss_mask.view(-1)) / loss_mask.sum()


class Fp16Optimizer:
    """Megatron's Float16OptimizerWithFloat16Params: fp32 master weights, unscale and inf
    check (a host sync), gradient clipping at 1.0 (the norm read on the host), Adam, and the
    master weights copied back to the fp16 model."""

    def __init__(self, model):
        self.params = [p for p in model.parameters()]
        self.master = [p.detach().float().clone().requires_grad_() for p in self.params]
        self.opt = torch.optim.AdamW(self.master, lr=1e-4, weight_decay=0.01, fused=True)
        self.found = torch.zeros(1, device="cuda")
        self.inv_scale = torch.full((1,), 1.0 / 4096.0, device="cuda")

    @torch.no_grad()
    def step(self):
        for m, p in zip(self.master, self.params):
            m.grad = p.grad.float()
        self.found.zero_()
        grads = [m.grad for m in self.master]
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found, self.inv_scale)
        if self.found.item() > 0:
            print("optimizer: inf or nan in the gradients, step skipped", flush=True)
            for p in self.params:
                p.grad = None
            return
        norm = torch.nn.utils.clip_grad_norm_(self.master, 1.0, foreach=True)
        norm.item()
        self.opt.step()
        torch._foreach_copy_(self.params, self.master)
        for p in self.params:
            p.grad = None
        for m in self.master:
            m.grad = None


def get_batch(micro, seq, sync):
    """Megatron's get_batch at tp 1: the tokens come from the host; broadcast_data's sizes
    travel through the GPU and back (`.cpu()`, a host sync) when `sync`."""
    if sync:
        sizes = torch.tensor([micro, seq + 1], device="cuda")
        sizes.cpu()
    data = torch.randint(0, VOCAB, (micro, seq + 1))
    data = data.cuda()
    tokens = data[:, :-1].contiguous()
    labels = data[:, 1:].contiguous()
    loss_mask = torch.ones(tokens.shape, dtype=torch.float, device="cuda")
    mask = torch.tril(torch.ones((1, seq, seq), device="cuda")).view(1, 1, seq, seq) < 0.5
    return tokens, labels, loss_mask, mask


def micro_step(model, micro, seq, sync):
    loss = model(*get_batch(micro, seq, sync))
    (loss * 4096.0).backward()
    return loss


def build(layers, h, heads, seq, recompute):
    torch.manual_seed(0)
    model = Gpt(layers, h, heads, seq, recompute).cuda().half()
    return model, Fp16Optimizer(model)


def wall(fn, n):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def summarize(path, name, f):
    with gzip.open(path, "rt") as g:
        t = json.load(g)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        f.write(f"{name}: no GPU events\n")
        return
    t0 = min(e["ts"] for e in gpu)
    t1 = max(e["ts"] + e["dur"] for e in gpu)
    busy = sum(e["dur"] for e in gpu)
    f.write(f"\n== {name}: {len(gpu)} GPU events, span {(t1 - t0) / 1e3:.3f} ms, "
            f"busy {busy / 1e3:.3f} ms\n")
    by = {}
    for e in gpu:
        k = e.get("name", "?")[:110]
        c, d = by.get(k, (0, 0.0))
        by[k] = (c + 1, d + e["dur"])
    for k, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:45]:
        f.write(f"{d / 1e3:9.3f} ms {c:5d}x  {k}\n")


def profile(model, opt, micro, seq, name, f):
    from torch.profiler import ProfilerActivity, profile, schedule

    path = os.path.join(OUT, f"profile-{name}.json")
    sched = schedule(wait=1, warmup=1, active=1, repeat=1)

    def ready(p):
        p.export_chrome_trace(path)

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 on_trace_ready=ready) as prof:
        for _ in range(3):
            micro_step(model, micro, seq, True)
            opt.step()
            torch.cuda.synchronize()
            prof.step()
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    summarize(path + ".gz", name, f)


def main():
    if not torch.cuda.is_available():
        print("megatron_step.py: no CUDA GPU here; nothing measured")
        return 1
    os.makedirs(OUT, exist_ok=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name(),
           "multiprocessors": torch.cuda.get_device_properties(0).multi_processor_count,
           "python": sys.version.split()[0]}
    with open(os.path.join(OUT, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    print(env, flush=True)
    rows = []
    csv = open(os.path.join(OUT, "steps.csv"), "w")
    csv.write("layers,hidden,heads,seq,micro_batch,recompute,micro_sync_ms,micro_nosync_ms,"
              "optimizer_ms,peak_gib\n")
    shapes = [(l, 1024, 16, 1024, m, True) for m in (1, 2, 4, 8) for l in (0, 12, 24)]
    shapes += [(l, 2048, 16, 1024, m, True) for m in (1, 4) for l in (0, 24)]
    shapes += [(24, 1024, 16, 1024, 4, False), (0, 1024, 16, 2048, 4, True),
               (24, 1024, 16, 2048, 4, True)]
    for layers, h, heads, seq, micro, rc in shapes:
        if time.time() > DEADLINE:
            print("deadline: shapes cut short", flush=True)
            break
        try:
            model, opt = build(layers, h, heads, seq, rc)
            torch.cuda.reset_peak_memory_stats()
            for _ in range(2):
                micro_step(model, micro, seq, True)
                opt.step()
            sync = wall(lambda: micro_step(model, micro, seq, True), 8)
            nosync = wall(lambda: micro_step(model, micro, seq, False), 8)
            optim = []
            for _ in range(3):
                micro_step(model, micro, seq, False)
                optim += wall(opt.step, 1)
            peak = torch.cuda.max_memory_allocated() / 2**30
            row = (layers, h, heads, seq, micro, int(rc), statistics.median(sync),
                   statistics.median(nosync), statistics.median(optim), peak)
            rows.append(row)
            csv.write(",".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in row) + "\n")
            csv.flush()
            print(row, flush=True)
            del model, opt
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()
    csv.close()
    with open(os.path.join(OUT, "profile-summary.txt"), "w") as f:
        for layers, micro in ((0, 4), (24, 1), (24, 4)):
            if time.time() > DEADLINE + 60:
                break
            try:
                model, opt = build(layers, 1024, 16, 1024, True)
                profile(model, opt, micro, 1024, f"L{layers}-h1024-mb{micro}", f)
                f.flush()
                del model, opt
                torch.cuda.empty_cache()
            except Exception:
                traceback.print_exc()
    print(open(os.path.join(OUT, "profile-summary.txt")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
