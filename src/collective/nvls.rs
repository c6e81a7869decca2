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

use super::run::{self, Algorithm, Call, Closed, Ctx, Form, Signal, steady_rates};
use super::{Mode, symmetry};
use crate::comm::{HopClass, NvlsLayout, Proto};
use crate::hw::{Cluster, GpuId, NodeId, Vertex};
use crate::net::{LinkId, PathId};
use crate::units::{Bytes, Time};

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

/// NVLSTree's chunk (NCCL's `enqueue.cc`): the NVLS chunk capped by NVLSTree's largest
/// ([`NvlsLayout`]: NCCL_NVLSTREE_MAX_CHUNKSIZE, else NCCL's default), then cut to 256, 128, 64
/// and 32 KiB while the message is under 32, 16, 4 and 1 chunks for each of the `concurrent`
/// pipelines (channels × heads), each test on the chunk the one before left.
pub(crate) fn tree_chunk_size(bytes: u64, concurrent: u64, layout: NvlsLayout) -> u64 {
    let mut c = layout.chunk.min(layout.tree_max_chunk);
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

/// What an NVLS call's transfers and timers mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// Pipeline `pipe`'s reduce (or store) transfer finished.
    Moved {
        /// Pipeline.
        pipe: u32,
        /// The load-reduce stage (else the store).
        reduce: bool,
    },
    /// Its result is visible, a stage latency later.
    Visible {
        /// Pipeline.
        pipe: u32,
        /// The load-reduce stage (else the store).
        reduce: bool,
    },
}

impl From<Ev> for Signal {
    fn from(e: Ev) -> Signal {
        Signal::Nvls(e)
    }
}

/// The links of GPU `g`'s load-reduce (every one of the `n` GPUs' up-link, then its own
/// down-link) and store (its up-link, then every down-link) through the node's NVSwitch.
fn stage_paths(cluster: &Cluster, n: usize, g: GpuId) -> (Vec<LinkId>, Vec<LinkId>) {
    let up = |g: GpuId| cluster.route(NodeId(0), Vertex::Gpu(g), Vertex::NvSwitch).0[0];
    let down = |g: GpuId| cluster.route(NodeId(0), Vertex::NvSwitch, Vertex::Gpu(g)).0[0];
    let mut reduce: Vec<LinkId> = (0..n).map(|x| up(GpuId(x))).collect();
    reduce.push(down(g));
    let mut store = vec![up(g)];
    store.extend((0..n).map(|x| down(GpuId(x))));
    (reduce, store)
}

/// Every GPU's and channel's load-reduce and store at once, for `explain`'s bottleneck.
pub(crate) fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    let n = call.comm.ppn();
    (0..n)
        .flat_map(|g| {
            let (r, s) = stage_paths(call.cluster, n, GpuId(g));
            (0..call.sel.nchannels).flat_map(move |_| [r.clone(), s.clone()])
        })
        .collect()
}

/// How an NVLS call moves its chunks.
enum Carrier {
    /// Every pipeline's stages on the shared network: (reduce, store) paths.
    Network(Vec<(PathId, PathId)>),
    /// One pipeline standing for all, at the steady-state (reduce, store) rates.
    Fixed(f64, f64),
}

/// A running NVLS AllReduce.
struct Nvls {
    pipes: Vec<Pipe>,
    chunks: usize,
    chunk: u64,
    last: u64,
    eff: f64,
    /// Stage latency.
    lat: Time,
    /// Fixed cost beyond the pipeline (the switch barriers).
    extra: Time,
    carrier: Carrier,
    finish: Time,
    done: usize,
    empty: bool,
}

impl Nvls {
    fn start_stage(&mut self, cx: &mut Ctx<'_>, i: usize, reduce: bool) {
        let p = &mut self.pipes[i];
        let k = if reduce { p.reduce_sent } else { p.store_sent };
        let payload = if k + 1 == self.chunks { self.last } else { self.chunk };
        let bytes = Bytes::new((payload as f64 / self.eff).ceil() as u64);
        if reduce {
            p.reducing = true;
        } else {
            p.storing = true;
        }
        let ev = Ev::Moved { pipe: i as u32, reduce };
        match &self.carrier {
            Carrier::Fixed(rr, rs) => {
                let rate = if reduce { *rr } else { *rs };
                let d = Time::from_secs_f64_ceil(bytes.as_f64() / rate);
                cx.at(cx.now() + d, ev);
            }
            Carrier::Network(paths) => {
                let path = if reduce { paths[i].0 } else { paths[i].1 };
                cx.flow(path, bytes, ev);
            }
        }
    }
}

impl Algorithm for Nvls {
    fn form(&self) -> Form {
        if matches!(self.carrier, Carrier::Network(_)) { Form::Detailed } else { Form::Aggregated }
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        if self.empty {
            self.finish = cx.now();
            return;
        }
        for i in 0..self.pipes.len() {
            self.start_stage(cx, i, true);
        }
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        let Signal::Nvls(ev) = signal else { return };
        let now = cx.now();
        let i = match ev {
            Ev::Moved { pipe, reduce } => {
                // A transfer finished: the CTA moves on; the data is visible after the latency.
                let p = &mut self.pipes[pipe as usize];
                if reduce {
                    p.reducing = false;
                    p.reduce_sent += 1;
                } else {
                    p.storing = false;
                    p.store_sent += 1;
                }
                cx.at(now + self.lat, Ev::Visible { pipe, reduce });
                pipe as usize
            }
            Ev::Visible { pipe, reduce } => {
                let p = &mut self.pipes[pipe as usize];
                if reduce {
                    p.reduced += 1;
                } else {
                    p.stored += 1;
                    if p.stored == self.chunks {
                        self.finish = self.finish.max(now);
                        self.done += 1;
                    }
                }
                pipe as usize
            }
        };
        let p = &self.pipes[i];
        let can_reduce = !p.reducing && p.reduce_sent < self.chunks;
        let can_store = !p.storing && p.store_sent < p.reduced;
        if can_reduce {
            self.start_stage(cx, i, true);
        }
        if can_store {
            self.start_stage(cx, i, false);
        }
    }

    fn finished(&self) -> Option<Time> {
        (self.empty || self.done == self.pipes.len()).then_some(self.finish + self.extra)
    }

    fn last(&self) -> Time {
        self.finish + self.extra
    }
}

/// One NVLS AllReduce of `call.bytes` on one node with the selection's NVLS channels.
pub(crate) fn new(call: &Call<'_>, cx: &mut Ctx<'_>) -> Box<dyn Algorithm> {
    let (cluster, comm, sel, params) = (call.cluster, call.comm, &call.sel, call.params);
    let (bytes, elt) = (call.bytes.get(), call.elt.get());
    let n = comm.ppn();
    let nch = sel.nchannels.max(1);
    let empty = Nvls {
        pipes: Vec::new(),
        chunks: 0,
        chunk: 0,
        last: 0,
        eff: 1.0,
        lat: Time::ZERO,
        extra: Time::ZERO,
        carrier: Carrier::Fixed(1.0, 1.0),
        finish: Time::ZERO,
        done: 0,
        empty: true,
    };
    if n < 2 || bytes == 0 {
        return Box::new(empty);
    }
    let align = 16u64.max(elt);
    let share = bytes.div_ceil((n * nch) as u64).div_ceil(align) * align;
    let chunk = chunk_size(bytes, (nch * n) as u64, comm.nvls_layout().chunk).max(align);
    let chunks = share.div_ceil(chunk) as usize;
    let last = share - (chunks as u64 - 1) * chunk;
    // Rates: detailed re-solves as flows come and go; aggregated uses the steady state of every
    // GPU and channel reducing and storing at once, by symmetry the same for all.
    let nvls = |pipes: usize, carrier: Carrier| Nvls {
        pipes: vec![Pipe::default(); pipes],
        chunks,
        chunk,
        last,
        eff: params.nvls_efficiency(comm.arch()),
        lat: params.step(HopClass::Nvlink, Proto::Simple),
        extra: params.gpu(cluster.spec().gpu.arch).nvls_call,
        carrier,
        finish: Time::ZERO,
        done: 0,
        empty: false,
    };
    if call.mode != Mode::Detailed
        && let Some(t) = symmetric(call, n, nch, &nvls)
    {
        return Box::new(Closed::timed(t, Form::Symmetric));
    }
    let (pipes, carrier) = match call.mode {
        Mode::Aggregated | Mode::Auto => {
            let paths: Vec<Vec<u32>> = (0..n)
                .flat_map(|g| {
                    let (r, s) = stage_paths(cluster, n, GpuId(g));
                    (0..nch).flat_map(move |_| {
                        [
                            r.iter().map(|l| l.0).collect::<Vec<u32>>(),
                            s.iter().map(|l| l.0).collect(),
                        ]
                    })
                })
                .collect();
            let caps = cluster.capacities();
            let refs: Vec<&[u32]> = paths.iter().map(|p| p.as_slice()).collect();
            let r = steady_rates(caps, &refs, call.load);
            (1, Carrier::Fixed(r[0], r[1]))
        }
        Mode::Detailed => {
            let paths = (0..n * nch)
                .map(|i| {
                    let (r, s) = stage_paths(cluster, n, GpuId(i / nch));
                    (cx.add_path(&r), cx.add_path(&s))
                })
                .collect();
            (n * nch, Carrier::Network(paths))
        }
    };
    Box::new(nvls(pipes, carrier))
}

/// Budget of the symmetric run: links visited by its rate solves (about 0.25 s on this
/// repository's 2-core machine).
const SYMMETRIC_WORK: u64 = 4_000_000;

/// One representative per class of equivalent GPU-channel pipelines (on one NVSwitch node,
/// usually one for all), its stages standing for their images on the links they share
/// ([`symmetry`]): the detailed result, when the check holds and the run fits its budget.
fn symmetric(
    call: &Call<'_>,
    n: usize,
    nch: usize,
    nvls: &dyn Fn(usize, Carrier) -> Nvls,
) -> Option<Time> {
    let raw: Vec<(Vec<u32>, Vec<u32>)> = (0..n)
        .map(|g| {
            let (r, s) = stage_paths(call.cluster, n, GpuId(g));
            (r.iter().map(|l| l.0).collect(), s.iter().map(|l| l.0).collect())
        })
        .collect();
    let caps = run::capacities_beside_load(call);
    let images = |u: usize, _| {
        let (r, s) = &raw[u / nch];
        Some(vec![(r.as_slice(), 0), (s.as_slice(), 1)])
    };
    let own = |u: usize| {
        let (r, s) = &raw[u / nch];
        vec![r.as_slice(), s.as_slice()]
    };
    let symmetry::Classes { reps, paths: reduced, .. } =
        symmetry::refine(n * nch, &caps, 4 * n * nch, images, own)?;
    let chunks = nvls(0, Carrier::Fixed(1.0, 1.0)).chunks;
    let entries: usize = reduced.iter().map(|r| r.links.len()).sum();
    if (chunks * (entries + 16 * reduced.len())) as u64 > SYMMETRIC_WORK {
        return None;
    }
    let links = call.cluster.links();
    run::run_alone(links, &caps, SYMMETRIC_WORK, Time::MAX, |cx| {
        let paths = (0..reps.len())
            .map(|k| {
                let (r, s) = (&reduced[2 * k], &reduced[2 * k + 1]);
                (
                    cx.add_weighted_path(&r.links, &r.weights, Time::ZERO),
                    cx.add_weighted_path(&s.links, &s.weights, Time::ZERO),
                )
            })
            .collect();
        Box::new(nvls(reps.len(), Carrier::Network(paths)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::env::NcclEnv;

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
    fn nvlstree_chunks_follow_the_layout_and_the_message() {
        let k = 1024u64;
        let big = 1u64 << 40;
        let layout = |chunk, tree_max_chunk| NvlsLayout { channels: 16, chunk, tree_max_chunk };
        assert_eq!(tree_chunk_size(big, 64, layout(128 * k, 128 * k)), 128 * k);
        assert_eq!(tree_chunk_size(big, 64, layout(128 * k, 64 * k)), 64 * k);
        let p5 = layout(512 * k, 512 * k);
        assert_eq!(tree_chunk_size(big, 512, p5), 512 * k);
        // 512 pipelines (16 channels × 32 NIC heads): under 32 × 512 × 512 KiB = 8 GiB the chunk
        // drops to 256 KiB, and so on down to 32 KiB under 512 × 64 KiB = 32 MiB.
        assert_eq!(tree_chunk_size(4 << 30, 512, p5), 256 * k);
        assert_eq!(tree_chunk_size(1 << 30, 512, p5), 128 * k);
        assert_eq!(tree_chunk_size(64 << 20, 512, p5), 64 * k);
        assert_eq!(tree_chunk_size(16 << 20, 512, p5), 32 * k);
    }

    #[test]
    fn chunk_sizes_are_checked() {
        let e = NcclEnv::from_pairs([("NCCL_NVLS_CHUNKSIZE", "100")]).unwrap_err();
        assert!(e.to_string().starts_with("NCCL_NVLS_CHUNKSIZE=100: "), "{e}");
    }
}
