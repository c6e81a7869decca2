//! The discrete-event engine: a simulated clock, a queue of events ordered by (time, sequence
//! number), and the flow-level network, owned together by one [`Simulation`].
//!
//! This module knows nothing of GPUs or collectives: a token is any value the caller chooses,
//! carried by a timed event or a flow and handed back when it is due. Two events at the same time
//! come out in the order they were scheduled, and flows finishing at one instant in the order
//! they started, so a simulation driven by this loop is deterministic by construction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::net::{Link, LinkId, Network, PathId};
use crate::units::{Bytes, Time};

/// One scheduled entry; ordered by time, then by the sequence number of its scheduling.
#[derive(Debug)]
struct Entry<E> {
    at: Time,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A deterministic event queue with a clock that only moves forward.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    next_seq: u64,
    now: Time,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0, now: Time::ZERO, popped: 0 }
    }

    /// The current simulated time: the time of the last event popped.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `event` at `at`; a time in the past is treated as now.
    pub fn schedule(&mut self, at: Time, event: E) {
        let at = at.max(self.now);
        self.heap.push(Reverse(Entry { at, seq: self.next_seq, event }));
        self.next_seq += 1;
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// Removes the next event and advances the clock to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let Reverse(e) = self.heap.pop()?;
        self.now = e.at;
        self.popped += 1;
        Some((e.at, e.event))
    }

    /// Advances the clock without an event (used when another source, such as a flow
    /// completing in the network, is the next thing to happen).
    pub fn advance_to(&mut self, t: Time) {
        if t > self.now {
            self.now = t;
        }
    }

    /// How many events have been popped so far.
    pub fn events_processed(&self) -> u64 {
        self.popped
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// What a simulation that runs timed events beside network flows does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Flows finish at this time. When they tie with events, flows go first: a fixed order,
    /// so runs are deterministic.
    Flows(Time),
    /// Events are due at this time.
    Events(Time),
    /// Nothing is left.
    Done,
}

/// Picks between the event queue's next time and the network's next flow completion.
pub fn next(events: Option<Time>, flows: Option<Time>) -> Next {
    match (events, flows) {
        (None, None) => Next::Done,
        (Some(e), Some(f)) if f > e => Next::Events(e),
        (_, Some(f)) => Next::Flows(f),
        (Some(e), None) => Next::Events(e),
    }
}

/// What happened next in a [`Simulation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening<T> {
    /// Transfers finished at this time: network flows in the order they started, then
    /// fixed-rate transfers in the order they started.
    Flows(Time, Vec<T>),
    /// A timed event is due.
    Event(Time, T),
}

/// The one event loop: a clock, timed events, network flows sharing links by max-min fairness,
/// and fixed-rate transfers (a flow whose rate the caller already knows, as aggregated models
/// compute it from the steady state). Tokens of type `T` say whom a completion belongs to.
///
/// Order of what happens at one instant: flows finishing then go before events due then (a
/// fixed rule, so runs are deterministic); once an instant's events have begun, every event due
/// at that instant is handed out before the network is consulted again, so rates are re-solved
/// once per instant rather than once per event.
#[derive(Debug)]
pub struct Simulation<T> {
    queue: EventQueue<T>,
    net: Network<T>,
    fixed: BinaryHeap<Reverse<Entry<T>>>,
    fixed_seq: u64,
    /// The instant whose events are being handed out.
    batch: Option<Time>,
    handled: u64,
}

impl<T: Copy> Simulation<T> {
    /// A simulation at time zero over `links`, with nothing scheduled.
    pub fn new(links: &[Link]) -> Self {
        Simulation {
            queue: EventQueue::new(),
            net: Network::new(links),
            fixed: BinaryHeap::new(),
            fixed_seq: 0,
            batch: None,
            handled: 0,
        }
    }

    /// The current simulated time.
    pub fn now(&self) -> Time {
        self.queue.now()
    }

    /// Registers a path (links in order) for flows; its latency is the sum of its links'.
    pub fn add_path(&mut self, links: &[LinkId]) -> PathId {
        self.net.add_path(links)
    }

    /// Registers a path whose flows stand for several copies, `weights[k]` of them on
    /// `links[k]` (a symmetry-reduced simulation), with latency `latency`.
    pub fn add_weighted_path(
        &mut self,
        links: &[LinkId],
        weights: &[f64],
        latency: Time,
    ) -> PathId {
        self.net.add_weighted_path(links, weights, latency)
    }

    /// Starts a transfer of `bytes` now on `path`, uncapped; `token` comes back when it ends.
    pub fn start_flow(&mut self, path: PathId, bytes: Bytes, token: T) {
        self.start_capped_flow(path, bytes, f64::INFINITY, token);
    }

    /// Starts a transfer of `bytes` now on `path` that never runs faster than `cap` bytes/s
    /// (infinity for none); `token` comes back when it ends.
    pub fn start_capped_flow(&mut self, path: PathId, bytes: Bytes, cap: f64, token: T) {
        let now = self.now();
        self.net.start_flow(now, path, bytes, cap, 1.0, token);
    }

    /// Starts background traffic on `path` that never ends: `weight` identical flows, each
    /// capped at `cap` bytes/s (infinity for none).
    pub fn start_persistent(&mut self, path: PathId, cap: f64, weight: f64, token: T) {
        let now = self.now();
        self.net.start_persistent(now, path, cap, weight, token);
    }

    /// Starts a transfer that takes `duration` whatever else runs; it completes among the
    /// flows.
    pub fn start_fixed(&mut self, duration: Time, token: T) {
        let at = self.now().saturating_add(duration);
        self.fixed.push(Reverse(Entry { at, seq: self.fixed_seq, event: token }));
        self.fixed_seq += 1;
    }

    /// Schedules `token` at `at` (a time in the past counts as now).
    pub fn schedule(&mut self, at: Time, token: T) {
        self.queue.schedule(at, token);
    }

    /// Takes `amount` bytes/s off link `l`'s capacity for the rest of the run.
    pub fn reserve(&mut self, l: LinkId, amount: f64) {
        self.net.reserve(l, amount);
    }

    /// Whether any path has been registered for flows.
    pub fn has_paths(&self) -> bool {
        self.net.has_paths()
    }

    /// Flow completions and events handed out so far.
    pub fn handled(&self) -> u64 {
        self.handled
    }

    /// The network, for checks (rates, capacities, byte accounting).
    pub fn network(&mut self) -> &mut Network<T> {
        &mut self.net
    }

    /// Advances the clock to the next thing that happens and returns it; `None` when nothing
    /// is left.
    pub fn step(&mut self) -> Option<Happening<T>> {
        if let Some(t) = self.batch {
            if self.queue.peek_time() == Some(t) {
                return self.pop_event();
            }
            self.batch = None;
        }
        let fixed = self.fixed.peek().map(|Reverse(e)| e.at);
        let flows = match (self.net.next_completion(), fixed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next(self.queue.peek_time(), flows) {
            Next::Done => None,
            Next::Flows(t) => {
                self.queue.advance_to(t);
                let mut done = self.net.complete_until(t);
                while let Some(Reverse(e)) = self.fixed.peek() {
                    if e.at > t {
                        break;
                    }
                    if let Some(Reverse(e)) = self.fixed.pop() {
                        done.push(e.event);
                    }
                }
                self.handled += done.len() as u64;
                Some(Happening::Flows(t, done))
            }
            Next::Events(t) => {
                self.batch = Some(t);
                self.pop_event()
            }
        }
    }

    fn pop_event(&mut self) -> Option<Happening<T>> {
        let (t, e) = self.queue.pop()?;
        self.handled += 1;
        Some(Happening::Event(t, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_time_then_by_scheduling_order() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_ns(5), "b");
        q.schedule(Time::from_ns(1), "a");
        q.schedule(Time::from_ns(5), "c");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert_eq!(q.now(), Time::from_ns(5));
        assert_eq!(q.events_processed(), 3);
    }

    #[test]
    fn past_events_run_now() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_ns(10), 1);
        q.pop();
        q.schedule(Time::from_ns(3), 2);
        assert_eq!(q.pop(), Some((Time::from_ns(10), 2)));
    }

    #[test]
    fn flows_go_first_on_a_tie() {
        let t = |ns: u64| Time::from_ps(ns * 1000);
        assert_eq!(next(None, None), Next::Done);
        assert_eq!(next(Some(t(2)), Some(t(2))), Next::Flows(t(2)));
        assert_eq!(next(Some(t(1)), Some(t(2))), Next::Events(t(1)));
        assert_eq!(next(Some(t(3)), Some(t(2))), Next::Flows(t(2)));
        assert_eq!(next(Some(t(3)), None), Next::Events(t(3)));
        assert_eq!(next(None, Some(t(3))), Next::Flows(t(3)));
    }

    #[test]
    fn a_simulation_interleaves_flows_fixed_transfers_and_events() {
        use crate::units::Bandwidth;
        let links = [Link {
            capacity: Bandwidth::from_gbyte_per_s_f64(1.0),
            latency: Time::ZERO,
            class: "x",
        }];
        let mut sim: Simulation<&str> = Simulation::new(&links);
        let p = sim.add_path(&[LinkId(0)]);
        sim.start_flow(p, Bytes::new(1_000), "flow");
        sim.start_fixed(Time::from_ns(1_000), "fixed");
        sim.schedule(Time::from_ns(1_000), "event");
        sim.schedule(Time::from_ns(500), "early");
        // Background traffic halves the flow's rate and never ends.
        sim.start_persistent(p, f64::INFINITY, 1.0, "background");
        let mut seen = Vec::new();
        while let Some(h) = sim.step() {
            seen.push(h);
        }
        assert_eq!(
            seen,
            vec![
                Happening::Event(Time::from_ns(500), "early"),
                Happening::Flows(Time::from_ns(1_000), vec!["fixed"]),
                Happening::Event(Time::from_ns(1_000), "event"),
                Happening::Flows(Time::from_ns(2_000), vec!["flow"]),
            ]
        );
        assert_eq!(sim.handled(), 4);
    }
}
