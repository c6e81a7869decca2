//! Rank skew and stragglers: every rank of a DDP step computes at its own speed, and each
//! bucket's all-reduce can only start once the slowest rank has launched it, so the step runs
//! at the pace of the slowest rank.
//!
//! Each rank's compute takes its nominal time times a factor: lognormal with mean 1 and
//! coefficient of variation `cv`, drawn afresh every step and independently per rank (per-step
//! jitter: clocks, thermal throttling, OS noise), and a persistent straggler at `speed` of the
//! others (a slow GPU or node) multiplies its own by `1 / speed`. With the same factor for all
//! of a rank's kernels in a step, the slowest rank is slowest at every bucket, so the step is the
//! nominal step with compute scaled by the largest factor; its expectation over ranks is taken
//! from the order statistics of the factors (the distribution of their maximum), integrated
//! numerically — deterministic, no sampling.
//!
//! Left out: jitter within a step (a rank slow at one layer and fast at the next, which
//! averages out over the step), and skew in the network (modelled by the collectives).

use statrs::distribution::{ContinuousCDF, LogNormal};

/// Per-rank compute variation of a DDP step.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Skew {
    /// Coefficient of variation of each rank's per-step compute time (0: none).
    pub cv: f64,
    /// One rank's speed relative to the others (1: no straggler).
    pub straggler_speed: f64,
}

impl Default for Skew {
    fn default() -> Self {
        Skew { cv: 0.0, straggler_speed: 1.0 }
    }
}

impl Skew {
    /// Whether it changes anything.
    pub fn is_none(&self) -> bool {
        self.cv == 0.0 && self.straggler_speed == 1.0
    }

    /// The expected compute factor of the slowest of `ranks` ranks.
    pub fn slowest_factor(&self, ranks: usize) -> f64 {
        let s = self.straggler_speed;
        let straggler = if s < 1.0 { 1 } else { 0 };
        if self.cv == 0.0 || ranks == 0 {
            return if ranks > 0 { 1.0 / s } else { 1.0 };
        }
        // Mean 1: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2.
        let var = (1.0 + self.cv * self.cv).ln();
        let Ok(d) = LogNormal::new(-var / 2.0, var.sqrt()) else { return 1.0 / s };
        let others = (ranks - straggler) as i32;
        // P(max <= x): every other rank's factor under x, the straggler's under x·s.
        let cdf = |x: f64| {
            let f = d.cdf(x).powi(others);
            if straggler == 1 { f * d.cdf(x * s) } else { f }
        };
        // E[max] = ∫ (1 - P(max <= x)) dx over x >= 0, up to where the tail is negligible.
        let top = d.inverse_cdf(1.0 - 1e-12 / ranks as f64) / s;
        let n = 20_000;
        let h = top / n as f64;
        let tail = |i: usize| 1.0 - cdf(i as f64 * h);
        let inner: f64 = (1..n).map(tail).sum();
        h * (0.5 * (tail(0) + tail(n)) + inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_of_many_ranks_follows_the_order_statistics() {
        // No spread: the straggler alone decides.
        let s = Skew { cv: 0.0, straggler_speed: 0.8 };
        assert_eq!(s.slowest_factor(64), 1.25);
        // One rank: its own mean.
        let one = Skew { cv: 0.05, straggler_speed: 1.0 }.slowest_factor(1);
        assert!((one - 1.0).abs() < 1e-6, "{one}");
        // Small cv: nearly normal, so the expected maximum of n is 1 + cv × E[max of n standard
        // normals]: 1.4236 for 8, 2.3437 for 64 (integrated; the lognormal's right skew adds a little).
        for (n, z) in [(8, 1.4236), (64, 2.3437)] {
            let f = Skew { cv: 0.01, straggler_speed: 1.0 }.slowest_factor(n);
            assert!((f - (1.0 + 0.01 * z)).abs() < 3e-4, "{n}: {f}");
        }
        // More ranks, slower; a straggler well below the spread sets the pace.
        let cv = Skew { cv: 0.05, straggler_speed: 1.0 };
        assert!(cv.slowest_factor(256) > cv.slowest_factor(64));
        let both = Skew { cv: 0.02, straggler_speed: 0.5 }.slowest_factor(64);
        assert!((both - 2.0).abs() < 0.1, "{both}");
    }
}
