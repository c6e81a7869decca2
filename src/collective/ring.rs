//! Ring AllReduce, as NCCL runs it (`nccl-model.md` §4.1–4.3), timed on the flow-level
//! network.
//!
//! Each channel moves its share of the buffer in loops of `nranks` chunks. A loop is 2(n−1)
//! steps (n−1 of reduce-scatter, n−1 of all-gather); in every step each rank sends one chunk to
//! its ring successor, cut into slices (two per chunk for Simple; for the streaming protocols LL
//! and LL128, one CTA store round each, so data is forwarded as it arrives). A rank
//! may send slice j of step s once it has received slice j of step s−1 (plus the protocol's
//! per-step latency, pipelined), once its previous slice is out and its CTA has paid the
//! architecture's serial `sync` after publishing (every Simple slice, the last slice of an
//! LL/LL128 step; peer-to-peer hops only — the proxy drives network hops), and once the
//! receiver has a free slot: each connection has 8 FIFO slots (NCCL_STEPS), a Simple chunk
//! takes 4, an LL/LL128 chunk 1, and a slot is freed when the receiver has consumed the chunk
//! (forwarded it, or, at the last step, copied it out). Every slice is a flow of
//! `payload / efficiency` bytes on the hop's links, the efficiency being the protocol's on that
//! link class (per architecture on NVLink).
//!
//! Two ways to run it: [`Mode::Detailed`] simulates every rank and channel with max-min rates
//! re-shared at every flow start and end; [`Mode::Aggregated`] uses the symmetry of identical
//! nodes and channels — a ring over identical nodes is periodic, so one node's ranks with the
//! last one sending to the first through the network stand for all — and gives each hop the
//! steady-state max-min rate it gets when every connection of every channel sends at once.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Collective, Mode, TimingParams};
use crate::comm::{Communicator, HopClass, Proto, RingChannel, Selection};
use crate::engine::{EventQueue, Next, next};
use crate::hw::Cluster;
use crate::net::solver::{FlowSpec, max_min_rates};
use crate::net::{LinkId, Network, PathId};
use crate::units::{Bytes, Time};

/// The result of one simulated AllReduce.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingRun {
    /// Time as nccl-tests would report it (call overhead included).
    pub time: Time,
    /// Events processed (slice arrivals and flow completions).
    pub events: u64,
}

/// Aggregated mode simulates calls of at most this many slice transfers in detail.
const DETAIL_BELOW: usize = 100_000;

/// How one channel's bytes are cut: loops, steps, chunks and slices.
#[derive(Debug, Clone)]
struct Plan {
    steps: usize,
    /// Per loop: payload bytes of each slice of a chunk.
    loops: Vec<Vec<u64>>,
    /// Per chunk (flat over loops and steps): flat index one past its last slice.
    chunk_end: Vec<usize>,
    /// Per chunk: slices in it.
    chunk_slices: Vec<usize>,
    /// Chunks that fit in the 8-slot FIFO.
    window: usize,
}

/// Payload bytes of one store round of a CTA under a streaming protocol: LL stores 8 B of data
/// (+ 8 B flag) per thread with 512 threads; LL128 stores 120 B of data per 128 B line, 16 B per
/// thread with 640 threads.
pub(crate) fn stream_unit(proto: Proto) -> u64 {
    match proto {
        Proto::LL => 512 * 8,
        Proto::LL128 => 640 * 16 * 120 / 128,
        Proto::Simple => u64::MAX,
    }
}

/// Cuts `total` bytes into pieces of `unit` (the last one shorter).
fn split(total: u64, unit: u64) -> Vec<u64> {
    let unit = unit.max(1);
    (0..total.div_ceil(unit)).map(|i| unit.min(total - i * unit)).collect()
}

impl Plan {
    fn new(
        per_channel: u64,
        nranks: usize,
        steps: usize,
        proto: Proto,
        buffsize: Bytes,
        elt: u64,
    ) -> Plan {
        let n = nranks as u64;
        let (chunk, window, nominal_slice) = match proto {
            Proto::Simple => {
                let step = buffsize.get() / 8;
                (4 * step, 2, 2 * step)
            }
            // LL: 512 KiB FIFO, 64 KiB steps carrying 32 KiB of data.
            Proto::LL => (32 * 1024, 8, 32 * 1024),
            // LL128: 4,915,200 B FIFO, 614,400 B steps carrying 576,000 B of data.
            Proto::LL128 => (576_000, 8, 576_000),
        };
        let align = 16u64.max(elt);
        let mut loops = Vec::new();
        let mut remaining = per_channel;
        while remaining > 0 {
            let real = chunk.min(remaining.div_ceil(n).div_ceil(align) * align);
            let slices = match proto {
                Proto::Simple => {
                    let min_slice = (nominal_slice / 32).max(align);
                    let slice = (real.div_ceil(2).div_ceil(16 * elt) * 16 * elt).max(min_slice);
                    split(real, slice)
                }
                // LL and LL128 stream: every store carries its own flag, so a receiver can
                // forward data one store round (threads × 16 B on the wire) after it arrives.
                _ => {
                    let unit = (stream_unit(proto).div_ceil(align) * align).max(align);
                    split(real, unit)
                }
            };
            loops.push(slices);
            remaining -= remaining.min(n * real);
        }
        let mut chunk_end = Vec::with_capacity(loops.len() * steps);
        let mut chunk_slices = Vec::with_capacity(loops.len() * steps);
        let mut end = 0;
        for l in &loops {
            for _ in 0..steps {
                end += l.len();
                chunk_end.push(end);
                chunk_slices.push(l.len());
            }
        }
        Plan { steps, loops, chunk_end, chunk_slices, window }
    }

    fn total_chunks(&self) -> usize {
        self.chunk_end.len()
    }
}

/// Moves slices: either the shared network or fixed per-hop rates.
trait Transport {
    fn start(&mut self, now: Time, hop: usize, wire: Bytes, token: u64);
    fn next_completion(&mut self) -> Option<Time>;
    fn complete_until(&mut self, t: Time) -> Vec<u64>;
}

struct Shared {
    net: Network,
    paths: Vec<PathId>,
}

impl Transport for Shared {
    fn start(&mut self, now: Time, hop: usize, wire: Bytes, token: u64) {
        self.net.start_flow(now, self.paths[hop], wire, f64::INFINITY, 1.0, token);
    }
    fn next_completion(&mut self) -> Option<Time> {
        self.net.next_completion()
    }
    fn complete_until(&mut self, t: Time) -> Vec<u64> {
        self.net.complete_until(t)
    }
}

struct Fixed {
    rates: Vec<f64>,
    heap: BinaryHeap<Reverse<(Time, u64)>>,
}

impl Transport for Fixed {
    fn start(&mut self, now: Time, hop: usize, wire: Bytes, token: u64) {
        let d = Time::from_secs_f64_ceil(wire.as_f64() / self.rates[hop]);
        self.heap.push(Reverse((now + d, token)));
    }
    fn next_completion(&mut self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
    fn complete_until(&mut self, t: Time) -> Vec<u64> {
        let mut done = Vec::new();
        while let Some(Reverse((ft, tok))) = self.heap.peek().copied() {
            if ft > t {
                break;
            }
            self.heap.pop();
            done.push(tok);
        }
        done
    }
}

/// Per (rank, channel) progress.
#[derive(Debug, Clone, Default)]
struct Conn {
    /// Next slice to send (flat index).
    next: usize,
    /// Chunk of the next slice, and the slice's index within it.
    chunk: usize,
    in_chunk: usize,
    busy: bool,
    /// Own chunks fully sent.
    sent_chunks: usize,
    /// Slices received from the predecessor.
    arrived: usize,
    /// Received chunks consumed (their FIFO slots freed).
    consumed: usize,
}

/// What the ring's event queue carries.
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// A slice sent by connection `i` is visible at its receiver.
    Arrive(usize),
    /// Connection `i`'s CTA is done with its post-send work and may send again.
    Release(usize),
}

struct Ring<'a, T: Transport> {
    plan: &'a Plan,
    /// Per connection: payload efficiency of its hop under the protocol.
    eff: Vec<f64>,
    /// Per connection: whether its CTA moves the data itself (P2P), and so pays `sync`.
    hold: Vec<bool>,
    /// Serial cost the sending CTA pays after each post.
    sync: Time,
    /// Whether every slice is a post (Simple) or only the last slice of each step.
    sync_every_slice: bool,
    ranks: usize,
    channels: usize,
    conns: Vec<Conn>,
    /// Arrival delay of each hop: path latency + per-step protocol latency.
    delay: Vec<Time>,
    transport: T,
    queue: EventQueue<Ev>,
    finish: Time,
    events: u64,
}

impl<T: Transport> Ring<'_, T> {
    fn idx(&self, rank: usize, ch: usize) -> usize {
        rank * self.channels + ch
    }

    fn loop_of(&self, chunk: usize) -> &[u64] {
        &self.plan.loops[chunk / self.plan.steps]
    }

    fn try_start(&mut self, rank: usize, ch: usize, now: Time) {
        let i = self.idx(rank, ch);
        let succ = self.idx((rank + 1) % self.ranks, ch);
        let c = &self.conns[i];
        if c.busy || c.chunk >= self.plan.total_chunks() {
            return;
        }
        let step = c.chunk % self.plan.steps;
        if step > 0 {
            // Needs slice `in_chunk` of the previous chunk from the predecessor.
            let needed = self.plan.chunk_end[c.chunk - 1] - self.plan.chunk_slices[c.chunk - 1]
                + c.in_chunk
                + 1;
            if c.arrived < needed {
                return;
            }
        }
        if c.chunk >= self.conns[succ].consumed + self.plan.window {
            return;
        }
        let payload = self.loop_of(c.chunk)[c.in_chunk];
        let wire = Bytes::new((payload as f64 / self.eff[i]).ceil() as u64);
        self.conns[i].busy = true;
        self.transport.start(now, i, wire, i as u64);
    }

    fn advance_consumed(&mut self, rank: usize, ch: usize, now: Time) -> bool {
        let i = self.idx(rank, ch);
        let mut moved = false;
        loop {
            let c = &self.conns[i];
            let q = c.consumed;
            if q >= self.plan.total_chunks() || c.arrived < self.plan.chunk_end[q] {
                break;
            }
            let last_step = q % self.plan.steps == self.plan.steps - 1;
            let needs_sent = if last_step { q + 1 } else { q + 2 };
            if c.sent_chunks < needs_sent {
                break;
            }
            self.conns[i].consumed += 1;
            moved = true;
        }
        if moved && self.conns[i].consumed == self.plan.total_chunks() {
            self.finish = self.finish.max(now);
        }
        moved
    }

    fn on_sent(&mut self, i: usize, now: Time) {
        let (rank, ch) = (i / self.channels, i % self.channels);
        let pred = (rank + self.ranks - 1) % self.ranks;
        let c = &mut self.conns[i];
        c.next += 1;
        c.in_chunk += 1;
        let mut posted = self.sync_every_slice;
        if c.in_chunk == self.plan.chunk_slices[c.chunk] {
            c.in_chunk = 0;
            c.chunk += 1;
            c.sent_chunks += 1;
            posted = true;
        }
        let hold = posted && self.hold[i] && self.sync > Time::ZERO;
        c.busy = hold;
        if hold {
            self.queue.schedule(now + self.sync, Ev::Release(i));
        }
        let succ = self.idx((rank + 1) % self.ranks, ch);
        self.queue.schedule(now + self.delay[i], Ev::Arrive(succ));
        if self.advance_consumed(rank, ch, now) {
            self.try_start(pred, ch, now);
        }
        self.try_start(rank, ch, now);
    }

    fn on_arrive(&mut self, i: usize, now: Time) {
        let (rank, ch) = (i / self.channels, i % self.channels);
        let pred = (rank + self.ranks - 1) % self.ranks;
        self.conns[i].arrived += 1;
        if self.advance_consumed(rank, ch, now) {
            self.try_start(pred, ch, now);
        }
        self.try_start(rank, ch, now);
    }

    fn run(mut self) -> (Time, u64) {
        for r in 0..self.ranks {
            for c in 0..self.channels {
                self.try_start(r, c, Time::ZERO);
            }
        }
        loop {
            match next(self.queue.peek_time(), self.transport.next_completion()) {
                Next::Done => break,
                Next::Flows(t) => {
                    self.queue.advance_to(t);
                    for tok in self.transport.complete_until(t) {
                        self.events += 1;
                        self.on_sent(tok as usize, t);
                    }
                }
                Next::Events(t) => {
                    while self.queue.peek_time() == Some(t) {
                        match self.queue.pop() {
                            Some((_, Ev::Arrive(i))) => {
                                self.events += 1;
                                self.on_arrive(i, t);
                            }
                            Some((_, Ev::Release(i))) => {
                                self.conns[i].busy = false;
                                let (rank, ch) = (i / self.channels, i % self.channels);
                                self.try_start(rank, ch, t);
                            }
                            None => {}
                        }
                    }
                }
            }
        }
        (self.finish, self.events)
    }
}

/// Simulates one ring AllReduce of `bytes` (elements of `elt` bytes) with `sel`'s protocol and
/// channel count.
pub fn simulate_allreduce(
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    elt: u64,
    sel: &Selection,
    params: &TimingParams,
    mode: Mode,
) -> RingRun {
    simulate(Collective::AllReduce, cluster, comm, bytes, elt, sel, params, mode)
}

/// Simulates one ring AllReduce (2(n−1) steps per loop), AllGather or ReduceScatter (n−1
/// steps) of `bytes` — for the last two the total over all ranks, as NCCL counts it.
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    elt: u64,
    sel: &Selection,
    params: &TimingParams,
    mode: Mode,
) -> RingRun {
    let nranks = comm.nranks();
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    if nranks < 2 || bytes == 0 {
        return RingRun { time: params.call_overhead, events: 0 };
    }
    let per_channel = bytes.div_ceil(nch as u64).div_ceil(16) * 16;
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let arch = cluster.spec().gpu.arch;
    let efficiency = |class: HopClass| params.efficiency(arch, class, sel.proto);
    let sync = gpu.sync[p];
    let steps = match coll {
        Collective::AllReduce => 2 * (nranks - 1),
        _ => nranks - 1,
    };
    let plan = Plan::new(per_channel, nranks, steps, sel.proto, comm.env().buffsize, elt);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let links = cluster.links();
    let path_latency =
        |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);

    // Small calls run in detail even in aggregated mode: that is where the steady-state shares
    // err most (flows come and go around latencies), and it costs little.
    let work = nranks * nch * plan.total_chunks() * plan.loops.first().map_or(1, |l| l.len());
    let mode = if work <= DETAIL_BELOW { Mode::Detailed } else { mode };
    let (finish, events) = match mode {
        Mode::Detailed => {
            let mut net = Network::new(links);
            let mut paths = Vec::new();
            let mut delay = Vec::new();
            let mut eff = Vec::new();
            let mut hold = Vec::new();
            for node in 0..nnodes {
                for i in 0..ppn {
                    for ch in &comm.channels()[..nch] {
                        let (p, class) = comm.hop_path(cluster, ch, node, i, (node + 1) % nnodes);
                        delay.push(path_latency(&p) + params.step(class, sel.proto));
                        eff.push(efficiency(class));
                        hold.push(class != HopClass::Net);
                        paths.push(net.add_path(&p, links));
                    }
                }
            }
            let ring = Ring {
                plan: &plan,
                eff,
                hold,
                sync,
                sync_every_slice: sel.proto == Proto::Simple,
                ranks: nranks,
                channels: nch,
                conns: vec![Conn::default(); nranks * nch],
                delay,
                transport: Shared { net, paths },
                queue: EventQueue::new(),
                finish: Time::ZERO,
                events: 0,
            };
            ring.run()
        }
        Mode::Aggregated => {
            // Steady state: every hop of every channel sending at once. On a uniform network
            // every node sees the same, so node 0's hops stand for all, its last hop leaving
            // through its NIC and, by symmetry, re-entering node 0. Where racks, oversubscribed
            // tiers or placement groups make nodes differ, all nodes' hops share the network and
            // each ring position runs at its slowest node's rate (the ring moves in lockstep).
            let uniform = cluster.network_is_uniform() || nnodes == 1;
            let (span, to) = if uniform { (1, 0) } else { (nnodes, 1) };
            let hop = |ch: &RingChannel, node: usize, i: usize| {
                let next = if uniform { 0 } else { (node + to) % nnodes };
                comm.hop_path(cluster, ch, node, i, next)
            };
            let all: Vec<Vec<u32>> = (0..span)
                .flat_map(|node| {
                    comm.channels()[..nch].iter().flat_map(move |ch| {
                        (0..ppn).map(move |i| hop(ch, node, i).0.iter().map(|l| l.0).collect())
                    })
                })
                .collect();
            let caps: Vec<f64> = links.iter().map(|l| l.capacity.bytes_per_sec()).collect();
            let specs: Vec<FlowSpec<'_>> =
                all.iter().map(|p| FlowSpec { path: p, cap: f64::INFINITY, weight: 1.0 }).collect();
            let all_rates = max_min_rates(&caps, &specs);
            // Position i of channel c on node n is flow (n * nch + c) * ppn + i. Channels can
            // differ (NICs shared unevenly when a node's GPUs are not all used), and the call
            // ends with its slowest channel: each position runs at its slowest rate.
            let rates: Vec<f64> = (0..ppn)
                .map(|i| {
                    (0..span * nch).map(|k| all_rates[k * ppn + i]).fold(f64::INFINITY, f64::min)
                })
                .collect();
            let hop = |ch: &RingChannel, i: usize| {
                (0..span)
                    .map(|n| hop(ch, n, i))
                    .max_by_key(|(p, _)| path_latency(p))
                    .unwrap_or_else(|| comm.hop_path(cluster, ch, 0, i, 0))
            };
            let ch0 = &comm.channels()[0];
            let delay = (0..ppn)
                .map(|i| {
                    let (p, class) = hop(ch0, i);
                    path_latency(&p) + params.step(class, sel.proto)
                })
                .collect();
            let eff = (0..ppn).map(|i| efficiency(hop(ch0, i).1)).collect();
            let hold = (0..ppn).map(|i| hop(ch0, i).1 != HopClass::Net).collect();
            let ring = Ring {
                plan: &plan,
                eff,
                hold,
                sync,
                sync_every_slice: sel.proto == Proto::Simple,
                ranks: ppn,
                channels: 1,
                conns: vec![Conn::default(); ppn],
                delay,
                transport: Fixed { rates, heap: BinaryHeap::new() },
                queue: EventQueue::new(),
                finish: Time::ZERO,
                events: 0,
            };
            ring.run()
        }
    };
    RingRun { time: params.call_overhead + finish, events }
}
