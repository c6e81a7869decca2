//! Plan files (`collsim plan`): the workload to size, the candidates to try, the objective and
//! its constraints, and price overrides. Every key is documented in `scenarios/plan-gpt2xl.toml`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::raw::{RawScenario, RawWorkload};
use super::{ConfigError, Source, TopologySource, Workload, resolve_topology};
use crate::hw::NodeSpec;

type S<T> = Spanned<T>;

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
    nodes: S<toml::Value>,
    placements: Option<S<Vec<String>>>,
    zones: Option<S<i64>>,
    compact_max_nodes: Option<S<i64>>,
    bucket_cap_mb: Option<S<Vec<f64>>>,
    comm_hook: Option<S<Vec<String>>>,
    nccl_algo: Option<S<Vec<String>>>,
    micro_batch: Option<S<Vec<i64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawObjective {
    minimise: Option<S<String>>,
    throughput: Option<S<f64>>,
    deadline: Option<S<String>>,
    budget: Option<S<String>>,
    budget_per_hour: Option<S<String>>,
    max_nodes: Option<S<i64>>,
    pricing: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    on_demand: Option<S<String>>,
    spot: Option<S<String>>,
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
}

/// Which price a plan pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pricing {
    /// On-demand (or the plan's amortised `hourly`).
    OnDemand,
    /// Spot / preemptible where published (else on-demand).
    Spot,
}

/// The objective and its constraints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Objective {
    /// What to minimise.
    pub minimise: Minimise,
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
    /// Node counts.
    pub nodes: Vec<usize>,
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
    /// Samples per optimizer step over all GPUs, kept by gradient accumulation.
    pub global_batch: Option<u64>,
    /// How much training there is.
    pub amount: Amount,
    /// The objective.
    pub objective: Objective,
    /// NCCL_* variables every candidate runs with.
    pub nccl: Vec<(String, String)>,
}

/// A plan's `[instance.X]`: its price and source, and its compact_max_nodes.
type Override = (Option<(f64, String)>, Option<usize>);

/// A USD figure: "500 USD" (`unit` "USD") or "32.77 USD/h" (`unit` "USD/h").
fn usd(t: &str, unit: &str) -> Result<f64, String> {
    let num = t
        .trim()
        .strip_suffix(unit)
        .map(str::trim)
        .ok_or_else(|| format!("expected an amount like \"100 {unit}\", got {t:?}"))?;
    match num.replace('_', "").parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Ok(x) if x < 0.0 => Err(format!("must not be negative (got {t:?})")),
        _ => Err(format!("expected a non-negative number of {unit}, got {t:?}")),
    }
}

/// A duration in hours: "72 h", "3 d", "90 min", "3600 s".
fn hours(t: &str) -> Result<f64, String> {
    let t = t.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "s" => 1.0 / 3600.0,
        "min" => 1.0 / 60.0,
        "h" => 1.0,
        "d" => 24.0,
        _ => return Err(format!("expected a duration like \"72 h\" (s, min, h, d), got {t:?}")),
    };
    match num.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x * scale),
        _ => Err(format!("expected a positive duration like \"72 h\", got {t:?}")),
    }
}

fn positive(src: &Source<'_>, field: &str, v: &S<i64>, max: i64) -> Result<usize, ConfigError> {
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

/// The node counts: a list, or `{ from, to, step }` / `{ from, to, factor }`.
fn node_counts(src: &Source<'_>, v: &S<toml::Value>) -> Result<Vec<usize>, ConfigError> {
    const MAX: i64 = 1 << 20;
    let field = "candidates.nodes";
    let out = src.check(field, v, |val| {
        let int = |x: &toml::Value, what: &str| match x.as_integer() {
            Some(n) if (1..=MAX).contains(&n) => Ok(n as usize),
            _ => Err(format!("{what} must be a whole number of nodes from 1 to {MAX} (got {x})")),
        };
        match val {
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
                "expected a list of node counts or {{ from, to, step | factor }}, got {other}"
            )),
        }
    })?;
    if out.is_empty() {
        return Err(src.error_at(v.span().start, format!("{field}: no node counts")));
    }
    Ok(out)
}

/// A list knob: each value checked by `f`; absent, one None (the workload's own).
fn knob<T, U>(
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
    Ok(out)
}

/// The `[workload]` of a scenario file, parsed for `node`, with the scenario's `[nccl]`.
fn scenario_workload(file: &str, text: &str, node: &NodeSpec) -> Result<Workload, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawScenario = src.parse()?;
    match &raw.workload {
        Some(w) => super::scenario::parse_workload(&src, w, node, false),
        None => Err(src.error(
            "workload: missing (a plan sizes one [workload]; [[job]] scenarios are not plannable)",
        )),
    }
}

/// A stable hash of `parts` (FNV-1a, 64 bits), as 16 hex digits.
fn fingerprint(parts: &[&str]) -> String {
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
            let text = std::fs::read_to_string(&path).map_err(|e| {
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

    let objective = {
        let o = raw.objective.as_ref();
        let minimise = match o.and_then(|o| o.minimise.as_ref()) {
            Some(m) => src.check("objective.minimise", m, |m| match m.as_str() {
                "cost" => Ok(Minimise::Cost),
                "time" => Ok(Minimise::Time),
                _ => Err(format!("unknown objective {m:?} (cost, time)")),
            })?,
            None => Minimise::Cost,
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
            Some(m) => Some(positive(&src, "objective.max_nodes", m, 1 << 20)?),
            None => None,
        };
        let pricing = match o.and_then(|o| o.pricing.as_ref()) {
            Some(p) => src.check("objective.pricing", p, |p| match p.as_str() {
                "on_demand" => Ok(Pricing::OnDemand),
                "spot" => Ok(Pricing::Spot),
                _ => Err(format!("unknown pricing {p:?} (on_demand, spot)")),
            })?,
            None => Pricing::OnDemand,
        };
        Objective {
            minimise,
            throughput,
            deadline_h,
            budget_usd,
            budget_usd_per_hour,
            max_nodes,
            pricing,
        }
    };

    // Per-instance overrides, checked before the instances they name.
    let mut overrides: BTreeMap<String, Override> = BTreeMap::new();
    for (name, inst) in raw.instance.iter().flatten() {
        let i = inst.get_ref();
        let f = |k: &str| format!("instance.{name}.{k}");
        let price = |v: &S<String>, k: &str| src.check(&f(k), v, |t| usd(t, "USD/h"));
        let chosen = match (objective.pricing, &i.spot, &i.on_demand, &i.hourly) {
            (_, _, Some(_), Some(h)) => {
                return Err(src.error_at(h.span().start, format!("{}: give on_demand (a cloud price) or hourly (an amortised cost), not both", f("hourly"))));
            }
            (Pricing::Spot, Some(s), _, _) => Some(price(s, "spot")?),
            (_, _, Some(d), None) => Some(price(d, "on_demand")?),
            (_, _, None, Some(h)) => Some(price(h, "hourly")?),
            _ => None,
        };
        // Every given price is checked, used or not.
        for (k, v) in [("on_demand", &i.on_demand), ("spot", &i.spot), ("hourly", &i.hourly)] {
            if let Some(v) = v {
                price(v, k)?;
            }
        }
        let source = match (&chosen, &i.source) {
            (Some(_), Some(s)) => {
                let date = match &i.date {
                    Some(d) => {
                        src.check(&f("date"), d, |d| super::check_date(d).map(|()| d.clone()))?
                    }
                    None => {
                        return Err(src.error_at(
                            inst.span().start,
                            format!(
                                "{}: a price needs the date it was read (\"2025-06\")",
                                f("date")
                            ),
                        ));
                    }
                };
                format!("{s} ({date})")
            }
            (Some(_), None) => {
                return Err(src.error_at(inst.span().start, format!("{}: a price needs its source (a price page, or how the amortised cost was worked out)", f("source"))));
            }
            (None, _) => String::new(),
        };
        let compact = match &i.compact_max_nodes {
            Some(m) => Some(positive(&src, &f("compact_max_nodes"), m, 1 << 20)?),
            None => None,
        };
        overrides.insert(name.clone(), (chosen.map(|p| (p, source)), compact));
    }

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
        if instances.iter().any(|i: &Instance| i.name == *name) {
            return Err(src.error_at(
                c.instances.span().start,
                format!("candidates.instances: {name:?} is listed twice"),
            ));
        }
        let (over_price, over_compact) = overrides.remove(name).unwrap_or((None, None));
        let price = over_price.or_else(|| {
            node.price.as_ref().map(|p| {
                let spot =
                    (objective.pricing == Pricing::Spot).then_some(p.spot_usd_per_hour).flatten();
                let (usd, kind) = match spot {
                    Some(s) => (s, "spot"),
                    None => (p.on_demand_usd_per_hour, "on-demand"),
                };
                (usd, format!("{kind}: {} ({})", p.source, p.date))
            })
        });
        let workload = match &scenario {
            Some((f, t)) => scenario_workload(f, t, &node),
            None => super::scenario::parse_workload(
                &src,
                raw.workload.as_ref().expect("checked above"),
                &node,
                false,
            ),
        };
        instances.push(Instance {
            name: name.clone(),
            topology,
            node,
            price,
            compact_max_nodes: over_compact.or(compact_max_nodes),
            workload: workload.map_err(|e| e.to_string()),
        });
    }
    if let Some(name) = overrides.keys().next() {
        let at = raw.instance.as_ref().and_then(|m| m.get(name)).map_or(0, |v| v.span().start);
        return Err(src.error_at(at, format!("instance.{name}: not in candidates.instances")));
    }
    // A workload error every instance shares is the plan's error, not a rejection.
    if instances.iter().all(|i| i.workload.is_err()) {
        let first = &instances[0];
        let err = match &scenario {
            Some((f, t)) => scenario_workload(f, t, &first.node),
            None => super::scenario::parse_workload(
                &src,
                raw.workload.as_ref().expect("checked above"),
                &first.node,
                false,
            ),
        };
        err?;
    }
    if let Some(Ok(Workload::Idle)) = instances.iter().map(|i| &i.workload).find(|w| w.is_ok()) {
        return Err(src.error("workload.kind: an idle workload has nothing to size"));
    }

    let nodes = node_counts(&src, &c.nodes)?;
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
            out
        }
        None => vec![PlacementKind::Compact],
    };
    let zones = match &c.zones {
        Some(z) => positive(&src, "candidates.zones", z, 64)?,
        None => 2,
    };
    let bucket_cap_mb = knob(&src, "candidates.bucket_cap_mb", &c.bucket_cap_mb, |&mb| {
        if mb.is_finite() && mb > 0.0 {
            Ok(mb)
        } else {
            Err(format!("must be a positive number of MiB (got {mb})"))
        }
    })?;
    let hooks = [
        "none",
        "fp16",
        "bf16",
        "powersgd",
        "batched_powersgd",
        "quantize_per_tensor",
        "quantize_per_channel",
    ];
    let comm_hook = knob(&src, "candidates.comm_hook", &c.comm_hook, |h| {
        if hooks.contains(&h.as_str()) {
            Ok(h.clone())
        } else {
            Err(format!("unknown hook {h:?} ({})", hooks.join(", ")))
        }
    })?;
    let nccl_algo = knob(&src, "candidates.nccl_algo", &c.nccl_algo, |a| {
        if a == "auto" {
            return Ok(String::new());
        }
        crate::comm::env::NcclEnv::from_pairs([("NCCL_ALGO", a.as_str())])
            .map(|_| a.clone())
            .map_err(|e| e.to_string())
    })?
    .into_iter()
    .map(|a| a.filter(|a| !a.is_empty()))
    .collect::<Vec<_>>();
    let micro_batch = knob(&src, "candidates.micro_batch", &c.micro_batch, |&m| {
        if (1..=1 << 24).contains(&m) {
            Ok(m as u64)
        } else {
            Err(format!("must be at least 1 (got {m})"))
        }
    })?;

    let train = raw.train.as_ref();
    let amount = match train.map(|t| (&t.samples, &t.tokens, &t.steps)) {
        Some((Some(s), None, None)) => Amount::Samples(src.check("train.samples", s, |&x| {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(format!("must be a positive number of samples (got {x})"))
            }
        })?),
        Some((None, Some(t), None)) => Amount::Tokens(src.check("train.tokens", t, |&x| {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(format!("must be a positive number of tokens (got {x})"))
            }
        })?),
        Some((None, None, Some(n))) => {
            Amount::Steps(positive(&src, "train.steps", n, i64::MAX)? as u64)
        }
        Some((None, None, None)) | None => {
            return Err(src.error("train: missing how much to train (samples, tokens or steps), for time and cost to train"));
        }
        Some(_) => return Err(src.error("train: give one of samples, tokens, steps")),
    };
    let global_batch = match train.and_then(|t| t.global_batch.as_ref()) {
        Some(g) => Some(positive(&src, "train.global_batch", g, 1 << 40)? as u64),
        None => None,
    };
    let nccl = super::scenario::parse_nccl(&src, raw.nccl.as_ref())?;
    let scenario_text = scenario.as_ref().map_or("", |(_, t)| t.as_str());
    Ok(PlanSpec {
        name: file.to_string(),
        fingerprint: fingerprint(&[text, scenario_text]),
        instances,
        nodes,
        placements,
        zones,
        bucket_cap_mb,
        comm_hook,
        nccl_algo,
        micro_batch,
        global_batch,
        amount,
        objective,
        nccl,
    })
}
