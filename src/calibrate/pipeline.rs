//! `collsim calibrate` from logs, end to end: simulate every log with the base profile, fit the
//! physical parameters on the fit logs, fit the size bands on what is left, and measure every
//! log (fit and held out) at each stage. The CLI reads the logs; [`crate::report::calibration`]
//! formats the result.

use super::fit::{self, Sample};
use super::nccl_log::LogTest;
use super::validate::{self, Validation};
use super::{params, write};
use crate::collective::{Collective, Mode, SizeCorrection, TimingParams};
use crate::comm::Communicator;
use crate::config::Scenario;
use crate::hw::Cluster;

/// One log to calibrate on or check.
#[derive(Debug, Clone)]
pub struct LogInput {
    /// Its name in reports (the path, with `@collective` when one test of several was picked).
    pub name: String,
    /// Its results.
    pub test: LogTest,
    /// Its collective.
    pub coll: Collective,
    /// Fit on it (`Some(true)`), hold it out (`Some(false)`), or decide by the default rule.
    pub is_fit: Option<bool>,
    /// The cluster it ran on (its own layout when its ranks differ from the flags').
    pub scenario: Scenario,
}

/// How one log compares at each stage: (median, p95) |error| % for the base model, the fitted
/// parameters, and the whole calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct LogErrors {
    /// The log's name.
    pub name: String,
    /// Fitted on (else held out).
    pub is_fit: bool,
    /// Ranks it ran on.
    pub ranks: usize,
    /// Sizes compared.
    pub sizes: usize,
    /// Base model, fitted parameters, with the size bands.
    pub errors: [(f64, f64); 3],
}

/// A calibration's results.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The scenario the flags describe.
    pub machine: String,
    /// Nodes and GPUs per node of the first log (each log runs on its own layout).
    pub nodes: usize,
    /// GPUs per node.
    pub gpus_per_node: usize,
    /// The logs fitted on.
    pub fitted_on: Vec<String>,
    /// Sizes fitted on.
    pub fit_sizes: usize,
    /// Logs only checked.
    pub checked: usize,
    /// The base profile.
    pub base: TimingParams,
    /// The physical-parameter fit.
    pub params: params::ParamFit,
    /// The size bands.
    pub correction: SizeCorrection,
    /// Whether the band factors were fitted (else kept at 1).
    pub factors: bool,
    /// What the band fit noted (merged bands).
    pub notes: Vec<String>,
    /// Fitted parameters held at a bound of their range, each with the fit logs that pull it
    /// past the bound: warnings.
    pub warnings: Vec<String>,
    /// Every log's errors.
    pub logs: Vec<LogErrors>,
    /// The profile written: the base profile's text with the fitted values.
    pub profile: String,
}

/// (median, p95) |error| %.
fn errors(v: &Validation) -> (f64, f64) {
    (v.median_abs_error_pct, v.p95_abs_error_pct)
}

/// Calibrates `base` (named `base_name`, its text `base_text`, kept in the written profile) on
/// `logs`. Without an explicit choice, logs at another rank count than the first are held out,
/// and among the rest every second one. `fit_list` names the physical parameters to fit (None:
/// every one the data determines); `factors` false keeps the band factors at 1. Errors are one
/// line.
#[allow(clippy::too_many_arguments)]
pub fn calibrate(
    s: &Scenario,
    base_name: &str,
    base_text: &str,
    logs: Vec<LogInput>,
    fit_list: Option<&str>,
    factors: bool,
    mode: Mode,
) -> Result<Calibration, String> {
    let mut base = crate::config::parse_profile(base_name, base_text).map_err(|e| e.to_string())?;
    base.correction = None;
    let (candidates, required) = match fit_list {
        Some(l) => (params::parse_list(l, s.node.gpu.arch)?, true),
        None => (params::Param::candidates(s.node.gpu.arch), false),
    };
    struct Log {
        name: String,
        test: LogTest,
        coll: Collective,
        is_fit: bool,
        cluster: Cluster,
        comm: Communicator,
        ranks: usize,
    }
    // The layout the report names: the first log's (each log runs on its own).
    let (nodes, gpus_per_node) = logs
        .first()
        .map_or((s.nodes, s.gpus_per_node), |l| (l.scenario.nodes, l.scenario.gpus_per_node));
    let mut read = Vec::new();
    let mut first_ranks = None;
    let mut same_count = 0usize;
    for l in logs {
        let ranks = l.scenario.nodes * l.scenario.gpus_per_node;
        let is_fit = l.is_fit.unwrap_or_else(|| {
            let first = *first_ranks.get_or_insert(ranks);
            let fit = first == ranks && same_count.is_multiple_of(2);
            same_count += usize::from(first == ranks);
            fit
        });
        let (cluster, comm, _) = crate::sim::build(&l.scenario).map_err(|e| e.to_string())?;
        read.push(Log { name: l.name, test: l.test, coll: l.coll, is_fit, cluster, comm, ranks });
    }
    let compare = |l: &Log, p: &TimingParams| {
        validate::compare(&l.cluster, &l.comm, &l.test, l.coll, p, mode)
            .map_err(|e| format!("{}: {e}", l.name))
    };
    let before: Vec<Validation> =
        read.iter().map(|l| compare(l, &base)).collect::<Result<_, _>>()?;
    let fit_logs: Vec<&Log> = read.iter().filter(|l| l.is_fit).collect();
    let fitted_on: Vec<String> = fit_logs.iter().map(|l| l.name.clone()).collect();
    let measured: Vec<f64> =
        fit_logs.iter().flat_map(|l| l.test.rows.iter().map(|r| r.oop_time_us)).collect();
    let eval = |p: &TimingParams| -> Vec<f64> {
        fit_logs
            .iter()
            .flat_map(|l| match compare(l, p) {
                Ok(v) => v.rows.iter().map(|r| r.predicted_time_us).collect(),
                Err(_) => vec![f64::NAN; l.test.rows.len()],
            })
            .collect()
    };
    let pf = params::fit(&base, &candidates, required, &measured, eval)
        .map_err(|e| format!("calibrate: cannot fit: {e}"))?;
    let middle: Vec<Validation> =
        read.iter().map(|l| compare(l, &pf.params)).collect::<Result<_, _>>()?;
    let samples: Vec<Sample> = read
        .iter()
        .zip(&middle)
        .filter(|(l, _)| l.is_fit)
        .flat_map(|(l, v)| v.rows.iter().map(move |r| (l, r)))
        .map(|(l, r)| Sample {
            log: l.name.clone(),
            mechanism: format!("{}/{}", r.algo, r.proto),
            bytes: r.size_bytes,
            measured_us: r.measured_time_us,
            model_us: r.predicted_time_us,
        })
        .collect();
    let (correction, notes) = fit::fit(&samples, &fit::DEFAULT_BANDS, factors, fitted_on.clone())
        .map_err(|e| format!("calibrate: cannot fit: {e}"))?;
    // A parameter the fit pushed to a bound: which logs pull it there (their sizes' summed
    // pull points past the bound).
    let warnings: Vec<String> = pf
        .at_bound
        .iter()
        .map(|b| {
            let mut at = 0;
            let pulling: Vec<&str> = fit_logs
                .iter()
                .filter_map(|l| {
                    let n = l.test.rows.len();
                    let pull: f64 = b.pull.get(at..at + n).map_or(0.0, |p| p.iter().sum());
                    at += n;
                    let past = if b.upper { pull < 0.0 } else { pull > 0.0 };
                    past.then_some(l.name.as_str())
                })
                .collect();
            format!(
                "{} is fitted to the {} bound of its range ({}): {} ask{} for {} than the model allows; check that {} ran on the setup given (topology, nodes, NCCL version)",
                b.param.name(),
                if b.upper { "upper" } else { "lower" },
                b.param.show(&pf.params),
                if pulling.is_empty() { "the fit logs".to_string() } else { pulling.join(", ") },
                if pulling.len() == 1 { "s" } else { "" },
                if b.upper { "more" } else { "less" },
                if pulling.len() == 1 { "it" } else { "they" },
            )
        })
        .collect();
    let mut fitted = pf.params.clone();
    fitted.correction = Some(correction.clone());
    let mut out_logs = Vec::new();
    for ((l, b), mid) in read.iter().zip(&before).zip(&middle) {
        let after = compare(l, &fitted)?;
        out_logs.push(LogErrors {
            name: l.name.clone(),
            is_fit: l.is_fit,
            ranks: l.ranks,
            sizes: b.rows.len(),
            errors: [errors(b), errors(mid), errors(&after)],
        });
    }
    // The setup it holds for: the machine's, and the NCCL release the first fit log names (else
    // that of the tables the fit ran with).
    let tables =
        crate::comm::env::NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map(|e| e.version.tables().to_string())
            .unwrap_or_default();
    let setup = crate::collective::FittedOn {
        topology: s.node.name.clone(),
        gpu: s.node.gpu.model.name.clone(),
        nccl: fit_logs.first().and_then(|l| l.test.setup.nccl_version.clone()).unwrap_or(tables),
    };
    let name = format!("{}-calibrated", s.node.name);
    let source =
        format!("{} calibrated by collsim calibrate on {}", base.name, fitted_on.join(", "));
    let profile = write::write(
        base_text,
        &write::Fitted {
            name: &name,
            source: &source,
            base: &base,
            params: &pf.params,
            fitted: &pf.fitted,
            held: &pf.held,
            correction: &correction,
            fitted_on: &setup,
        },
    )
    .map_err(|e| format!("{base_name}: {e}"))?;
    Ok(Calibration {
        machine: s.node.name.clone(),
        nodes,
        gpus_per_node,
        checked: read.len() - fitted_on.len(),
        fitted_on,
        fit_sizes: measured.len(),
        base,
        params: pf,
        correction,
        factors,
        notes,
        warnings,
        logs: out_logs,
        profile,
    })
}
