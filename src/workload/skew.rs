//! Rank skew and stragglers: every rank of a step computes at its own speed, and each
//! synchronising collective (a bucket's all-reduce, a pipeline's sends, a gather) can only start
//! once the slowest rank has launched it, so the step runs at the pace of the slowest rank.
//!
//! Each rank's compute takes its nominal time times a factor: lognormal with mean 1 and
//! coefficient of variation `cv`, drawn afresh every step and independently per rank (per-step
//! jitter: clocks, thermal throttling, OS and host noise), and a persistent straggler at `speed`
//! of the others (a slow GPU or node) multiplies its own by `1 / speed`; measured per-rank speeds
//! (`rank_speeds`, each rank's rate over the nominal one, e.g. from per-rank step times of a real
//! run) do the same for every rank they list. With the same factor for all of a rank's kernels in
//! a step, the slowest rank is slowest at every synchronisation, so the step is the nominal step
//! with compute scaled by the largest factor ([`slowed`]); its expectation over ranks is taken
//! from the order statistics of the factors (the distribution of their maximum), integrated
//! numerically — deterministic, no sampling. The step is run once, at the slowest rank's pace;
//! [`restate`] then splits its compute into a typical rank's and the wait.
//!
//! The default spread, [`DEFAULT_CV`], comes from the step-to-step spread of 81 MLPerf Training
//! runs ([`implied_cv`]; `calibration/data/training/step-spread.csv`).
//!
//! Left out: jitter within a step (a rank slow at one layer and fast at the next, which
//! averages out over the step), and skew in the network (modelled by the collectives).

use statrs::distribution::{ContinuousCDF, LogNormal, Normal};

use super::ddp::{GpuFacts, StepResult};

/// Per-rank per-step spread of compute time a training step has unless its scenario says
/// otherwise (`rank_skew_cv`): the median over 81 MLPerf Training v3.0–v5.0 runs (GPT-3 175B
/// and Llama 3.1 405B on 256–10,752 H100/H200/GB200 GPUs; 27 systems, six submitters) of the
/// spread each run's whole-step times imply ([`implied_cv`]; the runs and their figures are in
/// `calibration/data/training/step-spread.csv`, their interquartile range 1.0–2.5 %). Whatever
/// of a run's spread is common to all ranks (the fabric, the file system) is counted as
/// per-rank here, so the figure errs slow.
pub const DEFAULT_CV: f64 = 0.0143;

/// Per-rank compute variation of a DDP step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Skew {
    /// Coefficient of variation of each rank's per-step compute time (0: none).
    pub cv: f64,
    /// One rank's speed relative to the others (1: no straggler).
    pub straggler_speed: f64,
    /// Measured speeds of the first ranks relative to the nominal rate (the others at 1).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rank_speeds: Vec<f64>,
}

impl Default for Skew {
    fn default() -> Self {
        Skew { cv: 0.0, straggler_speed: 1.0, rank_speeds: Vec::new() }
    }
}

impl Skew {
    /// No spread, no straggler, except [`DEFAULT_CV`]: what a scenario gets by default.
    pub fn measured_default() -> Self {
        Skew { cv: DEFAULT_CV, ..Skew::default() }
    }

    /// Whether it changes anything.
    pub fn is_none(&self) -> bool {
        self.cv == 0.0 && self.speeds().all(|s| s == 1.0)
    }

    /// The speeds of the ranks that are not nominal: the straggler's, or the measured ones.
    fn speeds(&self) -> impl Iterator<Item = f64> + '_ {
        let straggler = (self.straggler_speed != 1.0).then_some(self.straggler_speed);
        straggler.into_iter().chain(self.rank_speeds.iter().copied())
    }

    /// The expected compute factor of the slowest of `ranks` ranks (the listed speeds beyond
    /// `ranks` are ignored; [`Skew::check_ranks`] refuses them). Kept per (spread, speeds,
    /// ranks) for the process: the integral costs about a millisecond, which a plan's or a
    /// sweep's many small steps would pay again and again.
    pub fn slowest_factor(&self, ranks: usize) -> f64 {
        type Key = (u64, u64, Vec<u64>, usize);
        static KEPT: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<Key, f64>>> =
            std::sync::OnceLock::new();
        let key = (
            self.cv.to_bits(),
            self.straggler_speed.to_bits(),
            self.rank_speeds.iter().map(|s| s.to_bits()).collect(),
            ranks,
        );
        let kept = KEPT.get_or_init(Default::default);
        if let Some(f) = kept.lock().ok().and_then(|k| k.get(&key).copied()) {
            return f;
        }
        let f = self.integrate_slowest(ranks);
        if let Ok(mut k) = kept.lock() {
            k.insert(key, f);
        }
        f
    }

    /// [`Skew::slowest_factor`], computed.
    fn integrate_slowest(&self, ranks: usize) -> f64 {
        if ranks == 0 {
            return 1.0;
        }
        let listed: Vec<f64> = self.speeds().take(ranks).collect();
        let nominal = (ranks - listed.len()) as i32;
        // The slowest speed present (1 if any rank is nominal).
        let start = if nominal > 0 { 1.0 } else { f64::MAX };
        let slowest = listed.iter().copied().fold(start, f64::min);
        // No spread, or one rank at nominal speed (its factor's mean is 1).
        if self.cv == 0.0 || (ranks == 1 && listed.is_empty()) {
            return 1.0 / slowest;
        }
        // Mean 1: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2.
        let var = (1.0 + self.cv * self.cv).ln();
        let Ok(d) = LogNormal::new(-var / 2.0, var.sqrt()) else { return 1.0 / slowest };
        // P(max <= x): every nominal rank's factor under x, a rank at speed s's under x·s.
        let cdf = |x: f64| {
            let f = d.cdf(x).powi(nominal);
            listed.iter().fold(f, |p, &s| p * d.cdf(x * s))
        };
        // E[max] = ∫ (1 - P(max <= x)) dx over x >= 0, up to where the tail is negligible.
        // (1 - p stays below 1 in f64 for p down to 1e-15; beyond ~10^4 ranks 1e-12/n would not.)
        let top = d.inverse_cdf(1.0 - (1e-12 / ranks as f64).max(1e-15)) / slowest;
        let n = 20_000;
        let h = top / n as f64;
        let tail = |i: usize| 1.0 - cdf(i as f64 * h);
        let inner: f64 = (1..n).map(tail).sum();
        h * (0.5 * (tail(0) + tail(n)) + inner)
    }

    /// What the spread is made of, for a report: "rank_skew_cv 1.43 % (the default, from
    /// MLPerf step times)", "a straggler at 0.8", "3 measured rank speeds", joined by " and ".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cv > 0.0 {
            let default =
                if self.cv == DEFAULT_CV { " (the default, from MLPerf step times)" } else { "" };
            parts.push(format!("rank_skew_cv {:.2} %{default}", 100.0 * self.cv));
        }
        if self.straggler_speed != 1.0 {
            parts.push(format!("a straggler at {}", self.straggler_speed));
        }
        if !self.rank_speeds.is_empty() {
            parts.push(format!("{} measured rank speeds", self.rank_speeds.len()));
        }
        parts.join(" and ")
    }

    /// An error if the skew lists more ranks than a job of `ranks` has.
    pub fn check_ranks(&self, ranks: usize) -> Result<(), String> {
        let listed = self.speeds().count();
        if listed > ranks {
            return Err(format!(
                "workload.rank_speeds lists {listed} ranks, but the job has {ranks} (a --nodes, --gpus-per-node or swept cluster size smaller than the list)"
            ));
        }
        Ok(())
    }
}

/// The spread of each rank's per-step compute time (a lognormal's coefficient of variation)
/// that makes the whole step — the slowest of `ranks` ranks — spread as a measured run's did:
/// its 10th to 90th percentile over its median, `width`. The maximum of `ranks` draws is under
/// its q-quantile where every draw is under the q^(1/ranks)-quantile of one, so the ratio is
/// (e^(σ·z90) − e^(σ·z10)) / e^(σ·z50), z at those powers of 0.9, 0.1 and 0.5; σ is found by
/// bisection. None where the width is not positive or `ranks` is 0.
pub fn implied_cv(width: f64, ranks: usize) -> Option<f64> {
    if !(width > 0.0 && width.is_finite()) || ranks == 0 {
        return None;
    }
    let unit = Normal::standard();
    let z = |q: f64| unit.inverse_cdf(q.powf(1.0 / ranks as f64));
    let (lo, mid, hi) = (z(0.1), z(0.5), z(0.9));
    let ratio = |s: f64| ((s * hi).exp() - (s * lo).exp()) / (s * mid).exp();
    // The ratio grows with σ from 0; σ = 2 is a spread no run has.
    let (mut a, mut b) = (0.0, 2.0);
    if ratio(b) < width {
        return None;
    }
    for _ in 0..100 {
        let m = 0.5 * (a + b);
        if ratio(m) < width { a = m } else { b = m }
    }
    let sigma = 0.5 * (a + b);
    Some(((sigma * sigma).exp() - 1.0).sqrt())
}

/// The slowest rank's GPU and step: compute (FLOPs, memory traffic, launches, layers' measured
/// times) `factor` times slower, communication as it was.
pub(crate) fn slowed(
    spec: &super::ddp::DdpSpec,
    gpu: &GpuFacts,
    factor: f64,
) -> (super::ddp::DdpSpec, GpuFacts) {
    let gpu = GpuFacts {
        flops: gpu.flops / factor,
        memory_bandwidth: gpu.memory_bandwidth / factor,
        launch: crate::units::Secs::new(gpu.launch.get() * factor),
        gemm_fixed: crate::units::Secs::new(gpu.gemm_fixed.get() * factor),
        sixteen_bit_flops: gpu.sixteen_bit_flops.map(|f| f / factor),
        ..*gpu
    };
    let mut spec = spec.clone();
    for l in &mut spec.model.layers {
        l.times = l.times.map(|(f, b)| (f * factor, b * factor));
    }
    (spec, gpu)
}

/// A step run at the slowest rank's pace (`factor` = [`Skew::slowest_factor`]), restated for a
/// typical rank: its compute (the breakdown's compute parts, forward, backward, optimizer and
/// compute-stream totals, a 3-D step's per-stage forward and backward) and its pipeline time
/// (the other stages' compute, mostly) divided by `factor`; what that removes is the wait for
/// the slowest rank, less what the data loader would have made a typical rank wait anyway (a
/// loader-bound step waits for its batches whatever its ranks' speeds); the one-GPU comparison
/// at nominal speed; each bucket's wait how long a typical rank's gradients sat ready (they were
/// ready `factor` times sooner; not given for a 3-D step, whose ready times hold its pipeline's
/// and tensor-parallel waits). The iteration time, its exposed communication and its timeline
/// are the slowest rank's.
pub(crate) fn restate(mut r: StepResult, factor: f64) -> StepResult {
    if factor == 1.0 {
        return r;
    }
    let b = &mut r.breakdown;
    let mut moved = 0.0;
    for part in [
        &mut b.flop_ms,
        &mut b.memory_ms,
        &mut b.launch_ms,
        &mut b.measured_ms,
        &mut b.ddp_copies_ms,
        &mut b.optimizer_ms,
        &mut b.pipeline_ms,
    ] {
        let typical = *part / factor;
        moved += *part - typical;
        *part = typical;
    }
    // The GPU's end for a typical rank, and the step it would take: the loader's floor or that.
    let gpu_end = r.iteration_time_ms - b.input_stall_ms - moved;
    let nominal = gpu_end.max(r.loader_ms);
    b.input_stall_ms = nominal - gpu_end;
    b.skew_wait_ms += r.iteration_time_ms - nominal;
    // A typical rank's compute; the exposed communication stays the slowest rank's.
    for t in [&mut r.forward_ms, &mut r.backward_ms, &mut r.optimizer_ms, &mut r.compute_ms] {
        *t /= factor;
    }
    if let Some(p) = &mut r.parallel {
        p.bubble_fraction = r.breakdown.pipeline_ms / r.iteration_time_ms.max(1e-30);
        for row in &mut p.stages {
            row.fwd_ms /= factor;
            row.bwd_ms /= factor;
        }
    }
    // One GPU alone: its compute at nominal speed, or its loader where that is longer.
    let single = (r.single_gpu_ms / factor).max(r.alone_loader_ms);
    r.scaling_efficiency *= single / r.single_gpu_ms.max(1e-30);
    r.single_gpu_ms = single;
    r.gemm_tflops *= factor;
    let staged = r.parallel.is_some();
    for bucket in &mut r.buckets {
        bucket.skew_wait_ms =
            (!staged).then(|| (bucket.start_ms - bucket.ready_ms / factor).max(0.0));
    }
    r.skew = Some(super::ddp::SkewCost {
        slowest_factor: factor,
        wait_ms: r.breakdown.skew_wait_ms,
        typical_rank_ms: r.iteration_time_ms - r.breakdown.skew_wait_ms,
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_slowest_of_n_ranks_is_the_monte_carlo_one() {
        // Issue #48: the expected slowest of N ranks, integrated from the order statistics,
        // against a Monte-Carlo with a fixed seed (proptest's deterministic generator,
        // lognormal draws by the inverse CDF), for N from 8 to 4,096 ranks at the default spread:
        // within three standard errors, and growing with N as the maximum of N draws does
        // (each doubling adds less).
        use proptest::prelude::Rng;
        use proptest::test_runner::{RngAlgorithm, TestRng};
        let cv = DEFAULT_CV;
        let skew = Skew::measured_default();
        let var = (1.0 + cv * cv).ln();
        let d = LogNormal::new(-var / 2.0, var.sqrt()).unwrap();
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut uniform = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let mut expected = Vec::new();
        for (n, trials) in [(8usize, 4000usize), (64, 2000), (512, 1000), (4096, 300)] {
            let maxima: Vec<f64> = (0..trials)
                .map(|_| (0..n).map(|_| d.inverse_cdf(uniform())).fold(0.0, f64::max))
                .collect();
            let mean = maxima.iter().sum::<f64>() / trials as f64;
            let sd = (maxima.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (trials - 1) as f64)
                .sqrt();
            let integrated = skew.slowest_factor(n);
            let se = sd / (trials as f64).sqrt();
            assert!((integrated - mean).abs() < 3.0 * se, "{n}: {integrated} vs {mean} ± {se}");
            expected.push(integrated);
        }
        // Up with N, by less each time N grows eightfold.
        let steps: Vec<f64> = expected.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.iter().all(|&s| s > 0.0), "{expected:?}");
        assert!(steps.windows(2).all(|w| w[1] < w[0]), "{steps:?}");
    }

    #[test]
    fn a_runs_step_spread_gives_back_the_rank_spread_that_made_it() {
        // The 10th-90th percentile width of the slowest of n lognormal draws, from their
        // quantiles, solved back: the spread that made it, for 8 to 10,752 ranks.
        for (cv, n) in [(0.005_f64, 8usize), (0.0143, 512), (0.03, 10_752)] {
            let var = (1.0 + cv * cv).ln();
            let d = LogNormal::new(-var / 2.0, var.sqrt()).unwrap();
            let q = |p: f64| d.inverse_cdf(p.powf(1.0 / n as f64));
            let width = (q(0.9) - q(0.1)) / q(0.5);
            let back = implied_cv(width, n).unwrap();
            assert!((back - cv).abs() < 1e-9 * cv.max(1.0), "{n}: {back} vs {cv}");
        }
        assert_eq!(implied_cv(0.0, 8), None);
        assert_eq!(implied_cv(0.01, 0), None);
        assert_eq!(implied_cv(f64::NAN, 8), None);
    }

    #[test]
    fn the_slowest_of_many_ranks_follows_the_order_statistics() {
        // No spread: the straggler alone decides.
        let s = Skew { cv: 0.0, straggler_speed: 0.8, rank_speeds: Vec::new() };
        assert_eq!(s.slowest_factor(64), 1.25);
        // One rank: its own mean.
        let one = Skew { cv: 0.05, ..Skew::default() }.slowest_factor(1);
        assert!((one - 1.0).abs() < 1e-6, "{one}");
        // Small cv: nearly normal, so the expected maximum of n is 1 + cv × E[max of n standard
        // normals]: 1.4236 for 8, 2.3437 for 64 (integrated; the lognormal's right skew adds a little).
        for (n, z) in [(8, 1.4236), (64, 2.3437)] {
            let f = Skew { cv: 0.01, ..Skew::default() }.slowest_factor(n);
            assert!((f - (1.0 + 0.01 * z)).abs() < 3e-4, "{n}: {f}");
        }
        // More ranks, slower; a straggler well below the spread sets the pace.
        let cv = Skew { cv: 0.05, ..Skew::default() };
        assert!(cv.slowest_factor(256) > cv.slowest_factor(64));
        let both =
            Skew { cv: 0.02, straggler_speed: 0.5, rank_speeds: Vec::new() }.slowest_factor(64);
        assert!((both - 2.0).abs() < 0.1, "{both}");
    }

    #[test]
    fn measured_rank_speeds_act_as_many_stragglers() {
        // Listed speeds: the slowest sets the pace without spread; a list of one is the
        // straggler.
        let speeds = |v: Vec<f64>, cv: f64| Skew { cv, rank_speeds: v, ..Skew::default() };
        assert_eq!(speeds(vec![0.9, 1.0, 0.8], 0.0).slowest_factor(64), 1.25);
        let one = Skew { cv: 0.03, straggler_speed: 0.8, rank_speeds: Vec::new() };
        let f = speeds(vec![0.8], 0.03).slowest_factor(64);
        assert!((f - one.slowest_factor(64)).abs() < 1e-12, "{f}");
        // Two slow ranks at the same speed are likelier than one to draw a large factor.
        let two = speeds(vec![0.9, 0.9], 0.05).slowest_factor(64);
        assert!(two > speeds(vec![0.9], 0.05).slowest_factor(64), "{two}");
        // Tens of thousands of ranks stay finite (the tail's cut-off stays below 1 in f64).
        let many = Skew { cv: 0.02, ..Skew::default() };
        let (a, b) = (many.slowest_factor(10_000), many.slowest_factor(20_000));
        assert!(a.is_finite() && b.is_finite() && b > a, "{a} {b}");
        assert!(speeds(vec![1.0; 9], 0.0).check_ranks(8).is_err());
        assert!(speeds(vec![1.0; 8], 0.0).check_ranks(8).is_ok());
    }
}
