//! collsim: a discrete-event, flow-level simulator of GPU-cluster collective communication.
//!
//! Data flows one way through the layers:
//!
//! * [`config`] reads scenario, topology and profile TOML files in two stages (raw serde
//!   structs, then validation into typed values with file:line:col errors); [`units`] parses
//!   every quantity ("400 Gb/s", "1.5 us", "64 MiB") exactly.
//! * [`hw`] expands a node template × node count into directed links (NVLink through an
//!   aggregated NVSwitch, PCIe switches, CPU sockets, NICs into a non-blocking switch layer)
//!   with routes between GPUs and NICs.
//! * [`comm`] builds what NCCL builds over those ranks: the channel search, CUDA channels and
//!   ring orders, and the per-call algorithm/protocol choice with NCCL's cost model.
//! * [`collective`] turns a call into steps, chunks and slices on channels, and those into
//!   flows on the [`net`]work (max-min fair sharing). Every algorithm is one type implementing
//!   [`collective::Algorithm`], registered in `collective/run.rs`, and runs in the [`engine`]'s
//!   one deterministic loop ([`engine::Simulation`]: clock, events, network), where several
//!   calls and background traffic can share the links. NCCL's latency numbers choose; the
//!   simulation times.
//! * [`workload`] issues the calls (an nccl-tests-like sweep, a DDP step, several jobs side by
//!   side with background traffic), [`report`] formats the results, [`calibrate`] reads real
//!   nccl-tests logs, fits profiles and measures the model's error against them.
//!
//! Each layer knows only the ones below it: the engine knows nothing of GPUs, the network
//! knows links and flows but not collectives.

#![warn(missing_docs)]

pub mod calibrate;
pub mod collective;
pub mod comm;
pub mod config;
pub mod engine;
pub mod hw;
pub mod net;
pub mod plan;
pub mod report;
pub mod units;
pub mod workload;

use collective::{Load, Mode, TimingParams};
use comm::env::{EnvError, NcclEnv};
use comm::{CommError, Communicator};
use config::Scenario;
use hw::{Cluster, NodeId};
use report::CommSummary;
use workload::sweep::{Row, SweepError};

/// Any error the library reports; each displays as one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Bad input file.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// Bad NCCL variable.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The communicator cannot be built.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The sweep cannot run.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The validation cannot run.
    #[error(transparent)]
    Validate(#[from] calibrate::validate::ValidateError),
    /// The placement or the network does not fit the cluster's node count.
    #[error("{0}")]
    Placement(String),
    /// The training step cannot be simulated.
    #[error("{0}")]
    Ddp(String),
    /// The training step passes [`units::Time::LIMIT`]: which inputs set it (the caller names
    /// the file they came from).
    #[error("{0}")]
    StepTooLong(String),
}

/// A cluster and the communicator NCCL would build on it, for a scenario.
pub fn build(scenario: &Scenario) -> Result<(Cluster, Communicator, CommSummary), Error> {
    let env = NcclEnv::from_pairs(scenario.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let cluster = machine(scenario, &env, scenario.gpus_per_node)?;
    let comm = Communicator::new(&cluster, &env)?.with_gpus_per_process(scenario.gpus_per_process);
    let summary = summary(&comm, &env);
    Ok((cluster, comm, summary))
}

/// `nodes` of `gpus_per_node` GPUs within [`config::MAX_RANKS`].
pub fn check_ranks(nodes: usize, gpus_per_node: usize) -> Result<(), String> {
    let ranks = nodes.saturating_mul(gpus_per_node);
    if ranks > config::MAX_RANKS {
        return Err(format!(
            "{nodes} nodes of {gpus_per_node} GPUs are {ranks} ranks, more than the {} collsim simulates",
            config::MAX_RANKS
        ));
    }
    Ok(())
}

/// Where a calibrated `profile` was fitted on another setup than the run of `s`: which of
/// topology, GPU model and NCCL release (by the cost-model tables it maps to) differ, as one
/// warning. `None` where they agree or the profile records none.
pub fn profile_mismatch(profile: &TimingParams, s: &Scenario) -> Option<String> {
    let on = profile.fitted_on.as_ref()?;
    let env = NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str()))).ok()?;
    let run_tables = env.version.tables();
    let fit_tables = comm::tuning::NcclVersion::parse(&on.nccl).map(|v| v.tables());
    let mut differ = Vec::new();
    if on.topology != s.node.name {
        differ.push(format!("topology {} (this run: {})", on.topology, s.node.name));
    }
    if on.gpu != s.node.gpu.model.name {
        differ.push(format!("GPU {} (this run: {})", on.gpu, s.node.gpu.model.name));
    }
    if fit_tables.is_some_and(|t| t != run_tables) {
        differ.push(format!("NCCL {} (this run's tables: {run_tables})", on.nccl));
    }
    (!differ.is_empty()).then(|| {
        format!(
            "profile {:?} was fitted on {}; its fitted values may not hold here",
            profile.name,
            differ.join(", ")
        )
    })
}

/// Every node of the scenario's cluster with `gpus_per_node` GPUs used on each, on its
/// network and placement.
fn machine(scenario: &Scenario, env: &NcclEnv, gpus_per_node: usize) -> Result<Cluster, Error> {
    check_ranks(scenario.nodes, gpus_per_node).map_err(Error::Placement)?;
    hw::fabric::check(&scenario.node, scenario.nodes).map_err(|e| {
        // The fabric is the topology's, the node count the scenario's (or --nodes): name both.
        let topology = match &scenario.topology {
            config::TopologySource::Preset(name) => format!("topology {name}"),
            config::TopologySource::File(path) => path.display().to_string(),
        };
        Error::Placement(format!("{topology}: {e} (with {} nodes)", scenario.nodes))
    })?;
    let placement =
        scenario.placement.resolve(&scenario.node, scenario.nodes).map_err(Error::Placement)?;
    Ok(Cluster::with_network(
        &scenario.node,
        scenario.nodes,
        gpus_per_node,
        &placement,
        env.socket_streams,
    ))
}

fn summary(comm: &Communicator, env: &NcclEnv) -> CommSummary {
    CommSummary {
        nranks: comm.nranks(),
        ring_graph: comm.ring_graph(),
        nvls_graph: comm.nvls_graph(),
        cuda_channels: comm.channels().len(),
        nccl_tables: env.version.tables(),
        ignored_nccl: env.ignored.clone(),
    }
}

/// The scenario's `[[background]]` traffic on `machine`.
fn background(scenario: &Scenario, machine: &Cluster) -> Result<Vec<Load>, Error> {
    let mut out = Vec::new();
    for b in &scenario.background {
        b.check(scenario.nodes).map_err(Error::Placement)?;
        out.extend(b.loads(machine));
    }
    Ok(out)
}

/// Simulates a scenario's sweep (beside its background traffic, if it has any).
pub fn simulate(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(Vec<Row>, CommSummary), Error> {
    simulate_with(scenario, params, mode, &|| {})
}

/// As [`simulate`], calling `tick` once per size simulated (for a progress bar).
pub fn simulate_with(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    tick: &(dyn Fn() + Sync),
) -> Result<(Vec<Row>, CommSummary), Error> {
    if !scenario.jobs.is_empty() {
        return Err(Error::Ddp("the scenario has [[job]] tables: simulate its jobs".into()));
    }
    let sweep = scenario
        .sweep()
        .ok_or_else(|| Error::Ddp("the scenario's workload is a DDP step, not a sweep".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let load = background(scenario, &cluster)?;
    let rows = workload::sweep::run_beside(&cluster, &comm, sweep, params, mode, |_| &load, tick)?;
    Ok((rows, summary))
}

/// Cost of one kernel launch: collsim-bench measured 3.8–4.3 µs back to back on an H100
/// (calibration/data/2026-11-22-h100-single).
pub const KERNEL_LAUNCH_SECS: f64 = 4e-6;

/// Simulates a scenario's DDP training step (its workload must be `kind = "ddp"`), beside its
/// background traffic if it has any.
pub fn simulate_ddp(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    ddp_step(scenario, params, mode, &CollCache::default(), false)
}

/// As [`simulate_ddp`], each collective's span also naming the busiest links it crosses (for a
/// trace's link counters): a steady state of the whole call, which at tens of thousands of
/// ranks costs more than the step itself.
pub fn simulate_ddp_with_links(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    ddp_step(scenario, params, mode, &CollCache::default(), true)
}

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

/// As [`simulate_ddp`], taking collective times from `cache` and adding those it simulates.
/// The cache must belong to this scenario's cluster (see [`CollCache`]).
pub fn simulate_ddp_cached(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    cache: &CollCache,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    ddp_step(scenario, params, mode, cache, false)
}

/// A DDP step; with `links`, each collective's busiest links for the trace (a steady-state
/// solve per distinct call: the plan, which draws no trace, skips it).
fn ddp_step(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    cache: &CollCache,
    links: bool,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    // A model profile's tensor-parallel group stays inside a node, whatever the flags or a
    // sweep made of the GPUs a node uses.
    if let config::Workload::Ddp(spec) = &scenario.workload
        && let Some(named) = &spec.profile
        && named.tp > 1
        && !scenario.gpus_per_node.is_multiple_of(named.tp)
    {
        return Err(Error::Ddp(format!(
            "workload.parallel.tp: {} does not divide the {} GPUs used per node (a tensor-parallel group stays inside a node)",
            named.tp, scenario.gpus_per_node
        )));
    }
    let (step, summary) =
        on_cluster(scenario, params, mode, cache, links, |spec, world, gpu, coll| {
            match &spec.parallel {
                Some(layout) => {
                    workload::parallel::simulate_parallel(spec, layout, world, gpu, coll)
                }
                None => workload::ddp::simulate_step_on(spec, world, gpu, coll),
            }
        })?;
    if !step_fits(&step) {
        return Err(Error::StepTooLong(step_overflow(&step)));
    }
    Ok((step, summary))
}

/// Hands `f` the scenario's training step, its ranks, GPU facts and a timer of collectives on
/// each process group of its cluster (beside its background traffic), after the checks every
/// step takes; returns what `f` does and the communicator's summary.
fn on_cluster<R>(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    cache: &CollCache,
    links: bool,
    f: impl Fn(
        &workload::ddp::DdpSpec,
        usize,
        &workload::ddp::GpuFacts,
        &workload::parallel::GroupTimer<'_>,
    ) -> R,
) -> Result<(R, CommSummary), Error> {
    if !scenario.jobs.is_empty() {
        return Err(Error::Ddp("the scenario has [[job]] tables: simulate its jobs".into()));
    }
    let spec = scenario
        .ddp()
        .ok_or_else(|| Error::Ddp("the scenario's workload is not kind = \"ddp\"".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let load = background(scenario, &cluster)?;
    let world = comm.nranks();
    if let Some(layout) = &spec.parallel {
        layout
            .check(&spec.model, world, spec.grad_accumulation)
            .and_then(|()| layout.check_placement(world, comm.ppn()))
            .map_err(|e| Error::Ddp(format!("{}: {e}", e.field())))?;
    }
    let groups = step_groups(&cluster, &comm, spec)?;
    let r = with_ddp(
        &cluster,
        &comm,
        scenario,
        spec,
        params,
        mode,
        &load,
        cache,
        (1.0, links),
        &groups,
        |gpu, coll| f(spec, world, gpu, coll),
    )?;
    Ok((r, summary))
}

/// A scenario's DDP or FSDP step as a list of calls ([`workload::calls`]): its steady step's
/// compute, collectives and waits in program order, for `kind = "trace"` to replay.
pub fn export_calls(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<workload::calls::CallsFile, Error> {
    let spec = scenario.ddp().ok_or_else(|| {
        Error::Ddp("--export-calls: the scenario's workload is not a training step".into())
    })?;
    if spec.parallel.is_some() || !scenario.jobs.is_empty() {
        return Err(Error::Ddp(
            "--export-calls: 3-D layouts and [[job]] tables cannot be exported yet (their collectives run on several groups)".into(),
        ));
    }
    if !spec.skew.is_none() || spec.input.is_some() {
        return Err(Error::Ddp(
            "--export-calls: rank skew, stragglers and the input pipeline are not in a list of calls yet (export the step without them)".into(),
        ));
    }
    let cache = CollCache::default();
    let (calls, summary) =
        on_cluster(scenario, params, mode, &cache, false, |spec, world, gpu, coll| {
            let ranks = (gpu.ranks_per_node, world);
            workload::ddp::plan_step(spec, world, gpu, coll).timeline().calls(ranks)
        })?;
    let world = summary.nranks;
    Ok(workload::calls::CallsFile {
        collsim_calls: workload::calls::VERSION,
        ranks: Some(world),
        calls,
    })
}

/// Whether a step's times are finite and under the simulated-time limit (a compute rate or a
/// size far out of range makes them overflow).
fn step_fits(r: &workload::ddp::StepResult) -> bool {
    let limit_ms = units::Time::LIMIT.as_secs_f64() * 1e3;
    let parts = [r.iteration_time_ms, r.compute_ms, r.forward_ms, r.backward_ms, r.comm_ms];
    parts.iter().all(|t| t.is_finite() && *t < limit_ms) && r.breakdown.total_ms().is_finite()
}

/// Why a step past [`units::Time::LIMIT`] is refused, naming the inputs that set the part that
/// overflowed: its compute (the workload's batch, layers and compute rate) or its collectives
/// (the gradients over the cluster's links).
fn step_overflow(r: &workload::ddp::StepResult) -> String {
    let limit_ms = units::Time::LIMIT.as_secs_f64() * 1e3;
    let past = |t: f64| !t.is_finite() || t >= limit_ms;
    let days = units::Time::LIMIT.as_secs_f64() / 86_400.0;
    let cause = if [r.compute_ms, r.forward_ms, r.backward_ms].into_iter().any(past) {
        "its compute, set by workload.micro_batch (and grad_accumulation), the model's size \
         (workload.model, the layers' fwd_gflops or fwd_ms, or the trace's kernels) and the \
         compute rate (workload.tflops, efficiency or mfu); is one of them far too large or too \
         small?"
    } else if past(r.comm_ms) {
        "its collectives, set by the gradients' sizes over the links of cluster.topology and \
         any [[background]] load; is a link far too slow or a size far too large?"
    } else {
        "its compute and collectives together; is a size far too large or a rate far too small?"
    };
    format!(
        "the training step passes {days:.0} days of simulated time, more than collsim reports: {cause}"
    )
}

/// Jobs' steps side by side may differ at most this many times in length.
const STEP_RATIO: f64 = 1000.0;

/// Links kept per DDP collective for its trace's link counters (the busiest first).
const LINKS_PER_CALL: usize = 8;

/// Hands `f` the GPU facts of `scenario`'s GPU for `spec` and a timer of collectives on
/// `cluster` beside `load` (each distinct call simulated once), each group of `groups`
/// ([`step_groups`]) on its share of the links its siblings share with it.
#[allow(clippy::too_many_arguments)]
fn with_ddp<R>(
    cluster: &Cluster,
    comm: &Communicator,
    scenario: &Scenario,
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
    spec.skew.check_ranks(comm.nranks()).map_err(Error::Ddp)?;
    if spec.sharding.is_some() && comm.nranks() < 2 {
        return Err(Error::Ddp(
            "kind = \"fsdp\" on one rank: PyTorch switches to NO_SHARD there, with nothing to gather or reduce; simulate one GPU as kind = \"ddp\", or give two ranks or more".into(),
        ));
    }
    let model = &scenario.node.gpu.model;
    let peak = |precision: &str| {
        model.peak_tflops.get(precision).map(|p| p * 1e12).ok_or_else(|| {
            Error::Ddp(format!("{}: no peak for {precision} in the GPU library", model.name))
        })
    };
    let memory_bandwidth = model
        .memory_bandwidth
        .ok_or_else(|| {
            Error::Ddp(format!(
                "{}: the GPU model has no memory_bandwidth, which DDP's copies need (add it to its [gpu_model] table)",
                model.name
            ))
        })?
        .bytes_per_sec();
    let mut gpu = GpuFacts {
        flops: 0.0,
        memory_bandwidth,
        multiprocessors: model.multiprocessors,
        launch: spec.launch.unwrap_or(KERNEL_LAUNCH_SECS),
        gemm_fixed: spec.gemm_fixed.unwrap_or(0.0),
        ranks_per_node: comm.ppn(),
        sixteen_bit_flops: None,
    };
    gpu.flops = match &spec.rate {
        ComputeRate::Tflops(t) => t * 1e12,
        ComputeRate::Peak { precision, efficiency } => peak(precision)? * efficiency,
        ComputeRate::Mfu { precision, mfu } => {
            let peak = peak(precision)?;
            workload::ddp::rate_for_mfu(spec, &gpu, peak * mfu, peak)
                .map_err(|e| Error::Ddp(format!("workload.mfu = {mfu}: {e}")))?
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
    let on = |g: Group| -> Option<(&Cluster, &Communicator)> {
        match g {
            Group::World => Some((cluster, comm)),
            g => groups.get(&g).map(|(c, m)| (c, m)),
        }
    };
    let nothing = || CollTime { secs: 0.0, algo: "", proto: "", channels: 0, links: Vec::new() };
    // `--mode detailed`: a first pass, every collective taking no time, lists the step's calls
    // and counts their work before any runs (the calls do not depend on their times).
    if mode == collective::Mode::Detailed {
        let budget = std::sync::Mutex::new(collective::run::DetailedBudget::scaled(shared));
        let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
        let count = |g: Group, c: collective::Collective, bytes: u64, dtype: workload::DataType| {
            let Some((cluster, comm)) = on(g) else { return nothing() };
            if seen.lock().is_ok_and(|mut s| s.insert((g, c, bytes, dtype))) {
                let spec = workload::sweep::SweepSpec::one(c, bytes, dtype);
                let call = workload::sweep::call(cluster, comm, &spec, bytes, params, mode, load);
                if let Ok(mut b) = budget.lock() {
                    b.count(&call);
                }
            }
            CollTime { secs: 0.0, algo: "", proto: "", channels: 1, links: Vec::new() }
        };
        f(&gpu, &count);
        budget.into_inner().map_or(Ok(()), |b| b.verdict()).map_err(Error::Ddp)?;
    }
    let coll = |g: Group, c: collective::Collective, bytes: u64, dtype: workload::DataType| {
        let Some((cluster, comm)) = on(g) else { return nothing() };
        if collective::in_place_no_op(comm.nranks(), c) {
            return nothing();
        }
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
            secs: row.time_us * 1e-6,
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

/// The process groups of `spec`'s step on `comm` beyond the world, each with the sibling
/// groups that share links with it: a 3-D layout's as Megatron lays them out, HYBRID_SHARD's
/// and a replayed step's ranks a stride apart, each beside its translates (every node's shard
/// group, every local rank's replicate group), which run the same step. Groups of one rank are
/// left out: they send nothing.
fn step_groups(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &workload::ddp::DdpSpec,
) -> Result<workload::jobs::GroupComms, Error> {
    use workload::jobs::GroupComm;
    use workload::parallel::Group;
    let mut groups = workload::jobs::GroupComms::new();
    let world = comm.nranks();
    let mut add = |g: Group, members: &[usize], others: &[Vec<usize>]| -> Result<(), Error> {
        let own = group_comm(cluster, comm, members)?;
        let siblings = sharing_siblings(cluster, comm, &own.0, others)?;
        groups.insert(g, GroupComm { own, siblings });
        Ok(())
    };
    if let Some(layout) = &spec.parallel {
        for g in layout.groups(world) {
            add(g, &layout.members(g, world), &layout.siblings(g, world))?;
        }
    }
    let mut strided = Vec::new();
    if spec.sharding.is_some_and(|s| s.strategy.hybrid()) {
        for g in [Group::Shard, Group::Replicate] {
            strided.extend(workload::parallel::hybrid_group(g, world, comm.ppn()).map(|s| (g, s)));
        }
    }
    if let Some(calls) = &spec.calls {
        let used = workload::calls::groups(calls, world)
            .map_err(|e| Error::Ddp(format!("{}: {e}", spec.model.name)))?;
        strided.extend(used.into_iter().map(|g| (g, g)));
    }
    for (g, shape) in strided {
        let Some((members, others)) = workload::parallel::strided_members(shape, world) else {
            continue;
        };
        if members.len() > 1 {
            add(g, &members, &others)
                .map_err(|e| Error::Ddp(format!("{}: {e}", spec.model.name)))?;
        }
    }
    Ok(groups)
}

/// The cluster and communicator of a process group of `members` (global ranks of `comm`,
/// numbered node by node): the nodes they are on, with their GPUs on each (the same local
/// GPUs on every node; otherwise as many of each node's first GPUs).
fn group_comm(
    cluster: &Cluster,
    comm: &Communicator,
    members: &[usize],
) -> Result<(Cluster, Communicator), Error> {
    let sub = group_view(cluster, comm, members)?;
    let c = Communicator::new(&sub, comm.env())?.with_gpus_per_process(1);
    Ok((sub, c))
}

/// The view of [`group_comm`]'s cluster.
fn group_view(cluster: &Cluster, comm: &Communicator, members: &[usize]) -> Result<Cluster, Error> {
    let ppn = comm.ppn().max(1);
    let mut per_node: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for &r in members {
        per_node.entry(r / ppn).or_default().push(r % ppn);
    }
    for gpus in per_node.values_mut() {
        gpus.sort_unstable();
    }
    let counts: std::collections::BTreeSet<usize> = per_node.values().map(Vec::len).collect();
    let &[per] = counts.iter().copied().collect::<Vec<_>>().as_slice() else {
        return Err(Error::Ddp(format!(
            "a process group of {} ranks falls unevenly on the nodes ({:?} per node); collsim times a group with as many GPUs on each of its nodes",
            members.len(),
            per_node.values().map(Vec::len).collect::<Vec<_>>()
        )));
    };
    let nodes: Vec<NodeId> = per_node.keys().map(|&n| NodeId(n)).collect();
    let locals: std::collections::BTreeSet<&Vec<usize>> = per_node.values().collect();
    Ok(match locals.into_iter().collect::<Vec<_>>().as_slice() {
        [gpus] => cluster.subset_gpus(&nodes, gpus),
        _ => cluster.subset(&nodes, per),
    })
}

/// A group's view and communicator as it runs beside `siblings`, the groups that share links
/// with it: they are copies of it on other GPUs doing the same work at the same time, so each
/// loads the links they share alike, and the group runs alone on a view whose links shared by
/// k groups (inside the nodes, the NICs' links, the network's links its rings cross between
/// nodes) give it 1/k of their capacity, in whatever mode the step runs. Checked against the
/// group and its siblings simulated together in detail (a NIC shared by two GPUs, PCIe boxes,
/// an oversubscribed spine, ECMP), at the cost of one group.
fn with_siblings(
    own: (Cluster, Communicator),
    siblings: Vec<(Cluster, Communicator)>,
) -> (Cluster, Communicator) {
    if siblings.is_empty() {
        return own;
    }
    let mut shares: std::collections::BTreeMap<net::LinkId, usize> = Default::default();
    let mut mine = fabric_links(&own.0, &own.1);
    for node in (0..own.0.nodes()).map(|n| own.0.machine_node(NodeId(n))) {
        mine.extend(node_links(&own.0, node));
    }
    for l in &mine {
        *shares.entry(*l).or_insert(0) += 1;
    }
    for (c, m) in &siblings {
        let mut theirs = fabric_links(c, m);
        for node in (0..c.nodes()).map(|n| c.machine_node(NodeId(n))) {
            theirs.extend(node_links(c, node));
        }
        for l in theirs.intersection(&mine) {
            *shares.entry(*l).or_insert(0) += 1;
        }
    }
    let (view, comm) = own;
    (view.with_link_shares(&shares), comm)
}

/// The network links a group's rings cross between its nodes: each channel's route from its
/// NIC out of one node into its NIC in on the next (its own route under ECMP).
fn fabric_links(view: &Cluster, comm: &Communicator) -> std::collections::BTreeSet<net::LinkId> {
    let mut links = std::collections::BTreeSet::new();
    let n = view.nodes();
    if n < 2 {
        return links;
    }
    for i in 0..n {
        for (c, ch) in comm.channels().iter().enumerate() {
            if let (Some(out), Some(into)) = (ch.nic_out, ch.nic_in) {
                let (from, to) = ((NodeId(i), out), (NodeId((i + 1) % n), into));
                links.extend(view.nic_to_nic(from, to, c));
            }
        }
    }
    links
}

/// Of `siblings` (groups' global ranks), the views and communicators of those that may share
/// links with `own`'s view: inside a node (see [`node_links`]), or, on a network that is not
/// one ideal switch (tiers, oversubscription, ECMP, placement groups), any sibling on its nodes
/// when they span several (their rings may cross the same network links: [`with_siblings`]
/// counts which). Siblings on links of their own (one NIC per GPU on an ideal switch, NVSwitch
/// ports) change nothing, and are left out.
fn sharing_siblings(
    cluster: &Cluster,
    comm: &Communicator,
    own: &Cluster,
    siblings: &[Vec<usize>],
) -> Result<Vec<(Cluster, Communicator)>, Error> {
    let ppn = comm.ppn().max(1);
    let nodes: std::collections::BTreeSet<NodeId> =
        (0..own.nodes()).map(|n| own.machine_node(NodeId(n))).collect();
    let mut mine = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for members in siblings {
        // Only a sibling on some of the group's nodes can share their links; the nodes are
        // alike, so one of them shows whether it does.
        let on = members.iter().map(|&r| cluster.machine_node(NodeId(r / ppn)));
        let Some(node) = on.into_iter().find(|n| nodes.contains(n)) else { continue };
        // A sibling spread unevenly over its nodes (which its group is not) is timed as alone.
        let Ok(sub) = group_view(cluster, comm, members) else { continue };
        let fabric = !cluster.network_is_uniform() && own.nodes() > 1 && sub.nodes() > 1;
        let own_links = mine.entry(node).or_insert_with(|| node_links(own, node));
        if fabric || !node_links(&sub, node).is_disjoint(own_links) {
            let c = Communicator::new(&sub, comm.env())?.with_gpus_per_process(1);
            out.push((sub, c));
        }
    }
    Ok(out)
}

/// The links a group's GPUs use in and out of the machine's node `node`: each GPU's routes to
/// and from the NICs NCCL gives it and those NICs' own links into the network, and the routes
/// between the group's GPUs there.
fn node_links(view: &Cluster, node: NodeId) -> std::collections::BTreeSet<net::LinkId> {
    use hw::{GpuId, Vertex};
    let mut links = std::collections::BTreeSet::new();
    let here = (0..view.nodes()).map(NodeId).filter(|&n| view.machine_node(n) == node);
    for n in here {
        for g in (0..view.gpus_per_node()).map(GpuId) {
            if view.nodes() > 1 {
                for nic in view.gpu_nics(g) {
                    links.extend(view.gpu_to_nic(n, g, nic));
                    links.extend(view.nic_to_gpu(n, nic, g));
                    let (up, down) = view.nic_links(n, nic);
                    links.extend([up, down]);
                }
            }
            for h in (0..view.gpus_per_node()).map(GpuId).filter(|&h| h != g) {
                links.extend(view.route(n, Vertex::Gpu(g), Vertex::Gpu(h)).0);
            }
        }
    }
    links
}

/// What one job of a multi-job scenario did.
#[derive(Debug, Clone)]
pub struct JobRun {
    /// The job as a scenario of its own (its nodes, workload and NCCL variables), for reports.
    pub scenario: Scenario,
    /// Its name.
    pub name: String,
    /// The machine's nodes it ran on.
    pub nodes: Vec<NodeId>,
    /// How they were chosen.
    pub placement: &'static str,
    /// Its communicator.
    pub summary: CommSummary,
    /// Its results beside the other jobs, and alone.
    pub outcome: JobOutcome,
}

/// A job's results, beside the others and alone on the cluster (background traffic stays).
#[derive(Debug, Clone)]
pub enum JobOutcome {
    /// A collective sweep: one row per size.
    Sweep {
        /// Beside the other jobs.
        rows: Vec<Row>,
        /// Alone.
        alone: Vec<Row>,
    },
    /// A DDP step.
    Ddp {
        /// Beside the other jobs.
        step: Box<workload::ddp::StepResult>,
        /// Alone.
        alone: Box<workload::ddp::StepResult>,
    },
    /// Holds its nodes, sends nothing.
    Idle,
}

impl JobOutcome {
    /// Time alone over time beside the others, per sweep size (one value for a DDP step): 1 is
    /// no slowdown, 0.5 takes twice as long.
    pub fn relative_speed(&self) -> Vec<f64> {
        match self {
            JobOutcome::Sweep { rows, alone } => {
                rows.iter().zip(alone).map(|(r, a)| a.time_us / r.time_us).collect()
            }
            JobOutcome::Ddp { step, alone } => {
                vec![alone.iteration_time_ms / step.iteration_time_ms]
            }
            JobOutcome::Idle => Vec::new(),
        }
    }
}

/// The fraction of a call of `time_us` spent moving bytes: what is left after the same call on a
/// near-empty buffer (its call overhead and per-step latencies), as `explain` splits it. A
/// neighbour's flows load the network by that fraction of their steady rate on average.
fn moving_fraction(
    spec: &workload::sweep::SweepSpec,
    call: &collective::Call<'_>,
    time_us: f64,
) -> f64 {
    let tiny = units::Bytes::new((call.elt.get() * call.comm.nranks() as u64).max(call.elt.get()));
    let small = collective::Call { bytes: tiny, ..*call };
    let latency = workload::sweep::row(spec, &small, &collective::simulate(&small)).time_us;
    if time_us > 0.0 { ((time_us - latency) / time_us).clamp(0.0, 1.0) } else { 0.0 }
}

/// What a job puts on the network while the others run: per sweep size, or one steady pattern.
enum Traffic {
    PerSize(Vec<Vec<Load>>),
    Steady(Vec<Load>),
    None,
}

/// Simulates a scenario's `[[job]]`s side by side on its cluster, and each alone.
///
/// While a job's call runs, each other job is running its own concurrent call (a sweep: the one
/// of the same row, back to back, as nccl-tests loops; a DDP step: its largest bucket's
/// collective, each flow at the step's communication duty cycle times its steady rate) and the
/// scenario's background traffic; those flows take their max-min share of every link for the
/// whole call. Neighbours are taken as they run alone (one pass, no fixed point). DDP jobs run
/// their steps together in one shared network instead, each collective posted as its NCCL
/// stream reaches it (`workload::jobs::run_shared`); sweeps are steady traffic there.
pub fn simulate_jobs(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<Vec<JobRun>, Error> {
    simulate_jobs_with(scenario, params, mode, &|| {})
}

/// How many calls (sweep sizes, DDP steps) [`simulate_jobs`] simulates: each job's alone and
/// beside the others.
pub fn job_calls(scenario: &Scenario) -> u64 {
    use workload::Workload;
    let per = |w: &Workload| match w {
        Workload::Sweep(s) => workload::sweep::sizes(s).len() as u64,
        // A 3-D step runs each pipeline stage's step.
        Workload::Ddp(d) => d.parallel.map_or(1, |l| l.pp as u64),
        Workload::Idle => 0,
    };
    scenario.jobs.iter().map(|j| 2 * per(&j.workload)).sum()
}

/// As [`simulate_jobs`], calling `tick` once per sweep size or DDP step simulated.
pub fn simulate_jobs_with(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<JobRun>, Error> {
    use rayon::prelude::*;
    use workload::Workload;
    let env = NcclEnv::from_pairs(scenario.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let whole = machine(scenario, &env, scenario.node.gpu.count)?;
    let bg = background(scenario, &whole)?;
    struct Built {
        cluster: Cluster,
        comm: Communicator,
        scenario: Scenario,
        summary: CommSummary,
    }
    let mut built = Vec::new();
    for job in &scenario.jobs {
        let mut nccl = scenario.nccl.clone();
        for (k, v) in &job.nccl {
            nccl.retain(|(key, _)| key != k);
            nccl.push((k.clone(), v.clone()));
        }
        // An error about a variable is put where the job, or the scenario, gives it.
        let place = |key: &str| job.nccl_at.get(key).or(scenario.nccl_at.get(key));
        let in_job = |key: &str, e: String| match place(key) {
            Some(at) => Error::Ddp(format!("{at}: job {:?}: nccl.{e}", job.name)),
            None => Error::Ddp(format!("job {:?}: {e}", job.name)),
        };
        let env = NcclEnv::from_pairs(nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| in_job(&e.key, e.to_string()))?;
        let cluster = whole.subset(&job.nodes, job.gpus_per_node);
        let comm =
            Communicator::new(&cluster, &env)?.with_gpus_per_process(scenario.gpus_per_process);
        let summary = summary(&comm, &env);
        let job_scenario = Scenario {
            nodes: job.nodes.len(),
            gpus_per_node: job.gpus_per_node,
            workload: job.workload.clone(),
            nccl,
            jobs: Vec::new(),
            background: Vec::new(),
            ..scenario.clone()
        };
        if let Workload::Sweep(s) = &job.workload {
            workload::sweep::check_supported(s.collective, &comm)
                .map_err(|e| in_job("NCCL_ALGO", e.to_string()))?;
        }
        built.push(Built { cluster, comm, scenario: job_scenario, summary });
    }
    /// One run of a job's workload beside some traffic.
    enum Ran {
        Rows(Vec<Row>),
        Step(Box<workload::ddp::StepResult>),
        Idle,
    }
    // `--mode detailed` runs each DDP job's step at least twice (beside the others, alone),
    // beside the other jobs' flows, which every rate solve visits too.
    let ddp_jobs = built.iter().filter(|b| matches!(b.scenario.workload, Workload::Ddp(_))).count();
    let shared = 2.0 * ddp_jobs as f64;
    // DDP jobs' steps, ready to post their collectives into a shared network: one plan, or
    // one per pipeline stage of a 3-D layout.
    struct JobPlan {
        stages: Vec<workload::ddp::StepPlan>,
        report: Option<workload::parallel::ParallelReport>,
        groups: workload::jobs::GroupComms,
    }
    let plans: Vec<Option<JobPlan>> = built
        .par_iter()
        .map(|b| match &b.scenario.workload {
            Workload::Ddp(d) => {
                let world = b.comm.nranks();
                let s = &b.scenario;
                let groups = step_groups(&b.cluster, &b.comm, d)?;
                // In detail, each of a group's calls runs beside its siblings' copies.
                let copies = 1 + groups.values().map(|g| g.siblings.len()).max().unwrap_or(0);
                let (stages, report) = with_ddp(
                    &b.cluster,
                    &b.comm,
                    s,
                    d,
                    params,
                    mode,
                    &bg,
                    &CollCache::default(),
                    (shared * copies as f64, false),
                    &groups,
                    |gpu, coll| match &d.parallel {
                        Some(layout) => {
                            let (stages, report) =
                                workload::parallel::plan_stages(d, layout, world, gpu, coll);
                            (stages, Some(report))
                        }
                        None => (vec![workload::ddp::plan_step(d, world, gpu, coll)], None),
                    },
                )?;
                Ok(Some(JobPlan { stages, report, groups }))
            }
            _ => Ok(None),
        })
        .collect::<Result<_, Error>>()?;
    // A job's steps to share a network: its stages in order.
    let shared = |j: usize| -> Vec<workload::jobs::SharedStep<'_>> {
        let Some(plan) = &plans[j] else { return Vec::new() };
        let staged = plan.report.is_some();
        (plan.stages.iter().enumerate())
            .map(|(s, stage)| workload::jobs::SharedStep {
                cluster: &built[j].cluster,
                comm: &built[j].comm,
                params,
                plan: stage,
                mode,
                groups: &plan.groups,
                stage: staged.then_some(s),
            })
            .collect()
    };
    // A job's step from its stages' (one, unless 3-D).
    let job_step = |j: usize, results: Vec<workload::ddp::StepResult>| {
        let Some(first) = results.first().cloned() else {
            return Err(Error::Ddp(format!(
                "job {:?}: its step has no stage",
                scenario.jobs[j].name
            )));
        };
        Ok(match plans[j].as_ref().and_then(|p| p.report.clone()) {
            Some(report) => {
                let world = built[j].comm.nranks();
                workload::parallel::stage_step(results, report, world, || first)
            }
            None => first,
        })
    };
    let links = whole.links();
    let run = |j: usize, load: &dyn Fn(usize) -> Vec<Load>| -> Result<Ran, Error> {
        let b = &built[j];
        Ok(match &b.scenario.workload {
            Workload::Sweep(s) => {
                let n = workload::sweep::sizes(s).len();
                let loads: Vec<Vec<Load>> = (0..n).map(load).collect();
                Ran::Rows(workload::sweep::run_beside(
                    &b.cluster,
                    &b.comm,
                    s,
                    params,
                    mode,
                    |i| &loads[i],
                    tick,
                )?)
            }
            // Alone: its step in a network of its own (with the background).
            Workload::Ddp(_) => {
                let r = workload::jobs::run_shared(&shared(j), links, &load(0), tick);
                Ran::Step(Box::new(job_step(j, r)?))
            }
            Workload::Idle => Ran::Idle,
        })
    };
    let alone: Vec<Ran> = (0..built.len())
        .into_par_iter()
        .map(|j| run(j, &|_| bg.clone()))
        .collect::<Result<_, _>>()?;
    // Steps side by side: each too long to simulate is refused, and so are steps so unequal
    // that the shorter job would repeat its step more than STEP_RATIO times meanwhile.
    let mut steps = Vec::new();
    for (job, ran) in scenario.jobs.iter().zip(&alone) {
        if let Ran::Step(r) = ran {
            let t = r.iteration_time_ms;
            if !step_fits(r) {
                return Err(Error::StepTooLong(format!(
                    "job {:?}: {}",
                    job.name,
                    step_overflow(r)
                )));
            }
            steps.push((t, &job.name));
        }
    }
    let longest = steps.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    let shortest = steps.iter().min_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some(l), Some(s)) = (longest, shortest)
        && l.0 > STEP_RATIO * s.0.max(1e-9)
    {
        return Err(Error::Ddp(format!(
            "job {:?}'s step ({:.3} ms) is over {STEP_RATIO} times job {:?}'s ({:.3} ms): side by side the shorter would run that many steps meanwhile; simulate them apart",
            l.1, l.0, s.1, s.0
        )));
    }
    // What each job puts on the network, from its run alone.
    let traffic: Vec<Traffic> = built
        .par_iter()
        .zip(&alone)
        .map(|(b, out)| match (&b.scenario.workload, out) {
            (Workload::Sweep(s), Ran::Rows(rows)) => Traffic::PerSize(
                workload::sweep::sizes(s)
                    .into_iter()
                    .zip(rows)
                    .map(|(size, row)| {
                        let call =
                            workload::sweep::call(&b.cluster, &b.comm, s, size, params, mode, &bg);
                        collective::steady_load(&call, moving_fraction(s, &call, row.time_us))
                    })
                    .collect(),
            ),
            (Workload::Ddp(d), Ran::Step(alone)) => {
                let duty = (alone.comm_ms / alone.iteration_time_ms).clamp(0.0, 1.0);
                let largest = alone.buckets.iter().map(|k| k.wire_bytes).max().unwrap_or(0);
                let spec = workload::sweep::SweepSpec {
                    collective: collective::Collective::AllReduce,
                    min_bytes: units::Bytes::new(largest),
                    max_bytes: units::Bytes::new(largest),
                    factor: 2,
                    dtype: d.model.grad_dtype,
                    op: workload::ReduceOp::Sum,
                };
                let call =
                    workload::sweep::call(&b.cluster, &b.comm, &spec, largest, params, mode, &bg);
                let row = workload::sweep::row(&spec, &call, &collective::simulate(&call));
                let moving = moving_fraction(&spec, &call, row.time_us);
                Traffic::Steady(collective::steady_load(&call, duty * moving))
            }
            _ => Traffic::None,
        })
        .collect();
    // Every DDP job together in one network: their collectives meet as they run, beside the
    // background and the sweep jobs (each running its largest size back to back).
    let ddp_jobs: Vec<usize> = (0..built.len()).filter(|&j| plans[j].is_some()).collect();
    let mut together = {
        let owner: Vec<usize> = ddp_jobs.iter().flat_map(|&j| vec![j; shared(j).len()]).collect();
        let steps: Vec<_> = ddp_jobs.iter().flat_map(|&j| shared(j)).collect();
        let mut load = bg.clone();
        for t in &traffic {
            if let Traffic::PerSize(rows) = t {
                load.extend(rows.last().into_iter().flatten().cloned());
            }
        }
        let done = if steps.is_empty() {
            Vec::new()
        } else {
            workload::jobs::run_shared(&steps, links, &load, tick)
        };
        let mut by_job = std::collections::BTreeMap::<usize, Vec<_>>::new();
        for (j, r) in owner.into_iter().zip(done) {
            by_job.entry(j).or_default().push(r);
        }
        by_job
            .into_iter()
            .map(|(j, r)| Ok((j, job_step(j, r)?)))
            .collect::<Result<std::collections::BTreeMap<_, _>, Error>>()?
    };
    let mut out = Vec::new();
    for (j, (b, alone)) in built.iter().zip(alone).enumerate() {
        let beside = |i: usize| -> Vec<Load> {
            let mut l = bg.clone();
            for (_, t) in traffic.iter().enumerate().filter(|(k, _)| *k != j) {
                match t {
                    // A sweep beside a DDP step runs its largest size.
                    Traffic::PerSize(rows) => match &b.scenario.workload {
                        Workload::Sweep(_) => l.extend(rows.get(i).into_iter().flatten().cloned()),
                        _ => l.extend(rows.last().into_iter().flatten().cloned()),
                    },
                    Traffic::Steady(x) => l.extend(x.iter().cloned()),
                    Traffic::None => {}
                }
            }
            l
        };
        let ran = match together.remove(&j) {
            Some(step) => Ran::Step(Box::new(step)),
            None => run(j, &beside)?,
        };
        let outcome = match (ran, alone) {
            (Ran::Rows(rows), Ran::Rows(alone)) => JobOutcome::Sweep { rows, alone },
            (Ran::Step(step), Ran::Step(alone)) => JobOutcome::Ddp { step, alone },
            _ => JobOutcome::Idle,
        };
        let job = &scenario.jobs[j];
        out.push(JobRun {
            scenario: b.scenario.clone(),
            name: job.name.clone(),
            nodes: job.nodes.clone(),
            placement: job.placement,
            summary: b.summary.clone(),
            outcome,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workload::parallel::{Group, Layout};

    /// `group` of a layout of `tp` (pp 1) on `nodes` nodes of `topology`, with the views and
    /// communicators of its siblings: every one, and those `sharing_siblings` keeps.
    #[allow(clippy::type_complexity)]
    fn groups(
        topology: &str,
        nodes: usize,
        tp: usize,
        group: Group,
    ) -> ((Cluster, Communicator), Vec<(Cluster, Communicator)>, Vec<(Cluster, Communicator)>) {
        let (_, spec) = config::resolve_topology(topology, None).unwrap();
        let cluster = Cluster::new(&spec, nodes, spec.gpu.count);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).unwrap();
        let layout = Layout {
            tp,
            pp: 1,
            ep: 1,
            cp: 1,
            virtual_stages: 1,
            sequence_parallel: false,
            recompute: false,
            overlap_grad_reduce: false,
            distributed_optimizer: false,
            overlap_param_gather: false,
            tp_comm_overlap: false,
        };
        let world = comm.nranks();
        let own = group_comm(&cluster, &comm, &layout.members(group, world)).unwrap();
        let all = layout.siblings(group, world);
        let kept = sharing_siblings(&cluster, &comm, &own.0, &all).unwrap();
        let every: Vec<_> = all.iter().map(|m| group_comm(&cluster, &comm, m).unwrap()).collect();
        (own, every, kept)
    }

    /// Each group's all-reduce of `bytes` alone and beside `others` (µs).
    fn together(
        own: &(Cluster, Communicator),
        others: &[(Cluster, Communicator)],
        bytes: u64,
    ) -> (f64, Vec<f64>) {
        let params =
            config::parse_profile(config::DEFAULT_PROFILE.0, config::DEFAULT_PROFILE.1).unwrap();
        let spec = workload::sweep::SweepSpec::one(
            collective::Collective::AllReduce,
            bytes,
            workload::DataType::Float,
        );
        let call = |c, m| workload::sweep::call(c, m, &spec, bytes, &params, Mode::Detailed, &[]);
        let alone = collective::simulate(&call(&own.0, &own.1)).time.as_us();
        let mut calls = vec![call(&own.0, &own.1)];
        calls.extend(others.iter().map(|(c, m)| call(c, m)));
        let runs = collective::run::simulate_together(&calls);
        (alone, runs.iter().map(|r| r.time.as_us()).collect())
    }

    #[test]
    fn shared_links_at_a_share_of_their_capacity_time_what_the_siblings_together_take() {
        // The fast path (the group alone on its share of each shared link, aggregated where it
        // can be) against the group and every sharing sibling simulated together in detail, on
        // cases big enough to aggregate (32 p4d nodes, two data-parallel groups a NIC; 16
        // a3-high nodes), on PCIe boxes and NIC-poor nodes, and on fat trees (ECMP, a 2:1
        // spine), wherever some sibling shares.
        let params =
            config::parse_profile(config::DEFAULT_PROFILE.0, config::DEFAULT_PROFILE.1).unwrap();
        let mut compared = Vec::new();
        for (topology, nodes, tp, group) in [
            ("aws-p4d", 32, 8, Group::Data(0)),
            ("gcp-a3-highgpu-8g", 16, 8, Group::Data(0)),
            ("pcie-8gpu-2socket", 1, 2, Group::Tensor),
            ("pcie-8gpu-2socket", 2, 2, Group::Data(0)),
            ("pcie-8gpu-2socket", 2, 4, Group::Data(0)),
            ("pcie-a100-4gpu-2socket", 2, 2, Group::Data(0)),
            ("polaris-a100-4gpu", 2, 2, Group::Data(0)),
            ("gcp-a2-highgpu-8g", 2, 2, Group::Data(0)),
            ("gcp-a2-highgpu-8g", 2, 4, Group::Data(0)),
            ("topologies/user/hgx-h100-roce-ecmp-2tier.toml", 8, 2, Group::Data(0)),
            ("topologies/user/hgx-h100-roce-ecmp-2tier.toml", 8, 4, Group::Data(0)),
            ("topologies/user/dgx-h100-spine-2to1.toml", 16, 8, Group::Data(0)),
        ] {
            let (own, _, sharing) = groups(topology, nodes, tp, group);
            if sharing.is_empty() {
                continue;
            }
            compared.push((topology, nodes, tp));
            let (_, together) = together(&own, &sharing, 256 << 20);
            let (view, c) = with_siblings(own, sharing);
            let spec = workload::sweep::SweepSpec::one(
                collective::Collective::AllReduce,
                256 << 20,
                workload::DataType::Float,
            );
            let call = workload::sweep::call(&view, &c, &spec, 256 << 20, &params, Mode::Auto, &[]);
            let fast = collective::simulate(&call).time.as_us();
            let slowest = together.iter().copied().fold(0.0, f64::max);
            // Under ECMP each connection hashes onto its own path, which shares do not see.
            let within = if topology.contains("ecmp") { 0.05 } else { 0.02 };
            assert!(
                (fast / slowest - 1.0).abs() < within,
                "{topology} x {nodes}: {fast} µs on shares, {slowest} µs together"
            );
        }
        assert!(compared.len() >= 3, "{compared:?}");
        assert_eq!(&compared[..2], &[("aws-p4d", 32, 8), ("gcp-a3-highgpu-8g", 16, 8)]);
    }

    #[test]
    fn sibling_groups_on_links_of_their_own_run_as_if_alone() {
        // Eight DGX H100 nodes at tp 8: eight data-parallel groups of eight ranks, one GPU a
        // node each, every GPU with a NIC of its own. None is kept as sharing, and all eight
        // all-reducing 256 MiB at once take what one takes alone (the fast path skips them).
        let (own, every, kept) = groups("dgx-h100", 8, 8, Group::Data(0));
        assert_eq!((every.len(), kept.len()), (7, 0));
        let (alone, runs) = together(&own, &every, 256 << 20);
        for t in runs {
            assert!((t / alone - 1.0).abs() < 0.01, "{t} µs beside the others, {alone} alone");
        }
    }

    #[test]
    fn sibling_groups_sharing_a_nic_slow_each_other() {
        // AWS p4d: 4 NICs for 8 GPUs, two GPUs under each NIC's PCIe switch. At tp 8 on four
        // nodes the data-parallel group of GPU 0 shares its NIC with GPU 1's: that one sibling
        // is kept, and the two take twice as long as one alone; the other six, on other NICs,
        // change nothing.
        let (own, every, partner) = groups("aws-p4d", 4, 8, Group::Data(0));
        assert_eq!((every.len(), partner.len()), (7, 1));
        let bytes = 256 << 20;
        let (alone, pair) = together(&own, &partner, bytes);
        let (_, all) = together(&own, &every, bytes);
        assert!(
            (pair[0] / alone - 2.0).abs() < 0.1,
            "{} µs beside its partner, {alone} alone",
            pair[0]
        );
        assert!(
            (all[0] / pair[0] - 1.0).abs() < 0.01,
            "{} µs beside all, {} beside one",
            all[0],
            pair[0]
        );
    }
}
