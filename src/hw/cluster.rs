//! `nodes` copies of a node graph joined by the network: global link ids and routes. A
//! [`Cluster::subset`] is one job's view of some of those nodes: its own node numbering, the
//! whole machine's links (so jobs side by side share them). Every [`NodeId`] a cluster takes is
//! in its own numbering; [`Cluster::machine_node`] gives the machine's.

use std::sync::Arc;

use super::fabric::{Fabric, Placement};
use super::graph::{NodeGraph, PathType, Route, Vertex};
use super::{GpuId, NicId, NodeId, NodeSpec};
use crate::net::{Link, LinkId};
use crate::units::{Bandwidth, Time};

/// `nodes` copies of a node, expanded into directed links, with routes.
#[derive(Debug, Clone)]
pub struct Cluster {
    spec: NodeSpec,
    nodes: usize,
    gpus_per_node: usize,
    graph: NodeGraph,
    links: Arc<[Link]>,
    /// Every link's capacity in bytes/s, as the max-min solver takes them.
    capacities: Arc<[f64]>,
    /// Links per node copy; node `n`'s local link `l` is global `n * per_node + l`.
    per_node: usize,
    fabric: Arc<Fabric>,
    placement: Placement,
    /// For a job's view: the machine's node behind each of the view's nodes (empty: the
    /// machine itself).
    members: Vec<NodeId>,
    /// Nodes in the whole machine.
    machine_nodes: usize,
    /// For a view of chosen GPUs ([`Cluster::subset_gpus`]): the node's GPU behind each of the
    /// view's, in order (None: the node's first `gpus_per_node`).
    gpus: Option<Arc<[usize]>>,
}

impl Cluster {
    /// Expands `nodes` nodes of `spec` in one placement group, of which the first
    /// `gpus_per_node` GPUs are used.
    pub fn new(spec: &NodeSpec, nodes: usize, gpus_per_node: usize) -> Cluster {
        Cluster::with_network(spec, nodes, gpus_per_node, &Placement::compact(nodes), None)
    }

    /// As [`Cluster::new`], with the nodes placed in `placement`'s groups, and for socket
    /// transports `streams` TCP streams per connection.
    pub fn with_network(
        spec: &NodeSpec,
        nodes: usize,
        gpus_per_node: usize,
        placement: &Placement,
        streams: Option<usize>,
    ) -> Cluster {
        let graph = NodeGraph::new(spec);
        let per_node = graph.links().len();
        let mut links: Vec<Link> = Vec::with_capacity(per_node * nodes);
        for _ in 0..nodes {
            links.extend_from_slice(graph.links());
        }
        let (rate, latency) = match &spec.nic {
            Some(nic) => {
                let t = &nic.transport;
                let mut gb = nic.speed.gbyte_per_s() * t.efficiency;
                if let Some(per) = t.per_stream {
                    gb = gb.min(per.gbyte_per_s() * streams.unwrap_or(t.default_streams) as f64);
                }
                (Bandwidth::from_gbyte_per_s_f64(gb), nic.latency + t.message_overhead)
            }
            None => (Bandwidth::from_bits_per_sec(1), Time::ZERO),
        };
        let fabric = Fabric::build(spec, nodes, placement, rate, latency, &mut links);
        Cluster {
            spec: spec.clone(),
            nodes,
            gpus_per_node,
            graph,
            capacities: links.iter().map(|l| l.capacity.bytes_per_sec()).collect(),
            links: links.into(),
            per_node,
            fabric: Arc::new(fabric),
            placement: placement.clone(),
            members: Vec::new(),
            machine_nodes: nodes,
            gpus: None,
        }
    }

    /// A job's view of `members` (this cluster's nodes, in the job's order; on the machine
    /// itself, the machine's) with `gpus_per_node` GPUs used on each: node `i` of the view is
    /// node `members[i]` here, and every link keeps its id, so flows of jobs side by side meet
    /// on shared links.
    pub fn subset(&self, members: &[NodeId], gpus_per_node: usize) -> Cluster {
        let members: Vec<NodeId> = members.iter().map(|&n| self.machine_node(n)).collect();
        Cluster { nodes: members.len(), gpus_per_node, members, gpus: None, ..self.clone() }
    }

    /// As [`Cluster::subset`], using the node's GPUs `gpus` (their indices in the node, in the
    /// view's order) on each: the view's GPU `i` is the node's `gpus[i]`, and every method
    /// taking a [`GpuId`] or a GPU [`Vertex`] takes the view's. A process group of some GPUs
    /// per node runs on the links of those GPUs, beside its sibling groups on the others.
    pub fn subset_gpus(&self, members: &[NodeId], gpus: &[usize]) -> Cluster {
        let view = self.subset(members, gpus.len());
        Cluster { gpus: Some(gpus.into()), ..view }
    }

    /// This view with each link of `shares` giving 1/k of its capacity: what a process group
    /// gets of links it shares evenly with k − 1 sibling groups doing the same work at the
    /// same time (a NIC two GPUs' groups reduce through).
    pub fn with_link_shares(&self, shares: &std::collections::BTreeMap<LinkId, usize>) -> Cluster {
        let mut links = self.links.to_vec();
        let mut capacities = self.capacities.to_vec();
        for (&l, &k) in shares {
            let i = l.0 as usize;
            if k > 1 && i < links.len() {
                links[i].capacity = Bandwidth::from_gbyte_per_s_f64(capacities[i] / k as f64 / 1e9);
                capacities[i] = links[i].capacity.bytes_per_sec();
            }
        }
        Cluster { links: links.into(), capacities: capacities.into(), ..self.clone() }
    }

    /// The node's GPU behind this view's GPU `g`.
    fn node_gpu(&self, g: GpuId) -> GpuId {
        match &self.gpus {
            Some(map) => GpuId(map.get(g.0).copied().unwrap_or(g.0)),
            None => g,
        }
    }

    /// `v` with a GPU as the node's.
    fn node_vertex(&self, v: Vertex) -> Vertex {
        match v {
            Vertex::Gpu(g) => Vertex::Gpu(self.node_gpu(g)),
            v => v,
        }
    }

    /// The node graph's route between two devices (a GPU as this view's).
    pub fn graph_route(&self, from: Vertex, to: Vertex) -> Option<&Route> {
        self.graph.route(self.node_vertex(from), self.node_vertex(to))
    }

    /// The ids of node `n`'s own links (inside the node: NVLink, PCIe, the socket link).
    pub fn node_links(&self, n: NodeId) -> impl Iterator<Item = LinkId> + use<> {
        let base = self.node_base(n) as usize;
        (base..base + self.per_node).map(|l| LinkId(l as u32))
    }

    /// The id of node `n`'s first link: node `n`'s copy of a node-local link `l` of node 0 is
    /// `l - node_base(NodeId(0)) + node_base(n)` (the nodes are copies).
    pub fn node_base(&self, n: NodeId) -> u32 {
        (self.machine_node(n).0 * self.per_node) as u32
    }

    /// The tier this view's traffic crosses, with its level for comparing two: the node's own
    /// links on one node (level 0; "nvlink" with `nvlink`, else "pcie"), else the network's
    /// tier its nodes span ([`Fabric::span`]).
    pub fn tier(&self, nvlink: bool) -> (usize, String) {
        if self.nodes <= 1 {
            return (0, if nvlink { "nvlink" } else { "pcie" }.into());
        }
        let nodes: Vec<usize> = (0..self.nodes).map(|n| self.machine_node(NodeId(n)).0).collect();
        self.fabric.span(&nodes)
    }

    /// The machine's id of this view's node `n` (`n` itself on the machine).
    pub fn machine_node(&self, n: NodeId) -> NodeId {
        if self.members.is_empty() { n } else { self.members[n.0] }
    }

    /// Nodes in the whole machine this view is part of.
    pub fn machine_nodes(&self) -> usize {
        self.machine_nodes
    }

    /// Where the nodes sit.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Whether every node sees the same network (one ideal switch, one placement group), so
    /// that one node stands for all.
    pub fn network_is_uniform(&self) -> bool {
        matches!(self.spec.network.fabric, super::FabricKind::NonBlocking)
            && self.placement.groups.len() <= 1
    }

    /// The node template.
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// One node's graph (the same for every node).
    pub fn graph(&self) -> &NodeGraph {
        &self.graph
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// GPUs used per node.
    pub fn gpus_per_node(&self) -> usize {
        self.gpus_per_node
    }

    /// Every link's capacity, bytes/s, indexed by [`LinkId`].
    pub fn capacities(&self) -> &[f64] {
        &self.capacities
    }

    /// All links, indexed by [`LinkId`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// A link's name for reports: "node 3 GPU0->NVSwitch nvlink" (the machine's node and the
    /// link's ends) or "fabric net 40" (the network's links, after every node's).
    pub fn link_label(&self, l: LinkId) -> String {
        let class = self.links.get(l.0 as usize).map_or("?", |k| k.class);
        let (l, nodes) = (l.0 as usize, self.machine_nodes * self.per_node);
        if l < nodes && self.per_node > 0 {
            let ends = self.graph.link_name(l % self.per_node);
            format!("node {} {ends} {class}", l / self.per_node)
        } else {
            format!("fabric {class} {}", l - nodes.min(l))
        }
    }

    /// The links and path type of the route between two devices of `node`.
    pub fn route(&self, node: NodeId, from: Vertex, to: Vertex) -> (Vec<LinkId>, PathType) {
        let base = self.node_base(node);
        match self.graph_route(from, to) {
            Some(r) => (r.links.iter().map(|&l| LinkId(base + l)).collect(), r.ty),
            None => (Vec::new(), PathType::Loc),
        }
    }

    /// The route from `from` to `to` bounced through host memory of `from`'s NUMA domain (NCCL's
    /// SHM transport between GPUs without P2P, and network staging without GPUDirect RDMA).
    pub fn route_via_host(&self, node: NodeId, from: Vertex, to: Vertex) -> Vec<LinkId> {
        let numa = Vertex::Numa(self.numa_of(from));
        let mut p = self.route(node, from, numa).0;
        p.extend(self.route(node, numa, to).0);
        p
    }

    /// The NUMA domain a GPU or NIC hangs off.
    pub fn numa_of(&self, v: Vertex) -> usize {
        match self.node_vertex(v) {
            Vertex::Gpu(i) => self.spec.numa_of(self.spec.gpu_parent[i.0]),
            Vertex::Nic(i) => self.spec.numa_of(self.spec.nic_parent[i.0]),
            Vertex::Switch(i) => self.spec.numa_of(super::Parent::Switch(i)),
            Vertex::Numa(i) => i,
            Vertex::NvSwitch => 0,
        }
    }

    /// Links from a GPU to another GPU of the same node, on the best route.
    pub fn gpu_to_gpu(&self, node: NodeId, a: GpuId, b: GpuId) -> Vec<LinkId> {
        self.route(node, Vertex::Gpu(a), Vertex::Gpu(b)).0
    }

    /// Links from a GPU to a NIC of its node.
    pub fn gpu_to_nic(&self, node: NodeId, gpu: GpuId, nic: NicId) -> Vec<LinkId> {
        self.route(node, Vertex::Gpu(gpu), Vertex::Nic(nic)).0
    }

    /// Links from a NIC to a GPU of its node.
    pub fn nic_to_gpu(&self, node: NodeId, nic: NicId, gpu: GpuId) -> Vec<LinkId> {
        self.route(node, Vertex::Nic(nic), Vertex::Gpu(gpu)).0
    }

    /// Links from a NIC out through the network into a NIC of another node, for connection
    /// `conn` between them (NCCL's channel; 0 where one flow stands for all of a pair's). Under
    /// ECMP each connection is hashed onto its own path ([`Cluster::routes_by_connection`]).
    pub fn nic_to_nic(
        &self,
        from: (NodeId, NicId),
        to: (NodeId, NicId),
        conn: usize,
    ) -> Vec<LinkId> {
        let node = |(n, nic): (NodeId, NicId)| (self.machine_node(n), nic);
        self.fabric.route(node(from), node(to), conn)
    }

    /// Whether two connections between the same NICs may take different paths: the network
    /// hashes each flow onto one of several equal paths (`routing = "ecmp"`, or an explicit
    /// link list), so connections that differ only in their index are not copies of each other.
    pub fn routes_by_connection(&self) -> bool {
        match self.spec.network.fabric {
            super::FabricKind::NonBlocking => false,
            super::FabricKind::Links { .. } => true,
            _ => self.spec.network.routing == super::Routing::Ecmp,
        }
    }

    /// A NIC's link into the network and its link back (where an in-network reduction such as
    /// IB SHARP meets the NIC's traffic).
    pub fn nic_links(&self, node: NodeId, nic: NicId) -> (LinkId, LinkId) {
        self.fabric.nic_links(self.machine_node(node), nic)
    }

    /// Bandwidth of the GPU→NIC route, capped by the NIC's speed (NCCL's GPU→NET path bw).
    pub fn nic_path_bandwidth(&self, gpu: GpuId, nic: NicId) -> Bandwidth {
        let speed = self.spec.nic.as_ref().map_or(Bandwidth::from_bits_per_sec(0), |n| n.speed);
        self.graph_route(Vertex::Gpu(gpu), Vertex::Nic(nic)).map_or(speed, |r| r.bw.min(speed))
    }

    /// The NICs local to `gpu` (`nccl-model.md` §3.8): highest path bandwidth, then best path
    /// type.
    pub fn local_nics(&self, gpu: GpuId) -> Vec<NicId> {
        self.node_local_nics(self.node_gpu(gpu))
    }

    /// [`Cluster::local_nics`] of the node's GPU `gpu`.
    fn node_local_nics(&self, gpu: GpuId) -> Vec<NicId> {
        let n = self.spec.nic.as_ref().map_or(0, |n| n.count);
        let speed = self.spec.nic.as_ref().map_or(Bandwidth::from_bits_per_sec(0), |n| n.speed);
        let key = |nic: NicId| {
            let r = self.graph.route(Vertex::Gpu(gpu), Vertex::Nic(nic));
            let ty = r.map_or(PathType::Net, |r| r.ty);
            (std::cmp::Reverse(r.map_or(speed, |r| r.bw.min(speed))), ty)
        };
        let Some(best) = (0..n).map(|i| key(NicId(i))).min() else { return Vec::new() };
        (0..n).map(NicId).filter(|&nic| key(nic) == best).collect()
    }

    /// The NICs `gpu` uses (`nccl-model.md` §3.8): if k GPUs share m local NICs, each takes
    /// ceil(m/k) of them, in turn.
    pub fn gpu_nics(&self, gpu: GpuId) -> Vec<NicId> {
        let gpu = self.node_gpu(gpu);
        let local = self.node_local_nics(gpu);
        if local.is_empty() {
            return Vec::new();
        }
        let sharing: Vec<GpuId> = (0..self.spec.gpu.count)
            .map(GpuId)
            .filter(|&g| self.node_local_nics(g) == local)
            .collect();
        let pos = sharing.iter().position(|&g| g == gpu).unwrap_or(0);
        let share = local.len().div_ceil(sharing.len().max(1));
        (0..share).map(|k| local[(pos * share + k) % local.len()]).collect()
    }

    /// The first NIC `gpu` uses.
    pub fn local_nic(&self, gpu: GpuId) -> Option<NicId> {
        self.gpu_nics(gpu).first().copied()
    }

    /// The narrowest capacity along a path.
    pub fn path_bandwidth(&self, path: &[LinkId]) -> Bandwidth {
        path.iter()
            .map(|l| self.links[l.0 as usize].capacity)
            .min()
            .unwrap_or(Bandwidth::from_gbit_per_s(u32::MAX as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::resolve_topology;

    #[test]
    fn a_view_of_chosen_gpus_answers_for_the_nodes_gpus_behind_it() {
        // AWS p4d: GPUs 2k and 2k+1 share NIC k. A view of GPUs 3 and 6 on nodes 1 and 2 is
        // their routes, NICs and NUMA domains, on those nodes' links.
        let (_, spec) = resolve_topology("aws-p4d", None).unwrap();
        let machine = Cluster::new(&spec, 4, 8);
        let view = machine.subset_gpus(&[NodeId(1), NodeId(2)], &[3, 6]);
        assert_eq!((view.nodes(), view.gpus_per_node()), (2, 2));
        for (v, g) in [(GpuId(0), GpuId(3)), (GpuId(1), GpuId(6))] {
            assert_eq!(view.gpu_nics(v), machine.gpu_nics(g));
            assert_eq!(view.local_nics(v), machine.local_nics(g));
            assert_eq!(view.numa_of(Vertex::Gpu(v)), machine.numa_of(Vertex::Gpu(g)));
            let nic = machine.local_nic(g).unwrap();
            assert_eq!(view.gpu_to_nic(NodeId(0), v, nic), machine.gpu_to_nic(NodeId(1), g, nic));
            assert_eq!(view.nic_path_bandwidth(v, nic), machine.nic_path_bandwidth(g, nic));
        }
        let (a, b) = (Vertex::Gpu(GpuId(0)), Vertex::Gpu(GpuId(1)));
        let node_gpus = (Vertex::Gpu(GpuId(3)), Vertex::Gpu(GpuId(6)));
        assert_eq!(view.route(NodeId(1), a, b), machine.route(NodeId(2), node_gpus.0, node_gpus.1));
        // GPU 3's NIC is GPU 2's, not GPU 1's (the first GPUs' view would say NIC 0).
        assert_eq!(view.local_nic(GpuId(0)), machine.local_nic(GpuId(2)));
        assert_ne!(view.local_nic(GpuId(0)), machine.local_nic(GpuId(0)));
    }
}
