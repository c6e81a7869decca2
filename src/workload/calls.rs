//! A step as a list of calls (`kind = "trace"`): compute on the compute stream, collectives
//! and hook compute on the NCCL stream in the order issued, and the compute stream's waits on
//! the NCCL stream. `simulate --export-calls` writes a simulated DDP or FSDP step so; a
//! scenario with `kind = "trace"` and `calls = "FILE"` replays one, its compute kept and its
//! collectives timed again on the scenario's cluster. A PyTorch profiler trace
//! ([`super::kineto`]), an Nsight Systems JSON export ([`super::nsys`]) or a Chakra execution
//! trace ([`super::chakra`]) is read as one ([`read_step`]).
//!
//! The file is JSON:
//!
//! ```json
//! {"collsim_calls": 1, "ranks": 128, "calls": [
//!   {"compute_us": 812.5, "name": "fwd transformer.h.0"},
//!   {"nccl": [{"collective": "all_reduce", "bytes": 26214400, "dtype": "float"}]},
//!   {"nccl": [{"collective": "all_reduce", "bytes": 4194304, "dtype": "bfloat16",
//!              "group": {"size": 8, "stride": 1}}]},
//!   {"wait": 1},
//!   {"drain": true}
//! ]}
//! ```
//!
//! `compute_us` is a compute kernel's time at full speed (a collective running beside it slows
//! it by its channels' share of the SMs, unless the entry's batch gives `slowdown`); an `nccl`
//! entry is one launch on the NCCL stream, run after every earlier one (with `"stream": 1`, on
//! a second stream with a communicator of its own, after the main stream's earlier launches
//! and every earlier one of its own, beside the main stream's later ones; each collective is
//! timed as if alone on its links, so a launch waits while the other stream runs a collective
//! on the same group, or hook compute if it starts with hook compute): its collectives
//! (nccl-tests' size; on every rank, or on a `group` of ranks `stride` apart, `size` of them
//! or, without a size, as many as the cluster holds: [`GroupShape`]) and `hook_us` compute
//! the stream runs in their place; `wait: n` holds
//! the compute stream until the first n `nccl` entries of the main stream are done, `drain`
//! until all are;
//! `idle_until_us` until that time from the step's start.

use serde::{Deserialize, Serialize};

use super::DataType;
use super::parallel::Group;
use super::timeline::{Batch, Op, Slowdown, Work};
use crate::collective::Collective;
use crate::units::{Bytes, Secs};

/// The format's version.
pub const VERSION: u32 = 1;

/// A list-of-calls file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsFile {
    /// The format's version ([`VERSION`]).
    pub collsim_calls: u32,
    /// Ranks the step ran on (for reference: a replay runs on its scenario's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// The calls, in program order.
    pub calls: Vec<Call>,
}

/// The bytes of a barrier: NCCL's all-reduce of one float (`ProcessGroupNCCL::barrier` in
/// PyTorch's `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp` sums a one-element float
/// tensor on each rank's device, then waits for it on the host).
pub const BARRIER_BYTES: u64 = 4;

/// One entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Call {
    /// Compute-stream work.
    Compute {
        /// Microseconds at full speed.
        compute_us: f64,
        /// Its span's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// One launch on the NCCL stream.
    Nccl {
        /// What it runs, in order.
        nccl: Vec<NcclOp>,
        /// The fraction compute slows while its collectives run (default: their channels over
        /// the GPU's SMs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slowdown: Option<f64>,
        /// 1: a second NCCL stream, with a communicator of its own (else the main one, 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// The compute stream waits for the first `wait` NCCL launches of the main stream.
    Wait {
        /// Launches.
        wait: usize,
    },
    /// The compute stream waits for every NCCL launch so far.
    Drain {
        /// Always true.
        drain: bool,
    },
    /// The compute stream idles until this long after the step's start.
    Until {
        /// Microseconds.
        idle_until_us: f64,
    },
}

/// Work in an NCCL launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum NcclOp {
    /// A collective.
    Collective {
        /// nccl-tests' name: all_reduce, all_gather, reduce_scatter, broadcast, reduce,
        /// alltoall, sendrecv.
        collective: String,
        /// nccl-tests' size.
        bytes: u64,
        /// Element type.
        dtype: String,
        /// Its span's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Its process group, if not every rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<GroupShape>,
    },
    /// `torch.distributed.barrier()`: on NCCL an all-reduce of one float (ProcessGroupNCCL's
    /// `barrier` sums a one-element tensor), timed as that.
    Barrier {
        /// Always true.
        barrier: bool,
        /// Its span's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Its process group, if not every rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<GroupShape>,
    },
    /// Compute the stream runs in the launch's place (a communication hook's).
    Hook {
        /// Microseconds.
        hook_us: f64,
        /// Its span's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

/// A collective's process group in a list of calls: ranks `stride` apart from the rank the
/// step is of (1: consecutive), `size` of them, or, without a size, as many as the world
/// holds at that stride (a data-parallel group, which grows with the cluster). Every rank runs
/// the same step, so the group's translates by the ranks between (and by whole blocks of
/// `size x stride`) run theirs beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupShape {
    /// Ranks in the group (none: the world's ranks over `stride`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// Global ranks between two of its ranks.
    pub stride: usize,
}

impl GroupShape {
    /// The group on `world` ranks (the whole world where it takes every rank).
    pub fn on(&self, world: usize) -> Result<Group, String> {
        let stride = self.stride;
        if stride == 0 {
            return Err("group.stride: at least 1".into());
        }
        if self.size == Some(0) {
            return Err("group.size: at least 1".into());
        }
        if stride > world {
            return Err(format!(
                "group.stride: {stride} ranks apart, more than the {world} ranks of this cluster"
            ));
        }
        let size = self.size.unwrap_or(world / stride);
        if size.checked_mul(stride).is_none_or(|n| n > world || !world.is_multiple_of(n)) {
            return Err(format!(
                "group: {size} ranks, {stride} apart, do not tile the {world} ranks of this cluster"
            ));
        }
        Ok(if size == world { Group::World } else { Group::Strided { size, stride } })
    }

    /// The shape of a step's group on `(ranks per node, ranks)` (None: the world's; 3-D
    /// groups are not exported): a group spanning the ranks keeps growing with them.
    pub(crate) fn of(group: Group, (ranks_per_node, world): (usize, usize)) -> Option<GroupShape> {
        let strided = super::parallel::hybrid_group(group, world, ranks_per_node).unwrap_or(group);
        match strided {
            Group::Strided { size, stride } => {
                let size = (size.saturating_mul(stride) != world).then_some(size);
                Some(GroupShape { size, stride })
            }
            _ => None,
        }
    }
}

impl Call {
    /// The entry of a timeline's work item, on `(ranks per node, ranks)`, if it has one.
    pub(crate) fn of_work(w: &Work, ranks: (usize, usize)) -> Option<Call> {
        Some(match w {
            Work::Run { secs, name, .. } => {
                Call::Compute { compute_us: secs.get() * 1e6, name: name.clone() }
            }
            Work::Post(b) => Call::of_batch(b, ranks),
            Work::Drain => Call::Drain { drain: true },
            Work::Wait(n) => Call::Wait { wait: *n },
            Work::Until { at, .. } => Call::Until { idle_until_us: at.get() * 1e6 },
            // A pipeline stage's sends and receives have no entry (`--export-calls` refuses
            // 3-D layouts); a mark is not work.
            Work::Recv { .. } | Work::Send { .. } | Work::Call { .. } => return None,
            Work::Mark | Work::Open | Work::Close { .. } => return None,
        })
    }

    /// The entry of an NCCL-stream batch, on `(ranks per node, ranks)`.
    pub(crate) fn of_batch(b: &Batch, ranks: (usize, usize)) -> Call {
        let nccl = b
            .ops
            .iter()
            .map(|op| match op {
                Op::Hold { secs, name } => {
                    NcclOp::Hook { hook_us: secs.get() * 1e6, name: Some(name.clone()) }
                }
                Op::Coll { group, collective, bytes, dtype, name } => NcclOp::Collective {
                    collective: collective.name().to_string(),
                    bytes: bytes.get(),
                    dtype: dtype.name().to_string(),
                    name: Some(name.clone()),
                    group: GroupShape::of(*group, ranks),
                },
            })
            .collect();
        let slowdown = match b.slowdown {
            Slowdown::Fixed(s) => Some(s),
            Slowdown::PerChannel(_) => None,
        };
        Call::Nccl { nccl, slowdown, stream: b.side.then_some(1) }
    }
}

/// A list of calls as timeline work on `world` ranks (None: checking an entry alone, each
/// group on as many ranks as it spans), each collective on its group (the world's where it
/// names none), compute slowed under collectives by `per_channel` unless an entry fixes its
/// slowdown. Errors name the entry.
pub(crate) fn to_work(
    calls: &[Call],
    per_channel: Slowdown,
    world: Option<usize>,
) -> Result<Vec<Work>, String> {
    let mut out = Vec::with_capacity(calls.len());
    let mut launches = 0usize;
    let us = |i: usize, what: &str, x: f64| {
        if x.is_finite() && (0.0..=MAX_ENTRY_US).contains(&x) {
            Ok(x * 1e-6)
        } else {
            Err(format!(
                "calls[{i}].{what}: must be a time in µs, 0 to {MAX_ENTRY_US:e} (an hour; got {x})"
            ))
        }
    };
    for (i, c) in calls.iter().enumerate() {
        out.push(match c {
            Call::Compute { compute_us, name } => {
                Work::Run { secs: Secs::new(us(i, "compute_us", *compute_us)?), name: name.clone(), grad: None }
            }
            Call::Nccl { nccl, slowdown, stream } => {
                let side = match stream {
                    None | Some(0) => false,
                    Some(1) => true,
                    Some(n) => {
                        return Err(format!(
                            "calls[{i}].stream: 0 (the main NCCL stream) or 1 (a second one), not {n}"
                        ));
                    }
                };
                if nccl.is_empty() {
                    return Err(format!("calls[{i}].nccl: an NCCL launch runs at least one collective or hook"));
                }
                let mut ops = Vec::with_capacity(nccl.len());
                for (k, op) in nccl.iter().enumerate() {
                    ops.push(match op {
                        NcclOp::Hook { hook_us, name } => Op::Hold {
                            secs: Secs::new(us(i, &format!("nccl[{k}].hook_us"), *hook_us)?),
                            name: name.clone().unwrap_or_else(|| "hook".into()),
                        },
                        NcclOp::Barrier { name, group, .. } => {
                            let group = op_group(group, world)
                                .map_err(|e| format!("calls[{i}].nccl[{k}].{e}{}", named(name)))?;
                            Op::Coll {
                                group,
                                collective: Collective::AllReduce,
                                bytes: Bytes::new(BARRIER_BYTES),
                                dtype: DataType::Float,
                                name: name.clone().unwrap_or_else(|| "barrier".into()),
                            }
                        }
                        NcclOp::Collective { collective, bytes, dtype, name, group } => {
                            let c = Collective::parse(collective).ok_or_else(|| {
                                format!("calls[{i}].nccl[{k}].collective: unknown collective {collective:?} (all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv)")
                            })?;
                            let d = DataType::parse(dtype).ok_or_else(|| {
                                format!("calls[{i}].nccl[{k}].dtype: unknown data type {dtype:?}")
                            })?;
                            let max = super::sweep::MAX_CALL_BYTES;
                            if *bytes == 0 || *bytes > max.get() {
                                return Err(format!(
                                    "calls[{i}].nccl[{k}].bytes: must be 1 B to {max}, more than any GPU holds (got {bytes})"
                                ));
                            }
                            let group = op_group(group, world)
                                .map_err(|e| format!("calls[{i}].nccl[{k}].{e}{}", named(name)))?;
                            Op::Coll {
                                group,
                                collective: c,
                                bytes: Bytes::new(*bytes),
                                dtype: d,
                                name: name.clone().unwrap_or_else(|| c.name().to_string()),
                            }
                        }
                    });
                }
                let slowdown = match slowdown {
                    Some(s) if (0.0..=1.0).contains(s) => Slowdown::Fixed(*s),
                    Some(s) => return Err(format!("calls[{i}].slowdown: a fraction in [0, 1] (got {s})")),
                    None => per_channel,
                };
                // Waits count the main stream's launches.
                launches += usize::from(!side);
                Work::Post(Box::new(Batch { ops, slowdown, row: None, early: false, side }))
            }
            Call::Wait { wait } => {
                if *wait > launches {
                    return Err(format!(
                        "calls[{i}].wait: {wait}, but only {launches} NCCL launches come before it on the main stream"
                    ));
                }
                Work::Wait(*wait)
            }
            Call::Drain { drain: true } => Work::Drain,
            Call::Drain { drain: false } => {
                return Err(format!("calls[{i}].drain: give `\"drain\": true` (or leave the entry out)"));
            }
            Call::Until { idle_until_us } => Work::Until {
                at: Secs::new(us(i, "idle_until_us", *idle_until_us)?),
                name: "idle".into(),
            },
        });
    }
    Ok(out)
}

/// An operation's process group on `world` ranks (the world without a shape); without a world,
/// checked alone, on the ranks of its own block.
fn op_group(group: &Option<GroupShape>, world: Option<usize>) -> Result<Group, String> {
    let Some(g) = group else { return Ok(Group::World) };
    let block = g.size.unwrap_or(1).checked_mul(g.stride.max(1));
    match world.or(block) {
        Some(w) => g.on(w),
        None => Err(format!(
            "group: {} ranks {} apart, more ranks than there can be",
            g.size.unwrap_or(1),
            g.stride
        )),
    }
}

/// A collective's name as an error gives it after the entry (a trace's name for it).
fn named(name: &Option<String>) -> String {
    name.as_ref().map_or(String::new(), |n| format!(" (collective {n:?})"))
}

/// The process groups other than the world that `calls` run collectives on, on `world` ranks.
pub fn groups(calls: &[Call], world: usize) -> Result<std::collections::BTreeSet<Group>, String> {
    let mut out = std::collections::BTreeSet::new();
    for (i, c) in calls.iter().enumerate() {
        let Call::Nccl { nccl, .. } = c else { continue };
        for (k, op) in nccl.iter().enumerate() {
            if let NcclOp::Collective { group: Some(g), name, .. }
            | NcclOp::Barrier { group: Some(g), name, .. } = op
            {
                let g =
                    g.on(world).map_err(|e| format!("calls[{i}].nccl[{k}].{e}{}", named(name)))?;
                if g != Group::World {
                    out.insert(g);
                }
            }
        }
    }
    Ok(out)
}

/// Whether any collective of `calls` runs on every one of `world` ranks (no group, or a
/// group that takes them all).
pub fn runs_on_world(calls: &[Call], world: usize) -> bool {
    calls.iter().any(|c| match c {
        Call::Nccl { nccl, .. } => nccl.iter().any(|op| match op {
            NcclOp::Collective { group: None, .. } | NcclOp::Barrier { group: None, .. } => true,
            NcclOp::Collective { group: Some(g), .. } | NcclOp::Barrier { group: Some(g), .. } => {
                g.on(world) == Ok(Group::World)
            }
            _ => false,
        }),
        _ => false,
    })
}

/// The longest one entry of a replayed step may take, µs: an hour. A profiler trace or a list
/// of calls times one training step, and no kernel, collective or gap in one runs that long; a
/// longer one is a unit mistaken (ns or ps for µs) or a corrupt number.
pub const MAX_ENTRY_US: f64 = 3.6e9;

/// Why `calls` cannot be replayed, if they cannot: a bad entry, or a step of no work at all.
pub fn check(calls: &[Call]) -> Result<(), String> {
    let work = to_work(calls, Slowdown::Fixed(0.0), None)?;
    let busy = work.iter().any(|w| match w {
        Work::Run { secs, .. } => secs.get() > 0.0,
        Work::Post(_) => true,
        _ => false,
    });
    if !busy {
        return Err("calls: no compute time and no collective: nothing to replay".into());
    }
    Ok(())
}

/// Which entry and field of a list of calls does not read, and why: serde's error for an
/// entry (an untagged enum) says only that no kind of entry matched. None where the entries
/// read (the error is elsewhere).
pub(crate) fn diagnose(v: &serde_json::Value) -> Option<String> {
    use serde::de::DeserializeOwned;
    use serde_json::Value;
    fn field<T: DeserializeOwned>(
        o: &serde_json::Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<(), String> {
        match o.get(key) {
            Some(x) => serde_json::from_value::<T>(x.clone())
                .map(|_| ())
                .map_err(|e| format!("{at}.{key}: {e}")),
            None => Ok(()),
        }
    }
    // Each kind of entry: the key that marks it, and its keys with their checks.
    type Check = fn(&serde_json::Map<String, Value>, &str, &str) -> Result<(), String>;
    let kinds: [(&str, &[(&str, Check)]); 5] = [
        ("compute_us", &[("compute_us", field::<f64>), ("name", field::<Option<String>>)]),
        (
            "nccl",
            &[
                ("nccl", field::<Vec<Value>>),
                ("slowdown", field::<Option<f64>>),
                ("stream", field::<Option<u32>>),
            ],
        ),
        ("wait", &[("wait", field::<usize>)]),
        ("drain", &[("drain", field::<bool>)]),
        ("idle_until_us", &[("idle_until_us", field::<f64>)]),
    ];
    let ops: [(&str, &[(&str, Check)]); 3] = [
        (
            "collective",
            &[
                ("collective", field::<String>),
                ("bytes", field::<u64>),
                ("dtype", field::<String>),
                ("name", field::<Option<String>>),
                ("group", field::<Option<GroupShape>>),
            ],
        ),
        ("hook_us", &[("hook_us", field::<f64>), ("name", field::<Option<String>>)]),
        (
            "barrier",
            &[
                ("barrier", field::<bool>),
                ("name", field::<Option<String>>),
                ("group", field::<Option<GroupShape>>),
            ],
        ),
    ];
    // An object of one of `kinds`, checked key by key.
    let check = |x: &Value, at: &str, kinds: &[(&str, &[(&str, Check)])]| -> Result<(), String> {
        let Some(o) = x.as_object() else { return Err(format!("{at}: an object, not {x}")) };
        let names: Vec<&str> = kinds.iter().map(|k| k.0).collect();
        let Some((_, keys)) = kinds.iter().find(|k| o.contains_key(k.0)) else {
            return Err(format!("{at}: needs one of {}", names.join(", ")));
        };
        if let Some(k) = o.keys().find(|k| !keys.iter().any(|(name, _)| name == k)) {
            let known: Vec<&str> = keys.iter().map(|k| k.0).collect();
            return Err(format!("{at}: unknown field `{k}` here (expected {})", known.join(", ")));
        }
        keys.iter().try_for_each(|(key, f)| f(o, key, at))
    };
    let calls = v.get("calls")?.as_array()?;
    for (i, c) in calls.iter().enumerate() {
        let at = format!("calls[{i}]");
        if let Err(e) = check(c, &at, &kinds) {
            return Some(e);
        }
        for (k, op) in c.get("nccl").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Err(e) = check(op, &format!("{at}.nccl[{k}]"), &ops) {
                return Some(e);
            }
        }
    }
    None
}

/// Parses a list-of-calls file (`file` names it in errors).
pub fn parse(file: &str, text: &str) -> Result<CallsFile, String> {
    let f: CallsFile = serde_json::from_str(text).map_err(|e| {
        // Serde names no field of an entry that does not read: find it.
        let why = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| diagnose(&v))
            .unwrap_or_else(|| e.to_string());
        format!("{file}:{}:{}: {why}", e.line(), e.column())
    })?;
    if f.collsim_calls != VERSION {
        return Err(format!(
            "{file}: collsim_calls {} is not a version this collsim reads ({VERSION})",
            f.collsim_calls
        ));
    }
    if f.calls.is_empty() {
        return Err(format!("{file}: calls: the list is empty"));
    }
    Ok(f)
}

/// A step from a file of any kind collsim replays (`file` names it in errors): a Chakra
/// execution trace (protobuf, [`super::chakra`]), an Nsight Systems JSON export
/// ([`super::nsys`]; its SQLite export and raw report are refused), a PyTorch profiler trace
/// (JSON with `traceEvents`, or a bare event list: [`super::kineto`]) or a list of calls,
/// with notes on what the replay leaves out.
pub fn read_step(file: &str, bytes: &[u8]) -> Result<Step, String> {
    if bytes.is_empty() {
        return Err(format!("{file}: empty (no trace and no list of calls)"));
    }
    if let Some(e) = super::nsys::refused(file, bytes) {
        return Err(e);
    }
    if super::chakra::looks_like_chakra(bytes) {
        let ranks = super::chakra::ranks_beside(std::path::Path::new(file));
        let c = super::chakra::import(file, bytes, ranks)?;
        let mut notes = Vec::new();
        if c.host_ops > 0 {
            notes.push(format!(
                "{file}: {} host (CPU) nodes, {:.3} ms recorded, take no GPU time in the replay",
                c.host_ops,
                c.host_us / 1e3
            ));
        }
        return Ok(Step { file: c.file, kind: "Chakra trace", notes });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "{file}: not a Chakra trace and not UTF-8 JSON (invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    if super::nsys::looks_like_nsys(text) {
        let n = super::nsys::import(file, text)?;
        return Ok(Step { file: n.file, kind: "Nsight Systems trace", notes: n.notes });
    }
    if text.trim_start().starts_with('[') || text.contains("\"traceEvents\"") {
        let file = super::kineto::import(file, text)?;
        return Ok(Step { file, kind: "Kineto trace", notes: Vec::new() });
    }
    Ok(Step { file: parse(file, text)?, kind: "list of calls", notes: Vec::new() })
}

/// A step read by [`read_step`].
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its calls.
    pub file: CallsFile,
    /// What the file was: "Chakra trace", "Nsight Systems trace", "Kineto trace" or "list of
    /// calls".
    pub kind: &'static str,
    /// What the replay leaves out, one line each.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parallel::strided_members;

    #[test]
    fn every_field_of_every_entry_reads_in_the_diagnosis_too() {
        // The diagnosis lists each kind of entry's fields by hand: an entry with every field
        // set (a field added to `Call` or `NcclOp` must be set here) must pass it.
        let group = Some(GroupShape { size: Some(8), stride: 1 });
        let calls = vec![
            Call::Compute { compute_us: 1.0, name: Some("c".into()) },
            Call::Nccl {
                nccl: vec![
                    NcclOp::Collective {
                        collective: "all_reduce".into(),
                        bytes: 8,
                        dtype: "float".into(),
                        name: Some("ar".into()),
                        group,
                    },
                    NcclOp::Hook { hook_us: 1.0, name: Some("h".into()) },
                    NcclOp::Barrier { barrier: true, name: Some("b".into()), group },
                ],
                slowdown: Some(0.1),
                stream: Some(1),
            },
            Call::Wait { wait: 0 },
            Call::Drain { drain: true },
            Call::Until { idle_until_us: 1.0 },
        ];
        let f = CallsFile { collsim_calls: VERSION, ranks: Some(8), calls };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(diagnose(&v), None);
    }

    #[test]
    fn a_barrier_is_nccls_all_reduce_of_one_float() {
        let text = r#"{"collsim_calls": 1, "calls": [{"compute_us": 10},
            {"nccl": [{"barrier": true}]}, {"drain": true}]}"#;
        let f = parse("b.json", text).unwrap();
        let work = to_work(&f.calls, Slowdown::Fixed(0.0), None).unwrap();
        let posted: Vec<_> = work
            .iter()
            .filter_map(|w| match w {
                Work::Post(b) => Some(b.ops.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(posted.len(), 1);
        match &posted[0][0] {
            Op::Coll { collective, bytes, dtype, name, group } => {
                assert_eq!(
                    (*collective, bytes.get(), *dtype, name.as_str(), *group),
                    (
                        Collective::AllReduce,
                        BARRIER_BYTES,
                        DataType::Float,
                        "barrier",
                        Group::World
                    )
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_entry_that_does_not_read_is_named_with_its_field() {
        let err = |entry: &str| {
            let text =
                format!(r#"{{"collsim_calls": 1, "calls": [{{"compute_us": 1}}, {entry}]}}"#);
            parse("c.json", &text).unwrap_err()
        };
        let ar = r#"{"collective": "all_reduce", "bytes": 8, "dtype": "float"}"#;
        let e = err(&format!(r#"{{"nccl": [{ar}], "stream": -1}}"#));
        assert!(e.starts_with("c.json:1:") && e.contains("calls[1].stream: invalid value"), "{e}");
        let e = err(r#"{"nccl": [{"collective": "all_reduce", "bytes": -5, "dtype": "float"}]}"#);
        assert!(e.contains("calls[1].nccl[0].bytes: invalid value: integer `-5`"), "{e}");
        let e = err(&format!(r#"{{"nccl": [{ar}], "strem": 1}}"#));
        assert!(e.contains("calls[1]: unknown field `strem`"), "{e}");
        assert!(err(r#"{"foo": 1}"#).contains("calls[1]: needs one of compute_us, nccl"));
    }

    #[test]
    fn a_group_shape_lands_on_the_world_it_is_replayed_on() {
        let shape = |size, stride| GroupShape { size, stride };
        // Data parallel (no size): every second rank of 16.
        let dp = shape(None, 2).on(16).unwrap();
        assert_eq!(dp, Group::Strided { size: 8, stride: 2 });
        // A block of 4 keeps its size; tiles of 16, with its translates beside it.
        let tp = shape(Some(4), 1).on(16).unwrap();
        let (own, others) = strided_members(tp, 16).unwrap();
        assert_eq!(own, [0, 1, 2, 3]);
        assert_eq!(others, [vec![4, 5, 6, 7], vec![8, 9, 10, 11], vec![12, 13, 14, 15]]);
        let (own, others) = strided_members(Group::Strided { size: 4, stride: 2 }, 16).unwrap();
        assert_eq!(own, [0, 2, 4, 6]);
        assert_eq!(others, [vec![1, 3, 5, 7], vec![8, 10, 12, 14], vec![9, 11, 13, 15]]);
        // The whole world is the world's group; what does not tile it is refused.
        assert_eq!(shape(Some(16), 1).on(16).unwrap(), Group::World);
        assert!(shape(Some(3), 1).on(16).unwrap_err().contains("do not tile the 16 ranks"));
        assert!(shape(None, 0).on(16).unwrap_err().contains("stride: at least 1"));
    }
}
