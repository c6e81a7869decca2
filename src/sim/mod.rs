//! A scenario, simulated: the cluster and communicator it builds, its collective sweep, its
//! training step and its jobs side by side. [`crate::plan`], [`crate::calibrate`] and the CLI
//! call these; the crate root re-exports them.

mod jobs;

pub use jobs::{JobOutcome, JobRun, job_calls, simulate_jobs, simulate_jobs_with};
pub use workload::step::{CollCache, GroupKey};

use workload::step::{StepError, describe_groups, step_groups, with_ddp};

use crate::collective::{Load, Mode, TimingParams};
use crate::comm::env::{EnvError, NcclEnv};
use crate::comm::{CommError, CommSummary, Communicator};
use crate::config::{self, Scenario};
use crate::hw::{self, Cluster};
use crate::workload::sweep::{Row, SweepError};
use crate::{comm, units, workload};

/// Why a scenario's nodes cannot be laid out: one line each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    /// More ranks than collsim simulates.
    #[error("{0}")]
    Ranks(String),
    /// The topology's fabric does not hold this many nodes.
    #[error("{topology}: {reason} (with {nodes} nodes)")]
    Fabric {
        /// The topology, as the scenario names it ("topology dgx-h100", or its file).
        topology: String,
        /// Why not.
        reason: String,
        /// The scenario's node count.
        nodes: usize,
    },
    /// The scenario's placement groups do not cover its nodes as they must.
    #[error("{0}")]
    Groups(String),
    /// A `[[background]]` names a node the cluster does not have.
    #[error("{0}")]
    Background(String),
}

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
    /// The placement or the network does not fit the cluster's node count.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The training step cannot be simulated, for a reason about the run as a whole (its kind,
    /// its GPU's library entry, its process groups): the message is complete.
    #[error("{0}")]
    Step(String),
    /// A field of the scenario's workload, or one of its jobs, cannot run as given: the message
    /// names the field (`workload.mfu = …`) or the job (`job "a": …`) but not the file, which
    /// the caller adds.
    #[error("{0}")]
    Field(String),
    /// The training step passes [`units::Time::LIMIT`]: which inputs set it (the caller names
    /// the file they came from).
    #[error("{0}")]
    StepTooLong(String),
}

impl From<StepError> for Error {
    fn from(e: StepError) -> Error {
        match e {
            StepError::Step(m) => Error::Step(m),
            StepError::Field(m) => Error::Field(m),
            StepError::Comm(e) => Error::Comm(e),
            StepError::Sweep(e) => Error::Sweep(e),
        }
    }
}

/// A cluster and the communicator NCCL would build on it, for a scenario.
pub fn build(scenario: &Scenario) -> Result<(Cluster, Communicator, CommSummary), Error> {
    let env = NcclEnv::from_pairs(scenario.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let cluster = machine(scenario, &env, scenario.gpus_per_node)?;
    let comm = Communicator::new(&cluster, &env)?.with_gpus_per_process(scenario.gpus_per_process);
    let summary = summary(&comm, &env);
    Ok((cluster, comm, summary))
}

pub use config::check_ranks;

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
    check_ranks(scenario.nodes, gpus_per_node).map_err(PlacementError::Ranks)?;
    hw::fabric::check(&scenario.node, scenario.nodes).map_err(|e| {
        // The fabric is the topology's, the node count the scenario's (or --nodes): name both.
        let topology = match &scenario.topology {
            config::TopologySource::Preset(name) => format!("topology {name}"),
            config::TopologySource::File(path) => path.display().to_string(),
        };
        PlacementError::Fabric { topology, reason: e, nodes: scenario.nodes }
    })?;
    let placement = (scenario.placement.resolve(&scenario.node, scenario.nodes))
        .map_err(PlacementError::Groups)?;
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
        tuner: env.tuner.clone(),
        tuner_notes: tuner_notes(comm, env),
        preset_tuner: preset_tuner_text(comm),
    }
}

/// The instance's own tuner plugin in use, as the report names it.
fn preset_tuner_text(comm: &Communicator) -> Option<String> {
    comm.preset_tuner().map(|p| match p {
        crate::comm::aws_tuner::AwsPlatform::P5 => {
            "aws-ofi-nccl's region tuner for p5.48xlarge (its net plugin's, on by default from 1.16.0; NCCL_TUNER_PLUGIN naming another replaces it)".to_string()
        }
    })
}

/// What the report says of the tuner file beyond the sizes its rows set: the file's own notes,
/// and each row whose algorithm and protocol NCCL has off here (it is passed over).
fn tuner_notes(comm: &Communicator, env: &NcclEnv) -> Vec<String> {
    let Some(t) = &env.tuner else { return Vec::new() };
    let mut notes = t.notes();
    for r in t.read_rows() {
        if let Some(why) = comm.disabled_reason(r.coll, r.algo, r.proto) {
            notes.push(format!(
                "{}:{}: {}/{} is off here ({why}): NCCL passes over the row",
                t.file,
                r.line,
                r.algo.name(),
                r.proto.name()
            ));
        }
    }
    notes
}

/// The scenario's `[[background]]` traffic on `machine`.
fn background(scenario: &Scenario, machine: &Cluster) -> Result<Vec<Load>, Error> {
    let mut out = Vec::new();
    for b in &scenario.background {
        b.check(scenario.nodes).map_err(PlacementError::Background)?;
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
        return Err(Error::Step("the scenario has [[job]] tables: simulate its jobs".into()));
    }
    let sweep = scenario
        .sweep()
        .ok_or_else(|| Error::Step("the scenario's workload is a DDP step, not a sweep".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let load = background(scenario, &cluster)?;
    if sweep.backend == workload::ddp::Backend::Gloo {
        if !load.is_empty() {
            return Err(Error::Step(
                "workload.backend = \"gloo\" beside [[background]] traffic: Gloo's TCP streams sharing the links are not modelled yet".into(),
            ));
        }
        return Ok((workload::sweep::gloo_rows(&cluster, &comm, sweep), summary));
    }
    let rows = workload::sweep::run_beside(&cluster, &comm, sweep, params, mode, |_| &load, tick)?;
    Ok((rows, summary))
}

/// Simulates a scenario's DDP training step (its workload must be `kind = "ddp"`), beside its
/// background traffic if it has any.
pub fn simulate_ddp(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    ddp_step(scenario, params, mode, &CollCache::default(), false)
}

/// As [`simulate_ddp`], the step's collectives posted into one network as they are issued
/// ([`workload::Policy::Shared`]): a pipeline's sends and its data-parallel all-reduces, each
/// group's collectives and their copies on the other groups of their kind, share every link
/// they cross by max-min, beside the background. The step runs as a `[[job]]` of the whole
/// cluster would, alone.
pub fn simulate_ddp_shared(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    if !scenario.jobs.is_empty() {
        return Err(Error::Step("the scenario has [[job]] tables: simulate its jobs".into()));
    }
    if scenario.ddp().is_none() {
        return Err(Error::Step("the scenario's workload is a sweep, not a training step".into()));
    };
    let job = workload::jobs::JobSpec {
        name: "step".into(),
        nodes: (0..scenario.nodes).map(hw::NodeId).collect(),
        placement: "compact",
        gpus_per_node: scenario.gpus_per_node,
        workload: scenario.workload.clone(),
        nccl: Vec::new(),
        nccl_at: Default::default(),
    };
    let one = Scenario { jobs: vec![job], ..scenario.clone() };
    let run = jobs::simulate_jobs_with(&one, params, mode, workload::Policy::Shared, &|| {})?
        .into_iter()
        .next();
    match run {
        Some(JobRun { outcome: JobOutcome::Ddp { alone, .. }, summary, .. }) => {
            Ok((*alone, summary))
        }
        _ => Err(Error::Step("the scenario's workload is not a training step".into())),
    }
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
        return Err(Error::Field(format!(
            "workload.parallel.tp: {} does not divide the {} GPUs used per node (a tensor-parallel group stays inside a node)",
            named.tp, scenario.gpus_per_node
        )));
    }
    if let Some(spec) = scenario.ddp()
        && let Some(dp) = spec.data_parallel
    {
        return data_parallel(scenario, spec, dp, params, mode, links);
    }
    let (mut step, summary, groups) =
        on_cluster(scenario, params, mode, cache, links, |spec, world, gpu, coll, _| match &spec
            .parallel
        {
            Some(layout) => workload::parallel::simulate_parallel(spec, layout, world, gpu, coll),
            None => workload::ddp::simulate_step_on(spec, world, gpu, coll),
        })?;
    if !step_fits(&step) {
        return Err(Error::StepTooLong(step_overflow(&step)));
    }
    step.comm_groups = groups;
    Ok((step, summary))
}

/// The most GPUs one host drives (DGX-2 and HGX-2 boards: 16); a DataParallel process runs
/// on one host.
pub const MAX_HOST_GPUS: usize = 16;

/// A DataParallel step on one node's GPUs: its NCCL calls from one process driving them all
/// (nccl-tests' `-g N`, as `torch.cuda.nccl` communicators are), with the same step under DDP
/// (default options, a process per GPU) beside it.
fn data_parallel(
    scenario: &Scenario,
    spec: &workload::ddp::DdpSpec,
    dp: workload::dp::DataParallel,
    params: &TimingParams,
    mode: Mode,
    links: bool,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    if scenario.nodes > 1 {
        return Err(Error::Field(format!(
            "cluster.nodes: {}: DataParallel (kind = \"dp\") is one process on one node; across nodes, kind = \"ddp\"",
            scenario.nodes
        )));
    }
    if scenario.gpus_per_node > MAX_HOST_GPUS {
        return Err(Error::Field(format!(
            "cluster.gpus_per_node: {}: DataParallel (kind = \"dp\") is one process on one host, and no host drives more than {MAX_HOST_GPUS} GPUs; use kind = \"ddp\"",
            scenario.gpus_per_node
        )));
    }
    let one_process = Scenario { gpus_per_process: scenario.gpus_per_node, ..scenario.clone() };
    let fresh = CollCache::default();
    let (mut step, summary, groups) = on_cluster(
        &one_process,
        params,
        mode,
        &fresh,
        links,
        |spec, world, gpu, coll, cluster| {
            let copies = workload::dp::PeerCopies::of(cluster, world);
            workload::dp::simulate_dp(spec, &dp, world, gpu, coll, &copies)
        },
    )?;
    if !step_fits(&step) {
        return Err(Error::StepTooLong(step_overflow(&step)));
    }
    // DDP's calls are each rank's own process's: timed apart.
    let ddp = workload::ddp::DdpSpec { data_parallel: None, ..spec.clone() };
    let per_gpu = Scenario { workload: config::Workload::Ddp(Box::new(ddp)), ..scenario.clone() };
    let fresh = CollCache::default();
    let (d, _, _) =
        on_cluster(&per_gpu, params, mode, &fresh, false, |spec, world, gpu, coll, _| {
            workload::ddp::simulate_step_on(spec, world, gpu, coll)
        })?;
    if let Some(report) = &mut step.data_parallel {
        report.ddp = Some(workload::dp::DdpSide {
            iteration_time_ms: d.iteration_time_ms,
            samples_per_s: d.samples_per_s,
            breakdown: d.breakdown,
        });
    }
    step.comm_groups = groups;
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
        &hw::Cluster,
    ) -> R,
) -> Result<(R, CommSummary, Vec<workload::ddp::CommGroup>), Error> {
    if !scenario.jobs.is_empty() {
        return Err(Error::Step("the scenario has [[job]] tables: simulate its jobs".into()));
    }
    let spec = scenario
        .ddp()
        .ok_or_else(|| Error::Step("the scenario's workload is not kind = \"ddp\"".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let load = background(scenario, &cluster)?;
    let world = comm.nranks();
    if let Some(layout) = &spec.parallel {
        layout
            .check(&spec.model, world, spec.grad_accumulation)
            .and_then(|()| layout.check_placement(world, comm.ppn()))
            .map_err(|e| Error::Field(format!("{}: {e}", e.field())))?;
    }
    let groups = step_groups(&cluster, &comm, spec, false)?;
    let described = describe_groups(&cluster, &comm, spec, &groups);
    let r = with_ddp(
        &cluster,
        &comm,
        &scenario.node.gpu.model,
        spec,
        params,
        mode,
        &load,
        cache,
        (1.0, links),
        &groups,
        |gpu, coll| f(spec, world, gpu, coll, &cluster),
    )?;
    Ok((r, summary, described))
}

/// A scenario's DDP or FSDP step as a list of calls ([`workload::calls`]): its steady step's
/// compute, collectives and waits in program order, for `kind = "trace"` to replay.
pub fn export_calls(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<workload::calls::CallsFile, Error> {
    let spec = scenario.ddp().ok_or_else(|| {
        Error::Step("--export-calls: the scenario's workload is not a training step".into())
    })?;
    if spec.parallel.is_some() || !scenario.jobs.is_empty() {
        return Err(Error::Step(
            "--export-calls: 3-D layouts and [[job]] tables cannot be exported yet (their collectives run on several groups)".into(),
        ));
    }
    if spec.data_parallel.is_some() {
        return Err(Error::Step(
            "--export-calls: a DataParallel step (kind = \"dp\") cannot be exported as a list of calls yet (its copies between GPUs are not calls)".into(),
        ));
    }
    if spec.input.is_some() {
        return Err(Error::Step(
            "--export-calls: the input pipeline is not in a list of calls yet (export the step without it)".into(),
        ));
    }
    let cache = CollCache::default();
    // The calls' compute at the slowest rank's pace (rank skew): replayed, the list gives the
    // step its scenario does.
    let (calls, summary, _) =
        on_cluster(scenario, params, mode, &cache, false, |spec, world, gpu, coll, _| {
            let ranks = (gpu.ranks_per_node, world);
            let slowest = spec.skew.slowest(world);
            let (spec, gpu) = workload::skew::slowed(spec, gpu, slowest);
            workload::ddp::plan_step(&spec, world, &gpu, coll).timeline().calls(ranks)
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

/// Why a training step's model does not fit its GPU's memory, if it does not.
pub fn misfit_warning(s: &Scenario, spec: &workload::ddp::DdpSpec, world: usize) -> Option<String> {
    // A model profile's measured memory, or the model's; none for a bare list of calls.
    let mem = crate::workload::memory::known_memory(spec, world, s.gpus_per_node)?;
    let why = mem.misfit(s.node.gpu.model.memory.get() as f64, spec.memory_headroom)?;
    if spec.profile.is_some() {
        return Some(format!(
            "the profiled step does not fit a {} as its allocator measured it: {why}",
            s.node.gpu.model.name
        ));
    }
    Some(format!(
        "the model does not fit a {} under {} with {}: {why}",
        s.node.gpu.model.name,
        match (&spec.sharding, &spec.parallel) {
            (Some(_), _) => "FSDP",
            (None, Some(_)) => "its 3-D layout",
            (None, None) if spec.data_parallel.is_some() => "DataParallel (on GPU 0)",
            (None, None) => "plain DDP",
        },
        spec.optimizer.name()
    ))
}
