//! The human-readable table: the scenario in a few lines, then per size the time, algbw, busbw,
//! algorithm, protocol and channels, and what NCCL itself would pick.

use std::io::{self, Write};

use super::{SimFormat, SimReport, ValidationFormat, ValidationReport};
use crate::units::Bytes;

/// Aligned text for people.
pub struct Table;

fn size(b: u64) -> String {
    Bytes::new(b).to_string()
}

/// A column's width: `least` (the header's), or its widest cell where that is wider.
fn width<'a>(least: usize, cells: impl Iterator<Item = &'a str>) -> usize {
    cells.map(|c| c.chars().count()).fold(least, usize::max)
}

impl SimFormat for Table {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        let s = r.scenario;
        let c = &r.communicator;
        writeln!(
            out,
            "{} on {} x {} ({} of {} GPUs per node, {} ranks), {} {}",
            if r.sweep.barrier {
                "barrier (an all_reduce of one float, as PyTorch's barrier on NCCL; sizes, dtype and op given are not used)"
            } else {
                r.sweep.collective.name()
            },
            s.nodes,
            s.node.name,
            s.gpus_per_node,
            s.node.gpu.count,
            c.nranks,
            r.sweep.dtype.name(),
            r.sweep.op.name()
        )?;
        if r.sweep.backend.is_nccl() {
            writeln!(
                out,
                "ring graph {} x {} GB/s, {} CUDA channels; NCCL {} cost model; profile {:?}; {} simulation ({})",
                c.ring_graph.n_channels,
                c.ring_graph.bw_intra,
                c.cuda_channels,
                c.nccl_tables,
                r.profile.name,
                r.mode.name(),
                {
                    let count = |form: &str| r.rows.iter().filter(|x| x.simulated == form).count();
                    let forms: Vec<(usize, &str)> = ["detailed", "symmetric", "aggregated"]
                        .into_iter()
                        .map(|f| (count(f), f))
                        .filter(|&(n, _)| n > 0)
                        .collect();
                    match forms.as_slice() {
                        [] => "every size detailed".to_string(),
                        [(_, f)] => format!("every size {f}"),
                        _ => forms
                            .iter()
                            .enumerate()
                            .map(|(i, (n, f))| {
                                if i == 0 { format!("{n} size(s) {f}") } else { format!("{n} {f}") }
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                }
            )?;
        } else {
            writeln!(
                out,
                "backend gloo: each size copied to host memory over the GPUs' PCIe paths and back, Gloo's ring over TCP (a stream a peer, loopback inside a node), not NCCL (docs/training.md, \"Gloo\")"
            )?;
        }
        if let Some(t) = c.preset_tuner.as_ref().filter(|_| r.sweep.backend.is_nccl()) {
            writeln!(out, "tuner: {t}")?;
        }
        writeln!(out)?;
        // A fitted profile gives each time its error band.
        let banded = r.profile.correction.is_some();
        // Columns as wide as their widest cell (a NVLS_TREE, a 1048572 KiB), at least the
        // header's.
        let sizes: Vec<String> = r.rows.iter().map(|x| size(x.size_bytes)).collect();
        let ws = width(10, sizes.iter().map(String::as_str));
        let wa = width(5, r.rows.iter().map(|x| x.algo));
        let wp = width(7, r.rows.iter().map(|x| x.proto));
        // A tuner file adds the line of the row that set each size.
        let tuned = c.tuner.is_some();
        writeln!(
            out,
            "{:>ws$} {:>12} {:>11}{} {:>9} {:>9}  {:<wa$} {:<wp$} {:>3}  {}NCCL would pick",
            "size",
            "count",
            "time(us)",
            if banded { "   ±band" } else { "" },
            "algbw",
            "busbw",
            "algo",
            "proto",
            "ch",
            if tuned { "tuner  " } else { "" }
        )?;
        let mut other = false;
        for (row, sz) in r.rows.iter().zip(&sizes) {
            let pick = if row.nccl_algo == row.algo {
                String::new()
            } else {
                other = true;
                format!("{} *", row.nccl_choice())
            };
            let band = if banded {
                format!(" {:>6.1}%", 100.0 * (row.time_us_high / row.time_us - 1.0))
            } else {
                String::new()
            };
            let line = match (tuned, row.tuner_line) {
                (false, _) => String::new(),
                (true, Some(l)) => format!("{:>5}  ", l),
                (true, None) => format!("{:>5}  ", "-"),
            };
            writeln!(
                out,
                "{:>ws$} {:>12} {:>11.2}{} {:>9.2} {:>9.2}  {:<wa$} {:<wp$} {:>3}  {}{}",
                sz,
                row.count,
                row.time_us,
                band,
                row.algbw,
                row.busbw,
                row.algo,
                row.proto,
                row.channels,
                line,
                pick
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "algbw = size/time, busbw = algbw x {:.4} (GB/s = 1e9 B/s, as nccl-tests)",
            r.sweep.collective.busbw_factor(c.nranks)
        )?;
        if other {
            writeln!(
                out,
                "* NCCL's cost model would choose an algorithm collsim does not time yet; it times the best one it models (Ring, one-node NVLS)"
            )?;
        }
        if let Some(t) = &c.tuner {
            writeln!(out)?;
            for line in tuner_lines(t, &c.tuner_notes, r.rows) {
                writeln!(out, "{line}")?;
            }
        }
        Ok(())
    }
}

/// Which sizes each row of the tuner file set, the sizes none did, and the file's notes.
pub fn tuner_lines(
    t: &crate::comm::tuner::Tuner,
    notes: &[String],
    rows: &[crate::workload::sweep::Row],
) -> Vec<String> {
    let reading = if t.example_binary {
        "as NCCL's example tuner plugin's binary reads it"
    } else {
        "NCCL's example tuner plugin's format"
    };
    let mut out = vec![format!(
        "tuner: {} ({reading}, {} row(s)); column tuner: the line whose row set the size's algorithm and protocol",
        t.file,
        t.rows.len()
    )];
    // Runs of consecutive sizes with the same line, as "8 B to 64 KiB".
    let runs = |line: Option<usize>| -> Vec<String> {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut prev = false;
        for row in rows {
            let here = row.tuner_line == line;
            match spans.last_mut() {
                Some(last) if here && prev => last.1 = row.size_bytes,
                _ if here => spans.push((row.size_bytes, row.size_bytes)),
                _ => {}
            }
            prev = here;
        }
        spans
            .iter()
            .map(|&(a, b)| if a == b { size(a) } else { format!("{} to {}", size(a), size(b)) })
            .collect()
    };
    for r in &t.rows {
        let set = runs(Some(r.line));
        out.push(format!(
            "  line {:>3}  {}: {}",
            r.line,
            r.describe(),
            if set.is_empty() { "no size".to_string() } else { set.join(", ") }
        ));
    }
    let none = runs(None);
    if !none.is_empty() {
        out.push(format!("  no row: {} (NCCL's own choice)", none.join(", ")));
    }
    out.extend(notes.iter().map(|n| format!("  {n}")));
    out
}

impl ValidationFormat for Table {
    fn write_validation(&self, r: &ValidationReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        let v = r.validation;
        writeln!(
            out,
            "{} from {} vs collsim on {} x {} ({} GPUs per node), profile {:?}",
            v.collective.name(),
            r.log,
            r.scenario.nodes,
            r.scenario.node.name,
            r.scenario.gpus_per_node,
            r.profile.name
        )?;
        writeln!(out)?;
        let sizes: Vec<String> = v.rows.iter().map(|x| size(x.size_bytes)).collect();
        let ws = width(10, sizes.iter().map(String::as_str));
        let wa = width(5, v.rows.iter().map(|x| x.algo));
        let wp = width(7, v.rows.iter().map(|x| x.proto));
        writeln!(
            out,
            "{:>ws$} {:>12} {:>12} {:>9} {:>9} {:>8}  {:<wa$} {:<wp$} {:>3}  NCCL would pick",
            "size", "meas(us)", "pred(us)", "meas bus", "pred bus", "err%", "algo", "proto", "ch",
        )?;
        for (row, sz) in v.rows.iter().zip(&sizes) {
            writeln!(
                out,
                "{:>ws$} {:>12.2} {:>12.2} {:>9.2} {:>9.2} {:>+8.1}  {:<wa$} {:<wp$} {:>3}  {}",
                sz,
                row.measured_time_us,
                row.predicted_time_us,
                row.measured_busbw,
                row.predicted_busbw,
                row.error_pct,
                row.algo,
                row.proto,
                row.channels,
                if row.is_nccl_choice() { String::new() } else { row.nccl_choice() }
            )?;
        }
        writeln!(out)?;
        writeln!(out, "error = 100 x (predicted - measured) / measured, out-of-place time")?;
        writeln!(
            out,
            "median |error| {:.1} %, p95 |error| {:.1} % over {} sizes",
            v.median_abs_error_pct,
            v.p95_abs_error_pct,
            v.rows.len()
        )?;
        if v.nccl_choice_sizes == 0 {
            writeln!(
                out,
                "at none of these sizes would NCCL run what collsim ran (it would pick an \
                 algorithm not modelled yet)"
            )?;
        } else if v.nccl_choice_sizes < v.rows.len() {
            writeln!(
                out,
                "median |error| {:.1} %, p95 |error| {:.1} % over the {} sizes where NCCL would \
                 run what collsim ran (the others need an algorithm not modelled yet)",
                v.nccl_choice_median_abs_error_pct,
                v.nccl_choice_p95_abs_error_pct,
                v.nccl_choice_sizes
            )?;
        }
        Ok(())
    }
}
