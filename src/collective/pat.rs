//! PAT (NCCL ≥ 2.23) for AllGather and ReduceScatter with one GPU per node: a logarithmic
//! exchange instead of the ring's n−1 steps. Modelled as recursive doubling (AllGather) and
//! halving (ReduceScatter): in step k every rank exchanges with the rank 2^k away the 2^k
//! blocks it holds (AllGather; ReduceScatter runs the steps in reverse), all pairs at once
//! sharing the network by max-min fairness, each step paying the network's per-step latency
//! (aggregated: each step at its steady-state rates; detailed: each step's flows on the network,
//! the next step once the last of them has arrived).
//! NCCL's PAT aggregates and pipelines these steps further; this is its bandwidth- and
//! latency-equivalent skeleton.

use super::Collective;
use super::run::{Algorithm, Call, Ctx, Form, Signal, steady_rates};
use crate::comm::{Communicator, HopClass, Proto};
use crate::hw::{Cluster, GpuId, NicId, NodeId};
use crate::net::LinkId;
use crate::units::Bytes;
use crate::units::Time;

/// Routes from node `a`'s GPU to node `b`'s through their NICs, from the node-local halves
/// computed once (every node is a copy: node `n`'s are node 0's shifted by its first link id).
struct Router<'a> {
    cluster: &'a Cluster,
    nic: NicId,
    to_nic: Vec<LinkId>,
    from_nic: Vec<LinkId>,
    base: u32,
}

impl<'a> Router<'a> {
    fn new(cluster: &'a Cluster, comm: &Communicator) -> Router<'a> {
        let paths = comm.paths();
        let (node, gpu) = (NodeId(0), GpuId(0));
        let nic = cluster.local_nic(gpu).unwrap_or(NicId(0));
        Router {
            cluster,
            nic,
            to_nic: paths.to_nic(cluster, node, gpu, nic),
            from_nic: paths.from_nic(cluster, node, nic, gpu),
            base: cluster.node_base(node),
        }
    }

    /// Rank `a` to rank `b` (one GPU per node: rank `r` is node `r`).
    fn route(&self, a: usize, b: usize) -> Vec<LinkId> {
        let (a, b) = (NodeId(a), NodeId(b));
        let (ba, bb) = (self.cluster.node_base(a), self.cluster.node_base(b));
        let shift = |l: &LinkId, to: u32| LinkId(l.0 - self.base + to);
        let mut p: Vec<LinkId> = self.to_nic.iter().map(|l| shift(l, ba)).collect();
        p.extend(self.cluster.nic_to_nic((a, self.nic), (b, self.nic), 0));
        p.extend(self.from_nic.iter().map(|l| shift(l, bb)));
        p
    }
}

/// The flows of the step that moves the most (half the ranks' distance), for `explain`'s
/// bottleneck.
pub(crate) fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    let (cluster, comm) = (call.cluster, call.comm);
    let n = comm.nranks();
    if n < 2 {
        return Vec::new();
    }
    let dist = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
    let router = Router::new(cluster, comm);
    (0..n).map(|r| router.route(r, (r + dist) % n)).collect()
}

/// The time of one PAT AllGather or ReduceScatter of `call.bytes` (NCCL's total) on one GPU
/// per node, beyond the call overhead.
pub(crate) fn time(call: &Call<'_>) -> Time {
    let (coll, cluster, comm, params) = (call.coll, call.cluster, call.comm, call.params);
    let bytes = call.bytes.get();
    let n = comm.nranks();
    if n < 2 || bytes == 0 {
        return Time::ZERO;
    }
    let block = bytes as f64 / n as f64;
    let links = cluster.links();
    let caps = cluster.capacities();
    let latency = |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    let router = Router::new(cluster, comm);
    let route = |a: usize, b: usize| router.route(a, b);
    let steps = usize::BITS - (n - 1).leading_zeros();
    let mut order: Vec<u32> = (0..steps).collect();
    if coll == Collective::ReduceScatter {
        order.reverse();
    }
    let step_lat = params.step(HopClass::Net, Proto::Simple);
    let mut total = 0.0f64;
    for k in order {
        let dist = 1usize << k;
        // Blocks held before step k: 2^k (fewer where n is not a power of two).
        let held = dist.min(n - dist).max(1) as f64;
        let flows: Vec<Vec<LinkId>> = (0..n).map(|r| route(r, (r + dist) % n)).collect();
        let raw: Vec<Vec<u32>> = flows.iter().map(|p| p.iter().map(|l| l.0).collect()).collect();
        let refs: Vec<&[u32]> = raw.iter().map(|p| p.as_slice()).collect();
        let rates = steady_rates(caps, &refs, call.load);
        let t = flows
            .iter()
            .zip(&rates)
            .map(|(p, r)| held * block / r.max(1.0) + latency(p).as_secs_f64())
            .fold(0.0f64, f64::max);
        total += t + step_lat.as_secs_f64();
    }
    Time::from_secs_f64_ceil(total)
}

/// A PAT call with each step's flows on the network (detailed mode).
struct Steps {
    /// Per step: each flow's path, wire bytes and latency.
    steps: Vec<Vec<(Vec<LinkId>, Bytes, Time)>>,
    step_lat: Time,
    at: usize,
    left: usize,
    /// When the current step's data has all arrived.
    arrived: Time,
    end: Option<Time>,
}

impl Steps {
    fn begin(&mut self, cx: &mut Ctx<'_>) {
        match self.steps.get(self.at) {
            None => self.end = Some(cx.now()),
            Some(flows) => {
                self.left = flows.len();
                self.arrived = cx.now();
                let flows = flows.clone();
                for (i, (path, bytes, _)) in flows.iter().enumerate() {
                    let p = cx.add_path(path);
                    cx.flow(p, *bytes, Signal::Flow(i as u32));
                }
            }
        }
    }
}

impl Algorithm for Steps {
    fn form(&self) -> Form {
        Form::Detailed
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        self.begin(cx);
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        match signal {
            Signal::Flow(i) => {
                let lat = self.steps[self.at][i as usize].2;
                self.arrived = self.arrived.max(cx.now() + lat);
                self.left -= 1;
                if self.left == 0 {
                    cx.at(self.arrived + self.step_lat, Signal::End);
                }
            }
            Signal::End => {
                self.at += 1;
                self.begin(cx);
            }
            _ => {}
        }
    }

    fn finished(&self) -> Option<Time> {
        self.end
    }

    fn last(&self) -> Time {
        self.end.unwrap_or(self.arrived)
    }
}

/// The detailed form of a PAT AllGather or ReduceScatter.
pub(crate) fn detailed(call: &Call<'_>) -> Box<dyn Algorithm> {
    let (coll, cluster, comm, params) = (call.coll, call.cluster, call.comm, call.params);
    let bytes = call.bytes.get();
    let n = comm.nranks();
    let step_lat = params.step(HopClass::Net, Proto::Simple);
    let mut steps = Vec::new();
    if n >= 2 && bytes > 0 {
        let block = bytes as f64 / n as f64;
        let links = cluster.links();
        let latency =
            |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
        let router = Router::new(cluster, comm);
        let count = usize::BITS - (n - 1).leading_zeros();
        let mut order: Vec<u32> = (0..count).collect();
        if coll == Collective::ReduceScatter {
            order.reverse();
        }
        for k in order {
            let dist = 1usize << k;
            let held = dist.min(n - dist).max(1) as f64;
            let wire = Bytes::new((held * block).ceil() as u64);
            steps.push(
                (0..n)
                    .map(|r| {
                        let p = router.route(r, (r + dist) % n);
                        let l = latency(&p);
                        (p, wire, l)
                    })
                    .collect(),
            );
        }
    }
    Box::new(Steps { steps, step_lat, at: 0, left: 0, arrived: Time::ZERO, end: None })
}
