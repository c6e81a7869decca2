//! Output formats, one file each, behind one small trait. Simulation code never formats.

pub mod accuracy;
pub mod calibration;
pub mod csv;
pub mod ddp;
pub mod explain;
pub mod gantt;
pub mod jobs;
pub mod json;
pub mod nccl;
pub mod output;
pub mod plan;
pub mod plot;
pub mod sweep;
pub mod table;
pub mod topo;
pub mod trace;

use std::io::{self, Write};

use crate::calibrate::validate::Validation;

/// The version of every JSON document collsim writes (`simulate`, `plan`, `validate`, `explain`,
/// `topo show`, jobs, sweeps, DDP steps), as each document's `format_version`: one number for
/// the crate, bumped whenever a field is added, renamed, retyped or dropped. A test
/// (`tests/it/report.rs`) keeps the fields of each document and fails when they change and
/// this does not. 4: a replayed step's `samples_per_s`, `gemm_tflops`, `forward_ms` and
/// `backward_ms` are null (they were made-up numbers). 5: a 3-D step's `parallel.layout` has
/// `cp` (context parallelism), `distributed_optimizer` and `overlap_param_gather`; 6: and
/// `tp_comm_overlap`; 7: `memory` has `step_transient` and `measured`, and a model profile
/// that knows its micro-batch gives `samples_per_s`.
pub const FORMAT_VERSION: u32 = 7;

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
use crate::comm::Graph;
use crate::config::Scenario;
use crate::workload::sweep::Row;

/// What the communicator looked like, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CommSummary {
    /// Ranks.
    pub nranks: usize,
    /// Ring search result.
    pub ring_graph: Graph,
    /// NVLS search result, if supported.
    pub nvls_graph: Option<Graph>,
    /// CUDA channels.
    pub cuda_channels: usize,
    /// NCCL version of the cost-model tables.
    pub nccl_tables: &'static str,
    /// NCCL_* variables given but not used by the model.
    pub ignored_nccl: Vec<String>,
}

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
