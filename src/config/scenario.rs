//! Scenario files: which cluster, which workload, which NCCL environment.

use std::path::Path;

use toml::Spanned;

use super::raw::{RawScenario, RawWorkload};
use super::{ConfigError, PlacementSpec, Source, TopologySource, resolve_topology};
use crate::collective::Collective;
use crate::hw::NodeSpec;
use crate::units::{Bytes, Secs};
pub use crate::workload::Workload;
use crate::workload::ddp::DdpSpec;
use crate::workload::jobs::{BackgroundSpec, JobSpec};
use crate::workload::sweep::SweepSpec;
use crate::workload::{DataType, ReduceOp};

/// A validated scenario.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scenario {
    /// Where the topology came from.
    pub topology: TopologySource,
    /// The node template.
    pub node: NodeSpec,
    /// Nodes.
    pub nodes: usize,
    /// GPUs used per node (the first ones).
    pub gpus_per_node: usize,
    /// GPUs each process drives (`cluster.gpus_per_process`, nccl-tests `-g`): 1, as torchrun
    /// and mpirun run NCCL, unless given.
    pub gpus_per_process: usize,
    /// What runs on it.
    #[serde(flatten)]
    pub workload: Workload,
    /// NCCL_* variables as given.
    pub nccl: Vec<(String, String)>,
    /// Where each of [`Scenario::nccl`] was given in the scenario file (`file:line:col`), for
    /// errors found once the cluster is built; a variable from the command line has none.
    #[serde(skip)]
    pub nccl_at: std::collections::BTreeMap<String, String>,
    /// Where the nodes sit.
    pub placement: PlacementSpec,
    /// Jobs side by side on the cluster (`[[job]]`), each on its own nodes; empty when the
    /// scenario's one `[workload]` runs on the whole cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobSpec>,
    /// Background traffic on the cluster's network (`[[background]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub background: Vec<BackgroundSpec>,
}

impl Scenario {
    /// Carries a model profile's step to the GPU the scenario's cluster has now (after a flag
    /// or a sweep changed its topology), and rederives a compute rate set for another GPU.
    pub fn recarry(&mut self) -> Result<(), String> {
        if let Workload::Ddp(spec) = &mut self.workload {
            crate::workload::compute::rederive(spec, self.node.gpu.model.sm);
        }
        if let Workload::Ddp(spec) = &mut self.workload
            && let Some(p) = &spec.profile
        {
            let (name, calls) = p
                .replay(&self.node.gpu.model)
                .map_err(|(_, e)| format!("workload.profile {}: {e}", p.path))?;
            spec.model.name = name;
            spec.calls = Some(calls);
        }
        Ok(())
    }

    /// The sweep, if that is the workload.
    pub fn sweep(&self) -> Option<&SweepSpec> {
        match &self.workload {
            Workload::Sweep(s) => Some(s),
            _ => None,
        }
    }

    /// The sweep, to change, if that is the workload.
    pub fn sweep_mut(&mut self) -> Option<&mut SweepSpec> {
        match &mut self.workload {
            Workload::Sweep(s) => Some(s),
            _ => None,
        }
    }

    /// The DDP step, if that is the workload.
    pub fn ddp(&self) -> Option<&DdpSpec> {
        match &self.workload {
            Workload::Ddp(d) => Some(d),
            _ => None,
        }
    }
}

/// The most nodes a cluster may have (of one GPU each: [`MAX_RANKS`] bounds the GPUs).
pub const MAX_NODES: usize = 1 << 16;

/// The most GPUs (ranks) a simulated cluster may have: 65,536, 8,192 eight-GPU nodes. Measured
/// on a 2-core machine (issue #45): a 1 GiB all-reduce there takes 1.1 s of CPU and 0.4 GB,
/// `explain` 4.8 s and 0.5 GB, 910 GB200 NVL72 racks 6.1 s and 0.8 GB; 65,536 DGX-H100 nodes
/// (524,288 GPUs) took 16 s and 2.9 GB, past the 10 s and 2 GB a run at the limit must keep
/// to. Memory and time grow with the ranks (each rank's channels and tree edges).
pub const MAX_RANKS: usize = 1 << 16;

/// Most samples per GPU per micro-step.
pub const MAX_MICRO_BATCH: u64 = 1 << 24;

/// The most parameters a model (or one of its tensors) may hold: ten trillion, several times
/// the largest trained; a shape past it would only exhaust memory.
pub const MAX_TENSOR_PARAMS: u64 = 10_000_000_000_000;

/// Most micro-steps of gradient accumulation.
pub const MAX_GRAD_ACCUMULATION: u64 = 1 << 16;

/// Most micro-steps of a sharded step (FSDP, ZeRO): each is simulated in turn, with its own
/// all-gathers and reductions.
pub const MAX_SHARDED_ACCUMULATION: u64 = 4096;

/// A `bucket_cap_mb` value, checked.
pub(crate) fn bucket_cap_mb(mb: f64) -> Result<f64, String> {
    if mb.is_finite() && mb > 0.0 {
        Ok(mb)
    } else {
        Err(format!("must be a positive number of MiB (got {mb})"))
    }
}

/// `bucket_cap_mb` in bytes, as PyTorch takes it: `int(bucket_cap_mb * 1024 * 1024)`.
pub fn bucket_cap_bytes(mb: f64) -> u64 {
    (mb * 1048576.0) as u64
}

/// A whole number from 1 to `max`.
pub(crate) fn positive(
    src: &Source<'_>,
    field: &str,
    v: &Spanned<i64>,
    max: i64,
) -> Result<usize, ConfigError> {
    src.check(field, v, |&n| {
        if n < 1 {
            Err(format!("must be at least 1 (got {n})"))
        } else if n > max {
            Err(format!("must be at most {max} (got {n})"))
        } else {
            Ok(n as usize)
        }
    })
}

fn missing(src: &Source<'_>, field: &str, why: &str) -> ConfigError {
    src.error(format!("workload.{field}: missing ({why})"))
}

/// The nccl-tests-like sweep of `[workload]`.
/// Checks `workload` (read from `w`) against the ranks it runs on, `nodes` of `gpus_per_node`:
/// a 3-D layout must fit them and the model, and a sharded step needs two ranks or more
/// (PyTorch switches one rank to NO_SHARD). Errors name the key's line.
pub(super) fn check_ranks(
    src: &Source<'_>,
    w: &RawWorkload,
    workload: &Workload,
    nodes: usize,
    gpus_per_node: usize,
) -> Result<(), ConfigError> {
    let Workload::Ddp(d) = workload else { return Ok(()) };
    let world = nodes * gpus_per_node;
    if let (Some(p), Some(layout)) = (&w.parallel, &d.parallel) {
        let fits = layout
            .check(&d.model, world, d.grad_accumulation)
            .and_then(|()| layout.check_placement(world, gpus_per_node));
        if let Err(e) = fits {
            // The key's own line where the file gives it, else the table's.
            let raw = p.get_ref();
            let given = match e.key {
                "tp" => raw.tp.as_ref(),
                "pp" => raw.pp.as_ref(),
                "ep" => raw.ep.as_ref(),
                "cp" => raw.cp.as_ref(),
                "tp_comm_overlap" => None,
                "virtual_stages" => raw.virtual_stages.as_ref(),
                _ => w.grad_accumulation.as_ref(),
            };
            let at = given.map_or(p.span().start, |v| v.span().start);
            return Err(src.error_at(at, format!("{}: {e}", e.field())));
        }
    }
    // ZeRO 1/2 gathers the updated parameters in allgather_bucket_size pieces: a piece far
    // smaller than the model is more calls than a step can hold.
    if let (Some(z), Some(raw)) =
        (d.sharding.as_ref().and_then(|s| s.zero.as_ref()), w.zero.as_ref().map(|z| z.get_ref()))
        && z.stage < 3
        && let Some(v) = &raw.allgather_bucket_size
    {
        let calls = d.model.params().div_ceil(z.allgather_bucket.max(1));
        if calls > MAX_GATHERS {
            return Err(src.error_at(
                v.span().start,
                format!(
                    "workload.zero.allgather_bucket_size: {} elements split the model's {} parameters into {calls} all-gathers a step; collsim runs at most {MAX_GATHERS} (give at least {})",
                    z.allgather_bucket,
                    d.model.params(),
                    d.model.params().div_ceil(MAX_GATHERS)
                ),
            ));
        }
    }
    if let (Err(e), Some(v)) = (d.skew.check_ranks(world), &w.rank_speeds) {
        return Err(src.error_at(v.span().start, e));
    }
    // A replayed step's groups must tile these ranks.
    if let (Some(calls), Some(path)) = (&d.calls, &w.calls) {
        crate::workload::calls::groups(calls, world)
            .map_err(|e| src.error_at(path.span().start, format!("workload.calls: {e}")))?;
    }
    if let (Some(k), true) = (&w.kind, d.sharding.is_some() && world < 2) {
        return Err(src.error_at(
            k.span().start,
            format!(
                "workload.kind: {:?} on one rank: PyTorch switches to NO_SHARD there, with nothing to gather or reduce; simulate one GPU as kind = \"ddp\", or give two ranks or more",
                k.get_ref()
            ),
        ));
    }
    Ok(())
}

fn sweep_workload(src: &Source<'_>, w: &RawWorkload) -> Result<SweepSpec, ConfigError> {
    let why = "a collective sweep needs collective, min_bytes and max_bytes; a training step \
               needs kind = \"ddp\"";
    let c = w.collective.as_ref().ok_or_else(|| missing(src, "collective", why))?;
    // A barrier is NCCL's all-reduce of one float (ProcessGroupNCCL::barrier): one size.
    let mut one = SweepSpec::one(Collective::AllReduce, 1, DataType::Float);
    src.check("workload.collective", c, |c| {
        if one.set_collective(c) {
            Ok(())
        } else {
            Err(super::unknown_name("collective", c, &SweepSpec::names()))
        }
    })?;
    if one.barrier {
        return Ok(SweepSpec { backend: backend(src, w, None)?, ..one });
    }
    let collective = one.collective;
    let min = w.min_bytes.as_ref().ok_or_else(|| missing(src, "min_bytes", why))?;
    let max = w.max_bytes.as_ref().ok_or_else(|| missing(src, "max_bytes", why))?;
    let min_bytes = src.check("workload.min_bytes", min, |q| q.parse_with(Bytes::parse))?;
    let max_bytes = src.check("workload.max_bytes", max, |q| q.parse_with(Bytes::parse))?;
    let factor = match &w.factor {
        Some(f) => positive(src, "workload.factor", f, 1 << 20)? as u64,
        None => 2,
    };
    let dtype = match &w.dtype {
        Some(d) => src.check("workload.dtype", d, |d| {
            DataType::parse(d).ok_or_else(|| super::unknown_name("data type", d, &DataType::NAMES))
        })?,
        None => DataType::Float,
    };
    let op = match &w.op {
        Some(o) => src.check("workload.op", o, |o| {
            ReduceOp::parse(o).ok_or_else(|| super::unknown_name("reduction", o, &ReduceOp::NAMES))
        })?,
        None => ReduceOp::Sum,
    };
    let backend = backend(src, w, None)?;
    let sweep =
        SweepSpec { collective, min_bytes, max_bytes, factor, dtype, op, backend, barrier: false };
    if let Err((field, msg)) = sweep.check() {
        let at = if field.ends_with("factor") {
            w.factor.as_ref().map_or(0, |f| f.span().start)
        } else if field.ends_with("max_bytes") {
            max.span().start
        } else {
            min.span().start
        };
        return Err(src.error_at(at, format!("{field}: {msg}")));
    }
    Ok(sweep)
}

/// The slowest rate a GPU is given as a fraction of a nominal one (`efficiency` and `mfu` of the
/// peak, `straggler_speed` and `rank_speeds` of the fastest rank): 1 %. Throttled GPUs run at
/// about half speed and a degraded link slows a rank a few times; a hundredfold is a GPU that
/// has failed, and far below it the step's time leaves what collsim can report.
pub const MIN_RATE_FRACTION: f64 = 0.01;

/// The range of `tflops`, TFLOP/s: from 0.1 (below any CUDA GPU since 2010) to 100,000 (ten
/// times the densest FP4 peak listed, B200's ~10,000).
pub const MIN_TFLOPS: f64 = 0.1;
/// See [`MIN_TFLOPS`].
pub const MAX_TFLOPS: f64 = 1e5;

/// A DDP training step (`kind = "ddp"`), or an FSDP one (`kind = "fsdp"`, `fsdp`).
fn ddp_workload(
    src: &Source<'_>,
    w: &RawWorkload,
    node: &NodeSpec,
    kind: &str,
) -> Result<DdpSpec, ConfigError> {
    use crate::workload::ddp::{ComputeRate, DdpSpec as Spec};
    use crate::workload::memory::{Optimizer, OptimizerImpl};
    use crate::workload::models;
    let grad_dtype = match &w.grad_dtype {
        Some(d) => src.check("workload.grad_dtype", d, |d| match DataType::parse(d) {
            Some(t @ (DataType::Float | DataType::Half | DataType::Bfloat16)) => Ok(t),
            _ => Err(format!("{d:?}: gradients are float, half or bfloat16")),
        })?,
        None => DataType::Float,
    };
    let seq = match &w.sequence {
        Some(s) => Some(positive(src, "workload.sequence", s, 1 << 24)? as u64),
        None => None,
    };
    // The tensor-parallel degree pads a Megatron vocabulary (checked with the layout below).
    let tp_hint = w
        .parallel
        .as_ref()
        .and_then(|p| p.get_ref().tp.as_ref())
        .map_or(1, |t| (*t.get_ref()).clamp(1, 1 << 16) as u64);
    let (model, written) = workload_model(src, w, seq, grad_dtype, tp_hint)?;
    let micro_batch = match &w.micro_batch {
        Some(b) => positive(src, "workload.micro_batch", b, MAX_MICRO_BATCH as i64)? as u64,
        None => return Err(missing(src, "micro_batch", "samples per GPU per step")),
    };
    let most =
        if matches!(kind, "ddp" | "dp") { MAX_GRAD_ACCUMULATION } else { MAX_SHARDED_ACCUMULATION };
    let grad_accumulation = match &w.grad_accumulation {
        Some(k) => positive(src, "workload.grad_accumulation", k, most as i64)? as u64,
        None => 1,
    };
    if let (Some(f), false) = (&w.fsdp, kind == "fsdp") {
        let at = f.span().start;
        return Err(src.error_at(
            at,
            format!("workload.fsdp: only for kind = \"fsdp\" (this is kind = \"{kind}\")"),
        ));
    }
    let fraction = |field: &str, v: &Spanned<f64>, lo_open: bool| {
        src.check(field, v, |&x| {
            if x.is_finite() && x <= 1.0 && (x > 0.0 || (!lo_open && x == 0.0)) {
                Ok(x)
            } else {
                Err(format!(
                    "must be a fraction in {}0, 1] (got {x})",
                    if lo_open { "(" } else { "[" }
                ))
            }
        })
    };
    let (rate, compute_default) = compute_rate(src, w, node)?;
    let input = input_rate(src, w)?;
    let optional = |field: &str, v: &Option<Spanned<f64>>, lo_open: bool| {
        v.as_ref().map(|v| fraction(field, v, lo_open)).transpose()
    };
    let compute_slowdown = optional("workload.compute_slowdown", &w.compute_slowdown, false)?;
    let memory_headroom = match &w.memory_headroom {
        Some(v) => headroom(src, v)?,
        None => crate::workload::memory::DEFAULT_HEADROOM,
    };
    let rank_speeds = match &w.rank_speeds {
        None => Vec::new(),
        Some(v) => src.check("workload.rank_speeds", v, |speeds| {
            if w.straggler_speed.is_some() {
                return Err("give straggler_speed (one slow rank) or rank_speeds (each listed rank's), not both".into());
            }
            match speeds.iter().find(|&&x| !(x.is_finite() && (MIN_RATE_FRACTION..=1.0).contains(&x))) {
                Some(x) => Err(format!("each speed is relative to the nominal rate (the fastest rank's), {MIN_RATE_FRACTION} to 1 (got {x}); below it a GPU has failed rather than slowed")),
                None => Ok(speeds.clone()),
            }
        })?,
    };
    let skew = crate::workload::skew::Skew {
        rank_speeds,
        cv: optional("workload.rank_skew_cv", &w.rank_skew_cv, false)?
            .unwrap_or(crate::workload::skew::DEFAULT_CV),
        host_cv: optional("workload.rank_skew_host_cv", &w.rank_skew_host_cv, false)?
            .unwrap_or(crate::workload::skew::DEFAULT_HOST_CV),
        straggler_speed: w
            .straggler_speed
            .as_ref()
            .map(|v| rate_fraction(src, "workload.straggler_speed", v))
            .transpose()?
            .unwrap_or(1.0),
    };
    let optimizer = match &w.optimizer {
        Some(o) => src.check("workload.optimizer", o, |o| {
            Optimizer::parse(o)
                .ok_or_else(|| format!("unknown optimizer {o:?} ({})", Optimizer::NAMES))
        })?,
        None => Optimizer::Adam,
    };
    let optimizer_impl = match &w.optimizer_impl {
        Some(o) => src.check("workload.optimizer_impl", o, |o| {
            OptimizerImpl::parse(o)
                .ok_or_else(|| format!("unknown optimizer_impl {o:?} ({})", OptimizerImpl::NAMES))
        })?,
        // Megatron steps its optimizers as Apex's fused kernels (megatron/optimizer/__init__.py
        // imports FusedAdam as Adam and FusedSGD as SGD): one pass, not PyTorch's foreach.
        None if w.parallel.is_some() => OptimizerImpl::Fused,
        None => OptimizerImpl::Foreach,
    };
    // Tokens per sample: the transformer presets' sequence (their usual one if not given).
    let sequence = seq.or_else(|| {
        w.model.as_ref().and_then(|m| m.get_ref().preset().and_then(models::default_sequence))
    });
    let none = super::raw::RawDdp::default();
    let d = w.ddp.as_ref().map_or(&none, Spanned::get_ref);
    let bucket_cap = match &d.bucket_cap_mb {
        Some(c) => Some(src.check("workload.ddp.bucket_cap_mb", c, |&mb| {
            bucket_cap_mb(mb).map(bucket_cap_bytes)
        })?),
        None => None,
    };
    let hook = comm_hook(src, d)?;
    let precision = rate.precision().map(str::to_string);
    let checkpointing = checkpointing(src, w, &model)?;
    let mut parallel = parallel_layout(src, w, kind)?;
    // Under a 3-D layout the layout recomputes (Megatron's --recompute-granularity full).
    let checkpointing = match (&mut parallel, checkpointing) {
        (Some(l), Some(c)) => {
            if let (Some(r), Some(a)) = (
                w.parallel.as_ref().and_then(|p| p.get_ref().recompute.as_ref()),
                &w.activation_checkpointing,
            ) {
                let both = [r.get_ref().as_str(), a.get_ref().as_str()];
                if both[0] != both[1] {
                    return Err(src.error_at(
                        a.span().start,
                        format!(
                            "workload.activation_checkpointing: {:?}, where workload.parallel.recompute says {:?}; give one",
                            both[1], both[0]
                        ),
                    ));
                }
            }
            match c {
                crate::workload::ddp::Checkpointing::Full { every: 1 } => l.recompute = true,
                crate::workload::ddp::Checkpointing::Full { .. } => {
                    let at = w.checkpoint_every.as_ref().map_or(0, |v| v.span().start);
                    return Err(src.error_at(
                        at,
                        "workload.checkpoint_every: a 3-D layout recomputes every block (Megatron's uniform method, one layer a group); one block in several is not modelled there yet",
                    ));
                }
                _ => {}
            }
            crate::workload::ddp::Checkpointing::None
        }
        (_, c) => c.unwrap_or_default(),
    };
    if kind == "dp" {
        refuse_under_dp(src, w)?;
    } else if let Some(d) = &w.dp {
        return Err(src.error_at(
            d.span().start,
            format!("workload.dp: only for kind = \"dp\" (this is kind = \"{kind}\")"),
        ));
    }
    let refused = (kind != "ddp" || parallel.is_some()).then_some(
        "collsim models Gloo under DistributedDataParallel (kind = \"ddp\" without [workload.parallel]) and in collective sweeps; FSDP, ZeRO and 3-D layouts run on NCCL here",
    );
    let backend = backend(src, w, refused)?;
    let mut spec = Spec {
        backend,
        model,
        micro_batch,
        grad_accumulation,
        rate,
        bucket_cap,
        gradient_as_bucket_view: d.gradient_as_bucket_view.unwrap_or(false),
        static_graph: d.static_graph.unwrap_or(false),
        find_unused_parameters: d.find_unused_parameters.unwrap_or(false),
        broadcast_buffers: d.broadcast_buffers.unwrap_or(true),
        hook,
        compute_slowdown,
        optimizer,
        optimizer_impl,
        skew,
        sequence,
        input,
        sharding: match kind {
            "fsdp" => Some(fsdp_sharding(src, w, grad_dtype)?),
            "zero" => Some(zero_sharding(src, w, precision.as_deref(), grad_dtype)?),
            _ => None,
        },
        parallel,
        calls: None,
        profile: None,
        checkpointing,
        written: written.filter(|w| w.vocab_multiple > 1),
        data_parallel: None,
        memory_headroom,
        launch: w
            .launch_us
            .as_ref()
            .map(|v| micros(src, "workload.launch_us", v, "a host time per kernel"))
            .transpose()?
            .or(compute_default.map(|d| d.launch())),
        compute_default,
        gemm_fixed: match (&w.gemm_fixed_us, &w.mfu) {
            (Some(_), Some(m)) => {
                return Err(src.error_at(
                    m.span().start,
                    "workload.mfu: with gemm_fixed_us the GEMM rate would be solved to keep this utilisation, making the GEMMs faster instead of the step slower; give efficiency or tflops",
                ));
            }
            (Some(v), None) => {
                Some(micros(src, "workload.gemm_fixed_us", v, "a GPU time per GEMM")?)
            }
            (None, _) => compute_default.map(|d| d.gemm_fixed()),
        },
    };
    if kind == "dp" {
        spec.data_parallel = Some(data_parallel(src, w, &spec)?);
    }
    // An mfu the memory-bound work leaves no room for is refused here, where its line is known
    // (the step solves the GEMM rate again, with the same inputs).
    if let (ComputeRate::Mfu { precision, mfu }, Some(m), Some(bw)) =
        (&spec.rate, &w.mfu, node.gpu.model.memory_bandwidth)
    {
        let peak = node.gpu.model.peak_tflops.get(precision).copied().unwrap_or(0.0) * 1e12;
        let gpu = crate::workload::ddp::GpuFacts {
            flops: 0.0,
            memory_bandwidth: bw.bytes_per_sec(),
            multiprocessors: None,
            launch: Secs::new(spec.launch.unwrap_or(crate::workload::KERNEL_LAUNCH_SECS)),
            gemm_fixed: Secs::new(spec.gemm_fixed.unwrap_or(0.0)),
            ranks_per_node: 1,
            sixteen_bit_flops: None,
        };
        let solved = crate::workload::ddp::rate_for_mfu(&spec, &gpu, peak * mfu, peak);
        src.check("workload.mfu", m, |_| solved.map(|_| ()))?;
    }
    Ok(spec)
}

/// `workload.backend`: NCCL by default, or Gloo unless `gloo_refused` says why not.
fn backend(
    src: &Source<'_>,
    w: &RawWorkload,
    gloo_refused: Option<&str>,
) -> Result<crate::workload::ddp::Backend, ConfigError> {
    use crate::workload::ddp::Backend;
    let Some(b) = &w.backend else { return Ok(Backend::Nccl) };
    src.check("workload.backend", b, |b| match (b.as_str(), gloo_refused) {
        ("nccl", _) => Ok(Backend::Nccl),
        ("gloo", None) => Ok(Backend::Gloo),
        ("gloo", Some(why)) => Err(why.to_string()),
        ("mpi" | "ucc", _) => Err(format!(
            "{b:?}: not modelled (nccl or gloo; docs/training.md says what the {b} backend would need)"
        )),
        _ => Err(format!("{b:?}: expected nccl or gloo")),
    })
}

/// Why a training step takes no `gpus_per_process`.
pub(crate) fn one_process_why(spec: &DdpSpec) -> &'static str {
    if spec.data_parallel.is_some() {
        "DataParallel is one process driving every GPU of its node already (collsim times its calls so); give no gpus_per_process"
    } else {
        "PyTorch DDP runs one process per GPU"
    }
}

/// What `kind = "dp"` (torch.nn.DataParallel) refuses: DDP's options, another backend, a
/// data loader's rate and the sharded and 3-D layouts (their tables are refused by kind
/// elsewhere).
fn refuse_under_dp(src: &Source<'_>, w: &RawWorkload) -> Result<(), ConfigError> {
    let why = |table: &str| match table {
        "ddp" => {
            "DistributedDataParallel's options; DataParallel has none of them (its options are in [workload.dp])"
        }
        "backend" => {
            "DataParallel runs in one process without a process group: its broadcasts and reduces are NCCL's, through torch.cuda.comm"
        }
        "activation_checkpointing" => {
            "a checkpointed block's forward runs again in Python on autograd's thread per GPU, under the interpreter lock the replicas share: not modelled yet"
        }
        _ => {
            "a data loader's rate is not modelled under DataParallel yet (give the step without [workload.input])"
        }
    };
    for (key, at) in [
        ("ddp", w.ddp.as_ref().map(|d| d.span().start)),
        ("backend", w.backend.as_ref().map(|b| b.span().start)),
        ("input", w.input.as_ref().map(|i| i.span().start)),
        (
            "activation_checkpointing",
            w.activation_checkpointing
                .as_ref()
                .filter(|a| a.get_ref() != "none")
                .map(|a| a.span().start),
        ),
    ] {
        if let Some(at) = at {
            return Err(
                src.error_at(at, format!("workload.{key}: not for kind = \"dp\" ({})", why(key)))
            );
        }
    }
    Ok(())
}

/// `[workload.dp]`: the bytes of a sample's input and of its output, and where the loss is
/// computed; the model's defaults where collsim knows them.
fn data_parallel(
    src: &Source<'_>,
    w: &RawWorkload,
    spec: &crate::workload::ddp::DdpSpec,
) -> Result<crate::workload::dp::DataParallel, ConfigError> {
    use crate::workload::dp::DataParallel;
    let sixteen = crate::workload::memory::sixteen_bit(spec);
    let known = DataParallel::defaults(&spec.model, spec.sequence, sixteen);
    let none = super::raw::RawDp::default();
    let d = w.dp.as_ref().map_or(&none, Spanned::get_ref);
    let bytes = |field: &str, v: &Option<Spanned<super::RawQuantity>>, default: Option<u64>| {
        match v {
            Some(v) => src.check(field, v, |q| {
                let b = q.parse_with(Bytes::parse)?;
                if b.get() == 0 || b.get() > 1 << 40 {
                    return Err(format!("{b}: bytes of one sample, 1 B to 1 TiB"));
                }
                Ok(b.get())
            }),
            None => default.ok_or_else(|| {
                missing(
                    src,
                    field.trim_start_matches("workload."),
                    "collsim knows the input and output of the resnet50 and transformer presets only; give [workload.dp] sample_bytes and output_bytes (one sample's input scattered from GPU 0, its output gathered to it)",
                )
            }),
        }
    };
    let sample_bytes =
        bytes("workload.dp.sample_bytes", &d.sample_bytes, known.map(|k| k.sample_bytes))?;
    let output_bytes =
        bytes("workload.dp.output_bytes", &d.output_bytes, known.map(|k| k.output_bytes))?;
    let loss_on_first = match &d.loss {
        Some(l) => src.check("workload.dp.loss", l, |l| match l.as_str() {
            "gpu0" => Ok(true),
            "replica" => Ok(false),
            _ => Err(format!("{l:?}: \"gpu0\" (computed from the gathered outputs) or \"replica\" (inside each replica's forward)")),
        })?,
        None => known.is_none_or(|k| k.loss_on_first),
    };
    let gil_share = match &d.gil_share {
        Some(v) => src.check("workload.dp.gil_share", v, |&x| {
            if x.is_finite() && (0.0..=1.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("a share of the host's time per kernel, 0 to 1 (got {x})"))
            }
        })?,
        None => crate::workload::dp::GIL_SHARE,
    };
    Ok(DataParallel { sample_bytes, output_bytes, loss_on_first, gil_share })
}

/// A rate as a fraction of the nominal one (of the peak, of the fastest rank): at least
/// MIN_RATE_FRACTION, below which a GPU does not train but has failed.
fn rate_fraction(src: &Source<'_>, field: &str, v: &Spanned<f64>) -> Result<f64, ConfigError> {
    src.check(field, v, |&x| {
        if x.is_finite() && (MIN_RATE_FRACTION..=1.0).contains(&x) {
            Ok(x)
        } else {
            Err(format!("must be a fraction in [{MIN_RATE_FRACTION}, 1] (got {x}); below it a GPU has failed rather than slowed"))
        }
    })
}

/// A workload's compute rate (`tflops`; `precision` with `efficiency` or `mfu`, or alone
/// for the GPU generation's default compute model, which it also returns: its host and
/// per-GEMM times apply where `launch_us` and `gemm_fixed_us` are not given).
fn compute_rate(
    src: &Source<'_>,
    w: &RawWorkload,
    node: &NodeSpec,
) -> Result<
    (crate::workload::ddp::ComputeRate, Option<crate::workload::compute::ComputeDefault>),
    ConfigError,
> {
    use crate::workload::ddp::ComputeRate;
    if let (Some(e), Some(m)) = (&w.efficiency, &w.mfu) {
        let at = e.span().start.max(m.span().start);
        return Err(src.error_at(
            at,
            "workload.mfu: give efficiency (the GEMMs' fraction of the peak) or mfu (the whole forward and backward's), not both",
        ));
    }
    let efficiency = w.efficiency.as_ref().map(|e| ("workload.efficiency", e, false));
    let fraction_of_peak = efficiency.or(w.mfu.as_ref().map(|m| ("workload.mfu", m, true)));
    let mut compute_default = None;
    let rate = match (&w.tflops, &w.precision, fraction_of_peak) {
        (Some(t), None, None) => ComputeRate::Tflops(src.check("workload.tflops", t, |&x| {
            if x.is_finite() && (MIN_TFLOPS..=MAX_TFLOPS).contains(&x) {
                Ok(x)
            } else {
                Err(format!(
                    "must be TFLOP/s one GPU sustains, {MIN_TFLOPS} to {MAX_TFLOPS} (got {x})"
                ))
            }
        })?),
        (None, Some(p), Some((field, e, mfu))) => {
            let precision = known_precision(src, p, node)?;
            let x = rate_fraction(src, field, e)?;
            if mfu {
                ComputeRate::Mfu { precision, mfu: x }
            } else {
                ComputeRate::Peak { precision, efficiency: x }
            }
        }
        (Some(t), _, _) => {
            return Err(src.error_at(
                t.span().start,
                "workload.tflops: give either tflops or precision (alone for the GPU generation's default compute model, or with efficiency or mfu)",
            ));
        }
        (None, Some(p), None) => {
            let precision = known_precision(src, p, node)?;
            let d = crate::workload::compute::default_for(node.gpu.model.sm);
            compute_default = Some(d);
            ComputeRate::Peak { precision, efficiency: d.efficiency }
        }
        _ => {
            return Err(missing(
                src,
                "precision",
                "the compute rate: precision (fp32, tf32, fp16, bf16, fp8: the GPU generation's default compute model, or with efficiency or mfu), or tflops",
            ));
        }
    };
    Ok((rate, compute_default))
}

/// `[workload.ddp]`'s communication hook, with PowerSGD's options (PowerSGDState's defaults).
fn comm_hook(
    src: &Source<'_>,
    d: &super::raw::RawDdp,
) -> Result<crate::workload::ddp::CommHook, ConfigError> {
    use crate::workload::ddp::{CommHook, PowerSgdOptions};
    let rank = match &d.powersgd_rank {
        Some(r) => positive(src, "workload.ddp.powersgd_rank", r, 1 << 16)? as u64,
        None => 1,
    };
    let error_feedback = d.error_feedback.unwrap_or(true);
    let warm_start = d.warm_start.unwrap_or(true);
    // PowerSGDState's default, and its rule: with error feedback or warm start the start must
    // come after DDP's bucket rebuild at iteration 1.
    let start_iter = match &d.powersgd_start_iter {
        Some(v) => src.check("workload.ddp.powersgd_start_iter", v, |&n| {
            if n < 0 {
                Err(format!("must be at least 0 (got {n})"))
            } else if n <= 1 && (error_feedback || warm_start) {
                Err(format!(
                    "{n}: with error_feedback or warm_start PyTorch requires it to be above 1 (buckets are rebuilt at iteration 1)"
                ))
            } else {
                Ok(n as u64)
            }
        })?,
        None => 1000,
    };
    Ok(match &d.comm_hook {
        Some(h) => src.check("workload.ddp.comm_hook", h, |h| {
            let o = PowerSgdOptions { rank, error_feedback, warm_start, start_iter };
            CommHook::parse(h, o).ok_or_else(|| format!("unknown hook {h:?} ({})", CommHook::NAMES))
        })?,
        None => CommHook::None,
    })
}

/// `[workload.input]`: the data loader's rate, per GPU or per node.
fn input_rate(
    src: &Source<'_>,
    w: &RawWorkload,
) -> Result<Option<crate::workload::ddp::InputRate>, ConfigError> {
    use crate::workload::ddp::InputRate;
    let rate_field = |field: &str, v: &Spanned<f64>| {
        src.check(field, v, |&x| {
            if x.is_finite() && x >= 1e-3 {
                Ok(x)
            } else {
                Err(format!("must be a number of samples per second, at least 0.001 (got {x})"))
            }
        })
    };
    Ok(match &w.input {
        None => None,
        Some(i) => match (&i.get_ref().gpu_samples_per_s, &i.get_ref().node_samples_per_s) {
            (Some(g), None) => {
                Some(InputRate::PerGpu(rate_field("workload.input.gpu_samples_per_s", g)?))
            }
            (None, Some(n)) => {
                Some(InputRate::PerNode(rate_field("workload.input.node_samples_per_s", n)?))
            }
            (Some(_), Some(n)) => {
                return Err(src.error_at(
                    n.span().start,
                    "workload.input.node_samples_per_s: give gpu_samples_per_s (each GPU's loader) or node_samples_per_s (the node's, shared by its GPUs), not both",
                ));
            }
            (None, None) => {
                return Err(src.error_at(
                    i.span().start,
                    "workload.input: give gpu_samples_per_s or node_samples_per_s (the data loader's samples per second)",
                ));
            }
        },
    })
}

/// `workload.precision`, one the GPU library gives the GPU a peak for.
fn known_precision(
    src: &Source<'_>,
    p: &Spanned<String>,
    node: &NodeSpec,
) -> Result<String, ConfigError> {
    src.check("workload.precision", p, |p| match node.gpu.model.peak_tflops.get(p.as_str()) {
        Some(_) => Ok(p.clone()),
        None => {
            let known = node.gpu.model.peak_tflops.keys().cloned().collect::<Vec<_>>();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            Err(format!(
                "the {} has no peak for {p:?} in the GPU library (it lists {known}); give workload.tflops instead, or peak_tflops in its [gpu_model] table",
                node.gpu.model.name
            ))
        }
    })
}

/// A time in µs from 0 to 10,000 (`what`, for the error), in seconds.
fn micros(src: &Source<'_>, field: &str, v: &Spanned<f64>, what: &str) -> Result<f64, ConfigError> {
    src.check(field, v, |&x| {
        if x.is_finite() && (0.0..=10_000.0).contains(&x) {
            Ok(x * 1e-6)
        } else {
            Err(format!("must be {what} in µs, 0 to 10000 (got {x})"))
        }
    })
}

/// A step given as a list of calls (`kind = "trace"`, `calls = "FILE"`, relative to the
/// scenario; [`crate::workload::calls`]), or a PyTorch profiler, Nsight Systems or Chakra
/// trace read as one ([`crate::workload::calls::read_step`]): replayed with its compute as
/// given.
fn trace_workload(
    src: &Source<'_>,
    w: &RawWorkload,
    node: &NodeSpec,
) -> Result<DdpSpec, ConfigError> {
    // Keys of other kinds were refused by `parse_workload`.
    if let (Some(c), Some(_)) = (&w.calls, &w.profile) {
        return Err(src.error_at(
            c.span().start,
            "workload.calls: a step is a list of calls or a model profile, not both",
        ));
    }
    if let Some(p) = &w.profile {
        return profile_workload(src, w, node, p);
    }
    let Some(path) = &w.calls else {
        return Err(missing(
            src,
            "calls",
            "kind = \"trace\" replays a list-of-calls file (or a Kineto, Nsight Systems or Chakra trace)",
        ));
    };
    let file = beside(src, path.get_ref());
    let calls = src.check("workload.calls", path, |p| {
        if p.trim().is_empty() {
            return Err("an empty path (name the list of calls or trace to replay)".to_string());
        }
        let bytes = super::load_bytes(&file).map_err(|e| e.to_string())?;
        // What the replay leaves out (a Chakra trace's host nodes) is `--workload-trace`'s
        // to say; a scenario replays the GPU's work as it does there.
        let f = crate::workload::calls::read_step(&file.display().to_string(), &bytes)?.file;
        // Checked now, where the scenario's line is known.
        crate::workload::calls::check(&f.calls).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(f.calls)
    })?;
    let compute_slowdown = replay_slowdown(src, w)?;
    let mut spec = DdpSpec::replay(format!("calls from {}", path.get_ref()), calls);
    spec.compute_slowdown = compute_slowdown;
    Ok(spec)
}

/// A file a scenario names, relative to the scenario.
fn beside(src: &Source<'_>, path: &str) -> std::path::PathBuf {
    match Path::new(src.name).parent() {
        Some(dir) => dir.join(path),
        None => std::path::PathBuf::from(path),
    }
}

/// A replayed step's `compute_slowdown`, a fraction in [0, 1], if given.
fn replay_slowdown(src: &Source<'_>, w: &RawWorkload) -> Result<Option<f64>, ConfigError> {
    let Some(v) = &w.compute_slowdown else { return Ok(None) };
    src.check("workload.compute_slowdown", v, |&x| {
        if (0.0..=1.0).contains(&x) {
            Ok(Some(x))
        } else {
            Err(format!("must be a fraction in [0, 1] (got {x})"))
        }
    })
}

/// `memory_headroom`: a share of the GPU's memory in [0, 0.5].
fn headroom(src: &Source<'_>, v: &Spanned<f64>) -> Result<f64, ConfigError> {
    src.check("workload.memory_headroom", v, |&x| {
        if (0.0..=0.5).contains(&x) {
            Ok(x)
        } else {
            Err(format!(
                "must be a share of the GPU's memory in [0, 0.5] (got {x}; the default is {})",
                crate::workload::memory::DEFAULT_HEADROOM
            ))
        }
    })
}

/// A step from a model profile (`profile = "FILE"`, relative to the scenario;
/// [`crate::workload::profile`]), carried to the scenario's GPU and, with `micro_batch` or
/// `sequence`, to that shape.
fn profile_workload(
    src: &Source<'_>,
    w: &RawWorkload,
    node: &NodeSpec,
    path: &Spanned<String>,
) -> Result<DdpSpec, ConfigError> {
    use crate::workload::profile::ModelProfile;
    let file = beside(src, path.get_ref());
    let profile = src.check("workload.profile", path, |p| {
        if p.trim().is_empty() {
            return Err("an empty path (name the model profile `collsim profile` wrote)".into());
        }
        let text = super::read_capped(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        if text.trim_start().starts_with(['{', '[']) {
            return Err(format!(
                "{} is a trace, not a model profile: make one with `collsim profile {} -o model.toml` (or replay the trace with calls = \"...\")",
                file.display(),
                file.display()
            ));
        }
        ModelProfile::read(&file.display().to_string(), &text)
    })?;
    let micro_batch = match &w.micro_batch {
        Some(v) => Some(positive(src, "workload.micro_batch", v, 1 << 20)? as u64),
        None => None,
    };
    let sequence = match &w.sequence {
        Some(v) => Some(positive(src, "workload.sequence", v, 1 << 24)? as u64),
        None => None,
    };
    // `[workload.parallel] tp` alone: the traced step split over tensor-parallel ranks.
    let tp = match &w.parallel {
        None => (1, 0),
        Some(par) => {
            let r = par.get_ref();
            let others = r.pp.is_some()
                || r.ep.is_some()
                || r.cp.is_some()
                || r.virtual_stages.is_some()
                || r.sequence_parallel.is_some()
                || r.recompute.is_some()
                || r.overlap_grad_reduce.is_some()
                || r.align_grad_reduce.is_some()
                || r.distributed_optimizer.is_some()
                || r.overlap_param_gather.is_some()
                || r.tp_comm_overlap.is_some();
            if others {
                return Err(src.error_at(
                    par.span().start,
                    "workload.parallel: a model profile takes tp alone (its step is the traced one: no pipeline, context or expert parallelism, sequence parallelism, recompute or optimizer sharding to add)",
                ));
            }
            match &r.tp {
                Some(v) => {
                    let tp = positive(src, "workload.parallel.tp", v, 1 << 16)?;
                    let gpus = node.gpu.count;
                    if !gpus.is_multiple_of(tp) {
                        return Err(src.error_at(
                            v.span().start,
                            format!("workload.parallel.tp: {tp} does not divide the node's {gpus} GPUs (a tensor-parallel group stays inside a node)"),
                        ));
                    }
                    (tp, v.span().start)
                }
                None => (1, 0),
            }
        }
    };
    let named = crate::workload::profile::Named {
        path: path.get_ref().clone(),
        profile,
        micro_batch,
        sequence,
        tp: tp.0,
    };
    let (name, calls) = named.replay(&node.gpu.model).map_err(|(blame, e)| {
        use crate::workload::profile::Blame;
        let shaped = blame == Blame::Shape;
        let (key, at) = match (&w.micro_batch, &w.sequence) {
            _ if blame == Blame::Tp => ("parallel.tp", tp.1),
            (Some(v), _) if shaped => ("micro_batch", v.span().start),
            (None, Some(v)) if shaped => ("sequence", v.span().start),
            _ => ("profile", path.span().start),
        };
        src.error_at(at, format!("workload.{key}: {}: {e}", path.get_ref()))
    })?;
    let compute_slowdown = replay_slowdown(src, w)?;
    let mut spec = DdpSpec::replay(name, calls);
    spec.compute_slowdown = compute_slowdown;
    // Samples and tokens a step, where the profile knows its shape.
    let p = &named.profile;
    if let Some(b) = micro_batch.or(p.micro_batch) {
        spec.micro_batch = b;
    }
    spec.sequence = sequence.or(p.sequence);
    // The allocator's share the step's measured peak leaves free: what the profile's measured
    // reserved/allocated ratio says, unless the scenario gives one.
    spec.memory_headroom = match (&w.memory_headroom, &p.memory) {
        (Some(v), _) => headroom(src, v)?,
        (None, Some(m)) => crate::workload::memory::measured_headroom(m),
        (None, None) => crate::workload::memory::DEFAULT_HEADROOM,
    };
    spec.profile = Some(Box::new(named));
    Ok(spec)
}

/// `activation_checkpointing` and `checkpoint_every` (None where neither is given): refused
/// where the model has no transformer blocks to checkpoint, and `selective` where it would
/// change what collsim does not model (unfused attention's scores).
fn checkpointing(
    src: &Source<'_>,
    w: &RawWorkload,
    model: &crate::workload::models::Model,
) -> Result<Option<crate::workload::ddp::Checkpointing>, ConfigError> {
    use crate::workload::ddp::Checkpointing;
    use crate::workload::models::{Attention, TpRole};
    let every = match &w.checkpoint_every {
        Some(v) => Some(positive(src, "workload.checkpoint_every", v, 1 << 20)? as u64),
        None => None,
    };
    let Some(a) = &w.activation_checkpointing else {
        if let Some(v) = &w.checkpoint_every {
            return Err(src.error_at(
                v.span().start,
                "workload.checkpoint_every: goes with activation_checkpointing = \"full\"",
            ));
        }
        return Ok(None);
    };
    let c = src.check("workload.activation_checkpointing", a, |a| match a.as_str() {
        "none" => Ok(Checkpointing::None),
        "selective" => Ok(Checkpointing::Selective),
        "full" => Ok(Checkpointing::Full { every: every.unwrap_or(1) }),
        _ => Err(format!("{a:?}: {}", Checkpointing::NAMES)),
    })?;
    if let (Some(v), false) = (&w.checkpoint_every, matches!(c, Checkpointing::Full { .. })) {
        return Err(src.error_at(
            v.span().start,
            "workload.checkpoint_every: goes with activation_checkpointing = \"full\"",
        ));
    }
    if c == Checkpointing::None {
        return Ok(Some(c));
    }
    let blocks: Vec<_> = model
        .layers
        .iter()
        .filter_map(|l| l.parallel.filter(|p| matches!(p.role, TpRole::Block { .. })))
        .collect();
    if blocks.is_empty() {
        return Err(src.error_at(
            a.span().start,
            format!(
                "workload.activation_checkpointing: the model {:?} has no transformer blocks whose inputs collsim knows (custom layers, ResNet-50 and BERT-large do not); write it as a [workload.model] table",
                model.name
            ),
        ));
    }
    if c == Checkpointing::Selective && blocks.iter().any(|p| p.attention != Attention::Flash) {
        return Err(src.error_at(
            a.span().start,
            "workload.activation_checkpointing: selective recomputation of unfused attention's scores is not modelled yet; give \"full\" (with flash attention, selective changes nothing: its kernel recomputes the scores already)",
        ));
    }
    Ok(Some(c))
}

/// Whether a workload's step runs under 16-bit autocast over fp32 parameters, as PyTorch's
/// mixed precision does for plain DDP (and FSDP whose `param_dtype`, by default the
/// gradients', is fp32): a bf16 or fp16
/// `precision` with fp32 gradients (the parameters' dtype), no ZeRO (DeepSpeed keeps 16-bit
/// parameters) and no Megatron layout (likewise). fp8 is Transformer Engine's recipe, which
/// Megatron runs over 16-bit parameters: not autocast here, though the memory model counts an
/// autocast cache for any step that is not fp32.
fn under_autocast(w: &RawWorkload, grad_dtype: DataType) -> bool {
    let sixteen =
        w.precision.as_ref().is_some_and(|p| matches!(p.get_ref().as_str(), "bf16" | "fp16"));
    let params = match w.kind.as_ref().map(|k| k.get_ref().as_str()) {
        Some("zero") => None,
        Some("fsdp") => match w.fsdp.as_ref().and_then(|f| f.get_ref().param_dtype.as_ref()) {
            Some(d) => DataType::parse(d.get_ref()),
            None => Some(grad_dtype),
        },
        _ => Some(grad_dtype),
    };
    sixteen && params == Some(DataType::Float) && w.parallel.is_none()
}

/// The model a workload gives (a preset, a `[workload.model]` table or `[[workload.layer]]`
/// tables) with the attention `workload.attention` names, checked; and the `[workload.model]`
/// specification it was built from, kept to build it again at another tensor-parallel degree
/// (a plan's `tp`) where that pads its vocabulary otherwise.
fn workload_model(
    src: &Source<'_>,
    w: &RawWorkload,
    seq: Option<u64>,
    grad_dtype: DataType,
    tp_hint: u64,
) -> Result<(crate::workload::models::Model, Option<crate::workload::spec::ModelSpec>), ConfigError>
{
    use crate::workload::models;
    let mut written = None;
    let model = match (&w.model, &w.layer) {
        (Some(m), None) => match m.get_ref() {
            super::raw::RawModel::Name(name) => {
                models::preset(name, seq, grad_dtype, under_autocast(w, grad_dtype)).ok_or_else(|| {
                    src.error_at(
                        m.span().start,
                        format!(
                            "workload.model: unknown model {name:?} (presets: {}; or give a [workload.model] table, or [[workload.layer]] tables)",
                            models::PRESETS.join(", ")
                        ),
                    )
                })?
            }
            super::raw::RawModel::Spec(spec) => {
                let (model, spec) = model_spec(
                    src,
                    spec,
                    m.span().start,
                    seq,
                    grad_dtype,
                    tp_hint,
                    under_autocast(w, grad_dtype),
                )?;
                written = Some(spec);
                model
            }
        },
        (None, Some(layers)) if !layers.is_empty() => custom_layers(src, layers, grad_dtype)?,
        (Some(m), Some(_)) => {
            return Err(src.error_at(
                m.span().start,
                "workload.model: give a preset or [[workload.layer]] tables, not both",
            ));
        }
        _ => return Err(missing(src, "model", "a preset name, or [[workload.layer]] tables")),
    };
    if let (Some(a), Some(super::raw::RawModel::Spec(spec))) =
        (&w.attention, w.model.as_ref().map(Spanned::get_ref))
        && spec.attention.is_some()
    {
        return Err(src.error_at(
            a.span().start,
            "workload.attention: the [workload.model] table gives its attention; give it once",
        ));
    }
    let model = match &w.attention {
        Some(a) => {
            let attention = src.check("workload.attention", a, |a| {
                models::Attention::parse(a)
                    .ok_or_else(|| format!("{a:?}: {}", models::Attention::NAMES))
            })?;
            if let Some(spec) = &mut written {
                spec.attention = attention;
            }
            let name = model.name.clone();
            models::with_attention(model, attention).ok_or_else(|| {
                src.error_at(
                    a.span().start,
                    format!(
                        "workload.attention: the model {name:?} has no attention heads modelled (the GPT-2-style and Llama-family presets have them)"
                    ),
                )
            })?
        }
        None => model,
    };
    let unfused = model.layers.iter().any(|l| {
        l.parallel.is_some_and(|p| {
            p.attention == models::Attention::Unfused
                && matches!(p.role, models::TpRole::Block { .. })
        })
    });
    if let (true, Some(m)) = (unfused, &w.mfu) {
        return Err(src.error_at(
            m.span().start,
            "workload.mfu: with attention = \"unfused\" the GEMM rate would be solved to keep this utilisation, making the GEMMs faster instead of the step slower; give efficiency or tflops",
        ));
    }
    let total = model.tensors().try_fold(0u64, |sum, t| sum.checked_add(t.numel));
    if total.is_none_or(|n| n > MAX_TENSOR_PARAMS) {
        return Err(src.error(format!(
            "workload.layer: the model holds more than {MAX_TENSOR_PARAMS} parameters, larger than any model's"
        )));
    }
    if model.params() == 0 {
        return Err(src.error("workload.layer: the model has no parameters"));
    }
    Ok((model, written))
}

/// `[[workload.layer]]` tables: a model of the layers they give, checked.
fn custom_layers(
    src: &Source<'_>,
    layers: &[super::raw::RawLayer],
    grad_dtype: DataType,
) -> Result<crate::workload::models::Model, ConfigError> {
    use crate::workload::models::{Layer, MemoryWork, Model, tensor};
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let f = |k: &str| format!("workload.layer[{i}].{k}");
        let nonneg = |field: &str, v: &Spanned<f64>, what: &str, most: f64| {
            src.check(&f(field), v, |&g| {
                if g.is_finite() && (0.0..=most).contains(&g) {
                    Ok(g)
                } else {
                    Err(format!("must be {what}, 0 to {most:e} (got {g})"))
                }
            })
        };
        // An hour of one layer's pass, or an exaFLOP per sample (a thousand times GPT-3's
        // whole forward pass at 2,048 tokens): past either, a unit is mistaken.
        let (hour_ms, most_gflops) = (crate::workload::calls::MAX_ENTRY_US * 1e-3, 1e9);
        let (gflops, times) = match (&l.fwd_gflops, &l.fwd_ms) {
            (Some(g), None) => {
                if let Some(b) = &l.bwd_ms {
                    // The backward pass of a FLOP-given layer is twice its forward.
                    return Err(src.error_at(
                        b.span().start,
                        format!(
                            "{}: goes with fwd_ms; a layer given as fwd_gflops takes twice its forward FLOPs backward",
                            f("bwd_ms")
                        ),
                    ));
                }
                (nonneg("fwd_gflops", g, "GFLOP per sample", most_gflops)?, None)
            }
            (None, Some(t)) => {
                let fwd = nonneg("fwd_ms", t, "ms per micro-batch", hour_ms)? * 1e-3;
                let bwd = match &l.bwd_ms {
                    Some(b) => nonneg("bwd_ms", b, "ms per micro-batch", hour_ms)? * 1e-3,
                    None => 2.0 * fwd,
                };
                (0.0, Some((fwd, bwd)))
            }
            _ => {
                return Err(src.error_at(
                    l.name.span().start,
                    format!(
                        "{}: give fwd_gflops (per sample) or fwd_ms (per micro-batch; bwd_ms defaults to 2 x fwd_ms), one of them",
                        f("fwd_gflops")
                    ),
                ));
            }
        };
        let dtype = match &l.dtype {
            Some(d) => Some(src.check(&f("dtype"), d, |d| match DataType::parse(d) {
                Some(t @ (DataType::Float | DataType::Half | DataType::Bfloat16)) => Ok(t),
                _ => Err(format!("{d:?}: gradients are float, half or bfloat16")),
            })?),
            None => None,
        };
        let tensors = src.check(&f("params"), &l.params, |shapes| {
            shapes
                .iter()
                .enumerate()
                .map(|(k, shape)| {
                    if shape.is_empty() || shape.iter().any(|&d| d < 1) {
                        return Err(format!("tensor {k}: a shape is a list of positive dimensions (got {shape:?})"));
                    }
                    let rows = shape[0] as u64;
                    let cols = shape[1..]
                        .iter()
                        .try_fold(1u64, |p, &d| p.checked_mul(d as u64))
                        .filter(|&c| rows.checked_mul(c).is_some_and(|n| n <= MAX_TENSOR_PARAMS));
                    let Some(cols) = cols else {
                        return Err(format!("tensor {k}: {shape:?} holds more than {MAX_TENSOR_PARAMS} parameters, larger than any model's"));
                    };
                    let mut t = tensor(format!("{}.{k}", l.name.get_ref()), rows, cols);
                    t.dtype = dtype;
                    Ok(t)
                })
                .collect::<Result<Vec<_>, String>>()
        })?;
        let act_bytes = match &l.activations {
            Some(a) => {
                src.check(&f("activations"), a, |q| q.parse_with(Bytes::parse))?.get() as f64
            }
            None => 0.0,
        };
        let bytes = |field: &str, q: &Option<Spanned<super::RawQuantity>>| {
            q.as_ref()
                .map(|q| src.check(&f(field), q, |q| q.parse_with(Bytes::parse)))
                .transpose()
                .map(|b| b.map(|b| b.get() as f64))
        };
        // A measured layer's times already hold its memory-bound work and launches.
        if times.is_some() {
            let given = [
                ("fwd_memory", l.fwd_memory.as_ref().map(|q| q.span().start)),
                ("bwd_memory", l.bwd_memory.as_ref().map(|q| q.span().start)),
                ("kernels", l.kernels.as_ref().map(|k| k.span().start)),
                ("gemms", l.gemms.as_ref().map(|k| k.span().start)),
            ];
            if let Some((key, Some(at))) = given.into_iter().find(|g| g.1.is_some()) {
                return Err(src.error_at(
                    at,
                    format!(
                        "{}: a layer given as measured fwd_ms already includes its memory-bound work and launches; give it with fwd_gflops instead",
                        f(key)
                    ),
                ));
            }
        }
        let fwd_mem = bytes("fwd_memory", &l.fwd_memory)?.unwrap_or(0.0);
        let bwd_mem = bytes("bwd_memory", &l.bwd_memory)?.unwrap_or(2.0 * fwd_mem);
        let kernels = match &l.kernels {
            Some(k) => src.check(&f("kernels"), k, |&n| {
                if (0..=1 << 20).contains(&n) {
                    Ok(n as u32)
                } else {
                    Err(format!("must be 0 to {} launches (got {n})", 1 << 20))
                }
            })?,
            None => 0,
        };
        // One FLOP-bound kernel forward unless told otherwise (none without FLOPs).
        let gemms = match &l.gemms {
            Some(k) => src.check(&f("gemms"), k, |&n| {
                if (0..=i64::from(kernels)).contains(&n) {
                    Ok(n as u32)
                } else {
                    Err(format!(
                        "must be 0 to the layer's kernels ({kernels}): FLOP-bound kernels among its launches (got {n})"
                    ))
                }
            })?,
            None => u32::from(gflops > 0.0 && kernels > 0),
        };
        out.push(Layer {
            name: l.name.get_ref().clone(),
            tensors,
            fwd_macs: gflops * 1e9 / 2.0,
            times,
            act_bytes,
            transient_bytes: 0.0,
            memory: MemoryWork::new(fwd_mem, bwd_mem, kernels, 2 * kernels)
                .with_gemms(gemms, 2 * gemms),
            parallel: None,
        });
    }
    Ok(Model { name: "custom".into(), layers: out, grad_dtype, buffer_bytes: 0 })
}

/// `[workload.model]`: a transformer's specification (`workload::spec`), from a preset's
/// (`preset`) or a family's shapes (`family`), with the implementation's defaults for what it
/// leaves out; built at `seq` tokens (the preset's usual sequence if None) with its vocabulary
/// padded for tensor-parallel degree `tp`.
fn model_spec(
    src: &Source<'_>,
    r: &super::raw::RawModelSpec,
    at: usize,
    seq: Option<u64>,
    grad_dtype: DataType,
    tp: u64,
    autocast: bool,
) -> Result<(crate::workload::models::Model, crate::workload::spec::ModelSpec), ConfigError> {
    use crate::workload::models::{self, Attention};
    use crate::workload::spec::{
        Activation, Family, Implementation, Loss, ModelSpec, Norm, Position,
    };
    fn pick<T>(
        src: &Source<'_>,
        key: &str,
        v: &Option<Spanned<String>>,
        parse: impl Fn(&str) -> Option<T>,
        names: &str,
    ) -> Result<Option<T>, ConfigError> {
        v.as_ref()
            .map(|v| {
                src.check(&format!("workload.model.{key}"), v, |s| {
                    parse(s).ok_or_else(|| format!("{s:?}: {names}"))
                })
            })
            .transpose()
    }
    let implementation = pick(
        src,
        "implementation",
        &r.implementation,
        Implementation::parse,
        Implementation::NAMES,
    )?;
    let family = pick(src, "family", &r.family, Family::parse, Family::NAMES)?;
    let mut spec = match &r.preset {
        Some(p) => {
            let base = src.check("workload.model.preset", p, |name| {
                ModelSpec::preset(name).ok_or_else(|| {
                    if models::PRESETS.contains(&name.as_str()) {
                        format!(
                            "{name:?} is not a transformer with a specification; give it as model = \"{name}\""
                        )
                    } else {
                        let names: Vec<&str> = models::PRESETS
                            .iter()
                            .copied()
                            .filter(|n| ModelSpec::preset(n).is_some())
                            .collect();
                        format!("unknown preset {name:?} (transformer presets: {})", names.join(", "))
                    }
                })
            })?;
            if let (Some(f), Some(v)) = (family, &r.family)
                && f != base.family
            {
                return Err(src.error_at(
                    v.span().start,
                    format!(
                        "workload.model.family: the preset {:?} is a {:?} model; leave family out",
                        p.get_ref(),
                        base.family
                    ),
                ));
            }
            match implementation {
                // Another framework's kernels on the preset's shapes.
                Some(i) if i != base.implementation => ModelSpec {
                    name: base.name.clone(),
                    layers: base.layers,
                    hidden: base.hidden,
                    heads: base.heads,
                    kv_heads: base.kv_heads,
                    ffn: base.ffn,
                    max_positions: base.max_positions,
                    vocab: base.vocab,
                    tied: base.tied,
                    experts: base.experts,
                    source: base.source.clone(),
                    ..ModelSpec::defaults(base.family, i)
                },
                _ => base,
            }
        }
        None => {
            let Some(family) = family else {
                return Err(src.error_at(
                    at,
                    format!(
                        "workload.model.family: missing (a [workload.model] table gives a preset, or a family: {})",
                        Family::NAMES
                    ),
                ));
            };
            ModelSpec::defaults(family, implementation.unwrap_or(Implementation::Hf))
        }
    };
    let shaped = r.preset.is_some()
        && [&r.layers, &r.hidden, &r.heads, &r.kv_heads, &r.ffn, &r.vocab, &r.max_positions]
            .iter()
            .any(|v| v.is_some())
        || r.experts.is_some()
        || r.top_k.is_some();
    let count =
        |key: &str, v: &Option<Spanned<i64>>, max: i64| -> Result<Option<u64>, ConfigError> {
            v.as_ref()
                .map(|v| positive(src, &format!("workload.model.{key}"), v, max).map(|n| n as u64))
                .transpose()
        };
    // Past these a unit is mistaken: GPT-3 has 96 blocks and 12,288 hidden units.
    if let Some(n) = count("layers", &r.layers, 100_000)? {
        spec.layers = n;
    }
    if let Some(n) = count("hidden", &r.hidden, 1 << 20)? {
        spec.hidden = n;
    }
    let heads_given = count("heads", &r.heads, 1 << 16)?;
    if let Some(n) = heads_given {
        spec.heads = n;
        if r.kv_heads.is_none() && r.preset.is_none() {
            spec.kv_heads = n;
        }
    }
    if let Some(n) = count("kv_heads", &r.kv_heads, 1 << 16)? {
        spec.kv_heads = n;
    }
    if r.preset.is_none() && r.kv_heads.is_none() {
        spec.kv_heads = spec.heads;
    }
    if let Some(n) = count("ffn", &r.ffn, 1 << 24)? {
        spec.ffn = n;
    } else if r.preset.is_none() {
        match spec.family {
            // GPT's MLP is four times the hidden size.
            Family::Gpt => spec.ffn = 4 * spec.hidden,
            _ => {
                return Err(src.error_at(
                    at,
                    "workload.model.ffn: missing (a Llama-family MLP's width, intermediate_size in HF's config.json)",
                ));
            }
        }
    }
    if let Some(n) = count("vocab", &r.vocab, 1 << 24)? {
        spec.vocab = n;
    }
    if let Some(n) = count("vocab_multiple", &r.vocab_multiple, 1 << 16)? {
        spec.vocab_multiple = n;
    }
    if let Some(n) = count("max_positions", &r.max_positions, 1 << 24)? {
        spec.max_positions = n;
    }
    if let Some(a) = pick(src, "activation", &r.activation, Activation::parse, Activation::NAMES)? {
        spec.activation = a;
    }
    if let Some(n) = pick(src, "norm", &r.norm, Norm::parse, Norm::NAMES)? {
        spec.norm = n;
    }
    if let Some(p) = pick(src, "position", &r.position, Position::parse, Position::NAMES)? {
        spec.position = p;
    }
    if let Some(a) = pick(src, "attention", &r.attention, Attention::parse, Attention::NAMES)? {
        spec.attention = a;
    }
    if let Some(l) = pick(src, "loss", &r.loss, Loss::parse, Loss::NAMES)? {
        spec.loss = l;
    }
    for (flag, v) in
        [(&mut spec.bias, &r.bias), (&mut spec.tied, &r.tied), (&mut spec.dropout, &r.dropout)]
    {
        if let Some(b) = v {
            *flag = *b.get_ref();
        }
    }
    match (count("experts", &r.experts, 1 << 16)?, count("top_k", &r.top_k, 1 << 16)?) {
        (Some(e), Some(k)) => spec.experts = Some((e, k)),
        (None, None) => {}
        (Some(e), None) => spec.experts = Some((e, spec.experts.map_or(1, |x| x.1))),
        (None, Some(k)) => match (spec.experts, &r.top_k) {
            (Some((e, _)), _) => spec.experts = Some((e, k)),
            (None, v) => {
                return Err(src.error_at(
                    v.as_ref().map_or(at, |v| v.span().start),
                    "workload.model.top_k: goes with experts (a mixture of experts)",
                ));
            }
        },
    }
    if let Some(n) = &r.name {
        spec.name = n.get_ref().clone();
    } else if shaped {
        spec.name = format!("{} (reshaped)", spec.name);
    }
    let seq = match seq
        .or_else(|| r.preset.as_ref().and_then(|p| models::default_sequence(p.get_ref())))
    {
        Some(s) => s,
        None => {
            return Err(src.error_at(
                at,
                "workload.sequence: missing (the tokens of a sample, which a [workload.model] without a preset needs)",
            ));
        }
    };
    if spec.position == Position::Learned && spec.max_positions == 0 {
        spec.max_positions = seq;
    }
    if let Some((key, msg)) = spec.problem() {
        let place = match key {
            "layers" => r.layers.as_ref().map(|v| v.span().start),
            "hidden" => r.hidden.as_ref().map(|v| v.span().start),
            "heads" => r.heads.as_ref().map(|v| v.span().start),
            "kv_heads" => r.kv_heads.as_ref().map(|v| v.span().start),
            "ffn" => r.ffn.as_ref().map(|v| v.span().start),
            "vocab" => r.vocab.as_ref().map(|v| v.span().start),
            "max_positions" => r.max_positions.as_ref().map(|v| v.span().start),
            "experts" => r.experts.as_ref().map(|v| v.span().start),
            "top_k" => r.top_k.as_ref().map(|v| v.span().start),
            "activation" => r.activation.as_ref().map(|v| v.span().start),
            "position" => r.position.as_ref().map(|v| v.span().start),
            "implementation" => r.implementation.as_ref().map(|v| v.span().start),
            _ => None,
        };
        return Err(src.error_at(place.unwrap_or(at), format!("workload.model.{key}: {msg}")));
    }
    if spec.position == Position::Learned && seq > spec.max_positions {
        let place = r.max_positions.as_ref().map_or(at, |v| v.span().start);
        return Err(src.error_at(
            place,
            format!(
                "workload.model.max_positions: {} learned positions, fewer than the {seq} tokens of a sample",
                spec.max_positions
            ),
        ));
    }
    spec.autocast = autocast;
    Ok((spec.build(seq, grad_dtype, tp), spec))
}

/// `[workload.parallel]`: Megatron's tensor and pipeline degrees and their options (the data
/// parallel degree is what the ranks leave; checked against the cluster by the scenario).
fn parallel_layout(
    src: &Source<'_>,
    w: &RawWorkload,
    kind: &str,
) -> Result<Option<crate::workload::parallel::Layout>, ConfigError> {
    let Some(p) = &w.parallel else { return Ok(None) };
    let at = p.span().start;
    if kind != "ddp" {
        return Err(src.error_at(
            at,
            format!("workload.parallel: not for kind = \"{kind}\" yet (tensor and pipeline parallelism run with Megatron's data parallelism, kind = \"ddp\")"),
        ));
    }
    if let Some(h) = w
        .ddp
        .as_ref()
        .and_then(|d| d.get_ref().comm_hook.as_ref())
        .filter(|h| h.get_ref() != "none")
    {
        return Err(src.error_at(
            h.span().start,
            "workload.ddp.comm_hook: Megatron's data parallelism has no DDP communication hooks",
        ));
    }
    let p = p.get_ref();
    let degree = |field: &str, v: &Option<Spanned<i64>>| match v {
        Some(v) => positive(src, field, v, 1 << 16),
        None => Ok(1),
    };
    let recompute = match &p.recompute {
        Some(r) => src.check("workload.parallel.recompute", r, |r| match r.as_str() {
            "full" => Ok(true),
            "none" => Ok(false),
            _ => Err(format!(
                "{r:?}: \"full\" (every transformer layer's activations recomputed) or \"none\""
            )),
        })?,
        None => false,
    };
    let tp = degree("workload.parallel.tp", &p.tp)?;
    let layout = crate::workload::parallel::Layout {
        tp,
        pp: degree("workload.parallel.pp", &p.pp)?,
        ep: degree("workload.parallel.ep", &p.ep)?,
        cp: degree("workload.parallel.cp", &p.cp)?,
        virtual_stages: degree("workload.parallel.virtual_stages", &p.virtual_stages)?,
        // Megatron turns sequence parallelism off without tensor parallelism, with a warning
        // (`megatron/training/arguments.py`, NVIDIA/Megatron-LM d98e8a64): kept as an option a
        // `--sweep parallel.tp=1,2,4` applies where it means something.
        sequence_parallel: p.sequence_parallel.unwrap_or(false),
        recompute,
        overlap_grad_reduce: p.overlap_grad_reduce.unwrap_or(true),
        // Megatron's default (`align_grad_reduce: bool = True`, megatron/training/config/
        // common_config.py, NVIDIA/Megatron-LM d98e8a64).
        align_grad_reduce: p.align_grad_reduce.unwrap_or(true),
        distributed_optimizer: p.distributed_optimizer.unwrap_or(false),
        overlap_param_gather: p.overlap_param_gather.unwrap_or(false),
        // Off where tp = 1, with sequence parallelism (nothing to overlap).
        tp_comm_overlap: p.tp_comm_overlap.unwrap_or(false),
    };
    if layout.tp_comm_overlap && !layout.sequence_parallel {
        return Err(src.error_at(
            at,
            "workload.parallel.tp_comm_overlap: goes with sequence_parallel = true (Megatron asserts it: the overlapped collectives are sequence parallelism's all-gathers and reduce-scatters)",
        ));
    }
    if layout.overlap_param_gather && !layout.distributed_optimizer {
        return Err(src.error_at(
            at,
            "workload.parallel.overlap_param_gather: goes with distributed_optimizer = true (Megatron's --overlap-param-gather needs --use-distributed-optimizer)",
        ));
    }
    if layout.distributed_optimizer && layout.ep > 1 {
        return Err(src.error_at(
            at,
            "workload.parallel.distributed_optimizer: not modelled with expert parallelism yet (Megatron shards the experts' state over the expert-data ranks, dp / ep of them)",
        ));
    }
    if layout.virtual_stages > 1 && layout.pp < 2 {
        let at = p.virtual_stages.as_ref().map_or(at, |v| v.span().start);
        return Err(src.error_at(
            at,
            "workload.parallel.virtual_stages: the interleaved schedule needs pp of 2 or more",
        ));
    }
    Ok(Some(layout))
}

/// `[workload.fsdp]`: FSDP's sharding strategy, prefetch, all-gather limit and mixed-precision dtypes
/// (`param_dtype` defaults to the parameters' own, `reduce_dtype` to `param_dtype`, as FSDP's
/// MixedPrecision does).
fn fsdp_sharding(
    src: &Source<'_>,
    w: &RawWorkload,
    grad_dtype: DataType,
) -> Result<crate::workload::ddp::Sharding, ConfigError> {
    use crate::workload::ddp::{BackwardPrefetch, Sharding, ShardingStrategy};
    if let Some(d) = &w.ddp {
        return Err(src.error_at(
            d.span().start,
            "workload.ddp: not for kind = \"fsdp\" (its options are in [workload.fsdp])",
        ));
    }
    let none = super::raw::RawFsdp {
        sharding_strategy: None,
        backward_prefetch: None,
        forward_prefetch: None,
        limit_all_gathers: None,
        param_dtype: None,
        reduce_dtype: None,
        no_sync: None,
    };
    let f = w.fsdp.as_ref().map_or(&none, Spanned::get_ref);
    let strategy = match &f.sharding_strategy {
        Some(v) => src.check("workload.fsdp.sharding_strategy", v, |v| match v.as_str() {
            "FULL_SHARD" => Ok(ShardingStrategy::FullShard),
            "SHARD_GRAD_OP" => Ok(ShardingStrategy::ShardGradOp),
            "HYBRID_SHARD" => Ok(ShardingStrategy::HybridShard),
            "_HYBRID_SHARD_ZERO2" => Ok(ShardingStrategy::HybridShardZero2),
            "NO_SHARD" => Ok(ShardingStrategy::NoShard),
            _ => Err(format!(
                "unknown strategy {v:?} (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, _HYBRID_SHARD_ZERO2, NO_SHARD)"
            )),
        })?,
        None => ShardingStrategy::FullShard,
    };
    let backward_prefetch = match &f.backward_prefetch {
        Some(v) => src.check("workload.fsdp.backward_prefetch", v, |v| match v.as_str() {
            "BACKWARD_PRE" => Ok(BackwardPrefetch::BackwardPre),
            "BACKWARD_POST" => Ok(BackwardPrefetch::BackwardPost),
            "NONE" => Ok(BackwardPrefetch::None),
            _ => Err(format!("unknown prefetch {v:?} (BACKWARD_PRE, BACKWARD_POST, NONE)")),
        })?,
        None => BackwardPrefetch::BackwardPre,
    };
    let dtype = |field: &str, v: &Option<Spanned<String>>, default: DataType| match v {
        Some(d) => src.check(field, d, |d| match DataType::parse(d) {
            Some(t @ (DataType::Float | DataType::Half | DataType::Bfloat16)) => Ok(t),
            _ => Err(format!("{d:?}: float, half or bfloat16")),
        }),
        None => Ok(default),
    };
    let param_dtype = dtype("workload.fsdp.param_dtype", &f.param_dtype, grad_dtype)?;
    let reduce_dtype = dtype("workload.fsdp.reduce_dtype", &f.reduce_dtype, param_dtype)?;
    let no_sync = f.no_sync.unwrap_or(false);
    Ok(Sharding {
        strategy,
        backward_prefetch,
        forward_prefetch: f.forward_prefetch.unwrap_or(false),
        limit_all_gathers: f.limit_all_gathers.unwrap_or(true),
        param_dtype,
        reduce_dtype,
        no_sync,
        zero: None,
    })
}

/// The most all-gathers of updated parameters a ZeRO 1/2 step may have: 100,000 take 0.6 s
/// and 150 MB on a 2-core machine (Llama 7B at 67,000 elements a bucket); DeepSpeed's default
/// bucket (5e8 elements) gives 14 for that model.
const MAX_GATHERS: u64 = 100_000;

/// `[workload.zero]`: DeepSpeed's `zero_optimization` (`stage`, `reduce_bucket_size`,
/// `allgather_bucket_size`, `overlap_comm`, with DeepSpeed's defaults). Parameters and the
/// reductions are in the training precision (bf16 or fp16; else the gradients' dtype); stage
/// 3 runs as FSDP's FULL_SHARD with its units and prefetch.
fn zero_sharding(
    src: &Source<'_>,
    w: &RawWorkload,
    precision: Option<&str>,
    grad_dtype: DataType,
) -> Result<crate::workload::ddp::Sharding, ConfigError> {
    use crate::workload::ddp::{BackwardPrefetch, Sharding, ShardingStrategy, Zero};
    for (table, at) in [
        ("ddp", w.ddp.as_ref().map(|d| d.span().start)),
        ("fsdp", w.fsdp.as_ref().map(|f| f.span().start)),
    ] {
        if let Some(at) = at {
            return Err(src.error_at(
                at,
                format!(
                    "workload.{table}: not for kind = \"zero\" (its options are in [workload.zero])"
                ),
            ));
        }
    }
    let Some(z) = &w.zero else {
        return Err(missing(src, "zero", "kind = \"zero\" needs [workload.zero] with its stage"));
    };
    let (zero_at, z) = (z.span().start, z.get_ref());
    let stage = match &z.stage {
        Some(v) => src.check("workload.zero.stage", v, |&n| {
            if (1..=3).contains(&n) { Ok(n as u8) } else { Err(format!("1, 2 or 3 (got {n})")) }
        })?,
        None => return Err(src.error_at(zero_at, "workload.zero.stage: missing (1, 2 or 3)")),
    };
    let elements = |field: &str, v: &Option<Spanned<f64>>| match v {
        Some(v) => src.check(field, v, |&x| {
            if x.is_finite() && (1.0..=1e13).contains(&x) {
                Ok(x as u64)
            } else {
                Err(format!("a number of elements from 1 to 1e13 (got {x})"))
            }
        }),
        None => Ok(500_000_000),
    };
    if let (3, Some(false)) = (stage, z.overlap_comm) {
        return Err(src.error(
            "workload.zero.overlap_comm: stage 3 runs as FSDP's FULL_SHARD, whose reductions always run beside the backward; leave it out or true",
        ));
    }
    let zero = Zero {
        stage,
        reduce_bucket: elements("workload.zero.reduce_bucket_size", &z.reduce_bucket_size)?,
        allgather_bucket: elements(
            "workload.zero.allgather_bucket_size",
            &z.allgather_bucket_size,
        )?,
        overlap_comm: z.overlap_comm.unwrap_or(stage == 3),
    };
    let dtype = match precision {
        Some("bf16") => DataType::Bfloat16,
        Some("fp16") => DataType::Half,
        _ => grad_dtype,
    };
    let strategy = match stage {
        1 => ShardingStrategy::Zero1,
        2 => ShardingStrategy::Zero2,
        _ => ShardingStrategy::FullShard,
    };
    Ok(Sharding {
        strategy,
        backward_prefetch: BackwardPrefetch::BackwardPre,
        // DeepSpeed's stage 3 fetches the next parameters as a unit's forward begins.
        forward_prefetch: true,
        limit_all_gathers: true,
        param_dtype: dtype,
        reduce_dtype: dtype,
        no_sync: false,
        zero: Some(zero),
    })
}

/// Parses and validates a scenario; `file` names it in errors and anchors relative topology
/// paths.
pub fn parse_scenario(file: &str, text: &str) -> Result<Scenario, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawScenario = src.parse()?;
    let base = Path::new(file).parent();
    let (topology, node) =
        resolve_topology(raw.cluster.topology.get_ref(), base).map_err(|e| match e {
            ConfigError::File { msg, .. } => src.error_at(
                raw.cluster.topology.span().start,
                format!("cluster.topology: {:?}: {msg}", raw.cluster.topology.get_ref()),
            ),
            other => other,
        })?;
    let nodes = match &raw.cluster.nodes {
        Some(n) => positive(&src, "cluster.nodes", n, MAX_NODES as i64)?,
        None => 1,
    };
    let gpus_per_node = match &raw.cluster.gpus_per_node {
        Some(g) => {
            let g_n = positive(&src, "cluster.gpus_per_node", g, 1 << 20)?;
            if g_n > node.gpu.count {
                return Err(src.error_at(
                    g.span().start,
                    format!(
                        "cluster.gpus_per_node: {g_n} is more than the {} GPUs of a {} node",
                        node.gpu.count, node.name
                    ),
                ));
            }
            g_n
        }
        None => node.gpu.count,
    };
    if nodes * gpus_per_node > MAX_RANKS {
        let at = raw.cluster.nodes.as_ref().map_or(0, |n| n.span().start);
        return Err(src.error_at(
            at,
            format!(
                "cluster.nodes: {nodes} nodes of {gpus_per_node} GPUs are {} ranks, more than the {MAX_RANKS} collsim simulates",
                nodes * gpus_per_node
            ),
        ));
    }
    let gpus_per_process = match &raw.cluster.gpus_per_process {
        Some(g) => {
            let n = positive(&src, "cluster.gpus_per_process", g, 1 << 20)?;
            if gpus_per_node % n != 0 {
                return Err(src.error_at(
                    g.span().start,
                    format!(
                        "cluster.gpus_per_process: {n} does not divide the {gpus_per_node} GPUs used per node (a process drives GPUs of one node)"
                    ),
                ));
            }
            n
        }
        None => 1,
    };
    let placement = match &raw.placement {
        Some(p) => PlacementSpec::parse(&src, p, nodes)?,
        None => PlacementSpec::default(),
    };
    let jobs = match &raw.job {
        Some(jobs) => {
            super::jobs::parse_jobs(&src, jobs, &node, (nodes, gpus_per_node), &placement)?
        }
        None => Vec::new(),
    };
    let workload = match (&raw.workload, jobs.first()) {
        (Some(w), None) => parse_workload(&src, w, &node, false)?,
        // The first job's, for code that reads one workload; `jobs` says what runs.
        (None, Some(j)) => j.workload.clone(),
        (Some(_), Some(_)) => {
            let at = raw.job.as_ref().and_then(|j| j.first()).map_or(0, |j| j.name.span().start);
            return Err(src.error_at(
                at,
                "job: a scenario has either one [workload] on the whole cluster or [[job]] tables, each with its own [job.workload]",
            ));
        }
        (None, None) => {
            return Err(src.error(
                "workload: missing (a [workload] table, or [[job]] tables with their own [job.workload])",
            ));
        }
    };
    let background = match &raw.background {
        Some(b) => super::jobs::parse_background(&src, b, &node, nodes)?,
        None => Vec::new(),
    };
    if gpus_per_process > 1
        && let Workload::Ddp(spec) = &workload
    {
        let at = raw.cluster.gpus_per_process.as_ref().map_or(0, |g| g.span().start);
        return Err(src.error_at(
            at,
            format!("cluster.gpus_per_process: {gpus_per_process}, but {}", one_process_why(spec)),
        ));
    }
    if let Some(w) = &raw.workload {
        check_ranks(&src, w, &workload, nodes, gpus_per_node)?;
    }
    let nccl = parse_nccl(&src, raw.nccl.as_ref())?;
    let nccl_at = nccl_places(&src, raw.nccl.as_ref());
    Ok(Scenario {
        topology,
        node,
        nodes,
        gpus_per_node,
        gpus_per_process,
        workload,
        nccl,
        nccl_at,
        placement,
        jobs,
        background,
    })
}

/// A `[workload]` (or `[job.workload]`) table; `idle` allows `kind = "idle"` (a job that holds
/// its nodes and sends nothing).
pub(crate) fn parse_workload(
    src: &Source<'_>,
    w: &RawWorkload,
    node: &NodeSpec,
    idle: bool,
) -> Result<Workload, ConfigError> {
    let kinds = if idle {
        "sweep, ddp, dp, fsdp, zero, trace, idle"
    } else {
        "sweep, ddp, dp, fsdp, zero, trace"
    };
    let kind = match &w.kind {
        Some(k) => src.check("workload.kind", k, |k| match k.as_str() {
            "sweep" | "ddp" | "dp" | "fsdp" | "zero" | "trace" => Ok(k.clone()),
            "idle" if idle => Ok(k.clone()),
            _ => Err(format!("unknown workload kind {k:?} ({kinds})")),
        })?,
        // A model profile is a step to replay.
        None if w.profile.is_some() => "trace".to_string(),
        None => "sweep".to_string(),
    };
    if kind == "idle"
        && let Some((_, at)) = w.given().into_iter().find(|(key, _)| *key != "kind")
    {
        return Err(src.error_at(
            at,
            "workload.kind: an idle job runs nothing; drop its collective, sizes and model",
        ));
    }
    // A key another kind reads is refused on its line, never read by none.
    const SWEEP: [&str; 6] = ["collective", "min_bytes", "max_bytes", "factor", "dtype", "op"];
    let misplaced = w.given().into_iter().find_map(|(key, at)| {
        let why = match kind.as_str() {
            _ if key == "kind" => return None,
            "sweep" if SWEEP.contains(&key) || key == "backend" => return None,
            "sweep" if matches!(key, "calls" | "profile") => "only for a replayed step (kind = \"trace\"), not a collective sweep".to_string(),
            "sweep" => "only for a training step (kind = \"ddp\", \"fsdp\" or \"zero\"), not a collective sweep".to_string(),
            "trace" if matches!(key, "calls" | "profile" | "compute_slowdown") => return None,
            "trace" if matches!(key, "micro_batch" | "sequence" | "memory_headroom" | "parallel")
                && w.profile.is_some() =>
            {
                return None;
            }
            "trace" => "not for kind = \"trace\" (the calls file or model profile gives the step)".to_string(),
            k if SWEEP.contains(&key) => format!(
                "not for kind = \"{k}\" (the model sets the sizes and types of its calls; a collective sweep is kind = \"sweep\")"
            ),
            k if matches!(key, "calls" | "profile") => format!(
                "not for kind = \"{k}\" (a list of calls, a trace or a model profile is replayed with kind = \"trace\")"
            ),
            _ => return None,
        };
        Some((key, at, why))
    });
    if let Some((key, at, why)) = misplaced {
        return Err(src.error_at(at, format!("workload.{key}: {why}")));
    }
    if let (Some(z), false) = (&w.zero, kind == "zero") {
        return Err(src.error_at(z.span().start, "workload.zero: only for kind = \"zero\""));
    }
    // A model profile takes [workload.parallel] tp (checked with the profile).
    let profiled = kind == "trace" && w.profile.is_some();
    if let (Some(p), false) =
        (&w.parallel, matches!(kind.as_str(), "ddp" | "fsdp" | "zero") || profiled)
    {
        return Err(src.error_at(p.span().start, "workload.parallel: only for kind = \"ddp\""));
    }
    Ok(match kind.as_str() {
        "ddp" | "dp" | "fsdp" | "zero" => {
            Workload::Ddp(Box::new(ddp_workload(src, w, node, &kind)?))
        }
        "trace" => Workload::Ddp(Box::new(trace_workload(src, w, node)?)),
        "idle" => Workload::Idle,
        _ => Workload::Sweep(sweep_workload(src, w)?),
    })
}

/// Where each variable of an `[nccl]` table is given (`file:line:col`).
pub(crate) fn nccl_places(
    src: &Source<'_>,
    table: Option<&std::collections::BTreeMap<String, Spanned<toml::Value>>>,
) -> std::collections::BTreeMap<String, String> {
    table.into_iter().flatten().map(|(k, v)| (k.clone(), src.place(v.span().start))).collect()
}

/// An `[nccl]` table: NCCL_* variables (and `version`) as strings.
pub(crate) fn parse_nccl(
    src: &Source<'_>,
    table: Option<&std::collections::BTreeMap<String, Spanned<toml::Value>>>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut nccl = Vec::new();
    for (k, v) in table.into_iter().flatten() {
        if !k.starts_with("NCCL_") && k != "version" {
            return Err(src.error_at(v.span().start, format!("nccl.{k}: not an NCCL_* variable")));
        }
        let value = match v.get_ref() {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => (*b as u8).to_string(),
            _ => {
                return Err(src.error_at(
                    v.span().start,
                    format!("nccl.{k}: give the value as a string or an integer"),
                ));
            }
        };
        // A tuner file a scenario names is beside the scenario, as its other files are (on
        // the command line, --nccl's is relative to the working directory, as NCCL's is).
        let value = if k == "NCCL_TUNER_CONFIG_FILE" && Path::new(&value).is_relative() {
            beside(src, &value).display().to_string()
        } else {
            value
        };
        // A bad value is reported here, where its line is known (the whole environment is
        // parsed again when the cluster is built).
        if let Err(e) = crate::comm::env::NcclEnv::from_pairs([(k.as_str(), value.as_str())]) {
            let e = e.to_string();
            let e = if e.starts_with("nccl.") { e } else { format!("nccl.{e}") };
            return Err(src.error_at(v.span().start, e));
        }
        nccl.push((k.clone(), value));
    }
    // Values fine alone may contradict each other (NCCL_MIN_NCHANNELS above
    // NCCL_MAX_NCHANNELS): the error is put on the variable it names.
    if let Err(e) =
        crate::comm::env::NcclEnv::from_pairs(nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        let spans = || table.into_iter().flatten().map(|(_, v)| v.span().start);
        let at = table
            .and_then(|t| t.get(&e.key))
            .map(|v| v.span().start)
            .or_else(|| spans().min())
            .unwrap_or(0);
        return Err(src.error_at(at, format!("nccl.{e}")));
    }
    Ok(nccl)
}
