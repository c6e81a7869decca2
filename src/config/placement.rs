//! Placement: which nodes share a rack, a zone, a region (`[placement]` in a scenario), and the
//! latency and bandwidth between groups (`topologies/placement.toml`).

use std::collections::BTreeMap;

use super::raw::{RawPlacement, RawTier};
use super::{ConfigError, Source};
use crate::hw::{FabricKind, NodeId, NodeSpec, Placement};
use crate::units::{Bandwidth, Time};

const TIERS: (&str, &str) =
    ("topologies/placement.toml", include_str!("../../topologies/placement.toml"));

/// How nodes fill the fabric's leaf switches (racks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Node by node: a job fills a rack before the next (GCP's compact placement).
    Compact,
    /// Dealt round-robin over the racks the job spans.
    Spread,
}

/// A scenario's placement, before the node count is final.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlacementSpec {
    /// Rack filling.
    pub policy: Policy,
    /// What separates the groups, if there are groups.
    pub tier: Option<String>,
    /// Named groups of the machine's nodes.
    pub groups: Vec<(String, Vec<NodeId>)>,
    /// One-way latency between groups.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
    /// Per-node bandwidth to other groups, if capped.
    pub bandwidth_per_node: Option<String>,
    #[serde(skip)]
    bandwidth: Option<Bandwidth>,
}

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl Default for PlacementSpec {
    fn default() -> Self {
        PlacementSpec {
            policy: Policy::Compact,
            tier: None,
            groups: Vec::new(),
            latency: Time::ZERO,
            bandwidth_per_node: None,
            bandwidth: None,
        }
    }
}

/// Nodes under one leaf switch of the fabric (None: one switch holds them all).
pub fn nodes_per_rack(node: &NodeSpec) -> Option<usize> {
    let nics = node.nic.as_ref().map_or(1, |n| n.count).max(1);
    let down = |radix: usize, o: f64| ((radix as f64 * o / (1.0 + o)).floor() as usize).max(1);
    match &node.network.fabric {
        FabricKind::NonBlocking | FabricKind::Links { .. } => None,
        FabricKind::FatTree { tiers: 1, .. } => None,
        FabricKind::FatTree { radix, oversubscription, .. } => {
            Some((down(*radix, oversubscription.first().copied().unwrap_or(1.0)) / nics).max(1))
        }
        FabricKind::Rail { radix, oversubscription } => Some(down(*radix, *oversubscription)),
    }
}

impl PlacementSpec {
    /// Parses `[placement]`; `nodes` is the scenario file's node count (checked again when the
    /// command line changes it).
    pub(crate) fn parse(
        src: &Source<'_>,
        raw: &RawPlacement,
        nodes: usize,
    ) -> Result<PlacementSpec, ConfigError> {
        let mut p = PlacementSpec::default();
        if let Some(pol) = &raw.policy {
            p.policy = src.check("placement.policy", pol, |v| match v.as_str() {
                "compact" => Ok(Policy::Compact),
                "spread" => Ok(Policy::Spread),
                _ => Err(format!("unknown policy {v:?} (compact, spread)")),
            })?;
        }
        let tiers = tier_library()?;
        if let Some(t) = &raw.tier {
            let (lat, bw) = src.check("placement.tier", t, |name| {
                tiers.get(name.as_str()).copied().ok_or_else(|| {
                    let names: Vec<&str> = tiers.keys().map(|k| k.as_str()).collect();
                    format!("unknown tier {name:?} ({})", names.join(", "))
                })
            })?;
            p.tier = Some(t.get_ref().clone());
            p.latency = lat;
            p.bandwidth = bw;
        }
        for g in raw.group.iter().flatten() {
            let members = src.check("placement.group.nodes", &g.nodes, |v| {
                let mut out = Vec::new();
                for &n in v {
                    if n < 0 || n as usize >= nodes {
                        return Err(format!(
                            "node {n} does not exist (the scenario has nodes 0..{})",
                            nodes - 1
                        ));
                    }
                    out.push(NodeId(n as usize));
                }
                if out.is_empty() {
                    return Err("a group needs at least one node".into());
                }
                Ok(out)
            })?;
            if p.groups.iter().any(|(name, _)| name == g.name.get_ref()) {
                return Err(src.error_at(
                    g.name.span().start,
                    format!("placement.group.name: duplicate group {:?}", g.name.get_ref()),
                ));
            }
            p.groups.push((g.name.get_ref().clone(), members));
        }
        if !p.groups.is_empty() && p.tier.is_none() {
            let at = raw.group.as_ref().and_then(|g| g.first()).map_or(0, |g| g.name.span().start);
            return Err(src.error_at(
                at,
                "placement.tier: groups need a tier saying what separates them (rack, zone, region)",
            ));
        }
        if p.groups.is_empty() {
            // What separates groups, with no groups, would be read and ignored.
            let given = [
                ("tier", raw.tier.as_ref().map(|v| v.span().start)),
                ("latency", raw.latency.as_ref().map(|v| v.span().start)),
                ("bandwidth_per_node", raw.bandwidth_per_node.as_ref().map(|v| v.span().start)),
            ];
            if let Some((key, Some(at))) = given.iter().find(|(_, at)| at.is_some()) {
                return Err(src.error_at(
                    *at,
                    format!(
                        "placement.{key}: applies between [[placement.group]] node groups, and none is given"
                    ),
                ));
            }
        }
        if let Some(l) = &raw.latency {
            p.latency = src.check("placement.latency", l, |q| q.parse_with(Time::parse))?;
        }
        if let Some(b) = &raw.bandwidth_per_node {
            p.bandwidth =
                Some(src.check("placement.bandwidth_per_node", b, |q| {
                    q.parse_with(Bandwidth::parse)
                })?);
        }
        p.bandwidth_per_node = p.bandwidth.map(|b| b.to_string());
        let mut seen = BTreeMap::new();
        for (name, members) in &p.groups {
            for &NodeId(n) in members {
                if let Some(other) = seen.insert(n, name.clone()) {
                    return Err(src.error(format!(
                        "placement.group: node {n} is in both {other:?} and {name:?}"
                    )));
                }
            }
        }
        Ok(p)
    }

    /// A placement made in code: nodes fill racks by `policy`; where `groups` are given,
    /// `tier` (a tier of `topologies/placement.toml`: rack, zone, region) separates them.
    pub fn tiered(
        policy: Policy,
        tier: Option<&str>,
        groups: Vec<(String, Vec<NodeId>)>,
    ) -> Result<PlacementSpec, ConfigError> {
        let mut p = PlacementSpec { policy, groups, ..PlacementSpec::default() };
        if let Some(t) = tier {
            let (lat, bw) = tier_library()?.get(t).copied().ok_or_else(|| ConfigError::File {
                file: TIERS.0.into(),
                msg: format!("no tier {t:?}"),
            })?;
            p.tier = Some(t.to_string());
            p.latency = lat;
            p.bandwidth = bw;
            p.bandwidth_per_node = bw.map(|b| b.to_string());
        }
        Ok(p)
    }

    /// The placement of `nodes` nodes of `node`: groups (every node in exactly one; nodes not
    /// listed form a group of their own) and the order in which nodes fill the racks.
    pub fn resolve(&self, node: &NodeSpec, nodes: usize) -> Result<Placement, String> {
        let mut groups: Vec<Vec<NodeId>> = Vec::new();
        let mut listed = vec![false; nodes];
        for (name, members) in &self.groups {
            if let Some(&NodeId(n)) = members.iter().find(|n| n.0 >= nodes) {
                return Err(format!(
                    "placement.group {name:?}: node {n} does not exist (nodes 0..{})",
                    nodes - 1
                ));
            }
            for &NodeId(n) in members {
                listed[n] = true;
            }
            groups.push(members.clone());
        }
        let rest: Vec<NodeId> = (0..nodes).filter(|&n| !listed[n]).map(NodeId).collect();
        if !rest.is_empty() {
            groups.push(rest);
        }
        let slots = match (self.policy, nodes_per_rack(node)) {
            (Policy::Spread, Some(per)) => {
                let racks = nodes.div_ceil(per).max(1);
                (0..nodes).map(|i| (i % racks) * per + i / racks).collect()
            }
            _ => (0..nodes).collect(),
        };
        Ok(Placement {
            tier: self.tier.clone().unwrap_or_else(|| "compact".into()),
            groups,
            latency: self.latency,
            bandwidth_per_node: self.bandwidth,
            slots,
        })
    }
}

/// A tier's one-way latency and optional per-node bandwidth cap, by tier name.
pub type Tiers = BTreeMap<String, (Time, Option<Bandwidth>)>;

/// The tiers in `topologies/placement.toml`, read once (a plan places thousands of candidates).
fn tier_library() -> Result<&'static Tiers, ConfigError> {
    static TIERS_READ: std::sync::LazyLock<Result<Tiers, ConfigError>> =
        std::sync::LazyLock::new(read_tiers);
    TIERS_READ.as_ref().map_err(Clone::clone)
}

fn read_tiers() -> Result<Tiers, ConfigError> {
    parse_placement_tiers(TIERS.0, TIERS.1)
}

/// Parses and validates a placement tiers file's text (the format of
/// `topologies/placement.toml`); `file` names it in errors.
pub fn parse_placement_tiers(file: &str, text: &str) -> Result<Tiers, ConfigError> {
    let src = Source { name: file, text };
    let raw: BTreeMap<String, RawTier> = src.parse()?;
    raw.iter()
        .map(|(k, t)| {
            let lat =
                src.check(&format!("{k}.latency"), &t.latency, |q| q.parse_with(Time::parse))?;
            let bw = match &t.bandwidth_per_node {
                Some(b) => Some(src.check(&format!("{k}.bandwidth_per_node"), b, |q| {
                    q.parse_with(Bandwidth::parse)
                })?),
                None => None,
            };
            Ok((k.clone(), (lat, bw)))
        })
        .collect()
}
