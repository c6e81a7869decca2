//! The one event loop, checked from outside: in detailed runs of every algorithm no link is
//! ever over capacity and every flow delivers exactly its bytes; aggregated forms against the
//! detailed simulation on cases where they really aggregate.

use collsim::collective::{self, Call, Collective, Form, Mode, TimingParams};
use collsim::comm::Communicator;
use collsim::comm::env::NcclEnv;
use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_topology, resolve_topology};
use collsim::hw::{Cluster, NicId, NodeId, NodeSpec};
use collsim::units::Bytes;

fn spec(preset: &str) -> NodeSpec {
    resolve_topology(preset, None).unwrap().1
}

fn sharp() -> NodeSpec {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/dgx-a100.toml"))
            .unwrap()
            .replace("kind = \"non_blocking\"", "kind = \"non_blocking\"\nsharp = true");
    parse_topology("sharp.toml", &text).unwrap()
}

fn params() -> TimingParams {
    parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap()
}

struct Case {
    what: &'static str,
    spec: NodeSpec,
    nodes: usize,
    gpus: usize,
    coll: Collective,
    bytes: u64,
    env: Vec<(&'static str, &'static str)>,
}

fn case(
    what: &'static str,
    spec: NodeSpec,
    (nodes, gpus): (usize, usize),
    coll: Collective,
    bytes: u64,
    env: &[(&'static str, &'static str)],
) -> Case {
    Case { what, spec, nodes, gpus, coll, bytes, env: env.to_vec() }
}

/// Runs `c` in `mode`, calling `inspect` on the network after every step of a detailed run.
fn run(
    c: &Case,
    mode: Mode,
    inspect: impl FnMut(&mut collsim::net::Network<collective::Token>),
) -> collective::CallRun {
    with_call(c, mode, |call| collective::simulate_inspected(call, inspect))
}

/// Hands `f` the call of `c` in `mode`.
fn with_call<R>(c: &Case, mode: Mode, f: impl FnOnce(&Call<'_>) -> R) -> R {
    let cluster = Cluster::new(&c.spec, c.nodes, c.gpus);
    let env = NcclEnv::from_pairs(c.env.iter().copied()).unwrap();
    let comm = Communicator::new(&cluster, &env).unwrap();
    let p = params();
    let call = Call {
        cluster: &cluster,
        comm: &comm,
        coll: c.coll,
        bytes: Bytes::new(c.bytes),
        elt: Bytes::new(4),
        sel: collective::select(&comm, c.coll, c.bytes),
        params: &p,
        mode,
        load: &[],
    };
    f(&call)
}

/// The estimate `--mode detailed` refuses by follows the events a detailed run really handles
/// (within a few times, across algorithms and protocols): a bad estimate would refuse runs of
/// seconds or let through runs of hours.
#[test]
fn detailed_work_is_estimated_before_running() {
    let cases = [
        case(
            "ring simple",
            spec("dgx-h100"),
            (4, 8),
            Collective::AllReduce,
            256 << 20,
            &[("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple")],
        ),
        case(
            "ring ll128",
            spec("dgx-a100"),
            (4, 8),
            Collective::AllReduce,
            32 << 20,
            &[("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "LL128")],
        ),
        case("allgather ring", spec("dgx-a100"), (4, 8), Collective::AllGather, 64 << 20, &[]),
        case(
            "tree ll128",
            spec("dgx-a100"),
            (8, 8),
            Collective::AllReduce,
            36 << 20,
            &[("NCCL_ALGO", "Tree"), ("NCCL_PROTO", "LL128")],
        ),
        case("nvlstree", spec("dgx-h100"), (8, 8), Collective::AllReduce, 256 << 20, &[]),
        case("nvls", spec("dgx-h100"), (1, 8), Collective::AllReduce, 256 << 20, &[]),
    ];
    for c in &cases {
        let work = with_call(c, Mode::Detailed, collective::run::detailed_work);
        let events = run(c, Mode::Detailed, |_| {}).events as f64;
        // Tree-family transfers weigh ten ring transfers: their flows share links with more.
        let per_event = if c.what.starts_with("ring") || c.what.starts_with("allgather") {
            work / events
        } else {
            work / events / 10.0
        };
        assert!(
            (0.1..=3.0).contains(&per_event),
            "{}: estimate {work:.3e}, {events} events",
            c.what
        );
    }
}

#[test]
fn detailed_runs_never_overload_a_link_and_conserve_bytes() {
    use Collective::*;
    let (h, a) = (spec("dgx-h100"), spec("dgx-a100"));
    let cases = [
        case(
            "ring LL",
            h.clone(),
            (2, 8),
            AllReduce,
            1 << 20,
            &[("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "LL")],
        ),
        case(
            "ring LL128",
            h.clone(),
            (2, 8),
            AllReduce,
            8 << 20,
            &[("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "LL128")],
        ),
        case("ring Simple AG", a.clone(), (2, 4), AllGather, 16 << 20, &[("NCCL_PROTO", "Simple")]),
        case("tree", a.clone(), (4, 8), AllReduce, 4 << 20, &[("NCCL_ALGO", "Tree")]),
        case("nvls", h.clone(), (1, 8), AllReduce, 16 << 20, &[("NCCL_ALGO", "NVLS")]),
        case("nvlstree", h.clone(), (2, 8), AllReduce, 8 << 20, &[("NCCL_ALGO", "NVLSTree")]),
        case(
            "collnet direct",
            sharp(),
            (2, 8),
            AllReduce,
            8 << 20,
            &[("NCCL_ALGO", "CollNetDirect"), ("NCCL_COLLNET_ENABLE", "1")],
        ),
        case(
            "collnet chain",
            sharp(),
            (2, 8),
            AllReduce,
            8 << 20,
            &[("NCCL_ALGO", "CollNetChain"), ("NCCL_COLLNET_ENABLE", "1")],
        ),
        case("broadcast", a.clone(), (2, 8), Broadcast, 4 << 20, &[]),
        case("reduce", a.clone(), (2, 8), Reduce, 4 << 20, &[]),
        case("sendrecv", h.clone(), (2, 8), SendRecv, 4 << 20, &[]),
        case("alltoall", h.clone(), (2, 8), AllToAll, 4 << 20, &[]),
        case("pat", h.clone(), (8, 1), AllGather, 8 << 20, &[("NCCL_ALGO", "PAT")]),
    ];
    for c in &cases {
        let mut steps = 0u64;
        let mut worst = 0.0f64;
        let mut accounting = (0.0, 0.0, 0.0);
        let r = run(c, Mode::Detailed, |net| {
            steps += 1;
            let caps = net.capacities().to_vec();
            let load = net.link_loads();
            for (l, c) in load.iter().zip(&caps) {
                worst = worst.max(l / c);
            }
            accounting = net.accounting();
        });
        assert_eq!(r.form, Form::Detailed, "{}: not detailed", c.what);
        assert!(steps > 0, "{}: nothing happened", c.what);
        assert!(worst <= 1.0 + 1e-9, "{}: a link at {worst} of its capacity", c.what);
        let (moved, delivered, early) = accounting;
        assert!(delivered > 0.0, "{}: nothing delivered", c.what);
        assert!(
            (moved - delivered).abs() <= 1e-9 * delivered,
            "{}: moved {moved} B, delivered {delivered} B",
            c.what
        );
        assert!(early <= 1e-9, "{}: a flow finished with {early} of its bytes left", c.what);
    }
}

#[test]
fn calls_in_one_simulation_share_the_links_they_both_cross() {
    // Two 64 MiB ring AllReduces over the same two DGX-A100s with one GPU each: every byte
    // crosses the same NIC links, so together each takes about twice as long as alone.
    let spec = spec("dgx-a100");
    let cluster = Cluster::new(&spec, 2, 1);
    let env = NcclEnv::from_pairs([("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple")]).unwrap();
    let comm = Communicator::new(&cluster, &env).unwrap();
    let p = params();
    let bytes = 64u64 << 20;
    let call = Call {
        cluster: &cluster,
        comm: &comm,
        coll: Collective::AllReduce,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(4),
        sel: collective::select(&comm, Collective::AllReduce, bytes),
        params: &p,
        mode: Mode::Auto,
        load: &[],
    };
    let alone = collective::simulate(&Call { mode: Mode::Detailed, ..call }).time.as_secs_f64();
    let both = collective::simulate_together(&[call, call]);
    assert_eq!(both.len(), 2);
    for r in &both {
        assert_eq!(r.form, Form::Detailed);
        let ratio = r.time.as_secs_f64() / alone;
        assert!((ratio - 2.0).abs() < 0.1, "together {} vs alone {alone}: x{ratio}", r.time);
    }
    // One call in a simulation of its own is the call alone.
    let one = collective::simulate_together(&[call]);
    assert_eq!(one[0].time.as_secs_f64(), alone);
}

/// Relative gap of the aggregated form from the detailed run of `c`, the detailed run's
/// transfers, and the aggregated form.
/// How far `mode`'s run of `c` is from its detailed run (relative), the detailed run's
/// transfers, and the form `mode` ran.
fn gap_in(c: &Case, mode: Mode) -> (f64, u64, Form) {
    let d = run(c, Mode::Detailed, |_| {});
    let a = run(c, mode, |_| {});
    let rel = (a.time.as_secs_f64() - d.time.as_secs_f64()).abs() / d.time.as_secs_f64();
    (rel, d.events, a.form)
}

fn gap(c: &Case) -> (f64, u64, Form) {
    gap_in(c, Mode::Aggregated)
}

#[test]
fn aggregated_is_the_detailed_result_where_they_disagreed() {
    // Before symmetric runs, the pipeline estimate said 817 us against 1,336 us detailed on 32
    // p5 nodes (NVLSTree over 512 pipelines of one or two chunks: all fill), and was 16 % slow
    // on 8 DGX-A100 with Tree/LL128. One representative pipeline now stands for all. (NCCL's
    // own NVLSTree: aws-ofi-nccl's tuner, on by default for aws-p5, picks Tree/LL128 there.)
    let own = [("NCCL_TUNER_PLUGIN", "none")];
    let cases = [
        case("p5 16 nodes", spec("aws-p5"), (16, 8), Collective::AllReduce, 36 << 20, &own),
        case("p5 32 nodes", spec("aws-p5"), (32, 8), Collective::AllReduce, 36 << 20, &own),
        case(
            "dgx-a100 8 nodes tree/ll128",
            spec("dgx-a100"),
            (8, 8),
            Collective::AllReduce,
            36 << 20,
            &[("NCCL_ALGO", "Tree"), ("NCCL_PROTO", "LL128")],
        ),
    ];
    for c in &cases {
        let (rel, events, form) = gap(c);
        assert!(events > 100_000, "{}: only {events} transfers in detail", c.what);
        assert_eq!(form, Form::Symmetric, "{}", c.what);
        assert!(rel < 1e-6, "{}: aggregated {rel} from detailed", c.what);
        // Auto, the default, runs the same.
        assert_eq!(run(c, Mode::Auto, |_| {}).form, Form::Symmetric, "{}", c.what);
    }
}

/// Auto runs Tree-family calls under 100,000 transfers symmetric where their pipelines reduce
/// (alone on the network): the detailed result, on cases that really reduce (16 channels of
/// 16 nodes; NVLSTree on p5; two channels of 64 single-NIC nodes).
#[test]
fn auto_runs_small_trees_symmetric_and_gets_the_detailed_result() {
    let cases = [
        case(
            "dgx-h100 16 nodes tree",
            spec("dgx-h100"),
            (16, 8),
            Collective::AllReduce,
            1 << 20,
            &[("NCCL_ALGO", "Tree")],
        ),
        case(
            "p5 4 nodes nvlstree",
            spec("aws-p5"),
            (4, 8),
            Collective::AllReduce,
            16 << 20,
            &[("NCCL_ALGO", "NVLSTree")],
        ),
        case(
            "a2-ultra 64 nodes tree",
            spec("gcp-a2-ultragpu-8g"),
            (64, 8),
            Collective::AllReduce,
            40_985_600,
            &[],
        ),
    ];
    for c in &cases {
        let (rel, events, form) = gap_in(c, Mode::Auto);
        assert!(events > 10_000, "{}: only {events} transfers", c.what);
        assert_eq!(form, Form::Symmetric, "{}", c.what);
        assert!(rel < 1e-6, "{}: auto {rel} from detailed", c.what);
    }
}

/// Ring, Broadcast/Reduce chains, Tree, NVLSTree and CollNet on 4 and 5 nodes (the second tree mirrored, and shifted)
/// at sizes where the detailed run moves more than 100k transfers: the aggregated form claims
/// symmetry on these uniform machines, and is the detailed result to rounding.
#[test]
fn symmetric_runs_are_exact_where_they_aggregate() {
    let grid = [
        ("dgx-a100", "Ring", "LL128", 64u64 << 20),
        ("dgx-h100", "Ring", "Simple", 512 << 20),
        ("aws-p5", "Ring", "LL", 8 << 20),
        ("dgx-a100", "Broadcast", "LL128", 256 << 20),
        ("dgx-h100", "Reduce", "Simple", 1 << 30),
        ("dgx-a100", "Tree", "LL128", 16 << 20),
        ("dgx-a100", "Tree", "Simple", 512 << 20),
        ("dgx-h100", "Tree", "LL128", 8 << 20),
        ("dgx-h100", "NVLSTree", "Simple", 256 << 20),
        ("aws-p5", "NVLSTree", "Simple", 256 << 20),
        ("gcp-a3-megagpu-8g", "Tree", "LL128", 32 << 20),
        ("sharp", "CollNetDirect", "Simple", 512 << 20),
        ("sharp", "CollNetChain", "Simple", 256 << 20),
    ];
    let mut report = Vec::new();
    for (preset, algo, proto, bytes) in grid {
        for nodes in [4, 5] {
            let node = if preset == "sharp" { sharp() } else { spec(preset) };
            let (coll, algo) = match algo {
                "Broadcast" => (Collective::Broadcast, "Ring"),
                "Reduce" => (Collective::Reduce, "Ring"),
                a => (Collective::AllReduce, a),
            };
            let env = [("NCCL_ALGO", algo), ("NCCL_PROTO", proto), ("NCCL_COLLNET_ENABLE", "1")];
            let c = case("symmetric", node, (nodes, 8), coll, bytes, &env);
            let (rel, events, form) = gap(&c);
            report.push(format!("{preset} {coll:?} {algo}/{proto} {nodes} nodes {bytes} B: {form:?} {rel:.2e} ({events} transfers)"));
            assert!(events > 100_000, "{}", report.last().unwrap());
            assert_eq!(form, Form::Symmetric, "{}", report.last().unwrap());
            assert!(rel < 1e-6, "{}", report.last().unwrap());
        }
    }
    // NVLS runs on one node only: its GPUs' pipelines stand for each other.
    let c = case(
        "nvls",
        spec("dgx-h100"),
        (1, 8),
        Collective::AllReduce,
        8 << 30,
        &[("NCCL_ALGO", "NVLS")],
    );
    let (rel, events, form) = gap(&c);
    report.push(format!("dgx-h100 NVLS 1 node 8 GiB: {form:?} {rel:.2e} ({events} transfers)"));
    assert!(
        events > 100_000 && form == Form::Symmetric && rel < 1e-6,
        "{}",
        report.last().unwrap()
    );
    println!("{}", report.join("\n"));
}

/// DGX-H100 nodes in racks of 8 under a 2:1 oversubscribed spine.
fn spine() -> NodeSpec {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/user/dgx-h100-spine-2to1.toml");
    parse_topology("spine.toml", &std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn rings_across_racks_reduce_to_a_rack_or_to_every_node() {
    // Racks of 8 on a 2:1 spine: only the hops that leave a rack cross the spine, so nodes
    // differ and one node cannot stand for all. On 16 nodes the ring repeats every rack (nodes
    // 0..8 stand for 8..16); on 9 nodes nothing repeats, so every node runs its own ranks and
    // only the channels reduce. Both are the detailed result; the steady-state rates they
    // replace were 8.7 % slow on the 9 nodes.
    let cases = [
        case(
            "16 nodes",
            spine(),
            (16, 8),
            Collective::AllReduce,
            16 << 20,
            &[("NCCL_ALGO", "Ring")],
        ),
        case("9 nodes", spine(), (9, 8), Collective::AllReduce, 64 << 20, &[("NCCL_ALGO", "Ring")]),
    ];
    for c in &cases {
        let (rel, events, form) = gap(c);
        assert!(events > 100_000, "{}: only {events} transfers in detail", c.what);
        assert_eq!(form, Form::Symmetric, "{}", c.what);
        assert!(rel < 1e-6, "{}: aggregated {rel} from detailed", c.what);
    }
}

#[test]
fn symmetric_runs_under_ecmp_split_what_the_hash_sets_apart() {
    // Four DGX-H100 nodes, each its own leaf of 16-port switches, under ECMP: every ring hop
    // between nodes is hashed onto one of 8 up-ports per channel, so channels and nodes stop
    // being copies (one node standing for all, as adaptive routing allows here, would be
    // wrong). The check sees it and refines to every node and channel: the detailed result.
    let env = [("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple")];
    let spec = |routing| crate::hardware::fat_tree_h100(16, routing);
    let bytes = 64 << 20;
    let ecmp = case("ecmp", spec("ecmp"), (4, 8), Collective::AllReduce, bytes, &env);
    let adaptive = case("adaptive", spec("adaptive"), (4, 8), Collective::AllReduce, bytes, &env);
    let (rel, events, form) = gap(&ecmp);
    assert!(events > 100_000, "only {events} transfers in detail");
    assert_eq!(form, Form::Symmetric);
    assert!(rel < 1e-6, "aggregated {rel} from detailed");
    // The hash's collisions cost the call time: the asymmetry was real.
    let (e, a) = (run(&ecmp, Mode::Detailed, |_| {}), run(&adaptive, Mode::Aggregated, |_| {}));
    assert_eq!(a.form, Form::Symmetric);
    assert!(
        e.time.as_secs_f64() > 1.02 * a.time.as_secs_f64(),
        "ecmp {} adaptive {}",
        e.time,
        a.time
    );
}

#[test]
fn symmetric_runs_beside_other_traffic_are_the_detailed_result() {
    // Background traffic on NIC 0 of every node: the channels through it differ from the
    // others, so they fall in classes of their own, and each link keeps what the load leaves.
    let node = spec("dgx-h100");
    let cluster = Cluster::new(&node, 4, 8);
    let load: Vec<collective::Load> = (0..4)
        .map(|n| {
            let tx = cluster.nic_links(NodeId(n), NicId(0)).0;
            collective::Load { path: vec![tx], cap: 20e9, weight: 1.0 }
        })
        .collect();
    let p = params();
    // 32 channels (NCCL_MIN_NCHANNELS replicates the 16 CUDA channels): each tree pipeline
    // twice, so the unloaded ones reduce to fewer representatives.
    for (algo, proto, bytes) in [("Ring", "LL128", 64u64 << 20), ("Tree", "LL128", 2 << 20)] {
        let env = NcclEnv::from_pairs([
            ("NCCL_ALGO", algo),
            ("NCCL_PROTO", proto),
            ("NCCL_MIN_NCHANNELS", "32"),
        ])
        .unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let call = |mode| Call {
            cluster: &cluster,
            comm: &comm,
            coll: Collective::AllReduce,
            bytes: Bytes::new(bytes),
            elt: Bytes::new(4),
            sel: collective::select(&comm, Collective::AllReduce, bytes),
            params: &p,
            mode,
            load: &load,
        };
        let d = collective::simulate(&call(Mode::Detailed));
        let a = collective::simulate(&call(Mode::Aggregated));
        let alone = collective::simulate(&Call { load: &[], ..call(Mode::Detailed) });
        assert_eq!(a.form, Form::Symmetric, "{algo}");
        let rel = (a.time.as_secs_f64() / d.time.as_secs_f64() - 1.0).abs();
        assert!(rel < 1e-6, "{algo}: aggregated {} detailed {}", a.time, d.time);
        assert!(
            d.time > alone.time,
            "{algo}: the load slows nothing ({} alone {})",
            d.time,
            alone.time
        );
    }
}

#[test]
fn steady_state_p2p_and_pat_agree_with_detailed_where_they_aggregate() {
    // Their flows all start together (each PAT step's, every peer pair's), so every flow at its
    // steady-state rate is what the detailed run gives: on an all-to-all of over 100k flows,
    // and PAT on 1,024 nodes (its log-many steps keep the transfers fewer).
    let cases = [
        case("alltoall", spec("dgx-h100"), (24, 8), Collective::AllToAll, 1 << 30, &[]),
        case(
            "pat all_gather",
            spec("aws-p5"),
            (1024, 1),
            Collective::AllGather,
            1 << 30,
            &[("NCCL_ALGO", "PAT")],
        ),
    ];
    for c in &cases {
        let (rel, events, form) = gap(c);
        println!("{}: {form:?} {rel:.2e} ({events} transfers)", c.what);
        assert_eq!(form, Form::Aggregated, "{}", c.what);
        assert!(rel < 0.01, "{}: aggregated {rel} from detailed", c.what);
    }
}

/// The times of calls posted into one shared network at `offsets` (µs), in detail or in their
/// steady form.
fn posted(calls: &[Call<'_>], offsets: &[u64], steady: bool) -> Vec<f64> {
    use collective::{Notice, Shared, SteadyForm};
    let mut net = Shared::new(calls[0].cluster.links(), &[]);
    let forms: Vec<_> = calls.iter().map(|c| net.register(&SteadyForm::of(c))).collect();
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| offsets[i]);
    let mut start = vec![0.0; calls.len()];
    let mut ids = vec![u32::MAX; calls.len()];
    let mut out = vec![0.0; calls.len()];
    for &i in &order {
        net.wake(collsim::units::Time::from_ns(offsets[i] * 1000), i as u32);
    }
    while let Some((t, n)) = net.advance() {
        match n {
            Notice::Wake(i) => {
                let i = i as usize;
                start[i] = t.as_secs_f64();
                let id = if steady { net.post_steady(forms[i]) } else { net.post(&calls[i]).0 };
                ids[i] = id.0;
            }
            Notice::Done(id) => {
                let i = ids.iter().position(|&x| x == id.0).unwrap();
                out[i] = t.as_secs_f64() - start[i];
            }
        }
    }
    out
}

/// A 64-GPU AllReduce of `bytes` on `cluster`'s nodes.
fn all_reduce<'a>(
    cluster: &'a Cluster,
    comm: &'a Communicator,
    p: &'a TimingParams,
    bytes: u64,
) -> Call<'a> {
    Call {
        cluster,
        comm,
        coll: Collective::AllReduce,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(2),
        sel: collective::select(comm, Collective::AllReduce, bytes),
        params: p,
        mode: Mode::Auto,
        load: &[],
    }
}

/// (algorithm, placement, MiB, offset µs, how close the steady form comes to detailed)
type PostedCase = (&'static str, &'static str, u64, u64, f64);

#[test]
fn posted_calls_in_steady_form_meet_as_detailed_ones_do() {
    posted_cases(&[
        // 2 %: a ring across nodes pays NCCL's per-step cost on top of its pipeline, and the
        // steady form splits latency from moving time on two sizes, whose pipelines hide
        // different parts of it (1.6 % apart here; 0.3 % before that cost).
        ("Ring", "spread", 256, 0, 0.02),
        ("Ring", "spread", 25, 0, 0.12),
        ("Tree", "spread", 256, 0, 0.01),
    ]);
}

#[ignore = "long: two more detailed 256 MiB rings of 64 ranks each, about 30 s"]
#[test]
fn posted_calls_in_steady_form_meet_as_detailed_ones_do_apart_and_compact() {
    posted_cases(&[("Ring", "spread", 256, 100, 0.02), ("Ring", "compact", 256, 0, 1e-6)]);
}

/// Two 8-node jobs on a 2:1 spine (16 DGX-H100s in two racks of 8), each posting one
/// AllReduce into one shared network, the second `off` µs after the first. Spread over the
/// racks every ring hop crosses the spine; compact, the jobs share no link.
fn posted_cases(cases: &[PostedCase]) {
    let whole = Cluster::new(&spine(), 16, 8);
    let p = params();
    let spread = |first: usize| -> Vec<NodeId> {
        (0..8).map(|i| NodeId(if i % 2 == 0 { first + i / 2 } else { 8 + first + i / 2 })).collect()
    };
    for &(algo, place, mib, off, tol) in cases {
        let t0 = std::time::Instant::now();
        let env = NcclEnv::from_pairs([("NCCL_ALGO", algo)]).unwrap();
        let (a, b) = match place {
            "spread" => (spread(0), spread(4)),
            _ => ((0..8).map(NodeId).collect(), (8..16).map(NodeId).collect()),
        };
        let (ca, cb) = (whole.subset(&a, 8), whole.subset(&b, 8));
        let (ma, mb) =
            (Communicator::new(&ca, &env).unwrap(), Communicator::new(&cb, &env).unwrap());
        let calls = [all_reduce(&ca, &ma, &p, mib << 20), all_reduce(&cb, &mb, &p, mib << 20)];
        let what = format!("{algo} {place} {mib} MiB, {off} us apart");
        // Alone, the steady form is the call's own time.
        let alone = collective::simulate(&Call { mode: Mode::Detailed, ..calls[0] }).time;
        let one = posted(&calls[..1], &[0], true)[0];
        assert!((one / alone.as_secs_f64() - 1.0).abs() < 1e-6, "{what}: {one} vs {alone}");
        let d = posted(&calls, &[0, off], false);
        let s = posted(&calls, &[0, off], true);
        eprintln!(
            "{what}: steady {:.1} / {:.1} us, detailed {:.1} / {:.1} us",
            s[0] * 1e6,
            s[1] * 1e6,
            d[0] * 1e6,
            d[1] * 1e6
        );
        for k in 0..2 {
            let gap = (s[k] - d[k]).abs() / d[k];
            assert!(
                gap <= tol,
                "{what}: call {k} steady {} vs detailed {} us",
                s[k] * 1e6,
                d[k] * 1e6
            );
        }
        eprintln!("{what}: checked in {:.1} s", t0.elapsed().as_secs_f64());
        if place == "compact" {
            assert!((d[0] - alone.as_secs_f64()).abs() < 1e-9, "{what}: compact jobs met");
        } else if algo == "Ring" && mib == 256 && off == 0 {
            // Each gets half the spine: its bytes take up to twice as long (1.6 times: alone,
            // this LL128 ring is held to NCCL's per-channel LL128 maximum, below its spine
            // share), and NCCL's per-step cost (126 steps) is paid once either way.
            let (per_step, steps) =
                ma.tuning().ring_step_overhead(Collective::AllReduce, calls[0].sel.proto).unwrap();
            let lat = per_step * 1e-6 * steps as f64;
            let ratio = (d[0] - lat) / (alone.as_secs_f64() - lat);
            assert!((1.5..2.05).contains(&ratio), "{what}: {} ({ratio:.3})", d[0]);
        }
    }
}
