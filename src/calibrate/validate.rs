//! Compares the model with a real nccl-tests run: the same sizes simulated, the error per size
//! `100·(predicted − measured)/measured` on the out-of-place time, and its median and 95th
//! percentile.

use super::nccl_log::LogTest;
use crate::collective::{Collective, Mode, TimingParams};
use crate::comm::Communicator;
use crate::hw::Cluster;
use crate::units::Bytes;
use crate::workload::sweep::SweepSpec;
use crate::workload::sweep::{self, SweepError};
use crate::workload::{DataType, ReduceOp};

/// One size, measured and predicted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValidationRow {
    /// Bytes per rank.
    pub size_bytes: u64,
    /// Out-of-place time in the log, µs.
    pub measured_time_us: f64,
    /// Predicted time, µs.
    pub predicted_time_us: f64,
    /// The prediction's error band (equal to it without a fitted correction).
    pub predicted_time_us_low: f64,
    /// Upper end of the band.
    pub predicted_time_us_high: f64,
    /// Out-of-place busbw in the log, GB/s.
    #[serde(rename = "measured_busbw_gbyte_per_s")]
    pub measured_busbw: f64,
    /// Predicted busbw, GB/s.
    #[serde(rename = "predicted_busbw_gbyte_per_s")]
    pub predicted_busbw: f64,
    /// 100·(predicted − measured)/measured.
    pub error_pct: f64,
    /// Algorithm simulated.
    pub algo: &'static str,
    /// Protocol simulated.
    pub proto: &'static str,
    /// Channels used.
    pub channels: usize,
    /// The algorithm NCCL's cost model would choose ("P2P", or "-" when nothing is enabled).
    pub nccl_algo: &'static str,
    /// Its protocol.
    pub nccl_proto: &'static str,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Validation {
    /// The collective compared.
    pub collective: Collective,
    /// Per size.
    pub rows: Vec<ValidationRow>,
    /// Median of |error_pct|.
    pub median_abs_error_pct: f64,
    /// 95th percentile (nearest rank) of |error_pct|.
    pub p95_abs_error_pct: f64,
    /// Sizes at which NCCL would run the algorithm simulated (the others need one collsim
    /// does not model yet, and their error says nothing about the model).
    pub nccl_choice_sizes: usize,
    /// Median of |error_pct| over those sizes.
    pub nccl_choice_median_abs_error_pct: f64,
    /// 95th percentile of |error_pct| over those sizes.
    pub nccl_choice_p95_abs_error_pct: f64,
}

impl ValidationRow {
    /// Whether NCCL would run the algorithm simulated here.
    pub fn is_nccl_choice(&self) -> bool {
        self.nccl_algo == self.algo
    }

    /// NCCL's choice as its logs write it, "ALGO/PROTO".
    pub fn nccl_choice(&self) -> String {
        sweep::choice_text(self.nccl_algo, self.nccl_proto)
    }
}

/// Why a comparison cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidateError {
    /// A row's data type is unknown.
    #[error("row of size {0}: unknown data type {1:?}")]
    DataType(u64, String),
    /// The simulation cannot run.
    #[error(transparent)]
    Sweep(#[from] SweepError),
}

/// Median and nearest-rank 95th percentile of the absolute values.
pub fn summary(errors: &[f64]) -> (f64, f64) {
    if errors.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut v: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    let rank = ((0.95 * n as f64).ceil() as usize).clamp(1, n);
    (median, v[rank - 1])
}

/// Simulates every row of `test` as `collective` and compares.
pub fn compare(
    cluster: &Cluster,
    comm: &Communicator,
    test: &LogTest,
    collective: Collective,
    params: &TimingParams,
    mode: Mode,
) -> Result<Validation, ValidateError> {
    use rayon::prelude::*;
    let mut specs = Vec::with_capacity(test.rows.len());
    for r in &test.rows {
        let dtype = DataType::parse(&r.dtype)
            .ok_or_else(|| ValidateError::DataType(r.size_bytes, r.dtype.clone()))?;
        let spec = SweepSpec {
            collective,
            min_bytes: Bytes::new(r.size_bytes),
            max_bytes: Bytes::new(r.size_bytes),
            factor: 2,
            dtype,
            op: ReduceOp::parse(&r.redop).unwrap_or(ReduceOp::Sum),
            backend: Default::default(),
            barrier: false,
        };
        sweep::check_supported(spec.collective, comm)?;
        specs.push(spec);
    }
    if mode == Mode::Detailed {
        let calls = test.rows.iter().zip(&specs);
        crate::collective::run::check_detailed(
            calls
                .map(|(r, spec)| sweep::call(cluster, comm, spec, r.size_bytes, params, mode, &[])),
        )
        .map_err(SweepError::TooMuchWork)?;
    }
    // Sizes run in parallel; the rows keep the log's order.
    let rows: Vec<ValidationRow> = test
        .rows
        .par_iter()
        .zip(&specs)
        .map(|(r, spec)| {
            let p = sweep::run_size(cluster, comm, spec, r.size_bytes, params, mode);
            ValidationRow {
                size_bytes: r.size_bytes,
                measured_time_us: r.oop_time_us,
                predicted_time_us: p.time_us,
                predicted_time_us_low: p.time_us_low,
                predicted_time_us_high: p.time_us_high,
                measured_busbw: r.oop_busbw,
                predicted_busbw: p.busbw,
                error_pct: 100.0 * (p.time_us - r.oop_time_us) / r.oop_time_us,
                algo: p.algo,
                proto: p.proto,
                channels: p.channels,
                nccl_algo: p.nccl_algo,
                nccl_proto: p.nccl_proto,
            }
        })
        .collect();
    let errors: Vec<f64> = rows.iter().map(|r| r.error_pct).collect();
    let (median_abs_error_pct, p95_abs_error_pct) = summary(&errors);
    let chosen: Vec<f64> =
        rows.iter().filter(|r| r.is_nccl_choice()).map(|r| r.error_pct).collect();
    let (nccl_choice_median_abs_error_pct, nccl_choice_p95_abs_error_pct) = summary(&chosen);
    Ok(Validation {
        collective,
        nccl_choice_sizes: chosen.len(),
        nccl_choice_median_abs_error_pct,
        nccl_choice_p95_abs_error_pct,
        rows,
        median_abs_error_pct,
        p95_abs_error_pct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let (m, p) = summary(&[1.0, -2.0, 3.0, -4.0]);
        assert_eq!((m, p), (2.5, 4.0));
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(summary(&v), (10.5, 19.0));
    }
}
