//! Several jobs side by side on one cluster, and background traffic on its network.
//!
//! Each job has its own nodes (a [`Cluster::subset`] of the machine: its own rank numbering,
//! the machine's link ids) and its own workload. While one job's call runs, every other job is
//! running its own concurrent call (the one at the same sweep row, looping back to back as
//! nccl-tests does) or its training step; those calls' steady flows sit in the network for the
//! whole call, as background traffic does, and take their max-min share of every link they
//! cross. A job's slowdown is its time alone over its time beside the others.
//!
//! DDP jobs do better than steady traffic for each other: `run_shared` runs their steps
//! together in one [`Shared`](crate::collective::Shared) network, each collective posted when
//! its job's NCCL stream reaches it (in detail, or in its steady form), so buckets meet only
//! where they really overlap. A collective of a process group other than the job's world
//! (HYBRID_SHARD's shard and replicate groups, a 3-D layout's, a replayed step's) runs on the
//! group's nodes, with a copy for each sibling group that crosses some of its links (they run
//! the same collective at the same time); a 3-D job runs each pipeline stage's step.

use crate::collective::Load;
use crate::hw::{Cluster, NicId, NodeId};
use crate::units::{Bandwidth, Secs};

use super::Workload;
use super::step::Policy;

/// One job of a scenario (`[[job]]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobSpec {
    /// Its name in reports.
    pub name: String,
    /// The machine's nodes it runs on, in its rank order.
    pub nodes: Vec<NodeId>,
    /// How they were chosen: "compact", "spread" or "list".
    pub placement: &'static str,
    /// GPUs it uses on each node (the first ones).
    pub gpus_per_node: usize,
    /// What it runs.
    pub workload: Workload,
    /// Its NCCL_* variables.
    pub nccl: Vec<(String, String)>,
    /// Where each of its own ([job.nccl]) is given (`file:line:col`).
    #[serde(skip)]
    pub nccl_at: std::collections::BTreeMap<String, String>,
}

/// The shape of background traffic.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every node sends to every other (over the same NIC index), spread evenly.
    AllToAll,
    /// Every node sends to one target node.
    Incast {
        /// The receiving node.
        target: NodeId,
    },
    /// Every link of a class on the chosen nodes gives up a fraction of its capacity before
    /// anything else is shared (for `net`: each NIC's link into the network and back).
    Links {
        /// Link class: nvlink, pcie, sys or net.
        class: String,
    },
}

/// How much background traffic.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    /// A fraction of each node's NIC capacity (of each link's, for `links`).
    Fraction(f64),
    /// Bytes per second each node sends, over all its NICs.
    #[serde(serialize_with = "ser_bw")]
    PerNode(Bandwidth),
}

fn ser_bw<S: serde::Serializer>(b: &Bandwidth, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(b)
}

/// One `[[background]]` table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BackgroundSpec {
    /// Who sends to whom.
    pub pattern: Pattern,
    /// The machine's nodes that send (and, for all-to-all, receive); empty: every node.
    pub nodes: Vec<NodeId>,
    /// How much each sends.
    pub rate: Rate,
}

/// How many capped flows stand for a `links` reservation.
const RESERVATION_FLOWS: f64 = 1e6;

/// All-to-all sends to at most this many destinations per NIC, evenly spaced over the others:
/// the same share of traffic climbs each fabric tier as with every destination, at a cost
/// linear in the node count.
const ALL_TO_ALL_FANOUT: usize = 64;

impl BackgroundSpec {
    /// The flows this background puts on `machine`'s network (every one capped at its share of
    /// the rate; they take less where links are contended, by max-min).
    pub fn loads(&self, machine: &Cluster) -> Vec<Load> {
        let nics = machine.spec().nic.as_ref().map_or(0, |n| n.count);
        let links = machine.links();
        // Bytes/s one NIC of a node sends under this rate.
        let per_nic = |node: NodeId, nic: NicId| -> f64 {
            match self.rate {
                Rate::Fraction(f) => {
                    let (tx, _) = machine.nic_links(node, nic);
                    f * links[tx.0 as usize].capacity.bytes_per_sec()
                }
                Rate::PerNode(b) => b.bytes_per_sec() / nics.max(1) as f64,
            }
        };
        let all: Vec<NodeId> = (0..machine.nodes()).map(NodeId).collect();
        let nodes = if self.nodes.is_empty() { &all } else { &self.nodes };
        let mut out = Vec::new();
        match &self.pattern {
            Pattern::AllToAll => {
                let m = nodes.len();
                let fan = (m.saturating_sub(1)).min(ALL_TO_ALL_FANOUT);
                for (ia, &a) in nodes.iter().enumerate() {
                    for k in 0..fan {
                        // Destinations 1..m-1 places further along, evenly spaced.
                        let step = 1 + k * (m - 1) / fan;
                        let b = nodes[(ia + step) % m];
                        for nic in (0..nics).map(NicId) {
                            out.push(Load {
                                path: machine.nic_to_nic((a, nic), (b, nic), 0),
                                cap: per_nic(a, nic) / fan as f64,
                                weight: 1.0,
                            });
                        }
                    }
                }
            }
            Pattern::Incast { target } => {
                for &a in nodes.iter().filter(|&&a| a != *target) {
                    for nic in (0..nics).map(NicId) {
                        out.push(Load {
                            path: machine.nic_to_nic((a, nic), (*target, nic), 0),
                            cap: per_nic(a, nic),
                            weight: 1.0,
                        });
                    }
                }
            }
            Pattern::Links { class } => {
                let fraction = match self.rate {
                    Rate::Fraction(f) => f,
                    Rate::PerNode(_) => 0.0,
                };
                for &node in nodes {
                    let ids: Vec<crate::net::LinkId> = if class == "net" {
                        (0..nics)
                            .map(NicId)
                            .flat_map(|nic| {
                                let (tx, rx) = machine.nic_links(node, nic);
                                [tx, rx]
                            })
                            .collect()
                    } else {
                        machine
                            .node_links(node)
                            .filter(|l| links[l.0 as usize].class == class)
                            .collect()
                    };
                    // A reservation: so many flows, each capped at its part of the fraction, that
                    // the caps bind before any fair share does.
                    for l in ids {
                        out.push(Load {
                            path: vec![l],
                            cap: fraction * links[l.0 as usize].capacity.bytes_per_sec()
                                / RESERVATION_FLOWS,
                            weight: RESERVATION_FLOWS,
                        });
                    }
                }
            }
        }
        out
    }
}

impl BackgroundSpec {
    /// Checks the nodes it names against a machine of `nodes` nodes (the command line can
    /// shrink the cluster after the file was read).
    pub fn check(&self, nodes: usize) -> Result<(), String> {
        let target = match self.pattern {
            Pattern::Incast { target } => Some(target),
            _ => None,
        };
        match self.nodes.iter().copied().chain(target).find(|&n| n.0 >= nodes) {
            Some(NodeId(n)) => Err(format!(
                "background: node {n} does not exist (the cluster has nodes 0..{})",
                nodes - 1
            )),
            None => Ok(()),
        }
    }
}

/// The link classes a `links` background may name.
pub const LINK_CLASSES: [&str; 4] = ["nvlink", "pcie", "sys", "net"];

/// A process group of a step other than the world's: its ranks' view and communicator, and
/// its siblings that share links with it (copies of it on other GPUs of the job, which run the
/// same collectives at the same time: each node's shard group, each local rank's replicate
/// group, the other tensor ranks' data-parallel groups).
pub(crate) struct GroupComm {
    /// The group's nodes and GPUs (the machine's link ids, at full capacity).
    pub own: (Cluster, crate::comm::Communicator),
    /// Its siblings that cross some of its links.
    pub siblings: Vec<(Cluster, crate::comm::Communicator)>,
}

/// A job's process groups other than the world, by group.
pub(crate) type GroupComms = std::collections::BTreeMap<super::parallel::Group, GroupComm>;

/// One DDP job's step (or one pipeline stage's), to run in a shared network.
pub(crate) struct SharedStep<'a> {
    /// The job's nodes (the machine's link ids).
    pub cluster: &'a Cluster,
    /// Its communicator.
    pub comm: &'a crate::comm::Communicator,
    /// Timing parameters.
    pub params: &'a crate::collective::TimingParams,
    /// Its step.
    pub plan: &'a super::ddp::StepPlan,
    /// How its collectives run: in detail with [`Mode::Detailed`](crate::collective::Mode),
    /// else in their steady form ([`SteadyForm`](crate::collective::SteadyForm)).
    pub mode: crate::collective::Mode,
    /// Its process groups beyond the world (HYBRID_SHARD's, a 3-D layout's, a replayed
    /// step's): a group missing here has one rank, and its collectives take no time.
    pub groups: &'a GroupComms,
    /// The pipeline stage this step is, in a 3-D job: its data-parallel collectives run on the
    /// stage's group.
    pub stage: Option<usize>,
    /// How its collectives take their time.
    pub policy: super::step::Policy,
}

/// A call of a step on a shared network: its step (job and stage), group, copy (0 the group's
/// own, then its siblings), collective, bytes and element type.
type CallKey = (
    usize,
    Option<usize>,
    super::parallel::Group,
    usize,
    crate::collective::Collective,
    u64,
    super::DataType,
);

/// Steady forms registered on a shared network, by call, with their labels.
type Forms = std::collections::BTreeMap<CallKey, (crate::collective::FormId, &'static str)>;

/// The owner recorded for a sibling group's copy of a call: it loads the links, and nothing
/// waits for it.
const SIBLING: usize = usize::MAX;

/// A job's collectives, posted into the shared network.
struct Posting<'n, 'a> {
    net: &'n mut crate::collective::Shared,
    job: usize,
    /// Which job each posted call belongs to (by call id).
    owners: &'n mut Vec<usize>,
    /// Each timer's job, the job's step count when it was set, and the timeline's own tag.
    tags: &'n mut Vec<(usize, u32, u32)>,
    epoch: u32,
    step: &'n SharedStep<'a>,
    forms: &'n mut Forms,
    /// The network's links and standing load, and the calls timed alone on it so far.
    network: (&'n [crate::net::Link], &'n [Load]),
    timed: &'n mut Timed,
}

/// Calls timed alone (with their group's copies) on a shared network, by call (copy 0): their
/// time, algorithm, protocol and channels.
type Timed =
    std::collections::BTreeMap<CallKey, (crate::units::Time, &'static str, &'static str, usize)>;

/// Posts `copy` (0 the group's own, then its siblings) of a collective of `step` (job `job`)
/// on `at` into `net`: its call id, algorithm, protocol and channels.
fn post(
    net: &mut crate::collective::Shared,
    forms: &mut Forms,
    (job, step): (usize, &SharedStep<'_>),
    (group, collective, bytes, dtype): (
        super::parallel::Group,
        crate::collective::Collective,
        u64,
        super::DataType,
    ),
    copy: usize,
    (cluster, comm): (&Cluster, &crate::comm::Communicator),
) -> (crate::collective::CallId, &'static str, &'static str, usize) {
    use crate::collective::{Mode, SteadyForm};
    let s = step;
    let spec = super::sweep::SweepSpec::one(collective, bytes, dtype);
    let call = super::sweep::call(cluster, comm, &spec, bytes, s.params, s.mode, &[]);
    let algo = if crate::collective::is_p2p(collective) { "P2P" } else { call.sel.algo.name() };
    let (id, proto) = if comm.nranks() == 1 {
        // One rank's call crosses no link: it takes its time alone, copy included.
        let run = crate::collective::simulate(&call);
        let time =
            crate::units::Time::from_us_f64(crate::collective::run::corrected(&call, &run).0);
        (net.post_timed(time, run.form), run.proto.name())
    } else if s.mode == Mode::Detailed {
        let (id, proto, _) = net.post(&call);
        (id, proto.name())
    } else {
        let key = (job, s.stage, group, copy, collective, bytes, dtype);
        let (form, proto) = *forms.entry(key).or_insert_with(|| {
            let form = SteadyForm::of(&call);
            (net.register(&form), form.proto.name())
        });
        (net.post_steady(form), proto)
    };
    (id, algo, proto, call.sel.nchannels)
}

/// A collective of a step, with its group's copies, alone in a network over `links` that
/// carries `load`: how long it takes, and its algorithm, protocol and channels.
fn alone(
    (links, load): (&[crate::net::Link], &[Load]),
    (job, step): (usize, &SharedStep<'_>),
    what: (super::parallel::Group, crate::collective::Collective, u64, super::DataType),
    own: (&Cluster, &crate::comm::Communicator),
    siblings: &[(Cluster, crate::comm::Communicator)],
) -> (crate::units::Time, &'static str, &'static str, usize) {
    let mut net = crate::collective::Shared::new(links, load);
    let mut forms = Forms::new();
    let (id, algo, proto, channels) = post(&mut net, &mut forms, (job, step), what, 0, own);
    for (copy, (cluster, comm)) in siblings.iter().enumerate() {
        post(&mut net, &mut forms, (job, step), what, copy + 1, (cluster, comm));
    }
    let took = net.finish(id).unwrap_or(crate::units::Time::ZERO);
    (took, algo, proto, channels)
}

impl super::timeline::Comms for Posting<'_, '_> {
    fn launch(
        &mut self,
        _now: Secs,
        group: super::parallel::Group,
        collective: crate::collective::Collective,
        bytes: crate::units::Bytes,
        dtype: super::DataType,
    ) -> super::timeline::Launched {
        let bytes = bytes.get();
        use super::parallel::Group;
        let s = self.step;
        let group = s.stage.map_or(group, |st| super::parallel::on_stage(group, st));
        let (own, siblings): ((&Cluster, &crate::comm::Communicator), &[_]) = match group {
            Group::World => ((s.cluster, s.comm), &[]),
            g => match s.groups.get(&g) {
                Some(gc) => ((&gc.own.0, &gc.own.1), &gc.siblings),
                None => ((s.cluster, s.comm), &[]),
            },
        };
        // A group of one rank sends nothing; an in-place call there launches nothing.
        let one = group != Group::World && !s.groups.contains_key(&group);
        if one || crate::collective::in_place_no_op(own.1.nranks(), collective) {
            let id =
                self.net.post_timed(crate::units::Time::ZERO, crate::collective::Form::Aggregated);
            self.owners.push(self.job);
            let (algo, proto, links) = ("", "", Vec::new());
            return super::timeline::Launched { handle: id.0, algo, proto, channels: 0, links };
        }
        let what = (group, collective, bytes, dtype);
        let job = (self.job, s);
        let (id, algo, proto, channels) = match s.policy {
            Policy::Shared => {
                let posted = post(self.net, self.forms, job, what, 0, own);
                self.owners.push(self.job);
                for (copy, (cluster, comm)) in siblings.iter().enumerate() {
                    post(self.net, self.forms, job, what, copy + 1, (cluster, comm));
                    self.owners.push(SIBLING);
                }
                posted
            }
            Policy::Cached => {
                let key = (self.job, s.stage, group, 0, collective, bytes, dtype);
                let (took, algo, proto, channels) = *self
                    .timed
                    .entry(key)
                    .or_insert_with(|| alone(self.network, job, what, own, siblings));
                let id = self.net.post_timed(took, crate::collective::Form::Aggregated);
                self.owners.push(self.job);
                (id, algo, proto, channels)
            }
        };
        // In a shared network the links' load changes as the jobs' calls come and go: no
        // steady-state figure to give.
        let links = Vec::new();
        super::timeline::Launched { handle: id.0, algo, proto, channels, links }
    }

    fn hold(&mut self, now: Secs, d: Secs) -> u32 {
        // Due at the timeline's own end of it, rounded up: holds one after another do not
        // gather the clock's rounding.
        let (at, net) = ((now + d).ceil(), self.net.now());
        let id = self.net.post_timed(at.max(net) - net, crate::collective::Form::Aggregated);
        self.owners.push(self.job);
        id.0
    }

    fn wake(&mut self, at: Secs, tag: u32) {
        self.tags.push((self.job, self.epoch, tag));
        self.net.wake(at.ceil(), (self.tags.len() - 1) as u32);
    }
}

/// The shared network of jobs' steps ([`run_shared`]): each job's collectives posted into it,
/// its completions and timers routed back to the job whose step set them.
struct Network<'s, 'a> {
    net: crate::collective::Shared,
    steps: &'s [SharedStep<'a>],
    /// Which job each posted call belongs to (by call id).
    owners: Vec<usize>,
    /// Each timer's job, the job's step count when it was set, and the timeline's own tag.
    tags: Vec<(usize, u32, u32)>,
    /// Each job's step count (a timer set by an earlier step is stale).
    epochs: Vec<u32>,
    forms: Forms,
    /// The links and their standing load, and the calls timed alone on them.
    links: &'s [crate::net::Link],
    load: &'s [Load],
    timed: Timed,
}

impl super::step::Fabric for Network<'_, '_> {
    fn with(&mut self, j: usize, f: &mut dyn FnMut(&mut dyn super::timeline::Comms)) {
        f(&mut Posting {
            net: &mut self.net,
            job: j,
            owners: &mut self.owners,
            tags: &mut self.tags,
            epoch: self.epochs[j],
            step: &self.steps[j],
            forms: &mut self.forms,
            network: (self.links, self.load),
            timed: &mut self.timed,
        })
    }

    fn next(&mut self) -> Option<(Secs, usize, super::timeline::Event)> {
        use super::timeline::Event;
        use crate::collective::Notice;
        loop {
            let (t, notice) = self.net.advance()?;
            let (j, event) = match notice {
                Notice::Done(id) => match self.owners[id.0 as usize] {
                    SIBLING => continue,
                    j => (j, Event::Done(id.0)),
                },
                Notice::Wake(k) => {
                    let (j, epoch, tag) = self.tags[k as usize];
                    if epoch != self.epochs[j] {
                        continue;
                    }
                    (j, Event::Wake(tag))
                }
            };
            return Some((Secs::of(t), j, event));
        }
    }
}

/// The most steps a job runs while another's first step has not ended: ten times the most the
/// caller lets run side by side (steps at most a thousandfold apart), so that a step that
/// never ends costs seconds, not hours.
const MAX_STEPS: u32 = 10_000;

/// Runs every job's step in one network over `links` that carries `load` throughout: all start
/// at time zero, each collective is posted when its NCCL stream reaches it and shares every
/// link by max-min with the other jobs' collectives in flight. A job that finishes before the
/// others starts its next step at once (its traffic goes on, as in training); each job's first
/// step is its result. `tick` is called as each job's first step ends.
pub(crate) fn run_shared(
    steps: &[SharedStep<'_>],
    links: &[crate::net::Link],
    load: &[Load],
    tick: &(dyn Fn() + Sync),
) -> Vec<super::ddp::StepResult> {
    use super::step::Fabric;
    let mut fabric = Network {
        net: crate::collective::Shared::new(links, load),
        steps,
        owners: Vec::new(),
        tags: Vec::new(),
        epochs: vec![0u32; steps.len()],
        forms: Forms::new(),
        links,
        load,
        timed: Timed::new(),
    };
    // A 3-D job's stages are consecutive steps: a stage's sends go to the job's first stage's
    // index plus theirs.
    let peers = |j: usize| j - steps[j].stage.unwrap_or(0);
    let mut lines: Vec<_> = (steps.iter().enumerate())
        .map(|(j, s)| {
            let mut line = s.plan.timeline();
            line.peers = peers(j);
            line
        })
        .collect();
    let mut first: Vec<Option<super::ddp::StepResult>> = vec![None; steps.len()];
    let mut started = vec![0.0f64; steps.len()];
    for (j, line) in lines.iter_mut().enumerate() {
        fabric.with(j, &mut |io| line.start(Secs::ZERO, io));
    }
    super::step::drive(&mut fabric, &mut lines, |fabric, lines| {
        // Steps that ended: record the first, start the next (unless it took no time at all).
        for j in 0..steps.len() {
            let Some(end) = lines[j].end.map(Secs::get) else { continue };
            if first[j].is_none() {
                first[j] = Some(steps[j].plan.result(&lines[j]));
                tick();
            }
            if first.iter().all(Option::is_some) || end <= started[j] {
                continue;
            }
            // The next step starts once its batch is loaded too.
            let next = end.max(started[j] + steps[j].plan.loader_secs());
            fabric.epochs[j] += 1;
            started[j] = next;
            let mut line = steps[j].plan.timeline();
            line.peers = peers(j);
            // What its neighbours sent ahead, and its sends still on their way, carry over.
            line.carry(&mut lines[j]);
            lines[j] = line;
            let line = &mut lines[j];
            // Started now and waiting for its batch: the network's calls are posted at its
            // clock, so a step started ahead of it would post its first calls early.
            if next > end {
                line.delay(Secs::new(next - end), "loading the next batch");
            }
            fabric.with(j, &mut |io| line.start(Secs::new(end), io));
        }
        // A job whose step never ends (a bug: its stages waiting on each other) stops the run
        // rather than letting the others step on for ever (its step then reads as not ended).
        first.iter().all(Option::is_some) || fabric.epochs.iter().any(|&e| e > MAX_STEPS)
    });
    first
        .into_iter()
        .zip(steps)
        .zip(&lines)
        .map(|((r, s), line)| r.unwrap_or_else(|| s.plan.result(line)))
        .collect()
}
