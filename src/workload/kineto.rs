//! A PyTorch profiler (Kineto) trace of one rank's step as a list of calls
//! ([`super::calls`]): its collectives, from the comm records PyTorch writes for each (the
//! collective, element count, dtype and group), in the order the host issued them; every other
//! GPU kernel (and memcpy/memset) as compute on the compute stream; the compute stream's waits
//! on the NCCL stream; and the host's gaps.
//!
//! What is read, from the Chrome-trace JSON PyTorch writes (`prof.export_chrome_trace`, or its
//! trace handler's `.json.gz`):
//! * CPU ops with comm args (`record_param_comms`, `nccl:*`: `Collective name`, `In msg
//!   nelems`, `Out msg nelems`, `dtype`, `Group size`), the innermost where they nest; a
//!   collective's GPU work is what the op launched (`External id`, or a launch inside its
//!   span), and an NCCL kernel may carry the args itself;
//! * GPU work (`cat` "kernel", "gpu_memcpy", "gpu_memset") with `ts` and `dur` in µs, and the
//!   host's launches (`cuda_runtime`, `cuda_driver`, matched by `correlation`): a collective
//!   goes before the first compute kernel launched after it (the GPU's order where launches
//!   are not recorded);
//! * `distributedInfo.world_size`, the ranks the trace ran on.
//!
//! Waits: a compute kernel that starts within [`WAIT_SLACK_US`] of a collective's GPU end,
//! after idling since the previous compute kernel, waited for it. Where the collectives left
//! no GPU work (one rank: NCCL does nothing in place), a `cudaStreamWaitEvent` the host made
//! outside any collective (the Reducer's, FSDP's), or a device-wide synchronisation, waits for
//! all issued before it. Any other idle gap on the compute stream is the host's where the
//! kernel after it started within [`HOST_LATE_US`] of its launch and the host had not yet
//! blocked on the GPU: that kernel starts no earlier than it did in the trace, counted from the
//! step's first GPU work, however early the GPU is free (the host runs ahead of the GPU, so a
//! longer collective hides its gaps). Other gaps (a trace without launches, a host that had
//! synchronised) are kept as time that passes. Several compute streams are taken as one, in
//! start order.
//!
//! Groups: a collective on fewer ranks than the trace's world keeps its group's shape, its
//! ranks a stride apart (`Global rank stride`, or the spacing of `Process Group Ranks`): one
//! that spans the world (a data-parallel group) grows with the replay's cluster, any other (a
//! tensor-parallel block) keeps its size ([`GroupShape`]). Groups whose ranks are not evenly
//! spaced are refused.

use serde_json::Value;

use super::calls::{Call, CallsFile, GroupShape, NcclOp, VERSION};

/// The largest timestamp a trace may hold, µs: about 3,000 years after the epoch Kineto counts
/// from (its timestamps are µs since 1970, about 1.8e15 today, or since the profiler started).
const MAX_TS_US: f64 = 1e17;
/// Why a timestamp past [`MAX_TS_US`] is refused.
const NO_TIMESTAMP: &str =
    "is no timestamp (a profiler trace counts µs since 1970 or since it started)";

/// How close after an NCCL kernel's end a compute kernel must start to have waited for it, µs.
pub const WAIT_SLACK_US: f64 = 5.0;

/// A kernel that started within this long of its launch waited for the host, µs (the
/// launch latency is 4–30 µs in the traces under `calibration/data/2026-11-26-h200-kineto/`).
pub const HOST_LATE_US: f64 = 50.0;

/// Host calls that block until the GPU catches up.
pub(super) const BLOCKING: [&str; 8] = [
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH_v2",
];

/// A compute kernel of the trace: its GPU start and duration (µs), its name, and when the
/// host launched it (its GPU start where the trace does not say).
pub(super) struct Kernel {
    pub(super) ts: f64,
    pub(super) dur: f64,
    pub(super) name: String,
    pub(super) at: f64,
    /// When the host launched it, if the trace says.
    pub(super) launch: Option<f64>,
    /// Its index in `traceEvents` (in an Nsight Systems export, in its GPU work).
    pub(super) event: usize,
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

pub(super) fn is_nccl(name: &str) -> bool {
    name.starts_with("ncclKernel") || name.starts_with("ncclDevKernel")
}

/// A collective as a trace records it: nccl-tests' name, size and dtype, and its group's size
/// and the global ranks between two of its ranks (None: not recorded, or not evenly spaced).
pub(super) type Recorded = (String, u64, String, Option<u64>, Option<u64>);

/// The global ranks between a group's ranks as PyTorch records them: `Global rank stride`
/// (PyTorch 2.2 and later; -1 where they are not evenly spaced), or the spacing of `Process
/// Group Ranks` (a string, "[0, 8, 16]").
fn stride_of(args: &Value) -> Option<u64> {
    if let Some(s) = args.get("Global rank stride").and_then(Value::as_i64) {
        return u64::try_from(s).ok().filter(|&s| s >= 1);
    }
    let list = args.get("Process Group Ranks").and_then(Value::as_str)?;
    let ranks: Vec<u64> = list
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|r| r.trim().parse().ok())
        .collect::<Option<_>>()?;
    let step = match ranks.as_slice() {
        [a, b, ..] => b.checked_sub(*a)?,
        _ => 1,
    };
    (step >= 1 && ranks.windows(2).all(|w| w[1].checked_sub(w[0]) == Some(step))).then_some(step)
}

/// The comm args of an event, if it has them.
pub(super) fn comm_args(args: &Value) -> Option<Result<Recorded, String>> {
    let name = args.get("Collective name")?.as_str()?;
    // The host waiting on a collective recorded already (PyTorch 2.11 records `work.wait()`
    // under this name with no elements: the DDP and torchvision traces of
    // `calibration/data/2026-11-30-h200-hf`): nothing to time.
    if name == "wait" {
        return None;
    }
    Some((|| {
        let group = match args.get("Group size") {
            None => None,
            Some(g) => match g.as_u64() {
                Some(g) if g >= 1 => Some(g),
                _ => return Err(format!("{name}: \"Group size\" {g} is not a number of ranks")),
            },
        };
        // ProcessGroupNCCL's barrier is an all-reduce of one element.
        if name == "barrier" {
            return Ok(("all_reduce".into(), 4, "float".into(), group, stride_of(args)));
        }
        let (c, out) = collective(name)
            .ok_or_else(|| format!("collective {name:?} is not one collsim times"))?;
        let d = match args.get("dtype") {
            None => return Err(format!("{name}: no \"dtype\"")),
            Some(d) => {
                d.as_str().ok_or_else(|| format!("{name}: \"dtype\" {d} is not a type's name"))?
            }
        };
        let (size, d) = dtype(d).ok_or_else(|| format!("dtype {d:?} is not one collsim knows"))?;
        let key = if out { "Out msg nelems" } else { "In msg nelems" };
        let n = match args.get(key) {
            None => return Err(format!("{name}: no {key:?}")),
            Some(n) => n
                .as_u64()
                .ok_or_else(|| format!("{name}: {key:?} {n} is not a count of elements"))?,
        };
        let max = super::sweep::MAX_CALL_BYTES;
        let bytes = n.checked_mul(size).filter(|&b| b <= max.get()).ok_or_else(|| {
            format!("{name}: {key:?} {n} of {d} is more than {max}, more than any GPU holds")
        })?;
        Ok((c.to_string(), bytes, d.to_string(), group, stride_of(args)))
    })())
}

/// A collective of the trace: when the host issued it, what it was, and when its GPU work
/// ended, if it left any (one rank's in-place collectives leave none).
pub(super) struct Comm {
    pub(super) at: f64,
    pub(super) collective: String,
    pub(super) bytes: u64,
    pub(super) dtype: String,
    pub(super) name: String,
    /// Its GPU work's start and end, µs.
    pub(super) gpu: Option<(f64, f64)>,
    /// Its process group, if not the world.
    pub(super) group: Option<GroupShape>,
}

impl Comm {
    /// Its NCCL launch.
    fn call(&self) -> Call {
        Call::Nccl {
            nccl: vec![NcclOp::Collective {
                collective: self.collective.clone(),
                bytes: self.bytes.max(1),
                dtype: self.dtype.clone(),
                name: Some(self.name.clone()),
                group: self.group,
            }],
            slowdown: None,
            stream: None,
        }
    }
}

/// What a compute-stream position holds, in program order.
pub(super) enum Item {
    Comm(usize),
    /// The host made the compute stream wait for the NCCL stream (`cudaStreamWaitEvent`
    /// outside any collective).
    Wait,
}

/// A number of an event, µs.
fn num(e: &Value, k: &str) -> Option<f64> {
    e.get(k).and_then(Value::as_f64)
}

/// Converts a Kineto trace (`file` names it in errors).
pub fn import(file: &str, text: &str) -> Result<CallsFile, String> {
    import_events(file, text).map(|t| t.file)
}

/// A Kineto trace read as a list of calls, with what [`super::profile`] reads beside them.
pub(crate) struct Traced {
    /// The step as calls.
    pub file: CallsFile,
    /// Each compute call made from a GPU event: (its index in `file.calls`, the event's index
    /// in `traceEvents`).
    pub kernels: Vec<(usize, usize)>,
    /// The trace's JSON.
    pub json: Value,
}

impl Traced {
    /// The trace's events.
    pub fn events(&self) -> &[Value] {
        match &self.json {
            Value::Array(a) => a,
            v => v.get("traceEvents").and_then(Value::as_array).map_or(&[], Vec::as_slice),
        }
    }
}

/// [`import`], keeping which compute call is which GPU event.
pub(crate) fn import_events(file: &str, text: &str) -> Result<Traced, String> {
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
    let world = world_size(file, &v, events)?;
    let host = Host::scan(file, events)?;
    // The innermost record of each collective: PyTorch nests its own (a barrier's all-reduce,
    // a coalesced call's members) inside an outer one.
    let records = &host.records;
    let inner: Vec<_> = records
        .iter()
        .filter(|r| {
            !records
                .iter()
                .any(|o| o.3 != r.3 && o.0 >= r.0 && o.1 <= r.1 && (o.0, o.1) != (r.0, r.1))
        })
        .copied()
        .collect();
    let mut comms = Vec::new();
    let mut by_ext = std::collections::BTreeMap::new();
    for &(ts, _, id, i) in &inner {
        let args = events[i].get("args").unwrap_or(&Value::Null);
        let Some(c) = comm_args(args) else { continue };
        let comm = grouped(&format!("{file}: traceEvents[{i}]"), world, c)?;
        let name = events[i].get("name").and_then(Value::as_str).unwrap_or("collective");
        if let Some(id) = id {
            by_ext.insert(id, comms.len());
        }
        comms.push(Comm { at: ts, name: name.to_string(), ..comm });
    }
    let span_of = |at: f64| inner.iter().position(|r| r.0 <= at && at <= r.1);
    let mut kernels = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let c = cat(e);
        if e.get("ph").and_then(Value::as_str) != Some("X")
            || !matches!(c.as_str(), "kernel" | "Kernel" | "gpu_memcpy" | "gpu_memset")
        {
            continue;
        }
        let (ts, dur) = gpu_times(file, i, e)?;
        let name = e.get("name").and_then(Value::as_str).unwrap_or("kernel");
        let short = name.split('(').next().unwrap_or(name).to_string();
        let args = e.get("args").unwrap_or(&Value::Null);
        let corr = args.get("correlation").and_then(Value::as_u64);
        let launch = corr.and_then(|c| host.launched_at.get(&c).copied());
        // The collective whose work it is: by the op that launched it, or, where the trace
        // does not name that op, by the host's time.
        let owner = match ext(e) {
            Some(id) => by_ext.get(&id).copied(),
            None => launch
                .and_then(span_of)
                .and_then(|r| inner[r].2.and_then(|id| by_ext.get(&id).copied())),
        };
        let owner = match owner {
            Some(k) => Some(k),
            None if c.eq_ignore_ascii_case("kernel") && is_nccl(name) => {
                // An NCCL kernel with its sizes on itself.
                let own = comm_args(args).ok_or_else(|| {
                    format!(
                        "{file}: traceEvents[{i}] ({name}): an NCCL kernel without its collective's size (profile with PyTorch 2.1 or later, which records it)"
                    )
                })?;
                let comm = grouped(&format!("{file}: traceEvents[{i}]"), world, own)?;
                let at = launch.unwrap_or(ts);
                comms.push(Comm { at, name: short.clone(), ..comm });
                Some(comms.len() - 1)
            }
            None => None,
        };
        match owner {
            Some(k) => {
                let g = comms[k].gpu.get_or_insert((ts, ts + dur));
                *g = (g.0.min(ts), g.1.max(ts + dur));
                if is_nccl(name) {
                    comms[k].name = short;
                }
            }
            None => kernels.push(Kernel {
                ts,
                dur,
                name: short,
                at: launch.unwrap_or(ts),
                launch,
                event: i,
            }),
        }
    }
    if kernels.is_empty() && comms.is_empty() {
        return Err(format!("{file}: no GPU kernels (profile with ProfilerActivity.CUDA)"));
    }
    kernels.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    // Program order: each collective, and each host wait outside one, goes before the first
    // compute kernel the host launched after it (the GPU's order where launches are not
    // recorded).
    let mut order: Vec<(f64, f64, Item)> = comms
        .iter()
        .enumerate()
        .map(|(k, c)| (c.at, c.gpu.map_or(f64::INFINITY, |g| g.0), Item::Comm(k)))
        .collect();
    order.extend(
        (host.waits.iter())
            .filter(|&&t| span_of(t).is_none())
            .map(|&t| (t, f64::INFINITY, Item::Wait)),
    );
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let (calls, origin) = program(&kernels, &comms, order, host.first_block);
    let file = CallsFile { collsim_calls: VERSION, ranks: world.map(|w| w as usize), calls };
    Ok(Traced { file, kernels: origin, json: v })
}

/// An event's category.
fn cat(e: &Value) -> String {
    e.get("cat").and_then(Value::as_str).unwrap_or("").to_string()
}

/// The op an event belongs to (its `External id`).
fn ext(e: &Value) -> Option<u64> {
    e.get("args").and_then(|a| a.get("External id")).and_then(Value::as_u64)
}

/// The trace's ranks: `distributedInfo.world_size`, or without it (a bare event list) the
/// largest group recorded, since the default group spans every rank.
fn world_size(file: &str, v: &Value, events: &[Value]) -> Result<Option<u64>, String> {
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
    Ok(world.or_else(|| {
        events
            .iter()
            .filter_map(|e| e.get("args")?.get("Group size")?.as_u64())
            .filter(|&g| g >= 1)
            .max()
    }))
}

/// The collective an event records (`c`; `at` names the event in errors), on its group: the
/// world's, or its shape, which grows with the world where it spans the trace's `world` (a
/// data-parallel group), else keeps its size (a tensor-parallel one).
pub(super) fn grouped(
    at: &str,
    world: Option<u64>,
    c: Result<Recorded, String>,
) -> Result<Comm, String> {
    let (collective, bytes, dtype, size, stride) = c.map_err(|e| format!("{at}: {e}"))?;
    let group = match (size, world) {
        (None, _) => None,
        (Some(g), Some(w)) if g > w => {
            return Err(format!(
                "{at}: {collective} on a group of {g} ranks, more than the trace's {w}"
            ));
        }
        (Some(g), Some(w)) if g == w => None,
        (Some(g), w) => {
            let stride = stride.ok_or_else(|| {
                format!(
                    "{at}: {collective} on a group of {g} ranks that are not evenly spaced (or not recorded: profile with PyTorch 2.2 or later); collsim replays groups of ranks a stride apart"
                )
            })?;
            let spans = g.checked_mul(stride).is_some_and(|n| Some(n) == w);
            let size = if spans { None } else { Some(g as usize) };
            Some(GroupShape { size, stride: stride as usize })
        }
    };
    Ok(Comm { at: 0.0, collective, bytes, dtype, name: String::new(), gpu: None, group })
}

/// What the host side of a trace says.
struct Host {
    /// When the host launched each GPU operation, by correlation id.
    launched_at: std::collections::BTreeMap<u64, f64>,
    /// When the host waited for the GPU (a stream wait or a device-wide synchronisation).
    waits: Vec<f64>,
    /// The host's first blocking wait for the GPU: its launches after it follow the GPU's
    /// progress.
    first_block: f64,
    /// CPU ops that record a collective: (start, end, External id, event index).
    records: Vec<(f64, f64, Option<u64>, usize)>,
}

impl Host {
    /// The host side of `events` (of trace `file`, for errors).
    fn scan(file: &str, events: &[Value]) -> Result<Host, String> {
        let mut host = Host {
            launched_at: std::collections::BTreeMap::new(),
            waits: Vec::new(),
            first_block: f64::INFINITY,
            records: Vec::new(),
        };
        for (i, e) in events.iter().enumerate() {
            let c = cat(e);
            let args = e.get("args");
            match c.as_str() {
                "cuda_runtime" | "cuda_driver" => {
                    let corr = args.and_then(|a| a.get("correlation")).and_then(Value::as_u64);
                    if let (Some(corr), Some(ts)) = (corr, num(e, "ts")) {
                        host.launched_at.insert(corr, ts);
                        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
                        // A device-wide synchronisation waits for the collectives too.
                        if matches!(
                            name,
                            "cudaStreamWaitEvent" | "cudaDeviceSynchronize" | "cuCtxSynchronize"
                        ) {
                            host.waits.push(ts);
                        }
                        if BLOCKING.contains(&name) {
                            host.first_block = host.first_block.min(ts);
                        }
                    }
                }
                "cpu_op" | "user_annotation"
                    if args.is_some_and(|a| a.get("Collective name").is_some()) =>
                {
                    if let Some(n) =
                        args.and_then(|a| a.get("Collective name")).filter(|n| !n.is_string())
                    {
                        return Err(format!(
                            "{file}: traceEvents[{i}]: \"Collective name\" {n} is not a collective's name"
                        ));
                    }
                    let ts = num(e, "ts").filter(|t| t.is_finite()).ok_or_else(|| {
                        format!("{file}: traceEvents[{i}]: a collective's op without ts")
                    })?;
                    if ts.abs() > MAX_TS_US {
                        return Err(format!(
                            "{file}: traceEvents[{i}].ts: {ts:e} µs {}",
                            NO_TIMESTAMP
                        ));
                    }
                    let dur = num(e, "dur").filter(|d| d.is_finite() && *d >= 0.0).unwrap_or(0.0);
                    host.records.push((ts, ts + dur, ext(e), i));
                }
                _ => {}
            }
        }
        Ok(host)
    }
}

/// A GPU event's start and duration (µs), checked.
fn gpu_times(file: &str, i: usize, e: &Value) -> Result<(f64, f64), String> {
    let (Some(ts), Some(dur)) = (num(e, "ts"), num(e, "dur")) else {
        return Err(format!("{file}: traceEvents[{i}]: a GPU event without ts or dur"));
    };
    if !(ts.is_finite() && dur.is_finite() && dur >= 0.0) {
        return Err(format!("{file}: traceEvents[{i}]: ts {ts}, dur {dur}"));
    }
    if ts.abs() > MAX_TS_US {
        return Err(format!("{file}: traceEvents[{i}].ts: {ts:e} µs {}", NO_TIMESTAMP));
    }
    if dur > super::calls::MAX_ENTRY_US {
        return Err(format!(
            "{file}: traceEvents[{i}].dur: {dur} µs, more than an hour of GPU work in one event (a profiler trace's times are µs)"
        ));
    }
    Ok((ts, dur))
}

/// The step as calls in program order: the compute `kernels` (sorted by start) with the
/// collectives and host waits of `order` each before the first kernel the host launched after
/// it, and the gaps between kernels as waits for a collective, the host launching late, or
/// time that passes. Also each kernel's call index and event index.
pub(super) fn program(
    kernels: &[Kernel],
    comms: &[Comm],
    order: Vec<(f64, f64, Item)>,
    first_block: f64,
) -> (Vec<Call>, Vec<(usize, usize)>) {
    let mut reach = Vec::with_capacity(kernels.len());
    let mut latest = f64::NEG_INFINITY;
    for k in kernels {
        latest = latest.max(k.at);
        reach.push(latest);
    }
    let t0 = kernels
        .iter()
        .map(|k| k.ts)
        .chain(comms.iter().filter_map(|c| c.gpu.map(|g| g.0)))
        .fold(f64::INFINITY, f64::min);
    let mut calls = Vec::new();
    let mut origin = Vec::with_capacity(kernels.len());
    let mut ends: Vec<Option<f64>> = Vec::new();
    let mut waited = 0usize;
    let mut clock: Option<f64> = None;
    let mut items = order.into_iter().peekable();
    for (n, Kernel { ts, dur, name, launch, event, .. }) in kernels.iter().enumerate() {
        while let Some((_, _, item)) = items.next_if(|it| reach[n] > it.0) {
            match item {
                Item::Comm(k) => {
                    calls.push(comms[k].call());
                    ends.push(comms[k].gpu.map(|g| g.1));
                }
                // Where the collectives left no GPU work their timing cannot tell a wait.
                Item::Wait => {
                    if ends.len() > waited && ends.last().is_some_and(Option::is_none) {
                        waited = ends.len();
                        calls.push(Call::Wait { wait: waited });
                    }
                }
            }
        }
        if let Some(prev) = clock
            && *ts > prev
        {
            // The latest collective whose GPU work ended in the gap, just before this kernel.
            let hit = ends.iter().rposition(|e| {
                e.is_some_and(|end| end > prev && end <= *ts && ts - end <= WAIT_SLACK_US)
            });
            match hit.filter(|&j| j + 1 > waited) {
                Some(j) => {
                    calls.push(Call::Wait { wait: j + 1 });
                    waited = j + 1;
                    let end = ends[j].unwrap_or(prev);
                    if *ts > end {
                        calls.push(Call::Compute {
                            compute_us: ts - end,
                            name: Some("launch".into()),
                        });
                    }
                }
                // The host launched this kernel just before it ran, and had not waited for
                // the GPU: it would have launched it then whatever the GPU did before.
                None if launch.is_some_and(|l| ts - l <= HOST_LATE_US && l < first_block) => {
                    calls.push(Call::Until { idle_until_us: ts - t0 });
                }
                // Otherwise the gap is kept as time that passes (a wait on another stream, a
                // host that waited for the GPU, a trace without launches).
                None => {
                    calls.push(Call::Compute { compute_us: ts - prev, name: Some("gap".into()) })
                }
            }
        }
        origin.push((calls.len(), *event));
        calls.push(Call::Compute { compute_us: *dur, name: Some(name.clone()) });
        clock = Some(clock.map_or(ts + dur, |c: f64| c.max(ts + dur)));
    }
    for (_, _, item) in items {
        if let Item::Comm(k) = item {
            calls.push(comms[k].call());
            ends.push(comms[k].gpu.map(|g| g.1));
        }
    }
    if !ends.is_empty() {
        calls.push(Call::Drain { drain: true });
    }
    (calls, origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rank's step as PyTorch 2.11 records it under DDP on one GPU: the all-reduce's CPU
    /// op carries its sizes and leaves no GPU work (NCCL does nothing in place on one rank),
    /// the kernels' launches are runtime events, and the Reducer's wait is a
    /// `cudaStreamWaitEvent` outside the collective.
    fn one_rank() -> String {
        let launch = |ts: f64, corr: u64, name: &str| {
            format!(
                r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{name}", "ts": {ts}, "dur": 1, "args": {{"correlation": {corr}, "External id": {corr}}}}}"#
            )
        };
        let kernel = |ts: f64, dur: f64, corr: u64, name: &str| {
            format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "ts": {ts}, "dur": {dur}, "args": {{"stream": 7, "correlation": {corr}, "External id": {corr}}}}}"#
            )
        };
        let events = [
            launch(0.0, 1, "cudaLaunchKernel"),
            kernel(10.0, 100.0, 1, "bwd_gemm_0"),
            // The bucket is issued at 20 µs, while the GPU runs the first kernel.
            r#"{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 20, "dur": 30, "args": {"External id": 50, "Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float", "Group size": 1}}"#.to_string(),
            launch(30.0, 2, "cudaStreamWaitEvent"),
            // PyTorch 2.11 records the host's `work.wait()` too: not a collective.
            r#"{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 52, "dur": 4, "args": {"External id": 51, "Collective name": "wait", "In msg nelems": 0, "Out msg nelems": 0, "dtype": "Byte", "Group size": 1}}"#.to_string(),
            launch(60.0, 3, "cudaLaunchKernel"),
            kernel(110.0, 100.0, 3, "bwd_gemm_1"),
            // The Reducer's wait, then the optimizer launched late: the host's gap.
            launch(70.0, 4, "cudaStreamWaitEvent"),
            launch(400.0, 5, "cudaLaunchKernel"),
            kernel(410.0, 50.0, 5, "adam"),
        ];
        format!(
            r#"{{"distributedInfo": {{"world_size": 1}}, "traceEvents": [{}]}}"#,
            events.join(",")
        )
    }

    #[test]
    fn a_one_rank_trace_keeps_its_collectives_in_launch_order_and_its_waits() {
        let f = import("t.json", &one_rank()).unwrap();
        let kinds: Vec<String> = f
            .calls
            .iter()
            .map(|c| match c {
                Call::Compute { name, .. } => name.clone().unwrap_or_default(),
                Call::Nccl { nccl, .. } => match &nccl[0] {
                    NcclOp::Collective { collective, bytes, .. } => format!("{collective} {bytes}"),
                    NcclOp::Hook { .. } => "hook".into(),
                    NcclOp::Barrier { .. } => "barrier".into(),
                },
                Call::Wait { wait } => format!("wait {wait}"),
                Call::Drain { .. } => "drain".into(),
                Call::Until { idle_until_us } => format!("until {idle_until_us}"),
            })
            .collect();
        // The all-reduce goes after the kernel launched before it, not after the one the GPU
        // ran next; the wait outside it holds the optimizer; the optimizer's late start is
        // the host's, from the step's start.
        assert_eq!(
            kinds,
            ["bwd_gemm_0", "all_reduce 4000", "bwd_gemm_1", "wait 1", "until 400", "adam", "drain"]
        );
        assert_eq!(f.ranks, Some(1));
        // A kernel of another op launched while the collective's op is open (another thread)
        // stays compute.
        let crossed = one_rank().replace("\"ts\": 60, \"dur\": 1", "\"ts\": 40, \"dur\": 1");
        let f = import("t.json", &crossed).unwrap();
        assert!(
            f.calls.contains(&Call::Compute { compute_us: 100.0, name: Some("bwd_gemm_1".into()) })
        );
        // Without distributedInfo (a bare event list) the world is the largest group recorded;
        // a group larger than the trace's world is refused.
        let bare =
            format!("[{}]", one_rank().split_once("[").unwrap().1.rsplit_once("]").unwrap().0);
        let bare = bare.replace("\"Group size\": 1", "\"Group size\": 8");
        let f = import("t.json", &bare).unwrap();
        assert!(f.calls.iter().any(|c| matches!(c, Call::Nccl { nccl, .. }
            if matches!(&nccl[0], NcclOp::Collective { group: None, .. }))));
        let big = one_rank().replace("\"Group size\": 1", "\"Group size\": 2");
        assert!(import("t.json", &big).unwrap_err().contains("more than the trace's 1"));
        // A barrier is NCCL's all-reduce of one element.
        let barrier = one_rank().replace("\"allreduce\"", "\"barrier\"");
        let f = import("t.json", &barrier).unwrap();
        assert!(f.calls.iter().any(|c| matches!(c, Call::Nccl { nccl, .. }
            if matches!(&nccl[0], NcclOp::Collective { bytes: 4, .. }))));
        // A collective on the GPU's own work (a one-rank copy out of place) is not compute.
        let with_copy = one_rank().replace(
            r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "ts": 30"#,
            r#"{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 215, "dur": 5, "args": {"correlation": 9, "External id": 50}}, {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "ts": 30"#,
        );
        let f = import("t.json", &with_copy).unwrap();
        let compute: f64 = f
            .calls
            .iter()
            .map(|c| if let Call::Compute { compute_us, .. } = c { *compute_us } else { 0.0 })
            .sum();
        assert_eq!(compute, 250.0);
        // A host that waited for the GPU before launching the optimizer launched it relative
        // to the GPU's progress: the gap is kept as time that passes.
        let synced = one_rank()
            .replace("cudaStreamWaitEvent\", \"ts\": 70", "cudaDeviceSynchronize\", \"ts\": 70");
        let f = import("t.json", &synced).unwrap();
        assert!(f.calls.contains(&Call::Compute { compute_us: 200.0, name: Some("gap".into()) }));
        assert!(!f.calls.iter().any(|c| matches!(c, Call::Until { .. })));
    }
}
