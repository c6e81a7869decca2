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
//! link class (per architecture on NVLink). Across nodes a step (Simple: a slice) is one network
//! message, posted by the sending GPU's proxy thread and completed by the receiving GPU's, each
//! busy the transport's `proxy_op` per message over all its channels (`run::Proxies`); an LL
//! step is seen by the receiving GPU only once its message has landed.
//!
//! Across nodes two of NCCL's own figures hold the pipeline back. Each step costs NCCL's
//! per-step launch overhead on top of the bytes (`TuningInput::ring_step_overhead`): the call
//! ends at least that many steps' cost after its bandwidth time, and at most that much after its
//! pipeline, which hides the profile's step latencies behind the next slice
//! ([`run::Delayed`]; docs/collective-scaling.md has the B200 and XXRJUN measurements behind it).
//! LL128 connections share NCCL's LL128 bus bandwidth cap ([`payload_cap`]).
//!
//! Two ways to run it: [`Mode::Detailed`] simulates every rank and channel with max-min rates
//! re-shared at every flow start and end; [`Mode::Aggregated`] uses the symmetry of identical
//! nodes and channels — a ring over identical nodes is periodic, so one node's ranks with the
//! last one sending to the first through the network stand for all (over racks, one rack's
//! nodes; where nothing repeats, every node's). It runs them on the network with one
//! representative per class of equivalent channels, each flow standing for its images
//! ([`symmetry`]); a ring too long to run whole runs its first turns and extrapolates
//! (`run::extrapolated`); where the check fails or even that is too costly, each hop gets the
//! steady-state max-min rate it gets when every connection of every channel sends at once.

use super::run::{self, Algorithm, Call, Closed, Ctx, Form, Signal, steady_rates};
use super::{Collective, Mode, symmetry};
use crate::comm::{Communicator, HopClass, Proto};
use crate::hw::{Cluster, NodeId};
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

/// The links and class of hop `i` of channel `c` on node `node` of the ring of the job's nodes
/// (the last position's hop crosses to the next node).
pub(crate) fn ring_hop(
    cluster: &Cluster,
    comm: &Communicator,
    c: usize,
    node: usize,
    i: usize,
) -> (Vec<LinkId>, HopClass) {
    let next = (node + 1) % comm.nnodes();
    comm.hop_path(cluster, c, NodeId(node), i, NodeId(next))
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
        Plan::of(loops, steps, window)
    }

    /// The plan whose loops' chunks are cut as `loops`, each loop `steps` ring steps long.
    fn of(loops: Vec<Vec<u64>>, steps: usize, window: usize) -> Plan {
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
    /// A network message of connection `i` has reached its receiver's proxy.
    Landed(u32),
}

impl From<Ev> for Signal {
    fn from(e: Ev) -> Signal {
        Signal::Ring(e)
    }
}

/// A connection that crosses the network: the proxies of its sender's and receiver's GPUs,
/// and how many operations each of its messages stands for on them.
#[derive(Debug, Clone, Copy)]
struct NetConn {
    from: usize,
    to: usize,
    weight: f64,
}

/// A ring's network messages: the connections that cross the network, their GPUs' proxies,
/// and the slices of each message not yet posted or still in flight.
#[derive(Debug, Default)]
struct Messages {
    /// Whether a network step arrives as one message, or its slices stream as on other hops:
    /// streaming for Simple's slices (each its own message) and, where the proxies cost
    /// nothing, for LL128, whose 600 KB steps as whole messages put XXRJUN's 10 x 1 GPU ring at
    /// 32 MiB 61 % slow (streaming 2 %); where they cost something, LL128 steps are whole
    /// messages too, so that no slice overtakes the message of an earlier step.
    whole: bool,
    /// Per connection crossing the network: the proxies of its sender and receiver.
    net: Vec<Option<NetConn>>,
    proxies: run::Proxies,
    /// Per connection crossing the network: slices sent but not yet in a message, and the
    /// slices of each message in flight.
    unsent: Vec<usize>,
    landing: Vec<std::collections::VecDeque<usize>>,
}

impl Messages {
    /// The messages of connections `net` under `proto`, over `ranks` GPUs' proxies each busy
    /// `op` per operation.
    fn new(net: Vec<Option<NetConn>>, proto: Proto, op: Time, ranks: usize) -> Messages {
        Messages {
            whole: whole_messages(proto, op),
            proxies: run::Proxies::new(op, ranks),
            unsent: vec![0; net.len()],
            landing: vec![Default::default(); net.len()],
            net,
        }
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
    msgs: Messages,
    carrier: Carrier,
    /// Payload rate each connection is held to (bytes/s; infinite for none): across nodes
    /// under LL128, NCCL's LL128 bus bandwidth cap shared over the call's channels
    /// ([`payload_cap`]).
    cap: f64,
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
        let cap = self.cap / self.eff[i];
        match &self.carrier {
            Carrier::Network(paths) if cap.is_finite() => cx.capped_flow(paths[i], wire, cap, ev),
            Carrier::Network(paths) => cx.flow(paths[i], wire, ev),
            Carrier::Fixed(rates) => {
                cx.fixed(Time::from_secs_f64_ceil(wire.as_f64() / rates[i].min(cap)), ev)
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
        let m = &mut self.msgs;
        match m.net[i] {
            // The GPU's proxy sends a step (Simple: a slice) over the network once all of it
            // is written, as one message (NCCL 2.21 src/transport/net.cc, sendProxyProgress:
            // one isend per step, under LL once every line's flag is set): its post goes through
            // the sender's proxy, then the receiver's. See `Messages::whole` for what the
            // receiving GPU sees before that; where the proxies cost nothing, a streaming
            // step's slices arrive by themselves.
            Some(net) if (posted && m.proxies.costly()) || m.whole => {
                m.unsent[i] += 1;
                if posted {
                    let msg = std::mem::take(&mut m.unsent[i]);
                    m.landing[i].push_back(msg);
                    let t = m.proxies.serve(net.from, now, net.weight);
                    cx.at(t + self.delay[i], Ev::Landed(i as u32));
                }
            }
            _ => cx.at(now + self.delay[i], Ev::Arrive(succ as u32)),
        }
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
            Ev::Landed(i) => {
                let i = i as usize;
                let (rank, ch) = (i / self.channels, i % self.channels);
                let succ = self.idx((rank + 1) % self.ranks, ch);
                let m = &mut self.msgs;
                let msg = m.landing[i].pop_front();
                debug_assert!(msg.is_some(), "a message landed that was never sent");
                let msg = msg.unwrap_or(0);
                let t = match m.net[i] {
                    Some(net) => m.proxies.serve(net.to, cx.now(), net.weight),
                    None => cx.now(),
                };
                for _ in 0..msg {
                    cx.at(t, Ev::Arrive(succ as u32));
                }
            }
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
pub(crate) fn new(call: &Call<'_>, cx: &mut Ctx<'_>, cost: run::StepCost) -> Box<dyn Algorithm> {
    let inner = build(call, cx);
    if cost == run::StepCost::None {
        return inner;
    }
    // Beside other calls: what the call pays alone, on an otherwise empty network.
    let alone = Call { load: &[], ..*call };
    let measured = if cost == run::StepCost::Added { &alone } else { call };
    let Some((floor, lat)) = latency_floor(measured) else {
        return inner;
    };
    let extra = (cost == run::StepCost::Added)
        .then(|| run::Delayed::added(floor, lat, run::pipeline_alone(&alone)));
    if extra == Some(Time::ZERO) {
        return inner;
    }
    Box::new(run::Delayed::new(inner, floor, lat, extra))
}

/// NCCL's per-step cost of a ring call across nodes, and the least the call takes with it: its
/// bandwidth time at the steady-state rates of its hops plus that cost, paid once per step in
/// addition to the bytes rather than hidden behind them. `None` on one node.
fn latency_floor(call: &Call<'_>) -> Option<(Time, Time)> {
    let comm = call.comm;
    if comm.nnodes() < 2 || comm.nranks() < 2 || call.bytes.get() == 0 {
        return None;
    }
    let (per_step, steps) = comm.tuning().ring_step_overhead(call.coll, call.sel.proto)?;
    let (nch, plan) = call_plan(call);
    let bytes: u64 =
        plan.loops.iter().map(|l| l.iter().sum::<u64>()).sum::<u64>() * plan.steps as u64;
    let cap = payload_cap(call);
    let slowest = position_rates(call, nch)
        .into_iter()
        .map(|(rate, eff)| bytes as f64 / (eff * rate).min(cap))
        .fold(0.0, f64::max);
    let lat = Time::from_secs_f64_ceil(per_step * 1e-6 * steps as f64);
    Some((Time::from_secs_f64_ceil(slowest).saturating_add(lat), lat))
}

/// The payload rate (bytes/s) NCCL's tuning model lets one connection of a ring across nodes
/// carry: under LL128, its bus bandwidth cap (`nChannels × perChMaxRingLL128Bws`, over the
/// ring graph's search channels) shared over the call's CUDA channels (a ring's busbw is its
/// channels × one connection's rate; NCCL doubles the search channels or more, so each
/// connection gets a half or a quarter of the per-channel figure); infinite otherwise. Not
/// applied on one node, whose curves are fitted without it.
fn payload_cap(call: &Call<'_>) -> f64 {
    let nch = call.sel.nchannels.clamp(1, call.comm.channels().len().max(1));
    match call.comm.tuning().ring_ll128_bus_cap(call.sel.proto) {
        Some(bus) if call.comm.nnodes() > 1 => bus * 1e9 / nch as f64,
        _ => f64::INFINITY,
    }
}

/// Each ring position's steady-state rate (wire bytes/s) when every hop of every channel sends
/// at once, its slowest over channels and nodes, with the payload efficiency of the hop whose
/// payload rate is the slowest.
fn position_rates(call: &Call<'_>, nch: usize) -> Vec<(f64, f64)> {
    let (cluster, comm) = (call.cluster, call.comm);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let uniform = (cluster.network_is_uniform() && call.load.is_empty()) || nnodes == 1;
    let (span, to) = if uniform { (1, 0) } else { (nnodes, 1) };
    let hop = |c: usize, node: usize, i: usize| {
        let next = if uniform { 0 } else { (node + to) % nnodes };
        comm.hop_path(cluster, c, NodeId(node), i, NodeId(next))
    };
    let all: Vec<Vec<u32>> = (0..span)
        .flat_map(|node| {
            (0..nch).flat_map(move |c| {
                (0..ppn).map(move |i| hop(c, node, i).0.iter().map(|l| l.0).collect())
            })
        })
        .collect();
    let refs: Vec<&[u32]> = all.iter().map(|p| p.as_slice()).collect();
    let all_rates = steady_rates(cluster.capacities(), &refs, call.load);
    // Position i of channel c on node n is flow (n * nch + c) * ppn + i.
    let arch = cluster.spec().gpu.arch;
    (0..ppn)
        .map(|i| {
            let rate =
                (0..span * nch).map(|k| all_rates[k * ppn + i]).fold(f64::INFINITY, f64::min);
            let eff = (0..span * nch)
                .map(|k| {
                    let class = hop(k % nch, k / nch, i).1;
                    let eff = call.params.efficiency(arch, class, call.sel.proto);
                    (eff * all_rates[k * ppn + i], eff)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map_or(1.0, |(_, eff)| eff);
            (rate, eff)
        })
        .collect()
}

fn build(call: &Call<'_>, cx: &mut Ctx<'_>) -> Box<dyn Algorithm> {
    let (cluster, comm, sel, params) = (call.cluster, call.comm, &call.sel, call.params);
    let nranks = comm.nranks();
    let (nch, plan) = call_plan(call);
    if nranks < 2 || call.bytes.get() == 0 {
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
            msgs: Messages::default(),
            carrier: Carrier::Fixed(Vec::new()),
            cap: f64::INFINITY,
            finish: Time::ZERO,
            done: 0,
            empty: true,
        });
    }
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let arch = cluster.spec().gpu.arch;
    let efficiency = |class: HopClass| params.efficiency(arch, class, sel.proto);
    let sync = gpu.sync[p];
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
    let proxy_op = run::proxy_op(cluster);
    let ring = |ranks, channels, eff, hold, delay, net: Vec<Option<NetConn>>, carrier| Ring {
        plan,
        eff,
        hold,
        sync,
        sync_every_slice: sel.proto == Proto::Simple,
        ranks,
        channels,
        conns: vec![Conn::default(); ranks * channels],
        delay,
        msgs: Messages::new(net, sel.proto, proxy_op, ranks),
        carrier,
        cap: payload_cap(call),
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
            let mut net = Vec::new();
            for node in 0..nnodes {
                for i in 0..ppn {
                    for (c, ch) in comm.channels()[..nch].iter().enumerate() {
                        let (p, class) = ring_hop(cluster, comm, c, node, i);
                        // The GPUs' own proxies: rank (node, GPU g) is node * ppn + g.
                        net.push((class == HopClass::Net).then(|| NetConn {
                            from: node * ppn + ch.gpus[i].0,
                            to: (node + 1) % nnodes * ppn + ch.gpus[0].0,
                            weight: 1.0,
                        }));
                        delay.push(path_latency(&p) + params.step(class, sel.proto));
                        eff.push(efficiency(class));
                        hold.push(class != HopClass::Net);
                        paths.push(cx.add_path(&p));
                    }
                }
            }
            Box::new(ring(nranks, nch, eff, hold, delay, net, Carrier::Network(paths)))
        }
        Mode::Aggregated | Mode::Auto => {
            let built = Built { plan: ring_plan.clone(), sync, proto: sel.proto, work };
            if let Some((t, form)) = symmetric(call, nch, &built, Budget::DEFAULT) {
                return Box::new(Closed::timed(t, form));
            }
            // Steady state: every hop of every channel sending at once. On a uniform network
            // every node sees the same, so node 0's hops stand for all, its last hop leaving
            // through its NIC and, by symmetry, re-entering node 0. Where racks, oversubscribed
            // tiers, placement groups or other traffic make nodes differ, all nodes' hops share
            // the network and each ring position runs at its slowest node's rate (the ring
            // moves in lockstep).
            let uniform = (cluster.network_is_uniform() && call.load.is_empty()) || nnodes == 1;
            let (span, to) = if uniform { (1, 0) } else { (nnodes, 1) };
            let hop = |c: usize, node: usize, i: usize| {
                let next = if uniform { 0 } else { (node + to) % nnodes };
                comm.hop_path(cluster, c, NodeId(node), i, NodeId(next))
            };
            // Channels can differ (NICs shared unevenly when a node's GPUs are not all used),
            // and the call ends with its slowest channel: each position runs at its slowest rate.
            let rates: Vec<f64> = position_rates(call, nch).into_iter().map(|(r, _)| r).collect();
            // A chunk crosses every hop of the ring in turn, so the call's latency is the sum
            // of all nodes' hop delays: position i's delay is its mean over the nodes (on racks
            // only the hops that leave a rack pay the spine's latency). Its efficiency and
            // whether it holds the chunk come from its slowest hop.
            let (mut delay, mut eff, mut hold) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..ppn {
                let hops: Vec<_> = (0..span).map(|n| hop(0, n, i)).collect();
                let total = hops.iter().fold(0u64, |t, (p, class)| {
                    t + (path_latency(p) + params.step(*class, sel.proto)).as_ps()
                });
                delay.push(Time::from_ps(total / span as u64));
                let class = hops
                    .iter()
                    .max_by_key(|(p, _)| path_latency(p))
                    .map_or_else(|| comm.hop_path(cluster, 0, NodeId(0), i, NodeId(0)).1, |h| h.1);
                eff.push(efficiency(class));
                hold.push(class != HopClass::Net);
            }
            // One channel stands for all: its network messages load the busiest of its
            // positions' proxies as much as the busiest GPU's proxy is loaded over all channels.
            let ends: Vec<_> = (0..ppn).filter(|&i| !hold[i]).map(|i| (i, (i + 1) % ppn)).collect();
            let scale = proxy_scale(ends.iter().map(|&(a, b)| (a, b, 1.0)), ppn, comm, nch);
            let mut net = vec![None; ppn];
            for (from, to) in ends {
                net[from] = Some(NetConn { from, to, weight: scale });
            }
            Box::new(ring(ppn, 1, eff, hold, delay, net, Carrier::Fixed(rates)))
        }
    }
}

/// A ring call's channels and how each channel's bytes are cut: `call.bytes` shared over
/// the selection's channels, in loops of 2(n−1) steps (AllReduce) or n−1 (AllGather,
/// ReduceScatter).
fn call_plan(call: &Call<'_>) -> (usize, Plan) {
    let (comm, sel) = (call.comm, &call.sel);
    let nranks = comm.nranks();
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    let steps = match call.coll {
        Collective::AllReduce => 2 * (nranks - 1).max(1),
        _ => (nranks - 1).max(1),
    };
    let per_channel =
        if nranks < 2 { 0 } else { call.bytes.get().div_ceil(nch as u64).div_ceil(16) * 16 };
    let plan =
        Plan::new(per_channel, nranks, steps, sel.proto, comm.env().buffsize, call.elt.get());
    (nch, plan)
}

/// Network messages each connection of a ring call sends: one per step under LL and LL128,
/// one per slice under Simple.
pub(crate) fn messages_per_connection(call: &Call<'_>) -> usize {
    let (_, plan) = call_plan(call);
    match call.sel.proto {
        Proto::Simple => plan.chunk_slices.iter().sum(),
        _ => plan.total_chunks(),
    }
}

/// Slices each connection of a ring call sends (one transfer each in a detailed run).
pub(crate) fn slices_per_connection(call: &Call<'_>) -> usize {
    call_plan(call).1.chunk_slices.iter().sum()
}

/// Under `proto`, whether a network step arrives as one message ([`Messages::whole`]).
fn whole_messages(proto: Proto, proxy_op: Time) -> bool {
    proto == Proto::LL || (proto == Proto::LL128 && proxy_op > Time::ZERO)
}

/// How many operations a representative's message stands for, per channel it stands for, so
/// that the busiest of the representatives' proxies handles as many per ring step as the
/// busiest GPU's proxy of the whole call. `ends`: each representative network connection's
/// sender and receiver proxy (among `n`) and how many channels it stands for. One GPU per node
/// sends and receives on its own proxy, and counts both.
fn proxy_scale(
    ends: impl Iterator<Item = (usize, usize, f64)>,
    n: usize,
    comm: &Communicator,
    nch: usize,
) -> f64 {
    let mut ops = vec![0.0; n];
    for (from, to, m) in ends {
        ops[from] += m;
        ops[to] += m;
    }
    let stood = ops.into_iter().fold(0.0, f64::max);
    if stood > 0.0 { busiest_proxy(comm, nch) as f64 / stood } else { 1.0 }
}

/// The most network sends and receives one GPU's proxy handles per ring step over the first
/// `nch` channels: each channel's ring leaves a node from its last GPU and enters the next
/// node through its first.
pub(crate) fn busiest_proxy(comm: &Communicator, nch: usize) -> usize {
    let nch = nch.clamp(1, comm.channels().len().max(1));
    let mut ops = vec![0usize; comm.ppn()];
    for ch in &comm.channels()[..nch] {
        for g in [ch.gpus.first(), ch.gpus.last()].into_iter().flatten() {
            if let Some(n) = ops.get_mut(g.0) {
                *n += 1;
            }
        }
    }
    ops.into_iter().max().unwrap_or(0)
}

/// What a ring call's shape is, for its symmetric run.
struct Built {
    plan: Plan,
    sync: Time,
    proto: Proto,
    /// Slice transfers of the whole call.
    work: usize,
}

/// Most representative flows of a symmetric run.
const SYMMETRIC_FLOWS: usize = 4_096;

/// The ring with one representative channel per class of equivalent channels, each
/// connection's flows standing for their images on the links they share ([`symmetry`]), and
/// the fewest nodes standing for all: one node's ranks for every node's where nodes are alike,
/// a rack's for every rack's where racks are (`span` nodes, the ring's period), every node its
/// own where nothing repeats. Its time ([`whole_or_extrapolated`]): the detailed result
/// (symmetric) when the check finds the call symmetric and the run fits `budget`, an
/// extrapolation from its first turns (aggregated) when it is too long; `None` when the check
/// fails or even that does not fit.
fn symmetric(call: &Call<'_>, nch: usize, built: &Built, budget: Budget) -> Option<(Time, Form)> {
    let (cluster, comm, params) = (call.cluster, call.comm, call.params);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let arch = cluster.spec().gpu.arch;
    let links = cluster.links();
    let latency = |p: &[LinkId]| p.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    // Each round of slices re-shares the representative flows a few times: its cost is their
    // links plus a fixed cost per flow (events, bookkeeping), about 16 links' worth (a rough
    // guess, off by up to 10x either way; the runs measure their real cost). At least one
    // representative channel of one link per flow: too costly even so, do not check.
    let per_conn = built.work / (nnodes * ppn * nch).max(1);
    let cost = |entries: usize, flows: usize| (per_conn * (entries + 16 * flows)) as u64;
    // What the cheapest run costs: the whole call, or the turns an extrapolation needs (at
    // least three turns of a ring of `ranks`).
    let steps = built.plan.steps;
    let least = |entries: usize, flows: usize, ranks: usize| {
        cost(entries, flows) / steps as u64 * steps.min(3 * ranks) as u64
    };
    if least(ppn, ppn, ppn) > budget.total {
        return None;
    }
    // Every connection of the whole call: (node, position, channel) in that order.
    let mut conns = Vec::with_capacity(nnodes * ppn * nch);
    for node in 0..nnodes {
        for i in 0..ppn {
            for c in 0..nch {
                let (p, class) = ring_hop(cluster, comm, c, node, i);
                conns.push(Hop {
                    delay: latency(&p) + params.step(class, built.proto),
                    eff: params.efficiency(arch, class, built.proto),
                    hold: class != HopClass::Net,
                    path: p.iter().map(|l| l.0).collect(),
                });
            }
        }
    }
    // Other traffic holds its steady-state share of each link, as in a detailed run.
    let caps = run::capacities_beside_load(call);
    // The ring shifted by `span` nodes is the ring itself: where every node's connections look
    // like those of the node `span` before it (racks of `span` nodes filled alike), nodes
    // 0..span stand for all. Try the periods that divide the ring, shortest first.
    // One node standing for all is tried first, without comparing nodes (the check decides).
    let reduce = |d: usize| Some((d, reduced_ring(&conns, (nnodes, ppn, nch), d, &caps)?));
    let (span, classes) = reduce(1).or_else(|| {
        let looks = node_looks(&conns, (nnodes, ppn, nch), &caps);
        (2..=nnodes)
            .filter(|&d| nnodes % d == 0 && (d..nnodes).all(|n| looks[n] == looks[n - d]))
            .take_while(|&d| least(d * ppn, d * ppn, d * ppn) <= budget.total)
            .find_map(reduce)
    })?;
    let (reps, reduced) = (&classes.reps, &classes.paths);
    let nreps = reps.len();
    let ranks = span * ppn;
    let at = |node: usize, i: usize, ch: usize| (node * ppn + i) * nch + ch;
    // A representative's network messages load each end's proxy with its class's share of the
    // busiest GPU's proxy operations.
    let sizes = classes.sizes();
    let op = run::proxy_op(cluster);
    let (hops, sizes_of) = (&conns, &sizes);
    let ends = (0..ranks).flat_map(|rank| {
        reps.iter().enumerate().filter_map(move |(k, &r)| {
            let net = !hops[at(rank / ppn, rank % ppn, r)].hold;
            net.then(|| (rank, (rank + 1) % ranks, sizes_of[k] as f64))
        })
    });
    let scale = proxy_scale(ends, ranks, comm, nch);
    // The reduced ring over `steps` ring steps per loop, within `budget`.
    let run = |steps: usize, budget: u64| {
        run::run_alone_counted(links, &caps, budget, Time::MAX, |cx| {
            let mut paths = Vec::with_capacity(ranks * nreps);
            let (mut delay, mut eff, mut hold, mut net) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for rank in 0..ranks {
                for (k, &r) in reps.iter().enumerate() {
                    let c = &conns[at(rank / ppn, rank % ppn, r)];
                    let red = &reduced[k * ranks + rank];
                    paths.push(cx.add_weighted_path(&red.links, &red.weights, c.delay));
                    delay.push(c.delay);
                    eff.push(c.eff);
                    hold.push(c.hold);
                    net.push((!c.hold).then(|| NetConn {
                        from: rank,
                        to: (rank + 1) % ranks,
                        weight: sizes[k] as f64 * scale,
                    }));
                }
            }
            let plan = Plan::of(built.plan.loops.clone(), steps, built.plan.window);
            Box::new(Ring {
                plan,
                eff,
                hold,
                sync: built.sync,
                sync_every_slice: built.proto == Proto::Simple,
                ranks,
                channels: nreps,
                conns: vec![Conn::default(); ranks * nreps],
                delay,
                msgs: Messages::new(net, built.proto, op, ranks),
                carrier: Carrier::Network(paths),
                cap: payload_cap(call),
                finish: Time::ZERO,
                done: 0,
                empty: false,
            })
        })
    };
    whole_or_extrapolated(steps, ranks, budget, run)
}

/// What a reduced ring's runs may cost, in [`run::run_alone_counted`]'s units.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// The most a ring may cost run whole, judged from its first turn; longer rings
    /// extrapolate.
    whole: u64,
    /// What all its runs may cost.
    total: u64,
}

impl Budget {
    /// About 0.1 s whole and 0.2 s in all on this repository's 2-core machine.
    const DEFAULT: Budget = Budget { whole: 8_000_000, total: 16_000_000 };
}

/// The reduced ring's time: run whole where that fits the budget (the detailed result), else
/// extrapolated from its first turns ([`run::extrapolated`]: every `turn` steps, one turn of
/// the reduced ring, each connection does again what it did a turn before). A run of one turn
/// measures the cost per turn. `run(steps, budget)` runs `steps` steps and says what it cost.
fn whole_or_extrapolated(
    steps: usize,
    turn: usize,
    budget: Budget,
    run: impl Fn(usize, u64) -> Option<(Time, u64)>,
) -> Option<(Time, Form)> {
    let (turns, rem) = (steps / turn, steps % turn);
    let whole = |budget| run(steps, budget).map(|(t, _)| (t, Form::Symmetric));
    if turns < 4 {
        return whole(budget.total);
    }
    let first = run(rem + turn, budget.total)?;
    let work = first.1;
    if work as f64 * steps as f64 / (rem + turn) as f64 <= budget.whole as f64 {
        return whole(budget.total - work.min(budget.total));
    }
    let t = run::extrapolated(steps, turn, budget.total.saturating_sub(work), first, run)?;
    Some((t, Form::Aggregated))
}

/// One connection of a ring call: its path, arrival delay, efficiency and whether its CTA
/// moves the data itself.
struct Hop {
    path: Vec<u32>,
    delay: Time,
    eff: f64,
    hold: bool,
}

/// What each node's connections look like, to compare nodes quickly: per position, the sorted
/// (delay, efficiency, hold, link capacities) of its channels' hops, hashed. Equal looks are
/// necessary for nodes to stand for each other; [`symmetry::refine`] checks the rest.
fn node_looks(conns: &[Hop], (nnodes, ppn, nch): (usize, usize, usize), caps: &[f64]) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    (0..nnodes)
        .map(|n| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for i in 0..ppn {
                let mut hops: Vec<(u64, u64, bool, Vec<u64>)> = conns
                    [(n * ppn + i) * nch..(n * ppn + i + 1) * nch]
                    .iter()
                    .map(|c| {
                        let caps = c.path.iter().map(|&l| caps[l as usize].to_bits()).collect();
                        (c.delay.as_ps(), c.eff.to_bits(), c.hold, caps)
                    })
                    .collect();
                hops.sort_unstable();
                hops.hash(&mut h);
            }
            h.finish()
        })
        .collect()
}

/// Classes of channels and their representatives' reduced paths, refined until every
/// connection is an image of its representative: position `i` of channel `c` on node `n` stands
/// for position `i` of its class's representative on node `n mod span` (nodes `0..span` run,
/// the ring closing from node `span - 1` onto node 0). Representative flows are numbered
/// `(class, node, position)`.
fn reduced_ring(
    conns: &[Hop],
    (nnodes, ppn, nch): (usize, usize, usize),
    span: usize,
    caps: &[f64],
) -> Option<symmetry::Classes> {
    let at = |node: usize, i: usize, ch: usize| (node * ppn + i) * nch + ch;
    let same = |a: &Hop, b: &Hop| (a.delay, a.eff, a.hold) == (b.delay, b.eff, b.hold);
    let images = |c: usize, r: usize| {
        let mut out = Vec::with_capacity(nnodes * ppn);
        for n in 0..nnodes {
            let m = n % span;
            for i in 0..ppn {
                let hop = &conns[at(n, i, c)];
                if !same(hop, &conns[at(m, i, r)]) {
                    return None;
                }
                out.push((hop.path.as_slice(), m * ppn + i));
            }
        }
        Some(out)
    };
    let own = |r: usize| {
        (0..span)
            .flat_map(|n| (0..ppn).map(move |i| conns[at(n, i, r)].path.as_slice()))
            .collect::<Vec<_>>()
    };
    symmetry::refine(nch, caps, SYMMETRIC_FLOWS, images, own)
}

/// Every hop of every channel with its cap (wire bytes/s): across nodes under LL128, NCCL's
/// LL128 bus cap shared over the call's channels ([`payload_cap`]) over the hop's efficiency;
/// infinite otherwise.
pub(crate) fn steady_flows(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
    let (cluster, comm) = (call.cluster, call.comm);
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let nch = call.sel.nchannels.clamp(1, comm.channels().len().max(1));
    let cap = payload_cap(call);
    let arch = cluster.spec().gpu.arch;
    (0..nnodes)
        .flat_map(|node| (0..nch).flat_map(move |c| (0..ppn).map(move |i| (node, c, i))))
        .map(|(node, c, i)| {
            let (p, class) = ring_hop(cluster, comm, c, node, i);
            (p, cap / call.params.efficiency(arch, class, call.sel.proto))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Collective, Mode};
    use crate::comm::Communicator;
    use crate::comm::env::NcclEnv;
    use crate::config::{DEFAULT_PROFILE, parse_profile, resolve_topology};
    use crate::hw::Cluster;

    /// The time of a ring AllReduce of `bytes` on `nodes` DGX-H100s, reduced within `budget`.
    fn reduced(nodes: usize, bytes: u64, budget: Budget) -> Option<(Time, Form)> {
        let (_, spec) = resolve_topology("dgx-h100", None).unwrap();
        let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
        let cluster = Cluster::new(&spec, nodes, 8);
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "Ring")]).unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let call = Call {
            cluster: &cluster,
            comm: &comm,
            coll: Collective::AllReduce,
            bytes: Bytes::new(bytes),
            elt: Bytes::new(4),
            sel: crate::collective::select(&comm, Collective::AllReduce, bytes),
            params: &params,
            mode: Mode::Aggregated,
            load: &[],
        };
        let (nch, plan) = call_plan(&call);
        let work = comm.nranks() * nch * plan.total_chunks() * plan.loops[0].len();
        let gpu = params.gpu(spec.gpu.arch);
        let built =
            Built { plan, sync: gpu.sync[call.sel.proto as usize], proto: call.sel.proto, work };
        symmetric(&call, nch, &built, budget)
    }

    /// On 2,048 DGX-H100 nodes (16,384 ranks, 32,766 steps) the ring is too long to run whole
    /// within the default budget: its first turns, extrapolated, come within 0.5 % of the whole
    /// symmetric run (itself the detailed result), where the steady-state rates were 4-27 % slow.
    #[test]
    fn long_rings_extrapolate_within_half_a_percent_of_the_whole_run() {
        let unlimited = Budget { whole: u64::MAX, total: u64::MAX };
        for bytes in [256u64 << 20, 8 << 30] {
            let (whole, form) = reduced(2048, bytes, unlimited).unwrap();
            assert_eq!(form, Form::Symmetric);
            let (short, form) = reduced(2048, bytes, Budget::DEFAULT).unwrap();
            assert_eq!(form, Form::Aggregated, "{bytes} B ran whole");
            let rel = short.as_secs_f64() / whole.as_secs_f64() - 1.0;
            assert!(rel.abs() < 0.005, "{bytes} B: extrapolated {short} vs whole {whole}");
        }
    }
}
