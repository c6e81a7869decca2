//! The report of `collsim validate --runs`: each published training run against its replayed
//! step, per source, per weak-scaling series, pooled and leave-one-source-out.

use crate::calibrate::training::{CAPTURED_BAND, Stats, TrainingAccuracy};

/// What `validate --runs` found, as the table and the JSON show it.
#[derive(Debug, serde::Serialize)]
pub struct TrainingReport<'a> {
    /// The runs file's path.
    pub runs_file: &'a str,
    /// The profile's name.
    pub profile: &'a str,
    /// The figures.
    #[serde(flatten)]
    pub accuracy: &'a TrainingAccuracy,
}

/// "median / p95".
fn pair(s: &Stats) -> String {
    format!("{:6.1} / {:6.1}", s.median_abs_error_pct, s.p95_abs_error_pct)
}

/// `s` cut to `n` characters, with an ellipsis where cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n - 1).collect();
        format!("{head}…")
    }
}

/// The text report.
pub fn text(r: &TrainingReport<'_>) -> String {
    let a = r.accuracy;
    let mut out = format!(
        "validate --runs {}: {} runs from {} sources, profile {}\n\n",
        r.runs_file,
        a.runs.len(),
        a.sources.len(),
        r.profile
    );
    out.push_str(&format!(
        "  {:<58} {:<10} {:>6} {:>10} {:>10} {:>8} {:>9}\n",
        "run", "source", "GPUs", "measured", "simulated", "error", "held out"
    ));
    for row in &a.runs {
        out.push_str(&format!(
            "  {:<58} {:<10} {:>6} {:>8.3} s {:>8.3} s {:>+7.1}% {:>+8.1}%\n",
            cut(&row.run, 58),
            cut(&row.source, 10),
            row.gpus,
            row.measured_step_s,
            row.predicted_step_s,
            row.error_pct,
            row.held_out_error_pct
        ));
    }
    out.push_str(&format!(
        "\n|error| % of the step (median / p95), signed median (+: simulated slow), and held out: each source\npredicted with one scale, the median measured / simulated step over the other sources' runs\n  {:<14} {:>5}   {:>15} {:>9}   {:>6}   {:>15}\n",
        "source", "runs", "median / p95", "signed", "scale", "held out"
    ));
    for s in &a.sources {
        out.push_str(&format!(
            "  {:<14} {:>5}   {} {:>+8.1}%   {:>6.3}   {}\n",
            cut(&s.source, 14),
            s.stats.runs,
            pair(&s.stats),
            s.median_error_pct,
            s.held_out_scale,
            pair(&s.held_out)
        ));
    }
    out.push_str(&format!(
        "  {:<14} {:>5}   {} {:>+8.1}%   {:>6}   {}\n",
        "pooled",
        a.pooled.runs,
        pair(&a.pooled),
        a.pooled_median_error_pct,
        "",
        pair(&a.held_out)
    ));
    if a.sources.len() < 2 {
        out.push_str("  (one source: nothing to hold out, its scale is 1)\n");
    }
    out.push_str(
        "\nheld out, by class (GPU generation and kind of step; kind and precision): the error bands\n`collsim plan` gives its candidates\n",
    );
    out.push_str(&format!("  {:<20} {:>5}   {:>8}\n", "class", "runs", "median"));
    for c in &a.by_class {
        out.push_str(&format!(
            "  {:<20} {:>5}   {:>6.1} %\n",
            c.class, c.runs, c.median_abs_error_pct
        ));
    }
    if a.series.is_empty() {
        return out;
    }
    out.push_str(
        "\nweak-scaling series: per-GPU throughput (tokens a second a GPU) lost from the smallest run to the\nlargest, measured and simulated; captured = simulated loss / measured loss\n",
    );
    out.push_str(&format!(
        "  {:<40} {:>13} {:>10} {:>10} {:>9}\n",
        "series", "GPUs", "measured", "simulated", "captured"
    ));
    for s in &a.series {
        let (first, last) = (&s.points[0], &s.points[s.points.len() - 1]);
        let captured = s.captured.map_or_else(|| "-".to_string(), |c| format!("{c:.2}"));
        out.push_str(&format!(
            "  {:<40} {:>13} {:>8.1} % {:>8.1} % {:>9}\n",
            cut(&s.series, 40),
            format!("{}-{}", first.gpus, last.gpus),
            s.measured_loss_pct,
            s.predicted_loss_pct,
            captured
        ));
    }
    let (within, of) = a.series_captured;
    out.push_str(&format!(
        "  captured within {}-{}: {within} of {of} series with a measured loss\n",
        CAPTURED_BAND.0, CAPTURED_BAND.1
    ));
    out
}
