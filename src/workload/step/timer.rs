//! The collective timer of a training step: each distinct call on each process group timed
//! once, alone on its share of the links.

use super::StepError as Error;
use super::groups::with_siblings;
use crate::collective::{self, Load, Mode, TimingParams};
use crate::comm::Communicator;
use crate::hw::Cluster;
use crate::hw::GpuModel;
use crate::units::{Bytes, Secs, Time};
use crate::workload;

/// Collective times simulated on one cluster (its nodes, placement, NCCL variables, profile
/// and mode), by (process group, collective, nccl-tests size, dtype): DDP steps on the same
/// cluster share them. A group is named by what fixes its ranks on the cluster: the group and
/// the layout's (tp, pp, ep), so steps of different 3-D layouts (a plan's candidates) do not
/// share the times of groups that only bear the same name.
pub type CollCache = std::sync::Mutex<
    std::collections::BTreeMap<
        (GroupKey, collective::Collective, u64, workload::DataType),
        workload::ddp::CollTime,
    >,
>;

/// A process group on a cluster: the group, and the (tp, pp, ep, cp) degrees its ranks follow
/// from.
pub type GroupKey = (workload::parallel::Group, (usize, usize, usize, usize));

/// Links kept per DDP collective for its trace's link counters (the busiest first).
const LINKS_PER_CALL: usize = 8;

/// Hands `f` the GPU facts of `model` for `spec` and a timer of collectives on
/// `cluster` beside `load` (each distinct call simulated once), each group of `groups`
/// ([`step_groups`]) on its share of the links its siblings share with it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn with_ddp<R>(
    cluster: &Cluster,
    comm: &Communicator,
    model: &GpuModel,
    spec: &workload::ddp::DdpSpec,
    params: &TimingParams,
    mode: Mode,
    load: &[Load],
    cache: &CollCache,
    (shared, links): (f64, bool),
    groups: &workload::jobs::GroupComms,
    f: impl Fn(&workload::ddp::GpuFacts, &workload::parallel::GroupTimer<'_>) -> R,
) -> Result<R, Error> {
    use workload::ddp::{CollTime, ComputeRate, GpuFacts};
    use workload::parallel::Group;
    // The gradients' collective must be one NCCL_ALGO allows here, as for a sweep.
    workload::sweep::check_supported(spec.hook.grad_collective(), comm)?;
    spec.skew.check_ranks(comm.nranks()).map_err(Error::Field)?;
    if spec.sharding.is_some() && comm.nranks() < 2 {
        return Err(Error::Step(
            "kind = \"fsdp\" on one rank: PyTorch switches to NO_SHARD there, with nothing to gather or reduce; simulate one GPU as kind = \"ddp\", or give two ranks or more".into(),
        ));
    }
    let peak = |precision: &str| {
        model.peak_tflops.get(precision).map(|p| p * 1e12).ok_or_else(|| {
            Error::Step(format!("{}: no peak for {precision} in the GPU library", model.name))
        })
    };
    let memory_bandwidth = model
        .memory_bandwidth
        .ok_or_else(|| {
            Error::Step(format!(
                "{}: the GPU model has no memory_bandwidth, which DDP's copies need (add it to its [gpu_model] table)",
                model.name
            ))
        })?
        .bytes_per_sec();
    let mut gpu = GpuFacts {
        flops: 0.0,
        memory_bandwidth,
        multiprocessors: model.multiprocessors,
        launch: Secs::new(spec.launch.unwrap_or(workload::KERNEL_LAUNCH_SECS)),
        gemm_fixed: Secs::new(spec.gemm_fixed.unwrap_or(0.0)),
        ranks_per_node: comm.ppn(),
        sixteen_bit_flops: None,
    };
    gpu.flops = match &spec.rate {
        ComputeRate::Tflops(t) => t * 1e12,
        ComputeRate::Peak { precision, efficiency } => peak(precision)? * efficiency,
        ComputeRate::Mfu { precision, mfu } => {
            let peak = peak(precision)?;
            workload::ddp::rate_for_mfu(spec, &gpu, peak * mfu, peak)
                .map_err(|e| Error::Field(format!("workload.mfu = {mfu}: {e}")))?
        }
    };
    // fp8 at a fraction of its peak: what Transformer Engine keeps in 16 bits runs at the same
    // fraction of the 16-bit peak (an `mfu` or `tflops` is one rate for everything).
    if let ComputeRate::Peak { precision, efficiency } = &spec.rate
        && precision == "fp8"
    {
        gpu.sixteen_bit_flops = Some(peak("bf16")? * efficiency);
    }
    // Each group's cluster and communicator: the world's, or the group's ranks as Megatron
    // lays them out (a group of one rank sends nothing), on its share of the links its sibling
    // groups share with it (see `sharing_siblings` and `with_siblings`).
    let groups: std::collections::BTreeMap<_, _> = groups
        .iter()
        .map(|(&g, gc)| (g, with_siblings(gc.own.clone(), gc.siblings.clone())))
        .collect();
    let degrees = spec.parallel.map_or((1, 1, 1, 1), |l| (l.tp, l.pp, l.ep, l.cp));
    // A later stage's tensor- or expert-parallel group is timed as the first stage's, which
    // it translates.
    let on = |g: Group| -> Option<(&Cluster, &Communicator)> {
        match g {
            Group::StageTensor(_) => groups.get(&Group::Tensor).map(|(c, m)| (c, m)),
            Group::StageExpert(_) => groups.get(&Group::Expert).map(|(c, m)| (c, m)),
            Group::World => Some((cluster, comm)),
            g => groups.get(&g).map(|(c, m)| (c, m)),
        }
    };
    let nothing =
        || CollTime { time: Time::ZERO, algo: "", proto: "", channels: 0, links: Vec::new() };
    // `--mode detailed`: a first pass, every collective taking no time, lists the step's calls
    // and counts their work before any runs (the calls do not depend on their times).
    if mode == collective::Mode::Detailed {
        let budget = std::sync::Mutex::new(collective::run::DetailedBudget::scaled(shared));
        let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
        let count =
            |g: Group, c: collective::Collective, bytes: Bytes, dtype: workload::DataType| {
                let bytes = bytes.get();
                let Some((cluster, comm)) = on(g) else { return nothing() };
                if seen.lock().is_ok_and(|mut s| s.insert((g, c, bytes, dtype))) {
                    let spec = workload::sweep::SweepSpec::one(c, bytes, dtype);
                    let call =
                        workload::sweep::call(cluster, comm, &spec, bytes, params, mode, load);
                    if let Ok(mut b) = budget.lock() {
                        b.count(&call);
                    }
                }
                CollTime { time: Time::ZERO, algo: "", proto: "", channels: 1, links: Vec::new() }
            };
        f(&gpu, &count);
        budget.into_inner().map_or(Ok(()), |b| b.verdict()).map_err(Error::Step)?;
    }
    // Gloo's collectives run on the host: copied over PCIe, summed and sent over TCP.
    let gloo = (spec.backend == workload::ddp::Backend::Gloo)
        .then(|| collective::gloo::GlooNet::of(cluster, comm.ppn()));
    let coll = |g: Group, c: collective::Collective, bytes: Bytes, dtype: workload::DataType| {
        let bytes = bytes.get();
        let Some((cluster, comm)) = on(g) else { return nothing() };
        if collective::in_place_no_op(comm.nranks(), c) {
            return nothing();
        }
        if let Some(net) = &gloo {
            let algo = collective::gloo::GlooAlgo::Ring;
            let t = collective::gloo::time(net, c, bytes, comm.nranks(), comm.nnodes(), algo);
            return CollTime {
                time: Time::from_secs_f64_ceil(t.total),
                algo: algo.name(),
                proto: "TCP",
                channels: 0,
                links: Vec::new(),
            };
        }
        let g = match g {
            Group::StageTensor(_) => Group::Tensor,
            Group::StageExpert(_) => Group::Expert,
            g => g,
        };
        let key = ((g, degrees), c, bytes, dtype);
        if let Some(t) = cache.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return t;
        }
        let spec = workload::sweep::SweepSpec::one(c, bytes, dtype);
        let call = workload::sweep::call(cluster, comm, &spec, bytes, params, mode, load);
        let row = workload::sweep::row(&spec, &call, &collective::simulate(&call));
        // The busiest few links, for traces.
        let links = if links {
            let busiest = collective::run::link_utilisation(&call).into_iter().take(LINKS_PER_CALL);
            busiest.map(|(l, u)| (cluster.link_label(l), u)).collect()
        } else {
            Vec::new()
        };
        let t = CollTime {
            time: Time::from_us_f64(row.time_us),
            algo: row.algo,
            proto: row.proto,
            channels: row.channels,
            links,
        };
        if let Ok(mut m) = cache.lock() {
            m.insert(key, t.clone());
        }
        t
    };
    Ok(f(&gpu, &coll))
}
