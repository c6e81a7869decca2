//! `simulate --sweep`: the scenario at every point of a cross product of key values.

use std::path::Path;

use anyhow::{Result, bail};

use collsim::config::{self};
use collsim::grid::{self, PointRun};
use collsim::report;

use super::common::*;
use super::ui::*;
use crate::*;

/// `simulate --sweep`: the scenario at every point of the cross product of the swept keys
/// ([`collsim::grid`]), run in parallel, one row per point (or, for a collective sweep, per
/// point and size) in the order the values were given (the first key slowest).
pub(crate) fn simulate_sweep(
    scenario: Option<&Path>,
    common: &Common,
    flags: &SweepFlags,
    sweeps: &[String],
    format: SimFmt,
    plot: Option<&Path>,
) -> Result<()> {
    use rayon::prelude::*;
    let (name, text) = match scenario {
        Some(path) => (path.display().to_string(), config::load_text(path)?),
        None => flags_scenario(common, sweeps)?,
    };
    let base = config::parse_scenario(&name, &text)?;
    if !base.jobs.is_empty() {
        bail_usage!("--sweep runs one job at a time; {name} has [[job]] tables");
    }
    let mut fixed: Vec<grid::Fixed<'_>> = [
        ("--topology", "cluster.topology", common.topology.is_some()),
        ("--nodes", "cluster.nodes", common.nodes.is_some()),
        ("--gpus-per-node", "cluster.gpus_per_node", common.gpus_per_node.is_some()),
        ("--gpus-per-process", "cluster.gpus_per_process", common.gpus_per_process.is_some()),
        ("--nccl-version", "nccl.version", common.nccl_version.is_some()),
        ("--collective", "workload.collective", flags.collective.is_some()),
        ("--min-bytes", "workload.min_bytes", flags.min_bytes.is_some()),
        ("--max-bytes", "workload.max_bytes", flags.max_bytes.is_some()),
        ("--factor", "workload.factor", flags.factor.is_some()),
        ("--dtype", "workload.dtype", flags.dtype.is_some()),
        ("--op", "workload.op", flags.op.is_some()),
    ]
    .into_iter()
    .filter(|f| f.2)
    .map(|(flag, key, _)| (flag, key.to_string()))
    .collect();
    fixed.extend(
        common
            .nccl
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| ("--nccl", format!("nccl.{k}")))),
    );
    let axes = grid::axes(sweeps, &fixed).map_err(|e| usage(e.0))?;
    let points = grid::points(&axes);
    let (profile_name, profile_text) = profile_source(common.profile.as_deref())?;
    let profile = config::parse_profile(&profile_name, &profile_text)?;
    if let Some(w) = collsim::profile_mismatch(&profile, &apply_common(Some(base), common)?) {
        say(format!("warning: {w}"));
    }
    let sources = grid::Sources {
        name: &name,
        text: &text,
        profile_name: &profile_name,
        profile_text: &profile_text,
    };
    let m = mode(common.mode);
    let progress = Progress::new(points.len() as u64, "points");
    let results: Vec<Result<PointRun>> = points
        .par_iter()
        .map(|point| {
            let _tick = TickOnDrop(&progress);
            let mut s = apply_common(Some(sources.scenario_at(point)?), common)?;
            grid::topology_at(&mut s, point)?;
            let edited = sources.profile_at(point)?;
            let params = edited.as_ref().unwrap_or(&profile);
            if s.ddp().is_some() {
                if let Some(f) = flags.given().iter().find(|f| f.1) {
                    bail_usage!("{}: the scenario's workload is a training step, not a sweep", f.0);
                }
            } else {
                apply_sweep_flags(&mut s, flags)?;
            }
            Ok(grid::run_point(&s, params, m)?)
        })
        .collect();
    drop(progress);
    let mut steps = Vec::new();
    let mut sizes = Vec::new();
    // A point that cannot run (an invalid combination of values) is reported with why and the
    // others still run; where none can, the first point's error is the run's.
    let mut failed: Vec<report::sweep::FailedPoint> = Vec::new();
    let mut first_error = None;
    let runnable = results.iter().any(|r| r.is_ok());
    for (p, r) in points.into_iter().zip(results) {
        let label = grid::label(&p);
        // A parse error's line and column are in the file as edited for the point.
        let label = format!("--sweep point {label} (positions in the file with its values set)");
        let r = match r {
            Ok(r) => r,
            // Its row names the point; positions are in the file with its values set.
            Err(e) if runnable => {
                failed.push((p, format!("{e:#}")));
                continue;
            }
            Err(e) => {
                first_error.get_or_insert(e.context(label));
                continue;
            }
        };
        match r {
            PointRun::Step(step, mem, misfit) => {
                if let Some(w) = misfit {
                    say(format!("warning: at {}: {w}", grid::label(&p)));
                }
                steps.push((p, *step, mem.map(|m| *m)))
            }
            PointRun::Rows(rows) => sizes.push((p, rows)),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if !steps.is_empty() && !sizes.is_empty() {
        bail!("{name}: the swept values make some points DDP steps and others collective sweeps");
    }
    let mut out = open_output(common.output.as_deref())?;
    if matches!(format, SimFmt::Csv) {
        for (p, why) in &failed {
            say(format!("warning: --sweep point {} could not run: {why}", grid::label(p)));
        }
    }
    if sizes.is_empty() {
        match format {
            SimFmt::Table => {
                report::ddp::sweep_table(&steps, &mut out)?;
                report::sweep::failed_table(&failed, &mut out)?;
            }
            SimFmt::Json => report::sweep::ddp_json(&name, &steps, &failed, &mut out)?,
            SimFmt::Csv => report::sweep::ddp_csv(&steps, &mut out)?,
            SimFmt::Nccl | SimFmt::NcclJson => bail_usage!(
                "--format {}: a DDP sweep prints as table, json or csv",
                nccl_name(format)
            ),
        }
    } else {
        match format {
            SimFmt::Table => {
                report::sweep::rows_table(&sizes, &mut out)?;
                report::sweep::failed_table(&failed, &mut out)?;
            }
            SimFmt::Json => report::sweep::rows_json(&name, &sizes, &failed, &mut out)?,
            SimFmt::Csv => report::sweep::rows_csv(&sizes, &mut out)?,
            SimFmt::Nccl | SimFmt::NcclJson => {
                bail_usage!(
                    "--format {}: a sweep over keys prints as table, json or csv",
                    nccl_name(format)
                )
            }
        }
    }
    out.finish()?;
    if let Some(p) = plot {
        if sizes.is_empty() {
            stage_svg("--plot", p, |t| report::plot::sweep(&steps, t))?;
        } else {
            let series: Vec<(String, &[collsim::workload::sweep::Row])> =
                sizes.iter().map(|(p, rows)| (grid::label(p), rows.as_slice())).collect();
            let title =
                "busbw against size, one line per point of the --sweep, as nccl-tests prints it";
            stage_svg("--plot", p, |t| report::plot::collective_svg(title, &series, t))?;
        }
    }
    Ok(())
}

/// The scenario a `--sweep` without a file runs: the collective sweep the flags alone make
/// (all_reduce from 8 B to 8 GiB, as `simulate --topology X` runs), as text the sweep's points
/// edit, named for its errors. It needs the topology from `--topology` or a swept
/// `cluster.topology`.
fn flags_scenario(common: &Common, sweeps: &[String]) -> Result<(String, String)> {
    // The first value of a swept cluster.topology stands in the text; each point sets its own.
    let swept_topology = sweeps.iter().find_map(|s| {
        let (key, values) = s.split_once('=')?;
        (key.trim() == "cluster.topology")
            .then(|| values.split(',').next().unwrap_or("").trim().trim_matches('"').to_string())
    });
    let topology = match (&common.topology, swept_topology) {
        (Some(t), _) => t.clone(),
        (None, Some(t)) => t,
        (None, None) => bail_usage!(
            "--sweep without a scenario file needs --topology or --sweep cluster.topology=A,B"
        ),
    };
    let mut text = format!("[cluster]\ntopology = {}\n", toml::Value::String(topology));
    text += "[workload]\ncollective = \"all_reduce\"\nmin_bytes = \"8 B\"\nmax_bytes = \"8 GiB\"\n";
    Ok(("(the scenario the flags make)".to_string(), text))
}
