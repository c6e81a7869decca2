//! Hardware: the typed description of a node ([`NodeSpec`]), its expansion into a graph of
//! devices and directed links with NCCL's path types ([`graph::NodeGraph`]), and the cluster of
//! `nodes` such nodes joined by a network ([`Cluster`]).
//!
//! Inside a node: GPUs, NICs, PCIe switches, NUMA domains (CPU sockets, or parts of one) and, if
//! present, one aggregated NVSwitch, as in NCCL's topology. GPUs and NICs hang off a PCIe switch
//! or directly off a NUMA domain's root complex; switches hang off another switch or a NUMA
//! domain; NUMA domains are joined pairwise by the inter-socket link (UPI, xGMI). NVLink is either
//! an NVSwitch (each GPU one up-link and one down-link of its NVLink count × per-link bandwidth)
//! or direct GPU–GPU links (bridges, meshes).
//!
//! Nodes, and GPUs and NICs within a node, are named by typed ids ([`NodeId`], [`GpuId`],
//! [`NicId`]) everywhere a layer above asks for a route or a link.

mod cluster;
pub mod fabric;
pub mod gpus;
pub mod graph;
mod ids;

pub use cluster::Cluster;
pub use fabric::Placement;
pub use gpus::GpuModel;
pub use graph::{NodeGraph, PathType, Route, Vertex};
pub use ids::{GpuId, NicId, NodeId};

use crate::units::{Bandwidth, Time};

/// GPU architecture, as NCCL indexes its tuning tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// sm70.
    Volta,
    /// sm80, sm86, sm89.
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

    /// The name profiles use ("hopper").
    pub fn name(self) -> &'static str {
        match self {
            Arch::Volta => "volta",
            Arch::Ampere => "ampere",
            Arch::Hopper => "hopper",
            Arch::Blackwell => "blackwell",
        }
    }

    /// NCCL's architecture index for a compute capability (sm89 counts as Ampere).
    pub fn from_sm(sm: u32) -> Arch {
        match sm {
            0..80 => Arch::Volta,
            80..90 => Arch::Ampere,
            90..100 => Arch::Hopper,
            _ => Arch::Blackwell,
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
    /// The model, from the library or defined in the topology file.
    pub model: GpuModel,
    /// Architecture (from the model's compute capability).
    pub arch: Arch,
    /// GPUs per node.
    pub count: usize,
}

/// NVLink of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NvlinkSpec {
    /// Links per GPU.
    pub links_per_gpu: u32,
    /// Effective bandwidth of one link, one direction.
    #[serde(serialize_with = "ser_display")]
    pub bandwidth_per_link: Bandwidth,
    /// Latency of one GPU-to-GPU NVLink hop (through the NVSwitch where there is one).
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
    /// Direct GPU–GPU links when there is no NVSwitch: (GPU a, GPU b, links).
    pub pairs: Vec<(GpuId, GpuId, u32)>,
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

/// What a PCIe device or switch hangs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Parent {
    /// A NUMA domain's root complex.
    Numa(usize),
    /// A PCIe switch, by index.
    Switch(usize),
}

/// One PCIe switch.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PcieSwitch {
    /// Its id in the file.
    pub id: String,
    /// Its upstream port's parent.
    pub parent: Parent,
}

/// The PCIe tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PcieSpec {
    /// PCIe generation of the switches and NIC links (3, 4, 5, 6).
    pub generation: u32,
    /// Lanes of each switch and NIC link.
    pub lanes: u32,
    /// The switches.
    pub switches: Vec<PcieSwitch>,
    /// Latency of one PCIe link.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

/// NCCL's effective bandwidth of a PCIe link: lanes × per-lane rate / 80 (Gen4 x16 = 24 GB/s).
pub fn pcie_bandwidth(generation: u32, lanes: u32) -> Bandwidth {
    let per_lane_100mbps = match generation {
        1 => 15,
        2 => 30,
        3 => 60,
        4 => 120,
        5 => 240,
        _ => 480,
    };
    Bandwidth::from_gbyte_per_s_f64(lanes as f64 * per_lane_100mbps as f64 / 80.0)
}

impl PcieSpec {
    /// Bandwidth of a switch or NIC link.
    pub fn bandwidth(&self) -> Bandwidth {
        pcie_bandwidth(self.generation, self.lanes)
    }
}

/// CPU sockets and their NUMA domains.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuSpec {
    /// Sockets.
    pub sockets: usize,
    /// NUMA domains per socket (AMD NPS4 = 4).
    pub numa_per_socket: usize,
    /// Vendor.
    pub vendor: CpuVendor,
    /// Bandwidth of the link between two NUMA domains, one direction (NCCL's SYS figure).
    #[serde(serialize_with = "ser_display")]
    pub inter_socket: Bandwidth,
    /// Cores per NUMA domain, if known (for `topo show`'s CPU affinity).
    pub cores_per_numa: Option<usize>,
    /// Hardware threads per core (SMT siblings are numbered after all cores, as Linux does).
    pub threads_per_core: usize,
}

impl CpuSpec {
    /// NUMA domains in the node.
    pub fn numa_domains(&self) -> usize {
        self.sockets * self.numa_per_socket
    }
}

/// The node's compute NICs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NicSpec {
    /// NICs per node.
    pub count: usize,
    /// Line rate of one NIC, one direction.
    #[serde(serialize_with = "ser_display")]
    pub speed: Bandwidth,
    /// The transport, from `topologies/transports.toml`.
    pub transport: Transport,
    /// NIC latency (added on the way out and on the way in).
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
}

/// A network transport: what fraction of the line rate NCCL gets, and per-message costs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Transport {
    /// Name ("infiniband-ndr").
    pub name: String,
    /// Achieved fraction of the line rate for large messages.
    pub efficiency: f64,
    /// Added latency of every message (a slice) through the NIC, beyond the wire.
    #[serde(serialize_with = "ser_display")]
    pub message_overhead: Time,
    /// How long each network send or receive keeps the GPU's proxy thread busy (posting it,
    /// polling its completion and, for providers that match tags in software, matching it).
    /// One proxy thread serves all of a GPU's network connections, one operation after another.
    #[serde(serialize_with = "ser_display")]
    pub proxy_op: Time,
    /// For socket transports: the rate of one TCP stream (NCCL opens NCCL_SOCKET_NTHREADS ×
    /// NCCL_NSOCKS_PERTHREAD per connection).
    #[serde(serialize_with = "ser_opt_display")]
    pub per_stream: Option<Bandwidth>,
    /// Streams NCCL opens when the environment does not say.
    pub default_streams: usize,
}

/// The shape of the network between nodes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FabricKind {
    /// One ideal switch.
    NonBlocking,
    /// A fat-tree of `tiers` switch levels of `radix` ports; `oversubscription[t]` is the
    /// down:up ratio at the boundary above tier `t + 1` (1 = non-blocking). NICs fill the leaves
    /// node by node.
    FatTree {
        /// Switch levels (1 = a single switch layer).
        tiers: usize,
        /// Ports per switch.
        radix: usize,
        /// Down:up ratio per tier boundary, from the leaves up.
        oversubscription: Vec<f64>,
    },
    /// Rail-optimized: NIC `i` of every node on rail `i`'s leaf switches, a spine above them.
    Rail {
        /// Ports per switch.
        radix: usize,
        /// Down:up ratio of the rail leaves.
        oversubscription: f64,
    },
    /// The escape hatch: named switches, which nodes plug into which, and the links between
    /// switches. Routes take the fewest switch hops; among equal ones each flow is hashed onto
    /// one (ECMP).
    Links {
        /// Switch ids and the nodes whose NICs plug into each.
        switches: Vec<(String, Vec<NodeId>)>,
        /// Links between switches (by index), each way, with capacity and latency.
        links: Vec<(usize, usize, Bandwidth, Time)>,
    },
}

/// How a fat-tree or rail fabric spreads flows over the equal-cost up-ports of a switch group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    /// Traffic spread evenly over the equal-cost paths, as adaptive routing approximates
    /// (InfiniBand adaptive routing, NVIDIA Spectrum-X): a group's up-ports are one link of their
    /// summed capacity.
    Adaptive,
    /// Static ECMP: each flow (each NCCL connection, one queue pair) hashed onto one up-port,
    /// so flows can collide on a port while others idle (RoCE on ordinary Ethernet switches).
    /// Explicit (`links`) networks always route this way.
    Ecmp,
}

impl Routing {
    /// The name in topology files ("adaptive", "ecmp").
    pub fn name(self) -> &'static str {
        match self {
            Routing::Adaptive => "adaptive",
            Routing::Ecmp => "ecmp",
        }
    }
}

/// The inter-node network.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NetworkSpec {
    /// Its shape.
    pub fabric: FabricKind,
    /// How flows spread over equal-cost paths.
    pub routing: Routing,
    /// Latency of one switch traversal.
    #[serde(serialize_with = "ser_display")]
    pub latency: Time,
    /// Whether the switches can reduce in the network (InfiniBand SHARP), for CollNet.
    pub sharp: bool,
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
    /// Where each GPU hangs off, indexed by [`GpuId`].
    pub gpu_parent: Vec<Parent>,
    /// Where each NIC hangs off, indexed by [`NicId`].
    pub nic_parent: Vec<Parent>,
    /// Inter-node network.
    pub network: NetworkSpec,
    /// Hourly price of one node, where public.
    pub price: Option<Price>,
    /// The NCCL tuner plugin the instance runs by default (`"aws-ofi-nccl/p5.48xlarge"`: the
    /// region tuner inside aws-ofi-nccl's net plugin), checked when the topology is read.
    pub nccl_tuner: Option<String>,
}

/// Hourly price of one node (or cloud instance), in US dollars.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Price {
    /// On-demand, USD per hour.
    pub on_demand_usd_per_hour: f64,
    /// Spot / preemptible, USD per hour, if offered.
    pub spot_usd_per_hour: Option<f64>,
    /// The cloud region the figures are for, where prices differ by region (None: not
    /// stated, or a price that does not).
    pub region: Option<String>,
    /// Where the figures come from.
    pub source: String,
    /// When they were published or read (YYYY-MM or YYYY-MM-DD).
    pub date: String,
}

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn ser_opt_display<T: std::fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

impl NodeSpec {
    /// Per-GPU NVLink bandwidth to the NVSwitch (links × per-link), if there is one.
    pub fn nvswitch_bandwidth(&self) -> Option<Bandwidth> {
        self.nvswitch.as_ref()?;
        self.nvlink.as_ref().map(|n| {
            Bandwidth::from_gbyte_per_s_f64(
                n.bandwidth_per_link.gbyte_per_s() * n.links_per_gpu as f64,
            )
        })
    }

    /// NVLinks between two GPUs as `nvidia-smi topo -m` counts them (through the NVSwitch: all
    /// of a GPU's links).
    pub fn nvlinks_between(&self, a: GpuId, b: GpuId) -> u32 {
        let Some(nv) = &self.nvlink else { return 0 };
        if a == b {
            return 0;
        }
        if self.nvswitch.is_some() {
            return nv.links_per_gpu;
        }
        nv.pairs
            .iter()
            .filter(|&&(x, y, _)| (x, y) == (a, b) || (x, y) == (b, a))
            .map(|&(_, _, l)| l)
            .sum()
    }

    /// The NUMA domain a parent eventually hangs off.
    pub fn numa_of(&self, mut p: Parent) -> usize {
        loop {
            match p {
                Parent::Numa(n) => return n,
                Parent::Switch(s) => p = self.pcie.switches[s].parent,
            }
        }
    }
}
