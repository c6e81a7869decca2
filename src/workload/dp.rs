//! `torch.nn.DataParallel` (`kind = "dp"`): one process drives every GPU of a node, and each
//! forward call does, in order (PyTorch's `torch/nn/parallel/data_parallel.py`,
//! `replicate.py`, `scatter_gather.py`, `_functions.py` and `torch/csrc/cuda/comm.cpp`, read
//! from memory: the pytorch snapshot is larger than `fetch` brings, so no commit is cited):
//!
//! 1. **scatter**: the batch, on GPU 0, is cut along its first dimension and each other GPU's
//!    share copied to it (`Scatter`, device-to-device copies out of GPU 0);
//! 2. **replicate**: the module's parameters and buffers are broadcast from GPU 0 to every
//!    GPU (`Broadcast` → `comm.broadcast_coalesced`: tensors flattened on GPU 0 in chunks of
//!    10 MiB, each chunk one NCCL broadcast), and a replica of every module is built in Python
//!    for every GPU (`Module._replicate_for_data_parallel`: the module's dicts copied);
//! 3. **parallel_apply**: a Python thread per GPU runs its replica's forward; the threads
//!    share one interpreter lock, so one host launches every GPU's forward kernels;
//! 4. **gather**: the outputs are copied to GPU 0 (`Gather`).
//!
//! The loss is computed on GPU 0 from the gathered outputs (a torchvision training loop), or
//! inside each replica (a Hugging Face model given its labels: the outputs gathered are its
//! logits and a loss per GPU). Backward runs on autograd's thread per GPU: the outputs'
//! gradients scattered back (when the loss was on GPU 0), each replica's backward, then
//! `Broadcast`'s backward reduces every parameter's gradient onto GPU 0
//! (`comm.reduce_add_coalesced`: flattened on every GPU in 10 MiB chunks, each one NCCL
//! reduce) once every replica's backward is done. The optimizer steps on GPU 0 only.
//!
//! Nothing of it overlaps but the host's replica building with the broadcast: the step is the
//! sum of its parts. Left out: the host-to-device copy of the batch onto GPU 0 (DDP's copy of
//! each rank's share is not modelled either), what else a model returns (a transformer's key
//! and value cache, when its config keeps `use_cache`), and DataParallel's imbalance in memory
//! beyond the gathered outputs.

use super::DataType;
use super::ddp::{Breakdown, DdpSpec, GpuFacts, LayerTimes, SkewCost, Span, StepResult};
use super::parallel::{Group, GroupTimer};
use crate::collective::Collective;
use crate::hw::{Cluster, GpuId, NodeId};
use crate::units::Bytes;

/// `torch.cuda.comm.broadcast_coalesced`'s and `reduce_add_coalesced`'s `buffer_size`
/// default: tensors are flattened and sent in chunks of this many bytes (10 MiB).
pub const COALESCE_BYTES: u64 = 10 << 20;

/// Host time to build one module's replica for one GPU, s: `_replicate_for_data_parallel`
/// copies the module's `__dict__` and its parameter, buffer and submodule dicts in Python,
/// about a microsecond each in CPython for dicts of tens of entries; 3 µs assumed, not
/// measured. collsim counts a model's modules as its parameter tensors (ResNet-50: 161
/// tensors, 151 modules).
pub const REPLICA_MODULE_SECS: f64 = 3e-6;

/// An input sample of the ResNet-50 preset: a 3 × 224 × 224 fp32 image, bytes.
pub const IMAGE_BYTES: u64 = 3 * 224 * 224 * 4;

/// A token of a language model's input: its id and its label, int64 each, bytes.
pub const TOKEN_INPUT_BYTES: u64 = 16;

/// What a DataParallel step moves besides the model: its batch and its outputs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DataParallel {
    /// Bytes of one input sample, scattered from GPU 0.
    pub sample_bytes: u64,
    /// Bytes of one sample's output, gathered to GPU 0.
    pub output_bytes: u64,
    /// Whether the loss is computed on GPU 0 from the gathered outputs (their gradients then
    /// scattered back), rather than inside each replica.
    pub loss_on_first: bool,
    /// The share of the host's time per kernel spent holding Python's interpreter lock, which
    /// the replicas' forward threads take in turn ([`GIL_SHARE`] by default).
    pub gil_share: f64,
}

/// The share of the host's time per forward kernel that holds the interpreter lock: all of
/// it, an upper bound. PyTorch's Python bindings release the lock around each op's C++
/// (dispatch, autograd's graph, the launch itself), so part of a kernel's host time runs in
/// parallel over the threads; how much has not been measured here, and the bound errs slow.
pub const GIL_SHARE: f64 = 1.0;

impl DataParallel {
    /// The defaults for `model` with `sixteen`-bit activations, where collsim knows its input
    /// and output: the ResNet-50 preset (a 224 × 224 image in, 1,000 class scores out, loss on
    /// GPU 0 as torchvision's reference script computes it) and the transformer presets (ids
    /// and labels in, logits over the vocabulary out in the activations' dtype, the loss in
    /// each replica as a Hugging Face model given labels computes it). None for other models.
    pub fn defaults(
        model: &super::models::Model,
        sequence: Option<u64>,
        sixteen: bool,
    ) -> Option<DataParallel> {
        let act = if sixteen { 2 } else { 4 };
        if model.name == "resnet50" {
            return Some(DataParallel {
                sample_bytes: IMAGE_BYTES,
                output_bytes: 1000 * act,
                loss_on_first: true,
                gil_share: GIL_SHARE,
            });
        }
        let (tokens, vocab) = lm_shape(model, sequence)?;
        Some(DataParallel {
            sample_bytes: tokens * TOKEN_INPUT_BYTES,
            output_bytes: tokens * vocab * act,
            loss_on_first: false,
            gil_share: GIL_SHARE,
        })
    }
}

/// A language model's tokens per sample and vocabulary: its embedding's rows and its blocks'
/// tokens (the transformer presets and `[workload.model]` tables), or BERT-large's word
/// embedding and `sequence`.
fn lm_shape(model: &super::models::Model, sequence: Option<u64>) -> Option<(u64, u64)> {
    use super::models::TpRole;
    let vocab = model.layers.iter().find_map(|l| match l.parallel.map(|p| p.role) {
        Some(TpRole::Embedding { vocab }) => Some(vocab),
        _ => None,
    });
    let tokens = model.layers.iter().find_map(|l| l.parallel.map(|p| p.tokens));
    match (vocab, tokens) {
        (Some(v), Some(t)) => Some((t, v)),
        _ if model.name == "bert-large" => {
            let word = model.tensors().find(|t| t.name.ends_with("word_embeddings.weight"))?;
            Some((sequence?, word.rows))
        }
        _ => None,
    }
}

/// How fast GPU 0 and each other GPU of the node copy to each other: the route's narrowest
/// link, one copy at a time. PyTorch issues a scatter's or gather's copies one after another,
/// each on its source device's stream; they all leave or enter GPU 0 through its own links, so
/// they take about their times summed whether or not they overlap.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerCopies {
    /// From GPU 0 to GPU i (i = 1, 2, …), bytes/s.
    pub from_first: Vec<f64>,
    /// From GPU i to GPU 0, bytes/s.
    pub to_first: Vec<f64>,
    /// Each copy's fixed time, s: its launch ([`super::KERNEL_LAUNCH_SECS`], measured) and
    /// the route's latency.
    pub latency: Vec<f64>,
}

impl PeerCopies {
    /// The copies between GPU 0 and GPUs 1..n of node 0 of `cluster`.
    pub fn of(cluster: &Cluster, n: usize) -> PeerCopies {
        let rate = |from: usize, to: usize| {
            let path = cluster.gpu_to_gpu(NodeId(0), GpuId(from), GpuId(to));
            let latency: f64 =
                path.iter().map(|l| cluster.links()[l.0 as usize].latency.as_secs_f64()).sum();
            (cluster.path_bandwidth(&path).bytes_per_sec(), latency)
        };
        let mut out =
            PeerCopies { from_first: Vec::new(), to_first: Vec::new(), latency: Vec::new() };
        for i in 1..n {
            let (from, lat) = rate(0, i);
            out.from_first.push(from);
            out.to_first.push(rate(i, 0).0);
            out.latency.push(super::KERNEL_LAUNCH_SECS + lat);
        }
        out
    }

    /// Copies of `bytes` each between GPU 0 and every other GPU, one after another, s.
    fn secs(&self, bytes: f64, to_first: bool) -> f64 {
        let rates = if to_first { &self.to_first } else { &self.from_first };
        rates
            .iter()
            .zip(&self.latency)
            .map(|(r, l)| if *r > 0.0 { bytes / r + l } else { f64::INFINITY })
            .sum()
    }
}

/// One micro-step of a DataParallel step, s.
struct Micro {
    scatter: f64,
    /// Per chunk: flattening on GPU 0, and the broadcast.
    broadcast: Vec<(f64, super::ddp::CollTime, u64, DataType)>,
    replicas_host: f64,
    replicate: f64,
    layers: LayerTimes,
    gather: f64,
    scatter_back: f64,
    /// Per chunk: flattening on every GPU, and the reduce.
    reduce: Vec<(f64, super::ddp::CollTime, u64, DataType)>,
}

impl Micro {
    fn broadcast_gpu(&self) -> f64 {
        self.broadcast.iter().fold(0.0, |t, (f, c, ..)| t + f + c.secs().get())
    }

    fn reduce_secs(&self) -> f64 {
        self.reduce.iter().fold(0.0, |t, (f, c, ..)| t + f + c.secs().get())
    }

    fn fwd(&self) -> f64 {
        self.layers.fwd.iter().sum()
    }

    fn bwd(&self) -> f64 {
        self.layers.bwd.iter().sum()
    }

    fn total(&self) -> f64 {
        self.scatter
            + self.replicate
            + self.fwd()
            + self.gather
            + self.scatter_back
            + self.bwd()
            + self.reduce_secs()
    }
}

/// The chunks `comm.*_coalesced` sends the model's tensors in (each dtype apart), with their
/// bytes and dtype.
fn chunks(spec: &DdpSpec) -> Vec<(u64, DataType)> {
    let m = &spec.model;
    let sizes: Vec<(usize, u64, DataType)> =
        m.tensors().enumerate().map(|(i, t)| (i, m.grad_bytes(t), m.dtype_of(t))).collect();
    super::ddp::assign(&sizes, &[COALESCE_BYTES]).into_iter().map(|b| (b.bytes, b.dtype)).collect()
}

/// One micro-step on `n` GPUs.
fn micro(
    spec: &DdpSpec,
    dp: &DataParallel,
    n: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
    copies: &PeerCopies,
) -> Micro {
    use super::ddp::{Launcher, layer_times_launched};
    let mb = spec.micro_batch as f64;
    let flatten = |bytes: u64| 2.0 * bytes as f64 / gpu.memory_bandwidth + gpu.launch.get();
    // Each GPU's forward kernel waits for every thread's turn at the lock, or for its own
    // thread's whole host time, whichever is longer.
    let launcher =
        Launcher { fwd_launch_factor: (n as f64 * dp.gil_share).max(1.0), fresh_backward: n > 1 };
    let layers = layer_times_launched(spec, gpu, launcher);
    if n < 2 {
        // One device: DataParallel calls the module itself.
        return Micro {
            scatter: 0.0,
            broadcast: Vec::new(),
            replicas_host: 0.0,
            replicate: 0.0,
            layers,
            gather: 0.0,
            scatter_back: 0.0,
            reduce: Vec::new(),
        };
    }
    let call = |c: Collective, (bytes, dtype): (u64, DataType)| {
        (flatten(bytes), coll(Group::World, c, Bytes::new(bytes), dtype), bytes, dtype)
    };
    let params = chunks(spec);
    let mut broadcast: Vec<_> = params.iter().map(|&c| call(Collective::Broadcast, c)).collect();
    // The buffers (batch-norm statistics), coalesced apart.
    let mut left = spec.model.buffer_bytes;
    while left > 0 {
        let b = left.min(COALESCE_BYTES);
        broadcast.push(call(Collective::Broadcast, (b, DataType::Float)));
        left -= b;
    }
    let reduce = params.iter().map(|&c| call(Collective::Reduce, c)).collect();
    let replicas_host = REPLICA_MODULE_SECS * spec.model.tensors().count() as f64 * n as f64;
    let mut m = Micro {
        scatter: copies.secs(mb * dp.sample_bytes as f64, false),
        broadcast,
        replicas_host,
        replicate: 0.0,
        layers,
        gather: copies.secs(mb * dp.output_bytes as f64, true),
        // Without the loss on GPU 0 only each replica's loss comes back (a few bytes).
        scatter_back: copies
            .secs(if dp.loss_on_first { mb * dp.output_bytes as f64 } else { 4.0 }, false),
        reduce,
    };
    m.replicate = f64::max(m.broadcast_gpu(), replicas_host);
    m
}

/// Simulates one optimizer step of `spec` under DataParallel on the `world` GPUs of one
/// node: each micro-step's scatter, replication, forward under one launcher, gather, backward
/// and reduce onto GPU 0 one after another, then GPU 0's optimizer step.
pub fn simulate_dp(
    spec: &DdpSpec,
    dp: &DataParallel,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
    copies: &PeerCopies,
) -> StepResult {
    let k = spec.grad_accumulation.max(1) as f64;
    let n = world.max(1);
    let tensors: Vec<_> = spec.model.tensors().collect();
    let optimizer = super::ddp::optimizer_secs(spec, &tensors, gpu);
    let nominal = micro(spec, dp, n, gpu, coll, copies);
    // Each gather waits for the slowest replica's forward, each reduce for its backward: the
    // micro-step at the slowest GPU's pace (one host launches for all, so only GPU time
    // varies).
    let slowest = super::skew::Slowest { host: 1.0, ..spec.skew.slowest(n) };
    let slow = (n > 1 && !spec.skew.is_none()).then(|| {
        let (s, g) = super::skew::slowed(spec, gpu, slowest);
        micro(&s, dp, n, &g, coll, copies)
    });
    let run = slow.as_ref().unwrap_or(&nominal);
    let typical = k * nominal.total() + optimizer;
    let end = k * run.total() + optimizer;
    let one = super::ddp::layer_times(spec, gpu);
    let l = &nominal.layers;
    let ms = |x: f64| k * x * 1e3;
    let own_launch = one.launch.min(l.launch);
    let breakdown = Breakdown {
        flop_ms: ms(l.flop),
        memory_ms: ms(l.memory),
        launch_ms: ms(own_launch),
        measured_ms: ms(l.measured),
        optimizer_ms: optimizer * 1e3,
        exposed_comm_ms: 0.0,
        skew_wait_ms: (end - typical) * 1e3,
        dp_replicate_ms: ms(nominal.replicate),
        dp_scatter_gather_ms: ms(nominal.scatter + nominal.gather + nominal.scatter_back),
        dp_launcher_ms: ms(l.launch - own_launch),
        dp_reduce_ms: ms(nominal.reduce_secs()),
        ..Breakdown::default()
    };
    let comm_of = |m: &Micro| {
        let calls =
            m.broadcast.iter().chain(&m.reduce).fold(0.0, |t, (_, c, ..)| t + c.secs().get());
        calls + m.scatter + m.gather + m.scatter_back
    };
    let flattening = |m: &Micro| m.broadcast.iter().chain(&m.reduce).fold(0.0, |t, (f, ..)| t + f);
    let compute = k * (nominal.fwd() + nominal.bwd() + flattening(&nominal)) + optimizer;
    let comm = k * comm_of(run);
    // Nothing overlaps the GPUs' compute: every call and copy is exposed. (The host's replica
    // building beyond the broadcast is in the breakdown's replication, not here.)
    let exposed = k * comm_of(&nominal);
    let single = k * (one.fwd.iter().sum::<f64>() + one.bwd.iter().sum::<f64>()) + optimizer;
    let skew = slow.as_ref().map(|_| SkewCost {
        slowest_factor: slowest.gpu,
        slowest_host_factor: 1.0,
        wait_ms: (end - typical) * 1e3,
        typical_rank_ms: typical * 1e3,
    });
    StepResult {
        world: n,
        iteration_time_ms: end * 1e3,
        first_iteration_ms: end * 1e3,
        forward_ms: ms(nominal.fwd()),
        backward_ms: ms(nominal.bwd()),
        optimizer_ms: optimizer * 1e3,
        skew,
        compute_ms: compute * 1e3,
        comm_ms: comm * 1e3,
        exposed_comm_ms: exposed * 1e3,
        overlap_fraction: if comm > 0.0 { (1.0 - exposed / comm).clamp(0.0, 1.0) } else { 1.0 },
        compute_slowdown: 0.0,
        samples_per_s: (spec.micro_batch as f64 * k * n as f64) / end,
        single_gpu_ms: single * 1e3,
        scaling_efficiency: single / end,
        breakdown,
        gemm_tflops: gpu.flops / 1e12,
        buckets: Vec::new(),
        timeline: timeline(run, spec.grad_accumulation.max(1), optimizer),
        alone_optimizer_ms: optimizer * 1e3,
        data_parallel: Some(Box::new(DpReport {
            input: *dp,
            broadcasts: nominal.broadcast.len(),
            reduces: nominal.reduce.len(),
            replicas_host_ms: ms(nominal.replicas_host),
            broadcast_ms: ms(nominal.broadcast_gpu()),
            scatter_ms: ms(nominal.scatter),
            gather_ms: ms(nominal.gather),
            scatter_back_ms: ms(nominal.scatter_back),
            ddp: None,
        })),
        ..StepResult::default()
    }
}

/// What a DataParallel step did besides its breakdown, and the same step under DDP.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DpReport {
    /// Its batch's and outputs' bytes per sample, and where the loss is computed.
    pub input: DataParallel,
    /// NCCL broadcasts per micro-step (parameter chunks, then buffer chunks).
    pub broadcasts: usize,
    /// NCCL reduces per micro-step (gradient chunks).
    pub reduces: usize,
    /// The host's time building replicas in Python, ms (all micro-steps).
    pub replicas_host_ms: f64,
    /// Flattening and broadcasting the parameters and buffers on the GPUs, ms.
    pub broadcast_ms: f64,
    /// The batch's copies out of GPU 0, ms.
    pub scatter_ms: f64,
    /// The outputs' copies into GPU 0, ms.
    pub gather_ms: f64,
    /// The outputs' gradients (or the losses') copies back out, ms.
    pub scatter_back_ms: f64,
    /// The same model, batch and node under DistributedDataParallel (default options).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddp: Option<DdpSide>,
}

/// The DDP step a DataParallel one is compared with.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DdpSide {
    /// Its iteration, ms.
    pub iteration_time_ms: f64,
    /// Its samples per second.
    pub samples_per_s: f64,
    /// Where its time goes.
    pub breakdown: Breakdown,
}

/// The step's spans, one micro-step after another, the compute lane GPU 0's.
fn timeline(m: &Micro, k: u64, optimizer: f64) -> Vec<Span> {
    type Chunk = (f64, super::ddp::CollTime, u64, DataType);
    // Each span from `t`, which it moves on.
    fn push(out: &mut Vec<Span>, t: &mut f64, lane: &'static str, name: &str, d: f64) {
        out.push(Span::compute(lane, name.to_string(), *t * 1e3, (*t + d) * 1e3));
        *t += d;
    }
    // A chunk's flattening, then its collective, which the compute stream waits for.
    fn chunk(out: &mut Vec<Span>, t: &mut f64, name: &str, (f, c, bytes, dtype): &Chunk) {
        push(out, t, "compute", "flatten tensors", *f);
        let mut s = Span::compute("nccl", name.to_string(), *t * 1e3, (*t + c.secs().get()) * 1e3);
        s.bytes = *bytes;
        s.algo = c.algo;
        s.proto = c.proto;
        s.channels = c.channels;
        s.dtype = dtype.name();
        out.push(s);
        push(out, t, "wait", name, c.secs().get());
    }
    let mut out = Vec::new();
    let mut t = 0.0;
    for _ in 0..k {
        if m.scatter > 0.0 {
            push(&mut out, &mut t, "wait", "scatter inputs from GPU 0", m.scatter);
        }
        let start = t;
        for b in &m.broadcast {
            chunk(&mut out, &mut t, "broadcast parameters from GPU 0", b);
        }
        if m.replicate > t - start {
            let host = start + m.replicate - t;
            push(&mut out, &mut t, "compute", "replicas built in Python (the host)", host);
        }
        push(&mut out, &mut t, "compute", "fwd (every replica, one launcher)", m.fwd());
        if m.gather > 0.0 {
            push(&mut out, &mut t, "wait", "gather outputs to GPU 0", m.gather);
        }
        if m.scatter_back > 0.0 {
            push(&mut out, &mut t, "wait", "scatter output gradients", m.scatter_back);
        }
        push(&mut out, &mut t, "compute", "bwd (every replica)", m.bwd());
        for r in &m.reduce {
            chunk(&mut out, &mut t, "reduce gradients to GPU 0", r);
        }
    }
    push(&mut out, &mut t, "compute", "optimizer step (GPU 0)", optimizer);
    out
}
