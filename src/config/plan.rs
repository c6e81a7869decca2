//! Plan files (`collsim plan`): the workload to size, the candidates to try, the objective and
//! its constraints, and price overrides. Every key is documented in `scenarios/plan-gpt2xl.toml`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::raw::{RawScenario, RawWorkload};
use super::scenario::{MAX_MICRO_BATCH, bucket_cap_mb, positive};

/// Largest tensor-parallel or pipeline degree a plan names (as a scenario's).
const MAX_DEGREE: usize = 1 << 16;
use super::{ConfigError, Source, TopologySource, Workload, resolve_topology};
use crate::hw::NodeSpec;
use crate::workload::ddp::{CommHook, PowerSgdOptions};

type S<T> = Spanned<T>;

/// Most nodes one candidate may have: a plan simulates every candidate, and a cluster this big
/// takes seconds per collective already.
pub const MAX_NODES: usize = 16_384;

/// Most nodes a search for the smallest node count tries where the plan sets no quota
/// (objective.max_nodes): 8,192 GPUs of eight-GPU nodes, about the largest jobs published
/// (MLPerf's 11,616-GPU GPT-3 excepted).
pub const SEARCH_MAX_NODES: usize = 1024;

/// Most candidates one plan may have.
pub const MAX_CANDIDATES: usize = 1_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    scenario: Option<S<String>>,
    workload: Option<RawWorkload>,
    nccl: Option<BTreeMap<String, S<toml::Value>>>,
    train: Option<RawTrain>,
    candidates: RawCandidates,
    objective: Option<RawObjective>,
    instance: Option<BTreeMap<String, S<RawInstance>>>,
    neighbours: Option<RawNeighbours>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbours {
    scenario: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrain {
    samples: Option<S<f64>>,
    tokens: Option<S<f64>>,
    steps: Option<S<i64>>,
    global_batch: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCandidates {
    instances: S<Vec<String>>,
    nodes: Option<S<toml::Value>>,
    placements: Option<S<Vec<String>>>,
    zones: Option<S<i64>>,
    compact_max_nodes: Option<S<i64>>,
    bucket_cap_mb: Option<S<Vec<f64>>>,
    comm_hook: Option<S<Vec<String>>>,
    nccl_algo: Option<S<Vec<String>>>,
    micro_batch: Option<S<Vec<i64>>>,
    tp: Option<S<Vec<i64>>>,
    pp: Option<S<Vec<i64>>>,
    cp: Option<S<Vec<i64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawObjective {
    minimise: Option<S<String>>,
    within: Option<S<String>>,
    throughput: Option<S<f64>>,
    deadline: Option<S<String>>,
    budget: Option<S<String>>,
    budget_per_hour: Option<S<String>>,
    max_nodes: Option<S<i64>>,
    pricing: Option<S<String>>,
    region: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    on_demand: Option<S<String>>,
    spot: Option<S<String>>,
    committed: Option<S<String>>,
    region: Option<S<String>>,
    hourly: Option<S<String>>,
    source: Option<String>,
    date: Option<S<String>>,
    compact_max_nodes: Option<S<i64>>,
}

/// How the nodes of a candidate are placed (the seed's placement tiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementKind {
    /// One compact placement group (GCP compact placement policy, AWS cluster placement
    /// group): the fabric's own latency; racks filled in order.
    Compact,
    /// No placement policy: nodes scattered over the zone, each pair of nodes separated by the
    /// `rack` tier; dealt round-robin over racks where the fabric has them.
    Spread,
    /// Nodes split evenly over `zones` zones (the `zone` tier between them), compact in each.
    Zones,
}

impl PlacementKind {
    /// Its name in plan files.
    pub fn name(self) -> &'static str {
        match self {
            PlacementKind::Compact => "compact",
            PlacementKind::Spread => "spread",
            PlacementKind::Zones => "zones",
        }
    }
}

/// How much training there is.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Amount {
    /// Samples (images, sequences).
    Samples(f64),
    /// Tokens (transformers: samples × sequence).
    Tokens(f64),
    /// Optimizer steps.
    Steps(u64),
}

/// What to minimise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Minimise {
    /// Cost to train (unpriced candidates rank after priced ones).
    Cost,
    /// Time to train.
    Time,
    /// Time to train, among the candidates whose cost is within a margin of the cheapest
    /// (`within`, else the candidates' own error band): the fastest of those the model cannot
    /// tell apart in cost.
    #[serde(rename = "cost-within")]
    CostWithin,
    /// The knee of the time/cost Pareto front: the point where buying more speed starts to
    /// cost more than it saves ([`crate::plan::knee`]).
    Knee,
}

impl Minimise {
    /// As a plan file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Minimise::Cost => "cost",
            Minimise::Time => "time",
            Minimise::CostWithin => "cost-within",
            Minimise::Knee => "knee",
        }
    }
}

/// Which price a plan pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pricing {
    /// On-demand (or the plan's amortised `hourly`).
    OnDemand,
    /// Spot / preemptible where published (else on-demand).
    Spot,
    /// A committed-use (reserved, savings-plan) price the plan's `[instance.X] committed`
    /// gives (else on-demand: no preset carries one).
    Committed,
}

impl Pricing {
    /// Its name in plan files.
    pub fn name(self) -> &'static str {
        match self {
            Pricing::OnDemand => "on_demand",
            Pricing::Spot => "spot",
            Pricing::Committed => "committed",
        }
    }
}

/// The objective and its constraints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Objective {
    /// What to minimise.
    pub minimise: Minimise,
    /// With `cost-within`: how far above the cheapest cost a candidate may be, as a fraction
    /// (None: the candidates' own error band).
    pub within: Option<f64>,
    /// Samples per second the job must reach.
    pub throughput: Option<f64>,
    /// Hours within which training must finish.
    pub deadline_h: Option<f64>,
    /// Total USD the training may cost.
    pub budget_usd: Option<f64>,
    /// USD per hour the cluster may cost.
    pub budget_usd_per_hour: Option<f64>,
    /// Most nodes the quota allows.
    pub max_nodes: Option<usize>,
    /// Which price.
    pub pricing: Pricing,
    /// The cloud region the prices must be for (None: whatever region each price is for).
    #[serde(default)]
    pub region: Option<String>,
}

/// An instance type (a topology) and what the plan knows of its price and placement limits.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Its name (a preset, or the topology file as given).
    pub name: String,
    /// Where the topology came from.
    pub topology: TopologySource,
    /// The node.
    pub node: NodeSpec,
    /// USD per node-hour at the plan's pricing, and where it comes from; None: no price.
    pub price: Option<(f64, String)>,
    /// Why it has no price where it has a listed one (for another region).
    pub unpriced: Option<String>,
    /// Most nodes one compact placement group holds, if limited.
    pub compact_max_nodes: Option<usize>,
    /// The workload on this node, or why it cannot run there.
    pub workload: Result<Workload, String>,
}

/// A parsed plan.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The plan file, as given.
    pub name: String,
    /// A hash of the plan's inputs (plan text, scenario text): shards of different plans do
    /// not merge.
    pub fingerprint: String,
    /// The candidate instances.
    pub instances: Vec<Instance>,
    /// Node counts (a search: filled in by [`crate::plan::search`] before the candidates are
    /// numbered).
    pub nodes: Vec<usize>,
    /// Without a node list: the most nodes the search for the smallest count that meets the
    /// deadline or throughput may try (the quota, else [`SEARCH_MAX_NODES`]).
    pub search: Option<usize>,
    /// Placements.
    pub placements: Vec<PlacementKind>,
    /// Zones of the `zones` placement.
    pub zones: usize,
    /// `bucket_cap_mb` values (None: the workload's own).
    pub bucket_cap_mb: Vec<Option<f64>>,
    /// Communication hooks (None: the workload's own).
    pub comm_hook: Vec<Option<String>>,
    /// NCCL_ALGO values (None: NCCL's choice).
    pub nccl_algo: Vec<Option<String>>,
    /// Micro-batches (None: the workload's own).
    pub micro_batch: Vec<Option<u64>>,
    /// Tensor-parallel degrees of a 3-D layout (None: the workload's own).
    pub tp: Vec<Option<usize>>,
    /// Pipeline stages of a 3-D layout (None: the workload's own).
    pub pp: Vec<Option<usize>>,
    /// Context-parallel degrees (None: the workload's own).
    pub cp: Vec<Option<usize>>,
    /// Samples per optimizer step over all GPUs, kept by gradient accumulation.
    pub global_batch: Option<u64>,
    /// How much training there is.
    pub amount: Amount,
    /// The objective.
    pub objective: Objective,
    /// NCCL_* variables every candidate runs with.
    pub nccl: Vec<(String, String)>,
    /// The scenario file the workload comes from, if it does.
    pub scenario: Option<std::path::PathBuf>,
    /// `[neighbours]`: a cluster and the jobs already on it, beside which every candidate runs
    /// on the nodes they leave free (its file, and the scenario).
    pub neighbours: Option<(std::path::PathBuf, Box<super::Scenario>)>,
}

/// A plan's `[instance.X]`: its on-demand (or amortised) and spot prices with where they come
/// from, and its compact_max_nodes.
#[derive(Default)]
struct Override {
    base: Option<(f64, String)>,
    spot: Option<(f64, String)>,
    committed: Option<(f64, String)>,
    compact: Option<usize>,
}

/// A USD figure: "500 USD" (`unit` "USD") or "32.77 USD/h" (`unit` "USD/h").
fn usd(t: &str, unit: &str) -> Result<f64, String> {
    let num = t
        .trim()
        .strip_suffix(unit)
        .map(str::trim)
        .ok_or_else(|| format!("expected an amount like \"100 {unit}\", got {t:?}"))?;
    match num.replace('_', "").parse::<f64>() {
        Ok(x) if (0.0..=1e12).contains(&x) => Ok(x),
        Ok(x) if x > 1e12 => Err(format!("{t:?}: at most 1e12 {unit}")),
        Ok(x) if x < 0.0 => Err(format!("must not be negative (got {t:?})")),
        _ => Err(format!("expected a non-negative number of {unit}, got {t:?}")),
    }
}

/// A duration in hours: "72 h", "3 d", "90 min", "3600 s" (at most 100 years).
fn hours(t: &str) -> Result<f64, String> {
    let t = t.trim();
    let units = [("min", 1.0 / 60.0), ("h", 1.0), ("d", 24.0), ("s", 1.0 / 3600.0)];
    let Some((num, scale)) = units.iter().find_map(|(u, k)| t.strip_suffix(u).map(|n| (n, *k)))
    else {
        return Err(format!("expected a duration like \"72 h\" (s, min, h, d), got {t:?}"));
    };
    match num.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x * scale <= 876_000.0 => Ok(x * scale),
        Ok(x) if x.is_finite() && x > 0.0 => Err(format!("{t:?}: at most 100 years")),
        _ => Err(format!("expected a positive duration like \"72 h\", got {t:?}")),
    }
}

/// The node counts: a list, or `{ from, to, step }` / `{ from, to, factor }`.
fn node_counts(src: &Source<'_>, v: &S<toml::Value>) -> Result<Vec<usize>, ConfigError> {
    const MAX: i64 = MAX_NODES as i64;
    let field = "candidates.nodes";
    let out = src.check(field, v, |val| {
        let int = |x: &toml::Value, what: &str| match x.as_integer() {
            Some(n) if (1..=MAX).contains(&n) => Ok(n as usize),
            _ => Err(format!("{what} must be a whole number of nodes from 1 to {MAX} (got {x})")),
        };
        match val {
            toml::Value::Array(a) if a.len() > 4096 => {
                Err(format!("{} node counts: at most 4096", a.len()))
            }
            toml::Value::Array(a) => a.iter().map(|x| int(x, "each count")).collect(),
            toml::Value::Table(t) => {
                if let Some(k) =
                    t.keys().find(|k| !["from", "to", "step", "factor"].contains(&k.as_str()))
                {
                    return Err(format!("unknown key {k:?} (from, to, and step or factor)"));
                }
                let get = |k: &str| {
                    t.get(k).ok_or_else(|| format!("{k} missing")).and_then(|x| int(x, k))
                };
                let (from, to) = (get("from")?, get("to")?);
                if to < from {
                    return Err(format!("to ({to}) is below from ({from})"));
                }
                let mut out = Vec::new();
                match (t.get("step"), t.get("factor")) {
                    (Some(_), Some(_)) => return Err("give step or factor, not both".into()),
                    (None, Some(_)) => {
                        let f = get("factor")?;
                        if f < 2 {
                            return Err(format!("factor must be at least 2 (got {f})"));
                        }
                        let mut n = from;
                        while n <= to {
                            out.push(n);
                            n *= f;
                        }
                    }
                    (s, None) => {
                        let step = if s.is_some() { get("step")? } else { 1 };
                        out.extend((from..=to).step_by(step));
                    }
                }
                if out.len() > 4096 {
                    return Err(format!("{} node counts: at most 4096", out.len()));
                }
                Ok(out)
            }
            other => Err(format!(
                "expected a list of node counts, {{ from, to, step | factor }} or \"search\", got {other}"
            )),
        }
    })?;
    if out.is_empty() {
        return Err(src.error_at(v.span().start, format!("{field}: no node counts")));
    }
    Ok(out)
}

/// A list knob: each value checked by `f`; absent, one None (the workload's own).
fn knob<T, U: PartialEq + std::fmt::Debug>(
    src: &Source<'_>,
    field: &str,
    v: &Option<S<Vec<T>>>,
    f: impl Fn(&T) -> Result<U, String>,
) -> Result<Vec<Option<U>>, ConfigError> {
    let Some(v) = v else { return Ok(vec![None]) };
    let out =
        src.check(field, v, |xs| xs.iter().map(|x| f(x).map(Some)).collect::<Result<Vec<_>, _>>())?;
    if out.is_empty() {
        return Err(src.error_at(
            v.span().start,
            format!("{field}: empty list (leave it out to keep the workload's own)"),
        ));
    }
    let values: Vec<&U> = out.iter().flatten().collect();
    no_repeats(src, field, v.span().start, &values)?;
    Ok(out)
}

/// An error if a list names a value twice (it would be two identical candidates).
fn no_repeats<U: PartialEq + std::fmt::Debug>(
    src: &Source<'_>,
    field: &str,
    at: usize,
    xs: &[U],
) -> Result<(), ConfigError> {
    for (i, x) in xs.iter().enumerate() {
        if xs[..i].contains(x) {
            return Err(src.error_at(at, format!("{field}: {x:?} is listed twice")));
        }
    }
    Ok(())
}

/// An `[nccl]` table's variables, each value checked as NCCL would read it (errors at its
/// line).
fn checked_nccl(
    src: &Source<'_>,
    table: Option<&BTreeMap<String, S<toml::Value>>>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let pairs = super::scenario::parse_nccl(src, table)?;
    for (k, v) in &pairs {
        if let Err(e) = crate::comm::env::NcclEnv::from_pairs([(k.as_str(), v.as_str())]) {
            let at = table.and_then(|t| t.get(k)).map_or(0, |x| x.span().start);
            return Err(src.error_at(at, format!("nccl.{k}: {e}")));
        }
    }
    Ok(pairs)
}

/// A stable hash of `parts` (FNV-1a, 64 bits), as 16 hex digits.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

/// Parses and validates a plan; `file` names it in errors and anchors relative paths.
pub fn parse_plan(file: &str, text: &str) -> Result<PlanSpec, ConfigError> {
    parse_plan_with(file, text, &Overrides::default())
}

/// What `collsim plan`'s flags set over the plan file's `[objective]`.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--deadline`, hours.
    pub deadline_h: Option<f64>,
    /// `--budget`, USD.
    pub budget_usd: Option<f64>,
    /// `--region`.
    pub region: Option<String>,
}

/// A cloud region as plan files and `--region` give it ("us-east-1").
pub fn parse_region(t: &str) -> Result<String, String> {
    super::check_region(t)
}

/// A duration as plan files and `--deadline` give it ("21 d", "72 h"), in hours.
pub fn parse_hours(t: &str) -> Result<f64, String> {
    hours(t)
}

/// A total cost as plan files and `--budget` give it ("50000 USD"), in USD.
pub fn parse_usd(t: &str) -> Result<f64, String> {
    usd(t, "USD")
}

/// [`parse_plan`], with `over` set over the file's objective.
pub fn parse_plan_with(file: &str, text: &str, over: &Overrides) -> Result<PlanSpec, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawPlan = src.parse()?;
    let base = Path::new(file).parent();
    let c = &raw.candidates;

    // The workload: a scenario file's, or the plan's own [workload].
    let scenario = match (&raw.scenario, &raw.workload) {
        (Some(p), None) => {
            let path = match base {
                Some(b) if Path::new(p.get_ref()).is_relative() => b.join(p.get_ref()),
                _ => Path::new(p.get_ref()).to_path_buf(),
            };
            if !path.is_file() {
                return Err(src.error_at(
                    p.span().start,
                    format!("scenario: {}: not a file", path.display()),
                ));
            }
            let text = super::read_capped(&path).map_err(|e| {
                src.error_at(
                    p.span().start,
                    format!("scenario: {}: cannot read: {e}", path.display()),
                )
            })?;
            Some((path.display().to_string(), text))
        }
        (None, Some(_)) => None,
        (Some(p), Some(_)) => {
            return Err(src.error_at(
                p.span().start,
                "scenario: give a scenario file or a [workload] table, not both",
            ));
        }
        (None, None) => {
            return Err(src.error("workload: missing (scenario = \"a DDP scenario.toml\", or a [workload] table as in a scenario)"));
        }
    };
    // The scenario file read once: its [workload] and [nccl]; or the plan's own [workload].
    let scenario_raw: Option<RawScenario> = match &scenario {
        Some((f, t)) => Some(Source { name: f, text: t }.parse()?),
        None => None,
    };
    let wsrc = match &scenario {
        Some((f, t)) => Source { name: f, text: t },
        None => src,
    };
    let raw_workload = match &scenario_raw {
        Some(r) => r.workload.as_ref().ok_or_else(|| {
            wsrc.error(
                "workload: missing (a plan sizes one [workload]; [[job]] scenarios are not plannable)",
            )
        })?,
        None => raw.workload.as_ref().expect("checked above"),
    };
    // The first instance's workload error, which is the plan's if every instance has one.
    let mut first_error: Option<ConfigError> = None;

    let mut objective = objective(&src, &raw)?;
    objective.deadline_h = over.deadline_h.or(objective.deadline_h);
    objective.budget_usd = over.budget_usd.or(objective.budget_usd);
    objective.region = over.region.clone().or(objective.region);
    let mut overrides = instance_overrides(&src, &raw, objective.region.as_deref())?;

    let compact_max_nodes = match &c.compact_max_nodes {
        Some(m) => Some(positive(&src, "candidates.compact_max_nodes", m, 1 << 20)?),
        None => None,
    };
    if c.instances.get_ref().is_empty() {
        return Err(src.error_at(
            c.instances.span().start,
            "candidates.instances: empty list (presets or topology files)",
        ));
    }
    let mut instances = Vec::new();
    for name in c.instances.get_ref() {
        let (topology, node) = resolve_topology(name, base).map_err(|e| {
            let msg = match e {
                ConfigError::File { msg, .. } | ConfigError::Io { reason: msg, .. } => msg,
                other => other.to_string(),
            };
            src.error_at(c.instances.span().start, format!("candidates.instances: {name:?}: {msg}"))
        })?;
        // The same topology twice, by name or by two spellings of one path.
        let same = |a: &TopologySource, b: &TopologySource| match (a, b) {
            (TopologySource::File(x), TopologySource::File(y)) => {
                std::fs::canonicalize(x).ok() == std::fs::canonicalize(y).ok()
            }
            _ => a == b,
        };
        if instances.iter().any(|i: &Instance| i.name == *name || same(&i.topology, &topology)) {
            return Err(src.error_at(
                c.instances.span().start,
                format!("candidates.instances: {name:?} is listed twice"),
            ));
        }
        let over = overrides.remove(name).unwrap_or_default();
        // The plan's figures first, then the topology's (where they are for the plan's region);
        // spot or committed where asked for and given, else on-demand.
        let elsewhere = match (&objective.region, node.price.as_ref()) {
            (Some(want), Some(p)) if p.region.as_ref() != Some(want) => Some(format!(
                "{name}'s listed price is for {}, not {want}",
                p.region.as_deref().unwrap_or("no stated region")
            )),
            _ => None,
        };
        let listed = node.price.as_ref().filter(|_| elsewhere.is_none()).map(|p| {
            let from = format!("{} ({})", p.source, p.date);
            (
                (p.on_demand_usd_per_hour, format!("on-demand: {from}")),
                p.spot_usd_per_hour.map(|s| (s, format!("spot: {from}"))),
            )
        });
        let base = over.base.clone().or_else(|| listed.as_ref().map(|l| l.0.clone()));
        let spot = over.spot.clone().or_else(|| listed.as_ref().and_then(|l| l.1.clone()));
        let price = match objective.pricing {
            Pricing::OnDemand => base,
            Pricing::Spot => spot.or_else(|| base.map(|(p, s)| (p, format!("no spot price; {s}")))),
            Pricing::Committed => over
                .committed
                .clone()
                .or_else(|| base.map(|(p, s)| (p, format!("no committed price; {s}")))),
        };
        let unpriced = match (&price, elsewhere) {
            (None, Some(why)) => Some(format!("{why}: give [instance.\"{name}\"] its price there")),
            _ => None,
        };
        let over_compact = over.compact;
        let workload = super::scenario::parse_workload(&wsrc, raw_workload, &node, false);
        if let (Err(e), None) = (&workload, &first_error) {
            first_error = Some(e.clone());
        }
        instances.push(Instance {
            name: name.clone(),
            topology,
            node,
            price,
            unpriced,
            compact_max_nodes: over_compact.or(compact_max_nodes),
            workload: workload.map_err(|e| e.to_string()),
        });
    }
    if let Some(name) = overrides.keys().next() {
        let at = raw.instance.as_ref().and_then(|m| m.get(name)).map_or(0, |v| v.span().start);
        return Err(src.error_at(at, format!("instance.{name}: not in candidates.instances")));
    }
    // A workload error every instance shares is the plan's error, not a rejection.
    if let Some(e) = first_error.filter(|_| instances.iter().all(|i| i.workload.is_err())) {
        return Err(e);
    }

    // No list, or "search": the search fills the list in.
    let search_cap = objective.max_nodes.unwrap_or(SEARCH_MAX_NODES).min(MAX_NODES);
    let (nodes, search) = match &c.nodes {
        None => (Vec::new(), Some(search_cap)),
        Some(v) if v.get_ref().as_str() == Some("search") => (Vec::new(), Some(search_cap)),
        Some(v) => {
            let nodes = node_counts(&src, v)?;
            no_repeats(&src, "candidates.nodes", v.span().start, &nodes)?;
            (nodes, None)
        }
    };
    if search.is_some() && objective.deadline_h.is_none() && objective.throughput.is_none() {
        let at = c.nodes.as_ref().map_or(c.instances.span().start, |v| v.span().start);
        return Err(src.error_at(
            at,
            "candidates.nodes: without a list the plan searches for the smallest node count that meets objective.deadline or objective.throughput, and [objective] gives neither (give one, pass --deadline, or list the node counts)",
        ));
    }
    let placements = match &c.placements {
        Some(p) => {
            let out = src.check("candidates.placements", p, |ps| {
                ps.iter()
                    .map(|p| match p.as_str() {
                        "compact" => Ok(PlacementKind::Compact),
                        "spread" => Ok(PlacementKind::Spread),
                        "zones" => Ok(PlacementKind::Zones),
                        _ => Err(format!("unknown placement {p:?} (compact, spread, zones)")),
                    })
                    .collect::<Result<Vec<_>, _>>()
            })?;
            if out.is_empty() {
                return Err(src.error_at(p.span().start, "candidates.placements: empty list"));
            }
            no_repeats(&src, "candidates.placements", p.span().start, &out)?;
            out
        }
        None => vec![PlacementKind::Compact],
    };
    let zones = match &c.zones {
        Some(z) if !placements.contains(&PlacementKind::Zones) => {
            return Err(src.error_at(
                z.span().start,
                "candidates.zones: applies to the \"zones\" placement, which candidates.placements does not list",
            ));
        }
        Some(z) => positive(&src, "candidates.zones", z, 64)?,
        None => 2,
    };
    let bucket_cap_mb =
        knob(&src, "candidates.bucket_cap_mb", &c.bucket_cap_mb, |&mb| bucket_cap_mb(mb))?;
    let comm_hook = knob(&src, "candidates.comm_hook", &c.comm_hook, |h| {
        match CommHook::parse(h, PowerSgdOptions::default()) {
            Some(_) => Ok(h.clone()),
            None => Err(format!("unknown hook {h:?} ({})", CommHook::NAMES)),
        }
    })?;
    // "auto" is NCCL's own choice, whatever [nccl] says.
    let nccl_algo = knob(&src, "candidates.nccl_algo", &c.nccl_algo, |a| {
        if a == "auto" {
            return Ok(a.clone());
        }
        if a.contains(';') || a.contains(':') {
            return Err(format!(
                "{a:?}: one algorithm list per value (Ring, Tree, \"Ring,Tree\", NVLS, ...), without per-collective parts"
            ));
        }
        crate::comm::env::NcclEnv::from_pairs([("NCCL_ALGO", a.as_str())])
            .map(|_| a.clone())
            .map_err(|e| e.to_string())
    })?;
    let micro_batch = knob(&src, "candidates.micro_batch", &c.micro_batch, |&m| {
        if (1..=MAX_MICRO_BATCH as i64).contains(&m) {
            Ok(m as u64)
        } else {
            Err(format!("must be from 1 to {MAX_MICRO_BATCH} (got {m})"))
        }
    })?;
    let degree = |field: &str, v: &Option<S<Vec<i64>>>| {
        knob(&src, field, v, |&d| {
            if (1..=MAX_DEGREE as i64).contains(&d) {
                Ok(d as usize)
            } else {
                Err(format!("must be from 1 to {MAX_DEGREE} (got {d})"))
            }
        })
    };
    let tp = degree("candidates.tp", &c.tp)?;
    let pp = degree("candidates.pp", &c.pp)?;
    let cp = degree("candidates.cp", &c.cp)?;

    let train = raw.train.as_ref();
    let amount = train_amount(&src, train)?;
    let global_batch = match train.and_then(|t| t.global_batch.as_ref()) {
        Some(g) => Some(positive(&src, "train.global_batch", g, 1 << 40)? as u64),
        None => None,
    };
    // The scenario's [nccl], then the plan's over it.
    let mut nccl = match &scenario_raw {
        Some(r) => checked_nccl(&wsrc, r.nccl.as_ref())?,
        None => Vec::new(),
    };
    for (k, v) in checked_nccl(&src, raw.nccl.as_ref())? {
        nccl.retain(|(key, _)| *key != k);
        nccl.push((k, v));
    }
    check_workload_knobs(
        &src,
        &raw,
        instances.iter().find_map(|i| i.workload.as_ref().ok()),
        &amount,
    )?;
    let total = [
        instances.len(),
        nodes.len().max(1),
        placements.len(),
        bucket_cap_mb.len(),
        comm_hook.len(),
        nccl_algo.len(),
        micro_batch.len(),
        tp.len(),
        pp.len(),
        cp.len(),
    ]
    .iter()
    .try_fold(1usize, |a, &n| a.checked_mul(n))
    .filter(|&n| n <= MAX_CANDIDATES);
    if total.is_none() {
        return Err(src.error_at(
            c.instances.span().start,
            format!("candidates: more than {MAX_CANDIDATES} combinations; split the plan"),
        ));
    }
    let scenario_text = scenario.as_ref().map_or("", |(_, t)| t.as_str());
    let neighbours = match &raw.neighbours {
        Some(n) => {
            let at = n.scenario.span().start;
            let path = match base {
                Some(b) if Path::new(n.scenario.get_ref()).is_relative() => {
                    b.join(n.scenario.get_ref())
                }
                _ => Path::new(n.scenario.get_ref()).to_path_buf(),
            };
            let name = path.display().to_string();
            let text = super::read_capped(&path).map_err(|e| {
                src.error_at(at, format!("neighbours.scenario: {name}: cannot read: {e}"))
            })?;
            let nb = super::parse_scenario(&name, &text)?;
            if nb.jobs.is_empty() {
                return Err(src.error_at(
                    at,
                    format!(
                        "neighbours.scenario: {name} has no [[job]]: give the jobs already on the cluster"
                    ),
                ));
            }
            Some((path, Box::new(nb), text))
        }
        None => None,
    };
    let neighbours_text = neighbours.as_ref().map_or("", |(_, _, t)| t.as_str());
    Ok(PlanSpec {
        name: file.to_string(),
        fingerprint: {
            // The topologies as read (a file edited between shards is another plan).
            let nodes: Vec<String> = instances.iter().map(|i| format!("{:?}", i.node)).collect();
            // And the model profile a scenario names, as read.
            let profile = instances
                .iter()
                .find_map(|i| match &i.workload {
                    Ok(Workload::Ddp(spec)) => spec.profile.as_ref(),
                    _ => None,
                })
                .map(|p| format!("{:?}", p.profile))
                .unwrap_or_default();
            let mut parts = vec![text, scenario_text];
            if !neighbours_text.is_empty() {
                parts.push(neighbours_text);
            }
            if !profile.is_empty() {
                parts.push(profile.as_str());
            }
            parts.extend(nodes.iter().map(String::as_str));
            fingerprint(&parts)
        },
        instances,
        nodes,
        search,
        placements,
        zones,
        bucket_cap_mb,
        comm_hook,
        nccl_algo,
        micro_batch,
        tp,
        pp,
        cp,
        global_batch,
        amount,
        objective,
        nccl,
        scenario: scenario.as_ref().map(|(f, _)| std::path::PathBuf::from(f)),
        neighbours: neighbours.map(|(p, nb, _)| (p, nb)),
    })
}

/// `[train]`: how much to train, in samples, tokens or steps (one of them).
fn train_amount(src: &Source<'_>, train: Option<&RawTrain>) -> Result<Amount, ConfigError> {
    Ok(match train.map(|t| (&t.samples, &t.tokens, &t.steps)) {
        Some((Some(s), None, None)) => Amount::Samples(src.check("train.samples", s, |&x| {
            if x.is_finite() && (1.0..=1e18).contains(&x) {
                Ok(x)
            } else {
                Err(format!("must be a number of samples from 1 to 1e18 (got {x})"))
            }
        })?),
        Some((None, Some(t), None)) => Amount::Tokens(src.check("train.tokens", t, |&x| {
            if x.is_finite() && (1.0..=1e18).contains(&x) {
                Ok(x)
            } else {
                Err(format!("must be a number of tokens from 1 to 1e18 (got {x})"))
            }
        })?),
        Some((None, None, Some(n))) => {
            Amount::Steps(positive(src, "train.steps", n, 1_000_000_000_000)? as u64)
        }
        Some((None, None, None)) | None => {
            return Err(src.error("train: missing how much to train (samples, tokens or steps), for time and cost to train"));
        }
        Some(_) => {
            let at = train
                .and_then(|t| {
                    t.steps
                        .as_ref()
                        .map(|x| x.span().start)
                        .or(t.tokens.as_ref().map(|x| x.span().start))
                })
                .unwrap_or(0);
            return Err(src.error_at(at, "train: give one of samples, tokens, steps"));
        }
    })
}

/// What the workload allows the candidates and the amount to train (checked once, not
/// rejected candidate by candidate): a model profile replays its traced step, a replayed list
/// of calls cannot be planned, a layout's degrees need a 3-D workload, tokens need a sequence,
/// a collective trains in steps.
fn check_workload_knobs(
    src: &Source<'_>,
    raw: &RawPlan,
    workload: Option<&Workload>,
    amount: &Amount,
) -> Result<(), ConfigError> {
    let (c, train) = (&raw.candidates, raw.train.as_ref());
    let span = |v: Option<usize>| v.unwrap_or(0);
    let t_at = |f: fn(&RawTrain) -> Option<usize>| span(train.and_then(f));
    match workload {
        Some(Workload::Ddp(spec)) if let Some(named) = &spec.profile => {
            let p = &named.profile;
            let Some(m) = &p.memory else {
                return Err(src.error(
                    "workload.profile: the model profile records no memory, so a plan could not tell which candidates fit: make it with `collsim profile TRACE --memory steps.csv` (calibration/trace/profile_model.py writes both)",
                ));
            };
            if p.micro_batch.is_none() {
                return Err(src.error(
                    "workload.profile: the model profile does not know its micro-batch, so a plan could not count samples (give `collsim profile` --micro-batch and --sequence)",
                ));
            }
            if named.tp > 1 {
                return Err(src.error(
                    "workload.parallel.tp: the model profile's memory was measured on one GPU holding the whole model, not a tensor-parallel rank's share, so a plan could not tell which candidates fit",
                ));
            }
            for (key, given) in [
                ("bucket_cap_mb", c.bucket_cap_mb.as_ref().map(|x| x.span().start)),
                ("comm_hook", c.comm_hook.as_ref().map(|x| x.span().start)),
                ("tp", c.tp.as_ref().map(|x| x.span().start)),
                ("pp", c.pp.as_ref().map(|x| x.span().start)),
                ("cp", c.cp.as_ref().map(|x| x.span().start)),
            ] {
                if let Some(at) = given {
                    return Err(src.error_at(
                        at,
                        format!("candidates.{key}: a model profile replays its traced step (its buckets, hook and layout); profile the step with the ones to compare"),
                    ));
                }
            }
            if matches!(amount, Amount::Tokens(_)) && p.sequence.is_none() {
                return Err(src.error_at(
                    t_at(|t| t.tokens.as_ref().map(|x| x.span().start)),
                    "train.tokens: the model profile does not know its sequence; give samples or steps",
                ));
            }
            if let (Some(mb), None) = (&c.micro_batch, m.start_allocated) {
                return Err(src.error_at(
                    mb.span().start,
                    "candidates.micro_batch: the model profile's memory was measured without the step's start and forward's end (start_allocated, forward_allocated), so it holds at the traced micro-batch only",
                ));
            }
        }
        Some(Workload::Ddp(spec)) if spec.calls.is_some() => {
            return Err(src.error(
                "workload.calls: a replayed list of calls has a fixed batch and cannot be planned; simulate it on each cluster",
            ));
        }
        Some(Workload::Ddp(spec)) if spec.data_parallel.is_some() => {
            return Err(src.error(
                "workload.kind: DataParallel (\"dp\") runs in one process on one node, which a plan over node counts does not search; plan the step as kind = \"ddp\", or simulate the DataParallel step",
            ));
        }
        Some(Workload::Ddp(spec))
            if spec.parallel.is_none() && (c.tp.is_some() || c.pp.is_some() || c.cp.is_some()) =>
        {
            let at =
                c.tp.as_ref().or(c.pp.as_ref()).or(c.cp.as_ref()).map_or(0, |x| x.span().start);
            return Err(src.error_at(
                at,
                "candidates.tp, candidates.pp, candidates.cp: degrees of a 3-D layout; the workload has no [workload.parallel]",
            ));
        }
        Some(Workload::Ddp(spec)) if spec.parallel.is_some() && c.comm_hook.is_some() => {
            let at = c.comm_hook.as_ref().map_or(0, |x| x.span().start);
            return Err(src.error_at(
                at,
                "candidates.comm_hook: a 3-D layout reduces with Megatron's data parallelism, which has no DDP communication hooks",
            ));
        }
        Some(Workload::Ddp(spec))
            if matches!(amount, Amount::Tokens(_)) && spec.sequence.is_none() =>
        {
            return Err(src.error_at(
                t_at(|t| t.tokens.as_ref().map(|x| x.span().start)),
                format!(
                    "train.tokens: {} has no sequence length; give samples or steps",
                    spec.model.name
                ),
            ));
        }
        Some(Workload::Sweep(_)) => {
            if !matches!(amount, Amount::Steps(_)) {
                let at = t_at(|t| t.samples.as_ref().or(t.tokens.as_ref()).map(|x| x.span().start));
                return Err(src.error_at(at, "train: a collective workload trains in steps (one call each): give train.steps"));
            }
            if let Some(g) = train.and_then(|t| t.global_batch.as_ref()) {
                return Err(
                    src.error_at(g.span().start, "train.global_batch: only for a DDP workload")
                );
            }
            for (k, at) in [
                ("bucket_cap_mb", c.bucket_cap_mb.as_ref().map(|x| x.span().start)),
                ("comm_hook", c.comm_hook.as_ref().map(|x| x.span().start)),
                ("micro_batch", c.micro_batch.as_ref().map(|x| x.span().start)),
                ("tp", c.tp.as_ref().map(|x| x.span().start)),
                ("pp", c.pp.as_ref().map(|x| x.span().start)),
                ("cp", c.cp.as_ref().map(|x| x.span().start)),
            ] {
                if let Some(at) = at {
                    return Err(src.error_at(
                        at,
                        format!("candidates.{k}: a DDP knob; the workload is a collective"),
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// `[objective]`: what a plan minimises, its constraints and its pricing.
fn objective(src: &Source<'_>, raw: &RawPlan) -> Result<Objective, ConfigError> {
    let o = raw.objective.as_ref();
    let minimise = match o.and_then(|o| o.minimise.as_ref()) {
        Some(m) => src.check("objective.minimise", m, |m| match m.as_str() {
            "cost" => Ok(Minimise::Cost),
            "time" => Ok(Minimise::Time),
            "cost-within" => Ok(Minimise::CostWithin),
            "knee" => Ok(Minimise::Knee),
            _ => Err(format!("unknown objective {m:?} (cost, time, cost-within, knee)")),
        })?,
        None => Minimise::Cost,
    };
    let within = match o.and_then(|o| o.within.as_ref()) {
        Some(w) => Some(src.check("objective.within", w, |w| {
            if minimise != Minimise::CostWithin {
                return Err(format!(
                    "a margin for minimise = \"cost-within\"; this plan minimises {}",
                    minimise.name()
                ));
            }
            percent(w)
        })?),
        None => None,
    };
    let throughput = match o.and_then(|o| o.throughput.as_ref()) {
        Some(t) => Some(src.check("objective.throughput", t, |&x| {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(format!("must be a positive number of samples/s (got {x})"))
            }
        })?),
        None => None,
    };
    let deadline_h = match o.and_then(|o| o.deadline.as_ref()) {
        Some(d) => Some(src.check("objective.deadline", d, |d| hours(d))?),
        None => None,
    };
    let budget_usd = match o.and_then(|o| o.budget.as_ref()) {
        Some(b) => Some(src.check("objective.budget", b, |b| usd(b, "USD"))?),
        None => None,
    };
    let budget_usd_per_hour = match o.and_then(|o| o.budget_per_hour.as_ref()) {
        Some(b) => Some(src.check("objective.budget_per_hour", b, |b| usd(b, "USD/h"))?),
        None => None,
    };
    let max_nodes = match o.and_then(|o| o.max_nodes.as_ref()) {
        Some(m) => Some(positive(src, "objective.max_nodes", m, 1 << 20)?),
        None => None,
    };
    let pricing = match o.and_then(|o| o.pricing.as_ref()) {
        Some(p) => src.check("objective.pricing", p, |p| match p.as_str() {
            "on_demand" => Ok(Pricing::OnDemand),
            "spot" => Ok(Pricing::Spot),
            "committed" => Ok(Pricing::Committed),
            _ => Err(format!("unknown pricing {p:?} (on_demand, spot, committed)")),
        })?,
        None => Pricing::OnDemand,
    };
    let region = match o.and_then(|o| o.region.as_ref()) {
        Some(r) => Some(src.check("objective.region", r, |r| super::check_region(r))?),
        None => None,
    };
    Ok(Objective {
        minimise,
        within,
        throughput,
        deadline_h,
        budget_usd,
        budget_usd_per_hour,
        max_nodes,
        pricing,
        region,
    })
}

/// A margin "10 %" (or "10%"), as a fraction: above 0, at most 100 %.
fn percent(text: &str) -> Result<f64, String> {
    let number = text.trim().strip_suffix('%').map(str::trim);
    let x: f64 = number
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{text:?} is not a percentage (write \"10 %\")"))?;
    if x.is_finite() && x > 0.0 && x <= 100.0 {
        Ok(x / 100.0)
    } else {
        Err(format!("{text:?}: a margin above 0 and at most 100 %"))
    }
}

/// `[instance.NAME]` tables: each instance's own prices and compact limit, checked before the
/// instances they name.
fn instance_overrides(
    src: &Source<'_>,
    raw: &RawPlan,
    plan_region: Option<&str>,
) -> Result<BTreeMap<String, Override>, ConfigError> {
    let mut overrides: BTreeMap<String, Override> = BTreeMap::new();
    for (name, inst) in raw.instance.iter().flatten() {
        let i = inst.get_ref();
        let f = |k: &str| format!("instance.{name}.{k}");
        let price = |v: &S<String>, k: &str| src.check(&f(k), v, |t| usd(t, "USD/h"));
        if let (Some(_), Some(h)) = (&i.on_demand, &i.hourly) {
            return Err(src.error_at(
                h.span().start,
                format!(
                    "{}: give on_demand (a cloud price) or hourly (an amortised cost), not both",
                    f("hourly")
                ),
            ));
        }
        let opt_price =
            |v: &Option<S<String>>, k: &str| v.as_ref().map(|v| price(v, k)).transpose();
        let on_demand = opt_price(&i.on_demand, "on_demand")?;
        let hourly = opt_price(&i.hourly, "hourly")?;
        let spot = opt_price(&i.spot, "spot")?;
        let committed = opt_price(&i.committed, "committed")?;
        // The prices' region: the plan's where it names one (a price for another is an error),
        // else as given.
        let region = match &i.region {
            Some(r) => {
                let r = src.check(&f("region"), r, |t| super::check_region(t))?;
                if let Some(want) = plan_region.filter(|&w| w != r) {
                    return Err(src.error_at(
                        i.region.as_ref().map_or(0, |r| r.span().start),
                        format!("{}: {r:?} is not the plan's region {want:?}", f("region")),
                    ));
                }
                Some(r)
            }
            None => plan_region.map(str::to_string),
        };
        let date = match &i.date {
            Some(d) => {
                Some(src.check(&f("date"), d, |d| super::check_date(d).map(|()| d.clone()))?)
            }
            None => None,
        };
        let priced =
            on_demand.is_some() || hourly.is_some() || spot.is_some() || committed.is_some();
        let source = match (priced, &i.source, date) {
            (true, Some(s), Some(d)) => match &region {
                Some(r) => format!("{s}, {r} ({d})"),
                None => format!("{s} ({d})"),
            },
            (true, None, _) => {
                return Err(src.error_at(inst.span().start, format!("{}: a price needs its source (a price page, or how the amortised cost was worked out)", f("source"))));
            }
            (true, Some(_), None) => {
                return Err(src.error_at(
                    inst.span().start,
                    format!("{}: a price needs the date it was read (\"2025-06\")", f("date")),
                ));
            }
            (false, Some(_), _) | (false, None, Some(_)) => {
                return Err(src.error_at(
                    inst.span().start,
                    format!("instance.{name}: source and date go with a price (on_demand, spot, committed or hourly)"),
                ));
            }
            (false, None, None) => String::new(),
        };
        let base = match (on_demand, hourly) {
            (Some(p), _) => Some((p, format!("on-demand: {source}"))),
            (None, Some(p)) => Some((p, format!("amortised: {source}"))),
            _ => None,
        };
        let spot = spot.map(|p| (p, format!("spot: {source}")));
        let committed = committed.map(|p| (p, format!("committed: {source}")));
        let compact = match &i.compact_max_nodes {
            Some(m) => Some(positive(src, &f("compact_max_nodes"), m, MAX_NODES as i64)?),
            None => None,
        };
        overrides.insert(name.clone(), Override { base, spot, committed, compact });
    }
    Ok(overrides)
}
