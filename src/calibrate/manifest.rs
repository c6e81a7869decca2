//! A manifest of nccl-tests logs (`calibration/data/manifest.csv`) resolved into the curves
//! `validate --manifest` checks: each row's log read, its test picked per collective, and the
//! scenario it ran on built from the row's topology, layout and NCCL variables.

use std::path::{Path, PathBuf};

use crate::comm::env::NcclEnv;
use crate::config::{self, Flags, Ignored};

use super::accuracy::{Curve, read_manifest};
use super::logs::{self, Said};
use super::pipeline::LogInput;

/// A manifest's curves.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// One curve per row and collective, in the manifest's order.
    pub curves: Vec<Curve>,
    /// The files read: the manifest, then each curve's log.
    pub inputs: Vec<PathBuf>,
}

/// What resolving a manifest says as it goes, for stderr.
#[derive(Debug, Clone, PartialEq)]
pub enum Told {
    /// A log's warning (its notes are not taken).
    Said(Said),
    /// The NCCL variables of the first curve's scenario that the model does not use.
    Ignored(Ignored),
}

/// Reads manifest `path` ([`read_manifest`]).
pub fn read(path: &Path) -> Result<Vec<super::accuracy::ManifestRow>, String> {
    let name = path.display().to_string();
    read_manifest(&name, &config::load_text(path).map_err(|e| e.to_string())?)
}

/// Resolves the curves of manifest `path`'s `rows`, each on the setup its row records,
/// `flags`' NCCL variables after the row's (the flags win), telling `tell` what it says as it
/// goes. Errors name the manifest's line.
pub fn resolve(
    path: &Path,
    rows: &[super::accuracy::ManifestRow],
    flags: &Flags,
    tell: &mut dyn FnMut(Told),
) -> Result<Resolved, String> {
    let name = path.display().to_string();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Resolved { curves: Vec::new(), inputs: vec![path.to_path_buf()] };
    for row in rows {
        let at = format!("{name}:{}", row.line);
        let log = dir.join(&row.file);
        out.inputs.push(log.clone());
        let several = row.collectives.len() > 1;
        for coll in &row.collectives {
            let mut said = Vec::new();
            let read = logs::read(&log, Some(coll), None, &mut said);
            said.into_iter().for_each(|l| tell(Told::Said(l)));
            let (test, c) = read.map_err(|e| format!("{at}: collective: {e}"))?;
            // The row's layout must be the log's where the log lists its ranks; where the
            // row states only one of the two counts, the log's layout is used.
            let (nodes, gpus_per_node) = match (row.nodes, row.gpus_per_node) {
                (Some(n), Some(g)) => (Some(n), Some(g)),
                _ => (None, None),
            };
            if let (Some(n), Some(g), Some((ranks, hosts))) = (nodes, gpus_per_node, test.layout())
                && (n * g != ranks || n != hosts)
            {
                return Err(format!(
                    "{at}: nodes/gpus_per_node: {n} x {g}, but {} lists {ranks} ranks on {hosts} host(s)",
                    log.display()
                ));
            }
            let topology = match &row.topology {
                Some(t) if config::preset_names().contains(&t.as_str()) => t.clone(),
                Some(t) => dir.join(t).display().to_string(),
                None => {
                    let gpu = test.setup.gpu_name.as_deref().unwrap_or("no GPU named");
                    match crate::hw::gpus::from_reported_name(gpu) {
                        Some((_, preset)) => preset.to_string(),
                        None => {
                            return Err(format!(
                                "{at}: collsim_topology: empty, and the log's GPUs ({gpu}) have no preset; name one"
                            ));
                        }
                    }
                }
            };
            // The row's variables first; flags given to validate come after them and win.
            for kv in &row.nccl {
                let (k, v) = NcclEnv::split_pair(kv)
                    .map_err(|e| format!("{at}: collsim_nccl: {kv}: {e}"))?;
                let env = NcclEnv::from_pairs([(k.as_str(), v.as_str())])
                    .map_err(|e| format!("{at}: collsim_nccl: {e}"))?;
                if env.ignored.contains(&k) {
                    return Err(format!("{at}: collsim_nccl: {k}: not a variable the model uses"));
                }
            }
            let own = Flags {
                topology: Some(topology),
                nodes,
                gpus_per_node,
                nccl: row.nccl.iter().chain(&flags.nccl).cloned().collect(),
                ..flags.clone()
            };
            let (s, ignored) = own.apply(None).map_err(|e| format!("{at}: {e}"))?;
            if out.curves.is_empty() {
                tell(Told::Ignored(ignored));
            }
            let id = if several { format!("{}@{coll}", row.id) } else { row.id.clone() };
            if out.curves.iter().any(|c| c.id == id) {
                return Err(format!("{at}: curve_id: {id} is already a curve of this manifest"));
            }
            let given = logs::Given {
                nodes: nodes.is_some(),
                gpus_per_node: gpus_per_node.is_some(),
                gpus_per_process: own.gpus_per_process,
                nccl_version: own.nccl_version.is_some(),
            };
            let (s, said) =
                logs::scenario_of(&s, given, &id, &test, true).map_err(|e| format!("{at}: {e}"))?;
            said.into_iter()
                .filter(|l| matches!(l, Said::Warning(_)))
                .for_each(|l| tell(Told::Said(l)));
            let curve = Curve {
                id: id.clone(),
                cluster: row.cluster.clone(),
                input: LogInput {
                    name: format!("{at}: {}", log.display()),
                    test,
                    coll: c,
                    is_fit: None,
                    scenario: s,
                },
            };
            if let Some(other) = out
                .curves
                .iter()
                .find(|c| c.cluster == curve.cluster && c.generation() != curve.generation())
            {
                return Err(format!(
                    "{at}: cluster: {} holds {} GPUs here and {} ones in {}; a cluster is one GPU generation",
                    curve.cluster,
                    curve.generation(),
                    other.generation(),
                    other.id
                ));
            }
            out.curves.push(curve);
        }
    }
    Ok(out)
}
