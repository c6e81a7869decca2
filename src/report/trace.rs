//! `simulate --trace` for a DDP step: Chrome/Perfetto trace-event JSON (opens in
//! ui.perfetto.dev and chrome://tracing).
//!
//! One process (rank 0; every rank runs the same step in this model, so the others would repeat
//! it), two threads: the compute stream (tid 0) and the NCCL stream (tid 1). On the compute
//! stream, complete events (`ph:"X"`, µs) nest: the iteration, each micro-step, the
//! synchronising micro-step's forward and backward, and in them one event per layer (`fwd L`,
//! `bwd L`), then `copy-out` and `waiting for NCCL` (the compute stream idle until the NCCL
//! stream drains: exposed communication). On the NCCL stream, one event per collective and per
//! hook computation, with `args` (bytes, the bucket's gradient and wire bytes, algorithm,
//! protocol, channels, dtype). A flow arrow (`ph:"s"` → `ph:"f"`, one id per bucket) goes from
//! the backward layer whose gradients complete a bucket to the bucket's first collective; a
//! counter (`ph:"C"`) gives the NCCL stream's data rate, and in a second process one counter
//! per link for the four links busiest over the step: each collective's steady-state share of
//! the link (every connection sending at once, the rates the aggregated models pace
//! themselves by) while it runs, 0 between. A steady state, not a time series: it does not
//! show the latency-bound start and end of each call. Jobs in one network (`[[job]]`) have no
//! link counters: their calls' shares change as the other jobs' come and go.
//!
//! It is not a Kineto trace: names follow collsim's spans, not CUDA kernels.

use std::io::{self, Write};

use serde_json::{Value, json};

use crate::workload::ddp::{Span, StepResult};

/// Thread ids.
const COMPUTE: u32 = 0;
const NCCL: u32 = 1;
/// The second NCCL stream's thread (HYBRID_SHARD's all-reduce across the replicas).
const NCCL2: u32 = 2;

/// A complete event on `tid`, times in ms.
fn complete(name: &str, cat: &str, tid: u32, start_ms: f64, end_ms: f64, args: Value) -> Value {
    json!({
        "ph": "X", "name": name, "cat": cat, "pid": 0, "tid": tid,
        "ts": start_ms * 1e3, "dur": (end_ms - start_ms).max(0.0) * 1e3, "args": args,
    })
}

/// A compute-stream span's category.
fn category(s: &Span) -> &'static str {
    match s.lane {
        "wait" if s.name.starts_with("input stall") => "input_stall",
        "wait" => "exposed_comm",
        "hook" => "hook",
        "nccl" => "collective",
        _ if s.name.starts_with("fwd") => "forward",
        _ if s.name.starts_with("bwd") => "backward",
        _ if s.name.starts_with("optimizer") => "optimizer",
        _ => "copy",
    }
}

/// The (start, end) in ms covering the spans `f` selects, if any.
fn cover(spans: &[&Span], f: impl Fn(&Span) -> bool) -> Option<(f64, f64)> {
    spans.iter().filter(|s| f(s)).fold(None, |acc, s| match acc {
        None => Some((s.start_ms, s.end_ms)),
        Some((a, b)) => Some((f64::min(a, s.start_ms), f64::max(b, s.end_ms))),
    })
}

/// The parent spans of the compute stream: (name, category, start ms, end ms, args), outermost
/// first so that viewers nest events of equal extent the same way.
fn parents(r: &StepResult) -> Vec<(String, &'static str, f64, f64, Value)> {
    let compute: Vec<&Span> = r.timeline.iter().filter(|s| s.lane == "compute").collect();
    let end = r.iteration_time_ms;
    let mut args = json!({
        "iteration_ms": r.iteration_time_ms, "compute_ms": r.compute_ms,
        "comm_ms": r.comm_ms, "exposed_comm_ms": r.exposed_comm_ms,
        "overlap": r.overlap_fraction, "ranks": r.world, "gemm_tflops": r.gemm_tflops,
    });
    // Where the step goes, one arg per part (breakdown.flop_ms, ...).
    if let Some(o) = args.as_object_mut() {
        for (_, key, ms) in r.breakdown.parts() {
            o.insert(format!("breakdown.{key}"), ms.into());
        }
    }
    let mut out = vec![("iteration".to_string(), "iteration", 0.0, end, args)];
    // no_sync micro-steps come as (fwd, bwd) pairs, in order.
    let fwd: Vec<&&Span> = compute.iter().filter(|s| s.name == "fwd (no_sync)").collect();
    let bwd: Vec<&&Span> = compute.iter().filter(|s| s.name == "bwd (no_sync)").collect();
    let k = fwd.len() + 1;
    let mut sync_start = 0.0;
    for (i, (f, b)) in fwd.iter().zip(&bwd).enumerate() {
        let name = format!("micro-step {}/{k} (no_sync)", i + 1);
        out.push((name, "micro_step", f.start_ms, b.end_ms, json!({"sync": false})));
        sync_start = b.end_ms;
    }
    if k > 1 {
        let name = format!("micro-step {k}/{k} (sync)");
        out.push((name, "micro_step", sync_start, end, json!({"sync": true})));
    }
    let sync = |s: &Span| s.start_ms >= sync_start && !s.name.contains("(no_sync)");
    if let Some((a, b)) = cover(&compute, |s| sync(s) && s.name.starts_with("fwd ")) {
        out.push(("forward".into(), "forward", a, b, json!({})));
    }
    if let Some((a, b)) = cover(&compute, |s| sync(s) && s.name.starts_with("bwd ")) {
        out.push(("backward".into(), "backward", a, b, json!({})));
    }
    out
}

/// Writes the step's timeline as a Chrome/Perfetto trace (see the module's docs).
pub fn ddp_step(r: &StepResult, out: &mut dyn Write) -> io::Result<()> {
    let meta = |name: &str, tid: Option<u32>, args: Value| match tid {
        Some(t) => json!({"ph": "M", "name": name, "pid": 0, "tid": t, "args": args}),
        None => json!({"ph": "M", "name": name, "pid": 0, "args": args}),
    };
    let mut events = vec![
        meta("process_name", None, json!({"name": format!("rank 0 of {}", r.world)})),
        meta("thread_name", Some(COMPUTE), json!({"name": "compute stream"})),
        meta("thread_sort_index", Some(COMPUTE), json!({"sort_index": 0})),
        meta("thread_name", Some(NCCL), json!({"name": "NCCL stream"})),
        meta("thread_sort_index", Some(NCCL), json!({"sort_index": 1})),
    ];
    if r.timeline.iter().any(|s| s.stream == 1) {
        events.push(meta("thread_name", Some(NCCL2), json!({"name": "NCCL stream 2"})));
        events.push(meta("thread_sort_index", Some(NCCL2), json!({"sort_index": 2})));
    }
    for (name, cat, a, b, args) in parents(r) {
        events.push(complete(&name, cat, COMPUTE, a, b, args));
    }
    for s in &r.timeline {
        let (tid, args) = match s.lane {
            "nccl" | "hook" => {
                let mut a = serde_json::Map::new();
                if let Some(i) = s.bucket {
                    a.insert("bucket".into(), i.into());
                    if let Some(b) = r.buckets.iter().find(|b| b.index == i) {
                        a.insert("bucket_grad_bytes".into(), b.bytes.into());
                        a.insert("bucket_wire_bytes".into(), b.wire_bytes.into());
                        a.insert("ready_ms".into(), b.ready_ms.into());
                    }
                }
                if s.lane == "nccl" {
                    a.insert("bytes".into(), s.bytes.into());
                    a.insert("dtype".into(), s.dtype.into());
                    a.insert("algo".into(), s.algo.into());
                    a.insert("proto".into(), s.proto.into());
                    a.insert("channels".into(), s.channels.into());
                    let secs = (s.end_ms - s.start_ms) * 1e-3;
                    if secs > 0.0 {
                        a.insert("algbw_gbyte_per_s".into(), (s.bytes as f64 / secs / 1e9).into());
                    }
                }
                (to_tid(s), Value::Object(a))
            }
            "wait" if category(s) == "input_stall" => {
                (COMPUTE, json!({"input_stall_ms": s.end_ms - s.start_ms}))
            }
            "wait" => (COMPUTE, json!({"exposed_ms": s.end_ms - s.start_ms})),
            _ => (COMPUTE, json!({})),
        };
        events.push(complete(&s.name, category(s), tid, s.start_ms, s.end_ms, args));
    }
    // Flow arrows: the backward layer after which a bucket's last gradient came in (the last
    // one to end by then) to the bucket's first collective or hook step.
    let layers: Vec<&Span> =
        r.timeline.iter().filter(|s| s.lane == "compute" && s.name.starts_with("bwd ")).collect();
    for b in &r.buckets {
        let from = layers
            .iter()
            .filter(|s| s.end_ms <= b.ready_ms && !s.name.contains("(no_sync)"))
            .max_by(|x, y| x.end_ms.total_cmp(&y.end_ms));
        let to = r
            .timeline
            .iter()
            .filter(|s| s.bucket == Some(b.index) && s.lane != "wait")
            .min_by(|x, y| x.start_ms.total_cmp(&y.start_ms));
        let (Some(from), Some(to)) = (from, to) else { continue };
        // Each end sits inside the event it binds to (viewers bind by enclosing slice).
        let mid = |s: &Span| (s.start_ms + s.end_ms) / 2.0 * 1e3;
        let (id, name) = (b.index + 1, format!("bucket {} ready", b.index));
        events.push(json!({
            "ph": "s", "id": id, "name": name, "cat": "grad_ready", "pid": 0, "tid": COMPUTE,
            "ts": mid(from),
        }));
        events.push(json!({
            "ph": "f", "bp": "e", "id": id, "name": name, "cat": "grad_ready", "pid": 0,
            "tid": to_tid(to), "ts": mid(to),
        }));
    }
    for s in r.timeline.iter().filter(|s| s.lane == "nccl" && s.end_ms > s.start_ms) {
        let gbps = s.bytes as f64 / ((s.end_ms - s.start_ms) * 1e-3) / 1e9;
        for (ts, v) in [(s.start_ms, gbps), (s.end_ms, 0.0)] {
            events.push(json!({
                "ph": "C", "name": "NCCL data rate (GB/s)", "pid": 0, "ts": ts * 1e3,
                "args": {"GB/s": v},
            }));
        }
    }
    events.extend(link_counters(r));
    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "collsim",
            "version": env!("CARGO_PKG_VERSION"),
            "format_version": super::FORMAT_VERSION,
            "ranks": r.world,
            "shown": "rank 0 (every rank runs the same step in this model)",
            "breakdown_ms": r.breakdown,
        },
    });
    serde_json::to_writer(&mut *out, &doc).map_err(io::Error::other)?;
    writeln!(out)
}

/// Link counters shown: the links busiest over the step.
const LINK_TRACKS: usize = 4;

/// One counter track per link among the [`LINK_TRACKS`] busiest over the step (utilisation ×
/// time, summed over its collectives; then by name): its steady-state utilisation, %, while
/// each collective moves its bytes, 0 between. In a process of its own (pid 1), since the
/// links are the whole machine's, not rank 0's.
fn link_counters(r: &StepResult) -> Vec<Value> {
    let colls: Vec<&Span> = r
        .timeline
        .iter()
        .filter(|s| s.lane == "nccl" && s.end_ms > s.start_ms && !s.links.is_empty())
        .collect();
    let mut busy = std::collections::BTreeMap::<&str, f64>::new();
    for s in &colls {
        for (l, u) in &s.links {
            *busy.entry(l.as_str()).or_default() += u * (s.end_ms - s.start_ms);
        }
    }
    let mut top: Vec<(&str, f64)> = busy.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    top.truncate(LINK_TRACKS);
    if top.is_empty() {
        return Vec::new();
    }
    let mut out = vec![
        json!({"ph": "M", "name": "process_name", "pid": 1,
               "args": {"name": "busiest links (steady-state utilisation while a collective moves its bytes)"}}),
        json!({"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": 1}}),
    ];
    for (link, _) in &top {
        let name = format!("{link} (% busy)");
        for s in &colls {
            let u = s.links.iter().find(|(l, _)| l == link).map_or(0.0, |(_, u)| *u);
            for (ts, v) in [(s.start_ms, u * 100.0), (s.end_ms, 0.0)] {
                out.push(json!({
                    "ph": "C", "name": name, "pid": 1, "ts": ts * 1e3, "args": {"%": v},
                }));
            }
        }
    }
    out
}

/// The thread a span is drawn on.
fn to_tid(s: &Span) -> u32 {
    match (s.lane, s.stream) {
        ("nccl" | "hook", 1) => NCCL2,
        ("nccl" | "hook", _) => NCCL,
        _ => COMPUTE,
    }
}
