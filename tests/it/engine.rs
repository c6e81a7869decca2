//! The one event loop, checked from outside: in detailed runs of every algorithm no link is
//! ever over capacity and every flow delivers exactly its bytes; aggregated forms against the
//! detailed simulation on cases where they really aggregate.

use collsim::collective::{self, Call, Collective, Mode, TimingParams};
use collsim::comm::Communicator;
use collsim::comm::env::NcclEnv;
use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_topology, resolve_topology};
use collsim::hw::{Cluster, NodeSpec};
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
    collective::simulate_inspected(&call, inspect)
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
            let mut load = vec![0.0f64; caps.len()];
            for (path, rate, weight) in net.rates() {
                for &l in path {
                    load[l as usize] += rate * weight;
                }
            }
            for (l, c) in load.iter().zip(&caps) {
                worst = worst.max(l / c);
            }
            accounting = net.accounting();
        });
        assert!(r.detailed, "{}: ran aggregated", c.what);
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
        assert!(r.detailed);
        let ratio = r.time.as_secs_f64() / alone;
        assert!((ratio - 2.0).abs() < 0.1, "together {} vs alone {alone}: x{ratio}", r.time);
    }
    // One call in a simulation of its own is the call alone.
    let one = collective::simulate_together(&[call]);
    assert_eq!(one[0].time.as_secs_f64(), alone);
}
