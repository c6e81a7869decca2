//! A simulated DataParallel step: its summary, and where its time goes beside the same step
//! under DDP.

use std::io::{self, Write};

use crate::config::Scenario;
use crate::workload::ddp::{DdpSpec, StepResult};
use crate::workload::dp::DataParallel;

/// Writes the human-readable report of a DataParallel step.
pub fn table(
    s: &Scenario,
    spec: &DdpSpec,
    dp: &DataParallel,
    r: &StepResult,
    out: &mut dyn Write,
) -> io::Result<()> {
    let m = &spec.model;
    writeln!(
        out,
        "DataParallel step: {} ({:.1} M params, {} grads) on 1 x {} ({} GPU(s), one process)",
        m.name,
        m.params() as f64 / 1e6,
        m.grad_dtype.name(),
        s.node.name,
        r.world
    )?;
    let report = r.data_parallel.as_deref();
    writeln!(
        out,
        "micro-batch {} per GPU x {} micro-step(s); each forward: the batch scattered from GPU 0 ({} a sample), parameters and buffers broadcast from it ({} NCCL broadcasts of about 10 MiB), outputs gathered to it ({} a sample); loss {}; gradients reduced onto GPU 0 ({} NCCL reduces); the optimizer on GPU 0{}",
        spec.micro_batch,
        spec.grad_accumulation,
        approx(dp.sample_bytes),
        report.map_or(0, |d| d.broadcasts),
        approx(dp.output_bytes),
        if dp.loss_on_first {
            "on GPU 0, the outputs' gradients scattered back"
        } else {
            "inside each replica"
        },
        report.map_or(0, |d| d.reduces),
        super::ddp::checkpointed_text(spec),
    )?;
    writeln!(out)?;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<28} {v}");
    row(out, "iteration", format!("{:.3} ms", r.iteration_time_ms))?;
    row(out, "GEMM rate", format!("{:.1} TFLOP/s", r.gemm_tflops))?;
    row(
        out,
        "forward",
        format!(
            "{:.3} ms (every GPU's kernels launched by one Python process, {:.0} % of the host's time a kernel under its interpreter lock{})",
            r.forward_ms,
            100.0 * dp.gil_share,
            if dp.gil_share == crate::workload::dp::GIL_SHARE {
                ": the bound, gil_share"
            } else {
                ""
            }
        ),
    )?;
    row(out, "backward", format!("{:.3} ms", r.backward_ms))?;
    row(
        out,
        "optimizer step",
        format!(
            "{:.3} ms ({}, {}, on GPU 0 alone)",
            r.optimizer_ms,
            spec.optimizer.name(),
            spec.optimizer_impl.name()
        ),
    )?;
    if let Some(d) = report {
        row(
            out,
            "replication",
            format!(
                "{:.3} ms on the GPUs (flatten and broadcast), {:.3} ms on the host (replicas built in Python); the longer counts",
                d.broadcast_ms, d.replicas_host_ms
            ),
        )?;
        row(
            out,
            "copies to and from GPU 0",
            format!(
                "scatter {:.3} ms, gather {:.3} ms, scatter back {:.3} ms",
                d.scatter_ms, d.gather_ms, d.scatter_back_ms
            ),
        )?;
    }
    row(
        out,
        "communication",
        format!("{:.3} ms (none of it overlaps the GPUs' compute)", r.comm_ms),
    )?;
    row(out, "samples/s", format!("{:.1}", r.samples_per_s))?;
    row(
        out,
        "scaling efficiency",
        format!("{:.3} (one GPU alone: {:.3} ms)", r.scaling_efficiency, r.single_gpu_ms),
    )?;
    if let Some(k) = &r.skew {
        row(
            out,
            "rank skew / straggler wait",
            format!(
                "{:.3} ms (the slowest of {} GPUs' time x{:.4}, one host launching for all; every GPU at nominal speed: {:.3} ms)",
                k.wait_ms, r.world, k.slowest_factor, k.typical_rank_ms
            ),
        )?;
    }
    row(out, "memory on GPU 0", super::ddp::memory_text(s, spec, r.world))?;
    writeln!(out)?;
    let ddp = report.and_then(|d| d.ddp.as_ref());
    writeln!(
        out,
        "  {:<28} {:>12} {:>12}",
        "where the step goes, ms",
        "DataParallel",
        if ddp.is_some() { "DDP" } else { "" }
    )?;
    let theirs = ddp.map(|d| d.breakdown.parts());
    for (i, (label, _, ms)) in r.breakdown.parts().into_iter().enumerate() {
        let other = theirs.map(|t| t[i].2);
        let own = label.starts_with("DP ");
        if !own && ms == 0.0 && other.is_none_or(|o| o == 0.0) {
            continue;
        }
        writeln!(
            out,
            "    {label:<26} {ms:>12.3} {}",
            other.map_or(String::new(), |o| format!("{o:>12.3}"))
        )?;
    }
    writeln!(
        out,
        "    {:<26} {:>12.3} {}",
        "iteration",
        r.iteration_time_ms,
        ddp.map_or(String::new(), |d| format!("{:>12.3}", d.iteration_time_ms))
    )?;
    writeln!(
        out,
        "    {:<26} {:>12.1} {}",
        "samples/s",
        r.samples_per_s,
        ddp.map_or(String::new(), |d| format!("{:>12.1}", d.samples_per_s))
    )?;
    if let Some(d) = ddp {
        writeln!(
            out,
            "  DDP: the same model, batch per GPU and node, default options (a process per GPU); DataParallel takes {:.2}x its time",
            r.iteration_time_ms / d.iteration_time_ms
        )?;
    }
    Ok(())
}

/// A size in the unit that reads best ("588.0 KiB", "98.2 MiB").
fn approx(bytes: u64) -> String {
    crate::units::Bytes::new(bytes).approx()
}
