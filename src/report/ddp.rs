//! A simulated DDP step: a summary and the bucket table, and JSON (the trace is in
//! [`super::trace`], the plot in [`super::gantt`]).

use std::io::{self, Write};

use crate::config::Scenario;
use crate::units::Bytes;
use crate::workload::ddp::{DdpSpec, StepResult};
use crate::workload::memory::{GIB, ddp_memory};

/// The report of a replayed list of calls: its compute as given, its collectives on this
/// cluster.
fn replay_table(
    s: &Scenario,
    spec: &DdpSpec,
    calls: usize,
    r: &StepResult,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(
        out,
        "replayed step: {} calls ({}) on {} x {} ({} GPUs per node, {} ranks)",
        calls, spec.model.name, s.nodes, s.node.name, s.gpus_per_node, r.world
    )?;
    writeln!(out)?;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<28} {v}");
    row(out, "iteration", format!("{:.3} ms", r.iteration_time_ms))?;
    row(out, "compute (as given)", format!("{:.3} ms", r.breakdown.measured_ms))?;
    if r.breakdown.launch_ms > 0.0 {
        row(out, "host gaps, not hidden", format!("{:.3} ms", r.breakdown.launch_ms))?;
    }
    row(out, "communication", format!("{:.3} ms", r.comm_ms))?;
    if !r.comm_groups.is_empty() {
        row(out, "process groups", groups_line(&r.comm_groups))?;
    }
    row(out, "exposed communication", format!("{:.3} ms", r.exposed_comm_ms))?;
    row(out, "overlap", format!("{:.1} %", 100.0 * r.overlap_fraction))?;
    let n = r.timeline.iter().filter(|x| x.lane == "nccl").count();
    let bytes: u64 = r.timeline.iter().filter(|x| x.lane == "nccl").map(|x| x.bytes).sum();
    // Exact where a binary unit of a MiB or more divides it, else rounded with the exact count.
    let exact = Bytes::new(bytes).to_string();
    let small = exact.ends_with(" B") || exact.ends_with(" KiB");
    let shown = if small && bytes >= 1 << 20 {
        format!("{} ({exact})", approx_bytes(bytes))
    } else {
        exact
    };
    row(out, "collectives", format!("{n}, {shown} in all"))?;
    // A model profile knows its shape and, measured, its memory.
    if let Some(named) = &spec.profile {
        if named.profile.micro_batch.is_some() {
            row(out, "samples/s", format!("{:.1}", r.samples_per_s))?;
            if let Some(seq) = spec.sequence {
                row(out, "tokens/s", format!("{:.0}", r.samples_per_s * seq as f64))?;
            }
        }
        let gpu = s.node.gpu.model.memory.get() as f64;
        let line = match crate::workload::memory::known_memory(spec, r.world, s.gpus_per_node) {
            Some(mem) => format!(
                "{:.1} of {:.1} GiB ({:.1} usable with {} % headroom), as the allocator measured it ({})",
                mem.total / GIB,
                gpu / GIB,
                gpu * (1.0 - spec.memory_headroom) / GIB,
                crate::workload::memory::headroom_pct(spec.memory_headroom),
                mem.parts()
            ),
            None if named.profile.memory.is_some() && named.tp > 1 => "not known under tensor parallelism (the profile's memory was measured on one GPU holding the whole model)".to_string(),
            None if named.profile.memory.is_some() => "not known at this shape (the profile's memory was measured without the step's start and forward's end, so it holds at the traced shape only)".to_string(),
            None => "not measured (make the profile with `collsim profile TRACE --memory steps.csv`)".to_string(),
        };
        row(out, "memory per GPU", line)?;
    }
    Ok(())
}

/// `bytes` in the largest binary unit it reaches, to two decimals ("5.80 GiB", "512 B").
fn approx_bytes(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1u64 << shift {
            return format!("{:.2} {unit}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes} B")
}

/// What kind of training step `spec` is, as reports title it: "DDP", "DataParallel", "FSDP", "DeepSpeed ZeRO",
/// "3-D parallel (Megatron)", or "Replayed" for a step replayed from a trace.
pub fn step_kind(spec: &DdpSpec) -> &'static str {
    if spec.calls.is_some() {
        return "Replayed";
    }
    if spec.data_parallel.is_some() {
        return "DataParallel";
    }
    match (&spec.sharding, &spec.parallel) {
        (Some(sh), _) if sh.zero.is_some() => "DeepSpeed ZeRO",
        (Some(_), _) => "FSDP",
        (None, Some(_)) => "3-D parallel (Megatron)",
        (None, None) => "DDP",
    }
}

/// Writes the human-readable report.
pub fn table(s: &Scenario, spec: &DdpSpec, r: &StepResult, out: &mut dyn Write) -> io::Result<()> {
    if let Some(calls) = &spec.calls {
        return replay_table(s, spec, calls.len(), r, out);
    }
    if let Some(dp) = &spec.data_parallel {
        return super::dp::table(s, spec, dp, r, out);
    }
    let m = &spec.model;
    writeln!(
        out,
        "{} step: {} ({:.1} M params, {} grads) on {} x {} ({} GPUs per node, {} ranks)",
        step_kind(spec),
        m.name,
        m.params() as f64 / 1e6,
        m.grad_dtype.name(),
        s.nodes,
        s.node.name,
        s.gpus_per_node,
        r.world
    )?;
    if let Some((sh, z)) = spec.sharding.and_then(|sh| sh.zero.map(|z| (sh, z))) {
        writeln!(
            out,
            "micro-batch {} x {} micro-steps; stage {}{}; reduce_bucket_size {}; allgather_bucket_size {}; overlap_comm {}; {} parameters{}",
            spec.micro_batch,
            spec.grad_accumulation,
            z.stage,
            if z.stage == 3 { " (as FSDP FULL_SHARD, each layer a unit)" } else { "" },
            z.reduce_bucket,
            z.allgather_bucket,
            z.overlap_comm,
            sh.param_dtype.name(),
            checkpointed_text(spec)
        )?;
    } else if let Some(sh) = &spec.sharding {
        let k = spec.grad_accumulation;
        let accumulation = match (k > 1, sh.no_sync) {
            (false, _) => String::new(),
            (true, false) => format!(" x {k} micro-steps, each reducing"),
            (true, true) => format!(" x {k} micro-steps, the first {} inside no_sync()", k - 1),
        };
        // The two switches named only where they differ from FSDP's defaults.
        let switches = format!(
            "{}{}",
            if sh.forward_prefetch { "; forward_prefetch" } else { "" },
            if sh.limit_all_gathers { "" } else { "; limit_all_gathers off" }
        );
        writeln!(
            out,
            "micro-batch {}{accumulation}; sharding {}; backward_prefetch {}{switches}; param_dtype {}; reduce_dtype {}; each layer a unit{}",
            spec.micro_batch,
            sh.strategy.name(),
            sh.backward_prefetch.name(),
            sh.param_dtype.name(),
            sh.reduce_dtype.name(),
            checkpointed_text(spec)
        )?;
    } else if let (Some(l), Some(p)) = (&spec.parallel, &r.parallel) {
        writeln!(
            out,
            "tp {} x pp {}{} x dp {}{}{}; {} micro-batches of {} per replica; {}{}{}; gradients {}{}",
            l.tp,
            l.pp,
            if l.cp > 1 { format!(" x cp {}", l.cp) } else { String::new() },
            p.dp,
            if l.ep > 1 { format!(" (ep {} of it)", l.ep) } else { String::new() },
            if l.virtual_stages > 1 {
                format!(" ({} chunks per stage, interleaved)", l.virtual_stages)
            } else {
                String::new()
            },
            p.micro_batches,
            spec.micro_batch,
            if l.virtual_stages > 1 { "interleaved 1F1B" } else { "1F1B" },
            match (l.sp(), l.tp_overlap()) {
                (true, true) => "; sequence parallel, its collectives overlapped with the GEMMs",
                (true, false) => "; sequence parallel",
                _ => "",
            },
            if l.recompute { "; full recompute" } else { "" },
            if l.overlap_grad_reduce {
                let cap = crate::workload::parallel::bucket_cap(spec, l, r.world) as f64
                    / (1u64 << 20) as f64;
                let how = if l.distributed_optimizer { "reduce-scattered" } else { "reduced" };
                let last = match (l.align_grad_reduce, l.pp > 1) {
                    (true, true) => {
                        "during the first stage's last backward, after the others' last send"
                    }
                    _ => "during the last backward",
                };
                match (l.virtual_stages > 1, l.align_grad_reduce) {
                    (true, true) => format!(
                        "{how} in buckets (the first stage's first chunk in buckets of {cap:.0} MiB, the others' in one a chunk): each chunk's as many backwards after its last one as the stage's rank, the last chunk's {last}"
                    ),
                    (true, false) => format!(
                        "{how} in buckets (the first stage's first chunk in buckets of {cap:.0} MiB, the others' in one a chunk): each chunk's as its last backward ends, the last chunk's {last}"
                    ),
                    _ if l.pp > 1 => format!(
                        "{how} in buckets (the first stage's of {cap:.0} MiB, the others' in one) {last}"
                    ),
                    _ => format!("{how} in buckets (cap {cap:.0} MiB) {last}"),
                }
            } else {
                "all-reduced after the last backward".to_string()
            },
            match (l.distributed_optimizer, l.overlap_param_gather) {
                (true, true) => {
                    "; distributed optimizer (master weights and optimizer state sharded over the data-parallel ranks; the updated parameters all-gathered bucket by bucket as the next forward needs them)"
                }
                (true, false) => {
                    "; distributed optimizer (master weights and optimizer state sharded over the data-parallel ranks; the updated parameters all-gathered after the step)"
                }
                _ => "",
            }
        )?;
    } else {
        writeln!(
            out,
            "micro-batch {} x {} micro-step(s); hook {}; bucket_cap {}; gradient_as_bucket_view {}{}",
            spec.micro_batch,
            spec.grad_accumulation,
            spec.hook.describe(),
            spec.bucket_cap
                .map_or("default (25 MiB, 1 MiB first)".to_string(), |b| Bytes::new(b).to_string()),
            spec.gradient_as_bucket_view,
            checkpointed_text(spec)
        )?;
    }
    writeln!(out)?;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<28} {v}");
    row(out, "iteration", format!("{:.3} ms", r.iteration_time_ms))?;
    row(
        out,
        "first iteration",
        if spec.sharding.is_some() || spec.parallel.is_some() {
            format!("{:.3} ms (as the steady one: nothing to rebuild)", r.first_iteration_ms)
        } else {
            format!("{:.3} ms (one bucket, no overlap)", r.first_iteration_ms)
        },
    )?;
    let rate = match &spec.rate {
        crate::workload::ddp::ComputeRate::Peak { precision, efficiency } => {
            match &spec.compute_default {
                None => format!(" ({:.1} % of the {precision} peak)", 100.0 * efficiency),
                Some(d) => format!(
                    " ({:.1} % of the {precision} peak, {} µs of host a kernel, {} µs a GEMM: {}; docs/compute-model.md)",
                    100.0 * efficiency,
                    micros(spec.launch.unwrap_or(crate::workload::KERNEL_LAUNCH_SECS)),
                    micros(spec.gemm_fixed.unwrap_or(0.0)),
                    d.describe()
                ),
            }
        }
        crate::workload::ddp::ComputeRate::Mfu { precision, mfu } => {
            let peak = s.node.gpu.model.peak_tflops.get(precision).copied().unwrap_or(f64::NAN);
            format!(
                " ({:.1} % of the {precision} peak; model FLOPs utilisation {mfu} over forward and backward)",
                100.0 * r.gemm_tflops / peak
            )
        }
        crate::workload::ddp::ComputeRate::Tflops(_) => String::new(),
    };
    let fp8 = match &spec.rate {
        crate::workload::ddp::ComputeRate::Peak { precision, .. } if precision == "fp8" => {
            "; the rate of a transformer block's linear layers, its attention, head and embedding at the same fraction of the bf16 peak (Transformer Engine's fp8 recipe)"
        }
        _ => "",
    };
    row(out, "GEMM rate", format!("{:.1} TFLOP/s{rate}{fp8}", r.gemm_tflops))?;
    row(out, "forward", format!("{:.3} ms", r.forward_ms))?;
    row(out, "backward", format!("{:.3} ms", r.backward_ms))?;
    row(
        out,
        "optimizer step",
        format!(
            "{:.3} ms ({}, {})",
            r.optimizer_ms,
            spec.optimizer.name(),
            spec.optimizer_impl.name()
        ),
    )?;
    row(out, "compute (with copies, hooks)", format!("{:.3} ms", r.compute_ms))?;
    row(out, "communication", format!("{:.3} ms", r.comm_ms))?;
    if !r.comm_groups.is_empty() {
        row(out, "process groups", groups_line(&r.comm_groups))?;
    }
    row(out, "exposed communication", format!("{:.3} ms", r.exposed_comm_ms))?;
    row(out, "overlap", format!("{:.1} %", 100.0 * r.overlap_fraction))?;
    row(out, "compute slowdown under NCCL", format!("{:.1} %", 100.0 * r.compute_slowdown))?;
    row(out, "samples/s", format!("{:.1}", r.samples_per_s))?;
    row(
        out,
        "scaling efficiency",
        format!("{:.3} (one GPU without DDP: {:.3} ms)", r.scaling_efficiency, r.single_gpu_ms),
    )?;
    if let Some(k) = &r.skew {
        row(
            out,
            "rank skew / straggler wait",
            format!(
                "{:.3} ms (the slowest of {} ranks' GPU time x{:.4} and launches x{:.4} under {}; every rank at nominal speed: {:.3} ms)",
                k.wait_ms,
                r.world,
                k.slowest_factor,
                k.slowest_host_factor,
                spec.skew.describe(),
                k.typical_rank_ms
            ),
        )?;
    }
    row(out, "memory per GPU", memory_text(s, spec, r.world))?;
    writeln!(out)?;
    writeln!(out, "  {:<28} {:>10} {:>7}", "where the step goes", "ms", "share")?;
    let b = &r.breakdown;
    for (label, _, ms) in b.parts() {
        let optional = [
            "measured layer times",
            "tensor/expert-parallel comm",
            "fp8 amax all-reduces",
            "pipeline bubble and p2p",
        ];
        // DataParallel's parts are its own report's (src/report/dp.rs).
        if (optional.contains(&label) || label.starts_with("DP ")) && ms == 0.0 {
            continue;
        }
        let share = if r.iteration_time_ms > 0.0 { 100.0 * ms / r.iteration_time_ms } else { 0.0 };
        writeln!(out, "    {label:<26} {ms:>10.3} {share:>6.1} %")?;
    }
    writeln!(out)?;
    if let Some(p) = &r.parallel {
        writeln!(
            out,
            "  {:>5} {:>6} {:>10} {:>12} {:>12} {:>15} {:>10}",
            "stage", "layers", "params M", "fwd ms/mb", "bwd ms/mb", "last bwd at ms", "end ms"
        )?;
        for st in &p.stages {
            writeln!(
                out,
                "  {:>5} {:>6} {:>10.1} {:>12.3} {:>12.3} {:>15.3} {:>10.3}{}",
                st.stage,
                st.layers,
                st.params as f64 / 1e6,
                st.fwd_ms,
                st.bwd_ms,
                st.last_backward_ms,
                st.end_ms,
                if st.stage == p.critical_stage { "  <- slowest (the figures above)" } else { "" }
            )?;
        }
        writeln!(
            out,
            "  per stage: forward and backward of one micro-batch on all its chunks, tensor/expert-parallel collectives in{}; below, stage {}'s buckets on its data-parallel group",
            if p.layout.cp > 1 {
                " (and what context parallelism's key/value ring leaves exposed, counted as tensor/expert-parallel comm)"
            } else {
                ""
            },
            p.critical_stage
        )?;
        writeln!(out)?;
    }
    // Under skew, the slowest rank's ready times, and how long a typical rank's bucket waited.
    let skewed = r.skew.is_some();
    writeln!(
        out,
        "  {:>6} {:>10} {:>10} {:>7} {:>10} {:>10} {:>10}{}  algorithm",
        if spec.sharding.is_some() { "unit" } else { "bucket" },
        "grad MiB",
        "wire MiB",
        "tensors",
        "ready ms",
        "start ms",
        "end ms",
        if skewed { format!(" {:>10}", "waits ms") } else { String::new() }
    )?;
    let mib = |b: u64| b as f64 / 1048576.0;
    for b in &r.buckets {
        writeln!(
            out,
            "  {:>6} {:>10.2} {:>10.2} {:>7} {:>10.3} {:>10.3} {:>10.3}{}  {}",
            b.index,
            mib(b.bytes),
            mib(b.wire_bytes),
            b.tensors,
            b.ready_ms,
            b.start_ms,
            b.end_ms,
            b.skew_wait_ms.map_or(String::new(), |w| format!(" {w:>10.3}")),
            crate::workload::sweep::choice_text(b.algo, b.proto)
        )?;
    }
    Ok(())
}

/// What a replayed list of calls does not say: its samples (no batch is known), its GEMM rate
/// (no FLOPs), and which compute is forward and which backward. Null in JSON, empty in CSV.
pub const REPLAY_UNKNOWN: [&str; 4] = ["samples_per_s", "gemm_tflops", "forward_ms", "backward_ms"];

/// Writes the result as JSON (the timeline is left to `--trace`), with the memory per GPU
/// (`memory`, bytes), the resolved scenario (its topology included) and the profile.
pub fn json(
    s: &Scenario,
    profile: &crate::collective::TimingParams,
    spec: &DdpSpec,
    r: &StepResult,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut v = serde_json::to_value(r).map_err(io::Error::other)?;
    if spec.calls.is_some()
        && let Some(o) = v.as_object_mut()
    {
        // A model profile that knows its micro-batch knows its samples.
        let samples = spec.profile.as_ref().is_some_and(|p| p.profile.micro_batch.is_some());
        for k in REPLAY_UNKNOWN.into_iter().filter(|k| !(samples && *k == "samples_per_s")) {
            o.insert(k.into(), serde_json::Value::Null);
        }
    }
    // Null for a replayed list of calls, which says nothing of what the step holds.
    let mem = crate::workload::memory::known_memory(spec, r.world, s.gpus_per_node);
    let mem = serde_json::to_value(mem).map_err(io::Error::other)?;
    if let Some(o) = v.as_object_mut() {
        o.remove("timeline");
        o.insert("optimizer".into(), spec.optimizer.name().into());
        o.insert("memory".into(), mem);
        // The inputs as resolved (defaults filled in), as a sweep's JSON carries them.
        o.insert("scenario".into(), serde_json::to_value(s).map_err(io::Error::other)?);
        o.insert("profile".into(), serde_json::to_value(profile).map_err(io::Error::other)?);
    }
    super::write_json(&v, out)
}

/// One point of a sweep: the keys set, the step there and its memory per GPU (none for a
/// replayed list of calls, which does not say).
pub type SweepPoint =
    (Vec<(String, String)>, StepResult, Option<crate::workload::memory::DdpMemory>);

/// Writes a sweep, one row per point.
pub fn sweep_table(rows: &[SweepPoint], out: &mut dyn Write) -> io::Result<()> {
    let points: Vec<&[(String, String)]> = rows.iter().map(|r| r.0.as_slice()).collect();
    let (head, leads) = super::sweep::key_columns(&points);
    writeln!(
        out,
        "{head}{:>12} {:>10} {:>10} {:>8} {:>12} {:>8}",
        "iteration ms", "comm ms", "exposed ms", "overlap", "samples/s", "scaling"
    )?;
    for ((_, r, _), line) in rows.iter().zip(&leads) {
        writeln!(
            out,
            "{line}{:>12.3} {:>10.3} {:>10.3} {:>7.1}% {:>12.1} {:>8.3}",
            r.iteration_time_ms,
            r.comm_ms,
            r.exposed_comm_ms,
            100.0 * r.overlap_fraction,
            r.samples_per_s,
            r.scaling_efficiency
        )?;
    }
    if rows.len() < 2 {
        return Ok(());
    }
    // Where each point's time goes, and what it adds to the first point's.
    // The parts any point has.
    let shown: Vec<usize> = (0..rows[0].1.breakdown.parts().len())
        .filter(|&i| rows.iter().any(|r| r.1.breakdown.parts()[i].2.abs() >= 5e-4))
        .collect();
    let parts = rows[0].1.breakdown.parts();
    writeln!(
        out,
        "\nwhere the step goes, ms (per-GPU rate: samples a second a GPU over the first point's)"
    )?;
    write!(out, "{head}")?;
    for &i in &shown {
        write!(out, " {:>10}", short_part(parts[i].0))?;
    }
    writeln!(out, " {:>12}", "per-GPU rate")?;
    for ((_, r, _), line) in rows.iter().zip(&leads) {
        write!(out, "{line}")?;
        for &i in &shown {
            write!(out, " {:>10.3}", r.breakdown.parts()[i].2)?;
        }
        writeln!(out, " {:>12.3}", per_gpu_rate(r, &rows[0].1))?;
    }
    let first = super::sweep::point_label(&rows[0].0);
    writeln!(out, "\nwhat each point adds to the first ({first}), largest first")?;
    for (p, r, _) in &rows[1..] {
        let extra = from_first(r, &rows[0].1);
        let mut moved: Vec<(&str, &str, f64)> =
            extra.parts.iter().filter(|(_, _, d)| d.abs() >= 5e-4).copied().collect();
        moved.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
        let said: Vec<String> = moved
            .iter()
            .map(|(l, key, d)| format!("{l} {d:+.3}{}", part_tiers(key, &r.comm_groups)))
            .collect();
        writeln!(
            out,
            "  {}: {:+.3} ms ({:+.1} %){}{}",
            super::sweep::point_label(p),
            extra.iteration_ms,
            100.0 * extra.iteration_ms / rows[0].1.iteration_time_ms,
            if said.is_empty() { "" } else { ": " },
            said.join(", ")
        )?;
    }
    Ok(())
}

/// "data-parallel 8 ranks on 4 nodes (net, spine); tensor-parallel 4 ranks on 1 node (nvlink)".
fn groups_line(groups: &[crate::workload::ddp::CommGroup]) -> String {
    group_phrases(groups).join("; ")
}

/// Each group as "data-parallel 8 ranks on 4 nodes (net, spine)".
pub(crate) fn group_phrases(groups: &[crate::workload::ddp::CommGroup]) -> Vec<String> {
    let nodes = |n: usize| if n == 1 { "1 node".to_string() } else { format!("{n} nodes") };
    groups
        .iter()
        .map(|g| format!("{} {} ranks on {} ({})", g.group, g.ranks, nodes(g.nodes), g.tier))
        .collect()
}

/// Whether a breakdown part (by its JSON key) holds the communication of process group
/// `group` (by its label): the gradients' groups and a replayed step's in the exposed part,
/// the layers' tensor/expert/context-parallel calls in theirs, the pipeline's sends and the
/// tied embedding's all-reduce in the pipeline's.
fn part_holds(key: &str, group: &str) -> bool {
    match key {
        "exposed_comm_ms" => {
            ["all ranks", "data-parallel", "expert data-parallel", "shard", "replicate"]
                .contains(&group)
                || group.ends_with(" apart")
        }
        "tp_comm_ms" => ["tensor-parallel", "expert-parallel", "context-parallel"].contains(&group),
        "amax_comm_ms" => group == "fp8 amax",
        "pipeline_ms" => ["pipeline", "embedding"].contains(&group),
        _ => false,
    }
}

/// " [data-parallel: net, spine]": the tiers the groups behind a communication part cross at
/// a sweep point (nothing for other parts, or where the step has none of those groups).
fn part_tiers(key: &str, groups: &[crate::workload::ddp::CommGroup]) -> String {
    let on: Vec<String> = groups
        .iter()
        .filter(|g| part_holds(key, &g.group))
        .map(|g| format!("{}: {}", g.group, g.tier))
        .collect();
    if on.is_empty() { String::new() } else { format!(" [{}]", on.join("; ")) }
}

/// A breakdown part's label in ten characters, for the sweep's table.
fn short_part(label: &str) -> &str {
    match label {
        "compute, FLOP-bound" => "FLOP",
        "compute, memory-bound" => "memory",
        "kernel launch waits" => "launch",
        "measured layer times" => "measured",
        "tensor/expert-parallel comm" => "TP/EP comm",
        "fp8 amax all-reduces" => "fp8 amax",
        "pipeline bubble and p2p" => "pipeline",
        "DDP copies and hooks" => "copies",
        "DP replication" => "DP replicate",
        "DP scatter and gather" => "DP scatter",
        "DP single launcher (GIL)" => "DP launcher",
        "DP reduce to GPU 0" => "DP reduce",
        "optimizer step" => "optimizer",
        "exposed communication" => "exposed",
        "rank skew wait" => "skew wait",
        "input stall" => "input",
        other => other,
    }
}

/// Samples a second a GPU at `r` over `first`'s.
pub(crate) fn per_gpu_rate(r: &StepResult, first: &StepResult) -> f64 {
    let rate = |r: &StepResult| r.samples_per_s / r.world.max(1) as f64;
    rate(r) / rate(first)
}

/// What a sweep point adds to the first point's step.
pub(crate) struct FromFirst {
    /// Its step's change, ms.
    pub iteration_ms: f64,
    /// Each breakdown part's change: (label, key, ms).
    pub parts: [(&'static str, &'static str, f64); crate::workload::ddp::BREAKDOWN_PARTS],
}

/// `r`'s step and breakdown less `first`'s.
pub(crate) fn from_first(r: &StepResult, first: &StepResult) -> FromFirst {
    let mut parts = r.breakdown.parts();
    for (p, f) in parts.iter_mut().zip(first.breakdown.parts()) {
        p.2 -= f.2;
    }
    FromFirst { iteration_ms: r.iteration_time_ms - first.iteration_time_ms, parts }
}

/// The step's memory line: its total against the GPU's (and what the headroom leaves), the
/// optimizer, and the parts (GPU 0's under DataParallel).
pub(crate) fn memory_text(s: &Scenario, spec: &DdpSpec, world: usize) -> String {
    let mem = ddp_memory(spec, world, s.gpus_per_node);
    let gpu = s.node.gpu.model.memory.get() as f64;
    format!(
        "{:.1} of {:.1} GiB ({:.1} usable with {} % headroom), optimizer {} ({}{})",
        mem.total / GIB,
        gpu / GIB,
        gpu * (1.0 - spec.memory_headroom) / GIB,
        crate::workload::memory::headroom_pct(spec.memory_headroom),
        spec.optimizer.name(),
        mem.parts(),
        if mem.activations_known { "" } else { "; activations not given" }
    )
}

/// "; activation checkpointing full" where the step checkpoints (nothing otherwise).
pub(crate) fn checkpointed_text(spec: &crate::workload::ddp::DdpSpec) -> String {
    match spec.checkpointing {
        crate::workload::ddp::Checkpointing::None => String::new(),
        c => format!("; activation checkpointing {}", c.describe()),
    }
}

/// Seconds as µs to a tenth, printed without trailing zeros (52.5, 60).
fn micros(secs: f64) -> f64 {
    (secs * 1e7).round() / 10.0
}
