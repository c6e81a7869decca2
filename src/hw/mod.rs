//! Hardware: the typed description of a node ([`NodeSpec`]) and its expansion, times the node
//! count, into a graph of directed links ([`Cluster`]) with the routes between GPUs and NICs.
//!
//! NVSwitch is one aggregated device, as in NCCL's topology (each GPU has one up-link and one
//! down-link whose capacity is its NVLink count × the per-link bandwidth). PCIe switches pair GPUs
//! with NICs; switches hang off CPU sockets. Each NIC has its own link into and out of a
//! non-blocking switch layer, so inter-node traffic crosses NIC links and can contend there.

use crate::net::{Link, LinkId};
use crate::units::{Bandwidth, Time};

/// GPU architecture, as NCCL indexes its tuning tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// sm70.
    Volta,
    /// sm80/sm86.
    Ampere,
    /// sm90.
    Hopper,
    /// sm100.
    Blackwell,
}

impl Arch {
    /// Parses "ampere", "hopper", …
    pub fn parse(s: &str) -> Option<Arch> {
        match s.to_ascii_lowercase().as_str() {
            "volta" => Some(Arch::Volta),
            "ampere" => Some(Arch::Ampere),
            "hopper" => Some(Arch::Hopper),
            "blackwell" => Some(Arch::Blackwell),
            _ => None,
        }
    }
}

/// CPU vendor (NCCL picks its multi-node LL cap and network overhead by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuVendor {
    /// Intel x86.
    Intel,
    /// AMD x86.
    Amd,
    /// Anything else (Arm, POWER).
    Other,
}

/// The GPUs of a node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuSpec {
    /// Marketing model name.
    pub model: String,
    /// Architecture.
    pub arch: Arch,
    /// GPUs per node.
    pub count: usize,
}

/// NVLink of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NvlinkSpec {
    /// NVLink generation (3 for A100, 4 for H100).
    pub generation: u32,
    /// Links per GPU.
    pub links_per_gpu: u32,
    /// Effective bandwidth of one link, one direction.
    #[serde(serialize_with = "ser_display")]
    pub bandwidth_per_link: Bandwidth,
    /// Latency of a GPU → NVSwitch → GPU hop, split evenly on the two links.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

/// NVSwitches of a node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NvswitchSpec {
    /// Number of switch chips.
    pub count: u32,
    /// Generation (3 = NVLink4 switch with NVLink SHARP).
    pub generation: u32,
    /// Whether the switch supports NVLS multicast/reduction.
    pub nvls: bool,
}

/// The PCIe tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PcieSpec {
    /// PCIe generation (3, 4, 5, 6).
    pub generation: u32,
    /// Lanes of each device link.
    pub lanes: u32,
    /// PCIe switches; GPUs and NICs are spread over them in index order.
    pub switches: usize,
    /// Latency of one PCIe link.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

impl PcieSpec {
    /// NCCL's effective bandwidth of one link: lanes × per-lane rate / 80 (Gen4 x16 = 24 GB/s).
    pub fn bandwidth(&self) -> Bandwidth {
        let per_lane_100mbps = match self.generation {
            1 => 15,
            2 => 30,
            3 => 60,
            4 => 120,
            5 => 240,
            _ => 480,
        };
        // lanes × rate(100 Mb/s units) / 80 = GB/s → × 8e9 bit/s.
        Bandwidth::from_gbyte_per_s_f64(self.lanes as f64 * per_lane_100mbps as f64 / 80.0)
    }
}

/// CPU sockets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuSpec {
    /// Sockets (NUMA domains).
    pub sockets: usize,
    /// Vendor.
    pub vendor: CpuVendor,
    /// Bandwidth of the inter-socket link, one direction.
    #[serde(serialize_with = "ser_display")]
    pub inter_socket: Bandwidth,
}

/// The node's compute NICs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NicSpec {
    /// NICs per node.
    pub count: usize,
    /// Line rate of one NIC, one direction.
    #[serde(serialize_with = "ser_display")]
    pub speed: Bandwidth,
    /// Fabric kind, free text ("infiniband-ndr").
    pub kind: String,
    /// NIC latency (added on the way out and on the way in).
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

/// The inter-node network.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NetworkSpec {
    /// Only "non_blocking" so far.
    pub kind: String,
    /// Switch traversal latency, NIC to NIC.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

/// A node template and its network, validated.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeSpec {
    /// Preset or file name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// GPUs.
    pub gpu: GpuSpec,
    /// NVLink, if the GPUs have it.
    pub nvlink: Option<NvlinkSpec>,
    /// NVSwitches, if any.
    pub nvswitch: Option<NvswitchSpec>,
    /// PCIe.
    pub pcie: PcieSpec,
    /// CPUs.
    pub cpu: CpuSpec,
    /// Compute NICs.
    pub nic: Option<NicSpec>,
    /// Inter-node network.
    pub network: NetworkSpec,
}

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl NodeSpec {
    /// Per-GPU NVLink bandwidth (links × per-link), if any.
    pub fn nvlink_bandwidth(&self) -> Option<Bandwidth> {
        self.nvlink.as_ref().map(|n| {
            Bandwidth::from_gbyte_per_s_f64(
                n.bandwidth_per_link.gbyte_per_s() * n.links_per_gpu as f64,
            )
        })
    }

    /// The PCIe switch a GPU hangs off.
    pub fn gpu_switch(&self, gpu: usize) -> usize {
        gpu * self.pcie.switches / self.gpu.count
    }

    /// The PCIe switch a NIC hangs off.
    pub fn nic_switch(&self, nic: usize) -> usize {
        let n = self.nic.as_ref().map_or(1, |n| n.count);
        nic * self.pcie.switches / n
    }

    /// The socket a PCIe switch hangs off.
    pub fn switch_socket(&self, sw: usize) -> usize {
        sw * self.cpu.sockets / self.pcie.switches
    }

    /// The NIC NCCL would pick for `gpu`: among the NICs on the GPU's PCIe switch (the closest,
    /// hence fastest path), the one at the same rank within the switch, wrapping around.
    pub fn local_nic(&self, gpu: usize) -> Option<usize> {
        let nic = self.nic.as_ref()?;
        let sw = self.gpu_switch(gpu);
        let local: Vec<usize> = (0..nic.count).filter(|&n| self.nic_switch(n) == sw).collect();
        if local.is_empty() {
            // No NIC on the switch: the first NIC on the same socket, else NIC 0 (through SYS).
            let sock = self.switch_socket(sw);
            return (0..nic.count)
                .find(|&n| self.switch_socket(self.nic_switch(n)) == sock)
                .or(Some(0));
        }
        let gpus_here: Vec<usize> =
            (0..self.gpu.count).filter(|&g| self.gpu_switch(g) == sw).collect();
        let pos = gpus_here.iter().position(|&g| g == gpu).unwrap_or(0);
        Some(local[pos % local.len()])
    }
}

/// Link ids of one node.
#[derive(Debug, Clone, Default)]
struct NodeLinks {
    nvl_up: Vec<LinkId>,
    nvl_down: Vec<LinkId>,
    gpu_pcie_up: Vec<LinkId>,
    gpu_pcie_down: Vec<LinkId>,
    nic_pcie_up: Vec<LinkId>,
    nic_pcie_down: Vec<LinkId>,
    sw_up: Vec<LinkId>,
    sw_down: Vec<LinkId>,
    nic_tx: Vec<LinkId>,
    nic_rx: Vec<LinkId>,
    /// socket a → socket b, indexed a * sockets + b.
    sys: Vec<Option<LinkId>>,
}

/// `nodes` copies of a node, expanded into directed links, with routes.
#[derive(Debug, Clone)]
pub struct Cluster {
    spec: NodeSpec,
    nodes: usize,
    gpus_per_node: usize,
    links: Vec<Link>,
    node_links: Vec<NodeLinks>,
}

impl Cluster {
    /// Expands `nodes` nodes of `spec`, of which the first `gpus_per_node` GPUs are used.
    pub fn new(spec: &NodeSpec, nodes: usize, gpus_per_node: usize) -> Cluster {
        let mut links = Vec::new();
        let push =
            |links: &mut Vec<Link>, capacity: Bandwidth, latency: Time, class: &'static str| {
                links.push(Link { capacity, latency, class });
                LinkId(links.len() as u32 - 1)
            };
        let pcie_bw = spec.pcie.bandwidth();
        let pcie_lat = spec.pcie.latency;
        let mut node_links = Vec::with_capacity(nodes);
        for _ in 0..nodes {
            let mut nl = NodeLinks::default();
            if let (Some(nv), Some(bw)) = (&spec.nvlink, spec.nvlink_bandwidth()) {
                let half = Time::from_ps(nv.latency.as_ps() / 2);
                for _ in 0..spec.gpu.count {
                    nl.nvl_up.push(push(&mut links, bw, half, "nvlink"));
                    nl.nvl_down.push(push(&mut links, bw, nv.latency - half, "nvlink"));
                }
            }
            for _ in 0..spec.gpu.count {
                nl.gpu_pcie_up.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
                nl.gpu_pcie_down.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
            }
            for _ in 0..spec.pcie.switches {
                nl.sw_up.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
                nl.sw_down.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
            }
            let s = spec.cpu.sockets;
            nl.sys = vec![None; s * s];
            for a in 0..s {
                for b in 0..s {
                    if a != b {
                        nl.sys[a * s + b] = Some(push(
                            &mut links,
                            spec.cpu.inter_socket,
                            Time::from_ns(100),
                            "sys",
                        ));
                    }
                }
            }
            if let Some(nic) = &spec.nic {
                let half = Time::from_ps(spec.network.latency.as_ps() / 2);
                for _ in 0..nic.count {
                    nl.nic_pcie_up.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
                    nl.nic_pcie_down.push(push(&mut links, pcie_bw, pcie_lat, "pcie"));
                    nl.nic_tx.push(push(&mut links, nic.speed, nic.latency + half, "net"));
                    nl.nic_rx.push(push(
                        &mut links,
                        nic.speed,
                        nic.latency + (spec.network.latency - half),
                        "net",
                    ));
                }
            }
            node_links.push(nl);
        }
        Cluster { spec: spec.clone(), nodes, gpus_per_node, links, node_links }
    }

    /// The node template.
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// GPUs used per node.
    pub fn gpus_per_node(&self) -> usize {
        self.gpus_per_node
    }

    /// All links, indexed by [`LinkId`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Links from a GPU to another GPU of the same node: over NVSwitch when there is one, else
    /// up the PCIe tree and down again (across the socket link when needed).
    pub fn gpu_to_gpu(&self, node: usize, a: usize, b: usize) -> Vec<LinkId> {
        let nl = &self.node_links[node];
        if !nl.nvl_up.is_empty() && self.spec.nvswitch.is_some() {
            return vec![nl.nvl_up[a], nl.nvl_down[b]];
        }
        let (sa, sb) = (self.spec.gpu_switch(a), self.spec.gpu_switch(b));
        let mut p = vec![nl.gpu_pcie_up[a]];
        if sa != sb {
            p.extend(self.switch_to_switch(node, sa, sb));
        }
        p.push(nl.gpu_pcie_down[b]);
        p
    }

    /// Links from a GPU to a NIC of its node (GPUDirect RDMA through the PCIe tree).
    pub fn gpu_to_nic(&self, node: usize, gpu: usize, nic: usize) -> Vec<LinkId> {
        let nl = &self.node_links[node];
        let (sg, sn) = (self.spec.gpu_switch(gpu), self.spec.nic_switch(nic));
        let mut p = vec![nl.gpu_pcie_up[gpu]];
        if sg != sn {
            p.extend(self.switch_to_switch(node, sg, sn));
        }
        p.push(nl.nic_pcie_down[nic]);
        p
    }

    /// Links from a NIC to a GPU of its node.
    pub fn nic_to_gpu(&self, node: usize, nic: usize, gpu: usize) -> Vec<LinkId> {
        let nl = &self.node_links[node];
        let (sn, sg) = (self.spec.nic_switch(nic), self.spec.gpu_switch(gpu));
        let mut p = vec![nl.nic_pcie_up[nic]];
        if sg != sn {
            p.extend(self.switch_to_switch(node, sn, sg));
        }
        p.push(nl.gpu_pcie_down[gpu]);
        p
    }

    /// Links from a NIC out through the switch layer into a NIC of another node.
    pub fn nic_to_nic(&self, from: (usize, usize), to: (usize, usize)) -> Vec<LinkId> {
        vec![self.node_links[from.0].nic_tx[from.1], self.node_links[to.0].nic_rx[to.1]]
    }

    fn switch_to_switch(&self, node: usize, a: usize, b: usize) -> Vec<LinkId> {
        let nl = &self.node_links[node];
        let (ca, cb) = (self.spec.switch_socket(a), self.spec.switch_socket(b));
        let mut p = vec![nl.sw_up[a]];
        if ca != cb
            && let Some(l) = nl.sys[ca * self.spec.cpu.sockets + cb]
        {
            p.push(l);
        }
        p.push(nl.sw_down[b]);
        p
    }

    /// The narrowest capacity along a path.
    pub fn path_bandwidth(&self, path: &[LinkId]) -> Bandwidth {
        path.iter()
            .map(|l| self.links[l.0 as usize].capacity)
            .min()
            .unwrap_or(Bandwidth::from_gbit_per_s(u32::MAX as u64))
    }
}
