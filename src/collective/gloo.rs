//! Gloo, PyTorch's CPU collective backend, as `ProcessGroupGloo` runs a collective on CUDA
//! tensors: the tensor is copied to pinned host memory, Gloo's algorithm runs on the host over
//! TCP sockets, and the result is copied back (`AsyncAllreduceCUDAWork` and its kin in
//! `torch/csrc/distributed/c10d/ProcessGroupGloo.cpp`: the copies on a side stream, synchronised
//! before and after). No NVLink, no GPUDirect, no SHARP: every byte crosses PCIe twice and the
//! kernel's TCP stack once a step, peers on one node through the loopback interface.
//!
//! What each mechanism costs (all ranks at once, so per rank):
//! * **Copies**: bytes / the GPU's share of its PCIe path to host memory, with every GPU of the
//!   node copying at once, down and back up ([`GlooNet::pcie`]).
//! * **Ring all-reduce** (Gloo's default, `gloo/allreduce.cc` `ring`): a reduce-scatter then
//!   an all-gather, 2(n-1) steps of bytes/n to the next rank, each step one message on one TCP
//!   connection: the step's time is the slower of the message overhead plus bytes/n at one
//!   stream's rate (capped by the NIC's rate where the hop leaves the node) and, in the
//!   reduce-scatter, the host's sum of bytes/n ([`GlooNet::reduce`]).
//! * **Halving-doubling** (`gloo/allreduce_halving_doubling.h`): 2 ⌈log2 n⌉ steps moving
//!   bytes/2, bytes/4, … then back, the same bytes as the ring in fewer messages.
//! * **All-gather, reduce-scatter, broadcast**: Gloo's rings ((n-1) steps of bytes/n; the
//!   broadcast as a pipelined ring of the whole buffer).
//!
//! Every rate and overhead comes from the topology: one TCP stream's rate and a message's
//! overhead from its library's `tcp` transport (`topologies/transports.toml`, where they are
//! marked assumed), the NIC's line rate, the PCIe links. The host's reduction rate is
//! [`REDUCE_RATE`].

use crate::comm::Collective;
use crate::hw::{Cluster, GpuId, NodeId, Vertex};

/// One TCP stream's rate, bytes/s: the `tcp` transport's `per_stream` (25 Gb/s, assumed there;
/// a test holds the two equal).
pub const STREAM_RATE: f64 = 25e9 / 8.0;

/// A message's overhead through the kernel's TCP stack, s: the `tcp` transport's
/// `message_overhead` (20 µs, assumed there; a test holds the two equal).
pub const MESSAGE_OVERHEAD: f64 = 20e-6;

/// What one process's Gloo thread sums, bytes of result a second: one core adding two float
/// arrays into a third (three memory streams) at about 15 GB/s of memory traffic, a
/// single-thread STREAM-triad figure for server CPUs. Assumed: no Gloo measurement in the
/// project isolates it.
pub const REDUCE_RATE: f64 = 5e9;

/// Gloo's all-reduce algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GlooAlgo {
    /// Ring (Gloo's default).
    Ring,
    /// Recursive halving-doubling.
    HalvingDoubling,
}

impl GlooAlgo {
    /// The name the reports print.
    pub fn name(self) -> &'static str {
        match self {
            GlooAlgo::Ring => "GLOO_RING",
            GlooAlgo::HalvingDoubling => "GLOO_HD",
        }
    }
}

/// The rates Gloo moves bytes at on one cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlooNet {
    /// One rank's GPU↔host copy rate with every GPU of its node copying, bytes/s.
    pub pcie: f64,
    /// One TCP stream's rate, bytes/s.
    pub stream: f64,
    /// A NIC's rate for TCP (line rate × the transport's efficiency), bytes/s.
    pub nic: f64,
    /// Each message's overhead through the kernel's stack, s.
    pub overhead: f64,
    /// The host's reduction rate, bytes/s.
    pub reduce: f64,
}

impl GlooNet {
    /// Gloo's rates on `cluster` using `ppn` GPUs a node: each GPU's copy rate with all of
    /// them copying to their NUMA domain's memory at once (max-min over the PCIe links), one
    /// TCP stream, one NIC at the node transport's efficiency (TCP over IPoIB or Ethernet on
    /// the same port: one connection a peer uses one NIC).
    pub fn of(cluster: &Cluster, ppn: usize) -> GlooNet {
        let paths: Vec<Vec<u32>> = (0..ppn.max(1))
            .map(|g| {
                let numa = Vertex::Numa(cluster.numa_of(Vertex::Gpu(GpuId(g))));
                cluster
                    .route(NodeId(0), Vertex::Gpu(GpuId(g)), numa)
                    .0
                    .iter()
                    .map(|l| l.0)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u32]> = paths.iter().map(Vec::as_slice).collect();
        let rates = super::run::steady_rates(cluster.capacities(), &refs, &[]);
        let pcie = rates.iter().copied().filter(|r| *r > 0.0).fold(f64::INFINITY, f64::min);
        let nic = cluster
            .spec()
            .nic
            .as_ref()
            .map_or(f64::INFINITY, |n| n.speed.bytes_per_sec() * n.transport.efficiency);
        GlooNet {
            pcie: if pcie.is_finite() { pcie } else { STREAM_RATE },
            stream: STREAM_RATE,
            nic,
            overhead: MESSAGE_OVERHEAD,
            reduce: REDUCE_RATE,
        }
    }
}

/// One Gloo collective's time and its parts, s.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GlooTime {
    /// The whole call.
    pub total: f64,
    /// The copy to host memory.
    pub d2h: f64,
    /// The algorithm's steps on the host (messages and sums).
    pub host: f64,
    /// The copy back.
    pub h2d: f64,
    /// Messages each rank sends.
    pub steps: usize,
}

/// `coll` of `bytes` (nccl-tests' size: the whole buffer; per rank for all-gather and
/// reduce-scatter's output × ranks) on `n` ranks over `nodes` nodes with `algo`.
pub fn time(
    net: &GlooNet,
    coll: Collective,
    bytes: u64,
    n: usize,
    nodes: usize,
    algo: GlooAlgo,
) -> GlooTime {
    let s = bytes as f64;
    let (d2h, h2d) = match coll {
        // The input is a rank's share, the output the whole buffer.
        Collective::AllGather => (s / n as f64 / net.pcie, s / net.pcie),
        Collective::ReduceScatter => (s / net.pcie, s / n as f64 / net.pcie),
        _ => (s / net.pcie, s / net.pcie),
    };
    if n < 2 {
        return GlooTime { total: d2h + h2d, d2h, host: 0.0, h2d, steps: 0 };
    }
    // A step's rate: one stream, and where the ring leaves the node, the NIC.
    let rate = if nodes > 1 { net.stream.min(net.nic) } else { net.stream };
    let send = |b: f64, reduce: bool| {
        let wire = net.overhead + b / rate;
        if reduce { wire.max(b / net.reduce) } else { wire }
    };
    let share = s / n as f64;
    let (host, steps) = match (coll, algo) {
        (Collective::AllReduce, GlooAlgo::Ring) => {
            let k = n - 1;
            (k as f64 * (send(share, true) + send(share, false)), 2 * k)
        }
        (Collective::AllReduce, GlooAlgo::HalvingDoubling) => {
            let levels = n.next_power_of_two().trailing_zeros() as usize;
            let mut t = 0.0;
            let mut b = s;
            for _ in 0..levels {
                b /= 2.0;
                t += send(b, true) + send(b, false);
            }
            (t, 2 * levels)
        }
        (Collective::ReduceScatter, _) => ((n - 1) as f64 * send(share, true), n - 1),
        (Collective::AllGather, _) => ((n - 1) as f64 * send(share, false), n - 1),
        // Each peer's share, one message each.
        (Collective::AllToAll, _) => ((n - 1) as f64 * send(share, false), n - 1),
        // One message of the whole buffer to the next rank.
        (Collective::SendRecv | Collective::Send { .. }, _) => (send(s, false), 1),
        // A pipelined ring of the whole buffer: the buffer once at the stream's rate plus a
        // message per hop to fill it.
        _ => (s / rate + (n - 1) as f64 * net.overhead, n - 1),
    };
    GlooTime { total: d2h + host + h2d, d2h, host, h2d, steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net() -> GlooNet {
        GlooNet { pcie: 50e9, stream: 25e9 / 8.0, nic: 45e9, overhead: 20e-6, reduce: REDUCE_RATE }
    }

    #[test]
    fn a_ring_moves_twice_the_buffer_in_2_n_minus_1_messages() {
        let t = time(&net(), Collective::AllReduce, 100 << 20, 8, 1, GlooAlgo::Ring);
        assert_eq!(t.steps, 14);
        let wire = 14.0 * (20e-6 + (100u64 << 20) as f64 / 8.0 / (25e9 / 8.0));
        assert!((t.host - wire).abs() / wire < 1e-9, "{t:?}");
        assert!((t.d2h - (100u64 << 20) as f64 / 50e9).abs() < 1e-12);
        // Halving-doubling: the same bytes in 6 messages.
        let hd = time(&net(), Collective::AllReduce, 100 << 20, 8, 1, GlooAlgo::HalvingDoubling);
        assert_eq!(hd.steps, 6);
        assert!(hd.host < t.host);
    }

    #[test]
    fn a_slow_nic_sets_the_rate_across_nodes_and_the_host_sum_where_it_is_slower() {
        let slow = GlooNet { nic: 1.25e9, ..net() };
        let one = time(&slow, Collective::AllReduce, 64 << 20, 16, 1, GlooAlgo::Ring);
        let two = time(&slow, Collective::AllReduce, 64 << 20, 16, 2, GlooAlgo::Ring);
        assert!(two.host > 2.0 * one.host, "{one:?} {two:?}");
        let fast = GlooNet { stream: 1e12, nic: 1e12, ..net() };
        let t = time(&fast, Collective::AllReduce, 64 << 20, 8, 1, GlooAlgo::Ring);
        let share = (64u64 << 20) as f64 / 8.0;
        let floor = 7.0 * share / REDUCE_RATE;
        assert!(t.host > floor, "the sums bound it: {t:?}");
    }
}
