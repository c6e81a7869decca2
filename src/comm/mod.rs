//! A communicator over the ranks of a cluster, as NCCL builds it: the channel search (how many
//! channels at what per-channel bandwidth, §3.4 of `nccl-model.md`), the CUDA channels and
//! their ring orders (§3.5), and the per-call choice of algorithm, protocol and channel count
//! with NCCL's cost model ([`tuning`]).
//!
//! This layer knows GPUs, NICs and paths, not flows or time.

pub mod aws_tuner;
pub mod env;
pub mod search;
pub mod tuner;
pub mod tuning;

use crate::hw::{Arch, Cluster, GpuId, NicId, NodeId, PathType, Vertex};
use crate::net::LinkId;
use env::NcclEnv;
pub use search::{Hop, Paths};

use tuning::TuningInput;

/// What the communicator looked like, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CommSummary {
    /// Ranks.
    pub nranks: usize,
    /// Ring search result.
    pub ring_graph: Graph,
    /// NVLS search result, if supported.
    pub nvls_graph: Option<Graph>,
    /// CUDA channels.
    pub cuda_channels: usize,
    /// NCCL version of the cost-model tables.
    pub nccl_tables: &'static str,
    /// NCCL_* variables given but not used by the model.
    pub ignored_nccl: Vec<String>,
    /// NCCL_TUNER_CONFIG_FILE's rows, if one was given.
    #[serde(serialize_with = "ser_tuner")]
    pub tuner: Option<std::sync::Arc<tuner::Tuner>>,
    /// What the tuner file's rows do not do here, a line each (rows skipped or passed over).
    pub tuner_notes: Vec<String>,
    /// The instance's own tuner plugin in use (a topology's `nccl_tuner`), if any.
    pub preset_tuner: Option<String>,
}

fn ser_tuner<S: serde::Serializer>(
    t: &Option<std::sync::Arc<tuner::Tuner>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&t.as_deref(), s)
}

/// The collectives nccl-tests runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// AllReduce.
    AllReduce,
    /// AllGather.
    AllGather,
    /// ReduceScatter.
    ReduceScatter,
    /// Broadcast.
    Broadcast,
    /// Reduce.
    Reduce,
    /// AllToAll.
    AllToAll,
    /// SendRecv.
    SendRecv,
    /// One way from each rank to the next (to the one before, `back`), no wrap: a pipeline
    /// stage's send to its neighbour on their two-rank group (Megatron's isend of an
    /// activation or its gradient). Not an nccl-tests test; timed alone, it takes what the
    /// pair's sendrecv takes (each direction has its own links).
    Send {
        /// From the group's second rank to its first.
        back: bool,
    },
}

impl Collective {
    /// nccl-tests' names of the collectives a sweep can time, as [`Collective::parse`] takes them.
    pub const NAMES: [&'static str; 7] = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
    ];

    /// Parses nccl-tests' names ("all_reduce", "all_reduce_perf", "allreduce").
    pub fn parse(s: &str) -> Option<Collective> {
        let s = s.trim().trim_end_matches("_perf").replace(['_', '-'], "").to_ascii_lowercase();
        Some(match s.as_str() {
            "allreduce" => Collective::AllReduce,
            "allgather" => Collective::AllGather,
            "reducescatter" => Collective::ReduceScatter,
            "broadcast" => Collective::Broadcast,
            "reduce" => Collective::Reduce,
            "alltoall" => Collective::AllToAll,
            "sendrecv" => Collective::SendRecv,
            _ => return None,
        })
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "alltoall",
            Collective::SendRecv => "sendrecv",
            Collective::Send { .. } => "send",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks (`doc/PERFORMANCE.md`).
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast
            | Collective::Reduce
            | Collective::SendRecv
            | Collective::Send { .. } => 1.0,
        }
    }
}

/// NCCL's algorithms, in its index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Algo {
    /// Double binary tree across nodes, chain inside.
    Tree = 0,
    /// Ring.
    Ring = 1,
    /// IB SHARP, direct.
    CollNetDirect = 2,
    /// IB SHARP, chain.
    CollNetChain = 3,
    /// NVLink SHARP.
    Nvls = 4,
    /// NVLink SHARP inside nodes, tree across.
    NvlsTree = 5,
    /// Parallel aggregated trees (AllGather/ReduceScatter).
    Pat = 6,
}

impl Algo {
    /// All, in index order.
    pub const ALL: [Algo; 7] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];

    /// NCCL's spelling, as in its logs.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Tree => "TREE",
            Algo::Ring => "RING",
            Algo::CollNetDirect => "COLLNET_DIRECT",
            Algo::CollNetChain => "COLLNET_CHAIN",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLS_TREE",
            Algo::Pat => "PAT",
        }
    }

    /// Parses an NCCL_ALGO item (case-insensitive; "CollNet" means both CollNet variants).
    pub fn parse(s: &str) -> Option<Vec<Algo>> {
        Some(match s.to_ascii_lowercase().as_str() {
            "tree" => vec![Algo::Tree],
            "ring" => vec![Algo::Ring],
            "collnetdirect" | "collnet_direct" => vec![Algo::CollNetDirect],
            "collnetchain" | "collnet_chain" => vec![Algo::CollNetChain],
            "collnet" => vec![Algo::CollNetDirect, Algo::CollNetChain],
            "nvls" => vec![Algo::Nvls],
            "nvlstree" | "nvls_tree" => vec![Algo::NvlsTree],
            "pat" => vec![Algo::Pat],
            _ => return None,
        })
    }
}

/// NCCL_ALGO's and NCCL_PROTO's values as NCCL's documentation spells them (what shell
/// completion offers `--nccl`; [`Algo::parse`] and [`Proto::parse`] read each).
pub const NCCL_SETTINGS: [&str; 10] = [
    "NCCL_ALGO=Ring",
    "NCCL_ALGO=Tree",
    "NCCL_ALGO=NVLS",
    "NCCL_ALGO=NVLSTree",
    "NCCL_ALGO=CollnetDirect",
    "NCCL_ALGO=CollnetChain",
    "NCCL_ALGO=PAT",
    "NCCL_PROTO=LL",
    "NCCL_PROTO=LL128",
    "NCCL_PROTO=Simple",
];

/// NCCL's protocols, in its index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Proto {
    /// Low latency: 8-byte stores of 4 B data + 4 B flag.
    LL = 0,
    /// 128-byte lines of 120 B data + 8 B flag.
    LL128 = 1,
    /// Plain copies with fences and step counters.
    Simple = 2,
}

impl Proto {
    /// All, in index order.
    pub const ALL: [Proto; 3] = [Proto::LL, Proto::LL128, Proto::Simple];

    /// NCCL's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
            Proto::Simple => "SIMPLE",
        }
    }

    /// Parses an NCCL_PROTO item (case-insensitive).
    pub fn parse(s: &str) -> Option<Proto> {
        match s.to_ascii_lowercase().as_str() {
            "ll" => Some(Proto::LL),
            "ll128" => Some(Proto::LL128),
            "simple" => Some(Proto::Simple),
            _ => None,
        }
    }

    /// Fraction of the bytes on the wire that are payload (LL 8 of 16, LL128 120 of 128).
    pub const fn payload_efficiency(self) -> f64 {
        match self {
            Proto::LL => 0.5,
            Proto::LL128 => 120.0 / 128.0,
            Proto::Simple => 1.0,
        }
    }

    /// Threads per CTA before per-call trimming (`maxThreads`, NCCL_MAX_NTHREADS = 640 for
    /// LL128, 512 otherwise).
    pub fn max_threads(self) -> u64 {
        match self {
            Proto::LL128 => 640,
            _ => 512,
        }
    }
}

/// A search result: channel count and per-channel bandwidth (GB/s) inside and across nodes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Graph {
    /// Search channels.
    pub n_channels: usize,
    /// Per-channel bandwidth inside a node, GB/s.
    pub bw_intra: f64,
    /// Per-channel bandwidth across nodes, GB/s.
    pub bw_inter: f64,
}

/// One CUDA channel's ring inside a node: the GPUs in order, and for multi-node rings the NIC it
/// enters by (at the first GPU) and leaves by (from the last GPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingChannel {
    /// The node's GPUs in ring order (the same on every node).
    pub gpus: Vec<GpuId>,
    /// NIC receiving from the previous node (multi-node only).
    pub nic_in: Option<NicId>,
    /// NIC sending to the next node (multi-node only).
    pub nic_out: Option<NicId>,
}

/// The kind of link a hop crosses, for per-step protocol latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HopClass {
    /// Over NVLink (through NVSwitch).
    Nvlink = 0,
    /// Over PCIe.
    Pcie = 1,
    /// Across the network.
    Net = 2,
}

impl HopClass {
    /// Every class, in index order.
    pub const ALL: [HopClass; 3] = [HopClass::Nvlink, HopClass::Pcie, HopClass::Net];

    /// The name profiles use ("nvlink", "pcie", "net").
    pub fn name(self) -> &'static str {
        match self {
            HopClass::Nvlink => "nvlink",
            HopClass::Pcie => "pcie",
            HopClass::Net => "net",
        }
    }
}

/// Why a communicator cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommError {
    /// Multi-node without NICs.
    #[error("topology {0}: {1} nodes need NICs, but the node has no [nic] table")]
    NoNics(String, usize),
}

/// A communicator: ranks, graphs, CUDA channels and their rings.
#[derive(Debug, Clone)]
pub struct Communicator {
    nnodes: usize,
    ppn: usize,
    arch: Arch,
    ring: Graph,
    tree: Graph,
    nvls: Option<Graph>,
    channels: Vec<RingChannel>,
    tuning: TuningInput,
    env: NcclEnv,
    paths: Paths,
    type_intra: PathType,
    type_inter: PathType,
    /// Whether the fabric's switches can reduce (IB SHARP).
    sharp: bool,
    /// GPUs each process drives (nccl-tests `-g`; 1 under torchrun and mpirun).
    gpus_per_process: usize,
    nvls_layout: NvlsLayout,
    /// The instance's own tuner plugin (a topology's `nccl_tuner`), where NCCL would load it.
    preset_tuner: Option<aws_tuner::AwsPlatform>,
}

/// The tuner plugin a topology's `nccl_tuner` names: `aws-ofi-nccl/INSTANCE` (the region tuner
/// aws-ofi-nccl's net plugin carries, on by default from its 1.16.0, [`aws_tuner`]).
pub fn preset_tuner(name: &str) -> Result<aws_tuner::AwsPlatform, String> {
    let (plugin, instance) = name.split_once('/').unwrap_or((name, ""));
    if plugin != "aws-ofi-nccl" {
        return Err(format!(
            "unknown tuner plugin `{plugin}` (collsim models aws-ofi-nccl/INSTANCE)"
        ));
    }
    aws_tuner::AwsPlatform::from_instance_type(instance).ok_or_else(|| {
        format!("aws-ofi-nccl's region tuner has no regions collsim carries for `{instance}` (p5.48xlarge, p5e.48xlarge)")
    })
}

/// How NCCL lays out NVLS and NVLSTree calls (`ncclNvlsTuning`, NVIDIA/nccl 2.30.7
/// `src/transport/nvls.cc`; before 2.30 its defaults alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvlsLayout {
    /// CUDA channels (`nvlsChannels`).
    pub channels: usize,
    /// The NVLS chunk (`nvlsChunkSize`), before the reductions for small messages.
    pub chunk: u64,
    /// NVLSTree's largest chunk (`nvlsTreeMaxChunkSize`).
    pub tree_max_chunk: u64,
}

impl NvlsLayout {
    /// NCCL's layout on `cluster` under `env`. The defaults: 16 channels on sm90, 24 on one
    /// sm100 node, 32 across nodes; 128 KiB chunks; NVLSTree's chunk capped at 64 KiB from 4
    /// nodes. From 2.30 (`ncclNvlsTreeSm100Tuning`) Blackwell across nodes is tuned by the
    /// slowest GPU-to-NIC path bandwidth (`minNetBw`) and, with 400 Gb/s NICs under the GPUs'
    /// PCIe switches: 32 channels and 64 KiB NVLSTree chunks on two nodes of 5 to 8 GPUs, 24
    /// channels and 64 KiB on more. NCCL_NVLS_NCHANNELS, NCCL_NVLS_CHUNKSIZE and
    /// NCCL_NVLSTREE_MAX_CHUNKSIZE override each.
    fn new(cluster: &Cluster, env: &NcclEnv) -> NvlsLayout {
        const K: u64 = 1024;
        let (nnodes, ppn, arch) =
            (cluster.nodes(), cluster.gpus_per_node(), cluster.spec().gpu.arch);
        let blackwell = arch >= Arch::Blackwell;
        let mut channels = match (blackwell, nnodes > 1) {
            (false, _) => 16,
            (true, false) => 24,
            (true, true) => 32,
        };
        // Zero: not set by the tuning.
        let (mut chunk, mut tree_max) = (0, 0);
        if env.minor >= 30 && blackwell && nnodes > 1 {
            let pairs: Vec<(GpuId, NicId)> =
                (0..ppn).map(GpuId).filter_map(|g| cluster.local_nic(g).map(|n| (g, n))).collect();
            let nic_bw = pairs
                .iter()
                .map(|&(g, n)| cluster.nic_path_bandwidth(g, n).gbyte_per_s())
                .fold(f64::INFINITY, f64::min);
            let nic_bw = if nic_bw.is_finite() { nic_bw } else { 0.0 };
            let under_switch = pairs.iter().all(|&(g, n)| {
                cluster
                    .graph_route(Vertex::Gpu(g), Vertex::Nic(n))
                    .is_some_and(|r| r.ty <= PathType::Pxb)
            });
            chunk = 128 * K;
            if nnodes == 2 && nic_bw >= 48.0 {
                channels = 32;
                tree_max = 128 * K;
                if ppn <= 4 {
                    (chunk, tree_max) = (256 * K, 256 * K);
                } else if ppn >= 16 || (ppn <= 8 && under_switch && nic_bw < 96.0) {
                    tree_max = 64 * K;
                }
            } else if nic_bw >= 96.0 {
                if ppn <= 8 {
                    (channels, chunk, tree_max) = (24, 256 * K, 256 * K);
                } else {
                    channels = 32;
                    tree_max = if ppn < 32 { 128 * K } else { 64 * K };
                }
            } else if nic_bw >= 48.0 {
                channels = 24;
                tree_max = if under_switch { 64 * K } else { 128 * K };
            }
        }
        // Clamped to the CTA bounds as `ncclNvlsInit` clamps them (NCCL 2.29.7 and 2.30.7).
        let (min_ctas, max_ctas) = env.ctas;
        let channels = env.nvls_nchannels.unwrap_or(channels).min(max_ctas).max(min_ctas);
        let chunk = match env.nvls_chunksize {
            Some(b) => b.get(),
            None if chunk > 0 => chunk,
            None => 128 * K,
        };
        let tree_max_chunk = match env.nvlstree_max_chunksize {
            Some(b) => b.get(),
            None if tree_max > 0 => tree_max,
            None if nnodes >= 4 => 64 * K,
            None => chunk,
        };
        NvlsLayout { channels, chunk, tree_max_chunk }
    }
}

impl Communicator {
    /// Builds the communicator NCCL would build on `cluster` under `env`.
    pub fn new(cluster: &Cluster, env: &NcclEnv) -> Result<Communicator, CommError> {
        let spec = cluster.spec();
        let (nnodes, ppn) = (cluster.nodes(), cluster.gpus_per_node());
        let arch = spec.gpu.arch;
        let nvl_total = spec.nvswitch_bandwidth().map_or(0.0, |b| b.gbyte_per_s());
        let nranks = nnodes * ppn;
        if nnodes > 1 && spec.nic.is_none() {
            return Err(CommError::NoNics(spec.name.clone(), nnodes));
        }
        let paths = Paths::new(cluster, env);
        let found = search::search_rings(cluster, paths, arch);
        let search = found.channels.clone();
        let ring = Graph { n_channels: search.len(), bw_intra: found.speed, bw_inter: found.speed };
        // Duplication (search.cc): bw >= 25 and not (sm > 80, bw < 50, > 4 channels) → ×2, bw/2.
        let mut ring = ring;
        let mut ring_channels = search.clone();
        if ring.bw_intra >= 25.0
            && !(arch > Arch::Ampere && ring.bw_intra < 50.0 && ring.n_channels > 4)
        {
            let n = (ring.n_channels * 2).min(32);
            ring = Graph {
                n_channels: n,
                bw_intra: ring.bw_intra / 2.0,
                bw_inter: ring.bw_inter / 2.0,
            };
        }
        while ring_channels.len() < ring.n_channels {
            ring_channels.push(ring_channels[ring_channels.len() % search.len()].clone());
        }
        ring_channels.truncate(ring.n_channels);
        let tree = ring;

        // NVLS graph: every GPU a head on one node (head uses 2 bw, the others 1 bw).
        let nvls_hw = spec.nvswitch.as_ref().is_some_and(|s| s.nvls && s.generation >= 3)
            && arch >= Arch::Hopper;
        let nvls = if nvls_hw && ppn > 2 {
            let heads = if nnodes == 1 {
                ppn
            } else {
                ring_channels
                    .iter()
                    .filter_map(|c| c.nic_in)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    .max(1)
            };
            let intra = search::speeds(arch, false)
                .iter()
                .copied()
                .find(|&s| s * (heads as f64 + 1.0) <= nvl_total + 1e-9)
                .unwrap_or(0.0);
            let inter = if nnodes == 1 {
                search::speeds(arch, false)
                    .iter()
                    .copied()
                    .find(|&s| s <= 2.0 * intra + 1e-9)
                    .unwrap_or(intra)
            } else {
                let nic = (0..ppn)
                    .map(GpuId)
                    .filter_map(|g| cluster.local_nic(g).map(|n| (g, n)))
                    .map(|(g, n)| cluster.nic_path_bandwidth(g, n).gbyte_per_s())
                    .fold(0.0, f64::max);
                search::speeds(arch, true).iter().copied().find(|&s| s <= nic + 1e-9).unwrap_or(0.0)
            };
            Some(Graph { n_channels: heads, bw_intra: intra, bw_inter: inter })
        } else {
            None
        };

        // CUDA channels (NVIDIA/nccl v2.22.3-1 `src/graph/connect.cc`, ncclTopoPostset): the
        // search channels doubled; then, on sm90 across nodes, rings faster than 45 GB/s still
        // under 16 channels doubled again (so 8 rings of 48 GB/s on 8 NICs stay at 16, as AWS
        // p5's logs print); then NCCL_MIN/MAX_NCHANNELS clamp (min by replication).
        let mut cuda: Vec<RingChannel> =
            ring_channels.iter().chain(ring_channels.iter()).cloned().collect();
        if arch == Arch::Hopper && nnodes > 1 && ring.bw_intra > 45.0 && cuda.len() < 16 {
            cuda = cuda.iter().chain(cuda.iter()).cloned().collect();
        }
        cuda.truncate(env.max_nchannels.min(64));
        let base = cuda.len();
        while cuda.len() < env.min_nchannels {
            cuda.push(cuda[cuda.len() % base].clone());
        }

        // LL128 by default only on NVLink graphs whose NIC paths stay under a PCIe switch (PXN
        // on Hopper), with identical GPUs (§2.7).
        let inter_ok = if arch >= Arch::Hopper { PathType::Pxn } else { PathType::Pxb };
        let ll128_hw = found.type_intra <= PathType::Nvb && found.type_inter <= inter_ok;
        let ll128 = env.protos.contains(&Proto::LL128) && (env.ll128_forced || ll128_hw);
        let nvls_enabled = env.nvls_enable != 0 && nvls.is_some();
        let tuning = TuningInput {
            arch,
            cpu: spec.cpu.vendor,
            nnodes,
            nranks,
            ring,
            tree,
            nvls,
            intra_nvlink: found.type_intra <= PathType::Nvb,
            nchannels: cuda.len(),
            ll128,
            nvls_enabled,
            // NCCL_PAT_ENABLE=2: one GPU per node, host-driven networking, sm60+.
            pat_enabled: ppn == 1 && nnodes > 1,
            version: env.version,
            release: env.release,
            collnet_enabled: env.collnet_enable && spec.network.sharp && nnodes >= 2 && ppn <= 8,
            nvswitch: spec.nvswitch.is_some(),
        };
        Ok(Communicator {
            nnodes,
            ppn,
            arch,
            ring,
            tree,
            nvls,
            channels: cuda,
            tuning,
            env: env.clone(),
            paths,
            type_intra: found.type_intra,
            type_inter: found.type_inter,
            sharp: spec.network.sharp,
            gpus_per_process: 1,
            nvls_layout: NvlsLayout::new(cluster, env),
            // NCCL loads the net plugin's tuner only where NCCL_TUNER_PLUGIN names no other
            // (src/plugin/tuner.cc); a tuner file is the example plugin's.
            preset_tuner: match spec.nccl_tuner.as_deref() {
                Some(t) if env.tuner.is_none() && !env.given.contains_key("NCCL_TUNER_PLUGIN") => {
                    preset_tuner(t).ok()
                }
                _ => None,
            },
        })
    }

    /// The same communicator with each process driving `n` GPUs (clamped to 1..=GPUs per
    /// node): what a call costs the host depends on it ([`TimingParams::call_cost`]).
    ///
    /// [`TimingParams::call_cost`]: crate::collective::TimingParams::call_cost
    pub fn with_gpus_per_process(mut self, n: usize) -> Communicator {
        self.gpus_per_process = n.clamp(1, self.ppn.max(1));
        self
    }

    /// GPUs each process drives.
    pub fn gpus_per_process(&self) -> usize {
        self.gpus_per_process
    }

    /// Ranks.
    pub fn nranks(&self) -> usize {
        self.nnodes * self.ppn
    }

    /// Nodes.
    pub fn nnodes(&self) -> usize {
        self.nnodes
    }

    /// Ranks per node.
    pub fn ppn(&self) -> usize {
        self.ppn
    }

    /// GPU architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The ring search result (after duplication).
    pub fn ring_graph(&self) -> Graph {
        self.ring
    }

    /// The tree search result.
    pub fn tree_graph(&self) -> Graph {
        self.tree
    }

    /// The NVLS search result, if NVLS is supported.
    pub fn nvls_graph(&self) -> Option<Graph> {
        self.nvls
    }

    /// The CUDA channels' rings.
    pub fn channels(&self) -> &[RingChannel] {
        &self.channels
    }

    /// The cost model inputs.
    pub fn tuning(&self) -> &TuningInput {
        &self.tuning
    }

    /// The instance's own tuner plugin in use, if any (a topology's `nccl_tuner`, where no
    /// NCCL_TUNER_PLUGIN or tuner file replaces it).
    pub fn preset_tuner(&self) -> Option<aws_tuner::AwsPlatform> {
        self.preset_tuner
    }

    /// The environment the communicator was built under.
    pub fn env(&self) -> &NcclEnv {
        &self.env
    }

    /// What NCCL would run for `coll` on `bytes` (NCCL's count × element size; the total for
    /// AllGather and ReduceScatter), and what collsim runs: NCCL's choice when `simulated` says
    /// collsim runs that algorithm on this many nodes, else the best choice among the ones it
    /// runs. (`crate::collective::select` passes the simulator's own list.)
    pub fn select_among(
        &self,
        coll: Collective,
        bytes: u64,
        simulated: impl Fn(Collective, Algo, usize) -> bool,
    ) -> Selection {
        let protos = self.env.protos_for(coll);
        let allowed: Vec<Algo> = self
            .env
            .algos_for(coll)
            .into_iter()
            .filter(|a| tuning::algos_for(coll).contains(a))
            .collect();
        // A tuner plugin's configuration goes after the cost table (ncclGetAlgoInfo): its row's
        // pair, where NCCL has not marked it ignored, costs nothing, so NCCL picks it.
        let usable = |a: Algo, p: Proto| {
            allowed.contains(&a)
                && protos.contains(&p)
                && self.tuning.time_us(coll, a, p, bytes).is_some()
        };
        let tuner = match (&self.env.tuner, self.preset_tuner) {
            (Some(t), _) => t.apply(coll, bytes, self.nnodes, self.nranks(), usable),
            (None, Some(platform)) => {
                aws_tuner::choice_where(platform, coll, bytes, self.nranks(), self.nnodes, usable)
                    .map(|c| tuner::TunerHit {
                        line: None,
                        choice: Some((c.algo, c.proto)),
                        channels: c.nchannels,
                    })
            }
            (None, None) => None,
        };
        let nccl = match tuner.and_then(|h| h.choice) {
            Some((a, p)) => Some((a, p, 0.0)),
            None => self.tuning.choose(coll, bytes, &allowed, &protos),
        };
        let modelled: Vec<Algo> =
            allowed.iter().copied().filter(|&a| simulated(coll, a, self.nnodes)).collect();
        let (algo, proto) = match nccl {
            Some((a, p, _)) if simulated(coll, a, self.nnodes) => (a, p),
            _ => self
                .tuning
                .choose(coll, bytes, &modelled, &protos)
                .map_or((Algo::Ring, Proto::Simple), |(a, p, _)| (a, p)),
        };
        let nvls = matches!(algo, Algo::Nvls | Algo::NvlsTree);
        let own = if nvls { self.nvls_channels() } else { self.channels_for(bytes, proto) };
        // The tuner's channels replace NCCL's (info->nMaxChannels), within the communicator's
        // and, for ring and tree work, 32 KiB of traffic a channel (scheduleCollTasksToPlan);
        // where collsim runs another algorithm than the tuner's, its own count stands.
        let nchannels = match tuner.and_then(|h| h.channels) {
            Some(c)
                if nccl.is_some_and(|(a, p, _)| (a, p) == (algo, proto))
                    || tuner.is_some_and(|h| h.choice.is_none()) =>
            {
                if nvls {
                    c.min(self.nvls_channels())
                } else {
                    c.min(self.channels.len().max(1)).min(traffic_channels(bytes))
                }
            }
            _ => own,
        };
        Selection {
            algo,
            proto,
            nchannels,
            nccl_choice: nccl.map(|(a, p, _)| (a, p)),
            tuner_line: tuner.and_then(|h| h.line),
        }
    }

    /// Why NCCL would not run `algo`/`proto` for `coll` here (None: it is enabled).
    pub fn disabled_reason(&self, coll: Collective, algo: Algo, proto: Proto) -> Option<String> {
        if !tuning::algos_for(coll).contains(&algo) {
            return Some(format!("NCCL has no {} for {}", algo.name(), coll.name()));
        }
        if !self.env.algos_for(coll).contains(&algo) {
            return Some("excluded by NCCL_ALGO".into());
        }
        if !self.env.protos_for(coll).contains(&proto) {
            return Some("excluded by NCCL_PROTO".into());
        }
        if self.tuning.cost(coll, algo, proto).bw > 0.0 {
            return None;
        }
        Some(match algo {
            Algo::Nvls | Algo::NvlsTree | Algo::CollNetDirect | Algo::CollNetChain | Algo::Pat
                if proto != Proto::Simple =>
            {
                format!("{} runs Simple only", algo.name())
            }
            Algo::Nvls if self.nvls.is_none() => {
                "NVLS needs NVLink SHARP (NVSwitch gen3 with nvls = true, sm90+) and more than 2 GPUs per node".into()
            }
            Algo::Nvls if self.nnodes > 1 => "multi-node NVLS needs IB SHARP (CollNet), which is off".into(),
            Algo::Nvls if self.nvls.is_some_and(|g| g.bw_intra <= 0.0) => format!(
                "NVLS graph search found no speed: {} heads need (heads + 1) x speed within a GPU's NVLink bandwidth, below NCCL's slowest intra-node speed",
                self.nvls.map_or(0, |g| g.n_channels)
            ),
            Algo::Nvls => "NVLS is off (NCCL_NVLS_ENABLE=0)".into(),
            Algo::NvlsTree if self.nnodes == 1 => "NVLSTree needs more than one node".into(),
            Algo::NvlsTree => "NVLSTree needs NVLink SHARP on every node".into(),
            Algo::CollNetDirect if self.env.collnet_enable && self.sharp && self.nnodes >= 2 => {
                "CollNetDirect needs an NVSwitch and at most 8 GPUs per node".into()
            }
            Algo::CollNetDirect | Algo::CollNetChain => {
                "CollNet needs NCCL_COLLNET_ENABLE=1 and SHARP-capable switches (network.sharp = true)".into()
            }
            Algo::Pat => "PAT needs exactly one GPU per node across several nodes".into(),
            _ if proto == Proto::LL128 => {
                "LL128 needs NVLink inside nodes and NICs under the GPUs' PCIe switches".into()
            }
            _ => "disabled".into(),
        })
    }

    /// Whether NCCL would accept NCCL_ALGO for `coll` here: at least one allowed algorithm is
    /// enabled on this hardware; if not, why each is refused.
    pub fn check_algos(&self, coll: Collective) -> Result<(), String> {
        let algos = self.env.algos_for(coll);
        let enabled = algos
            .iter()
            .any(|&a| Proto::ALL.iter().any(|&p| self.disabled_reason(coll, a, p).is_none()));
        if enabled {
            return Ok(());
        }
        let reasons: Vec<String> = algos
            .iter()
            .map(|&a| {
                // The reason for Simple names the hardware; the others add "Simple only".
                self.disabled_reason(coll, a, Proto::Simple)
                    .or_else(|| self.disabled_reason(coll, a, Proto::LL))
                    .unwrap_or_else(|| "disabled".into())
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        Err(format!("NCCL would refuse it: {}", reasons.join("; ")))
    }

    /// CUDA channels of NVLS and NVLSTree calls ([`NvlsLayout`]).
    pub fn nvls_channels(&self) -> usize {
        self.nvls_layout.channels
    }

    /// How NCCL lays out NVLS and NVLSTree calls here.
    pub fn nvls_layout(&self) -> NvlsLayout {
        self.nvls_layout
    }

    /// Channels used for a ring call of `bytes` with `proto` (`topoGetAlgoInfo`'s trimming, then
    /// the ≥ 32 KiB-of-traffic-per-channel rule of `scheduleCollTasksToPlan`).
    pub fn channels_for(&self, bytes: u64, proto: Proto) -> usize {
        let nt = match proto {
            Proto::LL128 => self.env.ll128_nthreads,
            _ => self.env.nthreads,
        }
        .unwrap_or_else(|| proto.max_threads());
        let threshold: u64 = match proto {
            Proto::LL => 8 * self.nranks() as u64,
            Proto::LL128 => 8,
            Proto::Simple => 64,
        };
        let mut nc = self.channels.len().max(1) as u64;
        while nc > 1 && bytes < nc * nt * threshold {
            nc -= 1;
        }
        nc.min(traffic_channels(bytes) as u64) as usize
    }

    /// How data moves inside a node (P2P or SHM, GPUDirect RDMA or staging).
    pub fn paths(&self) -> Paths {
        self.paths
    }

    /// Worst path type of the ring's intra-node hops, and of its GPU–NIC legs.
    pub fn path_types(&self) -> (PathType, PathType) {
        (self.type_intra, self.type_inter)
    }

    /// The links of hop `i` of CUDA channel `c` on `node`: from ring position `i` (an index
    /// into the channel's `gpus`, not a GPU) to `i + 1`; the last position crosses to the next
    /// node (`to_node`) through the NICs, on the channel's own connection, or wraps on one node.
    pub fn hop_path(
        &self,
        cluster: &Cluster,
        c: usize,
        node: NodeId,
        i: usize,
        to_node: NodeId,
    ) -> (Vec<LinkId>, HopClass) {
        let channel = &self.channels[c];
        let g = &channel.gpus;
        if i + 1 < g.len() {
            let h = self.paths.gpu_hop(cluster, node, g[i], g[i + 1]);
            return (h.links, h.class);
        }
        match (channel.nic_out, channel.nic_in) {
            (Some(out), Some(inn)) if self.nnodes > 1 => {
                let mut p = self.paths.to_nic(cluster, node, g[i], out);
                p.extend(cluster.nic_to_nic((node, out), (to_node, inn), c));
                p.extend(self.paths.from_nic(cluster, to_node, inn, g[0]));
                (p, HopClass::Net)
            }
            _ => {
                let h = self.paths.gpu_hop(cluster, node, g[i], g[0]);
                (h.links, h.class)
            }
        }
    }
}

/// The most channels a call of `bytes` is spread over: 32 KiB of traffic (twice the bytes)
/// each at least (`MinTrafficPerChannel`, scheduleCollTasksToPlan in `src/enqueue.cc`).
fn traffic_channels(bytes: u64) -> usize {
    bytes.saturating_mul(2).div_ceil(32 * 1024).max(1).min(usize::MAX as u64) as usize
}

/// The per-call decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// The algorithm simulated.
    pub algo: Algo,
    /// The protocol simulated.
    pub proto: Proto,
    /// CUDA channels used.
    pub nchannels: usize,
    /// What NCCL's cost model picks among everything enabled (it may be an algorithm collsim
    /// does not simulate yet).
    pub nccl_choice: Option<(Algo, Proto)>,
    /// The line of NCCL_TUNER_CONFIG_FILE whose row set the algorithm and protocol, if one did.
    pub tuner_line: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nccl_settings_completion_offers_are_ones_collsim_reads() {
        for n in NCCL_SETTINGS {
            let (k, v) = n.split_once('=').unwrap();
            let ok = match k {
                "NCCL_ALGO" => Algo::parse(v).is_some(),
                _ => k == "NCCL_PROTO" && Proto::parse(v).is_some(),
            };
            assert!(ok, "{n}");
        }
    }
    use crate::config::resolve_topology;

    fn comm(preset: &str, nodes: usize, g: usize) -> Communicator {
        let (_, spec) = resolve_topology(preset, None).unwrap();
        let cluster = Cluster::new(&spec, nodes, g);
        Communicator::new(&cluster, &NcclEnv::default()).unwrap()
    }

    #[test]
    fn nvls_layout_follows_the_release_and_the_env() {
        const K: u64 = 1024;
        let layout = |preset: &str, nodes: usize, pairs: &[(&str, &str)]| {
            let (_, spec) = resolve_topology(preset, None).unwrap();
            let cluster = Cluster::new(&spec, nodes, 8);
            let env = NcclEnv::from_pairs(pairs.iter().copied()).unwrap();
            let c = Communicator::new(&cluster, &env).unwrap().nvls_layout();
            (c.channels, c.chunk / K, c.tree_max_chunk / K)
        };
        let v29 = [("version", "2.29.7")];
        // Before 2.30: 24 channels on one B200 node, 32 across; the tree's chunk halves from 4
        // nodes; Hopper keeps 16 channels.
        assert_eq!(layout("dgx-b200", 1, &v29), (24, 128, 128));
        assert_eq!(layout("dgx-b200", 2, &v29), (32, 128, 128));
        assert_eq!(layout("dgx-b200", 4, &v29), (32, 128, 64));
        assert_eq!(layout("dgx-h100", 4, &[]), (16, 128, 64));
        // 2.30 (ncclNvlsTreeSm100Tuning): 400 Gb/s NICs under the GPUs' PCIe switches give 64
        // KiB tree chunks from 2 nodes, and 24 channels past 2 nodes.
        assert_eq!(layout("dgx-b200", 1, &[]), (24, 128, 128));
        assert_eq!(layout("dgx-b200", 2, &[]), (32, 128, 64));
        assert_eq!(layout("dgx-b200", 4, &[]), (24, 128, 64));
        // The environment wins over both.
        let set = [
            ("NCCL_NVLS_NCHANNELS", "16"),
            ("NCCL_NVLS_CHUNKSIZE", "262144"),
            ("NCCL_NVLSTREE_MAX_CHUNKSIZE", "131072"),
        ];
        assert_eq!(layout("dgx-b200", 4, &set), (16, 256, 128));
        assert_eq!(layout("dgx-b200", 2, &set[1..2]), (32, 256, 64));
        // The communicator's CTA bounds clamp NVLS's channels, NCCL_NVLS_NCHANNELS's too.
        assert_eq!(layout("dgx-h100", 1, &[("NCCL_MAX_CTAS", "4")]).0, 4);
        assert_eq!(layout("dgx-h100", 1, &[("NCCL_MIN_CTAS", "32")]).0, 32);
        assert_eq!(layout("dgx-b200", 4, &[("NCCL_MAX_CTAS", "8"), set[0]]).0, 8);
    }

    #[test]
    fn channel_search_matches_the_reference_derivations() {
        let a = comm("dgx-a100", 1, 8);
        assert_eq!(a.ring_graph(), Graph { n_channels: 12, bw_intra: 20.0, bw_inter: 20.0 });
        assert_eq!(a.channels().len(), 24);
        let h = comm("dgx-h100", 1, 8);
        assert_eq!(h.ring_graph(), Graph { n_channels: 12, bw_intra: 30.0, bw_inter: 30.0 });
        assert_eq!(h.channels().len(), 24);
        assert_eq!(h.nvls_graph(), Some(Graph { n_channels: 8, bw_intra: 40.0, bw_inter: 60.0 }));
        let h2 = comm("dgx-h100", 2, 8);
        assert_eq!(h2.ring_graph(), Graph { n_channels: 8, bw_intra: 48.0, bw_inter: 48.0 });
        // 8 rings of 48 GB/s, doubled once: 16 CUDA channels, as AWS p5's NCCL 2.22 logs print
        // for the same 8 x 400 Gb/s NICs ("16 coll channels").
        assert_eq!(h2.channels().len(), 16);
        let a4 = comm("dgx-a100", 4, 8);
        assert_eq!(a4.ring_graph(), Graph { n_channels: 8, bw_intra: 24.0, bw_inter: 24.0 });
        assert_eq!(a4.channels().len(), 16);
        // Every NIC carries as many channels in as out.
        let ins: Vec<_> = h2.channels().iter().map(|c| c.nic_in.unwrap()).collect();
        for nic in (0..8).map(NicId) {
            assert_eq!(ins.iter().filter(|&&n| n == nic).count(), 2);
        }
    }
}
