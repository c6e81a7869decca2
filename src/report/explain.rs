//! `collsim explain`'s text: one call taken apart ([`crate::collective::explain`] works the
//! figures out; this formats them) — NCCL's cost table, its choice, what collsim runs, and the
//! simulated time split into its latency part and the time moving the bytes, with the link that
//! bounds it.

use std::io::{self, Write};

pub use crate::collective::explain::{
    Bottleneck, Choice, CostRow, Explanation, NetworkProxy, Simulated,
};

impl Explanation {
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
                } else if self.simulated.algo == "NVLS_TREE" {
                    "an NVLSTree's: NCCL's per-channel maximum, perChMaxNVLSTreeBws"
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
