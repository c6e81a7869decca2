//! The training side's one event loop: [`drive`] runs step timelines ([`Timeline`]) on a
//! [`Fabric`], which posts their collectives, holds and timers and says what happens next.
//! Two fabrics carry the two ways a call takes its time:
//!
//! * [`Cached`]: each collective lasts what a timer of calls timed alone gives it (the cache a
//!   plan fills once per distinct call), nothing else in flight: a plain `simulate` of a step.
//! * The shared network of `[[job]]` scenarios ([`super::jobs`]): each call's flows join the
//!   engine's network and share every link by max-min with the other jobs' calls in flight.
//!
//! Pipeline schedules (`parallel::schedule`) are not actors of this loop yet: a 3-D step's
//! pipeline sends are timed alone and folded into its stages' compute.

mod groups;
mod timer;

pub(crate) use groups::step_groups;
pub(crate) use timer::with_ddp;
pub use timer::{CollCache, GroupKey};

use std::collections::BTreeMap;

use super::DataType;
use super::parallel::{Group, GroupTimer};
use super::timeline::{Comms, Event, Launched, Timeline};
use crate::collective::Collective;
use crate::comm::CommError;
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

/// Where timelines run: the comms each actor (a timeline, by index) posts through, and the
/// events that come back.
pub(crate) trait Fabric {
    /// Runs `f` with actor `j`'s comms.
    fn with(&mut self, j: usize, f: &mut dyn FnMut(&mut dyn Comms));
    /// The next event due, earliest first: its time (s), its actor and what it is. `None` once
    /// nothing is pending.
    fn next(&mut self) -> Option<(f64, usize, Event)>;
}

/// Runs `lines` (already started) on `fabric` until nothing is pending or `settle` says to
/// stop. `settle` runs before each event: it may record a timeline that ended and start
/// another in its place.
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
    }
}

/// A fabric of one timeline whose collectives take the times `coll` gives them (calls timed
/// alone), on a clock of seconds: pending completions and timers, earliest first, then in the
/// order they were set.
pub(crate) struct Cached<'c> {
    due: BTreeMap<(u64, u64), (f64, Event)>,
    seq: u64,
    coll: &'c GroupTimer<'c>,
}

impl<'c> Cached<'c> {
    /// A fabric timing collectives with `coll`.
    pub(crate) fn new(coll: &'c GroupTimer<'c>) -> Cached<'c> {
        Cached { due: BTreeMap::new(), seq: 0, coll }
    }

    fn push(&mut self, at: f64, e: Event) -> u32 {
        // Non-negative floats order as their bits.
        self.due.insert((at.max(0.0).to_bits(), self.seq), (at, e));
        self.seq += 1;
        (self.seq - 1) as u32
    }
}

impl Comms for Cached<'_> {
    fn launch(
        &mut self,
        now: f64,
        g: Group,
        c: Collective,
        bytes: u64,
        dtype: DataType,
    ) -> Launched {
        let t = (self.coll)(g, c, bytes, dtype);
        let handle = self.seq as u32;
        self.push(now + t.secs, Event::Done(handle));
        let (algo, proto, channels, links) = (t.algo, t.proto, t.channels, t.links);
        Launched { handle, algo, proto, channels, links, secs: Some(t.secs) }
    }

    fn hold(&mut self, now: f64, secs: f64) -> u32 {
        let handle = self.seq as u32;
        self.push(now + secs, Event::Done(handle))
    }

    fn wake(&mut self, at: f64, tag: u32) {
        self.push(at, Event::Wake(tag));
    }
}

impl Fabric for Cached<'_> {
    fn with(&mut self, _j: usize, f: &mut dyn FnMut(&mut dyn Comms)) {
        f(self)
    }

    fn next(&mut self) -> Option<(f64, usize, Event)> {
        self.due.pop_first().map(|(_, (at, e))| (at, 0, e))
    }
}

/// Runs `timeline` from `t0` with each collective taking the time `coll` gives it, nothing
/// else on the network.
pub(crate) fn run_alone(timeline: &mut Timeline, t0: f64, coll: &GroupTimer<'_>) {
    let mut fabric = Cached::new(coll);
    fabric.with(0, &mut |io| timeline.start(t0, io));
    drive(&mut fabric, std::slice::from_mut(timeline), |_, _| false);
}
