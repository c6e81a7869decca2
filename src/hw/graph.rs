//! One node as a graph of devices and directed links, and the routes between its devices with
//! NCCL's path types (`nccl-model.md` §3.1).
//!
//! A route is chosen as NCCL's path search chooses it: best path type first, then highest
//! bottleneck bandwidth, then fewest hops. Routes never pass through a NIC, and pass through a
//! GPU only between two NVLinks (NVB). The path type is the worst step along the way: NVLink →
//! NVL (NVB through a GPU), PCIe through at most one switch → PIX, through several → PXB,
//! touching a CPU → PHB, across the inter-socket link → SYS.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{GpuId, NicId, NodeSpec, Parent, pcie_bandwidth};
use crate::net::Link;
use crate::units::{Bandwidth, Time};

/// A device of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vertex {
    /// A GPU of the node.
    Gpu(GpuId),
    /// A NIC of the node.
    Nic(NicId),
    /// A PCIe switch, by index.
    Switch(usize),
    /// A NUMA domain (CPU root complex and host memory), by index.
    Numa(usize),
    /// The NVSwitch fabric, aggregated.
    NvSwitch,
}

/// NCCL's path types, best first (`graph.h`, pre-2.27 numbering without C2C/P2C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathType {
    /// Same device.
    Loc,
    /// NVLink (directly or through the NVSwitch).
    Nvl,
    /// NVLink through one intermediate GPU.
    Nvb,
    /// PCIe through at most one switch.
    Pix,
    /// PCIe through several switches, no host bridge.
    Pxb,
    /// NVLink to a peer GPU, then PCIe to its NIC.
    Pxn,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Across the link between NUMA domains.
    Sys,
    /// Across the network.
    Net,
}

impl PathType {
    /// The name NCCL prints.
    pub fn name(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
            PathType::Net => "NET",
        }
    }

    /// Parses NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL values: a name, or the old integer levels
    /// (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS, 5 SYS).
    pub fn parse_level(s: &str) -> Option<PathType> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "LOC" | "0" => PathType::Loc,
            "NVL" => PathType::Nvl,
            "NVB" => PathType::Nvb,
            "PIX" | "1" => PathType::Pix,
            "PXB" | "2" => PathType::Pxb,
            "PXN" => PathType::Pxn,
            "PHB" | "3" => PathType::Phb,
            "SYS" | "4" | "5" => PathType::Sys,
            _ => return None,
        })
    }
}

/// A route inside a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Local link indices, in order.
    pub links: Vec<u32>,
    /// NCCL's path type.
    pub ty: PathType,
    /// Bottleneck capacity.
    pub bw: Bandwidth,
}

/// One node's devices, links and routes.
#[derive(Debug, Clone)]
pub struct NodeGraph {
    vertices: Vec<Vertex>,
    links: Vec<Link>,
    ends: Vec<(usize, usize)>,
    out: Vec<Vec<usize>>,
    /// `routes[src][dst]`, for every pair of vertices.
    routes: Vec<Vec<Option<Route>>>,
    gpus: usize,
    nics: usize,
    switches: usize,
}

impl NodeGraph {
    /// Expands a node template.
    pub fn new(spec: &NodeSpec) -> NodeGraph {
        let gpus = spec.gpu.count;
        let nics = spec.nic.as_ref().map_or(0, |n| n.count);
        let switches = spec.pcie.switches.len();
        let numas = spec.cpu.numa_domains();
        let mut vertices: Vec<Vertex> = (0..gpus).map(|g| Vertex::Gpu(GpuId(g))).collect();
        vertices.extend((0..nics).map(|n| Vertex::Nic(NicId(n))));
        vertices.extend((0..switches).map(Vertex::Switch));
        vertices.extend((0..numas).map(Vertex::Numa));
        if spec.nvswitch.is_some() {
            vertices.push(Vertex::NvSwitch);
        }
        let mut g = NodeGraph {
            out: vec![Vec::new(); vertices.len()],
            vertices,
            links: Vec::new(),
            ends: Vec::new(),
            routes: Vec::new(),
            gpus,
            nics,
            switches,
        };
        let pcie = spec.pcie.bandwidth();
        let lat = spec.pcie.latency;
        let parent = |p: Parent| match p {
            Parent::Numa(n) => Vertex::Numa(n),
            Parent::Switch(s) => Vertex::Switch(s),
        };
        let model = &spec.gpu.model;
        let gpu_pcie = pcie_bandwidth(model.pcie_generation, model.pcie_lanes).min(pcie);
        for (i, &p) in spec.gpu_parent.iter().enumerate() {
            g.connect(Vertex::Gpu(GpuId(i)), parent(p), gpu_pcie, lat, "pcie");
        }
        for (i, &p) in spec.nic_parent.iter().enumerate() {
            g.connect(Vertex::Nic(NicId(i)), parent(p), pcie, lat, "pcie");
        }
        for (i, sw) in spec.pcie.switches.iter().enumerate() {
            g.connect(Vertex::Switch(i), parent(sw.parent), pcie, lat, "pcie");
        }
        for a in 0..numas {
            for b in a + 1..numas {
                g.connect(
                    Vertex::Numa(a),
                    Vertex::Numa(b),
                    spec.cpu.inter_socket,
                    Time::from_ns(100),
                    "sys",
                );
            }
        }
        if let Some(nv) = &spec.nvlink {
            let per = nv.bandwidth_per_link.gbyte_per_s();
            let bw = |links: u32| Bandwidth::from_gbyte_per_s_f64(per * links as f64);
            if spec.nvswitch.is_some() {
                let half = Time::from_ps(nv.latency.as_ps() / 2);
                for i in 0..gpus {
                    g.connect(
                        Vertex::Gpu(GpuId(i)),
                        Vertex::NvSwitch,
                        bw(nv.links_per_gpu),
                        half,
                        "nvlink",
                    );
                }
            } else {
                for &(a, b, links) in &nv.pairs {
                    g.connect(Vertex::Gpu(a), Vertex::Gpu(b), bw(links), nv.latency, "nvlink");
                }
            }
        }
        g.routes = (0..g.vertices.len()).map(|s| g.routes_from(s)).collect();
        g
    }

    fn index(&self, v: Vertex) -> usize {
        let (g, n, s) = (self.gpus, self.nics, self.switches);
        match v {
            Vertex::Gpu(i) => i.0,
            Vertex::Nic(i) => g + i.0,
            Vertex::Switch(i) => g + n + i,
            Vertex::Numa(i) => g + n + s + i,
            Vertex::NvSwitch => self.vertices.len() - 1,
        }
    }

    /// Adds a pair of directed links between `a` and `b`.
    fn connect(&mut self, a: Vertex, b: Vertex, cap: Bandwidth, lat: Time, class: &'static str) {
        let (ia, ib) = (self.index(a), self.index(b));
        for (x, y) in [(ia, ib), (ib, ia)] {
            self.out[x].push(self.links.len());
            self.links.push(Link { capacity: cap, latency: lat, class });
            self.ends.push((x, y));
        }
    }

    /// Local link `l`'s ends as reports name them: "GPU0->PCIe switch 1".
    pub fn link_name(&self, l: usize) -> String {
        let name = |v: Vertex| match v {
            Vertex::Gpu(i) => format!("GPU{}", i.0),
            Vertex::Nic(i) => format!("NIC{}", i.0),
            Vertex::Switch(i) => format!("PCIe switch {i}"),
            Vertex::Numa(i) => format!("CPU{i}"),
            Vertex::NvSwitch => "NVSwitch".into(),
        };
        match self.ends.get(l) {
            Some(&(a, b)) => format!("{}->{}", name(self.vertices[a]), name(self.vertices[b])),
            None => format!("link {l}"),
        }
    }

    /// The node's directed links, indexed by local id.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The route between two devices, if any.
    pub fn route(&self, from: Vertex, to: Vertex) -> Option<&Route> {
        self.routes[self.index(from)][self.index(to)].as_ref()
    }

    /// NCCL's path search from one source (a label-setting search; the cost is monotone).
    fn routes_from(&self, src: usize) -> Vec<Option<Route>> {
        #[derive(Clone, Copy)]
        struct Label {
            ty: PathType,
            bw: u64,
            hops: u32,
            switches: u32,
            nvl_only: bool,
            via: usize,
            link: usize,
        }
        let n = self.vertices.len();
        let mut best: Vec<Option<Label>> = vec![None; n];
        let mut heap = BinaryHeap::new();
        let start = Label {
            ty: PathType::Loc,
            bw: u64::MAX,
            hops: 0,
            switches: 0,
            nvl_only: true,
            via: usize::MAX,
            link: usize::MAX,
        };
        let key = |l: &Label| (l.ty, Reverse(l.bw), l.hops);
        let mut labels = vec![start];
        heap.push(Reverse((key(&start), 0usize, src)));
        let mut settled = vec![false; n];
        let mut done_label: Vec<Option<usize>> = vec![None; n];
        while let Some(Reverse((_, li, u))) = heap.pop() {
            if settled[u] {
                continue;
            }
            settled[u] = true;
            done_label[u] = Some(li);
            let l = labels[li];
            best[u] = Some(l);
            let through = u != src;
            let vu = self.vertices[u];
            if through && matches!(vu, Vertex::Nic(_)) {
                continue;
            }
            for &e in &self.out[u] {
                let (_, v) = self.ends[e];
                if settled[v] {
                    continue;
                }
                let link = &self.links[e];
                let nvlink = link.class == "nvlink";
                let mut ty = l.ty;
                let mut switches = l.switches;
                if through {
                    match vu {
                        Vertex::Gpu(_) => {
                            if !(l.nvl_only && nvlink) {
                                continue;
                            }
                            ty = ty.max(PathType::Nvb);
                        }
                        Vertex::Switch(_) => switches += 1,
                        Vertex::Numa(_) => ty = ty.max(PathType::Phb),
                        _ => {}
                    }
                }
                let vv = self.vertices[v];
                ty = ty.max(match link.class {
                    "nvlink" => PathType::Nvl,
                    "sys" => PathType::Sys,
                    _ if matches!(vu, Vertex::Numa(_)) || matches!(vv, Vertex::Numa(_)) => {
                        PathType::Phb
                    }
                    _ if switches >= 2 => PathType::Pxb,
                    _ => PathType::Pix,
                });
                let nl = Label {
                    ty,
                    bw: l.bw.min(link.capacity.bits_per_sec()),
                    hops: l.hops + 1,
                    switches,
                    nvl_only: l.nvl_only && nvlink,
                    via: li,
                    link: e,
                };
                labels.push(nl);
                heap.push(Reverse((key(&nl), labels.len() - 1, v)));
            }
        }
        (0..n)
            .map(|v| {
                let mut li = done_label[v]?;
                let l = labels[li];
                let mut path = Vec::new();
                while labels[li].link != usize::MAX {
                    path.push(labels[li].link as u32);
                    li = labels[li].via;
                }
                path.reverse();
                let bw = if l.bw == u64::MAX {
                    Bandwidth::from_gbit_per_s(u32::MAX as u64)
                } else {
                    Bandwidth::from_bits_per_sec(l.bw)
                };
                Some(Route { links: path, ty: l.ty, bw })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::resolve_topology;

    fn graph(preset: &str) -> NodeGraph {
        NodeGraph::new(&resolve_topology(preset, None).unwrap().1)
    }

    #[test]
    fn dgx_h100_path_types() {
        let g = graph("dgx-h100");
        let (gpu, nic) = (|i| Vertex::Gpu(GpuId(i)), |i| Vertex::Nic(NicId(i)));
        let r = g.route(gpu(0), gpu(5)).unwrap();
        assert_eq!((r.ty, r.links.len()), (PathType::Nvl, 2));
        assert!((r.bw.gbyte_per_s() - 18.0 * 20.6).abs() < 1e-6);
        // Each GPU shares a PCIe switch with its NIC; the others of its socket are NODE to
        // nvidia-smi, PHB to NCCL; the other socket's are SYS.
        assert_eq!(g.route(gpu(0), nic(0)).unwrap().ty, PathType::Pix);
        assert_eq!(g.route(gpu(0), nic(1)).unwrap().ty, PathType::Phb);
        assert_eq!(g.route(gpu(0), nic(7)).unwrap().ty, PathType::Sys);
    }

    #[test]
    fn routes_never_cross_a_nic_and_cross_gpus_only_between_nvlinks() {
        let g = graph("polaris-a100-4gpu");
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    let r = g.route(Vertex::Gpu(GpuId(a)), Vertex::Gpu(GpuId(b))).unwrap();
                    assert_eq!((r.ty, r.links.len()), (PathType::Nvl, 1), "{a}->{b}");
                }
            }
        }
    }
}
