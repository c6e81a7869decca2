//! NVLS AllReduce on one node (NVLink SHARP, `nccl-model.md` §3.6), timed on the flow-level
//! network.
//!
//! Every GPU owns 1/n of the buffer. For each chunk of its share a GPU's CTA first issues a
//! multimem load-reduce — the NVSwitch reads the chunk from all n GPUs and returns the sum: one
//! flow crossing every GPU's up-link and this GPU's down-link — then a multimem store of the
//! result — the switch copies it to all n GPUs: one flow crossing this GPU's up-link and every
//! down-link. Each GPU thus moves about (1 + 1/n)·S each way instead of the ring's 2(n−1)/n·S.
//! The two stages pipeline over the chunks of a channel; all GPUs and channels run at once and
//! share the links by max-min fairness. Wire bytes are payload / NVLS efficiency.

use super::{Mode, TimingParams};
use crate::comm::env::NcclEnv;
use crate::comm::{Communicator, HopClass, Proto, Selection};
use crate::engine::{EventQueue, Next, next};
use crate::hw::{Cluster, Vertex};
use crate::net::solver::{FlowSpec, max_min_rates};
use crate::net::{LinkId, Network, PathId};
use crate::units::{Bytes, Time};

use super::ring::RingRun;

/// NCCL's NVLS chunk (`nccl-model.md` §3.6): NCCL_NVLS_CHUNKSIZE, cut to 64, 32 and 16 KiB when
/// the message is under 64, 8 and 2 × (`concurrent` pipelines — channels × heads — × chunk).
pub(crate) fn chunk_size(bytes: u64, concurrent: u64, chunk: u64) -> u64 {
    let unit = concurrent * chunk;
    let cap = if bytes < 2 * unit {
        16 * 1024
    } else if bytes < 8 * unit {
        32 * 1024
    } else if bytes < 64 * unit {
        64 * 1024
    } else {
        chunk
    };
    chunk.min(cap)
}

/// NVLSTree's chunk (NCCL's `enqueue.cc`): the NVLS chunk capped by
/// NCCL_NVLSTREE_MAX_CHUNKSIZE (default: 64 KiB on 4 nodes or more, else no cap), then cut to 256,
/// 128, 64 and 32 KiB while the message is under 32, 16, 4 and 1 chunks for each of the
/// `concurrent` pipelines (channels × heads), each test on the chunk the one before left.
pub(crate) fn tree_chunk_size(bytes: u64, concurrent: u64, env: &NcclEnv, nnodes: usize) -> u64 {
    let chunk = env.nvls_chunksize.get();
    let max = match env.nvlstree_max_chunksize {
        Some(m) => m.get(),
        None if nnodes >= 4 => 64 * 1024,
        None => chunk,
    };
    let mut c = chunk.min(max);
    for (times, cap) in [(32, 256 * 1024), (16, 128 * 1024), (4, 64 * 1024), (1, 32 * 1024)] {
        if bytes < times * concurrent * c && c > cap {
            c = cap;
        }
    }
    c
}

/// One GPU-channel pipeline's progress.
#[derive(Debug, Clone, Default)]
struct Pipe {
    /// Reduce and store transfers finished.
    reduce_sent: usize,
    store_sent: usize,
    /// Reduced chunks visible to the store (a stage latency after their transfer), and stored
    /// chunks visible to every GPU.
    reduced: usize,
    stored: usize,
    reducing: bool,
    storing: bool,
}

/// Simulates one NVLS AllReduce of `bytes` on one node with `sel.nchannels` NVLS channels.
pub fn simulate_allreduce(
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    elt: u64,
    sel: &Selection,
    params: &TimingParams,
    mode: Mode,
) -> RingRun {
    let n = comm.ppn();
    let nch = sel.nchannels.max(1);
    if n < 2 || bytes == 0 {
        return RingRun { time: params.call_overhead, events: 0 };
    }
    let align = 16u64.max(elt);
    let share = bytes.div_ceil((n * nch) as u64).div_ceil(align) * align;
    let chunk = chunk_size(bytes, (nch * n) as u64, comm.env().nvls_chunksize.get()).max(align);
    let chunks = share.div_ceil(chunk) as usize;
    let last = share - (chunks as u64 - 1) * chunk;
    let payload = |k: usize| if k + 1 == chunks { last } else { chunk };
    let eff = params.nvls_efficiency(comm.arch());
    let wire = |k: usize| Bytes::new((payload(k) as f64 / eff).ceil() as u64);
    let lat = params.step(HopClass::Nvlink, Proto::Simple);
    let up: Vec<LinkId> =
        (0..n).map(|g| cluster.route(0, Vertex::Gpu(g), Vertex::NvSwitch).0[0]).collect();
    let down: Vec<LinkId> =
        (0..n).map(|g| cluster.route(0, Vertex::NvSwitch, Vertex::Gpu(g)).0[0]).collect();
    let reduce_path = |g: usize| -> Vec<LinkId> {
        let mut p = up.clone();
        p.push(down[g]);
        p
    };
    let store_path = |g: usize| -> Vec<LinkId> {
        let mut p = vec![up[g]];
        p.extend(down.iter().copied());
        p
    };
    let links = cluster.links();
    let pipes = match mode {
        Mode::Aggregated => 1,
        Mode::Detailed => n * nch,
    };
    // Rates: detailed re-solves as flows come and go; aggregated uses the steady state of every
    // GPU and channel reducing and storing at once, by symmetry the same for all.
    let fixed = if mode == Mode::Aggregated {
        let paths: Vec<Vec<u32>> = (0..n)
            .flat_map(|g| {
                let (r, s) = (reduce_path(g), store_path(g));
                (0..nch).flat_map(move |_| {
                    [r.iter().map(|l| l.0).collect::<Vec<u32>>(), s.iter().map(|l| l.0).collect()]
                })
            })
            .collect();
        let caps: Vec<f64> = links.iter().map(|l| l.capacity.bytes_per_sec()).collect();
        let specs: Vec<FlowSpec<'_>> =
            paths.iter().map(|p| FlowSpec { path: p, cap: f64::INFINITY, weight: 1.0 }).collect();
        let r = max_min_rates(&caps, &specs);
        Some((r[0], r[1]))
    } else {
        None
    };
    let mut net = Network::new(links);
    let mut paths: Vec<(PathId, PathId)> = Vec::new();
    if fixed.is_none() {
        for i in 0..pipes {
            let g = i / nch;
            paths.push((net.add_path(&reduce_path(g), links), net.add_path(&store_path(g), links)));
        }
    }
    let mut state = vec![Pipe::default(); pipes];
    // Events: (pipe, stage) done after latency; fixed-rate completions go through the queue too.
    // (pipe, kind): bit 0 = reduce, bit 1 = a transfer finished (else its latency elapsed).
    let mut queue: EventQueue<(usize, usize)> = EventQueue::new();
    let mut events = 0u64;
    let mut finish = Time::ZERO;

    let start = |i: usize,
                 reduce: bool,
                 now: Time,
                 st: &mut [Pipe],
                 net: &mut Network,
                 queue: &mut EventQueue<(usize, usize)>| {
        let p = &mut st[i];
        let k = if reduce { p.reduce_sent } else { p.store_sent };
        let bytes = wire(k);
        if reduce {
            p.reducing = true;
        } else {
            p.storing = true;
        }
        match fixed {
            Some((rr, rs)) => {
                let rate = if reduce { rr } else { rs };
                let d = Time::from_secs_f64_ceil(bytes.as_f64() / rate);
                queue.schedule(now + d, (i, reduce as usize | 2));
            }
            None => {
                let path = if reduce { paths[i].0 } else { paths[i].1 };
                let token = (i as u64) << 1 | reduce as u64;
                net.start_flow(now, path, bytes, f64::INFINITY, 1.0, token);
            }
        }
    };
    for i in 0..pipes {
        start(i, true, Time::ZERO, &mut state, &mut net, &mut queue);
    }
    loop {
        let (now, done): (Time, Vec<(usize, usize)>) =
            match next(queue.peek_time(), net.next_completion()) {
                Next::Done => break,
                Next::Flows(f) => {
                    queue.advance_to(f);
                    let toks = net.complete_until(f);
                    (
                        f,
                        toks.into_iter()
                            .map(|t| ((t >> 1) as usize, (t & 1) as usize | 2))
                            .collect(),
                    )
                }
                Next::Events(q) => {
                    let mut v = Vec::new();
                    while queue.peek_time() == Some(q) {
                        if let Some((_, e)) = queue.pop() {
                            v.push(e);
                        }
                    }
                    (q, v)
                }
            };
        for (i, kind) in done {
            events += 1;
            let reduce = kind & 1 == 1;
            let p = &mut state[i];
            if kind & 2 == 2 {
                // A transfer finished: the CTA moves on; the data is visible after the latency.
                if reduce {
                    p.reducing = false;
                    p.reduce_sent += 1;
                } else {
                    p.storing = false;
                    p.store_sent += 1;
                }
                queue.schedule(now + lat, (i, reduce as usize));
            } else if reduce {
                p.reduced += 1;
            } else {
                p.stored += 1;
                if p.stored == chunks {
                    finish = finish.max(now);
                }
            }
            let (can_reduce, can_store) = {
                let p = &state[i];
                (!p.reducing && p.reduce_sent < chunks, !p.storing && p.store_sent < p.reduced)
            };
            if can_reduce {
                start(i, true, now, &mut state, &mut net, &mut queue);
            }
            if can_store {
                start(i, false, now, &mut state, &mut net, &mut queue);
            }
        }
    }
    let extra = params.gpu(cluster.spec().gpu.arch).nvls_call;
    RingRun { time: params.call_overhead + extra + finish, events }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> NcclEnv {
        NcclEnv::from_pairs(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn nvls_chunks_shrink_for_small_messages() {
        let (k, c) = (1024u64, 128 * 1024);
        // 16 channels × 8 heads: one unit is 16 MiB.
        assert_eq!(chunk_size(1 << 30, 128, c), c);
        assert_eq!(chunk_size(512 << 20, 128, c), 64 * k);
        assert_eq!(chunk_size(64 << 20, 128, c), 32 * k);
        assert_eq!(chunk_size(16 << 20, 128, c), 16 * k);
        // A smaller NCCL_NVLS_CHUNKSIZE is never raised.
        assert_eq!(chunk_size(1 << 30, 128, 8 * k), 8 * k);
    }

    #[test]
    fn nvlstree_chunks_follow_the_env_and_the_message() {
        let k = 1024u64;
        let big = 1u64 << 40;
        assert_eq!(tree_chunk_size(big, 64, &env(&[]), 2), 128 * k);
        assert_eq!(tree_chunk_size(big, 64, &env(&[]), 4), 64 * k);
        let p5 =
            env(&[("NCCL_NVLS_CHUNKSIZE", "524288"), ("NCCL_NVLSTREE_MAX_CHUNKSIZE", "524288")]);
        assert_eq!(tree_chunk_size(big, 512, &p5, 2), 512 * k);
        // 512 pipelines (16 channels × 32 NIC heads): under 32 × 512 × 512 KiB = 8 GiB the chunk
        // drops to 256 KiB, and so on down to 32 KiB under 512 × 64 KiB = 32 MiB.
        assert_eq!(tree_chunk_size(4 << 30, 512, &p5, 2), 256 * k);
        assert_eq!(tree_chunk_size(1 << 30, 512, &p5, 2), 128 * k);
        assert_eq!(tree_chunk_size(64 << 20, 512, &p5, 2), 64 * k);
        assert_eq!(tree_chunk_size(16 << 20, 512, &p5, 2), 32 * k);
    }

    #[test]
    fn chunk_sizes_are_checked() {
        let e = NcclEnv::from_pairs([("NCCL_NVLS_CHUNKSIZE", "100")]).unwrap_err();
        assert!(e.to_string().starts_with("NCCL_NVLS_CHUNKSIZE=100: "), "{e}");
    }
}
