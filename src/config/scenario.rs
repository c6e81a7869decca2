//! Scenario files: which cluster, which workload, which NCCL environment.

use std::path::Path;

use toml::Spanned;

use super::raw::RawScenario;
use super::{ConfigError, PlacementSpec, Source, TopologySource, resolve_topology};
use crate::collective::Collective;
use crate::hw::NodeSpec;
use crate::units::Bytes;
use crate::workload::{DataType, ReduceOp};

/// An nccl-tests-like sweep: sizes from `min_bytes` to `max_bytes`, each `factor` times the last.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepSpec {
    /// The collective.
    pub collective: Collective,
    /// First size (bytes per rank, as nccl-tests' `-b`).
    #[serde(serialize_with = "ser_bytes")]
    pub min_bytes: Bytes,
    /// Last size (`-e`).
    #[serde(serialize_with = "ser_bytes")]
    pub max_bytes: Bytes,
    /// Multiplicative step (`-f`).
    pub factor: u64,
    /// Element type (`-d`).
    pub dtype: DataType,
    /// Reduction (`-o`).
    pub op: ReduceOp,
}

fn ser_bytes<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(b.get())
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scenario {
    /// Where the topology came from.
    pub topology: TopologySource,
    /// The node template.
    pub node: NodeSpec,
    /// Nodes.
    pub nodes: usize,
    /// GPUs used per node (the first ones).
    pub gpus_per_node: usize,
    /// The workload.
    pub sweep: SweepSpec,
    /// NCCL_* variables as given.
    pub nccl: Vec<(String, String)>,
    /// Where the nodes sit.
    pub placement: PlacementSpec,
}

impl SweepSpec {
    /// Checks the sweep's own consistency; `Err` holds the field and the reason.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.min_bytes > self.max_bytes {
            return Err((
                "workload.min_bytes",
                format!("{} is larger than max_bytes {}", self.min_bytes, self.max_bytes),
            ));
        }
        if self.factor < 2 {
            return Err(("workload.factor", format!("must be at least 2 (got {})", self.factor)));
        }
        Ok(())
    }
}

fn positive(
    src: &Source<'_>,
    field: &str,
    v: &Spanned<i64>,
    max: i64,
) -> Result<usize, ConfigError> {
    src.check(field, v, |&n| {
        if n < 1 {
            Err(format!("must be at least 1 (got {n})"))
        } else if n > max {
            Err(format!("must be at most {max} (got {n})"))
        } else {
            Ok(n as usize)
        }
    })
}

/// Parses and validates a scenario; `file` names it in errors and anchors relative topology
/// paths.
pub fn parse_scenario(file: &str, text: &str) -> Result<Scenario, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawScenario = src.parse()?;
    let base = Path::new(file).parent();
    let (topology, node) =
        resolve_topology(raw.cluster.topology.get_ref(), base).map_err(|e| match e {
            ConfigError::File { msg, .. } => src.error_at(
                raw.cluster.topology.span().start,
                format!("cluster.topology: {:?}: {msg}", raw.cluster.topology.get_ref()),
            ),
            other => other,
        })?;
    let nodes = match &raw.cluster.nodes {
        Some(n) => positive(&src, "cluster.nodes", n, 1 << 20)?,
        None => 1,
    };
    let gpus_per_node = match &raw.cluster.gpus_per_node {
        Some(g) => {
            let g_n = positive(&src, "cluster.gpus_per_node", g, 1 << 20)?;
            if g_n > node.gpu.count {
                return Err(src.error_at(
                    g.span().start,
                    format!(
                        "cluster.gpus_per_node: {g_n} is more than the {} GPUs of a {} node",
                        node.gpu.count, node.name
                    ),
                ));
            }
            g_n
        }
        None => node.gpu.count,
    };
    let w = &raw.workload;
    let collective = src.check("workload.collective", &w.collective, |c| {
        Collective::parse(c).ok_or_else(|| format!("unknown collective {c:?} (all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv)"))
    })?;
    let min_bytes =
        src.check("workload.min_bytes", &w.min_bytes, |q| q.parse_with(Bytes::parse))?;
    let max_bytes =
        src.check("workload.max_bytes", &w.max_bytes, |q| q.parse_with(Bytes::parse))?;
    let factor = match &w.factor {
        Some(f) => positive(&src, "workload.factor", f, 1 << 20)? as u64,
        None => 2,
    };
    let dtype = match &w.dtype {
        Some(d) => src.check("workload.dtype", d, |d| {
            DataType::parse(d).ok_or_else(|| format!("unknown data type {d:?}"))
        })?,
        None => DataType::Float,
    };
    let op = match &w.op {
        Some(o) => src.check("workload.op", o, |o| {
            ReduceOp::parse(o)
                .ok_or_else(|| format!("unknown reduction {o:?} (sum, prod, min, max, avg)"))
        })?,
        None => ReduceOp::Sum,
    };
    let sweep = SweepSpec { collective, min_bytes, max_bytes, factor, dtype, op };
    if let Err((field, msg)) = sweep.check() {
        let at = if field.ends_with("factor") {
            w.factor.as_ref().map_or(0, |f| f.span().start)
        } else {
            w.min_bytes.span().start
        };
        return Err(src.error_at(at, format!("{field}: {msg}")));
    }
    let mut nccl = Vec::new();
    for (k, v) in raw.nccl.iter().flatten() {
        if !k.starts_with("NCCL_") && k != "version" {
            return Err(src.error_at(v.span().start, format!("nccl.{k}: not an NCCL_* variable")));
        }
        let value = match v.get_ref() {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => (*b as u8).to_string(),
            _ => {
                return Err(src.error_at(
                    v.span().start,
                    format!("nccl.{k}: give the value as a string or an integer"),
                ));
            }
        };
        nccl.push((k.clone(), value));
    }
    let placement = match &raw.placement {
        Some(p) => PlacementSpec::parse(&src, p, nodes)?,
        None => PlacementSpec::default(),
    };
    Ok(Scenario { topology, node, nodes, gpus_per_node, sweep, nccl, placement })
}
