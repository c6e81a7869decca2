//! One call taken apart, for `collsim explain`: NCCL's cost table (every algorithm × protocol
//! with its modelled latency and bandwidth, or why it is disabled), NCCL's choice, what collsim
//! runs, and the simulated time split into its latency part ([`super::near_empty`]) and the
//! time moving the bytes, with the link that bounds it. `report::explain` formats it.

use crate::comm::{Algo, Communicator, Proto};
use crate::hw::Cluster;
use crate::units::Bytes;

use crate::collective::{self, Call, Collective, Mode, TimingParams};

/// One entry of NCCL's cost table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CostRow {
    /// Algorithm.
    pub algo: &'static str,
    /// Protocol.
    pub proto: &'static str,
    /// NCCL's modelled latency, µs (None when disabled).
    pub latency_us: Option<f64>,
    /// NCCL's modelled algorithm bandwidth, GB/s.
    pub bandwidth_gbyte_per_s: Option<f64>,
    /// NCCL's predicted time for this call, µs.
    pub time_us: Option<f64>,
    /// Why NCCL would not run it.
    pub disabled: Option<String>,
}

/// An algorithm and protocol, as NCCL names them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Choice {
    /// "RING", "TREE", "NVLS", …
    pub algo: &'static str,
    /// "LL", "LL128" or "SIMPLE".
    pub proto: &'static str,
}

/// What collsim simulates for the call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Simulated {
    /// Algorithm ("P2P" for point-to-point calls).
    pub algo: &'static str,
    /// Protocol.
    pub proto: &'static str,
    /// CUDA channels.
    pub channels: usize,
}

/// The link that bounds the call in steady state.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bottleneck {
    /// Link class (nvlink, pcie, sys, net).
    pub class: String,
    /// Capacity, GB/s.
    pub capacity_gbyte_per_s: f64,
    /// Flows sharing it when every channel sends.
    pub flows: usize,
    /// Each flow's share, GB/s.
    pub per_flow_gbyte_per_s: f64,
    /// Whether the slowest flow runs at its channel's cap, below its share of the link.
    pub channel_capped: bool,
}

/// Everything `explain` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Explanation {
    /// The collective.
    pub collective: Collective,
    /// NCCL's byte count for the call.
    pub bytes: u64,
    /// Ranks, nodes.
    pub nranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// NCCL's cost table.
    pub table: Vec<CostRow>,
    /// NCCL's choice (None when every algorithm is disabled, or for point-to-point calls).
    pub nccl_choice: Option<Choice>,
    /// What collsim simulates.
    pub simulated: Simulated,
    /// How: "detailed", "symmetric" or "aggregated".
    pub form: &'static str,
    /// Simulated time, µs.
    pub time_us: f64,
    /// The time of the same call with a near-empty buffer: call overhead and latency steps.
    pub latency_part_us: f64,
    /// The rest: moving the bytes.
    pub bandwidth_part_us: f64,
    /// The bounding link, where collsim can say.
    pub bottleneck: Option<Bottleneck>,
    /// A ring across nodes on a transport with a costly network proxy: its cost per network
    /// send or receive (µs) and how many the busiest GPU's proxy handles per ring step.
    pub network_proxy: Option<NetworkProxy>,
}

/// The network proxies' part of a call (see `collsim::collective::proxy_load`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct NetworkProxy {
    /// One network send or receive, µs.
    pub op_us: f64,
    /// Sends and receives the busiest GPU's proxy handles per ring step, over all channels.
    pub ops_per_step: usize,
    /// Network messages each connection sends (a step each, a slice under Simple).
    pub messages_per_connection: usize,
    /// The busiest proxy's time over the call, µs: a lower bound on the call's.
    pub busy_us: f64,
}

impl Explanation {
    /// Explains one call of `coll` on `bytes`.
    pub fn new(
        cluster: &Cluster,
        comm: &Communicator,
        coll: Collective,
        bytes: u64,
        elt: u64,
        params: &TimingParams,
        mode: Mode,
    ) -> Result<Explanation, String> {
        let p2p = collective::is_p2p(coll);
        let t = comm.tuning();
        let mut table = Vec::new();
        // SendRecv and AllToAll: NCCL selects no algorithm; the calls run on its p2p channels.
        for a in Algo::ALL.iter().filter(|_| !p2p) {
            for p in Proto::ALL {
                let disabled = comm.disabled_reason(coll, *a, p);
                let c = t.cost(coll, *a, p);
                let on = disabled.is_none();
                table.push(CostRow {
                    algo: a.name(),
                    proto: p.name(),
                    latency_us: on.then_some(c.lat_us),
                    bandwidth_gbyte_per_s: on.then_some(c.bw),
                    time_us: if on { t.time_us(coll, *a, p, bytes) } else { None },
                    disabled,
                });
            }
        }
        let sel = collective::select(comm, coll, bytes);
        let call = Call {
            cluster,
            comm,
            coll,
            bytes: Bytes::new(bytes),
            elt: Bytes::new(elt),
            sel,
            params,
            mode,
            load: &[],
        };
        collective::run::check_detailed([call])?;
        let run = collective::simulate(&call);
        let lat = collective::simulate(&collective::near_empty(&call));
        let time_us = run.time.as_us();
        let latency_part_us = lat.time.as_us().min(time_us);
        Ok(Explanation {
            collective: coll,
            bytes,
            nranks: comm.nranks(),
            nodes: comm.nnodes(),
            table,
            nccl_choice: sel
                .nccl_choice
                .filter(|_| !p2p)
                .map(|(a, p)| Choice { algo: a.name(), proto: p.name() }),
            simulated: Simulated {
                algo: if p2p { "P2P" } else { sel.algo.name() },
                proto: run.proto.name(),
                channels: run.channels,
            },
            network_proxy: collective::proxy_load(&call).map(|l| NetworkProxy {
                op_us: l.op.as_us(),
                ops_per_step: l.per_step,
                messages_per_connection: l.messages,
                busy_us: l.busy().as_us(),
            }),
            form: run.form.name(),
            time_us,
            latency_part_us,
            bandwidth_part_us: time_us - latency_part_us,
            bottleneck: collective::bottleneck(&call).map(|b| Bottleneck {
                class: b.class.to_string(),
                capacity_gbyte_per_s: b.capacity / 1e9,
                flows: b.flows,
                per_flow_gbyte_per_s: b.per_flow / 1e9,
                channel_capped: b.channel_capped,
            }),
        })
    }
}
