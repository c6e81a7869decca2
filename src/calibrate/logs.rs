//! What an nccl-tests log says about the run behind it: the test to compare ([`read`]), the
//! topology preset of its GPUs ([`topology_of`]) and the scenario it ran on ([`scenario_of`]):
//! its nodes and GPUs per node, GPU variant, GPUs per process, NCCL release and NCCL_*
//! variables. What was taken from a log, and where a flag disagrees with it, comes back as
//! [`Said`] lines for the command line to print.

use crate::collective::Collective;
use crate::comm::env::NcclEnv;
use crate::config::{self, Scenario};
use crate::workload::DataType;

use super::nccl_log::{self, LogTest};

/// A line about a log for stderr (without the `collsim: ` every line of collsim's begins with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A default taken from the log: printed where the command asks for notes.
    Note(String),
    /// A flag or file that disagrees with the log, or a value left out: always printed.
    Warning(String),
}

/// Why a log cannot be used: one line naming the log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct LogError(pub String);

impl From<config::ConfigError> for LogError {
    fn from(e: config::ConfigError) -> LogError {
        LogError(e.to_string())
    }
}

macro_rules! fail {
    ($($t:tt)*) => {
        LogError(format!($($t)*))
    };
}

/// Which cluster flags the command line was given: they win over what a log says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    /// `--nodes`.
    pub nodes: bool,
    /// `--gpus-per-node`.
    pub gpus_per_node: bool,
    /// `--gpus-per-process`, with its value.
    pub gpus_per_process: Option<usize>,
    /// `--nccl-version`.
    pub nccl_version: bool,
}

/// The scenario log `name` ran on: `s` with what the log says as defaults — nodes and GPUs per
/// node from its "Using devices" block (its distinct hosts), the GPU variant it names, the GPUs
/// per process of its header, its NCCL release and the NCCL_* variables NCCL reports. Flags
/// (`given`) win, with a warning where they disagree; every default taken is a note. With
/// `layout_from_flags`, `--nodes`/`--gpus-per-node` set the layout (validate); without, each
/// log keeps its own (calibrate).
pub fn scenario_of(
    s: &Scenario,
    given: Given,
    name: &str,
    test: &LogTest,
    layout_from_flags: bool,
) -> Result<(Scenario, Vec<Said>), LogError> {
    let mut said = Vec::new();
    let mut own = s.clone();
    let setup = &test.setup;
    let layout_flags = given.nodes || given.gpus_per_node;
    // Layout: the ranks and hosts of the "Using devices" block.
    if let Some((ranks, hosts)) = test.layout()
        && (ranks != s.nodes * s.gpus_per_node || hosts != s.nodes)
    {
        if layout_from_flags && layout_flags {
            said.push(Said::Warning(format!(
                "warning: {name} lists {ranks} ranks on {hosts} host(s); using {} nodes x {} GPUs as the flags say",
                s.nodes, s.gpus_per_node
            )));
        } else {
            let gpn = ranks / hosts;
            if gpn * hosts != ranks || gpn > s.node.gpu.count {
                return Err(fail!(
                    "{name}: {ranks} ranks on {hosts} host(s) do not fit {} nodes of {} GPUs",
                    s.node.name,
                    s.node.gpu.count
                ));
            }
            own.nodes = hosts;
            own.gpus_per_node = gpn;
            if layout_flags {
                // calibrate: the flags were given but each log keeps its own layout.
                said.push(Said::Warning(format!(
                    "warning: {name}: {ranks} ranks on {hosts} host(s): run on {hosts} nodes x {gpn} GPUs, as the log ran (calibrate takes each log's own layout, not --nodes/--gpus-per-node)"
                )));
            } else {
                said.push(Said::Note(format!(
                    "{name}: {ranks} ranks on {hosts} host(s): {hosts} nodes x {gpn} GPUs (give --nodes/--gpus-per-node to override)"
                )));
            }
        }
    }
    // The GPU: a variant of the topology's own model (A100-SXM4-40GB on an 80 GB node) takes
    // its place; another kind of GPU is only noted.
    if let Some(gpu) = &setup.gpu_name
        && let Some((model, _)) = crate::hw::gpus::from_reported_name(gpu)
        && model != own.node.gpu.model.name
    {
        match config::gpu_library()?.into_iter().find(|m| m.name == model) {
            Some(m) if m.sm == own.node.gpu.model.sm => {
                said.push(Said::Note(format!(
                    "{name}: the log's GPUs are {gpu}: {model} in place of the {}'s {}",
                    own.node.name, own.node.gpu.model.name
                )));
                own.node.gpu.model = m;
            }
            _ => said.push(Said::Warning(format!(
                "warning: {name}: the log's GPUs are {gpu}, the topology's {}",
                own.node.gpu.model.name
            ))),
        }
    }
    // Process layout: nccl-tests' nGpus.
    if let Some(g) = setup.gpus_per_process {
        match given.gpus_per_process {
            Some(f) if f != g => said.push(Said::Warning(format!(
                "warning: {name} ran {g} GPU(s) per process; using {f} as --gpus-per-process says"
            ))),
            Some(_) => {}
            None if own.gpus_per_node.is_multiple_of(g) => {
                if g > 1 {
                    said.push(Said::Note(format!(
                        "{name}: {g} GPUs per process (nccl-tests -g {g}; give --gpus-per-process to override)"
                    )));
                }
                own.gpus_per_process = g;
            }
            None => said.push(Said::Warning(format!(
                "warning: {name} ran {g} GPUs per process, which does not divide {} GPUs per node; using 1",
                own.gpus_per_node
            ))),
        }
    }
    // NCCL's release and the variables it says it read from the environment.
    if let Some(v) = &setup.nccl_version {
        let flag = given.nccl_version || own.nccl.iter().any(|(k, _)| k == "version");
        match crate::comm::tuning::NcclVersion::parse(v) {
            _ if flag => {}
            Some(_) => own.nccl.push(("version".into(), v.clone())),
            None => said.push(Said::Warning(format!(
                "{name}: NCCL {v}: no cost-model tables for it; using NCCL 2.30's"
            ))),
        }
    }
    let mut taken = Vec::new();
    for (k, v) in &setup.env {
        match own.nccl.iter().find(|(key, _)| key == k) {
            Some((_, set)) if set != v => said.push(Said::Warning(format!(
                "warning: {name} ran with {k}={v}; using {k}={set} as given"
            ))),
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
                    Err(e) => said.push(Said::Warning(format!("warning: {name}: {e}; left out"))),
                }
            }
        }
    }
    if !taken.is_empty() {
        said.push(Said::Note(format!("{name}: the log's NCCL environment: {}", taken.join(" "))));
    }
    Ok((own, said))
}

/// The topology preset for `test` when none is given: the preset of the GPU its log names;
/// `what` (the command) names what needs it in errors. Returns the preset and a note saying so.
pub fn topology_of(name: &str, test: &LogTest, what: &str) -> Result<(String, Said), LogError> {
    let gpu = test.setup.gpu_name.as_deref().ok_or_else(|| {
        fail!("{what} needs --topology: {name} names no GPU (a preset name or a topology TOML)")
    })?;
    let (_, preset) = crate::hw::gpus::from_reported_name(gpu).ok_or_else(|| {
        fail!("{what} needs --topology: {name}'s GPUs are {gpu}, which no preset has (a preset name or a topology TOML)")
    })?;
    let note = Said::Warning(format!(
        "{name}: topology {preset}, the preset for its {gpu} GPUs (give --topology to override)"
    ));
    Ok((preset.to_string(), note))
}

/// Reads an nccl-tests log (text or -J JSON) and picks the test to compare: the one of
/// `collective` if given, else the first; returns it with the collective it measured. `s`, if
/// given, says how many ranks ran where the log does not. What it assumes goes to `said`, also
/// when it then fails.
pub fn read(
    log: &std::path::Path,
    collective: Option<&str>,
    s: Option<&Scenario>,
    said: &mut Vec<Said>,
) -> Result<(LogTest, Collective), LogError> {
    let log_name = log.display().to_string();
    let text = config::load_text(log)?;
    // nccl-tests' -J JSON (and collsim-bench's results.json) or its text output.
    let tests = if text.trim_start().starts_with('{') {
        nccl_log::parse_json(&text).map_err(|e| fail!("{log_name}: {e}"))?
    } else {
        nccl_log::parse(&text).map_err(|e| fail!("{log_name}:{}: {}", e.line, e.reason))?
    };
    if tests.is_empty() {
        return Err(fail!(
            "{log_name}: no nccl-tests result table found (expected rows of size, count, type, redop, root, time, algbw, busbw ...)"
        ));
    }
    let wanted = match collective {
        Some(c) => Some(
            Collective::parse(c).ok_or_else(|| fail!("--collective {c}: unknown collective"))?,
        ),
        None => None,
    };
    let test = match wanted {
        Some(w) => tests
            .iter()
            .find(|t| t.collective == Some(w))
            .or_else(|| tests.iter().find(|t| t.collective.is_none()))
            .ok_or_else(|| fail!("{log_name}: no {} test in the log", w.name()))?,
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
                return Err(fail!(
                    "{log_name}: no collective named in the log, and its counts are per rank (size = count x {nranks} ranks), as all_gather and reduce_scatter print them; pass --collective"
                ));
            }
            said.push(Said::Warning(format!(
                "{log_name}: no collective named in the log; assuming all_reduce"
            )));
            Collective::AllReduce
        }
    };
    // All-reduce, broadcast, reduce and sendrecv count the whole message; the others per rank.
    let whole = matches!(
        coll,
        Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::SendRecv
            | Collective::Send { .. }
    );
    if let Some(r) = test.rows.first()
        && let Some(d) = DataType::parse(&r.dtype)
        && whole
        && r.count.checked_mul(d.size()) != Some(r.size_bytes)
    {
        return Err(fail!(
            "{log_name}: {} rows count the whole message (size = count x {} bytes of {}), but size {} has count {}: per-rank counts, as all_gather, reduce_scatter and alltoall print them; pass the right --collective",
            coll.name(),
            d.size(),
            r.dtype,
            r.size_bytes,
            r.count
        ));
    }
    Ok((test.clone(), coll))
}
