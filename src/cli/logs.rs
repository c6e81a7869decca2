//! `calibrate`: nccl-tests logs read, the scenario each ran on, fits, and the bench program run here.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

use collsim::calibrate::{logs, nccl_log};
use collsim::collective::Collective;
use collsim::config::{self, Scenario};
use collsim::report;

use super::common::*;
use super::ui::*;
use crate::*;

/// [`logs::scenario_of`] with the flags of `common`, its lines printed (notes where `notes`).
pub(crate) fn log_scenario(
    s: &Scenario,
    common: &Common,
    name: &str,
    test: &nccl_log::LogTest,
    layout_from_flags: bool,
    notes: bool,
) -> Result<Scenario> {
    let given = logs::Given {
        nodes: common.nodes.is_some(),
        gpus_per_node: common.gpus_per_node.is_some(),
        gpus_per_process: common.gpus_per_process,
        nccl_version: common.nccl_version.is_some(),
    };
    let (own, said) = logs::scenario_of(s, given, name, test, layout_from_flags)?;
    tell(said, notes);
    Ok(own)
}

/// Prints what a log's reading said: its warnings, and its notes where `notes`.
pub(crate) fn tell(said: Vec<logs::Said>, notes: bool) {
    for line in said {
        match line {
            logs::Said::Note(m) if notes => say(m),
            logs::Said::Note(_) => {}
            logs::Said::Warning(m) => say(m),
        }
    }
}

/// [`logs::topology_of`], its line printed.
pub(crate) fn log_topology(name: &str, test: &nccl_log::LogTest, what: &str) -> Result<String> {
    let (preset, said) = logs::topology_of(name, test, what)?;
    tell(vec![said], true);
    Ok(preset)
}

/// Fits the model's physical parameters (`fit`: a `--fit` list, or None for every one the data
/// determines), then a size-band correction on what is left, on the logs marked fit (for the
/// scenario `s`, or the one each log lists); checks the result on the others; prints the errors
/// of the base model, of the fitted parameters and of the whole calibration; and writes the
/// profile (`-o`, else stdout; the report then goes to stderr). Logs marked `None` are split
/// here: those at another GPU count than the first log are held out, and among the others every
/// second one.
pub(crate) fn calibrate_logs(
    s: &Scenario,
    common: &Common,
    logs: &[(PathBuf, Option<String>, Option<bool>)],
    fit_list: Option<&str>,
    factors: bool,
) -> Result<()> {
    use collsim::calibrate::pipeline::{self, LogInput};
    let (base_name, base_text) = profile_source(common.profile.as_deref())?;
    // The base profile's errors come first, before any log is read.
    config::parse_profile(&base_name, &base_text)?;
    // A log fitted and checked (or given twice) would report its fit error as held out.
    for (i, (path, coll, _)) in logs.iter().enumerate() {
        let same = |p: &PathBuf| match (std::fs::canonicalize(p), std::fs::canonicalize(path)) {
            (Ok(a), Ok(b)) => a == b,
            _ => p == path,
        };
        if logs[..i].iter().any(|(p, c, _)| same(p) && c == coll) {
            let at = coll.as_ref().map_or(String::new(), |c| format!("@{c}"));
            bail_usage!(
                "{}{at}: given twice (a log is fitted or checked, not both; a check on the fitted data is no held-out error)",
                path.display()
            );
        }
    }
    let mut inputs = Vec::new();
    for (path, coll, is_fit) in logs {
        let (test, c) = read_log(path, coll.as_deref(), Some(s))?;
        let name = match coll {
            Some(c) => format!("{}@{c}", path.display()),
            None => path.display().to_string(),
        };
        // Each log runs on its own layout: calibration may mix GPU counts.
        let scenario = log_scenario(s, common, &name, &test, false, true)?;
        inputs.push(LogInput { name, test, coll: c, is_fit: *is_fit, scenario });
    }
    let fitting = spinner("calibrating (simulating every log size for each trial)");
    let c = pipeline::calibrate(
        s,
        &base_name,
        &base_text,
        inputs,
        fit_list,
        factors,
        mode(common.mode),
    )
    .map_err(|e| anyhow!(e));
    fitting.finish_and_clear();
    let c = c?;
    for w in &c.warnings {
        say(format!("warning: {w}"));
    }
    let report = report::calibration::text(&c);
    match common.output.as_deref() {
        Some(p) => {
            stage("-o", p, c.profile.as_bytes())?;
            let mut out = report::output::Stdout::new();
            write!(out, "{report}\nprofile written to {}\n", p.display())?;
            out.flush()?;
        }
        None => {
            eprint!("{report}");
            let mut out = report::output::Stdout::new();
            out.write_all(c.profile.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// `calibrate --run`: runs collsim-bench on this machine's GPUs (built first if needed), then fits
/// its all_reduce results and checks them on its all_gather and reduce_scatter.
pub(crate) fn calibrate_run(
    launcher: Option<&str>,
    common: &Common,
    fit: Option<&str>,
    factors: bool,
) -> Result<()> {
    use collsim::calibrate::bench;
    let exe = bench::build_here().map_err(|e| anyhow!(e))?;
    let (words, out) = bench::command(&exe, launcher).map_err(|e| anyhow!(e))?;
    say(format!("running {}", words.join(" ")));
    // The bench's progress rows go to stderr: stdout is the report (or the profile).
    let progress = std::io::stderr().as_fd().try_clone_to_owned()?;
    bench::run(&words, progress.into()).map_err(|e| anyhow!(e))?;
    let results = out.join("results.txt");
    let mut c = common.clone();
    if c.topology.is_none() {
        // The machine as NCCL saw it.
        let xml = out.join("nccl_topo.xml");
        let source = xml.display().to_string();
        let imported = config::import::import_nccl_xml(&source, &config::load_text(&xml)?)?;
        check_imported(&source, &imported)?;
        let topo = out.join("topology.toml");
        std::fs::write(&topo, &imported.toml)
            .with_context(|| format!("{}: cannot write", topo.display()))?;
        say(format!("topology imported from NCCL's dump: {}", topo.display()));
        c.topology = Some(topo.display().to_string());
    }
    let s = apply_common(None, &c)?;
    let logs: Vec<(PathBuf, Option<String>, Option<bool>)> = vec![
        (results.clone(), Some("all_reduce".into()), Some(true)),
        (results.clone(), Some("all_gather".into()), Some(false)),
        (results, Some("reduce_scatter".into()), Some(false)),
    ];
    calibrate_logs(&s, &c, &logs, fit, factors)
}

/// [`logs::read`], its lines printed.
pub(crate) fn read_log(
    log: &Path,
    collective: Option<&str>,
    s: Option<&Scenario>,
) -> Result<(nccl_log::LogTest, Collective)> {
    let mut said = Vec::new();
    let read = logs::read(log, collective, s, &mut said);
    tell(said, true);
    Ok(read?)
}

/// `collsim calibrate`.
pub(crate) fn calibrate(
    CalibrateArgs { from_log, check_log, run, launcher, collective, fit, no_correction, common, }: CalibrateArgs,
) -> Result<()> {
    if let Some(f) = &fit {
        collsim::calibrate::params::check_list(f).map_err(usage)?;
    }
    if run {
        return calibrate_run(launcher.as_deref(), &common, fit.as_deref(), !no_correction);
    }
    if launcher.is_some() {
        bail_usage!("--launcher starts the bench: it goes with --run");
    }
    if from_log.is_empty() {
        bail_usage!(
            "calibrate needs --from-log LOG... (nccl-tests output), or --run on a machine with GPUs"
        );
    }
    // Without --check-log the split is made once the logs are read (None).
    let auto = check_log.is_empty() && from_log.len() >= 2;
    let mut common = common;
    // LOG@collective picks that test of a file holding several.
    let pick = |p: PathBuf, is_fit: Option<bool>| {
        let (file, c) = log_and_collective(p);
        (file, c.or_else(|| collective.clone()), is_fit)
    };
    if common.topology.is_none() {
        let (first, c, _) = pick(from_log[0].clone(), None);
        let (test, _) = read_log(&first, c.as_deref(), None)?;
        common.topology = Some(log_topology(&first.display().to_string(), &test, "calibrate")?);
    }
    let s = apply_common(None, &common)?;
    let logs: Vec<(PathBuf, Option<String>, Option<bool>)> = from_log
        .into_iter()
        .map(|p| pick(p, if auto { None } else { Some(true) }))
        .chain(check_log.into_iter().map(|p| pick(p, Some(false))))
        .collect();
    calibrate_logs(&s, &common, &logs, fit.as_deref(), !no_correction)?;
    Ok(())
}

/// A log path written `LOG@collective` (that test of a file holding several): the file and the
/// collective. A path that exists as written is a file, `@` and all.
pub(crate) fn log_and_collective(p: PathBuf) -> (PathBuf, Option<String>) {
    match p.to_str().and_then(|t| t.rsplit_once('@')) {
        Some((file, c)) if !p.exists() && !c.contains('/') => {
            (PathBuf::from(file), Some(c.to_string()))
        }
        _ => (p, None),
    }
}
