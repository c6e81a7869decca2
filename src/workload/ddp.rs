//! A PyTorch DDP training step (`../shared/reference/ddp.md` §1).
//!
//! * Buckets: `compute_bucket_assignment_by_size` (§1.2), with the tensor order and size limits
//!   DDP hands it at construction, in iteration 0 and at the rebuild after it (§1.3, §1.4).
//! * Hooks (§1.11): what each one puts on the wire and what it costs the GPU, as steps
//!   ([`hook_steps`]).
//! * The step ([`simulate_step`], §1.5–1.13): backward walks the layers in reverse; each
//!   layer's gradients are copied into their buckets (with the division) on the compute stream;
//!   a bucket launches when its last gradient is in and every lower-index bucket has launched
//!   (head-of-line blocking); the collectives run FIFO on one NCCL stream and overlap only
//!   compute, which meanwhile runs slower by the share of SMs NCCL's CTAs take (one per
//!   channel). Hook compute (casts, PowerSGD's products) holds the compute stream; PowerSGD's
//!   `torch.cuda.synchronize` is modelled as no overlap for its buckets. After the last bucket,
//!   `finalize_backward` waits for all of them and copies the gradients out unless
//!   `gradient_as_bucket_view`. Buffers are broadcast before a forward that follows a
//!   synchronised step; `no_sync` micro-steps are compute only.
//!
//! Not modelled: the optimizer step, CPU launch overheads of the backward itself and the CPU
//! running ahead of the GPU, memory-bound layers (norms, activations, embedding gradients count
//! 0 FLOPs), per-tensor dtypes in user layer lists.

use super::DataType;
use super::models::Model;
use super::parallel::{Group, GroupTimer};
use super::timeline::{Batch, Op, Slowdown, Timeline, Work};
use crate::units::{Bytes, Secs, Time};

/// `torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`.
pub const FIRST_BUCKET_BYTES: u64 = 1 << 20;
/// The default `bucket_cap_mb` (25 MiB).
pub const DEFAULT_CAP_BYTES: u64 = 25 << 20;

/// One bucket: the indices of its tensors in `model.parameters()` order, in the order they
/// were added, its bytes and its gradients' dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Tensor indices.
    pub tensors: Vec<usize>,
    /// Bytes of gradient.
    pub bytes: u64,
    /// The dtype of its gradients (buckets never mix dtypes).
    pub dtype: DataType,
    /// Whether it holds experts' gradients (reduced over the expert-data-parallel group under
    /// expert parallelism, in buckets of their own).
    pub expert: bool,
}

/// `compute_bucket_assignment_by_size`: `sizes` are (tensor index, bytes, dtype) in the order
/// given. Each dtype (PyTorch's key is dtype and device; one device here) fills its own bucket:
/// a bucket closes on the tensor that makes it reach its limit (so it may pass it by less than
/// one tensor); the first limit serves a key's first bucket only, the last one every bucket
/// after. Buckets in the order they closed, then each key's unfinished one, by its first tensor.
pub fn assign(sizes: &[(usize, u64, DataType)], limits: &[u64]) -> Vec<Bucket> {
    let mut out = Vec::new();
    // Per key: the open bucket and the index of its limit.
    let mut open: Vec<(Bucket, usize)> = Vec::new();
    for &(i, b, dtype) in sizes {
        let k = match open.iter().position(|(o, _)| o.dtype == dtype) {
            Some(k) => k,
            None => {
                open.push((Bucket { tensors: Vec::new(), bytes: 0, dtype, expert: false }, 0));
                open.len() - 1
            }
        };
        let (cur, it) = &mut open[k];
        cur.tensors.push(i);
        cur.bytes += b;
        if cur.bytes >= limits[*it] {
            let empty = Bucket { tensors: Vec::new(), bytes: 0, dtype, expert: false };
            out.push(std::mem::replace(cur, empty));
            if *it + 1 < limits.len() {
                *it += 1;
            }
        }
    }
    out.extend(open.into_iter().map(|(b, _)| b).filter(|b| !b.tensors.is_empty()));
    out
}

/// Which bucketing DDP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Construction time in PyTorch before ~1.12, or with `find_unused_parameters=True` (not
    /// static): forward order, limits `[1 MiB, cap]` (just `[cap]` if the cap was set explicitly in
    /// current versions), buckets reversed so the last layers reduce first.
    Construction,
    /// Iteration 0 in current PyTorch with `find_unused_parameters=False` or `static_graph`:
    /// one bucket of everything.
    FirstIteration,
    /// After the rebuild: gradient-ready order (taken as the reverse of `parameters()`),
    /// limits `[first cap, cap]`, kept in that order — the small bucket first.
    Rebuilt,
}

/// DDP's buckets for `model` in reduction order (bucket 0 is all-reduced first). `cap` is
/// `bucket_cap_mb` in bytes; `None` is the default (25 MiB with a 1 MiB first bucket; set
/// explicitly, there is no small first bucket).
pub fn buckets(model: &Model, cap: Option<u64>, phase: Phase) -> Vec<Bucket> {
    buckets_of(model, cap, phase, |_| true)
}

/// As [`buckets`], each model chunk's gradients (`chunk_of`, by tensor; empty: one chunk) in
/// buckets of their own, as each of Megatron's virtual pipeline stages is a model of its own
/// with its own gradient buffer, and a chunk `split` refuses in one bucket, and with `apart` the experts' apart (Megatron's separate
/// expert-parallel gradient buffer); the buckets in the order their first gradient is ready.
pub fn buckets_by(
    model: &Model,
    cap: Option<u64>,
    phase: Phase,
    chunk_of: &[usize],
    apart: bool,
    split: &dyn Fn(usize) -> bool,
) -> Vec<Bucket> {
    let experts: Vec<bool> = model.tensors().map(|t| apart && t.expert.is_some()).collect();
    let chunk = |i: usize| chunk_of.get(i).copied().unwrap_or(0);
    let mut groups: Vec<(usize, bool)> =
        (0..experts.len()).map(|i| (chunk(i), experts[i])).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut dense = Vec::new();
    for (c, e) in groups {
        // A chunk Megatron does not split is one bucket.
        let cap = if split(c) { cap } else { Some(u64::MAX) };
        let mut these = buckets_of(model, cap, phase, |i| chunk(i) == c && experts[i] == e);
        for b in &mut these {
            b.expert = e;
        }
        dense.append(&mut these);
    }
    // Ready order: reverse parameter order once rebuilt, else the buckets' own.
    match phase {
        Phase::Rebuilt => dense.sort_by_key(|b| std::cmp::Reverse(b.tensors.iter().max().copied())),
        Phase::FirstIteration | Phase::Construction => {
            dense.sort_by_key(|b| std::cmp::Reverse(b.tensors.iter().min().copied()))
        }
    }
    dense
}

/// DDP's buckets of the tensors `keep` takes (by index).
fn buckets_of(
    model: &Model,
    cap: Option<u64>,
    phase: Phase,
    keep: impl Fn(usize) -> bool,
) -> Vec<Bucket> {
    let sizes: Vec<(usize, u64, DataType)> = model
        .tensors()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(i, t)| (i, model.grad_bytes(t), model.dtype_of(t)))
        .collect();
    let first = if cap.is_none() { FIRST_BUCKET_BYTES } else { cap.unwrap_or(DEFAULT_CAP_BYTES) };
    let cap = cap.unwrap_or(DEFAULT_CAP_BYTES);
    match phase {
        Phase::FirstIteration => assign(&sizes, &[u64::MAX]),
        Phase::Construction => {
            // Built in forward order, sorted by lowest tensor index, then reversed.
            let mut b = assign(&sizes, &[first, cap]);
            b.sort_by_key(|b| b.tensors.iter().min().copied());
            b.reverse();
            b
        }
        Phase::Rebuilt => {
            let ready: Vec<(usize, u64, DataType)> = sizes.into_iter().rev().collect();
            assign(&ready, &[first, cap])
        }
    }
}

/// A DDP communication hook (`register_comm_hook`), as it changes the wire and the GPU's work.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CommHook {
    /// No hook: an all-reduce of the pre-divided bucket.
    None,
    /// `fp16_compress_hook`: cast to fp16 and divide, all-reduce, copy back.
    Fp16,
    /// `bf16_compress_hook`.
    Bf16,
    /// `powerSGD_hook` (layer-wise) with its state's options.
    PowerSgd {
        /// `matrix_approximation_rank`.
        rank: u64,
        /// `use_error_feedback`.
        error_feedback: bool,
        /// `warm_start`.
        warm_start: bool,
        /// `start_powerSGD_iter`: plain all-reduces before it.
        start_iter: u64,
    },
    /// `batched_powerSGD_hook`: the whole bucket as one square matrix.
    BatchedPowerSgd {
        /// `matrix_approximation_rank`.
        rank: u64,
        /// `use_error_feedback`.
        error_feedback: bool,
        /// `start_powerSGD_iter`.
        start_iter: u64,
    },
    /// `quantization_pertensor_hook`: all-gathers of scales, then of uint8 tensors.
    QuantizePerTensor,
    /// `quantization_perchannel_hook` (rows of 512 elements, quantised by a Python loop).
    QuantizePerChannel,
}

/// PowerSGD's options, as a scenario sets them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerSgdOptions {
    /// `matrix_approximation_rank`.
    pub rank: u64,
    /// `use_error_feedback`.
    pub error_feedback: bool,
    /// `warm_start`.
    pub warm_start: bool,
    /// `start_powerSGD_iter`.
    pub start_iter: u64,
}

impl Default for PowerSgdOptions {
    /// PowerSGDState's defaults, at rank 1.
    fn default() -> Self {
        PowerSgdOptions { rank: 1, error_feedback: true, warm_start: true, start_iter: 1000 }
    }
}

impl CommHook {
    /// The names scenarios use, in this order in messages.
    pub const NAMES: &'static str =
        "none, fp16, bf16, powersgd, batched_powersgd, quantize_per_tensor, quantize_per_channel";

    /// The hook named `name`, with PowerSGD's options `o` where it takes them.
    pub fn parse(name: &str, o: PowerSgdOptions) -> Option<CommHook> {
        let PowerSgdOptions { rank, error_feedback, warm_start, start_iter } = o;
        Some(match name {
            "none" => CommHook::None,
            "fp16" => CommHook::Fp16,
            "bf16" => CommHook::Bf16,
            "powersgd" => CommHook::PowerSgd { rank, error_feedback, warm_start, start_iter },
            "batched_powersgd" => CommHook::BatchedPowerSgd { rank, error_feedback, start_iter },
            "quantize_per_tensor" => CommHook::QuantizePerTensor,
            "quantize_per_channel" => CommHook::QuantizePerChannel,
            _ => return None,
        })
    }

    /// The collective that carries the gradients: all-gathers for the quantisation hooks,
    /// all-reduces for the others.
    pub fn grad_collective(&self) -> crate::collective::Collective {
        match self {
            CommHook::QuantizePerTensor | CommHook::QuantizePerChannel => {
                crate::collective::Collective::AllGather
            }
            _ => crate::collective::Collective::AllReduce,
        }
    }

    /// Its name in scenarios.
    pub fn name(&self) -> &'static str {
        match self {
            CommHook::None => "none",
            CommHook::Fp16 => "fp16",
            CommHook::Bf16 => "bf16",
            CommHook::PowerSgd { .. } => "powersgd",
            CommHook::BatchedPowerSgd { .. } => "batched_powersgd",
            CommHook::QuantizePerTensor => "quantize_per_tensor",
            CommHook::QuantizePerChannel => "quantize_per_channel",
        }
    }
}

impl CommHook {
    /// Its name with its options, for reports.
    pub fn describe(&self) -> String {
        match *self {
            CommHook::PowerSgd { rank, error_feedback, warm_start, start_iter } => format!(
                "powersgd (rank {rank}, error feedback {error_feedback}, warm start {warm_start}; from iteration {start_iter}, steady state shown)"
            ),
            CommHook::BatchedPowerSgd { rank, error_feedback, start_iter } => format!(
                "batched_powersgd (rank {rank}, error feedback {error_feedback}; from iteration {start_iter}, steady state shown)"
            ),
            h => h.name().to_string(),
        }
    }
}

/// Host-side PyTorch ops of `torch.linalg.qr` on one of PowerSGD's P matrices, with the
/// views the hook makes for each compressed tensor: fitted on one H200 (the 2,048-wide GPT of
/// calibration/data/2026-11-26-h200-kineto/run3-steps.csv, 85.1 ms of hook in a step), where
/// the 768-wide one checks it (`tests/it/megatron.rs`).
pub const POWERSGD_QR_OPS: u64 = 7;

/// The PyTorch ops PowerSGD's hook (`torch.distributed.algorithms.ddp_comm_hooks.
/// powerSGD_hook`, as we know it: pytorch/pytorch was too large to fetch here) runs on
/// one bucket of `compressed` matrices and `uncompressed` other tensors, in its three parts:
/// before the all-reduces of the uncompressed tensors and of P (error feedback's add and
/// clone, the uncompressed tensors' concatenation, P = MQ per matrix); after them (the
/// division, each uncompressed tensor copied back, each P orthogonalised, Q = MᵀP per matrix);
/// after Q's all-reduce (the division, M = PQᵀ per matrix, error feedback's difference).
/// Orthogonalisation is Gram-Schmidt at rank 2 or below and in 16-bit (a norm and a division
/// per column, and four ops per column after it to remove it from the rest), else a QR
/// factorisation ([`POWERSGD_QR_OPS`]).
pub fn powersgd_ops(
    rank: u64,
    dtype: super::DataType,
    error_feedback: bool,
    compressed: u64,
    uncompressed: u64,
) -> [u64; 3] {
    use super::DataType as D;
    let r = rank.max(1);
    let ortho =
        if r <= 2 || matches!(dtype, D::Half | D::Bfloat16) { 6 * r - 4 } else { POWERSGD_QR_OPS };
    let fb = u64::from(error_feedback);
    [2 * fb + 1 + compressed, 1 + uncompressed + compressed * (ortho + 1), 1 + compressed + fb]
}

/// PowerSGD's `min_compression_rate` default.
pub const MIN_COMPRESSION_RATE: u64 = 2;
/// The per-channel quantisation hook's row length.
pub const QUANT_ROW: u64 = 512;

/// One step of a bucket's hook: work on the compute stream (bytes of memory traffic, FLOPs,
/// kernel launches) or a collective on the NCCL stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HookStep {
    /// GPU work: bytes moved, FLOPs, extra kernel launches.
    Compute {
        /// Bytes read and written.
        bytes: f64,
        /// Floating-point operations.
        flops: f64,
        /// Kernel launches beyond one.
        launches: u64,
    },
    /// A collective of `bytes` (nccl-tests' size convention) of `dtype`.
    Collective {
        /// Which.
        collective: crate::collective::Collective,
        /// nccl-tests' size: the buffer per rank (all_gather: the whole output).
        bytes: u64,
        /// Element type on the wire.
        dtype: super::DataType,
    },
}

/// What `hook` does with `bucket` of `model` on `world` ranks, in order: the steps between the
/// bucket's launch and its gradients being ready for the optimizer.
pub fn hook_steps(hook: &CommHook, model: &Model, bucket: &Bucket, world: u64) -> Vec<HookStep> {
    use super::DataType as D;
    use crate::collective::Collective::{AllGather, AllReduce};
    let dt = bucket.dtype;
    let elt = dt.size();
    let numel = bucket.bytes / elt;
    let n = numel as f64;
    let ar = |bytes: u64, dtype: D| HookStep::Collective { collective: AllReduce, bytes, dtype };
    let mem = |bytes: f64| HookStep::Compute { bytes, flops: 0.0, launches: 0 };
    match *hook {
        CommHook::None => vec![ar(bucket.bytes, dt)],
        CommHook::Fp16 | CommHook::Bf16 => {
            let d = if *hook == CommHook::Fp16 { D::Half } else { D::Bfloat16 };
            // PyTorch's `_compress_hook`: `buffer.to(dtype)` (read the gradient, write 2 B),
            // `.div_(world_size)` in place (read and write 2 B), two kernels; after the
            // all-reduce, `buffer.copy_(value)` (read 2 B, write the gradient).
            let cast = HookStep::Compute { bytes: n * (elt + 6) as f64, flops: 0.0, launches: 1 };
            vec![cast, ar(numel * 2, d), mem(n * (2 + elt) as f64)]
        }
        CommHook::PowerSgd { rank, error_feedback, warm_start, .. } => {
            let (mut raw, mut p, mut q, mut gemm_bytes, mut flops) = (0u64, 0u64, 0u64, 0.0, 0.0);
            let (mut compressed, mut uncompressed) = (0u64, 0u64);
            let tensors: Vec<&super::models::Tensor> = model.tensors().collect();
            for &i in &bucket.tensors {
                let t = tensors[i];
                let (rows, cols) = (t.rows.max(1), t.numel / t.rows.max(1));
                let r = rank.min(rows).min(cols);
                if (rows + cols) * r * MIN_COMPRESSION_RATE < rows * cols {
                    compressed += 1;
                    p += rows * r;
                    q += cols * r;
                    // P = MQ, Q = MᵀP, M = PQᵀ: three reads of M (and a write).
                    gemm_bytes += 4.0 * (t.numel * elt) as f64;
                    flops += 3.0 * 2.0 * (t.numel * r) as f64;
                } else {
                    uncompressed += 1;
                    raw += t.numel;
                }
            }
            let e = elt as f64;
            // Error feedback: add the error, clone the input, and the error after.
            let feedback = if error_feedback { 3.0 * 2.0 * n * e } else { 0.0 };
            // Without warm start Q is drawn on the CPU and copied each step.
            let fresh_q = if warm_start { 0.0 } else { (q * elt) as f64 };
            // The hook's PyTorch ops, each a launch from the host ([`powersgd_ops`]).
            let ops = powersgd_ops(rank, dt, error_feedback, compressed, uncompressed);
            vec![
                HookStep::Compute {
                    bytes: feedback * 2.0 / 3.0
                        + 2.0 * (raw * elt) as f64
                        + fresh_q
                        + gemm_bytes / 4.0,
                    flops: flops / 3.0,
                    launches: ops[0].saturating_sub(1),
                },
                ar(raw * elt, dt),
                ar(p * elt, dt),
                HookStep::Compute {
                    bytes: gemm_bytes / 4.0 + (raw * elt) as f64 * 2.0,
                    flops: flops / 3.0,
                    launches: ops[1].saturating_sub(1),
                },
                ar(q * elt, dt),
                HookStep::Compute {
                    bytes: feedback / 3.0 + gemm_bytes / 2.0,
                    flops: flops / 3.0,
                    launches: ops[2].saturating_sub(1),
                },
            ]
        }
        CommHook::BatchedPowerSgd { rank, error_feedback, .. } => {
            let side = (n.sqrt().ceil() as u64).max(1);
            let r = rank.min(side);
            let m_bytes = (side * side * elt) as f64;
            let feedback = if error_feedback { 6.0 * m_bytes } else { 0.0 };
            let flops = 2.0 * (side * side * r) as f64;
            vec![
                HookStep::Compute {
                    bytes: feedback * 2.0 / 3.0 + 2.0 * m_bytes,
                    flops,
                    launches: 4,
                },
                ar(side * r * elt, dt),
                HookStep::Compute { bytes: m_bytes, flops, launches: 4 },
                ar(side * r * elt, dt),
                HookStep::Compute { bytes: feedback / 3.0 + 2.0 * m_bytes, flops, launches: 4 },
            ]
        }
        CommHook::QuantizePerTensor | CommHook::QuantizePerChannel => {
            let per_channel = *hook == CommHook::QuantizePerChannel;
            let rows = if per_channel { numel.div_ceil(QUANT_ROW) } else { 1 };
            // Scales and zero points (fp32 pairs) per row and rank, then the uint8 tensors; each
            // rank dequantises all `world` copies and averages them.
            vec![
                HookStep::Collective {
                    collective: AllGather,
                    bytes: world * rows * 8,
                    dtype: D::Float,
                },
                HookStep::Compute { bytes: n * (elt + 1) as f64, flops: 0.0, launches: rows },
                HookStep::Collective {
                    collective: AllGather,
                    bytes: world * numel,
                    dtype: D::Uint8,
                },
                HookStep::Compute {
                    bytes: world as f64 * n * (1 + elt) as f64 + n * elt as f64,
                    flops: 0.0,
                    launches: world * rows,
                },
            ]
        }
    }
}

/// Elements a bucket puts on the wire in all its collectives, counted as nccl-tests sizes them.
pub fn wire_bytes(steps: &[HookStep]) -> u64 {
    steps
        .iter()
        .map(|s| match s {
            HookStep::Collective { bytes, .. } => *bytes,
            HookStep::Compute { .. } => 0,
        })
        .sum()
}

/// How fast the GPU computes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeRate {
    /// The GPU's dense peak for `precision` ("fp32", "tf32", "fp16", "bf16", "fp8") times the
    /// achieved `efficiency`.
    Peak {
        /// Math precision.
        precision: String,
        /// Achieved fraction of the peak.
        efficiency: f64,
    },
    /// An achieved rate, TFLOP/s.
    Tflops(f64),
    /// Model FLOPs utilisation: forward and backward take the model's FLOPs over this fraction
    /// of the GPU's dense peak for `precision`, memory-bound work and launches included; the
    /// GEMMs' rate is what is left once those are counted ([`rate_for_mfu`]).
    Mfu {
        /// Math precision.
        precision: String,
        /// Model FLOPs over (forward + backward time × peak).
        mfu: f64,
    },
}

impl ComputeRate {
    /// The math precision, where the rate names one.
    pub fn precision(&self) -> Option<&str> {
        match self {
            ComputeRate::Peak { precision, .. } | ComputeRate::Mfu { precision, .. } => {
                Some(precision)
            }
            ComputeRate::Tflops(_) => None,
        }
    }
}

/// Where the samples come from: the data loader's rate, which caps the step when the GPU
/// would go faster (the loader's workers run ahead of the GPU, so only a shortfall shows).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputRate {
    /// Samples per second each GPU's loader delivers, whatever else runs on its node.
    PerGpu(f64),
    /// Samples per second a node's CPUs deliver (decoding and augmenting), shared by the
    /// node's GPUs in use: one GPU alone has them all.
    PerNode(f64),
}

impl InputRate {
    /// Samples per second one rank gets with `ranks_on_node` ranks on its node.
    pub fn per_rank(self, ranks_on_node: usize) -> f64 {
        match self {
            InputRate::PerGpu(r) => r,
            InputRate::PerNode(r) => r / ranks_on_node.max(1) as f64,
        }
    }
}

/// The process group's backend (`torch.distributed.init_process_group(backend=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// NCCL: the collectives on the GPUs, over NVLink and GPUDirect RDMA.
    #[default]
    Nccl,
    /// Gloo: each collective copied to host memory, run over TCP, copied back
    /// ([`crate::collective::gloo`]).
    Gloo,
}

impl Backend {
    /// Whether it is NCCL (the default, left out of JSON).
    pub fn is_nccl(&self) -> bool {
        *self == Backend::Nccl
    }
}

/// A DDP training step to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct DdpSpec {
    /// The process group's backend.
    pub backend: Backend,
    /// The model, with its gradient dtype.
    pub model: Model,
    /// Samples per GPU per micro-step.
    pub micro_batch: u64,
    /// Micro-steps per optimizer step (the first K−1 under `no_sync`).
    pub grad_accumulation: u64,
    /// Compute rate.
    pub rate: ComputeRate,
    /// `bucket_cap_mb` in bytes (None: the default, 25 MiB with a 1 MiB first bucket).
    pub bucket_cap: Option<u64>,
    /// `gradient_as_bucket_view`.
    pub gradient_as_bucket_view: bool,
    /// `static_graph`.
    pub static_graph: bool,
    /// `find_unused_parameters`.
    pub find_unused_parameters: bool,
    /// `broadcast_buffers`.
    pub broadcast_buffers: bool,
    /// The communication hook.
    pub hook: CommHook,
    /// Fraction by which compute slows while an NCCL kernel runs (None: the SMs NCCL's channels
    /// take, one CTA each, over the GPU's SMs).
    pub compute_slowdown: Option<f64>,
    /// The optimizer: its state in memory, and its step's traffic after backward.
    pub optimizer: super::memory::Optimizer,
    /// How PyTorch runs its step (foreach by default; fused under `[workload.parallel]`, as
    /// Megatron steps Apex's fused optimizers).
    pub optimizer_impl: super::memory::OptimizerImpl,
    /// Per-rank compute variation: each bucket waits for the slowest rank.
    pub skew: super::skew::Skew,
    /// Tokens per sample, for transformers (their sequence length).
    pub sequence: Option<u64>,
    /// The data loader's rate, if it may cap the step (None: never).
    pub input: Option<InputRate>,
    /// FSDP's sharding (`kind = "fsdp"`), instead of DDP's buckets.
    pub sharding: Option<Sharding>,
    /// Megatron's tensor, pipeline and data parallelism (`[workload.parallel]`), if the step
    /// is laid out so.
    pub parallel: Option<super::parallel::Layout>,
    /// Host time to issue one kernel, s (None: the cudaLaunchKernel floor): PyTorch eager's
    /// per-op dispatch where the framework's Python adds to it.
    pub launch: Option<f64>,
    /// GPU time each FLOP-bound kernel takes beyond its FLOPs, s (None: 0).
    pub gemm_fixed: Option<f64>,
    /// The GPU generation's default compute model, where the scenario gave only `precision`
    /// (its efficiency is `rate`'s; its times `launch` and `gemm_fixed` where not given).
    pub compute_default: Option<super::compute::ComputeDefault>,
    /// A step given as a list of calls (`kind = "trace"`), replayed instead of the model's.
    pub calls: Option<Vec<super::calls::Call>>,
    /// The model profile `calls` were carried from, to carry again to another GPU.
    pub profile: Option<Box<super::profile::Named>>,
    /// Activation checkpointing of the transformer blocks (DDP, FSDP, ZeRO; a 3-D layout's is
    /// its [`super::parallel::Layout::recompute`]).
    pub checkpointing: Checkpointing,
    /// The specification `model` was built from where its vocabulary is padded by the
    /// tensor-parallel degree (Megatron's), to build it again at another degree.
    pub written: Option<super::spec::ModelSpec>,
    /// `torch.nn.DataParallel` (`kind = "dp"`) instead of DDP: one process driving the
    /// node's GPUs ([`super::dp`]).
    pub data_parallel: Option<super::dp::DataParallel>,
    /// The share of the GPU's memory the step's modelled peak may not take
    /// ([`super::memory::DEFAULT_HEADROOM`]).
    pub memory_headroom: f64,
}

/// Activation checkpointing (`activation_checkpointing`): which transformer blocks keep only
/// their input in forward and run their forward again in backward (PyTorch's
/// `torch.utils.checkpoint` as transformers' `gradient_checkpointing_enable()`, FSDP's
/// `apply_activation_checkpointing` and torchtitan's `activation_checkpoint.mode` wrap each
/// block; Megatron's `--recompute-granularity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpointing {
    /// Every activation kept.
    #[default]
    None,
    /// Megatron's selective recomputation: the core attention's scores and softmax recomputed,
    /// the rest kept. With flash attention there are no scores to keep (its backward kernel
    /// recomputes them already), so nothing changes.
    Selective,
    /// One block in `every` checkpointed (1: all of them).
    Full {
        /// Checkpoint one block in this many (torchtitan's `selective_ac_option = "N"`).
        every: u64,
    },
}

impl Checkpointing {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"none\", \"selective\" or \"full\"";

    /// Which of `model`'s layers are checkpointed blocks.
    pub fn layers(self, model: &Model) -> Vec<bool> {
        let Checkpointing::Full { every } = self else {
            return vec![false; model.layers.len()];
        };
        let mut k = 0;
        model
            .layers
            .iter()
            .map(|l| {
                let block =
                    matches!(l.parallel.map(|p| p.role), Some(super::models::TpRole::Block { .. }));
                let on = block && k % every.max(1) == 0;
                k += u64::from(block);
                on
            })
            .collect()
    }

    /// "full", "full (one block in 2)", "selective", "none".
    pub fn describe(self) -> String {
        match self {
            Checkpointing::None => "none".into(),
            Checkpointing::Selective => "selective".into(),
            Checkpointing::Full { every: 1 } => "full".into(),
            Checkpointing::Full { every } => format!("full (one block in {every})"),
        }
    }
}

impl DdpSpec {
    /// A step replayed from a list of calls ([`super::calls`]), named `name`.
    pub fn replay(name: String, calls: Vec<super::calls::Call>) -> DdpSpec {
        DdpSpec {
            backend: Default::default(),
            model: Model { name, layers: Vec::new(), grad_dtype: DataType::Float, buffer_bytes: 0 },
            micro_batch: 1,
            grad_accumulation: 1,
            rate: ComputeRate::Tflops(1.0),
            bucket_cap: None,
            gradient_as_bucket_view: false,
            static_graph: false,
            find_unused_parameters: false,
            broadcast_buffers: false,
            hook: CommHook::None,
            compute_slowdown: None,
            optimizer: super::memory::Optimizer::None,
            optimizer_impl: super::memory::OptimizerImpl::Foreach,
            skew: Default::default(),
            sequence: None,
            input: None,
            sharding: None,
            parallel: None,
            launch: None,
            gemm_fixed: None,
            compute_default: None,
            calls: Some(calls),
            profile: None,
            checkpointing: Checkpointing::None,
            written: None,
            data_parallel: None,
            memory_headroom: super::memory::DEFAULT_HEADROOM,
        }
    }
}

/// PyTorch FSDP's `ShardingStrategy` (docs/fsdp-model.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ShardingStrategy {
    /// Parameters, gradients and optimizer state sharded; parameters all-gathered before each
    /// unit's forward and again before its backward.
    FullShard,
    /// Parameters kept whole from forward to backward: no all-gather in backward.
    ShardGradOp,
    /// FULL_SHARD inside each node, replicated across nodes: all-gathers and reduce-scatters
    /// on the node's ranks, then an all-reduce of each rank's shard across the nodes.
    HybridShard,
    /// SHARD_GRAD_OP inside each node, replicated across nodes (`_HYBRID_SHARD_ZERO2`).
    HybridShardZero2,
    /// Nothing sharded: each unit's gradient all-reduced over every rank after its backward,
    /// no all-gathers (deprecated in PyTorch; what one rank runs).
    NoShard,
    /// DeepSpeed ZeRO stage 1: optimizer state sharded; parameters and gradients whole.
    Zero1,
    /// DeepSpeed ZeRO stage 2: optimizer state and gradients sharded; parameters whole.
    Zero2,
}

/// DeepSpeed's `zero_optimization` settings (`kind = "zero"`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Zero {
    /// The stage, 1 to 3 (3 runs as FSDP's FULL_SHARD).
    pub stage: u8,
    /// `reduce_bucket_size`: gradient elements reduced together.
    pub reduce_bucket: u64,
    /// `allgather_bucket_size`: parameter elements gathered together after the step.
    pub allgather_bucket: u64,
    /// `overlap_comm`: reductions on their own stream, beside the backward (else the compute
    /// stream waits for each).
    pub overlap_comm: bool,
}

/// FSDP's `backward_prefetch` (docs/fsdp-model.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BackwardPrefetch {
    /// The next unit's all-gather is issued as a unit's backward begins (the default).
    BackwardPre,
    /// ... after a unit's backward, before its reduce-scatter.
    BackwardPost,
    /// Not before the unit needs it (behind the previous reduce-scatter).
    None,
}

impl ShardingStrategy {
    /// PyTorch's name.
    pub fn name(self) -> &'static str {
        match self {
            ShardingStrategy::FullShard => "FULL_SHARD",
            ShardingStrategy::ShardGradOp => "SHARD_GRAD_OP",
            ShardingStrategy::HybridShard => "HYBRID_SHARD",
            ShardingStrategy::HybridShardZero2 => "_HYBRID_SHARD_ZERO2",
            ShardingStrategy::NoShard => "NO_SHARD",
            ShardingStrategy::Zero1 => "ZeRO-1",
            ShardingStrategy::Zero2 => "ZeRO-2",
        }
    }

    /// Whether parameters are freed after a unit's forward (and gathered again for its
    /// backward).
    pub fn reshards_after_forward(self) -> bool {
        matches!(self, ShardingStrategy::FullShard | ShardingStrategy::HybridShard)
    }

    /// Whether parameters are sharded inside a node and replicated across nodes.
    pub fn hybrid(self) -> bool {
        matches!(self, ShardingStrategy::HybridShard | ShardingStrategy::HybridShardZero2)
    }

    /// The ranks a parameter is sharded over: a node's under a hybrid strategy, none (1)
    /// under NO_SHARD, else all.
    pub fn shard_ranks(self, world: usize, ranks_per_node: usize) -> usize {
        match self {
            ShardingStrategy::NoShard => 1,
            s if s.hybrid() => ranks_per_node.clamp(1, world.max(1)),
            _ => world.max(1),
        }
    }
}

impl BackwardPrefetch {
    /// PyTorch's name ("NONE" for None).
    pub fn name(self) -> &'static str {
        match self {
            BackwardPrefetch::BackwardPre => "BACKWARD_PRE",
            BackwardPrefetch::BackwardPost => "BACKWARD_POST",
            BackwardPrefetch::None => "NONE",
        }
    }
}

/// How an FSDP step shards the model: each layer a unit (auto-wrapped), its parameters one
/// flat parameter.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sharding {
    /// The strategy.
    pub strategy: ShardingStrategy,
    /// The backward prefetch.
    pub backward_prefetch: BackwardPrefetch,
    /// `forward_prefetch`: a unit's forward issues the next unit's all-gather once its own has
    /// been waited for (else the host issues it when it reaches the next unit).
    pub forward_prefetch: bool,
    /// `limit_all_gathers`: the host issues an all-gather only once the forward (or backward)
    /// two units back has freed its parameters, about two units gathered at a time.
    pub limit_all_gathers: bool,
    /// `MixedPrecision.param_dtype`: what the all-gathers carry.
    pub param_dtype: DataType,
    /// `MixedPrecision.reduce_dtype`: what the reduce-scatters carry.
    pub reduce_dtype: DataType,
    /// Gradient accumulation inside `no_sync()`: every micro-step but the last keeps its
    /// gradients unsharded and reduces nothing.
    pub no_sync: bool,
    /// DeepSpeed ZeRO's settings, for `kind = "zero"`.
    pub zero: Option<Zero>,
}

/// The GPU facts the step needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuFacts {
    /// Achieved FLOP/s.
    pub flops: f64,
    /// Device memory bandwidth, bytes/s (for copies, casts and memory-bound layers).
    pub memory_bandwidth: f64,
    /// Streaming multiprocessors, if known.
    pub multiprocessors: Option<u32>,
    /// Cost of one kernel launch (layers and hooks that launch many small kernels pay it).
    pub launch: Secs,
    /// GPU time each of a layer's FLOP-bound kernels ([`super::models::MemoryWork::gemms`])
    /// takes beyond its FLOPs at `flops`.
    pub gemm_fixed: Secs,
    /// The job's ranks on a node (they share its data-loading CPUs).
    pub ranks_per_node: usize,
    /// Under fp8 (Transformer Engine's recipe), the rate of the FLOP-bound work it keeps in 16
    /// bits, FLOP/s: a transformer's attention, its head and embedding; `flops` is then the
    /// blocks' linear layers' fp8 rate ([`super::models::fp8_linears`]). None: all at `flops`.
    pub sixteen_bit_flops: Option<f64>,
}

/// A collective's time as the network model gives it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CollTime {
    /// How long it takes.
    pub time: Time,
    /// Algorithm.
    pub algo: &'static str,
    /// Protocol.
    pub proto: &'static str,
    /// CUDA channels (one CTA, so one SM, each).
    pub channels: usize,
    /// The busiest links while it moves its bytes: name and steady-state utilisation (0–1).
    pub links: Vec<(String, f64)>,
}

impl CollTime {
    /// How long it takes, in seconds.
    pub fn secs(&self) -> Secs {
        Secs::of(self.time)
    }
}

/// One bucket of the simulated step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BucketRow {
    /// Bucket index (reduction order).
    pub index: usize,
    /// Gradient bytes.
    pub bytes: u64,
    /// Bytes its collectives carry (nccl-tests sizes, summed).
    pub wire_bytes: u64,
    /// Tensors.
    pub tensors: usize,
    /// When its last gradient was copied in, ms from the start of the step (it launches once
    /// every bucket before it has).
    pub ready_ms: f64,
    /// When its first collective started.
    pub start_ms: f64,
    /// When its hook finished.
    pub end_ms: f64,
    /// Collectives it ran.
    pub collectives: usize,
    /// Algorithm of its largest collective.
    pub algo: &'static str,
    /// Its protocol.
    pub proto: &'static str,
    /// Under rank skew: how long a typical rank waited, from its bucket being ready to the
    /// collective's start at the slowest rank's pace, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew_wait_ms: Option<f64>,
}

impl BucketRow {
    /// The row of bucket `index` before it runs (its times filled in as it does).
    fn new(index: usize, bytes: u64, wire_bytes: u64, tensors: usize) -> BucketRow {
        BucketRow {
            index,
            bytes,
            wire_bytes,
            tensors,
            ready_ms: 0.0,
            start_ms: 0.0,
            end_ms: 0.0,
            collectives: 0,
            algo: "",
            proto: "",
            skew_wait_ms: None,
        }
    }
}

/// How each collective of `spec` slows compute on `gpu`: the scenario's fixed fraction, or
/// the collective's own channels over the GPU's SMs (none where the SM count is unknown).
pub(crate) fn call_slowdown(spec: &DdpSpec, gpu: &GpuFacts) -> Slowdown {
    match (spec.compute_slowdown, gpu.multiprocessors) {
        (Some(s), _) => Slowdown::Fixed(s),
        (None, Some(sms)) => Slowdown::PerChannel(sms as f64),
        (None, None) => Slowdown::Fixed(0.0),
    }
}

/// A span on a timeline lane, for traces and plots.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Span {
    /// "compute" (the compute stream's work), "hook" (a bucket hook's compute, run in the NCCL
    /// stream's order while the compute stream waits), "nccl" (a collective) or "wait" (the
    /// compute stream idle until the NCCL stream drains: exposed communication).
    pub lane: &'static str,
    /// What ran.
    pub name: String,
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// Bytes a collective carried (nccl-tests' size); 0 for compute.
    pub bytes: u64,
    /// The bucket whose hook ran it (reduction order), if any.
    pub bucket: Option<usize>,
    /// A collective's algorithm; empty for compute.
    pub algo: &'static str,
    /// A collective's protocol; empty for compute.
    pub proto: &'static str,
    /// A collective's CUDA channels, when known (0: compute, or not known).
    pub channels: usize,
    /// A collective's element type; empty for compute.
    pub dtype: &'static str,
    /// The busiest links while a collective moves its bytes (name, steady-state utilisation
    /// 0–1); for traces.
    #[serde(skip)]
    pub links: Vec<(String, f64)>,
    /// The NCCL stream a collective or hook ran on: 0 the main one, 1 a second one
    /// (HYBRID_SHARD's all-reduce across the replicas).
    #[serde(skip)]
    pub stream: u8,
}

impl Span {
    /// A span of `lane` with no collective's facts.
    pub fn compute(lane: &'static str, name: String, start_ms: f64, end_ms: f64) -> Span {
        let (algo, proto, dtype) = ("", "", "");
        Span {
            lane,
            name,
            start_ms,
            end_ms,
            bytes: 0,
            bucket: None,
            algo,
            proto,
            channels: 0,
            dtype,
            links: Vec::new(),
            stream: 0,
        }
    }
}

/// The simulated optimizer step (steady state, after the bucket rebuild).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct StepResult {
    /// Ranks.
    pub world: usize,
    /// One optimizer step, ms.
    pub iteration_time_ms: f64,
    /// The first step (one bucket of everything in current PyTorch), ms.
    pub first_iteration_ms: f64,
    /// Forward compute of all micro-steps, ms.
    pub forward_ms: f64,
    /// The optimizer step after backward, ms: its memory traffic, or its launches.
    pub optimizer_ms: f64,
    /// Rank skew and stragglers' cost, on more than one rank unless the scenario sets none
    /// (`rank_skew_cv` has a default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew: Option<SkewCost>,
    /// Backward compute of all micro-steps, ms (without slowdown).
    pub backward_ms: f64,
    /// Compute-stream work: forward, backward, copies and hook compute, ms (forward, backward,
    /// the optimizer and this are a typical rank's under rank skew).
    pub compute_ms: f64,
    /// Time collectives ran (buffer broadcast included), ms.
    pub comm_ms: f64,
    /// Time the step lost to communication: step − compute (waiting and slowed compute), ms;
    /// under rank skew the slowest rank's (the step less its own compute).
    pub exposed_comm_ms: f64,
    /// 1 − exposed / comm.
    pub overlap_fraction: f64,
    /// Compute slowdown while the largest bucket's all-reduce runs (each collective slows compute
    /// by its own channels over the SMs, or by the scenario's fixed `compute_slowdown`).
    pub compute_slowdown: f64,
    /// Samples per second over all ranks.
    pub samples_per_s: f64,
    /// The same step on one GPU without DDP, ms.
    pub single_gpu_ms: f64,
    /// single_gpu_ms / iteration_time_ms.
    pub scaling_efficiency: f64,
    /// Where the step's time goes; the parts add up to the iteration.
    pub breakdown: Breakdown,
    /// The rate the FLOP-bound kernels run at (a typical rank's), TFLOP/s.
    pub gemm_tflops: f64,
    /// Per bucket.
    pub buckets: Vec<BucketRow>,
    /// Compute and NCCL lanes of the step.
    pub timeline: Vec<Span>,
    /// A pipeline stage's: when its last backward began, ms (not written out: its stage's row
    /// has it).
    #[serde(skip)]
    pub last_backward_began_ms: Option<f64>,
    /// The data loader's time for this step's samples on a rank, ms (0 without a loader; not
    /// written out): the step's floor, which a rank's speed does not move.
    #[serde(skip)]
    pub loader_ms: f64,
    /// The same for one GPU alone with its node's whole loader, ms (not written out).
    #[serde(skip)]
    pub alone_loader_ms: f64,
    /// The host's part of the DDP hooks' compute (their kernel launches), ms, in
    /// `breakdown.ddp_copies_ms` (not written out): under rank skew it is restated at the
    /// host's factor, the rest of that part at the GPU's.
    #[serde(skip)]
    pub hook_launch_ms: f64,
    /// One GPU alone's optimizer step, ms, in `single_gpu_ms` (not written out).
    #[serde(skip)]
    pub alone_optimizer_ms: f64,
    /// A 3-D parallel step's layout and stages (the figures above are its slowest stage's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<super::parallel::ParallelReport>,
    /// The step's process groups and the tier each one's traffic crosses (a simulated step's;
    /// empty on one rank).
    pub comm_groups: Vec<CommGroup>,
    /// A DataParallel step's parts, and the same step under DDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_parallel: Option<Box<super::dp::DpReport>>,
}

/// A process group of a step (one of its kind: rank 0's, or the widest where they differ) and
/// the tier of the cluster its traffic crosses.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CommGroup {
    /// What it is: "all ranks", "data-parallel", "tensor-parallel", "pipeline", "fp8 amax",
    /// "shard", "replicate", …
    pub group: String,
    /// Its ranks.
    pub ranks: usize,
    /// The nodes they are on.
    pub nodes: usize,
    /// The tier its traffic crosses: "nvlink" or "pcie" on one node, else "net" and the
    /// network's tier ([`crate::hw::Cluster::tier`]).
    pub tier: String,
}

/// How many parts a [`Breakdown`] has.
pub const BREAKDOWN_PARTS: usize = 16;

/// A step's time split by cause, ms; the parts add up to the iteration time. Under rank skew
/// the compute parts (and the input stall) are a typical rank's and `skew_wait_ms` is what
/// waiting for the slowest costs; the timeline is the slowest rank's.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Breakdown {
    /// FLOP-bound compute (GEMMs, convolutions, attention) of every micro-step.
    pub flop_ms: f64,
    /// Memory-bound compute (norms, activations, dropout, residual adds, copies, the loss).
    pub memory_ms: f64,
    /// The GPU idle while the host launches kernels slower than the GPU runs them.
    pub launch_ms: f64,
    /// Layers given as measured times.
    pub measured_ms: f64,
    /// DDP's gradient copies into and out of buckets, and hook compute.
    pub ddp_copies_ms: f64,
    /// The optimizer step.
    pub optimizer_ms: f64,
    /// Communication not hidden behind compute (waiting, and compute slowed by NCCL).
    pub exposed_comm_ms: f64,
    /// Waiting for the slowest rank (rank skew, stragglers).
    pub skew_wait_ms: f64,
    /// Waiting for the data loader.
    pub input_stall_ms: f64,
    /// Tensor-parallel collectives and expert-parallel all-to-alls inside forward and
    /// backward (they block compute).
    pub tp_comm_ms: f64,
    /// Under fp8 with a Megatron layout, the all-reduces of each model chunk's amaxes over its
    /// stage's tensor-, context- and data-parallel ranks, forward and backward (they block
    /// compute; a few bytes each, so the group's latency).
    pub amax_comm_ms: f64,
    /// A pipeline stage idle before its last backward: the bubble, waiting for the stages
    /// beside it, and its point-to-point sends.
    pub pipeline_ms: f64,
    /// DataParallel: the parameters and buffers broadcast from GPU 0 before every forward
    /// (flattened, then NCCL broadcasts), or the host building the replicas in Python where
    /// that takes longer.
    pub dp_replicate_ms: f64,
    /// DataParallel: the batch scattered from GPU 0, the outputs gathered to it and their
    /// gradients scattered back (device-to-device copies).
    pub dp_scatter_gather_ms: f64,
    /// DataParallel: the GPUs idle while one Python process launches every GPU's forward
    /// kernels under one interpreter lock, beyond what a GPU waits for a host of its own.
    pub dp_launcher_ms: f64,
    /// DataParallel: the gradients flattened and reduced onto GPU 0 after the last backward.
    pub dp_reduce_ms: f64,
}

impl Breakdown {
    /// The parts' sum, ms.
    pub fn total_ms(&self) -> f64 {
        self.parts().iter().map(|p| p.2).sum()
    }

    /// (label, JSON/CSV key, ms) of each part, in the order reports print them.
    pub fn parts(&self) -> [(&'static str, &'static str, f64); BREAKDOWN_PARTS] {
        [
            ("compute, FLOP-bound", "flop_ms", self.flop_ms),
            ("compute, memory-bound", "memory_ms", self.memory_ms),
            ("kernel launch waits", "launch_ms", self.launch_ms),
            ("measured layer times", "measured_ms", self.measured_ms),
            ("tensor/expert-parallel comm", "tp_comm_ms", self.tp_comm_ms),
            ("fp8 amax all-reduces", "amax_comm_ms", self.amax_comm_ms),
            ("pipeline bubble and p2p", "pipeline_ms", self.pipeline_ms),
            ("DP replication", "dp_replicate_ms", self.dp_replicate_ms),
            ("DP scatter and gather", "dp_scatter_gather_ms", self.dp_scatter_gather_ms),
            ("DP single launcher (GIL)", "dp_launcher_ms", self.dp_launcher_ms),
            ("DP reduce to GPU 0", "dp_reduce_ms", self.dp_reduce_ms),
            ("DDP copies and hooks", "ddp_copies_ms", self.ddp_copies_ms),
            ("optimizer step", "optimizer_ms", self.optimizer_ms),
            ("exposed communication", "exposed_comm_ms", self.exposed_comm_ms),
            ("rank skew wait", "skew_wait_ms", self.skew_wait_ms),
            ("input stall", "input_stall_ms", self.input_stall_ms),
        ]
    }
}

/// One micro-step's compute, layer by layer, and how it splits (s).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LayerTimes {
    /// Each layer's forward.
    pub fwd: Vec<f64>,
    /// Each layer's backward.
    pub bwd: Vec<f64>,
    /// FLOP-bound time.
    pub flop: f64,
    /// Memory-bound time.
    pub memory: f64,
    /// Time layers wait for their launches beyond their GPU time.
    pub launch: f64,
    /// Layers given as measured times.
    pub measured: f64,
    /// The host's clock as it has launched each layer's forward, from the micro-step's start
    /// (the GPU's: each layer starts where the one before ended, `fwd` summed).
    pub host_fwd: Vec<f64>,
    /// Likewise as it has launched each layer's backward (by layer; the backward runs last
    /// layer first, after the whole forward).
    pub host_bwd: Vec<f64>,
}

/// One micro-step's layer times on `gpu`: a layer's GEMMs at the FLOP rate and its
/// memory-bound kernels at the memory bandwidth, one after the other (each kernel is bound by
/// one or the other). Backward is dgrad and wgrad, each as costly as the forward's GEMMs (the
/// first layer has no dgrad). The host launches the kernels in the same order, forward then
/// backward, running ahead of the GPU where it can: a layer cannot end before its last kernel
/// is launched, so where launches take longer than the GPU's work the GPU waits.
pub(crate) fn layer_times(spec: &DdpSpec, gpu: &GpuFacts) -> LayerTimes {
    layer_times_from(spec, gpu, false)
}

/// As [`layer_times`]; `first_dgrad`: whether the first layer computes its input's gradient
/// too (it does on a pipeline stage after the first, which sends it back).
pub(crate) fn layer_times_from(spec: &DdpSpec, gpu: &GpuFacts, first_dgrad: bool) -> LayerTimes {
    layer_times_with(spec, gpu, first_dgrad, true, Launcher::OWN)
}

/// Who launches a step's kernels ([`layer_times_with`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Launcher {
    /// How many times its own host time each forward kernel waits: 1 for a process per GPU;
    /// under `torch.nn.DataParallel`, whose replicas' forwards run in Python threads taking one
    /// interpreter lock in turn, up to the GPUs' count ([`super::dp::GIL_SHARE`]).
    pub fwd_launch_factor: f64,
    /// Whether the backward's launches start level with the GPU rather than where the
    /// forward's left the host (DataParallel's backward is launched by autograd's thread per
    /// GPU, after the outputs' gather).
    pub fresh_backward: bool,
}

impl Launcher {
    /// A process per GPU.
    pub(crate) const OWN: Launcher = Launcher { fwd_launch_factor: 1.0, fresh_backward: false };
}

/// One micro-step's layer times on `gpu` with `launcher` issuing the kernels
/// (as [`layer_times`] otherwise).
pub(crate) fn layer_times_launched(
    spec: &DdpSpec,
    gpu: &GpuFacts,
    launcher: Launcher,
) -> LayerTimes {
    layer_times_with(spec, gpu, false, true, launcher)
}

/// As [`layer_times_from`]; `recompute`: whether checkpointed blocks run their forward again
/// before their backward (its GPU time and launches in the backward's); `launcher`: who
/// launches the kernels.
fn layer_times_with(
    spec: &DdpSpec,
    gpu: &GpuFacts,
    first_dgrad: bool,
    recompute: bool,
    launcher: Launcher,
) -> LayerTimes {
    let again = if recompute {
        spec.checkpointing.layers(&spec.model)
    } else {
        vec![false; spec.model.layers.len()]
    };
    let batch = spec.micro_batch as f64;
    let sixteen = super::memory::sixteen_bit(spec);
    let act = if sixteen { 1.0 } else { 2.0 };
    let layers = &spec.model.layers;
    let mut t = LayerTimes {
        fwd: Vec::new(),
        bwd: vec![0.0; layers.len()],
        flop: 0.0,
        memory: 0.0,
        launch: 0.0,
        measured: 0.0,
        host_fwd: Vec::new(),
        host_bwd: vec![0.0; layers.len()],
    };
    // Per layer, forward and backward: (GPU time, launch time).
    let mut work = Vec::with_capacity(layers.len());
    for (i, l) in layers.iter().enumerate() {
        if let Some((f, b)) = l.times {
            t.measured += f + b;
            work.push(((f, 0.0), (b, 0.0)));
            continue;
        }
        let mut m = super::models::layer_memory_work(l, spec.micro_batch, sixteen);
        // Under fp8 a transformer's blocks run their linear layers at the fp8 rate, with the
        // casts' traffic; the rest of its FLOPs at the 16-bit rate.
        let gemm = match (gpu.sixteen_bit_flops, l.parallel) {
            (Some(half), Some(shape)) => match super::models::fp8_linears(&shape) {
                Some((lin, fwd, bwd)) => {
                    let lin = lin.min(l.fwd_macs);
                    m.fwd += fwd / act;
                    m.bwd += bwd / act;
                    2.0 * batch * (lin / gpu.flops + (l.fwd_macs - lin) / half)
                }
                None => 2.0 * l.fwd_macs * batch / half,
            },
            _ => 2.0 * l.fwd_macs * batch / gpu.flops,
        };
        let m = &m;
        let passes = if i == 0 && !first_dgrad { 1.0 } else { 2.0 };
        // The FLOP-bound kernels' fixed time: a first layer without dgrad runs only wgrads.
        let bwd_gemms = if passes < 2.0 { m.gemms } else { m.bwd_gemms };
        let (fixed_f, fixed_b) =
            (m.gemms as f64 * gpu.gemm_fixed.get(), bwd_gemms as f64 * gpu.gemm_fixed.get());
        let mem_f = m.fwd * batch * act / gpu.memory_bandwidth;
        let mem_b = (m.bwd * batch * act + m.bwd_fixed) / gpu.memory_bandwidth;
        t.flop += (1.0 + passes) * gemm + fixed_f + fixed_b;
        t.memory += mem_f + mem_b;
        let fwd = (gemm + fixed_f + mem_f, m.fwd_kernels as f64 * gpu.launch.get());
        let mut bwd = (passes * gemm + fixed_b + mem_b, m.bwd_kernels as f64 * gpu.launch.get());
        // A checkpointed block runs its forward again first.
        if again[i] {
            t.flop += gemm + fixed_f;
            t.memory += mem_f;
            bwd = (bwd.0 + fwd.0, bwd.1 + fwd.1);
        }
        work.push((fwd, bwd));
    }
    // The host's clock and the GPU's, through forward then backward. `level`: the host starts
    // this work no earlier than the GPU reaches it (a fresh launcher).
    let (mut host, mut done, mut wait) = (0.0, 0.0, 0.0);
    let mut step = |(gpu_s, launch): (f64, f64), level: bool| {
        if level {
            host = f64::max(host, done);
        }
        host += launch;
        let start = done;
        done = f64::max(done + gpu_s, host);
        wait += done - start - gpu_s;
        (done - start, host)
    };
    let mut host_fwd = Vec::with_capacity(work.len());
    for w in &work {
        let (d, h) = step((w.0.0, w.0.1 * launcher.fwd_launch_factor), false);
        t.fwd.push(d);
        host_fwd.push(h);
    }
    let mut level = launcher.fresh_backward;
    for (i, w) in work.iter().enumerate().rev() {
        (t.bwd[i], t.host_bwd[i]) = step(w.1, std::mem::take(&mut level));
    }
    t.launch = wait.max(0.0);
    t.host_fwd = host_fwd;
    t
}

/// The GEMM rate (FLOP/s) at which one micro-step's forward and backward take the model's
/// FLOPs at `mfu_flops` (the model FLOPs utilisation times `peak`), memory-bound work and
/// launches included; an error if those alone take longer, or if the GEMMs would have to run
/// above `peak`.
pub fn rate_for_mfu(
    spec: &DdpSpec,
    gpu: &GpuFacts,
    mfu_flops: f64,
    peak: f64,
) -> Result<f64, String> {
    // The model's FLOPs, not the recomputed ones: a checkpointed step is slower at the same
    // utilisation of the model's FLOPs.
    let at = |flops: f64| {
        let t = layer_times_with(spec, &GpuFacts { flops, ..*gpu }, false, false, Launcher::OWN);
        t.fwd.iter().chain(&t.bwd).sum::<f64>() - t.measured
    };
    // The model's FLOPs per micro-step (forward, and backward's dgrad and wgrad).
    let one = at(1.0) - at(f64::INFINITY);
    if one.is_nan() || one <= 0.0 {
        return Err("mfu needs layers given in FLOPs (fwd_gflops or a preset)".into());
    }
    let target = one / mfu_flops;
    let floor = at(f64::INFINITY);
    if floor >= target {
        return Err(format!(
            "the memory-bound work and kernel launches alone take {:.3} ms of the {:.3} ms that this mfu allows forward and backward; give a lower mfu, or efficiency for the GEMMs alone",
            floor * 1e3,
            target * 1e3
        ));
    }
    // at() falls as the rate grows: bisect on its logarithm between the peak-bound rate (GEMMs
    // alone would take the whole target) and a rate fast enough.
    let (mut lo, mut hi) = (mfu_flops, mfu_flops * 2.0);
    while at(hi) > target {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if at(mid) > target { lo = mid } else { hi = mid }
    }
    let rate = (lo * hi).sqrt();
    if rate > peak * (1.0 + 1e-9) {
        return Err(format!(
            "the GEMMs would have to run at {:.1} TFLOP/s, above the {:.1} TFLOP/s peak, for the memory-bound work and kernel launches ({:.3} ms) to fit the {:.3} ms this mfu allows forward and backward; give a lower mfu",
            rate / 1e12,
            peak / 1e12,
            floor * 1e3,
            target * 1e3
        ));
    }
    Ok(rate)
}

/// Simulates one optimizer step of `spec` on `world` ranks; `coll` times a collective
/// (collective, nccl-tests size, dtype), whatever its group.
pub fn simulate_step(
    spec: &DdpSpec,
    world: usize,
    gpu: &GpuFacts,
    coll: &(dyn Fn(crate::collective::Collective, Bytes, super::DataType) -> CollTime + Sync),
) -> StepResult {
    simulate_step_on(spec, world, gpu, &|_, c, b, d| coll(c, b, d))
}

/// As [`simulate_step`], `coll` timing each collective on its process group (the world's,
/// or HYBRID_SHARD's shard and replicate groups).
pub fn simulate_step_on(
    spec: &DdpSpec,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
) -> StepResult {
    let run = |spec: &DdpSpec, gpu: &GpuFacts| {
        let plan = plan_step(spec, world, gpu, coll);
        let mut step = plan.timeline();
        super::step::run_alone(&mut step, Secs::new(0.0), coll);
        plan.result(&step)
    };
    if spec.skew.is_none() {
        return run(spec, gpu);
    }
    // The slowest rank's compute sets when every bucket starts: the step at its pace.
    let (c, slow_spec, slow_gpu) = spec.skew.slowest(world).for_step(spec, gpu);
    super::skew::restate(run(&slow_spec, &slow_gpu), c)
}

/// What rank skew and stragglers cost a step ([`super::skew`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SkewCost {
    /// The slowest rank's expected GPU factor.
    pub slowest_factor: f64,
    /// The slowest rank's expected host factor (its kernel launches).
    pub slowest_host_factor: f64,
    /// The step's time over the step with every rank at nominal speed, ms.
    pub wait_ms: f64,
    /// The step with every rank at nominal speed, ms.
    pub typical_rank_ms: f64,
}

/// A step ready to run: its timeline not yet started, and what its result needs besides.
#[derive(Clone)]
pub(crate) struct StepPlan {
    pub(crate) steady: Timeline,
    /// The first iteration's end, s (run alone, with `coll`'s times).
    pub(crate) first_end: f64,
    /// Whether the first iteration is a steady one (nothing to rebuild): its time is the
    /// step's, wherever that runs (beside other jobs too).
    pub(crate) first_as_steady: bool,
    pub(crate) k: u64,
    pub(crate) fwd_s: f64,
    pub(crate) bwd_s: f64,
    pub(crate) copies: f64,
    pub(crate) optimizer: f64,
    /// The optimizer step of one GPU alone (the whole model's, where the step shards it).
    pub(crate) alone_optimizer: f64,
    pub(crate) slowdown: f64,
    pub(crate) world: usize,
    pub(crate) micro_batch: u64,
    /// One micro-step's layer times and their split.
    pub(crate) layers: LayerTimes,
    /// The FLOP-bound kernels' rate, FLOP/s.
    pub(crate) flops: f64,
    /// The loader's samples per second for a rank of this job, and for one GPU alone.
    pub(crate) input: Option<(f64, f64)>,
    /// Tensor-parallel collectives in the step, s (they block compute).
    pub(crate) tp_comm: f64,
    /// fp8 amax all-reduces in the step, s (they block compute).
    pub(crate) amax_comm: f64,
    /// The DDP hooks' kernel launches in the step, s (part of their compute).
    pub(crate) hook_launch: f64,
    /// A pipeline stage idle before its last backward (bubble, waits, sends), s.
    pub(crate) pipeline: f64,
    /// A pipeline stage's: its calls that the timeline posts itself ([`Work::Call`]), in the
    /// work before its last backward, timed alone, s (0 where it posts none).
    pub(crate) tp_posted_before: f64,
    /// A pipeline stage's: when its last backward begins with each call timed alone (the
    /// timeline's last [`Work::Mark`](super::timeline::Work) says when it began in the run:
    /// later where its sends or its neighbours' met other traffic, and the difference is
    /// pipeline time).
    pub(crate) last_backward: Option<f64>,
    /// Whether the timeline's waits until a time ([`Work::Until`]) are the host's, launching
    /// late (a replayed trace's gaps), rather than a pipeline stage's.
    pub(crate) host_idle: bool,
    /// Model replicas, each taking `micro_batch` samples per micro-step (the ranks under
    /// data parallelism; fewer under tensor and pipeline parallelism).
    pub(crate) replicas: usize,
    /// Forward and backward of every micro-step on one GPU alone, s, where they are not this
    /// rank's (a pipeline stage holds part of the model).
    pub(crate) alone_compute: Option<f64>,
}

impl StepPlan {
    /// The plan every kind of step starts from, before it sets what is its own: `steady`'s
    /// timeline, whose first iteration (run alone) ended at `first_end` and is a steady one;
    /// `spec`'s micro-steps, batch and loader on `world` ranks of `gpu`, each a replica; forward
    /// and backward the sums of `layers`; no DDP copies, optimizer, compute slowdown, tensor-
    /// or pipeline-parallel time.
    fn base(
        steady: Timeline,
        first_end: f64,
        spec: &DdpSpec,
        world: usize,
        gpu: &GpuFacts,
        layers: LayerTimes,
    ) -> StepPlan {
        StepPlan {
            steady,
            first_end,
            first_as_steady: true,
            k: spec.grad_accumulation.max(1),
            fwd_s: layers.fwd.iter().sum(),
            bwd_s: layers.bwd.iter().sum(),
            copies: 0.0,
            optimizer: 0.0,
            alone_optimizer: 0.0,
            slowdown: 0.0,
            world,
            micro_batch: spec.micro_batch,
            layers,
            flops: gpu.flops,
            input: spec.input.map(|i| (i.per_rank(gpu.ranks_per_node), i.per_rank(1))),
            tp_comm: 0.0,
            amax_comm: 0.0,
            hook_launch: 0.0,
            pipeline: 0.0,
            tp_posted_before: 0.0,
            last_backward: None,
            host_idle: false,
            replicas: world,
            alone_compute: None,
        }
    }

    /// The step's timeline, to start at time zero (or where the previous step ended).
    pub(crate) fn timeline(&self) -> Timeline {
        self.steady.clone()
    }

    /// The data loader's time for one step's samples on a rank of this job, s (0 without a
    /// loader limit): a step takes at least this.
    pub(crate) fn loader_secs(&self) -> f64 {
        self.input.map_or(0.0, |(rank, _)| (self.micro_batch * self.k) as f64 / rank)
    }

    /// The step's result from its timeline, run from time zero.
    pub(crate) fn result(&self, step: &Timeline) -> StepResult {
        let StepPlan { k, fwd_s, bwd_s, copies, optimizer, slowdown, world, .. } = *self;
        // A pipeline stage's last backward later than alone: the first step's gradients are
        // reduced that much later too, and the wait is pipeline time but for what its own
        // posted calls (tensor- and expert-parallel) took beyond their time alone before then.
        // So are its waits for the NCCL stream before then (the distributed optimizer's
        // parameter all-gathers): exposed communication.
        let (late, calls_late, nccl_late) = match (self.last_backward, step.marks.last()) {
            (Some(planned), Some(&began)) => (
                began.get() - planned,
                step.call_wait_at_mark.get() - self.tp_posted_before,
                step.nccl_wait_at_mark.get(),
            ),
            _ => (0.0, 0.0, 0.0),
        };
        // Its last backward's send, after it, is pipeline time too.
        let last_send = step.send_wait.get() - step.send_wait_at_mark.get();
        let first_end = self.first_end + late;
        let pipeline = (self.pipeline + (late - calls_late - nccl_late) + last_send).max(0.0);
        let gpu_end = step.end.map_or(0.0, Secs::get);
        let tp_comm = self.tp_comm + step.call_wait.get();
        let amax = self.amax_comm;
        let comm = step.comm_before.get() + step.comm.get() + tp_comm + amax;
        // A replayed trace's host gaps are compute-stream time, as the model's launch waits are.
        let host = if self.host_idle { step.idle.get() } else { 0.0 };
        let hook = step.hook_compute.get();
        let compute = k as f64 * (fwd_s + bwd_s) + copies + optimizer + hook + host;
        let exposed = (gpu_end - compute - tp_comm - amax - pipeline).max(0.0);
        // The loader's workers prepare the next batches while the GPU runs: a step takes the
        // longer of the two.
        let end = gpu_end.max(self.loader_secs());
        // One GPU alone (with its node's whole loader) runs the same micro-steps and optimizer
        // step, without DDP's copies.
        let alone = self.input.map_or(0.0, |(_, one)| (self.micro_batch * k) as f64 / one);
        let own = self.alone_compute.unwrap_or(k as f64 * (fwd_s + bwd_s));
        let single = (own + self.alone_optimizer).max(alone);
        let samples = (self.micro_batch * k * self.replicas as u64) as f64;
        let l = &self.layers;
        let ms = |x: f64| k as f64 * x * 1e3;
        let breakdown = Breakdown {
            flop_ms: ms(l.flop),
            memory_ms: ms(l.memory),
            launch_ms: ms(l.launch) + host * 1e3,
            measured_ms: ms(l.measured),
            ddp_copies_ms: (copies + hook) * 1e3,
            optimizer_ms: optimizer * 1e3,
            exposed_comm_ms: exposed * 1e3,
            skew_wait_ms: 0.0,
            input_stall_ms: (end - gpu_end) * 1e3,
            tp_comm_ms: tp_comm * 1e3,
            amax_comm_ms: amax * 1e3,
            pipeline_ms: pipeline * 1e3,
            ..Breakdown::default()
        };
        let mut timeline = step.spans.clone();
        if end > gpu_end {
            let (a, b) = (gpu_end * 1e3, end * 1e3);
            timeline.push(Span::compute("wait", "input stall (data loader)".into(), a, b));
        }
        StepResult {
            world,
            iteration_time_ms: end * 1e3,
            first_iteration_ms: if self.first_as_steady {
                end * 1e3
            } else {
                first_end.max(self.loader_secs()) * 1e3
            },
            forward_ms: k as f64 * fwd_s * 1e3,
            backward_ms: k as f64 * bwd_s * 1e3,
            optimizer_ms: optimizer * 1e3,
            skew: None,
            compute_ms: compute * 1e3,
            comm_ms: comm * 1e3,
            exposed_comm_ms: exposed * 1e3,
            overlap_fraction: if comm > 0.0 { (1.0 - exposed / comm).clamp(0.0, 1.0) } else { 1.0 },
            compute_slowdown: slowdown,
            samples_per_s: samples / end,
            single_gpu_ms: single * 1e3,
            scaling_efficiency: single / end,
            breakdown,
            gemm_tflops: self.flops / 1e12,
            buckets: step.rows.clone(),
            timeline,
            last_backward_began_ms: self
                .last_backward
                .and(step.marks.last())
                .map(|t| t.get() * 1e3),
            loader_ms: self.loader_secs() * 1e3,
            alone_loader_ms: alone * 1e3,
            hook_launch_ms: self.hook_launch * 1e3,
            alone_optimizer_ms: self.alone_optimizer * 1e3,
            parallel: None,
            comm_groups: Vec::new(),
            data_parallel: None,
        }
    }
}

/// Everything of a step but running it: its timeline, and the first iteration run alone with
/// `coll`'s times.
pub(crate) fn plan_step(
    spec: &DdpSpec,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
) -> StepPlan {
    if let Some(sharding) = spec.sharding {
        if let (Some(zero), ShardingStrategy::Zero1 | ShardingStrategy::Zero2) =
            (sharding.zero, sharding.strategy)
        {
            return plan_zero(spec, sharding, zero, world, gpu, coll);
        }
        return plan_sharded(spec, sharding, world, gpu, coll);
    }
    if let Some(calls) = &spec.calls {
        return plan_calls(calls, world, gpu, coll, spec);
    }
    plan_ddp(spec, world, gpu, coll, None)
}

/// A list of calls replayed ([`super::calls`]): its compute as given, its collectives timed
/// by `coll`. Calls are checked at parse time; a bad one here leaves the step empty.
fn plan_calls(
    calls: &[super::calls::Call],
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
    spec: &DdpSpec,
) -> StepPlan {
    let per_call = call_slowdown(spec, gpu);
    // Checked where they were read (scenario or trace import): a bad entry cannot come here.
    let work = super::calls::to_work(calls, per_call, Some(world)).unwrap_or_default();
    let compute: f64 =
        work.iter().map(|w| if let Work::Run { secs, .. } = w { secs.get() } else { 0.0 }).sum();
    let steady = Timeline::new(work, Vec::new(), Vec::new());
    let mut first = steady.clone();
    super::step::run_alone(&mut first, Secs::new(0.0), coll);
    let layers = LayerTimes {
        fwd: Vec::new(),
        bwd: Vec::new(),
        flop: 0.0,
        memory: 0.0,
        launch: 0.0,
        measured: compute,
        host_fwd: Vec::new(),
        host_bwd: Vec::new(),
    };
    StepPlan {
        k: 1,
        fwd_s: compute,
        bwd_s: 0.0,
        slowdown: match per_call {
            Slowdown::Fixed(s) => s,
            Slowdown::PerChannel(_) => 0.0,
        },
        input: None,
        host_idle: true,
        // A model profile split over tensor-parallel ranks: tp of them make one replica.
        replicas: world / spec.profile.as_ref().map_or(1, |p| p.tp.max(1)),
        ..StepPlan::base(steady, first.end.map_or(0.0, Secs::get), spec, world, gpu, layers)
    }
}

/// A pipeline stage's step as the DDP machinery runs it from the stage's last backward
/// ([`super::parallel`]): the schedule before it is fixed, its gradients' buckets reduce over
/// the stage's data-parallel group while it runs.
#[derive(Clone)]
pub(crate) struct StageWork {
    /// The stage's layer times: `bwd` its last backward's (recompute and tensor-parallel
    /// collectives in), 0 for layers whose gradients were complete before it.
    pub layers: LayerTimes,
    /// Each layer's work in the last backward, where it posts calls of its own (in place of
    /// running its `bwd` time).
    pub layer_work: Option<Vec<Vec<Work>>>,
    /// The last backward's send of its input's gradient to the stage before, as its backward
    /// ends.
    pub last_send: Option<Work>,
    /// Whether the gradients' reductions wait for that send (Megatron's `align_grad_reduce`):
    /// their copies into the buckets, which launch them, come after it; else during the
    /// backward, as they fill.
    pub reduce_after_send: bool,
    /// The compute stream's work before the last backward.
    pub before: Vec<Work>,
    /// When the last backward begins, run alone, s.
    pub last_backward: f64,
    /// Work after the gradients are reduced and before the optimizer (the tied embedding's
    /// all-reduce, on another group: timed beforehand).
    pub after: Vec<Work>,
    /// Whether the experts' gradients reduce in buckets of their own over the expert-data
    /// group (expert parallelism).
    pub experts_apart: bool,
    /// The ranks the optimizer step is divided over (Megatron's distributed optimizer: the
    /// data-parallel ones; else 1).
    pub optimizer_shards: usize,
    /// Whether the sharded optimizer's updated parameters are all-gathered after its step,
    /// exposed (Megatron without `--overlap-param-gather`).
    pub gather_after_step: bool,
    /// Each tensor's model chunk (interleaved schedules; empty: one chunk): each chunk's
    /// gradients reduce in buckets of their own.
    pub chunk_of: Vec<usize>,
    /// Whether it is the first pipeline stage, the only one whose first chunk Megatron splits
    /// into buckets (Megatron-LM d98e8a64, training.py: `per_chunk_bucket_sizes`, None for
    /// later chunks and for pipeline ranks above 0, and distributed_data_parallel.py): every
    /// other chunk is one bucket.
    pub first_stage: bool,
    /// Chunks whose gradients are complete before the last backward and reduce then: (the
    /// length of `before` at which their copies into the buckets, which launch them, go;
    /// their layers).
    pub early_copies: Vec<(usize, Vec<usize>)>,
}

/// The group a bucket reduces over: the world (a stage's data-parallel group), or for
/// experts' buckets the expert-data group ([`Group::ExpertData`], resolved by the stage).
pub(crate) fn bucket_group(b: &Bucket) -> Group {
    if b.expert { Group::ExpertData(0) } else { Group::World }
}

/// A DDP step, or (with `stage`) a pipeline stage's step from its last backward.
pub(crate) fn plan_ddp(
    spec: &DdpSpec,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
    stage: Option<&StageWork>,
) -> StepPlan {
    use crate::collective::Collective;
    let m = &spec.model;
    let layers = stage.map_or_else(|| layer_times(spec, gpu), |s| s.layers.clone());
    let (fwd, bwd) = (&layers.fwd, &layers.bwd);
    let (fwd_s, bwd_s) = (fwd.iter().sum::<f64>(), bwd.iter().sum::<f64>());
    let pass = |bytes: f64| bytes / gpu.memory_bandwidth;
    let compute_secs = |bytes: f64, flops: f64, launches: u64| {
        pass(bytes).max(flops / gpu.flops) + launches as f64 * gpu.launch.get()
    };
    let tensors: Vec<&super::models::Tensor> = m.tensors().collect();
    let grad_bytes: u64 = tensors.iter().map(|t| m.grad_bytes(t)).sum();
    let rebuilt = spec.static_graph || !spec.find_unused_parameters;
    let phase = if rebuilt { Phase::Rebuilt } else { Phase::Construction };
    let hooked = spec.hook != CommHook::None;
    // Copy into the bucket (with the division, unless a hook divides); with bucket views and a
    // hook there is nothing to do, without a hook an in-place division remains.
    let copy_in = |bytes: u64| {
        if spec.gradient_as_bucket_view && hooked { 0.0 } else { pass(2.0 * bytes as f64) }
    };

    let optimizer =
        sharded_optimizer_secs(spec, &tensors, gpu, stage.map_or(1, |s| s.optimizer_shards));

    // A bucket's collectives: its hook's; under Megatron's distributed optimizer a
    // reduce-scatter where DDP all-reduces (Megatron-LM d98e8a64,
    // megatron/core/distributed/param_and_grad_buffer.py, `start_grad_sync`), the bucket
    // padded to a multiple of the data-parallel ranks as Megatron pads its buffers.
    let scatter = stage.is_some_and(|s| s.optimizer_shards > 1);
    let steps_of = |hook: &CommHook, b: &Bucket| -> Vec<HookStep> {
        let mut steps = hook_steps(hook, m, b, world as u64);
        if scatter {
            for st in &mut steps {
                if let HookStep::Collective { collective, bytes, dtype } = st
                    && *collective == Collective::AllReduce
                {
                    let ranks = stage.map_or(world, |s| s.optimizer_shards) as u64;
                    let unit = ranks * dtype.size();
                    *collective = Collective::ReduceScatter;
                    *bytes = bytes.div_ceil(unit) * unit;
                }
            }
        }
        steps
    };
    // A bucket's hook as NCCL-stream work, and its row.
    let batches = |hook: &CommHook, buckets: &[Bucket], slowdown: Slowdown| -> Vec<Batch> {
        let blocking = matches!(hook, CommHook::PowerSgd { .. } | CommHook::BatchedPowerSgd { .. });
        let slowdown = if blocking { Slowdown::Fixed(1.0) } else { slowdown };
        buckets
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                let steps = steps_of(hook, b);
                let group = bucket_group(b);
                let ops = steps
                    .iter()
                    .map(|s| match *s {
                        HookStep::Compute { bytes, flops, launches } => Op::Hold {
                            secs: Secs::new(compute_secs(bytes, flops, launches)),
                            name: format!("bucket {bi} hook"),
                        },
                        HookStep::Collective { collective, bytes, dtype } => Op::Coll {
                            group,
                            collective,
                            bytes: Bytes::new(bytes),
                            dtype,
                            name: format!("bucket {bi} {}", collective.name()),
                        },
                    })
                    .collect();
                let row = BucketRow::new(bi, b.bytes, wire_bytes(&steps), b.tensors.len());
                Batch { ops, slowdown, row: Some(row), early: false, side: false }
            })
            .collect()
    };
    // The backward: each layer, then its gradients' copies into their buckets (reverse order);
    // the local_used_map all-reduce; finalize_backward (wait for every bucket, copy out).
    // `send`: a pipeline stage's send of its input's gradient, which leaves once its backward
    // and its gradient hooks are done, the compute stream waiting for it. With Megatron's
    // `align_grad_reduce` (its default) every stage but the first reduces its gradients in the
    // pipeline's bubble, launched after that send (Megatron-LM d98e8a64,
    // megatron/core/pipeline_parallel/schedules.py, the 1F1B cooldown and `grad_sync_func`):
    // the gradients' copies into their buckets, which launch them, come after it.
    let backward = |hook: &CommHook,
                    buckets: &[Bucket],
                    slowdown: Slowdown,
                    mut work: Vec<Work>,
                    send: Option<Work>| {
        let mut owner = vec![0usize; tensors.len()];
        for (bi, b) in buckets.iter().enumerate() {
            for &i in &b.tensors {
                owner[i] = bi;
            }
        }
        let mut after_send = Vec::new();
        // Layers whose copies came before the last backward.
        let early: Vec<usize> = stage
            .iter()
            .flat_map(|s| s.early_copies.iter().flat_map(|(_, ls)| ls.iter().copied()))
            .collect();
        for (li, layer) in m.layers.iter().enumerate().rev() {
            let first: usize = m.layers[..li].iter().map(|l| l.tensors.len()).sum();
            let name = format!("bwd {}", layer.name);
            match stage.and_then(|s| s.layer_work.as_ref()) {
                Some(own) => {
                    work.push(Work::Open);
                    work.extend(own[li].iter().cloned());
                    work.push(Work::Close { name });
                }
                None => {
                    let secs = Secs::new(bwd[li]);
                    work.push(Work::Run { secs, name: Some(name), grad: None });
                }
            }
            if early.contains(&li) {
                continue;
            }
            // A stage that sends may launch its gradients' reductions once the send is done.
            let wait = send.is_some() && stage.is_some_and(|s| s.reduce_after_send);
            let copies = if wait { &mut after_send } else { &mut work };
            for k in (0..layer.tensors.len()).rev() {
                let i = first + k;
                copies.push(Work::Run {
                    secs: Secs::new(copy_in(m.grad_bytes(tensors[i]))),
                    name: None,
                    grad: Some(i),
                });
            }
        }
        work.extend(send.clone());
        work.extend(after_send);
        // find_unused_parameters (not static): the all-reduce of local_used_map, one int32 per
        // parameter, at the end of backward.
        if spec.find_unused_parameters && !spec.static_graph {
            work.push(Work::Post(Box::new(Batch {
                ops: vec![Op::Coll {
                    group: Group::World,
                    collective: Collective::AllReduce,
                    bytes: Bytes::new(4 * tensors.len() as u64),
                    dtype: DataType::Int32,
                    name: "local_used_map all_reduce".into(),
                }],
                slowdown,
                row: None,
                early: false,
                side: false,
            })));
        }
        work.push(Work::Drain);
        work.extend(stage.iter().flat_map(|s| s.after.iter().cloned()));
        if !spec.gradient_as_bucket_view {
            work.push(Work::Run {
                secs: Secs::new(pass(2.0 * grad_bytes as f64)),
                name: Some("copy-out".into()),
                grad: None,
            });
        }
        if optimizer > 0.0 {
            let name = Some(format!("optimizer step ({})", spec.optimizer.name()));
            work.push(Work::Run { secs: Secs::new(optimizer), name, grad: None });
            // Megatron's distributed optimizer: each rank's updated shard of the 16-bit
            // parameters all-gathered after its step, before the next forward (without
            // `--overlap-param-gather`, its default).
            let gathered = stage.filter(|s| s.gather_after_step);
            if let Some(w) = gathered.map(|s| s.optimizer_shards as u64).filter(|&w| w > 1) {
                let dtype = super::parallel::act_dtype(spec);
                let numel: u64 = tensors.iter().map(|t| t.numel).sum();
                work.push(Work::Post(Box::new(Batch {
                    ops: vec![Op::Coll {
                        group: Group::World,
                        collective: Collective::AllGather,
                        bytes: Bytes::new(numel.div_ceil(w) * w * dtype.size()),
                        dtype,
                        name: "all_gather (updated parameters)".into(),
                    }],
                    slowdown,
                    row: None,
                    early: false,
                    side: false,
                })));
                work.push(Work::Drain);
            }
        }
        Timeline::new(work, owner, batches(hook, buckets, slowdown))
    };

    let apart = stage.is_some_and(|s| s.experts_apart);
    let chunk_of = stage.map_or(&[][..], |s| s.chunk_of.as_slice());
    let bucketed = |phase| match stage {
        Some(s) => {
            let split = |c: usize| s.first_stage && c == 0;
            buckets_by(m, spec.bucket_cap, phase, chunk_of, apart, &split)
        }
        None => buckets(m, spec.bucket_cap, phase),
    };
    let steady = bucketed(phase);
    let rebuilt_first = bucketed(Phase::FirstIteration);
    // The host's part of the hooks' compute: their launches, once per bucket a step.
    let hook_launch: f64 = (steady.iter().flat_map(|b| steps_of(&spec.hook, b)))
        .map(|s| match s {
            HookStep::Compute { launches, .. } => launches as f64 * gpu.launch.get(),
            HookStep::Collective { .. } => 0.0,
        })
        .sum();
    {
        // Time every distinct collective of the step once, in parallel (the results are pure
        // functions of their arguments, so the order does not matter).
        use rayon::prelude::*;
        let mut keys: Vec<(Group, Collective, u64, super::DataType)> = steady
            .iter()
            .chain(&rebuilt_first)
            .flat_map(|b| {
                let g = bucket_group(b);
                steps_of(&spec.hook, b).into_iter().map(move |s| (g, s))
            })
            .filter_map(|(g, s)| match s {
                HookStep::Collective { collective, bytes, dtype } => {
                    Some((g, collective, bytes, dtype))
                }
                HookStep::Compute { .. } => None,
            })
            .collect();
        if m.buffer_bytes > 0 {
            keys.push((Group::World, Collective::Broadcast, m.buffer_bytes, DataType::Uint8));
        }
        keys.sort();
        keys.dedup();
        keys.par_iter().for_each(|&(g, c, b, d)| {
            coll(g, c, Bytes::new(b), d);
        });
    }
    // The slowdown: NCCL's CTAs (one per channel) over the GPU's SMs, each collective by its
    // own channels while it runs; reported for the largest bucket.
    let per_call = call_slowdown(spec, gpu);
    let slowdown = spec.compute_slowdown.unwrap_or_else(|| {
        let big = steady.iter().max_by_key(|b| b.bytes);
        match (gpu.multiprocessors, big) {
            (Some(sms), Some(big)) if big.bytes > 0 => {
                let c = coll(Group::World, Collective::AllReduce, Bytes::new(big.bytes), big.dtype);
                (c.channels as f64 / sms as f64).min(1.0)
            }
            _ => 0.0,
        }
    });

    let k = spec.grad_accumulation.max(1);
    let broadcast = stage.is_none() && spec.broadcast_buffers && m.buffer_bytes > 0 && world > 1;
    let mut before = Vec::new();
    // no_sync micro-steps: compute only, gradients accumulate in place.
    for _ in 1..k {
        before.push(Work::Run {
            secs: Secs::new(fwd_s),
            name: Some("fwd (no_sync)".into()),
            grad: None,
        });
        before.push(Work::Run {
            secs: Secs::new(bwd_s),
            name: Some("bwd (no_sync)".into()),
            grad: None,
        });
    }
    // Buffers are broadcast at the start of a forward that follows a synchronised step: every
    // step without accumulation; with it, the first micro-step's (its time is moved here).
    if broadcast {
        before.push(Work::Post(Box::new(Batch {
            ops: vec![Op::Coll {
                group: Group::World,
                collective: Collective::Broadcast,
                bytes: Bytes::new(m.buffer_bytes),
                dtype: DataType::Uint8,
                name: "buffer broadcast".into(),
            }],
            slowdown: per_call,
            row: None,
            early: true,
            side: false,
        })));
        before.push(Work::Drain);
    }
    // The synchronising micro-step's forward, layer by layer (the no_sync ones stay whole).
    for (layer, &secs) in m.layers.iter().zip(fwd) {
        before.push(Work::Run {
            secs: Secs::new(secs),
            name: Some(format!("fwd {}", layer.name)),
            grad: None,
        });
    }
    if let Some(s) = stage {
        // The chunks that reduce before the last backward: their copies where the schedule
        // launches them, in one pass over the stage's items (`early_copies` is in order).
        let mut out = Vec::with_capacity(s.before.len() + tensors.len());
        let mut done = 0;
        for (at, layers) in &s.early_copies {
            let at = (*at).clamp(done, s.before.len());
            out.extend_from_slice(&s.before[done..at]);
            done = at;
            for &li in layers.iter().rev() {
                let first: usize = m.layers[..li].iter().map(|l| l.tensors.len()).sum();
                for k in (0..m.layers[li].tensors.len()).rev() {
                    let i = first + k;
                    out.push(Work::Run {
                        secs: Secs::new(copy_in(m.grad_bytes(tensors[i]))),
                        name: None,
                        grad: Some(i),
                    });
                }
            }
        }
        out.extend_from_slice(&s.before[done..]);
        before = out;
    }
    let send = stage.and_then(|s| s.last_send.clone());
    let steady_line = backward(&spec.hook, &steady, per_call, before, send);
    let copies: f64 = tensors.iter().map(|x| copy_in(m.grad_bytes(x))).sum::<f64>()
        + if spec.gradient_as_bucket_view { 0.0 } else { pass(2.0 * grad_bytes as f64) };

    // The first step: one bucket of everything, launched when backward is done (current
    // PyTorch, find_unused_parameters=False or static_graph); otherwise the construction buckets.
    let first_buckets = if rebuilt { rebuilt_first } else { steady.clone() };
    let b0 = if broadcast {
        coll(Group::World, Collective::Broadcast, Bytes::new(m.buffer_bytes), DataType::Uint8)
            .secs()
            .get()
    } else {
        0.0
    };
    let first_start =
        stage.map_or((k - 1) as f64 * (fwd_s + bwd_s) + b0 + fwd_s, |s| s.last_backward);
    // PowerSGD runs plain all-reduces before start_powerSGD_iter (at least 2 with error
    // feedback or warm start, which PyTorch enforces).
    let first_hook = match spec.hook {
        CommHook::PowerSgd { start_iter, .. } | CommHook::BatchedPowerSgd { start_iter, .. }
            if start_iter > 0 =>
        {
            CommHook::None
        }
        h => h,
    };
    let mut first = backward(&first_hook, &first_buckets, per_call, Vec::new(), None);
    super::step::run_alone(&mut first, Secs::new(first_start), coll);
    StepPlan {
        first_as_steady: false,
        k,
        fwd_s,
        bwd_s,
        copies,
        optimizer,
        alone_optimizer: optimizer,
        slowdown,
        hook_launch,
        ..StepPlan::base(
            steady_line,
            first.end.map_or(first_start, Secs::get),
            spec,
            world,
            gpu,
            layers,
        )
    }
}

/// A DeepSpeed ZeRO stage 1 or 2 step (docs/fsdp-model.md §6, DeepSpeed's behaviour as
/// recalled there, not read from its source): parameters whole in `param_dtype` on every rank,
/// so forward and backward gather nothing.
///
/// * Gradients fill buckets of `reduce_bucket` elements in backward order; a full bucket is
///   reduce-scattered (each rank keeps its partition). Stage 2 reduces each bucket as it
///   fills, during the backward, and so does stage 1 with `overlap_comm`; stage 1 without it
///   reduces them all after the backward. Without `overlap_comm` the compute stream waits
///   for each reduction.
/// * The optimizer steps the rank's 1/world of the parameters (fp32 master weights and
///   state), then the updated parameters are all-gathered in `allgather_bucket` chunks, the
///   compute stream waiting for them.
///
/// With gradient accumulation every micro-step reduces (DeepSpeed reduces at each
/// micro-step's gradient boundary only when it is the last; stage 2 still partitions each
/// micro-step's gradients: both are taken as every micro-step reducing, an overstatement for
/// stage 1).
fn plan_zero(
    spec: &DdpSpec,
    sharding: Sharding,
    zero: Zero,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
) -> StepPlan {
    use crate::collective::Collective;
    let m = &spec.model;
    let layers = layer_times(spec, gpu);
    let (fwd, bwd) = (&layers.fwd, &layers.bwd);
    let w = world.max(1) as u64;
    let slowdown = call_slowdown(spec, gpu);
    let numel: Vec<u64> =
        m.layers.iter().map(|l| l.tensors.iter().map(|t| t.numel).sum()).collect();
    let units = m.layers.len();
    let mut work = Vec::new();
    let mut posted = 0usize;
    let mut post = |work: &mut Vec<Work>, b: Batch| {
        work.push(Work::Post(Box::new(b)));
        posted += 1;
        posted
    };
    // A bucket of `elements` gradient elements, reduce-scattered (padded to the ranks).
    let mut bucket_index = 0usize;
    let mut reduce = |work: &mut Vec<Work>, elements: u64, tensors: usize| {
        let padded = elements.div_ceil(w) * w;
        let bytes = padded * sharding.reduce_dtype.size();
        let row =
            BucketRow::new(bucket_index, padded * sharding.param_dtype.size(), bytes, tensors);
        let name = format!("reduce_scatter (bucket {bucket_index})");
        bucket_index += 1;
        let op = Op::Coll {
            group: Group::World,
            collective: Collective::ReduceScatter,
            bytes: Bytes::new(bytes),
            dtype: sharding.reduce_dtype,
            name,
        };
        let n = post(
            work,
            Batch { ops: vec![op], slowdown, row: Some(row), early: false, side: false },
        );
        if !zero.overlap_comm {
            work.push(Work::Wait(n));
        }
    };
    let k = spec.grad_accumulation.max(1);
    // Hooks reduce buckets as the backward fills them at stage 2, and at stage 1 with
    // overlap_comm; stage 1 without it reduces every bucket after the backward.
    let during = zero.stage >= 2 || zero.overlap_comm;
    for _ in 0..k {
        for (layer, &secs) in m.layers.iter().zip(fwd) {
            let name = Some(format!("fwd {}", layer.name));
            work.push(Work::Run { secs: Secs::new(secs), name, grad: None });
        }
        let (mut filled, mut tensors) = (0u64, 0usize);
        let mut after = Vec::new();
        for u in (0..units).rev() {
            let name = Some(format!("bwd {}", m.layers[u].name));
            work.push(Work::Run { secs: Secs::new(bwd[u]), name, grad: None });
            filled += numel[u];
            tensors += m.layers[u].tensors.len();
            if filled >= zero.reduce_bucket {
                if during {
                    reduce(&mut work, filled, tensors);
                } else {
                    after.push((filled, tensors));
                }
                (filled, tensors) = (0, 0);
            }
        }
        if filled > 0 {
            after.push((filled, tensors));
        }
        for (elements, tensors) in after {
            reduce(&mut work, elements, tensors);
        }
        work.push(Work::Drain);
    }
    // The optimizer steps the rank's partition, then the parameters are gathered back.
    let tensors: Vec<&super::models::Tensor> = m.tensors().collect();
    let optimizer = optimizer_secs(spec, &tensors, gpu) / w as f64;
    if optimizer > 0.0 {
        let name = Some(format!("optimizer step ({}, partition)", spec.optimizer.name()));
        work.push(Work::Run { secs: Secs::new(optimizer), name, grad: None });
    }
    let total: u64 = numel.iter().sum();
    let chunk = zero.allgather_bucket.max(1);
    let mut left = total;
    while left > 0 {
        let elements = left.min(chunk);
        left -= elements;
        let bytes = elements.div_ceil(w) * w * sharding.param_dtype.size();
        let op = Op::Coll {
            group: Group::World,
            collective: Collective::AllGather,
            bytes: Bytes::new(bytes),
            dtype: sharding.param_dtype,
            name: "all_gather (updated parameters)".into(),
        };
        post(&mut work, Batch { ops: vec![op], slowdown, row: None, early: false, side: false });
    }
    work.push(Work::Drain);
    let reported = match slowdown {
        Slowdown::Fixed(s) => s,
        Slowdown::PerChannel(_) => {
            let bytes = zero.reduce_bucket.min(total).max(1) * sharding.reduce_dtype.size();
            let c = coll(
                Group::World,
                Collective::ReduceScatter,
                Bytes::new(bytes),
                sharding.reduce_dtype,
            );
            slowdown.of(c.channels)
        }
    };
    let steady = Timeline::new(work, Vec::new(), Vec::new());
    sharded_plan(spec, (world, w), gpu, coll, steady, layers, (optimizer, reported))
}

/// A sharded step's plan (FSDP, ZeRO) from its timeline: its first iteration run alone with
/// `coll`'s times, the same as the steady one (no bucket rebuild); `w` the ranks the optimizer
/// state is sharded over, `optimizer` the step over a rank's shard, `slowdown` compute's under
/// its largest collective.
fn sharded_plan(
    spec: &DdpSpec,
    (world, w): (usize, u64),
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
    steady: Timeline,
    layers: LayerTimes,
    (optimizer, slowdown): (f64, f64),
) -> StepPlan {
    let mut first = steady.clone();
    super::step::run_alone(&mut first, Secs::new(0.0), coll);
    StepPlan {
        optimizer,
        alone_optimizer: optimizer * w as f64,
        slowdown,
        ..StepPlan::base(steady, first.end.map_or(0.0, Secs::get), spec, world, gpu, layers)
    }
}

/// Issue times closer than this (s) count as the same moment.
const ISSUE_EPS: f64 = 1e-12;

/// When the host issues each unit's forward all-gather, on the layers' own clock (from the
/// micro-step's start, the GPU waiting for launches but not for all-gathers;
/// docs/fsdp-model.md §2): at the unit's pre-forward hook, which the host reaches once it has
/// launched the forward before it, or with `forward_prefetch` at the previous unit's, one
/// unit earlier; under `limit_all_gathers` not before the forward two units back has ended
/// and freed its parameters. While the host runs ahead of the GPU the limit decides (two
/// all-gathers ahead, prefetch or not); where the host bounds the step, only a prefetch issues
/// the next all-gather before the unit's forward is launched. Left out: the limit's blocking
/// of the host, which delays its later launches.
fn forward_issue(layers: &LayerTimes, sharding: &Sharding) -> Vec<f64> {
    let n = layers.fwd.len();
    let mut done = Vec::with_capacity(n);
    let mut t = 0.0;
    for d in &layers.fwd {
        t += d;
        done.push(t);
    }
    // The host's clock as it reaches unit k's pre-forward.
    let reach =
        |k: usize| if k == 0 { 0.0 } else { layers.host_fwd.get(k - 1).copied().unwrap_or(0.0) };
    (0..n)
        .map(|u| {
            let host =
                if sharding.forward_prefetch { reach(u.saturating_sub(1)) } else { reach(u) };
            let gate = if sharding.limit_all_gathers && u >= 2 { done[u - 2] } else { 0.0 };
            host.max(gate)
        })
        .collect()
}

/// How far into unit `u`'s backward (s, within it) BACKWARD_POST issues the next unit's
/// all-gather, on the layers' own clock: from the post-backward hook, which the host reaches
/// once it has launched the backward, `limit_all_gathers` holding it until the unit before has
/// finished (which it has as this one begins; docs/fsdp-model.md §2). While the host runs
/// ahead of the GPU that is the backward's start, as under BACKWARD_PRE; where launches bound
/// the backward, its end.
fn post_issue(layers: &LayerTimes, u: usize) -> f64 {
    let Some(&host) = layers.host_bwd.get(u) else { return 0.0 };
    let begins = layers.fwd.iter().sum::<f64>() + layers.bwd[u + 1..].iter().sum::<f64>();
    (host - begins).clamp(0.0, layers.bwd[u])
}

/// An FSDP step (docs/fsdp-model.md): every layer a unit whose parameters are one flat
/// parameter, padded to a multiple of the `world` ranks. All-gathers and reduce-scatters share
/// one NCCL communicator, so they run one at a time in the order they were issued: one FIFO
/// stream (HYBRID_SHARD's all-reduce across the replicas runs on a second, after its unit's
/// reduce-scatter).
///
/// * Forward: each unit's all-gather is issued as [`forward_issue`] says (`limit_all_gathers`:
///   unit j+2's not before unit j's forward is done; without `forward_prefetch`, not before
///   the host reaches unit j+2); unit j's forward waits for its own all-gather (not for later
///   ones).
/// * Backward (FULL_SHARD): each unit's all-gather again, issued by `backward_prefetch` (PRE:
///   as the previous unit's backward begins; POST: likewise while the host runs ahead of the
///   GPU, else once the host has launched that backward, [`post_issue`]; None: when the unit
///   needs it, behind the previous reduce-scatter), then the unit's backward, then its
///   gradients' reduce-scatter. SHARD_GRAD_OP keeps the parameters from forward: no all-gather.
/// * Then every reduce-scatter is waited for, and the optimizer steps the rank's shard.
///
/// With gradient accumulation every micro-step runs so, unless inside `no_sync()`: then only
/// the last micro-step reduces (the others keep whole gradients), and SHARD_GRAD_OP gathers its
/// parameters once (they stay unsharded through the accumulation); the optimizer runs once.
///
/// Left out: the root unit's parameters kept after forward, the gradient's
/// cast to `reduce_dtype` and the all-gather's copy-out (elementwise passes).
fn plan_sharded(
    spec: &DdpSpec,
    sharding: Sharding,
    world: usize,
    gpu: &GpuFacts,
    coll: &GroupTimer<'_>,
) -> StepPlan {
    use crate::collective::Collective;
    let m = &spec.model;
    let layers = layer_times(spec, gpu);
    let (fwd, bwd) = (&layers.fwd, &layers.bwd);
    let w = sharding.strategy.shard_ranks(world, gpu.ranks_per_node) as u64;
    let hybrid = sharding.strategy.hybrid() && world as u64 > w;
    let shard_group = if sharding.strategy.hybrid() { Group::Shard } else { Group::World };
    // Each unit's flat parameter, padded to a multiple of the ranks.
    let padded: Vec<u64> = m
        .layers
        .iter()
        .map(|l| l.tensors.iter().map(|t| t.numel).sum::<u64>().div_ceil(w) * w)
        .collect();
    let units = m.layers.len();
    let slowdown = call_slowdown(spec, gpu);
    let batch = |collective: Collective, u: usize, dtype: DataType, what: &str, row: bool| {
        let bytes = padded[u] * dtype.size();
        let row = row.then(|| {
            let grad = padded[u] * m.grad_dtype.size();
            BucketRow::new(u, grad, bytes, m.layers[u].tensors.len())
        });
        let name = format!("{what} {}", m.layers[u].name);
        let ops = vec![Op::Coll {
            group: shard_group,
            collective,
            bytes: Bytes::new(bytes),
            dtype,
            name,
        }];
        Batch { ops, slowdown, row, early: false, side: false }
    };
    // HYBRID_SHARD: the reduce-scattered shard all-reduced across the nodes, on FSDP's
    // all-reduce stream and the replicas' communicator: after the reduce-scatter, beside the
    // shard group's next collectives (docs/fsdp-model.md §1, post-backward).
    let replicas = |u: usize| {
        let bytes = padded[u] * sharding.reduce_dtype.size() / w;
        let op = Op::Coll {
            group: Group::Replicate,
            collective: Collective::AllReduce,
            bytes: Bytes::new(bytes),
            dtype: sharding.reduce_dtype,
            name: format!("all_reduce (replicas) {}", m.layers[u].name),
        };
        Batch { ops: vec![op], slowdown, row: None, early: false, side: true }
    };
    let mut work = Vec::new();
    let mut posted = 0usize;
    let mut post = |work: &mut Vec<Work>, b: Batch| {
        work.push(Work::Post(Box::new(b)));
        posted += 1;
        posted
    };
    let gather =
        |u: usize, phase: &str| batch(Collective::AllGather, u, sharding.param_dtype, phase, false);
    // NO_SHARD: nothing to gather; each unit's gradient all-reduced whole.
    let no_shard = sharding.strategy == ShardingStrategy::NoShard;
    let (reduce, reduce_name) = if no_shard {
        (Collective::AllReduce, "all_reduce")
    } else {
        (Collective::ReduceScatter, "reduce_scatter")
    };
    // Each micro-step gathers and reduce-scatters; inside `no_sync()` every micro-step but the
    // last reduces nothing, and SHARD_GRAD_OP keeps its parameters unsharded after such a
    // backward, so the next forward gathers nothing either.
    let k = spec.grad_accumulation.max(1);
    for step in 0..k {
        let sync = !sharding.no_sync || step + 1 == k;
        let kept = sharding.no_sync && step > 0 && !sharding.strategy.reshards_after_forward();
        // Forward: each unit's all-gather posted where the host issues it ([`forward_issue`]);
        // a forward the issue falls inside is split there.
        let mut ag = vec![0usize; units];
        let gathers = !no_shard && !kept;
        let issue = if gathers { forward_issue(&layers, &sharding) } else { Vec::new() };
        let (mut next, mut start) = (0, 0.0);
        for u in 0..units {
            let end = start + fwd[u];
            let name = Some(format!("fwd {}", m.layers[u].name));
            if !gathers {
                work.push(Work::Run { secs: Secs::new(fwd[u]), name, grad: None });
                continue;
            }
            // Issued before this forward begins (its own all-gather always is).
            while next < units && (next <= u || issue[next] <= start + ISSUE_EPS) {
                ag[next] = post(&mut work, gather(next, "all_gather (fwd)"));
                next += 1;
            }
            work.push(Work::Wait(ag[u]));
            let mut at = start;
            while next < units && issue[next] < end - ISSUE_EPS {
                let cut = issue[next].max(at);
                if cut > at {
                    work.push(Work::Run {
                        secs: Secs::new(cut - at),
                        name: name.clone(),
                        grad: None,
                    });
                    at = cut;
                }
                ag[next] = post(&mut work, gather(next, "all_gather (fwd)"));
                next += 1;
            }
            work.push(Work::Run { secs: Secs::new(end - at), name, grad: None });
            start = end;
        }
        // Backward, last unit first.
        let full = sharding.strategy.reshards_after_forward();
        let mut agb = vec![0usize; units];
        let prefetch = sharding.backward_prefetch;
        if full && units > 0 && prefetch != BackwardPrefetch::None {
            agb[units - 1] = post(&mut work, gather(units - 1, "all_gather (bwd)"));
        }
        for u in (0..units).rev() {
            if full {
                if prefetch == BackwardPrefetch::None {
                    agb[u] = post(&mut work, gather(u, "all_gather (bwd)"));
                }
                work.push(Work::Wait(agb[u]));
            }
            // The next unit's gather, issued before this unit's backward runs on the GPU
            // (docs/fsdp-model.md §2): PRE from the pre-backward hook; POST from the
            // post-backward hook once the host has launched this backward, which is its start
            // while the host runs ahead ([`post_issue`]). Either way it queues behind the
            // previous unit's reduce-scatter on the communicator.
            let name = Some(format!("bwd {}", m.layers[u].name));
            let cut = match prefetch {
                _ if !full || u == 0 => None,
                BackwardPrefetch::None => None,
                BackwardPrefetch::BackwardPre => Some(0.0),
                BackwardPrefetch::BackwardPost => Some(post_issue(&layers, u)),
            };
            match cut {
                Some(at) => {
                    if at > ISSUE_EPS {
                        work.push(Work::Run {
                            secs: Secs::new(at),
                            name: name.clone(),
                            grad: None,
                        });
                    }
                    agb[u - 1] = post(&mut work, gather(u - 1, "all_gather (bwd)"));
                    if bwd[u] - at > ISSUE_EPS {
                        work.push(Work::Run { secs: Secs::new(bwd[u] - at), name, grad: None });
                    }
                }
                None => work.push(Work::Run { secs: Secs::new(bwd[u]), name, grad: None }),
            }
            if sync {
                post(&mut work, batch(reduce, u, sharding.reduce_dtype, reduce_name, true));
                if hybrid {
                    work.push(Work::Post(Box::new(replicas(u))));
                }
            }
        }
    }
    work.push(Work::Drain);
    // The optimizer steps the rank's shard.
    let tensors: Vec<&super::models::Tensor> = m.tensors().collect();
    let optimizer = optimizer_secs(spec, &tensors, gpu) / w as f64;
    if optimizer > 0.0 {
        let name = Some(format!("optimizer step ({}, shard)", spec.optimizer.name()));
        work.push(Work::Run { secs: Secs::new(optimizer), name, grad: None });
    }
    let reported =
        m.layers.iter().enumerate().max_by_key(|(u, _)| padded[*u]).map_or(0.0, |(u, _)| {
            let (collective, dtype) = if no_shard {
                (reduce, sharding.reduce_dtype)
            } else {
                (Collective::AllGather, sharding.param_dtype)
            };
            let c = coll(shard_group, collective, Bytes::new(padded[u] * dtype.size()), dtype);
            match slowdown {
                Slowdown::Fixed(s) => s,
                Slowdown::PerChannel(_) => slowdown.of(c.channels),
            }
        });
    let steady = Timeline::new(work, Vec::new(), Vec::new());
    sharded_plan(spec, (world, w), gpu, coll, steady, layers, (optimizer, reported))
}

/// Tensors one multi-tensor launch takes: PyTorch's `depth_to_max_tensors` for the 4–5 lists
/// of an Adam step (aten/src/ATen/native/cuda/MultiTensorApply.cuh: 36 and 30), the smaller.
const TENSORS_PER_LAUNCH: usize = 30;

/// Elements one multi-tensor launch takes: 320 blocks of 65,536-element chunks (same file).
const ELEMENTS_PER_LAUNCH: f64 = 320.0 * 65536.0;

/// The optimizer step after backward, s: its memory traffic ([`super::memory::step_traffic`])
/// at the GPU's memory bandwidth, or its kernel launches when they take longer (the host
/// launches while the GPU runs, so the longer of the two).
pub(crate) fn optimizer_secs(
    spec: &DdpSpec,
    tensors: &[&super::models::Tensor],
    gpu: &GpuFacts,
) -> f64 {
    sharded_optimizer_secs(spec, tensors, gpu, 1)
}

/// [`optimizer_secs`] with the state sharded over `shards` ranks (Megatron's distributed
/// optimizer): each rank moves 1/shards of the bytes and still issues every launch.
pub(crate) fn sharded_optimizer_secs(
    spec: &DdpSpec,
    tensors: &[&super::models::Tensor],
    gpu: &GpuFacts,
    shards: usize,
) -> f64 {
    use super::memory::{OptimizerImpl, step_traffic};
    let m = &spec.model;
    let (mut bytes, mut passes, mut elements) = (0.0, 0usize, 0.0);
    for t in tensors {
        let master = m.dtype_of(t) != DataType::Float;
        let (b, p) = step_traffic(spec.optimizer, spec.optimizer_impl, master);
        bytes += b * t.numel as f64;
        passes = passes.max(p);
        elements += t.numel as f64;
    }
    if passes == 0 {
        return 0.0;
    }
    let lists = tensors
        .len()
        .div_ceil(TENSORS_PER_LAUNCH)
        .max((elements / ELEMENTS_PER_LAUNCH).ceil() as usize);
    let launches = match spec.optimizer_impl {
        OptimizerImpl::ForLoop => passes * tensors.len(),
        _ => passes * lists,
    };
    (bytes / shards.max(1) as f64 / gpu.memory_bandwidth).max(launches as f64 * gpu.launch.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::DataType;
    use crate::workload::models::preset;

    fn mib(b: &[Bucket]) -> Vec<f64> {
        b.iter().map(|b| (b.bytes as f64 / 1048576.0 * 100.0).round() / 100.0).collect()
    }

    #[test]
    fn forward_all_gathers_are_issued_by_the_host_or_the_limit_whichever_is_later() {
        let layers = |host_fwd: [f64; 4]| LayerTimes {
            fwd: vec![1.0; 4],
            bwd: vec![1.0; 4],
            flop: 4.0,
            memory: 0.0,
            launch: 0.0,
            measured: 0.0,
            host_fwd: host_fwd.to_vec(),
            host_bwd: Vec::new(),
        };
        let sharding = |forward_prefetch, limit_all_gathers| Sharding {
            strategy: ShardingStrategy::FullShard,
            backward_prefetch: BackwardPrefetch::BackwardPre,
            forward_prefetch,
            limit_all_gathers,
            param_dtype: DataType::Bfloat16,
            reduce_dtype: DataType::Bfloat16,
            no_sync: false,
            zero: None,
        };
        // The host ahead of the GPU: the limit decides, two units ahead, prefetch or not.
        let ahead = layers([0.1, 0.2, 0.3, 0.4]);
        assert_eq!(forward_issue(&ahead, &sharding(false, true)), [0.0, 0.1, 1.0, 2.0]);
        assert_eq!(forward_issue(&ahead, &sharding(true, true)), [0.0, 0.0, 1.0, 2.0]);
        // ... and without the limit, the host alone.
        assert_eq!(forward_issue(&ahead, &sharding(false, false)), [0.0, 0.1, 0.2, 0.3]);
        // The host bounding the step: it reaches unit u as unit u - 1's forward ends; a
        // prefetch issues a unit earlier.
        let bound = layers([1.0, 2.0, 3.0, 4.0]);
        assert_eq!(forward_issue(&bound, &sharding(false, true)), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(forward_issue(&bound, &sharding(true, true)), [0.0, 0.0, 1.0, 2.0]);
    }

    #[test]
    fn resnet50_buckets_match_the_reference_layouts() {
        // ddp.md §3.6, cases A (construction), B (rebuilt, default caps), C (bucket_cap_mb=25).
        let m = preset("resnet50", None, DataType::Float, false).unwrap();
        assert_eq!(
            mib(&buckets(&m, None, Phase::Construction)),
            [11.84, 30.04, 28.29, 25.77, 1.55]
        );
        assert_eq!(mib(&buckets(&m, None, Phase::Rebuilt)), [7.82, 30.04, 25.04, 25.32, 9.27]);
        assert_eq!(mib(&buckets(&m, Some(25 << 20), Phase::Rebuilt)), [28.86, 25.04, 27.05, 16.55]);
        // B's first bucket is fc alone, bias first (gradient-ready order).
        let names: Vec<&str> = m.tensors().map(|t| t.name.as_str()).collect();
        let b0 = &buckets(&m, None, Phase::Rebuilt)[0];
        assert_eq!(
            b0.tensors.iter().map(|&i| names[i]).collect::<Vec<_>>(),
            ["fc.bias", "fc.weight"]
        );
        // Iteration 0 of current PyTorch: one bucket of everything.
        let one = buckets(&m, None, Phase::FirstIteration);
        assert_eq!((one.len(), one[0].bytes), (1, 4 * 25_557_032));
    }

    #[test]
    fn transformer_buckets_match_the_reference_layouts() {
        let bert = preset("bert-large", None, DataType::Float, false).unwrap();
        let a = mib(&buckets(&bert, None, Phase::Construction));
        assert_eq!(
            (a.len(), &a[..4], a[a.len() - 1]),
            (38, &[8.15, 36.03, 28.04, 32.04][..], 119.23)
        );
        let b = mib(&buckets(&bert, None, Phase::Rebuilt));
        assert_eq!(
            (b.len(), &b[..4], b[b.len() - 1]),
            (38, &[4.02, 36.15, 32.04, 28.04][..], 125.25)
        );
        let c = mib(&buckets(&bert, Some(25 << 20), Phase::Rebuilt));
        assert_eq!((c.len(), &c[..3], c[c.len() - 1]), (37, &[40.17, 32.04, 28.04][..], 125.25));

        let gpt = preset("gpt2-xl", None, DataType::Float, false).unwrap();
        let a = mib(&buckets(&gpt, None, Phase::Construction));
        assert_eq!(
            (a.len(), &a[..4], a[a.len() - 1]),
            (146, &[0.02, 39.09, 48.86, 29.32][..], 306.74)
        );
        let b = mib(&buckets(&gpt, None, Phase::Rebuilt));
        assert_eq!((b.len(), b[b.len() - 1]), (145, 313.01));
        assert_eq!(b, mib(&buckets(&gpt, Some(25 << 20), Phase::Rebuilt)), "C is B for GPT-2 XL");

        for (dtype, big) in [(DataType::Float, 500.0), (DataType::Bfloat16, 250.0)] {
            let llama = preset("llama-7b", None, dtype, false).unwrap();
            for phase in [Phase::Construction, Phase::Rebuilt] {
                let v = mib(&buckets(&llama, None, phase));
                assert_eq!(v.len(), 226, "{dtype:?} {phase:?}");
                assert_eq!(v[v.len() - 1].round(), big, "{dtype:?} {phase:?}");
            }
        }
    }

    use crate::collective::Collective;
    use crate::workload::models::{Layer, MemoryWork, Model, tensor};

    /// Sent elements of a whole-model bucket under PowerSGD of `rank`.
    fn powersgd_sent(m: &Model, rank: u64) -> u64 {
        let all = Bucket {
            tensors: (0..m.tensors().count()).collect(),
            bytes: m.params() * 4,
            dtype: DataType::Float,
            expert: false,
        };
        let hook =
            CommHook::PowerSgd { rank, error_feedback: true, warm_start: true, start_iter: 1000 };
        wire_bytes(&hook_steps(&hook, m, &all, 16)) / 4
    }

    #[test]
    fn powersgd_compresses_as_the_reference_counts() {
        // ddp.md §3.7: parameters / elements sent, min_compression_rate 2.
        for (name, rank, ratio) in [
            ("resnet50", 1, 187.0),
            ("resnet50", 2, 117.0),
            ("resnet50", 4, 66.5),
            ("bert-large", 1, 400.0),
            ("gpt2-xl", 1, 682.0),
            ("gpt2-xl", 4, 254.0),
            ("llama-7b", 1, 2375.0),
        ] {
            let m = preset(name, None, DataType::Float, false).unwrap();
            let got = m.params() as f64 / powersgd_sent(&m, rank) as f64;
            assert!(
                (got / ratio - 1.0).abs() < 0.01,
                "{name} rank {rank}: x{got:.1}, want x{ratio}"
            );
        }
    }

    #[test]
    fn hooks_change_the_wire() {
        let m = preset("bert-large", None, DataType::Float, false).unwrap();
        let b = &buckets(&m, None, Phase::Rebuilt)[1];
        let plain = wire_bytes(&hook_steps(&CommHook::None, &m, b, 64));
        assert_eq!(plain, b.bytes);
        assert_eq!(wire_bytes(&hook_steps(&CommHook::Fp16, &m, b, 64)) * 2, plain);
        // int8 all-gather: each rank receives W x numel bytes against ~2 x 4 numel for a ring
        // all-reduce, so it carries more once W > 8.
        for w in [4u64, 8, 16, 64] {
            let q = hook_steps(&CommHook::QuantizePerTensor, &m, b, w);
            let gathered = match q[2] {
                HookStep::Collective { collective: Collective::AllGather, bytes, .. } => bytes,
                _ => panic!("{q:?}"),
            };
            let ring_ar = 2.0 * (w - 1) as f64 / w as f64 * plain as f64;
            let ring_ag = (w - 1) as f64 / w as f64 * gathered as f64;
            assert_eq!(ring_ag > ring_ar, w > 8, "W = {w}");
        }
        // PowerSGD: three collectives per bucket; batched: two.
        let count = |h: CommHook| {
            hook_steps(&h, &m, b, 8)
                .iter()
                .filter(|s| matches!(s, HookStep::Collective { .. }))
                .count()
        };
        assert_eq!(
            count(CommHook::PowerSgd {
                rank: 1,
                error_feedback: true,
                warm_start: true,
                start_iter: 1000
            }),
            3
        );
        assert_eq!(
            count(CommHook::BatchedPowerSgd { rank: 1, error_feedback: true, start_iter: 1000 }),
            2
        );
    }

    fn gpu() -> GpuFacts {
        GpuFacts {
            flops: 100e12,
            memory_bandwidth: 2e12,
            multiprocessors: Some(100),
            launch: Secs::new(4e-6),
            gemm_fixed: Secs::new(0.0),
            ranks_per_node: 8,
            sixteen_bit_flops: None,
        }
    }

    /// A collective that takes `per_byte` s per byte plus 10 µs, on 10 channels.
    fn linear_coll(per_byte: f64) -> impl Fn(Collective, Bytes, DataType) -> CollTime {
        move |_, bytes, _| CollTime {
            time: Time::from_secs_f64_ceil(10e-6 + bytes.as_f64() * per_byte),
            algo: "RING",
            proto: "SIMPLE",
            channels: 10,
            links: Vec::new(),
        }
    }

    fn spec(model: Model) -> DdpSpec {
        DdpSpec {
            backend: Default::default(),
            model,
            micro_batch: 8,
            grad_accumulation: 1,
            rate: ComputeRate::Tflops(100.0),
            bucket_cap: None,
            gradient_as_bucket_view: false,
            static_graph: false,
            find_unused_parameters: false,
            broadcast_buffers: true,
            hook: CommHook::None,
            compute_slowdown: Some(0.0),
            optimizer: crate::workload::memory::Optimizer::None,
            optimizer_impl: crate::workload::memory::OptimizerImpl::Foreach,
            skew: crate::workload::skew::Skew::default(),
            sequence: None,
            input: None,
            sharding: None,
            parallel: None,
            launch: None,
            gemm_fixed: None,
            compute_default: None,
            calls: None,
            profile: None,
            checkpointing: Default::default(),
            written: None,
            data_parallel: None,
            memory_headroom: crate::workload::memory::DEFAULT_HEADROOM,
        }
    }

    #[test]
    fn buckets_launch_in_index_order_on_one_fifo_stream() {
        let m = preset("gpt2-xl", None, DataType::Float, false).unwrap();
        let r = simulate_step(&spec(m), 16, &gpu(), &linear_coll(1e-10));
        for w in r.buckets.windows(2) {
            // FIFO: a bucket starts after the one before it ends, and never before it is ready.
            assert!(w[1].start_ms >= w[0].end_ms - 1e-9, "{w:?}");
            assert!(w[1].start_ms >= w[1].ready_ms - 1e-9);
        }
        // After the rebuild the first bucket closes on the first matrix (ln_f, then the last
        // block's MLP projection: 39.1 MiB); the last holds the tied embedding.
        assert!((r.buckets[0].bytes as f64 / 1048576.0 - 39.1).abs() < 0.05);
        assert!((r.buckets.last().unwrap().bytes as f64 / 1048576.0 - 313.01).abs() < 0.005);
        // Iteration 0 has one bucket, launched after backward: no overlap.
        assert!(r.first_iteration_ms > r.iteration_time_ms);
        assert!(r.exposed_comm_ms <= r.comm_ms + 1e-9);
    }

    #[test]
    fn a_bucket_closes_on_the_tensor_that_reaches_the_cap_and_waits_its_turn() {
        // Ready order b.1, b.0, a.0 (4 MiB each) with a 6 MiB cap and the default-less first
        // limit (the cap): b.1 + b.0 reach it, a.0 is left over; bucket 1 starts after bucket 0.
        let layer = |n: &str, shapes: &[(u64, u64)], gflop: f64| Layer {
            name: n.into(),
            tensors: shapes.iter().map(|&(r, c)| tensor(n, r, c)).collect(),
            fwd_macs: gflop * 1e9 / 2.0,
            times: None,
            act_bytes: 0.0,
            transient_bytes: 0.0,
            memory: Default::default(),
            parallel: None,
        };
        let m = Model {
            name: "toy".into(),
            layers: vec![
                layer("a", &[(1 << 20, 1)], 1000.0),
                layer("b", &[(1 << 20, 1), (1 << 20, 1)], 1.0),
            ],
            grad_dtype: DataType::Float,
            buffer_bytes: 0,
        };
        let mut s = spec(m);
        s.bucket_cap = Some(6 << 20);
        let r = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        assert_eq!(r.buckets.len(), 2);
        assert_eq!(r.buckets[0].tensors, 2);
        assert!(r.buckets[1].start_ms >= r.buckets[0].end_ms);
    }

    #[test]
    fn no_sync_steps_compute_only_and_bucket_views_skip_the_copy_out() {
        let m = preset("resnet50", None, DataType::Float, false).unwrap();
        let mut s = spec(m);
        let one = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        s.grad_accumulation = 4;
        let four = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        // Three more micro-steps of pure compute, and the same communication.
        let micro = one.forward_ms + one.backward_ms;
        assert!((four.iteration_time_ms - one.iteration_time_ms - 3.0 * micro).abs() < 1e-6);
        assert!((four.comm_ms - one.comm_ms).abs() < 1e-9);
        s.grad_accumulation = 1;
        s.gradient_as_bucket_view = true;
        let view = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        let copy_out = 2.0 * 4.0 * 25_557_032.0 / 2e12 * 1e3;
        assert!((one.iteration_time_ms - view.iteration_time_ms - copy_out).abs() < 1e-6);
    }

    #[test]
    fn buckets_never_mix_dtypes() {
        // Two fp32 tensors and an fp16 one between them: each dtype fills its own buckets, and
        // each key has its own first (1 MiB) limit.
        let mut m = Model {
            name: "mixed".into(),
            layers: vec![Layer {
                name: "l".into(),
                tensors: vec![
                    tensor("a", 1 << 18, 1),
                    tensor("h", 1 << 19, 1),
                    tensor("b", 1 << 18, 1),
                ],
                fwd_macs: 0.0,
                times: None,
                act_bytes: 0.0,
                transient_bytes: 0.0,
                memory: Default::default(),
                parallel: None,
            }],
            grad_dtype: DataType::Float,
            buffer_bytes: 0,
        };
        m.layers[0].tensors[1].dtype = Some(DataType::Half);
        let b = buckets(&m, None, Phase::Rebuilt);
        // Ready order b, h, a: b (1 MiB fp32) closes the fp32 key's first bucket; h (1 MiB
        // fp16) closes the fp16 key's; a is left open.
        let got: Vec<(Vec<usize>, DataType)> =
            b.iter().map(|b| (b.tensors.clone(), b.dtype)).collect();
        assert_eq!(
            got,
            [(vec![2], DataType::Float), (vec![1], DataType::Half), (vec![0], DataType::Float)]
        );
        let steps = hook_steps(&CommHook::None, &m, &b[1], 8);
        assert!(matches!(
            steps[0],
            HookStep::Collective { dtype: DataType::Half, bytes: 1048576, .. }
        ));
    }

    #[test]
    fn slowdown_powersgd_overlap_and_find_unused() {
        let m = preset("resnet50", None, DataType::Float, false).unwrap();
        let mut s = spec(m);
        s.compute_slowdown = None;
        // NCCL's 10 CTAs over 100 SMs.
        let r = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        assert!((r.compute_slowdown - 0.1).abs() < 1e-12);
        // PowerSGD's synchronize: no compute overlaps its buckets, so all of it is exposed; its
        // first iteration (before start_powerSGD_iter) is a plain all-reduce.
        s.hook =
            CommHook::PowerSgd { rank: 2, error_feedback: true, warm_start: true, start_iter: 10 };
        let p = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        assert!(p.buckets.iter().all(|b| b.collectives == 3));
        let bucket_comm: f64 = p.comm_ms; // no buffer broadcast below world 2? (8 ranks: there is one)
        assert!(
            p.exposed_comm_ms > 0.99 * bucket_comm - 1e-3,
            "{} vs {}",
            p.exposed_comm_ms,
            bucket_comm
        );
        s.hook = CommHook::None;
        let plain_first = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10)).first_iteration_ms;
        assert!((p.first_iteration_ms - plain_first).abs() < 1e-9);
        // find_unused_parameters: construction buckets (no rebuild) and the local_used_map
        // all-reduce at the end of backward.
        s.find_unused_parameters = true;
        let f = simulate_step(&s, 8, &gpu(), &linear_coll(1e-10));
        assert!(f.timeline.iter().any(|x| x.name == "local_used_map all_reduce"));
        assert!((f.buckets[f.buckets.len() - 1].bytes as f64 / 1048576.0 - 1.55).abs() < 0.01);
    }

    #[test]
    fn each_collective_slows_compute_by_its_own_channels() {
        // Issue #15 (a): the largest bucket's channel count set the slowdown of every bucket.
        // Its all-reduce runs after backward here (nothing left to slow), so taking all 100 SMs
        // for it must leave the step as it is, while the earlier buckets keep their 8 channels.
        let m = preset("gpt2-xl", None, DataType::Float, false).unwrap();
        let mut s = spec(m);
        s.compute_slowdown = None;
        let run = |big_channels: usize| {
            let coll = |_: Collective, bytes: Bytes, _: DataType| CollTime {
                time: Time::from_secs_f64_ceil(10e-6 + bytes.as_f64() * 1e-10),
                algo: "RING",
                proto: "SIMPLE",
                channels: if bytes.get() > 300 << 20 { big_channels } else { 8 },
                links: Vec::new(),
            };
            simulate_step(&s, 16, &gpu(), &coll)
        };
        let (few, all) = (run(8), run(100));
        let last = few.buckets.last().unwrap();
        let backward_end = few.forward_ms + few.backward_ms;
        assert!(last.bytes > 300 << 20 && last.start_ms >= backward_end, "{last:?}");
        assert_eq!(few.iteration_time_ms, all.iteration_time_ms);
        assert_eq!((few.compute_slowdown, all.compute_slowdown), (0.08, 1.0));
    }

    /// One layer of `gflop` forward GFLOP and `mb` forward memory-bound MB per sample (twice
    /// as much backward), launching `kernels` forward (twice as many backward).
    fn one_layer(gflop: f64, mb: f64, kernels: u32) -> Model {
        Model {
            name: "one".into(),
            layers: vec![
                Layer {
                    name: "first".into(),
                    tensors: vec![tensor("w0", 16, 1)],
                    fwd_macs: 0.0,
                    times: None,
                    act_bytes: 0.0,
                    transient_bytes: 0.0,
                    memory: Default::default(),
                    parallel: None,
                },
                Layer {
                    name: "l".into(),
                    tensors: vec![tensor("w", 1 << 20, 1)],
                    fwd_macs: gflop * 1e9 / 2.0,
                    times: None,
                    act_bytes: 0.0,
                    transient_bytes: 0.0,
                    memory: MemoryWork::new(mb * 1e6, 2.0 * mb * 1e6, kernels, 2 * kernels),
                    parallel: None,
                },
            ],
            grad_dtype: DataType::Float,
            buffer_bytes: 0,
        }
    }

    /// `spec(model)` with 16-bit math (the GPU facts set the rate).
    /// Three layers "u0".."u2" of `numel` fp32 parameters and 1 GMAC each.
    fn three_units(numel: u64) -> Model {
        Model {
            name: "three".into(),
            layers: (0..3)
                .map(|i| Layer {
                    name: format!("u{i}"),
                    tensors: vec![tensor(format!("w{i}"), numel, 1)],
                    fwd_macs: 1e9,
                    times: None,
                    act_bytes: 0.0,
                    transient_bytes: 0.0,
                    memory: Default::default(),
                    parallel: None,
                })
                .collect(),
            grad_dtype: DataType::Float,
            buffer_bytes: 0,
        }
    }

    /// FSDP's sharding with PyTorch's defaults but for `strategy` and `prefetch` (bf16
    /// parameters, fp32 reduction).
    fn fsdp(strategy: ShardingStrategy, prefetch: BackwardPrefetch) -> Sharding {
        Sharding {
            strategy,
            backward_prefetch: prefetch,
            forward_prefetch: false,
            limit_all_gathers: true,
            param_dtype: DataType::Bfloat16,
            reduce_dtype: DataType::Float,
            no_sync: false,
            zero: None,
        }
    }

    fn half(model: Model) -> DdpSpec {
        DdpSpec {
            rate: ComputeRate::Peak { precision: "fp16".into(), efficiency: 0.5 },
            ..spec(model)
        }
    }

    #[test]
    fn memory_bound_work_adds_its_bytes_at_the_memory_bandwidth() {
        // 8 samples x 10 GFLOP at 100 TFLOP/s = 0.8 ms forward; 8 x 100 MB at 2 TB/s = 0.4 ms;
        // backward twice both. fp32 activations move twice the bytes.
        let s = half(one_layer(10.0, 100.0, 1));
        let t = layer_times(&s, &gpu());
        assert!((t.fwd[1] - 1.2e-3).abs() < 1e-12, "{:?}", t.fwd);
        assert!((t.bwd[1] - 2.4e-3).abs() < 1e-12, "{:?}", t.bwd);
        assert!((t.flop - 2.4e-3).abs() < 1e-12 && (t.memory - 1.2e-3).abs() < 1e-12);
        let fp32 = DdpSpec {
            rate: ComputeRate::Peak { precision: "tf32".into(), efficiency: 0.5 },
            ..spec(one_layer(10.0, 100.0, 1))
        };
        assert!((layer_times(&fp32, &gpu()).memory - 2.4e-3).abs() < 1e-12);
        assert!(
            (layer_times(&spec(one_layer(10.0, 100.0, 1)), &gpu()).memory - 2.4e-3).abs() < 1e-12
        );
        // The step's breakdown carries the split.
        let r = simulate_step(&s, 16, &gpu(), &linear_coll(0.0));
        let b = &r.breakdown;
        assert!((b.flop_ms - 2.4).abs() < 1e-9 && (b.memory_ms - 1.2).abs() < 1e-9, "{b:?}");
        assert!((r.breakdown.total_ms() - r.iteration_time_ms).abs() < 1e-9);
    }

    #[test]
    fn a_layer_launching_more_than_it_computes_waits_for_its_launches() {
        // 1,000 launches of 4 us forward (4 ms) for 0.008 ms of GEMMs: the host sets the pace.
        let s = half(one_layer(0.1, 0.0, 1000));
        let t = layer_times(&s, &gpu());
        assert!((t.fwd[1] - 4e-3).abs() < 1e-12 && (t.bwd[1] - 8e-3).abs() < 1e-12);
        assert!((t.launch - (12e-3 - 0.024e-3)).abs() < 1e-12, "{}", t.launch);
    }

    #[test]
    fn mfu_solves_the_gemm_rate_around_the_memory_bound_work() {
        // 8 x 30 GFLOP of model FLOPs per micro-step (forward and backward) at 0.4 x 250 TFLOP/s
        // is 2.4 ms; the memory-bound work takes 1.2 ms of it at 2 TB/s, so the GEMMs run at
        // 240 GFLOP / 1.2 ms = 200 TFLOP/s.
        let s = half(one_layer(10.0, 100.0, 1));
        let rate = rate_for_mfu(&s, &gpu(), 0.4 * 250e12, 250e12).unwrap();
        assert!((rate / 200e12 - 1.0).abs() < 1e-9, "{rate}");
        // More than the memory-bound work leaves is refused, and so is a rate above the peak
        // (0.7 x 250 TFLOP/s: 1.371 ms, 0.171 ms for the GEMMs, 1,400 TFLOP/s).
        let e = rate_for_mfu(&s, &gpu(), 250e12, 250e12).unwrap_err();
        assert!(e.contains("1.200 ms of the 0.960 ms"), "{e}");
        let e = rate_for_mfu(&s, &gpu(), 0.7 * 250e12, 250e12).unwrap_err();
        assert!(e.contains("1400.0 TFLOP/s, above the 250.0 TFLOP/s peak"), "{e}");
    }

    #[test]
    fn a_node_loader_shared_by_its_gpus_stalls_the_step() {
        // A node delivering 2,000 samples/s: 8 ranks take 8 samples each per step at 250/s
        // each (32 ms); compute is 3.6 ms, so the step waits 28.4 ms for its input. One GPU
        // alone has the node's whole rate: 4 ms for its 8 samples.
        let s =
            DdpSpec { input: Some(InputRate::PerNode(2000.0)), ..half(one_layer(10.0, 100.0, 1)) };
        // (Copies and the unhidden collectives take a few tens of us besides.)
        let r = simulate_step(&s, 16, &gpu(), &linear_coll(0.0));
        assert!((r.iteration_time_ms - 32.0).abs() < 1e-9, "{}", r.iteration_time_ms);
        assert!((r.breakdown.input_stall_ms - 28.4).abs() < 0.05, "{:?}", r.breakdown);
        assert!((r.single_gpu_ms - 4.0).abs() < 1e-9, "{}", r.single_gpu_ms);
        assert!((r.breakdown.total_ms() - r.iteration_time_ms).abs() < 1e-9);
        assert!(r.timeline.iter().any(|x| x.name.starts_with("input stall")));
        // Each GPU's own loader at 2,000/s: 4 ms, a 0.4 ms stall.
        let own = DdpSpec { input: Some(InputRate::PerGpu(2000.0)), ..s };
        let r = simulate_step(&own, 16, &gpu(), &linear_coll(0.0));
        assert!((r.breakdown.input_stall_ms - 0.4).abs() < 0.05, "{:?}", r.breakdown);
    }

    #[test]
    fn backward_post_gathers_the_next_unit_while_this_one_runs_its_backward() {
        // docs/fsdp-model.md §2: the post-backward hook runs as soon as the host has enqueued a
        // unit's backward, and `limit_all_gathers` holds its prefetch only until the unit
        // before has finished, so under BACKWARD_POST as under BACKWARD_PRE the next unit's
        // gather runs beside this unit's backward; the step is PRE's. (It was issued after the
        // backward had run, so each unit's backward waited for a whole gather: 730 of 994 ms
        // of exposed communication at 70 B on 128 GPUs in issue #48.)
        let step = |prefetch| {
            let spec = DdpSpec {
                sharding: Some(fsdp(ShardingStrategy::FullShard, prefetch)),
                ..half(three_units(1 << 22))
            };
            simulate_step(&spec, 8, &gpu(), &linear_coll(1e-11))
        };
        let (pre, post, none) = (
            step(BackwardPrefetch::BackwardPre),
            step(BackwardPrefetch::BackwardPost),
            step(BackwardPrefetch::None),
        );
        let span = |r: &StepResult, name: &str| {
            let s = r.timeline.iter().find(|s| s.name == name).unwrap();
            (s.start_ms, s.end_ms)
        };
        assert!(span(&post, "all_gather (bwd) u0").0 < span(&post, "bwd u1").1);
        assert_eq!(post.iteration_time_ms, pre.iteration_time_ms);
        assert!(none.iteration_time_ms > post.iteration_time_ms + 1e-3, "{none:?}");
        // Where launches bound the backward, the host reaches the post-backward hook only as
        // the backward ends: POST gathers after it, PRE before it (PyTorch's "less overlap").
        // Three units of 1 s forward and 2 s backward on the GPU; the host launches the
        // backwards by 5.5, 9 and 10 s (the GPU begins them at 3, 5 and 7 s on its own clock).
        let layers = LayerTimes {
            fwd: vec![1.0; 3],
            bwd: vec![2.0; 3],
            flop: 9.0,
            memory: 0.0,
            launch: 0.0,
            measured: 0.0,
            host_fwd: vec![0.5, 1.0, 1.5],
            host_bwd: vec![10.0, 9.0, 5.5],
        };
        assert_eq!(post_issue(&layers, 2), 2.0, "behind: the backward's end");
        assert_eq!(post_issue(&layers, 1), 2.0, "behind by more than the backward");
        let ahead = LayerTimes { host_bwd: vec![2.0, 1.8, 1.7], ..layers.clone() };
        assert_eq!(post_issue(&ahead, 1), 0.0, "ahead: the backward's start");
        let partly = LayerTimes { host_bwd: vec![2.0, 6.0, 1.7], ..layers };
        assert_eq!(post_issue(&partly, 1), 1.0);
    }

    #[test]
    fn full_shard_moves_three_times_the_parameters_and_shard_grad_op_twice() {
        // Three units of 1 Mi parameters (7 ranks: padded to 1,048,579), bf16 all-gathers,
        // fp32 reduce-scatters: each unit gathered forward and backward, its gradients
        // reduce-scattered once. DDP all-reduces the same bytes once: 2(n-1)/n of them on the
        // wire against FSDP's 3 x (n-1)/n.
        let m = three_units(1 << 20);
        let sharded = |strategy, prefetch| DdpSpec {
            sharding: Some(fsdp(strategy, prefetch)),
            ..half(m.clone())
        };
        let padded = (1u64 << 20).div_ceil(7) * 7;
        let bytes = |r: &StepResult, name: &str| -> u64 {
            r.timeline
                .iter()
                .filter(|s| s.lane == "nccl" && s.name.starts_with(name))
                .map(|s| s.bytes)
                .sum()
        };
        for prefetch in
            [BackwardPrefetch::BackwardPre, BackwardPrefetch::BackwardPost, BackwardPrefetch::None]
        {
            let r = simulate_step(
                &sharded(ShardingStrategy::FullShard, prefetch),
                7,
                &gpu(),
                &linear_coll(1e-11),
            );
            assert_eq!(bytes(&r, "all_gather"), 2 * 3 * padded * 2, "{prefetch:?}");
            assert_eq!(bytes(&r, "reduce_scatter"), 3 * padded * 4);
            assert_eq!(r.buckets.len(), 3);
            // Every unit's forward waits for its own all-gather, whatever the prefetch.
            let end = |name: &str| r.timeline.iter().find(|s| s.name == name).unwrap().end_ms;
            let start = |name: &str| r.timeline.iter().find(|s| s.name == name).unwrap().start_ms;
            assert!(start("fwd u1") >= end("all_gather (fwd) u1") - 1e-9);
            assert!(start("bwd u0") >= end("all_gather (bwd) u0") - 1e-9);
        }
        let r = simulate_step(
            &sharded(ShardingStrategy::ShardGradOp, BackwardPrefetch::BackwardPre),
            7,
            &gpu(),
            &linear_coll(1e-11),
        );
        assert_eq!(bytes(&r, "all_gather"), 3 * padded * 2);
        // Three micro-steps inside no_sync(): one reduce-scatter a unit, in the last; FULL_SHARD
        // still gathers twice a micro-step, SHARD_GRAD_OP once in all (its parameters stay
        // unsharded through the accumulation).
        let accumulate = |strategy| DdpSpec {
            grad_accumulation: 3,
            sharding: sharded(strategy, BackwardPrefetch::BackwardPre)
                .sharding
                .map(|sh| Sharding { no_sync: true, ..sh }),
            ..sharded(strategy, BackwardPrefetch::BackwardPre)
        };
        for (strategy, gathers) in
            [(ShardingStrategy::FullShard, 3 * 2), (ShardingStrategy::ShardGradOp, 1)]
        {
            let spec = accumulate(strategy);
            let r = simulate_step(&spec, 7, &gpu(), &linear_coll(1e-11));
            assert_eq!(bytes(&r, "reduce_scatter"), 3 * padded * 4, "{strategy:?}");
            assert_eq!(bytes(&r, "all_gather"), gathers * 3 * padded * 2, "{strategy:?}");
            // The whole gradients held meanwhile: 3 units of padded fp32 elements.
            let mem = |s: &DdpSpec| crate::workload::memory::ddp_memory(s, 7, 8).unsharded;
            let synced = DdpSpec {
                grad_accumulation: 3,
                ..sharded(strategy, BackwardPrefetch::BackwardPre)
            };
            assert_eq!(mem(&spec) - mem(&synced), (3 * padded * 4) as f64);
        }
        // NO_SHARD: no all-gather; each unit's whole gradient all-reduced, once.
        let r = simulate_step(
            &sharded(ShardingStrategy::NoShard, BackwardPrefetch::BackwardPre),
            7,
            &gpu(),
            &linear_coll(1e-11),
        );
        assert_eq!(bytes(&r, "all_gather"), 0);
        assert_eq!(bytes(&r, "reduce_scatter"), 0);
        assert_eq!(bytes(&r, "all_reduce"), 3 * (1 << 20) * 4);
        // No prefetch: a unit's backward all-gather queues behind the previous unit's
        // reduce-scatter, so the step is longest.
        let t = |p| {
            simulate_step(&sharded(ShardingStrategy::FullShard, p), 7, &gpu(), &linear_coll(1e-9))
                .iteration_time_ms
        };
        assert!(
            t(BackwardPrefetch::None) > t(BackwardPrefetch::BackwardPre),
            "{} {}",
            t(BackwardPrefetch::None),
            t(BackwardPrefetch::BackwardPre)
        );
    }

    #[test]
    fn zero_reduce_scatters_the_gradients_and_gathers_the_parameters_once() {
        // Three units of 1 Mi parameters, bf16, on 7 ranks: stage 2 with 1.5 Mi-element
        // buckets reduce-scatters two buckets a micro-step (2 units, then 1, padded to 7) and
        // all-gathers the 3 Mi updated parameters once, in 2 Mi-element chunks.
        let m = three_units(1 << 20);
        let zero = |stage, overlap_comm| DdpSpec {
            grad_accumulation: 2,
            sharding: Some(Sharding {
                strategy: if stage == 1 {
                    ShardingStrategy::Zero1
                } else {
                    ShardingStrategy::Zero2
                },
                backward_prefetch: BackwardPrefetch::BackwardPre,
                forward_prefetch: false,
                limit_all_gathers: true,
                param_dtype: DataType::Bfloat16,
                reduce_dtype: DataType::Bfloat16,
                no_sync: false,
                zero: Some(Zero {
                    stage,
                    reduce_bucket: 3 << 19,
                    allgather_bucket: 2 << 20,
                    overlap_comm,
                }),
            }),
            ..half(m.clone())
        };
        let spans = |r: &StepResult, name: &str| -> Vec<u64> {
            let nccl = r.timeline.iter().filter(|s| s.lane == "nccl");
            nccl.filter(|s| s.name.starts_with(name)).map(|s| s.bytes).collect()
        };
        let pad = |n: u64| n.div_ceil(7) * 7 * 2;
        for (stage, overlap) in [(1, false), (2, false), (2, true)] {
            let r = simulate_step(&zero(stage, overlap), 7, &gpu(), &linear_coll(1e-10));
            let two = vec![pad(2 << 20), pad(1 << 20)];
            assert_eq!(spans(&r, "reduce_scatter"), [two.clone(), two].concat(), "{stage}");
            assert_eq!(spans(&r, "all_gather"), vec![pad(2 << 20), pad(1 << 20)]);
            assert!(spans(&r, "all_reduce").is_empty());
        }
        // Only stage 2 with overlap_comm hides its reductions behind the backward.
        let t = |stage, overlap| {
            simulate_step(&zero(stage, overlap), 7, &gpu(), &linear_coll(1e-10)).exposed_comm_ms
        };
        assert!(
            t(2, true) < t(2, false) && t(2, false) == t(1, false),
            "{} {}",
            t(2, true),
            t(2, false)
        );
        // Memory (the ZeRO paper's): stage 1 holds 2 + 2 bytes a parameter and 12/N of master
        // weights and Adam state; stage 2 the gradients' 1/N and one bucket.
        let spec = |stage| DdpSpec {
            optimizer: crate::workload::memory::Optimizer::Adam,
            ..zero(stage, false)
        };
        let mem = |stage| crate::workload::memory::ddp_memory(&spec(stage), 7, 8);
        let n = (3u64 << 20) as f64;
        let (one, two) = (mem(1), mem(2));
        assert_eq!((one.params, one.grads), (2.0 * n, 2.0 * n));
        assert!((one.master + one.optimizer - 12.0 * n / 7.0).abs() < 1e-6);
        assert_eq!((two.grads, two.buckets), (2.0 * n / 7.0, 2.0 * (3u64 << 19) as f64));
    }

    #[test]
    fn hybrid_shard_sends_only_the_all_reduce_of_a_shard_across_nodes() {
        // Three units of 1 Mi parameters on 4 nodes of 8 ranks: all-gathers and reduce-scatters
        // on a node's 8 ranks (padded to a multiple of 8), and across the nodes only each
        // rank's shard all-reduced, 1/8 of a unit's padded gradient, once per unit.
        let m = three_units((1 << 20) + 3);
        let calls = std::sync::Mutex::new(Vec::new());
        let coll = |g: Group, c: Collective, bytes: Bytes, d: DataType| {
            calls.lock().unwrap().push((g, c, bytes.get()));
            linear_coll(1e-11)(c, bytes, d)
        };
        for (strategy, gathers) in
            [(ShardingStrategy::HybridShard, 2), (ShardingStrategy::HybridShardZero2, 1)]
        {
            calls.lock().unwrap().clear();
            let s = DdpSpec {
                sharding: Some(fsdp(strategy, BackwardPrefetch::BackwardPre)),
                ..half(m.clone())
            };
            let r = simulate_step_on(&s, 32, &gpu(), &coll);
            let padded = ((1u64 << 20) + 3).div_ceil(8) * 8;
            let on = |g: Group| {
                let c = calls.lock().unwrap();
                let mut v: Vec<(Collective, u64)> =
                    c.iter().filter(|x| x.0 == g).map(|x| (x.1, x.2)).collect();
                v.sort();
                v.dedup();
                v
            };
            assert_eq!(on(Group::World), Vec::new(), "{strategy:?}");
            assert_eq!(on(Group::Replicate), vec![(Collective::AllReduce, padded / 8 * 4)]);
            assert_eq!(
                on(Group::Shard),
                vec![(Collective::AllGather, padded * 2), (Collective::ReduceScatter, padded * 4)]
            );
            let wire = |name: &str| -> u64 {
                let spans = r.timeline.iter().filter(|x| x.lane == "nccl");
                spans.filter(|x| x.name.starts_with(name)).map(|x| x.bytes).sum()
            };
            assert_eq!(wire("all_reduce (replicas)"), 3 * padded / 8 * 4);
            assert_eq!(wire("all_gather"), gathers * 3 * padded * 2);
        }
        // Memory: shards over the node's 8 ranks, whatever the node count.
        let s = DdpSpec {
            sharding: Some(fsdp(ShardingStrategy::HybridShard, BackwardPrefetch::BackwardPre)),
            ..half(m.clone())
        };
        let mem = |world| crate::workload::memory::ddp_memory(&s, world, 8).params;
        assert_eq!(mem(16), mem(256));
        let full = DdpSpec {
            sharding: s.sharding.map(|sh| Sharding { strategy: ShardingStrategy::FullShard, ..sh }),
            ..s.clone()
        };
        assert_eq!(crate::workload::memory::ddp_memory(&full, 8, 8).params, mem(64));
    }

    #[test]
    fn fsdp_memory_falls_as_one_over_the_ranks() {
        // Parameters, gradients and Adam state per GPU fall 8x from 8 ranks to 64 (GPT-2 XL's
        // units pad by under 64 elements each); the unsharded units in flight do not.
        let spec = DdpSpec {
            sharding: Some(Sharding {
                reduce_dtype: DataType::Bfloat16,
                ..fsdp(ShardingStrategy::FullShard, BackwardPrefetch::BackwardPre)
            }),
            optimizer: crate::workload::memory::Optimizer::Adam,
            ..half(preset("gpt2-xl", None, DataType::Float, false).unwrap())
        };
        let mem = |n| crate::workload::memory::ddp_memory(&spec, n, 8);
        let (a, b) = (mem(8), mem(64));
        for (x, y) in [(a.params, b.params), (a.grads, b.grads), (a.optimizer, b.optimizer)] {
            assert!((x / y / 8.0 - 1.0).abs() < 1e-4, "{x} / {y}");
        }
        assert_eq!(a.unsharded, b.unsharded);
        // 1.5576 G parameters: 16 bytes each over 64 ranks.
        assert!(
            ((b.params + b.grads + b.optimizer) / (16.0 * 1_557_611_200.0 / 64.0) - 1.0).abs()
                < 1e-3
        );
    }
}

#[cfg(test)]
mod checkpointing_tests {
    use super::*;
    use crate::workload::models::preset;

    fn gpu() -> GpuFacts {
        GpuFacts {
            flops: 400e12,
            memory_bandwidth: 3e12,
            multiprocessors: Some(132),
            launch: Secs::new(5e-6),
            gemm_fixed: Secs::new(10e-6),
            ranks_per_node: 8,
            sixteen_bit_flops: None,
        }
    }

    fn llama(checkpointing: Checkpointing) -> DdpSpec {
        let model = preset("llama-3-8b", Some(4096), DataType::Bfloat16, false).unwrap();
        DdpSpec {
            checkpointing,
            rate: ComputeRate::Tflops(400.0),
            ..DdpSpec::replay(String::new(), Vec::new())
        }
        .with_model(model)
    }

    impl DdpSpec {
        fn with_model(self, model: Model) -> DdpSpec {
            DdpSpec { model, micro_batch: 2, calls: None, ..self }
        }
    }

    #[test]
    fn full_checkpointing_adds_each_blocks_forward_to_its_backward_and_keeps_its_input() {
        let (off, on) = (llama(Checkpointing::None), llama(Checkpointing::Full { every: 1 }));
        let (a, b) = (layer_times(&off, &gpu()), layer_times(&on, &gpu()));
        assert_eq!(a.fwd, b.fwd);
        let blocks = Checkpointing::Full { every: 1 }.layers(&on.model);
        assert_eq!(blocks.iter().filter(|&&x| x).count(), 32);
        let recompute: f64 = a.fwd.iter().zip(&blocks).filter(|(_, b)| **b).map(|(f, _)| f).sum();
        let more = b.bwd.iter().sum::<f64>() - a.bwd.iter().sum::<f64>();
        assert!((more / recompute - 1.0).abs() < 0.02, "{more} vs {recompute}");
        // Memory: each block keeps its 16-bit input, and on top one block its whole activations
        // or the loss's backward its two fp32 gradients over Llama 3's 128,256-token
        // vocabulary, whichever is larger (here the loss's: 4.2 GB against 0.57 GB a sample).
        let kept = super::super::memory::kept_activations(&on);
        let (s, h) = (4096.0, 4096.0);
        let others = off.model.act_bytes() - 32.0 * 34.0 * s * h;
        let transient = 8.0 * s * 128_256.0;
        assert_eq!(kept, others + 32.0 * 2.0 * s * h + (34.0 * s * h).max(transient));
        // One block in four: a quarter of the recompute.
        let quarter = llama(Checkpointing::Full { every: 4 });
        let c = layer_times(&quarter, &gpu());
        let more4 = c.bwd.iter().sum::<f64>() - a.bwd.iter().sum::<f64>();
        assert!((more4 / (recompute / 4.0) - 1.0).abs() < 0.02, "{more4}");
        // A step solved for an MFU keeps the model's FLOPs: checkpointing makes it slower.
        let rate = |s: &DdpSpec| rate_for_mfu(s, &gpu(), 0.4 * 400e12, 400e12).unwrap();
        assert_eq!(rate(&off), rate(&on));
    }
}
