//! Point-to-point: SendRecv (each rank to the next), Send (one way, no wrap) and AllToAll (each
//! rank to every other),
//! with NCCL's p2p channels and chunks (`nccl-model.md` §3.9).
//!
//! Every peer pair moves its bytes over `channels` flows on its route — NVLink or PCIe inside a
//! node; across nodes out on the peer's rail through PXN where NCCL does
//! ([`Paths::p2p_send_nic`](crate::comm::Paths::p2p_send_nic)), into the receiver's own NIC,
//! so that a GPU's AllToAll is bound by one NIC's worth of bytes. All pairs send at once and
//! share links by max-min fairness; each flow's time is its bytes at its rate, plus the first
//! chunk's latency (the rest pipeline behind it). Aggregated: every flow at its steady-state
//! rate. Detailed: the flows run on the network, their rates re-shared as each finishes.

use super::Collective;
use super::run::{Algorithm, Call, Ctx, Form, Signal, steady_rates_capped};
use crate::comm::{Communicator, HopClass, Proto};
use crate::hw::{Cluster, GpuId, NicId, NodeId, PathType, Vertex};
use crate::net::LinkId;
use crate::net::solver::{FlowSpec, max_min_rates};
use crate::units::Bytes;
use crate::units::Time;

/// NCCL_P2P_LL_THRESHOLD: a peer transfer runs LL while it carries at most this per channel.
const LL_THRESHOLD: u64 = 16 * 1024;

/// Peers one channel's work batch runs at once (NCCL_MAX_DEV_WORK_P2P_PER_BATCH).
const PEERS_PER_BATCH: usize = 8;

fn pow2_ceil(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// One peer pair's share on one channel.
struct Flow {
    path: Vec<u32>,
    bytes: f64,
    delay: Time,
    eff: f64,
    /// The most the channel moves (bytes/s of data): see [`channel_cap`].
    cap: f64,
}

/// Bytes each peer pair moves: the message for SendRecv, a 1/n share of the send buffer for
/// AllToAll.
fn per_peer(coll: Collective, n: usize, bytes: u64) -> u64 {
    match coll {
        Collective::AllToAll => bytes / n as u64,
        _ => bytes,
    }
}

/// Rounds of NCCL's P2P schedule a rank goes through (`p2pSchedule`: round r sends to rank + r
/// and receives from rank - r): every rank, itself included, for AllToAll (nccl-tests posts
/// the self send and receive too); one for SendRecv.
pub(crate) fn rounds(coll: Collective, n: usize) -> u64 {
    match coll {
        Collective::AllToAll => n as u64,
        _ => 1,
    }
}

/// Every peer pair of a call: (source rank, destination rank).
fn pairs(coll: Collective, n: usize) -> Vec<(usize, usize)> {
    match coll {
        Collective::AllToAll => {
            (0..n).flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d))).collect()
        }
        Collective::Send { back: false } => (1..n).map(|s| (s - 1, s)).collect(),
        Collective::Send { back: true } => (1..n).map(|s| (s, s - 1)).collect(),
        _ => (0..n).map(|s| (s, (s + 1) % n)).collect(),
    }
}

/// NCCL's P2P channels on a communicator (NVIDIA/nccl 5067397c: `src/graph/paths.cc`
/// ncclTopoGetNchannels and ncclTopoComputeP2pChannels, `src/enqueue.cc`
/// scheduleP2pTasksToPlan and addP2pToPlan, `src/init.cc` for the chunk; `nccl-model.md`
/// §3.9). One figure per communicator, the fewest any peer wants: on several nodes every
/// pair, NVLink ones too, gets the network peer's count.
struct Layout {
    /// p2pnChannelsPerPeer: the most channels one peer transfer is striped over.
    per_peer: usize,
    /// nChannelsMin: what a transfer starts from, before large ones double towards `per_peer`.
    min: usize,
    /// p2pChunkSize: 128 KiB across nodes, 512 KiB on one all-NVLink node, 128 KiB on PCIe;
    /// at most NCCL_BUFFSIZE/8.
    chunk: u64,
    multi_node: bool,
}

impl Layout {
    fn new(cluster: &Cluster, comm: &Communicator) -> Layout {
        let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
        let nranks = nnodes * ppn;
        let env = comm.env();
        let paths = comm.paths();
        // p2pnChannels: the communicator's channels, rounded up to a power of two (at most 64).
        let total = pow2_ceil(comm.channels().len().min(64)).min(64);
        let per_link =
            cluster.spec().nvlink.as_ref().map_or(1.0, |n| n.bandwidth_per_link.gbyte_per_s());
        let mut fewest = usize::MAX;
        let mut all_nvlink = true;
        for g in (0..ppn).map(GpuId) {
            for h in (0..ppn).map(GpuId).filter(|&h| h != g) {
                let hop = paths.gpu_hop(cluster, NodeId(0), g, h);
                let ch = if hop.ty <= PathType::Nvb {
                    let bw = cluster.path_bandwidth(&hop.links).gbyte_per_s();
                    2 * ((bw / per_link).floor() as usize).max(1)
                } else {
                    all_nvlink = false;
                    2
                };
                fewest = fewest.min(ch);
            }
            if nnodes > 1 {
                fewest = fewest.min(net_peer_channels(cluster, comm, g, total));
            }
        }
        let mut per_peer = pow2_ceil(fewest.min(64));
        if nnodes > 1 && env.minor >= 29 && env.nchannels_per_net_peer.is_none() {
            // So that every peer fits in one round of the channels' work batches.
            while per_peer * nranks.div_ceil(PEERS_PER_BATCH) > total && per_peer > 1 {
                per_peer /= 2;
            }
        }
        let per_peer = per_peer.min(total);
        let mut min = per_peer;
        while min * nranks > total && min > 1 {
            min /= 2;
        }
        let chunk: u64 = if nnodes == 1 && all_nvlink { 512 << 10 } else { 128 << 10 };
        let chunk = chunk.min(env.buffsize.get() / 8);
        Layout { per_peer, min, chunk, multi_node: nnodes > 1 }
    }

    /// The channels and protocol of one peer transfer of `bytes`: from nChannelsMin parts of at
    /// least half a chunk (an eighth on one node), doubled while parts exceed a chunk (32 on
    /// one node); LL while each channel carries at most NCCL_P2P_LL_THRESHOLD. A transfer of
    /// nothing still runs one step on one channel (NCCL's synchronisation).
    fn op(&self, bytes: u64) -> (usize, Proto) {
        let n = if bytes == 0 {
            1
        } else {
            let (min_part, max_part) = if self.multi_node {
                (self.chunk / 2, self.chunk)
            } else {
                (self.chunk / 8, self.chunk * 32)
            };
            let mut n = self.min.min(bytes.div_ceil(min_part.max(1)) as usize).max(1);
            let mut part = min_part.max(bytes.div_ceil(n as u64));
            while part > max_part && n <= self.per_peer / 2 {
                n *= 2;
                part = bytes.div_ceil(n as u64);
            }
            n
        };
        let proto = if bytes <= n as u64 * LL_THRESHOLD { Proto::LL } else { Proto::Simple };
        (n, proto)
    }
}

/// Channels NCCL wants to a peer on another node from GPU `g`, by release: 2 before 2.20
/// (NCCL_NCHANNELS_PER_NET_PEER's default); 2.20-2.28, 2 halved while 2 x ranks exceeds 4 x
/// the P2P channels, but at least the NICs it takes to match the GPU's own link to the CPU
/// (none where a PCIe switch sits between them); from 2.29, one per NIC the GPU uses and
/// enough at NCCL_P2P_PER_CHANNEL_NET_BW to fill them.
fn net_peer_channels(cluster: &Cluster, comm: &Communicator, g: GpuId, total: usize) -> usize {
    let env = comm.env();
    if let Some(n) = env.nchannels_per_net_peer {
        return n;
    }
    if env.minor < 20 {
        return 2;
    }
    let cpu = cluster.graph_route(Vertex::Gpu(g), Vertex::Numa(cluster.numa_of(Vertex::Gpu(g))));
    let gpu_bw = match cpu {
        Some(r) if env.minor >= 29 || r.links.len() == 1 => r.bw.gbyte_per_s(),
        _ => 0.0,
    };
    // The GPU's NICs, in the order its channels take them, until they match its CPU link.
    let (mut count, mut bw) = (0usize, 0.0f64);
    for nic in cluster.gpu_nics(g) {
        // 2.29 counts the first NIC whatever the CPU link; earlier releases may count none.
        if bw >= gpu_bw && (count > 0 || env.minor < 29) {
            break;
        }
        bw += cluster.nic_path_bandwidth(g, nic).gbyte_per_s();
        count += 1;
    }
    if env.minor < 29 {
        let mut n = 2;
        while n * comm.nranks() > total * 4 && n > 1 {
            n /= 2;
        }
        return n.max(count);
    }
    if count == 0 { 2 } else { count.max((bw / env.p2p_per_channel_net_bw).ceil() as usize) }
}

/// The most one channel of a peer transfer moves (data bytes/s): across nodes, what NCCL counts
/// on one channel to carry (NCCL_P2P_PER_CHANNEL_NET_BW, 14 GB/s: from 2.29 NCCL gives a
/// network peer enough channels at this rate to fill its NICs, NVIDIA/nccl 5067397c
/// `src/graph/paths.cc`; XXRJUN's 10 x 1 H100 sendrecv moves 12.4 GB/s per channel); inside a
/// node, the profile's per-CTA rate of the GPU generation ([`GpuParams::p2p_channel`]).
///
/// [`GpuParams::p2p_channel`]: super::GpuParams::p2p_channel
fn channel_cap(call: &Call<'_>, class: HopClass) -> f64 {
    match class {
        HopClass::Net => call.comm.env().p2p_per_channel_net_bw * 1e9,
        _ => call.params.gpu(call.cluster.spec().gpu.arch).p2p_channel,
    }
}

/// The flows of `pairs` (each peer pair on each of its `chans` channels, under `proto`: what
/// [`shape`] says of the call).
fn flows(call: &Call<'_>, pairs: &[(usize, usize)], (proto, chans): (Proto, usize)) -> Vec<Flow> {
    let (coll, cluster, comm, params) = (call.coll, call.cluster, call.comm, call.params);
    let ppn = comm.ppn();
    let n = comm.nnodes() * ppn;
    let per_peer = per_peer(coll, n, call.bytes.get());
    let paths = comm.paths();
    let links = cluster.links();
    let latency =
        |path: &[LinkId]| path.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    // Each (sending GPU, peer's index) pair's NIC and relay, worked out once: every node pair
    // repeats them.
    let mut send_nics: Vec<Option<(NicId, Option<GpuId>)>> = vec![None; ppn * ppn];
    let mut flows = Vec::new();
    for &(s, d) in pairs {
        let (sn, sg) = (NodeId(s / ppn), GpuId(s % ppn));
        let (dn, dg) = (NodeId(d / ppn), GpuId(d % ppn));
        let (route, class) = if sn == dn {
            let hop = paths.gpu_hop(cluster, sn, sg, dg);
            (hop.links, hop.class)
        } else {
            // Out on the peer's rail through PXN where NCCL does, into the receiver's own NIC.
            let send = *send_nics[sg.0 * ppn + dg.0]
                .get_or_insert_with(|| paths.p2p_send_nic(cluster, sg, dg));
            let (snic, dnic) = (send.0, cluster.local_nic(dg).unwrap_or(NicId(0)));
            let mut p = paths.p2p_to_nic(cluster, sn, sg, send);
            p.extend(cluster.nic_to_nic((sn, snic), (dn, dnic), 0));
            p.extend(paths.from_nic(cluster, dn, dnic, dg));
            (p, HopClass::Net)
        };
        // Chunks pipeline behind the first one: only its latency shows.
        let eff = params.efficiency(cluster.spec().gpu.arch, class, proto);
        let per_flow = per_peer as f64 / chans as f64;
        let delay =
            latency(&route) + params.step(class, proto) + params.p2p_peer.times(rounds(coll, n));
        let path: Vec<u32> = route.iter().map(|l| l.0).collect();
        let cap = channel_cap(call, class);
        for _ in 0..chans {
            flows.push(Flow { path: path.clone(), bytes: per_flow, delay, eff, cap });
        }
    }
    flows
}

/// Every flow of the call at once, each with how many flows it stands for (on a uniform
/// network, node 0's AllToAll flows stand for all) and its cap (wire bytes/s, see
/// [`channel_cap`]), for `explain`'s bottleneck.
pub(crate) fn steady_weighted(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64, f64)> {
    let (coll, comm, bytes) = (call.coll, call.comm, call.bytes.get());
    if !is_uniform_alltoall(call) || per_peer(coll, comm.nranks(), bytes) == 0 {
        return steady_capped(call).into_iter().map(|(p, cap)| (p, 1.0, cap)).collect();
    }
    let (flows, weight) = uniform_alltoall_flows(call, shape(call));
    flows
        .into_iter()
        .zip(weight)
        .map(|(f, w)| (f.path.into_iter().map(LinkId).collect(), w, f.cap / f.eff))
        .collect()
}

/// Every flow of the call at once with its cap (wire bytes/s, see [`channel_cap`]): what the
/// call loads the network with beside other calls.
pub(crate) fn steady_capped(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
    let (coll, comm, bytes) = (call.coll, call.comm, call.bytes.get());
    if comm.nranks() < 2 || per_peer(coll, comm.nranks(), bytes) == 0 {
        return Vec::new();
    }
    let flows = flows(call, &pairs(coll, comm.nranks()), shape(call));
    flows.into_iter().map(|f| (f.path.into_iter().map(LinkId).collect(), f.cap / f.eff)).collect()
}

/// The protocol a p2p call runs and the channels a peer pair uses, without timing it. One rank
/// sends to itself: Simple (NCCL keeps LL for real peers).
pub(crate) fn shape(call: &Call<'_>) -> (Proto, usize) {
    let n = call.comm.nranks();
    if n < 2 {
        return (Proto::Simple, 1);
    }
    let (ch, proto) =
        Layout::new(call.cluster, call.comm).op(per_peer(call.coll, n, call.bytes.get()));
    (proto, ch)
}

/// One SendRecv or AllToAll; `call.bytes` is nccl-tests' size (per rank: the message for
/// SendRecv, the whole send buffer for AllToAll). Returns the time beyond the call overhead,
/// the protocol, and the most channels a peer pair uses.
pub(crate) fn time(call: &Call<'_>) -> (Time, Proto, usize) {
    let (cluster, n) = (call.cluster, call.comm.nranks());
    let (proto, chans) = shape(call);
    if n < 2 {
        return (Time::ZERO, proto, 1);
    }
    if is_uniform_alltoall(call) {
        return (uniform_alltoall(call, (proto, chans)), proto, chans);
    }
    let flows = flows(call, &pairs(call.coll, n), (proto, chans));
    let caps = cluster.capacities();
    let paths: Vec<&[u32]> = flows.iter().map(|f| f.path.as_slice()).collect();
    let wire_caps: Vec<f64> = flows.iter().map(|f| f.cap / f.eff).collect();
    let rates = steady_rates_capped(caps, &paths, Some(&wire_caps), call.load);
    (worst(&flows, &rates), proto, chans)
}

/// The slowest flow's time: its wire bytes at its rate, plus its first chunk's latency.
fn worst(flows: &[Flow], rates: &[f64]) -> Time {
    let t = flows
        .iter()
        .zip(rates)
        .map(|(f, r)| f.bytes / f.eff / r.max(1.0) + f.delay.as_secs_f64())
        .fold(0.0f64, f64::max);
    Time::from_secs_f64_ceil(t)
}

/// An AllToAll on a uniform network (identical nodes, non-blocking fabric), from node 0's
/// flows alone: every node is a copy of node 0 shifted, so a flow to node d crosses node d's
/// links as the flow from node −d to node 0 crosses node 0's. Node 0's flows to node 1 with
/// node 1's links mapped onto node 0's stand for its flows to every other node (weight
/// nnodes − 1): the load on each of node 0's links, and so every rate, is the whole call's,
/// from ppn² pairs instead of n² (n² flows on 16,384 GPUs took 24 GB).
fn uniform_alltoall(call: &Call<'_>, shape: (Proto, usize)) -> Time {
    let (flows, weight) = uniform_alltoall_flows(call, shape);
    let specs: Vec<FlowSpec<'_>> = flows
        .iter()
        .zip(&weight)
        .map(|(f, &w)| FlowSpec {
            path: &f.path,
            cap: f.cap / f.eff,
            weight: w,
            link_weights: None,
        })
        .collect();
    let rates = max_min_rates(call.cluster.capacities(), &specs);
    worst(&flows, &rates)
}

/// Whether [`uniform_alltoall`] times `call`.
fn is_uniform_alltoall(call: &Call<'_>) -> bool {
    call.coll == Collective::AllToAll
        && call.comm.nnodes() > 2
        && call.cluster.network_is_uniform()
        && call.load.is_empty()
}

/// Node 0's flows standing for a uniform AllToAll (of [`shape`]'s channels and protocol), each
/// with how many flows it stands for.
fn uniform_alltoall_flows(call: &Call<'_>, shape: (Proto, usize)) -> (Vec<Flow>, Vec<f64>) {
    let (cluster, comm) = (call.cluster, call.comm);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let reps: Vec<(usize, usize)> =
        (0..ppn).flat_map(|s| (0..2 * ppn).filter(move |&d| d != s).map(move |d| (s, d))).collect();
    let mut flows = flows(call, &reps, shape);
    // Node 1's links as node 0's: its own links shifted, its NICs' fabric links by NIC.
    let (b0, b1) = (cluster.node_base(NodeId(0)), cluster.node_base(NodeId(1)));
    let local = b1..b1 + (b1 - b0);
    let nics = cluster.spec().nic.as_ref().map_or(0, |n| n.count);
    let mut fabric = std::collections::HashMap::new();
    for x in (0..nics).map(NicId) {
        let ((t0, r0), (t1, r1)) =
            (cluster.nic_links(NodeId(0), x), cluster.nic_links(NodeId(1), x));
        fabric.insert(t1.0, t0.0);
        fabric.insert(r1.0, r0.0);
    }
    let mut weight = Vec::with_capacity(flows.len());
    for f in &mut flows {
        let remote = f.path.iter().any(|l| local.contains(l) || fabric.contains_key(l));
        for l in &mut f.path {
            if local.contains(l) {
                *l = *l - b1 + b0;
            } else if let Some(&m) = fabric.get(l) {
                *l = m;
            }
        }
        weight.push(if remote { (nnodes - 1) as f64 } else { 1.0 });
    }
    (flows, weight)
}

/// A point-to-point call with every flow on the network (detailed mode).
struct Flows {
    /// Per flow: its wire bytes, path, the latency after its last byte and its cap (wire
    /// bytes/s).
    flows: Vec<(Vec<LinkId>, Bytes, Time, f64)>,
    left: usize,
    finish: Time,
}

impl Algorithm for Flows {
    fn form(&self) -> Form {
        Form::Detailed
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        self.finish = cx.now();
        for (i, (path, bytes, _, cap)) in self.flows.iter().enumerate() {
            let p = cx.add_path(path);
            cx.capped_flow(p, *bytes, *cap, Signal::Flow(i as u32));
        }
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        if let Signal::Flow(i) = signal {
            self.finish = self.finish.max(cx.now() + self.flows[i as usize].2);
            self.left -= 1;
        }
    }

    fn finished(&self) -> Option<Time> {
        (self.left == 0).then_some(self.finish)
    }

    fn last(&self) -> Time {
        self.finish
    }
}

/// The detailed form of a SendRecv or AllToAll: every peer pair's flows on the network.
pub(crate) fn detailed(call: &Call<'_>) -> (Box<dyn Algorithm>, Proto, usize) {
    let n = call.comm.nranks();
    let (proto, chans) = shape(call);
    if n < 2 {
        return (Box::new(Flows { flows: Vec::new(), left: 0, finish: Time::ZERO }), proto, 1);
    }
    let flows: Vec<(Vec<LinkId>, Bytes, Time, f64)> =
        flows(call, &pairs(call.coll, n), (proto, chans))
            .into_iter()
            .map(|f| {
                let wire = Bytes::new((f.bytes / f.eff).ceil() as u64);
                (f.path.into_iter().map(LinkId).collect(), wire, f.delay, f.cap / f.eff)
            })
            .collect();
    let left = flows.len();
    (Box::new(Flows { flows, left, finish: Time::ZERO }), proto, chans)
}
