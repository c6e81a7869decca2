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
//!   flows on the [`net`]work (max-min fair sharing). Every algorithm is one type implementing
//!   [`collective::Algorithm`], registered in `collective/run.rs`, and runs in the [`engine`]'s
//!   one deterministic loop ([`engine::Simulation`]: clock, events, network), where several
//!   calls and background traffic can share the links. NCCL's latency numbers choose; the
//!   simulation times.
//! * [`workload`] issues the calls (an nccl-tests-like sweep, a DDP step, several jobs side by
//!   side with background traffic); [`sim`] puts a [`config::Scenario`] together (its cluster,
//!   communicator, process groups and collective timer) and runs its workload; [`plan`] sizes
//!   clusters over it, [`calibrate`] reads real nccl-tests logs, fits profiles and measures the
//!   model's error against them, and [`report`] formats the results (in the [`version`]ed JSON
//!   format).
//!
//! Each layer knows only the ones below it: the engine knows nothing of GPUs, the network
//! knows links and flows but not collectives. A test (`tests/it/modules.rs`) fails on an import
//! cycle between these modules, and on a module that reaches back to this root, which only
//! re-exports the entry points of [`sim`].

#![warn(missing_docs)]

pub mod calibrate;
pub mod collective;
pub mod comm;
pub mod config;
pub mod engine;
pub mod grid;
pub mod hw;
pub mod net;
pub mod plan;
pub mod report;
pub mod sim;
pub mod units;
pub mod version;
pub mod workload;

pub use sim::{
    CollCache, Error, GroupKey, JobOutcome, JobRun, PlacementError, build, check_ranks,
    export_calls, job_calls, profile_mismatch, simulate, simulate_ddp, simulate_ddp_cached,
    simulate_ddp_shared, simulate_ddp_with_links, simulate_jobs, simulate_jobs_with, simulate_with,
};
pub use workload::KERNEL_LAUNCH_SECS;
