//! An Nsight Systems trace of one rank's step, as `nsys export --type json` writes it, read as
//! a list of calls ([`super::calls`]) the way [`super::kineto`] reads a PyTorch profiler trace
//! (and by its code, once the events are found): its collectives, from the sizes its NVTX
//! ranges give, in the order the host issued them; every other GPU kernel (and memcpy/memset)
//! as compute; the compute stream's waits on the NCCL stream; and the host's gaps.
//!
//! The file: current nsys writes one JSON object per line (JSON Lines); older ones one JSON
//! document, an array of the same objects or an object holding such arrays, which is read the
//! same way. Records are told apart by their payload's key (`Type` is not read), and numbers
//! are read whether written as numbers or as strings (protobuf's JSON writes 64-bit integers as
//! strings). Field names differ between nsys versions: each is looked for under the names
//! below and their capitalised forms.
//! * `{"data": [...]}`: the string table, each string's id its index (several such records
//!   continue the count), or `StringIds` records of `{"id", "value"}`; a name given as a
//!   number (or a string of digits) is looked up there, any other string is the name itself;
//! * `CudaEvent` with a `kernel` (`shortName`, else `demangledName`), `memcpy` (`copyKind`)
//!   or `memset`: GPU work, `startNs` and `endNs` in ns, `correlationId`, `deviceId`,
//!   `streamId`, `globalPid`; other CUDA events (syncs) are left out;
//! * `TraceProcessEvent` (or `CudaRuntimeApi`): the host's CUDA runtime and driver calls,
//!   `name` (`cudaLaunchKernel_v7000`: the version suffix is dropped), `startNs`,
//!   `correlationId` (which launch ran which GPU work), `globalTid`;
//! * `NvtxEvent`: ranges, `Text` (or `TextId`), `Timestamp`, `EndTimestamp`, `GlobalTid`, and
//!   an extended payload rendered as JSON (`JsonText` or `JsonTextId`).
//!
//! A collective's size comes from the NVTX range around the launch of its NCCL kernel (on the
//! launching thread), in one of two forms:
//! * NCCL's own ranges (NCCL 2.17 and later annotate their API: `ncclAllReduce`,
//!   `ncclAllGather`, `ncclReduceScatter`, `ncclBroadcast`, `ncclReduce`, `ncclSend`,
//!   `ncclRecv`) with their payload's `Message size [bytes]`: nccl-tests' size, but an
//!   all-gather's or reduce-scatter's is one rank's part, which is multiplied by its
//!   communicator's ranks. The ranks come from the payload (`No. of ranks`), else from the
//!   `ncclCommInitRank` range of its `Communicator`, else from the only communicator size the
//!   trace gives. The element type is the kernel's (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`,
//!   `ncclKernel_AllReduce_RING_LL_Sum_float`); where the kernel names none (all-gather,
//!   broadcast and send/receive kernels move bytes) it is uint8, and a reduction whose kernel
//!   names none is refused. Launches NCCL defers to `ncclGroupEnd` go with the collectives
//!   issued since the thread's previous NCCL launch, and a receive of the same size as a send
//!   in the same group is one sendrecv with it.
//! * Ranges carrying PyTorch's comm record (`record_param_comms`, `nccl:all_reduce`, ...) with
//!   its keys (`Collective name`, `In msg nelems`, `Out msg nelems`, `dtype`, `Group size`,
//!   `Global rank stride`), as a JSON object after the name or in the payload, or as
//!   `key = value` pairs after a comma: read as a Kineto trace's, and preferred to NCCL's
//!   ranges inside them (the innermost where they nest).
//!
//! The world is the largest communicator or group the trace gives; a trace with collectives
//! that gives none is refused. A collective on fewer ranks keeps its group's shape where
//! PyTorch's keys give its stride; NCCL's ranges do not say which ranks, so such a group is
//! refused.
//!
//! A trace of several GPUs or processes is replayed for the lowest device (and process): the
//! others are left out, and [`Imported::notes`] says so, as it says what else the replay
//! leaves out. Refused, in one line naming the file (and its line): an NCCL kernel whose size
//! no range gives (profile with `nsys profile --trace=cuda,nvtx` and NCCL 2.17 or later, or
//! give a list of calls), a line that is not a JSON object, and, before any of this is read, an
//! SQLite, HDF5 or Arrow export or a raw `.nsys-rep` report ([`refused`]: export it as JSON).
//!
//! Where this comes from: what is known of nsys's JSON export and of NCCL's NVTX payloads, not
//! a schema nsys ships, and no export captured here. `tests/data/nsys-synthetic.json`, the
//! file the tests replay, was written by hand after that schema, not captured; a real export
//! whose fields differ is meant to get an error naming its line and what is missing, not a
//! wrong step.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::calls::{CallsFile, VERSION};
use super::kineto::{self, Comm, Item, Kernel};

/// The largest a timestamp may be from the trace's first, ns (about 3,000 years).
const MAX_NS: f64 = 1e20;

/// The keys that mark a record of an export.
const PAYLOADS: [&str; 6] =
    ["CudaEvent", "TraceProcessEvent", "CudaRuntimeApi", "NvtxEvent", "data", "StringIds"];

/// Why `bytes` (of `file`) are refused before they are read as JSON, if they are: an
/// Nsight Systems export collsim does not read (SQLite, HDF5, Arrow), or a raw report.
pub fn refused(file: &str, bytes: &[u8]) -> Option<String> {
    let json = "export the report as JSON (`nsys export --type json --output FILE.json REPORT.nsys-rep`) and give that";
    let what = if bytes.starts_with(b"SQLite format 3\0") {
        "an SQLite database (`nsys export --type sqlite`?), which collsim does not read"
    } else if bytes.starts_with(b"\x89HDF\r\n\x1a\n") {
        "an HDF5 file (`nsys export --type hdf`?), which collsim does not read"
    } else if bytes.starts_with(b"ARROW1") {
        "an Arrow file (`nsys export --type arrow`?), which collsim does not read"
    } else {
        let lower = file.to_ascii_lowercase();
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if !(lower.ends_with(".nsys-rep") || lower.ends_with(".qdrep"))
            || matches!(first, Some(b'{' | b'['))
        {
            return None;
        }
        "an Nsight Systems report, which collsim does not read"
    };
    Some(format!("{file}: {what}: {json}"))
}

/// Whether `text` looks like an Nsight Systems JSON export rather than a Kineto trace or a
/// list of calls: it has one of the export's record keys, and no `traceEvents`.
pub fn looks_like_nsys(text: &str) -> bool {
    // `"KEY"` followed by a colon, not inside a string (an escaped quote before it).
    let key = |k: &str| {
        let quoted = format!("\"{k}\"");
        text.match_indices(&quoted).any(|(i, _)| {
            !text[..i].ends_with('\\')
                && text[i + quoted.len()..]
                    .trim_start_matches([' ', '\t', '\r', '\n'])
                    .starts_with(':')
        })
    };
    !key("traceEvents")
        && ["CudaEvent", "NvtxEvent", "TraceProcessEvent", "CudaRuntimeApi"].iter().any(|k| key(k))
}

/// An Nsight Systems trace read as a list of calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The step as calls.
    pub file: CallsFile,
    /// What the replay leaves out, one line each, naming the file.
    pub notes: Vec<String>,
}

/// One record of the export and where it is, for errors ("FILE:LINE", or "FILE: record N" in
/// one document).
struct Rec {
    at: String,
    v: Value,
}

/// The records of an export: one JSON object a line, or one document.
fn records(file: &str, text: &str) -> Result<Vec<Rec>, String> {
    let mut out = Vec::new();
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let lines = serde_json::from_str::<Value>(first).is_ok_and(|v| v.is_object());
    if !lines {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| format!("{file}:{}:{}: {}", e.line(), e.column(), bare(&e)))?;
        let mut n = 0;
        expand(v, &mut |v| {
            n += 1;
            out.push(Rec { at: format!("{file}: record {n}"), v });
        });
        return Ok(out);
    }
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{file}:{}", i + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| {
            format!(
                "{at}:{}: {} (each line of an Nsight Systems JSON export is one JSON object: is the file cut short?)",
                e.column(),
                bare(&e)
            )
        })?;
        if !v.is_object() {
            return Err(format!(
                "{at}: not a JSON object (each line of an Nsight Systems JSON export is one)"
            ));
        }
        expand(v, &mut |v| out.push(Rec { at: at.clone(), v }));
    }
    Ok(out)
}

/// A JSON error without its position (given before it instead).
fn bare(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The records in `v`: itself where it holds a payload, and the objects of its arrays.
fn expand(v: Value, push: &mut dyn FnMut(Value)) {
    match v {
        Value::Array(a) => a.into_iter().for_each(|x| expand(x, push)),
        Value::Object(mut o) => {
            let arrays: Vec<String> = (o.iter())
                .filter(|(k, x)| !PAYLOADS.contains(&k.as_str()) && x.is_array())
                .map(|(k, _)| k.clone())
                .collect();
            let inner: Vec<Value> = arrays.iter().filter_map(|k| o.remove(k)).collect();
            if PAYLOADS.iter().any(|k| o.contains_key(*k)) {
                push(Value::Object(o));
            }
            inner.into_iter().for_each(|x| expand(x, push));
        }
        _ => {}
    }
}

/// The first of `keys` an object has.
fn get<'a>(o: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| o.get(*k))
}

/// A count or id, written as a number or a string of digits.
fn uint(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// The export's string table.
#[derive(Default)]
struct Strings(BTreeMap<u64, String>);

impl Strings {
    /// The table in `recs`.
    fn of(recs: &[Rec]) -> Strings {
        let mut t = Strings::default();
        let mut next = 0u64;
        for r in recs {
            if let Some(a) = r.v.get("data").and_then(Value::as_array)
                && a.iter().all(Value::is_string)
            {
                for s in a {
                    t.0.insert(next, s.as_str().unwrap_or_default().to_string());
                    next += 1;
                }
            }
            let ids = match r.v.get("StringIds") {
                Some(Value::Array(a)) => a.iter().collect(),
                Some(o) => vec![o],
                None => Vec::new(),
            };
            for e in ids {
                if let (Some(id), Some(s)) =
                    (e.get("id").and_then(uint), e.get("value").and_then(Value::as_str))
                {
                    t.0.insert(id, s.to_string());
                }
            }
        }
        t
    }

    /// The name `v` gives: looked up where it is an id, else itself.
    fn name(&self, at: &str, what: &str, v: &Value) -> Result<String, String> {
        let id = match v {
            Value::String(s) if !s.is_empty() && !s.bytes().all(|b| b.is_ascii_digit()) => {
                return Ok(s.clone());
            }
            v => uint(v),
        };
        id.and_then(|id| self.0.get(&id).cloned()).ok_or_else(|| {
            format!("{at}: {what} {v} is not in the string table (is the export whole?)")
        })
    }
}

/// Turns the export's timestamps (ns, as numbers or strings) into µs from its first.
#[derive(Default)]
struct Clock(Option<i128>);

impl Clock {
    /// `v` in µs, checked (None: not a time).
    fn us(&mut self, at: &str, key: &str, v: &Value) -> Result<Option<f64>, String> {
        let ns = if let Some(n) = v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from))
        {
            let base = *self.0.get_or_insert(n);
            (n - base) as f64
        } else if let Some(n) = v.as_str().and_then(|s| s.trim().parse::<i128>().ok()) {
            let base = *self.0.get_or_insert(n);
            (n - base) as f64
        } else if let Some(x) = v.as_f64().or_else(|| v.as_str()?.trim().parse().ok()) {
            let base = match self.0 {
                Some(b) => b,
                None if x.is_finite() && x.abs() < MAX_NS => *self.0.insert(x as i128),
                None => 0,
            };
            x - base as f64
        } else {
            return Ok(None);
        };
        if !ns.is_finite() || ns.abs() > MAX_NS {
            return Err(format!(
                "{at}: {key} {v} is no timestamp (nsys counts ns from the session's start or the epoch)"
            ));
        }
        Ok(Some(ns / 1e3))
    }

    /// An event's start and end (µs), from the first of `starts` and `ends` it has (the end
    /// unchecked against the start: an NVTX mark's may be 0).
    fn span(
        &mut self,
        at: &str,
        e: &Value,
        starts: &[&str],
        ends: &[&str],
    ) -> Result<Option<(f64, Option<f64>)>, String> {
        let Some((sk, sv)) = starts.iter().find_map(|k| Some((*k, e.get(*k)?))) else {
            return Ok(None);
        };
        let Some(start) = self.us(at, sk, sv)? else {
            return Err(format!("{at}: {sk} {sv} is not a time in ns"));
        };
        let end = match ends.iter().find_map(|k| Some((*k, e.get(*k)?))) {
            None => None,
            Some((ek, ev)) => match self.us(at, ek, ev)? {
                None => return Err(format!("{at}: {ek} {ev} is not a time in ns")),
                end => end,
            },
        };
        Ok(Some((start, end)))
    }
}

/// The names a CUDA event's start is given under, ns.
const STARTS: [&str; 4] = ["startNs", "start", "StartNs", "Start"];
/// The names a CUDA event's end is given under, ns.
const ENDS: [&str; 4] = ["endNs", "end", "EndNs", "End"];

/// GPU work: a kernel, memcpy or memset.
struct Gpu {
    at: String,
    start: f64,
    end: f64,
    corr: Option<u64>,
    device: Option<u64>,
    stream: Option<u64>,
    /// Its process (`globalPid` >> 24).
    pid: Option<u64>,
    name: String,
}

/// A host call of the CUDA runtime or driver.
struct Api {
    start: f64,
    corr: Option<u64>,
    /// Its thread (`globalTid`).
    tid: Option<u64>,
    name: String,
}

/// An NVTX range (or mark: no end).
struct Range {
    at: String,
    start: f64,
    end: Option<f64>,
    tid: Option<u64>,
    name: String,
    /// What its text and payload say, by key.
    args: Map<String, Value>,
    /// Why its arguments do not read, if they do not.
    bad: Option<String>,
}

/// The process of a `globalTid` or `globalPid` (nsys packs the process id above the thread's
/// 24 bits).
fn pid_of(global: u64) -> u64 {
    global >> 24
}

/// A CUDA API name without its version and stream-mode suffixes (`cudaLaunchKernel_v7000`,
/// `cudaMemcpyAsync_ptsz_v7000`).
fn api_name(name: &str) -> &str {
    let mut n = name;
    if let Some((head, v)) = n.rsplit_once("_v")
        && !v.is_empty()
        && v.bytes().all(|b| b.is_ascii_digit())
    {
        n = head;
    }
    n.strip_suffix("_ptsz").or_else(|| n.strip_suffix("_ptds")).unwrap_or(n)
}

/// A range's name and the arguments its text carries: `NAME {JSON}`, or `NAME, key = value,
/// ...` (also `key: value`).
fn split_text(text: &str) -> (String, Map<String, Value>, Option<String>) {
    let Some(i) = text.find([',', '{']) else {
        return (text.trim().to_string(), Map::new(), None);
    };
    let name = text[..i].trim().to_string();
    let rest = text[i..].trim();
    if rest.starts_with('{') {
        return match serde_json::from_str::<Map<String, Value>>(rest) {
            Ok(m) => (name, m, None),
            Err(e) => (name, Map::new(), Some(format!("its text's JSON does not read: {e}"))),
        };
    }
    let mut args = Map::new();
    for part in split_top(&rest[1..]) {
        let Some(k) = part.find(['=', ':']) else { continue };
        let (key, value) = (part[..k].trim(), part[k + 1..].trim());
        if key.is_empty() {
            continue;
        }
        let v = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
        args.insert(key.to_string(), v);
    }
    (name, args, None)
}

/// `s` split at its commas outside brackets and quotes.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut quoted, mut from) = (Vec::new(), 0i32, false, 0);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '[' | '{' | '(' if !quoted => depth += 1,
            ']' | '}' | ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// The value of the first key of `args` whose lowercase name is one of `keys`.
fn arg<'a>(args: &'a Map<String, Value>, keys: &[&str]) -> Option<(&'a str, &'a Value)> {
    args.iter()
        .find(|(k, _)| keys.contains(&k.trim().to_ascii_lowercase().as_str()))
        .map(|(k, v)| (k.as_str(), v))
}

/// The keys NCCL and others give a communicator's ranks under (lowercase).
const RANK_KEYS: [&str; 4] = ["no. of ranks", "number of ranks", "nranks", "num ranks"];
/// The keys a communicator's id is given under (lowercase).
const COMM_KEYS: [&str; 3] = ["communicator", "comm", "comm hash"];

/// A communicator's ranks given in `args`, checked.
fn ranks_in(at: &str, args: &Map<String, Value>) -> Result<Option<u64>, String> {
    match arg(args, &RANK_KEYS) {
        None => Ok(None),
        Some((k, v)) => match uint(v) {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!("{at}: {k:?} {v} is not a number of ranks")),
        },
    }
}

/// A communicator's id in `args`, as text.
fn comm_in(args: &Map<String, Value>) -> Option<String> {
    arg(args, &COMM_KEYS).map(|(_, v)| match v {
        Value::String(s) => s.trim().to_string(),
        v => v.to_string(),
    })
}

/// nccl-tests' collective of an NCCL API range's name, whether NCCL's payload gives one
/// rank's part of its size, and whether it is a receive.
fn nccl_api(name: &str) -> Option<(&'static str, bool, bool)> {
    let n = name.strip_prefix("nccl").unwrap_or(name);
    Some(match n {
        "AllReduce" => ("all_reduce", false, false),
        "AllGather" => ("all_gather", true, false),
        "ReduceScatter" => ("reduce_scatter", true, false),
        "Broadcast" | "Bcast" => ("broadcast", false, false),
        "Reduce" => ("reduce", false, false),
        "Send" => ("sendrecv", false, false),
        "Recv" => ("sendrecv", false, true),
        _ => return None,
    })
}

/// The element type an NCCL kernel's name gives, if it gives one
/// (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_AllGather_RING_LL_Sum_int8_t`).
fn kernel_dtype(name: &str) -> Option<&'static str> {
    name.split(['_', '(', '<', ' ']).find_map(|t| {
        Some(match t {
            "f32" | "float" => "float",
            "f16" | "half" => "half",
            "bf16" | "bfloat16" => "bfloat16",
            "f64" | "double" => "double",
            "i32" | "int32" => "int32",
            "u32" | "uint32" => "uint32",
            "i64" | "int64" => "int64",
            "u64" | "uint64" => "uint64",
            "i8" | "int8" => "int8",
            "u8" | "uint8" => "uint8",
            "f8e4m3" | "e4m3" => "f8e4m3",
            "f8e5m2" | "e5m2" => "f8e5m2",
            _ => return None,
        })
    })
}

/// A collective's size as NCCL's range gives it.
#[derive(Clone, Copy)]
struct NcclSize {
    /// nccl-tests' collective.
    collective: &'static str,
    /// nccl-tests' size.
    bytes: u64,
    /// Its communicator's ranks.
    group: u64,
    /// A receive (which a send of its group may take in).
    recv: bool,
}

/// A collective's record: an NVTX range with its size.
struct Coll {
    /// The range's index in the ranges.
    range: usize,
    /// Whether PyTorch's keys give it (else NCCL's payload).
    torch: bool,
    /// PyTorch's: the collective, ready.
    ready: Option<Comm>,
    /// NCCL's: its size.
    nccl: Option<NcclSize>,
    /// Its GPU work's start and end, µs.
    gpu: Option<(f64, f64)>,
    /// Its NCCL kernel's name.
    kernel: Option<String>,
    /// Taken into a send of its group.
    folded: bool,
}

/// The events of an export that a step is made of.
#[derive(Default)]
struct Events {
    gpus: Vec<Gpu>,
    apis: Vec<Api>,
    ranges: Vec<Range>,
}

impl Events {
    /// The events of the export `text` (of `file`, for errors).
    fn read(file: &str, text: &str) -> Result<Events, String> {
        let recs = records(file, text)?;
        let strings = Strings::of(&recs);
        let mut clock = Clock::default();
        let mut ev = Events::default();
        for r in &recs {
            let at = r.at.as_str();
            if let Some(c) = r.v.get("CudaEvent") {
                ev.gpus.extend(gpu_event(at, c, &strings, &mut clock)?);
            } else if let Some(c) = get(&r.v, &["TraceProcessEvent", "CudaRuntimeApi"]) {
                let Some((start, _)) = clock.span(at, c, &STARTS, &ENDS)? else { continue };
                let name = match get(c, &["name", "nameId", "Name", "NameId"]) {
                    Some(v) => api_name(&strings.name(at, "the call's name", v)?).to_string(),
                    None => String::new(),
                };
                ev.apis.push(Api {
                    start,
                    corr: get(c, &["correlationId", "CorrelationId"]).and_then(uint),
                    tid: get(c, &["globalTid", "GlobalTid"]).and_then(uint),
                    name,
                });
            } else if let Some(n) = r.v.get("NvtxEvent") {
                ev.ranges.extend(nvtx_event(at, n, &strings, &mut clock)?);
            }
        }
        if ev.gpus.is_empty() {
            return Err(format!(
                "{file}: no CUDA kernels (profile with `nsys profile --trace=cuda,nvtx`, and export with `nsys export --type json`)"
            ));
        }
        Ok(ev)
    }

    /// Keeps one rank's events: the lowest device (and process) with GPU work. What is left
    /// out, if anything.
    fn one_rank(&mut self, file: &str) -> Result<Option<String>, String> {
        let whose: BTreeSet<(Option<u64>, Option<u64>)> =
            self.gpus.iter().map(|g| (g.device, g.pid)).collect();
        if whose.len() > 1 && whose.iter().any(|w| w.0.is_none() || w.1.is_none()) {
            return Err(format!(
                "{file}: GPU work of several devices or processes, and not every event says whose (deviceId and globalPid): give a trace of one rank"
            ));
        }
        let (device, pid) = *whose.iter().next().unwrap_or(&(None, None));
        let mine = |tid: Option<u64>| pid.is_none() || tid.is_none_or(|t| Some(pid_of(t)) == pid);
        self.apis.retain(|a| mine(a.tid));
        self.ranges.retain(|r| mine(r.tid));
        if whose.len() == 1 {
            return Ok(None);
        }
        let left = self.gpus.iter().filter(|g| (g.device, g.pid) != (device, pid)).count();
        self.gpus.retain(|g| (g.device, g.pid) == (device, pid));
        Ok(Some(format!(
            "{file}: GPU work of {} devices or processes: device {} of process {} (the lowest) replayed, the {left} GPU events of the others left out",
            whose.len(),
            device.unwrap_or(0),
            pid.unwrap_or(0)
        )))
    }
}

/// The GPU work a `CudaEvent` (at `at`) records, if it records any.
fn gpu_event(
    at: &str,
    c: &Value,
    strings: &Strings,
    clock: &mut Clock,
) -> Result<Option<Gpu>, String> {
    let (name, what) = if let Some(k) = get(c, &["kernel", "Kernel"]) {
        let names = ["shortName", "ShortName", "demangledName", "DemangledName", "name", "Name"];
        let n = match get(k, &names) {
            Some(v) => strings.name(at, "the kernel's name", v)?,
            None => "kernel".to_string(),
        };
        let n = n.trim_start_matches("void ");
        (n.split('(').next().unwrap_or(n).trim().to_string(), "kernel")
    } else if let Some(m) = get(c, &["memcpy", "Memcpy"]) {
        // CUPTI's copy kinds.
        let kinds =
            ["", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"];
        let kind = get(m, &["copyKind", "CopyKind"])
            .and_then(uint)
            .and_then(|k| kinds.get(usize::try_from(k).ok()?))
            .copied()
            .unwrap_or("");
        (format!("Memcpy {kind}").trim().to_string(), "memcpy")
    } else if get(c, &["memset", "Memset"]).is_some() {
        ("Memset".to_string(), "memset")
    } else {
        // A synchronisation or another CUDA event: no GPU work.
        return Ok(None);
    };
    let (start, end) = match clock.span(at, c, &STARTS, &ENDS)? {
        Some((s, Some(e))) if e >= s => (s, e),
        Some((_, Some(_))) => {
            return Err(format!("{at}: a CUDA {what} that ends before it starts"));
        }
        _ => return Err(format!("{at}: a CUDA {what} without startNs and endNs")),
    };
    if end - start > super::calls::MAX_ENTRY_US {
        return Err(format!(
            "{at}: {name}: {} µs, more than an hour of GPU work in one event (nsys's times are ns)",
            end - start
        ));
    }
    Ok(Some(Gpu {
        at: at.to_string(),
        start,
        end,
        corr: get(c, &["correlationId", "CorrelationId"]).and_then(uint),
        device: get(c, &["deviceId", "DeviceId"]).and_then(uint),
        stream: get(c, &["streamId", "StreamId"]).and_then(uint),
        pid: get(c, &["globalPid", "GlobalPid"]).and_then(uint).map(pid_of),
        name,
    }))
}

/// The range (or mark) an `NvtxEvent` (at `at`) records, if it has a text.
fn nvtx_event(
    at: &str,
    n: &Value,
    strings: &Strings,
    clock: &mut Clock,
) -> Result<Option<Range>, String> {
    let starts = ["Timestamp", "timestamp", "startNs", "start"];
    let ends = ["EndTimestamp", "endTimestamp", "endNs", "end"];
    let Some((start, end)) = clock.span(at, n, &starts, &ends)? else { return Ok(None) };
    let text = match (get(n, &["Text", "text"]), get(n, &["TextId", "textId"])) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(id)) => strings.name(at, "the range's TextId", id)?,
        _ => return Ok(None),
    };
    let (name, mut args, mut bad) = split_text(&text);
    let payload = match (get(n, &["JsonText", "jsonText"]), get(n, &["JsonTextId", "jsonTextId"])) {
        (Some(Value::Object(o)), _) => Some(Ok(o.clone())),
        (Some(Value::String(s)), _) => Some(serde_json::from_str::<Map<String, Value>>(s)),
        (_, Some(id)) => {
            Some(serde_json::from_str(&strings.name(at, "the range's JsonTextId", id)?))
        }
        _ => None,
    };
    match payload {
        Some(Ok(p)) => args.extend(p),
        Some(Err(e)) => bad = Some(format!("its JSON payload does not read: {e}")),
        None => {}
    }
    Ok(Some(Range {
        at: at.to_string(),
        start,
        // nsys writes a mark's end as 0, or leaves it out.
        end: end.filter(|&e| e > start),
        tid: get(n, &["GlobalTid", "globalTid"]).and_then(uint),
        name,
        args,
        bad,
    }))
}

/// The collectives' records among `ranges` (the ranges with sizes), and the trace's world: its
/// largest communicator or group.
fn sized(ranges: &[Range]) -> Result<(Vec<Coll>, Option<u64>), String> {
    // Candidates: ranges that name a collective and carry its size, PyTorch's way or NCCL's.
    let mut cands = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        let torch_keys = ["Collective name", "In msg nelems", "Out msg nelems"];
        let torch = torch_keys.iter().any(|k| r.args.contains_key(*k));
        let nccl = nccl_api(&r.name).is_some() && arg(&r.args, &SIZE_KEYS).is_some();
        if !torch && !nccl {
            continue;
        }
        let at = format!("{} ({})", r.at, r.name);
        if let Some(b) = &r.bad {
            return Err(format!("{at}: {b}"));
        }
        if r.end.is_none() {
            return Err(format!("{at}: a collective's range without an end (EndTimestamp)"));
        }
        let recorded = if torch {
            let mut args = r.args.clone();
            if !args.contains_key("Collective name") {
                let n = r.name.strip_prefix("nccl:").or_else(|| r.name.strip_prefix("c10d::"));
                let n = n.unwrap_or(&r.name).trim_end_matches('_');
                args.insert("Collective name".into(), Value::String(n.to_string()));
            }
            // PyTorch's record of the host waiting on a collective: nothing to time.
            let Some(rec) = kineto::comm_args(&Value::Object(args)) else { continue };
            Some(rec.map_err(|e| format!("{at}: {e}"))?)
        } else {
            None
        };
        cands.push((i, recorded));
    }
    // PyTorch's records, the innermost where they nest, over NCCL's ranges inside them.
    let spans: Vec<_> = cands.iter().map(|c| (span(&ranges[c.0]), c.1.is_some())).collect();
    let kept = |i: usize| {
        let (s, torch) = spans[i];
        spans.iter().enumerate().all(|(j, &(o, o_torch))| {
            i == j
                || !o_torch
                || if torch { !(within(o, s) && (o.0, o.1) != (s.0, s.1)) } else { !within(s, o) }
        })
    };
    let cands: Vec<_> =
        cands.into_iter().enumerate().filter(|(k, _)| kept(*k)).map(|c| c.1).collect();

    // Communicators' sizes, from NCCL's init ranges, and NCCL's ranges' sizes on them.
    let mut comm_size = BTreeMap::new();
    let mut inits = BTreeSet::new();
    for r in ranges.iter().filter(|r| r.name.starts_with("ncclComm")) {
        if let Some(n) = ranks_in(&r.at, &r.args)? {
            inits.insert(n);
            if let Some(c) = comm_in(&r.args) {
                comm_size.insert(c, n);
            }
        }
    }
    let mut sizes = inits.clone();
    let mut colls = Vec::new();
    for (i, recorded) in cands {
        let r = &ranges[i];
        let mut c = Coll {
            range: i,
            torch: false,
            ready: None,
            nccl: None,
            gpu: None,
            kernel: None,
            folded: false,
        };
        match &recorded {
            Some(rec) => {
                sizes.extend(rec.3);
                c.torch = true;
            }
            None => c.nccl = Some(nccl_size(r, &comm_size, &inits)?),
        }
        sizes.extend(c.nccl.map(|n| n.group));
        colls.push((c, recorded));
    }
    let world = sizes.iter().max().copied();
    let mut out = Vec::with_capacity(colls.len());
    for (mut c, recorded) in colls {
        if let Some(rec) = recorded {
            let r = &ranges[c.range];
            let comm = kineto::grouped(&format!("{} ({})", r.at, r.name), world, Ok(rec))?;
            c.ready = Some(Comm { at: r.start, name: r.name.clone(), ..comm });
        }
        out.push(c);
    }
    Ok((out, world))
}

/// The keys NCCL's payload gives a collective's size under (lowercase).
const SIZE_KEYS: [&str; 2] = ["message size [bytes]", "message size"];

/// The size NCCL's range `r` gives its collective, on its communicator: of the ranks its
/// payload gives, else those of the communicator it names (`comm_size`), else those of the
/// trace's only communicator size (`inits`).
fn nccl_size(
    r: &Range,
    comm_size: &BTreeMap<String, u64>,
    inits: &BTreeSet<u64>,
) -> Result<NcclSize, String> {
    let at = format!("{} ({})", r.at, r.name);
    let (Some((collective, part, recv)), Some((k, v))) =
        (nccl_api(&r.name), arg(&r.args, &SIZE_KEYS))
    else {
        return Err(format!("{at}: not NCCL's range of a collective with its size"));
    };
    let bytes = uint(v).ok_or_else(|| format!("{at}: {k:?} {v} is not a size in bytes"))?;
    let group = match ranks_in(&at, &r.args)? {
        Some(n) => n,
        None => match comm_in(&r.args).and_then(|c| comm_size.get(&c).copied()) {
            Some(n) => n,
            None if inits.len() == 1 => *inits.iter().next().unwrap_or(&1),
            None if inits.is_empty() => {
                return Err(format!(
                    "{at}: its communicator's ranks are nowhere in the trace (NCCL's ncclCommInitRank range gives them: profile the run from its start with `nsys profile --trace=cuda,nvtx`), or give a list of calls"
                ));
            }
            None => {
                let s: Vec<String> = inits.iter().map(u64::to_string).collect();
                return Err(format!(
                    "{at}: the trace's communicators have {} ranks and its range does not say which is its (no \"Communicator\" of a ncclCommInitRank range)",
                    s.join(", ")
                ));
            }
        },
    };
    let max = super::sweep::MAX_CALL_BYTES;
    let total = if part { bytes.checked_mul(group) } else { Some(bytes) };
    let bytes = total.filter(|&b| b <= max.get()).ok_or_else(|| {
        format!("{at}: {k:?} {bytes} on {group} ranks is more than {max}, more than any GPU holds")
    })?;
    Ok(NcclSize { collective, bytes, group, recv })
}

/// A range's start, end and thread.
fn span(r: &Range) -> (f64, f64, Option<u64>) {
    (r.start, r.end.unwrap_or(r.start), r.tid)
}

/// Whether two threads may be the same (either unknown, or equal).
fn same(a: Option<u64>, b: Option<u64>) -> bool {
    a.is_none() || b.is_none() || a == b
}

/// Whether span `inner` lies within `outer`, on the same thread.
fn within(inner: (f64, f64, Option<u64>), outer: (f64, f64, Option<u64>)) -> bool {
    same(inner.2, outer.2) && inner.0 >= outer.0 && inner.1 <= outer.1
}

/// Gives each collective of `colls` the GPU work its range launched (an NCCL kernel NCCL
/// deferred to `ncclGroupEnd`: the group's), and returns the rest as compute kernels, with
/// the compute streams. An NCCL kernel no collective's range launched is an error.
fn attach(
    ev: &Events,
    colls: &mut [Coll],
    launch: &BTreeMap<u64, (f64, Option<u64>)>,
) -> Result<(Vec<Kernel>, BTreeSet<u64>), String> {
    let ranges = &ev.ranges;
    let group_ends: Vec<&Range> =
        ranges.iter().filter(|r| r.name == "ncclGroupEnd" && r.end.is_some()).collect();
    let launched = |g: &Gpu| g.corr.and_then(|c| launch.get(&c).copied());
    let mut order: Vec<usize> = (0..ev.gpus.len()).collect();
    order.sort_by(|&a, &b| {
        let t = |g: &Gpu| launched(g).map_or(g.start, |l| l.0);
        t(&ev.gpus[a]).total_cmp(&t(&ev.gpus[b]))
    });
    let mut last_nccl: BTreeMap<Option<u64>, f64> = BTreeMap::new();
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let (mut kernels, mut streams) = (Vec::new(), BTreeSet::new());
    for gi in order {
        let g = &ev.gpus[gi];
        let nccl = kineto::is_nccl(&g.name);
        let l = launched(g);
        let mut owners = Vec::new();
        if let Some((t, tid)) = l {
            // The innermost record around the launch, on its thread.
            let inside = |c: &Coll| {
                let (s, e, ct) = span(&ranges[c.range]);
                same(ct, tid) && s <= t && t <= e
            };
            let width = |c: &Coll| span(&ranges[c.range]).1 - span(&ranges[c.range]).0;
            let best = (0..colls.len())
                .filter(|&k| inside(&colls[k]))
                .min_by(|&a, &b| width(&colls[a]).total_cmp(&width(&colls[b])));
            if let Some(k) = best {
                owners.push(k);
            } else if nccl
                && let Some(ge) = group_ends
                    .iter()
                    .position(|r| same(r.tid, tid) && r.start <= t && r.end.is_some_and(|e| t <= e))
            {
                // A launch NCCL deferred to the group's end: the collectives of NCCL's ranges
                // issued on the thread since its previous NCCL launch.
                let since = last_nccl.get(&tid).copied().unwrap_or(f64::NEG_INFINITY);
                let taken: BTreeSet<usize> = groups.values().flatten().copied().collect();
                let pending: Vec<usize> = (0..colls.len())
                    .filter(|&k| {
                        let (s, e, ct) = span(&ranges[colls[k].range]);
                        !colls[k].torch
                            && colls[k].gpu.is_none()
                            && same(ct, tid)
                            && s >= since
                            && e <= t
                            && !taken.contains(&k)
                    })
                    .collect();
                let set = groups.entry(ge).or_insert_with(|| {
                    fold(colls, &pending);
                    pending
                });
                owners.extend(set.iter().copied());
            }
            if nccl {
                last_nccl.insert(tid, t);
            }
        }
        if owners.is_empty() {
            if nccl {
                let why = if launch.is_empty() {
                    "the trace has no CUDA API calls to tell which range launched it"
                } else if l.is_none() {
                    "its launch is not in the trace"
                } else {
                    "no NVTX range with its size is around its launch"
                };
                return Err(format!(
                    "{}: {}: an NCCL kernel whose collective's size is nowhere: {why}; profile with `nsys profile --trace=cuda,nvtx` and NCCL 2.17 or later (whose NVTX ranges give the sizes), or give a list of calls",
                    g.at, g.name
                ));
            }
            streams.extend(g.stream);
            kernels.push(Kernel {
                ts: g.start,
                dur: g.end - g.start,
                name: g.name.clone(),
                at: l.map_or(g.start, |l| l.0),
                launch: l.map(|l| l.0),
                event: gi,
            });
            continue;
        }
        for k in owners {
            let c = &mut colls[k];
            let gpu = c.gpu.get_or_insert((g.start, g.end));
            *gpu = (gpu.0.min(g.start), gpu.1.max(g.end));
            if nccl && c.kernel.is_none() {
                c.kernel = Some(g.name.clone());
            }
        }
    }
    kernels.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    Ok((kernels, streams))
}

/// Takes each receive of `group` into a send of the same size there (one sendrecv, as
/// nccl-tests times an exchange).
fn fold(colls: &mut [Coll], group: &[usize]) {
    let p2p =
        |c: &Coll, recv: bool| c.nccl.filter(|n| n.collective == "sendrecv" && n.recv == recv);
    let mut sends: Vec<usize> =
        group.iter().copied().filter(|&k| p2p(&colls[k], false).is_some()).collect();
    for &k in group {
        let Some(r) = p2p(&colls[k], true) else { continue };
        if let Some(i) =
            sends.iter().position(|&s| colls[s].nccl.is_some_and(|n| n.bytes == r.bytes))
        {
            sends.remove(i);
            colls[k].folded = true;
        }
    }
}

/// The collective NCCL's range `r` (at `at`) sized, with the element type its kernel gives
/// (None: one that moves bytes as they are, taken as uint8), on the trace's `world`.
fn nccl_comm(
    at: &str,
    c: &Coll,
    n: NcclSize,
    r: &Range,
    world: Option<u64>,
) -> Result<(Comm, bool), String> {
    let NcclSize { collective, bytes, group, .. } = n;
    if Some(group) != world {
        return Err(format!(
            "{at}: {collective} on a communicator of {group} ranks of the trace's {}: NCCL's ranges do not say which ranks, and collsim replays groups of ranks a stride apart (give a list of calls with its group)",
            world.unwrap_or(group)
        ));
    }
    let reduces = matches!(collective, "all_reduce" | "reduce_scatter" | "reduce");
    let (dtype, untyped) = match c.kernel.as_deref().and_then(kernel_dtype) {
        Some(d) => (d, false),
        // Nothing is reduced on one rank.
        None if !reduces || group == 1 => ("uint8", true),
        None => {
            return Err(format!(
                "{at}: NCCL's range gives its size but no kernel of it names its element type ({}); give a list of calls",
                c.kernel.as_deref().unwrap_or("it launched none")
            ));
        }
    };
    let comm = Comm {
        at: r.start,
        collective: collective.to_string(),
        bytes,
        dtype: dtype.to_string(),
        name: c.kernel.clone().unwrap_or_else(|| r.name.clone()),
        gpu: c.gpu,
        group: None,
    };
    Ok((comm, untyped))
}

/// Converts an Nsight Systems JSON export (`file` names it in errors).
pub fn import(file: &str, text: &str) -> Result<Imported, String> {
    let mut ev = Events::read(file, text)?;
    let mut notes: Vec<String> = ev.one_rank(file)?.into_iter().collect();
    let (mut colls, world) = sized(&ev.ranges)?;
    let launch: BTreeMap<u64, (f64, Option<u64>)> =
        ev.apis.iter().filter_map(|a| Some((a.corr?, (a.start, a.tid)))).collect();
    let (kernels, streams) = attach(&ev, &mut colls, &launch)?;

    // The collectives, ready, and their ranges' spans.
    let (mut comms, mut spans, mut untyped) = (Vec::new(), Vec::new(), 0usize);
    for c in colls.into_iter().filter(|c| !c.folded) {
        let r = &ev.ranges[c.range];
        let comm = match c.ready {
            Some(comm) => Comm { gpu: c.gpu, name: c.kernel.unwrap_or(comm.name.clone()), ..comm },
            None => {
                let Some(n) = c.nccl else { continue };
                let at = format!("{} ({})", r.at, r.name);
                let (comm, bytes_only) = nccl_comm(&at, &c, n, r, world)?;
                untyped += usize::from(bytes_only);
                comm
            }
        };
        comms.push(comm);
        spans.push((r.start, r.end.unwrap_or(r.start)));
    }
    if world.is_none() && !comms.is_empty() {
        return Err(format!(
            "{file}: the collectives' ranks are nowhere in the trace (NCCL's ncclCommInitRank range or PyTorch's \"Group size\" gives them)"
        ));
    }
    if untyped > 0 {
        notes.push(format!(
            "{file}: {untyped} collectives whose NCCL kernels name no element type replayed as uint8 (NCCL moves an all-gather's, a broadcast's or a send's bytes as they are)"
        ));
    }
    if streams.len() > 1 {
        notes.push(format!(
            "{file}: compute kernels on {} CUDA streams, taken as one stream in start order",
            streams.len()
        ));
    }
    if launch.is_empty() {
        notes.push(format!(
            "{file}: no CUDA API calls in the trace (`--trace=cuda` records them): the kernels run in the GPU's order and their gaps are kept as time that passes"
        ));
    }

    // The host: its waits for the GPU outside NCCL's calls, and its first blocking wait.
    let in_nccl = |t: f64| {
        spans.iter().any(|&(s, e)| s <= t && t <= e)
            || ev.ranges.iter().any(|r| {
                r.name.starts_with("nccl") && r.start <= t && r.end.is_some_and(|e| t <= e)
            })
    };
    let waits = ev.apis.iter().filter(|a| {
        let wait = [
            "cudaStreamWaitEvent",
            "cudaDeviceSynchronize",
            "cuCtxSynchronize",
            "cuStreamWaitEvent",
        ];
        wait.contains(&a.name.as_str()) && !in_nccl(a.start)
    });
    let first_block = (ev.apis.iter())
        .filter(|a| kineto::BLOCKING.contains(&a.name.as_str()))
        .map(|a| a.start)
        .fold(f64::INFINITY, f64::min);
    // Program order, as the Kineto reader makes it.
    let mut order: Vec<(f64, f64, Item)> = comms
        .iter()
        .enumerate()
        .map(|(k, c)| (c.at, c.gpu.map_or(f64::INFINITY, |g| g.0), Item::Comm(k)))
        .collect();
    order.extend(waits.map(|a| (a.start, f64::INFINITY, Item::Wait)));
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let (calls, _) = kineto::program(&kernels, &comms, order, first_block);
    let file = CallsFile { collsim_calls: VERSION, ranks: world.map(|w| w as usize), calls };
    Ok(Imported { file, notes })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::workload::calls::{Call, NcclOp};

    const PID: u64 = 7 << 24;
    const TID: u64 = (7 << 24) | 9;

    /// Nanoseconds of `us`, as protobuf's JSON writes a 64-bit integer.
    fn ns(us: f64) -> String {
        ((us * 1e3).round() as u64).to_string()
    }

    /// A kernel of GPU 0, names given as they are (not ids).
    fn kernel(ts: f64, dur: f64, corr: u64, name: &str) -> String {
        json!({"Type": 79, "CudaEvent": {"startNs": ns(ts), "endNs": ns(ts + dur),
            "correlationId": corr, "deviceId": 0, "streamId": if name.starts_with("nccl") { 20 } else { 7 },
            "globalPid": PID.to_string(), "kernel": {"shortName": name}}})
        .to_string()
    }

    /// A host call.
    fn call(ts: f64, corr: u64, name: &str) -> String {
        json!({"Type": 48, "TraceProcessEvent": {"startNs": ns(ts), "endNs": ns(ts + 2.0),
            "correlationId": corr.to_string(), "name": name, "globalTid": TID.to_string()}})
        .to_string()
    }

    fn launch(ts: f64, corr: u64) -> String {
        call(ts, corr, "cudaLaunchKernel_v7000")
    }

    /// An NVTX range with an extended payload, if given.
    fn range(text: &str, ts: f64, end: f64, payload: Option<Value>) -> String {
        let mut e = json!({"Timestamp": ns(ts), "EndTimestamp": ns(end), "Text": text,
            "GlobalTid": TID.to_string()});
        if let Some(p) = payload {
            e["JsonText"] = Value::String(p.to_string());
        }
        json!({"Type": 59, "NvtxEvent": e}).to_string()
    }

    /// NCCL's init range of a communicator of `n` ranks.
    fn init(n: u64, comm: &str) -> String {
        range("ncclCommInitRank", 0.0, 10.0, Some(json!({"Communicator": comm, "No. of ranks": n})))
    }

    /// Each call in short: compute by name, a collective as "name bytes dtype".
    fn short(f: &CallsFile) -> Vec<String> {
        f.calls
            .iter()
            .map(|c| match c {
                Call::Compute { name, .. } => name.clone().unwrap_or_default(),
                Call::Nccl { nccl, .. } => nccl
                    .iter()
                    .map(|op| match op {
                        NcclOp::Collective { collective, bytes, dtype, .. } => {
                            format!("{collective} {bytes} {dtype}")
                        }
                        NcclOp::Hook { .. } => "hook".into(),
                        NcclOp::Barrier { .. } => "barrier".into(),
                    })
                    .collect::<Vec<_>>()
                    .join("+"),
                Call::Wait { wait } => format!("wait {wait}"),
                Call::Drain { .. } => "drain".into(),
                Call::Until { idle_until_us } => format!("until {idle_until_us}"),
            })
            .collect()
    }

    fn read(lines: &[String]) -> Result<Imported, String> {
        import("t.json", &lines.join("\n"))
    }

    const FIXTURE: &str = include_str!("../../tests/data/nsys-synthetic.json");

    #[test]
    fn the_fixture_reads_as_the_kineto_trace_of_the_same_step() {
        // tests/data/nsys-synthetic.json is the step of tests/data/kineto-synthetic.json as
        // nsys would record it: the same kernels, the all-reduce sized by NCCL's range, the
        // all-gather by PyTorch's comm record, and another rank's GPU left out.
        assert!(looks_like_nsys(FIXTURE));
        let n = import("n.json", FIXTURE).unwrap();
        let kineto_text = include_str!("../../tests/data/kineto-synthetic.json");
        assert!(!looks_like_nsys(kineto_text));
        let k = kineto::import("k.json", kineto_text).unwrap();
        assert_eq!(n.file.ranks, Some(8));
        // The same calls but for names (Kineto's memcpy keeps the event's longer name).
        let unnamed = |f: &CallsFile| {
            let mut v = serde_json::to_value(&f.calls).unwrap();
            for c in v.as_array_mut().unwrap() {
                c.as_object_mut().unwrap().remove("name");
                for op in c.get_mut("nccl").and_then(Value::as_array_mut).into_iter().flatten() {
                    op.as_object_mut().unwrap().remove("name");
                }
            }
            v
        };
        assert_eq!(unnamed(&n.file), unnamed(&k));
        let calls = short(&n.file);
        let ar = calls.iter().position(|c| c == "all_reduce 67108864 float").unwrap();
        assert_eq!(
            calls[ar - 1..ar + 4],
            [
                "sm90_xmma_gemm_bwd_1",
                "all_reduce 67108864 float",
                "all_gather 16777216 bfloat16",
                "gap",
                "sm90_xmma_gemm_bwd_2"
            ]
        );
        assert_eq!(n.notes.len(), 1, "{:?}", n.notes);
        assert!(
            n.notes[0].contains("device 0 of process 4242 (the lowest) replayed, the 1 GPU events")
        );
        // One document (an array of the records, or an object holding them) reads the same.
        let lines: Vec<&str> = FIXTURE.lines().collect();
        let array = format!("[\n{}\n]", lines.join(",\n"));
        assert_eq!(import("a.json", &array).unwrap().file, n.file);
        let object = format!(
            "{{\"data\": {}, \"events\": [{}]}}",
            serde_json::from_str::<Value>(lines[0]).unwrap()["data"],
            lines[1..].join(",")
        );
        assert_eq!(import("o.json", &object).unwrap().file, n.file);
    }

    #[test]
    fn nccl_ranges_size_collectives_and_groups_launch_at_their_end() {
        let comm = "0xabc";
        let t = vec![
            // A string table of ids and values, and a mark (its end 0).
            json!({"StringIds": [{"id": "5", "value": "gemm"}]}).to_string(),
            json!({"NvtxEvent": {"Timestamp": ns(1.0), "EndTimestamp": "0", "Text": "step 3"}})
                .to_string(),
            init(8, comm),
            launch(20.0, 1),
            kernel(100.0, 50.0, 1, "5"),
            // An all-gather and a reduce-scatter: NCCL's payload gives one rank's part.
            range(
                "ncclAllGather",
                30.0,
                35.0,
                Some(json!({"Communicator": comm, "Message size [bytes]": 1024})),
            ),
            launch(32.0, 2),
            kernel(160.0, 20.0, 2, "ncclDevKernel_AllGather_RING_LL"),
            range("ncclReduceScatter", 40.0, 45.0, Some(json!({"Message size [bytes]": 512}))),
            launch(42.0, 3),
            kernel(180.0, 20.0, 3, "ncclKernel_ReduceScatter_RING_LL_Sum_half"),
            // Two all-reduces in one group, launched at its end as one kernel.
            range("ncclGroupStart", 50.0, 51.0, None),
            range("ncclAllReduce", 52.0, 53.0, Some(json!({"Message size [bytes]": 4096}))),
            range("ncclAllReduce", 54.0, 55.0, Some(json!({"Message size [bytes]": 8192}))),
            range("ncclGroupEnd", 56.0, 60.0, None),
            launch(57.0, 4),
            kernel(200.0, 30.0, 4, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
            // A send and a receive of the same size in a group: one exchange.
            range("ncclGroupStart", 61.0, 62.0, None),
            range("ncclSend", 63.0, 64.0, Some(json!({"Message size [bytes]": 256}))),
            range("ncclRecv", 65.0, 66.0, Some(json!({"Message size [bytes]": 256}))),
            range("ncclGroupEnd", 67.0, 70.0, None),
            launch(68.0, 5),
            kernel(230.0, 10.0, 5, "ncclDevKernel_SendRecv"),
            // The optimizer waited for the exchange.
            launch(71.0, 6),
            kernel(242.0, 10.0, 6, "adam"),
        ];
        let f = read(&t).unwrap();
        assert_eq!(
            short(&f.file),
            [
                "gemm",
                "all_gather 8192 uint8",
                "reduce_scatter 4096 half",
                "all_reduce 4096 bfloat16",
                "all_reduce 8192 bfloat16",
                "sendrecv 256 uint8",
                "wait 5",
                "launch",
                "adam",
                "drain"
            ]
        );
        assert_eq!(f.file.ranks, Some(8));
        assert!(
            f.notes
                .iter()
                .any(|n| n.contains("2 collectives whose NCCL kernels name no element type"))
        );
        // A communicator of another size than the world's: which ranks is not said. A range
        // naming no communicator where there are two sizes is refused too.
        let ag = |payload: Value| {
            let mut t = vec![init(8, "0xabc"), init(4, "0xdef")];
            t.push(range("ncclAllGather", 30.0, 35.0, Some(payload)));
            t.extend([launch(32.0, 1), kernel(160.0, 20.0, 1, "ncclDevKernel_AllGather_RING_LL")]);
            read(&t).unwrap_err()
        };
        let e = ag(json!({"Communicator": "0xdef", "Message size [bytes]": 1024}));
        assert!(
            e.starts_with(
                "t.json:3 (ncclAllGather): all_gather on a communicator of 4 ranks of the trace's 8"
            ),
            "{e}"
        );
        let e = ag(json!({"Message size [bytes]": 1024}));
        assert!(
            e.contains("t.json:3 (ncclAllGather): the trace's communicators have 4, 8 ranks"),
            "{e}"
        );
    }

    #[test]
    fn what_a_trace_lacks_is_one_line_naming_where() {
        let ar = |size: Value| {
            range("ncclAllReduce", 30.0, 35.0, Some(json!({"Message size [bytes]": size})))
        };
        let good = vec![
            init(2, "c"),
            ar(json!(4096)),
            launch(32.0, 1),
            kernel(100.0, 20.0, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
        ];
        assert_eq!(short(&read(&good).unwrap().file), ["all_reduce 4096 float", "drain"]);
        let with = |i: usize, line: String| {
            let mut t = good.clone();
            t[i] = line;
            read(&t).unwrap_err()
        };
        // No range around the kernel's launch.
        let e = with(1, range("forward", 30.0, 35.0, None));
        assert!(e.starts_with("t.json:4: ncclDevKernel_AllReduce_Sum_f32_RING_LL: an NCCL kernel whose collective's size is nowhere: no NVTX range"), "{e}");
        assert!(e.contains("--trace=cuda,nvtx"), "{e}");
        // No launch.
        let e = with(2, call(32.0, 9, "cudaLaunchKernel"));
        assert!(e.contains("its launch is not in the trace"), "{e}");
        // No communicator's size.
        let e = with(0, range("forward", 0.0, 1.0, None));
        assert!(
            e.contains("t.json:2 (ncclAllReduce): its communicator's ranks are nowhere"),
            "{e}"
        );
        // A size that is no size, a reduction whose kernel names no type.
        let e = with(1, ar(json!("lots")));
        assert!(e.contains("\"Message size [bytes]\" \"lots\" is not a size in bytes"), "{e}");
        let e = with(3, kernel(100.0, 20.0, 1, "ncclDevKernel_Generic"));
        assert!(
            e.contains("no kernel of it names its element type (ncclDevKernel_Generic)"),
            "{e}"
        );
        // A line cut short, a line that is not an object, a name not in the string table.
        let e = with(2, launch(32.0, 1)[..40].to_string());
        assert!(e.starts_with("t.json:3:40: EOF while parsing"), "{e}");
        assert!(e.contains("is the file cut short?"), "{e}");
        assert!(with(2, "[1]".into()).starts_with("t.json:3: not a JSON object"));
        let e = with(3, kernel(100.0, 20.0, 1, "12"));
        assert!(
            e.starts_with("t.json:4: the kernel's name \"12\" is not in the string table"),
            "{e}"
        );
        // GPU work without its times, or with an end before its start.
        let e = with(3, kernel(100.0, 20.0, 1, "x").replace("startNs", "began"));
        assert!(e.starts_with("t.json:4: a CUDA kernel without startNs and endNs"), "{e}");
        let e = with(3, kernel(100.0, -20.0, 1, "x"));
        assert!(e.starts_with("t.json:4: a CUDA kernel that ends before it starts"), "{e}");
        // No kernels at all.
        let e = read(&good[..2]).unwrap_err();
        assert!(e.starts_with("t.json: no CUDA kernels"), "{e}");
        // Several GPUs, not all of whose events say whose.
        let other = kernel(100.0, 20.0, 1, "gemm").replace("\"deviceId\":0", "\"deviceId\":1");
        let anon = other.replace(&format!(",\"globalPid\":\"{PID}\""), "");
        let mut t = good.clone();
        t.push(anon);
        assert!(read(&t).unwrap_err().contains("not every event says whose"));
    }

    #[test]
    fn pytorch_comm_records_in_a_range_text_size_collectives() {
        let t = [
            range(
                "nccl:all_reduce, In msg nelems = 1024, Out msg nelems = 1024, dtype = Float, Group size = 4",
                30.0,
                40.0,
                None,
            ),
            range("ncclAllReduce", 31.0, 39.0, Some(json!({"Message size [bytes]": 999}))),
            launch(35.0, 1),
            kernel(100.0, 20.0, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            range(
                r#"record_param_comms {"Collective name": "_allgather_base", "Out msg nelems": 64, "In msg nelems": 16, "dtype": "BFloat16", "Group size": 4}"#,
                50.0,
                60.0,
                None,
            ),
            launch(55.0, 2),
            kernel(130.0, 20.0, 2, "ncclDevKernel_AllGather_RING_LL"),
        ];
        let f = read(&t).unwrap();
        // PyTorch's record wins over NCCL's range inside it; the world is its group.
        assert_eq!(short(&f.file), ["all_reduce 4096 float", "all_gather 128 bfloat16", "drain"]);
        assert_eq!(f.file.ranks, Some(4));
        assert!(f.notes.is_empty(), "{:?}", f.notes);
        // PyTorch's checks hold: a type it does not know is refused, naming the range.
        let bad = t[0].replace("Float", "Complex");
        let e = read(&[&[bad], &t[1..]].concat()).unwrap_err();
        assert!(e.starts_with("t.json:1 (nccl:all_reduce): dtype \"Complex\""), "{e}");
    }

    #[test]
    fn other_formats_are_refused_and_told_apart() {
        let e = refused("r.sqlite", b"SQLite format 3\0\x10\x00").unwrap();
        assert!(
            e.starts_with("r.sqlite: an SQLite database") && e.contains("nsys export --type json")
        );
        assert!(
            refused("r.nsys-rep", b"\x00\x01binary").unwrap().contains("an Nsight Systems report")
        );
        assert!(refused("r.qdrep", b"PK\x03\x04").is_some());
        assert!(refused("r.h5", b"\x89HDF\r\n\x1a\n").unwrap().contains("HDF5"));
        assert_eq!(refused("r.nsys-rep", b"  {\"data\": []}"), None);
        assert_eq!(refused("t.json", b"{}"), None);
        // A list of calls naming something "CudaEvent" is still a list of calls.
        let calls =
            r#"{"collsim_calls": 1, "calls": [{"compute_us": 1, "name": "{\"CudaEvent\": 1}"}]}"#;
        assert!(!looks_like_nsys(calls));
        assert!(looks_like_nsys(r#"{"Type": 79, "CudaEvent" : {}}"#));
        assert_eq!(api_name("cudaMemcpyAsync_ptsz_v7000"), "cudaMemcpyAsync");
        assert_eq!(api_name("cudaLaunchKernel"), "cudaLaunchKernel");
        assert_eq!(
            kernel_dtype("ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16"),
            Some("bfloat16")
        );
        assert_eq!(kernel_dtype("ncclKernel_AllGather_RING_LL_Sum_int8_t"), Some("int8"));
        assert_eq!(kernel_dtype("ncclDevKernel_SendRecv"), None);
    }
}
