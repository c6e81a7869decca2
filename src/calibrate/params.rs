//! Fitting the model's physical parameters to measured times: the effective bandwidth and
//! per-step latency of each link class, the call overhead, and the NVLink efficiency of the
//! LL and LL128 protocols.
//!
//! Robust least squares on log time: the cost is Huber's on ln(model / measured) (quadratic
//! within [`HUBER_DELTA`], linear beyond, so a few odd sizes cannot pull the fit), minimised by
//! Levenberg–Marquardt over the logarithm of each parameter's multiplier, within bounds, with
//! forward-difference derivatives (one simulation of the fit set per parameter, run in
//! parallel; the result does not depend on the thread count).
//!
//! Before fitting, each candidate is checked against the data, in order: one that no fitted time
//! depends on, or whose effect on the fitted times is (nearly) that of candidates already taken,
//! is not determined by this data. Asked for by name it is an error; among the defaults it is
//! left as the base profile has it, and the caller says so.

use rayon::prelude::*;

use crate::collective::TimingParams;
use crate::comm::{HopClass, Proto};
use crate::config::{MAX_BANDWIDTH_FRACTION, MIN_BANDWIDTH_FRACTION};
use crate::hw::Arch;
use crate::units::Time;

/// Where Huber's cost turns from quadratic to linear, in log time (about 5 %).
pub const HUBER_DELTA: f64 = 0.05;
/// Least RMS sensitivity, d ln(time) / d ln(parameter) over the fit sizes, for a parameter to
/// count as determined (0.01: doubling it moves the fitted times by 0.7 % RMS).
pub const MIN_SENSITIVITY: f64 = 0.01;
/// Least fraction of a candidate's effect left once the effects of the candidates already taken
/// are projected out. Below it the data can hardly tell them apart: 0.3 is a variance inflation
/// factor of 1/0.3² ≈ 11, just past the usual rule of thumb of 10.
pub const MIN_INDEPENDENCE: f64 = 0.3;
/// Weight of the prior that keeps each parameter near the base profile's value: moving one by
/// a factor of 2 costs as much as [`PRIOR_SIZES`] sizes each off by [`HUBER_DELTA`]. Without
/// it, a model that misfits some sizes (an algorithm collsim times poorly) trades parameters
/// that act alike against each other to extremes — the call overhead to nothing and the
/// network latency up tenfold on an A3 Mega all_reduce — and the result carries over worse.
///
/// 32 is one nccl-tests log's sizes (8 B – 16 GiB by factors of 2 is 32 of them): where the
/// model misses a mechanism, its errors are systematic across a log, so a log is one piece of
/// evidence rather than 32, and a parameter moves by 2× only when more than one log asks for
/// it. Measured by leave-one-cluster-out (`validate --manifest`, issue #13): calibrating on
/// the other clusters of a GPU generation, a prior of 2 sizes gave a held-out median of 20.1 %
/// (the uncalibrated profile: 9.0 %) — the fit sent NVLink latencies down to 50 ns and the call
/// cost to 20 µs on A100 — and 32 gives 10.9 %.
pub const PRIOR_SIZES: f64 = 32.0;
/// Step of the forward differences, in log multiplier (5 %).
const STEP: f64 = 0.05;
/// Most Levenberg–Marquardt iterations.
const MAX_ITERATIONS: usize = 12;

/// A parameter of a profile that `calibrate` can fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `bandwidth.<class>`: effective bandwidth as a fraction of the topology's figure.
    Bandwidth(HopClass),
    /// `overhead.call`.
    CallOverhead,
    /// `step_latency.<class>`: its LL, LL128 and Simple latencies, scaled together.
    StepLatency(HopClass),
    /// `gpu.<arch>.nvlink_efficiency.<proto>`.
    NvlinkEfficiency(Arch, Proto),
}

impl Param {
    /// The candidates fitted by default for GPUs of `arch`, in the order they are checked.
    pub fn candidates(arch: Arch) -> Vec<Param> {
        let mut v = vec![
            Param::Bandwidth(HopClass::Net),
            Param::Bandwidth(HopClass::Nvlink),
            Param::Bandwidth(HopClass::Pcie),
            Param::CallOverhead,
        ];
        v.extend(HopClass::ALL.iter().rev().map(|&c| Param::StepLatency(c)));
        v.push(Param::NvlinkEfficiency(arch, Proto::LL128));
        v.push(Param::NvlinkEfficiency(arch, Proto::LL));
        v
    }

    /// Its name in the profile ("bandwidth.net", "gpu.hopper.nvlink_efficiency.LL128").
    pub fn name(self) -> String {
        match self {
            Param::Bandwidth(c) => format!("bandwidth.{}", c.name()),
            Param::CallOverhead => "overhead.call".into(),
            Param::StepLatency(c) => format!("step_latency.{}", c.name()),
            Param::NvlinkEfficiency(a, p) => {
                format!("gpu.{}.nvlink_efficiency.{}", a.name(), proto_key(p))
            }
        }
    }

    /// Its value in `p`, for reports ("0.93", "28 us", "LL 2.7 us, LL128 4 us, Simple 14 us").
    pub fn show(self, p: &TimingParams) -> String {
        match self {
            Param::Bandwidth(c) => format!("{:.3}", p.bandwidth[c as usize]),
            Param::CallOverhead => p.call_overhead.to_string(),
            Param::StepLatency(c) => Proto::ALL
                .iter()
                .map(|&q| format!("{} {}", proto_key(q), p.step(c, q)))
                .collect::<Vec<_>>()
                .join(", "),
            Param::NvlinkEfficiency(a, q) => {
                format!("{:.3}", p.gpu(a).nvlink_efficiency[q as usize])
            }
        }
    }

    /// The base value the multiplier applies to (for a step latency, the largest of the three).
    fn base_value(self, base: &TimingParams) -> f64 {
        match self {
            Param::Bandwidth(c) => base.bandwidth[c as usize],
            Param::CallOverhead => base.call_overhead.as_us(),
            Param::StepLatency(c) => {
                Proto::ALL.iter().map(|&q| base.step(c, q).as_us()).fold(0.0, f64::max)
            }
            Param::NvlinkEfficiency(a, q) => base.gpu(a).nvlink_efficiency[q as usize],
        }
    }

    /// Bounds on the log multiplier.
    fn bounds(self, base: &TimingParams) -> (f64, f64) {
        let v = self.base_value(base);
        let (lo, hi) = match self {
            Param::Bandwidth(_) => (MIN_BANDWIDTH_FRACTION, MAX_BANDWIDTH_FRACTION),
            Param::CallOverhead => (0.5, 1000.0),
            // No higher than a profile may hold (crate::config::MAX_PROFILE_LATENCY).
            Param::StepLatency(_) => {
                (v / 50.0, (v * 50.0).min(crate::config::MAX_PROFILE_LATENCY.as_us()))
            }
            Param::NvlinkEfficiency(_, q) => (MIN_BANDWIDTH_FRACTION, q.payload_efficiency()),
        };
        let (lo, hi) = ((lo / v).ln(), (hi / v).ln());
        (lo.min(0.0), hi.max(0.0))
    }

    /// Sets it in `out` to its value in `base` times e^`x`.
    fn set(self, base: &TimingParams, out: &mut TimingParams, x: f64) {
        let m = x.exp();
        // Times keep whole nanoseconds, so a written profile reads back to the same model.
        let time = |t: Time| Time::from_us_f64((t.as_us() * m * 1e3).round() / 1e3);
        match self {
            Param::Bandwidth(c) => {
                out.bandwidth[c as usize] = round6(base.bandwidth[c as usize] * m)
            }
            Param::CallOverhead => out.call_overhead = time(base.call_overhead),
            Param::StepLatency(c) => {
                for q in Proto::ALL {
                    out.step_latency[c as usize][q as usize] = time(base.step(c, q));
                }
            }
            Param::NvlinkEfficiency(a, q) => {
                let e = round6(base.gpu(a).nvlink_efficiency[q as usize] * m);
                if !out.gpu.iter().any(|(b, _)| *b == a) {
                    out.gpu.push((a, out.gpu_default));
                    out.gpu.sort_by_key(|(b, _)| *b);
                }
                let g = out.gpu.iter_mut().find(|(b, _)| *b == a).map(|(_, g)| g);
                if let Some(g) = g {
                    g.nvlink_efficiency[q as usize] = e;
                }
            }
        }
    }
}

/// A protocol's key in profiles ("LL", "LL128", "Simple").
pub fn proto_key(q: Proto) -> &'static str {
    match q {
        Proto::LL => "LL",
        Proto::LL128 => "LL128",
        Proto::Simple => "Simple",
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Parses a `--fit` list: parameter names as [`Param::name`] gives them, for GPUs of `arch`.
pub fn parse_list(list: &str, arch: Arch) -> Result<Vec<Param>, String> {
    check_list(list)?;
    let all = Param::candidates(arch);
    let mut out = Vec::new();
    for word in list.split(',').map(str::trim) {
        if word == "none" {
            continue;
        }
        let p = all.iter().find(|p| p.name() == word).ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|p| p.name()).collect();
            format!("--fit {word}: unknown parameter (known: none, {})", names.join(", "))
        })?;
        if !out.contains(p) {
            out.push(*p);
        }
    }
    Ok(out)
}

/// The shape of a `--fit` list, before any parameter is looked up: no empty entry, none twice,
/// and "none" alone.
pub fn check_list(list: &str) -> Result<(), String> {
    let words: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(i) = words.iter().position(|w| w.is_empty()) {
        return Err(format!("--fit {list:?}: entry {} is empty (a stray comma?)", i + 1));
    }
    if let Some(w) = words.iter().enumerate().find_map(|(i, w)| words[..i].contains(w).then_some(w))
    {
        return Err(format!("--fit {list}: {w} is named twice"));
    }
    if words.len() > 1 && words.contains(&"none") {
        return Err(format!(
            "--fit {list}: \"none\" fits no parameter and cannot be given with others"
        ));
    }
    Ok(())
}

/// The result of a fit.
#[derive(Debug, Clone)]
pub struct ParamFit {
    /// The base profile with the fitted parameters set.
    pub params: TimingParams,
    /// The parameters fitted, in candidate order.
    pub fitted: Vec<Param>,
    /// Candidates the data does not determine, each with the reason; left at the base value.
    pub held: Vec<(Param, String)>,
    /// Levenberg–Marquardt iterations taken.
    pub iterations: usize,
    /// Huber cost per size before and after.
    pub cost: (f64, f64),
    /// Fitted parameters that ended at a bound of their range: the data asked for more than
    /// the model allows.
    pub at_bound: Vec<AtBound>,
}

/// A fitted parameter held at a bound of its range.
#[derive(Debug, Clone)]
pub struct AtBound {
    /// The parameter.
    pub param: Param,
    /// At its upper bound (else its lower).
    pub upper: bool,
    /// Each size's pull on it: the Huber-weighted gradient of the cost, in the order of the
    /// measured times (positive: the size asks for a lower value).
    pub pull: Vec<f64>,
}

/// Why no fit can be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamFitError {
    /// A parameter asked for by name that the data does not determine.
    #[error("{name} is not determined by the fit data: {why}")]
    Undetermined {
        /// The parameter.
        name: String,
        /// Why.
        why: String,
    },
    /// The measured and model times are not comparable.
    #[error("{0}")]
    BadData(String),
}

fn huber(r: f64) -> f64 {
    let a = r.abs();
    if a <= HUBER_DELTA { 0.5 * r * r } else { HUBER_DELTA * (a - 0.5 * HUBER_DELTA) }
}

fn huber_weight(r: f64) -> f64 {
    let a = r.abs();
    if a <= HUBER_DELTA { 1.0 } else { HUBER_DELTA / a }
}

/// Fits `candidates` of `base` to `measured` times (µs), where `eval` simulates the same sizes
/// under a profile. With `required`, every candidate must be determined by the data.
pub fn fit<F>(
    base: &TimingParams,
    candidates: &[Param],
    required: bool,
    measured: &[f64],
    eval: F,
) -> Result<ParamFit, ParamFitError>
where
    F: Fn(&TimingParams) -> Vec<f64> + Sync,
{
    if let Some(t) = measured.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
        return Err(ParamFitError::BadData(format!(
            "a measured time of {t} us: times must be positive"
        )));
    }
    let resid = |p: &TimingParams| -> Result<Vec<f64>, ParamFitError> {
        let model = eval(p);
        if model.len() != measured.len() {
            return Err(ParamFitError::BadData(format!(
                "{} model times for {} measured ones",
                model.len(),
                measured.len()
            )));
        }
        model
            .iter()
            .zip(measured)
            .map(|(m, t)| {
                if m.is_finite() && *m > 0.0 {
                    Ok((m / t).ln())
                } else {
                    Err(ParamFitError::BadData(format!("the model gave {m} us for a call")))
                }
            })
            .collect()
    };
    // Prior: k·x² per parameter, k·ln²2 = PRIOR_SIZES·δ²/2.
    let k = PRIOR_SIZES * HUBER_DELTA * HUBER_DELTA / (2.0 * std::f64::consts::LN_2.powi(2));
    let cost = |r: &[f64]| r.iter().map(|&x| huber(x)).sum::<f64>();
    let prior = |x: &[f64]| x.iter().map(|v| k * v * v).sum::<f64>();
    let at = |params: &[Param], x: &[f64]| {
        let mut p = base.clone();
        for (q, &v) in params.iter().zip(x) {
            q.set(base, &mut p, v);
        }
        p
    };
    // d r / d x_j by a forward (or, at an upper bound, backward) difference at x.
    let jacobian =
        |params: &[Param], x: &[f64], r: &[f64]| -> Result<Vec<Vec<f64>>, ParamFitError> {
            params
                .par_iter()
                .enumerate()
                .map(|(j, q)| {
                    let (_, hi) = q.bounds(base);
                    let h = if x[j] + STEP <= hi { STEP } else { -STEP };
                    let mut y = x.to_vec();
                    y[j] += h;
                    let rj = resid(&at(params, &y))?;
                    Ok(rj.iter().zip(r).map(|(a, b)| (a - b) / h).collect())
                })
                .collect()
        };
    let n = measured.len() as f64;
    let r0 = resid(base)?;
    let cols = jacobian(candidates, &vec![0.0; candidates.len()], &r0)?;

    // Which candidates the data determines (Gram–Schmidt in candidate order).
    let mut fitted = Vec::new();
    let mut kept_cols: Vec<Vec<f64>> = Vec::new();
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let mut held = Vec::new();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for (q, col) in candidates.iter().zip(&cols) {
        let norm = dot(col, col).sqrt();
        let rms = norm / n.sqrt();
        if q.base_value(base) <= 0.0 {
            held.push((*q, "it is 0 in the base profile, and the fit scales it".to_string()));
            continue;
        }
        if rms < MIN_SENSITIVITY {
            held.push((
                *q,
                format!(
                    "the fitted times hardly depend on it (doubling it moves them by {:.2} % RMS)",
                    100.0 * (rms * std::f64::consts::LN_2).abs()
                ),
            ));
            continue;
        }
        let mut v = col.clone();
        for b in &basis {
            let c = dot(&v, b);
            v.iter_mut().zip(b).for_each(|(x, y)| *x -= c * y);
        }
        let left = dot(&v, &v).sqrt();
        if left / norm < MIN_INDEPENDENCE {
            let like = fitted
                .iter()
                .zip(&kept_cols)
                .map(|(p, c): (&Param, &Vec<f64>)| {
                    (p, (dot(col, c) / (norm * dot(c, c).sqrt())).abs())
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(p, _)| p.name())
                .unwrap_or_default();
            held.push((
                *q,
                format!(
                    "its effect on the fitted times is that of {like} ({:.0} % of it is not)",
                    100.0 * left / norm
                ),
            ));
            continue;
        }
        basis.push(v.iter().map(|x| x / left).collect());
        fitted.push(*q);
        kept_cols.push(col.clone());
    }
    if required && let Some((q, why)) = held.first() {
        return Err(ParamFitError::Undetermined { name: q.name(), why: why.clone() });
    }
    let c0 = cost(&r0);
    let per_size = |c: f64| c / n.max(1.0);
    if fitted.is_empty() {
        let c = per_size(c0);
        return Ok(ParamFit {
            params: base.clone(),
            fitted,
            held,
            iterations: 0,
            cost: (c, c),
            at_bound: Vec::new(),
        });
    }

    // Levenberg–Marquardt on the Huber-weighted normal equations.
    let dim = fitted.len();
    let bounds: Vec<(f64, f64)> = fitted.iter().map(|q| q.bounds(base)).collect();
    let mut x = vec![0.0; dim];
    let mut r = r0;
    let mut c = c0;
    let mut jac = kept_cols;
    let mut lambda = 1e-3;
    let mut iterations = 0;
    while iterations < MAX_ITERATIONS {
        iterations += 1;
        let w: Vec<f64> = r.iter().map(|&v| huber_weight(v)).collect();
        let a: Vec<Vec<f64>> = (0..dim)
            .map(|i| {
                (0..dim)
                    .map(|j| {
                        let d = if i == j { 2.0 * k } else { 0.0 };
                        d + jac[i]
                            .iter()
                            .zip(&jac[j])
                            .zip(&w)
                            .map(|((p, q), w)| p * q * w)
                            .sum::<f64>()
                    })
                    .collect()
            })
            .collect();
        let g: Vec<f64> = (0..dim)
            .map(|i| {
                2.0 * k * x[i]
                    + jac[i].iter().zip(&r).zip(&w).map(|((p, q), w)| p * q * w).sum::<f64>()
            })
            .collect();
        let mut accepted = None;
        for _ in 0..10 {
            let mut damped = a.clone();
            for i in 0..dim {
                damped[i][i] += lambda * a[i][i].max(1e-12);
            }
            let Some(step) = lu_solve(damped, g.iter().map(|v| -v).collect()) else {
                lambda *= 4.0;
                continue;
            };
            let y: Vec<f64> =
                (0..dim).map(|i| (x[i] + step[i]).clamp(bounds[i].0, bounds[i].1)).collect();
            if y.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-6) {
                break;
            }
            let ry = resid(&at(&fitted, &y))?;
            let cy = cost(&ry) + prior(&y);
            if cy < c {
                accepted = Some((y, ry, cy));
                lambda = (lambda / 3.0).max(1e-7);
                break;
            }
            lambda *= 4.0;
        }
        let Some((y, ry, cy)) = accepted else { break };
        let gain = c - cy;
        (x, r, c) = (y, ry, cy);
        if gain < 1e-4 * c.max(1e-12) {
            break;
        }
        jac = jacobian(&fitted, &x, &r)?;
    }
    let c = cost(&r);
    let w: Vec<f64> = r.iter().map(|&v| huber_weight(v)).collect();
    let at_bound = (0..dim)
        .filter_map(|i| {
            let (lo, hi) = bounds[i];
            let upper = hi > 0.0 && x[i] >= hi - 1e-9;
            let lower = lo < 0.0 && x[i] <= lo + 1e-9;
            (upper || lower).then(|| AtBound {
                param: fitted[i],
                upper,
                pull: jac[i].iter().zip(&r).zip(&w).map(|((p, q), w)| p * q * w).collect(),
            })
        })
        .collect();
    Ok(ParamFit {
        params: at(&fitted, &x),
        fitted,
        held,
        iterations,
        cost: (per_size(c0), per_size(c)),
        at_bound,
    })
}

/// Solves `a x = b` (`a` square, by rows) by LU decomposition with partial pivoting: in each
/// column the row of largest |pivot| (the first of equals), multipliers scaled by the pivot's
/// inverse, then forward and back substitution column by column. `None` where `a` is singular.
///
/// The normal equations of a fit have one row per fitted parameter (at most a dozen), so this
/// is all the linear algebra the fit needs; it keeps nalgebra's operation order
/// (`nalgebra::LU::solve`, 0.35), so fits are the bytes they were when it did this.
fn lu_solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let mut swaps = Vec::new();
    for i in 0..n {
        let mut piv = i;
        for j in i + 1..n {
            if a[j][i].abs() > a[piv][i].abs() {
                piv = j;
            }
        }
        let diag = a[piv][i];
        if diag == 0.0 {
            continue;
        }
        if piv != i {
            a.swap(i, piv);
            swaps.push((i, piv));
        }
        let inv = 1.0 / diag;
        for row in &mut a[i + 1..] {
            row[i] *= inv;
        }
        let (top, below) = a.split_at_mut(i + 1);
        let pivot_row = &top[i];
        for row in below {
            for k in i + 1..n {
                row[k] += -pivot_row[k] * row[i];
            }
        }
    }
    for &(i, p) in &swaps {
        b.swap(i, p);
    }
    for i in 0..n.saturating_sub(1) {
        let c = b[i];
        for j in i + 1..n {
            b[j] += -c * a[j][i];
        }
    }
    for i in (0..n).rev() {
        let d = a[i][i];
        if d == 0.0 {
            return None;
        }
        let c = b[i] / d;
        b[i] = c;
        for j in 0..i {
            b[j] += -c * a[j][i];
        }
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lu_solve_solves_and_refuses_singular_systems() {
        // Needs a row swap: the first pivot is 0.
        let a = vec![vec![0.0, 2.0, 1.0], vec![1.0, 1.0, 0.0], vec![3.0, 0.0, 1.0]];
        let x = [1.5, -2.0, 0.25];
        let b: Vec<f64> = a.iter().map(|r| r.iter().zip(&x).map(|(p, q)| p * q).sum()).collect();
        let got = super::lu_solve(a, b).unwrap();
        for (g, w) in got.iter().zip(x) {
            assert!((g - w).abs() < 1e-12, "{got:?}");
        }
        let singular = vec![vec![1.0, 2.0], vec![2.0, 4.0]];
        assert_eq!(super::lu_solve(singular, vec![1.0, 2.0]), None);
    }

    use super::*;
    use crate::config::{DEFAULT_PROFILE, parse_profile};

    fn base() -> TimingParams {
        parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap()
    }

    /// A toy model: each size's time is call + bytes / (bw × 100 GB/s), in µs.
    fn toy(sizes: &[f64]) -> impl Fn(&TimingParams) -> Vec<f64> + Sync + '_ {
        move |p: &TimingParams| {
            sizes.iter().map(|b| p.call_overhead.as_us() + b / (p.bandwidth[2] * 100e3)).collect()
        }
    }

    #[test]
    fn a_fit_pushed_to_a_bound_says_so_and_which_sizes_pushed() {
        // Measured at 3 x the base bandwidth, past the 2 x a profile may give.
        let sizes: Vec<f64> = (0..30).map(|i| 2f64.powi(i + 3)).collect();
        let mut truth = base();
        truth.bandwidth[2] = 3.0 * base().bandwidth[2];
        let model = toy(&sizes);
        let measured = model(&truth);
        let f = fit(&base(), &Param::candidates(Arch::Hopper), false, &measured, &model).unwrap();
        let b = f.at_bound.iter().find(|b| b.param == Param::Bandwidth(HopClass::Net)).unwrap();
        assert!(b.upper);
        assert_eq!(b.pull.len(), sizes.len());
        assert!(b.pull.iter().sum::<f64>() < 0.0, "the sizes ask for more");
        assert!((f.params.bandwidth[2] - MAX_BANDWIDTH_FRACTION).abs() < 1e-9);
    }

    #[test]
    fn recovers_bandwidth_and_overhead_and_holds_what_the_data_cannot_see() {
        let sizes: Vec<f64> = (0..30).map(|i| 2f64.powi(i + 3)).collect();
        let mut truth = base();
        truth.bandwidth[2] = 0.8;
        truth.call_overhead = Time::from_us_f64(40.0);
        let model = toy(&sizes);
        let mut measured = model(&truth);
        measured[5] *= 3.0; // one glitch: the robust cost shrugs it off
        let f = fit(&base(), &Param::candidates(Arch::Hopper), false, &measured, &model).unwrap();
        assert_eq!(f.fitted, vec![Param::Bandwidth(HopClass::Net), Param::CallOverhead]);
        assert!((f.params.bandwidth[2] - 0.8).abs() < 2e-3, "{}", f.params.bandwidth[2]);
        // 13x the base's 3.04 us: the prior (one log's worth) and the glitch hold it within 3 %.
        assert!((f.params.call_overhead.as_us() - 40.0).abs() < 1.2, "{}", f.params.call_overhead);
        // What cost is left is mostly the glitch's: Huber's linear arm at ln 3, over 30 sizes.
        let glitch = HUBER_DELTA * (3f64.ln() - HUBER_DELTA / 2.0) / 30.0;
        assert!(f.cost.1 < 1.3 * glitch && f.cost.0 > 5.0 * glitch, "{:?}", f.cost);
        // NVLink, PCIe, latencies and efficiencies do not enter the toy model.
        assert_eq!(f.held.len(), Param::candidates(Arch::Hopper).len() - 2);
        assert!(f.held.iter().all(|(_, why)| why.starts_with("the fitted times hardly depend")));
        // Asked for by name, a parameter the data cannot see is an error.
        let e = fit(&base(), &[Param::Bandwidth(HopClass::Pcie)], true, &measured, &model);
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("bandwidth.pcie is not determined by the fit data"), "{e}");
        // Deterministic.
        let g = fit(&base(), &Param::candidates(Arch::Hopper), false, &measured, &model).unwrap();
        assert_eq!(g.params, f.params);
    }

    #[test]
    fn collinear_parameters_are_told_apart_or_held() {
        // Only large sizes: the overhead is invisible, and NVLink bandwidth acts exactly as the
        // network's does in this model.
        let sizes: Vec<f64> = (0..8).map(|i| 2f64.powi(i + 28)).collect();
        let model = |p: &TimingParams| -> Vec<f64> {
            sizes.iter().map(|b| b / (p.bandwidth[2] * p.bandwidth[0] * 100e3)).collect()
        };
        let measured: Vec<f64> = sizes.iter().map(|b| b / 90e3).collect();
        let cands = [Param::Bandwidth(HopClass::Net), Param::Bandwidth(HopClass::Nvlink)];
        let f = fit(&base(), &cands, false, &measured, model).unwrap();
        assert_eq!(f.fitted, vec![Param::Bandwidth(HopClass::Net)]);
        assert!(f.held[0].1.contains("that of bandwidth.net"), "{:?}", f.held);
        assert!((f.params.bandwidth[2] - 0.9).abs() < 2e-3);
        let e = fit(&base(), &cands, true, &measured, model).unwrap_err();
        assert!(e.to_string().starts_with("bandwidth.nvlink is not determined"), "{e}");
    }

    #[test]
    fn lists_parse() {
        let v = parse_list("bandwidth.net, overhead.call", Arch::Ampere).unwrap();
        assert_eq!(v, vec![Param::Bandwidth(HopClass::Net), Param::CallOverhead]);
        // "none" alone, no empty entry, nothing twice.
        assert!(parse_list("bandwidth.net,none", Arch::Ampere).is_err());
        assert!(parse_list("bandwidth.net,", Arch::Ampere).is_err());
        assert!(parse_list("overhead.call,overhead.call", Arch::Ampere).is_err());
        assert!(parse_list("none", Arch::Ampere).unwrap().is_empty());
        let e = parse_list("bandwith.net", Arch::Ampere).unwrap_err();
        assert!(e.starts_with("--fit bandwith.net: unknown parameter (known: none, bandwidth.net"));
        let v = parse_list("gpu.ampere.nvlink_efficiency.LL128", Arch::Ampere).unwrap();
        assert_eq!(v, vec![Param::NvlinkEfficiency(Arch::Ampere, Proto::LL128)]);
    }
}
