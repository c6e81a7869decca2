//! collsim: a discrete-event, flow-level simulator of GPU-cluster collective communication.
//!
//! Data flows one way through the layers:
//!
//! * [`config`] reads scenario, topology and profile TOML files in two stages (raw serde
//!   structs, then validation into typed values with file:line:col errors); [`units`] parses
//!   every quantity ("400 Gb/s", "1.5 us", "64 MiB") exactly.
//! * [`hw`] expands a node template × node count into directed links (NVLink through an
//!   aggregated NVSwitch, PCIe switches, CPU sockets, NICs into a non-blocking switch layer)
//!   with routes between GPUs and NICs.
//! * [`comm`] builds what NCCL builds over those ranks: the channel search, CUDA channels and
//!   ring orders, and the per-call algorithm/protocol choice with NCCL's cost model.
//! * [`collective`] turns a call into steps, chunks and slices on channels, and those into
//!   flows on the [`net`]work (max-min fair sharing), driven by the [`engine`]'s deterministic
//!   event queue. NCCL's latency numbers choose; the simulation times.
//! * [`workload`] issues the calls (an nccl-tests-like sweep), [`report`] formats the results,
//!   [`calibrate`] reads real nccl-tests logs and measures the model's error against them.
//!
//! Each layer knows only the ones below it: the engine knows nothing of GPUs, the network
//! knows links and flows but not collectives.

#![warn(missing_docs)]

pub mod calibrate;
pub mod collective;
pub mod comm;
pub mod config;
pub mod engine;
pub mod hw;
pub mod net;
pub mod report;
pub mod units;
pub mod workload;

use collective::{Mode, TimingParams};
use comm::env::{EnvError, NcclEnv};
use comm::{CommError, Communicator};
use config::Scenario;
use hw::Cluster;
use report::CommSummary;
use workload::sweep::{Row, SweepError};

/// Any error the library reports; each displays as one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Bad input file.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// Bad NCCL variable.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The communicator cannot be built.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The sweep cannot run.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The validation cannot run.
    #[error(transparent)]
    Validate(#[from] calibrate::validate::ValidateError),
    /// The placement or the network does not fit the cluster's node count.
    #[error("{0}")]
    Placement(String),
    /// The training step cannot be simulated.
    #[error("{0}")]
    Ddp(String),
}

/// A cluster and the communicator NCCL would build on it, for a scenario.
pub fn build(scenario: &Scenario) -> Result<(Cluster, Communicator, CommSummary), Error> {
    let env = NcclEnv::from_pairs(scenario.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    hw::fabric::check(&scenario.node, scenario.nodes).map_err(Error::Placement)?;
    let placement =
        scenario.placement.resolve(&scenario.node, scenario.nodes).map_err(Error::Placement)?;
    let cluster = Cluster::with_network(
        &scenario.node,
        scenario.nodes,
        scenario.gpus_per_node,
        &placement,
        env.socket_streams,
    );
    let comm = Communicator::new(&cluster, &env)?;
    let summary = CommSummary {
        nranks: comm.nranks(),
        ring_graph: comm.ring_graph(),
        nvls_graph: comm.nvls_graph(),
        cuda_channels: comm.channels().len(),
        nccl_tables: env.version.tables(),
        ignored_nccl: env.ignored.clone(),
    };
    Ok((cluster, comm, summary))
}

/// Simulates a scenario's sweep.
pub fn simulate(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(Vec<Row>, CommSummary), Error> {
    let sweep = scenario
        .sweep()
        .ok_or_else(|| Error::Ddp("the scenario's workload is a DDP step, not a sweep".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let rows = workload::sweep::run(&cluster, &comm, sweep, params, mode)?;
    Ok((rows, summary))
}

/// Cost of one kernel launch: collsim-bench measured 3.8–4.3 µs back to back on an H100
/// (calibration/data/2026-11-22-h100-single).
pub const KERNEL_LAUNCH_SECS: f64 = 4e-6;

/// Simulates a scenario's DDP training step (its workload must be `kind = "ddp"`).
pub fn simulate_ddp(
    scenario: &Scenario,
    params: &TimingParams,
    mode: Mode,
) -> Result<(workload::ddp::StepResult, CommSummary), Error> {
    use workload::ddp::{CollTime, ComputeRate, GpuFacts};
    let spec = scenario
        .ddp()
        .ok_or_else(|| Error::Ddp("the scenario's workload is not kind = \"ddp\"".into()))?;
    let (cluster, comm, summary) = build(scenario)?;
    let model = &scenario.node.gpu.model;
    let flops = match &spec.rate {
        ComputeRate::Tflops(t) => t * 1e12,
        ComputeRate::Peak { precision, efficiency } => {
            let peak = model.peak_tflops.get(precision).ok_or_else(|| {
                Error::Ddp(format!("{}: no peak for {precision} in the GPU library", model.name))
            })?;
            peak * efficiency * 1e12
        }
    };
    let memory_bandwidth = model
        .memory_bandwidth
        .ok_or_else(|| {
            Error::Ddp(format!(
                "{}: the GPU model has no memory_bandwidth, which DDP's copies need (add it to its [gpu_model] table)",
                model.name
            ))
        })?
        .bytes_per_sec();
    let gpu = GpuFacts {
        flops,
        memory_bandwidth,
        multiprocessors: model.multiprocessors,
        launch: KERNEL_LAUNCH_SECS,
    };
    let cache = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let coll = |c: collective::Collective, bytes: u64, dtype: workload::DataType| -> CollTime {
        if let Some(t) = cache.lock().ok().and_then(|m| m.get(&(c, bytes, dtype)).cloned()) {
            return t;
        }
        let spec = workload::sweep::SweepSpec {
            collective: c,
            min_bytes: units::Bytes::new(bytes),
            max_bytes: units::Bytes::new(bytes),
            factor: 2,
            dtype,
            op: workload::ReduceOp::Sum,
        };
        let row = workload::sweep::run_size(&cluster, &comm, &spec, bytes, params, mode);
        let t = CollTime {
            secs: row.time_us * 1e-6,
            algo: row.algo,
            proto: row.proto,
            channels: row.channels,
        };
        if let Ok(mut m) = cache.lock() {
            m.insert((c, bytes, dtype), t.clone());
        }
        t
    };
    let world = comm.nranks();
    Ok((workload::ddp::simulate_step(spec, world, &gpu, &coll), summary))
}
