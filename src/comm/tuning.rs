//! NCCL's cost model for choosing an algorithm and protocol (`src/graph/tuning.cc`,
//! NCCL 2.30.7), for AllReduce, AllGather, ReduceScatter, Broadcast and Reduce. The constants are NCCL's, restated from
//! `shared/reference/nccl-model.md` §2.2–2.6; the model is for *choosing* only — collsim times
//! the chosen collective mechanistically (`crate::collective`).

use super::Collective;
use super::{Algo, Graph, Proto};
use crate::hw::{Arch, CpuVendor};

/// The newest NCCL release whose tables collsim carries.
pub const NCCL_VERSION: &str = "2.30.7";

/// NCCL releases whose cost-model constants differ (`nccl-model.md` §2.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum NcclVersion {
    /// 2.18.x and 2.19–2.20 (the 2.18.6 tables).
    V2_18,
    /// 2.21.x and 2.22.x (the 2.21.5 tables).
    V2_21,
    /// 2.23 to 2.27.
    V2_23,
    /// 2.28 to 2.30 (the default).
    V2_28,
}

impl NcclVersion {
    /// Parses "2.26", "2.18.6", "2.30.7".
    pub fn parse(s: &str) -> Option<NcclVersion> {
        Some(match NcclVersion::minor(s)? {
            0..18 => return None,
            18..=20 => NcclVersion::V2_18,
            21 | 22 => NcclVersion::V2_21,
            23..=27 => NcclVersion::V2_23,
            28..=30 => NcclVersion::V2_28,
            _ => return None,
        })
    }

    /// The minor number of a 2.x release ("2.29.2" → 29); None for anything else.
    pub fn minor(s: &str) -> Option<u32> {
        let mut it = s.trim().split('.');
        let (major, minor) = (it.next()?.parse::<u32>().ok()?, it.next()?.parse::<u32>().ok()?);
        (major == 2).then_some(minor)
    }

    /// The release whose tables stand for this range.
    pub fn tables(self) -> &'static str {
        match self {
            NcclVersion::V2_18 => "2.18.6",
            NcclVersion::V2_21 => "2.21.5",
            NcclVersion::V2_23 => "2.26.2",
            NcclVersion::V2_28 => NCCL_VERSION,
        }
    }
}

/// An NCCL 2.x release as (minor, patch), ordered: `Release(29, 7)` is 2.29.7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32, pub u32);

impl Release {
    /// The release a version string names ("2.29.2", "2.29"; None for anything else). A
    /// release given without its patch is taken as the last patch of that minor whose tables
    /// collsim carries (2.28.9, 2.29.7, 2.30.7; 99 for the others: their tables do not move
    /// within the minor).
    pub fn parse(s: &str) -> Option<Release> {
        let minor = NcclVersion::minor(s)?;
        let patch = s.trim().split('.').nth(2).and_then(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let last = match minor {
            28 => 9,
            29 | 30 => 7,
            _ => 99,
        };
        Some(Release(minor, patch.unwrap_or(last)))
    }
}

/// The release collsim models by default ([`NCCL_VERSION`]).
pub const DEFAULT_RELEASE: Release = Release(30, 7);

/// Base latency per algorithm × protocol, µs (`baseLatencies`), in [`Algo`] index order.
const BASE_LAT: [[f64; 3]; 7] = [
    [6.8, 14.0, 8.4], // Tree
    [6.6, 14.0, 8.4], // Ring
    [0.0, 0.0, 0.0],  // CollNetDirect
    [0.0, 0.0, 0.0],  // CollNetChain
    [0.0, 0.0, 0.0],  // NVLS
    [0.0, 0.0, 0.0],  // NVLSTree
    [8.0, 8.0, 8.0],  // PAT
];

/// Per-hop hardware latency, µs (`hwLatencies[link][algo][proto]`): NVLINK, PCI, NET.
const HW_LAT: [[[f64; 3]; 7]; 3] = [
    [
        [0.6, 1.25, 4.0],
        [0.6, 1.9, 3.4],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [1.0, 1.9, 4.0],
        [1.0, 2.5, 5.7],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [5.0, 8.5, 14.0],
        [2.7, 4.0, 14.0],
        [0.0, 0.0, 31.0],
        [0.0, 0.0, 30.0],
        [0.0, 0.0, 18.0],
        [0.0, 0.0, 20.9],
        [0.0, 0.0, 14.0],
    ],
];

/// `llMaxBws` (GB/s) rows: Volta/Intel, Ampere/AMD, Hopper, Blackwell × N1, N2, N4.
const LL_MAX_BW: [[f64; 3]; 4] =
    [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [282.0, 90.0, 70.0]];
/// `perChMaxRingLL128Bws` by arch × N1, N2, N4 (Blackwell's by release:
/// [`TuningInput::ring_ll128_max`]).
const RING_LL128_MAX: [[f64; 3]; 4] = [[20.0; 3], [20.0; 3], [36.7; 3], [40.0; 3]];
/// `perChMaxTreeLL128Bws`.
const TREE_LL128_MAX: [[f64; 3]; 4] =
    [[20.0; 3], [20.0; 3], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]];
/// `perChMaxTreeBws`.
const TREE_MAX: [[f64; 3]; 4] =
    [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]];
/// `perChMaxNVLSTreeBws` (2.30; from 2.28 only, and Blackwell's by release:
/// [`TuningInput::nvls_tree_max`]).
const NVLS_TREE_MAX: [[f64; 3]; 4] =
    [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0]];
/// `nvlsEfficiency` by arch.
const NVLS_EFF: [f64; 4] = [0.0, 0.0, 0.85, 0.74];

/// NCCL's NVLS efficiency for an architecture (`nvlsEfficiency`): the share of NVLink bandwidth
/// multimem loads and stores achieve.
pub fn nvls_efficiency(arch: Arch) -> f64 {
    NVLS_EFF[arch_index(arch)]
}

/// Tree AllReduce bandwidth correction by log2(bytes/64), indices 0…22, per protocol.
const TREE_CORRECTION: [[f64; 23]; 3] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9,
    ],
];

/// Everything the cost model looks at.
#[derive(Debug, Clone)]
pub struct TuningInput {
    /// Lowest GPU architecture in the communicator.
    pub arch: Arch,
    /// CPU vendor of the hosts.
    pub cpu: CpuVendor,
    /// Nodes.
    pub nnodes: usize,
    /// Ranks.
    pub nranks: usize,
    /// Ring search result.
    pub ring: Graph,
    /// Tree search result.
    pub tree: Graph,
    /// NVLS search result, when NVLS is supported.
    pub nvls: Option<Graph>,
    /// Whether the intra-node path of the graphs is NVLink (else PCI).
    pub intra_nvlink: bool,
    /// CUDA channels of the communicator.
    pub nchannels: usize,
    /// Whether LL128 is enabled (hardware gating and NCCL_PROTO).
    pub ll128: bool,
    /// Whether NVLS is enabled (hardware and NCCL_NVLS_ENABLE).
    pub nvls_enabled: bool,
    /// Whether PAT is enabled (NCCL_PAT_ENABLE auto: one GPU per node, host networking).
    pub pat_enabled: bool,
    /// Which release's constants to use.
    pub version: NcclVersion,
    /// The release (2.minor.patch), for the constants that changed inside one of
    /// [`NcclVersion`]'s ranges.
    pub release: Release,
    /// Whether CollNet (IB SHARP) is enabled: NCCL_COLLNET_ENABLE=1, SHARP-capable switches,
    /// at least NCCL_COLLNET_NODE_THRESHOLD (2) nodes, at most 8 GPUs per node.
    pub collnet_enabled: bool,
    /// Whether the node has an NVSwitch (CollNetDirect needs one).
    pub nvswitch: bool,
}

/// Which algorithms NCCL has for a collective (§2.4).
pub fn algos_for(coll: Collective) -> &'static [Algo] {
    match coll {
        Collective::AllReduce => &[
            Algo::Tree,
            Algo::Ring,
            Algo::CollNetDirect,
            Algo::CollNetChain,
            Algo::Nvls,
            Algo::NvlsTree,
        ],
        Collective::AllGather | Collective::ReduceScatter => {
            &[Algo::Ring, Algo::CollNetDirect, Algo::Nvls, Algo::Pat]
        }
        _ => &[Algo::Ring],
    }
}

/// One entry of NCCL's table: latency (µs) and algorithm bandwidth (GB/s); bw 0 = disabled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Latency, µs.
    pub lat_us: f64,
    /// Algorithm bandwidth, GB/s.
    pub bw: f64,
}

fn arch_index(a: Arch) -> usize {
    match a {
        Arch::Volta => 0,
        Arch::Ampere => 1,
        Arch::Hopper => 2,
        Arch::Blackwell => 3,
    }
}

fn log2i(n: usize) -> f64 {
    (usize::BITS - 1 - n.max(1).leading_zeros()) as f64
}

impl TuningInput {
    /// `perChMaxRingLL128Bws[arch][ni]` of this release (GB/s per channel). Blackwell's moved
    /// from release to release (NVIDIA/nccl `src/graph/tuning.cc` at each tag): 2·36.7 on
    /// every node count from 2.25 to 2.28.3, {2·36.7, 34.6, 2·36.7} in 2.28.7-2.28.9, {34.5,
    /// 34.6, 34.5} in 2.29.2-2.29.3, 40 from 2.29.7.
    fn ring_ll128_max(&self, arch: usize, ni: usize) -> f64 {
        if arch != arch_index(Arch::Blackwell) {
            return RING_LL128_MAX[arch][ni];
        }
        let r = self.release;
        if r < Release(28, 7) {
            73.4
        } else if r < Release(29, 0) {
            [73.4, 34.6, 73.4][ni]
        } else if r < Release(29, 7) {
            [34.5, 34.6, 34.5][ni]
        } else {
            RING_LL128_MAX[arch][ni]
        }
    }

    /// `perChMaxNVLSTreeBws[arch][ni]` of this release (GB/s per channel), `None` before
    /// 2.28, which had no such cap (NVLSTree's bandwidth there is the graph's, halved across
    /// more than two nodes). Blackwell on more than two nodes: 43.1 in 2.28.3-2.28.7, 43.8 in
    /// 2.28.9-2.29.7, 80 from 2.30.3.
    fn nvls_tree_max(&self, arch: usize, ni: usize) -> Option<f64> {
        let r = self.release;
        if r < Release(28, 0) {
            return None;
        }
        let blackwell_n4 = arch == arch_index(Arch::Blackwell) && ni == 2;
        Some(if blackwell_n4 && r < Release(28, 9) {
            43.1
        } else if blackwell_n4 && r < Release(30, 0) {
            43.8
        } else {
            NVLS_TREE_MAX[arch][ni]
        })
    }

    fn node_index(&self) -> usize {
        match self.nnodes {
            1 => 0,
            2 => 1,
            _ => 2,
        }
    }

    /// What NCCL's tuning model lets a Tree all-reduce's channels carry at most, as bus
    /// bandwidth (GB/s): the tree graph's channels × the per-channel maximum of the GPU
    /// generation and node count (`perChMaxTreeBws`, and `perChMaxTreeLL128Bws` for LL128;
    /// NVIDIA/nccl `src/graph/tuning.cc`), NCCL's developers' measurement of what one channel's
    /// CTA sustains reducing and forwarding through a tree. `None` for LL, which NCCL caps by
    /// `llMaxBws` as a whole. (The simulation applies the Simple one: `collective::tree`.)
    pub fn tree_bus_cap(&self, proto: Proto) -> Option<f64> {
        let (arch, ni) = (arch_index(self.arch), self.node_index());
        let per_channel = match proto {
            Proto::Simple => TREE_MAX[arch][ni],
            Proto::LL128 => TREE_LL128_MAX[arch][ni],
            Proto::LL => return None,
        };
        Some(self.tree.n_channels as f64 * per_channel)
    }

    /// What NCCL's tuning model lets an NVLSTree call's channels carry at most across nodes, as
    /// bus bandwidth (GB/s): the NVLS graph's channels × `perChMaxNVLSTreeBws` of the GPU
    /// generation, node count and release (NVIDIA/nccl `src/graph/tuning.cc`). `None` on one
    /// node, without NVLS, or before 2.28.
    pub fn nvls_tree_bus_cap(&self) -> Option<f64> {
        let g = self.nvls.as_ref().filter(|_| self.nnodes > 1)?;
        let per_channel = self.nvls_tree_max(arch_index(self.arch), self.node_index())?;
        Some(g.n_channels as f64 * per_channel)
    }

    fn ll_max(&self) -> f64 {
        let row = if self.nnodes == 1 {
            arch_index(self.arch)
        } else if self.cpu == CpuVendor::Amd {
            1
        } else {
            0
        };
        if self.version == NcclVersion::V2_18 && row == 2 && self.nnodes == 1 {
            return 87.7;
        }
        LL_MAX_BW[row][self.node_index()]
    }

    /// `hwLatencies` of this NCCL release (§2.10).
    fn hw_lat(&self, link: usize, a: usize, p: usize) -> f64 {
        let v = self.version;
        let (tree, nvls, nvls_tree, cd, cc) = (
            Algo::Tree as usize,
            Algo::Nvls as usize,
            Algo::NvlsTree as usize,
            Algo::CollNetDirect as usize,
            Algo::CollNetChain as usize,
        );
        let simple = Proto::Simple as usize;
        match (v, a, p) {
            (NcclVersion::V2_18, _, _) if a == tree && p == simple => [4.0, 6.0, 14.0][link],
            (NcclVersion::V2_21, _, _) if a == tree && p == simple => 28.0,
            (NcclVersion::V2_18, _, _) if a == nvls && p == simple && link == 0 => 0.0,
            (NcclVersion::V2_18, _, _) if a == nvls_tree && p == simple && link == 2 => 19.0,
            (NcclVersion::V2_21 | NcclVersion::V2_23, _, _)
                if a == nvls_tree && p == simple && link == 2 =>
            {
                14.0
            }
            (NcclVersion::V2_18, _, _) if a == cd && p == simple && link != 1 => {
                [8.0, 0.0, 10.7][link]
            }
            (NcclVersion::V2_18, _, _) if a == cc && p == simple && link != 1 => {
                [4.75, 0.0, 14.0][link]
            }
            _ => HW_LAT[link][a][p],
        }
    }

    /// The per-step part of NCCL's latency for a Ring AllReduce, AllGather or ReduceScatter
    /// (µs; 0 for other collectives): every one of its `nsteps` steps pays a hop's latency, the
    /// inter-node ones the network's (`hwLat[NET]`), the others the intra-node hop's but, across
    /// nodes, at least the network overhead of launching a step (`ncclTopoTuneModel`, NVIDIA/nccl
    /// `src/graph/tuning.cc` v2.29.7-1: "Inter-node rings still have to launch nsteps * net
    /// overhead"; 1 µs a step on Intel hosts, 2 on AMD, three times that under Simple).
    pub fn ring_steps_us(&self, coll: Collective, proto: Proto) -> f64 {
        let (allreduce, ag_rs) = (
            coll == Collective::AllReduce,
            matches!(coll, Collective::AllGather | Collective::ReduceScatter),
        );
        if !allreduce && !ag_rs {
            return 0.0;
        }
        let (a, p) = (Algo::Ring as usize, proto as usize);
        let n = self.nranks as f64;
        let nnodes = self.nnodes;
        let ppn = (self.nranks / nnodes.max(1)).max(1);
        let nsteps = if allreduce { 2.0 * (n - 1.0) } else { n - 1.0 };
        let link = if self.intra_nvlink { 0 } else { 1 };
        let intra_lat = self.hw_lat(link, a, p);
        let inter_lat =
            if ppn == 1 { self.hw_lat(2, Algo::Tree as usize, p) } else { self.hw_lat(2, a, p) };
        // Before 2.23 the ring latency counted 2·nNodes inter-node steps.
        let nodes = nnodes as f64 - if self.version <= NcclVersion::V2_21 { 0.0 } else { 1.0 };
        let ninter = match (nnodes > 1, allreduce) {
            (false, _) => 0.0,
            (true, true) => 2.0 * nodes,
            (true, false) => nodes,
        };
        let net_ov = if nnodes == 1 { 0.0 } else { self.net_overhead(proto) };
        (nsteps - ninter) * intra_lat.max(net_ov) + ninter * inter_lat
    }

    /// NCCL's network overhead of launching a ring step across nodes (µs): 1 on Intel hosts, 2
    /// on AMD (`getNetOverhead`), three times that under Simple.
    fn net_overhead(&self, proto: Proto) -> f64 {
        let base = if self.cpu == CpuVendor::Amd { 2.0 } else { 1.0 };
        if proto == Proto::Simple { 3.0 * base } else { base }
    }

    /// What NCCL's tuning model lets a Ring/LL128 call's channels carry at most, as bus
    /// bandwidth (GB/s): the ring graph's channels × `perChMaxRingLL128Bws` of the GPU
    /// generation (NVIDIA/nccl `src/graph/tuning.cc` v2.29.7-1), NCCL's developers' measurement
    /// of what one channel's CTA sustains under LL128. `None` for other protocols.
    pub fn ring_ll128_bus_cap(&self, proto: Proto) -> Option<f64> {
        (proto == Proto::LL128).then(|| {
            self.ring.n_channels as f64
                * self.ring_ll128_max(arch_index(self.arch), self.node_index())
        })
    }

    /// What every step of a Ring AllReduce, AllGather or ReduceScatter across nodes costs in
    /// NCCL's cost model beyond the bytes, whatever its hop: the intra-node hop's latency, but at
    /// least the network overhead of launching a step (`ncclTopoTuneModel`, NVIDIA/nccl
    /// `src/graph/tuning.cc` v2.29.7-1: "Inter-node rings still have to launch nsteps * net
    /// overhead"; 1 µs on Intel hosts, 2 on AMD, three times that under Simple) — and the number
    /// of steps. `None` on one node or for other collectives.
    pub fn ring_step_overhead(&self, coll: Collective, proto: Proto) -> Option<(f64, usize)> {
        let n = self.nranks;
        let nsteps = match coll {
            Collective::AllReduce => 2 * (n.max(1) - 1),
            Collective::AllGather | Collective::ReduceScatter => n.max(1) - 1,
            _ => return None,
        };
        if self.nnodes < 2 || nsteps == 0 {
            return None;
        }
        let link = if self.intra_nvlink { 0 } else { 1 };
        let intra_lat = self.hw_lat(link, Algo::Ring as usize, proto as usize);
        Some((intra_lat.max(self.net_overhead(proto)), nsteps))
    }

    /// NCCL's latency and bandwidth for `coll` with `algo`/`proto`.
    pub fn cost(&self, coll: Collective, algo: Algo, proto: Proto) -> Cost {
        let off = Cost { lat_us: 0.0, bw: 0.0 };
        if !algos_for(coll).contains(&algo) {
            return off;
        }
        let (a, p, ni) = (algo as usize, proto as usize, self.node_index());
        let arch = arch_index(self.arch);
        let n = self.nranks as f64;
        let nnodes = self.nnodes;
        let ppn = (self.nranks / nnodes.max(1)).max(1);
        let allreduce = coll == Collective::AllReduce;
        let ag_rs = matches!(coll, Collective::AllGather | Collective::ReduceScatter);
        let nsteps = match coll {
            Collective::AllReduce => 2.0 * (n - 1.0),
            Collective::AllGather | Collective::ReduceScatter => n - 1.0,
            _ => n,
        };
        let link = if self.intra_nvlink { 0 } else { 1 };
        let hw = |l: usize, a: usize, p: usize| self.hw_lat(l, a, p);
        let intra_lat = hw(link, a, p);
        let inter_lat = if ppn == 1 { hw(2, Algo::Tree as usize, p) } else { hw(2, a, p) };
        let v = self.version;
        let nodes_log = log2i(nnodes);
        match algo {
            Algo::Ring | Algo::Tree => {
                let g = if algo == Algo::Ring { &self.ring } else { &self.tree };
                let per_ch = if nnodes <= 2 { g.bw_intra } else { g.bw_inter };
                let nch = g.n_channels as f64;
                let mut bus = nch * per_ch;
                if algo == Algo::Ring {
                    match proto {
                        Proto::LL => {
                            let f = match v {
                                NcclVersion::V2_18
                                    if nnodes > 1
                                        && matches!(
                                            coll,
                                            Collective::AllReduce | Collective::Reduce
                                        ) =>
                                {
                                    0.25
                                }
                                NcclVersion::V2_18 => 1.0 / 3.0,
                                _ => 0.5,
                            };
                            bus = self.ll_max().min(f * bus);
                        }
                        Proto::LL128 => {
                            let f = if v <= NcclVersion::V2_21 && ppn < 2 { 0.7 } else { 0.92 };
                            bus = (f * bus).min(nch * self.ring_ll128_max(arch, ni));
                        }
                        Proto::Simple => {}
                    }
                } else {
                    bus = (0.92 * bus).min(nch * TREE_MAX[arch][ni]);
                    match proto {
                        Proto::LL => bus = (bus / 3.8).min(self.ll_max()),
                        Proto::LL128 => {
                            let f = if nnodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                            bus = (bus * f).min(nch * TREE_LL128_MAX[arch][ni]);
                        }
                        Proto::Simple => {}
                    }
                }
                if proto == Proto::LL128 && !self.ll128 {
                    return off;
                }
                let bw = if algo == Algo::Ring { bus * n / nsteps } else { bus * 0.5 };
                let mut lat = BASE_LAT[a][p];
                if algo == Algo::Tree && proto == Proto::Simple && v <= NcclVersion::V2_21 {
                    lat = 0.0;
                }
                if algo == Algo::Ring && (allreduce || ag_rs) {
                    lat += self.ring_steps_us(coll, proto);
                } else if algo == Algo::Ring {
                    // Broadcast / Reduce on identical channels: one hop latency.
                    let l = if nnodes > 1 { 2 } else { link };
                    lat += HW_LAT[l][Algo::Ring as usize][p];
                } else {
                    lat += 2.0 * ((ppn as f64 - 1.0) * intra_lat + nodes_log * inter_lat);
                }
                Cost { lat_us: lat, bw }
            }
            Algo::Nvls | Algo::NvlsTree => {
                let Some(g) = &self.nvls else { return off };
                if proto != Proto::Simple || !self.nvls_enabled || g.n_channels < 2 {
                    return off;
                }
                // Multi-node NVLS needs IB SHARP (CollNet), which is off; NVLSTree needs > 1 node.
                if (algo == Algo::Nvls && nnodes > 1) || (algo == Algo::NvlsTree && nnodes == 1) {
                    return off;
                }
                if ag_rs && ppn > 32 {
                    return off;
                }
                let nch = g.n_channels as f64;
                let eff = g.bw_intra * NVLS_EFF[arch] * (nch - 1.0) / nch;
                let intra =
                    if allreduce { eff * 2.0 } else { eff * (ppn as f64 - 1.0) / ppn as f64 };
                let inter =
                    g.bw_inter * if algo == Algo::NvlsTree && nnodes <= 2 { 2.0 } else { 1.0 };
                let mut bw = intra.min(inter);
                if algo == Algo::NvlsTree
                    && let Some(cap) = self.nvls_tree_max(arch, ni)
                {
                    bw = bw.min(cap);
                }
                let bus = nch * bw;
                let lat = if algo == Algo::Nvls {
                    HW_LAT[0][a][p] + if nnodes > 1 { inter_lat } else { 0.0 }
                } else {
                    HW_LAT[0][a][p] + 2.0 * nodes_log * inter_lat
                };
                // AG/RS with a non-ring algorithm store the busBw itself.
                Cost { lat_us: lat, bw: if allreduce { bus * n / nsteps } else { bus } }
            }
            Algo::Pat => {
                if !ag_rs || proto != Proto::Simple || !self.pat_enabled || v < NcclVersion::V2_23 {
                    return off;
                }
                let nch = self.ring.n_channels as f64;
                let per_ch = if nnodes <= 2 { self.ring.bw_intra } else { self.ring.bw_inter };
                let bus = nch * per_ch * if v == NcclVersion::V2_23 { 0.85 } else { 0.75 };
                let lat = BASE_LAT[a][p] + nodes_log * inter_lat / 3.5 + 2.8 * n;
                Cost { lat_us: lat, bw: bus }
            }
            Algo::CollNetDirect | Algo::CollNetChain => {
                if !self.collnet_enabled
                    || proto != Proto::Simple
                    || (algo == Algo::CollNetDirect && !self.nvswitch)
                    || (coll != Collective::AllReduce && algo == Algo::CollNetChain)
                {
                    return off;
                }
                // CollNet graphs search like the ring's; bandwidth per channel bwIntra.
                let g = &self.ring;
                let nch = g.n_channels as f64;
                let mut bus = nch * g.bw_intra;
                if algo == Algo::CollNetDirect {
                    if ag_rs {
                        bus = ppn as f64 * g.bw_intra.min(0.9 * g.bw_inter);
                    } else {
                        let r = ppn as f64 / nch;
                        bus /= (r - (r - 1.0) / 2.0).max(1.0);
                        if self.arch >= Arch::Hopper {
                            bus *= 0.85;
                        }
                    }
                }
                let lat = if algo == Algo::CollNetDirect {
                    2.0 * ((ppn as f64 - 1.0).min(1.0) * intra_lat + 0.4 * (ppn as f64 - 1.0))
                        + inter_lat
                } else {
                    2.0 * (ppn as f64 - 1.0) * intra_lat + inter_lat
                };
                Cost { lat_us: lat, bw: if ag_rs { bus } else { bus * 0.5 } }
            }
        }
    }

    /// NCCL's predicted time in µs, or `None` when the combination is disabled.
    pub fn time_us(&self, coll: Collective, algo: Algo, proto: Proto, bytes: u64) -> Option<f64> {
        let c = self.cost(coll, algo, proto);
        if c.bw <= 0.0 {
            return None;
        }
        let mut bw = c.bw;
        let mut lat = c.lat_us;
        if algo == Algo::Tree && coll == Collective::AllReduce {
            let idx = log2i((bytes / 64) as usize) as usize;
            if bytes >= 64 && idx < 23 {
                bw *= TREE_CORRECTION[proto as usize][idx];
            } else if bytes < 64 {
                bw *= TREE_CORRECTION[proto as usize][0];
            }
        }
        if algo == Algo::Ring
            && coll == Collective::AllReduce
            && proto == Proto::Simple
            && self.nnodes > 1
            && bytes / (self.nchannels.max(1) as u64 * self.nranks as u64) >= 64
        {
            lat *= if self.arch == Arch::Volta { 1.9 } else { 1.4 };
        }
        Some(lat + bytes as f64 / (1000.0 * bw))
    }

    /// The fastest enabled (algorithm, protocol) for `bytes`, iterating in NCCL's order
    /// (algorithms by index, then LL, LL128, Simple; strictly smaller time wins).
    pub fn choose(
        &self,
        coll: Collective,
        bytes: u64,
        algos: &[Algo],
        protos: &[Proto],
    ) -> Option<(Algo, Proto, f64)> {
        let mut best: Option<(Algo, Proto, f64)> = None;
        for &a in Algo::ALL.iter().filter(|a| algos.contains(a)) {
            for &p in Proto::ALL.iter().filter(|p| protos.contains(p)) {
                if let Some(t) = self.time_us(coll, a, p, bytes)
                    && best.is_none_or(|(_, _, bt)| t < bt)
                {
                    best = Some((a, p, t));
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AR: Collective = Collective::AllReduce;

    fn dgx(arch: Arch, ring: Graph, nvls: Option<Graph>) -> TuningInput {
        TuningInput {
            arch,
            cpu: CpuVendor::Amd,
            nnodes: 1,
            nranks: 8,
            ring,
            tree: ring,
            nvls,
            intra_nvlink: true,
            nchannels: 24,
            ll128: true,
            nvls_enabled: true,
            pat_enabled: false,
            version: NcclVersion::V2_28,
            release: DEFAULT_RELEASE,
            collnet_enabled: false,
            nvswitch: true,
        }
    }

    #[test]
    fn versions_parse_and_change_the_tables() {
        assert_eq!(NcclVersion::parse("2.18.6"), Some(NcclVersion::V2_18));
        assert_eq!(NcclVersion::parse("2.22"), Some(NcclVersion::V2_21));
        assert_eq!(NcclVersion::parse("2.26.2"), Some(NcclVersion::V2_23));
        assert_eq!(NcclVersion::parse("2.30"), Some(NcclVersion::V2_28));
        assert_eq!(NcclVersion::parse("2.17"), None);
        assert_eq!(NcclVersion::parse("3.0"), None);
        // §2.10: Tree/Simple NVLink latency 4 (2.18), 28 (2.21), 4 (2.23+); Ring LL on one
        // node ×1/3 before 2.21; Hopper's one-node LL cap 87.7 in 2.18.
        let g = Graph { n_channels: 12, bw_intra: 20.0, bw_inter: 20.0 };
        let mut t = dgx(Arch::Ampere, g, None);
        let tree = |t: &TuningInput| t.cost(AR, Algo::Tree, Proto::Simple).lat_us;
        t.version = NcclVersion::V2_18;
        assert!((tree(&t) - 2.0 * 7.0 * 4.0).abs() < 1e-9);
        let ll = t.cost(AR, Algo::Ring, Proto::LL).bw * 14.0 / 8.0;
        assert!((ll - 80.0).abs() < 1e-9, "{ll}");
        t.version = NcclVersion::V2_21;
        assert!((tree(&t) - 2.0 * 7.0 * 28.0).abs() < 1e-9);
        t.version = NcclVersion::V2_23;
        assert!((tree(&t) - (8.4 + 2.0 * 7.0 * 4.0)).abs() < 1e-9);
        let mut h =
            dgx(Arch::Hopper, Graph { n_channels: 12, bw_intra: 30.0, bw_inter: 30.0 }, None);
        h.version = NcclVersion::V2_18;
        assert!((h.cost(AR, Algo::Ring, Proto::LL).bw * 14.0 / 8.0 - 87.7).abs() < 1e-9);
    }

    #[test]
    fn blackwell_caps_follow_the_release() {
        // NVIDIA/nccl tuning.cc at each tag: NVLSTree on more than two nodes none before 2.28,
        // 43.1 GB/s a channel in 2.28.3-2.28.7, 43.8 in 2.28.9-2.29.7, 80 from 2.30.3; Ring/LL128
        // 73.4 to 2.28.3, {73.4, 34.6, 73.4} in 2.28.7-2.28.9, {34.5, 34.6, 34.5} in
        // 2.29.2-2.29.3, 40 from 2.29.7.
        let g = Graph { n_channels: 16, bw_intra: 40.0, bw_inter: 40.0 };
        let mut b = dgx(Arch::Blackwell, g, None);
        let bw = arch_index(Arch::Blackwell);
        let cases: [(&str, Option<f64>, [f64; 3]); 9] = [
            ("2.26.2", None, [73.4; 3]),
            ("2.27", None, [73.4; 3]),
            ("2.28.3", Some(43.1), [73.4; 3]),
            ("2.28.7", Some(43.1), [73.4, 34.6, 73.4]),
            ("2.28", Some(43.8), [73.4, 34.6, 73.4]),
            ("2.29.2", Some(43.8), [34.5, 34.6, 34.5]),
            ("2.29.7", Some(43.8), [40.0; 3]),
            ("2.29", Some(43.8), [40.0; 3]),
            ("2.30", Some(80.0), [40.0; 3]),
        ];
        for (v, nvls_tree, ll128) in cases {
            b.release = Release::parse(v).unwrap();
            assert_eq!(b.nvls_tree_max(bw, 2), nvls_tree, "{v}");
            assert_eq!([0, 1, 2].map(|ni| b.ring_ll128_max(bw, ni)), ll128, "{v}");
        }
        // Hopper's are the same in every release that has them.
        b.release = Release::parse("2.28.3").unwrap();
        assert_eq!(b.nvls_tree_max(arch_index(Arch::Hopper), 2), Some(45.5));
        assert_eq!(b.ring_ll128_max(arch_index(Arch::Hopper), 2), 36.7);
        b.release = Release::parse("2.22.3").unwrap();
        assert_eq!(b.nvls_tree_max(arch_index(Arch::Hopper), 2), None);
        assert_eq!(Release::parse("2.29.2+cuda12.9"), Some(Release(29, 2)));
        assert_eq!(Release::parse("3.0"), None);
    }

    #[test]
    fn reproduces_the_reference_worked_examples() {
        // nccl-model.md §2.9, DGX-A100: Ring/LL 15.0 us & 87.7 GB/s busbw, Ring/Simple 56.0 & 240.
        let g = Graph { n_channels: 12, bw_intra: 20.0, bw_inter: 20.0 };
        let t = dgx(Arch::Ampere, g, None);
        let busbw = |c: Cost| c.bw * 2.0 * 7.0 / 8.0;
        let ll = t.cost(AR, Algo::Ring, Proto::LL);
        assert!((ll.lat_us - 15.0).abs() < 1e-9 && (busbw(ll) - 87.7).abs() < 1e-9);
        let simple = t.cost(AR, Algo::Ring, Proto::Simple);
        assert!((simple.lat_us - 56.0).abs() < 1e-9 && (busbw(simple) - 240.0).abs() < 1e-9);
        let ll128 = t.cost(AR, Algo::Ring, Proto::LL128);
        assert!((ll128.lat_us - 40.6).abs() < 1e-9 && (busbw(ll128) - 220.8).abs() < 1e-9);
        // Choice: LL up to 2 MiB, LL128 4–16 MiB, Simple from 32 MiB.
        let pick = |b: u64| t.choose(AR, b, &[Algo::Ring], &Proto::ALL).unwrap().1;
        assert_eq!(pick(2 << 20), Proto::LL);
        assert_eq!(pick(4 << 20), Proto::LL128);
        assert_eq!(pick(16 << 20), Proto::LL128);
        assert_eq!(pick(32 << 20), Proto::Simple);
        // DGX-H100 NVLS: 476 GB/s busbw, 25 us.
        let h = dgx(
            Arch::Hopper,
            Graph { n_channels: 12, bw_intra: 30.0, bw_inter: 30.0 },
            Some(Graph { n_channels: 8, bw_intra: 40.0, bw_inter: 60.0 }),
        );
        let nvls = h.cost(AR, Algo::Nvls, Proto::Simple);
        assert!((busbw(nvls) - 476.0).abs() < 1e-6 && (nvls.lat_us - 25.0).abs() < 1e-9);
        assert_eq!(h.choose(AR, 1 << 20, &Algo::ALL, &Proto::ALL).unwrap().0, Algo::Ring);
        assert_eq!(h.choose(AR, 2 << 20, &Algo::ALL, &Proto::ALL).unwrap().0, Algo::Nvls);
    }
}
