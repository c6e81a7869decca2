//! An nccl-tests-like sweep: for each size from `-b` to `-e` (times `-f`), one collective call,
//! simulated. Sizes are independent runs, so they are simulated in parallel (rayon) and
//! collected in order: the output does not depend on the thread count.

use rayon::prelude::*;

use crate::collective::{Collective, Mode, TimingParams, chain, nvls, p2p, pat, ring, tree};
use crate::comm::Communicator;
use crate::config::SweepSpec;
use crate::hw::Cluster;

/// One simulated size.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    /// Bytes per rank, as nccl-tests prints `size`.
    pub size_bytes: u64,
    /// Elements, as nccl-tests prints `count`.
    pub count: u64,
    /// Element type.
    pub dtype: &'static str,
    /// Reduction.
    pub redop: &'static str,
    /// Predicted time, µs (with the profile's size-band correction, if it has one).
    pub time_us: f64,
    /// The error band of `time_us` from the correction's residuals (equal to it without one).
    pub time_us_low: f64,
    /// Upper end of the band.
    pub time_us_high: f64,
    /// size / time, GB/s.
    pub algbw: f64,
    /// algbw × the collective's bus factor, GB/s.
    pub busbw: f64,
    /// Algorithm simulated.
    pub algo: &'static str,
    /// Protocol simulated.
    pub proto: &'static str,
    /// CUDA channels used.
    pub channels: usize,
    /// What NCCL's cost model would pick among everything enabled, as "ALGO/PROTO".
    pub nccl_choice: String,
}

/// Why a sweep cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// The collective has no model yet.
    #[error(
        "collective {0} is not simulated yet (all_reduce, all_gather and reduce_scatter so far)"
    )]
    Unsupported(&'static str),
    /// NCCL_ALGO leaves only algorithms NCCL itself would refuse here.
    #[error("NCCL_ALGO={0}: {1}")]
    Impossible(String, String),
    /// NCCL_ALGO excludes every algorithm collsim can run.
    #[error(
        "NCCL_ALGO={0}: none of these is simulated for this collective yet (Ring for all; Tree, NVLS on one node, NVLSTree and CollNet across nodes for all_reduce; PAT for all_gather and reduce_scatter)"
    )]
    NoRing(String),
}

/// The sizes nccl-tests would run for `spec`: from min to max, ×factor, each trimmed to whole
/// elements.
pub fn sizes(spec: &SweepSpec) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = spec.min_bytes.get().max(1);
    while s <= spec.max_bytes.get() {
        out.push(s);
        match s.checked_mul(spec.factor) {
            Some(n) => s = n,
            None => break,
        }
    }
    out
}

/// Checks that `spec` can be simulated on `comm`.
pub fn check_supported(spec: &SweepSpec, comm: &Communicator) -> Result<(), SweepError> {
    if matches!(spec.collective, Collective::AllToAll | Collective::SendRecv) {
        return Ok(());
    }
    let nnodes = comm.nnodes();
    let given = comm.env().given.get("NCCL_ALGO").cloned().unwrap_or_default();
    if let Err(why) = comm.check_algos(spec.collective) {
        return Err(SweepError::Impossible(given, why));
    }
    if !comm.env().algos.iter().any(|&a| crate::comm::simulated(spec.collective, a, nnodes)) {
        let given = comm.env().given.get("NCCL_ALGO").cloned().unwrap_or_default();
        return Err(SweepError::NoRing(given));
    }
    Ok(())
}

/// Simulates one call of `coll` on `bytes` (NCCL's count × element size) with the algorithm,
/// protocol and channels of `sel`.
#[allow(clippy::too_many_arguments)]
pub fn simulate_call(
    cluster: &Cluster,
    comm: &Communicator,
    coll: Collective,
    bytes: u64,
    elt: u64,
    sel: &crate::comm::Selection,
    params: &TimingParams,
    mode: Mode,
) -> ring::RingRun {
    if comm.nranks() == 1 {
        return one_rank(cluster, bytes, params);
    }
    match sel.algo {
        crate::comm::Algo::Nvls => {
            nvls::simulate_allreduce(cluster, comm, bytes, elt, sel, params, mode)
        }
        crate::comm::Algo::Tree
        | crate::comm::Algo::NvlsTree
        | crate::comm::Algo::CollNetChain
        | crate::comm::Algo::CollNetDirect => {
            tree::simulate_allreduce(cluster, comm, bytes, elt, sel, params, mode)
        }
        crate::comm::Algo::Pat => pat::simulate(coll, cluster, comm, bytes, params),
        _ if matches!(coll, Collective::Broadcast | Collective::Reduce) => {
            chain::simulate(coll, cluster, comm, bytes, elt, sel, params, mode)
        }
        _ => ring::simulate(coll, cluster, comm, bytes, elt, sel, params, mode),
    }
}

/// A call on one rank: NCCL copies the send buffer into the receive buffer (out of place, as
/// nccl-tests times it) — read and write at the GPU's memory bandwidth — after the call's
/// overhead. Without a known memory bandwidth, the overhead alone.
pub fn one_rank(cluster: &Cluster, bytes: u64, params: &TimingParams) -> ring::RingRun {
    let copy = match cluster.spec().gpu.model.memory_bandwidth {
        Some(bw) => crate::units::Time::from_secs_f64_ceil(2.0 * bytes as f64 / bw.bytes_per_sec()),
        None => crate::units::Time::ZERO,
    };
    ring::RingRun { time: params.call_overhead + copy, events: 0 }
}

/// The profile's size-band correction applied to a simulated time: (time, low, high).
fn corrected(params: &TimingParams, bytes: u64, time_us: f64) -> (f64, f64, f64) {
    match &params.correction {
        Some(c) => c.apply(bytes, time_us),
        None => (time_us, time_us, time_us),
    }
}

/// Simulates one size.
pub fn run_size(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &SweepSpec,
    size: u64,
    params: &TimingParams,
    mode: Mode,
) -> Row {
    let elt = spec.dtype.size();
    let coll = spec.collective;
    if matches!(coll, Collective::AllToAll | Collective::SendRecv) {
        // nccl-tests: SendRecv's count is the message; AllToAll's the per-peer count, trimmed
        // to 16 bytes per peer, its size the whole buffer.
        let n = comm.nranks() as u64;
        let (count, bytes) = match coll {
            Collective::AllToAll => {
                let per_peer = size / n / 16 * 16;
                (per_peer / elt, per_peer / elt * elt * n)
            }
            _ => (size / elt, size / elt * elt),
        };
        let mut r = p2p::simulate(coll, cluster, comm, bytes, params);
        if n == 1 {
            r.run = one_rank(cluster, bytes, params);
        }
        let (time_us, time_us_low, time_us_high) = corrected(params, bytes, r.run.time.as_us());
        let algbw = if time_us > 0.0 { bytes as f64 / time_us / 1e3 } else { 0.0 };
        return Row {
            size_bytes: bytes,
            count,
            dtype: spec.dtype.name(),
            redop: "none",
            time_us,
            time_us_low,
            time_us_high,
            algbw,
            busbw: algbw * coll.busbw_factor(comm.nranks()),
            algo: "P2P",
            proto: r.proto.name(),
            channels: r.channels,
            nccl_choice: "P2P".into(),
        };
    }
    // nccl-tests' size column and NCCL's byte count: per-rank counts for AllGather and
    // ReduceScatter (trimmed to 16 bytes per rank), total counts otherwise.
    let (count, bytes) = match coll {
        Collective::AllGather | Collective::ReduceScatter => {
            let n = comm.nranks() as u64;
            let per_rank = size / n / 16 * 16;
            let count = per_rank / elt;
            (count, count * elt * n)
        }
        _ => {
            let count = size / elt;
            (count, count * elt)
        }
    };
    let sel = comm.select(coll, bytes);
    let run = simulate_call(cluster, comm, coll, bytes, elt, &sel, params, mode);
    let (time_us, time_us_low, time_us_high) = corrected(params, bytes, run.time.as_us());
    let algbw = if time_us > 0.0 { bytes as f64 / time_us / 1e3 } else { 0.0 };
    Row {
        size_bytes: bytes,
        count,
        dtype: spec.dtype.name(),
        // nccl-tests prints "none" for collectives that do not reduce.
        redop: if matches!(coll, Collective::AllGather | Collective::Broadcast) {
            "none"
        } else {
            spec.op.name()
        },
        time_us,
        time_us_low,
        time_us_high,
        algbw,
        busbw: algbw * spec.collective.busbw_factor(comm.nranks()),
        algo: sel.algo.name(),
        proto: sel.proto.name(),
        channels: sel.nchannels,
        nccl_choice: sel
            .nccl_choice
            .map_or_else(|| "-".to_string(), |(a, p)| format!("{}/{}", a.name(), p.name())),
    }
}

/// Simulates every size of the sweep, in parallel, in order.
pub fn run(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &SweepSpec,
    params: &TimingParams,
    mode: Mode,
) -> Result<Vec<Row>, SweepError> {
    check_supported(spec, comm)?;
    Ok(sizes(spec).par_iter().map(|&s| run_size(cluster, comm, spec, s, params, mode)).collect())
}
