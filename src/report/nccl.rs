//! The nccl-tests text layout (v2.19.6, `nccl-model.md` §5.4; NVIDIA/nccl-tests
//! src/util.cu `writeDeviceReport` and src/common.cu at a0b82b2), so that tools that read
//! nccl-tests output read collsim's, as nccl-tests prints it with its defaults: one warmup and
//! 20 timed iterations, data checked (`#wrong` 0: a prediction has nothing wrong), and sizes
//! capped by the GPU's memory as nccl-tests caps them. Times are predictions, and the in-place
//! columns repeat the out-of-place prediction.

use std::io::{self, Write};

use super::{SimFormat, SimReport, fit_number};

/// nccl-tests' layout.
pub struct Nccl;

impl SimFormat for Nccl {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        let s = r.scenario;
        let sw = r.sweep;
        // nccl-tests' first line, with the NCCL release whose tables chose the algorithms as
        // NCCL_VERSION_CODE (2.30.7 -> 23007), so that log readers take the same release.
        let code = nccl_version_code(r.communicator.nccl_tables);
        writeln!(out, "# nccl-tests version 2.19.6 nccl-headers={code} nccl-library={code}")?;
        writeln!(
            out,
            "# collsim {} prediction in nccl-tests layout (NCCL tables {}; Pids and bus ids are made up)",
            env!("CARGO_PKG_VERSION"),
            r.communicator.nccl_tables
        )?;
        writeln!(out, "# Collective test starting: {}_perf", sw.collective.name())?;
        // One process drives `gpus_per_process` GPUs (nccl-tests -g): nGpus, and one Pid for
        // each process's ranks.
        let per_process = s.gpus_per_process.max(1);
        writeln!(
            out,
            "# nThread 1 nGpus {per_process} minBytes {} maxBytes {} step: {}(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
            sw.min_bytes.get(),
            sw.max_bytes.get(),
            sw.factor
        )?;
        writeln!(out, "#")?;
        writeln!(out, "# Using devices")?;
        let name = device_name(&s.node.gpu.model.name);
        for node in 0..s.nodes {
            for g in 0..s.gpus_per_node {
                let rank = node * s.gpus_per_node + g;
                let pid = 10_000 + rank / per_process;
                let host = format!("node{node}");
                writeln!(
                    out,
                    "#  Rank {rank:2} Group  0 Pid {pid:6} on {host:>10} device {g:2} [0000:{:02x}:00] {name}",
                    (g + 1) % 256
                )?;
            }
        }
        // nccl-tests leaves each GPU a reserve and 1 GiB, and needs three buffers of the size
        // (send, receive, expected): a larger -e is cut to what fits, with a line saying so,
        // and the sizes past it are not run.
        let cap = memory_cap(s.node.gpu.model.memory.get());
        if sw.max_bytes.get() > cap {
            writeln!(out, "#\n# Reducing maxBytes to {cap} due to memory limitation")?;
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
        let rows: Vec<_> = r.rows.iter().filter(|row| row.size_bytes <= cap).collect();
        for row in &rows {
            let half = format!(
                "  {}  {}  {}  {:>6}",
                fit_number(row.time_us, 7),
                fit_number(row.algbw, 6),
                fit_number(row.busbw, 6),
                0
            );
            writeln!(
                out,
                "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{half}{half}",
                row.size_bytes, row.count, row.dtype, row.redop, root
            )?;
            sum += 2.0 * row.busbw;
        }
        let avg = if rows.is_empty() { 0.0 } else { sum / (2 * rows.len()) as f64 };
        writeln!(out, "# Out of bounds values : 0 OK")?;
        writeln!(out, "# Avg bus bandwidth    : {} ", format_g(avg))?;
        writeln!(out, "#")?;
        writeln!(out, "# Collective test concluded: {}_perf", sw.collective.name())?;
        Ok(())
    }
}

/// The largest size nccl-tests runs on a GPU of `memory` bytes with its data check on
/// (src/common.cu): it reserves 1 GiB per 16 GiB (at most 4 GiB) and 1 GiB more, and holds
/// three buffers of the size. From the library's nominal memory; CUDA's `totalGlobalMem` is a
/// little less (an 80 GiB H100 reports about 79.6 GiB), so the cap can be that much higher.
pub fn memory_cap(memory: u64) -> u64 {
    const GIB: u64 = 1 << 30;
    let reserve = (memory.div_ceil(16 * GIB) * GIB).min(4 * GIB);
    memory.saturating_sub(reserve + GIB) / 3
}

/// NCCL_VERSION_CODE of a release "2.30.7": major × 10000 + minor × 100 + patch.
fn nccl_version_code(release: &str) -> u32 {
    let mut parts = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor, patch) =
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    major * 10_000 + minor * 100 + patch
}

/// The name CUDA reports for a GPU of the library's `model` (what nccl-tests prints after the
/// bus id, and what `validate` reads back to pick the GPU): "H100-SXM5-80GB" is "NVIDIA H100
/// 80GB HBM3". Models without a known device name print as `"NVIDIA <model>"`.
pub fn device_name(model: &str) -> String {
    let known = match model {
        "A100-SXM4-40GB" => "NVIDIA A100-SXM4-40GB",
        "A100-SXM4-80GB" => "NVIDIA A100-SXM4-80GB",
        "A100-PCIe-40GB" => "NVIDIA A100-PCIE-40GB",
        "A100-PCIe-80GB" => "NVIDIA A100 80GB PCIe",
        "H100-SXM5-80GB" => "NVIDIA H100 80GB HBM3",
        "H100-PCIe-80GB" => "NVIDIA H100 PCIe",
        "H200-SXM-141GB" => "NVIDIA H200",
        "B200-SXM-180GB" => "NVIDIA B200",
        "GB200-186GB" => "NVIDIA GB200",
        _ => return format!("NVIDIA {model}"),
    };
    known.to_string()
}

/// C's `%g`: six significant digits, trailing zeros dropped, as nccl-tests prints the average
/// bus bandwidth.
fn format_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    // The exponent of the value as rounded to six significant digits, as C decides.
    let exp: i32 =
        format!("{:.5e}", x.abs()).split_once('e').and_then(|(_, e)| e.parse().ok()).unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", x);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_does() {
        assert_eq!(format_g(123.456), "123.456");
        assert_eq!(format_g(437.95712), "437.957");
        assert_eq!(format_g(0.003605), "0.003605");
        assert_eq!(format_g(2.0), "2");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(0.0), "0");
        assert_eq!(format_g(999999.5), "1e+06");
        assert_eq!(format_g(9.999996e-05), "0.0001");
        assert_eq!(format_g(0.0001), "0.0001");
        assert_eq!(format_g(1e-5), "1e-05");
        assert_eq!(nccl_version_code("2.30.7"), 23007);
        assert_eq!(nccl_version_code("2.18.6"), 21806);
    }

    #[test]
    fn device_names_read_back_as_their_model() {
        for m in [
            "A100-SXM4-40GB",
            "A100-SXM4-80GB",
            "A100-PCIe-40GB",
            "A100-PCIe-80GB",
            "H100-SXM5-80GB",
            "H100-PCIe-80GB",
            "H200-SXM-141GB",
            "B200-SXM-180GB",
            "GB200-186GB",
        ] {
            let back = crate::hw::gpus::from_reported_name(&device_name(m));
            assert_eq!(back.map(|b| b.0), Some(m), "{m}");
        }
    }
}
