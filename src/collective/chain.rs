//! Broadcast and Reduce, as NCCL runs them on its rings (`nccl-model.md` §4.2): a chain of the
//! n ranks in ring order — from the root onward for Broadcast, ending at the root for Reduce —
//! along which each channel pipelines its share in one-step chunks (Simple: NCCL_BUFFSIZE/8;
//! LL and LL128: one store round, since they forward data as it arrives), each connection
//! holding at most 8 chunks in flight.
//!
//! [`Mode::Detailed`] moves every chunk as a flow with max-min rates re-shared as flows come
//! and go. [`Mode::Aggregated`] runs one channel per class of equivalent ones on the network
//! ([`symmetry`]); where that is too costly, the pipeline estimate: the first chunk crosses
//! every hop at the rate it gets while all channels cross that hop together, and the others
//! follow at the pace of the slowest hop when every hop of every channel is busy.

use super::ring::{ring_hop, stream_unit};
use super::run::{self, Algorithm, Call, Closed, Ctx, Form, Load, Signal, steady_with_reserved};
use super::{Collective, Mode, symmetry};
use crate::comm::{Communicator, HopClass, Proto};
use crate::hw::Cluster;
use crate::net::solver::EqualShares;
use crate::net::{LinkId, PathId};
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
    (0..nch)
        .map(|c| {
            hop_ids
                .iter()
                .map(|&j| {
                    let (node, i) = (j / ppn, j % ppn);
                    ring_hop(cluster, comm, c, node, i)
                })
                .collect()
        })
        .collect()
}

/// Every hop of every channel busy at once, for `explain`'s bottleneck.
pub(crate) fn steady_paths(call: &Call<'_>) -> Vec<Vec<LinkId>> {
    let comm = call.comm;
    let nch = call.sel.nchannels.clamp(1, comm.channels().len().max(1));
    if comm.nranks() < 2 {
        return Vec::new();
    }
    hop_paths(call.coll, call.cluster, comm, nch).into_iter().flatten().map(|(p, _)| p).collect()
}

/// One Broadcast or Reduce of `call.bytes` from/to rank 0 with the selection's protocol and
/// channel count.
pub(crate) fn new(call: &Call<'_>, cx: &mut Ctx<'_>) -> Box<dyn Algorithm> {
    let (cluster, comm, sel, params) = (call.cluster, call.comm, &call.sel, call.params);
    let (bytes, elt) = (call.bytes.get(), call.elt.get());
    let (nnodes, ppn) = (comm.nnodes(), comm.ppn());
    let n = nnodes * ppn;
    let nch = sel.nchannels.clamp(1, comm.channels().len().max(1));
    if n < 2 || bytes == 0 {
        return Box::new(Closed::new(Time::ZERO));
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
    let gpu = params.gpu(cluster.spec().gpu.arch);
    let p = sel.proto as usize;
    let sync = gpu.sync[p];
    let links = cluster.links();
    let latency =
        |path: &[LinkId]| path.iter().fold(Time::ZERO, |t, l| t + links[l.0 as usize].latency);
    let channels: Vec<Vec<Hop>> = hop_paths(call.coll, cluster, comm, nch)
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
    let build = |channels: &[Vec<Hop>], paths: Vec<Vec<PathId>>| {
        let nh = channels.first().map_or(0, |c| c.len());
        let nc = channels.len();
        Chain {
            delay: channels.iter().map(|c| c.iter().map(|h| h.delay).collect()).collect(),
            eff: channels.iter().map(|c| c.iter().map(|h| h.eff).collect()).collect(),
            p2p: channels.iter().map(|c| c.iter().map(|h| h.p2p).collect()).collect(),
            paths,
            chunks,
            unit,
            last,
            sync,
            nh,
            sent: vec![vec![0; nh]; nc],
            arrived: vec![vec![0; nh]; nc],
            busy: vec![vec![false; nh]; nc],
            finish: Time::ZERO,
            done: 0,
        }
    };
    match call.mode {
        Mode::Aggregated | Mode::Auto => {
            if let Some((t, form)) = symmetric(call, &channels, chunks, &build) {
                return Box::new(Closed::timed(t, form));
            }
            let unit = per_channel as f64 / chunks as f64;
            Box::new(Closed::new(estimate(
                &channels,
                cluster.capacities(),
                call.load,
                chunks,
                unit,
                sync,
            )))
        }
        Mode::Detailed => {
            let paths: Vec<Vec<PathId>> = channels
                .iter()
                .map(|c| c.iter().map(|h| cx.add_path(&h.links)).collect())
                .collect();
            Box::new(build(&channels, paths))
        }
    }
}

/// Builds a running chain over some channels' hops and their registered paths.
type Build<'a> = dyn Fn(&[Vec<Hop>], Vec<Vec<PathId>>) -> Chain + 'a;

/// Budget of the symmetric run: representative flows, and links visited by its rate solves
/// (about 0.25 s on this repository's 2-core machine).
const SYMMETRIC_FLOWS: usize = 4_096;
const SYMMETRIC_WORK: u64 = 4_000_000;

/// One representative channel per class of equivalent channels, each hop's flows standing for
/// their images on the links they share ([`symmetry`]): the detailed result, when the check
/// finds the channels equivalent and the run fits its budget; else `None`.
fn symmetric(
    call: &Call<'_>,
    channels: &[Vec<Hop>],
    chunks: usize,
    build: &Build<'_>,
) -> Option<(Time, Form)> {
    let nh = channels.first().map_or(0, |c| c.len());
    // Each chunk crosses every hop; a few solves per crossing, each over the flows' links plus
    // a fixed cost per flow, about 16 links' worth. At least one channel of one link per hop.
    let cost = |entries: usize, flows: usize| (chunks * (entries + 16 * flows)) as u64;
    if cost(nh, nh) > SYMMETRIC_WORK {
        return None;
    }
    let raw: Vec<Vec<Vec<u32>>> = channels
        .iter()
        .map(|c| c.iter().map(|h| h.links.iter().map(|l| l.0).collect()).collect())
        .collect();
    let same = |a: &Hop, b: &Hop| (a.delay, a.eff, a.p2p) == (b.delay, b.eff, b.p2p);
    let images = |c: usize, r: usize| {
        (0..nh)
            .map(|h| same(&channels[c][h], &channels[r][h]).then(|| (raw[c][h].as_slice(), h)))
            .collect::<Option<Vec<_>>>()
    };
    let own = |r: usize| raw[r].iter().map(Vec::as_slice).collect::<Vec<_>>();
    let caps = run::capacities_beside_load(call);
    let symmetry::Classes { reps, paths: reduced, .. } =
        symmetry::refine(channels.len(), &caps, SYMMETRIC_FLOWS, images, own)?;
    let entries: usize = reduced.iter().map(|r| r.links.len()).sum();
    if cost(entries, reduced.len()) > SYMMETRIC_WORK {
        return None;
    }
    let rep_channels: Vec<Vec<Hop>> = reps
        .iter()
        .map(|&r| {
            channels[r]
                .iter()
                .map(|h| Hop { links: h.links.clone(), delay: h.delay, eff: h.eff, p2p: h.p2p })
                .collect()
        })
        .collect();
    // Every channel its own representative is the detailed run, and says so.
    let form = if reps.len() == channels.len() { Form::Detailed } else { Form::Symmetric };
    let t = run::run_alone(call.cluster.links(), &caps, SYMMETRIC_WORK, Time::MAX, |cx| {
        let paths = (0..reps.len())
            .map(|k| {
                (0..nh)
                    .map(|h| {
                        let red = &reduced[k * nh + h];
                        cx.add_weighted_path(&red.links, &red.weights, rep_channels[k][h].delay)
                    })
                    .collect()
            })
            .collect();
        Box::new(build(&rep_channels, paths))
    })?;
    Some((t, form))
}

fn estimate(
    channels: &[Vec<Hop>],
    caps: &[f64],
    load: &[Load],
    chunks: usize,
    unit: f64,
    sync: Time,
) -> Time {
    let raw: Vec<Vec<Vec<u32>>> = channels
        .iter()
        .map(|c| c.iter().map(|h| h.links.iter().map(|l| l.0).collect()).collect())
        .collect();
    let all: Vec<&[u32]> = raw.iter().flatten().map(|p| p.as_slice()).collect();
    // With other traffic the load takes its steady-state rate on every link; the fill shares
    // what it leaves.
    let (steady, caps) = steady_with_reserved(caps, &all, load);
    let hops = channels.first().map_or(0, |c| c.len());
    let mut counter = EqualShares::new(caps.len());
    let fill: Vec<Vec<f64>> = (0..hops)
        .map(|h| {
            let paths: Vec<&[u32]> = raw.iter().map(|c| c[h].as_slice()).collect();
            counter.shares(&caps, &paths)
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
    Time::from_secs_f64_ceil(worst)
}

/// What a chain's transfers and timers mean (`c`: channel, `h`: hop along it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// A chunk finished crossing hop `h` of channel `c`.
    Moved {
        /// Channel.
        c: u32,
        /// Hop.
        h: u32,
    },
    /// It is visible at the hop's receiver.
    Arrived {
        /// Channel.
        c: u32,
        /// Hop.
        h: u32,
    },
    /// The hop's sender has paid its sync and may send again.
    Released {
        /// Channel.
        c: u32,
        /// Hop.
        h: u32,
    },
}

impl From<Ev> for Signal {
    fn from(e: Ev) -> Signal {
        Signal::Chain(e)
    }
}

/// A running Broadcast or Reduce, every chunk a flow.
struct Chain {
    paths: Vec<Vec<PathId>>,
    delay: Vec<Vec<Time>>,
    eff: Vec<Vec<f64>>,
    p2p: Vec<Vec<bool>>,
    chunks: usize,
    unit: u64,
    last: u64,
    sync: Time,
    /// Hops per channel.
    nh: usize,
    /// Per channel, per hop: chunks sent, chunks arrived at its receiver, sender busy.
    sent: Vec<Vec<usize>>,
    arrived: Vec<Vec<usize>>,
    busy: Vec<Vec<bool>>,
    finish: Time,
    /// Channels whose last hop delivered every chunk.
    done: usize,
}

impl Chain {
    fn try_send(&mut self, cx: &mut Ctx<'_>, c: usize, h: usize) {
        let k = self.sent[c][h];
        if self.busy[c][h] || k >= self.chunks {
            return;
        }
        // Data: the first hop's sender has it all; the others once it arrived from upstream.
        if h > 0 && self.arrived[c][h - 1] <= k {
            return;
        }
        // Window: the receiver holds at most WINDOW chunks it has not forwarded.
        if h + 1 < self.nh && k >= self.sent[c][h + 1] + WINDOW {
            return;
        }
        let payload = if k + 1 == self.chunks { self.last } else { self.unit };
        let wire = Bytes::new((payload as f64 / self.eff[c][h]).ceil() as u64);
        cx.flow(self.paths[c][h], wire, Ev::Moved { c: c as u32, h: h as u32 });
        self.busy[c][h] = true;
    }
}

impl Algorithm for Chain {
    fn form(&self) -> Form {
        Form::Detailed
    }

    fn start(&mut self, cx: &mut Ctx<'_>) {
        for c in 0..self.paths.len() {
            self.try_send(cx, c, 0);
        }
    }

    fn on(&mut self, cx: &mut Ctx<'_>, signal: Signal) {
        let Signal::Chain(ev) = signal else { return };
        let now = cx.now();
        match ev {
            Ev::Moved { c, h } => {
                let (c, h) = (c as usize, h as usize);
                self.sent[c][h] += 1;
                cx.at(now + self.delay[c][h], Ev::Arrived { c: c as u32, h: h as u32 });
                if self.p2p[c][h] && self.sync > Time::ZERO {
                    cx.at(now + self.sync, Ev::Released { c: c as u32, h: h as u32 });
                } else {
                    self.busy[c][h] = false;
                    self.try_send(cx, c, h);
                }
                if h > 0 {
                    self.try_send(cx, c, h - 1);
                }
            }
            Ev::Released { c, h } => {
                let (c, h) = (c as usize, h as usize);
                self.busy[c][h] = false;
                self.try_send(cx, c, h);
            }
            Ev::Arrived { c, h } => {
                let (c, h) = (c as usize, h as usize);
                self.arrived[c][h] += 1;
                if h + 1 == self.nh && self.arrived[c][h] == self.chunks {
                    self.finish = self.finish.max(now);
                    self.done += 1;
                }
                if h + 1 < self.nh {
                    self.try_send(cx, c, h + 1);
                }
            }
        }
    }

    fn finished(&self) -> Option<Time> {
        (self.done == self.paths.len()).then_some(self.finish)
    }

    fn last(&self) -> Time {
        self.finish
    }
}
