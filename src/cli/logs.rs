//! `calibrate`: nccl-tests logs read, the scenario each ran on, fits, and the bench program run here.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use collsim::calibrate::nccl_log;
use collsim::collective::Collective;
use collsim::comm::env::NcclEnv;
use collsim::config::{self, Scenario};
use collsim::report;
use collsim::workload::DataType;

use super::common::*;
use super::ui::*;
use crate::*;

/// The scenario a log ran on: `s` with what the log says as defaults — nodes and GPUs per node
/// from its "Using devices" block (its distinct hosts), the GPU variant it names, the GPUs per
/// process of its header, its NCCL release and the NCCL_* variables NCCL reports. Flags win,
/// with a one-line warning where they disagree; every default taken is noted on stderr.
pub(crate) fn log_scenario(
    s: &Scenario,
    common: &Common,
    name: &str,
    test: &nccl_log::LogTest,
    layout_from_flags: bool,
    notes: bool,
) -> Result<Scenario> {
    // Notes say which default came from the log; warnings (flags that disagree) always print.
    let note = |m: String| {
        if notes {
            eprint_line!("{m}");
        }
    };
    let mut own = s.clone();
    let setup = &test.setup;
    // Layout: the ranks and hosts of the "Using devices" block.
    if let Some((ranks, hosts)) = test.layout() {
        let flags = layout_from_flags && (common.nodes.is_some() || common.gpus_per_node.is_some());
        if ranks != s.nodes * s.gpus_per_node || hosts != s.nodes {
            if flags {
                eprint_line!(
                    "collsim: warning: {name} lists {ranks} ranks on {hosts} host(s); using {} nodes x {} GPUs as the flags say",
                    s.nodes,
                    s.gpus_per_node
                );
            } else {
                let gpn = ranks / hosts;
                if gpn * hosts != ranks || gpn > s.node.gpu.count {
                    bail!(
                        "{name}: {ranks} ranks on {hosts} host(s) do not fit {} nodes of {} GPUs",
                        s.node.name,
                        s.node.gpu.count
                    );
                }
                own.nodes = hosts;
                own.gpus_per_node = gpn;
                if common.nodes.is_some() || common.gpus_per_node.is_some() {
                    // calibrate: the flags were given but each log keeps its own layout.
                    eprint_line!(
                        "collsim: warning: {name}: {ranks} ranks on {hosts} host(s): run on {hosts} nodes x {gpn} GPUs, as the log ran (calibrate takes each log's own layout, not --nodes/--gpus-per-node)"
                    );
                } else {
                    note(format!(
                        "collsim: {name}: {ranks} ranks on {hosts} host(s): {hosts} nodes x {gpn} GPUs (give --nodes/--gpus-per-node to override)"
                    ));
                }
            }
        }
    }
    // The GPU: a variant of the topology's own model (A100-SXM4-40GB on an 80 GB node) takes
    // its place; another kind of GPU is only noted.
    if let Some(gpu) = &setup.gpu_name {
        match collsim::hw::gpus::from_reported_name(gpu) {
            Some((model, _)) if model != own.node.gpu.model.name => {
                let library = config::gpu_library()?;
                match library.into_iter().find(|m| m.name == model) {
                    Some(m) if m.sm == own.node.gpu.model.sm => {
                        note(format!(
                            "collsim: {name}: the log's GPUs are {gpu}: {model} in place of the {}'s {}",
                            own.node.name, own.node.gpu.model.name
                        ));
                        own.node.gpu.model = m;
                    }
                    _ => eprint_line!(
                        "collsim: warning: {name}: the log's GPUs are {gpu}, the topology's {}",
                        own.node.gpu.model.name
                    ),
                }
            }
            _ => {}
        }
    }
    // Process layout: nccl-tests' nGpus.
    if let Some(g) = setup.gpus_per_process {
        match common.gpus_per_process {
            Some(f) if f != g => eprint_line!(
                "collsim: warning: {name} ran {g} GPU(s) per process; using {f} as --gpus-per-process says"
            ),
            Some(_) => {}
            None if own.gpus_per_node.is_multiple_of(g) => {
                if g > 1 {
                    note(format!(
                        "collsim: {name}: {g} GPUs per process (nccl-tests -g {g}; give --gpus-per-process to override)"
                    ));
                }
                own.gpus_per_process = g;
            }
            None => eprint_line!(
                "collsim: warning: {name} ran {g} GPUs per process, which does not divide {} GPUs per node; using 1",
                own.gpus_per_node
            ),
        }
    }
    // NCCL's release and the variables it says it read from the environment.
    if let Some(v) = &setup.nccl_version {
        let flag = common.nccl_version.is_some() || own.nccl.iter().any(|(k, _)| k == "version");
        match collsim::comm::tuning::NcclVersion::parse(v) {
            _ if flag => {}
            Some(_) => own.nccl.push(("version".into(), v.clone())),
            None => eprint_line!(
                "collsim: {name}: NCCL {v}: no cost-model tables for it; using NCCL 2.30's"
            ),
        }
    }
    let mut taken = Vec::new();
    for (k, v) in &setup.env {
        match own.nccl.iter().find(|(key, _)| key == k) {
            Some((_, given)) if given != v => {
                say(format!("warning: {name} ran with {k}={v}; using {k}={given} as given"))
            }
            Some(_) => {}
            None => {
                let mut trial = own.nccl.clone();
                trial.push((k.clone(), v.clone()));
                match NcclEnv::from_pairs(trial.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                    Ok(env) if env.ignored.contains(k) => {}
                    Ok(_) => {
                        own.nccl = trial;
                        taken.push(format!("{k}={v}"));
                    }
                    Err(e) => say(format!("warning: {name}: {e}; left out")),
                }
            }
        }
    }
    if !taken.is_empty() {
        note(format!("collsim: {name}: the log's NCCL environment: {}", taken.join(" ")));
    }
    Ok(own)
}

/// The topology to use for `test` when none is given: the preset of the GPU its log names.
pub(crate) fn log_topology(name: &str, test: &nccl_log::LogTest, what: &str) -> Result<String> {
    let gpu = test.setup.gpu_name.as_deref().ok_or_else(|| {
        anyhow!("{what} needs --topology: {name} names no GPU (a preset name or a topology TOML)")
    })?;
    let (_, preset) = collsim::hw::gpus::from_reported_name(gpu).ok_or_else(|| {
        anyhow!("{what} needs --topology: {name}'s GPUs are {gpu}, which no preset has (a preset name or a topology TOML)")
    })?;
    eprint_line!(
        "collsim: {name}: topology {preset}, the preset for its {gpu} GPUs (give --topology to override)"
    );
    Ok(preset.to_string())
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
    if !Path::new("/proc/driver/nvidia/version").exists() && !Path::new("/dev/nvidia0").exists() {
        bail!(
            "calibrate --run: no NVIDIA GPU on this machine (no NVIDIA driver); run it where the GPUs are, or fit logs you have with --from-log"
        );
    }
    let bench_dir = Path::new("calibration/bench");
    if !bench_dir.join("Makefile").exists() {
        bail!(
            "calibrate --run: calibration/bench not found here; run it from the root of a collsim checkout"
        );
    }
    let bench = bench_dir.join("build/collsim-bench");
    if !bench.exists() {
        let ok = std::process::Command::new("make")
            .arg("-C")
            .arg(bench_dir)
            .status()
            .context("calibrate --run: cannot run make")?
            .success();
        if !ok {
            bail!(
                "calibrate --run: building collsim-bench failed (see above; calibration/bench/README.md says what it needs)"
            );
        }
    }
    // Under a launcher the processes may run on other nodes: the output folder, where rank 0
    // leaves NCCL's unique id for them, must be one they share (the working directory).
    let dir = if launcher.is_some() { std::env::current_dir()? } else { std::env::temp_dir() };
    let out = dir.join(format!("collsim-calibrate-run-{}", std::process::id()));
    let sweep = ["-c", "all_reduce,all_gather,reduce_scatter", "-b", "8", "-e", "1G", "-f", "2"];
    let mut words: Vec<String> =
        launcher.map(|l| l.split_whitespace().map(String::from).collect()).unwrap_or_default();
    words.push(bench.display().to_string());
    words.extend(sweep.iter().map(|w| w.to_string()));
    words.push("-o".into());
    words.push(out.display().to_string());
    say(format!("running {}", words.join(" ")));
    // The bench's progress rows go to stderr: stdout is the report (or the profile).
    let progress = std::io::stderr().as_fd().try_clone_to_owned()?;
    let status = std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdout(progress)
        .status()
        .with_context(|| format!("calibrate --run: cannot start {}", words[0]))?;
    match status.code() {
        Some(0) => {}
        Some(2) => bail!("calibrate --run: collsim-bench found no CUDA GPU (its message is above)"),
        _ => bail!("calibrate --run: collsim-bench failed ({status})"),
    }
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

/// Reads an nccl-tests log (text or -J JSON) and picks the test to compare: the one of
/// `collective` if given, else the first; returns it with the collective it measured.
pub(crate) fn read_log(
    log: &Path,
    collective: Option<&str>,
    s: Option<&Scenario>,
) -> Result<(nccl_log::LogTest, Collective)> {
    let log_name = log.display().to_string();
    let text = config::load_text(log)?;
    // nccl-tests' -J JSON (and collsim-bench's results.json) or its text output.
    let tests = if text.trim_start().starts_with('{') {
        nccl_log::parse_json(&text).map_err(|e| anyhow!("{log_name}: {e}"))?
    } else {
        nccl_log::parse(&text).map_err(|e| anyhow!("{log_name}:{}: {}", e.line, e.reason))?
    };
    if tests.is_empty() {
        bail!(
            "{log_name}: no nccl-tests result table found (expected rows of size, count, type, redop, root, time, algbw, busbw ...)"
        );
    }
    let wanted = match collective {
        Some(c) => Some(
            Collective::parse(c).ok_or_else(|| anyhow!("--collective {c}: unknown collective"))?,
        ),
        None => None,
    };
    let test = match wanted {
        Some(w) => tests
            .iter()
            .find(|t| t.collective == Some(w))
            .or_else(|| tests.iter().find(|t| t.collective.is_none()))
            .ok_or_else(|| anyhow!("{log_name}: no {} test in the log", w.name()))?,
        None => &tests[0],
    };
    let coll = match wanted.or(test.collective) {
        Some(c) => c,
        None => {
            // nccl-tests prints per-rank counts for all_gather and reduce_scatter:
            // size = count x element size x ranks. Refuse to guess those as all_reduce.
            // The ranks the log lists, else those of the scenario.
            let nranks =
                test.layout().map(|(r, _)| r).or(s.map(|s| s.nodes * s.gpus_per_node)).unwrap_or(1)
                    as u64;
            let per_rank = nranks > 1
                && test.rows.iter().all(|r| {
                    DataType::parse(&r.dtype)
                        .is_some_and(|d| r.size_bytes == r.count * d.size() * nranks)
                });
            if per_rank {
                bail!(
                    "{log_name}: no collective named in the log, and its counts are per rank (size = count x {nranks} ranks), as all_gather and reduce_scatter print them; pass --collective"
                );
            }
            say(format!("{log_name}: no collective named in the log; assuming all_reduce"));
            Collective::AllReduce
        }
    };
    // All-reduce, broadcast, reduce and sendrecv count the whole message; the others per rank.
    let whole = matches!(
        coll,
        Collective::AllReduce | Collective::Broadcast | Collective::Reduce | Collective::SendRecv
    );
    if let Some(r) = test.rows.first()
        && let Some(d) = DataType::parse(&r.dtype)
        && whole
        && r.count.checked_mul(d.size()) != Some(r.size_bytes)
    {
        bail!(
            "{log_name}: {} rows count the whole message (size = count x {} bytes of {}), but size {} has count {}: per-rank counts, as all_gather, reduce_scatter and alltoall print them; pass the right --collective",
            coll.name(),
            d.size(),
            r.dtype,
            r.size_bytes,
            r.count
        );
    }
    Ok((test.clone(), coll))
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
