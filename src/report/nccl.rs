//! The nccl-tests text layout (v2.19.6, `nccl-model.md` §5.4), so that tools that read
//! nccl-tests output read collsim's. Times are predictions; `#wrong` is `N/A` (nothing is
//! validated), and the in-place columns repeat the out-of-place prediction.

use std::io::{self, Write};

use super::{SimFormat, SimReport, fit_number};

/// nccl-tests' layout.
pub struct Nccl;

impl SimFormat for Nccl {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        let s = r.scenario;
        let sw = r.sweep;
        writeln!(
            out,
            "# collsim {} prediction in nccl-tests layout (NCCL tables {})",
            env!("CARGO_PKG_VERSION"),
            r.communicator.nccl_tables
        )?;
        writeln!(out, "# Collective test starting: {}_perf", sw.collective.name())?;
        writeln!(
            out,
            "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}(factor) warmup iters: 0 iters: 1 agg iters: 1 validation: 0 graph: 0 unalign: 0",
            sw.min_bytes.get(),
            sw.max_bytes.get(),
            sw.factor
        )?;
        writeln!(out, "#")?;
        writeln!(out, "# Using devices")?;
        for node in 0..s.nodes {
            for g in 0..s.gpus_per_node {
                let rank = node * s.gpus_per_node + g;
                let host = format!("node{node}");
                writeln!(
                    out,
                    "#  Rank {rank:2} Group  0 Pid {:6} on {host:>10} device {g:2} [simulated] NVIDIA {}",
                    node, s.node.gpu.model.name
                )?;
            }
        }
        writeln!(out, "#")?;
        writeln!(
            out,
            "#                                                              out-of-place                       in-place          "
        )?;
        writeln!(
            out,
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong "
        )?;
        writeln!(
            out,
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
        )?;
        let mut sum = 0.0;
        // Rooted tests print their root (nccl-tests' default -r 0); the others -1.
        let root = match r.sweep.collective {
            crate::collective::Collective::Broadcast | crate::collective::Collective::Reduce => 0,
            _ => -1,
        };
        for row in r.rows {
            let half = format!(
                "  {}  {}  {}  {:>6}",
                fit_number(row.time_us, 7),
                fit_number(row.algbw, 6),
                fit_number(row.busbw, 6),
                "N/A"
            );
            writeln!(
                out,
                "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{half}{half}",
                row.size_bytes, row.count, row.dtype, row.redop, root
            )?;
            sum += 2.0 * row.busbw;
        }
        let avg = if r.rows.is_empty() { 0.0 } else { sum / (2 * r.rows.len()) as f64 };
        writeln!(out, "# Out of bounds values : 0 OK")?;
        writeln!(out, "# Avg bus bandwidth    : {avg:.6} ")?;
        writeln!(out, "#")?;
        writeln!(out, "# Collective test concluded: {}_perf", sw.collective.name())?;
        Ok(())
    }
}
