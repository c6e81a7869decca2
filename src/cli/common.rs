//! The cluster flags every subcommand shares, applied to a scenario; profiles; NCCL blame.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

use collsim::collective::{Mode, TimingParams};
use collsim::config::{self, Scenario};
use collsim::report;
use collsim::units::Bytes;
use collsim::workload::sweep::SweepSpec;
use collsim::workload::{DataType, ReduceOp};

use super::ui::*;
use crate::*;

/// A profile's name and text: the file given, or the built-in default.
pub(crate) fn profile_source(path: Option<&Path>) -> Result<(String, String)> {
    Ok(match path {
        Some(p) => (p.display().to_string(), config::load_text(p)?),
        None => (config::DEFAULT_PROFILE.0.to_string(), config::DEFAULT_PROFILE.1.to_string()),
    })
}

/// [`load_profile`] for a run of `s`, warning where the profile was fitted on another setup.
pub(crate) fn load_profile_for(path: Option<&Path>, s: &Scenario) -> Result<TimingParams> {
    let p = load_profile(path)?;
    if let Some(w) = collsim::profile_mismatch(&p, s) {
        say(format!("warning: {w}"));
    }
    Ok(p)
}

pub(crate) fn load_profile(path: Option<&Path>) -> Result<TimingParams> {
    let (name, text) = profile_source(path)?;
    Ok(config::parse_profile(&name, &text)?)
}

/// `--nodes n` within what collsim builds.
pub(crate) fn check_nodes(n: usize) -> Result<()> {
    config::check_nodes(n).map_err(flag_error)
}

pub(crate) fn parse_size(flag: &str, s: &str) -> Result<Bytes> {
    let b = Bytes::parse_cli(s).map_err(|e| usage(format!("{flag} {s}: {e}")))?;
    let max = collsim::workload::sweep::MAX_CALL_BYTES;
    if b > max {
        bail_usage!("{flag} {s}: larger than {max}, more than any GPU holds");
    }
    Ok(b)
}

/// The cluster flags of `c` as the library takes them.
pub(crate) fn flags(c: &Common) -> config::Flags {
    config::Flags {
        topology: c.topology.clone(),
        nodes: c.nodes,
        gpus_per_node: c.gpus_per_node,
        gpus_per_process: c.gpus_per_process,
        nccl: c.nccl.clone(),
        nccl_version: c.nccl_version.clone(),
    }
}

/// A flag error as the command line exits on it: a usage error (2) or an input error (1).
pub(crate) fn flag_error(e: config::FlagError) -> anyhow::Error {
    match e {
        config::FlagError::Usage(m) => usage(m),
        config::FlagError::Input(m) => anyhow!(m),
    }
}

/// Applies the cluster flags to a scenario (or builds one from them) ([`config::Flags::apply`]),
/// warning once a run of the NCCL variables the model does not use.
pub(crate) fn apply_common(base: Option<Scenario>, c: &Common) -> Result<Scenario> {
    let (s, ignored) = flags(c).apply(base).map_err(flag_error)?;
    warn_ignored(&ignored);
    Ok(s)
}

/// Warns, once a run (a sweep applies the flags at every point), of the NCCL variables the
/// model does not use.
pub(crate) fn warn_ignored(ignored: &config::Ignored) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        let jobs = ignored.jobs.iter().flat_map(|(name, vars)| {
            ignored_lines(vars).into_iter().map(move |l| format!("job {name:?}: {l}"))
        });
        for line in ignored_lines(&ignored.run).into_iter().chain(jobs) {
            say(line);
        }
    });
}

/// An error the built cluster raises about an NCCL variable (NCCL_ALGO leaving only algorithms
/// NCCL would refuse here), put on the scenario line that set it.
pub(crate) fn blame_nccl(
    e: collsim::Error,
    at: &std::collections::BTreeMap<String, String>,
) -> anyhow::Error {
    use collsim::workload::sweep::SweepError;
    match (&e, at.get("NCCL_ALGO")) {
        (collsim::Error::Sweep(SweepError::Impossible(..) | SweepError::NoRing(_)), Some(at)) => {
            anyhow!("{at}: nccl.{e}")
        }
        // Not from the file: from the command line.
        (collsim::Error::Sweep(SweepError::Impossible(..) | SweepError::NoRing(_)), None) => {
            anyhow!("--nccl {e}")
        }
        _ => e.into(),
    }
}

/// The warnings for NCCL variables the model does not use: one a variable up to
/// [`MAX_WARNINGS`], then one line counting the rest.
pub(crate) fn ignored_lines(ignored: &[String]) -> Vec<String> {
    let mut out: Vec<String> = ignored
        .iter()
        .take(MAX_WARNINGS)
        .map(|k| format!("ignoring {} (not used by the model)", clip(k)))
        .collect();
    if ignored.len() > MAX_WARNINGS {
        out.push(format!(
            "ignoring {} more NCCL variables the model does not use",
            ignored.len() - MAX_WARNINGS
        ));
    }
    out
}

pub(crate) fn mode(m: ModeArg) -> Mode {
    match m {
        ModeArg::Auto => Mode::Auto,
        ModeArg::Aggregated => Mode::Aggregated,
        ModeArg::Detailed => Mode::Detailed,
    }
}

/// How `--format` spells an nccl layout ("nccl" or "nccl-json"), for its errors.
pub(crate) fn nccl_name(format: SimFmt) -> &'static str {
    if matches!(format, SimFmt::NcclJson) { "nccl-json" } else { "nccl" }
}

/// The flags that shape an nccl-tests-like sweep (`simulate --collective/--min-bytes/…`).
pub(crate) struct SweepFlags {
    pub(crate) collective: Option<String>,
    pub(crate) min_bytes: Option<String>,
    pub(crate) max_bytes: Option<String>,
    pub(crate) factor: Option<u64>,
    pub(crate) dtype: Option<String>,
    pub(crate) op: Option<String>,
    /// nccl-tests' -n, -w and -c: what the nccl layouts print of the run.
    pub(crate) iters: Option<u32>,
    pub(crate) warmup_iters: Option<u32>,
    pub(crate) check: Option<u32>,
}

impl SweepFlags {
    /// The flags given, by name.
    pub(crate) fn given(&self) -> [(&'static str, bool); 9] {
        [
            ("--collective", self.collective.is_some()),
            ("--min-bytes", self.min_bytes.is_some()),
            ("--max-bytes", self.max_bytes.is_some()),
            ("--factor", self.factor.is_some()),
            ("--dtype", self.dtype.is_some()),
            ("--op", self.op.is_some()),
            ("--iters", self.iters.is_some()),
            ("--warmup-iters", self.warmup_iters.is_some()),
            ("--check", self.check.is_some()),
        ]
    }

    /// The first of -n, -w and -c given (what only the nccl layouts print), by its long name.
    pub(crate) fn run_flag(&self) -> Option<&'static str> {
        self.given()[6..].iter().find(|f| f.1).map(|f| f.0)
    }

    /// The run the nccl layouts print: nccl-tests' defaults where a flag is not given.
    pub(crate) fn test_run(&self) -> collsim::report::nccl::TestRun {
        let d = collsim::report::nccl::TestRun::default();
        collsim::report::nccl::TestRun {
            iters: self.iters.unwrap_or(d.iters),
            warmup_iters: self.warmup_iters.unwrap_or(d.warmup_iters),
            check: self.check.map_or(d.check, |c| c != 0),
        }
    }
}

/// Sets the flags on the scenario's sweep and returns it, checked.
pub(crate) fn apply_sweep_flags(s: &mut Scenario, f: &SweepFlags) -> Result<SweepSpec> {
    let Some(sw) = s.sweep_mut() else {
        bail!("the scenario's workload is neither a sweep nor a DDP step");
    };
    if let Some(c) = &f.collective
        && !sw.set_collective(c)
    {
        return Err(usage(format!(
            "--collective: {}",
            config::unknown_name("collective", c, &SweepSpec::names())
        )));
    }
    if let Some(b) = &f.min_bytes {
        sw.min_bytes = parse_size("--min-bytes", b)?;
    }
    if let Some(b) = &f.max_bytes {
        sw.max_bytes = parse_size("--max-bytes", b)?;
    }
    if let Some(x) = f.factor {
        sw.factor = x;
    }
    if let Some(d) = &f.dtype {
        sw.dtype = DataType::parse(d).ok_or_else(|| {
            usage(format!("--dtype: {}", config::unknown_name("data type", d, &DataType::NAMES)))
        })?;
    }
    if let Some(o) = &f.op {
        sw.op = ReduceOp::parse(o).ok_or_else(|| {
            usage(format!("--op: {}", config::unknown_name("reduction", o, &ReduceOp::NAMES)))
        })?;
    }
    // A barrier is one float whatever the size flags say (its table says so).
    if sw.barrier {
        sw.set_collective("barrier");
    }
    if let Err((field, msg)) = sw.check() {
        let flag = field.replace("workload.", "--").replace('_', "-");
        // The flags given made the sweep what it is: a usage error. (A scenario's own sweep
        // was checked where it was read, on its line.)
        if f.given().iter().any(|g| g.1) {
            bail_usage!("{flag}: {msg}");
        }
        bail!("{flag}: {msg}");
    }
    Ok(sw.clone())
}

/// What `topo import` writes must read back. Where it does not, the cause is a value in the
/// user's file that no topology takes, so the error points there (`source:line:col`, where the
/// value has a place in it) and quotes the line it became.
pub(crate) fn check_imported(source: &str, imported: &config::import::Imported) -> Result<()> {
    let toml = &imported.toml;
    config::parse_topology("imported topology", toml).map_err(|e| {
        let what = "what it describes is no topology collsim can load";
        match e {
            config::ConfigError::At { line, msg, .. } => {
                let quote = toml.lines().nth(line.saturating_sub(1)).unwrap_or_default().trim();
                match imported.origin(line) {
                    Some((l, c)) => {
                        anyhow!("{source}:{l}:{c}: {what}: {msg} (imported as {quote:?})")
                    }
                    None => anyhow!(
                        "{source}: {what}: {msg} (in the imported TOML's line {line}: {quote:?})"
                    ),
                }
            }
            config::ConfigError::File { msg, .. } => anyhow!("{source}: {what}: {msg}"),
            other => anyhow!(other),
        }
    })?;
    Ok(())
}

/// A usage error if the output `flag` names, `out`, would replace one of `inputs` (as the run's
/// end would refuse it, but before the work).
pub(crate) fn refuse_overwrite(flag: &str, out: &Path, inputs: &[PathBuf]) -> Result<()> {
    report::output::check_paths(inputs, &[(flag, out)]).map_err(usage)
}
