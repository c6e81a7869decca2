//! The cluster flags every command shares (`--topology`, `--nodes`, `--gpus-per-node`,
//! `--gpus-per-process`, `--nccl`, `--nccl-version`), applied to a scenario or making one, with
//! the checks that make a bad flag a usage error naming it and a bad file an input error naming
//! its line.

use crate::collective::Collective;
use crate::comm::env::NcclEnv;
use crate::units::Bytes;
use crate::workload::sweep::SweepSpec;
use crate::workload::{DataType, ReduceOp};

use super::{MAX_NODES, MAX_RANKS, PlacementSpec, Scenario, Workload, resolve_topology};

/// The cluster flags of a command line (each `None` or empty where not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    /// `--topology`: a preset name or a topology TOML.
    pub topology: Option<String>,
    /// `--nodes`.
    pub nodes: Option<usize>,
    /// `--gpus-per-node`.
    pub gpus_per_node: Option<usize>,
    /// `--gpus-per-process`.
    pub gpus_per_process: Option<usize>,
    /// `--nccl KEY=VALUE`, in order (a later one for the same key wins).
    pub nccl: Vec<String>,
    /// `--nccl-version`.
    pub nccl_version: Option<String>,
}

/// Why the flags do not apply: the command line's fault (exit 2), or a file's (exit 1).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FlagError {
    /// A flag's value, or flags that do not go together.
    #[error("{0}")]
    Usage(String),
    /// A file the flags name, or a scenario value the flags clash with.
    #[error("{0}")]
    Input(String),
}

/// The NCCL variables a scenario sets that the model does not use: the run's own, then each
/// job's by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ignored {
    /// The scenario's (and the flags').
    pub run: Vec<String>,
    /// Each job's own `[job.nccl]`.
    pub jobs: Vec<(String, Vec<String>)>,
}

/// `--nodes n` within what collsim builds.
pub fn check_nodes(n: usize) -> Result<(), FlagError> {
    if n == 0 {
        return Err(FlagError::Usage("--nodes 0: need at least one node".into()));
    }
    if n > MAX_NODES {
        return Err(FlagError::Usage(format!(
            "--nodes {n}: at most {MAX_NODES} (and at most {MAX_RANKS} GPUs in all: a larger cluster's simulation does not keep to 10 s and 2 GB)"
        )));
    }
    Ok(())
}

/// `nodes` of `gpus_per_node` GPUs within [`MAX_RANKS`].
pub fn check_ranks(nodes: usize, gpus_per_node: usize) -> Result<(), String> {
    let ranks = nodes.saturating_mul(gpus_per_node);
    if ranks > MAX_RANKS {
        return Err(format!(
            "{nodes} nodes of {gpus_per_node} GPUs are {ranks} ranks, more than the {MAX_RANKS} collsim simulates"
        ));
    }
    Ok(())
}

impl Flags {
    /// Applies the flags to `base` (or, with none, makes a scenario of `--topology`: one node,
    /// every GPU, nccl-tests' all_reduce sweep from 8 B to 8 GiB). Returns it with the NCCL
    /// variables it sets that the model does not use.
    pub fn apply(&self, base: Option<Scenario>) -> Result<(Scenario, Ignored), FlagError> {
        let usage = |m: String| FlagError::Usage(m);
        // The flags' NCCL settings together, before any file's: a bad value or two that do
        // not go together is a usage error naming the flag.
        let mut flagged: Vec<(String, String)> = Vec::new();
        for kv in &self.nccl {
            let (k, v) = NcclEnv::split_pair(kv).map_err(usage)?;
            // A tuner file's bad row is bad input; a bad value as typed is a misused flag.
            NcclEnv::from_pairs([(k.as_str(), v.as_str())]).map_err(|e| {
                if NcclEnv::is_file_error(&e) {
                    FlagError::Input(format!("--nccl {e}"))
                } else {
                    usage(format!("--nccl {e}"))
                }
            })?;
            flagged.retain(|(key, _)| *key != k);
            flagged.push((k, v));
        }
        if let Some(v) = &self.nccl_version {
            NcclEnv::from_pairs([("version", v.as_str())])
                .map_err(|e| usage(format!("--nccl-version {v:?}: {}", e.reason)))?;
        }
        NcclEnv::from_pairs(flagged.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| usage(format!("--nccl {e}")))?;
        let topology_flag = |t: &str| {
            resolve_topology(t, None).map_err(|e| {
                // A name that is neither a file nor a preset is the flag's fault; a file that
                // does not read is the file's.
                if std::path::Path::new(t).exists() {
                    FlagError::Input(e.to_string())
                } else {
                    usage(format!("--topology {e}"))
                }
            })
        };
        let mut s = match (base, &self.topology) {
            (Some(mut s), Some(t)) => {
                let (src, node) = topology_flag(t)?;
                s.topology = src;
                s.gpus_per_node = s.gpus_per_node.min(node.gpu.count);
                s.node = node;
                s.recarry().map_err(|e| FlagError::Input(format!("--topology {t}: {e}")))?;
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
                    backend: Default::default(),
                    barrier: false,
                };
                Scenario {
                    topology,
                    gpus_per_node: node.gpu.count,
                    gpus_per_process: 1,
                    node,
                    nodes: 1,
                    workload: Workload::Sweep(sweep),
                    nccl: Vec::new(),
                    nccl_at: Default::default(),
                    placement: PlacementSpec::default(),
                    jobs: Vec::new(),
                    background: Vec::new(),
                }
            }
            (None, None) => {
                return Err(usage(
                    "no scenario file and no --topology: give one (try `collsim simulate scenarios/quickstart.toml`)".into(),
                ));
            }
        };
        if !s.jobs.is_empty() {
            let flags = [
                ("--topology", self.topology.is_some()),
                ("--nodes", self.nodes.is_some()),
                ("--gpus-per-node", self.gpus_per_node.is_some()),
            ];
            if let Some((f, _)) = flags.iter().find(|f| f.1) {
                return Err(usage(format!(
                    "{f}: the scenario's [[job]] tables place each job on its cluster's nodes; change [cluster] and the jobs in the file"
                )));
            }
        }
        if let Some(n) = self.nodes {
            check_nodes(n)?;
            s.nodes = n;
        }
        match self.gpus_per_node {
            Some(0) => {
                return Err(usage("--gpus-per-node 0: need at least one GPU per node".into()));
            }
            Some(g) if g > s.node.gpu.count => {
                return Err(usage(format!(
                    "--gpus-per-node {g}: a {} node has {} GPUs",
                    s.node.name, s.node.gpu.count
                )));
            }
            Some(g) => s.gpus_per_node = g,
            None => {}
        }
        if self.nodes.is_some() || self.gpus_per_node.is_some() {
            check_ranks(s.nodes, s.gpus_per_node)
                .map_err(|e| usage(format!("--nodes {}: {e}", s.nodes)))?;
        }
        if let Some(g) = self.gpus_per_process {
            if g == 0 || s.gpus_per_node % g != 0 {
                return Err(usage(format!(
                    "--gpus-per-process {g}: must divide the {} GPUs used per node (a process drives GPUs of one node)",
                    s.gpus_per_node
                )));
            }
            s.gpus_per_process = g;
        } else if s.gpus_per_node % s.gpus_per_process != 0 {
            return Err(usage(format!(
                "--gpus-per-node {}: the scenario's cluster.gpus_per_process {} does not divide it",
                s.gpus_per_node, s.gpus_per_process
            )));
        }
        if s.gpus_per_process > 1
            && let Workload::Ddp(spec) = &s.workload
        {
            return Err(FlagError::Input(format!(
                "--gpus-per-process {}: {}",
                s.gpus_per_process,
                super::scenario::one_process_why(spec)
            )));
        }
        let any_flag = !flagged.is_empty() || self.nccl_version.is_some();
        for (k, v) in flagged {
            // The command line wins over every job's own [job.nccl] too.
            for j in &mut s.jobs {
                j.nccl.retain(|(key, _)| *key != k);
            }
            s.nccl.retain(|(key, _)| *key != k);
            s.nccl_at.remove(&k);
            s.nccl.push((k, v));
        }
        if let Some(v) = &self.nccl_version {
            s.nccl.retain(|(key, _)| key != "version");
            s.nccl_at.remove("version");
            s.nccl.push(("version".into(), v.clone()));
        }
        // Reject bad values now and list the variables the model does not use. The file's own
        // values were checked together when it was read: a clash here involves a flag.
        let env = NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| {
                FlagError::Input(match s.nccl_at.get(&e.key) {
                    Some(at) if any_flag => format!("{at}: nccl.{e} (with the --nccl flags)"),
                    Some(at) => format!("{at}: nccl.{e}"),
                    None => format!("--nccl {e}"),
                })
            })?;
        let mut ignored = Ignored { run: env.ignored, jobs: Vec::new() };
        for j in &s.jobs {
            let own = NcclEnv::from_pairs(j.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| FlagError::Input(e.to_string()))?;
            ignored.jobs.push((j.name.clone(), own.ignored));
        }
        Ok((s, ignored))
    }
}
