//! A model profile: a PyTorch profiler (Kineto) trace of one rank's step, turned into what
//! collsim needs to time that model's step on other hardware and at other shapes
//! (`collsim profile TRACE -o model-profile.toml`; a scenario names it with
//! `[workload] profile = "…"`).
//!
//! Every GPU kernel of the trace is tagged with
//! * its **class** — `gemm`, `attention` and `convolution` are bound by the GPU's math,
//!   `memory`, `optimizer` and `copy` by its memory bandwidth, `host` is idle time the trace's
//!   host left (a launch gap) — from the kernel's name and the CPU op that launched it
//!   (matched by `External id`);
//! * its **scale** — `tokens` where the launching op's inputs carry the step's
//!   micro-batch × sequence (as one dimension, or as the two side by side: `[b, s, …]`,
//!   `[s, b, …]`), `attention` for the attention kernels themselves (micro-batch × sequence²),
//!   `fixed` otherwise (weights, gradients, optimizer states, bucket copies);
//! * its **phase** — forward until the autograd engine's first op, backward after, optimizer
//!   inside an `Optimizer.step`/`Optimizer.zero_grad` annotation.
//!
//! The step keeps the trace's program order (the collectives, the compute stream's waits and
//! the host's late launches, as [`super::kineto`] reads them), consecutive kernels of the same
//! tags merged into one entry.
//!
//! Carried to another GPU (per entry): math-bound time × the source's dense peak over the
//! target's at the step's precision, memory-bound time × the source's memory bandwidth over the
//! target's, so that each class keeps the fraction of the peak it reached where it was measured.
//! The shortest kernel of the trace (`kernel_floor_us`) is a kernel's fixed cost, which no GPU
//! shortens: each entry keeps that much per kernel and scales the rest. To another micro-batch
//! or sequence: `tokens` entries × the ratio of tokens, `attention` ones × the ratio of
//! micro-batch × sequence². The host's gaps, late launches and the collectives' sizes (gradient
//! buckets: the parameters') stay as traced.
//!
//! What it cannot carry, it refuses: another micro-batch or sequence from a trace recorded
//! without shapes, or whose micro-batch and sequence are unknown; a GPU or target without a
//! peak at the step's precision or a memory bandwidth.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::calls::{Call, NcclOp};
use crate::hw::gpus::GpuModel;

/// The format's version.
pub const VERSION: u32 = 1;

/// The largest micro-batch or sequence a profile is made at or carried to (a scenario's
/// `sequence` is at most 2^24 tokens, its `micro_batch` 2^20 samples).
pub const MAX_SHAPE: u64 = 1 << 24;

/// The largest peak a profile may give its GPU, TFLOP/s (a GB200's dense FP8 is 5,000).
const MAX_PEAK_TFLOPS: f64 = 1e5;

/// The largest memory bandwidth a profile may give its GPU, GB/s (a B200's is 8,000).
const MAX_BANDWIDTH_GBS: f64 = 1e6;

/// The largest hidden size a profile may give (the largest models' are 16,384-25,600).
const MAX_HIDDEN: u64 = 1 << 20;

/// The most repeated blocks (layers) a profile may give (the deepest models have a few
/// hundred).
const MAX_BLOCKS: u64 = 1 << 16;

/// The longest fixed cost a kernel may have, µs (launches take 2-30 µs).
const MAX_FLOOR_US: f64 = 1e3;

/// What bounds a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// A matrix multiply.
    Gemm,
    /// A fused attention kernel (flash, cuDNN, memory-efficient).
    Attention,
    /// A convolution.
    Convolution,
    /// Elementwise, normalisation, reduction, softmax: memory traffic.
    Memory,
    /// The optimizer's step and its gradient zeroing.
    Optimizer,
    /// A device memcpy or memset.
    Copy,
    /// Time the GPU waited for the host between two kernels.
    Host,
}

impl Class {
    /// Every class, in the order a summary lists them.
    pub const ALL: [Class; 7] = [
        Class::Gemm,
        Class::Attention,
        Class::Convolution,
        Class::Memory,
        Class::Optimizer,
        Class::Copy,
        Class::Host,
    ];

    /// Bound by the GPU's math.
    pub fn flop_bound(self) -> bool {
        matches!(self, Class::Gemm | Class::Attention | Class::Convolution)
    }

    /// Bound by device memory.
    pub fn memory_bound(self) -> bool {
        matches!(self, Class::Memory | Class::Optimizer | Class::Copy)
    }

    /// Its name in a profile.
    pub fn name(self) -> &'static str {
        match self {
            Class::Gemm => "gemm",
            Class::Attention => "attention",
            Class::Convolution => "convolution",
            Class::Memory => "memory",
            Class::Optimizer => "optimizer",
            Class::Copy => "copy",
            Class::Host => "host",
        }
    }
}

/// How a kernel's work grows with the step's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// With micro-batch × sequence.
    Tokens,
    /// With micro-batch × sequence².
    Attention,
    /// Not with the shape (weights, gradients, optimizer states).
    Fixed,
}

/// Where in the step a kernel ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Forward and loss.
    Forward,
    /// Backward.
    Backward,
    /// The optimizer's step and zeroing.
    Optimizer,
}

impl Phase {
    /// Its name in a profile.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// One entry of a profiled step, in program order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Entry {
    /// Consecutive GPU kernels of the same tags.
    Kernels {
        /// Their time on the profiled GPU, µs.
        compute_us: f64,
        /// What bounds them.
        class: Class,
        /// How they grow with the shape.
        scale: Scale,
        /// Where in the step.
        phase: Phase,
        /// How many (0: a host gap).
        kernels: u32,
    },
    /// A collective, a wait or a host anchor, as in a list of calls.
    Call(Call),
}

/// A phase's time in one class, and the work the trace's shapes give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Where in the step.
    pub phase: Phase,
    /// What bounds it.
    pub class: Class,
    /// Kernels.
    pub kernels: u64,
    /// Their time, ms.
    pub time_ms: f64,
    /// Floating-point work from the launching ops' shapes (GEMMs and attention), TFLOP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflop: Option<f64>,
    /// Achieved rate over the source's dense peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction_of_peak: Option<f64>,
    /// Bytes the launching ops read and write (inputs, and an output the size of the largest),
    /// GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbytes: Option<f64>,
    /// Achieved traffic over the source's memory bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction_of_bandwidth: Option<f64>,
}

/// A phase's repeated block (a model's layers): the longest run of consecutive identical
/// kernel sequences (by kernel name) in that phase, found by [`repeated_block`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blocks {
    /// Where in the step.
    pub phase: Phase,
    /// Consecutive blocks.
    pub count: u64,
    /// Kernels in one block.
    pub kernels: u64,
    /// One block's time, the mean over the blocks, ms.
    pub time_ms: f64,
    /// That time by class (`gemm`, `attention`, `memory`, ...), ms.
    pub by_class: BTreeMap<String, f64>,
    /// The fastest and slowest block, ms.
    pub min_ms: f64,
    /// See `min_ms`.
    pub max_ms: f64,
    /// The phase's kernel time outside the blocks, ms.
    pub outside_ms: f64,
}

/// The longest run of `period`-long sequences repeated back to back in `ids`, at least
/// twice and at least `min_period` long: (start, period, repeats). Among runs that cover as
/// many elements, the shortest period (one layer, not two), then the earliest.
pub fn repeated_block(ids: &[u32], min_period: usize) -> Option<(usize, usize, usize)> {
    let n = ids.len();
    let mut best: Option<(usize, usize, usize)> = None;
    let cover = |b: &Option<(usize, usize, usize)>| b.map_or(0, |(_, p, r)| p * r);
    for p in min_period.max(1)..=n / 2 {
        // Runs of ids[i] == ids[i + p]: a run of length L from i0 holds 1 + L / p blocks.
        let mut i = 0;
        while i + p < n {
            if ids[i] != ids[i + p] {
                i += 1;
                continue;
            }
            let i0 = i;
            while i + p < n && ids[i] == ids[i + p] {
                i += 1;
            }
            let repeats = 1 + (i - i0) / p;
            if repeats >= 2 && p * repeats > cover(&best) {
                best = Some((i0, p, repeats));
            }
        }
    }
    best
}

/// A model profile (`collsim profile`'s output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelProfile {
    /// The format's version ([`VERSION`]).
    pub collsim_profile: u32,
    /// The trace it was made from.
    pub source: String,
    /// The GPU as the trace names it.
    pub device: String,
    /// The GPU library's model it was taken as.
    pub gpu: String,
    /// The math precision of the step's GEMMs (a key of the library's `peak_tflops`).
    pub precision: String,
    /// The source GPU's dense peak at that precision, TFLOP/s.
    pub peak_tflops: f64,
    /// The source GPU's memory bandwidth, GB/s.
    pub memory_bandwidth_gbs: f64,
    /// Samples in the traced micro-batch, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<u64>,
    /// Tokens per sample, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// The model's hidden size, where the trace's shapes give it: the input width that most of
    /// the forward's GEMM weight operands share (a transformer's QKV, output and first MLP
    /// projections, and its head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u64>,
    /// Whether the trace recorded its ops' shapes (without them nothing scales with the shape).
    pub shapes: bool,
    /// Ranks the trace ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// The shortest kernel of the trace, µs: a kernel's fixed cost.
    pub kernel_floor_us: f64,
    /// The traced step (its `ProfilerStep` span, or its GPU work's), ms.
    pub traced_step_ms: f64,
    /// The GPU's busy time in it, ms.
    pub gpu_busy_ms: f64,
    /// From the host's first kernel launch (or async copy or memset) to its last, ms: under the
    /// profiler, which slows the host.
    pub host_span_ms: f64,
    /// The step's memory as the caching allocator measured it, where it was given
    /// (`collsim profile --memory steps.csv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// The repeated blocks (layers) of the forward and backward, where found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Blocks>,
    /// The step, in program order.
    pub step: Vec<Entry>,
    /// Per phase and class.
    #[serde(default)]
    pub summary: Vec<Summary>,
}

/// A step's device memory as PyTorch's caching allocator measured it, bytes: what
/// `calibration/trace/profile_model.py` writes to its `steps.csv` (`torch.cuda.memory_allocated`
/// when the step starts and when its forward ends, `max_memory_allocated` over forward and
/// backward and over the optimizer step, `max_memory_reserved`). The allocator does not count
/// the CUDA context or NCCL's buffers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// The file it was read from.
    pub source: String,
    /// The micro-batch it was measured at (the file's `batch`), where it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<u64>,
    /// The sequence it was measured at (`seq`), where it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// The model's parameters (`params`), where it says: under 16-bit autocast their 16-bit
    /// copies, which forward keeps for backward, do not grow with the tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    /// The step's peak allocated.
    pub max_allocated: u64,
    /// The step's peak reserved (allocated, and cached for reuse).
    pub max_reserved: u64,
    /// Allocated when the step starts: weights, optimizer state, DDP's buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_allocated: Option<u64>,
    /// Allocated when the forward ends: the start's, and what forward keeps for backward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_allocated: Option<u64>,
    /// The optimizer step's peak allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_max_allocated: Option<u64>,
    /// The same step timed without the profiler (the file's `median_ms`), ms: the traced
    /// step's host gaps are cut to what it leaves them ([`profiler_host_scale`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<f64>,
}

/// A profile's memory carried to another shape, bytes: what [`super::memory::DdpMemory`]
/// reports for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CarriedMemory {
    /// Allocated when the step starts (the whole peak where the split is not known).
    pub kept: f64,
    /// Forward's kept activations and backward's excess over them.
    pub activations: f64,
    /// The optimizer step's excess over the start.
    pub optimizer: f64,
    /// Reserved over allocated at the peak.
    pub reserved_ratio: f64,
}

impl Memory {
    /// Reads `profile_model.py`'s `steps.csv` (`file`, its `text`): one row, its
    /// `max_allocated` and `max_reserved` columns, and where present `start_allocated`,
    /// `forward_allocated` and `optimizer_max_allocated`.
    pub fn read_steps(file: &str, text: &str) -> Result<Memory, String> {
        // The csv crate's reader (quoted cells, CRLF; blank lines skipped), every record's
        // length checked here so that a short row names its line.
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .flexible(true)
            .from_reader(text.as_bytes());
        let bad = |e: csv::Error| format!("{file}: not CSV ({e})");
        let names: Vec<String> = reader.headers().map_err(bad)?.iter().map(String::from).collect();
        if names.iter().all(String::is_empty) {
            return Err(format!("{file}: empty (profile_model.py writes a header and one row)"));
        }
        if let Some(n) =
            names.iter().enumerate().find_map(|(i, n)| names[..i].contains(n).then_some(n))
        {
            return Err(format!("{file}:1: the column {n:?} twice"));
        }
        let mut rows = reader.records();
        let record = match rows.next() {
            Some(r) => r.map_err(bad)?,
            None => return Err(format!("{file}: no row under the header")),
        };
        let at = |r: &csv::StringRecord| r.position().map_or(2, |p| p.line());
        if let Some(second) = rows.next() {
            let line = second.as_ref().map_or(3, at);
            return Err(format!("{file}:{line}: a second row (one profiled step is one row)"));
        }
        let line = at(&record);
        let cells: Vec<&str> = record.iter().collect();
        if cells.len() != names.len() {
            return Err(format!(
                "{file}:{line}: {} fields where the header has {}",
                cells.len(),
                names.len()
            ));
        }
        let field = |name: &str| -> Result<Option<u64>, String> {
            let Some(i) = names.iter().position(|n| *n == name) else { return Ok(None) };
            match cells[i] {
                "" => Ok(None),
                c => c.parse::<u64>().map(Some).map_err(|_| {
                    format!("{file}:{line}: {name}: not a whole number of bytes ({c:?})")
                }),
            }
        };
        let need = |name: &str| {
            field(name)?.ok_or_else(|| {
                format!("{file}: no {name} column (written by calibration/trace/profile_model.py)")
            })
        };
        let m = Memory {
            // Its name, as the trace's `source` is (no directories of the machine it ran on).
            source: std::path::Path::new(file)
                .file_name()
                .map_or(file.to_string(), |f| f.to_string_lossy().into_owned()),
            micro_batch: field("batch")?,
            sequence: field("seq")?,
            params: field("params")?,
            max_allocated: need("max_allocated")?,
            max_reserved: need("max_reserved")?,
            start_allocated: field("start_allocated")?,
            forward_allocated: field("forward_allocated")?,
            optimizer_max_allocated: field("optimizer_max_allocated")?,
            step_ms: match names.iter().position(|n| n == "median_ms").map(|i| cells[i]) {
                None | Some("") => None,
                Some(c) => Some(c.parse::<f64>().map_err(|_| {
                    format!("{file}:{line}: median_ms: not a step time in ms ({c:?})")
                })?),
            },
        };
        m.check().map_err(|e| format!("{file}:{line}: {e}"))?;
        Ok(m)
    }

    /// Whether its figures are consistent: the peaks at least what is allocated along the way,
    /// reserved at least allocated, all under 2^50 bytes (a petabyte).
    pub fn check(&self) -> Result<(), String> {
        const MAX: u64 = 1 << 50;
        let at_most = |name: &str, x: u64, max: u64, what: &str| {
            if x > max { Err(format!("{name} ({x}) is more than {what} ({max})")) } else { Ok(()) }
        };
        at_most("max_reserved", self.max_reserved, MAX, "a petabyte")?;
        if self.max_allocated == 0 {
            return Err("max_allocated: 0 bytes (the step allocated nothing?)".into());
        }
        at_most("max_allocated", self.max_allocated, self.max_reserved, "max_reserved")?;
        if let Some(f) = self.forward_allocated {
            at_most("forward_allocated", f, self.max_allocated, "max_allocated")?;
        }
        if let Some(st) = self.start_allocated {
            at_most(
                "start_allocated",
                st,
                self.forward_allocated.unwrap_or(st),
                "forward_allocated",
            )?;
            at_most("start_allocated", st, self.max_allocated, "max_allocated")?;
        }
        if let Some(o) = self.optimizer_max_allocated {
            at_most("optimizer_max_allocated", o, self.max_reserved, "max_reserved")?;
            if let Some(st) = self.start_allocated {
                at_most("start_allocated", st, o, "optimizer_max_allocated")?;
            }
        }
        // The allocator keeps what it freed, not twice what the step ever held at once.
        if self.max_reserved / 2 > self.max_allocated {
            return Err(format!(
                "max_reserved ({}) is more than twice max_allocated ({}): the allocator held memory this step never used (another model's, or a cache not emptied); measure the step alone",
                self.max_reserved, self.max_allocated
            ));
        }
        for (name, x) in [("batch", self.micro_batch), ("seq", self.sequence)] {
            if x.is_some_and(|x| !(1..=MAX_SHAPE).contains(&x)) {
                return Err(format!("{name}: must be 1 to {MAX_SHAPE}"));
            }
        }
        // A step between a microsecond and an hour.
        if let Some(ms) = self.step_ms.filter(|ms| !(ms.is_finite() && (1e-3..=3.6e6).contains(ms)))
        {
            return Err(format!(
                "median_ms (step_ms in a profile): {ms} is not a step time (1 µs to an hour, in ms)"
            ));
        }
        if self.start_allocated.is_some() != self.forward_allocated.is_some() {
            return Err(
                "start_allocated and forward_allocated come together (neither is of use alone)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Carried to `tokens` times the traced micro-batch × sequence (`grows`: what the
    /// activations grow by, `tokens` or, for attention that keeps its scores, micro-batch ×
    /// sequence² where the sequence grows): None where that is not the traced shape and the
    /// step's start and forward were not measured.
    ///
    /// What forward keeps (forward's end less the start) grows with the activations, but for
    /// the 16-bit copies of the weights a step under 16-bit autocast keeps for backward
    /// (`autocast`: 2 bytes a parameter where `params` is known), which do not; without
    /// `params` it is kept whole below the traced shape. Backward's excess over it mixes
    /// gradients (fixed) and activation gradients, and is taken whole, never less: scaled
    /// above the traced shape, kept as measured below it. The optimizer step's peak, when the
    /// activations are freed, stays as measured.
    pub fn carried(&self, grows: f64, autocast: bool) -> Option<CarriedMemory> {
        let reserved_ratio = self.max_reserved as f64 / self.max_allocated as f64;
        let optimizer =
            |start: f64| self.optimizer_max_allocated.map_or(0.0, |o| (o as f64 - start).max(0.0));
        match (self.start_allocated, self.forward_allocated) {
            (Some(start), Some(fwd)) => {
                let (start, fwd, max) = (start as f64, fwd as f64, self.max_allocated as f64);
                let (forward, backward) = (fwd - start, max - fwd);
                let fixed = match self.params {
                    Some(p) if autocast => (2.0 * p as f64).min(forward),
                    Some(_) => 0.0,
                    None if grows < 1.0 => forward,
                    None => 0.0,
                };
                Some(CarriedMemory {
                    kept: start,
                    activations: (forward - fixed) * grows + fixed + backward * grows.max(1.0),
                    optimizer: optimizer(start),
                    reserved_ratio,
                })
            }
            _ if grows == 1.0 => Some(CarriedMemory {
                kept: self.max_allocated as f64,
                activations: 0.0,
                optimizer: 0.0,
                reserved_ratio,
            }),
            _ => None,
        }
    }
}

/// What `collsim profile` may be told beside the trace.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The GPU library's model the trace ran on (else from its `deviceProperties`).
    pub gpu: Option<String>,
    /// Samples per micro-batch (else from the first embedding's indices).
    pub micro_batch: Option<u64>,
    /// Tokens per sample (likewise).
    pub sequence: Option<u64>,
    /// The step's memory (`--memory steps.csv`).
    pub memory: Option<Memory>,
}

/// GEMM kernel names' marks (cuBLAS, cuBLASLt's nvjet, CUTLASS, tensor-core MMAs).
const GEMM_MARKS: [&str; 9] =
    ["gemm", "nvjet", "cutlass", "xmma", "wgmma", "hmma", "s16816", "h16816", "s1688"];
/// Fused attention kernel names' marks.
const ATTENTION_MARKS: [&str; 5] = ["sdpa", "flash", "fmha", "attn", "attention"];
/// Ops whose kernels are matrix multiplies.
const GEMM_OPS: [&str; 8] = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::_scaled_mm",
    "aten::addbmm",
];

/// A CPU op's shapes as Kineto records them.
struct Op<'a> {
    name: &'a str,
    ts: f64,
    dims: Vec<Vec<u64>>,
    types: Vec<&'a str>,
}

fn op_of(e: &Value) -> Option<Op<'_>> {
    let args = e.get("args")?;
    let dims = args
        .get("Input Dims")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|d| {
                    d.as_array()
                        .map(|d| d.iter().filter_map(Value::as_u64).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    let types = args
        .get("Input type")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|t| t.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    Some(Op {
        name: e.get("name").and_then(Value::as_str).unwrap_or(""),
        ts: e.get("ts").and_then(Value::as_f64).unwrap_or(0.0),
        dims,
        types,
    })
}

/// Bytes of one element of a type as Kineto names it.
fn type_bytes(t: &str) -> Option<u64> {
    Some(match t {
        "c10::BFloat16" | "c10::Half" | "short int" => 2,
        "float" | "int" | "unsigned int" => 4,
        "double" | "long int" | "long" | "c10::complex<float>" => 8,
        "bool" | "unsigned char" | "signed char" | "c10::Float8_e4m3fn" | "c10::Float8_e5m2" => 1,
        _ => return None,
    })
}

/// The floating-point work of a GEMM or attention op from its shapes.
fn flops(op: &Op<'_>, causal: bool) -> Option<f64> {
    let d = |i: usize| op.dims.get(i).filter(|d| !d.is_empty());
    let mm = |a: &[u64], b: &[u64]| -> Option<f64> {
        match (a, b) {
            ([m, k], [k2, n]) if k == k2 => Some(2.0 * (*m as f64) * (*k as f64) * (*n as f64)),
            ([bt, m, k], [bt2, k2, n]) if k == k2 && bt == bt2 => {
                Some(2.0 * (*bt as f64) * (*m as f64) * (*k as f64) * (*n as f64))
            }
            _ => None,
        }
    };
    match op.name {
        "aten::mm" | "aten::bmm" | "aten::_scaled_mm" => mm(d(0)?, d(1)?),
        "aten::addmm" | "aten::baddbmm" => mm(d(1)?, d(2)?),
        n if n.contains("attention") => {
            let (q, k) = (d(0)?, d(1)?);
            let ([q0, q1, q2, dh], [_, k1, k2, _]) = (q.as_slice(), k.as_slice()) else {
                return None;
            };
            // The flash and memory-efficient kernels take [b, s, heads, d]; cuDNN's and SDPA's
            // [b, heads, s, d].
            let flash = n.contains("_flash_attention") || n.contains("_efficient_attention");
            let (b, h, s, sk) = if flash { (q0, q2, q1, k1) } else { (q0, q1, q2, k2) };
            // Two matmuls forward (scores, values); the backward's five are 2.5 times them.
            let fwd = 4.0 * (*b as f64) * (*h as f64) * (*s as f64) * (*sk as f64) * (*dh as f64);
            let fwd = if causal { fwd / 2.0 } else { fwd };
            Some(if n.contains("backward") { 2.5 * fwd } else { fwd })
        }
        _ => None,
    }
}

/// The bytes an op reads and writes: its inputs, and an output the size of the largest.
fn traffic(op: &Op<'_>) -> Option<u64> {
    let mut total = 0u64;
    let mut largest = 0u64;
    let mut any = false;
    for (i, d) in op.dims.iter().enumerate() {
        if d.is_empty() {
            continue;
        }
        let size = type_bytes(op.types.get(i).copied().unwrap_or(""))?;
        let b = d.iter().try_fold(size, |acc, &x| acc.checked_mul(x))?;
        total = total.checked_add(b)?;
        largest = largest.max(b);
        any = true;
    }
    any.then(|| total.saturating_add(largest))
}

/// Whether an op's inputs carry the step's tokens: micro-batch and sequence side by side in one
/// input's dimensions, or their product as one dimension. Where that product is also a
/// dimension of a weight (`weights`: the forward GEMMs' weight operands and their transposes;
/// 8,192 tokens against a 2,048-wide model's 8,192-wide MLP), an input shaped as a weight and
/// in another type than the step's 16-bit activations (`half`: an fp32 gradient in its bucket)
/// is taken as the weight's.
fn carries_tokens(
    op: &Op<'_>,
    (b, s): (u64, u64),
    weights: &BTreeSet<Vec<u64>>,
    half: Option<&str>,
) -> bool {
    let tokens = b.saturating_mul(s);
    op.dims.iter().enumerate().any(|(i, d)| {
        let pair = d.windows(2).any(|w| (w[0] == b && w[1] == s) || (w[0] == s && w[1] == b));
        let weight_like =
            weights.contains(d) && half.is_some_and(|h| op.types.get(i).is_some_and(|t| *t != h));
        pair || (d.contains(&tokens) && !weight_like)
    })
}

/// The GPU library's model a trace's `deviceProperties` describe: same compute capability and
/// SM count, the name's form factor (PCIe or not), then the nearest memory size.
fn device_model<'a>(props: &Value, library: &'a [GpuModel]) -> Option<&'a GpuModel> {
    let major = props.get("computeMajor")?.as_u64()?;
    let minor = props.get("computeMinor").and_then(Value::as_u64).unwrap_or(0);
    let sm = u32::try_from(major.checked_mul(10)?.checked_add(minor)?).ok()?;
    let sms = match props.get("numSms").and_then(Value::as_u64) {
        Some(n) => Some(u32::try_from(n).ok()?),
        None => None,
    };
    let name = props.get("name").and_then(Value::as_str).unwrap_or("");
    let memory = props.get("totalGlobalMem").and_then(Value::as_u64)?;
    let pcie = name.to_ascii_lowercase().contains("pcie");
    library
        .iter()
        .filter(|m| m.sm == sm && (sms.is_none() || m.multiprocessors == sms))
        .filter(|m| m.name.to_ascii_lowercase().contains("pcie") == pcie)
        .min_by_key(|m| m.memory.get().abs_diff(memory))
}

/// Precision names of PyTorch's types, for the library's `peak_tflops`.
fn precision_of(t: &str) -> Option<&'static str> {
    Some(match t {
        "c10::BFloat16" => "bf16",
        "c10::Half" => "fp16",
        "float" => "fp32",
        "c10::Float8_e4m3fn" | "c10::Float8_e5m2" => "fp8",
        _ => return None,
    })
}

/// Makes a profile of a Kineto trace (`file` names it in errors).
pub fn from_trace(
    file: &str,
    text: &str,
    library: &[GpuModel],
    opts: &Options,
) -> Result<ModelProfile, String> {
    let traced = super::kineto::import_events(file, text)?;
    let events = traced.events();
    let props = traced
        .json
        .get("deviceProperties")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(Value::Null);
    let device = props.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let names = || library.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ");
    let gpu = match &opts.gpu {
        Some(g) => library.iter().find(|m| &m.name == g).ok_or_else(|| {
            format!("--gpu {g}: not a GPU model collsim knows (it knows {})", names())
        })?,
        None => device_model(&props, library).ok_or_else(|| {
            let what = if device.is_empty() {
                "records no deviceProperties".to_string()
            } else {
                format!("ran on {device:?}, which matches no GPU model collsim knows")
            };
            format!("{file}: the trace {what}: name it with --gpu ({})", names())
        })?,
    };

    // CPU ops by External id, the step's phases and its shape.
    let mut ops: BTreeMap<u64, Op<'_>> = BTreeMap::new();
    let mut backward_from = f64::INFINITY;
    let mut optimizer: Vec<(f64, f64)> = Vec::new();
    let mut step_span: Option<f64> = None;
    let mut steps: BTreeSet<&str> = BTreeSet::new();
    let mut embedding: Option<(u64, u64)> = None;
    let mut causal: Option<bool> = None;
    let mut shapes = false;
    let mut host = (f64::INFINITY, f64::NEG_INFINITY);
    let mut floor = f64::INFINITY;
    for e in events {
        let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
        let ts = e.get("ts").and_then(Value::as_f64);
        let dur = e.get("dur").and_then(Value::as_f64).unwrap_or(0.0);
        match cat {
            "cpu_op" => {
                let Some(op) = op_of(e) else { continue };
                shapes |= !op.dims.is_empty();
                if name.starts_with("autograd::engine::evaluate_function") {
                    backward_from = backward_from.min(op.ts);
                }
                if name == "aten::embedding"
                    && embedding.is_none()
                    && let Some([b, s]) = op.dims.get(1).map(Vec::as_slice)
                    && (1..=MAX_SHAPE).contains(b)
                    && (1..=MAX_SHAPE).contains(s)
                {
                    embedding = Some((*b, *s));
                }
                if name == "aten::scaled_dot_product_attention" {
                    let c = e
                        .get("args")
                        .and_then(|a| a.get("Concrete Inputs"))
                        .and_then(|c| c.get(5))
                        .and_then(Value::as_str)
                        == Some("True");
                    causal = Some(causal.unwrap_or(true) && c);
                }
                if let Some(id) =
                    e.get("args").and_then(|a| a.get("External id")).and_then(Value::as_u64)
                {
                    ops.insert(id, op);
                }
            }
            "user_annotation" => {
                if let Some(ts) = ts {
                    if name.starts_with("Optimizer.step") || name.starts_with("Optimizer.zero_grad")
                    {
                        optimizer.push((ts, ts + dur));
                    }
                    if name.starts_with("ProfilerStep") {
                        step_span = Some(step_span.map_or(dur, |d: f64| d.max(dur)));
                        steps.insert(name);
                    }
                }
            }
            "cuda_runtime" | "cuda_driver"
                if ["Launch", "Memcpy", "Memset"].iter().any(|m| name.contains(m)) =>
            {
                if let Some(ts) = ts {
                    host = (host.0.min(ts), host.1.max(ts + dur));
                }
            }
            "kernel" | "Kernel" if dur > 0.0 => floor = floor.min(dur),
            _ => {}
        }
    }
    if steps.len() > 1 {
        return Err(format!(
            "{file}: the trace holds {} profiler steps ({}); a profile is of one step (record one: torch.profiler.schedule(wait=1, warmup=2, active=1))",
            steps.len(),
            steps.iter().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    if opts.micro_batch.is_some() != opts.sequence.is_some() && embedding.is_none() {
        return Err(format!(
            "{file}: the trace records no embedding to read the other of micro-batch and sequence from: give both --micro-batch and --sequence"
        ));
    }
    let shape = match (opts.micro_batch.zip(opts.sequence), embedding) {
        (Some(bs), _) => Some(bs),
        (None, Some(bs)) => Some((opts.micro_batch.unwrap_or(bs.0), opts.sequence.unwrap_or(bs.1))),
        (None, None) => None,
    };
    if let (Some(m), Some((b, s))) = (&opts.memory, shape) {
        let (mb, ms) = (m.micro_batch.unwrap_or(b), m.sequence.unwrap_or(s));
        if (mb, ms) != (b, s) {
            return Err(format!(
                "{}: measured at {mb} x {ms} tokens, but the trace's step is {b} x {s}: give the steps.csv written beside this trace",
                m.source
            ));
        }
    }
    let causal = causal.unwrap_or(false);
    // The forward GEMMs' weight operands (and transposes), and the 16-bit type of their
    // activations where the step runs in 16 bits.
    let mut weights: BTreeSet<Vec<u64>> = BTreeSet::new();
    let mut half: Option<&str> = None;
    // Forward GEMMs by their weight operand's input width ([in, out] as `mm` and `addmm` take
    // it): the most common is the hidden size.
    let mut widths: BTreeMap<u64, usize> = BTreeMap::new();
    for op in ops.values().filter(|o| o.ts < backward_from) {
        let w = match op.name {
            "aten::mm" => op.dims.get(1),
            "aten::addmm" => op.dims.get(2),
            _ => None,
        };
        if let Some(w) = w.filter(|w| w.len() == 2) {
            *widths.entry(w[0]).or_default() += 1;
            weights.insert(w.clone());
            weights.insert(vec![w[1], w[0]]);
            if let Some(t @ ("c10::BFloat16" | "c10::Half")) = op.types.first().copied() {
                half = Some(t);
            }
        }
    }

    let hidden = widths.iter().max_by_key(|(w, n)| (**n, **w)).map(|(w, _)| *w);

    // Each kernel's tags, work and traffic (an op's counted once, at its first kernel).
    let mut tags: BTreeMap<usize, (Class, Scale, Phase)> = BTreeMap::new();
    let mut counted: BTreeSet<(u64, bool)> = BTreeSet::new();
    let mut sums: BTreeMap<(Phase, Class), (u64, f64, f64, u64)> = BTreeMap::new();
    let mut precisions: BTreeMap<&'static str, f64> = BTreeMap::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    // Every kernel in order (phase, class, name's id, µs), for the repeated blocks.
    let mut names: BTreeMap<&str, u32> = BTreeMap::new();
    let mut sequence: Vec<(Phase, Class, u32, f64)> = Vec::new();
    for &(call, event) in &traced.kernels {
        let e = &events[event];
        let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
        let kname = e.get("name").and_then(Value::as_str).unwrap_or("");
        let ts = e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
        let dur = e.get("dur").and_then(Value::as_f64).unwrap_or(0.0);
        first = first.min(ts);
        last = last.max(ts + dur);
        let id = e.get("args").and_then(|a| a.get("External id")).and_then(Value::as_u64);
        let op = id.and_then(|id| ops.get(&id));
        let oname = op.map_or("", |o| o.name);
        let at = op.map_or(ts, |o| o.ts);
        let phase = if optimizer.iter().any(|&(a, b)| a <= at && at <= b) {
            Phase::Optimizer
        } else if at >= backward_from {
            Phase::Backward
        } else {
            Phase::Forward
        };
        let lower = kname.to_ascii_lowercase();
        let native = lower.starts_with("void at::native") || lower.contains("cub::");
        let class = if cat != "kernel" && cat != "Kernel" {
            Class::Copy
        } else if phase == Phase::Optimizer
            || oname.contains("adam")
            || oname.contains("_foreach_")
            || lower.contains("multi_tensor")
        {
            Class::Optimizer
        } else if ATTENTION_MARKS.iter().any(|m| lower.contains(m)) {
            Class::Attention
        } else if oname.contains("convolution") && !native {
            Class::Convolution
        } else if GEMM_MARKS.iter().any(|m| lower.contains(m))
            || (GEMM_OPS.contains(&oname) && !native)
        {
            Class::Gemm
        } else {
            Class::Memory
        };
        let scale = match (class, op, shape) {
            (Class::Attention, _, _) => Scale::Attention,
            (Class::Optimizer, _, _) => Scale::Fixed,
            (_, Some(op), Some(bs)) if carries_tokens(op, bs, &weights, half) => Scale::Tokens,
            _ => Scale::Fixed,
        };
        tags.insert(call, (class, scale, phase));
        let next = names.len() as u32;
        let kid = *names.entry(kname).or_insert(next);
        sequence.push((phase, class, kid, dur));
        let s = sums.entry((phase, class)).or_insert((0, 0.0, 0.0, 0));
        s.0 += 1;
        s.1 += dur;
        if class == Class::Copy {
            // A memcpy or memset records its own size.
            let b = e.get("args").and_then(|a| a.get("bytes")).and_then(Value::as_u64);
            // A copy reads and writes its bytes; a memset writes them.
            let factor = if cat == "gpu_memcpy" { 2 } else { 1 };
            s.3 = s.3.saturating_add(b.unwrap_or(0).saturating_mul(factor));
        } else if let (Some(id), Some(op)) = (id, op)
            && counted.insert((id, class.flop_bound()))
        {
            if class.flop_bound() {
                if let Some(f) = flops(op, causal) {
                    s.2 += f;
                    if let Some(p) = op.types.first().and_then(|t| precision_of(t)) {
                        *precisions.entry(p).or_default() += f;
                    }
                }
            } else if let Some(b) = traffic(op) {
                s.3 = s.3.saturating_add(b);
            }
        }
    }
    if tags.is_empty() {
        return Err(format!("{file}: no compute kernels to profile (only collectives)"));
    }
    let precision =
        precisions.iter().max_by(|a, b| a.1.total_cmp(b.1)).map_or("bf16", |(p, _)| p).to_string();
    let peak = gpu.peak_tflops.get(&precision).copied().ok_or_else(|| {
        format!("{file}: the {} has no {precision} peak in the GPU library", gpu.name)
    })?;
    let bandwidth = gpu.memory_bandwidth.map(|b| b.bytes_per_sec() / 1e9).ok_or_else(|| {
        format!("{file}: the {} has no memory bandwidth in the GPU library", gpu.name)
    })?;

    // The step: kernels merged by tags, host gaps as host time.
    let mut step: Vec<Entry> = Vec::new();
    let mut phase = Phase::Forward;
    for (i, call) in traced.file.calls.iter().enumerate() {
        let (us, tag, n) = match (call, tags.get(&i)) {
            (Call::Compute { compute_us, .. }, Some(&t)) => (*compute_us, t, 1),
            (Call::Compute { compute_us, .. }, None) => {
                (*compute_us, (Class::Host, Scale::Fixed, phase), 0)
            }
            (c, _) => {
                step.push(Entry::Call(c.clone()));
                continue;
            }
        };
        phase = tag.2;
        if let Some(Entry::Kernels { compute_us, class, scale, phase, kernels }) = step.last_mut()
            && (*class, *scale, *phase) == tag
        {
            *compute_us += us;
            *kernels += n;
            continue;
        }
        step.push(Entry::Kernels {
            compute_us: us,
            class: tag.0,
            scale: tag.1,
            phase: tag.2,
            kernels: n,
        });
    }
    // The profiler slows the host (its own bookkeeping at every op): where the same step was
    // timed without it (with CUDA events, as the GPU's span is), its host gaps keep only what
    // that time leaves them beyond the GPU's span without them.
    let step_span_us = step_span.unwrap_or(last - first);
    let gpu_span_ms = (last - first) / 1e3;
    let host_ms = step.iter().map(host_us).sum::<f64>() / 1e3;
    if let Some(m) = &opts.memory
        && let Some(ms) = m.step_ms
        && !(0.5 * (gpu_span_ms - host_ms)..=2.0 * gpu_span_ms).contains(&ms)
    {
        return Err(format!(
            "{}: median_ms {ms} is not this trace's step (its GPU span {gpu_span_ms:.3} ms, {:.3} of it without host gaps): give the steps.csv written beside this trace",
            m.source,
            gpu_span_ms - host_ms
        ));
    }
    if let Some(scale) =
        opts.memory.as_ref().and_then(|m| profiler_host_scale(gpu_span_ms, host_ms, m.step_ms?))
    {
        for e in &mut step {
            if let Entry::Kernels { compute_us, class: Class::Host, .. } = e {
                *compute_us *= scale;
            }
        }
    }
    // To the ns, as the trace's clock.
    for e in &mut step {
        match e {
            Entry::Kernels { compute_us, .. } => *compute_us = round3(*compute_us),
            Entry::Call(Call::Until { idle_until_us }) => *idle_until_us = round3(*idle_until_us),
            _ => {}
        }
    }

    let summary = sums
        .iter()
        .map(|(&(phase, class), &(kernels, us, f, b))| {
            let secs = us * 1e-6;
            let tflop = (f > 0.0).then_some(f / 1e12);
            let gbytes = (b > 0).then_some(b as f64 / 1e9);
            Summary {
                phase,
                class,
                kernels,
                time_ms: round3(us / 1e3),
                tflop: tflop.map(round3),
                fraction_of_peak: tflop.filter(|_| secs > 0.0).map(|t| round3(t / secs / peak)),
                gbytes: gbytes.map(round3),
                fraction_of_bandwidth: gbytes
                    .filter(|_| secs > 0.0)
                    .map(|g| round3(g / secs / bandwidth)),
            }
        })
        .collect();
    let busy: f64 = sums.values().map(|s| s.1).sum();
    Ok(ModelProfile {
        collsim_profile: VERSION,
        source: std::path::Path::new(file)
            .file_name()
            .map_or(file.to_string(), |f| f.to_string_lossy().into_owned()),
        device,
        gpu: gpu.name.clone(),
        precision,
        peak_tflops: peak,
        memory_bandwidth_gbs: bandwidth,
        micro_batch: shape.map(|s| s.0),
        sequence: shape.map(|s| s.1),
        hidden,
        shapes,
        ranks: traced.file.ranks,
        kernel_floor_us: if floor.is_finite() { round3(floor) } else { 0.0 },
        traced_step_ms: round3(step_span_us / 1e3),
        gpu_busy_ms: round3(busy / 1e3),
        host_span_ms: if host.1 > host.0 { round3((host.1 - host.0) / 1e3) } else { 0.0 },
        memory: opts.memory.clone(),
        blocks: blocks_of(&sequence),
        step,
        summary,
    })
}

impl ModelProfile {
    /// The host's launches without the profiler, ms, where the step was timed without it
    /// (`[memory] step_ms`): the traced launch span × the step's time without the profiler
    /// over with it (at most 1). The profiler slows the host more than the step, so this errs
    /// long.
    pub fn host_floor_ms(&self) -> Option<f64> {
        let ms = self.memory.as_ref()?.step_ms?;
        (self.traced_step_ms > 0.0)
            .then(|| self.host_span_ms * (ms / self.traced_step_ms).min(1.0))
            .filter(|f| *f > 0.0)
    }
}

/// A host gap's time, µs (0 for anything else).
pub fn host_us(e: &Entry) -> f64 {
    match e {
        Entry::Kernels { compute_us, class: Class::Host, .. } => *compute_us,
        _ => 0.0,
    }
}

/// What a traced step's host gaps are cut to, as a share of them, where the same step took
/// `unprofiled_ms` without the profiler: what that leaves them beyond the rest of a step whose
/// GPU span is `traced_ms` with `host_ms` of gaps, never more than traced (None: no gaps). The profiler's own cost on
/// the host falls in the gaps: on one H200, transformers' GPT-2 small at 8 x 1,024 tokens
/// traced 96.0 ms with 35.6 ms of gaps and ran 60.6 ms unprofiled
/// (`calibration/data/2026-11-30-h200-hf`).
pub fn profiler_host_scale(traced_ms: f64, host_ms: f64, unprofiled_ms: f64) -> Option<f64> {
    (host_ms > 0.0).then(|| ((unprofiled_ms - (traced_ms - host_ms)) / host_ms).clamp(0.0, 1.0))
}

/// The forward's and the backward's repeated blocks in `sequence` (phase, class, kernel
/// name's id, µs, in order), each with at least 3 kernels (a layer has its GEMMs and what lies
/// between them), one of them FLOP-bound, and covering at least a quarter of its phase's
/// kernels.
fn blocks_of(sequence: &[(Phase, Class, u32, f64)]) -> Vec<Blocks> {
    let mut out = Vec::new();
    for phase in [Phase::Forward, Phase::Backward] {
        let ks: Vec<&(Phase, Class, u32, f64)> = sequence.iter().filter(|k| k.0 == phase).collect();
        let ids: Vec<u32> = ks.iter().map(|k| k.2).collect();
        let Some((start, period, count)) = repeated_block(&ids, 3) else { continue };
        // A layer runs its GEMMs (or convolutions, or attention): a run of casts alone is not
        // one (torchvision's ResNet-50 repeats its 53 weight casts, three kernels each).
        let flop_bound = ks[start..start + period].iter().any(|k| k.1.flop_bound());
        if 4 * period * count < ids.len() || !flop_bound {
            continue;
        }
        let mut by_class: BTreeMap<String, f64> = BTreeMap::new();
        let mut times = Vec::with_capacity(count);
        for b in 0..count {
            let block = &ks[start + b * period..start + (b + 1) * period];
            times.push(block.iter().map(|k| k.3).sum::<f64>());
            for k in block {
                *by_class.entry(k.1.name().to_string()).or_default() += k.3;
            }
        }
        let total: f64 = ks.iter().map(|k| k.3).sum();
        let inside: f64 = times.iter().sum();
        for v in by_class.values_mut() {
            *v = round3(*v / count as f64 / 1e3);
        }
        out.push(Blocks {
            phase,
            count: count as u64,
            kernels: period as u64,
            time_ms: round3(inside / count as f64 / 1e3),
            by_class,
            min_ms: round3(times.iter().copied().fold(f64::INFINITY, f64::min) / 1e3),
            max_ms: round3(times.iter().copied().fold(0.0, f64::max) / 1e3),
            outside_ms: round3((total - inside).max(0.0) / 1e3),
        });
    }
    out
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// Why a profile does not read: for an entry of `step` that matches no kind of entry, what the
/// kind its keys name expects (serde's untagged enums say only that nothing matched).
fn diagnose(text: &str, e: &toml::de::Error) -> String {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Kernels {
        compute_us: f64,
        class: Class,
        scale: Scale,
        phase: Phase,
        kernels: u32,
    }
    let untagged = e.message().contains("untagged enum Entry");
    let entry = e.span().and_then(|s| text.get(s)).map(str::trim);
    let (true, Some(entry)) = (untagged, entry) else {
        return e.message().trim_end().to_string();
    };
    // The span is the entry's, or the whole array's.
    let one = |v: &toml::Value| -> String {
        match v {
            toml::Value::Table(t) if t.contains_key("class") => {
                match Kernels::deserialize(v.clone()) {
                    Err(e) => e.message().trim_end().to_string(),
                    Ok(_) => "not an entry".to_string(),
                }
            }
            _ => {
                let file = serde_json::json!({ "collsim_calls": 1, "calls": [v] });
                match serde_json::to_value(v).ok().and(super::calls::diagnose(&file)) {
                    Some(why) => why.replace("calls[0]", "entry"),
                    None => "not an entry".to_string(),
                }
            }
        }
    };
    let parsed = toml::from_str::<toml::Table>(&format!("e = {entry}")).ok();
    let why = match parsed.as_ref().and_then(|t| t.get("e")) {
        Some(toml::Value::Array(a)) => a
            .iter()
            .enumerate()
            .find(|(_, v)| Entry::deserialize((*v).clone()).is_err())
            .map_or("not an entry".to_string(), |(i, v)| format!("[{i}]: {}", one(v))),
        Some(v) => format!(": {}", one(v)),
        None => ": not an entry".to_string(),
    };
    format!(
        "step{why} (an entry is {{ class, scale, phase, compute_us, kernels }} or a list-of-calls entry)"
    )
}

/// A TOML value written inline (a table as `{ k = v }`), for one entry a line.
fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) => {
            let fields: Vec<String> =
                t.iter().map(|(k, v)| format!("{k} = {}", inline(v))).collect();
            format!("{{ {} }}", fields.join(", "))
        }
        toml::Value::Array(a) => {
            format!("[{}]", a.iter().map(inline).collect::<Vec<_>>().join(", "))
        }
        other => other.to_string(),
    }
}

impl ModelProfile {
    /// The profile as TOML: its header, the step one entry a line, the summary's tables.
    pub fn to_toml(&self) -> Result<String, String> {
        #[derive(Serialize)]
        struct Tables<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            memory: Option<&'a Memory>,
            #[serde(skip_serializing_if = "<[Blocks]>::is_empty")]
            blocks: &'a [Blocks],
            summary: &'a [Summary],
        }
        let head = ModelProfile {
            step: Vec::new(),
            summary: Vec::new(),
            memory: None,
            blocks: Vec::new(),
            ..self.clone()
        };
        let mut text = String::from(
            "# A model profile written by `collsim profile` (src/workload/profile.rs documents every\n\
             # field). A scenario names it with [workload] profile = \"FILE\".\n",
        );
        let head = toml::to_string(&head).map_err(|e| e.to_string())?;
        // The empty arrays the header's serialisation ends with are written below.
        for line in head.lines().filter(|l| !l.starts_with("step =") && !l.starts_with("summary ="))
        {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str("step = [\n");
        for e in &self.step {
            let v = toml::Value::try_from(e).map_err(|e| e.to_string())?;
            text.push_str(&format!("    {},\n", inline(&v)));
        }
        text.push_str("]\n\n");
        text.push_str(
            &toml::to_string(&Tables {
                memory: self.memory.as_ref(),
                blocks: &self.blocks,
                summary: &self.summary,
            })
            .map_err(|e| e.to_string())?,
        );
        Ok(text)
    }

    /// Reads a profile (`file` names it in errors) and checks it.
    pub fn read(file: &str, text: &str) -> Result<ModelProfile, String> {
        let p: ModelProfile = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(":{line}:{col}")
            });
            format!("{file}{}: {}", at.unwrap_or_default(), diagnose(text, &e))
        })?;
        let bad = |field: &str, why: String| format!("{file}: {field}: {why}");
        if p.collsim_profile != VERSION {
            return Err(bad(
                "collsim_profile",
                format!("version {} (this collsim reads {VERSION})", p.collsim_profile),
            ));
        }
        for (field, x, max) in [
            ("peak_tflops", p.peak_tflops, MAX_PEAK_TFLOPS),
            ("memory_bandwidth_gbs", p.memory_bandwidth_gbs, MAX_BANDWIDTH_GBS),
        ] {
            if !(x.is_finite() && x > 0.0 && x <= max) {
                return Err(bad(field, format!("must be a positive number up to {max} (got {x})")));
            }
        }
        if !(0.0..=MAX_FLOOR_US).contains(&p.kernel_floor_us) {
            return Err(bad(
                "kernel_floor_us",
                format!("must be 0 to {MAX_FLOOR_US} µs (got {})", p.kernel_floor_us),
            ));
        }
        if p.source.chars().any(char::is_control) || p.device.chars().any(char::is_control) {
            return Err(bad("source", "a name with control characters".into()));
        }
        for (field, x) in [
            ("kernel_floor_us", p.kernel_floor_us),
            ("traced_step_ms", p.traced_step_ms),
            ("gpu_busy_ms", p.gpu_busy_ms),
            ("host_span_ms", p.host_span_ms),
        ] {
            if !(x.is_finite() && x >= 0.0) {
                return Err(bad(field, format!("must be 0 or more (got {x})")));
            }
        }
        for (field, x) in [("micro_batch", p.micro_batch), ("sequence", p.sequence)] {
            if x.is_some_and(|x| !(1..=MAX_SHAPE).contains(&x)) {
                return Err(bad(field, format!("must be 1 to {MAX_SHAPE}")));
            }
        }
        if p.hidden.is_some_and(|h| !(1..=MAX_HIDDEN).contains(&h)) {
            return Err(bad("hidden", format!("must be 1 to {MAX_HIDDEN}")));
        }
        for (i, b) in p.blocks.iter().enumerate() {
            let times = [b.time_ms, b.min_ms, b.max_ms, b.outside_ms];
            let sane = (2..=MAX_BLOCKS).contains(&b.count)
                && b.kernels >= 1
                && b.phase != Phase::Optimizer
                && times.iter().chain(b.by_class.values()).all(|x| x.is_finite() && *x >= 0.0)
                && b.min_ms <= b.max_ms;
            if !sane {
                return Err(bad(
                    &format!("blocks[{i}]"),
                    format!(
                        "not what `collsim profile` writes (2 to {MAX_BLOCKS} blocks of a kernel or more, forward or backward, times finite, 0 or more, min_ms at most max_ms): make the profile again"
                    ),
                ));
            }
        }
        if let Some(m) = &p.memory {
            m.check().map_err(|e| bad("memory", e))?;
            if m.source.chars().any(char::is_control) {
                return Err(bad("memory.source", "a name with control characters".into()));
            }
        }
        for (i, e) in p.step.iter().enumerate() {
            if let Entry::Kernels { compute_us, .. } = e
                && !(compute_us.is_finite()
                    && (0.0..=super::calls::MAX_ENTRY_US).contains(compute_us))
            {
                return Err(bad(
                    &format!("step[{i}].compute_us"),
                    format!("must be 0 to {} µs (got {compute_us})", super::calls::MAX_ENTRY_US),
                ));
            }
        }
        let calls: Vec<Call> = p.carry_with(&Carry::identity()).0;
        super::calls::check(&calls).map_err(|e| format!("{file}: step: {e}"))?;
        Ok(p)
    }

    /// The ratios that carry this profile to `gpu` at `micro_batch` × `sequence` (None: as
    /// traced), or why it cannot be carried there.
    pub fn carry_to(
        &self,
        gpu: &GpuModel,
        micro_batch: Option<u64>,
        sequence: Option<u64>,
    ) -> Result<Carry, (Blame, String)> {
        let gpu_err = |e: String| (Blame::Gpu, e);
        let peak = gpu.peak_tflops.get(&self.precision).copied().ok_or_else(|| {
            gpu_err(format!(
                "the profile's step runs in {} and the {} has no {} peak (peak_tflops of its GPU model)",
                self.precision, gpu.name, self.precision
            ))
        })?;
        let bw = gpu.memory_bandwidth.map(|b| b.bytes_per_sec() / 1e9).ok_or_else(|| {
            gpu_err(format!("the {} has no memory_bandwidth (of its GPU model)", gpu.name))
        })?;
        let (mut tokens, mut attention) = (1.0, 1.0);
        if micro_batch.is_some() || sequence.is_some() {
            let shape_err = |e: &str| (Blame::Shape, e.to_string());
            let (Some(b), Some(s)) = (self.micro_batch, self.sequence) else {
                return Err(shape_err(
                    "the profile does not know its micro-batch and sequence (give them to `collsim profile` with --micro-batch and --sequence)",
                ));
            };
            if !self.shapes {
                return Err(shape_err(
                    "the profile's trace recorded no shapes, so nothing in it is known to grow with the micro-batch or sequence (profile with record_shapes=True)",
                ));
            }
            let (b2, s2) = (micro_batch.unwrap_or(b), sequence.unwrap_or(s));
            // In floating point: products of two shapes up to 2^24 stay exact.
            let (b, s, b2, s2) = (b as f64, s as f64, b2 as f64, s2 as f64);
            tokens = b2 * s2 / (b * s);
            attention = tokens * s2 / s;
        }
        let c = Carry {
            flop: self.peak_tflops / peak,
            memory: self.memory_bandwidth_gbs / bw,
            tokens,
            attention,
            floor_us: self.kernel_floor_us,
            tp: None,
        };
        for (what, x) in [("peak", c.flop), ("memory bandwidth", c.memory)] {
            if !(x.is_finite() && x > 0.0) {
                return Err(gpu_err(format!(
                    "the {}'s {what} against the profile's gives a factor of {x}",
                    gpu.name
                )));
            }
        }
        Ok(c)
    }

    /// The step as a list of calls, carried by `c`, and its GPU time, µs.
    pub fn carry_with(&self, c: &Carry) -> (Vec<Call>, f64) {
        let mut busy = 0.0;
        let mut calls = Vec::with_capacity(self.step.len() + 4);
        // Under a tensor-parallel split, forward's all-reduces and then backward's run where
        // backward begins (forward's there, not at its start, where the host's later gaps
        // would hide them).
        let mut pending = c.tp.is_some();
        for e in &self.step {
            match e {
                Entry::Kernels { compute_us, class, scale, kernels, phase } => {
                    if let Some(tp) = &c.tp
                        && *phase != Phase::Forward
                        && std::mem::take(&mut pending)
                    {
                        calls.extend(tp.calls(true));
                        calls.extend(tp.calls(false));
                    }
                    let mut t = c.time(*compute_us, *class, *scale, *kernels);
                    if let Some(tp) = &c.tp
                        && matches!(class, Class::Gemm | Class::Attention | Class::Optimizer)
                    {
                        let fixed = (c.floor_us * *kernels as f64).min(t);
                        t = fixed + (t - fixed) / tp.degree as f64;
                    }
                    busy += t;
                    calls.push(Call::Compute {
                        compute_us: t,
                        name: Some(format!("{} {}", phase.name(), class.name())),
                    });
                }
                // Each rank reduces its 1/tp of the gradients over its data-parallel group,
                // the ranks tp apart (Megatron's order: tensor-parallel ranks adjacent).
                Entry::Call(Call::Nccl { nccl, slowdown, stream }) if c.tp.is_some() => {
                    let degree = c.tp.as_ref().map_or(1, |t| t.degree);
                    let nccl = nccl
                        .iter()
                        .map(|o| match o {
                            NcclOp::Collective { collective, bytes, dtype, name, group: None } => {
                                NcclOp::Collective {
                                    collective: collective.clone(),
                                    bytes: bytes.div_ceil(degree as u64),
                                    dtype: dtype.clone(),
                                    name: name.clone(),
                                    group: Some(super::calls::GroupShape {
                                        size: None,
                                        stride: degree,
                                    }),
                                }
                            }
                            o => o.clone(),
                        })
                        .collect();
                    calls.push(Call::Nccl { nccl, slowdown: *slowdown, stream: *stream });
                }
                Entry::Call(call) => calls.push(call.clone()),
            }
        }
        (calls, busy)
    }

    /// The collectives of the step, for a note on what stays as traced.
    pub fn collectives(&self) -> usize {
        self.step
            .iter()
            .filter_map(|e| match e {
                Entry::Call(Call::Nccl { nccl, .. }) => {
                    Some(nccl.iter().filter(|o| matches!(o, NcclOp::Collective { .. })).count())
                }
                _ => None,
            })
            .sum()
    }
}

/// A profile as a scenario names it, with the shape it asks for: carried to whichever GPU the
/// scenario's cluster has (a `--topology` flag may change it after the file is read).
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// The path as the scenario gives it.
    pub path: String,
    /// The profile.
    pub profile: ModelProfile,
    /// Samples per micro-batch, if not the traced.
    pub micro_batch: Option<u64>,
    /// Tokens per sample, if not the traced.
    pub sequence: Option<u64>,
    /// Tensor-parallel degree to carry the traced step to (1: as traced).
    pub tp: usize,
}

impl Named {
    /// The step's memory carried to its shape, where the profile has one that carries there.
    pub fn memory(&self) -> Option<CarriedMemory> {
        let p = &self.profile;
        let m = p.memory.as_ref()?;
        // Measured on one GPU holding the whole model: not what a tensor-parallel rank holds.
        if self.tp > 1 {
            return None;
        }
        // Attention without a fused kernel keeps its scores, micro-batch × sequence².
        let fused =
            p.step.iter().any(|e| matches!(e, Entry::Kernels { class: Class::Attention, .. }));
        let grows = match (p.micro_batch, p.sequence) {
            (Some(b), Some(s)) => {
                let (b2, s2) = (self.micro_batch.unwrap_or(b), self.sequence.unwrap_or(s));
                let tokens = (b2 * s2) as f64 / (b * s) as f64;
                if !fused && s2 > s { tokens * s2 as f64 / s as f64 } else { tokens }
            }
            _ if self.micro_batch.is_none() && self.sequence.is_none() => 1.0,
            _ => return None,
        };
        m.carried(grows, matches!(p.precision.as_str(), "bf16" | "fp16"))
    }

    /// The step on `gpu`: its name for the report and its calls.
    pub fn replay(&self, gpu: &GpuModel) -> Result<(String, Vec<Call>), (Blame, String)> {
        let p = &self.profile;
        let mut carry = p.carry_to(gpu, self.micro_batch, self.sequence)?;
        if self.tp > 1 {
            carry.tp = Some(self.tensor_parallel().map_err(|e| (Blame::Tp, e))?);
        }
        let (mut calls, busy_us) = p.carry_with(&carry);
        // Where the same step was timed without the profiler, the host's launches took at most
        // the traced span scaled by how much faster the whole step ran without it (the profiler
        // slows the host, and the GPU hardly): the carried step ends no sooner.
        let floor_ms = p.host_floor_ms();
        if let Some(f) = floor_ms.filter(|&f| busy_us / 1e3 < f) {
            calls.push(Call::Until { idle_until_us: f * 1e3 });
        }
        // A step carried past what a list of calls may hold (an entry over an hour) is refused,
        // blaming the shape where it changed.
        super::calls::check(&calls).map_err(|e| {
            let shaped = self.micro_batch.is_some() || self.sequence.is_some();
            let blame = if shaped { Blame::Shape } else { Blame::Gpu };
            (
                blame,
                format!(
                    "carried to the {}{}: {e}",
                    gpu.name,
                    if shaped { " at that shape" } else { "" }
                ),
            )
        })?;
        let shape = match (self.micro_batch.or(p.micro_batch), self.sequence.or(p.sequence)) {
            (Some(b), Some(s)) => format!(", {b} x {s} tokens"),
            _ => String::new(),
        };
        // The host's launches stay as traced; where the GPU's work now takes less time than
        // the traced host took to launch it, the host may bound the step, which the replay
        // (keeping only the trace's own late launches) does not show.
        let host = if let Some(f) = floor_ms.filter(|&f| busy_us / 1e3 < f) {
            format!(
                "; its GPU work, {:.1} ms, is shorter than the {f:.1} ms the host takes to launch it (the traced {:.1} ms x {:.3}, the step's time without the profiler over with it): the host bounds the step",
                busy_us / 1e3,
                p.host_span_ms,
                f / p.host_span_ms,
            )
        } else if floor_ms.is_none() && busy_us / 1e3 < p.host_span_ms {
            format!(
                "; warning: its GPU work, {:.1} ms, is shorter than the {:.1} ms over which the traced host launched it (under the profiler, which slows the host): the step may be bound by the host, and longer than this",
                busy_us / 1e3,
                p.host_span_ms
            )
        } else {
            String::new()
        };
        let tp = carry.tp.map_or(String::new(), |t| {
            format!(
                ", tensor parallel {}: GEMMs, attention and the optimizer / {}, {} all-reduces of {} each way",
                t.degree,
                t.degree,
                t.all_reduces,
                crate::units::Bytes::new(t.bytes)
            )
        });
        let name = format!(
            "profile {} ({} on the {}{shape}{tp}; math-bound time x{:.3}, memory-bound x{:.3}, per token x{:.3}{host})",
            self.path, p.source, gpu.name, carry.flop, carry.memory, carry.tokens,
        );
        Ok((name, calls))
    }

    /// The traced step split over `tp` ranks as Megatron-LM splits a transformer without
    /// sequence parallelism (Shoeybi et al. 2019, §3): every GEMM (the blocks' column- and
    /// row-parallel projections, the vocabulary-parallel head) and the attention (by heads)
    /// run 1/tp of their work; each block all-reduces its activations twice forward (after
    /// the attention's output projection and the MLP's) and twice backward (the input
    /// gradients of its QKV and first MLP projections), micro-batch × sequence × hidden
    /// elements in the step's 16-bit type (fp32 in an fp32 step), and so do the
    /// vocabulary-parallel embedding forward and the head's input gradient backward, with
    /// the vocabulary-parallel loss's three all-reduces of an fp32 value a token; each rank
    /// steps the optimizer over 1/tp of the parameters and all-reduces 1/tp of the gradients
    /// over its data-parallel group (the ranks tp apart).
    ///
    /// Left as traced, which errs slow: the memory-bound kernels (LayerNorm, dropout and
    /// residual adds are replicated across the tp ranks; the GELU, bias and softmax, which
    /// are split, are not told apart) and the host's launches. Taken whole, which errs fast:
    /// the GEMMs at 1/tp of their time (smaller GEMMs reach less of the peak), and the
    /// all-reduces run where backward begins, on a second stream the compute waits for,
    /// rather than between the layers (their sum is on the compute stream either way; before
    /// backward they delay the gradient buckets, never hasten them, but the host's gaps
    /// after them absorb what they can).
    ///
    /// Refused: a step that is not DDP's, convolutions, and a backward whose GEMMs take over
    /// 2.5 times forward's (a recomputed forward or a second micro-batch, whose all-reduces
    /// are not counted).
    fn tensor_parallel(&self) -> Result<TpSplit, String> {
        let p = &self.profile;
        let degree = self.tp;
        let layers = p.blocks.iter().find(|b| b.phase == Phase::Forward).map(|b| b.count);
        let Some(layers) = layers else {
            return Err("the profile found no repeated blocks (layers) in its forward to split (`collsim profile` lists them as [[blocks]])".into());
        };
        let Some(hidden) = p.hidden else {
            return Err("the profile does not know the model's hidden size (a trace recorded with record_shapes=True gives it)".into());
        };
        let (Some(b), Some(s)) = (self.micro_batch.or(p.micro_batch), self.sequence.or(p.sequence))
        else {
            return Err("the profile does not know its micro-batch and sequence (give them to `collsim profile` with --micro-batch and --sequence)".into());
        };
        // DDP's step: its gradients all-reduced over the whole world, nothing else.
        let ops: Vec<&NcclOp> = p
            .step
            .iter()
            .flat_map(|e| match e {
                Entry::Call(Call::Nccl { nccl, .. }) => nccl.iter().collect(),
                _ => Vec::new(),
            })
            .filter(|o| matches!(o, NcclOp::Collective { .. }))
            .collect();
        let ddp = !ops.is_empty()
            && ops.iter().all(|o| {
                matches!(o, NcclOp::Collective { collective, group: None, .. } if collective == "all_reduce")
            });
        if !ddp {
            return Err("the traced step is not DDP's (its gradients all-reduced over every rank, and no other collective): only a DDP step is split (FSDP's shards and a 3-D layout's groups are the trace's own)".into());
        }
        if p.step.iter().any(|e| matches!(e, Entry::Kernels { class: Class::Convolution, .. })) {
            return Err("the traced step runs convolutions, which tensor parallelism does not split (it splits a transformer's GEMMs)".into());
        }
        // Backward runs two GEMMs (input and weight gradients) for each of forward's: more
        // is a recomputed forward or another micro-batch, whose tensor-parallel all-reduces
        // the split does not count yet.
        let gemm = |phase: Phase| {
            p.summary
                .iter()
                .filter(|s| s.phase == phase && s.class == Class::Gemm)
                .map(|s| s.time_ms)
                .sum::<f64>()
        };
        if gemm(Phase::Backward) > 2.5 * gemm(Phase::Forward) {
            return Err(format!(
                "the traced backward's GEMMs take {:.1} times forward's (2 for input and weight gradients): a recomputed forward or another micro-batch, whose tensor-parallel all-reduces are not counted; trace one micro-batch without activation checkpointing",
                gemm(Phase::Backward) / gemm(Phase::Forward).max(1e-9)
            ));
        }
        // The all-reduces' type: the 16-bit activations, or fp32 in an fp32/tf32 step.
        let element = if matches!(p.precision.as_str(), "fp32" | "tf32") { 4 } else { 2 };
        let bytes = b
            .checked_mul(s)
            .and_then(|t| t.checked_mul(hidden))
            .and_then(|e| e.checked_mul(element))
            .filter(|&x| x <= 1 << 40)
            .ok_or("the activations to all-reduce come out over a TiB")?;
        Ok(TpSplit {
            degree,
            // Two a layer, and the vocabulary-parallel embedding's (forward) or head's input
            // gradient (backward).
            all_reduces: 2 * layers as usize + 1,
            bytes,
            dtype: if element == 2 { "bfloat16" } else { "float" }.to_string(),
            // Vocabulary-parallel cross entropy: the logits' maximum, the target's logit and
            // the sum of exponentials, one fp32 value a token each.
            loss_bytes: b * s * 4,
        })
    }
}

/// A traced step split over tensor-parallel ranks ([`Named::tensor_parallel`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TpSplit {
    /// Ranks a tensor-parallel group.
    pub degree: usize,
    /// All-reduces each way (forward, backward): two a block.
    pub all_reduces: usize,
    /// Bytes each.
    pub bytes: u64,
    /// Their element type, as nccl-tests names it.
    pub dtype: String,
    /// Bytes of each of the loss's three small all-reduces (forward).
    pub loss_bytes: u64,
}

impl TpSplit {
    /// One way's all-reduces (forward's with the loss's three), on the tensor-parallel group,
    /// and the compute's wait for them.
    fn calls(&self, forward: bool) -> [Call; 2] {
        let op = |bytes: u64, dtype: &str, name: &str| NcclOp::Collective {
            collective: "all_reduce".into(),
            bytes,
            dtype: dtype.to_string(),
            name: Some(name.into()),
            group: Some(super::calls::GroupShape { size: Some(self.degree), stride: 1 }),
        };
        let mut nccl =
            vec![op(self.bytes, &self.dtype, "tensor-parallel all-reduce"); self.all_reduces];
        if forward {
            nccl.extend(std::iter::repeat_n(
                op(self.loss_bytes, "float", "vocabulary-parallel loss all-reduce"),
                3,
            ));
        }
        [Call::Nccl { nccl, slowdown: None, stream: Some(1) }, Call::Drain { drain: true }]
    }
}

/// What a profile could not be carried past: the shape asked for, or the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// `micro_batch` or `sequence`.
    Shape,
    /// The profile against the target GPU.
    Gpu,
    /// `[workload.parallel] tp`.
    Tp,
}

/// How a profile's entries are carried: per class and scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Carry {
    /// Math-bound time's factor (the source's peak over the target's).
    pub flop: f64,
    /// Memory-bound time's factor (the source's bandwidth over the target's).
    pub memory: f64,
    /// `tokens` entries' factor.
    pub tokens: f64,
    /// `attention` entries' factor.
    pub attention: f64,
    /// A kernel's fixed cost, µs, which neither factor touches.
    pub floor_us: f64,
    /// The tensor-parallel split, if any.
    pub tp: Option<TpSplit>,
}

impl Carry {
    /// As traced.
    pub fn identity() -> Carry {
        Carry { flop: 1.0, memory: 1.0, tokens: 1.0, attention: 1.0, floor_us: 0.0, tp: None }
    }

    /// An entry's time, µs.
    pub fn time(&self, us: f64, class: Class, scale: Scale, kernels: u32) -> f64 {
        let hw = if class.flop_bound() {
            self.flop
        } else if class.memory_bound() {
            self.memory
        } else {
            1.0
        };
        let shape = match scale {
            Scale::Tokens => self.tokens,
            Scale::Attention => self.attention,
            Scale::Fixed => 1.0,
        };
        let fixed = (self.floor_us * kernels as f64).min(us);
        fixed + (us - fixed) * hw * shape
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_repeated_block_is_the_longest_run_of_one_period() {
        // An embedding (9), three layers of 4 kernels, a head (8, 9).
        let ids = [9, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 8, 9];
        assert_eq!(repeated_block(&ids, 3), Some((1, 4, 3)));
        // Two layers a period cover as much, less often: one layer it is.
        let ids = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3];
        assert_eq!(repeated_block(&ids, 3), Some((0, 3, 4)));
        // Nothing repeats: none.
        assert_eq!(repeated_block(&[1, 2, 3, 4, 5, 6], 3), None);
        assert_eq!(repeated_block(&[], 3), None);
    }

    #[test]
    fn the_profilers_host_cost_is_cut_from_the_gaps_and_never_added() {
        // GPT-2 small on one H200: traced 96.0 ms with 35.6 ms of host gaps, 60.6 ms without
        // the profiler: 0.2 ms of the gaps are the step's own.
        let k = profiler_host_scale(96.0, 35.6, 60.6).unwrap();
        assert!((k * 35.6 - 0.2).abs() < 1e-9, "{k}");
        // Slower without the profiler than with it: the gaps stay as traced.
        assert_eq!(profiler_host_scale(96.0, 35.6, 120.0), Some(1.0));
        // Shorter than the traced step's GPU time: no gap is the step's own.
        assert_eq!(profiler_host_scale(96.0, 35.6, 50.0), Some(0.0));
        // No gaps, nothing to cut.
        assert_eq!(profiler_host_scale(96.0, 0.0, 50.0), None);
    }

    #[test]
    fn measured_memory_carries_where_its_split_is_known_and_never_optimistically() {
        let peaks = Memory {
            source: "steps.csv".into(),
            micro_batch: None,
            sequence: None,
            params: None,
            max_allocated: 100,
            max_reserved: 125,
            start_allocated: None,
            forward_allocated: None,
            optimizer_max_allocated: None,
            step_ms: None,
        };
        assert_eq!(peaks.carried(1.0, false).map(|c| c.kept), Some(100.0));
        assert_eq!(peaks.carried(2.0, false), None);
        // 40 kept at the start, forward keeps 30, backward adds 30 more, the step peaks at 60.
        let split = Memory {
            start_allocated: Some(40),
            forward_allocated: Some(70),
            optimizer_max_allocated: Some(60),
            ..peaks
        };
        let c = |t: f64| split.carried(t, false).unwrap();
        assert_eq!((c(1.0).kept, c(1.0).activations, c(1.0).optimizer), (40.0, 60.0, 20.0));
        assert_eq!(c(2.0).activations, 120.0);
        // Fewer tokens without the parameter count: forward's share kept whole too.
        assert_eq!(c(0.5).activations, 60.0);
        assert_eq!(c(1.0).reserved_ratio, 1.25);
        // With it, under autocast: the 16-bit weights forward keeps (2 a parameter) stay.
        let counted = Memory { params: Some(5), ..split.clone() };
        let c = |t: f64| counted.carried(t, true).unwrap();
        assert_eq!(c(0.5).activations, 20.0 * 0.5 + 10.0 + 30.0);
        assert_eq!(c(2.0).activations, 20.0 * 2.0 + 10.0 + 60.0);
        // Figures that contradict each other are refused.
        let bad = Memory { forward_allocated: Some(30), ..split.clone() };
        assert!(
            bad.check()
                .unwrap_err()
                .contains("start_allocated (40) is more than forward_allocated")
        );
    }

    use super::*;

    /// A step of four kernels: the embedding's gather and a GEMM on 2 x 8 tokens forward, an
    /// elementwise op on a weight in the backward, the optimizer's kernel.
    fn trace() -> String {
        let op = |name: &str, ts: f64, id: u64, dims: &str, types: &str| {
            format!(
                r#"{{"ph": "X", "cat": "cpu_op", "name": "{name}", "ts": {ts}, "dur": 1, "args": {{"External id": {id}, "Input Dims": {dims}, "Input type": {types}}}}}"#
            )
        };
        let kernel = |name: &str, ts: f64, dur: f64, id: u64| {
            format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": {ts}, "dur": {dur}, "args": {{"External id": {id}}}}}"#
            )
        };
        let events = [
            op("aten::embedding", 0.0, 1, "[[100, 16], [2, 8]]", r#"["float", "long int"]"#),
            kernel("void at::native::vectorized_gather_kernel", 10.0, 5.0, 1),
            op("aten::mm", 2.0, 2, "[[16, 16], [16, 32]]", r#"["c10::BFloat16", "c10::BFloat16"]"#),
            kernel("nvjet_sm90_tst_128x256", 15.0, 20.0, 2),
            r#"{"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MulBackward0", "ts": 5, "dur": 1, "args": {}}"#.to_string(),
            op("aten::mul", 6.0, 3, "[[32, 32], []]", r#"["float", "Scalar"]"#),
            kernel("void at::native::vectorized_elementwise_kernel", 35.0, 2.0, 3),
            r#"{"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "ts": 8, "dur": 5, "args": {}}"#.to_string(),
            op("aten::_fused_adamw_", 9.0, 4, "[[], []]", r#"["", ""]"#),
            kernel("void at::native::multi_tensor_apply_kernel", 40.0, 4.0, 4),
        ];
        format!(
            r#"{{"deviceProperties": [{{"name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": 150109880320}}], "traceEvents": [{}]}}"#,
            events.join(", ")
        )
    }

    fn library() -> Vec<GpuModel> {
        crate::config::gpu_library().unwrap()
    }

    #[test]
    fn kernels_are_tagged_by_class_scale_and_phase() {
        let p = from_trace("t.json", &trace(), &library(), &Options::default()).unwrap();
        assert_eq!(p.gpu, "H200-SXM-141GB");
        assert_eq!((p.micro_batch, p.sequence, p.shapes), (Some(2), Some(8), true));
        assert_eq!(p.precision, "bf16");
        let tags: Vec<_> = p
            .step
            .iter()
            .filter_map(|e| match e {
                Entry::Kernels { class, scale, phase, compute_us, kernels } => {
                    Some((*class, *scale, *phase, *compute_us, *kernels))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            tags,
            [
                (Class::Memory, Scale::Tokens, Phase::Forward, 5.0, 1),
                (Class::Gemm, Scale::Tokens, Phase::Forward, 20.0, 1),
                (Class::Memory, Scale::Fixed, Phase::Backward, 2.0, 1),
                (Class::Host, Scale::Fixed, Phase::Backward, 3.0, 0),
                (Class::Optimizer, Scale::Fixed, Phase::Optimizer, 4.0, 1),
            ]
        );
        // The GEMM's work from its shapes: 2 x 16 x 16 x 32 FLOP in 20 µs.
        let gemm = p.summary.iter().find(|s| s.class == Class::Gemm).unwrap();
        assert_eq!(gemm.tflop, Some(round3(2.0 * 16.0 * 16.0 * 32.0 / 1e12)));
        assert_eq!(p.kernel_floor_us, 2.0);
    }

    #[test]
    fn a_trace_of_two_steps_or_half_a_shape_is_refused() {
        let step = |n: u32, ts: f64| {
            format!(
                r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "ts": {ts}, "dur": 50, "args": {{}}}}"#
            )
        };
        let two = trace().replace(
            "\"traceEvents\": [",
            &format!("\"traceEvents\": [{}, {}, ", step(1, 0.0), step(2, 50.0)),
        );
        let e = from_trace("t.json", &two, &library(), &Options::default()).unwrap_err();
        assert!(e.contains("holds 2 profiler steps (ProfilerStep#1, ProfilerStep#2)"), "{e}");
        let one =
            trace().replace("\"traceEvents\": [", &format!("\"traceEvents\": [{}, ", step(1, 0.0)));
        assert!(from_trace("t.json", &one, &library(), &Options::default()).is_ok());
        // Without an embedding to read the other from, one of micro-batch and sequence is not
        // enough.
        let bare = trace().replace("aten::embedding", "aten::gather");
        let opts = Options { micro_batch: Some(2), ..Options::default() };
        let e = from_trace("t.json", &bare, &library(), &opts).unwrap_err();
        assert!(e.contains("give both --micro-batch and --sequence"), "{e}");
    }

    #[test]
    fn a_weight_shaped_fp32_tensor_does_not_grow_with_the_tokens_its_shape_equals() {
        // 2 x 8 = 16 tokens; the GEMM's weight is [16, 32]. An fp32 tensor of that shape (a
        // gradient in its bucket) is the weight's; a bf16 one is an activation.
        let weights: BTreeSet<Vec<u64>> = [vec![16, 32], vec![32, 16]].into();
        let op = |ty| Op { name: "aten::mul", ts: 0.0, dims: vec![vec![32, 16]], types: vec![ty] };
        let half = Some("c10::BFloat16");
        assert!(!carries_tokens(&op("float"), (2, 8), &weights, half));
        assert!(carries_tokens(&op("c10::BFloat16"), (2, 8), &weights, half));
        assert!(carries_tokens(&op("float"), (2, 8), &BTreeSet::new(), half));
        // Micro-batch and sequence side by side always carry them.
        let act =
            Op { name: "aten::add", ts: 0.0, dims: vec![vec![2, 8, 32]], types: vec!["float"] };
        assert!(carries_tokens(&act, (2, 8), &weights, half));
    }

    #[test]
    fn a_profile_reads_back_as_written_and_refuses_what_it_does_not_know() {
        let p = from_trace("t.json", &trace(), &library(), &Options::default()).unwrap();
        let text = p.to_toml().unwrap();
        assert_eq!(ModelProfile::read("p.toml", &text).unwrap(), p);
        let e =
            ModelProfile::read("p.toml", &text.replace("shapes = true", "shapes = true\nfoo = 1"))
                .unwrap_err();
        assert!(e.starts_with("p.toml:") && e.contains("unknown field `foo`"), "{e}");
        let e = ModelProfile::read(
            "p.toml",
            &text.replace("collsim_profile = 1", "collsim_profile = 9"),
        )
        .unwrap_err();
        assert!(e.contains("collsim_profile: version 9"), "{e}");
        let e =
            ModelProfile::read("p.toml", &text.replace("compute_us = 20.0", "compute_us = -1.0"))
                .unwrap_err();
        assert!(e.contains("step[1].compute_us: must be 0 to"), "{e}");
        let e = ModelProfile::read("p.toml", &text.replace("kernels = 1,", "kernels = -1,"))
            .unwrap_err();
        assert!(e.contains("step[0]: invalid value: integer `-1`, expected u32"), "{e}");
        let e = ModelProfile::read(
            "p.toml",
            &text.replace("peak_tflops = 989.4", "peak_tflops = 1e308"),
        )
        .unwrap_err();
        assert!(e.contains("peak_tflops: must be a positive number up to"), "{e}");
        let e = ModelProfile::read(
            "p.toml",
            &text.replace("micro_batch = 2", "micro_batch = 4294967296"),
        )
        .unwrap_err();
        assert!(e.contains("micro_batch: must be 1 to 16777216"), "{e}");
    }

    #[test]
    fn a_carried_entry_keeps_its_kernels_fixed_cost_and_scales_the_rest() {
        let c =
            Carry { flop: 3.0, memory: 2.0, tokens: 0.5, attention: 0.25, floor_us: 1.0, tp: None };
        // 4 kernels, 10 µs: 4 µs fixed, 6 µs x 3 (math) x 0.5 (tokens).
        assert_eq!(c.time(10.0, Class::Gemm, Scale::Tokens, 4), 4.0 + 9.0);
        assert_eq!(c.time(10.0, Class::Attention, Scale::Attention, 4), 4.0 + 6.0 * 3.0 * 0.25);
        assert_eq!(c.time(10.0, Class::Optimizer, Scale::Fixed, 4), 4.0 + 12.0);
        // Host time and kernels shorter than their fixed cost stay as they were.
        assert_eq!(c.time(10.0, Class::Host, Scale::Fixed, 0), 10.0);
        assert_eq!(c.time(3.0, Class::Memory, Scale::Tokens, 4), 3.0);
        // To the same GPU and shape, every entry is as traced.
        let p = from_trace("t.json", &trace(), &library(), &Options::default()).unwrap();
        let h200 = library().into_iter().find(|m| m.name == "H200-SXM-141GB").unwrap();
        let same = p.carry_to(&h200, None, None).unwrap();
        assert_eq!((same.flop, same.memory, same.tokens), (1.0, 1.0, 1.0));
        let four = p.carry_to(&h200, Some(4), None).unwrap();
        assert_eq!((four.tokens, four.attention), (2.0, 2.0));
        let long = p.carry_to(&h200, None, Some(16)).unwrap();
        assert_eq!((long.tokens, long.attention), (2.0, 4.0));
        let a100 = library().into_iter().find(|m| m.name == "A100-SXM4-80GB").unwrap();
        let c = p.carry_to(&a100, None, None).unwrap();
        assert!(
            (c.flop - 989.4 / 312.0).abs() < 1e-12 && (c.memory - 4800.0 / 2039.0).abs() < 1e-12
        );
    }

    #[test]
    fn what_a_profile_cannot_carry_is_refused() {
        let t = trace().replace("\"Input Dims\"", "\"Dims\"");
        let p = from_trace("t.json", &t, &library(), &Options::default()).unwrap();
        assert!(!p.shapes && p.micro_batch.is_none());
        let h200 = library().into_iter().find(|m| m.name == "H200-SXM-141GB").unwrap();
        assert!(p.carry_to(&h200, Some(4), None).unwrap_err().1.contains("--micro-batch"));
        let opts = Options { micro_batch: Some(2), sequence: Some(8), ..Options::default() };
        let p = from_trace("t.json", &t, &library(), &opts).unwrap();
        assert!(p.carry_to(&h200, Some(4), None).unwrap_err().1.contains("record_shapes=True"));
        let mut rtx = h200.clone();
        rtx.peak_tflops.remove("bf16");
        assert!(p.carry_to(&rtx, None, None).unwrap_err().1.contains("no bf16 peak"));
        let e = from_trace(
            "t.json",
            &trace().replace("H200", "H900").replace("132", "7"),
            &library(),
            &Options::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("\"NVIDIA H900\", which matches no GPU model") && e.contains("--gpu"),
            "{e}"
        );
    }
}
