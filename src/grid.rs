//! `simulate --sweep`: a scenario at every point of a cross product of key values. Keys edit
//! the scenario file (`workload.ddp.bucket_cap_mb`, `cluster.nodes`), its topology
//! (`topology.nic.speed`) or the timing profile (`profile.bandwidth.net`), each in its TOML text
//! before it is read, so that a value is checked exactly as it would be in the file, with its
//! line and column. The command line parses the axes ([`axes`]), lists the [`points`], and for
//! each one builds its inputs ([`Sources::scenario_at`], [`topology_at`], [`Sources::profile_at`])
//! and runs it ([`run_point`]).

use crate::collective::{Mode, TimingParams};
use crate::config::{self, Scenario};
use crate::workload::ddp::StepResult;
use crate::workload::memory::DdpMemory;
use crate::workload::sweep::Row;

/// A swept key (dotted, as in the file it edits) and its values, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The key, `workload.` added to the workload's short tables (`ddp.X`).
    pub key: String,
    /// Its values, as written.
    pub values: Vec<String>,
}

/// A `--sweep` argument that cannot run as given: a usage error, one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct AxisError(pub String);

/// A key a flag of the command sets at every point: the flag and the key (`--nodes`,
/// `cluster.nodes`). A swept `nccl.VAR` is refused where `--nccl` sets `VAR`: give it as
/// (`--nccl`, `nccl.VAR`).
pub type Fixed<'a> = (&'a str, String);

/// The axes of `--sweep KEY=V1,V2,...` arguments, checked: dotted keys, `ddp.`, `dp.`, `fsdp.`,
/// `zero.`, `parallel.` and `model.` short for `workload.` ones, no key swept twice or set by a
/// flag in `fixed`, no empty or repeated value.
pub fn axes(sweeps: &[String], fixed: &[Fixed<'_>]) -> Result<Vec<Axis>, AxisError> {
    let fail = |m: String| Err(AxisError(m));
    let mut axes: Vec<Axis> = Vec::new();
    for s in sweeps {
        let Some((k, v)) = s.split_once('=') else {
            return fail(format!(
                "--sweep {s}: expected KEY=V1,V2,... (e.g. ddp.bucket_cap_mb=1,25)"
            ));
        };
        // The workload's tables, short: `ddp.X` is `workload.ddp.X`.
        let short = ["ddp.", "dp.", "fsdp.", "zero.", "parallel.", "model."]
            .iter()
            .any(|t| k.starts_with(t));
        let key = if short { format!("workload.{k}") } else { k.to_string() };
        if key.split('.').any(|p| p.trim().is_empty())
            || matches!(key.as_str(), "topology" | "profile")
        {
            return fail(format!(
                "--sweep {s}: {k:?} is not a key (KEY is dotted, e.g. cluster.nodes)"
            ));
        }
        if key == "topology.gpu.count" {
            return fail(format!(
                "--sweep {s}: the node's GPU count sets the defaults the scenario was read with; sweep cluster.gpus_per_node, or give one topology file per count"
            ));
        }
        // A flag sets its key at every point: the rows would be labelled with values that
        // never ran.
        if let Some((flag, _)) = fixed.iter().find(|(_, fk)| *fk == key) {
            return fail(match key.strip_prefix("nccl.") {
                Some(var) if *flag == "--nccl" => {
                    format!("--sweep {s}: --nccl sets {var} at every point; give one or the other")
                }
                _ => {
                    format!("--sweep {s}: {flag} sets {key} at every point; give one or the other")
                }
            });
        }
        let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
        if values.iter().all(String::is_empty) {
            return fail(format!("--sweep {s}: no values"));
        }
        // An empty value was dropped, and with it the point the user meant by it.
        if let Some(i) = values.iter().position(String::is_empty) {
            return fail(format!("--sweep {s}: value {} is empty (a stray comma?)", i + 1));
        }
        // One axis per key: a second would set the key again, and the first axis' labels would
        // name values that never ran.
        if axes.iter().any(|a| a.key == key) {
            return fail(format!(
                "--sweep {s}: {k} is swept twice; give all its values in one --sweep"
            ));
        }
        if let Some(v) =
            values.iter().enumerate().find_map(|(i, v)| values[..i].contains(v).then_some(v))
        {
            return fail(format!("--sweep {s}: value {v} given twice"));
        }
        axes.push(Axis { key, values });
    }
    Ok(axes)
}

/// One point of a sweep: each axis' key with its value there.
pub type Point = Vec<(String, String)>;

/// Every point of the cross product of `axes`, the first axis slowest.
pub fn points(axes: &[Axis]) -> Vec<Point> {
    let mut points: Vec<Point> = vec![Vec::new()];
    for a in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((a.key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

/// A point as the command line names it: `key=value` pairs, space-separated.
pub fn label(point: &Point) -> String {
    point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// The file a swept key edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The scenario file.
    Scenario,
    /// The scenario's topology (`topology.KEY`).
    Topology,
    /// The timing profile (`profile.KEY`).
    Profile,
}

/// Which file `key` edits, and the key there: `topology.KEY` the scenario's topology,
/// `profile.KEY` the timing profile, anything else the scenario.
pub fn target(key: &str) -> (Target, &str) {
    if let Some(k) = key.strip_prefix("topology.") {
        (Target::Topology, k)
    } else if let Some(k) = key.strip_prefix("profile.") {
        (Target::Profile, k)
    } else {
        (Target::Scenario, key)
    }
}

/// The keys of `point` that edit `file`, as keys of that file.
fn keys(point: &Point, file: Target) -> Vec<(String, String)> {
    point
        .iter()
        .filter_map(|(k, v)| {
            let (f, key) = target(k);
            (f == file).then(|| (key.to_string(), v.clone()))
        })
        .collect()
}

/// Why a point's inputs cannot be read: the file (name) and what is wrong, one line, with the
/// line and column in the file as edited for the point where the value has a place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PointError {
    /// A value does not go into the file (`set_keys`).
    #[error("{file}: {reason}")]
    Edit {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The file as edited does not read.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A model profile does not carry to the topology's GPU.
    #[error("--sweep topology.*: {0}")]
    Recarry(String),
}

/// The texts a sweep edits: the scenario's and the timing profile's, with their names.
pub struct Sources<'a> {
    /// The scenario file's name.
    pub name: &'a str,
    /// Its text.
    pub text: &'a str,
    /// The profile's name (a file, or the built-in default's).
    pub profile_name: &'a str,
    /// Its text.
    pub profile_text: &'a str,
}

impl Sources<'_> {
    /// The scenario at `point`: its text with the point's scenario keys set, read.
    pub fn scenario_at(&self, point: &Point) -> Result<Scenario, PointError> {
        let edited = config::set_keys(self.text, &keys(point, Target::Scenario))
            .map_err(|reason| PointError::Edit { file: self.name.to_string(), reason })?;
        Ok(config::parse_scenario(self.name, &edited)?)
    }

    /// The profile at `point`, where it sets profile keys (`None`: the profile as it is).
    pub fn profile_at(&self, point: &Point) -> Result<Option<TimingParams>, PointError> {
        let prof_keys = keys(point, Target::Profile);
        if prof_keys.is_empty() {
            return Ok(None);
        }
        let text = config::set_keys(self.profile_text, &prof_keys)
            .map_err(|reason| PointError::Edit { file: self.profile_name.to_string(), reason })?;
        Ok(Some(config::parse_profile(self.profile_name, &text)?))
    }
}

/// Sets `point`'s topology keys on `s`'s topology (the file or preset it names, after any flag
/// changed it), and carries a model profile's step to the GPU it has then.
pub fn topology_at(s: &mut Scenario, point: &Point) -> Result<(), PointError> {
    let topo_keys = keys(point, Target::Topology);
    if topo_keys.is_empty() {
        return Ok(());
    }
    let (file, text) = config::topology_text(&s.topology)?;
    let edited = config::set_keys(&text, &topo_keys)
        .map_err(|reason| PointError::Edit { file: file.clone(), reason })?;
    s.node = config::parse_topology(&file, &edited)?;
    s.recarry().map_err(PointError::Recarry)
}

/// What one point ran: a training step with its memory per GPU and why its model does not fit
/// (if it does not), or an nccl-tests-like sweep's rows.
#[derive(Debug, Clone)]
pub enum PointRun {
    /// A training step.
    Step(Box<StepResult>, Option<Box<DdpMemory>>, Option<String>),
    /// A collective sweep's rows.
    Rows(Vec<Row>),
}

/// Runs the scenario of a point: its training step, or its collective sweep.
pub fn run_point(
    s: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<PointRun, crate::sim::Error> {
    if let Some(spec) = s.ddp() {
        let step = crate::sim::simulate_ddp(s, params, mode)?.0;
        let mem = crate::workload::memory::known_memory(spec, step.world, s.gpus_per_node);
        let misfit = crate::sim::misfit_warning(s, spec, step.world);
        return Ok(PointRun::Step(Box::new(step), mem.map(Box::new), misfit));
    }
    Ok(PointRun::Rows(crate::sim::simulate(s, params, mode)?.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn points_cross_the_axes_first_axis_slowest_with_short_keys_expanded() {
        let axes = axes(&args(&["ddp.bucket_cap_mb=1,25", "cluster.nodes=2,4"]), &[]).unwrap();
        assert_eq!(axes[0].key, "workload.ddp.bucket_cap_mb");
        let labels: Vec<String> = points(&axes).iter().map(label).collect();
        assert_eq!(
            labels,
            [
                "workload.ddp.bucket_cap_mb=1 cluster.nodes=2",
                "workload.ddp.bucket_cap_mb=1 cluster.nodes=4",
                "workload.ddp.bucket_cap_mb=25 cluster.nodes=2",
                "workload.ddp.bucket_cap_mb=25 cluster.nodes=4",
            ]
        );
        assert_eq!(target("topology.nic.speed"), (Target::Topology, "nic.speed"));
        assert_eq!(target("profile.bandwidth.net"), (Target::Profile, "bandwidth.net"));
    }

    #[test]
    fn axes_a_flag_sets_or_that_repeat_are_refused() {
        let fixed = [("--nodes", "cluster.nodes".to_string()), ("--nccl", "nccl.NCCL_ALGO".into())];
        let err = |a: &[&str]| axes(&args(a), &fixed).unwrap_err().0;
        assert!(err(&["cluster.nodes=1,2"]).contains("--nodes sets cluster.nodes at every point"));
        assert!(
            err(&["nccl.NCCL_ALGO=Ring,Tree"]).contains("--nccl sets NCCL_ALGO at every point")
        );
        assert!(err(&["cluster.gpus_per_node=1,1"]).contains("value 1 given twice"));
        assert!(err(&["cluster.gpus_per_node=1,,2"]).contains("value 2 is empty"));
        assert!(err(&["a=1", "a=2"]).contains("a is swept twice"));
        assert!(err(&["nodes"]).contains("expected KEY=V1,V2"));
    }
}
