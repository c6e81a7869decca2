//! The nccl-tests layouts (v2.19.6, `nccl-model.md` §5.4; NVIDIA/nccl-tests src/util.cu
//! `writeDeviceReport`, `writeBenchmarkLine*`, `jsonOutputInit` and src/common.cu at a0b82b2):
//! its text ([`Nccl`]) and its `-J` JSON, version 3 ([`NcclJson`]), so that tools that read
//! nccl-tests output read collsim's, as nccl-tests writes it with its defaults or the -n, -w
//! and -c given ([`TestRun`]: one warmup and 20 timed iterations, data checked, `#wrong` 0: a
//! prediction has nothing wrong), and sizes capped by the GPU's memory as nccl-tests caps them.
//! Times are predictions, and the in-place columns repeat the out-of-place prediction.

use std::io::{self, Write};

use super::{SimFormat, SimReport, fit_number};

/// What nccl-tests' header and JSON config say of the run: its -n, -w and -c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// Timed iterations a size (`-n`; nccl-tests' default 20).
    pub iters: u32,
    /// Warm-up iterations (`-w`; default 1).
    pub warmup_iters: u32,
    /// Whether the data is checked (`-c`; default on): off, `#wrong` reads N/A.
    pub check: bool,
}

impl Default for TestRun {
    /// nccl-tests' defaults (src/common.cu: `iters = 20`, `warmup_iters = 1`, `datacheck = 1`).
    fn default() -> TestRun {
        TestRun { iters: 20, warmup_iters: 1, check: true }
    }
}

/// nccl-tests' text layout.
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
            "# nThread 1 nGpus {per_process} minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} agg iters: 1 validation: {} graph: 0 unalign: 0",
            sw.min_bytes.get(),
            sw.max_bytes.get(),
            sw.factor,
            r.run.warmup_iters,
            r.run.iters,
            u8::from(r.run.check)
        )?;
        writeln!(out, "#")?;
        writeln!(out, "# Using devices")?;
        for d in devices(r) {
            writeln!(
                out,
                "#  Rank {:2} Group  0 Pid {:6} on {:>10} device {:2} [{}] {}",
                d.rank, d.pid, d.hostname, d.device, d.device_hex, d.device_info
            )?;
        }
        // nccl-tests leaves each GPU a reserve and 1 GiB, and needs three buffers of the size
        // (send, receive, expected): a larger -e is cut to what fits, with a line saying so,
        // and the sizes past it are not run.
        let cap = memory_cap(s.node.gpu.model.memory.get(), r.run.check);
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
        let root = root(r.sweep.collective);
        let rows: Vec<_> = r.rows.iter().filter(|row| row.size_bytes <= cap).collect();
        for row in &rows {
            // Without the data check nccl-tests prints N/A for #wrong, one column narrower.
            let wrong = if r.run.check { format!("  {:>6}", 0) } else { "    N/A".to_string() };
            let half = format!(
                "  {}  {}  {}{wrong}",
                fit_number(row.time_us, 7),
                fit_number(row.algbw, 6),
                fit_number(row.busbw, 6),
            );
            writeln!(
                out,
                "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{half}{half}",
                row.size_bytes, row.count, row.dtype, row.redop, root
            )?;
        }
        let avg = average_busbw(&rows);
        writeln!(out, "# Out of bounds values : 0 OK")?;
        writeln!(out, "# Avg bus bandwidth    : {} ", format_g(avg))?;
        writeln!(out, "#")?;
        writeln!(out, "# Collective test concluded: {}_perf", sw.collective.name())?;
        Ok(())
    }
}

/// One rank as nccl-tests' "Using devices" lists it (its JSON `devices` entry): a process
/// for every `gpus_per_process` ranks, with made-up Pids and bus ids.
#[derive(serde::Serialize)]
struct Device {
    rank: usize,
    group: usize,
    pid: usize,
    hostname: String,
    device: usize,
    device_hex: String,
    device_info: String,
}

/// The ranks of `r`'s communicator, node by node.
fn devices(r: &SimReport<'_>) -> Vec<Device> {
    let s = r.scenario;
    let per_process = s.gpus_per_process.max(1);
    let name = device_name(&s.node.gpu.model.name);
    let mut out = Vec::with_capacity(s.nodes * s.gpus_per_node);
    for node in 0..s.nodes {
        for g in 0..s.gpus_per_node {
            let rank = node * s.gpus_per_node + g;
            out.push(Device {
                rank,
                group: 0,
                pid: 10_000 + rank / per_process,
                hostname: format!("node{node}"),
                device: g,
                device_hex: format!("0000:{:02x}:00", (g + 1) % 256),
                device_info: name.clone(),
            });
        }
    }
    out
}

/// nccl-tests' "Avg bus bandwidth": the mean of the out-of-place and in-place busbw of every
/// size run (0 where none is).
fn average_busbw(rows: &[&crate::workload::sweep::Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|row| 2.0 * row.busbw).sum::<f64>() / (2 * rows.len()) as f64
}

/// The root nccl-tests prints: rooted tests their root (its default `-r 0`), the others -1.
fn root(collective: crate::collective::Collective) -> i32 {
    match collective {
        crate::collective::Collective::Broadcast | crate::collective::Collective::Reduce => 0,
        _ => -1,
    }
}

/// nccl-tests' `-J` JSON, version 3 (src/util.cu at a0b82b2: `jsonOutputInit`,
/// `writeDeviceReport`, `writeBenchmarkLine*`, `writeResultFooter`, `writeErrors`), with the
/// `args` of the nccl-tests command the sweep stands for and the scenario's NCCL variables as
/// `env`; as nccl-tests writes them, `config.devices` has one entry a process (its first rank)
/// and booleans are the strings "true" and "false". Its
/// times are written whole (nccl-tests prints six decimals), so a reader gets the prediction
/// exactly. The start and end times nccl-tests writes are left out (a prediction ran at no
/// time, and the same input must give the same bytes); `collsim` says what the file is.
pub struct NcclJson;

impl SimFormat for NcclJson {
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()> {
        #[derive(serde::Serialize)]
        struct Timing {
            time: f64,
            alg_bw: f64,
            bus_bw: f64,
            nwrong: Option<f64>,
        }
        #[derive(serde::Serialize)]
        struct Result {
            size: u64,
            count: u64,
            #[serde(rename = "type")]
            dtype: &'static str,
            redop: &'static str,
            root: String,
            out_of_place: Timing,
            in_place: Timing,
            actual_iterations: u32,
            experiment_name: &'static str,
        }
        // The document, in nccl-tests' order.
        #[derive(serde::Serialize)]
        struct Doc {
            version: u32,
            args: Vec<String>,
            env: Vec<String>,
            nccl_version: u32,
            collsim: Origin,
            config: Config,
            results: Vec<Result>,
            out_of_bounds: Bounds,
            average_bus_bandwidth: Average,
            errors: Vec<String>,
        }
        #[derive(serde::Serialize)]
        struct Origin {
            version: &'static str,
            what: String,
        }
        #[derive(serde::Serialize)]
        struct Config {
            nthreads: u32,
            ngpus: usize,
            minimum_bytes: u64,
            maximum_bytes: u64,
            step_factor: u64,
            warmup_iters: u32,
            iterations: u32,
            aggregated_iterations: u32,
            validation: u8,
            graph: u32,
            blocking_collectives: &'static str,
            per_iter_timing: &'static str,
            per_iter_skip: u32,
            parallel_init: &'static str,
            devices: Vec<Device>,
        }
        #[derive(serde::Serialize)]
        struct Bounds {
            count: u32,
            okay: &'static str,
        }
        #[derive(serde::Serialize)]
        struct Average {
            bandwidth: f64,
            okay: &'static str,
        }
        let s = r.scenario;
        let sw = r.sweep;
        let run = r.run;
        let cap = memory_cap(s.node.gpu.model.memory.get(), r.run.check);
        let rows: Vec<_> = r.rows.iter().filter(|row| row.size_bytes <= cap).collect();
        let timing = |row: &crate::workload::sweep::Row| Timing {
            time: row.time_us,
            alg_bw: row.algbw,
            bus_bw: row.busbw,
            nwrong: run.check.then_some(0.0),
        };
        let results: Vec<Result> = rows
            .iter()
            .map(|row| Result {
                size: row.size_bytes,
                count: row.count,
                dtype: row.dtype,
                redop: row.redop,
                root: format!("{:6}", root(sw.collective)),
                out_of_place: timing(row),
                in_place: timing(row),
                actual_iterations: run.iters,
                experiment_name: "",
            })
            .collect();
        let program = format!("{}_perf", sw.collective.name());
        let args: Vec<String> = [
            program.as_str(),
            "-b",
            &sw.min_bytes.get().to_string(),
            "-e",
            &sw.max_bytes.get().to_string(),
            "-f",
            &sw.factor.to_string(),
            "-g",
            &s.gpus_per_process.max(1).to_string(),
            "-d",
            sw.dtype.name(),
            "-o",
            sw.op.name(),
            "-n",
            &run.iters.to_string(),
            "-w",
            &run.warmup_iters.to_string(),
            "-c",
            &u8::from(run.check).to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let env: Vec<String> = s.nccl.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let doc = Doc {
            version: 3,
            args,
            env,
            nccl_version: nccl_version_code(r.communicator.nccl_tables),
            collsim: Origin {
                version: env!("CARGO_PKG_VERSION"),
                what: format!(
                    "a prediction in nccl-tests' -J layout (NCCL tables {}; Pids and bus ids are made up)",
                    r.communicator.nccl_tables
                ),
            },
            config: Config {
                nthreads: 1,
                ngpus: s.gpus_per_process.max(1),
                minimum_bytes: sw.min_bytes.get(),
                maximum_bytes: sw.max_bytes.get(),
                step_factor: sw.factor,
                warmup_iters: run.warmup_iters,
                iterations: run.iters,
                aggregated_iterations: 1,
                validation: u8::from(run.check),
                graph: 0,
                blocking_collectives: "false",
                per_iter_timing: "false",
                per_iter_skip: 0,
                parallel_init: "false",
                // One entry a process, its first rank, as nccl-tests parses its ranks' lines.
                devices: devices(r)
                    .into_iter()
                    .filter(|d| d.rank % s.gpus_per_process.max(1) == 0)
                    .collect(),
            },
            results,
            out_of_bounds: Bounds { count: 0, okay: "true" },
            average_bus_bandwidth: Average { bandwidth: average_busbw(&rows), okay: "unchecked" },
            errors: Vec::new(),
        };
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(io::Error::other)?;
        writeln!(out)
    }
}

/// The largest size nccl-tests runs on a GPU of `memory` bytes (src/common.cu): it reserves
/// 1 GiB per 16 GiB (at most 4 GiB) and 1 GiB more, and holds three buffers of the size with its
/// data check on (`check`), two without. From the library's nominal memory; CUDA's
/// `totalGlobalMem` is a little less (an 80 GiB H100 reports about 79.6 GiB), so the cap can be
/// that much higher.
pub fn memory_cap(memory: u64, check: bool) -> u64 {
    const GIB: u64 = 1 << 30;
    let reserve = (memory.div_ceil(16 * GIB) * GIB).min(4 * GIB);
    memory.saturating_sub(reserve + GIB) / if check { 3 } else { 2 }
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
