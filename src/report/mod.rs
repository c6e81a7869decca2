//! Output formats, one file each, behind one small trait. Simulation code never formats.

pub mod accuracy;
pub mod calibration;
pub mod csv;
pub mod ddp;
pub mod dp;
pub mod explain;
pub mod gantt;
pub mod jobs;
pub mod json;
pub mod nccl;
pub mod output;
pub mod palette;
pub mod plan;
pub mod plot;
pub mod presets;
pub mod sweep;
pub mod table;
pub mod topo;
pub mod trace;
pub mod training;

use std::io::{self, Write};

use crate::calibrate::validate::Validation;

pub use crate::comm::CommSummary;
pub use crate::version::FORMAT_VERSION;

/// Writes `value` (a JSON object) as collsim's JSON documents are written: pretty, its
/// `format_version` first, then its own fields in their order, and a newline.
pub fn write_json<T: serde::Serialize + ?Sized>(value: &T, out: &mut dyn Write) -> io::Result<()> {
    #[derive(serde::Serialize)]
    struct Versioned<'a, T: serde::Serialize + ?Sized> {
        format_version: u32,
        #[serde(flatten)]
        body: &'a T,
    }
    let doc = Versioned { format_version: FORMAT_VERSION, body: value };
    serde_json::to_writer_pretty(&mut *out, &doc).map_err(io::Error::other)?;
    writeln!(out)
}
use crate::collective::{Mode, TimingParams};
use crate::config::Scenario;
use crate::workload::sweep::Row;

/// A simulated sweep with its context.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimReport<'a> {
    /// The resolved scenario.
    pub scenario: &'a Scenario,
    /// Its sweep.
    #[serde(skip)]
    pub sweep: &'a crate::workload::sweep::SweepSpec,
    /// The timing profile used.
    pub profile: &'a TimingParams,
    /// Simulation mode.
    pub mode: Mode,
    /// The communicator.
    pub communicator: CommSummary,
    /// One row per size.
    pub rows: &'a [Row],
    /// What the nccl layouts print of the run (nccl-tests' -n, -w, -c).
    #[serde(skip)]
    pub run: nccl::TestRun,
}

/// A validation with its context.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ValidationReport<'a> {
    /// The log compared.
    pub log: &'a str,
    /// The resolved scenario the log was simulated with.
    pub scenario: &'a Scenario,
    /// The timing profile used.
    pub profile: &'a TimingParams,
    /// The comparison.
    #[serde(flatten)]
    pub validation: &'a Validation,
}

/// An output format for simulations.
pub trait SimFormat {
    /// Writes the report.
    fn write_sim(&self, r: &SimReport<'_>, out: &mut dyn Write) -> io::Result<()>;
}

/// An output format for validations.
pub trait ValidationFormat {
    /// Writes the report.
    fn write_validation(&self, r: &ValidationReport<'_>, out: &mut dyn Write) -> io::Result<()>;
}

/// Formats `v` right-aligned in `width` the way nccl-tests does: two decimals, else one, else
/// none, else exponent notation — the widest precision that fits.
pub fn fit_number(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:.prec$}");
        if s.len() <= width {
            return format!("{s:>width$}");
        }
    }
    format!("{:>width$}", format!("{v:.1e}"))
}
