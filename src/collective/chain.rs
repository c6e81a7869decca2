//! Broadcast and Reduce, as NCCL runs them on its rings (`nccl-model.md` §4.2): a chain of the
//! n ranks in ring order — from the root onward for Broadcast, ending at the root for Reduce —
//! along which each channel pipelines its share in one-step chunks (Simple: NCCL_BUFFSIZE/8;
//! LL and LL128: one store round, since they forward data as it arrives), each connection
//! holding at most 8 chunks in flight.
//!
//! [`Mode::Detailed`] moves every chunk as a flow with max-min rates re-shared as flows come
//! and go. [`Mode::Aggregated`] uses the pipeline estimate: the first chunk crosses every hop
//! at the rate it gets while all channels cross that hop together, and the others follow at
//! the pace of the slowest hop when every hop of every channel is busy.

use super::ring::{RingRun, stream_unit};
use super::{Collective, Mode, TimingParams};
use crate::comm::{Communicator, HopClass, Proto, Selection};
use crate::engine::{EventQueue, Next, next};
use crate::hw::Cluster;
use crate::net::solver::{FlowSpec, max_min_rates};
use crate::net::{LinkId, Network};
use crate::units::{Bytes, Time};

/// NCCL_STEPS: chunks a connection can hold.
const WINDOW: usize = 8;

struct Hop {
    links: Vec<LinkId>,
    delay: Time,
    eff: f64,
    p2p: bool,
}

/// The chain of each of the first `nch` channels: the ring with its hop into position 0
/// (Broadcast from rank 0) or out of it (Reduce to rank 0) left out, as links and hop class.
fn hop_paths(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    nch: usize,
) -> Vec<Vec<(Vec<LinkId>, HopClass)>> {
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let n = nnodes * ppn;
    // Global ring positions j = node * ppn + i; hop j goes from position j to j + 1 (mod n).
    let hop_ids: Vec<usize> = match coll {
        Collective::Reduce => (1..n).collect(),
        _ => (0..n - 1).collect(),
    };
    comm.channels()[..nch]
        .iter()
        .map(|ch| {
            hop_ids
                .iter()
                .map(|&j| {
                    let (node, i) = (j / ppn, j % ppn);
                    comm.hop_path(cluster, ch, node, i, (node + 1) % nnodes)
                })
                .collect()
        })
        .collect()
}

/// Every hop of every channel busy at once, for `explain`'s bottleneck.
pub fn steady_paths(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    sel: &Selection,
) -> Vec<Vec<LinkId>> {
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    if comm.nranks() < 2 {
        return Vec::new();
    }
    hop_paths(coll, cluster, comm, nch).into_iter().flatten().map(|(p, _)| p).collect()
}

/// Simulates one Broadcast or Reduce of `bytes` from/to rank 0 with `sel`'s protocol and
/// channel count.
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    elt: u64,
    sel: &Selection,
    params: &TimingParams,
    mode: Mode,
) -> RingRun {
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let n = nnodes * ppn;
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    if n < 2 || bytes == 0 {
        return RingRun { time: params.call_overhead, events: 0 };
    }
    let align = 16u64.max(elt);
    let per_channel = bytes.div_ceil(nch as u64).div_ceil(align) * align;
    let step = match sel.proto {
        Proto::Simple => comm.env().buffsize.get() / 8,
        _ => stream_unit(sel.proto),
    };
    let unit = step.div_ceil(align).max(1) * align;
    let chunks = per_channel.div_ceil(unit) as usize;
    let last = per_channel - (chunks as u64 - 1) * unit;
    let payload = |k: usize| if k + 1 == chunks { last } else { unit };
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let sync = gpu.sync[p];
    let links = cluster.links();
    let latency =
        |path: &[LinkId]| path.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    let channels: Vec<Vec<Hop>> = hop_paths(coll, cluster, comm, nch)
        .into_iter()
        .map(|hops| {
            hops.into_iter()
                .map(|(path, class)| {
                    let eff = params.efficiency(cluster.spec().gpu.arch, class, sel.proto);
                    Hop {
                        delay: latency(&path) + params.step(class, sel.proto),
                        links: path,
                        eff,
                        p2p: class != HopClass::Net,
                    }
                })
                .collect()
        })
        .collect();
    let finish = match mode {
        Mode::Aggregated => {
            estimate(&channels, links, chunks, per_channel as f64 / chunks as f64, sync)
        }
        Mode::Detailed => run_events(&channels, links, chunks, &payload, sync),
    };
    RingRun { time: params.call_overhead + finish.0, events: finish.1 }
}

fn estimate(
    channels: &[Vec<Hop>],
    links: &[crate::net::Link],
    chunks: usize,
    unit: f64,
    sync: Time,
) -> (Time, u64) {
    let caps: Vec<f64> = links.iter().map(|l| l.capacity.bytes_per_sec()).collect();
    let raw: Vec<Vec<Vec<u32>>> = channels
        .iter()
        .map(|c| c.iter().map(|h| h.links.iter().map(|l| l.0).collect()).collect())
        .collect();
    let solve = |paths: Vec<&Vec<u32>>| {
        let specs: Vec<FlowSpec<'_>> = paths
            .into_iter()
            .map(|p| FlowSpec { path: p, cap: f64::INFINITY, weight: 1.0 })
            .collect();
        max_min_rates(&caps, &specs)
    };
    let steady = solve(raw.iter().flatten().collect());
    let hops = channels.first().map_or(0, |c| c.len());
    let fill: Vec<Vec<f64>> = (0..hops)
        .map(|h| {
            let paths: Vec<&[u32]> = raw.iter().map(|c| c[h].as_slice()).collect();
            crate::net::solver::equal_shares(&caps, &paths)
        })
        .collect();
    let mut worst = 0.0f64;
    let mut i = 0;
    for (c, ch) in channels.iter().enumerate() {
        let mut first = 0.0;
        let mut pace = 0.0f64;
        for (h, hop) in ch.iter().enumerate() {
            first += unit / hop.eff / fill[h][c].max(1.0) + hop.delay.as_secs_f64();
            let s = if hop.p2p { sync.as_secs_f64() } else { 0.0 };
            pace = pace.max(unit / hop.eff / steady[i].max(1.0) + s);
            i += 1;
        }
        worst = worst.max(first + chunks.saturating_sub(1) as f64 * pace);
    }
    (Time::from_secs_f64_ceil(worst), 0)
}

fn run_events(
    channels: &[Vec<Hop>],
    links: &[crate::net::Link],
    chunks: usize,
    payload: &dyn Fn(usize) -> u64,
    sync: Time,
) -> (Time, u64) {
    let mut net = Network::new(links);
    let paths: Vec<Vec<_>> = channels
        .iter()
        .map(|c| c.iter().map(|h| net.add_path(&h.links, links)).collect())
        .collect();
    // Per channel, per hop: chunks sent, chunks arrived at its receiver, sender busy.
    let nh = channels.first().map_or(0, |c| c.len());
    let mut sent = vec![vec![0usize; nh]; channels.len()];
    let mut arrived = vec![vec![0usize; nh]; channels.len()];
    let mut busy = vec![vec![false; nh]; channels.len()];
    // Events: (channel, hop, kind): 0 = data arrived, 1 = sender released after its sync.
    let mut queue: EventQueue<(usize, usize, u8)> = EventQueue::new();
    let mut events = 0u64;
    let mut finish = Time::ZERO;
    let try_send = |c: usize,
                    h: usize,
                    now: Time,
                    sent: &mut Vec<Vec<usize>>,
                    arrived: &Vec<Vec<usize>>,
                    busy: &mut Vec<Vec<bool>>,
                    net: &mut Network| {
        let k = sent[c][h];
        if busy[c][h] || k >= chunks {
            return;
        }
        // Data: the first hop's sender has it all; the others once it arrived from upstream.
        if h > 0 && arrived[c][h - 1] <= k {
            return;
        }
        // Window: the receiver holds at most WINDOW chunks it has not forwarded.
        if h + 1 < nh && k >= sent[c][h + 1] + WINDOW {
            return;
        }
        let hop = &channels[c][h];
        let wire = Bytes::new((payload(k) as f64 / hop.eff).ceil() as u64);
        net.start_flow(now, paths[c][h], wire, f64::INFINITY, 1.0, ((c as u64) << 32) | h as u64);
        busy[c][h] = true;
    };
    for c in 0..channels.len() {
        try_send(c, 0, Time::ZERO, &mut sent, &arrived, &mut busy, &mut net);
    }
    loop {
        match next(queue.peek_time(), net.next_completion()) {
            Next::Done => break,
            Next::Flows(f) => {
                queue.advance_to(f);
                for tok in net.complete_until(f) {
                    events += 1;
                    let (c, h) = ((tok >> 32) as usize, (tok & 0xffff_ffff) as usize);
                    sent[c][h] += 1;
                    queue.schedule(f + channels[c][h].delay, (c, h, 0));
                    if channels[c][h].p2p && sync > Time::ZERO {
                        queue.schedule(f + sync, (c, h, 1));
                    } else {
                        busy[c][h] = false;
                        try_send(c, h, f, &mut sent, &arrived, &mut busy, &mut net);
                    }
                    if h > 0 {
                        try_send(c, h - 1, f, &mut sent, &arrived, &mut busy, &mut net);
                    }
                }
            }
            Next::Events(q) => {
                while queue.peek_time() == Some(q) {
                    let Some((_, (c, h, kind))) = queue.pop() else { break };
                    events += 1;
                    if kind == 1 {
                        busy[c][h] = false;
                        try_send(c, h, q, &mut sent, &arrived, &mut busy, &mut net);
                        continue;
                    }
                    arrived[c][h] += 1;
                    if h + 1 == nh && arrived[c][h] == chunks {
                        finish = finish.max(q);
                    }
                    if h + 1 < nh {
                        try_send(c, h + 1, q, &mut sent, &arrived, &mut busy, &mut net);
                    }
                }
            }
        }
    }
    (finish, events)
}
