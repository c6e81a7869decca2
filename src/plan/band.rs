//! Each candidate's error band: how far its step time (and so its time and cost to train) may
//! be from what a real cluster does, from the model's held-out error on the measured runs most
//! like it.
//!
//! A training candidate is classed by its GPU generation ("sm90"), the kind of step it runs
//! ([`step_kind`]) and its math precision; a collective call by its GPU generation. The
//! figures are what `collsim validate` reports held out — each published training run
//! predicted with a scale fitted on the other sources (`validate --runs
//! calibration/data/training/public.csv`), each nccl-tests cluster with a profile calibrated on
//! the other clusters (`validate --manifest calibration/data/manifest.csv`) — and tests hold
//! [`TRAINING`] and [`COLLECTIVE`] to that output.
//!
//! The rule leans pessimistic, since an optimistic figure is the costly one. A candidate
//! whose GPU generation and kind of step no measured run shares gets the p95 of every run:
//! nothing says the model is as good there as where it was checked. Otherwise its band is the
//! pooled median, widened (never narrowed) to the median of each class it belongs to with at
//! least [`MIN_RUNS`] runs: a class the model fits well does not earn a narrower band on a few
//! runs, but one it fits badly widens it. Step-to-step jitter adds nothing: the time to train
//! is a mean over many steps, and the straggler model's mean cost is in the step already.

use crate::workload::ddp::DdpSpec;

/// The fewest runs a class needs before its median may widen a band.
pub const MIN_RUNS: usize = 2;

/// The model's held-out error over a set of measured runs, pooled and by class.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// What the figures are (`validate` and its file, the date they were read).
    pub source: &'static str,
    /// What a class counts ("runs", "sizes").
    pub unit: &'static str,
    /// Median |error| % over every run (or size).
    pub median_pct: f64,
    /// 95th percentile |error| %.
    pub p95_pct: f64,
    /// Each class: its name ("sm90 fsdp", "megatron bf16", "sm80"), runs (or sizes) in it and
    /// their median |error| %.
    pub classes: &'static [(&'static str, usize, f64)],
}

/// Published training steps, held out by source: `collsim validate --runs
/// calibration/data/training/public.csv` (70 runs: NVIDIA DGX Cloud, MLPerf Training,
/// torchtitan; 2026-12-01). Classes by GPU generation and kind of step, and by kind and
/// precision; `the_published_runs_replay_with_the_figures_the_readme_quotes` holds them.
pub const TRAINING: Measured = Measured {
    source: "validate --runs calibration/data/training/public.csv",
    unit: "runs",
    median_pct: 8.4,
    p95_pct: 17.7,
    classes: &[
        ("sm80 fsdp", 5, 8.4),
        ("sm90 fsdp", 2, 26.0),
        ("sm90 megatron", 63, 7.9),
        ("fsdp bf16", 7, 9.1),
        ("megatron bf16", 29, 10.3),
        ("megatron fp8", 34, 4.9),
    ],
};

/// nccl-tests curves, each cluster held out: `collsim validate --manifest
/// calibration/data/manifest.csv`'s leave-one-cluster-out (771 sizes on 11 clusters;
/// 2026-12-01), by GPU generation; `the_pooled_and_held_out_figures_do_not_get_worse` holds
/// them.
pub const COLLECTIVE: Measured = Measured {
    source: "validate --manifest calibration/data/manifest.csv",
    unit: "sizes",
    median_pct: 7.9,
    p95_pct: 42.3,
    classes: &[("sm80", 240, 9.7), ("sm89", 25, 10.5), ("sm90", 506, 6.7)],
};

/// A candidate's band: the relative error of its step time, and what it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Relative error (0.084: within a factor 1.084 either way).
    pub fraction: f64,
    /// Where the figure comes from, for the report ("sm90 fsdp: median of 2 runs").
    pub from: String,
}

/// What kind of training step `spec` runs, as the bands class it: "megatron" (a tensor or
/// pipeline layout), "fsdp", "zero" (DeepSpeed), "trace" (a replayed list of calls) or "ddp".
pub fn step_kind(spec: &DdpSpec) -> &'static str {
    if spec.calls.is_some() {
        "trace"
    } else if spec.parallel.is_some() {
        "megatron"
    } else if let Some(s) = &spec.sharding {
        if s.zero.is_some() { "zero" } else { "fsdp" }
    } else {
        "ddp"
    }
}

/// The class names a training step of `kind` at `precision` on GPU generation `sm` belongs to:
/// generation and kind, then kind and precision.
pub fn training_classes(sm: u32, kind: &str, precision: Option<&str>) -> Vec<String> {
    let mut v = vec![format!("sm{sm} {kind}")];
    if let Some(p) = precision {
        v.push(format!("{kind} {p}"));
    }
    v
}

/// The band of a training step of `kind` at `precision` on GPU generation `sm`.
pub fn training(sm: u32, kind: &str, precision: Option<&str>) -> Band {
    let classes = training_classes(sm, kind, precision);
    let measured = |name: &str| TRAINING.classes.iter().any(|c| c.0 == name);
    if !measured(&classes[0]) {
        return Band {
            fraction: TRAINING.p95_pct / 100.0,
            from: format!("no measured {} step: the p95 of all runs", classes[0]),
        };
    }
    widest(&TRAINING, &classes)
}

/// The band of a collective call on GPU generation `sm`.
pub fn collective(sm: u32) -> Band {
    let class = format!("sm{sm}");
    if !COLLECTIVE.classes.iter().any(|c| c.0 == class) {
        return Band {
            fraction: COLLECTIVE.p95_pct / 100.0,
            from: format!("no measured {class} cluster: the p95 of all sizes"),
        };
    }
    widest(&COLLECTIVE, &[class])
}

/// The pooled median of `m`, widened to the median of each of `classes` with enough runs.
fn widest(m: &Measured, classes: &[String]) -> Band {
    let from = format!("median of all {}", m.unit);
    let mut band = Band { fraction: m.median_pct / 100.0, from };
    for (name, runs, pct) in m.classes {
        if classes.iter().any(|c| c == name) && *runs >= MIN_RUNS && pct / 100.0 > band.fraction {
            let from = format!("{name}: median of {runs} {}", m.unit);
            band = Band { fraction: pct / 100.0, from };
        }
    }
    band
}

/// Each class of `items` (the classes an item belongs to, its |error| %), with its count and
/// median |error| %, in name order: what `validate` reports and [`TRAINING`] and
/// [`COLLECTIVE`] carry.
pub fn class_figures(items: &[(Vec<String>, f64)]) -> Vec<(String, usize, f64)> {
    let mut by: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for (classes, e) in items {
        for c in classes {
            by.entry(c).or_default().push(e.abs());
        }
    }
    by.into_iter()
        .map(|(name, e)| {
            use statrs::statistics::{Data, Median};
            (name.to_string(), e.len(), Data::new(e).median())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_the_model_fits_badly_widens_the_band_and_one_it_fits_well_does_not_narrow_it() {
        // H100 FSDP: 26 % on 2 runs, over the pooled 8.4 %.
        let b = training(90, "fsdp", Some("bf16"));
        assert!((b.fraction - 0.26).abs() < 1e-9, "{b:?}");
        assert_eq!(b.from, "sm90 fsdp: median of 2 runs");
        // Megatron in fp8: 4.9 % does not narrow the pooled 8.4 %; sm90 megatron 7.9 % neither.
        assert!((training(90, "megatron", Some("fp8")).fraction - 0.084).abs() < 1e-9);
        // In bf16 it widens to 10.3 %.
        assert!((training(90, "megatron", Some("bf16")).fraction - 0.103).abs() < 1e-9);
    }

    #[test]
    fn a_generation_or_kind_never_measured_gets_the_p95() {
        for (sm, kind) in [(100, "fsdp"), (80, "megatron"), (90, "ddp"), (90, "trace")] {
            let b = training(sm, kind, Some("bf16"));
            assert!((b.fraction - 0.177).abs() < 1e-9, "sm{sm} {kind}: {b:?}");
            assert!(b.from.starts_with("no measured"), "{}", b.from);
        }
        assert!((collective(100).fraction - 0.423).abs() < 1e-9);
        assert!((collective(90).fraction - 0.079).abs() < 1e-9);
    }

    #[test]
    fn class_figures_take_the_median_of_each_class() {
        let items = vec![
            (vec!["a".to_string(), "b".to_string()], -3.0),
            (vec!["a".to_string()], 1.0),
            (vec!["a".to_string()], 2.0),
            (vec!["b".to_string()], 5.0),
        ];
        assert_eq!(
            class_figures(&items),
            vec![("a".to_string(), 3, 2.0), ("b".to_string(), 2, 4.0)]
        );
    }
}
