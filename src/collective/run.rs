//! The one place that knows which algorithms exist: a call ([`Call`]) goes in, the registry
//! picks the type that runs it, and that type, implementing [`Algorithm`], posts flows and
//! timers into a shared [`Simulation`] and reacts to their completions.
//!
//! Several calls can run in one simulation at once: their flows share links by max-min
//! fairness, and each completion goes back to the call that posted it (a [`Token`] names the
//! call and carries the algorithm's own typed [`Signal`]). Background traffic ([`Load`]) sits in
//! the network as flows that never end.

use std::borrow::Cow;

use super::{Collective, Mode, TimingParams, chain, nvls, p2p, pat, ring, tree};
use crate::comm::{Algo, Communicator, Proto, Selection};
use crate::engine::{Happening, Simulation};
use crate::hw::Cluster;
use crate::net::solver::{FlowSpec, equal_shares, max_min_rates};
use crate::net::{LinkId, PathId};
use crate::units::{Bytes, Time};

/// One collective call: everything an algorithm needs to run it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The machine.
    pub cluster: &'a Cluster,
    /// The communicator over its ranks.
    pub comm: &'a Communicator,
    /// Which collective.
    pub coll: Collective,
    /// NCCL's byte count: count × element size; for AllGather and ReduceScatter the total over
    /// ranks, for AllToAll the whole send buffer, for SendRecv the message.
    pub bytes: Bytes,
    /// Bytes per element.
    pub elt: Bytes,
    /// Algorithm, protocol and channels (from [`select`]).
    pub sel: Selection,
    /// Timing parameters.
    pub params: &'a TimingParams,
    /// How much of the machine to simulate.
    pub mode: Mode,
    /// Traffic of others on the same network for the whole call (neighbour jobs, background
    /// patterns): aggregated models include it in their steady state, detailed runs carry it
    /// as flows that never end.
    pub load: &'a [Load],
}

/// Steady traffic on a path: `weight` identical flows, each capped at `cap` bytes/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    /// Links crossed.
    pub path: Vec<LinkId>,
    /// Rate cap per flow, bytes/s (infinity: takes its max-min share).
    pub cap: f64,
    /// How many identical flows.
    pub weight: f64,
}

/// What one simulated call gives back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallRun {
    /// Time as nccl-tests would report it (call overhead included).
    pub time: Time,
    /// Flow completions and events handled for it.
    pub events: u64,
    /// The protocol that ran (for point-to-point calls, the one NCCL's p2p threshold picks).
    pub proto: Proto,
    /// Channels used (for point-to-point calls, the most any peer pair uses).
    pub channels: usize,
    /// How it was simulated.
    pub form: Form,
}

/// How a call was simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Every rank, channel and chunk on the network.
    Detailed,
    /// One representative per class of equivalent ranks or pipelines on the network, each
    /// standing for its images (checked to be equivalent): the detailed result, from less
    /// work.
    Symmetric,
    /// Steady-state rates, a closed-form estimate, or a symmetric run too long to run whole
    /// extrapolated from its first part.
    Aggregated,
}

impl Form {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Form::Detailed => "detailed",
            Form::Symmetric => "symmetric",
            Form::Aggregated => "aggregated",
        }
    }
}

/// A call's index within one simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u32);

/// What a flow or timer means to the algorithm that posted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ring AllReduce/AllGather/ReduceScatter.
    Ring(ring::Ev),
    /// Tree, NVLSTree, CollNet.
    Tree(tree::Ev),
    /// NVLS on one node.
    Nvls(nvls::Ev),
    /// Broadcast and Reduce chains.
    Chain(chain::Ev),
    /// A call timed in closed form has ended (or a step of a stepped call).
    End,
    /// A ring call's per-step cost has been paid ([`Delayed`]), or a call in its steady form
    /// has reached its time alone.
    Floor,
    /// Flow `i` of a call that starts its flows all at once has finished.
    Flow(u32),
    /// Background traffic (never completes).
    Load,
    /// A call posted into a [`Shared`] network starts (after its call overhead).
    Start,
    /// A timer an issuer of calls set on a [`Shared`] network, with its tag.
    Wake(u32),
}

/// A flow's or timer's owner and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// The call that posted it.
    pub call: CallId,
    /// What it means to that call.
    pub signal: Signal,
}

/// A call's handle on the shared simulation: what it posts is tagged with its id.
pub struct Ctx<'s> {
    sim: &'s mut Simulation<Token>,
    call: CallId,
}

impl Ctx<'_> {
    /// The current time.
    pub fn now(&self) -> Time {
        self.sim.now()
    }

    /// Registers a path for flows.
    pub fn add_path(&mut self, links: &[LinkId]) -> PathId {
        self.sim.add_path(links)
    }

    /// Registers the reduced path of a flow that stands for its images (see
    /// [`symmetry`](super::symmetry)), with its own latency.
    pub fn add_weighted_path(
        &mut self,
        links: &[LinkId],
        weights: &[f64],
        latency: Time,
    ) -> PathId {
        self.sim.add_weighted_path(links, weights, latency)
    }

    /// Starts a transfer of `bytes` on `path`, sharing links with everything else in flight.
    pub fn flow(&mut self, path: PathId, bytes: Bytes, signal: impl Into<Signal>) {
        self.capped_flow(path, bytes, f64::INFINITY, signal);
    }

    /// Starts a transfer of `bytes` on `path` that never runs faster than `cap` bytes/s (what
    /// the one CTA or proxy driving it can move), sharing links with everything else.
    pub fn capped_flow(&mut self, path: PathId, bytes: Bytes, cap: f64, signal: impl Into<Signal>) {
        let token = Token { call: self.call, signal: signal.into() };
        self.sim.start_capped_flow(path, bytes, cap, token);
    }

    /// Starts a transfer that takes `duration` (its rate already known).
    pub fn fixed(&mut self, duration: Time, signal: impl Into<Signal>) {
        let token = Token { call: self.call, signal: signal.into() };
        self.sim.start_fixed(duration, token);
    }

    /// Schedules `signal` at `at`.
    pub fn at(&mut self, at: Time, signal: impl Into<Signal>) {
        let token = Token { call: self.call, signal: signal.into() };
        self.sim.schedule(at, token);
    }
}

/// One running call of one algorithm.
pub trait Algorithm {
    /// Posts the call's first flows and timers (the simulation's clock is the call's start).
    fn start(&mut self, cx: &mut Ctx<'_>);
    /// A flow or timer the call posted is done.
    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal);
    /// When the call's last byte arrived (absolute time), once every rank is done.
    fn finished(&self) -> Option<Time>;
    /// The latest completion so far (what `finished` will say, if nothing more happens).
    fn last(&self) -> Time;
    /// How this call is simulated.
    fn form(&self) -> Form {
        Form::Aggregated
    }
}

/// A call timed in closed form: one timer at its end.
pub(crate) struct Closed {
    duration: Time,
    end: Option<Time>,
    form: Form,
}

impl Closed {
    /// A call that ends `duration` after it starts (an aggregated form's result).
    pub(crate) fn new(duration: Time) -> Closed {
        Closed { duration, end: None, form: Form::Aggregated }
    }

    /// A call timed elsewhere, in `form`.
    pub(crate) fn timed(duration: Time, form: Form) -> Closed {
        Closed { duration, end: None, form }
    }
}

impl Algorithm for Closed {
    fn start(&mut self, cx: &mut Ctx<'_>) {
        cx.at(cx.now() + self.duration, Signal::End);
    }
    fn on(&mut self, cx: &mut Ctx<'_>, _: Signal) {
        self.end = Some(cx.now());
    }
    fn finished(&self) -> Option<Time> {
        self.end
    }
    fn last(&self) -> Time {
        self.end.unwrap_or(Time::ZERO)
    }
    fn form(&self) -> Form {
        self.form
    }
}

/// A ring call across nodes with NCCL's per-step cost on top of its pipeline
/// (`ring::latency_floor`): it ends `extra` after its algorithm does. Alone, `extra` is what
/// it takes to reach `floor` (its bandwidth time plus the per-step cost), at most that cost
/// `lat` and at least nothing (a pipeline slower than the floor has paid it already); beside
/// other calls it is what the call alone would pay ([`StepCost::Added`]).
pub(crate) struct Delayed {
    inner: Box<dyn Algorithm>,
    floor: Time,
    lat: Time,
    extra: Option<Time>,
    start: Time,
    posted: bool,
    end: Option<Time>,
}

impl Delayed {
    pub(crate) fn new(
        inner: Box<dyn Algorithm>,
        floor: Time,
        lat: Time,
        extra: Option<Time>,
    ) -> Delayed {
        Delayed { inner, floor, lat, extra, start: Time::ZERO, posted: false, end: None }
    }

    /// What the per-step cost adds to a pipeline that took `took` alone.
    pub(crate) fn added(floor: Time, lat: Time, took: Time) -> Time {
        (floor - took.min(floor)).min(lat)
    }

    fn check(&mut self, cx: &mut Ctx<'_>) {
        if let (false, Some(t)) = (self.posted, self.inner.finished()) {
            self.posted = true;
            let took = t - self.start.min(t);
            let extra = self.extra.unwrap_or_else(|| Delayed::added(self.floor, self.lat, took));
            cx.at(t.max(cx.now()).saturating_add(extra), Signal::Floor);
        }
    }
}

impl Algorithm for Delayed {
    fn start(&mut self, cx: &mut Ctx<'_>) {
        self.start = cx.now();
        self.inner.start(cx);
        self.check(cx);
    }
    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        match signal {
            Signal::Floor => self.end = Some(cx.now()),
            s => {
                self.inner.on(cx, s);
                self.check(cx);
            }
        }
    }
    fn finished(&self) -> Option<Time> {
        self.end
    }
    fn last(&self) -> Time {
        self.end.unwrap_or_else(|| self.inner.last())
    }
    fn form(&self) -> Form {
        self.inner.form()
    }
}

/// A family of algorithms as the registry tells them apart: how a call of it runs, its
/// steady-state flows and the work of its detailed run. One implementation a family, and
/// [`family`] the one table that picks it for a call.
trait Family: Sync {
    /// The algorithm object for `call`, its paths registered in `cx`, with the protocol and
    /// channels it runs on.
    fn instantiate(
        &self,
        call: &Call<'_>,
        cx: &mut Ctx<'_>,
        cost: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize);

    /// Every flow of its steady state (each connection of each channel busy at once), with
    /// its cap (wire bytes/s; infinity for none).
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)>;

    /// [`Family::steady_flows`], each with how many flows it stands for (1 unless a family
    /// solves a few for many by symmetry).
    fn weighted_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64, f64)> {
        self.steady_flows(call).into_iter().map(|(p, c)| (p, 1.0, c)).collect()
    }

    /// Whether it is the ring (the network proxies' cost is modelled for it alone).
    fn is_ring(&self) -> bool {
        false
    }

    /// A detailed run's work in ring transfers ([`detailed_work`]): ranks × channels × the
    /// pipeline's chunks (NCCL's step of `buffsize / 8` under Simple, a store round under
    /// LL/LL128), each sent up and down and weighing ten ring transfers.
    fn detailed_work(&self, call: &Call<'_>) -> f64 {
        let nranks = call.comm.nranks();
        let nch = call.sel.nchannels.clamp(1, call.comm.channels().len().max(1));
        let unit = match call.sel.proto {
            Proto::Simple => call.comm.env().buffsize.get() / 8,
            p => ring::stream_unit(p),
        }
        .max(1);
        let per_channel = call.bytes.get().div_ceil(nch as u64);
        (nranks * nch) as f64 * 2.0 * per_channel.div_ceil(unit).max(1) as f64 * 10.0
    }
}

/// Paths without caps.
fn uncapped(paths: Vec<Vec<LinkId>>) -> Vec<(Vec<LinkId>, f64)> {
    paths.into_iter().map(|p| (p, f64::INFINITY)).collect()
}

/// One rank: a local copy.
struct OneRank;

impl Family for OneRank {
    fn instantiate(
        &self,
        call: &Call<'_>,
        _: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        let (p, c, serial) = match call.coll {
            Collective::AllToAll | Collective::SendRecv | Collective::Send { .. } => {
                let (p, c) = p2p::shape(call);
                (p, c, call.params.p2p_peer.times(p2p::rounds(call.coll, 1)))
            }
            _ => (call.sel.proto, call.sel.nchannels, Time::ZERO),
        };
        (Box::new(Closed::new(serial + one_rank_copy(call))), p, c)
    }
    fn steady_flows(&self, _: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        Vec::new()
    }
    fn detailed_work(&self, _: &Call<'_>) -> f64 {
        1.0
    }
}

/// SendRecv and AllToAll on NCCL's p2p channels.
struct P2p;

impl Family for P2p {
    fn instantiate(
        &self,
        call: &Call<'_>,
        _: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        if call.mode == Mode::Detailed {
            return p2p::detailed(call);
        }
        let (duration, p, c) = p2p::time(call);
        (Box::new(Closed::new(duration)), p, c)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        p2p::steady_capped(call)
    }
    fn weighted_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64, f64)> {
        p2p::steady_weighted(call)
    }
}

/// Ring AllReduce, AllGather, ReduceScatter.
struct Ring;

impl Family for Ring {
    fn instantiate(
        &self,
        call: &Call<'_>,
        cx: &mut Ctx<'_>,
        cost: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        (ring::new(call, cx, cost), call.sel.proto, call.sel.nchannels)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        ring::steady_flows(call)
    }
    fn is_ring(&self) -> bool {
        true
    }
    /// Every connection's slices.
    fn detailed_work(&self, call: &Call<'_>) -> f64 {
        let nch = call.sel.nchannels.clamp(1, call.comm.channels().len().max(1));
        (call.comm.nranks() * nch) as f64 * ring::slices_per_connection(call) as f64
    }
}

/// Broadcast and Reduce along the ring.
struct Chain;

impl Family for Chain {
    fn instantiate(
        &self,
        call: &Call<'_>,
        cx: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        (chain::new(call, cx), call.sel.proto, call.sel.nchannels)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        uncapped(chain::steady_paths(call))
    }
}

/// Tree, NVLSTree, CollNetDirect, CollNetChain.
struct Tree;

impl Family for Tree {
    fn instantiate(
        &self,
        call: &Call<'_>,
        cx: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        (tree::new(call, cx), call.sel.proto, call.sel.nchannels)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        tree::steady_flows(call)
    }
}

/// NVLS on one node.
struct Nvls;

impl Family for Nvls {
    fn instantiate(
        &self,
        call: &Call<'_>,
        cx: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        (nvls::new(call, cx), call.sel.proto, call.sel.nchannels)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        uncapped(nvls::steady_paths(call))
    }
}

/// PAT AllGather/ReduceScatter.
struct Pat;

impl Family for Pat {
    fn instantiate(
        &self,
        call: &Call<'_>,
        _: &mut Ctx<'_>,
        _: StepCost,
    ) -> (Box<dyn Algorithm>, Proto, usize) {
        let (proto, channels) = (call.sel.proto, call.sel.nchannels);
        if call.mode == Mode::Detailed {
            return (pat::detailed(call), proto, channels);
        }
        (Box::new(Closed::new(pat::time(call))), proto, channels)
    }
    fn steady_flows(&self, call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
        uncapped(pat::steady_paths(call))
    }
}

/// The family of `call`'s algorithm: the registry's one table.
fn family(call: &Call<'_>) -> &'static dyn Family {
    if call.comm.nranks() == 1 {
        return &OneRank;
    }
    match (call.coll, call.sel.algo) {
        (Collective::AllToAll | Collective::SendRecv | Collective::Send { .. }, _) => &P2p,
        (_, Algo::Nvls) => &Nvls,
        (_, Algo::Tree | Algo::NvlsTree | Algo::CollNetChain | Algo::CollNetDirect) => &Tree,
        (_, Algo::Pat) => &Pat,
        (Collective::Broadcast | Collective::Reduce, _) => &Chain,
        _ => &Ring,
    }
}

/// Whether collsim simulates `algo` for `coll` on `nnodes` nodes.
pub fn is_simulated(coll: Collective, algo: Algo, nnodes: usize) -> bool {
    match algo {
        Algo::Ring => true,
        Algo::Nvls => coll == Collective::AllReduce && nnodes == 1,
        Algo::Tree => coll == Collective::AllReduce,
        Algo::NvlsTree | Algo::CollNetChain | Algo::CollNetDirect => {
            coll == Collective::AllReduce && nnodes > 1
        }
        Algo::Pat => matches!(coll, Collective::AllGather | Collective::ReduceScatter),
    }
}

/// What NCCL would run for `coll` on `bytes`, and what collsim runs: NCCL's choice when collsim
/// simulates it, else the best choice among the algorithms it simulates.
pub fn select(comm: &Communicator, coll: Collective, bytes: u64) -> Selection {
    comm.select_among(coll, bytes, is_simulated)
}

/// The algorithm object for `call`, its paths registered in `cx`.
fn instantiate(
    call: &Call<'_>,
    cx: &mut Ctx<'_>,
    cost: StepCost,
) -> (Box<dyn Algorithm>, Proto, usize) {
    family(call).instantiate(call, cx, cost)
}

/// Whether NCCL launches nothing for a training step's `coll` on `ranks` ranks: on one rank an
/// in-place call without a pre-scaling op does nothing (ncclLaunchOneRank,
/// src/device/onerank.cu at NVIDIA/nccl 5067397c), and training's all-reduces (DDP's buckets,
/// Megatron's tensor-parallel sums, HYBRID_SHARD's) and broadcasts are in place and sum. Its
/// all-gathers and reduce-scatters write another buffer: a copy.
pub fn in_place_no_op(ranks: usize, coll: Collective) -> bool {
    ranks == 1 && matches!(coll, Collective::AllReduce | Collective::Broadcast)
}

/// A call on one rank: NCCL copies the send buffer into the receive buffer (out of place, as
/// nccl-tests times it) — read and write at the GPU's memory bandwidth. When both buffers fit
/// in the L2 cache they stay there from one iteration to the next, and the copy hides behind
/// the next call's launch (one H100, calibration/data/2026-11-22-h100-single: 6.2-7.9 us flat
/// from 8 B to 8 MiB, device-memory rate from 32 MiB). Without a known memory bandwidth,
/// nothing beyond the call's overhead.
fn one_rank_copy(call: &Call<'_>) -> Time {
    let model = &call.cluster.spec().gpu.model;
    let traffic = 2.0 * call.bytes.as_f64();
    let in_l2 = model.l2_cache.is_some_and(|l2| traffic <= l2.as_f64());
    match model.memory_bandwidth {
        Some(bw) if !in_l2 => Time::from_secs_f64_ceil(traffic / bw.bytes_per_sec()),
        _ => Time::ZERO,
    }
}

/// `call` on an almost empty buffer: one element per rank (one element for a send/receive,
/// whose bytes are each rank's own). Its time is the call's *latency part* (call overhead and
/// per-step latencies), and what the whole call takes beyond it is the time spent moving the
/// bytes: `explain` splits a call so, and a neighbouring job's flows load the network by that
/// fraction. (A [`SteadyForm`]'s moving time is another quantity: what the bytes add at the
/// margin, which leaves NCCL's per-step costs out of what stretches on shared links.)
pub fn near_empty<'a>(call: &Call<'a>) -> Call<'a> {
    let elt = call.elt.get();
    let tiny = match call.coll {
        Collective::SendRecv | Collective::Send { .. } => elt,
        _ => (elt * call.comm.nranks() as u64).max(elt),
    };
    Call { bytes: Bytes::new(tiny), ..*call }
}

/// Simulates one call alone (with its [`Call::load`] as background).
pub fn simulate(call: &Call<'_>) -> CallRun {
    simulate_inspected(call, |_| {})
}

/// As [`simulate`], handing the network to `inspect` after everything that happens (for
/// checks: no link over capacity, bytes conserved).
pub fn simulate_inspected(
    call: &Call<'_>,
    inspect: impl FnMut(&mut crate::net::Network<Token>),
) -> CallRun {
    simulate_costed(call, StepCost::Floor, inspect)
}

/// The time `call` takes alone without NCCL's per-step cost on top of its pipeline (what a
/// ring across nodes pays beside other calls is measured against it), less its call overhead.
pub(crate) fn pipeline_alone(call: &Call<'_>) -> Time {
    // In its own mode, as `auto` picks it: a detailed run per post would double the cost of a
    // detailed shared run; the symmetric and aggregated forms are the detailed result or close.
    let call = Call { load: &[], mode: Mode::Auto, ..*call };
    let run = simulate_costed(&call, StepCost::None, |_| {});
    let cost = call.params.call_cost(call.comm.gpus_per_process());
    run.time - cost.min(run.time)
}

/// How a ring call across nodes pays NCCL's per-step cost (`ring::latency_floor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepCost {
    /// Alone on the network: the call pays what reaching its floor takes.
    Floor,
    /// Beside other calls: what the floor adds to the call alone is added to its shared
    /// pipeline (the steady form's latency, so that the two forms meet).
    Added,
    /// Not at all: the pipeline alone.
    None,
}

fn simulate_costed(
    call: &Call<'_>,
    cost: StepCost,
    mut inspect: impl FnMut(&mut crate::net::Network<Token>),
) -> CallRun {
    let mut sim: Simulation<Token> = Simulation::new(call.cluster.links());
    let mut cx = Ctx { sim: &mut sim, call: CallId(0) };
    let (mut algo, proto, channels) = instantiate(call, &mut cx, cost);
    // Background traffic holds, on every link, the rate it gets in the call's steady state
    // (what the aggregated models pace themselves by): the call's flows share what is left. A
    // call on fixed rates never consults the network.
    if sim.has_paths() && !call.load.is_empty() {
        reserve_load(&mut sim, call);
    }
    let mut cx = Ctx { sim: &mut sim, call: CallId(0) };
    algo.start(&mut cx);
    let mut algos = [algo];
    drive(&mut sim, &mut algos, &mut inspect);
    let end = algos[0].finished().unwrap_or_else(|| algos[0].last());
    CallRun {
        time: call.params.call_cost(call.comm.gpus_per_process()) + end,
        events: sim.handled(),
        proto,
        channels,
        form: algos[0].form(),
    }
}

/// Simulates several calls posted at time zero into one network, each run to its end; their
/// flows share links all along (a call that ends early stops loading the network). Every call
/// runs in detail whatever its mode: aggregated forms run on fixed rates and would not meet.
pub fn simulate_together(calls: &[Call<'_>]) -> Vec<CallRun> {
    let calls: Vec<Call<'_>> = calls.iter().map(|c| Call { mode: Mode::Detailed, ..*c }).collect();
    let calls = calls.as_slice();
    let Some(first) = calls.first() else { return Vec::new() };
    let mut sim: Simulation<Token> = Simulation::new(first.cluster.links());
    for c in calls {
        post_load(&mut sim, c.load);
    }
    let mut algos = Vec::with_capacity(calls.len());
    let mut shapes = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let mut cx = Ctx { sim: &mut sim, call: CallId(i as u32) };
        let (mut a, p, c) = instantiate(call, &mut cx, StepCost::Added);
        a.start(&mut cx);
        algos.push(a);
        shapes.push((p, c));
    }
    drive(&mut sim, &mut algos, &mut |_| {});
    let events = sim.handled();
    calls
        .iter()
        .zip(&algos)
        .zip(shapes)
        .map(|((call, a), (proto, channels))| CallRun {
            time: call.params.call_cost(call.comm.gpus_per_process())
                + a.finished().unwrap_or_else(|| a.last()),
            events,
            proto,
            channels,
            form: a.form(),
        })
        .collect()
}

/// `run`'s time (µs) with the profile's size-band correction for its mechanism (algorithm as
/// `validate` prints it, "P2P" for point-to-point calls, and protocol) and `call`'s bytes, and
/// the correction's error band: (time, low, high). All three are the simulated time without a
/// correction.
pub fn corrected(call: &Call<'_>, run: &CallRun) -> (f64, f64, f64) {
    let time_us = run.time.as_us();
    match &call.params.correction {
        Some(c) => {
            let algo = if is_p2p(call.coll) { "P2P" } else { call.sel.algo.name() };
            c.apply(&format!("{algo}/{}", run.proto.name()), call.bytes.get(), time_us)
        }
        None => (time_us, time_us, time_us),
    }
}

/// A network that calls are posted into over time by issuers outside the engine (a DDP step's
/// NCCL stream, several jobs' streams): each call runs in detail from the moment it is posted
/// and shares every link by max-min with whatever else is in flight; background load sits in
/// it as flows that never end. The issuers step it with [`Shared::advance`], which reports calls
/// finishing and their own timers.
pub struct Shared {
    sim: Simulation<Token>,
    calls: Vec<Posted>,
    /// Registered steady forms: latency, time alone, flows.
    forms: Vec<(Time, Time, Vec<SteadyFlow>)>,
    notices: std::collections::VecDeque<(Time, Notice)>,
}

/// A call posted into a [`Shared`] network.
struct Posted {
    algo: Box<dyn Algorithm>,
    done: bool,
}

/// What a [`Shared`] network reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A posted call has finished (its call overhead included).
    Done(CallId),
    /// A timer set with [`Shared::wake`] is due.
    Wake(u32),
}

impl Shared {
    /// An empty network over `links`, carrying `load` for as long as it runs.
    pub fn new(links: &[crate::net::Link], load: &[Load]) -> Shared {
        let mut sim = Simulation::new(links);
        post_load(&mut sim, load);
        let notices = std::collections::VecDeque::new();
        Shared { sim, calls: Vec::new(), forms: Vec::new(), notices }
    }

    /// The current time.
    pub fn now(&self) -> Time {
        self.sim.now()
    }

    /// Posts `call` now: its flows start after its call overhead (the launch, as nccl-tests
    /// counts it) and run in detail beside everything else on the network (the call's own
    /// [`Call::load`] is not used: the network carries the load). Returns its id and the
    /// protocol and channels it runs with.
    pub fn post(&mut self, call: &Call<'_>) -> (CallId, Proto, usize) {
        let call = Call { mode: Mode::Detailed, load: &[], ..*call };
        if call.bytes.get() == 0 {
            // Nothing to move: the call's overhead and latencies, as alone.
            let run = simulate(&call);
            return (self.post_timed(run.time, run.form), run.proto, run.channels);
        }
        let id = CallId(self.calls.len() as u32);
        let (algo, proto, channels) =
            instantiate(&call, &mut Ctx { sim: &mut self.sim, call: id }, StepCost::Added);
        let at = self.sim.now().saturating_add(call.params.call_cost(call.comm.gpus_per_process()));
        self.sim.schedule(at, Token { call: id, signal: Signal::Start });
        self.calls.push(Posted { algo, done: false });
        (id, proto, channels)
    }

    /// Registers a call's steady form, to post it (as often as needed) with
    /// [`Shared::post_steady`].
    pub fn register(&mut self, form: &SteadyForm) -> FormId {
        let flows = form
            .flows
            .iter()
            .map(|(p, b, cap)| {
                (self.sim.add_weighted_path(p, &vec![1.0; p.len()], Time::ZERO), *b, *cap)
            })
            .collect();
        self.forms.push((form.latency, form.whole, flows));
        FormId(self.forms.len() as u32 - 1)
    }

    /// Posts a registered call in its steady form now: its latency, then its flows beside
    /// everything else on the network.
    pub fn post_steady(&mut self, form: FormId) -> CallId {
        let (latency, whole, flows) = self.forms[form.0 as usize].clone();
        let id = CallId(self.calls.len() as u32);
        let left = flows.len();
        let mut algo: Box<dyn Algorithm> = Box::new(SteadyRun {
            latency,
            whole,
            flows,
            left,
            due: None,
            floored: false,
            end: None,
        });
        algo.start(&mut Ctx { sim: &mut self.sim, call: id });
        self.calls.push(Posted { algo, done: false });
        id
    }

    /// Posts a call timed elsewhere: it ends `duration` from now and touches no link.
    pub fn post_timed(&mut self, duration: Time, form: Form) -> CallId {
        let id = CallId(self.calls.len() as u32);
        let mut algo: Box<dyn Algorithm> = Box::new(Closed::timed(duration, form));
        algo.start(&mut Ctx { sim: &mut self.sim, call: id });
        self.calls.push(Posted { algo, done: false });
        id
    }

    /// Sets a timer: `tag` comes back from [`Shared::advance`] at `at`.
    pub fn wake(&mut self, at: Time, tag: u32) {
        self.sim.schedule(at, Token { call: CallId(u32::MAX), signal: Signal::Wake(tag) });
    }

    /// Rate solves' work so far (links visited), for budgets.
    pub fn work(&mut self) -> u64 {
        self.sim.network().work()
    }

    /// Runs until call `id` finishes, and says when; `None` if nothing is left to happen
    /// before it does (it was never posted).
    pub fn finish(&mut self, id: CallId) -> Option<Time> {
        while let Some((t, notice)) = self.advance() {
            if notice == Notice::Done(id) {
                return Some(t);
            }
        }
        None
    }

    /// Runs until a call finishes or a timer is due, and says which and when; `None` when
    /// nothing is left to happen (background load alone never ends, and does not count).
    pub fn advance(&mut self) -> Option<(Time, Notice)> {
        while self.notices.is_empty() {
            let (t, toks) = match self.sim.step()? {
                Happening::Flows(t, toks) => (t, toks),
                Happening::Event(t, tok) => (t, vec![tok]),
            };
            for tok in toks {
                if let Signal::Wake(tag) = tok.signal {
                    self.notices.push_back((t, Notice::Wake(tag)));
                    continue;
                }
                let Some(p) = self.calls.get_mut(tok.call.0 as usize) else { continue };
                let cx = &mut Ctx { sim: &mut self.sim, call: tok.call };
                match tok.signal {
                    Signal::Start => p.algo.start(cx),
                    s => p.algo.on(cx, s),
                }
                if !p.done && p.algo.finished().is_some() {
                    p.done = true;
                    self.notices.push_back((t, Notice::Done(tok.call)));
                }
            }
        }
        self.notices.pop_front()
    }
}

/// A call in its steady form, for a [`Shared`] network: its latency (the same call on an almost
/// empty buffer: call overhead and per-step latencies), then every steady-state flow at once,
/// each carrying what it moves at its steady rate over the call's moving time. Beside other
/// traffic the flows on shared links slow down and the call ends when its last flow does; it
/// never ends before its own time alone, which is when it ends alone (its flows, a hair short
/// of their bytes, are done by then), to the picosecond: a call alone in the network takes
/// exactly what the same call simulated alone takes, with the profile's size-band correction.
#[derive(Debug, Clone)]
pub struct SteadyForm {
    /// The protocol the call runs with.
    pub proto: Proto,
    latency: Time,
    /// The call's time alone.
    whole: Time,
    /// Each steady path, the bytes it carries and its cap (wire bytes/s; infinity for none).
    flows: Vec<(Vec<LinkId>, Bytes, f64)>,
}

/// What a steady form's flows carry of what they move at their steady rates over the moving
/// time: a billionth short, so that alone they are done within the call's time (a byte's
/// rounding, and the clock's picosecond, could otherwise end them a few picoseconds after it)
/// and the call ends at its own time. Under contention the call is a billionth of its moving
/// time faster than its bytes would make it: a picosecond in a millisecond.
const STEADY_SHORT: f64 = 1.0 - 1e-9;

impl SteadyForm {
    /// `call`'s steady form (simulated alone, without its load, in its own mode). Its moving
    /// time is what the bytes add at the margin: twice the time over the same call on half the
    /// bytes (a large call hides the profile's step latencies under the transfers, so they are
    /// not part of what stretches when links are shared, while NCCL's per-step cost of a ring
    /// across nodes, paid on top at both sizes, lands in the latency; a small call is nearly all
    /// latency), at most the call's time less its call overhead.
    pub fn of(call: &Call<'_>) -> SteadyForm {
        let call = Call { load: &[], ..*call };
        let run = simulate(&call);
        let raw = run.time;
        let elt = call.elt.get().max(1);
        let half = Bytes::new(call.bytes.get() / 2 / elt * elt);
        let half = simulate(&Call { bytes: half, ..call }).time.min(raw);
        let cost = call.params.call_cost(call.comm.gpus_per_process()).as_secs_f64();
        let most = raw.as_secs_f64() - cost;
        let moving = (2.0 * (raw - half).as_secs_f64()).clamp(0.0, most.max(0.0));
        // The profile's size-band correction scales the whole call, its moving time with it
        // (its flows carry that much more, or less, at their steady rates), still at most the
        // call's time less its call overhead.
        let whole = Time::from_us_f64(corrected(&call, &run).0);
        let moving = if whole == raw {
            moving
        } else {
            let most = (whole.as_secs_f64() - cost).max(0.0);
            (moving * whole.as_secs_f64() / raw.as_secs_f64()).min(most)
        };
        let latency = whole - Time::from_secs_f64_ceil(moving).min(whole);
        let flows = steady_flows(&call);
        let raw: Vec<Vec<u32>> =
            flows.iter().map(|(p, _)| p.iter().map(|l| l.0).collect()).collect();
        let refs: Vec<&[u32]> = raw.iter().map(|p| p.as_slice()).collect();
        let flow_caps: Vec<f64> = flows.iter().map(|(_, c)| *c).collect();
        let rates = steady_rates_capped(call.cluster.capacities(), &refs, Some(&flow_caps), &[]);
        let flows = flows
            .into_iter()
            .zip(rates)
            .map(|((p, cap), r)| (p, Bytes::new((r * moving * STEADY_SHORT).floor() as u64), cap))
            .filter(|(_, b, _)| b.get() > 0)
            .collect();
        SteadyForm { proto: run.proto, latency, whole, flows }
    }
}

/// A steady form's flow on a [`Shared`] network: its path, bytes and cap (wire bytes/s).
type SteadyFlow = (PathId, Bytes, f64);

/// A call in its steady form on a [`Shared`] network: its flows start after its latency, and
/// it ends when the last is done, or at its time alone (`whole` after it was posted) if that
/// is later.
struct SteadyRun {
    latency: Time,
    whole: Time,
    flows: Vec<SteadyFlow>,
    left: usize,
    /// When its time alone is up, once posted.
    due: Option<Time>,
    /// Whether that time has come.
    floored: bool,
    end: Option<Time>,
}

impl Algorithm for SteadyRun {
    fn start(&mut self, cx: &mut Ctx<'_>) {
        // Its time alone is set when it is posted, so that where it ends then, it ends in the
        // order it was posted among what is due at that picosecond (as a call timed alone).
        let due = cx.now().saturating_add(self.whole);
        self.due = Some(due);
        cx.at(cx.now().saturating_add(self.latency), Signal::End);
        cx.at(due, Signal::Floor);
    }
    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        match signal {
            Signal::End => {
                for (i, &(p, b, cap)) in self.flows.iter().enumerate() {
                    cx.capped_flow(p, b, cap, Signal::Flow(i as u32));
                }
            }
            Signal::Flow(_) => self.left -= 1,
            // Its time alone is up.
            _ => self.floored = true,
        }
        // Done once its flows are and its time alone is up: at that time (the flows done
        // before it), or when the last flow ends after it.
        let late = self.due.is_none_or(|due| cx.now() > due);
        if self.left == 0 && self.end.is_none() && (self.floored || late) {
            self.end = Some(cx.now());
        }
    }
    fn finished(&self) -> Option<Time> {
        self.end
    }
    fn last(&self) -> Time {
        self.end.unwrap_or(Time::ZERO)
    }
}

/// A [`SteadyForm`] registered on one [`Shared`] network (its paths added once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormId(u32);

/// The link capacities a call's flows share (bytes/s): what its load leaves of each link in
/// the call's steady state (as [`reserve_load`] sets them for a detailed run), or the links'
/// own without load.
pub(crate) fn capacities_beside_load<'c>(call: &Call<'c>) -> Cow<'c, [f64]> {
    let caps = call.cluster.capacities();
    if call.load.is_empty() {
        return Cow::Borrowed(caps);
    }
    let (own, own_caps) = steady_raw(call);
    let refs: Vec<&[u32]> = own.iter().map(|p| p.as_slice()).collect();
    let rates = max_min_with_load(caps, &refs, Some(&own_caps), call.load);
    let mut left = caps.to_vec();
    for (l, amount) in held_by(call.load, &rates[own.len()..]) {
        let c = &mut left[l as usize];
        *c = (*c - amount).max(*c * 1e-6);
    }
    Cow::Owned(left)
}

/// Takes the load's steady-state rates (beside the call's steady flows) off the links it
/// crosses.
fn reserve_load(sim: &mut Simulation<Token>, call: &Call<'_>) {
    let caps = call.cluster.capacities();
    let (own, own_caps) = steady_raw(call);
    let refs: Vec<&[u32]> = own.iter().map(|p| p.as_slice()).collect();
    let rates = max_min_with_load(caps, &refs, Some(&own_caps), call.load);
    for (l, amount) in held_by(call.load, &rates[own.len()..]) {
        sim.reserve(LinkId(l), amount);
    }
}

/// Starts every load as persistent flows.
fn post_load(sim: &mut Simulation<Token>, load: &[Load]) {
    for l in load {
        let p = sim.add_path(&l.path);
        sim.start_persistent(
            p,
            l.cap,
            l.weight,
            Token { call: CallId(u32::MAX), signal: Signal::Load },
        );
    }
}

/// Runs the simulation until nothing is left, handing each completion to the call that posted
/// it (background traffic's tokens name no call) and the network to `inspect` after each step.
fn drive(
    sim: &mut Simulation<Token>,
    calls: &mut [Box<dyn Algorithm>],
    inspect: &mut dyn FnMut(&mut crate::net::Network<Token>),
) {
    let mut deliver = |sim: &mut Simulation<Token>, tok: Token| {
        if let Some(a) = calls.get_mut(tok.call.0 as usize) {
            a.on(&mut Ctx { sim, call: tok.call }, tok.signal);
        }
    };
    while let Some(h) = sim.step() {
        match h {
            Happening::Flows(_, toks) => {
                for tok in toks {
                    deliver(sim, tok);
                }
            }
            Happening::Event(_, tok) => deliver(sim, tok),
        }
        inspect(sim.network());
    }
}

/// Runs one call's algorithm alone, on a simulation of its own over `links`, until it
/// finishes: its duration. `None` if the rate solves visit more than `budget` links first, or
/// are on course to, the call being expected to end about `expected` (an aggregated form that
/// turned out too costly; the caller falls back to an estimate).
pub(crate) fn run_alone(
    links: &[crate::net::Link],
    caps: &[f64],
    budget: u64,
    expected: Time,
    build: impl FnOnce(&mut Ctx<'_>) -> Box<dyn Algorithm>,
) -> Option<Time> {
    run_alone_counted(links, caps, budget, expected, build).map(|(t, _)| t)
}

/// What handling one event costs, in links visited by a rate solve: the bookkeeping around it
/// (queues, the algorithm's reaction).
const EVENT_COST: u64 = 16;

/// As [`run_alone`], with what it cost: the links its rate solves visited (the budget's unit),
/// plus [`EVENT_COST`] per event handled.
pub(crate) fn run_alone_counted(
    links: &[crate::net::Link],
    caps: &[f64],
    budget: u64,
    expected: Time,
    build: impl FnOnce(&mut Ctx<'_>) -> Box<dyn Algorithm>,
) -> Option<(Time, u64)> {
    let mut sim: Simulation<Token> = Simulation::new(links);
    for (l, (link, &c)) in links.iter().zip(caps).enumerate() {
        if c != link.capacity.bytes_per_sec() {
            sim.network().set_capacity(LinkId(l as u32), c);
        }
    }
    let mut algo = build(&mut Ctx { sim: &mut sim, call: CallId(0) });
    algo.start(&mut Ctx { sim: &mut sim, call: CallId(0) });
    while let Some(h) = sim.step() {
        let toks = match h {
            Happening::Flows(_, toks) => toks,
            Happening::Event(_, tok) => vec![tok],
        };
        for tok in toks {
            algo.on(&mut Ctx { sim: &mut sim, call: tok.call }, tok.signal);
        }
        let (work, now) = (sim.network().work() as f64, sim.now().as_secs_f64());
        let course = work * expected.as_secs_f64() / now.max(f64::MIN_POSITIVE);
        if work > budget as f64
            || (now * 8.0 > expected.as_secs_f64() && course > 2.0 * budget as f64)
        {
            return None;
        }
    }
    let cost = sim.network().work() + EVENT_COST * sim.handled();
    Some((algo.finished().unwrap_or_else(|| algo.last()), cost))
}

/// Most periods an extrapolation runs before its last doubling.
const EXTRAPOLATE_PERIODS: usize = 64;

/// The time of a call that repeats itself every `period` units (a ring's turns of steps, a
/// pipeline's steps of chunks), `units` long, from shorter runs of it: once its pipeline has
/// filled, the time grows by about the same amount per period (not exactly: flows sharing links
/// drift in phase, and each run ends a little differently). Runs of `rem + m` and `rem + 2m`
/// periods (`rem` the units left over from whole periods), for `m` doubling from 1 up to
/// [`EXTRAPOLATE_PERIODS`] while `budget` lasts, give the rest at the last pair's rate per
/// period. `run(units, budget)` runs that many units within the budget and says what it cost
/// ([`run_alone_counted`]'s units); `first` is its result for `rem + 1` periods, already run
/// (the caller's probe), not counted in `budget`. `None` when the call is under four periods
/// long or not even the first pair fits.
pub(crate) fn extrapolated(
    units: usize,
    period: usize,
    budget: u64,
    first: (Time, u64),
    run: impl Fn(usize, u64) -> Option<(Time, u64)>,
) -> Option<Time> {
    let periods = units / period;
    let rem = units % period;
    if periods < 4 {
        return None;
    }
    let mut left = budget;
    let mut m = 1;
    let (mut at_m, mut cost) = first;
    let mut pair = None;
    // Each doubling costs about twice the last run.
    while 2 * cost <= left && 4 * m <= periods {
        let (at_2m, c) = run(rem + 2 * m * period, left)?;
        left = left.saturating_sub(c);
        pair = Some((m, at_m, at_2m));
        if m >= EXTRAPOLATE_PERIODS {
            break;
        }
        (m, at_m, cost) = (2 * m, at_2m, c);
    }
    let (m, a, b) = pair?;
    let (a, b) = (i128::from(a.as_ps()), i128::from(b.as_ps()));
    let more = (periods - 2 * m) as i128;
    let t = b + (more * (b - a) + m as i128 / 2) / m as i128;
    u64::try_from(t).ok().map(Time::from_ps)
}

/// The steady-state rates of `paths` (bytes/s) when they all send at once beside `load`: the
/// rates the aggregated models pace themselves by. Max-min, or equal shares above
/// [`EXACT_STEADY_MAX`] flows without load.
pub(crate) fn steady_rates(caps: &[f64], paths: &[&[u32]], load: &[Load]) -> Vec<f64> {
    steady_rates_capped(caps, paths, None, load)
}

/// [`steady_rates`] with each flow held under its own cap (bytes/s, one per path) where
/// `flow_caps` gives them. Beyond [`EXACT_STEADY_MAX`] flows the equal shares are cut to the
/// caps (what a capped flow leaves unused is not handed to the others).
pub(crate) fn steady_rates_capped(
    caps: &[f64],
    paths: &[&[u32]],
    flow_caps: Option<&[f64]>,
    load: &[Load],
) -> Vec<f64> {
    if paths.len() > EXACT_STEADY_MAX && load.is_empty() {
        let mut r = equal_shares(caps, paths);
        if let Some(fc) = flow_caps {
            r.iter_mut().zip(fc).for_each(|(r, c)| *r = r.min(*c));
        }
        r
    } else {
        let mut r = max_min_with_load(caps, paths, flow_caps, load);
        r.truncate(paths.len());
        r
    }
}

/// The max-min rates of `paths` beside `load`.
pub(crate) fn solve_max_min(caps: &[f64], paths: &[&[u32]], load: &[Load]) -> Vec<f64> {
    let mut r = max_min_with_load(caps, paths, None, load);
    r.truncate(paths.len());
    r
}

/// Max-min over `paths` (one flow each, under `flow_caps` where given, else uncapped) and then
/// `load`: the rates of both, in that order.
fn max_min_with_load(
    caps: &[f64],
    paths: &[&[u32]],
    flow_caps: Option<&[f64]>,
    load: &[Load],
) -> Vec<f64> {
    let raw: Vec<Vec<u32>> = load.iter().map(|l| l.path.iter().map(|x| x.0).collect()).collect();
    let mut specs: Vec<FlowSpec<'_>> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| FlowSpec {
            path: p,
            cap: flow_caps.map_or(f64::INFINITY, |c| c[i]),
            weight: 1.0,
            link_weights: None,
        })
        .collect();
    specs.extend(raw.iter().zip(load).map(|(p, l)| FlowSpec {
        path: p,
        cap: l.cap,
        weight: l.weight,
        link_weights: None,
    }));
    max_min_rates(caps, &specs)
}

/// What `load` holds on each link (bytes/s) at `rates` (its flows' per-unit rates).
fn held_by(load: &[Load], rates: &[f64]) -> std::collections::BTreeMap<u32, f64> {
    let mut held = std::collections::BTreeMap::new();
    for (l, r) in load.iter().zip(rates) {
        for x in &l.path {
            *held.entry(x.0).or_insert(0.0) += r * l.weight;
        }
    }
    held
}

/// Above this many flows (and with no background load) steady states take equal shares (each
/// flow the smallest capacity / flow count along its path) instead of solving max-min: the
/// slowest flow gets exactly that under max-min too (the first link to fill is its bottleneck),
/// and the models' times are set by their slowest flow; other flows may get more under max-min,
/// so a time set by another flow can only come out longer. Solving max-min over a million flows
/// (2,048 nodes) took a second.
pub(crate) const EXACT_STEADY_MAX: usize = 150_000;

/// The steady state of `paths` beside `load` (max-min over both, as [`steady_rates`]), and the
/// link capacities the load leaves: what a pipeline's fill shares once the load holds its
/// steady rate.
pub(crate) fn steady_with_reserved<'c>(
    caps: &'c [f64],
    paths: &[&[u32]],
    load: &[Load],
) -> (Vec<f64>, Cow<'c, [f64]>) {
    if load.is_empty() {
        return (steady_rates(caps, paths, load), Cow::Borrowed(caps));
    }
    let mut rates = max_min_with_load(caps, paths, None, load);
    let mut left = caps.to_vec();
    for (x, amount) in held_by(load, &rates[paths.len()..]) {
        let c = &mut left[x as usize];
        *c = (*c - amount).max(caps[x as usize] * 1e-6);
    }
    rates.truncate(paths.len());
    (rates, Cow::Owned(left))
}

/// Every link path of the call's steady state (each connection of each channel busy at once),
/// for `explain`'s bottleneck.
pub fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    steady_flows(call).into_iter().map(|(p, _)| p).collect()
}

/// [`steady_paths`] with each flow's cap (wire bytes/s): a point-to-point channel's rate (see
/// `p2p`), infinity for every other algorithm's flows.
fn steady_flows(call: &Call<'_>) -> Vec<(Vec<LinkId>, f64)> {
    family(call).steady_flows(call)
}

/// How busy each link the call crosses is in its steady state (every connection sending at
/// once beside the call's load): the call's rate on it over its capacity, busiest first,
/// ties by link. What a trace shows while the call moves its bytes.
pub fn link_utilisation(call: &Call<'_>) -> Vec<(LinkId, f64)> {
    let (paths, flow_caps) = steady_raw(call);
    let refs: Vec<&[u32]> = paths.iter().map(Vec::as_slice).collect();
    let caps = call.cluster.capacities();
    let rates = steady_rates_capped(caps, &refs, Some(&flow_caps), call.load);
    // Summed per link in path order, then read in link order.
    let mut on = vec![0.0f64; caps.len()];
    for (p, r) in paths.iter().zip(rates) {
        for &l in p {
            on[l as usize] += r;
        }
    }
    let mut out: Vec<(LinkId, f64)> = on
        .into_iter()
        .enumerate()
        .filter(|&(l, r)| r > 0.0 && caps[l] > 0.0)
        .map(|(l, r)| (LinkId(l as u32), (r / caps[l]).min(1.0)))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.0.cmp(&b.0.0)));
    out
}

/// [`steady_flows`] as the solver takes them: link indices and caps.
fn steady_raw(call: &Call<'_>) -> (Vec<Vec<u32>>, Vec<f64>) {
    steady_flows(call).into_iter().map(|(p, c)| (p.into_iter().map(|l| l.0).collect(), c)).unzip()
}

/// The traffic `call` puts on the network while it runs, as [`Load`] for calls beside it: its
/// steady-state flows, each at most `duty` × the rate it gets in steady state (beside the
/// call's own load), so a job busy with communication a fraction `duty` of the time loads the
/// network by that fraction on average. `duty` ≥ 1: uncapped (a call repeated back to back).
pub fn steady_load(call: &Call<'_>, duty: f64) -> Vec<Load> {
    let (paths, flow_caps): (Vec<Vec<LinkId>>, Vec<f64>) = steady_flows(call).into_iter().unzip();
    if duty >= 1.0 {
        return paths
            .into_iter()
            .zip(flow_caps)
            .map(|(path, cap)| Load { path, cap, weight: 1.0 })
            .collect();
    }
    let caps = call.cluster.capacities();
    let raw: Vec<Vec<u32>> = paths.iter().map(|p| p.iter().map(|l| l.0).collect()).collect();
    let refs: Vec<&[u32]> = raw.iter().map(|p| p.as_slice()).collect();
    let rates = steady_rates_capped(caps, &refs, Some(&flow_caps), call.load);
    paths
        .into_iter()
        .zip(rates)
        .map(|(path, r)| Load { path, cap: duty.max(0.0) * r, weight: 1.0 })
        .collect()
}

/// The link that bounds a call in steady state.
#[derive(Debug, Clone, PartialEq)]
pub struct Bottleneck {
    /// Its class (nvlink, pcie, sys, net).
    pub class: &'static str,
    /// Its capacity, bytes/s.
    pub capacity: f64,
    /// Flows of the call crossing it when every connection sends.
    pub flows: usize,
    /// The slowest flow's rate, bytes/s.
    pub per_flow: f64,
    /// Whether that rate is its channel's cap (a point-to-point channel moves no more than its
    /// CTA, or across nodes NCCL_P2P_PER_CHANNEL_NET_BW) rather than its share of the link.
    pub channel_capped: bool,
}

/// What the network proxies cost a ring call that crosses nodes on a transport whose proxy
/// thread is slow (`proxy_op` > 0). `None` for other algorithms, which do not model it yet, or
/// where it is free.
pub fn proxy_load(call: &Call<'_>) -> Option<ProxyLoad> {
    let op = proxy_op(call.cluster);
    let ring = family(call).is_ring() && call.comm.nnodes() > 1;
    (ring && op > Time::ZERO).then(|| ProxyLoad {
        op,
        per_step: ring::busiest_proxy(call.comm, call.sel.nchannels),
        messages: ring::messages_per_connection(call),
    })
}

/// The network proxies' work in a ring call ([`proxy_load`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProxyLoad {
    /// One network send or receive.
    pub op: Time,
    /// Sends and receives the busiest GPU's proxy handles per ring step (every channel's add
    /// up).
    pub per_step: usize,
    /// Network messages each connection sends over the call (a step each, a slice under
    /// Simple).
    pub messages: usize,
}

impl ProxyLoad {
    /// The busiest proxy's time over the call: a lower bound on the call's.
    pub fn busy(&self) -> Time {
        self.op.times((self.per_step * self.messages) as u64)
    }
}

/// The link that bounds `call` when every connection sends at once: the most loaded link (load
/// over capacity) on the path of the slowest flow, at the steady-state rates.
pub fn bottleneck(call: &Call<'_>) -> Option<Bottleneck> {
    // Each flow with how many it stands for (uniform AllToAll: node 0's for all) and its cap
    // (point-to-point channels).
    let flows: Vec<(Vec<u32>, f64, f64)> = family(call)
        .weighted_flows(call)
        .into_iter()
        .map(|(p, w, c)| (p.iter().map(|l| l.0).collect(), w, c))
        .collect();
    if flows.is_empty() {
        return None;
    }
    let links = call.cluster.links();
    let caps = call.cluster.capacities();
    let flow_caps: Vec<f64> = flows.iter().map(|f| f.2).collect();
    let rates = if flows.iter().all(|(_, w, _)| *w == 1.0) {
        let refs: Vec<&[u32]> = flows.iter().map(|(p, _, _)| p.as_slice()).collect();
        steady_rates_capped(caps, &refs, Some(&flow_caps), call.load)
    } else {
        let specs: Vec<FlowSpec<'_>> = flows
            .iter()
            .map(|(p, w, c)| FlowSpec { path: p, cap: *c, weight: *w, link_weights: None })
            .collect();
        max_min_rates(caps, &specs)
    };
    let mut load = vec![0.0f64; links.len()];
    let mut count = vec![0.0f64; links.len()];
    for ((p, w, _), r) in flows.iter().zip(&rates) {
        for &l in p {
            load[l as usize] += r * w;
            count[l as usize] += w;
        }
    }
    let slowest = (0..rates.len()).min_by(|&a, &b| rates[a].total_cmp(&rates[b]))?;
    let l = flows[slowest].0.iter().copied().max_by(|&a, &b| {
        (load[a as usize] / caps[a as usize]).total_cmp(&(load[b as usize] / caps[b as usize]))
    })? as usize;
    Some(Bottleneck {
        class: links[l].class,
        capacity: caps[l],
        flows: count[l].round() as usize,
        per_flow: rates[slowest],
        channel_capped: rates[slowest] >= flows[slowest].2 * (1.0 - 1e-9),
    })
}

/// Whether `coll` is a point-to-point call, for which NCCL selects no algorithm.
pub fn is_p2p(coll: Collective) -> bool {
    matches!(coll, Collective::AllToAll | Collective::SendRecv | Collective::Send { .. })
}

/// How long each network send or receive keeps a GPU's proxy thread busy: the transport's
/// `proxy_op` (a call on one node has no network hops to pay it).
pub(crate) fn proxy_op(cluster: &Cluster) -> Time {
    cluster.spec().nic.as_ref().map_or(Time::ZERO, |nic| nic.transport.proxy_op)
}

/// Each GPU's proxy thread, which posts and completes every network send and receive of the
/// GPU's connections, one after another across all its channels (the transport's `proxy_op`
/// each): an operation asked for at `t` is handled once the proxy is free.
#[derive(Debug, Clone, Default)]
pub(crate) struct Proxies {
    op: Time,
    free: Vec<Time>,
}

impl Proxies {
    /// `n` proxies, each busy `op` per operation.
    pub(crate) fn new(op: Time, n: usize) -> Proxies {
        Proxies { op, free: vec![Time::ZERO; if op > Time::ZERO { n } else { 0 }] }
    }

    /// Whether an operation costs anything.
    pub(crate) fn costly(&self) -> bool {
        self.op > Time::ZERO
    }

    /// When an operation asked of proxy `p` at `t` is handled (ask at the current time: in the
    /// order asked). A representative connection's operation stands for `weight` of its
    /// images' on the same proxy, asked at once and handled one after another: it keeps the
    /// proxy busy for all of them, and is handled when the middle one is.
    pub(crate) fn serve(&mut self, p: usize, t: Time, weight: f64) -> Time {
        let Some(free) = self.free.get_mut(p) else { return t };
        let start = t.max(*free);
        let op = self.op.as_secs_f64();
        *free = start.saturating_add(Time::from_secs_f64_ceil(op * weight));
        // Handled when the middle image is: on Polaris (1-4 GPUs a node, 2-16 nodes) the
        // symmetric ring then comes within 0.6 % of the detailed one at the median, 7.6 % at
        // p95; handled when the first is, 0.9 % and 10.0 % (2 nodes x 2 GPUs -22 %).
        start.saturating_add(Time::from_secs_f64_ceil(op * (weight - 1.0).max(0.0) / 2.0))
    }
}

/// The most work ([`detailed_work`]) one run in [`Mode::Detailed`] may take: about two minutes
/// on one core of a 2024 server (a 1 GiB Ring/LL128 AllReduce on 32 DGX-H100s is 5.8e7 and
/// took 63 s; NVLSTree on 64 nodes at 256 MiB, 5.2e6 and 7 s).
pub const DETAILED_LIMIT: f64 = 1e8;

/// An estimate, before running, of a [`Mode::Detailed`] run's work in ring transfers: every
/// connection's slices under Ring; elsewhere ranks × channels × the pipeline's chunks (NCCL's
/// step of `buffsize / 8` under Simple, a store round under LL/LL128), each sent up and down
/// and weighing ten ring transfers (their flows share links with many more: measured 1.2e-5 s
/// against 1.1e-6 s per transfer on dgx-h100 at 32 nodes).
pub fn detailed_work(call: &Call<'_>) -> f64 {
    family(call).detailed_work(call)
}

/// Work of calls in [`Mode::Detailed`] counted before they run ([`DetailedBudget::count`]),
/// and the refusal, naming the biggest, when the total is over [`DETAILED_LIMIT`]
/// ([`DetailedBudget::verdict`]).
#[derive(Debug)]
pub struct DetailedBudget {
    total: f64,
    biggest: f64,
    what: String,
    scale: f64,
}

impl Default for DetailedBudget {
    fn default() -> Self {
        DetailedBudget::scaled(1.0)
    }
}

impl DetailedBudget {
    /// A budget whose calls each weigh `scale` times their own work: calls that run several
    /// times, or in a network they share with others whose flows every rate solve also visits.
    pub fn scaled(scale: f64) -> Self {
        DetailedBudget { total: 0.0, biggest: 0.0, what: String::new(), scale }
    }

    /// Counts `call` (nothing unless it is in [`Mode::Detailed`]).
    pub fn count(&mut self, call: &Call<'_>) {
        if call.mode != Mode::Detailed {
            return;
        }
        let w = detailed_work(call) * self.scale;
        self.total += w;
        if w > self.biggest {
            self.biggest = w;
            self.what = format!(
                "the {} {} on {} ranks, {}/{}, is {w:.1e}",
                approx_size(call.bytes.get()),
                call.coll.name(),
                call.comm.nranks(),
                call.sel.algo.name(),
                call.sel.proto.name()
            );
        }
    }

    /// The refusal if the calls counted so far are over the limit.
    pub fn verdict(&self) -> Result<(), String> {
        if self.total <= DETAILED_LIMIT {
            return Ok(());
        }
        Err(format!(
            "--mode detailed would simulate about {:.1e} transfers{} ({}), over the \
             {DETAILED_LIMIT:.0e} (a few minutes) a detailed run may take: use --mode auto or \
             aggregated, or fewer bytes or nodes",
            self.total,
            if self.total > self.biggest { " in all" } else { "" },
            self.what,
        ))
    }
}

/// `bytes` in the largest binary unit it reaches, to a tenth ("12.6 GiB", "512 B").
fn approx_size(bytes: u64) -> String {
    let b = Bytes::new(bytes).to_string();
    if !b.ends_with(" B") && !b.ends_with("KiB") || bytes < 1 << 20 {
        return b;
    }
    let (unit, shift) = if bytes >= 1 << 30 { ("GiB", 30) } else { ("MiB", 20) };
    format!("{:.1} {unit}", bytes as f64 / (1u64 << shift) as f64)
}

/// Refuses, before running, calls in [`Mode::Detailed`] whose work together
/// ([`detailed_work`]) is over [`DETAILED_LIMIT`].
pub fn check_detailed<'c>(calls: impl IntoIterator<Item = Call<'c>>) -> Result<(), String> {
    let mut budget = DetailedBudget::default();
    calls.into_iter().for_each(|c| budget.count(&c));
    budget.verdict()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NCCL's per-step cost adds to a pipeline alone: up to the floor, never more than the
    /// cost itself, nothing once the pipeline is past the floor.
    #[test]
    fn the_per_step_cost_adds_up_to_the_floor_and_at_most_itself() {
        let us = Time::from_us_f64;
        let (floor, lat) = (us(1000.0), us(300.0));
        assert_eq!(Delayed::added(floor, lat, us(900.0)), us(100.0));
        assert_eq!(Delayed::added(floor, lat, us(500.0)), us(300.0));
        assert_eq!(Delayed::added(floor, lat, Time::ZERO), us(300.0));
        assert_eq!(Delayed::added(floor, lat, us(1000.0)), Time::ZERO);
        assert_eq!(Delayed::added(floor, lat, us(5000.0)), Time::ZERO);
    }
}
