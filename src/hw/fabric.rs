//! The network between nodes: NIC links into a non-blocking switch, a fat-tree with
//! oversubscription per tier, or a rail-optimized network; and placement groups (racks, zones,
//! regions) joined by links of their own latency and bandwidth.
//!
//! A group of endpoints under one switch (or under one pod of switches) has up-ports whose
//! summed capacity is its endpoints' line rate divided by the oversubscription. A route climbs
//! to the lowest tier where source and destination share a group and comes down again; each
//! switch crossed adds the network's switch latency. How a route uses the up-ports depends on
//! the routing ([`Routing`]):
//!
//! * adaptive: traffic spreads evenly over the equal-cost paths, so each group has a single
//!   up-link and a single down-link of the ports' summed capacity;
//! * ECMP: every up-port is a link of its own (the group's capacity over its ports) and each
//!   flow is hashed onto one, as a switch hashes a packet's 5-tuple (for RDMA over Converged
//!   Ethernet the UDP source port, one per queue pair: one per NCCL connection). Climbing a
//!   tier picks one of the switch's up-ports, so a pod's up-ports are numbered by the leaf port
//!   and the aggregation port taken; in a fat-tree the way down from the top switch reached is
//!   unique, so the route comes down through the ports of the same numbers in the destination's
//!   groups. Each switch hashes independently (each tier its own seed, as switches are
//!   configured to avoid polarisation). The hash is a fixed function of the source and
//!   destination NICs, the connection and the tier: the same scenario routes the same way.
//!
//! A leaf of `radix` ports at down:up ratio `o` has ⌊radix·o/(1+o)⌋ down-ports and the rest up;
//! a pod's aggregation switches are as many as a leaf's up-ports, each with its own up-ports.

use super::{FabricKind, NicId, NodeId, NodeSpec, Routing};
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
    /// Per tier boundary (0 = above the leaves), from the leaves up.
    tiers: Vec<Tier>,
    rail: bool,
    /// Endpoints per rail leaf, and leaves per rail (rail fabrics).
    rail_leaf: usize,
    per_rail: usize,
    node_group: Vec<usize>,
    place: Vec<(LinkId, LinkId)>,
    slots: Vec<usize>,
    /// Explicit fabrics: each node's switch, each switch's (neighbour, link) list, and the
    /// switch-to-switch hop counts.
    explicit: Option<Explicit>,
    /// Whether a generated fabric's flows are hashed onto one of the up-ports (static ECMP).
    ecmp: bool,
    /// What separates the placement's groups ("rack", "zone", "region").
    placement_tier: String,
}

/// One tier boundary: the groups of endpoints below it and their links up and down.
#[derive(Debug, Clone)]
struct Tier {
    /// Endpoints per group.
    size: usize,
    /// Up-ports of each switch of this tier, among which a flow's hash picks (1: adaptive).
    fan: usize,
    /// Up-links per group: the ports of all its switches at this tier (1: adaptive, one link
    /// for all of them).
    ports: usize,
    /// Group `g`'s up-link `p` is `up[g * ports + p]`; its down-link `p`, from the switch above
    /// that port leads to, is `down[g * ports + p]`.
    up: Vec<LinkId>,
    down: Vec<LinkId>,
}

#[derive(Debug, Clone)]
struct Explicit {
    node_switch: Vec<usize>,
    adj: Vec<Vec<(usize, LinkId)>>,
    dist: Vec<Vec<usize>>,
}

/// The NIC ports a generated fabric can hold: a fat-tree's top switches give each of their
/// `radix` ports to one group of the tier below (one leaf for a single tier: `radix` NICs); a
/// rail fabric's spines each reach at most `radix` rail leaves. `None` where the fabric is not
/// generated from a radix.
pub fn capacity(kind: &FabricKind, nics: usize) -> Option<usize> {
    match kind {
        FabricKind::FatTree { tiers, radix, oversubscription } => {
            let below = (0..tiers.saturating_sub(1)).fold(1usize, |size, level| {
                let o = oversubscription.get(level).copied().unwrap_or(1.0);
                size.saturating_mul(down_ports(*radix, o))
            });
            Some(radix.saturating_mul(below))
        }
        FabricKind::Rail { radix, oversubscription } => {
            // Rail leaves: `nics` rails, each of leaves of `down_ports` nodes.
            let leaves_per_rail = radix / nics.max(1);
            Some(leaves_per_rail.saturating_mul(down_ports(*radix, *oversubscription)) * nics)
        }
        _ => None,
    }
}

/// Checks the network against the node count: a fat-tree or rail fabric must have switch ports
/// for every NIC ([`capacity`]); in an explicit (`links`) network every node plugs into
/// exactly one switch and every pair of nodes is connected.
pub fn check(spec: &NodeSpec, nodes: usize) -> Result<(), String> {
    let nics = spec.nic.as_ref().map_or(0, |n| n.count);
    if let Some(cap) = capacity(&spec.network.fabric, nics)
        && nodes.saturating_mul(nics) > cap
    {
        let (what, radix) = match &spec.network.fabric {
            FabricKind::FatTree { tiers, radix, .. } => {
                (format!("a {tiers}-tier fat_tree of {radix}-port switches"), *radix)
            }
            FabricKind::Rail { radix, .. } => {
                (format!("a rail fabric of {radix}-port switches ({nics} rails)"), *radix)
            }
            _ => unreachable!("capacity is only given for generated fabrics"),
        };
        return Err(format!(
            "network.radix: {what} holds {cap} NIC ports, and {nodes} nodes of {nics} NICs need {}; give more tiers or a larger radix than {radix}",
            nodes * nics
        ));
    }
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

/// Up ports of that switch (at least one).
fn up_ports(radix: usize, o: f64) -> usize {
    radix.saturating_sub(down_ports(radix, o)).max(1)
}

/// SplitMix64's finaliser: every bit of `x` stirred into every bit of the result.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The ECMP hash of a flow from endpoint `a` to endpoint `b` on connection `conn`, as the
/// switches of tier boundary `tier` compute it: a fixed function, so that a scenario always
/// routes the same way.
fn ecmp_hash(a: usize, b: usize, conn: usize, tier: usize) -> u64 {
    [b, conn, tier]
        .iter()
        .fold(mix(a as u64), |h, &v| mix(h.wrapping_add(0x9E37_79B9_7F4A_7C15) ^ v as u64))
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
        let ecmp = spec.network.routing == Routing::Ecmp;
        let mut tiers: Vec<Tier> = Vec::new();
        // A tier of `groups` groups of `size` endpoints at down:up ratio `o`, whose switches have
        // `fan` up-ports each: under ECMP each group's up-ports (its switches' ports, numbered
        // by the ports taken at every tier up to this one) are links of their own, sharing the
        // group's capacity. Where one group holds every endpoint no route climbs, and no port
        // is built.
        let mut add_tier = |links: &mut Vec<Link>, groups: usize, size: usize, o: f64, fan| {
            let cap = size as f64 * rate / o;
            let below = tiers.last().map_or(1, |t: &Tier| t.ports);
            let (fan, ports) = if ecmp { (fan, below * fan) } else { (1, 1) };
            let built = if ecmp && groups == 1 { 0 } else { groups * ports };
            let cap = Bandwidth::from_gbyte_per_s_f64(cap / ports as f64);
            let up = (0..built).map(|_| push(links, cap, sw, "net")).collect();
            let down = (0..built).map(|_| push(links, cap, sw, "net")).collect();
            tiers.push(Tier { size, fan, ports, up, down });
        };
        let (mut rail, mut rail_leaf, mut per_rail) = (false, 0, 0);
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
                    let groups = endpoints.div_ceil(size.max(1)).max(1);
                    add_tier(links, groups, size, o, up_ports(*radix, o));
                }
            }
            FabricKind::Rail { radix, oversubscription: o } => {
                rail = true;
                rail_leaf = down_ports(*radix, *o);
                // Rail leaves: leaf index = rail * leaves_per_rail + block.
                per_rail = nodes.div_ceil(rail_leaf).max(1);
                add_tier(links, nics * per_rail, rail_leaf, *o, up_ports(*radix, *o));
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
        Fabric {
            nics,
            tx,
            rx,
            tiers,
            rail,
            rail_leaf,
            per_rail,
            node_group,
            place,
            slots,
            ecmp,
            explicit,
            placement_tier: placement.tier.clone(),
        }
    }

    /// The group (leaf, pod, …) of endpoint `(node, nic)` at tier boundary `t`.
    fn group(&self, t: usize, node: usize, nic: usize) -> usize {
        let node = self.slots.get(node).copied().unwrap_or(node);
        if self.rail {
            return nic * self.per_rail + node / self.rail_leaf.max(1);
        }
        (node * self.nics + nic) / self.tiers[t].size.max(1)
    }

    /// The highest tier of the network a route between any two NICs of `nodes` (the machine's,
    /// two or more) climbs: a collective's traffic may leave a node by one NIC and enter the
    /// next by another (collsim's rings do), so every NIC pair counts. Its level (1 for one
    /// switch or leaf, one more per tier climbed, 100 across placement groups) and its label:
    /// "net" under one ideal switch, "net, one leaf", "net, spine", "net, core" or "net, tier k"
    /// up a fat tree, "net, rail leaf" or "net, spine" on a rail fabric (different rails meet
    /// at the spine), "net, one switch" or "net, k switch hops" on an explicit network, and
    /// "net, cross-TIER" where the nodes sit in more than one placement group (rack, zone,
    /// region). Under static ECMP a route above the leaves says so (", ECMP").
    pub fn span(&self, nodes: &[usize]) -> (usize, String) {
        let differ = |f: &dyn Fn(usize, usize) -> usize| {
            let mut seen = None;
            for &n in nodes {
                for k in 0..self.nics.max(1) {
                    match seen {
                        None => seen = Some(f(n, k)),
                        Some(v) if v != f(n, k) => return true,
                        Some(_) => {}
                    }
                }
            }
            false
        };
        if differ(&|n, _| self.node_group.get(n).copied().unwrap_or(0)) {
            return (100, format!("net, cross-{}", self.placement_tier));
        }
        let climbed = if let Some(x) = &self.explicit {
            let home = |n: usize| x.node_switch.get(n).copied().unwrap_or(0);
            let hops = nodes
                .iter()
                .flat_map(|&a| nodes.iter().map(move |&b| (a, b)))
                .map(|(a, b)| x.dist[home(a)][home(b)])
                .filter(|&d| d != usize::MAX)
                .max()
                .unwrap_or(0);
            let label = match hops {
                0 => "net, one switch".to_string(),
                1 => "net, 1 switch hop".to_string(),
                h => format!("net, {h} switch hops"),
            };
            return (1 + hops, label);
        } else if self.rail {
            let apart = differ(&|n, k| {
                let block = self.slots.get(n).copied().unwrap_or(n) / self.rail_leaf.max(1);
                k * self.per_rail + block
            });
            usize::from(apart)
        } else {
            // The lowest tier boundary under which every NIC of the nodes shares a group.
            (0..self.tiers.len())
                .find(|&t| !differ(&|n, k| self.group(t, n, k)))
                .unwrap_or(self.tiers.len())
        };
        let label = match (climbed, self.tiers.is_empty()) {
            (0, true) => "net".to_string(),
            (0, false) if self.rail => "net, rail leaf".to_string(),
            (0, false) => "net, one leaf".to_string(),
            (1, _) => "net, spine".to_string(),
            (2, _) => "net, core".to_string(),
            (k, _) => format!("net, tier {k}"),
        };
        let label = if climbed > 0 && self.ecmp { format!("{label}, ECMP") } else { label };
        (1 + climbed, label)
    }

    /// The link from NIC `(node, nic)` (the machine's node) into the network, and the one
    /// back out of it.
    pub fn nic_links(&self, NodeId(node): NodeId, NicId(nic): NicId) -> (LinkId, LinkId) {
        let i = node * self.nics + nic;
        (self.tx[i], self.rx[i])
    }

    /// Links from NIC `from` to NIC `to` (each `(node, nic)`, the machine's nodes) for
    /// connection `conn` between them (NCCL's channel): where flows are hashed onto one of
    /// several equal paths (ECMP, explicit networks), each connection is hashed on its own.
    pub fn route(&self, from: (NodeId, NicId), to: (NodeId, NicId), conn: usize) -> Vec<LinkId> {
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
                    ^ step.wrapping_mul(0x1656_67B1_9E37_79F9)
                    ^ (conn as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
                let (v, l) = next[(h % next.len() as u64) as usize];
                p.push(*l);
                at = *v;
                step += 1;
            }
        } else {
            let shared = (0..self.tiers.len())
                .find(|&t| self.group(t, from.0, from.1) == self.group(t, to.0, to.1))
                .unwrap_or(self.tiers.len());
            // Up through the ports the hashes pick (adaptive: the one link), down through the
            // ports of the same numbers under the switch reached.
            let mut port = 0;
            let mut down = Vec::with_capacity(shared);
            for (t, tier) in self.tiers[..shared].iter().enumerate() {
                let pick =
                    if tier.fan > 1 { ecmp_hash(a, b, conn, t) % tier.fan as u64 } else { 0 };
                port = port * tier.fan + pick as usize;
                p.push(tier.up[self.group(t, from.0, from.1) * tier.ports + port]);
                down.push(tier.down[self.group(t, to.0, to.1) * tier.ports + port]);
            }
            p.extend(down.into_iter().rev());
        }
        p.push(self.rx[b]);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::resolve_topology;

    /// DGX-H100 nodes (8 NICs) under a fat-tree of `radix`-port switches.
    fn fabric(radix: usize, tiers: usize, nodes: usize, routing: Routing) -> (Fabric, Vec<Link>) {
        let (_, mut spec) = resolve_topology("dgx-h100", None).unwrap();
        spec.network.fabric =
            FabricKind::FatTree { tiers, radix, oversubscription: vec![1.0; tiers - 1] };
        spec.network.routing = routing;
        let mut links = Vec::new();
        let rate = Bandwidth::from_gbyte_per_s_f64(50.0);
        let f =
            Fabric::build(&spec, nodes, &Placement::compact(nodes), rate, Time::ZERO, &mut links);
        (f, links)
    }

    #[test]
    fn ecmp_splits_each_uplink_into_its_ports() {
        // Radix 16: 8 NICs down (one node per leaf), 8 ports up, each at one NIC's rate.
        let (a, al) = fabric(16, 2, 4, Routing::Adaptive);
        let (e, el) = fabric(16, 2, 4, Routing::Ecmp);
        assert_eq!((a.tiers[0].up.len(), a.tiers[0].ports), (4, 1));
        assert_eq!((e.tiers[0].up.len(), e.tiers[0].ports, e.tiers[0].fan), (32, 8, 8));
        let cap = |links: &[Link], l: LinkId| links[l.0 as usize].capacity.gbyte_per_s();
        assert!((cap(&al, a.tiers[0].up[0]) - 400.0).abs() < 1e-6);
        for &l in e.tiers[0].up.iter().chain(&e.tiers[0].down) {
            assert!((cap(&el, l) - 50.0).abs() < 1e-6);
        }
        // Three tiers of 8-port switches: a pod's 16 ports are 4 aggregation switches x 4.
        let (t, _) = fabric(8, 3, 8, Routing::Ecmp);
        assert_eq!((t.tiers[1].fan, t.tiers[1].ports), (4, 16));
    }

    #[test]
    fn a_route_comes_down_through_the_ports_it_went_up() {
        let (f, _) = fabric(8, 3, 8, Routing::Ecmp);
        let index = |v: &[LinkId], l: LinkId| v.iter().position(|&x| x == l);
        let mut seen = std::collections::BTreeSet::new();
        for conn in 0..4 {
            // Node 0 to node 7: different pods, so up two tiers and down two.
            let p = f.route((NodeId(0), NicId(1)), (NodeId(7), NicId(1)), conn);
            assert_eq!(p.len(), 6, "{p:?}");
            let (t0, t1) = (&f.tiers[0], &f.tiers[1]);
            let up0 = index(&t0.up, p[1]).unwrap() % t0.ports;
            let up1 = index(&t1.up, p[2]).unwrap() % t1.ports;
            assert_eq!(up1 / t1.fan, up0, "the pod port is under the leaf port taken");
            assert_eq!(index(&t1.down, p[3]).unwrap() % t1.ports, up1);
            assert_eq!(index(&t0.down, p[4]).unwrap() % t0.ports, up0);
            seen.insert(up1);
            // The same flow routes the same way every time.
            assert_eq!(p, f.route((NodeId(0), NicId(1)), (NodeId(7), NicId(1)), conn));
        }
        assert!(seen.len() > 1, "four connections all hashed onto one port: {seen:?}");
    }
}
