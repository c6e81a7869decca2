//! `collsim explain`: one call taken apart — NCCL's cost table (every algorithm × protocol with
//! its modelled latency and bandwidth, or why it is disabled), NCCL's choice, what collsim
//! runs, and the simulated time split into its latency-bound and bandwidth-bound parts with the
//! link that bounds it.

use std::io::{self, Write};

use crate::collective::{self, Call, Collective, Mode, TimingParams};
use crate::comm::{Algo, Communicator, Proto};
use crate::hw::Cluster;
use crate::units::Bytes;

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

    /// The text form.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "{} of {} bytes on {} ranks ({} node(s))",
            self.collective.name(),
            self.bytes,
            self.nranks,
            self.nodes
        )?;
        writeln!(out)?;
        if self.table.is_empty() {
            writeln!(
                out,
                "point-to-point: NCCL selects no algorithm; every peer pair runs on its p2p channels (LL up to 16 KiB per peer, Simple above)"
            )?;
        } else {
            self.write_cost_table(out)?;
        }
        let Simulated { algo: a, proto: p, channels: ch } = &self.simulated;
        let how = match self.form {
            "detailed" => "every rank, channel and chunk",
            "symmetric" => {
                "one representative per checked class of equivalent ranks, channels or pipelines: \
                 the detailed result"
            }
            _ => "steady-state rates or a pipeline estimate",
        };
        writeln!(out, "collsim simulates: {a}/{p} on {ch} channel(s), {} ({how})", self.form)?;
        writeln!(out)?;
        writeln!(
            out,
            "simulated time {:.2} us = {:.2} us latency (the same call on an almost empty buffer: call overhead and per-step latencies) + {:.2} us moving the bytes",
            self.time_us, self.latency_part_us, self.bandwidth_part_us
        )?;
        if let Some(p) = &self.network_proxy {
            writeln!(
                out,
                "network proxy: each network send or receive keeps its GPU's proxy thread busy {:.2} us, one after another: the busiest handles {} per ring step over its channels, {} steps' worth, {:.2} us in all",
                p.op_us, p.ops_per_step, p.messages_per_connection, p.busy_us
            )?;
        }
        // The proxies' work takes longer than moving the bytes: they bound the call.
        let proxies = self.network_proxy.as_ref().filter(|p| p.busy_us > self.bandwidth_part_us);
        match (&self.bottleneck, proxies) {
            (Some(_), Some(p)) => writeln!(
                out,
                "bottleneck: the network proxies (the busiest GPU's, {:.2} us of sends and receives), not a link",
                p.busy_us
            ),
            (Some(b), None) if b.channel_capped => writeln!(
                out,
                "bottleneck: each channel, {:.2} GB/s on the wire (what one channel's CTA moves; {}), under its share of a {} link of {:.1} GB/s shared by {} flow(s)",
                b.per_flow_gbyte_per_s,
                if crate::collective::is_p2p(self.collective) {
                    "across nodes NCCL_P2P_PER_CHANNEL_NET_BW"
                } else {
                    "a Tree's: NCCL's per-channel maximum, perChMaxTreeBws"
                },
                b.class,
                b.capacity_gbyte_per_s,
                b.flows
            ),
            (Some(b), None) => writeln!(
                out,
                "bottleneck: a {} link of {:.1} GB/s shared by {} flow(s), {:.2} GB/s each, when every connection sends",
                b.class, b.capacity_gbyte_per_s, b.flows, b.per_flow_gbyte_per_s
            ),
            (None, _) => writeln!(out, "bottleneck: none (a single rank moves nothing)"),
        }
    }

    fn write_cost_table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "NCCL's cost table (time = latency + bytes / bandwidth):")?;
        writeln!(
            out,
            "  {:<15} {:<7} {:>12} {:>14} {:>12}",
            "algorithm", "proto", "latency(us)", "algbw(GB/s)", "time(us)"
        )?;
        for r in &self.table {
            match &r.disabled {
                Some(why) => writeln!(out, "  {:<15} {:<7} disabled: {why}", r.algo, r.proto)?,
                None => writeln!(
                    out,
                    "  {:<15} {:<7} {:>12.1} {:>14.1} {:>12.1}",
                    r.algo,
                    r.proto,
                    r.latency_us.unwrap_or(0.0),
                    r.bandwidth_gbyte_per_s.unwrap_or(0.0),
                    r.time_us.unwrap_or(0.0)
                )?,
            }
        }
        writeln!(out)?;
        writeln!(
            out,
            "NCCL would pick: {}",
            self.nccl_choice
                .as_ref()
                .map_or("nothing (all disabled)".into(), |c| format!("{}/{}", c.algo, c.proto))
        )?;
        Ok(())
    }
}
