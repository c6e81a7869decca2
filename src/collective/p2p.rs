//! Point-to-point: SendRecv (each rank to the next) and AllToAll (each rank to every other),
//! with NCCL's p2p channels and chunks (`nccl-model.md` §3.9).
//!
//! Every peer pair moves its bytes over `channels` flows on its route — NVLink or PCIe inside a
//! node, the GPU's own NIC across nodes, so that across nodes a GPU's AllToAll is bound by one
//! NIC. All pairs send at once and share links by max-min fairness; each flow's time is its
//! bytes at its rate, plus the first chunk's latency (the rest pipeline behind it). Aggregated:
//! every flow at its steady-state rate. Detailed: the flows run on the network, their rates
//! re-shared as each finishes.

use super::run::{Algorithm, Call, Ctx, Form, Signal, steady_rates};
use super::{Collective, TimingParams};
use crate::comm::{Communicator, HopClass, Proto};
use crate::hw::{Cluster, GpuId, NicId, NodeId, PathType};
use crate::net::LinkId;
use crate::net::solver::{FlowSpec, max_min_rates};
use crate::units::Bytes;
use crate::units::Time;

fn pow2_ceil(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

fn pow2_floor(n: usize) -> usize {
    if n == 0 { 1 } else { 1 << (usize::BITS - 1 - n.leading_zeros()) }
}

/// One peer pair's share on one channel.
struct Flow {
    path: Vec<u32>,
    bytes: f64,
    delay: Time,
    eff: f64,
}

/// Bytes each peer pair moves: the message for SendRecv, a 1/n share of the send buffer for
/// AllToAll.
fn per_peer(coll: Collective, n: usize, bytes: u64) -> u64 {
    match coll {
        Collective::AllToAll => bytes / n as u64,
        _ => bytes,
    }
}

/// LL up to NCCL_P2P_LL_THRESHOLD (16 KiB per peer), else Simple.
fn proto(per_peer: u64) -> Proto {
    if per_peer <= 16 * 1024 { Proto::LL } else { Proto::Simple }
}

/// Every peer pair of a call: (source rank, destination rank).
fn pairs(coll: Collective, n: usize) -> Vec<(usize, usize)> {
    match coll {
        Collective::AllToAll => {
            (0..n).flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d))).collect()
        }
        _ => (0..n).map(|s| (s, (s + 1) % n)).collect(),
    }
}

/// The flows of `pairs` (each peer pair on each of its channels) and the most channels a pair
/// uses.
fn flows(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    params: &TimingParams,
    pairs: &[(usize, usize)],
) -> (Vec<Flow>, usize) {
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let n = nnodes * ppn;
    let per_peer = per_peer(coll, n, bytes);
    let proto = proto(per_peer);
    let spec = cluster.spec();
    let paths = comm.paths();
    let total = pow2_floor(comm.channels().len().min(64));
    let per_link = spec.nvlink.as_ref().map_or(1.0, |n| n.bandwidth_per_link.gbyte_per_s());
    let links = cluster.links();
    let latency =
        |path: &[LinkId]| path.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    let mut flows = Vec::new();
    let mut max_ch = 1;
    for &(s, d) in pairs {
        let (sn, sg) = (NodeId(s / ppn), GpuId(s % ppn));
        let (dn, dg) = (NodeId(d / ppn), GpuId(d % ppn));
        let (route, class, chans, chunk) = if sn == dn {
            let hop = paths.gpu_hop(cluster, sn, sg, dg);
            let nvl = hop.ty <= PathType::Nvb;
            let bw = cluster.path_bandwidth(&hop.links).gbyte_per_s();
            let ch = if nvl { 2 * ((bw / per_link).floor() as usize).max(1) } else { 2 };
            let chunk = if nvl { 512 * 1024 } else { 128 * 1024 };
            (hop.links, hop.class, ch, chunk)
        } else {
            let nic = |g: GpuId| cluster.local_nic(g).unwrap_or(NicId(0));
            let (snic, dnic) = (nic(sg), nic(dg));
            let mut p = paths.to_nic(cluster, sn, sg, snic);
            p.extend(cluster.nic_to_nic((sn, snic), (dn, dnic)));
            p.extend(paths.from_nic(cluster, dn, dnic, dg));
            let nics = cluster.gpu_nics(sg).len().max(1);
            let net_bw = cluster.nic_path_bandwidth(sg, snic).gbyte_per_s();
            (p, HopClass::Net, nics.max((net_bw / 14.0).ceil() as usize), 128 * 1024)
        };
        let chans = pow2_ceil(chans).min(total).max(1);
        max_ch = max_ch.max(chans);
        // Chunks pipeline behind the first one: only its latency shows (NCCL's p2p chunk is
        // 512 KiB over NVLink, 128 KiB otherwise, at most NCCL_BUFFSIZE/8).
        let _chunk = chunk.min(comm.env().buffsize.get() / 8);
        let eff = params.efficiency(cluster.spec().gpu.arch, class, proto);
        let per_flow = per_peer as f64 / chans as f64;
        let delay = latency(&route) + params.step(class, proto);
        let path: Vec<u32> = route.iter().map(|l| l.0).collect();
        for _ in 0..chans {
            flows.push(Flow { path: path.clone(), bytes: per_flow, delay, eff });
        }
    }
    (flows, max_ch)
}

/// Every flow of the call at once, each with how many flows it stands for (on a uniform
/// network, node 0's AllToAll flows stand for all), for `explain`'s bottleneck.
pub(crate) fn steady_weighted(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
    if is_uniform_alltoall(call) && per_peer(call.coll, call.comm.nranks(), call.bytes.get()) > 0 {
        let (flows, weight, _) = uniform_alltoall_flows(call);
        return flows
            .into_iter()
            .zip(weight)
            .map(|(f, w)| (f.path.into_iter().map(LinkId).collect(), w))
            .collect();
    }
    steady_paths(call).into_iter().map(|p| (p, 1.0)).collect()
}

/// Every flow of the call at once (explain's bottleneck; the load's steady state).
pub(crate) fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    let (coll, comm, bytes) = (call.coll, call.comm, call.bytes.get());
    if comm.nranks() < 2 || per_peer(coll, comm.nranks(), bytes) == 0 {
        return Vec::new();
    }
    let (flows, _) =
        flows(coll, call.cluster, comm, bytes, call.params, &pairs(coll, comm.nranks()));
    flows.into_iter().map(|f| f.path.into_iter().map(LinkId).collect()).collect()
}

/// The protocol a p2p call runs (LL up to NCCL_P2P_LL_THRESHOLD, 16 KiB per peer, else
/// Simple) and the most channels a peer pair uses, without timing it.
pub(crate) fn shape(call: &Call<'_>) -> (Proto, usize) {
    let per_peer = per_peer(call.coll, call.comm.nranks(), call.bytes.get());
    (proto(per_peer), 1)
}

/// One SendRecv or AllToAll; `call.bytes` is nccl-tests' size (per rank: the message for
/// SendRecv, the whole send buffer for AllToAll). Returns the time beyond the call overhead,
/// the protocol, and the most channels a peer pair uses.
pub(crate) fn time(call: &Call<'_>) -> (Time, Proto, usize) {
    let (coll, cluster, comm, bytes) = (call.coll, call.cluster, call.comm, call.bytes.get());
    let n = comm.nranks();
    let per_peer = per_peer(coll, n, bytes);
    let proto = proto(per_peer);
    if n < 2 || per_peer == 0 {
        return (Time::ZERO, proto, 1);
    }
    if is_uniform_alltoall(call) {
        let (t, max_ch) = uniform_alltoall(call);
        return (t, proto, max_ch);
    }
    let (flows, max_ch) = flows(coll, cluster, comm, bytes, call.params, &pairs(coll, n));
    let caps = cluster.capacities();
    let paths: Vec<&[u32]> = flows.iter().map(|f| f.path.as_slice()).collect();
    let rates = steady_rates(caps, &paths, call.load);
    (worst(&flows, &rates), proto, max_ch)
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
fn uniform_alltoall(call: &Call<'_>) -> (Time, usize) {
    let (flows, weight, max_ch) = uniform_alltoall_flows(call);
    let specs: Vec<FlowSpec<'_>> = flows
        .iter()
        .zip(&weight)
        .map(|(f, &w)| FlowSpec {
            path: &f.path,
            cap: f64::INFINITY,
            weight: w,
            link_weights: None,
        })
        .collect();
    let rates = max_min_rates(call.cluster.capacities(), &specs);
    (worst(&flows, &rates), max_ch)
}

/// Whether [`uniform_alltoall`] times `call`.
fn is_uniform_alltoall(call: &Call<'_>) -> bool {
    call.coll == Collective::AllToAll
        && call.comm.nnodes() > 2
        && call.cluster.network_is_uniform()
        && call.load.is_empty()
}

/// Node 0's flows standing for a uniform AllToAll, each with how many flows it stands for, and
/// the most channels a pair uses.
fn uniform_alltoall_flows(call: &Call<'_>) -> (Vec<Flow>, Vec<f64>, usize) {
    let (cluster, comm) = (call.cluster, call.comm);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let reps: Vec<(usize, usize)> =
        (0..ppn).flat_map(|s| (0..2 * ppn).filter(move |&d| d != s).map(move |d| (s, d))).collect();
    let (mut flows, max_ch) =
        flows(Collective::AllToAll, cluster, comm, call.bytes.get(), call.params, &reps);
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
    (flows, weight, max_ch)
}

/// A point-to-point call with every flow on the network (detailed mode).
struct Flows {
    /// Per flow: its wire bytes, path and the latency after its last byte.
    flows: Vec<(Vec<LinkId>, Bytes, Time)>,
    left: usize,
    finish: Time,
}

impl Algorithm for Flows {
    fn form(&self) -> Form {
        Form::Detailed
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        self.finish = cx.now();
        for (i, (path, bytes, _)) in self.flows.iter().enumerate() {
            let p = cx.add_path(path);
            cx.flow(p, *bytes, Signal::Flow(i as u32));
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
    let (coll, cluster, comm, bytes) = (call.coll, call.cluster, call.comm, call.bytes.get());
    let n = comm.nranks();
    let per_peer = per_peer(coll, n, bytes);
    let proto = proto(per_peer);
    if n < 2 || per_peer == 0 {
        return (Box::new(Flows { flows: Vec::new(), left: 0, finish: Time::ZERO }), proto, 1);
    }
    let (flows, max_ch) = flows(coll, cluster, comm, bytes, call.params, &pairs(coll, n));
    let flows: Vec<(Vec<LinkId>, Bytes, Time)> = flows
        .into_iter()
        .map(|f| {
            let wire = Bytes::new((f.bytes / f.eff).ceil() as u64);
            (f.path.into_iter().map(LinkId).collect(), wire, f.delay)
        })
        .collect();
    let left = flows.len();
    (Box::new(Flows { flows, left, finish: Time::ZERO }), proto, max_ch)
}
