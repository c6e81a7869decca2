//! Several jobs side by side on one cluster.

use super::{
    CollCache, Error, background, describe_groups, machine, step_fits, step_groups, step_overflow,
    summary, with_ddp,
};
use crate::collective::{self, Load, Mode, TimingParams};
use crate::comm::env::NcclEnv;
use crate::comm::{CommSummary, Communicator};
use crate::config::Scenario;
use crate::hw::{Cluster, NodeId};
use crate::workload::sweep::Row;
use crate::{units, workload};

/// Jobs' steps side by side may differ at most this many times in length.
const STEP_RATIO: f64 = 1000.0;
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

/// The fraction of a call of `time_us` spent moving bytes: what is left after its latency part
/// ([`collective::near_empty`]), as `explain` splits it. A
/// neighbour's flows load the network by that fraction of their steady rate on average.
fn moving_fraction(
    spec: &workload::sweep::SweepSpec,
    call: &collective::Call<'_>,
    time_us: f64,
) -> f64 {
    let small = collective::near_empty(call);
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
    simulate_jobs_with(scenario, params, mode, workload::Policy::Shared, &|| {})
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

/// As [`simulate_jobs`], the DDP steps' collectives taking their time as `policy` says, and
/// calling `tick` once per sweep size or DDP step simulated.
pub fn simulate_jobs_with(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
    policy: workload::Policy,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<JobRun>, Error> {
    use rayon::prelude::*;
    if let Some(job) = scenario.jobs.iter().find(|j| match &j.workload {
        crate::config::Workload::Sweep(s) => !s.backend.is_nccl(),
        _ => false,
    }) {
        return Err(Error::Step(format!(
            "job {:?}: a collective sweep on Gloo (backend = \"gloo\") runs alone in a plain simulate; beside other jobs it is not modelled yet",
            job.name
        )));
    }
    if let Some(job) = scenario.jobs.iter().find(
        |j| matches!(&j.workload, crate::config::Workload::Ddp(s) if s.data_parallel.is_some()),
    ) {
        return Err(Error::Step(format!(
            "job {:?}: a DataParallel step (kind = \"dp\") runs alone on its node in a plain simulate; beside other jobs or on a shared network (--comms shared) it is not modelled yet",
            job.name
        )));
    }
    let env = NcclEnv::from_pairs(scenario.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let whole = machine(scenario, &env, scenario.node.gpu.count)?;
    let bg = background(scenario, &whole)?;
    let built = build_jobs(scenario, &whole)?;
    let plans = plan_jobs(&built, params, mode, &bg)?;
    let jobs = Jobs { scenario, params, mode, policy, tick, built, plans, links: whole.links() };
    let alone: Vec<Ran> = (0..jobs.built.len())
        .into_par_iter()
        .map(|j| jobs.run(j, &|_| bg.clone()))
        .collect::<Result<_, _>>()?;
    check_side_by_side(scenario, &alone)?;
    let traffic = jobs.traffic(&alone, &bg);
    let mut together = jobs.run_together(&traffic, &bg)?;
    let mut out = Vec::new();
    for (j, (b, alone)) in jobs.built.iter().zip(alone).enumerate() {
        let ran = match together.remove(&j) {
            Some(step) => Ran::Step(Box::new(step)),
            None => jobs.run(j, &|i| beside(&b.scenario.workload, j, i, &traffic, &bg))?,
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

/// A job on its nodes: their cluster, its communicator, and the job as a scenario of its own.
struct Built {
    cluster: Cluster,
    comm: Communicator,
    scenario: Scenario,
    summary: CommSummary,
}

/// Each of `scenario`'s jobs on its nodes of `whole`, with the scenario's NCCL variables and
/// its own over them. An error about a variable is put where the job, or the scenario, gives
/// it.
fn build_jobs(scenario: &Scenario, whole: &Cluster) -> Result<Vec<Built>, Error> {
    let mut built = Vec::new();
    for job in &scenario.jobs {
        let mut nccl = scenario.nccl.clone();
        for (k, v) in &job.nccl {
            nccl.retain(|(key, _)| key != k);
            nccl.push((k.clone(), v.clone()));
        }
        let place = |key: &str| job.nccl_at.get(key).or(scenario.nccl_at.get(key));
        let in_job = |key: &str, e: String| match place(key) {
            Some(at) => Error::Step(format!("{at}: job {:?}: nccl.{e}", job.name)),
            None => Error::Field(format!("job {:?}: {e}", job.name)),
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
        if let workload::Workload::Sweep(s) = &job.workload {
            workload::sweep::check_supported(s.collective, &comm)
                .map_err(|e| in_job("NCCL_ALGO", e.to_string()))?;
        }
        built.push(Built { cluster, comm, scenario: job_scenario, summary });
    }
    Ok(built)
}

/// A DDP job's step, ready to post its collectives into a shared network: one plan, or one
/// per pipeline stage of a 3-D layout.
struct JobPlan {
    stages: Vec<workload::ddp::StepPlan>,
    report: Option<workload::parallel::ParallelReport>,
    groups: workload::jobs::GroupComms,
    /// The slowest rank's factors the stages were planned at ([`workload::skew`]).
    slowest: workload::skew::Slowest,
}

/// Each DDP job's plan (`None` for the other jobs), its collectives timed beside `bg`.
fn plan_jobs(
    built: &[Built],
    params: &TimingParams,
    mode: Mode,
    bg: &[Load],
) -> Result<Vec<Option<JobPlan>>, Error> {
    use rayon::prelude::*;
    use workload::Workload;
    // `--mode detailed` runs each DDP job's step at least twice (beside the others, alone),
    // beside the other jobs' flows, which every rate solve visits too.
    let ddp_jobs = built.iter().filter(|b| matches!(b.scenario.workload, Workload::Ddp(_))).count();
    let shared = 2.0 * ddp_jobs as f64;
    built
        .par_iter()
        .map(|b| {
            let Workload::Ddp(d) = &b.scenario.workload else { return Ok(None) };
            let world = b.comm.nranks();
            // A 3-D step's tensor- and expert-parallel calls are posted where they run, each
            // stage's on its own groups; not in detail, where each of a step's thousands of
            // them would run in full (the detailed budget counts distinct calls).
            let post = mode != Mode::Detailed;
            let groups = step_groups(&b.cluster, &b.comm, d, post)?;
            // In detail, each of a group's calls runs beside its siblings' copies.
            let copies = 1 + groups.values().map(|g| g.siblings.len()).max().unwrap_or(0);
            // The step at its slowest rank's pace (rank skew), as when it runs alone.
            let slowest = d.skew.slowest(world);
            let (stages, report, slowest) = with_ddp(
                &b.cluster,
                &b.comm,
                &b.scenario.node.gpu.model,
                d,
                params,
                mode,
                bg,
                &CollCache::default(),
                (shared * copies as f64, false),
                &groups,
                |gpu, coll| {
                    let (slowest, d, gpu) = slowest.for_step(d, gpu);
                    match &d.parallel {
                        Some(layout) => {
                            let (stages, report) = workload::parallel::plan_stages(
                                &d, layout, world, &gpu, coll, post,
                            );
                            (stages, Some(report), slowest)
                        }
                        None => {
                            let plan = workload::ddp::plan_step(&d, world, &gpu, coll);
                            (vec![plan], None, slowest)
                        }
                    }
                },
            )?;
            Ok(Some(JobPlan { stages, report, groups, slowest }))
        })
        .collect()
}

/// One run of a job's workload beside some traffic.
enum Ran {
    Rows(Vec<Row>),
    Step(Box<workload::ddp::StepResult>),
    Idle,
}

/// Refuses steps side by side that are too long to simulate, or so unequal that the shorter
/// job would repeat its step more than [`STEP_RATIO`] times meanwhile.
fn check_side_by_side(scenario: &Scenario, alone: &[Ran]) -> Result<(), Error> {
    let mut steps = Vec::new();
    for (job, ran) in scenario.jobs.iter().zip(alone) {
        if let Ran::Step(r) = ran {
            if !step_fits(r) {
                let why = step_overflow(r);
                return Err(Error::StepTooLong(format!("job {:?}: {why}", job.name)));
            }
            steps.push((r.iteration_time_ms, &job.name));
        }
    }
    let longest = steps.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    let shortest = steps.iter().min_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some(l), Some(s)) = (longest, shortest)
        && l.0 > STEP_RATIO * s.0.max(1e-9)
    {
        return Err(Error::Field(format!(
            "job {:?}'s step ({:.3} ms) is over {STEP_RATIO} times job {:?}'s ({:.3} ms): side by side the shorter would run that many steps meanwhile; simulate them apart",
            l.1, l.0, s.1, s.0
        )));
    }
    Ok(())
}

/// What job `j` (running `w`) meets at its sweep size `i`: the background, and every other
/// job's traffic (a sweep beside a DDP step runs its largest size).
fn beside(
    w: &workload::Workload,
    j: usize,
    i: usize,
    traffic: &[Traffic],
    bg: &[Load],
) -> Vec<Load> {
    let mut l = bg.to_vec();
    for (_, t) in traffic.iter().enumerate().filter(|(k, _)| *k != j) {
        match t {
            Traffic::PerSize(rows) => match w {
                workload::Workload::Sweep(_) => {
                    l.extend(rows.get(i).into_iter().flatten().cloned())
                }
                _ => l.extend(rows.last().into_iter().flatten().cloned()),
            },
            Traffic::Steady(x) => l.extend(x.iter().cloned()),
            Traffic::None => {}
        }
    }
    l
}

/// A scenario's jobs, built and planned, and how to run them.
struct Jobs<'a> {
    scenario: &'a Scenario,
    params: &'a TimingParams,
    mode: Mode,
    policy: workload::Policy,
    tick: &'a (dyn Fn() + Sync),
    built: Vec<Built>,
    plans: Vec<Option<JobPlan>>,
    links: &'a [crate::net::Link],
}

impl Jobs<'_> {
    /// Job `j`'s steps to share a network: its stages in order (none unless a DDP job).
    fn shared(&self, j: usize) -> Vec<workload::jobs::SharedStep<'_>> {
        let Some(plan) = &self.plans[j] else { return Vec::new() };
        let staged = plan.report.is_some();
        (plan.stages.iter().enumerate())
            .map(|(s, stage)| workload::jobs::SharedStep {
                cluster: &self.built[j].cluster,
                comm: &self.built[j].comm,
                params: self.params,
                plan: stage,
                mode: self.mode,
                groups: &plan.groups,
                stage: staged.then_some(s),
                policy: self.policy,
            })
            .collect()
    }

    /// Job `j`'s step from its stages' results (one, unless 3-D).
    fn step(
        &self,
        j: usize,
        results: Vec<workload::ddp::StepResult>,
    ) -> Result<workload::ddp::StepResult, Error> {
        let Some(first) = results.first().cloned() else {
            let name = &self.scenario.jobs[j].name;
            return Err(Error::Field(format!("job {name:?}: its step has no stage")));
        };
        let nominal = workload::skew::Slowest::NOMINAL;
        let slowest = self.plans[j].as_ref().map_or(nominal, |p| p.slowest);
        let step = match self.plans[j].as_ref().and_then(|p| p.report.clone()) {
            Some(report) => {
                let world = self.built[j].comm.nranks();
                workload::parallel::stage_step(results, report, world, || first)
            }
            None => first,
        };
        let mut step = workload::skew::restate(step, slowest);
        let b = &self.built[j];
        if let (Some(plan), workload::Workload::Ddp(d)) =
            (self.plans[j].as_ref(), &b.scenario.workload)
        {
            step.comm_groups = describe_groups(&b.cluster, &b.comm, d, &plan.groups);
        }
        Ok(step)
    }

    /// Job `j` run beside `load` (by sweep size); a DDP step in a network of its own.
    fn run(&self, j: usize, load: &dyn Fn(usize) -> Vec<Load>) -> Result<Ran, Error> {
        let b = &self.built[j];
        Ok(match &b.scenario.workload {
            workload::Workload::Sweep(s) => {
                let n = workload::sweep::sizes(s).len();
                let loads: Vec<Vec<Load>> = (0..n).map(load).collect();
                Ran::Rows(workload::sweep::run_beside(
                    &b.cluster,
                    &b.comm,
                    s,
                    self.params,
                    self.mode,
                    |i| &loads[i],
                    self.tick,
                )?)
            }
            workload::Workload::Ddp(_) => {
                let r =
                    workload::jobs::run_shared(&self.shared(j), self.links, &load(0), self.tick);
                Ran::Step(Box::new(self.step(j, r)?))
            }
            workload::Workload::Idle => Ran::Idle,
        })
    }

    /// What each job puts on the network while the others run, from its run `alone`: a
    /// sweep's calls per size at their moving fraction, a DDP step's largest bucket at its
    /// duty cycle.
    fn traffic(&self, alone: &[Ran], bg: &[Load]) -> Vec<Traffic> {
        use rayon::prelude::*;
        let (params, mode) = (self.params, self.mode);
        self.built
            .par_iter()
            .zip(alone)
            .map(|(b, out)| match (&b.scenario.workload, out) {
                (workload::Workload::Sweep(s), Ran::Rows(rows)) => Traffic::PerSize(
                    workload::sweep::sizes(s)
                        .into_iter()
                        .zip(rows)
                        .map(|(size, row)| {
                            let call = workload::sweep::call(
                                &b.cluster, &b.comm, s, size, params, mode, bg,
                            );
                            collective::steady_load(&call, moving_fraction(s, &call, row.time_us))
                        })
                        .collect(),
                ),
                (workload::Workload::Ddp(d), Ran::Step(alone)) => {
                    let duty = (alone.comm_ms / alone.iteration_time_ms).clamp(0.0, 1.0);
                    let largest = alone.buckets.iter().map(|k| k.wire_bytes).max().unwrap_or(0);
                    let spec = workload::sweep::SweepSpec {
                        collective: collective::Collective::AllReduce,
                        min_bytes: units::Bytes::new(largest),
                        max_bytes: units::Bytes::new(largest),
                        factor: 2,
                        dtype: d.model.grad_dtype,
                        op: workload::ReduceOp::Sum,
                        backend: Default::default(),
                        barrier: false,
                    };
                    let call = workload::sweep::call(
                        &b.cluster, &b.comm, &spec, largest, params, mode, bg,
                    );
                    let row = workload::sweep::row(&spec, &call, &collective::simulate(&call));
                    let moving = moving_fraction(&spec, &call, row.time_us);
                    Traffic::Steady(collective::steady_load(&call, duty * moving))
                }
                _ => Traffic::None,
            })
            .collect()
    }

    /// Every DDP job together in one network: their collectives meet as they run, beside the
    /// background and the sweep jobs (each running its largest size back to back). Each DDP
    /// job's step, by job.
    fn run_together(
        &self,
        traffic: &[Traffic],
        bg: &[Load],
    ) -> Result<std::collections::BTreeMap<usize, workload::ddp::StepResult>, Error> {
        let ddp_jobs: Vec<usize> =
            (0..self.built.len()).filter(|&j| self.plans[j].is_some()).collect();
        let owner: Vec<usize> =
            ddp_jobs.iter().flat_map(|&j| vec![j; self.shared(j).len()]).collect();
        let steps: Vec<_> = ddp_jobs.iter().flat_map(|&j| self.shared(j)).collect();
        let mut load = bg.to_vec();
        for t in traffic {
            if let Traffic::PerSize(rows) = t {
                load.extend(rows.last().into_iter().flatten().cloned());
            }
        }
        let done = if steps.is_empty() {
            Vec::new()
        } else {
            workload::jobs::run_shared(&steps, self.links, &load, self.tick)
        };
        let mut by_job = std::collections::BTreeMap::<usize, Vec<_>>::new();
        for (j, r) in owner.into_iter().zip(done) {
            by_job.entry(j).or_default().push(r);
        }
        by_job.into_iter().map(|(j, r)| Ok((j, self.step(j, r)?))).collect()
    }
}
