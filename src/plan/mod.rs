//! Capacity planning (`collsim plan`): every candidate cluster of a plan — instance type ×
//! node count × placement × knobs — checked for memory fit, quota and budget, simulated,
//! priced, and ranked, with the time/cost Pareto front marked.
//!
//! Candidates are numbered in a fixed order (instance, then nodes, placement, bucket cap,
//! hook, NCCL_ALGO, micro-batch, tp, pp), so that shards ([`shard`]) can split them and a merge gives
//! back exactly the single-process result: the outcome of a candidate depends on nothing but
//! the plan and the candidate.

pub mod band;
pub mod shard;

use std::sync::Arc;

use crate::collective::{Mode, TimingParams};
use crate::config::plan::{Amount, Instance, Minimise, Objective, PlacementKind, PlanSpec};
use crate::config::{PlacementSpec, Policy, Scenario, Workload};
use crate::hw::NodeId;
use crate::units::Bytes;
use crate::workload::ddp::{CommHook, DdpSpec, PowerSgdOptions};
use crate::workload::memory::{GIB, ddp_memory};

/// One point of the candidate space.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Its number in the plan's fixed order.
    pub index: usize,
    /// Index into the plan's instances.
    pub instance: usize,
    /// Nodes.
    pub nodes: usize,
    /// Placement.
    pub placement: PlacementKind,
    /// `bucket_cap_mb`, if the plan sets it.
    pub bucket_cap_mb: Option<f64>,
    /// Communication hook, if the plan sets it.
    pub comm_hook: Option<String>,
    /// NCCL_ALGO, if the plan sets it.
    pub nccl_algo: Option<String>,
    /// Micro-batch, if the plan sets it.
    pub micro_batch: Option<u64>,
    /// Tensor-parallel degree of a 3-D layout, if the plan sets it.
    pub tp: Option<usize>,
    /// Pipeline stages of a 3-D layout, if the plan sets it.
    pub pp: Option<usize>,
    /// Context-parallel degree of a 3-D layout, if the plan sets it.
    pub cp: Option<usize>,
}

/// Every candidate of `plan`, in its fixed order: the last knob varies fastest.
pub fn candidates(plan: &PlanSpec) -> Vec<Candidate> {
    let sizes = [
        plan.instances.len(),
        plan.nodes.len(),
        plan.placements.len(),
        plan.bucket_cap_mb.len(),
        plan.comm_hook.len(),
        plan.nccl_algo.len(),
        plan.micro_batch.len(),
        plan.tp.len(),
        plan.pp.len(),
        plan.cp.len(),
    ];
    let total: usize = sizes.iter().product();
    (0..total)
        .map(|index| {
            // The index's digits, one per knob, in the mixed radix of the knobs' lengths.
            let mut digits = [0; 10];
            let mut rest = index;
            for (d, &n) in digits.iter_mut().zip(&sizes).rev() {
                *d = rest % n;
                rest /= n;
            }
            let [instance, nodes, placement, bucket, hook, algo, mb, tp, pp, cp] = digits;
            Candidate {
                index,
                instance,
                nodes: plan.nodes[nodes],
                placement: plan.placements[placement],
                bucket_cap_mb: plan.bucket_cap_mb[bucket],
                comm_hook: plan.comm_hook[hook].clone(),
                nccl_algo: plan.nccl_algo[algo].clone(),
                micro_batch: plan.micro_batch[mb],
                tp: plan.tp[tp],
                pp: plan.pp[pp],
                cp: plan.cp[cp],
            }
        })
        .collect()
}

/// Evaluates `cands` in parallel (rayon), calling `each` as each finishes (from any thread);
/// the outcomes come back in the order of `cands`.
pub fn evaluate_all(
    plan: &PlanSpec,
    cands: &[Candidate],
    params: &TimingParams,
    mode: Mode,
    each: &(dyn Fn(&Outcome) + Sync),
) -> Vec<Outcome> {
    use rayon::prelude::*;
    let caches = Caches::default();
    cands
        .par_iter()
        .map(|c| {
            let o = evaluate(plan, c, params, mode, &caches);
            each(&o);
            o
        })
        .collect()
}

/// What the search for the smallest node count found for one group of candidates (all that
/// makes a candidate but its node count).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Found {
    /// Instance name.
    pub instance: String,
    /// Placement.
    pub placement: PlacementKind,
    /// The knobs the plan set (empty: none).
    pub knobs: String,
    /// The smallest node count that meets the plan, if one up to `cap` does.
    pub nodes: Option<usize>,
    /// The largest count tried below it that does not meet the plan, and why; with none
    /// found, the largest count tried and why.
    pub short: Option<(usize, String)>,
    /// The most nodes the search could try for this group (the plan's quota or
    /// [`crate::config::plan::SEARCH_MAX_NODES`], a compact placement group's limit, the
    /// hourly budget over the node price).
    pub cap: usize,
    /// Node counts simulated (counts refused before simulation, which cost next to nothing,
    /// not counted).
    pub tried: usize,
    /// What sets `cap`, as "the most the quota allows".
    #[serde(default)]
    pub cap_why: String,
}

/// A search's result: per group what it found, and the node counts the plan then evaluates
/// in full (each group's smallest and two doublings of it, for the trade the objective
/// weighs; a group without a solution its largest count tried, to say how short it falls).
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// Per group, in candidate order.
    pub found: Vec<Found>,
    /// Node counts for the plan, ascending.
    pub nodes: Vec<usize>,
}

/// How a node count classes for the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Simulated and too slow (deadline, throughput), or too little memory per GPU: more
    /// nodes may meet the plan.
    Short,
    /// Meets the plan.
    Meets,
    /// Simulated and over the budget: more nodes will not help.
    Over,
    /// Not a valid count for this group (a layout or batch that does not divide, too few
    /// nodes for the zones): the search steps past it.
    Skip,
}

/// Why an [`Outcome`]'s candidate does not fit in memory starts with this.
const MISFIT: &str = "does not fit";

fn class(o: &Objective, out: &Outcome) -> Class {
    match (&out.metrics, &out.rejected) {
        (Some(_), None) => Class::Meets,
        (Some(m), Some(_)) => {
            let slow = o.throughput.is_some_and(|t| m.samples_per_s < t)
                || o.deadline_h.is_some_and(|d| m.train_hours > d);
            if slow { Class::Short } else { Class::Over }
        }
        (None, Some(why)) if why.starts_with(MISFIT) => Class::Short,
        _ => Class::Skip,
    }
}

/// How many groups of candidates (all that makes a candidate but its node count) `plan` has.
pub fn groups(plan: &PlanSpec) -> usize {
    let mut base = plan.clone();
    base.nodes = vec![1];
    candidates(&base).len()
}

/// Searches, for every group of candidates (instance, placement and knobs), for the smallest
/// node count that meets the plan's constraints (`plan.search`: the most nodes to try):
/// doubling from one node until a count meets them, then halving the interval between the
/// last count that fell short and that one. It assumes what more nodes do to a group: its
/// time to train falls (or stays) and its memory per GPU falls (or stays); counts that are
/// not valid for the group (a layout that does not divide) are stepped past. `each` is called
/// as each group finishes. Deterministic: the groups are searched independently.
pub fn search(
    plan: &PlanSpec,
    params: &TimingParams,
    mode: Mode,
    each: &(dyn Fn() + Sync),
) -> Search {
    use rayon::prelude::*;
    let cap = plan.search.unwrap_or(crate::config::plan::SEARCH_MAX_NODES);
    let mut base = plan.clone();
    base.nodes = vec![1];
    let groups = candidates(&base);
    let found: Vec<Found> = groups
        .par_iter()
        .map(|g| {
            let f = search_group(plan, g, cap, params, mode);
            each();
            f
        })
        .collect();
    let mut nodes: Vec<usize> = Vec::new();
    for f in &found {
        match f.nodes {
            Some(n) => nodes.extend([n, 2 * n, 4 * n].into_iter().filter(|&k| k <= f.cap)),
            None => nodes.extend(f.short.as_ref().map(|s| s.0)),
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() {
        nodes.push(1);
    }
    Search { found, nodes }
}

/// [`search`] for the group of `g` (its node count ignored).
fn search_group(
    plan: &PlanSpec,
    g: &Candidate,
    cap: usize,
    params: &TimingParams,
    mode: Mode,
) -> Found {
    let inst = &plan.instances[g.instance];
    let o = &plan.objective;
    // Counts above these are refused before any simulation, so the search stops below them.
    let mut top = cap;
    let mut cap_why = if o.max_nodes.is_some() {
        "the most the quota allows"
    } else {
        "the most the search tries"
    };
    let mut lower = |limit: usize, why: &'static str| {
        if limit < top {
            (top, cap_why) = (limit, why);
        }
    };
    if let Some(m) = inst.compact_max_nodes {
        match g.placement {
            PlacementKind::Compact => lower(m, "the most one compact placement group holds"),
            PlacementKind::Zones => {
                lower(m.saturating_mul(plan.zones), "the most compact placement groups hold")
            }
            PlacementKind::Spread => {}
        }
    }
    if let (Some(b), Some((p, _))) = (o.budget_usd_per_hour, &inst.price)
        && *p > 0.0
    {
        lower((b / p).floor() as usize, "the most the hourly budget allows");
    }
    let caches = Caches::default();
    let mut tried = 0;
    let mut short: Option<(usize, String)> = None;
    // The largest count stepped past and why: what explains a group no count serves.
    let mut skipped: Option<(usize, String)> = None;
    // The first count from `n` below `end` that is not skipped, with its class.
    let mut probe = |from: usize, end: usize, short: &mut Option<(usize, String)>| {
        for n in from..end {
            let c = Candidate { nodes: n, ..g.clone() };
            let out = evaluate(plan, &c, params, mode, &caches);
            tried += usize::from(out.metrics.is_some());
            let k = class(o, &out);
            if k == Class::Short && short.as_ref().is_none_or(|s| s.0 < n) {
                *short = Some((n, out.rejected.clone().unwrap_or_default()));
            }
            if k == Class::Skip && skipped.as_ref().is_none_or(|s| s.0 < n) {
                skipped = Some((n, out.rejected.clone().unwrap_or_default()));
            }
            if k != Class::Skip {
                return Some((n, k));
            }
        }
        None
    };
    // Doubling: `lo` the largest count known short (0: none), `best` the first that meets.
    let (mut lo, mut n, mut best) = (0, 1, None);
    while n <= top {
        match probe(n, (2 * n).min(top + 1), &mut short) {
            Some((m, Class::Meets)) => {
                best = Some(m);
                break;
            }
            Some((m, Class::Short)) => lo = m,
            Some((_, Class::Over)) => break,
            _ => {}
        }
        n *= 2;
    }
    // Halving (lo, end): every count at or above `end` that was looked at is no better.
    if let Some(mut b) = best {
        let mut end = b;
        while lo + 1 < end {
            let mid = lo + (end - lo) / 2;
            match probe(mid, end, &mut short) {
                Some((m, Class::Meets)) => {
                    b = m;
                    end = m;
                }
                Some((m, Class::Short)) => lo = m,
                _ => end = mid,
            }
        }
        best = Some(b);
    }
    // Only what falls short below the answer explains it; with no answer, what fell short,
    // else why the counts were stepped past.
    let short = short.filter(|s| best.is_none_or(|b| s.0 < b));
    let short = if best.is_none() { short.or(skipped) } else { short };
    Found {
        instance: inst.name.clone(),
        placement: g.placement,
        knobs: knob_label(g, None),
        nodes: best,
        short,
        cap: top,
        tried,
        cap_why: cap_why.to_string(),
    }
}

/// Collective times per cluster (instance, nodes, placement, NCCL_ALGO): candidates that
/// differ only in DDP knobs share their cluster's. A cached time is the one the simulation
/// gives, so outcomes do not depend on what ran before.
#[derive(Default)]
struct Caches(std::sync::Mutex<std::collections::HashMap<ClusterKey, Arc<crate::sim::CollCache>>>);

/// What makes two candidates' clusters the same: instance, nodes, placement, NCCL_ALGO.
type ClusterKey = (usize, usize, PlacementKind, Option<String>);

impl Caches {
    fn of(&self, c: &Candidate) -> Arc<crate::sim::CollCache> {
        let key = (c.instance, c.nodes, c.placement, c.nccl_algo.clone());
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(key).or_default().clone()
    }
}

/// What a simulated candidate achieves and costs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Metrics {
    /// One optimizer step (a sweep: one call), ms.
    pub step_ms: f64,
    /// Samples per second over the cluster (a sweep: calls per second).
    pub samples_per_s: f64,
    /// Tokens per second, for transformers.
    pub tokens_per_s: Option<f64>,
    /// One GPU's step time over this step time (1.0: perfect overlap).
    pub scaling_efficiency: f64,
    /// Compute of the step, ms.
    pub compute_ms: f64,
    /// Communication the step waits for, ms.
    pub exposed_comm_ms: f64,
    /// What bounds the step: "compute", or "comm: " and the tier the traffic crosses.
    pub bound: String,
    /// Memory per GPU, GiB (0 for a sweep).
    pub memory_gib: f64,
    /// Memory a GPU offers the job, GiB: its capacity less the workload's memory_headroom
    /// (the allocator's share); a candidate whose memory_gib is above it is rejected.
    #[serde(default)]
    pub memory_usable_gib: f64,
    /// With `[neighbours]`: the step alone on the cluster, and how the jobs already there
    /// fare beside it.
    #[serde(default)]
    pub beside: Option<Beside>,
    /// USD per hour for the whole cluster, if priced.
    pub usd_per_hour: Option<f64>,
    /// USD per million samples, if priced.
    pub usd_per_m_samples: Option<f64>,
    /// Hours to train.
    pub train_hours: f64,
    /// USD to train, if priced.
    pub train_usd: Option<f64>,
    /// The relative error band of the step, and so of the time and cost to train: the
    /// model's held-out error on the measured runs most like this candidate ([`band`]).
    #[serde(default)]
    pub band: f64,
    /// Where the band comes from ("sm90 fsdp: median of 2 runs").
    #[serde(default)]
    pub band_from: String,
}

/// A candidate's outcome: one line of a results file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// The candidate's number.
    pub index: usize,
    /// Instance name.
    pub instance: String,
    /// Nodes.
    pub nodes: usize,
    /// GPUs.
    pub gpus: usize,
    /// Placement.
    pub placement: PlacementKind,
    /// The knobs the plan set, "bucket 25 MiB, hook fp16" (empty: none).
    pub knobs: String,
    /// What it achieves, when it was simulated.
    pub metrics: Option<Metrics>,
    /// Why it is not a solution, if it is not.
    pub rejected: Option<String>,
}

/// A candidate beside the jobs already on its cluster (`[neighbours]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Beside {
    /// Its step alone on the cluster, ms (`step_ms` is its step beside the jobs).
    pub alone_step_ms: f64,
    /// Each job already there, and its speed beside the candidate over its speed without it
    /// (1: unchanged; a collective job: its slowest size).
    pub neighbours: Vec<(String, f64)>,
}

/// The job a plan places beside the jobs already on a cluster, by its name in reports.
pub const PLANNED_JOB: &str = "planned";

/// The candidate's step beside `nb`'s jobs, on the nodes they leave free (the first free ones
/// for a compact placement, spread evenly over them otherwise), and how they fare: every job
/// simulated together on one shared network ([`crate::sim::simulate_jobs`]) and alone.
fn beside_neighbours(
    nb: &Scenario,
    scenario: &Scenario,
    c: &Candidate,
    params: &TimingParams,
    mode: Mode,
) -> Result<(crate::workload::ddp::StepResult, Option<Beside>), String> {
    use crate::workload::jobs::JobSpec;
    if nb.node.name != scenario.node.name {
        return Err(format!(
            "the neighbours' cluster is {} nodes of {}, not of this instance",
            nb.nodes, nb.node.name
        ));
    }
    let used: std::collections::BTreeSet<NodeId> =
        nb.jobs.iter().flat_map(|j| j.nodes.iter().copied()).collect();
    let free: Vec<NodeId> = (0..nb.nodes).map(NodeId).filter(|n| !used.contains(n)).collect();
    if c.nodes > free.len() {
        return Err(format!(
            "{} nodes free beside the neighbours' jobs ({} nodes in all)",
            free.len(),
            nb.nodes
        ));
    }
    let (nodes, how): (Vec<NodeId>, &'static str) = match c.placement {
        PlacementKind::Compact => (free[..c.nodes].to_vec(), "compact"),
        PlacementKind::Spread => {
            ((0..c.nodes).map(|i| free[i * free.len() / c.nodes]).collect(), "spread")
        }
        PlacementKind::Zones => return Err("beside [neighbours]: compact or spread".into()),
    };
    let mut joint = nb.clone();
    joint.jobs.push(JobSpec {
        name: PLANNED_JOB.into(),
        nodes,
        placement: how,
        gpus_per_node: scenario.gpus_per_node,
        workload: scenario.workload.clone(),
        nccl: scenario.nccl.clone(),
        nccl_at: Default::default(),
    });
    let mut runs = crate::sim::simulate_jobs(&joint, params, mode).map_err(|e| e.to_string())?;
    let mine = runs.pop().ok_or("no planned job")?;
    let crate::sim::JobOutcome::Ddp { step, alone } = mine.outcome else {
        return Err("the planned job ran no training step".into());
    };
    let neighbours = runs
        .iter()
        .map(|r| {
            // A job that sends nothing (idle) is not slowed.
            let speeds = r.outcome.relative_speed();
            (r.name.clone(), speeds.iter().copied().reduce(f64::min).unwrap_or(1.0))
        })
        .collect();
    Ok((*step, Some(Beside { alone_step_ms: alone.iteration_time_ms, neighbours })))
}

/// The knobs a candidate sets, for its label.
fn knob_label(c: &Candidate, accumulation: Option<u64>) -> String {
    let mut parts = Vec::new();
    if let Some(b) = c.bucket_cap_mb {
        parts.push(format!("bucket {b} MiB"));
    }
    if let Some(h) = &c.comm_hook {
        parts.push(format!("hook {h}"));
    }
    if let Some(a) = &c.nccl_algo {
        parts.push(format!("algo {a}"));
    }
    if let Some(m) = c.micro_batch {
        parts.push(format!("mb {m}"));
    }
    if let Some(t) = c.tp {
        parts.push(format!("tp {t}"));
    }
    if let Some(p) = c.pp {
        parts.push(format!("pp {p}"));
    }
    if let Some(p) = c.cp {
        parts.push(format!("cp {p}"));
    }
    if let Some(k) = accumulation.filter(|&k| k > 1) {
        parts.push(format!("accum {k}"));
    }
    parts.join(", ")
}

/// The hook named `name`: `current` itself where it is that hook, else with PowerSGD's
/// defaults at `current`'s rank (rank 1 for a hook without one).
fn hook_named(name: &str, current: &CommHook) -> CommHook {
    if current.name() == name {
        return *current;
    }
    let rank = match *current {
        CommHook::PowerSgd { rank, .. } | CommHook::BatchedPowerSgd { rank, .. } => rank,
        _ => 1,
    };
    CommHook::parse(name, PowerSgdOptions { rank, ..PowerSgdOptions::default() })
        .unwrap_or(CommHook::None)
}

/// The placement of `nodes` nodes as `kind` says.
fn placement(kind: PlacementKind, nodes: usize, zones: usize) -> Result<PlacementSpec, String> {
    let spec = match kind {
        PlacementKind::Compact => PlacementSpec::tiered(Policy::Compact, None, Vec::new()),
        PlacementKind::Spread => PlacementSpec::tiered(
            Policy::Spread,
            Some("rack"),
            (0..nodes).map(|n| (format!("node{n}"), vec![NodeId(n)])).collect(),
        ),
        PlacementKind::Zones => PlacementSpec::tiered(
            Policy::Compact,
            Some("zone"),
            (0..zones)
                .map(|z| {
                    let members =
                        (z * nodes / zones..(z + 1) * nodes / zones).map(NodeId).collect();
                    (format!("zone{z}"), members)
                })
                .collect(),
        ),
    };
    spec.map_err(|e| e.to_string())
}

/// The tier a candidate's traffic crosses: the node's own links on one node, else the
/// network ("net"), and what separates its nodes: nothing more in a compact placement, the
/// rack tier when they are scattered over the zone, the zone tier across zones.
fn tier(inst: &Instance, nodes: usize, kind: PlacementKind) -> &'static str {
    if nodes == 1 {
        return if inst.node.nvlink.is_some() { "nvlink" } else { "pcie" };
    }
    match kind {
        PlacementKind::Compact => "net",
        PlacementKind::Spread => "net, scattered",
        PlacementKind::Zones => "net, cross-zone",
    }
}

/// A step counts as compute-bound while the communication it waits for is under this
/// fraction of it.
pub const COMPUTE_BOUND: f64 = 0.05;

/// Evaluates one candidate: the checks that need no simulation first, then the simulation
/// (collective times shared through `caches`), then the constraints on what it achieves.
fn evaluate(
    plan: &PlanSpec,
    c: &Candidate,
    params: &TimingParams,
    mode: Mode,
    caches: &Caches,
) -> Outcome {
    let inst = &plan.instances[c.instance];
    let gpus = c.nodes * inst.node.gpu.count;
    let mut out = Outcome {
        index: c.index,
        instance: inst.name.clone(),
        nodes: c.nodes,
        gpus,
        placement: c.placement,
        knobs: knob_label(c, None),
        metrics: None,
        rejected: None,
    };
    match run(plan, c, inst, params, mode, &caches.of(c), &mut out) {
        Ok(m) => {
            out.rejected = constraint(plan, &m);
            out.metrics = Some(m);
        }
        Err(why) => out.rejected = Some(why),
    }
    out
}

/// The first constraint `m` breaks, if any.
fn constraint(plan: &PlanSpec, m: &Metrics) -> Option<String> {
    let o = &plan.objective;
    if let Some(t) = o.throughput.filter(|&t| m.samples_per_s < t) {
        // A collective's unit of work is a call.
        let collective = plan
            .instances
            .iter()
            .filter_map(|i| i.workload.as_ref().ok())
            .any(|w| matches!(w, Workload::Sweep(_)));
        let unit = if collective { "calls/s" } else { "samples/s" };
        return Some(format!("{:.1} {unit}, below the target {t} {unit}", m.samples_per_s));
    }
    if let Some(d) = o.deadline_h.filter(|&d| m.train_hours > d) {
        return Some(format!("trains in {}, past the deadline {}", hours(m.train_hours), hours(d)));
    }
    if let (Some(b), Some(cost)) = (o.budget_usd, m.train_usd)
        && cost > b
    {
        return Some(format!("costs {}, over the budget {}", usd(cost), usd(b)));
    }
    None
}

/// "42 s", "12.5 min", "37.2 h", "2.3 d" or "3.1 y".
pub fn hours(h: f64) -> String {
    if h < 1.0 / 60.0 {
        format!("{:.0} s", h * 3600.0)
    } else if h < 1.0 {
        format!("{:.1} min", h * 60.0)
    } else if h < 48.0 {
        format!("{h:.1} h")
    } else if h < 24.0 * 365.0 {
        format!("{:.1} d", h / 24.0)
    } else if h < 24.0 * 365.0 * 1000.0 {
        format!("{:.1} y", h / (24.0 * 365.0))
    } else {
        format!("{:.3e} y", h / (24.0 * 365.0))
    }
}

/// "$12,345" (above a trillion: "$1.234e15").
pub fn usd(x: f64) -> String {
    if x.is_nan() || x >= 1e12 {
        return format!("${x:.3e}");
    }
    let whole = x.round() as u64;
    let s = whole.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    format!("${out}")
}

fn run(
    plan: &PlanSpec,
    c: &Candidate,
    inst: &Instance,
    params: &TimingParams,
    mode: Mode,
    cache: &crate::sim::CollCache,
    out: &mut Outcome,
) -> Result<Metrics, String> {
    let o = &plan.objective;
    inst.workload.as_ref().map_err(Clone::clone)?;
    if let Some(q) = o.max_nodes.filter(|&q| c.nodes > q) {
        return Err(format!("over the node quota ({q})"));
    }
    match c.placement {
        PlacementKind::Compact => {
            if let Some(m) = inst.compact_max_nodes.filter(|&m| c.nodes > m) {
                return Err(format!("one compact placement group holds at most {m} nodes"));
            }
        }
        PlacementKind::Spread if c.nodes == 1 => {
            return Err("one node: the same as compact".into());
        }
        PlacementKind::Zones if c.nodes < plan.zones => {
            return Err(format!("{} zones need at least {} nodes", plan.zones, plan.zones));
        }
        PlacementKind::Zones if !c.nodes.is_multiple_of(plan.zones) => {
            return Err(format!("{} nodes do not split evenly over {} zones", c.nodes, plan.zones));
        }
        PlacementKind::Zones => {
            let per = c.nodes / plan.zones;
            if let Some(m) = inst.compact_max_nodes.filter(|&m| per > m) {
                return Err(format!(
                    "{per} nodes per zone; one compact placement group holds at most {m}"
                ));
            }
        }
        _ => {}
    }
    let usd_per_hour = inst.price.as_ref().map(|(p, _)| p * c.nodes as f64);
    if usd_per_hour.is_none() && (o.budget_usd.is_some() || o.budget_usd_per_hour.is_some()) {
        return Err("no price, so the budget cannot be checked (give [instance] hourly)".into());
    }
    if let (Some(b), Some(cost)) = (o.budget_usd_per_hour, usd_per_hour)
        && cost > b
    {
        return Err(format!("{}/h, over the budget {}/h", usd(cost), usd(b)));
    }
    let mut nccl = plan.nccl.clone();
    if let Some(a) = &c.nccl_algo {
        // "auto": NCCL's own choice, whatever [nccl] says.
        nccl.retain(|(k, _)| k != "NCCL_ALGO");
        if a != "auto" {
            nccl.push(("NCCL_ALGO".into(), a.clone()));
        }
    }
    let mut scenario = Scenario {
        topology: inst.topology.clone(),
        node: inst.node.clone(),
        nodes: c.nodes,
        gpus_per_node: inst.node.gpu.count,
        gpus_per_process: 1,
        workload: inst.workload.clone()?,
        nccl,
        nccl_at: Default::default(),
        placement: placement(c.placement, c.nodes, plan.zones)?,
        jobs: Vec::new(),
        background: Vec::new(),
    };
    let capacity = inst.node.gpu.model.memory.get() as f64;
    // What the workload achieves (cost fields left for below), and its step in seconds.
    let (mut m, step_s) = match &mut scenario.workload {
        Workload::Ddp(spec) => {
            let accumulation = edit_ddp(plan, c, spec, out.gpus)?;
            out.knobs = knob_label(c, accumulation);
            let mem = match spec.profile.as_deref_mut() {
                Some(named) => {
                    // A model profile's step is one micro-batch; another is carried anew.
                    if let Some(k) = accumulation.filter(|&k| k > 1) {
                        return Err(format!(
                            "a model profile replays one micro-batch a step; the global batch needs {k} micro-steps of it"
                        ));
                    }
                    if c.micro_batch.is_some() {
                        named.micro_batch = c.micro_batch;
                        let (name, calls) =
                            named.replay(&inst.node.gpu.model).map_err(|(_, e)| e)?;
                        spec.model.name = name;
                        spec.calls = Some(calls);
                    }
                    crate::workload::memory::known_memory(spec, out.gpus, scenario.gpus_per_node)
                        .ok_or_else(|| {
                            format!(
                                "the model profile's memory is not known at micro-batch {}",
                                spec.micro_batch
                            )
                        })?
                }
                None => ddp_memory(spec, out.gpus, scenario.gpus_per_node),
            };
            if let Some(why) = mem.misfit(capacity, spec.memory_headroom) {
                return Err(format!("{MISFIT}: {why}"));
            }
            let (sequence, headroom) = (spec.sequence, spec.memory_headroom);
            let error = band::training(
                inst.node.gpu.model.sm,
                band::step_kind(spec),
                spec.rate.precision(),
            );
            let (r, beside) = match &plan.neighbours {
                None => {
                    let (r, _) = crate::sim::simulate_ddp_cached(&scenario, params, mode, cache)
                        .map_err(|e| e.to_string())?;
                    (r, None)
                }
                Some((_, nb)) => beside_neighbours(nb, &scenario, c, params, mode)?,
            };
            let bound = if r.exposed_comm_ms < COMPUTE_BOUND * r.iteration_time_ms {
                "compute".to_string()
            } else {
                format!("comm: {}", tier(inst, c.nodes, c.placement))
            };
            let m = Metrics {
                step_ms: r.iteration_time_ms,
                samples_per_s: r.samples_per_s,
                tokens_per_s: sequence.map(|s| r.samples_per_s * s as f64),
                scaling_efficiency: r.scaling_efficiency,
                compute_ms: r.compute_ms,
                exposed_comm_ms: r.exposed_comm_ms,
                bound,
                memory_gib: mem.total / GIB,
                memory_usable_gib: capacity * (1.0 - headroom) / GIB,
                beside,
                usd_per_hour: None,
                usd_per_m_samples: None,
                train_hours: 0.0,
                train_usd: None,
                band: error.fraction,
                band_from: error.from,
            };
            (m, r.iteration_time_ms * 1e-3)
        }
        Workload::Sweep(_) if plan.neighbours.is_some() => {
            return Err("a collective's plan takes no [neighbours] (training workloads do)".into());
        }
        Workload::Sweep(sweep) => {
            // One call of the sweep's largest size is the unit of work.
            sweep.min_bytes = sweep.max_bytes;
            let (rows, _) =
                crate::sim::simulate(&scenario, params, mode).map_err(|e| e.to_string())?;
            let row = rows.last().ok_or("the sweep has no sizes")?;
            let step_s = row.time_us * 1e-6;
            // The generation's held-out error, or the profile's size-band residual where that
            // is wider.
            let mut error = band::collective(inst.node.gpu.model.sm);
            let residual =
                (row.time_us_high / row.time_us - 1.0).max(1.0 - row.time_us_low / row.time_us);
            if residual > error.fraction {
                error = band::Band {
                    fraction: residual,
                    from: "the profile's size-band residual (p95 of its fit)".into(),
                };
            }
            let m = Metrics {
                step_ms: step_s * 1e3,
                samples_per_s: 1.0 / step_s,
                tokens_per_s: None,
                scaling_efficiency: 1.0,
                compute_ms: 0.0,
                exposed_comm_ms: step_s * 1e3,
                bound: format!(
                    "comm: {} ({} at {} GB/s busbw)",
                    tier(inst, c.nodes, c.placement),
                    Bytes::new(row.size_bytes),
                    (row.busbw * 10.0).round() / 10.0
                ),
                memory_gib: 0.0,
                memory_usable_gib: 0.0,
                beside: None,
                usd_per_hour: None,
                usd_per_m_samples: None,
                train_hours: 0.0,
                train_usd: None,
                band: error.fraction,
                band_from: error.from,
            };
            (m, step_s)
        }
        Workload::Idle => return Err("an idle workload has nothing to size".into()),
    };
    // The plan file is checked for amounts the workload cannot count (tokens without a
    // sequence, samples of a collective).
    m.train_hours = match plan.amount {
        Amount::Samples(n) => n / m.samples_per_s / 3600.0,
        Amount::Tokens(n) => {
            n / m.tokens_per_s.ok_or("train.tokens: the workload has no sequence length")? / 3600.0
        }
        Amount::Steps(n) => n as f64 * step_s / 3600.0,
    };
    m.usd_per_hour = usd_per_hour;
    m.usd_per_m_samples = usd_per_hour.map(|p| p / (m.samples_per_s * 3600.0) * 1e6);
    m.train_usd = usd_per_hour.map(|p| p * m.train_hours);
    Ok(m)
}

/// Applies a candidate's DDP knobs to `spec`; returns the gradient accumulation the global
/// batch asks for (None without one).
fn edit_ddp(
    plan: &PlanSpec,
    c: &Candidate,
    spec: &mut DdpSpec,
    gpus: usize,
) -> Result<Option<u64>, String> {
    if spec.sharding.is_some() && (c.bucket_cap_mb.is_some() || c.comm_hook.is_some()) {
        return Err("bucket_cap_mb and comm_hook are DDP's; this workload is FSDP".into());
    }
    if let Some(mb) = c.bucket_cap_mb {
        spec.bucket_cap = Some(crate::config::bucket_cap_bytes(mb));
    }
    if let Some(h) = &c.comm_hook {
        spec.hook = hook_named(h, &spec.hook);
    }
    if let Some(m) = c.micro_batch {
        spec.micro_batch = m;
    }
    if let Some(layout) = &mut spec.parallel {
        // A vocabulary padded by the tensor-parallel degree (Megatron's) is padded again.
        if let (Some(tp), Some(w), Some(seq)) = (c.tp, &spec.written, spec.sequence)
            && tp != layout.tp
        {
            spec.model = w.build(seq, spec.model.grad_dtype, tp as u64);
        }
        layout.tp = c.tp.unwrap_or(layout.tp);
        layout.pp = c.pp.unwrap_or(layout.pp);
        layout.cp = c.cp.unwrap_or(layout.cp);
        if layout.virtual_stages > 1 && layout.pp < 2 {
            return Err(format!(
                "the interleaved schedule ({} model chunks a stage) needs pp of 2 or more",
                layout.virtual_stages
            ));
        }
    }
    // A 3-D layout's replicas are its data-parallel ranks: tp x pp x cp GPUs each.
    let replicas = match &spec.parallel {
        Some(layout) => {
            let mp = layout.tp * layout.pp * layout.cp;
            if !gpus.is_multiple_of(mp) {
                let what = if layout.cp > 1 { "tp x pp x cp" } else { "tp x pp" };
                return Err(format!("{what} = {mp} does not divide {gpus} GPUs"));
            }
            gpus / mp
        }
        None => gpus,
    };
    let what = match &spec.parallel {
        Some(_) => format!("{replicas} data-parallel replicas"),
        None => format!("{gpus} GPUs"),
    };
    if let Some(g) = plan.global_batch {
        let per_step = replicas as u64 * spec.micro_batch;
        if g % per_step != 0 {
            return Err(format!(
                "global batch {g} is not a multiple of {what} x micro-batch {}",
                spec.micro_batch
            ));
        }
        if g / per_step > crate::config::MAX_GRAD_ACCUMULATION {
            return Err(format!(
                "global batch {g} needs {} micro-steps of {what} x {}; at most {}",
                g / per_step,
                spec.micro_batch,
                crate::config::MAX_GRAD_ACCUMULATION
            ));
        }
        spec.grad_accumulation = g / per_step;
        let most = crate::config::MAX_SHARDED_ACCUMULATION;
        if spec.sharding.is_some() && spec.grad_accumulation > most {
            return Err(format!(
                "global batch {g} needs {} micro-steps of {what} x {}; a sharded step takes at most {most}",
                spec.grad_accumulation, spec.micro_batch
            ));
        }
    }
    if let Some(layout) = &spec.parallel {
        layout.check(&spec.model, gpus, spec.grad_accumulation).map_err(|e| e.why)?;
    }
    Ok(plan.global_batch.map(|_| spec.grad_accumulation))
}

/// The ranked plan: solutions best first, the Pareto front marked, the rejected after.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ranking {
    /// Solutions, best first.
    pub ranked: Vec<Ranked>,
    /// Rejected candidates, in candidate order.
    pub rejected: Vec<Outcome>,
    /// The recommendation, one line.
    pub recommendation: Option<String>,
    /// The candidate recommended (its number, as `index` in `ranked`).
    pub recommended: Option<usize>,
    /// The error band the decision used where the objective names no margin
    /// ([`reference_band`]); each solution carries its own in its metrics.
    pub band: f64,
}

/// A solution with its rank.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ranked {
    /// 1 for the best.
    pub rank: usize,
    /// On the time/cost Pareto front (no other solution is as fast and as cheap, and better
    /// in one).
    pub pareto: bool,
    /// Its step time, time and cost to train, low and high, under the error band.
    pub band: Band,
    /// The outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A solution's figures as low and high ends of the error band: the simulated figure divided
/// and multiplied by one plus the band.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Band {
    /// One step, ms.
    pub step_ms: [f64; 2],
    /// Hours to train.
    pub train_hours: [f64; 2],
    /// USD to train, if priced.
    pub train_usd: Option<[f64; 2]>,
}

/// The band a plan's decision uses where its objective names none (`within`): the band of
/// the cheapest solution under the cost objectives (of the fastest where none is priced), of
/// the fastest under time; 0 with no solution. Figures apart by less than it the model cannot
/// tell apart.
fn reference_band(minimise: Minimise, solutions: &[(Outcome, bool)]) -> f64 {
    let by = |k: fn(&Outcome) -> f64| {
        solutions
            .iter()
            .map(|s| &s.0)
            .min_by(|a, b| k(a).total_cmp(&k(b)).then(a.index.cmp(&b.index)))
    };
    let hours = |o: &Outcome| point(o).0;
    let pick = match minimise {
        Minimise::Time => by(hours),
        _ => by(cost).filter(|o| point(o).1.is_some()).or_else(|| by(hours)),
    };
    pick.and_then(|o| o.metrics.as_ref()).map_or(0.0, |m| m.band)
}

/// A solution's figures under its band (a candidate without metrics, which no solution is:
/// zeros).
fn band_of(o: &Outcome) -> Band {
    let m = o.metrics.as_ref();
    let b = m.map_or(0.0, |m| m.band);
    let range = |x: f64| [x / (1.0 + b), x * (1.0 + b)];
    Band {
        step_ms: range(m.map_or(0.0, |m| m.step_ms)),
        train_hours: range(m.map_or(0.0, |m| m.train_hours)),
        train_usd: m.and_then(|m| m.train_usd).map(range),
    }
}

/// The sort key of a solution under `minimise`: priced before unpriced for cost, then the
/// objective, the other measure, and the candidate number (an outcome without metrics, which
/// no solution is: after every solution).
fn order(minimise: Minimise, a: &Outcome, b: &Outcome) -> std::cmp::Ordering {
    let key = |o: &Outcome| {
        let (hours, usd) = point(o);
        let cost = usd.unwrap_or(f64::INFINITY);
        match minimise {
            Minimise::Cost | Minimise::CostWithin | Minimise::Knee => (usd.is_none(), cost, hours),
            Minimise::Time => (false, hours, cost),
        }
    };
    let (ka, kb) = (key(a), key(b));
    ka.0.cmp(&kb.0)
        .then(ka.1.total_cmp(&kb.1))
        .then(ka.2.total_cmp(&kb.2))
        .then(a.index.cmp(&b.index))
}

/// Which of `points` (time, cost) are on the Pareto front: priced, and no other priced point
/// is as fast and as cheap and better in one. One pass over them sorted by time: a point is on
/// the front when it is the cheapest of its time and cheaper than everything faster.
fn pareto_front(points: &[(f64, Option<f64>)]) -> Vec<bool> {
    let mut priced: Vec<(f64, f64, usize)> =
        points.iter().enumerate().filter_map(|(i, &(t, c))| Some((t, c?, i))).collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut front = vec![false; points.len()];
    let mut faster_min = f64::INFINITY;
    let mut k = 0;
    while k < priced.len() {
        // Points of one time, cheapest first.
        let t = priced[k].0;
        let end = k + priced[k..].iter().take_while(|p| p.0 == t).count();
        let cheapest = priced[k].1;
        for &(_, c, i) in &priced[k..end] {
            front[i] = c == cheapest && c < faster_min;
        }
        faster_min = faster_min.min(cheapest);
        k = end;
    }
    front
}

/// Ranks outcomes (any order; each candidate once) by the plan's objective `o`, each
/// candidate's figures carrying its error band: the recommended solution first ([`choose`],
/// with [`reference_band`] as the margin `within` leaves to the model), then the others in
/// the objective's order.
pub fn rank(o: &Objective, mut outcomes: Vec<Outcome>) -> Ranking {
    outcomes.sort_by_key(|o| o.index);
    let (mut ok, rejected): (Vec<Outcome>, Vec<Outcome>) =
        outcomes.into_iter().partition(|o| o.rejected.is_none() && o.metrics.is_some());
    let minimise = o.minimise;
    ok.sort_by(|a, b| order(minimise, a, b));
    let points: Vec<(f64, Option<f64>)> = ok.iter().map(point).collect();
    let pareto = pareto_front(&points);
    let mut solutions: Vec<(Outcome, bool)> = ok.into_iter().zip(pareto).collect();
    let band = reference_band(minimise, &solutions);
    let margin = o.within.unwrap_or(band);
    if let Some(first) = choose(minimise, margin, &solutions) {
        // The chosen one first; under cost-within the rest of the margin's solutions by time,
        // then the others by cost.
        let chosen = solutions.remove(first);
        if minimise == Minimise::CostWithin {
            let cheapest =
                cheapest_cost(&solutions).map_or(f64::INFINITY, |c| c.min(cost(&chosen.0)));
            solutions.sort_by(|a, b| {
                let within = |x: &Outcome| cost(x) <= cheapest * (1.0 + margin);
                within(&b.0).cmp(&within(&a.0)).then_with(|| match within(&a.0) {
                    true => order(Minimise::Time, &a.0, &b.0),
                    false => order(Minimise::Cost, &a.0, &b.0),
                })
            });
        }
        solutions.insert(0, chosen);
    }
    let ranked: Vec<Ranked> = solutions
        .into_iter()
        .enumerate()
        .map(|(i, (outcome, pareto))| {
            let band = band_of(&outcome);
            Ranked { rank: i + 1, pareto, band, outcome }
        })
        .collect();
    let recommendation = recommend(o, band, &ranked);
    let recommended = ranked.first().map(|r| r.outcome.index);
    Ranking { ranked, rejected, recommendation, recommended, band }
}

/// A solution's (hours, USD) to train (a candidate without metrics, which no solution is:
/// never done, never priced).
fn point(o: &Outcome) -> (f64, Option<f64>) {
    o.metrics.as_ref().map_or((f64::INFINITY, None), |m| (m.train_hours, m.train_usd))
}

/// A solution's USD to train (unpriced: infinite).
fn cost(o: &Outcome) -> f64 {
    point(o).1.unwrap_or(f64::INFINITY)
}

/// The lowest cost to train among priced solutions.
fn cheapest_cost(solutions: &[(Outcome, bool)]) -> Option<f64> {
    solutions.iter().filter_map(|s| point(&s.0).1).min_by(f64::total_cmp)
}

/// Which of `solutions` (sorted by the objective's order, each with whether it is on the
/// Pareto front) the objective recommends: the first under cost and time; under cost-within
/// the fastest whose cost is at most `margin` above the cheapest; at the knee, [`knee`] of the
/// front. None where there is no solution.
fn choose(minimise: Minimise, margin: f64, solutions: &[(Outcome, bool)]) -> Option<usize> {
    if solutions.is_empty() {
        return None;
    }
    match minimise {
        Minimise::Cost | Minimise::Time => Some(0),
        Minimise::CostWithin => {
            let Some(cheapest) = cheapest_cost(solutions) else { return Some(0) };
            (0..solutions.len())
                .filter(|&i| cost(&solutions[i].0) <= cheapest * (1.0 + margin))
                .min_by(|&a, &b| order(Minimise::Time, &solutions[a].0, &solutions[b].0))
        }
        Minimise::Knee => {
            let front: Vec<(usize, f64, f64)> = solutions
                .iter()
                .enumerate()
                .filter(|(_, s)| s.1)
                .filter_map(|(i, s)| {
                    let (t, c) = point(&s.0);
                    Some((i, t, c?))
                })
                .collect();
            let pts: Vec<(f64, f64)> = front.iter().map(|&(_, t, c)| (t, c)).collect();
            knee(&pts).map(|k| front[k].0).or(Some(0))
        }
    }
}

/// The knee of a time/cost Pareto front (`points`: (time, cost), each on the front): with
/// time and cost each scaled to 0..1 over the front, the point farthest below the straight
/// line from the fastest point to the cheapest (Kneedle's rule, Satopää et al., 2011), i.e.
/// the smallest scaled time plus scaled cost; ties to the cheaper. Where the front is one or
/// two points, its cheapest. None for no points.
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    let cheapest = (0..points.len()).min_by(|&a, &b| {
        points[a].1.total_cmp(&points[b].1).then(points[a].0.total_cmp(&points[b].0))
    })?;
    if points.len() < 3 {
        return Some(cheapest);
    }
    let span = |f: fn(&(f64, f64)) -> f64| {
        let lo = points.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
        (lo, if hi > lo { hi - lo } else { 1.0 })
    };
    let ((t0, dt), (c0, dc)) = (span(|p| p.0), span(|p| p.1));
    let score = |p: &(f64, f64)| (p.0 - t0) / dt + (p.1 - c0) / dc;
    (0..points.len()).min_by(|&a, &b| {
        score(&points[a]).total_cmp(&score(&points[b])).then(points[a].1.total_cmp(&points[b].1))
    })
}

/// "16 × aws-p5 compact: …": a label for a solution.
pub fn label(o: &Outcome) -> String {
    let knobs = if o.knobs.is_empty() { String::new() } else { format!(" ({})", o.knobs) };
    format!("{} x {} {}{knobs}", o.nodes, o.instance, o.placement.name())
}

/// One line on the recommended solution and why: the other side of its trade (the nearest
/// faster point of the front, or cheaper under `time`), and the solutions the error band
/// `band` cannot tell from it.
fn recommend(o: &Objective, band: f64, ranked: &[Ranked]) -> Option<String> {
    let best = ranked.first()?;
    let m = best.outcome.metrics.as_ref()?;
    let metrics = |r: &Ranked| r.outcome.metrics.clone();
    let hours_of = |r: &Ranked| metrics(r).map_or(f64::INFINITY, |x| x.train_hours);
    let usd_of = |r: &Ranked| metrics(r).and_then(|x| x.train_usd);
    let pct = |x: f64| {
        let p = 100.0 * x;
        if p >= 0.1 { format!("{p:.1} %") } else { format!("{p:.2e} %") }
    };
    let margin = o.within.unwrap_or(band);
    let cheapest = ranked
        .iter()
        .filter(|r| usd_of(r).is_some())
        .min_by(|a, b| usd_of(a).unwrap_or(0.0).total_cmp(&usd_of(b).unwrap_or(0.0)));
    let why = match (o.minimise, m.train_usd) {
        (Minimise::Cost, Some(c)) => format!(
            "meets every constraint at the lowest cost to train ({}, {})",
            usd(c),
            hours(m.train_hours)
        ),
        (Minimise::Cost | Minimise::CostWithin | Minimise::Knee, None) => format!(
            "no candidate that meets the constraints has a price; fastest ({})",
            hours(m.train_hours)
        ),
        (Minimise::Time, c) => format!(
            "meets every constraint in the shortest time to train ({}{})",
            hours(m.train_hours),
            c.map_or(String::new(), |c| format!(", {}", usd(c)))
        ),
        (Minimise::CostWithin, Some(c)) => {
            let low = cheapest.and_then(usd_of).unwrap_or(c);
            let n = ranked
                .iter()
                .filter(|r| usd_of(r).is_some_and(|x| x <= low * (1.0 + margin)))
                .count();
            let from = cheapest.filter(|r| r.rank != best.rank).map_or(String::new(), |r| {
                format!(" ({}, {}, {})", label(&r.outcome), usd(low), hours(hours_of(r)))
            });
            if n <= 1 {
                format!(
                    "the cheapest ({}, {}); no other solution is within {} of its cost",
                    usd(c),
                    hours(m.train_hours),
                    pct(margin)
                )
            } else {
                format!(
                    "the fastest of the {n} solutions within {} of the cheapest cost to train{from}: {}, {} ({:+.1} %)",
                    pct(margin),
                    hours(m.train_hours),
                    usd(c),
                    100.0 * (c / low - 1.0)
                )
            }
        }
        (Minimise::Knee, Some(c)) => {
            let fastest = ranked
                .iter()
                .filter(|r| r.pareto && usd_of(r).is_some())
                .min_by(|a, b| hours_of(a).total_cmp(&hours_of(b)));
            let side = |r: Option<&Ranked>, what: &str| {
                r.filter(|r| r.rank != best.rank).and_then(|r| {
                    let x = usd_of(r)?;
                    Some(format!(
                        "; the {what}, {}, takes {:.2}x as long for {:.2}x the cost",
                        label(&r.outcome),
                        hours_of(r) / m.train_hours,
                        x / c
                    ))
                })
            };
            let front = ranked.iter().filter(|r| r.pareto && usd_of(r).is_some()).count();
            let what = if front <= 1 {
                "the only point of the time/cost front"
            } else {
                "the knee of the time/cost front"
            };
            format!(
                "{what} ({}, {}){}{}",
                hours(m.train_hours),
                usd(c),
                side(cheapest, "cheapest").unwrap_or_default(),
                side(fastest, "fastest").unwrap_or_default()
            )
        }
    };
    // The other side of the trade: for cost (and the margin), the nearest faster point of the
    // front; for time, the nearest cheaper one.
    let front = ranked.iter().filter(|r| r.pareto && r.rank != best.rank);
    let alt = match o.minimise {
        Minimise::Cost | Minimise::CostWithin => front
            .filter(|r| hours_of(r) < m.train_hours)
            .max_by(|a, b| hours_of(a).total_cmp(&hours_of(b)).then(b.rank.cmp(&a.rank))),
        Minimise::Time => front
            .filter(|r| usd_of(r).zip(m.train_usd).is_some_and(|(a, b)| a < b))
            .min_by(|a, b| hours_of(a).total_cmp(&hours_of(b)).then(a.rank.cmp(&b.rank))),
        Minimise::Knee => None,
    };
    let trade = alt.filter(|a| Some(a.rank) != near_pick(o, band, ranked, m)).map(|a| {
        let mut cost = match (usd_of(a), m.train_usd) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x the cost", a / b),
            _ => "an unknown cost".into(),
        };
        // Its figures less certain (or more) than the recommended one's: say so.
        if let Some(x) = metrics(a).filter(|x| (x.band - m.band).abs() >= 5e-4) {
            cost +=
                &format!(" (its band {}, {}, against {})", pct(x.band), x.band_from, pct(m.band));
        }
        match o.minimise {
            Minimise::Time => format!(
                "; {} would take {:.2}x as long for {cost}",
                label(&a.outcome),
                hours_of(a) / m.train_hours
            ),
            _ => format!(
                "; {} would be {:.2}x faster for {cost}",
                label(&a.outcome),
                m.train_hours / hours_of(a)
            ),
        }
    });
    // What the band cannot tell apart: under cost, the solutions within it of the best's
    // cost, and the fastest of them; under time, those within it of its time, and the
    // cheapest of them ([`near_pick`]).
    let others = || ranked.iter().filter(|r| r.rank != best.rank);
    let near = near_pick(o, band, ranked, m)
        .and_then(|rank| ranked.iter().find(|r| r.rank == rank))
        .map(|f| {
            let price = usd_of(f).map_or("no price".into(), usd);
            if o.minimise == Minimise::Time {
                let n = others().filter(|r| hours_of(r) <= m.train_hours * (1.0 + band)).count();
                format!(
                    "; {n} more within collsim's {} error band of that time, which it cannot tell from it: the cheapest, {}, costs {price} ({})",
                    pct(band),
                    label(&f.outcome),
                    hours(hours_of(f))
                )
            } else {
                let c = m.train_usd.unwrap_or(f64::INFINITY);
                let n = others().filter(|r| usd_of(r).is_some_and(|x| x <= c * (1.0 + band))).count();
                format!(
                    "; {n} more within collsim's {} error band of that cost, which it cannot tell from it: the fastest, {}, trains in {} for {price} (minimise = \"cost-within\" picks it)",
                    pct(band),
                    label(&f.outcome),
                    hours(hours_of(f))
                )
            }
        });
    Some(format!(
        "{}: {why}{}{}",
        label(&best.outcome),
        trade.unwrap_or_default(),
        near.unwrap_or_default()
    ))
}

/// The solution [`recommend`]'s band note names (the fastest within the band of the cost, or
/// the cheapest within the band of the time, when it beats the recommended one), by rank.
fn near_pick(o: &Objective, band: f64, ranked: &[Ranked], m: &Metrics) -> Option<usize> {
    let best = ranked.first()?.rank;
    let hours_of = |r: &Ranked| r.outcome.metrics.as_ref().map_or(f64::INFINITY, |x| x.train_hours);
    let usd_of = |r: &Ranked| r.outcome.metrics.as_ref().and_then(|x| x.train_usd);
    let others = ranked.iter().filter(|r| r.rank != best);
    match (o.minimise, m.train_usd) {
        (Minimise::Cost, Some(c)) => others
            .filter(|r| usd_of(r).is_some_and(|x| x <= c * (1.0 + band)))
            .min_by(|a, b| hours_of(a).total_cmp(&hours_of(b)).then(a.rank.cmp(&b.rank)))
            .filter(|f| hours_of(f) < m.train_hours)
            .map(|f| f.rank),
        (Minimise::Time, Some(c)) => others
            .filter(|r| hours_of(r) <= m.train_hours * (1.0 + band))
            .filter(|r| usd_of(r).is_some_and(|x| x < c))
            .min_by(|a, b| {
                usd_of(a)
                    .unwrap_or(0.0)
                    .total_cmp(&usd_of(b).unwrap_or(0.0))
                    .then(a.rank.cmp(&b.rank))
            })
            .map(|f| f.rank),
        _ => None,
    }
}

/// How far a simulated candidate is from meeting `o`: the largest ratio of what it needs over
/// what the constraints allow (1 or less: it meets them all).
fn shortfall(o: &crate::config::plan::Objective, m: &Metrics) -> f64 {
    let mut r: f64 = 0.0;
    if let Some(t) = o.throughput {
        r = r.max(t / m.samples_per_s);
    }
    if let Some(d) = o.deadline_h {
        r = r.max(m.train_hours / d);
    }
    if let (Some(b), Some(c)) = (o.budget_usd, m.train_usd) {
        r = r.max(if b > 0.0 { c / b } else { f64::INFINITY });
    }
    r
}

/// Why no candidate is a solution, naming the closest ones: those that were simulated, least
/// short of the constraints first.
pub fn no_solution(
    plan_name: &str,
    ranking: &Ranking,
    o: &crate::config::plan::Objective,
) -> String {
    let mut near: Vec<(&Outcome, f64)> = ranking
        .rejected
        .iter()
        .filter_map(|c| Some((c, shortfall(o, c.metrics.as_ref()?))))
        .collect();
    near.sort_by(|a, b| a.1.total_cmp(&b.1).then(order(o.minimise, a.0, b.0)));
    let closest: Vec<String> = near
        .iter()
        .take(3)
        .map(|(c, _)| format!("{} ({})", label(c), c.rejected.as_deref().unwrap_or("")))
        .collect();
    if closest.is_empty() {
        format!(
            "{plan_name}: no candidate meets the plan; none could even be simulated (see the rejected list)"
        )
    } else {
        format!("{plan_name}: no candidate meets the plan; the closest: {}", closest.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, point by point.
    fn front_by_definition(points: &[(f64, Option<f64>)]) -> Vec<bool> {
        points
            .iter()
            .map(|&(t, c)| {
                let Some(c) = c else { return false };
                !points
                    .iter()
                    .any(|&(pt, pc)| pc.is_some_and(|pc| pt <= t && pc <= c && (pt < t || pc < c)))
            })
            .collect()
    }

    #[test]
    fn the_knee_is_the_front_point_nearest_the_ideal_corner() {
        // A front that buys time cheaply until 4 h, then dearly: the knee is the 4 h point.
        let front = [(1.0, 100.0), (2.0, 40.0), (4.0, 12.0), (8.0, 11.0), (16.0, 10.0)];
        assert_eq!(knee(&front), Some(2));
        // Two points or one: the cheapest.
        assert_eq!(knee(&[(1.0, 5.0), (2.0, 4.0)]), Some(1));
        assert_eq!(knee(&[(3.0, 5.0)]), Some(0));
        assert_eq!(knee(&[]), None);
        // A straight front: every point on the chord; ties go to the cheaper.
        assert_eq!(knee(&[(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]), Some(2));
    }

    #[test]
    fn the_one_pass_front_is_the_definition() {
        // Coarse values, so that times and costs tie often; some unpriced.
        let mut x: u64 = 12345;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for n in [0, 1, 2, 5, 20, 200] {
            let points: Vec<(f64, Option<f64>)> = (0..n)
                .map(|_| {
                    let t = next(8) as f64;
                    let c = (next(5) != 0).then(|| next(8) as f64);
                    (t, c)
                })
                .collect();
            assert_eq!(pareto_front(&points), front_by_definition(&points), "{points:?}");
        }
    }
}
