//! The network between nodes: NIC links into a non-blocking switch, a fat-tree with
//! oversubscription per tier, or a rail-optimized network; and placement groups (racks, zones,
//! regions) joined by links of their own latency and bandwidth.
//!
//! Switch layers are aggregated the way ECMP spreads traffic evenly over equal paths: a group of
//! endpoints under one switch (or under one pod of switches) has a single up-link and a single
//! down-link whose capacity is that of all its up ports, i.e. its endpoints' line rate divided by
//! the oversubscription. A route climbs to the lowest tier where source and destination share a
//! group and comes down again; each switch crossed adds the network's switch latency.

use super::{FabricKind, NicId, NodeId, NodeSpec};
use crate::net::{Link, LinkId};
use crate::units::{Bandwidth, Time};

/// Where the nodes sit: groups (racks, zones, regions) and what joins them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Placement {
    /// What separates the groups ("rack", "zone", "region"; "compact" for one group).
    pub tier: String,
    /// The machine's nodes in each group.
    pub groups: Vec<Vec<NodeId>>,
    /// One-way latency between two nodes of different groups.
    #[serde(serialize_with = "super::ser_display")]
    pub latency: Time,
    /// Bandwidth one node can send to (and receive from) other groups, if capped.
    #[serde(serialize_with = "super::ser_opt_display")]
    pub bandwidth_per_node: Option<Bandwidth>,
    /// Node `n`'s position in the fabric: leaves are filled by position.
    pub slots: Vec<usize>,
}

impl Placement {
    /// All `nodes` in one group: nothing between them but the fabric.
    pub fn compact(nodes: usize) -> Placement {
        Placement {
            tier: "compact".into(),
            groups: vec![(0..nodes).map(NodeId).collect()],
            latency: Time::ZERO,
            bandwidth_per_node: None,
            slots: (0..nodes).collect(),
        }
    }
}

/// The network's links and routes.
#[derive(Debug, Clone)]
pub struct Fabric {
    nics: usize,
    tx: Vec<LinkId>,
    rx: Vec<LinkId>,
    /// Per tier boundary (0 = above the leaves): the endpoints per group, and each group's
    /// up- and down-link.
    tiers: Vec<(usize, Vec<LinkId>, Vec<LinkId>)>,
    rail: bool,
    /// Endpoints per rail leaf (rail fabrics).
    rail_leaf: usize,
    node_group: Vec<usize>,
    place: Vec<(LinkId, LinkId)>,
    slots: Vec<usize>,
    /// Explicit fabrics: each node's switch, each switch's (neighbour, link) list, and the
    /// switch-to-switch hop counts.
    explicit: Option<Explicit>,
}

#[derive(Debug, Clone)]
struct Explicit {
    node_switch: Vec<usize>,
    adj: Vec<Vec<(usize, LinkId)>>,
    dist: Vec<Vec<usize>>,
}

/// Checks an explicit (`links`) network against the node count: every node plugs into exactly
/// one switch and every pair of nodes is connected.
pub fn check(spec: &NodeSpec, nodes: usize) -> Result<(), String> {
    let FabricKind::Links { switches, links } = &spec.network.fabric else { return Ok(()) };
    let mut home = vec![None; nodes];
    for (s, (id, members)) in switches.iter().enumerate() {
        for &NodeId(n) in members {
            if n >= nodes {
                return Err(format!(
                    "network.switch {id:?}: node {n} does not exist (nodes 0..{})",
                    nodes - 1
                ));
            }
            if let Some(other) = home[n].replace(s) {
                return Err(format!(
                    "network.switch: node {n} plugs into both {:?} and {id:?}",
                    switches[other].0
                ));
            }
        }
    }
    if let Some(n) = home.iter().position(Option::is_none) {
        return Err(format!(
            "network.switch: node {n} plugs into no switch, so its GPUs have no path to any NIC's network"
        ));
    }
    let dist = distances(switches.len(), links);
    for a in 0..nodes {
        for b in 0..nodes {
            let (sa, sb) = (home[a].unwrap_or(0), home[b].unwrap_or(0));
            if dist[sa][sb] == usize::MAX {
                return Err(format!(
                    "network.link: no path from switch {:?} (node {a}) to {:?} (node {b})",
                    switches[sa].0, switches[sb].0
                ));
            }
        }
    }
    Ok(())
}

fn distances(n: usize, links: &[(usize, usize, Bandwidth, Time)]) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); n];
    for &(a, b, _, _) in links {
        adj[a].push(b);
        adj[b].push(a);
    }
    (0..n)
        .map(|s| {
            let mut d = vec![usize::MAX; n];
            d[s] = 0;
            let mut queue = std::collections::VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for &v in &adj[u] {
                    if d[v] == usize::MAX {
                        d[v] = d[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            d
        })
        .collect()
}

fn push(links: &mut Vec<Link>, capacity: Bandwidth, latency: Time, class: &'static str) -> LinkId {
    links.push(Link { capacity, latency, class });
    LinkId(links.len() as u32 - 1)
}

/// Down ports of a switch of `radix` ports whose down:up ratio is `o`.
fn down_ports(radix: usize, o: f64) -> usize {
    ((radix as f64 * o / (1.0 + o)).floor() as usize).clamp(1, radix.max(1))
}

impl Fabric {
    /// Adds the network's links for `nodes` nodes of `spec` to `links`. `nic_rate` is one NIC's
    /// effective rate and `nic_latency` its latency (each way).
    pub fn build(
        spec: &NodeSpec,
        nodes: usize,
        placement: &Placement,
        nic_rate: Bandwidth,
        nic_latency: Time,
        links: &mut Vec<Link>,
    ) -> Fabric {
        let nics = spec.nic.as_ref().map_or(0, |n| n.count);
        let sw = spec.network.latency;
        let half = Time::from_ps(sw.as_ps() / 2);
        let (mut tx, mut rx) = (Vec::new(), Vec::new());
        for _ in 0..nodes * nics {
            tx.push(push(links, nic_rate, nic_latency + half, "net"));
            rx.push(push(links, nic_rate, nic_latency + (sw - half), "net"));
        }
        let endpoints = nodes * nics;
        let rate = nic_rate.gbyte_per_s();
        let mut tiers = Vec::new();
        let mut add_tier = |links: &mut Vec<Link>, size: usize, o: f64| {
            let groups = endpoints.div_ceil(size.max(1)).max(1);
            let cap = Bandwidth::from_gbyte_per_s_f64(size as f64 * rate / o);
            let up = (0..groups).map(|_| push(links, cap, sw, "net")).collect();
            let down = (0..groups).map(|_| push(links, cap, sw, "net")).collect();
            tiers.push((size, up, down));
        };
        let (mut rail, mut rail_leaf) = (false, 0);
        let mut explicit = None;
        match &spec.network.fabric {
            FabricKind::NonBlocking => {}
            FabricKind::Links { switches, links: between } => {
                let mut node_switch = vec![0; nodes];
                for (s, (_, members)) in switches.iter().enumerate() {
                    for &NodeId(n) in members {
                        if n < nodes {
                            node_switch[n] = s;
                        }
                    }
                }
                let mut adj = vec![Vec::new(); switches.len()];
                for &(a, b, bw, lat) in between {
                    adj[a].push((b, push(links, bw, lat + sw, "net")));
                    adj[b].push((a, push(links, bw, lat + sw, "net")));
                }
                let dist = distances(switches.len(), between);
                explicit = Some(Explicit { node_switch, adj, dist });
            }
            FabricKind::FatTree { tiers: t, radix, oversubscription } => {
                let mut size = 1;
                for level in 0..t.saturating_sub(1) {
                    let o = oversubscription.get(level).copied().unwrap_or(1.0);
                    size *= down_ports(*radix, o);
                    add_tier(links, size, o);
                }
            }
            FabricKind::Rail { radix, oversubscription } => {
                rail = true;
                rail_leaf = down_ports(*radix, *oversubscription);
                // One up/down pair per rail leaf: leaf index = rail * leaves_per_rail + block.
                let per_rail = nodes.div_ceil(rail_leaf).max(1);
                let cap =
                    Bandwidth::from_gbyte_per_s_f64(rail_leaf as f64 * rate / oversubscription);
                let up = (0..nics * per_rail).map(|_| push(links, cap, sw, "net")).collect();
                let down = (0..nics * per_rail).map(|_| push(links, cap, sw, "net")).collect();
                tiers.push((rail_leaf, up, down));
            }
        }
        let mut node_group = vec![0; nodes];
        for (g, members) in placement.groups.iter().enumerate() {
            for &NodeId(n) in members {
                if n < nodes {
                    node_group[n] = g;
                }
            }
        }
        let place = placement
            .groups
            .iter()
            .map(|members| {
                let cap = match placement.bandwidth_per_node {
                    Some(b) => {
                        Bandwidth::from_gbyte_per_s_f64(b.gbyte_per_s() * members.len() as f64)
                    }
                    None => Bandwidth::from_gbyte_per_s_f64(rate * (nics * members.len()) as f64),
                };
                let half = Time::from_ps(placement.latency.as_ps() / 2);
                (push(links, cap, half, "net"), push(links, cap, placement.latency - half, "net"))
            })
            .collect();
        let slots = placement.slots.clone();
        Fabric { nics, tx, rx, tiers, rail, rail_leaf, node_group, place, slots, explicit }
    }

    /// The group (leaf, pod, …) of endpoint `(node, nic)` at tier boundary `t`.
    fn group(&self, t: usize, node: usize, nic: usize) -> usize {
        let node = self.slots.get(node).copied().unwrap_or(node);
        if self.rail {
            let per_rail = self.tiers[0].1.len() / self.nics.max(1);
            return nic * per_rail + node / self.rail_leaf.max(1);
        }
        (node * self.nics + nic) / self.tiers[t].0.max(1)
    }

    /// The link from NIC `(node, nic)` (the machine's node) into the network, and the one
    /// back out of it.
    pub fn nic_links(&self, NodeId(node): NodeId, NicId(nic): NicId) -> (LinkId, LinkId) {
        let i = node * self.nics + nic;
        (self.tx[i], self.rx[i])
    }

    /// Links from NIC `from` to NIC `to` (each `(node, nic)`, the machine's nodes).
    pub fn route(&self, from: (NodeId, NicId), to: (NodeId, NicId)) -> Vec<LinkId> {
        let (from, to) = ((from.0.0, from.1.0), (to.0.0, to.1.0));
        let a = from.0 * self.nics + from.1;
        let b = to.0 * self.nics + to.1;
        let mut p = vec![self.tx[a]];
        let (ga, gb) = (self.node_group[from.0], self.node_group[to.0]);
        if ga != gb {
            p.push(self.place[ga].0);
            p.push(self.place[gb].1);
        } else if let Some(x) = &self.explicit {
            // Fewest switch hops; among equal next hops, ECMP hashes the flow onto one.
            let (mut at, goal) = (x.node_switch[from.0], x.node_switch[to.0]);
            let mut step = 0u64;
            while at != goal {
                let next: Vec<&(usize, LinkId)> = x.adj[at]
                    .iter()
                    .filter(|(v, _)| x.dist[*v][goal].saturating_add(1) == x.dist[at][goal])
                    .collect();
                if next.is_empty() {
                    break;
                }
                let h = (a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (b as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                    ^ step.wrapping_mul(0x1656_67B1_9E37_79F9);
                let (v, l) = next[(h % next.len() as u64) as usize];
                p.push(*l);
                at = *v;
                step += 1;
            }
        } else {
            let shared = (0..self.tiers.len())
                .find(|&t| self.group(t, from.0, from.1) == self.group(t, to.0, to.1))
                .unwrap_or(self.tiers.len());
            for t in 0..shared {
                p.push(self.tiers[t].1[self.group(t, from.0, from.1)]);
            }
            for t in (0..shared).rev() {
                p.push(self.tiers[t].2[self.group(t, to.0, to.1)]);
            }
        }
        p.push(self.rx[b]);
        p
    }
}
