//! The flow-level network: directed links with a capacity and a latency, flows on paths, and
//! rates shared by max-min fairness.
//!
//! The network knows links and flows, not GPUs or collectives. [`solver`] is the pure rate
//! allocation; [`Network`] keeps the set of active flows, recomputes their rates when a flow
//! starts or ends, and tells its driver when the next flow will finish.

pub mod solver;

use crate::units::{Bandwidth, Bytes, Time};

/// Index of a directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u32);

/// Index of a path registered with a [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u32);

/// A directed link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Capacity.
    pub capacity: Bandwidth,
    /// One-way latency added to every transfer that crosses it.
    pub latency: Time,
    /// A short class name for reports ("nvlink", "pcie", "nic", …).
    pub class: &'static str,
}

#[derive(Debug, Clone)]
struct ActiveFlow<T> {
    path: PathId,
    /// Bytes left; infinite for a persistent (background) flow.
    remaining: f64,
    /// Bytes at the start.
    bytes: f64,
    rate: f64,
    cap: f64,
    weight: f64,
    finish: Time,
    token: T,
}

impl<T> ActiveFlow<T> {
    fn new(path: PathId, bytes: f64, cap: f64, weight: f64, token: T) -> Self {
        ActiveFlow {
            path,
            remaining: bytes,
            bytes,
            rate: 0.0,
            cap,
            weight,
            finish: Time::MAX,
            token,
        }
    }
}

/// The set of active flows on a fixed set of links; each flow carries a token of type `T` that
/// comes back when it finishes.
#[derive(Debug, Clone)]
pub struct Network<T> {
    capacity: Vec<f64>,
    latency: Vec<Time>,
    paths: Vec<Vec<u32>>,
    /// Per path: how many copies of a flow on it cross each of its links (symmetry-reduced
    /// simulations), or `None` for one on every link.
    path_weights: Vec<Option<Vec<f64>>>,
    path_latency: Vec<Time>,
    flows: Vec<ActiveFlow<T>>,
    /// Flows that never finish (background traffic): solved with the others, never scanned
    /// for completions.
    persistent: Vec<ActiveFlow<T>>,
    last_update: Time,
    dirty: bool,
    solves: u64,
    /// Links visited by all solves so far (each solve visits every active flow's links).
    work: u64,
    /// Bytes (× weight) moved by finishing flows at their rates so far.
    moved: f64,
    /// Bytes (× weight) of the flows that have finished.
    delivered: f64,
    /// The largest share of its bytes a flow still had when it was taken as finished.
    early: f64,
}

impl<T: Copy> Network<T> {
    /// A network over `links`, with no flows.
    pub fn new(links: &[Link]) -> Self {
        Network {
            capacity: links.iter().map(|l| l.capacity.bytes_per_sec()).collect(),
            latency: links.iter().map(|l| l.latency).collect(),
            paths: Vec::new(),
            path_weights: Vec::new(),
            path_latency: Vec::new(),
            flows: Vec::new(),
            persistent: Vec::new(),
            last_update: Time::ZERO,
            dirty: false,
            solves: 0,
            work: 0,
            moved: 0.0,
            delivered: 0.0,
            early: 0.0,
        }
    }

    /// Registers a path (a sequence of links) and returns its id; `latency` is the sum of its
    /// links' latencies, which the caller adds after a transfer finishes.
    pub fn add_path(&mut self, links: &[LinkId]) -> PathId {
        let latency = links.iter().fold(Time::ZERO, |t, l| t + self.latency[l.0 as usize]);
        self.paths.push(links.iter().map(|l| l.0).collect());
        self.path_weights.push(None);
        self.path_latency.push(latency);
        PathId(self.paths.len() as u32 - 1)
    }

    /// Registers a path whose flows stand for several copies, `weights[k]` of them crossing
    /// `links[k]` (a symmetry-reduced simulation: one flow for all its images, which meet
    /// other flows' images on some links and not on others). Its latency is `latency`: the
    /// links include ones the flow itself does not cross.
    pub fn add_weighted_path(
        &mut self,
        links: &[LinkId],
        weights: &[f64],
        latency: Time,
    ) -> PathId {
        debug_assert_eq!(links.len(), weights.len());
        self.paths.push(links.iter().map(|l| l.0).collect());
        self.path_weights.push(Some(weights.to_vec()));
        self.path_latency.push(latency);
        PathId(self.paths.len() as u32 - 1)
    }

    /// The summed link latency of a registered path.
    pub fn path_latency(&self, p: PathId) -> Time {
        self.path_latency[p.0 as usize]
    }

    /// Starts a transfer of `bytes` at `now` on `path`, capped at `cap` (bytes/s, or infinity),
    /// standing for `weight` identical transfers. `token` comes back when it finishes.
    pub fn start_flow(
        &mut self,
        now: Time,
        path: PathId,
        bytes: Bytes,
        cap: f64,
        weight: f64,
        token: T,
    ) {
        self.push(now, path, bytes.as_f64(), cap, weight, token);
    }

    /// Starts a flow that never finishes (background traffic) on `path`, capped at `cap`
    /// (bytes/s, or infinity), standing for `weight` identical flows. It takes its max-min share
    /// of every link it crosses for as long as the network runs.
    pub fn start_persistent(&mut self, now: Time, path: PathId, cap: f64, weight: f64, token: T) {
        self.advance_rates(now);
        self.persistent.push(ActiveFlow::new(path, f64::INFINITY, cap, weight, token));
        self.dirty = true;
    }

    /// Takes `amount` bytes/s off link `l`'s capacity for good (traffic of others that holds
    /// it); a link keeps at least a millionth of its capacity.
    pub fn reserve(&mut self, l: LinkId, amount: f64) {
        let c = &mut self.capacity[l.0 as usize];
        *c = (*c - amount).max(*c * 1e-6);
        self.dirty = true;
    }

    /// Sets link `l`'s capacity (bytes/s): a link of which others' traffic holds part.
    pub fn set_capacity(&mut self, l: LinkId, capacity: f64) {
        self.capacity[l.0 as usize] = capacity;
        self.dirty = true;
    }

    /// Whether any path has been registered (a simulation whose calls all run on fixed rates
    /// never needs the network).
    pub fn has_paths(&self) -> bool {
        !self.paths.is_empty()
    }

    fn push(&mut self, now: Time, path: PathId, remaining: f64, cap: f64, weight: f64, token: T) {
        self.advance_rates(now);
        self.flows.push(ActiveFlow::new(path, remaining, cap, weight, token));
        self.dirty = true;
    }

    /// Number of active flows.
    pub fn active_flows(&self) -> usize {
        self.flows.len()
    }

    /// How many times rates were recomputed.
    pub fn solves(&self) -> u64 {
        self.solves
    }

    /// Links visited by the rate solves so far: the network's share of a run's cost.
    pub fn work(&self) -> u64 {
        self.work
    }

    /// The time at which the next active flow finishes, recomputing rates first if flows
    /// started or ended since the last call. Persistent flows never finish, and neither does a
    /// flow that gets no bandwidth at all (its finish is [`Time::MAX`]).
    pub fn next_completion(&mut self) -> Option<Time> {
        if self.dirty {
            self.resolve();
        }
        self.flows.iter().map(|f| f.finish).filter(|&t| t < Time::MAX).min()
    }

    /// The load on every link (bytes/s): each active flow's rate times the copies of it that
    /// cross the link, recomputing rates first if needed. For checks that no link is over
    /// capacity.
    pub fn link_loads(&mut self) -> Vec<f64> {
        if self.dirty {
            self.resolve();
        }
        let mut load = vec![0.0f64; self.capacity.len()];
        for f in self.flows.iter().chain(&self.persistent) {
            let weights = self.path_weights[f.path.0 as usize].as_deref();
            for (k, &l) in self.paths[f.path.0 as usize].iter().enumerate() {
                load[l as usize] += f.rate * f.weight * weights.map_or(1.0, |w| w[k]);
            }
        }
        load
    }

    /// Byte accounting of the finishing flows: (bytes moved at their rates, bytes of the flows
    /// that finished plus what the active ones have moved, the largest fraction of its bytes a
    /// flow had left when it finished). Conservation: the first two agree and the last is ~0.
    pub fn accounting(&self) -> (f64, f64, f64) {
        let in_flight: f64 = self.flows.iter().map(|f| (f.bytes - f.remaining) * f.weight).sum();
        (self.moved, self.delivered + in_flight, self.early)
    }

    /// Link capacities (bytes/s), indexed by [`LinkId`].
    pub fn capacities(&self) -> &[f64] {
        &self.capacity
    }

    /// Moves the network's clock to `t`, which must not be past [`Network::next_completion`],
    /// and returns the tokens of the flows that finish at `t`, in the order they started.
    pub fn complete_until(&mut self, t: Time) -> Vec<T> {
        if self.dirty {
            self.resolve();
        }
        // One pass: a finishing flow moves its last bytes and leaves; the others are drained
        // to `t` only if something finished (the clock of rates moves with completions).
        let dt = (t.max(self.last_update) - self.last_update).as_secs_f64();
        let mut done = Vec::new();
        let (mut delivered, mut moved, mut early) = (0.0, 0.0, self.early);
        self.flows.retain_mut(|f| {
            if f.finish > t {
                return true;
            }
            let step = (f.rate * dt).min(f.remaining);
            moved += step * f.weight;
            delivered += f.bytes * f.weight;
            if f.bytes > 0.0 {
                early = early.max((f.remaining - step) / f.bytes);
            }
            done.push(f.token);
            false
        });
        if !done.is_empty() {
            self.moved += moved;
            self.delivered += delivered;
            self.early = early;
            self.advance_rates(t);
            self.dirty = true;
        }
        done
    }

    /// Drains bytes from every flow at its current rate up to `now`.
    fn advance_rates(&mut self, now: Time) {
        if now <= self.last_update {
            return;
        }
        let dt = (now - self.last_update).as_secs_f64();
        let mut moved = 0.0;
        for f in &mut self.flows {
            let step = (f.rate * dt).min(f.remaining);
            moved += step * f.weight;
            f.remaining -= step;
        }
        self.moved += moved;
        self.last_update = now;
    }

    fn resolve(&mut self) {
        let specs: Vec<solver::FlowSpec<'_>> = self
            .flows
            .iter()
            .chain(&self.persistent)
            .map(|f| solver::FlowSpec {
                path: &self.paths[f.path.0 as usize],
                cap: f.cap,
                weight: f.weight,
                link_weights: self.path_weights[f.path.0 as usize].as_deref(),
            })
            .collect();
        let rates = solver::max_min_rates(&self.capacity, &specs);
        self.solves += 1;
        self.work += specs.iter().map(|f| f.path.len() as u64).sum::<u64>();
        let now = self.last_update;
        for (f, r) in self.flows.iter_mut().chain(self.persistent.iter_mut()).zip(rates) {
            f.rate = r;
            f.finish = if f.remaining.is_infinite() {
                Time::MAX
            } else if f.remaining <= 0.0 || r.is_infinite() {
                now
            } else {
                // A flow that moves, however slowly, finishes: at worst one picosecond before
                // Time::MAX (which means "never"), where reports refuse the time as too long
                // instead of the run ending without it.
                now.saturating_add(Time::from_secs_f64_ceil(f.remaining / r))
                    .min(Time::from_ps(u64::MAX - 1))
            };
        }
        self.dirty = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_flows_share_then_one_speeds_up() {
        let links = [Link {
            capacity: Bandwidth::from_gbyte_per_s_f64(1.0),
            latency: Time::ZERO,
            class: "x",
        }];
        let mut net: Network<u64> = Network::new(&links);
        let p = net.add_path(&[LinkId(0)]);
        net.start_flow(Time::ZERO, p, Bytes::new(1_000), f64::INFINITY, 1.0, 1);
        net.start_flow(Time::ZERO, p, Bytes::new(3_000), f64::INFINITY, 1.0, 2);
        // Both at 0.5 GB/s: the first ends after 2 us, the second has 2000 B left at 1 GB/s.
        let t1 = net.next_completion().unwrap();
        assert_eq!(t1, Time::from_ns(2_000));
        assert_eq!(net.complete_until(t1), vec![1]);
        let t2 = net.next_completion().unwrap();
        assert_eq!(t2, Time::from_ns(4_000));
        assert_eq!(net.complete_until(t2), vec![2]);
        assert_eq!(net.next_completion(), None);
    }
}
