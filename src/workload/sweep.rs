//! An nccl-tests-like sweep: for each size from `-b` to `-e` (times `-f`), one collective call,
//! simulated. Sizes are independent runs, so they are simulated in parallel (rayon) and
//! collected in order: the output does not depend on the thread count.

use rayon::prelude::*;

use crate::collective::{self, Call, CallRun, Collective, Load, Mode, TimingParams};
use crate::comm::Communicator;
use crate::hw::Cluster;
use crate::units::Bytes;
use crate::workload::ddp::Backend;
use crate::workload::{DataType, ReduceOp};

/// An nccl-tests-like sweep: sizes from `min_bytes` to `max_bytes`, each `factor` times the last.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepSpec {
    /// The collective.
    pub collective: Collective,
    /// First size (bytes per rank, as nccl-tests' `-b`).
    #[serde(serialize_with = "ser_bytes")]
    pub min_bytes: Bytes,
    /// Last size (`-e`).
    #[serde(serialize_with = "ser_bytes")]
    pub max_bytes: Bytes,
    /// Multiplicative step (`-f`).
    pub factor: u64,
    /// Element type (`-d`).
    pub dtype: DataType,
    /// Reduction (`-o`).
    pub op: ReduceOp,
    /// The process group's backend: NCCL (nccl-tests' own), or Gloo (each size as
    /// `torch.distributed` on `backend="gloo"` runs it on CUDA tensors).
    #[serde(skip_serializing_if = "Backend::is_nccl")]
    pub backend: Backend,
    /// A barrier (`torch.distributed.barrier()`): NCCL's all-reduce of one float, whatever
    /// sizes were given.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub barrier: bool,
}

fn ser_bytes<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(b.get())
}

impl SweepSpec {
    /// One size of `collective` (a sum where it reduces), as a DDP step calls it.
    pub fn one(collective: Collective, bytes: u64, dtype: DataType) -> SweepSpec {
        SweepSpec {
            collective,
            min_bytes: Bytes::new(bytes),
            max_bytes: Bytes::new(bytes),
            factor: 2,
            dtype,
            op: ReduceOp::Sum,
            backend: Backend::Nccl,
            barrier: false,
        }
    }

    /// The names a sweep takes for its collective: nccl-tests' ([`Collective::NAMES`]) and
    /// "barrier".
    pub fn names() -> Vec<&'static str> {
        Collective::NAMES.into_iter().chain(["barrier"]).collect()
    }

    /// Sets the collective from one of [`SweepSpec::names`] (or nccl-tests' other spellings);
    /// a barrier is NCCL's all-reduce of one float, as PyTorch's `barrier()` runs it on NCCL,
    /// whatever sizes, type and reduction were given. False for a name it does not know.
    pub fn set_collective(&mut self, name: &str) -> bool {
        self.barrier = name.trim().eq_ignore_ascii_case("barrier");
        if self.barrier {
            let one = Bytes::new(super::calls::BARRIER_BYTES);
            (self.collective, self.min_bytes, self.max_bytes) = (Collective::AllReduce, one, one);
            (self.dtype, self.op) = (DataType::Float, ReduceOp::Sum);
            return true;
        }
        match Collective::parse(name) {
            Some(c) => {
                self.collective = c;
                true
            }
            None => false,
        }
    }

    /// Checks the sweep's own consistency; `Err` holds the field and the reason.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_bytes > MAX_CALL_BYTES {
            return Err((
                "workload.max_bytes",
                format!(
                    "{} is larger than {MAX_CALL_BYTES}, more than any GPU holds (and the sweep would run for ever)",
                    self.max_bytes
                ),
            ));
        }
        if self.max_bytes.get() == 0 {
            return Err((
                "workload.max_bytes",
                "0 B: no size to run (sizes start at 1 byte, as nccl-tests' do)".into(),
            ));
        }
        if self.min_bytes > self.max_bytes {
            return Err((
                "workload.min_bytes",
                format!("{} is larger than max_bytes {}", self.min_bytes, self.max_bytes),
            ));
        }
        if self.factor < 2 {
            return Err(("workload.factor", format!("must be at least 2 (got {})", self.factor)));
        }
        Ok(())
    }
}

/// The largest call a sweep, `explain` or `validate` simulates: 1 TiB, beyond any GPU's
/// memory. The detailed simulation's work grows with the bytes, so a size like 2^62 would
/// never finish.
pub const MAX_CALL_BYTES: Bytes = Bytes::new(1 << 40);

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
    #[serde(rename = "algbw_gbyte_per_s")]
    pub algbw: f64,
    /// algbw × the collective's bus factor, GB/s.
    #[serde(rename = "busbw_gbyte_per_s")]
    pub busbw: f64,
    /// Algorithm simulated.
    pub algo: &'static str,
    /// Protocol simulated.
    pub proto: &'static str,
    /// CUDA channels used.
    pub channels: usize,
    /// The algorithm NCCL's cost model would pick among everything enabled ("P2P" for
    /// point-to-point calls, "-" when nothing is enabled).
    pub nccl_algo: &'static str,
    /// Its protocol ("-" when nothing is enabled).
    pub nccl_proto: &'static str,
    /// How it was simulated: "detailed" (every rank, channel and chunk) or "aggregated".
    pub simulated: &'static str,
    /// The line of NCCL_TUNER_CONFIG_FILE whose row set the algorithm and protocol, if one did.
    pub tuner_line: Option<usize>,
}

impl Row {
    /// NCCL's choice as its logs write it, "ALGO/PROTO" ("P2P/…", or "-").
    pub fn nccl_choice(&self) -> String {
        choice_text(self.nccl_algo, self.nccl_proto)
    }
}

/// An algorithm and protocol as NCCL's logs write them together, "ALGO/PROTO" ("-" for none).
pub fn choice_text(algo: &str, proto: &str) -> String {
    if algo.is_empty() || algo == "-" { "-".into() } else { format!("{algo}/{proto}") }
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
    /// `--mode detailed` over more work than a run may take.
    #[error("{0}")]
    TooMuchWork(String),
    /// A simulated time that no longer fits (a link far too slow, a size far too large).
    #[error("{0}")]
    Overflow(String),
    /// NCCL_ALGO excludes every algorithm collsim can run.
    #[error(
        "NCCL_ALGO={0}: none of these is simulated for this collective yet (Ring for all; Tree, NVLS on one node, NVLSTree and CollNet across nodes for all_reduce; PAT for all_gather and reduce_scatter)"
    )]
    NoRing(String),
}

/// The sizes nccl-tests would run for `spec`: from min to max, ×factor, each trimmed to whole
/// elements.
pub fn sizes(spec: &SweepSpec) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let mut s = spec.min_bytes.get().max(1);
    let whole = |b: u64| b / spec.dtype.size();
    while s <= spec.max_bytes.get() {
        // Sizes below an element trim to the same count (1 and 2 bytes of float are both 0):
        // one row for each.
        if out.last().is_none_or(|&p| whole(p) != whole(s)) {
            out.push(s);
        }
        match s.checked_mul(spec.factor) {
            Some(n) => s = n,
            None => break,
        }
    }
    out
}

/// Checks that calls of `coll` can be simulated on `comm` (NCCL_ALGO allows one collsim runs).
pub fn check_supported(coll: Collective, comm: &Communicator) -> Result<(), SweepError> {
    if collective::is_p2p(coll) {
        return Ok(());
    }
    let nnodes = comm.nnodes();
    let given = comm.env().given.get("NCCL_ALGO").cloned().unwrap_or_default();
    if let Err(why) = comm.check_algos(coll) {
        return Err(SweepError::Impossible(given, why));
    }
    if !comm.env().algos_for(coll).iter().any(|&a| collective::is_simulated(coll, a, nnodes)) {
        return Err(SweepError::NoRing(given));
    }
    Ok(())
}

/// nccl-tests' count and NCCL's byte count for a row of `size` bytes: per-rank counts for
/// AllGather and ReduceScatter (trimmed to 16 bytes per rank) and AllToAll's per-peer count
/// (trimmed to 16 bytes per peer, its size the whole buffer); total counts otherwise.
pub fn counts(coll: Collective, size: u64, elt: u64, nranks: usize) -> (u64, u64) {
    let n = nranks as u64;
    match coll {
        Collective::AllToAll => {
            let per_peer = size / n / 16 * 16;
            (per_peer / elt, per_peer / elt * elt * n)
        }
        Collective::AllGather | Collective::ReduceScatter => {
            let count = size / n / 16 * 16 / elt;
            (count, count * elt * n)
        }
        _ => (size / elt, size / elt * elt),
    }
}

/// The call a row of `size` bytes makes, with everything else as given.
pub fn call<'a>(
    cluster: &'a Cluster,
    comm: &'a Communicator,
    spec: &SweepSpec,
    size: u64,
    params: &'a TimingParams,
    mode: Mode,
    load: &'a [Load],
) -> Call<'a> {
    let elt = spec.dtype.size();
    let (_, bytes) = counts(spec.collective, size, elt, comm.nranks());
    Call {
        cluster,
        comm,
        coll: spec.collective,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(elt),
        sel: collective::select(comm, spec.collective, bytes),
        params,
        mode,
        load,
    }
}

/// The row nccl-tests would print for `call` (of a row of `size`), timed as `run`.
pub fn row(spec: &SweepSpec, call: &Call<'_>, run: &CallRun) -> Row {
    let (coll, comm) = (spec.collective, call.comm);
    let bytes = call.bytes.get();
    let count = count_of(spec, bytes, comm.nranks());
    let p2p = collective::is_p2p(coll);
    let sel = &call.sel;
    let algo = if p2p { "P2P" } else { sel.algo.name() };
    let (time_us, time_us_low, time_us_high) = collective::run::corrected(call, run);
    let algbw = if time_us > 0.0 { bytes as f64 / time_us / 1e3 } else { 0.0 };
    Row {
        size_bytes: bytes,
        count,
        dtype: spec.dtype.name(),
        redop: redop_of(spec),
        time_us,
        time_us_low,
        time_us_high,
        algbw,
        busbw: algbw * coll.busbw_factor(comm.nranks()),
        algo,
        proto: run.proto.name(),
        channels: run.channels,
        nccl_algo: match sel.nccl_choice {
            _ if p2p => "P2P",
            Some((a, _)) => a.name(),
            None => "-",
        },
        nccl_proto: match sel.nccl_choice {
            _ if p2p => run.proto.name(),
            Some((_, p)) => p.name(),
            None => "-",
        },
        simulated: run.form.name(),
        tuner_line: sel.tuner_line,
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
    let call = call(cluster, comm, spec, size, params, mode, &[]);
    row(spec, &call, &collective::simulate(&call))
}

/// Simulates every size of the sweep, in parallel, in order.
pub fn run(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &SweepSpec,
    params: &TimingParams,
    mode: Mode,
) -> Result<Vec<Row>, SweepError> {
    run_beside(cluster, comm, spec, params, mode, |_| &[], &|| {})
}

/// nccl-tests' count of elements for `bytes`: per rank (AllGather, ReduceScatter) or per peer
/// (AllToAll) on `n` ranks.
fn count_of(spec: &SweepSpec, bytes: u64, n: usize) -> u64 {
    match spec.collective {
        Collective::AllToAll | Collective::AllGather | Collective::ReduceScatter => {
            bytes / spec.dtype.size() / n as u64
        }
        _ => bytes / spec.dtype.size(),
    }
}

/// nccl-tests' reduction column: "none" for collectives that do not reduce.
fn redop_of(spec: &SweepSpec) -> &'static str {
    let c = spec.collective;
    if collective::is_p2p(c) || matches!(c, Collective::AllGather | Collective::Broadcast) {
        "none"
    } else {
        spec.op.name()
    }
}

/// A sweep on Gloo ([`crate::collective::gloo`]): each size copied to host memory over the
/// GPUs' PCIe paths, Gloo's ring over TCP, copied back; as nccl-tests would print it.
pub fn gloo_rows(cluster: &Cluster, comm: &Communicator, spec: &SweepSpec) -> Vec<Row> {
    use crate::collective::gloo::{self, GlooAlgo, GlooNet};
    let net = GlooNet::of(cluster, comm.ppn());
    let n = comm.nranks();
    sizes(spec)
        .into_iter()
        .map(|bytes| {
            let c = spec.collective;
            let t = gloo::time(&net, c, bytes, n, comm.nnodes(), GlooAlgo::Ring);
            let time_us = t.total * 1e6;
            let algbw = if time_us > 0.0 { bytes as f64 / time_us / 1e3 } else { 0.0 };
            Row {
                size_bytes: bytes,
                count: count_of(spec, bytes, n),
                dtype: spec.dtype.name(),
                redop: redop_of(spec),
                time_us,
                time_us_low: time_us,
                time_us_high: time_us,
                algbw,
                busbw: algbw * c.busbw_factor(n),
                algo: "GLOO",
                proto: "TCP",
                channels: 0,
                // Gloo's own choice: no NCCL here.
                nccl_algo: "GLOO",
                nccl_proto: "TCP",
                simulated: "gloo",
                tuner_line: None,
            }
        })
        .collect()
}

/// As [`run`], each size beside the traffic `load(i)` gives for the i-th size; `tick` is called
/// once per size simulated (for a progress bar).
pub fn run_beside<'l>(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &SweepSpec,
    params: &TimingParams,
    mode: Mode,
    load: impl Fn(usize) -> &'l [Load] + Sync,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<Row>, SweepError> {
    check_supported(spec.collective, comm)?;
    let sizes = sizes(spec);
    if mode == Mode::Detailed {
        let calls = sizes.iter().enumerate();
        collective::run::check_detailed(
            calls.map(|(i, &b)| call(cluster, comm, spec, b, params, mode, load(i))),
        )
        .map_err(SweepError::TooMuchWork)?;
    }
    (0..sizes.len())
        .into_par_iter()
        .map(|i| {
            let call = call(cluster, comm, spec, sizes[i], params, mode, load(i));
            let run = collective::simulate(&call);
            let what = format!("{} of {}", spec.collective.name(), Bytes::new(sizes[i]));
            run.time.check(&what).map_err(SweepError::Overflow)?;
            let r = row(spec, &call, &run);
            tick();
            Ok(r)
        })
        // Every size runs; the first error in size order is reported, whatever the threads.
        .collect::<Vec<Result<Row, SweepError>>>()
        .into_iter()
        .collect()
}
