//! A PyTorch profiler (Kineto) trace of one rank's step as a list of calls
//! ([`super::calls`]): its GPU kernels in the order they ran, NCCL kernels as collectives (the
//! collective, element count, dtype and group from the comm record's args), every other
//! kernel (and memcpy/memset) as compute on the compute stream, and the compute stream's waits
//! on the NCCL stream inferred from the timing.
//!
//! What is read, from the Chrome-trace JSON PyTorch writes (`prof.export_chrome_trace`):
//! * `traceEvents` of `ph = "X"`: GPU work (`cat` "kernel", "gpu_memcpy", "gpu_memset"), with
//!   `ts` and `dur` in µs;
//! * NCCL kernels by name (`ncclKernel_...`, `ncclDevKernel_...`); their size from the args
//!   PyTorch records for each collective (`Collective name`, `In msg nelems`, `Out msg
//!   nelems`, `dtype`, `Group size`), on the kernel itself or on the CPU op
//!   (`record_param_comms`, `nccl:*`) with the same `External id`;
//! * `distributedInfo.world_size`, the ranks the trace ran on.
//!
//! Inferred: a compute kernel that starts within [`WAIT_SLACK_US`] of an NCCL kernel's end,
//! after idling since the previous compute kernel, waited for it (a `wait` call); any other
//! idle gap on the compute stream is the host's (kept as time that passes). Several compute
//! streams are taken as one, in start order. Collectives on a group smaller than the trace's
//! world are refused (a replay times every collective on the whole cluster).

use serde_json::Value;

use super::calls::{Call, CallsFile, NcclOp, VERSION};

/// How close after an NCCL kernel's end a compute kernel must start to have waited for it, µs.
pub const WAIT_SLACK_US: f64 = 5.0;

/// One GPU kernel of the trace.
struct Kernel {
    ts: f64,
    dur: f64,
    name: String,
    /// For NCCL kernels: the collective (nccl-tests' name), nccl-tests' size, dtype.
    nccl: Option<(String, u64, String)>,
}

/// Element size and nccl-tests dtype name of PyTorch's dtype names.
fn dtype(name: &str) -> Option<(u64, &'static str)> {
    Some(match name {
        "Float" | "float" | "float32" => (4, "float"),
        "Half" | "half" | "float16" => (2, "half"),
        "BFloat16" | "bfloat16" => (2, "bfloat16"),
        "Double" | "double" | "float64" => (8, "double"),
        "Int" | "int" | "int32" => (4, "int32"),
        "Long" | "long" | "int64" => (8, "int64"),
        "Byte" | "Char" | "Bool" | "uint8" | "int8" | "bool" => (1, "uint8"),
        _ => return None,
    })
}

/// nccl-tests' collective for PyTorch's `Collective name`, and whether its size is the
/// output's (all-gather: the gathered buffer).
fn collective(name: &str) -> Option<(&'static str, bool)> {
    Some(match name {
        "allreduce" | "all_reduce" | "allreduce_coalesced" => ("all_reduce", false),
        "allgather" | "all_gather" | "_allgather_base" | "allgather_into_tensor_coalesced" => {
            ("all_gather", true)
        }
        "reduce_scatter" | "_reduce_scatter_base" | "reduce_scatter_tensor_coalesced" => {
            ("reduce_scatter", false)
        }
        "broadcast" => ("broadcast", false),
        "reduce" => ("reduce", false),
        "all_to_all" | "alltoall" | "alltoall_base" | "all_to_allv" => ("alltoall", false),
        "send" | "recv" | "sendrecv" => ("sendrecv", false),
        _ => return None,
    })
}

fn is_nccl(name: &str) -> bool {
    name.starts_with("ncclKernel") || name.starts_with("ncclDevKernel")
}

/// A collective as a trace records it: nccl-tests' name, size and dtype, and its group's size.
type Comm = (String, u64, String, Option<u64>);

/// The comm args of an event, if it has them.
fn comm_args(args: &Value) -> Option<Result<Comm, String>> {
    let name = args.get("Collective name")?.as_str()?;
    Some((|| {
        let (c, out) = collective(name)
            .ok_or_else(|| format!("collective {name:?} is not one collsim times"))?;
        let d = args
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{name}: no \"dtype\""))?;
        let (size, d) = dtype(d).ok_or_else(|| format!("dtype {d:?} is not one collsim knows"))?;
        let key = if out { "Out msg nelems" } else { "In msg nelems" };
        let n =
            args.get(key).and_then(Value::as_u64).ok_or_else(|| format!("{name}: no {key:?}"))?;
        let max = super::sweep::MAX_CALL_BYTES;
        let bytes = n.checked_mul(size).filter(|&b| b <= max.get()).ok_or_else(|| {
            format!("{name}: {key:?} {n} of {d} is more than {max}, more than any GPU holds")
        })?;
        let group = match args.get("Group size") {
            None => None,
            Some(g) => match g.as_u64() {
                Some(g) if g >= 1 => Some(g),
                _ => return Err(format!("{name}: \"Group size\" {g} is not a number of ranks")),
            },
        };
        Ok((c.to_string(), bytes, d.to_string(), group))
    })())
}

/// Converts a Kineto trace (`file` names it in errors).
pub fn import(file: &str, text: &str) -> Result<CallsFile, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("{file}:{}:{}: {e}", e.line(), e.column()))?;
    let events = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{file}: no traceEvents (not a Chrome/Kineto trace)"))?,
        _ => return Err(format!("{file}: not a Chrome/Kineto trace")),
    };
    let world = match v.get("distributedInfo").and_then(|d| d.get("world_size")) {
        None => None,
        Some(w) => match w.as_u64() {
            Some(w) if w >= 1 => Some(w),
            _ => {
                return Err(format!(
                    "{file}: distributedInfo.world_size {w} is not a number of ranks"
                ));
            }
        },
    };
    // Comm args of CPU ops, by External id.
    let mut by_id = std::collections::BTreeMap::new();
    for e in events {
        let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
        if cat == "cpu_op" || cat == "user_annotation" {
            let args = e.get("args").cloned().unwrap_or(Value::Null);
            if let (Some(id), Some(_)) =
                (args.get("External id").and_then(Value::as_u64), args.get("Collective name"))
            {
                by_id.insert(id, args);
            }
        }
    }
    let mut kernels = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.get("ph").and_then(Value::as_str) != Some("X") {
            continue;
        }
        let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
        if !matches!(cat, "kernel" | "Kernel" | "gpu_memcpy" | "gpu_memset") {
            continue;
        }
        let num = |k: &str| e.get(k).and_then(Value::as_f64);
        let (Some(ts), Some(dur)) = (num("ts"), num("dur")) else {
            return Err(format!("{file}: traceEvents[{i}]: a GPU event without ts or dur"));
        };
        if !(ts.is_finite() && dur.is_finite() && dur >= 0.0) {
            return Err(format!("{file}: traceEvents[{i}]: ts {ts}, dur {dur}"));
        }
        let name = e.get("name").and_then(Value::as_str).unwrap_or("kernel").to_string();
        let nccl = if cat == "kernel" && is_nccl(&name) {
            let args = e.get("args").cloned().unwrap_or(Value::Null);
            let own = comm_args(&args);
            let linked = || {
                let id = args.get("External id").and_then(Value::as_u64)?;
                comm_args(by_id.get(&id)?)
            };
            let found = own.or_else(linked).ok_or_else(|| {
                format!(
                    "{file}: traceEvents[{i}] ({name}): an NCCL kernel without its collective's size (profile with PyTorch 2.1 or later, which records it)"
                )
            })?;
            let (c, bytes, d, group) =
                found.map_err(|e| format!("{file}: traceEvents[{i}]: {e}"))?;
            if let (Some(g), Some(w)) = (group, world)
                && g < w
            {
                return Err(format!(
                    "{file}: traceEvents[{i}]: {c} on a group of {g} of the {w} ranks; collectives on sub-groups are not replayed yet"
                ));
            }
            Some((c, bytes.max(1), d))
        } else {
            None
        };
        kernels.push(Kernel { ts, dur, name, nccl });
    }
    if kernels.is_empty() {
        return Err(format!("{file}: no GPU kernels (profile with ProfilerActivity.CUDA)"));
    }
    kernels.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let mut calls = Vec::new();
    // NCCL launches so far: (their end, µs).
    let mut launched: Vec<f64> = Vec::new();
    let mut waited = 0usize;
    let mut clock: Option<f64> = None;
    for k in &kernels {
        match &k.nccl {
            Some((c, bytes, d)) => {
                calls.push(Call::Nccl {
                    nccl: vec![NcclOp::Collective {
                        collective: c.clone(),
                        bytes: *bytes,
                        dtype: d.clone(),
                        name: Some(k.name.split('(').next().unwrap_or(&k.name).to_string()),
                    }],
                    slowdown: None,
                });
                launched.push(k.ts + k.dur);
            }
            None => {
                if let Some(prev) = clock
                    && k.ts > prev
                {
                    // The latest NCCL launch that ended in the gap, just before this kernel.
                    let hit = launched
                        .iter()
                        .rposition(|&end| end > prev && end <= k.ts && k.ts - end <= WAIT_SLACK_US);
                    let mut from = prev;
                    if let Some(j) = hit.filter(|&j| j + 1 > waited) {
                        calls.push(Call::Wait { wait: j + 1 });
                        waited = j + 1;
                        from = launched[j];
                    }
                    if k.ts > from {
                        let gap = Call::Compute {
                            compute_us: k.ts - from,
                            name: Some("host gap".into()),
                        };
                        calls.push(gap);
                    }
                }
                let name = Some(k.name.split('(').next().unwrap_or(&k.name).to_string());
                calls.push(Call::Compute { compute_us: k.dur, name });
                clock = Some(clock.map_or(k.ts + k.dur, |c: f64| c.max(k.ts + k.dur)));
            }
        }
    }
    if !launched.is_empty() {
        calls.push(Call::Drain { drain: true });
    }
    Ok(CallsFile { collsim_calls: VERSION, ranks: world.map(|w| w as usize), calls })
}
