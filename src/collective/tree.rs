//! Tree AllReduce, as NCCL runs it (`nccl-model.md` §3.5, §4.2), timed on the flow-level
//! network.
//!
//! Each channel's tree is a chain of the node's GPUs (in the channel's order) whose first GPU
//! links to the parent node; across nodes the nodes form NCCL's double binary tree — the first
//! half of the channels use one binary tree, the second half its mirror (even node counts) or
//! its shift by one (odd) — and a node's children attach to its first GPU and its second
//! (NCCL's balanced pattern). Data goes in chunks: a rank sends chunk k to its parent once every
//! child's chunk k has arrived (reduce), the root turns it around, and each rank forwards it to
//! all its children as it arrives (broadcast); reduce and broadcast of different chunks overlap.
//! Every transfer is a flow on the hop's links; arrivals lag by the path and protocol latency.
//! Across nodes a step is one network message, whatever the protocol: the sender's proxy posts
//! it once the GPU has written all of it (NVIDIA/nccl v2.29.7-1 `src/transport/net.cc`,
//! sendProxyProgress: an LL step once every line's flag is set, an LL128 step once the GPU has
//! bumped the tail at the end of its step, `prims_ll128.h` postSend), so under LL and LL128
//! the units of a step stream over NVLink but cross the network together.
//!
//! Channels differ in their NICs and in which tree they follow, so every channel is built. In
//! [`Mode::Aggregated`] (and [`Mode::Auto`] above `AGGREGATE_ABOVE` transfers) one pipeline per
//! class of equivalent ones runs on the network, standing for the others ([`symmetry`]); where
//! that is too costly, a pipeline estimate: steady-state max-min rates of every edge busy at
//! once set the pace, and the first chunk's longest path up and down the fill.

use super::run::{
    Algorithm, Call, Closed, Ctx, EXACT_STEADY_MAX, Form, Load, Signal, solve_max_min,
    steady_with_reserved,
};
use super::{Mode, run, symmetry};
use crate::comm::{Communicator, HopClass, Proto, RingChannel, Selection};
use crate::hw::{Cluster, GpuId, NicId, NodeId, Vertex};
use std::borrow::Cow;

use crate::net::solver::{EqualShares, equal_shares};
use crate::net::{LinkId, PathId};
use crate::units::{Bytes, Time};

/// Aggregated mode's event budget: above this many flow transfers, the pipeline estimate. At
/// 400,000 an 8 GiB NVLSTree call on two p5 nodes took 0.5 s, too slow for calibrate's fits,
/// which simulate every size dozens of times; at 100,000 the estimate takes over from 4 GiB
/// there, 0.3–0.5 % slower than the events (its fill is a little pessimistic).
const AGGREGATE_ABOVE: usize = 100_000;

/// Aggregated mode's budget for the representatives' event simulation: at most this many flows
/// (every edge of the representative pipelines, both ways), and at most [`REDUCED_WORK`] links
/// visited by its rate solves; beyond, the pipeline estimate.
const REDUCED_FLOWS: usize = 2_048;
/// About 0.25 s of solving on this repository's 2-core machine.
const REDUCED_WORK: u64 = 4_000_000;

/// One representative pipeline per class of equivalent ones, and the reduced paths of its
/// edges (up and down for each edge of each representative, in order).
struct Reduction {
    reps: Vec<usize>,
    paths: Vec<symmetry::Reduced>,
}

/// Splits the call's pipelines into classes of equivalent ones, each standing for the others
/// with its nodes renumbered where a pipeline on tree 1 stands for one on tree 0, and gives
/// their reduced paths; `None` when that takes more than `max_flows` representative flows.
///
/// It starts from one class, every pipeline an image of the first, and refines
/// ([`symmetry::refine`]): a pipeline whose tree does not map onto its representative's, whose
/// edges' timing differs, or whose flows cross other link types moves to a class of its own
/// kind, until every image matches its representative.
fn reduce_pipelines(
    lay: &Layout,
    channels: &[Channel],
    arena: &Arena,
    caps: &[f64],
    max_flows: usize,
) -> Option<Reduction> {
    let (nnodes, rpn) = (lay.nnodes, lay.rpn);
    let tree: Vec<bool> =
        lay.reps.iter().map(|&(c, _)| !lay.collnet && c >= lay.nch.div_ceil(2)).collect();
    // Ranks of a pipeline on one tree as the other tree's (the double binary tree's renumbering).
    let map_rank = |renumber: bool, r: usize| {
        if !renumber || r >= nnodes * rpn {
            return r;
        }
        let (node, pos) = (r / rpn, r % rpn);
        let n =
            if nnodes.is_multiple_of(2) { nnodes - 1 - node } else { (node + nnodes - 1) % nnodes };
        n * rpn + pos
    };
    // The edge of `rep` that edge `e` of a pipeline maps onto, if its tree and timing match.
    let image_of = |rep: &Channel, renumber: bool, e: &Edge| {
        let re = rep.parent(map_rank(renumber, e.child))?;
        let r = &rep.edges[re];
        let same = r.parent == map_rank(renumber, e.parent)
            && (r.up_delay, r.down_delay, r.up_p2p, r.down_p2p, r.up_whole, r.down_whole)
                == (e.up_delay, e.down_delay, e.up_p2p, e.down_p2p, e.up_whole, e.down_whole)
            && (r.up_eff, r.down_eff) == (e.up_eff, e.down_eff);
        same.then_some(re)
    };
    let images = |p: usize, r: usize| {
        let renumber = tree[p] != tree[r];
        let mut out = Vec::with_capacity(2 * channels[p].edges.len());
        for e in &channels[p].edges {
            let re = image_of(&channels[r], renumber, e)?;
            out.push((arena.get(e.up_links), 2 * re));
            out.push((arena.get(e.down_links), 2 * re + 1));
        }
        Some(out)
    };
    let own = |r: usize| {
        channels[r]
            .edges
            .iter()
            .flat_map(|e| [arena.get(e.up_links), arena.get(e.down_links)])
            .collect::<Vec<_>>()
    };
    let symmetry::Classes { reps, paths, .. } =
        symmetry::refine(channels.len(), caps, max_flows, images, own)?;
    Some(Reduction { reps, paths })
}

/// NCCL's binary tree over `n` ranks (`ncclGetBtree`): (parent, child 0, child 1).
pub fn btree(n: usize, rank: usize) -> (Option<usize>, Option<usize>, Option<usize>) {
    let mut bit = 1;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return (None, None, if n > 1 { Some(bit >> 1) } else { None });
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let mut low = bit >> 1;
    let d0 = if low == 0 { None } else { Some(rank - low) };
    let mut d1 = if low == 0 { None } else { Some(rank + low) };
    while let Some(d) = d1 {
        if d < n {
            break;
        }
        low >>= 1;
        d1 = if low == 0 { None } else { Some(rank + low) };
    }
    (Some(up), d0, d1)
}

/// NCCL's double binary tree (`ncclGetDtree`): tree 1 is tree 0 mirrored (even `n`) or shifted
/// by one (odd `n`). Returns (parent, children) of `rank` in tree `t`.
pub fn dtree(n: usize, rank: usize, t: usize) -> (Option<usize>, Vec<usize>) {
    // Tree 1 renumbers the ranks: mirrored for even n, shifted by one for odd n.
    let map = |r: usize| match (t, n.is_multiple_of(2)) {
        (0, _) => r,
        (_, true) => n - 1 - r,
        (_, false) => (r + n - 1) % n,
    };
    let unmap = |r: usize| match (t, n.is_multiple_of(2)) {
        (0, _) => r,
        (_, true) => n - 1 - r,
        (_, false) => (r + 1) % n,
    };
    let (u, d0, d1) = btree(n, map(rank));
    (u.map(unmap), [d0, d1].into_iter().flatten().map(unmap).collect())
}

/// One edge of a channel's tree: child rank → parent rank, with the links each way.
#[derive(Debug, Clone, Copy)]
struct Edge {
    child: usize,
    parent: usize,
    up: PathId,
    down: PathId,
    up_delay: Time,
    down_delay: Time,
    up_eff: f64,
    down_eff: f64,
    /// Whether the sending CTA moves the data itself (NVLink/PCIe), and so pays the
    /// architecture's sync after each step.
    up_p2p: bool,
    down_p2p: bool,
    /// Whether it crosses the network, where a step is one message each way.
    up_whole: bool,
    down_whole: bool,
    /// Its links each way: ranges of the call's link arena.
    up_links: (u32, u32),
    down_links: (u32, u32),
}

/// Per-rank progress of one channel.
#[derive(Debug, Clone, Default)]
struct RankState {
    /// Per chunk: children contributions arrived.
    arrived_up: Vec<usize>,
    /// Chunks sent up (or, at the root, turned around).
    up_next: usize,
    up_busy: bool,
    /// Chunks received from the parent (the root: reduced).
    down_have: usize,
    /// Chunks sent down to all children.
    down_next: usize,
    /// Child flows of the current down chunk still in flight.
    down_pending: usize,
    /// Held by the CTA's sync after a step.
    down_hold: bool,
}

/// What a tree's flows and timers mean (`ch`: pipeline, `edge`: an edge of its tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// A chunk finished crossing `edge`, up (child to parent) or down.
    Moved {
        /// Pipeline.
        ch: u32,
        /// Edge.
        edge: u32,
        /// Direction.
        up: bool,
    },
    /// Chunk from `edge`'s child reached its parent.
    UpArrive {
        /// Pipeline.
        ch: u32,
        /// Edge.
        edge: u32,
    },
    /// Chunk from `edge`'s parent reached its child.
    DownArrive {
        /// Pipeline.
        ch: u32,
        /// Edge.
        edge: u32,
    },
    /// A rank's CTA finished its sync after a step it sent up.
    UpRelease {
        /// Pipeline.
        ch: u32,
        /// Rank.
        rank: u32,
    },
    /// A rank's CTA finished its sync after a step it sent down.
    DownRelease {
        /// Pipeline.
        ch: u32,
        /// Rank.
        rank: u32,
    },
}

impl From<Ev> for Signal {
    fn from(e: Ev) -> Signal {
        Signal::Tree(e)
    }
}

#[derive(Clone)]
struct Channel {
    edges: Vec<Edge>,
    /// Per rank: the edge to its parent ([`NO_EDGE`] at the root).
    parent_edge: Vec<u32>,
    /// Per rank: the edges to its children, `child_list[child_start[r]..child_start[r + 1]]`,
    /// in the order they were built.
    child_start: Vec<u32>,
    child_list: Vec<u32>,
    root: usize,
    /// Per rank progress (the event simulation only).
    ranks: Vec<RankState>,
    /// Per edge: chunks its child has delivered up (they arrive in order).
    delivered: Vec<usize>,
    /// Per edge: units sent up and down that wait for the rest of their step's message.
    held: Vec<[u32; 2]>,
}

/// No edge (a root's parent).
const NO_EDGE: u32 = u32::MAX;

impl Channel {
    /// A channel's tree over `nranks` ranks from its edges.
    fn new(nranks: usize, edges: Vec<Edge>) -> Channel {
        let mut parent_edge = vec![NO_EDGE; nranks];
        let mut child_start = vec![0u32; nranks + 1];
        for (id, e) in edges.iter().enumerate() {
            parent_edge[e.child] = id as u32;
            child_start[e.parent + 1] += 1;
        }
        for r in 0..nranks {
            child_start[r + 1] += child_start[r];
        }
        let mut at = child_start.clone();
        let mut child_list = vec![0u32; edges.len()];
        for (id, e) in edges.iter().enumerate() {
            child_list[at[e.parent] as usize] = id as u32;
            at[e.parent] += 1;
        }
        let root = (0..nranks).find(|&r| parent_edge[r] == NO_EDGE).unwrap_or(0);
        Channel {
            edges,
            parent_edge,
            child_start,
            child_list,
            root,
            ranks: Vec::new(),
            delivered: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The edge to `r`'s parent.
    fn parent(&self, r: usize) -> Option<usize> {
        let e = self.parent_edge[r];
        (e != NO_EDGE).then_some(e as usize)
    }

    /// The edges to `r`'s children.
    fn children(&self, r: usize) -> &[u32] {
        &self.child_list[self.child_start[r] as usize..self.child_start[r + 1] as usize]
    }
}

/// Every edge's links, end to end: an edge's path is a range of it.
#[derive(Debug, Default)]
struct Arena {
    links: Vec<u32>,
}

impl Arena {
    fn get(&self, (a, b): (u32, u32)) -> &[u32] {
        &self.links[a as usize..b as usize]
    }
}

/// Chunk size of a Tree call (§4.2): one step (Simple BUFFSIZE/8, LL 32 KiB, LL128 576,000 B,
/// LL128 halved for small messages).
fn chunk_size(proto: Proto, bytes: u64, nch: u64, nnodes: usize, ppn: usize, buff: Bytes) -> u64 {
    match proto {
        Proto::Simple => buff.get() / 8,
        Proto::LL => 32 * 1024,
        Proto::LL128 => {
            let s = 1.0 + (nnodes.max(1) as f64).log2() + 0.1 * ppn as f64;
            let mut chunk = 576_000u64;
            let per = |c: u64| bytes as f64 / (nch * c) as f64;
            while per(chunk) < 64.0 * s / ppn as f64 && chunk > 128 * 1024 {
                chunk /= 2;
            }
            while per(chunk) < 16.0 * s / ppn as f64 && chunk > 32 * 1024 {
                chunk /= 2;
            }
            chunk
        }
    }
}

/// How a call's tree is laid out over ranks, heads and channels.
struct Layout {
    nnodes: usize,
    ppn: usize,
    /// Ranks per node in the simulated tree: the chain's GPUs, or for NVLSTree and
    /// CollNetDirect the head and one rank standing for the rest of the node (reached through
    /// the NVSwitch).
    rpn: usize,
    /// Ranks in a channel's tree (CollNet: plus the switch).
    nranks: usize,
    nch: usize,
    collnet: bool,
    nvls_tree: bool,
    /// NVLSTree: the heads — a GPU with one of its NICs — every channel serves in turn (NCCL's
    /// NVLS graph has one head per NIC).
    head_pairs: Vec<(GpuId, NicId)>,
    /// Every (channel, head) pipeline: channels differ in their NICs and trees.
    reps: Vec<(usize, usize)>,
    /// Whether channel `c`'s connections between nodes take their own paths (ECMP), so that
    /// pipelines differing only in their channel are not copies.
    by_conn: bool,
    /// Node-local paths, computed once.
    local: LocalPaths,
}

/// What carries an edge of a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EdgeKind {
    /// A hop between GPUs of a node (up and down classes).
    Hop(HopClass, HopClass),
    /// NVLS inside a node: multimem load-reduce up, multimem store down.
    Nvls,
    /// Between nodes through the NICs.
    Net,
}

/// An edge of a channel's tree with its links each way (ranges of an [`Arena`]) and their
/// summed latency.
#[derive(Debug, Clone, Copy)]
struct EdgeLinks {
    child: usize,
    parent: usize,
    kind: EdgeKind,
    up: (u32, u32),
    down: (u32, u32),
    up_lat: Time,
    down_lat: Time,
}

/// The links inside one node that the tree's edges use, as node 0 of the job sees them; any
/// other node's are the same shifted by its first link id (the nodes are copies). Every table
/// is indexed by the raw [`GpuId`] (and [`NicId`]).
struct LocalPaths {
    /// Per GPU: its NICs, in the order it uses them.
    nics: Vec<Vec<NicId>>,
    /// Per GPU: the NIC the tree uses from it.
    local_nic: Vec<NicId>,
    /// GPU a to GPU b: links and hop class.
    hop: Vec<Vec<(Vec<u32>, HopClass)>>,
    /// GPU to NIC and NIC to GPU, by (gpu, nic).
    to_nic: Vec<Vec<Vec<u32>>>,
    from_nic: Vec<Vec<Vec<u32>>>,
    /// Each GPU's link up into the NVSwitch and back down (NVLS).
    up: Vec<Vec<u32>>,
    down: Vec<Vec<u32>>,
    /// Node 0's first link id.
    base: u32,
}

/// The summed latency of `path`.
fn path_latency(links: &[crate::net::Link], path: &[u32]) -> Time {
    path.iter().fold(Time::ZERO, |t, &l| t + links[l as usize].latency)
}

impl LocalPaths {
    fn new(cluster: &Cluster, comm: &Communicator, ppn: usize) -> LocalPaths {
        let paths = comm.paths();
        let nics = cluster.spec().nic.as_ref().map_or(0, |n| n.count);
        let raw = |v: Vec<LinkId>| v.into_iter().map(|l| l.0).collect::<Vec<u32>>();
        let nvswitch = cluster.spec().nvswitch.is_some();
        let node = NodeId(0);
        let gpus = || (0..ppn).map(GpuId);
        let all_nics = || (0..nics).map(NicId);
        LocalPaths {
            nics: gpus().map(|g| cluster.gpu_nics(g)).collect(),
            local_nic: gpus().map(|g| cluster.local_nic(g).unwrap_or(NicId(0))).collect(),
            hop: gpus()
                .map(|a| {
                    gpus()
                        .map(|b| {
                            let h = paths.gpu_hop(cluster, node, a, b);
                            (raw(h.links), h.class)
                        })
                        .collect()
                })
                .collect(),
            to_nic: gpus()
                .map(|g| all_nics().map(|n| raw(paths.to_nic(cluster, node, g, n))).collect())
                .collect(),
            from_nic: gpus()
                .map(|g| all_nics().map(|n| raw(paths.from_nic(cluster, node, n, g))).collect())
                .collect(),
            up: gpus()
                .map(|g| {
                    if nvswitch {
                        raw(cluster.route(node, Vertex::Gpu(g), Vertex::NvSwitch).0)
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
            down: gpus()
                .map(|g| {
                    if nvswitch {
                        raw(cluster.route(node, Vertex::NvSwitch, Vertex::Gpu(g)).0)
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
            base: cluster.node_base(node),
        }
    }
}

/// Appends node-0 links `local` shifted to `node`'s copy.
fn shifted(out: &mut Vec<u32>, local: &[u32], base: u32, node_base: u32) {
    out.extend(local.iter().map(|&l| l - base + node_base));
}

impl Layout {
    fn new(cluster: &Cluster, comm: &Communicator, sel: &Selection) -> Layout {
        let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
        let collnet =
            matches!(sel.algo, crate::comm::Algo::CollNetChain | crate::comm::Algo::CollNetDirect);
        // CollNetDirect spreads each node's part over its NIC heads through the NVSwitch, as
        // NVLSTree does (with ordinary NVLink writes instead of multimem); CollNetChain keeps the
        // chain. Both reduce across nodes in the network switch (IB SHARP): one extra rank, the
        // switch, is every node head's parent.
        let nvls_tree =
            matches!(sel.algo, crate::comm::Algo::NvlsTree | crate::comm::Algo::CollNetDirect);
        let rpn = if nvls_tree { 2 } else { ppn };
        let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
        let head_pairs: Vec<(GpuId, NicId)> = if nvls_tree {
            let mut v = Vec::new();
            for g in (0..ppn).map(GpuId) {
                for nic in cluster.gpu_nics(g) {
                    if !v.iter().any(|&(_, n)| n == nic) {
                        v.push((g, nic));
                    }
                }
            }
            if v.is_empty() { vec![(GpuId(0), NicId(0))] } else { v }
        } else {
            // One pipeline per channel, with no head.
            vec![(GpuId(usize::MAX), NicId(usize::MAX))]
        };
        let reps = (0..nch).flat_map(|c| (0..head_pairs.len()).map(move |h| (c, h))).collect();
        Layout {
            nnodes,
            ppn,
            rpn,
            nranks: nnodes * rpn + usize::from(collnet),
            nch,
            collnet,
            nvls_tree,
            head_pairs,
            reps,
            by_conn: !collnet && cluster.routes_by_connection(),
            local: LocalPaths::new(cluster, comm, ppn),
        }
    }

    /// The most one flow of a pipeline carries, data bytes/s (infinity for none), as bus
    /// bandwidth twice the call's data rate (each byte goes up and comes down), spread over the
    /// pipelines: NCCL's per-channel maximum of the release for a call across nodes, a plain
    /// Tree's ([`TuningInput::tree_bus_cap`]) or an NVLSTree's
    /// ([`TuningInput::nvls_tree_bus_cap`]); none for CollNet, whose heads NCCL caps otherwise.
    /// Simple only: LL128's Tree maximum (`perChMaxTreeLL128Bws`), applied the same way, made
    /// the A100 two-node curves that run Tree/LL128 at 1-16 MiB (CRUSOE, Sophia) slower than
    /// measured (median 12.6 -> 32.3 % on those sizes). Held from the first chunk, the cap
    /// overstates a pipeline's fill, when only the upward half moves.
    ///
    /// [`TuningInput::tree_bus_cap`]: crate::comm::tuning::TuningInput::tree_bus_cap
    /// [`TuningInput::nvls_tree_bus_cap`]: crate::comm::tuning::TuningInput::nvls_tree_bus_cap
    fn flow_cap(&self, comm: &Communicator, proto: Proto) -> f64 {
        if proto != Proto::Simple || self.collnet || self.nnodes < 2 {
            return f64::INFINITY;
        }
        let bus = if self.nvls_tree {
            comm.tuning().nvls_tree_bus_cap()
        } else {
            comm.tuning().tree_bus_cap(proto)
        };
        let pipes = self.reps.len().max(1) as f64;
        bus.map_or(f64::INFINITY, |b| b * 1e9 / (2.0 * pipes))
    }

    /// What pipeline `(c, hp)`'s edges depend on: its ring (unless the heads set the order, and
    /// the network routes every connection alike), its tree (unless CollNet) and its head.
    fn pipeline_key(&self, comm: &Communicator, (c, hp): (usize, usize)) -> (usize, usize, usize) {
        let ring = match (self.nvls_tree, self.by_conn) {
            (_, true) => c,
            (true, false) => 0,
            (false, false) => c % comm.channels().len().max(1),
        };
        let tree = usize::from(!self.collnet && c >= self.nch.div_ceil(2));
        (ring, tree, hp)
    }

    /// The edges of pipeline `(c, hp)`, their links appended to `arena`: the chains inside
    /// nodes, the NVLS edges, then the edges between nodes (the double binary tree, or every
    /// head to the SHARP switch).
    fn channel_edges(
        &self,
        cluster: &Cluster,
        comm: &Communicator,
        (c, hp): (usize, usize),
        arena: &mut Arena,
    ) -> Vec<EdgeLinks> {
        let (nnodes, ppn, rpn) = (self.nnodes, self.ppn, self.rpn);
        let (nvls_tree, collnet, head_pairs) = (self.nvls_tree, self.collnet, &self.head_pairs);
        let lp = &self.local;
        let rank = |node: usize, pos: usize| node * rpn + pos;
        let node_base: Vec<u32> = (0..nnodes).map(|n| cluster.node_base(NodeId(n))).collect();
        let ring: &RingChannel = &comm.channels()[c % comm.channels().len()];
        let tree = usize::from(c >= self.nch.div_ceil(2));
        let head_order: Vec<GpuId>;
        let g: &Vec<GpuId> = if nvls_tree {
            let h = head_pairs[hp].0;
            head_order =
                std::iter::once(h).chain((0..ppn).map(GpuId).filter(|&x| x != h)).collect();
            &head_order
        } else {
            &ring.gpus
        };
        // The GPU's NICs in turn over the channels (NVLSTree heads with several NICs each).
        let nic_of = |gpu: GpuId| {
            if nvls_tree && gpu == head_pairs[hp].0 {
                head_pairs[hp].1
            } else if nvls_tree && !lp.nics[gpu.0].is_empty() {
                lp.nics[gpu.0][0]
            } else {
                lp.local_nic[gpu.0]
            }
        };
        let mut out = Vec::new();
        let all = cluster.links();
        let lat = |p: &[u32]| path_latency(all, p);
        // The same node-local paths recur at every node: their latency once each.
        let hop_lat: Vec<Vec<Time>> =
            lp.hop.iter().map(|row| row.iter().map(|(p, _)| lat(p)).collect()).collect();
        let to_lat: Vec<Vec<Time>> =
            lp.to_nic.iter().map(|row| row.iter().map(|p| lat(p)).collect()).collect();
        let from_lat: Vec<Vec<Time>> =
            lp.from_nic.iter().map(|row| row.iter().map(|p| lat(p)).collect()).collect();
        let nvls_lat = |h: GpuId| {
            let ups: Time = (0..ppn).fold(Time::ZERO, |t, x| t + lat(&lp.up[x]));
            let downs: Time = (0..ppn).fold(Time::ZERO, |t, x| t + lat(&lp.down[x]));
            (ups + lat(&lp.down[h.0]), lat(&lp.up[h.0]) + downs)
        };
        let range = |arena: &mut Arena, f: &mut dyn FnMut(&mut Vec<u32>)| {
            let start = arena.links.len() as u32;
            f(&mut arena.links);
            (start, arena.links.len() as u32)
        };
        for (node, &nb) in node_base.iter().enumerate() {
            for pos in (1..ppn).filter(|_| !nvls_tree) {
                let (a, b) = (g[pos].0, g[pos - 1].0);
                let (up_l, up_c) = &lp.hop[a][b];
                let (down_l, down_c) = &lp.hop[b][a];
                let up = range(arena, &mut |v| shifted(v, up_l, lp.base, nb));
                let down = range(arena, &mut |v| shifted(v, down_l, lp.base, nb));
                out.push(EdgeLinks {
                    child: rank(node, pos),
                    parent: rank(node, pos - 1),
                    kind: EdgeKind::Hop(*up_c, *down_c),
                    up,
                    down,
                    up_lat: hop_lat[a][b],
                    down_lat: hop_lat[b][a],
                });
            }
        }
        if nvls_tree {
            for (node, &nb) in node_base.iter().enumerate() {
                let h = g[0];
                let up = range(arena, &mut |v| {
                    for x in 0..ppn {
                        shifted(v, &lp.up[x], lp.base, nb);
                    }
                    shifted(v, &lp.down[h.0], lp.base, nb);
                });
                let down = range(arena, &mut |v| {
                    shifted(v, &lp.up[h.0], lp.base, nb);
                    for x in 0..ppn {
                        shifted(v, &lp.down[x], lp.base, nb);
                    }
                });
                let (up_lat, down_lat) = nvls_lat(h);
                out.push(EdgeLinks {
                    child: rank(node, 1),
                    parent: rank(node, 0),
                    kind: EdgeKind::Nvls,
                    up,
                    down,
                    up_lat,
                    down_lat,
                });
            }
        }
        if collnet {
            // Every node's head sends into the network, where the switch reduces, and receives
            // the result back: the switch is the root.
            let sw = nnodes * rpn;
            for (node, &nb) in node_base.iter().enumerate() {
                let cg = g[0];
                let cn = nic_of(cg);
                let (tx, rx) = cluster.nic_links(NodeId(node), cn);
                let (cg, cn) = (cg.0, cn.0);
                let up = range(arena, &mut |v| {
                    shifted(v, &lp.to_nic[cg][cn], lp.base, nb);
                    v.push(tx.0);
                });
                let down = range(arena, &mut |v| {
                    v.push(rx.0);
                    shifted(v, &lp.from_nic[cg][cn], lp.base, nb);
                });
                let links = cluster.links();
                out.push(EdgeLinks {
                    child: rank(node, 0),
                    parent: sw,
                    kind: EdgeKind::Net,
                    up,
                    down,
                    up_lat: to_lat[cg][cn] + links[tx.0 as usize].latency,
                    down_lat: links[rx.0 as usize].latency + from_lat[cg][cn],
                });
            }
        }
        for node in (0..nnodes).filter(|_| !collnet) {
            let (parent, _) = dtree(nnodes, node, tree);
            if let Some(pn) = parent {
                let (_, siblings) = dtree(nnodes, pn, tree);
                let slot = siblings.iter().position(|&s| s == node).unwrap_or(0);
                let at = if slot == 1 && ppn > 1 && !nvls_tree { 1 } else { 0 };
                let (cg, pg) = (g[0], g[at]);
                let (cn, pnic) = (nic_of(cg), nic_of(pg));
                let (nb, pb) = (node_base[node], node_base[pn]);
                let (child, parent) = ((NodeId(node), cn), (NodeId(pn), pnic));
                let (fab_up, fab_down) =
                    (cluster.nic_to_nic(child, parent, c), cluster.nic_to_nic(parent, child, c));
                let (cg, pg, cn, pnic) = (cg.0, pg.0, cn.0, pnic.0);
                let fab_lat =
                    |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + all[l.0 as usize].latency);
                let up = range(arena, &mut |v| {
                    shifted(v, &lp.to_nic[cg][cn], lp.base, nb);
                    v.extend(fab_up.iter().map(|l| l.0));
                    shifted(v, &lp.from_nic[pg][pnic], lp.base, pb);
                });
                let down = range(arena, &mut |v| {
                    shifted(v, &lp.to_nic[pg][pnic], lp.base, pb);
                    v.extend(fab_down.iter().map(|l| l.0));
                    shifted(v, &lp.from_nic[cg][cn], lp.base, nb);
                });
                out.push(EdgeLinks {
                    child: rank(node, 0),
                    parent: rank(pn, at),
                    kind: EdgeKind::Net,
                    up,
                    down,
                    up_lat: to_lat[cg][cn] + fab_lat(&fab_up) + from_lat[pg][pnic],
                    down_lat: to_lat[pg][pnic] + fab_lat(&fab_down) + from_lat[cg][cn],
                });
            }
        }
        out
    }
}

/// Every link path of a Tree-family call in steady state (each edge of every pipeline busy
/// both ways) with its flow's cap ([`Layout::flow_cap`]), for `explain`'s bottleneck and the
/// call's steady share of a shared network.
pub(crate) fn steady_flows(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
    let (cluster, comm) = (call.cluster, call.comm);
    let lay = Layout::new(cluster, comm, &call.sel);
    if lay.nnodes * lay.ppn < 2 {
        return Vec::new();
    }
    let mut arena = Arena::default();
    let edges: Vec<EdgeLinks> = lay
        .reps
        .iter()
        .flat_map(|&rep| lay.channel_edges(cluster, comm, rep, &mut arena))
        .collect();
    let path = |r| arena.get(r).iter().map(|&l| LinkId(l)).collect::<Vec<LinkId>>();
    let cap = lay.flow_cap(comm, call.sel.proto);
    edges.iter().flat_map(|e| [(path(e.up), cap), (path(e.down), cap)]).collect()
}

/// Simulates one Tree AllReduce — or, when `sel` says NVLSTree, an NVLSTree AllReduce: each
/// node's part done by NVLS (a multimem load-reduce into the channel's head GPU, a multimem store
/// back out), the tree running between node heads over their NICs — with `sel`'s protocol and
/// channel count.
pub(crate) fn new(call: &Call<'_>, cx: &mut Ctx<'_>) -> Box<dyn Algorithm> {
    let (cluster, comm, sel, params) = (call.cluster, call.comm, &call.sel, call.params);
    let (bytes, elt) = (call.bytes.get(), call.elt.get());
    let lay = Layout::new(cluster, comm, sel);
    let (nnodes, ppn, nch, nranks) = (lay.nnodes, lay.ppn, lay.nch, lay.nranks);
    let (collnet, direct) = (lay.collnet, sel.algo == crate::comm::Algo::CollNetDirect);
    if nnodes * ppn < 2 || bytes == 0 {
        return Box::new(Closed::new(Time::ZERO));
    }
    let align = 16u64.max(elt);
    let head_pairs = &lay.head_pairs;
    let pipes = nch * head_pairs.len();
    let per_channel = bytes.div_ceil(pipes as u64).div_ceil(align) * align;
    // LL and LL128 stream: every store round carries its own flags, so a rank forwards data one
    // round after it arrives (over the network, once its step's message has landed); Simple
    // forwards whole chunks. A step is one chunk.
    let step_bytes = if collnet {
        // CollNet chunks: 128 KiB (Direct) or at most 256 KiB (Chain), halved for small calls.
        let c: u64 = if direct { 128 * 1024 } else { 256 * 1024 };
        let mut c = c;
        while c > 32 * 1024 && bytes < 8 * nch as u64 * c {
            c /= 2;
        }
        c
    } else if lay.nvls_tree {
        super::nvls::tree_chunk_size(bytes, lay.reps.len() as u64, comm.nvls_layout())
    } else {
        chunk_size(sel.proto, bytes, nch as u64, nnodes, ppn, comm.env().buffsize)
    };
    let chunk = match sel.proto {
        Proto::Simple => step_bytes,
        _ => super::ring::stream_unit(sel.proto).min(step_bytes),
    }
    .div_ceil(align)
    .max(1)
        * align;
    let units_per_step = step_bytes.div_ceil(chunk).max(1) as usize;
    let chunks = per_channel.div_ceil(chunk) as usize;
    let last = per_channel - (chunks as u64 - 1) * chunk;
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let sync = gpu.sync[p];
    let arch = cluster.spec().gpu.arch;
    let efficiency = |class: HopClass| params.efficiency(arch, class, sel.proto);
    let nvls_eff = if direct {
        params.efficiency(arch, HopClass::Nvlink, Proto::Simple)
    } else {
        params.nvls_efficiency(comm.arch())
    };
    let step = |class: HopClass| params.step(class, sel.proto);
    let mut channels: Vec<Channel> = Vec::new();
    let mut arena = Arena::default();
    // Pipelines that differ only in their channel number are the same pipeline again (NVLSTree
    // and CollNetDirect heads do not depend on the ring; CollNet has no tree): built once.
    let mut built_for: Vec<((usize, usize, usize), usize)> = Vec::new();
    for &rep in &lay.reps {
        let key = lay.pipeline_key(comm, rep);
        if let Some(&(_, at)) = built_for.iter().find(|(k, _)| *k == key) {
            let again = channels[at].clone();
            channels.push(again);
            continue;
        }
        built_for.push((key, channels.len()));
        let built = lay.channel_edges(cluster, comm, rep, &mut arena);
        let mut edges = Vec::with_capacity(built.len());
        for e in built {
            let (up_delay, down_delay, up_eff, down_eff, up_p2p, down_p2p) = match e.kind {
                EdgeKind::Hop(u, d) => (
                    e.up_lat + step(u),
                    e.down_lat + step(d),
                    efficiency(u),
                    efficiency(d),
                    u != HopClass::Net,
                    d != HopClass::Net,
                ),
                EdgeKind::Nvls => (
                    e.up_lat + step(HopClass::Nvlink),
                    e.down_lat + step(HopClass::Nvlink),
                    nvls_eff,
                    nvls_eff,
                    false,
                    false,
                ),
                EdgeKind::Net => (
                    e.up_lat + step(HopClass::Net),
                    e.down_lat + step(HopClass::Net),
                    efficiency(HopClass::Net),
                    efficiency(HopClass::Net),
                    false,
                    false,
                ),
            };
            let (up_whole, down_whole) = match e.kind {
                EdgeKind::Hop(u, d) => (u == HopClass::Net, d == HopClass::Net),
                EdgeKind::Nvls => (false, false),
                EdgeKind::Net => (true, true),
            };
            edges.push(Edge {
                child: e.child,
                parent: e.parent,
                up_delay,
                down_delay,
                up_eff,
                down_eff,
                up_p2p,
                down_p2p,
                up_whole,
                down_whole,
                up_links: e.up,
                down_links: e.down,
                up: PathId(0),
                down: PathId(0),
            });
        }
        channels.push(Channel::new(nranks, edges));
    }

    // Aggregated mode simulates one representative per class of equivalent pipelines, alone,
    // when the call is symmetric and that is cheap enough; else the pipeline estimate. Auto runs
    // small calls in full detail, or, alone on the network, their representatives where they
    // are fewer.
    let work: usize = channels.iter().map(|c| c.edges.len()).sum::<usize>() * chunks * 2;
    let cap = lay.flow_cap(comm, sel.proto);
    let shape = Shape { cap, chunks, chunk, last, units_per_step, sync, nranks };
    let small_auto = call.mode == Mode::Auto && work <= AGGREGATE_ABOVE;
    let links = cluster.links();
    // The classes of equivalent pipelines, if there are few enough flows to look; other traffic
    // holds its steady-state share of each link, as in a detailed run.
    let reduce = |channels: &[Channel]| {
        let flows = channels.first().map_or(0, |c| c.edges.len()) * 2;
        let caps = run::capacities_beside_load(call);
        let found = (flows <= REDUCED_FLOWS)
            .then(|| reduce_pipelines(&lay, channels, &arena, &caps, REDUCED_FLOWS))
            .flatten();
        (caps, found)
    };
    // Auto, alone on the network: where equivalent pipelines reduce to fewer representatives,
    // those run (the detailed result, on fewer flows) with no budget, as the detailed run
    // would have run whole.
    if small_auto && call.load.is_empty() {
        let (caps, found) = reduce(&channels);
        let t = found
            .filter(|r| r.reps.len() < channels.len())
            .and_then(|r| run_reps(links, &caps, &channels, r, shape, u64::MAX, Time::MAX));
        if let Some(t) = t {
            return Box::new(Closed::timed(t, Form::Symmetric));
        }
    }
    if call.mode == Mode::Detailed || small_auto {
        for ch in &mut channels {
            for e in &mut ch.edges {
                let up: Vec<LinkId> = arena.get(e.up_links).iter().map(|&l| LinkId(l)).collect();
                let down: Vec<LinkId> =
                    arena.get(e.down_links).iter().map(|&l| LinkId(l)).collect();
                e.up = cx.add_path(&up);
                e.down = cx.add_path(&down);
            }
        }
        return Box::new(Tree::new(channels, shape, true));
    }
    let (caps, found) = reduce(&channels);
    let estimate = pipeline_estimate(
        &channels,
        &arena,
        cluster.capacities(),
        call.load,
        cap,
        chunks,
        per_channel as f64 / chunks as f64,
        units_per_step,
        sync,
        EXACT_STEADY_MAX,
    );
    let all_own = found.as_ref().is_some_and(|r| r.reps.len() == channels.len());
    let t = found.and_then(|r| run_reps(links, &caps, &channels, r, shape, REDUCED_WORK, estimate));
    // Every pipeline its own representative is the detailed run, and says so.
    match t {
        Some(t) if all_own => Box::new(Closed::timed(t, Form::Detailed)),
        Some(t) => Box::new(Closed::timed(t, Form::Symmetric)),
        None => Box::new(Closed::new(estimate)),
    }
}

/// The representative pipelines of `r` alone on links of `caps`, each flow on its reduced
/// path: the call's time, or None past `budget` ([`run::run_alone`]).
fn run_reps(
    links: &[crate::net::Link],
    caps: &[f64],
    channels: &[Channel],
    Reduction { reps, paths }: Reduction,
    shape: Shape,
    budget: u64,
    expected: Time,
) -> Option<Time> {
    let mut reps: Vec<Channel> = reps.iter().map(|&p| channels[p].clone()).collect();
    run::run_alone(links, caps, budget, expected, |cx| {
        let mut k = 0;
        for ch in &mut reps {
            for e in &mut ch.edges {
                let (up, down) = (&paths[k], &paths[k + 1]);
                e.up = cx.add_weighted_path(&up.links, &up.weights, Time::ZERO);
                e.down = cx.add_weighted_path(&down.links, &down.weights, Time::ZERO);
                k += 2;
            }
        }
        Box::new(Tree::new(reps, shape, false))
    })
}

/// How a Tree-family call's pipelines cut their bytes.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// The most one flow of a pipeline carries, data bytes/s (infinity for no cap): NCCL's
    /// per-channel Tree maximum ([`crate::comm::tuning::TuningInput::tree_bus_cap`]) shared by
    /// the pipelines, each moving its data up and down at once.
    cap: f64,
    chunks: usize,
    /// Payload of every chunk but the last, and of the last.
    chunk: u64,
    last: u64,
    units_per_step: usize,
    sync: Time,
    nranks: usize,
}

/// A running Tree-family call.
struct Tree {
    /// Every pipeline (else one representative per class of equivalent ones).
    detailed: bool,
    /// The most one flow carries, data bytes/s ([`Shape::cap`]).
    cap: f64,
    channels: Vec<Channel>,
    chunks: usize,
    /// Payload of every chunk but the last, and of the last.
    chunk: u64,
    last: u64,
    units_per_step: usize,
    sync: Time,
    nranks: usize,
    finish: Time,
    /// Ranks (over all pipelines) done.
    done: usize,
    total_done: usize,
}

impl Tree {
    /// A call over `channels`, their paths registered; `detailed` when they are every pipeline
    /// (else representatives).
    fn new(mut channels: Vec<Channel>, shape: Shape, detailed: bool) -> Tree {
        let Shape { cap, chunks, chunk, last, units_per_step, sync, nranks } = shape;
        for ch in &mut channels {
            ch.delivered = vec![0; ch.edges.len()];
            ch.held = vec![[0; 2]; ch.edges.len()];
            ch.ranks =
                vec![RankState { arrived_up: vec![0; chunks], ..RankState::default() }; nranks];
        }
        let total_done = nranks * channels.len();
        Tree {
            detailed,
            cap,
            channels,
            chunks,
            chunk,
            last,
            units_per_step,
            sync,
            nranks,
            finish: Time::ZERO,
            done: 0,
            total_done,
        }
    }

    /// Whether chunk `k` ends a step (a CTA post, after which it pays its sync).
    fn boundary(&self, k: usize) -> bool {
        (k + 1).is_multiple_of(self.units_per_step) || k + 1 == self.chunks
    }

    /// Starts whatever rank `r` of pipeline `ci` can send now.
    fn pump(&mut self, cx: &mut Ctx<'_>, ci: usize, r: usize) {
        let chunks = self.chunks;
        let now = cx.now();
        let (full, last) = (self.chunk, self.last);
        let payload = |k: usize| if k + 1 == chunks { last } else { full };
        let ch = &mut self.channels[ci];
        let nkids = ch.children(r).len();
        // Reduce: send chunk up once every child's contribution is in.
        loop {
            let st = &ch.ranks[r];
            let k = st.up_next;
            if st.up_busy || k >= chunks || st.arrived_up[k] < nkids {
                break;
            }
            match ch.parent(r) {
                Some(e) => {
                    let edge = &ch.edges[e];
                    let wire = Bytes::new((payload(k) as f64 / edge.up_eff).ceil() as u64);
                    let ev = Ev::Moved { ch: ci as u32, edge: e as u32, up: true };
                    cx.capped_flow(edge.up, wire, self.cap / edge.up_eff, ev);
                    ch.ranks[r].up_busy = true;
                    break;
                }
                None => {
                    // The root: reduced chunk k turns around.
                    ch.ranks[r].up_next += 1;
                    ch.ranks[r].down_have += 1;
                }
            }
        }
        // Broadcast: forward received chunks to every child.
        let st = &ch.ranks[r];
        if st.down_pending == 0 && !st.down_hold && st.down_next < st.down_have {
            let k = st.down_next;
            if nkids == 0 {
                ch.ranks[r].down_next = ch.ranks[r].down_have;
            } else {
                for &e in ch.children(r) {
                    let edge = &ch.edges[e as usize];
                    let wire = Bytes::new((payload(k) as f64 / edge.down_eff).ceil() as u64);
                    let ev = Ev::Moved { ch: ci as u32, edge: e, up: false };
                    cx.capped_flow(edge.down, wire, self.cap / edge.down_eff, ev);
                }
                ch.ranks[r].down_pending = nkids;
            }
        }
        let st = &ch.ranks[r];
        if st.down_have == chunks
            && st.down_next == chunks
            && st.down_pending == 0
            && st.up_next == chunks
        {
            // Counted once: mark by pushing up_next past chunks.
            ch.ranks[r].up_next = chunks + 1;
            self.done += 1;
            self.finish = self.finish.max(now);
        }
    }

    /// Chunk `k`'s unit has crossed edge `e` of pipeline `ci` (up or down): it arrives `at`,
    /// with the units of its step held before it, unless it is not the last of its step and
    /// the edge crosses the network, where a step travels as one message.
    fn deliver(&mut self, cx: &mut Ctx<'_>, (ci, e): (usize, usize), up: bool, k: usize, at: Time) {
        let edge = &self.channels[ci].edges[e];
        let whole = if up { edge.up_whole } else { edge.down_whole };
        let hold = whole && !self.boundary(k);
        let held = &mut self.channels[ci].held[e][usize::from(!up)];
        if hold {
            *held += 1;
            return;
        }
        let (ch, edge) = (ci as u32, e as u32);
        let ev = if up { Ev::UpArrive { ch, edge } } else { Ev::DownArrive { ch, edge } };
        for _ in 0..=std::mem::take(held) {
            cx.at(at, ev);
        }
    }

    fn moved(&mut self, cx: &mut Ctx<'_>, ci: usize, e: usize, up: bool) {
        let f = cx.now();
        let (sync, ch32) = (self.sync, ci as u32);
        let (child, parent) = (self.channels[ci].edges[e].child, self.channels[ci].edges[e].parent);
        if up {
            let edge = &self.channels[ci].edges[e];
            let (p2p, delay) = (edge.up_p2p, edge.up_delay);
            let k = self.channels[ci].ranks[child].up_next;
            self.channels[ci].ranks[child].up_next += 1;
            if p2p && sync > Time::ZERO && self.boundary(k) {
                cx.at(f + sync, Ev::UpRelease { ch: ch32, rank: child as u32 });
            } else {
                self.channels[ci].ranks[child].up_busy = false;
            }
            self.deliver(cx, (ci, e), true, k, f + delay);
            self.pump(cx, ci, child);
        } else {
            let delay = self.channels[ci].edges[e].down_delay;
            let chan = &self.channels[ci];
            let any_p2p = chan.children(parent).iter().any(|&c| chan.edges[c as usize].down_p2p);
            let k = chan.ranks[parent].down_next;
            let hold = any_p2p && sync > Time::ZERO && self.boundary(k);
            let st = &mut self.channels[ci].ranks[parent];
            st.down_pending -= 1;
            if st.down_pending == 0 {
                st.down_next += 1;
                if hold {
                    st.down_hold = true;
                    cx.at(f + sync, Ev::DownRelease { ch: ch32, rank: parent as u32 });
                }
            }
            self.deliver(cx, (ci, e), false, k, f + delay);
            self.pump(cx, ci, parent);
        }
    }
}

impl Algorithm for Tree {
    fn form(&self) -> Form {
        if self.detailed { Form::Detailed } else { Form::Symmetric }
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        for ci in 0..self.channels.len() {
            for r in 0..self.nranks {
                self.pump(cx, ci, r);
            }
        }
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        let Signal::Tree(ev) = signal else { return };
        let (ci, rank) = match ev {
            Ev::Moved { ch, edge, up } => {
                self.moved(cx, ch as usize, edge as usize, up);
                return;
            }
            Ev::UpArrive { ch, edge } => {
                let c = &mut self.channels[ch as usize];
                let parent = c.edges[edge as usize].parent;
                let k = c.delivered[edge as usize];
                c.delivered[edge as usize] += 1;
                c.ranks[parent].arrived_up[k] += 1;
                (ch, parent)
            }
            Ev::UpRelease { ch, rank } => {
                self.channels[ch as usize].ranks[rank as usize].up_busy = false;
                (ch, rank as usize)
            }
            Ev::DownRelease { ch, rank } => {
                self.channels[ch as usize].ranks[rank as usize].down_hold = false;
                (ch, rank as usize)
            }
            Ev::DownArrive { ch, edge } => {
                let c = &mut self.channels[ch as usize];
                let child = c.edges[edge as usize].child;
                c.ranks[child].down_have += 1;
                (ch, child)
            }
        };
        self.pump(cx, ci as usize, rank);
    }

    fn finished(&self) -> Option<Time> {
        (self.done >= self.total_done).then_some(self.finish)
    }

    fn last(&self) -> Time {
        self.finish
    }
}

/// The aggregated estimate: every edge of every channel sending at once at its steady-state
/// max-min rate; each channel is a pipeline of `chunks` units whose first unit takes the
/// longest leaf-to-root path up and root-to-leaf path down, and whose others follow at the pace
/// of its slowest edge.
#[allow(clippy::too_many_arguments)]
fn pipeline_estimate(
    channels: &[Channel],
    arena: &Arena,
    caps: &[f64],
    load: &[Load],
    cap: f64,
    chunks: usize,
    unit: f64,
    units_per_step: usize,
    sync: Time,
    exact_max: usize,
) -> Time {
    // Steady state: every edge of every channel busy both ways.
    let all: Vec<&[u32]> = channels
        .iter()
        .flat_map(|c| c.edges.iter())
        .flat_map(|e| [arena.get(e.up_links), arena.get(e.down_links)])
        .collect();
    // With other traffic the load takes its steady-state rate on every link, and the fill
    // shares what it leaves.
    let (steady, caps) = match (load.is_empty(), all.len() > exact_max) {
        (true, true) => (equal_shares(caps, &all), Cow::Borrowed(caps)),
        (true, false) => (solve_max_min(caps, &all, load), Cow::Borrowed(caps)),
        (false, _) => steady_with_reserved(caps, &all, load),
    };
    let mut counter = EqualShares::new(caps.len());
    // Filling the pipeline, channels move in step: edge e of every channel at once, one way.
    let nedges = channels.iter().map(|c| c.edges.len()).max().unwrap_or(0);
    let mut fill_up = vec![vec![0.0; nedges]; channels.len()];
    let mut fill_down = vec![vec![0.0; nedges]; channels.len()];
    for e in 0..nedges {
        let who: Vec<usize> =
            (0..channels.len()).filter(|&c| e < channels[c].edges.len()).collect();
        let mut share = |paths: Vec<&[u32]>| counter.shares(&caps, &paths);
        let up = share(who.iter().map(|&c| arena.get(channels[c].edges[e].up_links)).collect());
        let down = share(who.iter().map(|&c| arena.get(channels[c].edges[e].down_links)).collect());
        for (k, &c) in who.iter().enumerate() {
            fill_up[c][e] = up[k];
            fill_down[c][e] = down[k];
        }
    }
    let sync_per_unit = sync.as_secs_f64() / units_per_step as f64;
    let mut worst = 0.0f64;
    let mut i = 0;
    for (ci, c) in channels.iter().enumerate() {
        let n = c.parent_edge.len();
        // The CTA's sync holds the sender, not the data: it slows the pace, not the first unit.
        // A flow's wire rate is at most the pipeline's cap on its data.
        let cost = |rate: f64, eff: f64, p2p: bool| {
            unit / eff / rate.min(cap / eff).max(1.0) + if p2p { sync_per_unit } else { 0.0 }
        };
        // A network edge passes a whole step on at once: the first unit waits for its step.
        let step_units = units_per_step.min(chunks).max(1) as f64;
        let fill = |rate: f64, eff: f64, whole: bool| {
            unit / eff / rate.min(cap / eff).max(1.0) * if whole { step_units } else { 1.0 }
        };
        let mut pace = 0.0f64;
        for e in &c.edges {
            pace = pace.max(cost(steady[i], e.up_eff, e.up_p2p));
            pace = pace.max(cost(steady[i + 1], e.down_eff, e.down_p2p));
            i += 2;
        }
        // Longest path up: a rank is ready when its slowest child's unit has arrived.
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut stack = vec![c.root];
        while let Some(r) = stack.pop() {
            order.push(r);
            for &e in c.children(r) {
                stack.push(c.edges[e as usize].child);
            }
        }
        let mut ready = vec![0.0f64; n];
        for &r in order.iter().rev() {
            for &e in c.children(r) {
                let edge = &c.edges[e as usize];
                let t = ready[edge.child]
                    + fill(fill_up[ci][e as usize], edge.up_eff, edge.up_whole)
                    + edge.up_delay.as_secs_f64();
                ready[r] = ready[r].max(t);
            }
        }
        let mut reach = vec![0.0f64; n];
        let mut down = 0.0f64;
        for &r in &order {
            for &e in c.children(r) {
                let edge = &c.edges[e as usize];
                reach[edge.child] = reach[r]
                    + fill(fill_down[ci][e as usize], edge.down_eff, edge.down_whole)
                    + edge.down_delay.as_secs_f64();
                down = down.max(reach[edge.child]);
            }
        }
        let t = ready[c.root] + down + chunks.saturating_sub(1) as f64 * pace;
        worst = worst.max(t);
    }
    Time::from_secs_f64_ceil(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_trees_match_ncclgetbtree() {
        // nccl-model.md §3.5: for 14 nodes, 0 -> 8, 8 -> {4, 12}, 4 -> {2, 6}.
        assert_eq!(btree(14, 0), (None, None, Some(8)));
        assert_eq!(btree(14, 8), (Some(0), Some(4), Some(12)));
        assert_eq!(btree(14, 4), (Some(8), Some(2), Some(6)));
        assert_eq!(btree(14, 12), (Some(8), Some(10), Some(13)));
        // Every rank but the root has exactly one parent that lists it as a child.
        for n in 1..40 {
            for t in 0..2 {
                let roots = (0..n).filter(|&r| dtree(n, r, t).0.is_none()).count();
                assert_eq!(roots, 1, "n={n} t={t}");
                for r in 0..n {
                    if let Some(p) = dtree(n, r, t).0 {
                        assert!(dtree(n, p, t).1.contains(&r), "n={n} t={t} r={r}");
                    }
                }
            }
        }
        // Two nodes: each is the root of one tree.
        assert_eq!(dtree(2, 0, 0).0, None);
        assert_eq!(dtree(2, 1, 1).0, None);
    }

    /// NVLSTree's pipelines of one head differ only in their channel: on a fabric that routes
    /// every connection alike they are built once, but under ECMP each channel's connections
    /// between nodes hash onto their own ports, so each is built with its own paths.
    #[test]
    fn nvls_tree_pipelines_of_one_head_differ_under_ecmp() {
        use crate::comm::Communicator;
        use crate::comm::env::NcclEnv;
        use crate::config::resolve_topology;
        use crate::hw::{FabricKind, Routing};
        let (_, mut spec) = resolve_topology("dgx-h100", None).unwrap();
        spec.network.fabric =
            FabricKind::FatTree { tiers: 2, radix: 16, oversubscription: vec![1.0] };
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "NVLSTree")]).unwrap();
        for (routing, distinct) in [(Routing::Adaptive, false), (Routing::Ecmp, true)] {
            spec.network.routing = routing;
            let cluster = Cluster::new(&spec, 4, 8);
            let comm = Communicator::new(&cluster, &env).unwrap();
            let sel =
                crate::collective::select(&comm, crate::collective::Collective::AllReduce, 1 << 26);
            let lay = Layout::new(&cluster, &comm, &sel);
            let keys: std::collections::BTreeSet<_> =
                lay.reps.iter().map(|&r| lay.pipeline_key(&comm, r)).collect();
            assert_eq!(keys.len() == lay.reps.len(), distinct, "{routing:?}");
            // Channels 0 and 1 of head 0 cross the fabric on different links somewhere.
            let mut arena = Arena::default();
            let net = |c: usize, arena: &mut Arena| {
                let edges = lay.channel_edges(&cluster, &comm, (c, 0), arena);
                let arena = &*arena;
                edges
                    .iter()
                    .filter(|e| e.kind == EdgeKind::Net)
                    .flat_map(|e| arena.get(e.up).to_vec())
                    .collect::<Vec<u32>>()
            };
            let (a, b) = (net(0, &mut arena), net(1, &mut arena));
            assert_eq!(a != b, distinct, "{routing:?}");
        }
    }

    /// At 1,024 DGX-H100 nodes an NVLSTree call has 128 pipelines of 2,047 edges, 524k flows,
    /// and a Tree call 16 channels of 8,191 edges, 262k flows: the estimate takes equal shares
    /// there. Solving max-min instead gives the same time.
    #[test]
    fn equal_shares_set_the_same_pace_as_max_min_at_scale() {
        use crate::collective::{Call, Collective, Mode};
        use crate::comm::Communicator;
        use crate::comm::env::NcclEnv;
        use crate::config::{DEFAULT_PROFILE, parse_profile, resolve_topology};
        let (_, spec) = resolve_topology("dgx-h100", None).unwrap();
        let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
        for (nodes, algo, bytes) in [(1024, "NVLSTree", 1u64 << 30), (1024, "Tree", 64 << 20)] {
            let cluster = Cluster::new(&spec, nodes, 8);
            let env = NcclEnv::from_pairs([("NCCL_ALGO", algo)]).unwrap();
            let comm = Communicator::new(&cluster, &env).unwrap();
            let call = Call {
                cluster: &cluster,
                comm: &comm,
                coll: Collective::AllReduce,
                bytes: Bytes::new(bytes),
                elt: Bytes::new(4),
                sel: crate::collective::select(&comm, Collective::AllReduce, bytes),
                params: &params,
                mode: Mode::Auto,
                load: &[],
            };
            let lay = Layout::new(&cluster, &comm, &call.sel);
            let mut arena = Arena::default();
            let mut channels = Vec::new();
            let nranks = lay.nranks;
            for &rep in &lay.reps {
                let mut edges = Vec::new();
                for e in lay.channel_edges(&cluster, &comm, rep, &mut arena) {
                    edges.push(Edge {
                        child: e.child,
                        parent: e.parent,
                        up: PathId(0),
                        down: PathId(0),
                        up_delay: Time::from_ns(1_000),
                        down_delay: Time::from_ns(1_000),
                        up_eff: 1.0,
                        down_eff: 1.0,
                        up_p2p: false,
                        down_p2p: false,
                        up_whole: false,
                        down_whole: false,
                        up_links: e.up,
                        down_links: e.down,
                    });
                }
                channels.push(Channel::new(nranks, edges));
            }
            let flows: usize = channels.iter().map(|c| 2 * c.edges.len()).sum();
            assert!(flows > EXACT_STEADY_MAX, "{nodes} nodes {algo}: only {flows} flows");
            let run = |exact| {
                pipeline_estimate(
                    &channels,
                    &arena,
                    cluster.capacities(),
                    &[],
                    f64::INFINITY,
                    512,
                    1e6,
                    1,
                    Time::ZERO,
                    exact,
                )
            };
            let (shares, maxmin) = (run(0), run(usize::MAX));
            let rel = (shares.as_secs_f64() / maxmin.as_secs_f64() - 1.0).abs();
            assert!(rel < 1e-9, "{nodes} nodes {algo}: equal shares {shares} vs max-min {maxmin}");
        }
    }
}
