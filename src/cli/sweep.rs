//! `simulate --sweep`: the scenario at every point of a cross product of key values.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use collsim::config::{self, Scenario};
use collsim::report;

use super::common::*;
use super::ui::*;
use crate::*;

/// Why a training step's model does not fit its GPU's memory, if it does not.
pub(crate) fn misfit_warning(
    s: &Scenario,
    spec: &collsim::workload::ddp::DdpSpec,
    world: usize,
) -> Option<String> {
    // A model profile's measured memory, or the model's; none for a bare list of calls.
    let mem = collsim::workload::memory::known_memory(spec, world, s.gpus_per_node)?;
    let why = mem.misfit(s.node.gpu.model.memory.get() as f64, spec.memory_headroom)?;
    if spec.profile.is_some() {
        return Some(format!(
            "the profiled step does not fit a {} as its allocator measured it: {why}",
            s.node.gpu.model.name
        ));
    }
    Some(format!(
        "the model does not fit a {} under {} with {}: {why}",
        s.node.gpu.model.name,
        match (&spec.sharding, &spec.parallel) {
            (Some(_), _) => "FSDP",
            (None, Some(_)) => "its 3-D layout",
            (None, None) => "plain DDP",
        },
        spec.optimizer.name()
    ))
}

/// What one point of a `--sweep` ran: a DDP step, its memory per GPU (and why its model does
/// not fit, if it does not), or an nccl-tests-like sweep's rows.
pub(crate) enum PointRun {
    Step(
        Box<collsim::workload::ddp::StepResult>,
        Option<Box<collsim::workload::memory::DdpMemory>>,
        Option<String>,
    ),
    Rows(Vec<collsim::workload::sweep::Row>),
}

/// The file a swept key edits.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum SweepFile {
    Scenario,
    Topology,
    Profile,
}

/// Which file a swept key (`ddp.X` and the like already made `workload.ddp.X`) edits, and the
/// key there:
/// `topology.KEY` the scenario's topology, `profile.KEY` the timing profile, anything else the
/// scenario.
pub(crate) fn sweep_target(key: &str) -> (SweepFile, &str) {
    if let Some(k) = key.strip_prefix("topology.") {
        (SweepFile::Topology, k)
    } else if let Some(k) = key.strip_prefix("profile.") {
        (SweepFile::Profile, k)
    } else {
        (SweepFile::Scenario, key)
    }
}

/// `simulate --sweep`: the scenario at every point of the cross product of the swept keys, run
/// in parallel, one row per point (or, for a collective sweep, per point and size) in the order
/// the values were given (the first key slowest). Keys edit the scenario, its topology
/// (`topology.nic.speed`) or the profile (`profile.bandwidth.net`).
pub(crate) fn simulate_sweep(
    scenario: Option<&Path>,
    common: &Common,
    flags: &SweepFlags,
    sweeps: &[String],
    format: SimFmt,
    plot: Option<&Path>,
) -> Result<()> {
    use rayon::prelude::*;
    let path = scenario.ok_or_else(|| usage("--sweep needs a scenario file"))?;
    let name = path.display().to_string();
    let text = config::load_text(path)?;
    let base = config::parse_scenario(&name, &text)?;
    if !base.jobs.is_empty() {
        bail_usage!("--sweep runs one job at a time; {name} has [[job]] tables");
    }
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    for s in sweeps {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            usage(format!("--sweep {s}: expected KEY=V1,V2,... (e.g. ddp.bucket_cap_mb=1,25)"))
        })?;
        // The workload's tables, short: `ddp.X` is `workload.ddp.X`.
        let short =
            ["ddp.", "fsdp.", "zero.", "parallel.", "model."].iter().any(|t| k.starts_with(t));
        let key = if short { format!("workload.{k}") } else { k.to_string() };
        if key.split('.').any(|p| p.trim().is_empty())
            || matches!(key.as_str(), "topology" | "profile")
        {
            bail_usage!("--sweep {s}: {k:?} is not a key (KEY is dotted, e.g. cluster.nodes)");
        }
        if key == "topology.gpu.count" {
            bail_usage!(
                "--sweep {s}: the node's GPU count sets the defaults the scenario was read with; sweep cluster.gpus_per_node, or give one topology file per count"
            );
        }
        // A flag sets its key at every point: the rows would be labelled with values that
        // never ran.
        let flag_keys = [
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
        ];
        if let Some((flag, _, _)) = flag_keys.iter().find(|(_, fk, given)| *given && *fk == key) {
            bail_usage!("--sweep {s}: {flag} sets {key} at every point; give one or the other");
        }
        if let Some(var) = key.strip_prefix("nccl.")
            && common.nccl.iter().any(|kv| kv.split_once('=').is_some_and(|(k, _)| k == var))
        {
            bail_usage!("--sweep {s}: --nccl sets {var} at every point; give one or the other");
        }
        let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
        if values.iter().all(String::is_empty) {
            bail_usage!("--sweep {s}: no values");
        }
        // An empty value was dropped, and with it the point the user meant by it.
        if let Some(i) = values.iter().position(String::is_empty) {
            bail_usage!("--sweep {s}: value {} is empty (a stray comma?)", i + 1);
        }
        // One axis per key: a second would set the key again, and the first axis' labels would
        // name values that never ran.
        if axes.iter().any(|(a, _)| *a == key) {
            bail_usage!("--sweep {s}: {k} is swept twice; give all its values in one --sweep");
        }
        if let Some(v) =
            values.iter().enumerate().find_map(|(i, v)| values[..i].contains(v).then_some(v))
        {
            bail_usage!("--sweep {s}: value {v} given twice");
        }
        axes.push((key, values));
    }
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, vs) in &axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                vs.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((k.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    let (profile_name, profile_text) = profile_source(common.profile.as_deref())?;
    let profile = config::parse_profile(&profile_name, &profile_text)?;
    if let Some(w) = collsim::profile_mismatch(&profile, &apply_common(Some(base), common)?) {
        say(format!("warning: {w}"));
    }
    let m = mode(common.mode);
    let progress = Progress::new(points.len() as u64, "points");
    let results: Vec<Result<PointRun>> = points
        .par_iter()
        .map(|point| {
            let _tick = TickOnDrop(&progress);
            let keys = |file: SweepFile| -> Vec<(String, String)> {
                point
                    .iter()
                    .filter_map(|(k, v)| {
                        let (f, key) = sweep_target(k);
                        (f == file).then(|| (key.to_string(), v.clone()))
                    })
                    .collect()
            };
            let edited = config::set_keys(&text, &keys(SweepFile::Scenario))
                .map_err(|e| anyhow!("{name}: {e}"))?;
            let s = config::parse_scenario(&name, &edited)?;
            let mut s = apply_common(Some(s), common)?;
            let topo_keys = keys(SweepFile::Topology);
            if !topo_keys.is_empty() {
                let (file, text) = config::topology_text(&s.topology)?;
                let edited =
                    config::set_keys(&text, &topo_keys).map_err(|e| anyhow!("{file}: {e}"))?;
                let node = config::parse_topology(&file, &edited)?;
                s.node = node;
                recarry(&mut s, "--sweep topology.*")?;
            }
            let prof_keys = keys(SweepFile::Profile);
            let edited_profile;
            let params = if prof_keys.is_empty() {
                &profile
            } else {
                let text = config::set_keys(&profile_text, &prof_keys)
                    .map_err(|e| anyhow!("{profile_name}: {e}"))?;
                edited_profile = config::parse_profile(&profile_name, &text)?;
                &edited_profile
            };
            if let Some(spec) = s.ddp() {
                if let Some(f) = flags.given().iter().find(|f| f.1) {
                    bail_usage!("{}: the scenario's workload is a training step, not a sweep", f.0);
                }
                let step = collsim::simulate_ddp(&s, params, m)?.0;
                let mem =
                    collsim::workload::memory::known_memory(spec, step.world, s.gpus_per_node);
                let misfit = misfit_warning(&s, spec, step.world);
                return Ok(PointRun::Step(Box::new(step), mem.map(Box::new), misfit));
            }
            apply_sweep_flags(&mut s, flags)?;
            Ok(PointRun::Rows(collsim::simulate(&s, params, m)?.0))
        })
        .collect();
    drop(progress);
    let mut steps = Vec::new();
    let mut sizes = Vec::new();
    for (p, r) in points.into_iter().zip(results) {
        let label = p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        // A parse error's line and column are in the file as edited for the point.
        let label = format!("--sweep point {label} (positions in the file with its values set)");
        match r.with_context(|| label)? {
            PointRun::Step(step, mem, misfit) => {
                if let Some(w) = misfit {
                    let at = p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>();
                    say(format!("warning: at {}: {w}", at.join(" ")));
                }
                steps.push((p, *step, mem.map(|m| *m)))
            }
            PointRun::Rows(rows) => sizes.push((p, rows)),
        }
    }
    if !steps.is_empty() && !sizes.is_empty() {
        bail!("{name}: the swept values make some points DDP steps and others collective sweeps");
    }
    let mut out = open_output(common.output.as_deref())?;
    if sizes.is_empty() {
        match format {
            SimFmt::Table => report::ddp::sweep_table(&steps, &mut out)?,
            SimFmt::Json => report::sweep::ddp_json(&name, &steps, &mut out)?,
            SimFmt::Csv => report::sweep::ddp_csv(&steps, &mut out)?,
            SimFmt::Nccl => bail_usage!("--format nccl: a DDP sweep prints as table, json or csv"),
        }
    } else {
        if plot.is_some() {
            bail_usage!(
                "--plot with --sweep draws DDP steps; a collective sweep's rows go to --format csv or json"
            );
        }
        match format {
            SimFmt::Table => report::sweep::rows_table(&sizes, &mut out)?,
            SimFmt::Json => report::sweep::rows_json(&name, &sizes, &mut out)?,
            SimFmt::Csv => report::sweep::rows_csv(&sizes, &mut out)?,
            SimFmt::Nccl => {
                bail_usage!("--format nccl: a sweep over keys prints as table, json or csv")
            }
        }
    }
    out.finish()?;
    if let Some(p) = plot {
        stage_svg("--plot", p, |t| report::plot::sweep(&steps, t))?;
    }
    Ok(())
}
