//! The process groups of a training step and the links they share with their siblings.

use super::StepError as Error;
use crate::comm::Communicator;
use crate::hw::{self, Cluster, NodeId};
use crate::{net, workload};

/// The process groups of `spec`'s step on `comm` beyond the world, each with the sibling
/// groups that share links with it: a 3-D layout's as Megatron lays them out, HYBRID_SHARD's
/// and a replayed step's ranks a stride apart, each beside its translates (every node's shard
/// group, every local rank's replicate group), which run the same step. Groups of one rank are
/// left out: they send nothing. With `staged`, every later pipeline stage's tensor- and
/// expert-parallel groups too ([`Layout::stage_groups`](workload::parallel::Layout)), where a
/// step posts its layers' calls one by one.
pub(crate) fn step_groups(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &workload::ddp::DdpSpec,
    staged: bool,
) -> Result<workload::jobs::GroupComms, Error> {
    use workload::jobs::GroupComm;
    use workload::parallel::Group;
    let mut groups = workload::jobs::GroupComms::new();
    let world = comm.nranks();
    let mut add = |g: Group, members: &[usize], others: &[Vec<usize>]| -> Result<(), Error> {
        let own = group_comm(cluster, comm, members)?;
        let siblings = sharing_siblings(cluster, comm, &own.0, others)?;
        groups.insert(g, GroupComm { own, siblings });
        Ok(())
    };
    if let Some(layout) = &spec.parallel {
        let later = if staged { layout.stage_groups(world) } else { Vec::new() };
        // Under fp8 the stage's amax reductions (`parallel::time_stage`).
        let fp8 = spec.rate.precision() == Some("fp8");
        let amax = fp8.then_some(Group::Amax).filter(|&g| layout.members(g, world).len() > 1);
        for g in layout.groups(world).into_iter().chain(later).chain(amax) {
            add(g, &layout.members(g, world), &layout.siblings(g, world))?;
        }
    }
    let mut strided = Vec::new();
    if spec.sharding.is_some_and(|s| s.strategy.hybrid()) {
        for g in [Group::Shard, Group::Replicate] {
            strided.extend(workload::parallel::hybrid_group(g, world, comm.ppn()).map(|s| (g, s)));
        }
    }
    if let Some(calls) = &spec.calls {
        let used = workload::calls::groups(calls, world)
            .map_err(|e| Error::Step(format!("{}: {e}", spec.model.name)))?;
        strided.extend(used.into_iter().map(|g| (g, g)));
    }
    for (g, shape) in strided {
        let Some((members, others)) = workload::parallel::strided_members(shape, world) else {
            continue;
        };
        if members.len() > 1 {
            add(g, &members, &others)
                .map_err(|e| Error::Step(format!("{}: {e}", spec.model.name)))?;
        }
    }
    Ok(groups)
}

/// The step's process groups as its report lists them, each kind once, at the highest tier
/// any group of that kind crosses (a pipeline's stage pairs, each stage's data-parallel
/// group): the world where its collectives run on it (a step without a layout or
/// HYBRID_SHARD; a replayed step where a call runs on the world), then `groups`' kinds in their
/// order, leaving out the embedding group where the model ties no embedding (nothing runs on
/// it).
pub(crate) fn describe(
    cluster: &Cluster,
    comm: &Communicator,
    spec: &workload::ddp::DdpSpec,
    groups: &workload::jobs::GroupComms,
) -> Vec<workload::ddp::CommGroup> {
    use workload::ddp::CommGroup;
    use workload::parallel::Group;
    let nvlink =
        |c: &Communicator| c.path_types().0 <= crate::hw::PathType::Nvb && !c.env().p2p_disable;
    let mut out: Vec<(usize, CommGroup)> = Vec::new();
    let hybrid = spec.sharding.is_some_and(|s| s.strategy.hybrid());
    let world = match &spec.calls {
        Some(calls) => workload::calls::runs_on_world(calls, comm.nranks()),
        None => spec.parallel.is_none() && !hybrid,
    };
    if world && comm.nranks() > 1 {
        let (level, tier) = cluster.tier(nvlink(comm));
        let ranks = comm.nranks();
        let row = CommGroup { group: Group::World.label(), ranks, nodes: cluster.nodes(), tier };
        out.push((level, row));
    }
    let tied = workload::parallel::tied(&spec.model);
    for (g, gc) in groups.iter().filter(|(g, _)| **g != Group::Embedding || tied) {
        let (sub, c) = &gc.own;
        let (level, tier) = sub.tier(nvlink(c));
        let row = CommGroup { group: g.label(), ranks: c.nranks(), nodes: sub.nodes(), tier };
        let key = |l: usize, r: &CommGroup| (l, r.nodes, r.ranks);
        match out.iter_mut().find(|(_, r)| r.group == row.group) {
            Some(slot) if key(level, &row) > key(slot.0, &slot.1) => *slot = (level, row),
            Some(_) => {}
            None => out.push((level, row)),
        }
    }
    out.into_iter().map(|(_, r)| r).collect()
}

/// The cluster and communicator of a process group of `members` (global ranks of `comm`,
/// numbered node by node): the nodes they are on, with their GPUs on each (the same local
/// GPUs on every node; otherwise as many of each node's first GPUs).
fn group_comm(
    cluster: &Cluster,
    comm: &Communicator,
    members: &[usize],
) -> Result<(Cluster, Communicator), Error> {
    let sub = group_view(cluster, comm, members)?;
    let c = Communicator::new(&sub, comm.env())?.with_gpus_per_process(1);
    Ok((sub, c))
}

/// The view of [`group_comm`]'s cluster.
fn group_view(cluster: &Cluster, comm: &Communicator, members: &[usize]) -> Result<Cluster, Error> {
    let ppn = comm.ppn().max(1);
    let mut per_node: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for &r in members {
        per_node.entry(r / ppn).or_default().push(r % ppn);
    }
    for gpus in per_node.values_mut() {
        gpus.sort_unstable();
    }
    let counts: std::collections::BTreeSet<usize> = per_node.values().map(Vec::len).collect();
    let &[per] = counts.iter().copied().collect::<Vec<_>>().as_slice() else {
        return Err(Error::Step(format!(
            "a process group of {} ranks falls unevenly on the nodes ({:?} per node); collsim times a group with as many GPUs on each of its nodes",
            members.len(),
            per_node.values().map(Vec::len).collect::<Vec<_>>()
        )));
    };
    let nodes: Vec<NodeId> = per_node.keys().map(|&n| NodeId(n)).collect();
    let locals: std::collections::BTreeSet<&Vec<usize>> = per_node.values().collect();
    Ok(match locals.into_iter().collect::<Vec<_>>().as_slice() {
        [gpus] => cluster.subset_gpus(&nodes, gpus),
        _ => cluster.subset(&nodes, per),
    })
}

/// A group's view and communicator as it runs beside `siblings`, the groups that share links
/// with it: they are copies of it on other GPUs doing the same work at the same time, so each
/// loads the links they share alike, and the group runs alone on a view whose links shared by
/// k groups (inside the nodes, the NICs' links, the network's links its rings cross between
/// nodes) give it 1/k of their capacity, in whatever mode the step runs. Checked against the
/// group and its siblings simulated together in detail (a NIC shared by two GPUs, PCIe boxes,
/// an oversubscribed spine, ECMP), at the cost of one group.
pub(super) fn with_siblings(
    own: (Cluster, Communicator),
    siblings: Vec<(Cluster, Communicator)>,
) -> (Cluster, Communicator) {
    if siblings.is_empty() {
        return own;
    }
    let mut shares: std::collections::BTreeMap<net::LinkId, usize> = Default::default();
    let mut mine = fabric_links(&own.0, &own.1);
    for node in (0..own.0.nodes()).map(|n| own.0.machine_node(NodeId(n))) {
        mine.extend(node_links(&own.0, node));
    }
    for l in &mine {
        *shares.entry(*l).or_insert(0) += 1;
    }
    for (c, m) in &siblings {
        let mut theirs = fabric_links(c, m);
        for node in (0..c.nodes()).map(|n| c.machine_node(NodeId(n))) {
            theirs.extend(node_links(c, node));
        }
        for l in theirs.intersection(&mine) {
            *shares.entry(*l).or_insert(0) += 1;
        }
    }
    let (view, comm) = own;
    (view.with_link_shares(&shares), comm)
}

/// The network links a group's rings cross between its nodes: each channel's route from its
/// NIC out of one node into its NIC in on the next (its own route under ECMP).
fn fabric_links(view: &Cluster, comm: &Communicator) -> std::collections::BTreeSet<net::LinkId> {
    let mut links = std::collections::BTreeSet::new();
    let n = view.nodes();
    if n < 2 {
        return links;
    }
    for i in 0..n {
        for (c, ch) in comm.channels().iter().enumerate() {
            if let (Some(out), Some(into)) = (ch.nic_out, ch.nic_in) {
                let (from, to) = ((NodeId(i), out), (NodeId((i + 1) % n), into));
                links.extend(view.nic_to_nic(from, to, c));
            }
        }
    }
    links
}

/// Of `siblings` (groups' global ranks), the views and communicators of those that may share
/// links with `own`'s view: inside a node (see [`node_links`]), or, on a network that is not
/// one ideal switch (tiers, oversubscription, ECMP, placement groups), any sibling on its nodes
/// when they span several (their rings may cross the same network links: [`with_siblings`]
/// counts which). Siblings on links of their own (one NIC per GPU on an ideal switch, NVSwitch
/// ports) change nothing, and are left out.
fn sharing_siblings(
    cluster: &Cluster,
    comm: &Communicator,
    own: &Cluster,
    siblings: &[Vec<usize>],
) -> Result<Vec<(Cluster, Communicator)>, Error> {
    let ppn = comm.ppn().max(1);
    let nodes: std::collections::BTreeSet<NodeId> =
        (0..own.nodes()).map(|n| own.machine_node(NodeId(n))).collect();
    let mut mine = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for members in siblings {
        // Only a sibling on some of the group's nodes can share their links; the nodes are
        // alike, so one of them shows whether it does.
        let on = members.iter().map(|&r| cluster.machine_node(NodeId(r / ppn)));
        let Some(node) = on.into_iter().find(|n| nodes.contains(n)) else { continue };
        // A sibling spread unevenly over its nodes (which its group is not) is timed as alone.
        let Ok(sub) = group_view(cluster, comm, members) else { continue };
        let fabric = !cluster.network_is_uniform() && own.nodes() > 1 && sub.nodes() > 1;
        let own_links = mine.entry(node).or_insert_with(|| node_links(own, node));
        if fabric || !node_links(&sub, node).is_disjoint(own_links) {
            let c = Communicator::new(&sub, comm.env())?.with_gpus_per_process(1);
            out.push((sub, c));
        }
    }
    Ok(out)
}

/// The links a group's GPUs use in and out of the machine's node `node`: each GPU's routes to
/// and from the NICs NCCL gives it and those NICs' own links into the network, and the routes
/// between the group's GPUs there.
fn node_links(view: &Cluster, node: NodeId) -> std::collections::BTreeSet<net::LinkId> {
    use hw::{GpuId, Vertex};
    let mut links = std::collections::BTreeSet::new();
    let here = (0..view.nodes()).map(NodeId).filter(|&n| view.machine_node(n) == node);
    for n in here {
        for g in (0..view.gpus_per_node()).map(GpuId) {
            if view.nodes() > 1 {
                for nic in view.gpu_nics(g) {
                    links.extend(view.gpu_to_nic(n, g, nic));
                    links.extend(view.nic_to_gpu(n, nic, g));
                    let (up, down) = view.nic_links(n, nic);
                    links.extend([up, down]);
                }
            }
            for h in (0..view.gpus_per_node()).map(GpuId).filter(|&h| h != g) {
                links.extend(view.route(n, Vertex::Gpu(g), Vertex::Gpu(h)).0);
            }
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{self, Mode};
    use crate::comm::env::NcclEnv;
    use crate::config;
    use workload::parallel::{Group, Layout};

    /// `group` of a layout of `tp` (pp 1) on `nodes` nodes of `topology`, with the views and
    /// communicators of its siblings: every one, and those `sharing_siblings` keeps.
    #[allow(clippy::type_complexity)]
    fn groups(
        topology: &str,
        nodes: usize,
        tp: usize,
        group: Group,
    ) -> ((Cluster, Communicator), Vec<(Cluster, Communicator)>, Vec<(Cluster, Communicator)>) {
        let (_, spec) = config::resolve_topology(topology, None).unwrap();
        let cluster = Cluster::new(&spec, nodes, spec.gpu.count);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).unwrap();
        let layout = Layout {
            tp,
            pp: 1,
            ep: 1,
            cp: 1,
            virtual_stages: 1,
            sequence_parallel: false,
            recompute: false,
            overlap_grad_reduce: false,
            align_grad_reduce: true,
            distributed_optimizer: false,
            overlap_param_gather: false,
            tp_comm_overlap: false,
        };
        let world = comm.nranks();
        let own = group_comm(&cluster, &comm, &layout.members(group, world)).unwrap();
        let all = layout.siblings(group, world);
        let kept = sharing_siblings(&cluster, &comm, &own.0, &all).unwrap();
        let every: Vec<_> = all.iter().map(|m| group_comm(&cluster, &comm, m).unwrap()).collect();
        (own, every, kept)
    }

    /// Each group's all-reduce of `bytes` alone and beside `others` (µs).
    fn together(
        own: &(Cluster, Communicator),
        others: &[(Cluster, Communicator)],
        bytes: u64,
    ) -> (f64, Vec<f64>) {
        let params =
            config::parse_profile(config::DEFAULT_PROFILE.0, config::DEFAULT_PROFILE.1).unwrap();
        let spec = workload::sweep::SweepSpec::one(
            collective::Collective::AllReduce,
            bytes,
            workload::DataType::Float,
        );
        let call = |c, m| workload::sweep::call(c, m, &spec, bytes, &params, Mode::Detailed, &[]);
        let alone = collective::simulate(&call(&own.0, &own.1)).time.as_us();
        let mut calls = vec![call(&own.0, &own.1)];
        calls.extend(others.iter().map(|(c, m)| call(c, m)));
        let runs = collective::run::simulate_together(&calls);
        (alone, runs.iter().map(|r| r.time.as_us()).collect())
    }

    #[test]
    fn shared_links_at_a_share_of_their_capacity_time_what_the_siblings_together_take() {
        // The fast path (the group alone on its share of each shared link, aggregated where it
        // can be) against the group and every sharing sibling simulated together in detail, on
        // cases big enough to aggregate (32 p4d nodes, two data-parallel groups a NIC; 16
        // a3-high nodes), on PCIe boxes and NIC-poor nodes, and on fat trees (ECMP, a 2:1
        // spine), wherever some sibling shares.
        let params =
            config::parse_profile(config::DEFAULT_PROFILE.0, config::DEFAULT_PROFILE.1).unwrap();
        let mut compared = Vec::new();
        for (topology, nodes, tp, group) in [
            ("aws-p4d", 32, 8, Group::Data(0)),
            ("gcp-a3-highgpu-8g", 16, 8, Group::Data(0)),
            ("pcie-8gpu-2socket", 1, 2, Group::Tensor),
            ("pcie-8gpu-2socket", 2, 2, Group::Data(0)),
            ("pcie-8gpu-2socket", 2, 4, Group::Data(0)),
            ("pcie-a100-4gpu-2socket", 2, 2, Group::Data(0)),
            ("polaris-a100-4gpu", 2, 2, Group::Data(0)),
            ("gcp-a2-highgpu-8g", 2, 2, Group::Data(0)),
            ("gcp-a2-highgpu-8g", 2, 4, Group::Data(0)),
            ("topologies/user/hgx-h100-roce-ecmp-2tier.toml", 8, 2, Group::Data(0)),
            ("topologies/user/hgx-h100-roce-ecmp-2tier.toml", 8, 4, Group::Data(0)),
            ("topologies/user/dgx-h100-spine-2to1.toml", 16, 8, Group::Data(0)),
        ] {
            let (own, _, sharing) = groups(topology, nodes, tp, group);
            if sharing.is_empty() {
                continue;
            }
            compared.push((topology, nodes, tp));
            let (_, together) = together(&own, &sharing, 256 << 20);
            let (view, c) = with_siblings(own, sharing);
            let spec = workload::sweep::SweepSpec::one(
                collective::Collective::AllReduce,
                256 << 20,
                workload::DataType::Float,
            );
            let call = workload::sweep::call(&view, &c, &spec, 256 << 20, &params, Mode::Auto, &[]);
            let fast = collective::simulate(&call).time.as_us();
            let slowest = together.iter().copied().fold(0.0, f64::max);
            // Under ECMP each connection hashes onto its own path, which shares do not see.
            let within = if topology.contains("ecmp") { 0.05 } else { 0.02 };
            assert!(
                (fast / slowest - 1.0).abs() < within,
                "{topology} x {nodes}: {fast} µs on shares, {slowest} µs together"
            );
        }
        assert!(compared.len() >= 3, "{compared:?}");
        assert_eq!(&compared[..2], &[("aws-p4d", 32, 8), ("gcp-a3-highgpu-8g", 16, 8)]);
    }

    #[test]
    fn sibling_groups_on_links_of_their_own_run_as_if_alone() {
        // Eight DGX H100 nodes at tp 8: eight data-parallel groups of eight ranks, one GPU a
        // node each, every GPU with a NIC of its own. None is kept as sharing, and all eight
        // all-reducing 256 MiB at once take what one takes alone (the fast path skips them).
        let (own, every, kept) = groups("dgx-h100", 8, 8, Group::Data(0));
        assert_eq!((every.len(), kept.len()), (7, 0));
        let (alone, runs) = together(&own, &every, 256 << 20);
        for t in runs {
            assert!((t / alone - 1.0).abs() < 0.01, "{t} µs beside the others, {alone} alone");
        }
    }

    #[test]
    fn sibling_groups_sharing_a_nic_slow_each_other() {
        // AWS p4d: 4 NICs for 8 GPUs, two GPUs under each NIC's PCIe switch. At tp 8 on four
        // nodes the data-parallel group of GPU 0 shares its NIC with GPU 1's: that one sibling
        // is kept, and the two take twice as long as one alone; the other six, on other NICs,
        // change nothing.
        let (own, every, partner) = groups("aws-p4d", 4, 8, Group::Data(0));
        assert_eq!((every.len(), partner.len()), (7, 1));
        let bytes = 256 << 20;
        let (alone, pair) = together(&own, &partner, bytes);
        let (_, all) = together(&own, &every, bytes);
        assert!(
            (pair[0] / alone - 2.0).abs() < 0.1,
            "{} µs beside its partner, {alone} alone",
            pair[0]
        );
        assert!(
            (all[0] / pair[0] - 1.0).abs() < 0.01,
            "{} µs beside all, {} beside one",
            all[0],
            pair[0]
        );
    }
}
