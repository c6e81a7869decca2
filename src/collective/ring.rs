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
//! last one sending to the first through the network stand for all. It runs them on the
//! network with one representative per class of equivalent channels, each flow standing for its
//! images ([`symmetry`]); where the check fails or that is too costly, each hop gets the
//! steady-state max-min rate it gets when every connection of every channel sends at once.

use super::run::{self, Algorithm, Call, Closed, Ctx, Form, Signal, steady_rates};
use super::{Collective, Mode, symmetry};
use crate::comm::{HopClass, Proto, RingChannel};
use crate::net::{LinkId, PathId};
use crate::units::{Bytes, Time};

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

/// What carries a connection's slices: the shared network, or rates fixed by the steady state.
enum Carrier {
    Network(Vec<PathId>),
    Fixed(Vec<f64>),
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

/// What a ring's flows and timers mean; `u32` is a connection (rank × channels + channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// Connection `i`'s slice has left it (its flow finished).
    Sent(u32),
    /// A slice sent by the predecessor of connection `i` is visible at `i`.
    Arrive(u32),
    /// Connection `i`'s CTA is done with its post-send work and may send again.
    Release(u32),
}

impl From<Ev> for Signal {
    fn from(e: Ev) -> Signal {
        Signal::Ring(e)
    }
}

/// A running ring call.
struct Ring {
    plan: Plan,
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
    carrier: Carrier,
    finish: Time,
    /// Connections that have consumed everything.
    done: usize,
    /// Nothing to move (fewer than two ranks, or no bytes).
    empty: bool,
}

impl Ring {
    fn idx(&self, rank: usize, ch: usize) -> usize {
        rank * self.channels + ch
    }

    fn loop_of(&self, chunk: usize) -> &[u64] {
        &self.plan.loops[chunk / self.plan.steps]
    }

    fn try_start(&mut self, cx: &mut Ctx<'_>, rank: usize, ch: usize) {
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
        let ev = Ev::Sent(i as u32);
        match &self.carrier {
            Carrier::Network(paths) => cx.flow(paths[i], wire, ev),
            Carrier::Fixed(rates) => {
                cx.fixed(Time::from_secs_f64_ceil(wire.as_f64() / rates[i]), ev)
            }
        }
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
            self.done += 1;
        }
        moved
    }

    fn on_sent(&mut self, cx: &mut Ctx<'_>, i: usize) {
        let now = cx.now();
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
            cx.at(now + self.sync, Ev::Release(i as u32));
        }
        let succ = self.idx((rank + 1) % self.ranks, ch);
        cx.at(now + self.delay[i], Ev::Arrive(succ as u32));
        if self.advance_consumed(rank, ch, now) {
            self.try_start(cx, pred, ch);
        }
        self.try_start(cx, rank, ch);
    }

    fn on_arrive(&mut self, cx: &mut Ctx<'_>, i: usize) {
        let (rank, ch) = (i / self.channels, i % self.channels);
        let pred = (rank + self.ranks - 1) % self.ranks;
        self.conns[i].arrived += 1;
        if self.advance_consumed(rank, ch, cx.now()) {
            self.try_start(cx, pred, ch);
        }
        self.try_start(cx, rank, ch);
    }
}

impl Algorithm for Ring {
    fn form(&self) -> Form {
        if matches!(self.carrier, Carrier::Network(_)) { Form::Detailed } else { Form::Aggregated }
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        if self.empty {
            self.finish = cx.now();
            return;
        }
        for r in 0..self.ranks {
            for c in 0..self.channels {
                self.try_start(cx, r, c);
            }
        }
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        let Signal::Ring(ev) = signal else { return };
        match ev {
            Ev::Sent(i) => self.on_sent(cx, i as usize),
            Ev::Arrive(i) => self.on_arrive(cx, i as usize),
            Ev::Release(i) => {
                let i = i as usize;
                self.conns[i].busy = false;
                let (rank, ch) = (i / self.channels, i % self.channels);
                self.try_start(cx, rank, ch);
            }
        }
    }

    fn finished(&self) -> Option<Time> {
        (self.empty || self.done == self.conns.len()).then_some(self.finish)
    }

    fn last(&self) -> Time {
        self.finish
    }
}

/// A ring AllReduce (2(n−1) steps per loop), AllGather or ReduceScatter (n−1 steps) of
/// `call.bytes` — for the last two the total over all ranks, as NCCL counts it — with the
/// selection's protocol and channel count, its paths registered in `cx`.
pub(crate) fn new(call: &Call<'_>, cx: &mut Ctx<'_>) -> Box<dyn Algorithm> {
    let (cluster, comm, sel, params) = (call.cluster, call.comm, &call.sel, call.params);
    let (bytes, elt) = (call.bytes.get(), call.elt.get());
    let nranks = comm.nranks();
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    let steps = match call.coll {
        Collective::AllReduce => 2 * (nranks - 1).max(1),
        _ => (nranks - 1).max(1),
    };
    if nranks < 2 || bytes == 0 {
        let plan = Plan::new(0, 1, steps, sel.proto, comm.env().buffsize, elt);
        return Box::new(Ring {
            plan,
            eff: Vec::new(),
            hold: Vec::new(),
            sync: Time::ZERO,
            sync_every_slice: false,
            ranks: 0,
            channels: 0,
            conns: Vec::new(),
            delay: Vec::new(),
            carrier: Carrier::Fixed(Vec::new()),
            finish: Time::ZERO,
            done: 0,
            empty: true,
        });
    }
    let per_channel = bytes.div_ceil(nch as u64).div_ceil(16) * 16;
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let arch = cluster.spec().gpu.arch;
    let efficiency = |class: HopClass| params.efficiency(arch, class, sel.proto);
    let sync = gpu.sync[p];
    let plan = Plan::new(per_channel, nranks, steps, sel.proto, comm.env().buffsize, elt);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let links = cluster.links();
    let path_latency =
        |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);

    // Small calls run in detail even in aggregated mode: that is where the steady-state shares
    // err most (flows come and go around latencies), and it costs little.
    let work = nranks * nch * plan.total_chunks() * plan.loops.first().map_or(1, |l| l.len());
    let mode = match call.mode {
        Mode::Auto if work <= DETAIL_BELOW => Mode::Detailed,
        Mode::Auto => Mode::Aggregated,
        m => m,
    };
    let ring_plan = plan.clone();
    let ring = |ranks, channels, eff, hold, delay, carrier| Ring {
        plan,
        eff,
        hold,
        sync,
        sync_every_slice: sel.proto == Proto::Simple,
        ranks,
        channels,
        conns: vec![Conn::default(); ranks * channels],
        delay,
        carrier,
        finish: Time::ZERO,
        done: 0,
        empty: false,
    };
    match mode {
        Mode::Detailed => {
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
                        paths.push(cx.add_path(&p));
                    }
                }
            }
            Box::new(ring(nranks, nch, eff, hold, delay, Carrier::Network(paths)))
        }
        Mode::Aggregated | Mode::Auto => {
            let built = Built { plan: ring_plan.clone(), sync, proto: sel.proto, work };
            if let Some(t) = symmetric(call, nch, &built) {
                return Box::new(Closed::timed(t, Form::Symmetric));
            }
            // Steady state: every hop of every channel sending at once. On a uniform network
            // every node sees the same, so node 0's hops stand for all, its last hop leaving
            // through its NIC and, by symmetry, re-entering node 0. Where racks, oversubscribed
            // tiers, placement groups or other traffic make nodes differ, all nodes' hops share
            // the network and each ring position runs at its slowest node's rate (the ring
            // moves in lockstep).
            let uniform = (cluster.network_is_uniform() && call.load.is_empty()) || nnodes == 1;
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
            let caps = cluster.capacities();
            let refs: Vec<&[u32]> = all.iter().map(|p| p.as_slice()).collect();
            let all_rates = steady_rates(caps, &refs, call.load);
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
            Box::new(ring(ppn, 1, eff, hold, delay, Carrier::Fixed(rates)))
        }
    }
}

/// What a ring call's shape is, for its symmetric run.
struct Built {
    plan: Plan,
    sync: Time,
    proto: Proto,
    /// Slice transfers of the whole call.
    work: usize,
}

/// Budget of the symmetric run: representative flows, and links visited by its rate solves
/// (about 0.25 s on this repository's 2-core machine).
const SYMMETRIC_FLOWS: usize = 4_096;
const SYMMETRIC_WORK: u64 = 4_000_000;

/// The ring on one node's ranks standing for every node's, one representative channel per
/// class of equivalent channels, each connection's flows standing for their images on the links
/// they share ([`symmetry`]): the detailed result, when the check finds the call symmetric and
/// the run fits its budget; else `None`.
fn symmetric(call: &Call<'_>, nch: usize, built: &Built) -> Option<Time> {
    let (cluster, comm, params) = (call.cluster, call.comm, call.params);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let arch = cluster.spec().gpu.arch;
    let links = cluster.links();
    let latency = |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    // Each round of slices re-shares the representative flows a few times: its cost is their
    // links plus a fixed cost per flow (events, bookkeeping), about 16 links' worth. At least
    // one representative channel of one link per flow: too costly even so, do not check.
    let per_conn = built.work / (nnodes * ppn * nch).max(1);
    let cost = |entries: usize, flows: usize| (per_conn * (entries + 16 * flows)) as u64;
    if cost(ppn, ppn) > SYMMETRIC_WORK {
        return None;
    }
    // Every connection of the whole call: (node, position, channel) in that order.
    struct Hop {
        path: Vec<u32>,
        delay: Time,
        eff: f64,
        hold: bool,
    }
    let mut conns = Vec::with_capacity(nnodes * ppn * nch);
    for node in 0..nnodes {
        for i in 0..ppn {
            for ch in &comm.channels()[..nch] {
                let (p, class) = comm.hop_path(cluster, ch, node, i, (node + 1) % nnodes);
                conns.push(Hop {
                    delay: latency(&p) + params.step(class, built.proto),
                    eff: params.efficiency(arch, class, built.proto),
                    hold: class != HopClass::Net,
                    path: p.iter().map(|l| l.0).collect(),
                });
            }
        }
    }
    let at = |node: usize, i: usize, ch: usize| (node * ppn + i) * nch + ch;
    let same = |a: &Hop, b: &Hop| (a.delay, a.eff, a.hold) == (b.delay, b.eff, b.hold);
    // Classes of channels, refined until every connection is an image of its representative:
    // position i of channel c on any node stands for position i of its class's representative
    // on node 0.
    // Other traffic holds its steady-state share of each link, as in a detailed run.
    let caps = run::capacities_beside_load(call);
    // Position i of channel c on any node stands for position i of its class's representative
    // on node 0.
    let images = |c: usize, r: usize| {
        let mut out = Vec::with_capacity(nnodes * ppn);
        for n in 0..nnodes {
            for i in 0..ppn {
                let hop = &conns[at(n, i, c)];
                if !same(hop, &conns[at(0, i, r)]) {
                    return None;
                }
                out.push((hop.path.as_slice(), i));
            }
        }
        Some(out)
    };
    let own = |r: usize| (0..ppn).map(|i| conns[at(0, i, r)].path.as_slice()).collect::<Vec<_>>();
    let (reps, reduced) = symmetry::refine(nch, &caps, SYMMETRIC_FLOWS, images, own)?;
    let entries: usize = reduced.iter().map(|r| r.links.len()).sum();
    if cost(entries, reduced.len()) > SYMMETRIC_WORK {
        return None;
    }
    let nreps = reps.len();
    run::run_alone(links, &caps, SYMMETRIC_WORK, Time::MAX, |cx| {
        let mut paths = Vec::with_capacity(ppn * nreps);
        let (mut delay, mut eff, mut hold) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ppn {
            for (k, &r) in reps.iter().enumerate() {
                let c = &conns[at(0, i, r)];
                let red = &reduced[k * ppn + i];
                paths.push(cx.add_weighted_path(&red.links, &red.weights, c.delay));
                delay.push(c.delay);
                eff.push(c.eff);
                hold.push(c.hold);
            }
        }
        Box::new(Ring {
            plan: built.plan.clone(),
            eff,
            hold,
            sync: built.sync,
            sync_every_slice: built.proto == Proto::Simple,
            ranks: ppn,
            channels: nreps,
            conns: vec![Conn::default(); ppn * nreps],
            delay,
            carrier: Carrier::Network(paths),
            finish: Time::ZERO,
            done: 0,
            empty: false,
        })
    })
}

/// Every hop of every channel of every node busy at once.
pub(crate) fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    let (cluster, comm) = (call.cluster, call.comm);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let nch = call.sel.nchannels.clamp(1, comm.channels().len().max(1));
    (0..nnodes)
        .flat_map(|node| {
            comm.channels()[..nch].iter().flat_map(move |ch| {
                (0..ppn).map(move |i| comm.hop_path(cluster, ch, node, i, (node + 1) % nnodes).0)
            })
        })
        .collect()
}
