//! The cluster flags every subcommand shares, applied to a scenario; profiles; NCCL blame.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

use collsim::collective::{Collective, Mode, TimingParams};
use collsim::comm::env::NcclEnv;
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
    if n == 0 {
        bail_usage!("--nodes 0: need at least one node");
    }
    if n > config::MAX_NODES {
        bail_usage!(
            "--nodes {n}: at most {} (and at most {} GPUs in all: a larger cluster's simulation does not keep to 10 s and 2 GB)",
            config::MAX_NODES,
            config::MAX_RANKS
        );
    }
    Ok(())
}

pub(crate) fn parse_size(flag: &str, s: &str) -> Result<Bytes> {
    let b = Bytes::parse_cli(s).map_err(|e| usage(format!("{flag} {s}: {e}")))?;
    let max = collsim::workload::sweep::MAX_CALL_BYTES;
    if b > max {
        bail_usage!("{flag} {s}: larger than {max}, more than any GPU holds");
    }
    Ok(b)
}

/// Applies the cluster flags to a scenario (or builds one from them).
pub(crate) fn apply_common(base: Option<Scenario>, c: &Common) -> Result<Scenario> {
    // The flags' NCCL settings together, before any file's: a bad value or two that do not go
    // together is a usage error naming the flag.
    let mut flagged: Vec<(String, String)> = Vec::new();
    for kv in &c.nccl {
        let (k, v) = NcclEnv::split_pair(kv).map_err(usage)?;
        NcclEnv::from_pairs([(k.as_str(), v.as_str())])
            .map_err(|e| usage(format!("--nccl {e}")))?;
        flagged.retain(|(key, _)| *key != k);
        flagged.push((k, v));
    }
    if let Some(v) = &c.nccl_version {
        NcclEnv::from_pairs([("version", v.as_str())])
            .map_err(|e| usage(format!("--nccl-version {v:?}: {}", e.reason)))?;
    }
    NcclEnv::from_pairs(flagged.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| usage(format!("--nccl {e}")))?;
    let topology_flag = |t: &str| {
        config::resolve_topology(t, None).map_err(|e| {
            // A name that is neither a file nor a preset is the flag's fault; a file that does
            // not read is the file's.
            if std::path::Path::new(t).exists() {
                anyhow!(e)
            } else {
                usage(format!("--topology {e}"))
            }
        })
    };
    let mut s = match (base, &c.topology) {
        (Some(mut s), Some(t)) => {
            let (src, node) = topology_flag(t)?;
            s.topology = src;
            s.gpus_per_node = s.gpus_per_node.min(node.gpu.count);
            s.node = node;
            recarry(&mut s, &format!("--topology {t}"))?;
            s
        }
        (Some(s), None) => s,
        (None, Some(t)) => {
            let (topology, node) = topology_flag(t)?;
            let sweep = SweepSpec {
                collective: Collective::AllReduce,
                min_bytes: Bytes::new(8),
                max_bytes: Bytes::from_gib(8),
                factor: 2,
                dtype: DataType::Float,
                op: ReduceOp::Sum,
            };
            Scenario {
                topology,
                gpus_per_node: node.gpu.count,
                gpus_per_process: 1,
                node,
                nodes: 1,
                workload: config::Workload::Sweep(sweep),
                nccl: Vec::new(),
                nccl_at: Default::default(),
                placement: config::PlacementSpec::default(),
                jobs: Vec::new(),
                background: Vec::new(),
            }
        }
        (None, None) => bail_usage!(
            "no scenario file and no --topology: give one (try `collsim simulate scenarios/quickstart.toml`)"
        ),
    };
    if !s.jobs.is_empty() {
        let flags = [
            ("--topology", c.topology.is_some()),
            ("--nodes", c.nodes.is_some()),
            ("--gpus-per-node", c.gpus_per_node.is_some()),
        ];
        if let Some((f, _)) = flags.iter().find(|f| f.1) {
            bail_usage!(
                "{f}: the scenario's [[job]] tables place each job on its cluster's nodes; change [cluster] and the jobs in the file"
            );
        }
    }
    if let Some(n) = c.nodes {
        check_nodes(n)?;
        s.nodes = n;
    }
    match c.gpus_per_node {
        Some(0) => bail_usage!("--gpus-per-node 0: need at least one GPU per node"),
        Some(g) if g > s.node.gpu.count => {
            bail_usage!("--gpus-per-node {g}: a {} node has {} GPUs", s.node.name, s.node.gpu.count)
        }
        Some(g) => s.gpus_per_node = g,
        None => {}
    }
    if c.nodes.is_some() || c.gpus_per_node.is_some() {
        collsim::check_ranks(s.nodes, s.gpus_per_node)
            .map_err(|e| usage(format!("--nodes {}: {e}", s.nodes)))?;
    }
    if let Some(g) = c.gpus_per_process {
        if g == 0 || s.gpus_per_node % g != 0 {
            bail_usage!(
                "--gpus-per-process {g}: must divide the {} GPUs used per node (a process drives GPUs of one node)",
                s.gpus_per_node
            );
        }
        s.gpus_per_process = g;
    } else if s.gpus_per_node % s.gpus_per_process != 0 {
        bail_usage!(
            "--gpus-per-node {}: the scenario's cluster.gpus_per_process {} does not divide it",
            s.gpus_per_node,
            s.gpus_per_process
        );
    }
    if s.gpus_per_process > 1 && matches!(s.workload, config::Workload::Ddp(_)) {
        bail!("--gpus-per-process {}: PyTorch DDP runs one process per GPU", s.gpus_per_process);
    }
    let any_flag = !flagged.is_empty() || c.nccl_version.is_some();
    for (k, v) in flagged {
        // The command line wins over every job's own [job.nccl] too.
        for j in &mut s.jobs {
            j.nccl.retain(|(key, _)| *key != k);
        }
        s.nccl.retain(|(key, _)| *key != k);
        s.nccl_at.remove(&k);
        s.nccl.push((k, v));
    }
    if let Some(v) = &c.nccl_version {
        s.nccl.retain(|(key, _)| key != "version");
        s.nccl_at.remove("version");
        s.nccl.push(("version".into(), v.clone()));
    }
    // Reject bad values now and list the variables the model does not use. The file's own
    // values were checked together when it was read: a clash here involves a flag.
    let env =
        NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| {
            match s.nccl_at.get(&e.key) {
                Some(at) if any_flag => anyhow!("{at}: nccl.{e} (with the --nccl flags)"),
                Some(at) => anyhow!("{at}: nccl.{e}"),
                None => anyhow!("--nccl {e}"),
            }
        })?;
    // Once a run: a sweep applies the flags at every point.
    static WARNED: std::sync::Once = std::sync::Once::new();
    // Each job's own variables too (they were taken without a word).
    let mut job_lines = Vec::new();
    for j in &s.jobs {
        let own = NcclEnv::from_pairs(j.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let name = &j.name;
        job_lines
            .extend(ignored_lines(&own.ignored).into_iter().map(|l| format!("job {name:?}: {l}")));
    }
    WARNED.call_once(|| {
        for line in ignored_lines(&env.ignored).into_iter().chain(job_lines) {
            say(line);
        }
    });
    Ok(s)
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

/// Carries a model profile's step to the GPU the scenario's cluster has now (after `--topology`
/// or a topology sweep changed it); `what` names what changed it in errors.
pub(crate) fn recarry(s: &mut Scenario, what: &str) -> Result<()> {
    s.recarry().map_err(|e| anyhow!("{what}: {e}"))
}

/// The flags that shape an nccl-tests-like sweep (`simulate --collective/--min-bytes/…`).
pub(crate) struct SweepFlags {
    pub(crate) collective: Option<String>,
    pub(crate) min_bytes: Option<String>,
    pub(crate) max_bytes: Option<String>,
    pub(crate) factor: Option<u64>,
    pub(crate) dtype: Option<String>,
    pub(crate) op: Option<String>,
}

impl SweepFlags {
    /// The flags given, by name.
    pub(crate) fn given(&self) -> [(&'static str, bool); 6] {
        [
            ("--collective", self.collective.is_some()),
            ("--min-bytes", self.min_bytes.is_some()),
            ("--max-bytes", self.max_bytes.is_some()),
            ("--factor", self.factor.is_some()),
            ("--dtype", self.dtype.is_some()),
            ("--op", self.op.is_some()),
        ]
    }
}

/// Sets the flags on the scenario's sweep and returns it, checked.
pub(crate) fn apply_sweep_flags(s: &mut Scenario, f: &SweepFlags) -> Result<SweepSpec> {
    let Some(sw) = s.sweep_mut() else {
        bail!("the scenario's workload is neither a sweep nor a DDP step");
    };
    if let Some(c) = &f.collective {
        sw.collective = Collective::parse(c)
            .ok_or_else(|| usage(format!("--collective {c}: unknown collective")))?;
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
        sw.dtype =
            DataType::parse(d).ok_or_else(|| usage(format!("--dtype {d}: unknown data type")))?;
    }
    if let Some(o) = &f.op {
        sw.op = ReduceOp::parse(o).ok_or_else(|| usage(format!("--op {o}: unknown reduction")))?;
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
