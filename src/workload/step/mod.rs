//! The training side's one event loop: [`drive`] runs step timelines ([`Timeline`]) on a
//! [`Fabric`], which posts their collectives, holds and timers and says what happens next.
//! Two fabrics carry the two ways a call takes its time:
//!
//! * [`Cached`]: each collective lasts what a timer of calls timed alone gives it (the cache a
//!   plan fills once per distinct call): a plain `simulate` of a step.
//! * The engine's network ([`super::jobs`]: `[[job]]` scenarios, and `simulate --comms
//!   shared`): under [`Policy::Shared`] each call's flows join it and share every link by
//!   max-min with the calls in flight (the step's own, other jobs', the background); under
//!   [`Policy::Cached`] each call lasts what it takes alone there, with its group's copies.
//!
//! Both keep the engine's clock of picoseconds, and a call in its steady form alone in the
//! network ends at its time alone to the picosecond, in the order it was posted: a step alone
//! on the network, or with every call cached, is the step of a plain `simulate` to the bit.
//! Not where the two model a call differently: a group whose sibling copies share its links
//! (the network posts the copies, the timer shares the links out), background traffic (flows
//! that never end in the network, capacity set aside for the timer) and `--mode detailed` in
//! the network (calls run in detail, without the profile's size-band correction).
//!
//! A 3-D step's pipeline stages are actors of the same loop: a stage's op waits for what the
//! stage beside it sends ([`Work::Recv`](super::timeline::Work)), and its sends are calls on
//! the fabric like any other, so on a shared network they meet the data-parallel traffic
//! they cross. Its layers' tensor- and expert-parallel calls are calls too
//! ([`Work::Call`](super::timeline::Work), each stage's on its own groups, the compute
//! stream waiting for each), but for those of a `[[job]]` in `--mode detailed`, which are
//! folded into compute at their time alone.

mod groups;
mod timer;

pub(crate) use groups::{describe as describe_groups, step_groups};
pub(crate) use timer::with_ddp;
pub use timer::{CollCache, GroupKey};

use std::collections::BTreeMap;

use super::DataType;
use super::parallel::{Group, GroupTimer, on_stage};
use super::timeline::{Comms, Event, Launched, Timeline};
use crate::collective::Collective;
use crate::comm::CommError;
use crate::units::{Bytes, Secs, Time};
use crate::workload::sweep::SweepError;

/// Why a training step cannot be set up on its cluster: one line each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// A reason about the run as a whole (its kind, its GPU's library entry, its process
    /// groups): the message is complete.
    #[error("{0}")]
    Step(String),
    /// A field of the workload cannot run as given: the message names the field, not the file.
    #[error("{0}")]
    Field(String),
    /// A process group's communicator cannot be built.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The gradients' collective is one the NCCL variables rule out.
    #[error(transparent)]
    Sweep(#[from] SweepError),
}

/// How a step's collectives take their time on a shared network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Each call's flows join the network when it is posted and share every link by max-min
    /// with whatever else is in flight: the step's own other calls (a pipeline's sends, other
    /// groups' collectives), other jobs' and the background.
    #[default]
    Shared,
    /// Each call takes the time it takes alone (with its group's copies and the background):
    /// faster to run, and the same as `Shared` wherever nothing else is in flight.
    Cached,
}

/// Where timelines run: the comms each actor (a timeline, by index) posts through, and the
/// events that come back.
pub(crate) trait Fabric {
    /// Runs `f` with actor `j`'s comms.
    fn with(&mut self, j: usize, f: &mut dyn FnMut(&mut dyn Comms));
    /// The next event due, earliest first: its time (s), its actor and what it is. `None` once
    /// nothing is pending.
    fn next(&mut self) -> Option<(Secs, usize, Event)>;
}

/// Runs `lines` (already started) on `fabric` until nothing is pending or `settle` says to
/// stop. `settle` runs before each event: it may record a timeline that ended and start
/// another in its place. What a pipeline stage sends reaches the stage it is for as it
/// arrives.
pub(crate) fn drive<F: Fabric>(
    fabric: &mut F,
    lines: &mut [Timeline],
    mut settle: impl FnMut(&mut F, &mut [Timeline]) -> bool,
) {
    loop {
        if settle(fabric, lines) {
            break;
        }
        let Some((t, j, event)) = fabric.next() else { break };
        let line = &mut lines[j];
        fabric.with(j, &mut |io| line.on(t, event, io));
        deliver(fabric, lines, j, t);
    }
}

/// Hands what actor `j`'s sends brought at `t` to the stages they are for (and theirs, if
/// that sets them going and something arrives at once).
fn deliver<F: Fabric>(fabric: &mut F, lines: &mut [Timeline], j: usize, t: Secs) {
    let mut from = vec![j];
    while let Some(j) = from.pop() {
        let peers = lines[j].peers;
        for (to, op) in lines[j].take_sent() {
            let k = peers + to;
            if let Some(line) = lines.get_mut(k) {
                fabric.with(k, &mut |io| line.deliver(t, op, io));
                from.push(k);
            }
        }
    }
}

/// A fabric of timelines whose collectives take the times `coll` gives them (calls timed
/// alone), on the engine's clock of picoseconds, as the shared network keeps it: a call runs
/// from the time of the event that set it going, a hold or a timer is due at its end rounded
/// up. Pending completions and timers come earliest first, then in the order they were set.
/// With `staged`, actor `s` is pipeline stage `s` of a 3-D step, whose data-parallel
/// collectives run on its stage's groups ([`on_stage`]).
pub(crate) struct Cached<'c> {
    due: BTreeMap<(Time, u64), (usize, Event)>,
    seq: u64,
    coll: &'c GroupTimer<'c>,
    staged: bool,
    actor: usize,
    /// The time of the event being handled.
    now: Time,
}

impl<'c> Cached<'c> {
    /// A fabric of one timeline timing collectives with `coll`, its clock at `t0`.
    pub(crate) fn new(coll: &'c GroupTimer<'c>, t0: Secs) -> Cached<'c> {
        Cached { due: BTreeMap::new(), seq: 0, coll, staged: false, actor: 0, now: t0.ceil() }
    }

    /// A fabric of a pipeline's stages, one actor each, timing collectives with `coll`.
    pub(crate) fn staged(coll: &'c GroupTimer<'c>) -> Cached<'c> {
        Cached { staged: true, ..Cached::new(coll, Secs::ZERO) }
    }

    fn push(&mut self, at: Time, e: Event) -> u32 {
        // What is set for a time already past runs now, as on the engine's clock.
        self.due.insert((at.max(self.now), self.seq), (self.actor, e));
        self.seq += 1;
        (self.seq - 1) as u32
    }
}

impl Comms for Cached<'_> {
    fn launch(
        &mut self,
        _now: Secs,
        g: Group,
        c: Collective,
        bytes: Bytes,
        dtype: DataType,
    ) -> Launched {
        let g = if self.staged { on_stage(g, self.actor) } else { g };
        // Alone, a one-way send takes what the pair's sendrecv takes (each direction has
        // links of its own): the timer knows nccl-tests' calls.
        let c = if let Collective::Send { .. } = c { Collective::SendRecv } else { c };
        let t = (self.coll)(g, c, bytes, dtype);
        let handle = self.seq as u32;
        self.push(self.now.saturating_add(t.time), Event::Done(handle));
        let (algo, proto, channels, links) = (t.algo, t.proto, t.channels, t.links);
        Launched { handle, algo, proto, channels, links }
    }

    fn hold(&mut self, now: Secs, d: Secs) -> u32 {
        // Due at the timeline's own end of it, rounded up: holds one after another do not
        // gather the clock's rounding.
        self.push((now + d).ceil(), Event::Done(self.seq as u32))
    }

    fn wake(&mut self, at: Secs, tag: u32) {
        self.push(at.ceil(), Event::Wake(tag));
    }
}

impl Fabric for Cached<'_> {
    fn with(&mut self, j: usize, f: &mut dyn FnMut(&mut dyn Comms)) {
        self.actor = j;
        f(self)
    }

    fn next(&mut self) -> Option<(Secs, usize, Event)> {
        let ((at, _), (j, e)) = self.due.pop_first()?;
        self.now = at;
        Some((Secs::of(at), j, e))
    }
}

/// Runs `timeline` from `t0` with each collective taking the time `coll` gives it, nothing
/// else on the network.
pub(crate) fn run_alone(timeline: &mut Timeline, t0: Secs, coll: &GroupTimer<'_>) {
    let mut fabric = Cached::new(coll, t0);
    fabric.with(0, &mut |io| timeline.start(t0, io));
    drive(&mut fabric, std::slice::from_mut(timeline), |_, _| false);
}

/// Runs a pipeline's stages (`lines[s]` stage `s`) together from time zero, each collective
/// taking the time `coll` gives it on the stage's groups, each stage's sends reaching the
/// stages beside it as they arrive.
pub(crate) fn run_stages(lines: &mut [Timeline], coll: &GroupTimer<'_>) {
    let mut fabric = Cached::staged(coll);
    for (s, line) in lines.iter_mut().enumerate() {
        line.peers = 0;
        fabric.with(s, &mut |io| line.start(Secs::ZERO, io));
    }
    for s in 0..lines.len() {
        deliver(&mut fabric, lines, s, Secs::ZERO);
    }
    drive(&mut fabric, lines, |_, _| false);
}
