//! The report of `collsim validate --manifest`: per-curve and pooled error, by size band and by
//! algorithm, and leave-one-cluster-out.

use crate::calibrate::accuracy::{Accuracy, BANDS, Group, LeaveOneOut, Stats};

/// What `validate --manifest` found, as the table and the JSON show it.
#[derive(Debug, serde::Serialize)]
pub struct AccuracyReport<'a> {
    /// The manifest's path.
    pub manifest: &'a str,
    /// The profile's name.
    pub profile: &'a str,
    /// Every curve under the profile.
    pub accuracy: &'a Accuracy,
    /// Each cluster held out (none under `--no-held-out`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leave_one_cluster_out: Option<&'a LeaveOneOut>,
}

/// "median / p95".
fn pair(s: &Stats) -> String {
    format!("{:6.1} / {:6.1}", s.median_abs_error_pct, s.p95_abs_error_pct)
}

/// Rows of groups.
fn groups(out: &mut String, title: &str, gs: &[Group]) {
    out.push_str(&format!("  {title:<28} {:>5}   {:>15}\n", "sizes", "median / p95"));
    for g in gs {
        out.push_str(&format!("  {:<28} {:>5}   {}\n", g.name, g.stats.sizes, pair(&g.stats)));
    }
}

/// The text report.
pub fn text(r: &AccuracyReport<'_>) -> String {
    let a = r.accuracy;
    let clusters: std::collections::BTreeSet<&str> =
        a.curves.iter().map(|c| c.cluster.as_str()).collect();
    let mut out = format!(
        "validate --manifest {}: {} curves on {} clusters, profile {}\n\n",
        r.manifest,
        a.curves.len(),
        clusters.len(),
        r.profile
    );
    out.push_str("|error| % per curve (median / p95), and its median by size band\n");
    out.push_str(&format!(
        "  {:<40} {:<14} {:<5} {:>5} {:>5}   {:>15} ",
        "curve", "cluster", "gen", "ranks", "sizes", "median / p95"
    ));
    for (label, _) in BANDS {
        out.push_str(&format!(" {:>10}", label.trim_start_matches("<= ")));
    }
    out.push('\n');
    for c in &a.curves {
        out.push_str(&format!(
            "  {:<40} {:<14} {:<5} {:>5} {:>5}   {} ",
            c.id,
            c.cluster,
            c.generation,
            c.ranks,
            c.stats.sizes,
            pair(&c.stats)
        ));
        for b in &c.bands {
            match b {
                Some(s) => out.push_str(&format!(" {:>10.1}", s.median_abs_error_pct)),
                None => out.push_str(&format!(" {:>10}", "")),
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\npooled: {} sizes, median {:.1} %, p95 {:.1} %\n",
        a.pooled.sizes, a.pooled.median_abs_error_pct, a.pooled.p95_abs_error_pct
    ));
    groups(&mut out, "by size band", &a.by_band);
    groups(&mut out, "by algorithm simulated", &a.by_algorithm);
    let Some(loo) = r.leave_one_cluster_out else {
        out.push_str("\nleave-one-cluster-out: not run (--no-held-out)\n");
        return out;
    };
    out.push_str(
        "\nleave-one-cluster-out: each cluster predicted by the profile's physical parameters\ncalibrated (no size bands) on the other clusters of its GPU generation\n",
    );
    out.push_str(&format!(
        "  {:<14} {:<5} {:<52} {:>5}   {:>15}   {:>15}\n",
        "cluster", "gen", "calibrated on", "sizes", "uncalibrated", "held out"
    ));
    for c in &loo.clusters {
        let on = if c.calibrated_on.is_empty() {
            "(none of its generation: the profile as given)".to_string()
        } else {
            c.calibrated_on.join(", ")
        };
        out.push_str(&format!(
            "  {:<14} {:<5} {:<52} {:>5}   {}   {}\n",
            c.cluster,
            c.generation,
            on,
            c.held_out.sizes,
            pair(&c.base),
            pair(&c.held_out)
        ));
    }
    out.push_str(&format!(
        "  {:<14} {:<5} {:<52} {:>5}   {}   {}\n",
        "pooled",
        "",
        "",
        loo.held_out.sizes,
        pair(&loo.base),
        pair(&loo.held_out)
    ));
    groups(&mut out, "held out, by size band", &loo.by_band);
    groups(&mut out, "held out, by GPU generation", &loo.by_generation);
    out
}
