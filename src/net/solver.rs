//! Max-min fair rate allocation by progressive filling, as a pure function.
//!
//! Input: link capacities (bytes/s) and flows, each with a path (link indices), an optional rate
//! cap (bytes/s) and a weight (how many identical flows it stands for). Output: the rate of one
//! unit of each flow. All unfrozen flows rise together; the first link to saturate, or the first
//! cap to be reached, freezes the flows it limits; repeat. This is SimGrid's `lmm` without its
//! priorities, and the textbook definition of max-min fairness (Bertsekas & Gallager §6.5.2).
//!
//! [`max_min_rates`] keeps the link fair shares in a lazily updated heap, so the cost is about
//! O(Σ path lengths · log links). [`max_min_rates_reference`] is the slow, obviously correct
//! version it is tested against.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One flow as the solver sees it.
#[derive(Debug, Clone, Copy)]
pub struct FlowSpec<'a> {
    /// Indices into the capacity slice of the links the flow crosses.
    pub path: &'a [u32],
    /// Upper bound on the flow's rate in bytes/s; `f64::INFINITY` for none.
    pub cap: f64,
    /// How many identical flows this entry stands for (≥ 1 in practice; must be > 0).
    pub weight: f64,
    /// Per link of `path`, a multiplier of `weight` on that link: how many copies of the flow
    /// cross it (a symmetry-reduced simulation, where one flow stands for its images and the
    /// images of different flows meet on different links). `None`: 1 on every link.
    pub link_weights: Option<&'a [f64]>,
}

impl FlowSpec<'_> {
    /// The weight the flow puts on the `k`-th link of its path.
    fn on_link(&self, k: usize) -> f64 {
        self.link_weights.map_or(self.weight, |w| self.weight * w[k])
    }
}

/// Relative tolerance under which two fair-share levels count as equal.
const REL_EPS: f64 = 1e-12;

/// A link's fair share in the heap, as one integer ordered as (level, link, version): the
/// level's bits (a non-negative float orders as its bits), the link, and the version that
/// tells a stale entry. The heap pops the smallest share first; ties by link index for
/// determinism. (An integer compares faster than a float and a tie-break.)
fn share(level: f64, link: u32, version: u32) -> Reverse<u128> {
    // +0.0 for a -0.0, which would order as the largest.
    let bits = (level + 0.0).to_bits() as u128;
    Reverse(bits << 64 | (link as u128) << 32 | version as u128)
}

/// The level, link and version of a heap entry.
fn unshare(s: Reverse<u128>) -> (f64, u32, u32) {
    let k = s.0;
    (f64::from_bits((k >> 64) as u64), (k >> 32) as u32, k as u32)
}

/// Equal shares: each flow's rate is the smallest capacity/flow-count along its path. Exact
/// max-min when every flow's bottleneck is shared only with flows bottlenecked there too (the
/// symmetric sets the pipeline estimates use), and always exact for the slowest flow.
pub fn equal_shares(capacities: &[f64], paths: &[&[u32]]) -> Vec<f64> {
    EqualShares::new(capacities.len()).shares(capacities, paths)
}

/// [`equal_shares`] with its per-link count kept between calls (zeroed after each), for many
/// small sets of flows over one large set of links.
#[derive(Debug, Clone)]
pub struct EqualShares {
    count: Vec<u32>,
}

impl EqualShares {
    /// A counter over `links` links.
    pub fn new(links: usize) -> EqualShares {
        EqualShares { count: vec![0; links] }
    }

    /// Equal shares of `paths` over links of `capacities` (at most the counter's links).
    pub fn shares(&mut self, capacities: &[f64], paths: &[&[u32]]) -> Vec<f64> {
        for p in paths {
            for &l in *p {
                self.count[l as usize] += 1;
            }
        }
        let out = paths
            .iter()
            .map(|p| {
                p.iter()
                    .map(|&l| capacities[l as usize] / self.count[l as usize] as f64)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        for p in paths {
            for &l in *p {
                self.count[l as usize] = 0;
            }
        }
        out
    }
}

/// Max-min fair rates (bytes/s per unit of weight) for `flows` over links of `capacities`.
/// A flow with an empty path and no cap gets `f64::INFINITY`.
///
/// When the flows cross a small part of the links (one job on a big machine), the solve runs on
/// those links alone, renumbered in their order, so that ties break as they would over all.
pub fn max_min_rates(capacities: &[f64], flows: &[FlowSpec<'_>]) -> Vec<f64> {
    let touched: usize = flows.iter().map(|f| f.path.len()).sum();
    if touched.saturating_mul(4) >= capacities.len() {
        return max_min_dense(capacities, flows);
    }
    // Each link's local number (its rank among the used links), through a per-thread map
    // over all links that is left all-unset after each solve.
    let (used, renumbered) = LOCAL.with_borrow_mut(|map| {
        if map.len() < capacities.len() {
            map.resize(capacities.len(), u32::MAX);
        }
        let mut used: Vec<u32> = Vec::new();
        for f in flows {
            for &l in f.path {
                if map[l as usize] == u32::MAX {
                    map[l as usize] = 0;
                    used.push(l);
                }
            }
        }
        used.sort_unstable();
        for (i, &l) in used.iter().enumerate() {
            map[l as usize] = i as u32;
        }
        let renumbered: Vec<u32> =
            flows.iter().flat_map(|f| f.path.iter().map(|&l| map[l as usize])).collect();
        for &l in &used {
            map[l as usize] = u32::MAX;
        }
        (used, renumbered)
    });
    let caps: Vec<f64> = used.iter().map(|&l| capacities[l as usize]).collect();
    let mut at = 0;
    let specs: Vec<FlowSpec<'_>> = flows
        .iter()
        .map(|f| {
            let path = &renumbered[at..at + f.path.len()];
            at += f.path.len();
            FlowSpec { path, cap: f.cap, weight: f.weight, link_weights: f.link_weights }
        })
        .collect();
    max_min_dense(&caps, &specs)
}

thread_local! {
    /// [`max_min_rates`]' map from a link to its local number (u32::MAX: unset).
    static LOCAL: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`max_min_rates`] over every link.
fn max_min_dense(capacities: &[f64], flows: &[FlowSpec<'_>]) -> Vec<f64> {
    let n_links = capacities.len();
    let mut rem: Vec<f64> = capacities.to_vec();
    let mut weight = vec![0.0f64; n_links];
    let mut version = vec![0u32; n_links];
    // link -> flows crossing it (CSR layout).
    let mut count = vec![0u32; n_links + 1];
    for f in flows {
        for (k, &l) in f.path.iter().enumerate() {
            count[l as usize + 1] += 1;
            weight[l as usize] += f.on_link(k);
        }
    }
    for i in 0..n_links {
        count[i + 1] += count[i];
    }
    let mut fill = count.clone();
    let mut on_link = vec![0u32; count[n_links] as usize];
    for (fi, f) in flows.iter().enumerate() {
        for &l in f.path {
            on_link[fill[l as usize] as usize] = fi as u32;
            fill[l as usize] += 1;
        }
    }
    let mut heap: BinaryHeap<Reverse<u128>> = (0..n_links)
        .filter(|&l| weight[l] > 0.0)
        .map(|l| share(rem[l] / weight[l], l as u32, 0))
        .collect();
    let mut by_cap: Vec<u32> =
        (0..flows.len() as u32).filter(|&f| flows[f as usize].cap.is_finite()).collect();
    by_cap
        .sort_by(|&a, &b| flows[a as usize].cap.total_cmp(&flows[b as usize].cap).then(a.cmp(&b)));
    let mut cap_pos = 0;

    let mut rate = vec![f64::NAN; flows.len()];
    let mut unfrozen = flows.len();
    let mut batch: Vec<u32> = Vec::new();
    let mut touched = vec![false; n_links];
    let mut touched_list: Vec<u32> = Vec::new();
    while unfrozen > 0 {
        while let Some(&top) = heap.peek() {
            let (_, link, v) = unshare(top);
            let l = link as usize;
            if v != version[l] || weight[l] <= 0.0 {
                heap.pop();
            } else {
                break;
            }
        }
        while cap_pos < by_cap.len() && !rate[by_cap[cap_pos] as usize].is_nan() {
            cap_pos += 1;
        }
        let link_level = heap.peek().map_or(f64::INFINITY, |&s| unshare(s).0);
        let cap_level = by_cap.get(cap_pos).map_or(f64::INFINITY, |&f| flows[f as usize].cap);
        let level = link_level.min(cap_level);
        if level.is_infinite() {
            for r in rate.iter_mut().filter(|r| r.is_nan()) {
                *r = f64::INFINITY;
            }
            break;
        }
        let limit = level * (1.0 + REL_EPS) + f64::MIN_POSITIVE;
        batch.clear();
        while let Some(&f) = by_cap.get(cap_pos) {
            if flows[f as usize].cap > limit {
                break;
            }
            if rate[f as usize].is_nan() {
                rate[f as usize] = level;
                batch.push(f);
            }
            cap_pos += 1;
        }
        while let Some(&top) = heap.peek() {
            let (top_level, link, v) = unshare(top);
            let l = link as usize;
            if v != version[l] || weight[l] <= 0.0 {
                heap.pop();
                continue;
            }
            if top_level > limit {
                break;
            }
            heap.pop();
            for &f in &on_link[count[l] as usize..count[l + 1] as usize] {
                if rate[f as usize].is_nan() {
                    rate[f as usize] = level;
                    batch.push(f);
                }
            }
        }
        unfrozen -= batch.len();
        // Take the frozen flows off their links, then give each link touched its new share
        // once (a batch of symmetric flows touches the same links many times).
        for &f in &batch {
            let spec = &flows[f as usize];
            for (k, &l) in spec.path.iter().enumerate() {
                let l = l as usize;
                let w = spec.on_link(k);
                rem[l] = (rem[l] - level * w).max(0.0);
                weight[l] -= w;
                if weight[l] <= w * 1e-9 {
                    weight[l] = 0.0;
                }
                if !touched[l] {
                    touched[l] = true;
                    touched_list.push(l as u32);
                }
            }
        }
        for &l in &touched_list {
            let l = l as usize;
            touched[l] = false;
            version[l] = version[l].wrapping_add(1);
            if weight[l] > 0.0 {
                heap.push(share(rem[l] / weight[l], l as u32, version[l]));
            }
        }
        touched_list.clear();
    }
    rate
}

/// The slow reference: progressive filling written as directly as possible, rescanning every
/// link and flow at each level. O(levels · (links + Σ path lengths)).
pub fn max_min_rates_reference(capacities: &[f64], flows: &[FlowSpec<'_>]) -> Vec<f64> {
    let mut rate: Vec<Option<f64>> = vec![None; flows.len()];
    loop {
        // Capacity left on each link, and the weight of still-rising flows on it.
        let mut left = capacities.to_vec();
        let mut rising = vec![0.0; capacities.len()];
        for (f, spec) in flows.iter().enumerate() {
            for (k, &l) in spec.path.iter().enumerate() {
                match rate[f] {
                    Some(r) => left[l as usize] -= r * spec.on_link(k),
                    None => rising[l as usize] += spec.on_link(k),
                }
            }
        }
        let mut level = f64::INFINITY;
        for l in 0..capacities.len() {
            if rising[l] > 0.0 {
                level = level.min(left[l].max(0.0) / rising[l]);
            }
        }
        for (f, spec) in flows.iter().enumerate() {
            if rate[f].is_none() {
                level = level.min(spec.cap);
            }
        }
        if rate.iter().all(Option::is_some) {
            break;
        }
        let limit = level * (1.0 + 1e-9);
        let mut froze = false;
        for (f, spec) in flows.iter().enumerate() {
            if rate[f].is_some() {
                continue;
            }
            let capped = spec.cap <= limit;
            let saturated = spec.path.iter().any(|&l| {
                rising[l as usize] > 0.0 && left[l as usize].max(0.0) / rising[l as usize] <= limit
            });
            if capped || saturated || level.is_infinite() {
                rate[f] = Some(level);
                froze = true;
            }
        }
        if !froze {
            break;
        }
    }
    rate.into_iter().map(|r| r.unwrap_or(f64::INFINITY)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn specs<'a>(paths: &'a [Vec<u32>], caps: &[f64], weights: &[f64]) -> Vec<FlowSpec<'a>> {
        paths
            .iter()
            .zip(caps)
            .zip(weights)
            .map(|((p, &cap), &weight)| FlowSpec { path: p, cap, weight, link_weights: None })
            .collect()
    }

    /// `specs` with per-link weights where `lw` has them.
    fn weighted<'a>(
        paths: &'a [Vec<u32>],
        caps: &[f64],
        weights: &[f64],
        lw: &'a [Option<Vec<f64>>],
    ) -> Vec<FlowSpec<'a>> {
        let mut f = specs(paths, caps, weights);
        for (spec, w) in f.iter_mut().zip(lw) {
            spec.link_weights = w.as_deref();
        }
        f
    }

    #[test]
    fn textbook_example() {
        // Link 0 (cap 10) shared by flows A, B; link 1 (cap 4) carries B and C.
        let paths = vec![vec![0], vec![0, 1], vec![1]];
        let f = specs(&paths, &[f64::INFINITY; 3], &[1.0; 3]);
        let r = max_min_rates(&[10.0, 4.0], &f);
        assert_eq!(r, vec![8.0, 2.0, 2.0]);
    }

    #[test]
    fn caps_and_weights() {
        let paths = vec![vec![0], vec![0]];
        let f = specs(&paths, &[1.0, f64::INFINITY], &[1.0, 3.0]);
        let r = max_min_rates(&[10.0], &f);
        assert_eq!(r, vec![1.0, 3.0]);
        let empty = vec![vec![]];
        let f = specs(&empty, &[f64::INFINITY], &[1.0]);
        assert_eq!(max_min_rates(&[], &f), vec![f64::INFINITY]);
    }

    type Problem = (Vec<f64>, Vec<Vec<u32>>, Vec<f64>, Vec<f64>);

    #[test]
    fn link_weights_count_copies_per_link() {
        // Flow A stands for 3 copies on link 0 and 1 on link 1; B is alone on link 1. Link 0
        // (cap 6) holds A at 2; link 1 (cap 10) gives B the remaining 8.
        let paths = vec![vec![0, 1], vec![1]];
        let lw = vec![Some(vec![3.0, 1.0]), None];
        let f = weighted(&paths, &[f64::INFINITY; 2], &[1.0; 2], &lw);
        assert_eq!(max_min_rates(&[6.0, 10.0], &f), vec![2.0, 8.0]);
        assert_eq!(max_min_rates_reference(&[6.0, 10.0], &f), vec![2.0, 8.0]);
        // The same multiplier on every link is a weight.
        let lw = vec![Some(vec![2.0, 2.0]), None];
        let g = weighted(&paths, &[f64::INFINITY; 2], &[1.0; 2], &lw);
        let h = specs(&paths, &[f64::INFINITY; 2], &[2.0, 1.0]);
        assert_eq!(max_min_rates(&[6.0, 10.0], &g), max_min_rates(&[6.0, 10.0], &h));
    }

    fn problem() -> impl Strategy<Value = Problem> {
        (1usize..12).prop_flat_map(|n_links| {
            let caps = prop::collection::vec(1.0f64..100.0, n_links);
            let flows = prop::collection::vec(
                (
                    prop::collection::btree_set(0..n_links as u32, 1..=n_links.min(4)),
                    prop::option::of(0.5f64..50.0),
                    prop::sample::select(vec![1.0, 2.0, 3.0]),
                ),
                1..25,
            );
            (caps, flows).prop_map(|(caps, flows)| {
                let paths = flows.iter().map(|(p, _, _)| p.iter().copied().collect()).collect();
                let fcaps = flows.iter().map(|(_, c, _)| c.unwrap_or(f64::INFINITY)).collect();
                let w = flows.iter().map(|(_, _, w)| *w).collect();
                (caps, paths, fcaps, w)
            })
        })
    }

    proptest! {
        /// On a machine with many more links than the flows touch the solve runs on the touched
        /// links alone: the same numbers, bit for bit.
        #[test]
        fn solving_on_the_touched_links_changes_nothing((caps, paths, fcaps, w) in problem()) {
            let f = specs(&paths, &fcaps, &w);
            let dense = max_min_dense(&caps, &f);
            // The same links spread out among 20 times as many unused ones.
            let mut wide = vec![1.0; caps.len() * 20];
            for (l, &c) in caps.iter().enumerate() {
                wide[l * 20 + 7] = c;
            }
            let spread: Vec<Vec<u32>> =
                paths.iter().map(|p| p.iter().map(|&l| l * 20 + 7).collect()).collect();
            let g = specs(&spread, &fcaps, &w);
            let sparse = max_min_rates(&wide, &g);
            prop_assert_eq!(dense.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                sparse.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }

        /// Equal shares never give a flow more than max-min does, and give the slowest flow
        /// exactly its max-min rate (what the aggregated models rely on at scale).
        #[test]
        fn equal_shares_bound_max_min_and_match_its_slowest_flow((caps, paths, _f, _w) in problem()) {
            let refs: Vec<&[u32]> = paths.iter().map(|p| p.as_slice()).collect();
            let f = specs(&paths, &vec![f64::INFINITY; paths.len()], &vec![1.0; paths.len()]);
            let exact = max_min_rates_reference(&caps, &f);
            let shares = equal_shares(&caps, &refs);
            for (s, m) in shares.iter().zip(&exact) {
                prop_assert!(*s <= m * (1.0 + 1e-9), "share {s} above max-min {m}");
            }
            let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            prop_assert!((min(&shares) - min(&exact)).abs() <= 1e-9 * min(&exact));
        }

        #[test]
        fn fast_matches_reference_and_is_max_min(
            (caps, paths, fcaps, w) in problem(),
            multipliers in prop::collection::vec(prop::option::of(prop::collection::vec(1u8..5, 4)), 25),
        ) {
            // Some flows stand for a different number of copies on each link they cross.
            let lw: Vec<Option<Vec<f64>>> = paths
                .iter()
                .zip(&multipliers)
                .map(|(p, m)| m.as_ref().map(|m| p.iter().zip(m).map(|(_, &k)| f64::from(k)).collect()))
                .collect();
            let f = weighted(&paths, &fcaps, &w, &lw);
            let fast = max_min_rates(&caps, &f);
            let slow = max_min_rates_reference(&caps, &f);
            for (a, b) in fast.iter().zip(&slow) {
                prop_assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "fast {a} vs reference {b}");
            }
            // No link over capacity.
            let mut load = vec![0.0; caps.len()];
            for (spec, r) in f.iter().zip(&fast) {
                for (k, &l) in spec.path.iter().enumerate() { load[l as usize] += r * spec.on_link(k); }
            }
            for (l, c) in load.iter().zip(&caps) {
                prop_assert!(*l <= c * (1.0 + 1e-9), "load {l} over capacity {c}");
            }
            // Every flow is at its cap or crosses a saturated link on which no flow is faster.
            for (i, (spec, r)) in f.iter().zip(&fast).enumerate() {
                let at_cap = *r >= spec.cap * (1.0 - 1e-9);
                let bottleneck = spec.path.iter().any(|&l| {
                    let saturated = load[l as usize] >= caps[l as usize] * (1.0 - 1e-9);
                    let fastest = f.iter().zip(&fast).all(|(o, ro)| !o.path.contains(&l) || *ro <= r * (1.0 + 1e-9));
                    saturated && fastest
                });
                prop_assert!(at_cap || bottleneck, "flow {i} has no bottleneck");
            }
        }
    }
}
