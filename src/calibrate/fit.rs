//! Fitting a profile's size-band correction (the SimGrid SMPI idea): in each band of call sizes
//! the time multiplier that takes the model to the measurements, by robust (least absolute
//! deviation) regression on log time — the median of ln(measured / model) — and the spread left
//! in the band (95th percentile of the absolute log residual), which becomes the error band of
//! every prediction in it. Bands are fitted per mechanism (algorithm and protocol): a factor
//! fitted where NCCL runs one says nothing of another at the same sizes.

use statrs::statistics::{Data, Median, OrderStatistics};

use std::collections::BTreeMap;

use crate::collective::{Bands, SizeCorrection};
use crate::config::{CORRECTION_FACTOR_RANGE, MAX_CORRECTION_RESIDUAL};
use crate::units::Bytes;

/// Default band edges (lowest byte count of each band): latency-bound, LL, LL128, Simple
/// ramp, bandwidth-bound.
pub const DEFAULT_BANDS: [u64; 5] = [0, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// Fewest sizes a band needs to determine its factor; a band with fewer is merged into its
/// neighbour.
pub const MIN_PER_BAND: usize = 3;

/// One measured size and what the uncorrected model predicts for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The mechanism the model ran it with ("RING/LL128": algorithm and protocol as
    /// `validate` prints them).
    pub mechanism: String,
    /// NCCL's byte count of the call.
    pub bytes: u64,
    /// Measured time, µs.
    pub measured_us: f64,
    /// Model time, µs.
    pub model_us: f64,
    /// The log it was measured in.
    pub log: String,
}

/// Why no correction can be fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Too few sizes to determine even one factor.
    #[error(
        "{0} usable size(s) in the fit set; at least {MIN_PER_BAND} are needed to fit a factor"
    )]
    TooFew(usize),
    /// A time that is not a positive number.
    #[error("size {bytes}: measured {measured} us, model {model} us: times must be positive")]
    BadTime {
        /// The size.
        bytes: u64,
        /// Measured.
        measured: f64,
        /// Model.
        model: f64,
    },
    /// A band whose factor would leave [`CORRECTION_FACTOR_RANGE`].
    #[error(
        "{mechanism}, sizes {band}: measured times are {factor:.3} x the model's, outside the \
         {lo}-{hi} a size-band correction may take (the model lacks a mechanism there, or the \
         measurements are wrong); the sizes come from {logs}",
        lo = CORRECTION_FACTOR_RANGE.0,
        hi = CORRECTION_FACTOR_RANGE.1
    )]
    OutOfRange {
        /// The mechanism ("NVLS/SIMPLE").
        mechanism: String,
        /// The band's sizes.
        band: String,
        /// The factor the band asked for.
        factor: f64,
        /// The logs its sizes come from, comma-separated.
        logs: String,
    },
}

/// Fits bands starting at `edges` (ascending, the first 0) on `samples`: for each mechanism
/// with at least [`MIN_PER_BAND`] sizes its own factors, from its lowest band with sizes up,
/// and for every other mechanism (and below that) factor 1 with the residual of the
/// uncorrected model over all the samples (a mechanism the fit logs never ran is predicted by
/// the fitted parameters alone, and may be as far off as any they ran). With `factors` false every
/// factor stays 1 and only the residuals (then |ln(measured / model)|) are kept, for the
/// error band of a model used as it is. Bands with fewer than [`MIN_PER_BAND`] sizes are
/// merged into the band above (the top one into the band below); each merge is described in
/// the returned notes. Deterministic: the same samples give the same profile whatever their
/// order.
pub fn fit(
    samples: &[Sample],
    edges: &[u64],
    factors: bool,
    fitted_on: Vec<String>,
) -> Result<(SizeCorrection, Vec<String>), FitError> {
    for s in samples {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(s.measured_us) || !ok(s.model_us) {
            return Err(FitError::BadTime {
                bytes: s.bytes,
                measured: s.measured_us,
                model: s.model_us,
            });
        }
    }
    if samples.len() < MIN_PER_BAND {
        return Err(FitError::TooFew(samples.len()));
    }
    let mut notes = Vec::new();
    // The others' merges are not noted: their table shows where their bands start.
    let others = fit_bands(samples.iter(), edges, (false, true), "others", &mut Vec::new())?;
    let mut groups: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        groups.entry(s.mechanism.as_str()).or_default().push(s);
    }
    let mut mechanisms = Vec::new();
    for (m, group) in groups {
        if group.len() < MIN_PER_BAND {
            notes.push(format!(
                "{m}: {} size(s), too few for bands of its own (it takes the others')",
                group.len()
            ));
            continue;
        }
        let bands = fit_bands(group.into_iter(), edges, (factors, false), m, &mut notes)?;
        mechanisms.push((m.to_string(), bands));
    }
    Ok((SizeCorrection { others, mechanisms, fitted_on }, notes))
}

/// One set of bands over `samples` (at least [`MIN_PER_BAND`] of them), its merges noted
/// under `name`; the first band starts at 0 if `from_zero`, else at the lowest band with
/// sizes.
fn fit_bands<'a>(
    samples: impl Iterator<Item = &'a Sample>,
    edges: &[u64],
    (factors, from_zero): (bool, bool),
    name: &str,
    notes: &mut Vec<String>,
) -> Result<Bands, FitError> {
    // (lowest byte count, log ratios, the logs they come from), one entry per band.
    type Band<'a> = (u64, Vec<f64>, Vec<&'a str>);
    let mut bands: Vec<Band<'a>> = edges.iter().map(|&e| (e, Vec::new(), Vec::new())).collect();
    for s in samples {
        let b = edges.iter().rposition(|&e| e <= s.bytes).unwrap_or(0);
        bands[b].1.push((s.measured_us / s.model_us).ln());
        bands[b].2.push(&s.log);
    }
    let label = |lo: u64, hi: Option<u64>| match hi {
        Some(h) => format!("{} – {}", Bytes::new(lo), Bytes::new(h)),
        None => format!("from {}", Bytes::new(lo)),
    };
    // Empty bands first (a mechanism runs over a few bands only), silently: the band below
    // covers each one's sizes. Below the first band with sizes, a mechanism's bands do not
    // reach (its calls there take the others'); the others' reach down to 0.
    while bands.len() > 1 {
        let Some(i) = bands.iter().position(|b| b.1.is_empty()) else { break };
        bands.remove(i);
    }
    if from_zero {
        bands[0].0 = 0;
    }
    while let Some(i) = bands.iter().position(|b| b.1.len() < MIN_PER_BAND) {
        if bands.len() == 1 {
            break;
        }
        let (lo, hi) = (bands[i].0, bands.get(i + 1).map(|b| b.0));
        let n = bands[i].1.len();
        if i + 1 < bands.len() {
            let moved = std::mem::take(&mut bands[i].1);
            bands[i + 1].1.extend(moved);
            let logs = std::mem::take(&mut bands[i].2);
            bands[i + 1].2.extend(logs);
            bands[i + 1].0 = lo;
            bands.remove(i);
            notes.push(format!(
                "{name}: band {}: {n} size(s), merged into the band above",
                label(lo, hi)
            ));
        } else {
            let moved = bands.remove(i);
            bands[i - 1].1.extend(moved.1);
            bands[i - 1].2.extend(moved.2);
            notes.push(format!(
                "{name}: band {}: {n} size(s), merged into the band below",
                label(lo, hi)
            ));
        }
    }
    let mut factor = Vec::new();
    let mut residual = Vec::new();
    for (k, (lo, ratios, from)) in bands.iter().enumerate() {
        let data = Data::new(ratios.clone());
        let centre = if factors { data.median() } else { 0.0 };
        let mut spread = Data::new(ratios.iter().map(|l| (l - centre).abs()).collect::<Vec<_>>());
        let f = centre.exp();
        if !(CORRECTION_FACTOR_RANGE.0..=CORRECTION_FACTOR_RANGE.1).contains(&f) {
            let mut logs: Vec<&str> = from.clone();
            logs.sort_unstable();
            logs.dedup();
            return Err(FitError::OutOfRange {
                mechanism: name.to_string(),
                band: label(*lo, bands.get(k + 1).map(|b| b.0)),
                factor: f,
                logs: logs.join(", "),
            });
        }
        factor.push(f);
        // A residual past the cap is kept at the cap: the band is as wide as a profile holds.
        residual.push(spread.percentile(95).min(MAX_CORRECTION_RESIDUAL));
    }
    Ok(Bands { bands: bands.iter().map(|b| b.0).collect(), factor, residual })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(bytes: u64, measured: f64, model: f64) -> Sample {
        Sample {
            mechanism: "RING/SIMPLE".into(),
            bytes,
            measured_us: measured,
            model_us: model,
            log: "a.log".into(),
        }
    }

    #[test]
    fn a_band_far_off_the_model_is_refused_naming_its_logs() {
        // A flat log (50 µs at every size) against a model that grows with the size.
        let v: Vec<Sample> =
            (0..8).map(|i| s(1 << (20 + i), 50.0, 6000.0 * (i + 1) as f64)).collect();
        let e = fit(&v, &[0], true, vec!["flat.log".into()]).unwrap_err().to_string();
        assert!(
            e.contains("RING/SIMPLE") && e.contains("outside the 0.1-10") && e.contains("a.log"),
            "{e}"
        );
        // The model's own misfit, without factors, is an error band, not a refusal.
        assert!(fit(&v, &[0], false, vec!["flat.log".into()]).is_ok());
    }

    #[test]
    fn recovers_a_factor_per_band_and_ignores_an_outlier() {
        let mut v = Vec::new();
        for i in 0..6 {
            v.push(s(1 << i, 20.0, 10.0)); // small sizes: the model is 2x fast
            v.push(s((1 << 30) + i, 100.0, 125.0)); // large sizes: 0.8
        }
        v.push(s(4, 1000.0, 10.0)); // a glitch
        let (c, notes) = fit(&v, &[0, 1 << 20], true, vec!["x".into()]).unwrap();
        assert!(notes.is_empty());
        let k = c.bands_for("RING/SIMPLE", 1);
        assert!((k.factor[0] - 2.0).abs() < 1e-9 && (k.factor[1] - 0.8).abs() < 1e-9, "{c:?}");
        assert!(k.residual[1] < 1e-9);
        // Every other mechanism keeps the model as it is, with its misfit as the error band.
        assert_eq!(c.bands_for("TREE/LL", 1).factor, vec![1.0, 1.0]);
        assert!((c.others.residual[1] - 0.8f64.ln().abs()).abs() < 1e-9, "{c:?}");
        // Without factors, the residuals are the model's own misfit.
        let (u, _) = fit(&v, &[0, 1 << 20], false, vec!["x".into()]).unwrap();
        assert_eq!(u.bands_for("RING/SIMPLE", 1).factor, vec![1.0, 1.0]);
        assert!((u.bands_for("RING/SIMPLE", 1).residual[1] - 0.8f64.ln().abs()).abs() < 1e-9);
        // The same samples in another order give the same fit.
        let mut r = v.clone();
        r.reverse();
        assert_eq!(fit(&r, &[0, 1 << 20], true, vec!["x".into()]).unwrap().0, c);
    }

    #[test]
    fn each_mechanism_gets_its_own_factors() {
        // The same sizes: NVLSTree measured 2x the model, the ring 0.5x.
        let mut v = Vec::new();
        for i in 0..4 {
            v.push(Sample {
                mechanism: "NVLS_TREE/SIMPLE".into(),
                ..s((16 << 20) << i, 20.0, 10.0)
            });
            v.push(s((16 << 20) << i, 5.0, 10.0));
        }
        v.push(Sample { mechanism: "TREE/LL".into(), ..s(8, 30.0, 10.0) });
        let (c, notes) = fit(&v, &DEFAULT_BANDS, true, Vec::new()).unwrap();
        let at = |m: &str| c.apply(m, 64 << 20, 10.0).0;
        assert!((at("NVLS_TREE/SIMPLE") - 20.0).abs() < 1e-9, "{c:?}");
        assert!((at("RING/SIMPLE") - 5.0).abs() < 1e-9, "{c:?}");
        // Below the sizes NVLSTree was fitted on, its factor does not reach.
        assert!((c.apply("NVLS_TREE/SIMPLE", 8, 10.0).0 - 10.0).abs() < 1e-9, "{c:?}");
        // One TREE/LL size is too few for bands: it and every unseen mechanism take factor 1.
        assert!((at("TREE/LL") - 10.0).abs() < 1e-9 && (at("RING/LL128") - 10.0).abs() < 1e-9);
        assert!(notes.iter().any(|n| n.starts_with("TREE/LL: 1 size(s)")), "{notes:?}");
        assert_eq!(c.mechanisms.len(), 2);
    }

    #[test]
    fn thin_bands_merge_and_too_little_data_fails() {
        // 32 MiB – 1 GiB: three sizes in each of the top two bands, none below.
        let v: Vec<Sample> = (0..6).map(|i| s((32 << 20) << i, 11.0, 10.0)).collect();
        let (c, notes) = fit(&v, &DEFAULT_BANDS, true, Vec::new()).unwrap();
        // The ring's bands start where its sizes do; below, the others' (from 0).
        assert_eq!(c.bands_for("RING/SIMPLE", 1 << 30).bands, vec![16 << 20, 256 << 20]);
        assert_eq!(c.bands_for("RING/SIMPLE", 8).bands, vec![0, 256 << 20]);
        assert_eq!(c.bands_for("RING/SIMPLE", 8).factor, vec![1.0, 1.0]);
        // The three empty bands below 32 MiB go silently.
        assert!(notes.is_empty(), "{notes:?}");
        // Two sizes at 8-16 B: too few for a band, they join the one above (from 32 MiB).
        let w: Vec<Sample> = (0..2).map(|i| s(8 << i, 11.0, 10.0)).chain(v.clone()).collect();
        let (c, notes) = fit(&w, &DEFAULT_BANDS, true, Vec::new()).unwrap();
        assert_eq!(c.bands_for("RING/SIMPLE", 8).bands, vec![0, 256 << 20]);
        assert_eq!(
            notes,
            ["RING/SIMPLE: band 0 B – 16 MiB: 2 size(s), merged into the band above"]
        );
        let e = fit(&v[..2], &DEFAULT_BANDS, true, Vec::new()).unwrap_err();
        assert_eq!(e, FitError::TooFew(2));
        let e = fit(&[s(8, 0.0, 1.0), s(16, 1.0, 1.0), s(32, 1.0, 1.0)], &[0], true, Vec::new());
        assert!(e.unwrap_err().to_string().contains("times must be positive"));
    }
}
