//! The discrete-event engine: a simulated clock and a queue of events ordered by
//! (time, sequence number).
//!
//! This module knows nothing of GPUs, links or collectives: an event is any value the caller
//! chooses. Two events at the same time come out in the order they were scheduled, so a
//! simulation driven by this queue is deterministic by construction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::units::Time;

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
}
