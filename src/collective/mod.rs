//! Collectives: from a [`Call`] (collective, bytes, algorithm, protocol, channels) to steps,
//! chunks and slices, and from those to flows on the network, driven by the engine's one event
//! loop. One file per algorithm, each a type implementing [`Algorithm`]; [`run`] is the one
//! place that knows which exist ([`simulate`], [`select`], [`steady_paths`]).

pub mod chain;
pub mod explain;
pub mod gloo;
pub mod nvls;
pub mod p2p;
pub mod pat;
pub mod ring;
pub mod run;
pub mod symmetry;
pub mod tree;

pub use run::{
    Algorithm, Bottleneck, Call, CallId, CallRun, Ctx, Form, FormId, Load, Notice, ProxyLoad,
    Shared, Signal, SteadyForm, Token, bottleneck, in_place_no_op, is_p2p, is_simulated,
    near_empty, proxy_load, select, simulate, simulate_inspected, simulate_together, steady_load,
    steady_paths,
};

pub use crate::comm::Collective;
use crate::comm::{HopClass, Proto};
use crate::hw::Arch;
use crate::units::Time;

/// The setup a profile was calibrated on: its values (bandwidth fractions, latencies, size-band
/// factors) hold for that machine and NCCL release.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FittedOn {
    /// The topology (preset or file name).
    pub topology: String,
    /// The GPU model, as the GPU library names it.
    pub gpu: String,
    /// The NCCL release of the fitted logs (or of the tables the fit ran with).
    pub nccl: String,
}

/// The timing parameters of the mechanistic model (a calibration profile's content).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TimingParams {
    /// Profile name.
    pub name: String,
    /// Where the numbers come from.
    pub source: String,
    /// The setup a calibrated profile was fitted on (profile `[fitted_on]`), which a run on
    /// another is warned of; `None` for a profile not fitted to one machine.
    pub fitted_on: Option<FittedOn>,
    /// Fixed cost of one collective call as nccl-tests times it, paid once per process (NCCL's
    /// host-side enqueue of the group and the completion), added once per call.
    #[serde(serialize_with = "ser_time")]
    pub call_overhead: Time,
    /// Host cost of launching one GPU's kernel of a call (profile `overhead.launch`). A process
    /// driving N GPUs (nccl-tests `-g N`) launches them one after the other, so a call costs
    /// [`TimingParams::call_cost`]: `call_overhead + N × launch`. Zero in profiles without it.
    #[serde(serialize_with = "ser_time")]
    pub launch: Time,
    /// Serial cost of each peer of a point-to-point group (profile `overhead.peer`): NCCL
    /// schedules a group's sends and receives peer by peer (one round per peer, self included),
    /// and a SendRecv or AllToAll takes this much longer per round. Zero in profiles without
    /// it.
    #[serde(serialize_with = "ser_time")]
    pub p2p_peer: Time,
    /// Per-slice protocol latency (synchronisation, flag polling, proxy post) by hop class
    /// (NVLink, PCIe, network) and protocol (LL, LL128, Simple).
    #[serde(serialize_with = "ser_lat")]
    pub step_latency: [[Time; 3]; 3],
    /// Effective bandwidth of each link class (NVLink, PCIe, network) as a fraction of the
    /// topology's figure; 1 unless a calibration fitted it.
    pub bandwidth: [f64; 3],
    /// The NVSwitch's multicast and in-switch reduction rate (NVLS, NVLSTree) as a fraction of
    /// NCCL's figure (profile `bandwidth.nvls`); 1 unless a profile gives it. Apart from
    /// `bandwidth`'s NVLink fraction, which is point-to-point NVLink traffic.
    pub nvls_bandwidth: f64,
    /// Parameters of GPU architectures without their own entry in `gpu`.
    pub gpu_default: GpuParams,
    /// Per GPU architecture.
    pub gpu: Vec<(Arch, GpuParams)>,
    /// Size-band corrections fitted by `collsim calibrate`, if the profile has them.
    pub correction: Option<SizeCorrection>,
}

/// Measured-over-model factors by size band (the SimGrid SMPI idea), fitted on real curves, with
/// the spread of what is left in each band: one set of bands per mechanism (algorithm and
/// protocol) the fit logs ran, and one for every other mechanism. A factor fitted where NCCL
/// runs NVLSTree says nothing of a ring at the same sizes, so a collective whose sizes run
/// another mechanism than the fit logs' gets that mechanism's bands, or the others' (factor 1
/// in a calibrated profile: the fitted parameters alone, with the model's own misfit as its
/// error band).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SizeCorrection {
    /// Every mechanism without bands of its own.
    pub others: Bands,
    /// Per mechanism ("RING/LL128", "NVLS_TREE/SIMPLE", "P2P/SIMPLE": the algorithm and
    /// protocol as `validate` prints them), in name order.
    pub mechanisms: Vec<(String, Bands)>,
    /// The logs the factors were fitted on.
    pub fitted_on: Vec<String>,
}

/// Size bands, each with its time multiplier and residual spread.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Bands {
    /// Each band's lowest NCCL byte count, ascending; the others' first is 0, a mechanism's
    /// the lowest band its fit sizes reached.
    pub bands: Vec<u64>,
    /// Per band: the time multiplier (the geometric median of measured / model).
    pub factor: Vec<f64>,
    /// Per band: the 95th percentile of |ln(measured / corrected)| on the fit data, the
    /// half-width of the error band in log space.
    pub residual: Vec<f64>,
}

impl Bands {
    /// The band of a call of `bytes`.
    pub fn band(&self, bytes: u64) -> usize {
        self.bands.iter().rposition(|&b| b <= bytes).unwrap_or(0)
    }
}

impl SizeCorrection {
    /// The bands that apply to a call of `bytes` run by `mechanism` ("ALGO/PROTO"): its own
    /// from their first band up, else the others'.
    pub fn bands_for(&self, mechanism: &str, bytes: u64) -> &Bands {
        self.mechanisms
            .iter()
            .find(|(m, b)| m == mechanism && b.bands.first().is_some_and(|&lo| lo <= bytes))
            .map_or(&self.others, |(_, b)| b)
    }

    /// Corrects `time_us` of a call of `bytes` run by `mechanism`: the corrected time and its
    /// error band (low, high).
    pub fn apply(&self, mechanism: &str, bytes: u64, time_us: f64) -> (f64, f64, f64) {
        let k = self.bands_for(mechanism, bytes);
        let b = k.band(bytes);
        let t = time_us * k.factor[b];
        let r = k.residual[b];
        (t, t * (-r).exp(), t * r.exp())
    }
}

/// The parameters that depend on the GPU generation: how the CTA that moves a channel's data
/// behaves.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GpuParams {
    /// Serial cost the sending CTA pays on a peer-to-peer hop (NVLink, PCIe) each time it
    /// publishes data — after every slice under Simple (fence, then the tail post), after the
    /// last slice of each step under LL and LL128 (moving on to the next FIFO slot). The
    /// channel sends nothing meanwhile. Network hops are driven by the proxy and skip it.
    #[serde(serialize_with = "ser_per_proto")]
    pub sync: [Time; 3],
    /// Payload efficiency of each protocol on NVLink: data bytes per byte on the wire.
    pub nvlink_efficiency: [f64; 3],
    /// Fixed cost of an NVLS call beyond the chunk pipeline (the barriers through the switch
    /// at its start and end).
    pub nvls_call: Time,
    /// The most one channel moves of a point-to-point transfer between two GPUs of a node
    /// (bytes/s; infinity where unmeasured): the channel's CTA splits its warps between its
    /// sends and receives, and what their loads and stores keep in flight over the hop's
    /// latency bounds its rate (profile `p2p_channel`).
    #[serde(serialize_with = "ser_rate")]
    pub p2p_channel: f64,
}

impl GpuParams {
    /// NCCL's nominal view: no serial cost, payload efficiency from the wire format alone.
    pub const NOMINAL: GpuParams = GpuParams {
        sync: [Time::ZERO; 3],
        nvlink_efficiency: [
            Proto::LL.payload_efficiency(),
            Proto::LL128.payload_efficiency(),
            Proto::Simple.payload_efficiency(),
        ],
        nvls_call: Time::ZERO,
        p2p_channel: f64::INFINITY,
    };
}

fn ser_rate<S: serde::Serializer>(r: &f64, s: S) -> Result<S::Ok, S::Error> {
    if r.is_finite() {
        s.collect_str(&format_args!("{} GB/s", r / 1e9))
    } else {
        s.serialize_none()
    }
}

fn by_proto(t: &[Time; 3]) -> std::collections::BTreeMap<&'static str, String> {
    Proto::ALL.iter().zip(t).map(|(p, t)| (p.name(), t.to_string())).collect()
}

fn ser_per_proto<S: serde::Serializer>(t: &[Time; 3], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&by_proto(t), s)
}

fn ser_time<S: serde::Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(t)
}

fn ser_lat<S: serde::Serializer>(t: &[[Time; 3]; 3], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(3))?;
    for (class, row) in HopClass::ALL.iter().zip(t) {
        m.serialize_entry(class.name(), &by_proto(row))?;
    }
    m.end()
}

impl TimingParams {
    /// The fixed cost of one call when each process drives `gpus_per_process` GPUs: the
    /// per-process call overhead and one kernel launch per GPU, serialised on the host.
    pub fn call_cost(&self, gpus_per_process: usize) -> Time {
        self.call_overhead + self.launch.times(gpus_per_process as u64)
    }

    /// The per-slice latency of a hop of `class` under `proto`.
    pub fn step(&self, class: HopClass, proto: Proto) -> Time {
        self.step_latency[class as usize][proto as usize]
    }

    /// Data bytes per byte of a hop's capacity for a hop of `class` under `proto` on GPUs of
    /// `arch`: the protocol's payload efficiency (on NVLink, the architecture's measured one)
    /// times the class's fitted bandwidth fraction.
    pub fn efficiency(&self, arch: Arch, class: HopClass, proto: Proto) -> f64 {
        let payload = match class {
            HopClass::Nvlink => self.gpu(arch).nvlink_efficiency[proto as usize],
            _ => proto.payload_efficiency(),
        };
        payload * self.bandwidth[class as usize]
    }

    /// NVLS payload efficiency through the NVSwitch: NCCL's per-architecture figure times the
    /// profile's `bandwidth.nvls`. The NVLink bandwidth fraction does not apply: NVLS is the
    /// switch's multicast and reduction, whose rate is not that of point-to-point NVLink
    /// traffic (fitting one curve of each shows it: an NVLS all_reduce and a ring all_gather on
    /// one A3 Mega pull the fraction apart).
    pub fn nvls_efficiency(&self, arch: Arch) -> f64 {
        (crate::comm::tuning::nvls_efficiency(arch) * self.nvls_bandwidth).max(1e-3)
    }

    /// The parameters of GPUs of `arch`.
    pub fn gpu(&self, arch: Arch) -> &GpuParams {
        self.gpu.iter().find(|(a, _)| *a == arch).map_or(&self.gpu_default, |(_, p)| p)
    }
}

/// How much of the machine is simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every rank and channel, every chunk a flow, rates re-shared whenever a flow starts or
    /// ends — for every algorithm.
    Detailed,
    /// Every algorithm in its aggregated form: a symmetric run (one representative per checked
    /// class of equivalent ranks, channels or pipelines, on the network: the detailed result;
    /// see [`symmetry`]) where it applies within its budget, else steady-state max-min rates
    /// or a pipeline estimate from them.
    Aggregated,
    /// Detailed where the event simulation is small (ring and tree calls of at most 100,000
    /// transfers), aggregated beyond and for the algorithms timed in closed form.
    Auto,
}

impl Mode {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Detailed => "detailed",
            Mode::Aggregated => "aggregated",
            Mode::Auto => "auto",
        }
    }
}
