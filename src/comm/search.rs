//! Transport decisions and NCCL's ring search (`nccl-model.md` §3.3–3.4) on a node graph.
//!
//! [`Paths`] decides how data moves between two GPUs (P2P on the route, or SHM through host
//! memory when P2P is not allowed) and between a GPU and a NIC (GPUDirect RDMA on the route, or
//! staged through host memory). [`search_rings`] then packs rings at NCCL's candidate speeds,
//! each ring consuming its speed on every link of every hop, and keeps the speed giving the most
//! total bandwidth.

use super::env::NcclEnv;
use super::{HopClass, RingChannel};
use crate::hw::{Arch, Cluster, CpuVendor, GpuId, NicId, NodeId, PathType, Vertex};
use crate::net::LinkId;

/// One hop's route: links, NCCL path type, and the class that picks its protocol latency.
#[derive(Debug, Clone, PartialEq)]
pub struct Hop {
    /// Global link ids.
    pub links: Vec<LinkId>,
    /// NCCL's path type of the route taken (SYS or PHB for host-memory bounces).
    pub ty: PathType,
    /// Link class for per-step latency.
    pub class: HopClass,
}

/// How data moves inside a node under an NCCL environment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paths {
    /// Worst path type allowed for GPU–GPU P2P (below NVL: none).
    pub p2p_level: PathType,
    /// Worst path type allowed for GPUDirect RDMA.
    pub gdr_level: PathType,
    /// Whether the GPUs' driver allows PCIe P2P at all.
    pub pcie_p2p: bool,
    /// Whether the GPUs support GPUDirect RDMA.
    pub gdr: bool,
    /// Whether a GPU may send through an NVLink peer's NIC (PXN).
    pub pxn: bool,
    /// Whether point-to-point sends go out on the peer's rail through PXN
    /// (NCCL_P2P_PXN_LEVEL > 0 and PXN on).
    pub pxn_p2p: bool,
}

impl Paths {
    /// NCCL's defaults (PXB for both; SYS for P2P on AMD with at most two GPUs) and overrides.
    pub fn new(cluster: &Cluster, env: &NcclEnv) -> Paths {
        let spec = cluster.spec();
        let default_p2p = if spec.cpu.vendor == CpuVendor::Amd && cluster.gpus_per_node() <= 2 {
            PathType::Sys
        } else {
            PathType::Pxb
        };
        let p2p_level =
            if env.p2p_disable { PathType::Loc } else { env.p2p_level.unwrap_or(default_p2p) };
        Paths {
            p2p_level,
            gdr_level: env.gdr_level.unwrap_or(PathType::Pxb),
            pcie_p2p: spec.gpu.model.p2p,
            gdr: spec.gpu.model.gdr,
            pxn: !env.pxn_disable,
            pxn_p2p: !env.pxn_disable && env.p2p_pxn_level > 0,
        }
    }

    /// GPU `a` to GPU `b` of `node`.
    pub fn gpu_hop(&self, cluster: &Cluster, node: NodeId, a: GpuId, b: GpuId) -> Hop {
        let (links, ty) = cluster.route(node, Vertex::Gpu(a), Vertex::Gpu(b));
        let nvlink = ty <= PathType::Nvb;
        let p2p = ty <= self.p2p_level && (nvlink || self.pcie_p2p);
        if p2p {
            let class = if nvlink { HopClass::Nvlink } else { HopClass::Pcie };
            return Hop { links, ty, class };
        }
        let links = cluster.route_via_host(node, Vertex::Gpu(a), Vertex::Gpu(b));
        let ty = if cluster.numa_of(Vertex::Gpu(a)) == cluster.numa_of(Vertex::Gpu(b)) {
            PathType::Phb
        } else {
            PathType::Sys
        };
        Hop { links, ty, class: HopClass::Pcie }
    }

    /// Whether `gpu` reaches `nic` by GPUDirect RDMA.
    pub fn uses_gdr(&self, cluster: &Cluster, gpu: GpuId, nic: NicId) -> bool {
        let ty =
            cluster.graph_route(Vertex::Gpu(gpu), Vertex::Nic(nic)).map_or(PathType::Sys, |r| r.ty);
        self.gdr && ty <= self.gdr_level
    }

    /// The NVLink peer whose NIC path `gpu` would borrow to reach `nic` (PXN, §3.3): when
    /// `gpu`'s own path crosses the CPU and a peer reaches the NIC under a PCIe switch.
    pub fn pxn_peer(&self, cluster: &Cluster, gpu: GpuId, nic: NicId) -> Option<GpuId> {
        let ty = |g: GpuId| {
            cluster.graph_route(Vertex::Gpu(g), Vertex::Nic(nic)).map_or(PathType::Net, |r| r.ty)
        };
        if !self.pxn || ty(gpu) <= PathType::Pxb {
            return None;
        }
        (0..cluster.gpus_per_node()).map(GpuId).find(|&p| {
            p != gpu
                && self.nvlink_p2p(cluster, gpu, p)
                && ty(p) <= PathType::Pxb
                && self.uses_gdr(cluster, p, nic)
        })
    }

    /// Whether `a` and `b` talk over NVLink with P2P allowed: with NCCL_P2P_DISABLE=1 or
    /// NCCL_P2P_LEVEL=LOC, NCCL reroutes GPU pairs through the CPU (`paths.cc`), and no GPU
    /// relays another's network traffic.
    fn nvlink_p2p(&self, cluster: &Cluster, a: GpuId, b: GpuId) -> bool {
        cluster
            .graph_route(Vertex::Gpu(a), Vertex::Gpu(b))
            .is_some_and(|r| r.ty <= PathType::Nvl && r.ty <= self.p2p_level)
    }

    /// Where a point-to-point send from `gpu` to a peer of local index `peer` on another node
    /// leaves the node: the NIC, and the NVLink peer whose proxy posts it where that is not
    /// `gpu` itself. NCCL_P2P_PXN_LEVEL 2, NCCL's default (NVIDIA/nccl v2.21.5-1
    /// `src/graph/search.cc`, ncclTopoGetNetDev), sends on the NIC the peer's index uses — the
    /// peer's rail, where its own NIC receives — through the GPU local to that NIC when that GPU
    /// is `gpu` or reaches it over NVLink and sits under a PCIe switch with the NIC (and, as
    /// collsim's other PXN paths, has GPUDirect to it); so a send crosses no other rail.
    /// Otherwise, and with PXN off (NCCL_PXN_DISABLE=1 or NCCL_P2P_PXN_LEVEL=0), `gpu`'s own NIC
    /// (NCCL_CROSS_NIC=0, which sends on the peer's rail without PXN, is not modelled).
    /// Level 1 (PXN only where needed) is taken as 2: both send on the peer's rail, and differ
    /// only in whose PCIe path carries the bytes where the sender itself sits under a PCIe
    /// switch with that NIC.
    pub fn p2p_send_nic(
        &self,
        cluster: &Cluster,
        gpu: GpuId,
        peer: GpuId,
    ) -> (NicId, Option<GpuId>) {
        let own = cluster.local_nic(gpu).unwrap_or(NicId(0));
        let Some(rail) = cluster.local_nic(peer) else { return (own, None) };
        if !self.pxn_p2p {
            return (own, None);
        }
        let ty = |g: GpuId| {
            cluster.graph_route(Vertex::Gpu(g), Vertex::Nic(rail)).map_or(PathType::Net, |r| r.ty)
        };
        // The NIC's local GPU (ncclTopoGetLocalGpu): among the GPUs closest to it (the most
        // bandwidth, then the shortest path type), the one that takes it as its own NIC; none,
        // no PXN.
        // The job's GPUs only: NCCL's topology holds no others.
        let key = |g: GpuId| (std::cmp::Reverse(cluster.nic_path_bandwidth(g, rail)), ty(g));
        let gpus = (0..cluster.gpus_per_node()).map(GpuId);
        let best = gpus.clone().map(key).min();
        let local =
            gpus.filter(|&g| Some(key(g)) == best).find(|&g| cluster.local_nic(g) == Some(rail));
        let Some(local) = local else { return (own, None) };
        let nvlink = local == gpu || self.nvlink_p2p(cluster, gpu, local);
        if nvlink && ty(local) <= PathType::Pxb && self.uses_gdr(cluster, local, rail) {
            (rail, (local != gpu).then_some(local))
        } else {
            (own, None)
        }
    }

    /// The links of a point-to-point send from `gpu` leaving `node` by `nic`, through the
    /// NVLink peer `via` when [`Paths::p2p_send_nic`] names one.
    pub fn p2p_to_nic(
        &self,
        cluster: &Cluster,
        node: NodeId,
        gpu: GpuId,
        (nic, via): (NicId, Option<GpuId>),
    ) -> Vec<LinkId> {
        match via {
            Some(peer) => relay(cluster, node, gpu, peer, nic),
            None => self.to_nic(cluster, node, gpu, nic),
        }
    }

    /// GPU to NIC (sending): GPUDirect, through an NVLink peer (PXN), or staged through the
    /// GPU's host memory.
    pub fn to_nic(&self, cluster: &Cluster, node: NodeId, gpu: GpuId, nic: NicId) -> Vec<LinkId> {
        if let Some(peer) = self.pxn_peer(cluster, gpu, nic) {
            return relay(cluster, node, gpu, peer, nic);
        }
        if self.uses_gdr(cluster, gpu, nic) {
            cluster.gpu_to_nic(node, gpu, nic)
        } else {
            cluster.route_via_host(node, Vertex::Gpu(gpu), Vertex::Nic(nic))
        }
    }

    /// NIC to GPU (receiving), GPUDirect or staged through the GPU's host memory.
    pub fn from_nic(&self, cluster: &Cluster, node: NodeId, nic: NicId, gpu: GpuId) -> Vec<LinkId> {
        if self.uses_gdr(cluster, gpu, nic) {
            cluster.nic_to_gpu(node, nic, gpu)
        } else {
            let numa = Vertex::Numa(cluster.numa_of(Vertex::Gpu(gpu)));
            let mut p = cluster.route(node, Vertex::Nic(nic), numa).0;
            p.extend(cluster.route(node, numa, Vertex::Gpu(gpu)).0);
            p
        }
    }
}

/// `gpu` to `nic` through the NVLink peer `peer` (PXN): over NVLink to it, then its PCIe path.
fn relay(cluster: &Cluster, node: NodeId, gpu: GpuId, peer: GpuId, nic: NicId) -> Vec<LinkId> {
    let mut p = cluster.gpu_to_gpu(node, gpu, peer);
    p.extend(cluster.gpu_to_nic(node, peer, nic));
    p
}

/// What the ring search found.
#[derive(Debug, Clone)]
pub struct RingSearch {
    /// Search channels.
    pub channels: Vec<RingChannel>,
    /// Per-channel speed, GB/s.
    pub speed: f64,
    /// Worst path type of the intra-node hops.
    pub type_intra: PathType,
    /// Worst path type between a GPU and its NIC (LOC on one node).
    pub type_inter: PathType,
}

/// Candidate per-channel speeds the search tries (GB/s), from `search.cc`.
pub fn speeds(arch: Arch, inter: bool) -> &'static [f64] {
    match (arch >= Arch::Hopper, arch >= Arch::Blackwell, inter) {
        (_, true, false) => {
            &[90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0]
        }
        (_, true, true) => &[
            96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
            6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
        ],
        (true, _, false) => &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0],
        (true, _, true) => &[
            48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ],
        (false, _, false) => {
            &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0]
        }
        (false, _, true) => &[
            48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
            2.4, 1.2, 0.24, 0.12,
        ],
    }
}

/// Most search channels NCCL builds (MAXCHANNELS / 2).
const MAX_SEARCH_CHANNELS: usize = 32;

/// The node the search packs rings on (every node is a copy of it).
const NODE: NodeId = NodeId(0);

struct Packer<'a> {
    cluster: &'a Cluster,
    paths: Paths,
    ppn: usize,
    multi: bool,
    /// Remaining capacity per global link, GB/s.
    rem: Vec<f64>,
    speed: f64,
}

impl Packer<'_> {
    fn fits(&self, links: &[LinkId], times: f64) -> bool {
        links.iter().all(|l| self.rem[l.0 as usize] + 1e-9 >= self.speed * times)
    }

    fn take(&mut self, links: &[LinkId], sign: f64) {
        for l in links {
            self.rem[l.0 as usize] -= sign * self.speed;
        }
    }

    /// Node 0's hop from GPU `a` to `b`.
    fn hop(&self, a: GpuId, b: GpuId) -> Vec<LinkId> {
        self.paths.gpu_hop(self.cluster, NODE, a, b).links
    }

    /// Extends `order` to a full ring by depth-first search, consuming as it goes (`used` is
    /// indexed by GPU). Found: the NIC the ring leaves by, none when it closes on its node.
    fn dfs(
        &mut self,
        order: &mut Vec<GpuId>,
        used: &mut [bool],
        nic_in: Option<NicId>,
    ) -> Option<Option<NicId>> {
        let last = *order.last()?;
        if order.len() == self.ppn {
            return match nic_in {
                None => {
                    let close = self.hop(last, order[0]);
                    if self.ppn == 1 || self.fits(&close, 1.0) {
                        self.take(&close, 1.0);
                        Some(None)
                    } else {
                        None
                    }
                }
                Some(nin) => {
                    let own = self.cluster.gpu_nics(last);
                    let mut outs: Vec<NicId> = Vec::new();
                    if own.contains(&nin) {
                        outs.push(nin);
                    }
                    for n in own.into_iter().chain(self.cluster.local_nics(last)) {
                        if !outs.contains(&n) {
                            outs.push(n);
                        }
                    }
                    for nout in outs {
                        let mut p = self.paths.to_nic(self.cluster, NODE, last, nout);
                        let end = (NODE, nout);
                        p.extend(self.cluster.nic_to_nic(end, end, 0)[..1].iter().copied());
                        if self.fits(&p, 1.0) {
                            self.take(&p, 1.0);
                            return Some(Some(nout));
                        }
                    }
                    None
                }
            };
        }
        for k in 1..=self.ppn {
            let next = GpuId((last.0 + k) % self.ppn);
            if used[next.0] {
                continue;
            }
            let h = self.hop(last, next);
            if !self.fits(&h, 1.0) {
                continue;
            }
            self.take(&h, 1.0);
            used[next.0] = true;
            order.push(next);
            if let Some(out) = self.dfs(order, used, nic_in) {
                return Some(out);
            }
            order.pop();
            used[next.0] = false;
            self.take(&h, -1.0);
        }
        None
    }

    /// One more ring entering by `nic_in` (multi-node) or over the node's GPUs, if it fits.
    fn ring(&mut self, nic_in: Option<NicId>) -> Option<RingChannel> {
        let firsts: Vec<GpuId> = match nic_in {
            None => vec![GpuId(0)],
            Some(n) => (0..self.ppn)
                .map(GpuId)
                .filter(|&g| self.cluster.gpu_nics(g).contains(&n))
                .collect(),
        };
        for first in firsts {
            let mut entry = Vec::new();
            if let Some(n) = nic_in {
                entry = self.cluster.nic_to_nic((NODE, n), (NODE, n), 0)[1..].to_vec();
                entry.extend(self.paths.from_nic(self.cluster, NODE, n, first));
                if !self.fits(&entry, 1.0) {
                    continue;
                }
                self.take(&entry, 1.0);
            }
            let mut order = vec![first];
            let mut used = vec![false; self.ppn];
            used[first.0] = true;
            if let Some(out) = self.dfs(&mut order, &mut used, nic_in) {
                return Some(RingChannel {
                    gpus: order,
                    nic_in,
                    nic_out: if self.multi { out } else { None },
                });
            }
            self.take(&entry, -1.0);
        }
        None
    }
}

/// NCCL's ring search over node 0 of `cluster` (all nodes are alike).
pub fn search_rings(cluster: &Cluster, paths: Paths, arch: Arch) -> RingSearch {
    let ppn = cluster.gpus_per_node();
    let multi = cluster.nodes() > 1;
    let spec = cluster.spec();
    // The NICs the used GPUs would use, in order.
    let mut nics: Vec<NicId> = (0..ppn).flat_map(|g| cluster.gpu_nics(GpuId(g))).collect();
    nics.sort_unstable();
    nics.dedup();

    // A GPU's total NVLink bandwidth: the distinct first links of its NVLink routes.
    let nvl_total = |g: GpuId| -> f64 {
        (0..ppn)
            .map(GpuId)
            .filter(|&h| h != g)
            .map(|h| cluster.route(NODE, Vertex::Gpu(g), Vertex::Gpu(h)))
            .filter(|(p, ty)| *ty <= PathType::Nvl && !p.is_empty())
            .map(|(p, _)| p[0])
            .collect::<std::collections::BTreeSet<_>>()
            .iter()
            .map(|l| cluster.links()[l.0 as usize].capacity.gbyte_per_s())
            .sum::<f64>()
    };
    let gpu_pcie = |g: GpuId| {
        cluster
            .route(NODE, Vertex::Gpu(g), Vertex::Numa(cluster.numa_of(Vertex::Gpu(g))))
            .0
            .first()
            .map_or(0.0, |l| cluster.links()[l.0 as usize].capacity.gbyte_per_s())
    };
    let (max_bw, total_bw) = if multi {
        let path = |g: GpuId| {
            cluster
                .local_nics(g)
                .iter()
                .map(|&n| cluster.nic_path_bandwidth(g, n).gbyte_per_s())
                .fold(0.0, f64::max)
        };
        let max_bw = (0..ppn).map(|g| path(GpuId(g))).fold(0.0, f64::max);
        let total = if ppn > 1 && spec.nvlink.is_some() {
            nvl_total(GpuId(0))
        } else {
            nics.iter()
                .map(|&n| cluster.nic_path_bandwidth(GpuId(0), n).gbyte_per_s())
                .sum::<f64>()
                .max(max_bw)
        };
        (max_bw, total)
    } else {
        let max_bw = (0..ppn)
            .flat_map(|a| (0..ppn).filter(move |&b| b != a).map(move |b| (GpuId(a), GpuId(b))))
            .map(|(a, b)| {
                let hop = paths.gpu_hop(cluster, NODE, a, b);
                cluster.path_bandwidth(&hop.links).gbyte_per_s()
            })
            .fold(0.0, f64::max);
        let g0 = GpuId(0);
        let total =
            if spec.nvlink.is_some() && nvl_total(g0) > 0.0 { nvl_total(g0) } else { gpu_pcie(g0) };
        (if ppn == 1 { total } else { max_bw }, total)
    };

    let caps: Vec<f64> = cluster.links().iter().map(|l| l.capacity.gbyte_per_s()).collect();
    let mut best: Option<(Vec<RingChannel>, f64)> = None;
    for &s in speeds(arch, multi).iter().filter(|&&s| s <= max_bw + 1e-9) {
        if let Some((_, bs)) = &best
            && s <= 0.49 * bs
        {
            break;
        }
        let mut packer = Packer { cluster, paths, ppn, multi, rem: caps.clone(), speed: s };
        let mut found = Vec::new();
        while found.len() < MAX_SEARCH_CHANNELS {
            let nic_in = if multi {
                if nics.is_empty() {
                    break;
                }
                Some(nics[found.len() % nics.len()])
            } else {
                None
            };
            match packer.ring(nic_in) {
                Some(r) => found.push(r),
                None => break,
            }
        }
        if found.is_empty() {
            continue;
        }
        let total = found.len() as f64 * s;
        if best.as_ref().is_none_or(|(b, bs)| total > b.len() as f64 * bs + 1e-9) {
            best = Some((found, s));
        }
        if total >= total_bw - 1e-9 {
            break;
        }
    }
    let (channels, speed) = best.unwrap_or_else(|| {
        // NCCL's fallback: one channel in PCI order at 0.1 GB/s.
        let nic = nics.first().copied();
        let ring = RingChannel {
            gpus: (0..ppn).map(GpuId).collect(),
            nic_in: if multi { nic } else { None },
            nic_out: if multi { nic } else { None },
        };
        (vec![ring], 0.1)
    });
    let type_intra = channels
        .iter()
        .flat_map(|c| c.gpus.windows(2).map(|w| paths.gpu_hop(cluster, NODE, w[0], w[1]).ty))
        .chain(
            channels
                .iter()
                .filter(|c| !multi && c.gpus.len() > 1)
                .map(|c| paths.gpu_hop(cluster, NODE, c.gpus[c.gpus.len() - 1], c.gpus[0]).ty),
        )
        .max()
        .unwrap_or(PathType::Loc);
    let type_inter = if multi {
        channels
            .iter()
            .flat_map(|c| {
                let first = c.gpus[0];
                let last = c.gpus[c.gpus.len() - 1];
                [(first, c.nic_in), (last, c.nic_out)]
            })
            .filter_map(|(g, n)| n.map(|n| (g, n)))
            .map(|(g, n)| {
                let ty = cluster
                    .graph_route(Vertex::Gpu(g), Vertex::Nic(n))
                    .map_or(PathType::Sys, |r| r.ty);
                if paths.uses_gdr(cluster, g, n) { ty } else { ty.max(PathType::Phb) }
            })
            .max()
            .unwrap_or(PathType::Loc)
    } else {
        PathType::Loc
    };
    RingSearch { channels, speed, type_intra, type_inter }
}
