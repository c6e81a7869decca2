//! `[[job]]` and `[[background]]` tables: several jobs on one cluster, each on its own nodes,
//! and traffic beside them.

use super::placement::nodes_per_rack;
use super::raw::{RawBackground, RawJob};
use super::scenario::{nccl_places, parse_nccl, parse_workload};
use super::{ConfigError, PlacementSpec, Source};
use crate::hw::{NodeId, NodeSpec};
use crate::units::Bandwidth;
use crate::workload::jobs::{BackgroundSpec, JobSpec, LINK_CLASSES, Pattern, Rate};

/// The most `[[job]]` tables a scenario may have: each job's calls are placed against every
/// other's, so the work grows with the square of the count. Measured on a 2-core machine
/// (issue #45): 64 one-node jobs of a 1-64 MiB all-reduce sweep take 4.7 s of CPU, 128 take 18 s
/// and 1,000 took 5 minutes.
pub const MAX_JOBS: usize = 64;

/// Node indices in `v`, each below `nodes`, none twice.
fn node_list(v: &[i64], nodes: usize) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = Vec::new();
    for &n in v {
        if n < 0 || n as usize >= nodes {
            return Err(format!(
                "node {n} does not exist (the cluster has nodes 0..{})",
                nodes - 1
            ));
        }
        if out.contains(&(n as usize)) {
            return Err(format!("node {n} is listed twice"));
        }
        out.push(n as usize);
    }
    if out.is_empty() {
        return Err("needs at least one node".into());
    }
    Ok(out)
}

/// A `[job.workload]` error names its field under `job.` (the workload parser says
/// `workload.x`).
fn in_job(e: ConfigError) -> ConfigError {
    let fix = |m: String| if m.starts_with("workload.") { format!("job.{m}") } else { m };
    match e {
        ConfigError::At { file, line, col, msg } => {
            ConfigError::At { file, line, col, msg: fix(msg) }
        }
        ConfigError::File { file, msg } => ConfigError::File { file, msg: fix(msg) },
        other => other,
    }
}

/// Parses the jobs and gives each its nodes, in file order: a list takes those nodes; a count
/// with `placement = "compact"` (the default) takes the first free nodes in rack order, with
/// `"spread"` deals free nodes round-robin over the racks.
pub(crate) fn parse_jobs(
    src: &Source<'_>,
    raw: &[RawJob],
    node: &NodeSpec,
    (nodes, gpus_per_node): (usize, usize),
    placement: &PlacementSpec,
) -> Result<Vec<JobSpec>, ConfigError> {
    if let Some(j) = raw.get(MAX_JOBS) {
        return Err(src.error_at(
            j.name.span().start,
            format!(
                "job: more than {MAX_JOBS} [[job]] tables ({} given); simulate the busiest jobs and give the rest as [[background]] traffic",
                raw.len()
            ),
        ));
    }
    let cluster_gpus = gpus_per_node;
    let machine = placement.resolve(node, nodes).map_err(|e| src.error(e))?;
    // Racks in fabric order: node n sits at slot machine.slots[n].
    let per = nodes_per_rack(node).unwrap_or(nodes).max(1);
    let mut by_slot: Vec<usize> = (0..nodes).collect();
    by_slot.sort_by_key(|&n| machine.slots[n]);
    let rack_of = |n: usize| machine.slots[n] / per;
    let racks = nodes.div_ceil(per).max(1);
    let mut owner: Vec<Option<usize>> = vec![None; nodes];
    let mut jobs: Vec<JobSpec> = Vec::new();
    for (j, r) in raw.iter().enumerate() {
        let name = r.name.get_ref().clone();
        if name.trim().is_empty() || name.contains(['\n', '\r']) || name.chars().count() > 64 {
            return Err(src.error_at(
                r.name.span().start,
                "job.name: give a name of one line, 1 to 64 characters",
            ));
        }
        if jobs.iter().any(|other| other.name == name) {
            return Err(
                src.error_at(r.name.span().start, format!("job.name: duplicate job {name:?}"))
            );
        }
        let policy = match &r.placement {
            Some(p) => src.check("job.placement", p, |p| match p.as_str() {
                "compact" => Ok("compact"),
                "spread" => Ok("spread"),
                _ => Err(format!("unknown placement {p:?} (compact, spread)")),
            })?,
            None => "compact",
        };
        let at = r.nodes.span().start;
        let chosen: Vec<usize> = match r.nodes.get_ref() {
            toml::Value::Array(items) => {
                if r.placement.is_some() {
                    return Err(src.error_at(
                        at,
                        "job.nodes: a list of nodes places the job itself; job.placement is for a node count",
                    ));
                }
                let ints: Option<Vec<i64>> = items.iter().map(|v| v.as_integer()).collect();
                let ints = ints.ok_or_else(|| {
                    src.error_at(at, "job.nodes: give a node count or a list of node indices")
                })?;
                let list = node_list(&ints, nodes)
                    .map_err(|e| src.error_at(at, format!("job.nodes: {e}")))?;
                if let Some(&n) = list.iter().find(|&&n| owner[n].is_some()) {
                    let other = &jobs[owner[n].unwrap_or(0)].name;
                    return Err(
                        src.error_at(at, format!("job.nodes: node {n} already runs job {other:?}"))
                    );
                }
                list
            }
            toml::Value::Integer(k) => {
                let free = owner.iter().filter(|o| o.is_none()).count();
                if *k < 1 || *k as usize > free {
                    return Err(src.error_at(
                        at,
                        format!(
                            "job.nodes: {k} nodes asked, {free} of the cluster's {nodes} are free (cluster.nodes sets its size)"
                        ),
                    ));
                }
                let k = *k as usize;
                let free_in_order: Vec<usize> =
                    by_slot.iter().copied().filter(|&n| owner[n].is_none()).collect();
                if policy == "spread" {
                    // Round-robin over racks, each rack's free nodes in order.
                    let mut queues: Vec<Vec<usize>> = vec![Vec::new(); racks];
                    for &n in free_in_order.iter().rev() {
                        queues[rack_of(n).min(racks - 1)].push(n);
                    }
                    let mut out = Vec::with_capacity(k);
                    while out.len() < k {
                        for q in queues.iter_mut() {
                            if out.len() < k
                                && let Some(n) = q.pop()
                            {
                                out.push(n);
                            }
                        }
                    }
                    out
                } else {
                    free_in_order[..k].to_vec()
                }
            }
            _ => {
                return Err(
                    src.error_at(at, "job.nodes: give a node count or a list of node indices")
                );
            }
        };
        let gpus_per_node = match &r.gpus_per_node {
            Some(g) => src.check("job.gpus_per_node", g, |&g| {
                if g < 1 || g as usize > node.gpu.count {
                    Err(format!(
                        "must be 1..{} (the GPUs of a {} node; got {g})",
                        node.gpu.count, node.name
                    ))
                } else {
                    Ok(g as usize)
                }
            })?,
            None => cluster_gpus,
        };
        let workload = match &r.workload {
            Some(w) => {
                let workload = parse_workload(src, w, node, true).map_err(in_job)?;
                super::scenario::check_ranks(src, w, &workload, chosen.len(), gpus_per_node)
                    .map_err(in_job)?;
                workload
            }
            None => {
                return Err(src.error_at(
                    r.name.span().start,
                    format!("job.workload: missing for job {name:?} (a [job.workload] table after its [[job]])"),
                ));
            }
        };
        let nccl = parse_nccl(src, r.nccl.as_ref())?;
        let nccl_at = nccl_places(src, r.nccl.as_ref());
        for &n in &chosen {
            owner[n] = Some(j);
        }
        let placement =
            if matches!(r.nodes.get_ref(), toml::Value::Array(_)) { "list" } else { policy };
        let nodes = chosen.into_iter().map(NodeId).collect();
        jobs.push(JobSpec { name, nodes, placement, gpus_per_node, workload, nccl, nccl_at });
    }
    Ok(jobs)
}

/// Parses the `[[background]]` tables.
pub(crate) fn parse_background(
    src: &Source<'_>,
    raw: &[RawBackground],
    node: &NodeSpec,
    nodes: usize,
) -> Result<Vec<BackgroundSpec>, ConfigError> {
    let mut out = Vec::new();
    // What the `links` reservations so far take of each (class, node)'s links: together they
    // must leave every link something, as one alone must.
    let mut reserved: std::collections::BTreeMap<(String, usize), f64> = Default::default();
    for b in raw {
        let chosen = match &b.nodes {
            Some(v) => src.check("background.nodes", v, |v| node_list(v, nodes))?,
            None => Vec::new(),
        };
        let rate = match (&b.load, &b.rate_per_node) {
            (Some(f), None) => Rate::Fraction(src.check("background.load", f, |&f| {
                if f.is_finite() && f > 0.0 && f <= 1.0 {
                    Ok(f)
                } else {
                    Err(format!("must be a fraction in (0, 1] of the capacity (got {f})"))
                }
            })?),
            (None, Some(r)) => Rate::PerNode(src.check("background.rate_per_node", r, |q| {
                let bw = q.parse_with(Bandwidth::parse)?;
                if bw.bytes_per_sec() > 0.0 { Ok(bw) } else { Err("must be above 0".into()) }
            })?),
            (Some(f), Some(_)) => {
                return Err(src.error_at(
                    f.span().start,
                    "background.load: give load (a fraction of capacity) or rate_per_node, not both",
                ));
            }
            (None, None) => {
                return Err(src.error_at(
                    b.pattern.span().start,
                    "background.load: missing (a fraction of each NIC's capacity, e.g. 0.5; or rate_per_node = \"200 Gb/s\")",
                ));
            }
        };
        let pattern = src.check("background.pattern", &b.pattern, |p| match p.as_str() {
            "all_to_all" | "incast" | "links" => Ok(p.clone()),
            _ => Err(format!("unknown pattern {p:?} (all_to_all, incast, links)")),
        })?;
        let all: Vec<usize> = (0..nodes).collect();
        let senders = if chosen.is_empty() { &all } else { &chosen };
        if pattern != "links" && senders.len() < 2 {
            return Err(src.error_at(
                b.pattern.span().start,
                format!(
                    "background.pattern: {pattern} needs at least two nodes (it has {})",
                    senders.len()
                ),
            ));
        }
        let pattern = match pattern.as_str() {
            "incast" => {
                let target = match &b.target {
                    Some(t) => src.check("background.target", t, |&t| {
                        if t >= 0 && (t as usize) < nodes {
                            Ok(t as usize)
                        } else {
                            Err(format!(
                                "node {t} does not exist (the cluster has nodes 0..{})",
                                nodes - 1
                            ))
                        }
                    })?,
                    None => 0,
                };
                Pattern::Incast { target: NodeId(target) }
            }
            "links" => {
                let class = match &b.class {
                    Some(c) => src.check("background.class", c, |c| {
                        if LINK_CLASSES.contains(&c.as_str()) {
                            Ok(c.clone())
                        } else {
                            Err(format!("unknown link class {c:?} ({})", LINK_CLASSES.join(", ")))
                        }
                    })?,
                    None => {
                        return Err(src.error_at(
                            b.pattern.span().start,
                            format!(
                                "background.class: missing for pattern \"links\" ({})",
                                LINK_CLASSES.join(", ")
                            ),
                        ));
                    }
                };
                if let Some(r) = &b.rate_per_node {
                    return Err(src.error_at(
                        r.span().start,
                        "background.rate_per_node: pattern \"links\" takes load, a fraction of each link's capacity",
                    ));
                }
                if let Some(f) = &b.load
                    && *f.get_ref() >= 1.0
                {
                    return Err(src.error_at(
                        f.span().start,
                        "background.load: a links reservation must leave the link something (below 1)",
                    ));
                }
                let has = match class.as_str() {
                    "net" => node.nic.is_some(),
                    "nvlink" => node.nvlink.is_some(),
                    _ => true,
                };
                if !has {
                    return Err(src.error_at(
                        b.pattern.span().start,
                        format!("background.class: a {} node has no {class} links", node.name),
                    ));
                }
                let fraction = b.load.as_ref().map_or(0.0, |f| *f.get_ref());
                for &n in senders {
                    let sum = reserved.entry((class.clone(), n)).or_default();
                    *sum += fraction;
                    if *sum >= 1.0 {
                        let at = b.load.as_ref().map_or(b.pattern.span().start, |f| f.span().start);
                        return Err(src.error_at(
                            at,
                            format!(
                                "background.load: with the links reservations before it, node {n}'s {class} links are reserved {:.3} of their capacity; together they must leave the link something (below 1)",
                                *sum
                            ),
                        ));
                    }
                }
                Pattern::Links { class }
            }
            _ => Pattern::AllToAll,
        };
        if !matches!(pattern, Pattern::Links { .. }) && node.nic.is_none() && nodes > 0 {
            return Err(src.error_at(
                b.pattern.span().start,
                format!("background.pattern: {} has no NICs to send through", node.name),
            ));
        }
        for (field, present) in [
            ("target", b.target.is_some() && !matches!(pattern, Pattern::Incast { .. })),
            ("class", b.class.is_some() && !matches!(pattern, Pattern::Links { .. })),
        ] {
            if present {
                return Err(src.error_at(
                    b.pattern.span().start,
                    format!("background.{field}: not used by pattern {:?}", b.pattern.get_ref()),
                ));
            }
        }
        let nodes = chosen.into_iter().map(NodeId).collect();
        out.push(BackgroundSpec { pattern, nodes, rate });
    }
    Ok(out)
}
