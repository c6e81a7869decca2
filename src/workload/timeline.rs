//! A DDP step as it unfolds in time: the compute stream and the NCCL stream, stepped by events.
//!
//! The compute stream runs a list of `Work` items (forward, each layer's backward, each
//! gradient's copy into its bucket, the copy-out); the NCCL stream runs `Batch`es FIFO (a
//! bucket's hook: collectives and hook compute; the buffer broadcast; the `local_used_map`
//! all-reduce). While a collective runs, compute slows by its batch's `Slowdown` (the SMs the
//! collective's own channels take, one CTA each; all of them where the hook synchronises);
//! while hook compute runs, compute waits. A bucket joins the NCCL stream once its last gradient is in and every lower-index
//! bucket has joined.
//!
//! The timeline does not know how long a collective takes: it asks a [`Comms`] to start one and
//! hears when it is done, on its fabric's clock: alone (`step::run_alone`) each collective
//! ends its time alone after it starts; posted into a shared network
//! ([`crate::collective::run::Shared`]) when its last byte arrives, because other traffic
//! shares the links meanwhile.

use std::collections::VecDeque;

use super::DataType;
use super::ddp::{BucketRow, Span};
use super::parallel::{Group, PipeOp};
use crate::collective::Collective;
use crate::units::{Bytes, Secs};

/// Below this many seconds of work left, a compute item is done (rounding).
const DONE: f64 = 1e-15;

/// Work on the NCCL stream.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Hook compute: the GPU runs it in the hook's place, so the compute stream waits.
    Hold {
        /// How long.
        secs: Secs,
        /// Its span's name.
        name: String,
    },
    /// A collective.
    Coll {
        /// The process group it runs on.
        group: Group,
        /// Which.
        collective: Collective,
        /// nccl-tests' size.
        bytes: Bytes,
        /// Element type.
        dtype: DataType,
        /// Its span's name.
        name: String,
    },
}

/// How much compute slows while a collective runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Slowdown {
    /// By this fraction whatever the collective (a scenario's `compute_slowdown`; 1 where the
    /// hook synchronises).
    Fixed(f64),
    /// By the running collective's channels over these SMs (NCCL runs one CTA, so one SM, per
    /// channel; each collective its own count).
    PerChannel(f64),
}

impl Slowdown {
    /// The fraction compute loses while a collective of `channels` runs.
    pub fn of(self, channels: usize) -> f64 {
        match self {
            Slowdown::Fixed(s) => s,
            Slowdown::PerChannel(sms) if sms > 0.0 => (channels as f64 / sms).min(1.0),
            Slowdown::PerChannel(_) => 0.0,
        }
    }
}

/// Work the NCCL stream runs in order, as one launch.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    /// What it runs.
    pub ops: Vec<Op>,
    /// How compute slows while one of its collectives runs.
    pub slowdown: Slowdown,
    /// The row of the bucket it reduces (start, end, collectives and algorithm filled in as it
    /// runs).
    pub row: Option<BucketRow>,
    /// Whether it runs before the backward (its collectives count in `comm_before`).
    pub early: bool,
    /// Whether it runs on a second NCCL stream, with a communicator of its own (HYBRID_SHARD's
    /// all-reduce across the replicas): after the main stream's batches posted before it, in
    /// order with the second stream's, beside whatever the main stream runs next.
    pub side: bool,
}

/// Work on the compute stream.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// `secs` of compute at full speed; a span named `name` if any; gradient `grad` is in its
    /// bucket once it ends.
    Run {
        /// How long at full speed.
        secs: Secs,
        /// Its span's name.
        name: Option<String>,
        /// The tensor whose gradient it copies.
        grad: Option<usize>,
    },
    /// Puts a batch on the NCCL stream (and goes on). Boxed: a batch (its bucket's row
    /// beside its calls) is three times the other items, and timelines are moved and cloned
    /// item by item.
    Post(Box<Batch>),
    /// Waits until the NCCL stream is idle.
    Drain,
    /// Waits until the first `n` batches the NCCL stream took have finished (FSDP: compute
    /// waits for a unit's all-gather, not for what was posted after it).
    Wait(usize),
    /// Waits until `at` s after the timeline started (a replayed trace's host gap); the wait is
    /// a span named `name`.
    Until {
        /// How long after the start.
        at: Secs,
        /// Its span's name.
        name: String,
    },
    /// Waits until the stage beside it has sent what `op` needs (a pipeline stage waiting for
    /// an activation or its gradient); the wait is a span named `name`.
    Recv {
        /// The sender's op whose output it needs.
        op: PipeOp,
        /// Its span's name.
        name: String,
    },
    /// Sends `op`'s output to pipeline stage `to` (a one-way point-to-point call on `group`,
    /// from the pair's first rank to its second, or with `back` the other way): now, the
    /// compute stream waiting for it (Megatron waits for its batched isend/irecv), or, with
    /// `after`, that many seconds from now while the compute stream goes on (the schedule's
    /// last op of a stage, which has no compute item: its send leaves as its compute would
    /// end).
    Send {
        /// The process group (the two stages' pair).
        group: Group,
        /// Whether it goes from the pair's second rank to its first (the pair's ranks in stage
        /// order: a backward's gradient, or an interleaved schedule's forward from the last
        /// stage back to the first).
        back: bool,
        /// Bytes.
        bytes: Bytes,
        /// Element type.
        dtype: DataType,
        /// The receiving stage (of the sender's pipeline).
        to: usize,
        /// What it sends: the output of this op.
        op: PipeOp,
        /// How long from now it leaves, the compute stream going on; `None`: now, blocking.
        after: Option<Secs>,
    },
    /// Records the time it is reached ([`Timeline::marks`]).
    Mark,
    /// A collective on `group` the compute stream waits for (a tensor- or expert-parallel
    /// call of a layer, on its own communicator's stream, not the gradients'): its time is
    /// [`Timeline::call_wait`].
    Call {
        /// The process group.
        group: Group,
        /// What it runs.
        collective: Collective,
        /// Bytes (nccl-tests size).
        bytes: Bytes,
        /// Element type.
        dtype: DataType,
    },
    /// Opens a span that the next [`Work::Close`] ends (an op made of several items).
    Open,
    /// Ends the span [`Work::Open`] began: a compute span named `name`.
    Close {
        /// Its span's name.
        name: String,
    },
}

/// A detached send ([`Work::Send`] with `after`): waiting to leave, or on its way.
#[derive(Debug, Clone)]
enum Detached {
    /// Its delay runs; then it is posted.
    Delayed { group: Group, back: bool, bytes: Bytes, dtype: DataType, to: usize, op: PipeOp },
    /// Posted: its arrival is a signal to `to`.
    Posted { to: usize, op: PipeOp },
}

/// The blocking call the compute stream waits for: its handle, when it began, and, for a
/// pipeline send, where it goes.
#[derive(Debug, Clone, Copy)]
struct Sending {
    handle: u32,
    started: f64,
    to: Option<(usize, PipeOp)>,
}

/// What a timeline hears back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The collective or hold with this handle is done.
    Done(u32),
    /// The timer with this tag is due.
    Wake(u32),
}

/// A collective started for a timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    /// Its handle (comes back in [`Event::Done`]).
    pub handle: u32,
    /// Algorithm, as NCCL names it ("P2P" for point-to-point calls).
    pub algo: &'static str,
    /// Protocol.
    pub proto: &'static str,
    /// CUDA channels, when known (0 if not).
    pub channels: usize,
    /// The busiest links while it moves its bytes (name, utilisation 0–1), when known.
    pub links: Vec<(String, f64)>,
}

/// Where a timeline's collectives run.
pub trait Comms {
    /// Starts a collective on `group` at `now` (s).
    fn launch(
        &mut self,
        now: Secs,
        group: Group,
        collective: Collective,
        bytes: Bytes,
        dtype: DataType,
    ) -> Launched;
    /// Starts `d` of hook compute at `now`; returns its handle.
    fn hold(&mut self, now: Secs, d: Secs) -> u32;
    /// Sets a timer at `at` with `tag`.
    fn wake(&mut self, at: Secs, tag: u32);
}

/// The batch the NCCL stream is running.
#[derive(Clone)]
struct Running {
    batch: Batch,
    /// Its row's and its spans' places in the output.
    row: Option<usize>,
    spans: Vec<usize>,
    /// The op running, when it started, its handle and, if known, its duration.
    op: usize,
    started: f64,
    handle: u32,
    secs: Option<f64>,
    /// The running collective's channels.
    channels: usize,
    /// The largest collective so far (bytes, algorithm, protocol) and the count.
    largest: Option<(Bytes, &'static str, &'static str)>,
    collectives: usize,
}

/// A batch waiting on its NCCL stream, with its row's and spans' places in the output, and how
/// many of the main stream's batches must have finished before it starts.
#[derive(Clone)]
struct Queued {
    batch: Batch,
    row: Option<usize>,
    spans: Vec<usize>,
    after: usize,
}

/// An NCCL stream: its waiting batches, the running one, and counts.
#[derive(Clone, Default)]
struct Lane {
    fifo: VecDeque<Queued>,
    running: Option<Running>,
    /// Batches finished, and batches taken.
    finished: usize,
    taken: usize,
}

/// The main NCCL stream's index in [`Timeline`]'s lanes, and the second's.
const MAIN: usize = 0;
const SIDE: usize = 1;

/// One step's (or one backward's) timeline.
#[derive(Clone)]
pub(crate) struct Timeline {
    work: VecDeque<Work>,
    /// The current run: when it began, what is left of it (full-speed seconds) as of `since`.
    began: f64,
    left: f64,
    since: f64,
    /// The current timer's tag and time.
    tag: u32,
    due: f64,
    /// Buckets: each tensor's, gradients still to come, the next to launch, when each was
    /// ready, and the batches not yet launched.
    owner: Vec<usize>,
    pending: Vec<usize>,
    next: usize,
    ready: Vec<f64>,
    buckets: Vec<Option<Batch>>,
    /// The NCCL streams: the main one ([`MAIN`]) and a second ([`SIDE`]), idle but for
    /// batches that ask for it.
    lanes: [Lane; 2],
    /// Since when the compute stream has waited for the NCCL stream to drain (hook compute
    /// aside), if it is waiting.
    waiting: Option<f64>,
    /// Output.
    pub spans: Vec<Span>,
    pub rows: Vec<BucketRow>,
    /// Collective time before the backward (the buffer broadcast) and in it.
    pub comm_before: Secs,
    pub comm: Secs,
    /// Hook compute.
    pub hook_compute: Secs,
    /// Time the compute stream idled on [`Work::Until`] and [`Work::Recv`].
    pub idle: Secs,
    /// Time the compute stream waited for its own collectives ([`Work::Call`]), and that
    /// time as of the last [`Work::Mark`].
    pub call_wait: Secs,
    pub call_wait_at_mark: Secs,
    /// Time the compute stream waited for its pipeline sends ([`Work::Send`] now), and that
    /// time as of the last [`Work::Mark`].
    pub send_wait: Secs,
    pub send_wait_at_mark: Secs,
    /// Time the compute stream waited for the NCCL stream ([`Work::Drain`], [`Work::Wait`]),
    /// and that time as of the last [`Work::Mark`].
    pub nccl_wait: Secs,
    pub nccl_wait_at_mark: Secs,
    /// When the open span ([`Work::Open`]) began.
    opened: f64,
    /// When the last item ended.
    pub end: Option<Secs>,
    /// When it started.
    t0: f64,
    /// A pipeline stage's: what the stages beside it have sent and it has not yet used (by
    /// the op whose output it is, with a count: a neighbour a step ahead sends it again), its
    /// sends arrived and not yet delivered (stage, op), the send the compute stream waits for,
    /// and the detached ones by handle.
    got: std::collections::BTreeMap<PipeOp, u32>,
    sent: Vec<(usize, PipeOp)>,
    sending: Option<Sending>,
    detached: std::collections::BTreeMap<u32, Detached>,
    /// The actor index of stage 0 of its pipeline (a stage's `to` is relative to it).
    pub peers: usize,
    /// The times each [`Work::Mark`] was reached, in order.
    pub marks: Vec<Secs>,
}

impl Timeline {
    /// A timeline of `work`, whose gradients go to `buckets` (`owner[i]`: tensor i's bucket).
    pub(crate) fn new(work: Vec<Work>, owner: Vec<usize>, buckets: Vec<Batch>) -> Timeline {
        let mut pending = vec![0usize; buckets.len()];
        for &b in &owner {
            pending[b] += 1;
        }
        Timeline {
            work: work.into(),
            began: 0.0,
            left: 0.0,
            since: 0.0,
            tag: 0,
            due: f64::NAN,
            owner,
            pending,
            next: 0,
            ready: vec![0.0; buckets.len()],
            buckets: buckets.into_iter().map(Some).collect(),
            lanes: [Lane::default(), Lane::default()],
            waiting: None,
            spans: Vec::new(),
            rows: Vec::new(),
            comm_before: Secs::ZERO,
            comm: Secs::ZERO,
            hook_compute: Secs::ZERO,
            idle: Secs::ZERO,
            call_wait: Secs::ZERO,
            call_wait_at_mark: Secs::ZERO,
            send_wait: Secs::ZERO,
            send_wait_at_mark: Secs::ZERO,
            nccl_wait: Secs::ZERO,
            nccl_wait_at_mark: Secs::ZERO,
            opened: 0.0,
            end: None,
            t0: 0.0,
            got: Default::default(),
            sent: Vec::new(),
            sending: None,
            detached: Default::default(),
            peers: 0,
            marks: Vec::new(),
        }
    }

    /// Takes over what `old` (this stage's previous step) has received and not used, and its
    /// detached sends still on their way.
    pub(crate) fn carry(&mut self, old: &mut Timeline) {
        self.got = std::mem::take(&mut old.got);
        self.detached = std::mem::take(&mut old.detached);
    }

    /// The sends that arrived since last asked: (receiving stage, op), in order.
    pub(crate) fn take_sent(&mut self) -> Vec<(usize, PipeOp)> {
        std::mem::take(&mut self.sent)
    }

    /// `op`'s output arrives from a stage beside it at `now`: if the compute stream waits for
    /// it, it goes on.
    pub(crate) fn deliver(&mut self, now: Secs, op: PipeOp, io: &mut dyn Comms) {
        let now = now.get();
        *self.got.entry(op).or_default() += 1;
        if matches!(self.work.front(), Some(Work::Recv { op: o, .. }) if *o == op) {
            self.catch_up(now);
            self.settle(now, io);
        }
    }

    /// The work as a list of calls in program order, each bucket's launch placed after the
    /// gradient that completes it (and every bucket before it), as [`Timeline::gradient`]
    /// launches them; its groups on `(ranks per node, ranks)`.
    pub(crate) fn calls(&self, ranks: (usize, usize)) -> Vec<super::calls::Call> {
        use super::calls::Call;
        let mut pending = self.pending.clone();
        let mut next = self.next;
        let mut out = Vec::with_capacity(self.work.len());
        for w in &self.work {
            out.extend(Call::of_work(w, ranks));
            if let Work::Run { grad: Some(i), .. } = w {
                pending[self.owner[*i]] -= 1;
                while next < pending.len() && pending[next] == 0 {
                    if let Some(b) = &self.buckets[next] {
                        out.push(Call::of_batch(b, ranks));
                    }
                    next += 1;
                }
            }
        }
        out
    }

    /// Waits `d` after it starts, before anything else, the wait a span named `name`; its
    /// waits until a time after its start ([`Work::Until`]) move by `d` with it.
    pub(crate) fn delay(&mut self, d: Secs, name: &str) {
        for w in &mut self.work {
            if let Work::Until { at, .. } = w {
                *at += d;
            }
        }
        self.work.push_front(Work::Until { at: d, name: name.into() });
    }

    /// Starts at `t0`.
    pub(crate) fn start(&mut self, t0: Secs, io: &mut dyn Comms) {
        let t0 = t0.get();
        self.t0 = t0;
        self.since = t0;
        self.begin(t0);
        self.settle(t0, io);
    }

    /// Reacts to `event` at `now` (s).
    pub(crate) fn on(&mut self, now: Secs, event: Event, io: &mut dyn Comms) {
        let now = now.get();
        let now = match event {
            // A stale timer (the run's speed changed since it was set).
            Event::Wake(tag) if tag != self.tag => return,
            // The time the timer was set for, exactly (the network's clock is rounded).
            Event::Wake(_) => self.due,
            Event::Done(h) => match self.lane_of(h) {
                Some(l) => {
                    let r = self.lanes[l].running.as_ref();
                    r.and_then(|r| r.secs.map(|d| r.started + d)).unwrap_or(now)
                }
                None if self.sending.is_some_and(|s| s.handle == h) => now,
                None if self.detached.contains_key(&h) => now,
                None => return,
            },
        };
        self.catch_up(now);
        match event {
            // The timer was set for the current run's end, and its speed has not changed since:
            // it has ended (what is left is rounding).
            Event::Wake(_) => self.left = 0.0,
            Event::Done(h) => {
                if let Some(l) = self.lane_of(h) {
                    self.op_done(l, now, io)
                } else if let Some(s) = self.sending.filter(|s| s.handle == h) {
                    self.sending = None;
                    self.work.pop_front();
                    match s.to {
                        Some(to) => {
                            self.send_wait += Secs::new(now - s.started);
                            if now > s.started {
                                let (start_ms, end_ms) = (s.started * 1e3, now * 1e3);
                                let name = "p2p send".into();
                                self.spans.push(Span::compute("compute", name, start_ms, end_ms));
                            }
                            self.sent.push(to);
                        }
                        None => self.call_wait += Secs::new(now - s.started),
                    }
                    self.begin(now);
                } else if let Some(d) = self.detached.remove(&h) {
                    match d {
                        Detached::Delayed { group, back, bytes, dtype, to, op } => {
                            let c = Collective::Send { back };
                            let l = io.launch(Secs::new(now), group, c, bytes, dtype);
                            self.detached.insert(l.handle, Detached::Posted { to, op });
                        }
                        Detached::Posted { to, op } => self.sent.push((to, op)),
                    }
                }
            }
        }
        self.settle(now, io);
    }

    /// The lane whose running op has handle `h`.
    fn lane_of(&self, h: u32) -> Option<usize> {
        (0..self.lanes.len())
            .find(|&l| self.lanes[l].running.as_ref().is_some_and(|r| r.handle == h))
    }

    /// Compute's speed now: stopped under hook compute, slowed by each running collective's
    /// share of the SMs (together at most all of them).
    fn factor(&self) -> f64 {
        let mut slow = 0.0;
        for r in self.lanes.iter().filter_map(|l| l.running.as_ref()) {
            match r.batch.ops[r.op] {
                Op::Hold { .. } => return 0.0,
                Op::Coll { .. } => slow += r.batch.slowdown.of(r.channels),
            }
        }
        1.0 - f64::min(slow, 1.0)
    }

    /// Whether `batch` would contend with what lane `other` runs now: hook compute with hook
    /// compute (both need the whole GPU), or a collective with one on the same process group
    /// (both need the same links). Each collective is timed as if alone on its links, so two
    /// such take turns rather than both running at full speed: their total is right, if not
    /// each one's end. Collectives of different groups are timed as if they shared no links
    /// (HYBRID_SHARD's: NVLink inside the node, the NICs across); checked as a launch starts.
    fn contends(&self, batch: &Batch, other: usize) -> bool {
        let Some(r) = &self.lanes[other].running else { return false };
        match (batch.ops.first(), &r.batch.ops[r.op]) {
            (Some(Op::Hold { .. }), Op::Hold { .. }) => true,
            (Some(Op::Coll { group: a, .. }), Op::Coll { group: b, .. }) => a == b,
            _ => false,
        }
    }

    /// Whether no NCCL stream runs or holds anything.
    fn nccl_idle(&self) -> bool {
        self.lanes.iter().all(|l| l.running.is_none() && l.fifo.is_empty())
    }

    /// Brings the current run's work left up to `now`.
    fn catch_up(&mut self, now: f64) {
        if now > self.since {
            self.left -= (now - self.since) * self.factor();
        }
        self.since = now;
    }

    /// Makes the front item current at `now`.
    fn begin(&mut self, now: f64) {
        match self.work.front() {
            Some(Work::Run { secs, .. }) => {
                self.left = secs.get();
                self.began = now;
                self.since = now;
            }
            Some(Work::Until { .. } | Work::Recv { .. }) => self.began = now,
            _ => {}
        }
    }

    /// Does everything that can happen at `now`, then sets a timer for the current run's end.
    fn settle(&mut self, now: f64, io: &mut dyn Comms) {
        loop {
            let mut moved = false;
            match self.work.front() {
                Some(Work::Run { .. }) if self.left <= DONE => {
                    if let Some(Work::Run { name, grad, .. }) = self.work.pop_front() {
                        if let Some(name) = name {
                            let (start_ms, end_ms) = (self.began * 1e3, now * 1e3);
                            self.spans.push(Span::compute("compute", name, start_ms, end_ms));
                        }
                        if let Some(i) = grad {
                            self.gradient(i, now);
                        }
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Post(_)) => {
                    if let Some(Work::Post(mut b)) = self.work.pop_front() {
                        if let Some(r) = &mut b.row {
                            r.ready_ms = now * 1e3;
                        }
                        self.enqueue(*b);
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Drain) if self.nccl_idle() => {
                    self.close_wait(now);
                    self.work.pop_front();
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Until { at, .. }) if now >= self.t0 + at.get() => {
                    if let Some(Work::Until { name, .. }) = self.work.pop_front() {
                        self.waited(now, name);
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Recv { op, .. }) if self.got.get(op).is_some_and(|&n| n > 0) => {
                    let op = *op;
                    if let Some(n) = self.got.get_mut(&op) {
                        *n -= 1;
                        if *n == 0 {
                            self.got.remove(&op);
                        }
                    }
                    if let Some(Work::Recv { name, .. }) = self.work.pop_front() {
                        self.waited(now, name);
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Send { after: Some(after), .. }) => {
                    let after = *after;
                    if let Some(Work::Send { group, back, bytes, dtype, to, op, .. }) =
                        self.work.pop_front()
                    {
                        let h = io.hold(Secs::new(now), after);
                        let delayed = Detached::Delayed { group, back, bytes, dtype, to, op };
                        self.detached.insert(h, delayed);
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Send { group, back, bytes, dtype, to, op, after: None })
                    if self.sending.is_none() =>
                {
                    let (to, op) = (*to, *op);
                    let (c, bytes) = (Collective::Send { back: *back }, *bytes);
                    let l = io.launch(Secs::new(now), *group, c, bytes, *dtype);
                    let to = Some((to, op));
                    self.sending = Some(Sending { handle: l.handle, started: now, to });
                    moved = true;
                }
                Some(&Work::Call { group, collective, bytes, dtype }) if self.sending.is_none() => {
                    let l = io.launch(Secs::new(now), group, collective, bytes, dtype);
                    self.sending = Some(Sending { handle: l.handle, started: now, to: None });
                    moved = true;
                }
                Some(Work::Mark) => {
                    self.marks.push(Secs::new(now));
                    self.call_wait_at_mark = self.call_wait;
                    self.send_wait_at_mark = self.send_wait;
                    self.nccl_wait_at_mark = self.nccl_wait;
                    self.work.pop_front();
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Open) => {
                    self.opened = now;
                    self.work.pop_front();
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Close { .. }) => {
                    if let Some(Work::Close { name }) = self.work.pop_front() {
                        let (start_ms, end_ms) = (self.opened * 1e3, now * 1e3);
                        self.spans.push(Span::compute("compute", name, start_ms, end_ms));
                    }
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Wait(n)) if self.lanes[MAIN].finished >= *n => {
                    self.close_wait(now);
                    self.work.pop_front();
                    self.begin(now);
                    moved = true;
                }
                Some(Work::Drain | Work::Wait(_)) => {
                    let holding = self.lanes[MAIN]
                        .running
                        .as_ref()
                        .is_some_and(|r| matches!(r.batch.ops[r.op], Op::Hold { .. }));
                    if self.waiting.is_none() && !holding {
                        self.waiting = Some(now);
                    }
                }
                None if self.end.is_none() && self.nccl_idle() => {
                    self.end = Some(Secs::new(now));
                }
                _ => {}
            }
            for l in [MAIN, SIDE] {
                let lane = &self.lanes[l];
                let ready = lane.fifo.front().is_some_and(|q| {
                    self.lanes[MAIN].finished >= q.after && !self.contends(&q.batch, 1 - l)
                });
                if lane.running.is_none() && ready {
                    self.start_batch(l, now, io);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        // Any earlier timer is stale now; a run that goes on at some speed gets a new one.
        self.tag = self.tag.wrapping_add(1);
        let f = self.factor();
        match self.work.front() {
            Some(Work::Run { .. }) if f > 0.0 => {
                self.due = now + self.left / f;
                io.wake(Secs::new(self.due), self.tag);
            }
            Some(Work::Until { at, .. }) => {
                self.due = self.t0 + at.get();
                io.wake(Secs::new(self.due), self.tag);
            }
            _ => {}
        }
    }

    /// A wait for a time or for a neighbour's send ended at `now`: idle time, and a span
    /// named `name` if it took any.
    fn waited(&mut self, now: f64, name: String) {
        if now > self.began {
            self.idle += Secs::new(now - self.began);
            let (start_ms, end_ms) = (self.began * 1e3, now * 1e3);
            self.spans.push(Span::compute("wait", name, start_ms, end_ms));
        }
    }

    /// The compute stream stops waiting at `now` (a drain done, or hook compute begins): its
    /// wait becomes a span.
    fn close_wait(&mut self, now: f64) {
        if let Some(t) = self.waiting.take()
            && now > t
        {
            self.nccl_wait += Secs::new(now - t);
            self.spans.push(Span::compute("wait", "waiting for NCCL".into(), t * 1e3, now * 1e3));
        }
    }

    /// Gradient `i` is in its bucket at `now`: launch every bucket that is ready, in order.
    fn gradient(&mut self, i: usize, now: f64) {
        let b = self.owner[i];
        self.pending[b] -= 1;
        if self.pending[b] == 0 {
            self.ready[b] = now;
        }
        while self.next < self.pending.len() && self.pending[self.next] == 0 {
            if let Some(mut batch) = self.buckets[self.next].take() {
                if let Some(r) = &mut batch.row {
                    r.ready_ms = self.ready[self.next] * 1e3;
                }
                self.enqueue(batch);
            }
            self.next += 1;
        }
    }

    /// Puts `batch` on the NCCL stream, with its row and spans in the output now (their times
    /// come as it runs).
    fn enqueue(&mut self, mut batch: Batch) {
        let bucket = batch.row.as_ref().map(|r| r.index);
        let row = batch.row.take().map(|r| {
            self.rows.push(r);
            self.rows.len() - 1
        });
        let spans = batch
            .ops
            .iter()
            .map(|op| {
                let mut span = match op {
                    Op::Hold { name, .. } => Span {
                        stream: u8::from(batch.side),
                        ..Span::compute("hook", name.clone(), 0.0, 0.0)
                    },
                    Op::Coll { name, bytes, dtype, .. } => Span {
                        lane: "nccl",
                        bytes: bytes.get(),
                        dtype: dtype.name(),
                        stream: u8::from(batch.side),
                        ..Span::compute("nccl", name.clone(), 0.0, 0.0)
                    },
                };
                span.bucket = bucket;
                self.spans.push(span);
                self.spans.len() - 1
            })
            .collect();
        let l = if batch.side { SIDE } else { MAIN };
        // A second-stream batch waits for the main stream's batches posted before it.
        let after = if batch.side { self.lanes[MAIN].taken } else { 0 };
        self.lanes[l].taken += 1;
        self.lanes[l].fifo.push_back(Queued { batch, row, spans, after });
    }

    /// Starts lane `l`'s next waiting batch's first op at `now`.
    fn start_batch(&mut self, l: usize, now: f64, io: &mut dyn Comms) {
        let Some(Queued { batch, row, spans, .. }) = self.lanes[l].fifo.pop_front() else {
            return;
        };
        if let Some(r) = row {
            self.rows[r].start_ms = now * 1e3;
        }
        self.lanes[l].running = Some(Running {
            batch,
            row,
            spans,
            op: 0,
            started: now,
            handle: 0,
            secs: None,
            channels: 0,
            largest: None,
            collectives: 0,
        });
        self.start_op(l, now, io);
    }

    /// Starts lane `l`'s running batch's current op at `now`.
    fn start_op(&mut self, l: usize, now: f64, io: &mut dyn Comms) {
        let running = &self.lanes[l].running;
        if matches!(running, Some(r) if matches!(r.batch.ops[r.op], Op::Hold { .. })) {
            self.close_wait(now);
        }
        let Some(r) = &mut self.lanes[l].running else { return };
        r.started = now;
        match &r.batch.ops[r.op] {
            Op::Hold { secs, .. } => {
                r.handle = io.hold(Secs::new(now), *secs);
                r.secs = Some(secs.get());
            }
            Op::Coll { group, collective, bytes, dtype, .. } => {
                let l = io.launch(Secs::new(now), *group, *collective, *bytes, *dtype);
                r.collectives += 1;
                let span = &mut self.spans[r.spans[r.op]];
                (span.algo, span.proto, span.channels) = (l.algo, l.proto, l.channels);
                r.channels = l.channels;
                span.links = l.links;
                if r.largest.as_ref().is_none_or(|(w, _, _)| bytes > w) {
                    r.largest = Some((*bytes, l.algo, l.proto));
                }
                r.handle = l.handle;
                // It ends when its completion comes back, on the fabric's clock.
                r.secs = None;
            }
        }
    }

    /// Lane `l`'s running op ended at `now`: account for it and start the next.
    fn op_done(&mut self, l: usize, now: f64, io: &mut dyn Comms) {
        let Some(r) = &mut self.lanes[l].running else { return };
        let d = r.secs.unwrap_or(now - r.started);
        let span = &mut self.spans[r.spans[r.op]];
        span.start_ms = r.started * 1e3;
        span.end_ms = (r.started + d) * 1e3;
        match r.batch.ops[r.op] {
            Op::Hold { .. } => self.hook_compute += Secs::new(d),
            Op::Coll { .. } if r.batch.early => self.comm_before += Secs::new(d),
            Op::Coll { .. } => self.comm += Secs::new(d),
        }
        r.op += 1;
        if r.op < r.batch.ops.len() {
            self.start_op(l, now, io);
            return;
        }
        if let Some(i) = r.row {
            let row = &mut self.rows[i];
            row.end_ms = now * 1e3;
            row.collectives = r.collectives;
            (row.algo, row.proto) = r.largest.take().map_or(("", ""), |l| (l.1, l.2));
        }
        self.lanes[l].running = None;
        self.lanes[l].finished += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Time;
    use crate::workload::ddp::CollTime;
    use crate::workload::step::run_alone;

    #[test]
    fn a_work_item_stays_small() {
        // A 3-D plan candidate's stages build and clone tens of thousands of items: with the
        // batch inline (160 bytes an item; 88 boxed) moving them was 17 % of a
        // 10,368-candidate plan's CPU (benches/data/plan-70b-10k.toml).
        assert!(std::mem::size_of::<Work>() <= 88, "{} bytes", std::mem::size_of::<Work>());
    }

    fn coll(secs: f64) -> impl Fn(Group, Collective, Bytes, DataType) -> CollTime + Sync {
        move |_, _, _, _| CollTime {
            time: Time::from_secs_f64_ceil(secs),
            algo: "RING",
            proto: "SIMPLE",
            channels: 1,
            links: Vec::new(),
        }
    }

    fn all_reduce() -> Op {
        let (collective, bytes, dtype) = (Collective::AllReduce, Bytes::new(1), DataType::Float);
        Op::Coll { group: Group::World, collective, bytes, dtype, name: "ar".into() }
    }

    fn run(secs: f64) -> Work {
        Work::Run { secs: Secs::new(secs), name: Some("run".into()), grad: None }
    }

    /// A batch of `ops` posted to the main NCCL stream, or with `side` the second one,
    /// compute slowing by `slowdown` while it runs.
    fn posted(ops: Vec<Op>, slowdown: f64, side: bool) -> Work {
        let slowdown = Slowdown::Fixed(slowdown);
        Work::Post(Box::new(Batch { ops, slowdown, row: None, early: false, side }))
    }

    #[test]
    fn compute_slows_under_a_collective_and_stops_under_hook_compute() {
        // A 0.5 s collective (compute at 0.8 of full speed), then 1 s of hook compute (compute
        // waits), beside 1 s of compute: 0.4 s of work by 0.5, none until 1.5, 0.6 s more.
        let hold = Op::Hold { secs: Secs::new(1.0), name: "hook".into() };
        let batch = posted(vec![all_reduce(), hold], 0.2, false);
        let mut t = Timeline::new(vec![batch, run(1.0)], Vec::new(), Vec::new());
        run_alone(&mut t, Secs::new(0.0), &coll(0.5));
        assert!((t.end.unwrap().get() - 2.1).abs() < 1e-12, "{:?}", t.end);
        assert!((t.spans[2].end_ms - 2100.0).abs() < 1e-9);
        assert_eq!((t.comm.get(), t.hook_compute.get()), (0.5, 1.0));
    }

    #[test]
    fn a_second_stream_runs_after_the_main_streams_earlier_batches_and_beside_its_later_ones() {
        // The second stream's all-reduces across the replicas, the main one's on the world.
        let post = |side| {
            let mut op = all_reduce();
            if let (true, Op::Coll { group, .. }) = (side, &mut op) {
                *group = Group::Replicate;
            }
            posted(vec![op], 0.0, side)
        };
        // Main A (0-1), then the second stream's S after A (1-2) beside main B (1-2): the drain
        // ends at 2, where one stream would take 3.
        let work = vec![post(false), post(true), post(false), Work::Drain];
        let mut t = Timeline::new(work, Vec::new(), Vec::new());
        run_alone(&mut t, Secs::new(0.0), &coll(1.0));
        assert!((t.end.unwrap().get() - 2.0).abs() < 1e-12, "{:?}", t.end);
        let nccl: Vec<&Span> = t.spans.iter().filter(|s| s.lane == "nccl").collect();
        assert_eq!(nccl.iter().map(|s| s.start_ms).collect::<Vec<_>>(), [0.0, 1000.0, 1000.0]);
        assert_eq!(nccl.iter().map(|s| s.stream).collect::<Vec<_>>(), [0, 1, 0]);
        // A wait counts the main stream's batches: `Wait(2)` is A and B, not S; a second S,
        // queued behind the first, keeps the drain until 3.
        let work = vec![post(false), post(true), post(true), post(false), Work::Wait(2), run(0.5)];
        let mut t = Timeline::new(work, Vec::new(), Vec::new());
        run_alone(&mut t, Secs::new(0.0), &coll(1.0));
        let run_span = t.spans.iter().find(|s| s.lane == "compute").unwrap();
        assert_eq!((run_span.start_ms, run_span.end_ms), (2000.0, 2500.0));
        assert!((t.end.unwrap().get() - 3.0).abs() < 1e-12, "{:?}", t.end);
        // On the same group the two streams need the same links: they take turns (A, B, S),
        // as do two hooks (each needs the whole GPU).
        let same = |side| posted(vec![all_reduce()], 0.0, side);
        let hook =
            |side| posted(vec![Op::Hold { secs: Secs::new(1.0), name: "hook".into() }], 0.0, side);
        for (a, s, b) in
            [(same(false), same(true), same(false)), (hook(false), hook(true), hook(false))]
        {
            let mut t = Timeline::new(vec![a, s, b, Work::Drain], Vec::new(), Vec::new());
            run_alone(&mut t, Secs::new(0.0), &coll(1.0));
            assert!((t.end.unwrap().get() - 3.0).abs() < 1e-12, "{:?}", t.end);
        }
    }

    #[test]
    fn a_layers_own_call_blocks_compute_beside_the_gradients_stream_and_is_counted() {
        // Open, 1 s of compute, a 0.5 s tensor-parallel call, 1 s more, close; a bucket's
        // all-reduce posted first runs beside them on its own stream (compute at 0.8 of full
        // speed while it runs): 0.5 s of it slows the first run to 1.1 s, the call waits 0.5 s
        // whatever the stream does, and the op's span covers the whole.
        let post = posted(vec![all_reduce()], 0.2, false);
        let call = Work::Call {
            group: Group::Tensor,
            collective: Collective::AllReduce,
            bytes: Bytes::new(1),
            dtype: DataType::Half,
        };
        let unnamed = |secs| Work::Run { secs: Secs::new(secs), name: None, grad: None };
        let work = vec![
            post,
            Work::Open,
            unnamed(1.0),
            call,
            unnamed(1.0),
            Work::Mark,
            Work::Close { name: "fwd".into() },
        ];
        let mut t = Timeline::new(work, Vec::new(), Vec::new());
        run_alone(&mut t, Secs::new(0.0), &coll(0.5));
        assert!((t.end.unwrap().get() - 2.6).abs() < 1e-12, "{:?}", t.end);
        assert_eq!((t.call_wait.get(), t.call_wait_at_mark.get(), t.comm.get()), (0.5, 0.5, 0.5));
        let fwd = t.spans.iter().find(|s| s.name == "fwd").unwrap();
        assert!(fwd.start_ms == 0.0 && (fwd.end_ms - 2600.0).abs() < 1e-9, "{fwd:?}");
        assert_eq!(t.spans.iter().filter(|s| s.lane == "compute").count(), 1);
    }

    #[test]
    fn long_steps_end_though_their_clock_is_coarse() {
        // At 10^6 s a float's resolution is far above the 1e-15 s threshold.
        let work = (0..1000).map(|_| run(1e3 + 1e-7)).collect();
        let mut t = Timeline::new(work, Vec::new(), Vec::new());
        run_alone(&mut t, Secs::new(1e6), &coll(0.0));
        assert!((t.end.unwrap().get() - 2e6).abs() < 1e-3);
    }
}
