//! Memory per GPU of a DDP step: what must fit in one GPU's device memory for the step to run.
//!
//! Plain DDP keeps a whole replica on every GPU (`../shared/reference/ddp.md` §3.4):
//!
//! * **parameters** and **gradients**, each in the parameter's dtype (PyTorch gives a gradient
//!   its parameter's dtype; `grad_dtype` is both);
//! * **fp32 master weights** (4 bytes per parameter) where the parameters are 16-bit and an
//!   optimizer updates them: the mixed-precision optimizers of Megatron-LM, DeepSpeed and
//!   Apex keep them;
//! * **optimizer state** in fp32: Adam, AdamW and LAMB two moments (8 bytes per parameter),
//!   SGD with momentum one buffer (4), plain SGD none;
//! * **DDP's buckets**: a second copy of every gradient, unless `gradient_as_bucket_view`;
//! * **autocast's weight cache**: under 16-bit autocast with fp32 parameters, a 16-bit copy of
//!   every weight used in forward lives until backward has used it (2 bytes per parameter);
//! * **activations** for one micro-batch (the model's estimate, [`super::models::Model::act_bytes`];
//!   twice that with fp32/tf32 activations);
//! * or, where it is larger than the activations, what the **optimizer step** allocates while
//!   it runs, when the activations are freed ([`step_transient`]);
//! * a **runtime reserve** of 1.5 GiB: the CUDA context (about 0.5 GiB on A100/H100) and NCCL's
//!   channel buffers (about 1 GiB with 32 channels of 2 peers at the default NCCL_BUFFSIZE and
//!   the LL/LL128/Simple protocols). An assumption, not a measurement.
//!
//! Left out: the caching allocator's fragmentation, temporary buffers of communication hooks,
//! and workspace of cuBLAS/cuDNN. The estimate is a floor.

use super::DataType;
use super::ddp::DdpSpec;
use super::ddp::ShardingStrategy;

/// A gibibyte, bytes.
pub const GIB: f64 = 1073741824.0;

/// The share of a GPU's memory a step's modelled peak may not take by default
/// (`memory_headroom`): what PyTorch's caching allocator holds beyond the tensors it hands out
/// (rounded and split blocks, segments kept for reuse) and the model does not count. Source: the
/// one allocator limit measured for this project (issue #46): Hugging Face's GPT-2 XL at a
/// micro-batch of 8, eager PyTorch with bf16 autocast and fused AdamW, ran out of memory on an
/// 80 GB H100 (79.6 GiB) with 75.8 GiB allocated: 3.8 GiB, 4.8 % of the device, could not be
/// handed out; less the ~0.5 GiB CUDA context that is 4.2 %, rounded up to 5 %. Measured since
/// by `calibration/trace/profile_model.py` on 23 steps on one H200
/// (`calibration/data/2026-11-30-h200-hf`), the share of `max_memory_reserved` that
/// `max_memory_allocated` leaves is 0.7–7.3 % for language models (median 2.8 %) and 9.6–18.1
/// % for ResNet-50, where it grows with the batch: 5 % covers the language models' median and
/// not their worst, nor a CNN.
pub const DEFAULT_HEADROOM: f64 = 0.05;

/// A headroom as a percentage for reports: "5", "7", "28.5" (to a tenth, never "-0").
pub fn headroom_pct(headroom: f64) -> String {
    format!("{}", (headroom * 1000.0).round() / 10.0 + 0.0)
}

/// The runtime reserve (CUDA context and NCCL buffers), bytes.
pub const RUNTIME_RESERVE: f64 = 1.5 * GIB;

/// The optimizer whose state each GPU holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// `torch.optim.Adam`: two fp32 moments.
    Adam,
    /// `torch.optim.AdamW`: two fp32 moments.
    AdamW,
    /// LAMB: two fp32 moments.
    Lamb,
    /// SGD with momentum: one fp32 buffer.
    SgdMomentum,
    /// Plain SGD: no state.
    Sgd,
    /// No optimizer state on the GPU (held elsewhere, e.g. sharded); no master weights.
    None,
}

impl Optimizer {
    /// The names scenario and plan files use.
    pub const NAMES: &'static str = "adam, adamw, lamb, sgd_momentum, sgd, none";

    /// Parses a name as scenario files spell it.
    pub fn parse(s: &str) -> Option<Optimizer> {
        Some(match s {
            "adam" => Optimizer::Adam,
            "adamw" => Optimizer::AdamW,
            "lamb" => Optimizer::Lamb,
            "sgd_momentum" => Optimizer::SgdMomentum,
            "sgd" => Optimizer::Sgd,
            "none" => Optimizer::None,
            _ => return None,
        })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
            Optimizer::Lamb => "lamb",
            Optimizer::SgdMomentum => "sgd_momentum",
            Optimizer::Sgd => "sgd",
            Optimizer::None => "none",
        }
    }

    /// fp32 state bytes per parameter.
    pub fn state_bytes(self) -> u64 {
        match self {
            Optimizer::Adam | Optimizer::AdamW | Optimizer::Lamb => 8,
            Optimizer::SgdMomentum => 4,
            Optimizer::Sgd | Optimizer::None => 0,
        }
    }
}

/// How PyTorch runs the optimizer's update: one kernel per operation per tensor (`foreach =
/// False`), operations over lists of tensors (`foreach`, the CUDA default since PyTorch 2.0),
/// or one fused kernel (`fused = True`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerImpl {
    /// `foreach = False`: every operation a kernel per tensor.
    ForLoop,
    /// `foreach = True`: every operation one pass over the tensor lists.
    Foreach,
    /// `fused = True`: one pass reading and writing each value once.
    Fused,
}

impl OptimizerImpl {
    /// The names scenario files use.
    pub const NAMES: &'static str = "foreach, fused, for_loop";

    /// Parses a name as scenario files spell it.
    pub fn parse(s: &str) -> Option<OptimizerImpl> {
        Some(match s {
            "foreach" => OptimizerImpl::Foreach,
            "fused" => OptimizerImpl::Fused,
            "for_loop" => OptimizerImpl::ForLoop,
            _ => return None,
        })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerImpl::ForLoop => "for_loop",
            OptimizerImpl::Foreach => "foreach",
            OptimizerImpl::Fused => "fused",
        }
    }
}

/// What one optimizer step moves through device memory, per parameter, and the passes it
/// makes over the tensors (each pass a kernel per tensor list, or per tensor for a loop).
///
/// Counted from PyTorch's implementations (torch/optim/adam.py `_multi_tensor_adam`,
/// sgd.py `_multi_tensor_sgd`) in fp32 accesses of 4 bytes: foreach Adam runs `lerp_` on the
/// first moment (read m and g, write m: 3), `mul_` and `addcmul_` on the second (2 and 4),
/// `sqrt`, `div_` and `add_` on a temporary (2 each), and `addcdiv_` into the parameters (4):
/// 19 accesses, 76 bytes; AdamW's decoupled decay adds a `mul_` (2). Fused Adam reads p, g, m
/// and v and writes p, m and v once (28). SGD with momentum: foreach `mul_`, `add_`, `add_`
/// (32), fused 20; plain SGD one `add_` (12). LAMB is not in torch.optim: Apex's FusedLAMB,
/// whatever `impl` says: the update (read g, m, v, p; write m, v, update: 28), the norms of p
/// and the update (8), the apply (read p and update, write p: 12) — 44 bytes in 3 passes
/// (taken as 4 byte-for-byte: the norm pass's reduction is not costed apart).
///
/// 16-bit parameters with fp32 master weights add the gradient's cast up (read 2, write 4)
/// and the parameter's cast down (read 4, write 2): 12 bytes and 2 passes.
pub fn step_traffic(opt: Optimizer, imp: OptimizerImpl, master: bool) -> (f64, usize) {
    use Optimizer::*;
    use OptimizerImpl::*;
    let (bytes, passes) = match (opt, imp) {
        (None, _) => return (0.0, 0),
        (Adam, Fused) | (AdamW, Fused) => (28.0, 1),
        (Adam, _) => (76.0, 7),
        (AdamW, _) => (84.0, 8),
        (Lamb, _) => (44.0, 3),
        (SgdMomentum, Fused) => (20.0, 1),
        (SgdMomentum, _) => (32.0, 3),
        (Sgd, _) => (12.0, 1),
    };
    if master { (bytes + 12.0, passes + 2) } else { (bytes, passes) }
}

/// Memory per GPU of a DDP step, bytes, by what holds it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DdpMemory {
    /// Parameters.
    pub params: f64,
    /// Gradients.
    pub grads: f64,
    /// fp32 master weights of 16-bit parameters.
    pub master: f64,
    /// Optimizer state.
    pub optimizer: f64,
    /// DDP's bucket copies of the gradients.
    pub buckets: f64,
    /// FSDP's all-gathered units in flight and its reduce-scatter buffer.
    pub unsharded: f64,
    /// DataParallel's whole batch, on GPU 0 before it is scattered, and the outputs gathered
    /// onto it (every GPU's, kept until backward, with their gradients where the loss is
    /// computed there): GPU 0's memory, the most loaded.
    pub gathered: f64,
    /// Autocast's 16-bit weight cache.
    pub autocast: f64,
    /// A model profile's memory at its step's start, as the allocator measured it (weights,
    /// gradients, optimizer state, buckets: whatever the step held), or its whole peak where
    /// the start was not measured.
    pub measured: f64,
    /// Activations of one micro-batch.
    pub activations: f64,
    /// What the optimizer step allocates while it runs, when the micro-batch's activations are
    /// freed ([`step_transient`]): the step's peak is the rest plus the larger of the two.
    pub step_transient: f64,
    /// CUDA context and NCCL buffers.
    pub runtime: f64,
    /// The sum.
    pub total: f64,
    /// Whether the model's activations are known (custom layers without `activations` count
    /// 0).
    pub activations_known: bool,
}

/// Whether the step's math runs in 16 bits (activations and autocast): the compute rate's
/// precision, or 16-bit gradients when only a rate is given.
pub(crate) fn sixteen_bit(spec: &DdpSpec) -> bool {
    match spec.rate.precision() {
        Some(p) => !matches!(p, "fp32" | "tf32"),
        None => spec.model.grad_dtype != DataType::Float,
    }
}

/// [`ddp_memory`] where the step says what it holds: none for a replayed list of calls, whose
/// model is not known.
pub fn known_memory(spec: &DdpSpec, world: usize, ranks_per_node: usize) -> Option<DdpMemory> {
    if let Some(named) = &spec.profile {
        return named.memory().map(profiled_memory);
    }
    spec.calls.is_none().then(|| ddp_memory(spec, world, ranks_per_node))
}

/// A model profile's memory as the allocator measured it, carried to the step's shape
/// ([`super::profile::Memory::carried`]): what it held at the step's start, the larger of
/// what forward and backward added and what the optimizer step did, and the runtime reserve,
/// which the allocator does not count. The same on every rank: the step as traced holds its
/// gradients and DDP's buckets whole.
pub fn profiled_memory(m: super::profile::CarriedMemory) -> DdpMemory {
    DdpMemory {
        params: 0.0,
        grads: 0.0,
        master: 0.0,
        optimizer: 0.0,
        buckets: 0.0,
        unsharded: 0.0,
        gathered: 0.0,
        autocast: 0.0,
        measured: m.kept,
        activations: m.activations,
        step_transient: m.optimizer,
        runtime: RUNTIME_RESERVE,
        total: 0.0,
        activations_known: true,
    }
    .totalled()
}

/// The headroom a measured step leaves the allocator: the share of what it reserved that it
/// did not hand out at its peak (1 - allocated/reserved), measured at one shape on one GPU, so
/// never below the default (which rests on an out-of-memory failure), at most the 0.5 a
/// scenario may give (a profile refuses reserved over twice allocated).
pub fn measured_headroom(m: &super::profile::Memory) -> f64 {
    (1.0 - m.max_allocated as f64 / m.max_reserved as f64).clamp(DEFAULT_HEADROOM, 0.5)
}

/// Memory per GPU of `spec` on `world` ranks: plain DDP's, or FSDP's when the step is
/// sharded.
pub fn ddp_memory(spec: &DdpSpec, world: usize, ranks_per_node: usize) -> DdpMemory {
    if let Some(layout) = &spec.parallel {
        return super::parallel::memory(spec, layout, world);
    }
    match spec.sharding {
        Some(sh) if matches!(sh.strategy, ShardingStrategy::Zero1 | ShardingStrategy::Zero2) => {
            zero_memory(spec, sh, world)
        }
        Some(sh) => fsdp_memory(spec, sh, sh.strategy.shard_ranks(world, ranks_per_node)),
        None if spec.data_parallel.is_some() => dp_memory(spec, world),
        None => plain_ddp_memory(spec),
    }
}

/// GPU 0's memory under DataParallel on `world` GPUs: the model, its gradients and the
/// optimizer's state as one GPU holds them (no DDP buckets: the gradients are reduced through
/// 10 MiB flattened chunks), its replica's activations, the whole batch (the user's loop puts
/// it on GPU 0 before the forward scatters it) and every GPU's outputs gathered to it (with
/// their gradients where the loss is computed on GPU 0).
fn dp_memory(spec: &DdpSpec, world: usize) -> DdpMemory {
    let mut m = plain_ddp_memory(spec);
    m.buckets = 0.0;
    if let Some(dp) = spec.data_parallel.filter(|_| world > 1) {
        let samples = spec.micro_batch as f64 * world as f64;
        let outputs = dp.output_bytes as f64 * samples;
        let outputs = if dp.loss_on_first { 2.0 * outputs } else { outputs };
        m.gathered = dp.sample_bytes as f64 * samples + outputs;
    }
    m.totalled()
}

/// Memory per GPU of a DeepSpeed ZeRO stage 1 or 2 step on `world` ranks (the ZeRO paper's
/// 2Ψ + 2Ψ + 12Ψ/N for stage 1 with Adam in mixed precision, 2Ψ + 14Ψ/N for stage 2): whole
/// parameters in `param_dtype`; gradients whole (stage 1) or a 1/world partition plus the
/// reduction bucket being filled (stage 2); fp32 master weights (when the parameters are 16-bit)
/// and optimizer state over the rank's partition.
fn zero_memory(spec: &DdpSpec, sh: super::ddp::Sharding, world: usize) -> DdpMemory {
    let m = &spec.model;
    let w = world.max(1) as f64;
    let numel = m.tensors().map(|t| t.numel as f64).sum::<f64>();
    let p = sh.param_dtype.size() as f64;
    let params = numel * p;
    let bucket = sh.zero.map_or(0.0, |z| z.reduce_bucket as f64).min(numel) * p;
    let (grads, buckets) = match sh.strategy {
        ShardingStrategy::Zero1 => (numel * p, 0.0),
        _ => (numel * p / w, bucket),
    };
    let master = if sh.param_dtype == DataType::Float { 0.0 } else { 4.0 * numel / w };
    let optimizer = spec.optimizer.state_bytes() as f64 * numel / w;
    let (activations, known) = sharded_activations(spec);
    // The step runs over the rank's partition: foreach Adam's temporary is the partition's.
    let step_transient = step_transient(spec, numel / w, 0.0);
    DdpMemory {
        params,
        grads,
        master,
        optimizer,
        buckets,
        unsharded: 0.0,
        gathered: 0.0,
        autocast: 0.0,
        measured: 0.0,
        activations,
        step_transient,
        runtime: RUNTIME_RESERVE,
        total: 0.0,
        activations_known: known,
    }
    .totalled()
}

/// Memory per GPU of an FSDP step on `world` ranks: each rank holds 1/world of every unit's
/// flat parameter (padded), of its gradient and of the optimizer state; fp32 shards of 16-bit
/// parameters under MixedPrecision are the master weights (FSDP keeps the sharded parameters
/// in their own dtype and casts for the all-gather). Besides, the all-gathered parameters of
/// the units in flight: `limit_all_gathers` keeps about two (one computing, one gathering),
/// counted as twice the largest unit in `param_dtype` (SHARD_GRAD_OP: every unit, kept from
/// forward to backward; without the limit, every unit: the most a host running ahead of the
/// GPU can have gathered), and the reduce-scatter's full-size
/// gradient of one unit in `reduce_dtype`. Activations as under DDP.
fn fsdp_memory(spec: &DdpSpec, sh: super::ddp::Sharding, world: usize) -> DdpMemory {
    let m = &spec.model;
    let w = world.max(1) as u64;
    let unit = |l: &super::models::Layer| l.tensors.iter().map(|t| t.numel).sum::<u64>();
    let (mut shard, mut largest, mut whole) = (0u64, 0u64, 0u64);
    for l in &m.layers {
        let n = unit(l);
        shard += n.div_ceil(w);
        largest = largest.max(n.div_ceil(w) * w);
        whole += n.div_ceil(w) * w;
    }
    let shard = shard as f64;
    // SHARD_GRAD_OP keeps every unit's gathered parameters from its forward to its backward;
    // without limit_all_gathers a host running ahead gathers up to every unit at once.
    let live = if sh.strategy.reshards_after_forward() && sh.limit_all_gathers {
        2 * largest
    } else {
        whole
    };
    let params = shard * m.grad_dtype.size() as f64;
    let grads = params;
    let master = 0.0;
    let optimizer = spec.optimizer.state_bytes() as f64 * shard;
    let mut gathered = live as f64 * sh.param_dtype.size() as f64;
    let mut reducing = largest as f64 * sh.reduce_dtype.size() as f64;
    // NO_SHARD gathers nothing: a unit's parameters are cast to another param_dtype (mixed
    // precision) before its forward and freed after (two units live, as FULL_SHARD's gathered
    // ones), and its gradients reduce in place unless cast to reduce_dtype.
    if sh.strategy == super::ddp::ShardingStrategy::NoShard {
        gathered = 2.0 * largest as f64 * sh.param_dtype.size() as f64;
        if sh.param_dtype == m.grad_dtype {
            gathered = 0.0;
        }
        if sh.reduce_dtype == m.grad_dtype {
            reducing = 0.0;
        }
    }
    // Inside no_sync(), the whole gradients accumulate unsharded (NO_SHARD's are whole anyway).
    if sh.no_sync
        && spec.grad_accumulation > 1
        && sh.strategy != super::ddp::ShardingStrategy::NoShard
    {
        reducing += whole as f64 * m.grad_dtype.size() as f64;
    }
    let (activations, known) = sharded_activations(spec);
    DdpMemory {
        params,
        grads,
        master,
        optimizer,
        buckets: 0.0,
        unsharded: gathered + reducing,
        gathered: 0.0,
        autocast: 0.0,
        measured: 0.0,
        activations,
        // Over the rank's shard: foreach Adam's temporary is the shard's.
        step_transient: step_transient(spec, shard, 0.0),
        runtime: RUNTIME_RESERVE,
        total: 0.0,
        activations_known: known,
    }
    .totalled()
}

/// A sharded step's activations per GPU (its micro-batch's, as under DDP; twice the bytes
/// outside 16-bit training) and whether the model says what they are.
fn sharded_activations(spec: &DdpSpec) -> (f64, bool) {
    let per_sample = kept_activations(spec);
    let width = if sixteen_bit(spec) { 1.0 } else { 2.0 };
    (per_sample * spec.micro_batch as f64 * width, per_sample > 0.0)
}

/// Activation bytes per sample at the step's peak (16-bit): the model's kept for backward, but
/// for checkpointed blocks, which keep their 16-bit input (2 bytes a token and hidden unit);
/// and on top, one at a time, a checkpointed block's whole activations again while it
/// recomputes and runs backward, or a layer's backward transient (the loss's gradients over
/// the vocabulary), whichever is larger.
pub(crate) fn kept_activations(spec: &DdpSpec) -> f64 {
    let on = spec.checkpointing.layers(&spec.model);
    let (mut kept, mut largest) = (0.0, 0.0f64);
    for (l, &ck) in spec.model.layers.iter().zip(&on) {
        largest = largest.max(l.transient_bytes);
        match l.parallel {
            Some(p) if ck => {
                kept += 2.0 * (p.hidden * p.tokens) as f64;
                largest = largest.max(l.act_bytes);
            }
            _ => kept += l.act_bytes,
        }
    }
    kept + largest
}

/// Memory per GPU of `spec` under plain DDP.
pub(crate) fn plain_ddp_memory(spec: &DdpSpec) -> DdpMemory {
    let m = &spec.model;
    let half = sixteen_bit(spec);
    let (mut params, mut master, mut autocast, mut numel) = (0.0, 0.0, 0.0, 0.0);
    let mut sixteen_bit_grads = 0.0;
    for t in m.tensors() {
        let n = t.numel as f64;
        numel += n;
        params += m.grad_bytes(t) as f64;
        let fp32 = m.dtype_of(t) == DataType::Float;
        if !fp32 && spec.optimizer != Optimizer::None {
            master += 4.0 * n;
            if m.grad_bytes(t) < 4 * t.numel {
                sixteen_bit_grads += n;
            }
        }
        if fp32 && half {
            autocast += 2.0 * n;
        }
    }
    let grads = params;
    let optimizer = spec.optimizer.state_bytes() as f64 * numel;
    let buckets = if spec.gradient_as_bucket_view { 0.0 } else { grads };
    let per_sample = kept_activations(spec);
    let activations = per_sample * spec.micro_batch as f64 * if half { 1.0 } else { 2.0 };
    DdpMemory {
        params,
        grads,
        master,
        optimizer,
        buckets,
        unsharded: 0.0,
        gathered: 0.0,
        autocast,
        measured: 0.0,
        activations,
        step_transient: step_transient(spec, numel, sixteen_bit_grads),
        runtime: RUNTIME_RESERVE,
        total: 0.0,
        activations_known: per_sample > 0.0,
    }
    .totalled()
}

/// What the optimizer step of `numel` parameters allocates while it runs, bytes, beyond the
/// states it keeps:
///
/// * where 16-bit gradients have fp32 master weights (`sixteen_bit_grads` of them), an fp32
///   copy of each gradient, all alive until the update: Megatron-LM's mixed-precision
///   optimizer sets `main_param.grad = model_param.main_grad.float()` for every parameter
///   before it steps (`_copy_model_grads_to_main_grads`, megatron/core/optimizer/optimizer.py,
///   NVIDIA/Megatron-LM d98e8a64), 4 bytes a parameter, freed at the next `zero_grad`;
/// * foreach Adam/AdamW's temporary, `torch._foreach_sqrt` of the second moments over every
///   parameter at once (torch/optim/adam.py `_multi_tensor_adam`, the same pass
///   [`step_traffic`] counts), 4 bytes a parameter; the fused and per-tensor steps allocate
///   nothing that size.
///
/// Measured (`calibration/data/2026-11-27-h200-megatron`, fp16 parameters with fp32 masters
/// and fused AdamW): a 24-layer, 1,024-wide GPT at one sample of 1,024 tokens peaks at 6.87
/// GiB allocated, the 16 bytes a parameter it keeps (5.29 GiB) plus 1.58 GiB, more than its
/// checkpoints and logits take (0.35 GiB) and about the 1.32 GiB of fp32 gradients.
pub(crate) fn step_transient(spec: &DdpSpec, numel: f64, sixteen_bit_grads: f64) -> f64 {
    let temporary = if foreach_adam(spec) { 4.0 * numel } else { 0.0 };
    4.0 * sixteen_bit_grads + temporary
}

/// Whether the step is foreach Adam or AdamW, which allocates a temporary the size of the
/// parameters ([`step_transient`]).
pub(crate) fn foreach_adam(spec: &DdpSpec) -> bool {
    matches!(spec.optimizer, Optimizer::Adam | Optimizer::AdamW)
        && spec.optimizer_impl == OptimizerImpl::Foreach
}

impl DdpMemory {
    /// Megatron's distributed optimizer over `dp` data-parallel ranks
    /// (`docs/user-guide/features/dist_optimizer.md`, NVIDIA/Megatron-LM d98e8a64: 6 + 12/d
    /// bytes a parameter for bf16 weights and fp32 gradients, 4 + 16/d for fp16 both): the
    /// optimizer state and the fp32 master weights are sharded. Where the parameters are held
    /// in fp32 with autocast's 16-bit copy, that copy is the model's weights and the fp32
    /// parameters are the masters; where the gradients are 16-bit, each rank also keeps its
    /// shard of them in fp32 (as many bytes as its masters). Without an optimizer there is
    /// nothing to shard.
    /// `foreach_adam`: the step is foreach Adam/AdamW, whose temporary ([`step_transient`]) is
    /// then over the rank's shard.
    pub fn shard_optimizer(&mut self, dp: usize, foreach_adam: bool) {
        if self.optimizer == 0.0 && self.master == 0.0 {
            return;
        }
        let d = dp.max(1) as f64;
        let fp32_params = if self.autocast > 0.0 {
            std::mem::replace(&mut self.params, std::mem::take(&mut self.autocast))
        } else {
            0.0
        };
        // 16-bit parameters with fp32 masters: the gradients are 16-bit too, and the shard's
        // fp32 copy of them is counted as kept (the step's copy of the whole is not made).
        let fp32_grads = if fp32_params == 0.0 { self.master } else { 0.0 };
        self.master = (self.master + fp32_params + fp32_grads) / d;
        self.optimizer /= d;
        // Adam's 8 bytes of state a parameter: its temporary, 4, is half of them.
        self.step_transient = if foreach_adam { self.optimizer / 2.0 } else { 0.0 };
        *self = self.clone().totalled();
    }

    /// With `total` summed: what is kept, plus the larger of the micro-batch's activations and
    /// the optimizer step's temporaries (the two are never alive together).
    pub fn totalled(mut self) -> Self {
        self.total = self.params
            + self.grads
            + self.master
            + self.optimizer
            + self.buckets
            + self.unsharded
            + self.gathered
            + self.autocast
            + self.measured
            + self.activations.max(self.step_transient)
            + self.runtime;
        self
    }

    /// "params 5.8 + grads 5.8 + …": the non-zero parts, GiB; the activations and the
    /// optimizer step's temporaries as "max(activations 1.2, optimizer step 2.6)" where the
    /// step has any.
    pub fn parts(&self) -> String {
        let gib = |b: f64| format!("{:.1}", b / GIB);
        let peak = if self.step_transient > 0.0 {
            Some(format!(
                "max(activations {}, optimizer step {})",
                gib(self.activations),
                gib(self.step_transient)
            ))
        } else {
            (self.activations > 0.0).then(|| format!("activations {}", gib(self.activations)))
        };
        let kept = [
            ("params", self.params),
            ("grads", self.grads),
            ("fp32 master", self.master),
            ("optimizer", self.optimizer),
            ("buckets", self.buckets),
            ("unsharded units", self.unsharded),
            ("batch and gathered outputs", self.gathered),
            ("autocast cache", self.autocast),
            ("measured", self.measured),
        ];
        kept.iter()
            .filter(|(_, b)| *b > 0.0)
            .map(|(n, b)| format!("{n} {}", gib(*b)))
            .chain(peak)
            .chain((self.runtime > 0.0).then(|| format!("runtime {}", gib(self.runtime))))
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// Why it does not fit in `capacity` bytes of device memory, or None if it fits.
    pub fn misfit(&self, capacity: f64, headroom: f64) -> Option<String> {
        let usable = capacity * (1.0 - headroom);
        (self.total > usable).then(|| {
            format!(
                "needs {:.1} GiB per GPU ({} GiB), the GPU has {:.1} GiB{}",
                self.total / GIB,
                self.parts(),
                capacity / GIB,
                if headroom > 0.0 {
                    format!(
                        ", {:.1} of it usable with {} % kept for the allocator (memory_headroom)",
                        usable / GIB,
                        headroom_pct(headroom)
                    )
                } else {
                    String::new()
                }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(params: f64, grads: f64, master: f64, optimizer: f64, autocast: f64) -> DdpMemory {
        DdpMemory {
            params,
            grads,
            master,
            optimizer,
            buckets: 0.0,
            unsharded: 0.0,
            gathered: 0.0,
            autocast,
            measured: 0.0,
            activations: 0.0,
            step_transient: 0.0,
            runtime: 0.0,
            total: params + grads + master + optimizer + autocast,
            activations_known: true,
        }
    }

    #[test]
    fn the_distributed_optimizer_keeps_megatrons_bytes_a_parameter() {
        // Megatron-LM's dist_optimizer.md: bf16 weights with fp32 gradients 18 -> 6 + 12/d,
        // fp16 both 20 -> 4 + 16/d (the fp32 gradient shard with the masters).
        let d = 8.0;
        let mut bf16 = memory(4.0, 4.0, 0.0, 8.0, 2.0);
        bf16.shard_optimizer(8, false);
        assert_eq!(bf16.total, 6.0 + 12.0 / d);
        let mut fp16 = memory(2.0, 2.0, 4.0, 8.0, 0.0);
        fp16.shard_optimizer(8, false);
        assert_eq!(fp16.total, 4.0 + 16.0 / d);
        // Without an optimizer there is nothing to shard.
        let mut none = memory(4.0, 4.0, 0.0, 0.0, 2.0);
        none.shard_optimizer(8, false);
        assert_eq!(none.total, 10.0);
        // Foreach Adam's temporary is over the shard: half its 8 bytes of state.
        let mut foreach = memory(2.0, 2.0, 4.0, 8.0, 0.0);
        foreach.step_transient = 8.0;
        foreach.shard_optimizer(8, true);
        assert_eq!(foreach.total, 4.0 + 16.0 / d + 4.0 / d);
    }

    #[test]
    fn the_peak_is_the_larger_of_the_activations_and_the_optimizer_steps_temporaries() {
        // Megatron's fp16 parameters and gradients with fp32 masters: 16 bytes kept and, in
        // the step, an fp32 copy of every gradient (4), which outgrows small activations.
        let mut m = memory(2.0, 2.0, 4.0, 8.0, 0.0);
        (m.activations, m.step_transient) = (1.0, 4.0);
        assert_eq!(m.totalled().total, 20.0);
        let mut m = memory(2.0, 2.0, 4.0, 8.0, 0.0);
        (m.activations, m.step_transient) = (6.0, 4.0);
        let m = m.totalled();
        assert_eq!(m.total, 22.0);
        assert!(m.parts().contains("max(activations 0.0, optimizer step 0.0)"), "{}", m.parts());
    }
}
