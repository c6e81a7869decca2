//! A step as a list of calls (`kind = "trace"`): compute on the compute stream, collectives
//! and hook compute on the NCCL stream in the order issued, and the compute stream's waits on
//! the NCCL stream. `simulate --export-calls` writes a simulated DDP or FSDP step so; a
//! scenario with `kind = "trace"` and `calls = "FILE"` replays one, its compute kept and its
//! collectives timed again on the scenario's cluster.
//!
//! The file is JSON:
//!
//! ```json
//! {"collsim_calls": 1, "ranks": 128, "calls": [
//!   {"compute_us": 812.5, "name": "fwd transformer.h.0"},
//!   {"nccl": [{"collective": "all_reduce", "bytes": 26214400, "dtype": "float"}]},
//!   {"wait": 1},
//!   {"drain": true}
//! ]}
//! ```
//!
//! `compute_us` is a compute kernel's time at full speed (a collective running beside it slows
//! it by its channels' share of the SMs, unless the entry's batch gives `slowdown`); an `nccl`
//! entry is one launch on the NCCL stream, run after every earlier one: its collectives
//! (nccl-tests' size) and `hook_us` compute the stream runs in their place; `wait: n` holds
//! the compute stream until the first n `nccl` entries are done, `drain` until all are;
//! `idle_until_us` until that time from the step's start.

use serde::{Deserialize, Serialize};

use super::DataType;
use super::timeline::{Batch, Op, Slowdown, Work};
use crate::collective::Collective;

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
    },
    /// The compute stream waits for the first `wait` NCCL launches.
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

impl Call {
    /// The entry of a timeline's work item.
    pub(crate) fn of_work(w: &Work) -> Call {
        match w {
            Work::Run { secs, name, .. } => {
                Call::Compute { compute_us: secs * 1e6, name: name.clone() }
            }
            Work::Post(b) => Call::of_batch(b),
            Work::Drain => Call::Drain { drain: true },
            Work::Wait(n) => Call::Wait { wait: *n },
            Work::Until { at, .. } => Call::Until { idle_until_us: at * 1e6 },
        }
    }

    /// The entry of an NCCL-stream batch.
    pub(crate) fn of_batch(b: &Batch) -> Call {
        let nccl = b
            .ops
            .iter()
            .map(|op| match op {
                Op::Hold { secs, name } => {
                    NcclOp::Hook { hook_us: secs * 1e6, name: Some(name.clone()) }
                }
                Op::Coll { collective, bytes, dtype, name, .. } => NcclOp::Collective {
                    collective: collective.name().to_string(),
                    bytes: *bytes,
                    dtype: dtype.name().to_string(),
                    name: Some(name.clone()),
                },
            })
            .collect();
        let slowdown = match b.slowdown {
            Slowdown::Fixed(s) => Some(s),
            Slowdown::PerChannel(_) => None,
        };
        Call::Nccl { nccl, slowdown }
    }
}

/// A list of calls as timeline work: every collective on the world's communicator, compute
/// slowed under collectives by `per_channel` unless an entry fixes its slowdown. Errors name
/// the entry.
pub(crate) fn to_work(calls: &[Call], per_channel: Slowdown) -> Result<Vec<Work>, String> {
    let mut out = Vec::with_capacity(calls.len());
    let mut launches = 0usize;
    let us = |i: usize, what: &str, x: f64| {
        if x.is_finite() && x >= 0.0 {
            Ok(x * 1e-6)
        } else {
            Err(format!("calls[{i}].{what}: must be a time in µs, at least 0 (got {x})"))
        }
    };
    for (i, c) in calls.iter().enumerate() {
        out.push(match c {
            Call::Compute { compute_us, name } => {
                Work::Run { secs: us(i, "compute_us", *compute_us)?, name: name.clone(), grad: None }
            }
            Call::Nccl { nccl, slowdown } => {
                if nccl.is_empty() {
                    return Err(format!("calls[{i}].nccl: an NCCL launch runs at least one collective or hook"));
                }
                let mut ops = Vec::with_capacity(nccl.len());
                for (k, op) in nccl.iter().enumerate() {
                    ops.push(match op {
                        NcclOp::Hook { hook_us, name } => Op::Hold {
                            secs: us(i, &format!("nccl[{k}].hook_us"), *hook_us)?,
                            name: name.clone().unwrap_or_else(|| "hook".into()),
                        },
                        NcclOp::Collective { collective, bytes, dtype, name } => {
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
                            Op::Coll {
                                group: super::parallel::Group::World,
                                collective: c,
                                bytes: *bytes,
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
                launches += 1;
                Work::Post(Batch { ops, slowdown, row: None, early: false })
            }
            Call::Wait { wait } => {
                if *wait > launches {
                    return Err(format!(
                        "calls[{i}].wait: {wait}, but only {launches} NCCL launches come before it"
                    ));
                }
                Work::Wait(*wait)
            }
            Call::Drain { drain: true } => Work::Drain,
            Call::Drain { drain: false } => {
                return Err(format!("calls[{i}].drain: give `\"drain\": true` (or leave the entry out)"));
            }
            Call::Until { idle_until_us } => Work::Until {
                at: us(i, "idle_until_us", *idle_until_us)?,
                name: "idle".into(),
            },
        });
    }
    Ok(out)
}

/// Why `calls` cannot be replayed, if they cannot: a bad entry, or a step of no work at all.
pub fn check(calls: &[Call]) -> Result<(), String> {
    let work = to_work(calls, Slowdown::Fixed(0.0))?;
    let busy = work.iter().any(|w| match w {
        Work::Run { secs, .. } => *secs > 0.0,
        Work::Post(_) => true,
        _ => false,
    });
    if !busy {
        return Err("calls: no compute time and no collective: nothing to replay".into());
    }
    Ok(())
}

/// Parses a list-of-calls file (`file` names it in errors).
pub fn parse(file: &str, text: &str) -> Result<CallsFile, String> {
    let f: CallsFile = serde_json::from_str(text)
        .map_err(|e| format!("{file}:{}:{}: {e}", e.line(), e.column()))?;
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
