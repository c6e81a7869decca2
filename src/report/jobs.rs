//! Several jobs on one cluster: each job's own report (its sweep table or its DDP step), then
//! how fast each ran beside the others relative to alone.

use std::io::{self, Write};

use super::{SimFormat, SimReport};
use crate::collective::{Mode, TimingParams};
use crate::config::Scenario;
use crate::sim::{JobOutcome, JobRun};
use crate::units::Bytes;
use crate::workload::Workload;

/// The text form: every job's report, then the slowdown table.
pub fn table(
    scenario: &Scenario,
    runs: &[JobRun],
    profile: &TimingParams,
    mode: Mode,
    out: &mut dyn Write,
) -> io::Result<()> {
    let ddp = runs.iter().any(|r| matches!(r.outcome, JobOutcome::Ddp { .. }));
    let sweeps = runs.iter().any(|r| matches!(r.outcome, JobOutcome::Sweep { .. }));
    writeln!(
        out,
        "{} jobs on {} x {}; {} background pattern(s).",
        runs.len(),
        scenario.nodes,
        scenario.node.name,
        scenario.background.len()
    )?;
    if ddp {
        let form = if mode == Mode::Detailed {
            "in full detail"
        } else {
            "in steady form: its latency, then its steady-state flows; --mode detailed for full detail"
        };
        writeln!(
            out,
            "DDP steps run together in one network, all starting at 0: each collective is posted as its job's NCCL stream reaches it ({form}); a sweep job is steady traffic there (its largest size, back to back)."
        )?;
    }
    if sweeps {
        writeln!(
            out,
            "Beside a sweep job's call, every other job runs its concurrent call (same sweep row, back to back; a DDP step: its largest bucket at its communication duty cycle) as steady traffic."
        )?;
    }
    for r in runs {
        writeln!(out)?;
        let nodes: Vec<String> = r.nodes.iter().map(|n| n.0.to_string()).collect();
        writeln!(
            out,
            "== job {:?}: {} node(s) ({}: {}), {} ranks ==",
            r.name,
            r.nodes.len(),
            r.placement,
            nodes.join(" "),
            r.summary.nranks
        )?;
        match (&r.outcome, &r.scenario.workload) {
            (JobOutcome::Sweep { rows, .. }, Workload::Sweep(sweep)) => {
                let rep = SimReport {
                    scenario: &r.scenario,
                    sweep,
                    profile,
                    mode,
                    communicator: r.summary.clone(),
                    rows,
                    run: super::nccl::TestRun::default(),
                };
                super::table::Table.write_sim(&rep, out)?;
            }
            (JobOutcome::Ddp { step, .. }, Workload::Ddp(spec)) => {
                super::ddp::table(&r.scenario, spec, step, out)?;
            }
            _ => writeln!(out, "idle: holds its nodes and sends nothing")?,
        }
    }
    let sweeps: Vec<&JobRun> =
        runs.iter().filter(|r| matches!(r.outcome, JobOutcome::Sweep { .. })).collect();
    if runs.iter().all(|r| matches!(r.outcome, JobOutcome::Idle)) {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "speed beside the other jobs relative to alone (time alone / time beside; 1.00 = unaffected, 0.50 = twice as long):"
    )?;
    let sizes = |r: &JobRun| -> Vec<u64> {
        match &r.outcome {
            JobOutcome::Sweep { rows, .. } => rows.iter().map(|x| x.size_bytes).collect(),
            _ => Vec::new(),
        }
    };
    let aligned = sweeps.windows(2).all(|w| sizes(w[0]) == sizes(w[1]));
    if aligned && !sweeps.is_empty() {
        write!(out, "{:>10}", "size")?;
        for r in &sweeps {
            write!(out, " {:>12}", truncate(&r.name, 12))?;
        }
        writeln!(out)?;
        for (i, size) in sizes(sweeps[0]).iter().enumerate() {
            write!(out, "{:>10}", Bytes::new(*size).to_string())?;
            for r in &sweeps {
                write!(out, " {:>12.2}", r.outcome.relative_speed()[i])?;
            }
            writeln!(out)?;
        }
    } else {
        // Jobs' sweeps of other sizes: row i of each ran together; each job on a line of its
        // own, size by size.
        for r in &sweeps {
            let cells: Vec<String> = sizes(r)
                .iter()
                .zip(r.outcome.relative_speed())
                .map(|(b, v)| format!("{} {v:.2}", Bytes::new(*b)))
                .collect();
            writeln!(out, "job {:?}: {}", r.name, cells.join(", "))?;
        }
    }
    for r in runs {
        if let JobOutcome::Ddp { step, alone } = &r.outcome {
            writeln!(
                out,
                "job {:?}: step {:.3} ms beside the others, {:.3} ms alone: {:.2}",
                r.name,
                step.iteration_time_ms,
                alone.iteration_time_ms,
                alone.iteration_time_ms / step.iteration_time_ms
            )?;
        }
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The JSON form: the scenario, then per job its results beside the others, alone, and the
/// ratio.
pub fn json(
    scenario: &Scenario,
    runs: &[JobRun],
    profile: &TimingParams,
    mode: Mode,
    out: &mut dyn Write,
) -> io::Result<()> {
    let jobs: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| -> serde_json::Result<serde_json::Value> {
            let mut v = serde_json::json!({
                "name": r.name,
                "nodes": r.nodes,
                "placement": r.placement,
                "communicator": r.summary,
                "relative_speed": r.outcome.relative_speed(),
            });
            match &r.outcome {
                JobOutcome::Sweep { rows, alone } => {
                    v["rows"] = serde_json::to_value(rows)?;
                    v["alone_rows"] = serde_json::to_value(alone)?;
                }
                JobOutcome::Ddp { step, alone } => {
                    v["step"] = serde_json::to_value(step)?;
                    v["alone"] = serde_json::to_value(alone)?;
                }
                JobOutcome::Idle => v["idle"] = serde_json::Value::Bool(true),
            }
            Ok(v)
        })
        .collect::<serde_json::Result<_>>()?;
    let doc = serde_json::json!({
        "scenario": serde_json::to_value(scenario)?,
        "profile": serde_json::to_value(profile)?,
        "mode": mode,
        "jobs": jobs,
    });
    super::write_json(&doc, out)
}
