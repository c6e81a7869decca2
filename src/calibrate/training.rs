//! The model's accuracy over published training runs (`collsim validate --runs`): every run of
//! a CSV replayed as the scenario its row describes, its step against the measured one, per
//! source and per weak-scaling series (how much of the measured loss of per-GPU throughput
//! from the series' smallest run the model predicts), pooled, and leave-one-source-out.
//!
//! A row's columns are the metadata of [`META`] and scenario keys (`cluster.nodes`,
//! `workload.parallel.tp`, …) as `--sweep` writes them: a cell sets its key, an empty cell
//! leaves it unset, and the scenario is read by the same parser as a file, so an error names the
//! row's line and the key.

use std::collections::BTreeMap;

use serde::Serialize;

use super::validate::summary;
use crate::collective::{Mode, TimingParams};
use crate::config::{self, Scenario};

/// The columns that are not scenario keys: where the run comes from (`source`, the unit
/// leave-one-source-out leaves out), the weak-scaling series it belongs to (empty: none), its
/// name, what was measured (seconds a step, or tokens a second over all GPUs), and where the
/// figure was published and what was inferred.
pub const META: [&str; 7] =
    ["source", "series", "run", "step_s", "tokens_per_s", "provenance", "note"];

/// What a run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Measured {
    /// Seconds a step.
    Step(f64),
    /// Tokens a second over all GPUs.
    TokensPerS(f64),
}

/// One row of a runs CSV.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its line in the file (1-based).
    pub line: usize,
    /// Where it was published (leave-one-source-out leaves out every run of one source).
    pub source: String,
    /// Its weak-scaling series, if any.
    pub series: Option<String>,
    /// Its name.
    pub run: String,
    /// What was measured.
    pub measured: Measured,
    /// The scenario the row describes.
    pub scenario: Scenario,
}

/// `name:line` with the position inside the generated scenario text taken out of `e`, which
/// the parser wrote as `name:line:L:C: …` (L and C are the generated text's, not the file's).
fn row_error(at: &str, e: &str) -> String {
    let rest = e.strip_prefix(at).and_then(|r| r.strip_prefix(':'));
    let Some(rest) = rest else { return format!("{at}: {e}") };
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(l), Some(c), Some(msg))
            if l.bytes().all(|b| b.is_ascii_digit()) && c.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{at}:{msg}")
        }
        _ => format!("{at}: {}", rest.trim_start()),
    }
}

/// A positive, finite number in column `what`.
fn positive(at: &str, what: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{at}: {what}: {v:?} is not a positive number")),
    }
}

/// Reads a runs CSV (`calibration/data/training/public.csv`'s layout; lines starting `#` are
/// comments). Errors name the file, the line and the column.
pub fn read_runs(name: &str, text: &str) -> Result<Vec<Run>, String> {
    let mut reader = csv::ReaderBuilder::new().comment(Some(b'#')).from_reader(text.as_bytes());
    let headers = reader.headers().map_err(|e| format!("{name}: {e}"))?.clone();
    let lines: Vec<&str> = text.lines().collect();
    // csv reports where it began reading a record, before the comments and blank lines it
    // skips: the record's own line is the first after them.
    let own_line = |from: u64| -> usize {
        let mut l = (from as usize).max(1);
        while lines.get(l - 1).is_some_and(|t| t.trim().is_empty() || t.starts_with('#')) {
            l += 1;
        }
        l
    };
    let header_line = own_line(1);
    let mut keys = Vec::new();
    let mut meta = BTreeMap::new();
    for (i, h) in headers.iter().enumerate() {
        let h = h.trim();
        if META.contains(&h) {
            if meta.insert(h, i).is_some() {
                return Err(format!("{name}:{header_line}: column {h:?} is given twice"));
            }
        } else if ["cluster.", "workload.", "nccl."].iter().any(|p| h.starts_with(p)) {
            if keys.iter().any(|(k, _)| k == h) {
                return Err(format!("{name}:{header_line}: column {h:?} is given twice"));
            }
            keys.push((h.to_string(), i));
        } else {
            return Err(format!(
                "{name}:{header_line}: column {h:?} is neither a scenario key (cluster.…, \
                 workload.…, nccl.…) nor one of {}",
                META.join(", ")
            ));
        }
    }
    for need in ["source", "run"] {
        if !meta.contains_key(need) {
            return Err(format!("{name}:{header_line}: no column {need:?}"));
        }
    }
    if !meta.contains_key("step_s") && !meta.contains_key("tokens_per_s") {
        return Err(format!("{name}:{header_line}: no column \"step_s\" or \"tokens_per_s\""));
    }
    let mut runs = Vec::new();
    for rec in reader.records() {
        let rec = rec.map_err(|e| {
            let line = own_line(e.position().map_or(1, |p| p.line()));
            format!("{name}:{line}: {e}")
        })?;
        let line = own_line(rec.position().map_or(1, |p| p.line()));
        let at = format!("{name}:{line}");
        let field = |k: &str| meta.get(k).and_then(|&i| rec.get(i)).unwrap_or("").trim();
        let measured = match (field("step_s"), field("tokens_per_s")) {
            ("", "") => return Err(format!("{at}: step_s: empty, and so is tokens_per_s")),
            (s, "") => Measured::Step(positive(&at, "step_s", s)?),
            ("", t) => Measured::TokensPerS(positive(&at, "tokens_per_s", t)?),
            _ => return Err(format!("{at}: step_s and tokens_per_s: give one of the two")),
        };
        for k in ["source", "run"] {
            if field(k).is_empty() {
                return Err(format!("{at}: {k}: empty"));
            }
        }
        let set: Vec<(String, String)> = keys
            .iter()
            .filter_map(|(k, i)| {
                let v = rec.get(*i).unwrap_or("").trim();
                (!v.is_empty()).then(|| (k.clone(), v.to_string()))
            })
            .collect();
        let scenario_text = config::set_keys("", &set).map_err(|e| format!("{at}: {e}"))?;
        let scenario = config::parse_scenario(&at, &scenario_text)
            .map_err(|e| row_error(&at, &e.to_string()))?;
        if scenario.ddp().is_none() || !scenario.jobs.is_empty() {
            return Err(format!(
                "{at}: workload.kind: a run is one training step (ddp, fsdp, zero, or a 3-D \
                 layout under ddp), not a collective sweep or [[job]]s"
            ));
        }
        runs.push(Run {
            line,
            source: field("source").to_string(),
            series: Some(field("series").to_string()).filter(|s| !s.is_empty()),
            run: field("run").to_string(),
            measured,
            scenario,
        });
    }
    if runs.is_empty() {
        return Err(format!("{name}: no runs"));
    }
    Ok(runs)
}

/// What the model says of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replayed {
    /// The simulated step, s.
    pub step_s: f64,
    /// Tokens a step over all GPUs (samples for a model without a sequence).
    pub tokens: f64,
    /// GPUs.
    pub gpus: usize,
}

/// Simulates `run`'s step under `params`. Errors name the run's line.
pub fn replay(
    name: &str,
    run: &Run,
    params: &TimingParams,
    mode: Mode,
) -> Result<Replayed, String> {
    let at = format!("{name}:{}", run.line);
    let (r, _) =
        crate::sim::simulate_ddp(&run.scenario, params, mode).map_err(|e| format!("{at}: {e}"))?;
    let spec = run.scenario.ddp().ok_or_else(|| format!("{at}: not a training step"))?;
    let seq = spec
        .sequence
        .or_else(|| crate::workload::models::default_sequence(&spec.model.name))
        .unwrap_or(1);
    let step_s = r.iteration_time_ms / 1e3;
    Ok(Replayed { step_s, tokens: r.samples_per_s * step_s * seq as f64, gpus: r.world })
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowFigure {
    /// Its line in the file.
    pub line: usize,
    /// Its source.
    pub source: String,
    /// Its series, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    /// Its name.
    pub run: String,
    /// GPUs.
    pub gpus: usize,
    /// The measured step, s (from tokens a second where that was measured).
    pub measured_step_s: f64,
    /// The simulated step, s.
    pub predicted_step_s: f64,
    /// predicted ÷ measured − 1, %.
    pub error_pct: f64,
    /// The step with its source held out: the simulated step times the scale fitted on the
    /// other sources, s.
    pub held_out_step_s: f64,
    /// The held-out step's error, %.
    pub held_out_error_pct: f64,
}

/// One point of a series: its per-GPU throughput over the series' first point's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// GPUs.
    pub gpus: usize,
    /// Measured tokens a second a GPU, over the first point's.
    pub measured_efficiency: f64,
    /// Simulated, likewise.
    pub predicted_efficiency: f64,
}

/// A weak-scaling series: how per-GPU throughput falls from its smallest run to its largest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesFigure {
    /// Its name.
    pub series: String,
    /// Its source.
    pub source: String,
    /// Its points by GPUs (the file's order among equal counts).
    pub points: Vec<SeriesPoint>,
    /// 1 − the largest run's measured efficiency, %.
    pub measured_loss_pct: f64,
    /// 1 − its simulated efficiency, %.
    pub predicted_loss_pct: f64,
    /// Predicted loss ÷ measured loss (None where nothing was measured lost).
    pub captured: Option<f64>,
}

/// A source's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceFigure {
    /// Its name.
    pub source: String,
    /// Its runs' |error|.
    #[serde(flatten)]
    pub stats: Stats,
    /// Median signed error, % (positive: the model is slow).
    pub median_error_pct: f64,
    /// measured ÷ predicted, the median over every other source's runs: the one scale
    /// leave-one-source-out fits.
    pub held_out_scale: f64,
    /// Its runs' |error| with that scale.
    pub held_out: Stats,
}

/// The accuracy over a runs file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainingAccuracy {
    /// Every run.
    pub runs: Vec<RowFigure>,
    /// Every source.
    pub sources: Vec<SourceFigure>,
    /// Every series of two or more runs.
    pub series: Vec<SeriesFigure>,
    /// Every run's |error|.
    pub pooled: Stats,
    /// Median signed error, %.
    pub pooled_median_error_pct: f64,
    /// Every run's |error| with its source held out.
    pub held_out: Stats,
    /// Series whose captured loss is within 0.8–1.25 of the measured, of those with a measured
    /// loss.
    pub series_captured: (usize, usize),
    /// Held out, by the classes a plan's error bands use ([`crate::plan::band`]): GPU
    /// generation and kind of step, kind of step and precision.
    pub by_class: Vec<ClassFigure>,
}

/// The held-out error of the runs of one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassFigure {
    /// Its name ("sm90 fsdp", "megatron bf16").
    pub class: String,
    /// Runs in it.
    pub runs: usize,
    /// Their median |held-out error| %.
    pub median_abs_error_pct: f64,
}

/// The classes [`crate::plan::band`] puts `run`'s step in.
fn classes_of(run: &Run) -> Vec<String> {
    let sm = run.scenario.node.gpu.model.sm;
    match run.scenario.ddp() {
        Some(spec) => crate::plan::band::training_classes(
            sm,
            crate::plan::band::step_kind(spec),
            spec.rate.precision(),
        ),
        None => Vec::new(),
    }
}

/// |error| over some runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// Runs.
    pub runs: usize,
    /// Median |error| %.
    pub median_abs_error_pct: f64,
    /// 95th percentile (nearest rank) |error| %.
    pub p95_abs_error_pct: f64,
}

impl Stats {
    /// Of these errors (%): NaN figures over none.
    pub fn of(errors: &[f64]) -> Stats {
        let (m, p) = summary(errors);
        Stats { runs: errors.len(), median_abs_error_pct: m, p95_abs_error_pct: p }
    }
}

/// The band of captured loss counted as right.
pub const CAPTURED_BAND: (f64, f64) = (0.8, 1.25);

/// The median of `v` (NaN when empty).
fn median(v: &[f64]) -> f64 {
    use statrs::statistics::{Data, Median};
    if v.is_empty() { f64::NAN } else { Data::new(v.to_vec()).median() }
}

/// The figures of `runs` as the model `replayed` them (the same order).
pub fn accuracy(runs: &[Run], replayed: &[Replayed]) -> TrainingAccuracy {
    let measured: Vec<f64> = runs
        .iter()
        .zip(replayed)
        .map(|(r, p)| match r.measured {
            Measured::Step(s) => s,
            Measured::TokensPerS(t) => p.tokens / t,
        })
        .collect();
    let error = |i: usize, scale: f64| 100.0 * (scale * replayed[i].step_s / measured[i] - 1.0);
    let mut sources: Vec<&str> = runs.iter().map(|r| r.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    // One scale per held-out source: the median measured ÷ predicted of the others' runs (1
    // where there are no others).
    let scale: BTreeMap<&str, f64> = sources
        .iter()
        .map(|&s| {
            let others: Vec<f64> = (0..runs.len())
                .filter(|&i| runs[i].source != s)
                .map(|i| measured[i] / replayed[i].step_s)
                .collect();
            (s, if others.is_empty() { 1.0 } else { median(&others) })
        })
        .collect();
    let rows: Vec<RowFigure> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let k = scale[r.source.as_str()];
            RowFigure {
                line: r.line,
                source: r.source.clone(),
                series: r.series.clone(),
                run: r.run.clone(),
                gpus: replayed[i].gpus,
                measured_step_s: measured[i],
                predicted_step_s: replayed[i].step_s,
                error_pct: error(i, 1.0),
                held_out_step_s: k * replayed[i].step_s,
                held_out_error_pct: error(i, k),
            }
        })
        .collect();
    let source_figures = sources
        .iter()
        .map(|&s| {
            let mine: Vec<&RowFigure> = rows.iter().filter(|r| r.source == s).collect();
            let e: Vec<f64> = mine.iter().map(|r| r.error_pct).collect();
            let held: Vec<f64> = mine.iter().map(|r| r.held_out_error_pct).collect();
            SourceFigure {
                source: s.to_string(),
                stats: Stats::of(&e),
                median_error_pct: median(&e),
                held_out_scale: scale[s],
                held_out: Stats::of(&held),
            }
        })
        .collect();
    let series = series_figures(runs, replayed, &measured);
    let captured = series.iter().filter_map(|s| s.captured).collect::<Vec<_>>();
    let within = captured.iter().filter(|&&c| c >= CAPTURED_BAND.0 && c <= CAPTURED_BAND.1).count();
    let all: Vec<f64> = rows.iter().map(|r| r.error_pct).collect();
    let held: Vec<f64> = rows.iter().map(|r| r.held_out_error_pct).collect();
    let classed: Vec<(Vec<String>, f64)> =
        runs.iter().zip(&held).map(|(r, &e)| (classes_of(r), e)).collect();
    let by_class = crate::plan::band::class_figures(&classed)
        .into_iter()
        .map(|(class, runs, median_abs_error_pct)| ClassFigure {
            class,
            runs,
            median_abs_error_pct,
        })
        .collect();
    TrainingAccuracy {
        by_class,
        pooled: Stats::of(&all),
        pooled_median_error_pct: median(&all),
        held_out: Stats::of(&held),
        runs: rows,
        sources: source_figures,
        series,
        series_captured: (within, captured.len()),
    }
}

/// The series of two or more runs, in the order their first run appears.
fn series_figures(runs: &[Run], replayed: &[Replayed], measured: &[f64]) -> Vec<SeriesFigure> {
    // A series is its name within its source.
    let mut order: Vec<(&str, &str)> = Vec::new();
    let mut members: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        if let Some(s) = r.series.as_deref() {
            let key = (r.source.as_str(), s);
            if !members.contains_key(&key) {
                order.push(key);
            }
            members.entry(key).or_default().push(i);
        }
    }
    order
        .into_iter()
        .filter_map(|key| {
            let name = key.1;
            let mut m = members[&key].clone();
            if m.len() < 2 {
                return None;
            }
            m.sort_by_key(|&i| replayed[i].gpus);
            // Tokens a second a GPU, measured and simulated.
            let rate = |i: usize, step: f64| replayed[i].tokens / step / replayed[i].gpus as f64;
            let (m0, p0) = (rate(m[0], measured[m[0]]), rate(m[0], replayed[m[0]].step_s));
            let points: Vec<SeriesPoint> = m
                .iter()
                .map(|&i| SeriesPoint {
                    gpus: replayed[i].gpus,
                    measured_efficiency: rate(i, measured[i]) / m0,
                    predicted_efficiency: rate(i, replayed[i].step_s) / p0,
                })
                .collect();
            let last = &points[points.len() - 1];
            let measured_loss = 100.0 * (1.0 - last.measured_efficiency);
            let predicted_loss = 100.0 * (1.0 - last.predicted_efficiency);
            Some(SeriesFigure {
                series: name.to_string(),
                source: runs[m[0]].source.clone(),
                captured: (measured_loss > 0.0).then(|| predicted_loss / measured_loss),
                measured_loss_pct: measured_loss,
                predicted_loss_pct: predicted_loss,
                points,
            })
        })
        .collect()
}
