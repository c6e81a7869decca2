//! The model against closed forms, and its detailed and aggregated paths against each other.

use collsim::collective::{Call, CallRun, Collective, GpuParams, Mode, TimingParams};
use collsim::comm::env::NcclEnv;
use collsim::comm::{Algo, Communicator, Proto, Selection};
use collsim::config::{DEFAULT_PROFILE, parse_profile, resolve_topology};
use collsim::hw::{Arch, Cluster};
use collsim::units::{Bytes, Time};

fn setup(preset: &str, nodes: usize, g: usize, nccl: &[(&str, &str)]) -> (Cluster, Communicator) {
    let (_, spec) = resolve_topology(preset, None).unwrap();
    let cluster = Cluster::new(&spec, nodes, g);
    let env = NcclEnv::from_pairs(nccl.iter().copied()).unwrap();
    let comm = Communicator::new(&cluster, &env).unwrap();
    (cluster, comm)
}

/// One call of `coll` on `bytes` (elements of `elt` bytes), alone on the machine.
#[allow(clippy::too_many_arguments)]
fn run_call(
    coll: Collective,
    cluster: &Cluster,
    comm: &Communicator,
    bytes: u64,
    elt: u64,
    sel: &Selection,
    params: &TimingParams,
    mode: Mode,
) -> CallRun {
    collsim::collective::simulate(&Call {
        cluster,
        comm,
        coll,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(elt),
        sel: *sel,
        params,
        mode,
        load: &[],
    })
}

fn params(step: Time) -> TimingParams {
    TimingParams {
        name: "t".into(),
        source: "test".into(),
        fitted_on: None,
        call_overhead: Time::ZERO,
        launch: Time::ZERO,
        p2p_peer: Time::ZERO,
        step_latency: [[step; 3]; 3],
        bandwidth: [1.0; 3],
        nvls_bandwidth: 1.0,
        gpu_default: GpuParams::NOMINAL,
        correction: None,
        gpu: Vec::new(),
    }
}

#[test]
fn ring_allreduce_on_an_idle_uniform_ring_matches_the_closed_form() {
    // One channel on one DGX-H100: each hop GPU -> NVSwitch -> GPU has the whole 18 × 20.6 GB/s.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let n = 8.0;
    let b = 18.0 * 20.6e9;
    for (bytes, step_us) in [(8u64 * 16 * 1024, 3.0), (8 * 4096, 1.0), (8 * 32 * 1024, 0.0)] {
        let step = Time::from_us_f64(step_us);
        let sel = Selection {
            algo: Algo::Ring,
            proto: Proto::Simple,
            nchannels: 1,
            nccl_choice: None,
            tuner_line: None,
        };
        let run = run_call(
            Collective::AllReduce,
            &cluster,
            &comm,
            bytes,
            4,
            &sel,
            &params(step),
            Mode::Detailed,
        );
        // α = the hop's link latency (0.2 us in the preset) + the per-step latency.
        let alpha = 0.2e-6 + step_us * 1e-6;
        let expected = 2.0 * (n - 1.0) / n * bytes as f64 / b + 2.0 * (n - 1.0) * alpha;
        let got = run.time.as_secs_f64();
        assert!(
            (got - expected).abs() <= 1e-12 * 2.0 * (n - 1.0) + 1e-9 * expected,
            "{bytes} B: {got} vs {expected}"
        );
    }
}

fn agree(preset: &str, nodes: usize, g: usize, bytes: u64, proto: Proto, tol: f64) {
    let (cluster, comm) = setup(preset, nodes, g, &[]);
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let sel = Selection {
        algo: Algo::Ring,
        proto,
        nchannels: comm.channels_for(bytes, proto),
        nccl_choice: None,
        tuner_line: None,
    };
    let d = run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
    let a = run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
    let rel = (d.time.as_secs_f64() - a.time.as_secs_f64()).abs() / d.time.as_secs_f64();
    assert!(
        rel < tol,
        "{preset} {nodes}x{g} {bytes} B {proto:?}: detailed {} vs aggregated {}",
        d.time,
        a.time
    );
    assert!(a.events < d.events || nodes * g <= 8, "aggregation should simulate less");
}

#[test]
fn detailed_and_aggregated_agree_on_one_node() {
    for proto in Proto::ALL {
        for bytes in [4096u64, 1 << 20, 48 << 20] {
            agree("dgx-h100", 1, 8, bytes, proto, 1e-3);
            agree("dgx-a100", 1, 4, bytes, proto, 1e-3);
        }
    }
}

#[test]
fn detailed_and_aggregated_agree_across_nodes() {
    for proto in Proto::ALL {
        for bytes in [65536u64, 8 << 20] {
            // Across nodes the detailed run lets a hop borrow bandwidth while its neighbours are
            // idle; the aggregated run assumes lockstep steady-state shares. They differ by ~2 %.
            agree("dgx-h100", 2, 4, bytes, proto, 0.03);
            agree("dgx-a100", 3, 2, bytes, proto, 0.03);
        }
    }
}

#[test]
fn inter_node_traffic_crosses_the_nics() {
    // Two DGX-A100s with one GPU each: the ring runs through one HDR NIC (25 GB/s line rate,
    // 24 GB/s GPU-NIC PCIe path), so a large AllReduce takes at least 2(n-1)/n·S/24 GB/s.
    let (cluster, comm) = setup("dgx-a100", 2, 1, &[("NCCL_PROTO", "Simple")]);
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let bytes = 1u64 << 30;
    let sel = collsim::collective::select(&comm, collsim::collective::Collective::AllReduce, bytes);
    let run =
        run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
    let floor = bytes as f64 / 24e9;
    let t = run.time.as_secs_f64();
    assert!(t >= floor && t < floor * 1.05, "{t} vs floor {floor}");
}

#[test]
fn the_sending_cta_pays_its_sync_before_the_next_step() {
    // One channel, single-slice Simple steps (4 KiB per rank). Each step is the slice's wire
    // time t, then the later of the hop latency α (data visible downstream) and the sender's
    // serial sync s; the last step ends with α. So 2(n−1)(t + max(α, s)) − max(α, s) + α.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let n = 8.0;
    let b = 18.0 * 20.6e9;
    let bytes = 8 * 4096u64;
    let alpha = 0.2e-6;
    for s_us in [0.0, 5.0] {
        let mut p = params(Time::ZERO);
        p.gpu = vec![(
            Arch::Hopper,
            GpuParams { sync: [Time::from_us_f64(s_us); 3], ..GpuParams::NOMINAL },
        )];
        let sel = Selection {
            algo: Algo::Ring,
            proto: Proto::Simple,
            nchannels: 1,
            nccl_choice: None,
            tuner_line: None,
        };
        let run =
            run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
        let t = bytes as f64 / n / b;
        let gap = f64::max(alpha, s_us * 1e-6);
        let expected = 2.0 * (n - 1.0) * (t + gap) - gap + alpha;
        let got = run.time.as_secs_f64();
        assert!((got - expected).abs() <= 1e-9 * expected + 1e-10, "s={s_us}: {got} vs {expected}");
    }
}

#[test]
fn nvlink_efficiency_stretches_the_wire_time() {
    // A large LL128 AllReduce on one node is bound by NVLink: halving the protocol's NVLink
    // efficiency nearly doubles the time.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let sel = Selection {
        algo: Algo::Ring,
        proto: Proto::LL128,
        nchannels: 24,
        nccl_choice: None,
        tuner_line: None,
    };
    let time = |eff: f64| {
        let mut p = params(Time::ZERO);
        let mut g = GpuParams::NOMINAL;
        g.nvlink_efficiency[Proto::LL128 as usize] = eff;
        p.gpu = vec![(Arch::Hopper, g)];
        run_call(Collective::AllReduce, &cluster, &comm, 256 << 20, 4, &sel, &p, Mode::Aggregated)
            .time
            .as_secs_f64()
    };
    let ratio = time(0.45) / time(0.9);
    assert!((ratio - 2.0).abs() < 0.02, "{ratio}");
}

#[test]
fn ring_all_gather_and_reduce_scatter_match_their_closed_form() {
    // n−1 steps of S/n each (S the total), one channel, idle uniform ring:
    // (n−1)/n · S/B + (n−1)·α.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let n = 8.0;
    let b = 18.0 * 20.6e9;
    for coll in [Collective::AllGather, Collective::ReduceScatter] {
        for (bytes, step_us) in [(8u64 * 16 * 1024, 3.0), (8 * 4096, 1.0)] {
            let sel = Selection {
                algo: Algo::Ring,
                proto: Proto::Simple,
                nchannels: 1,
                nccl_choice: None,
                tuner_line: None,
            };
            let p = params(Time::from_us_f64(step_us));
            let run = run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
            let alpha = 0.2e-6 + step_us * 1e-6;
            let expected = (n - 1.0) / n * bytes as f64 / b + (n - 1.0) * alpha;
            let got = run.time.as_secs_f64();
            assert!(
                (got - expected).abs() <= 1e-9 * expected + 1e-10,
                "{coll:?} {bytes}: {got} vs {expected}"
            );
        }
    }
}

#[test]
fn nvls_detailed_and_aggregated_agree() {
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    for bytes in [4u64 << 20, 64 << 20, 512 << 20] {
        let sel = Selection {
            algo: Algo::Nvls,
            proto: Proto::Simple,
            nchannels: comm.nvls_channels(),
            nccl_choice: None,
            tuner_line: None,
        };
        let d =
            run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
        let a =
            run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
        let rel = (d.time.as_secs_f64() - a.time.as_secs_f64()).abs() / d.time.as_secs_f64();
        // The aggregated run holds every flow at its steady-state share; the detailed one lets a
        // flow borrow bandwidth while its neighbours wait on latency: within 3 %.
        assert!(rel < 0.03, "{bytes}: detailed {} aggregated {}", d.time, a.time);
    }
}

#[test]
fn nvls_moves_less_than_the_ring_on_eight_gpus() {
    // Per GPU (1 + 1/n)·S each way instead of 2(n−1)/n·S: on 8 GPUs NVLS beats the ring by
    // about 1.75 / 1.125 × NVLS efficiency (0.85) ≈ 1.32 at large sizes.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let p = params(Time::ZERO);
    let bytes = 1u64 << 30;
    let nv = Selection {
        algo: Algo::Nvls,
        proto: Proto::Simple,
        nchannels: 16,
        nccl_choice: None,
        tuner_line: None,
    };
    let rg = Selection {
        algo: Algo::Ring,
        proto: Proto::Simple,
        nchannels: 24,
        nccl_choice: None,
        tuner_line: None,
    };
    let t_nvls =
        run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &nv, &p, Mode::Aggregated);
    let t_ring =
        run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &rg, &p, Mode::Aggregated);
    let speedup = t_ring.time.as_secs_f64() / t_nvls.time.as_secs_f64();
    assert!((speedup - 1.75 / 1.125 * 0.85).abs() < 0.03, "{speedup}");
}

#[test]
fn two_node_tree_busbw_is_held_at_nccls_per_channel_tree_maximum() {
    // On two nodes the double binary tree sends each byte across the network once each way
    // (up to the root, down from it), the ring 2(n−1)/n times, so the NICs alone would let
    // nccl-tests' busbw exceed what they carry (8 × 24 GB/s HDR on a DGX-A100). What holds it
    // is the tree channel's CTA: NCCL's tuning model caps Tree at the channels × its per-channel
    // maximum (`perChMaxTreeBws`, Ampere on two nodes 23.6 GB/s), and B200 clusters measure
    // Tree there within 4 % of that cap (330-338 GB/s against 342; issue #45).
    let (cluster, comm) =
        setup("dgx-a100", 2, 8, &[("NCCL_ALGO", "Tree"), ("NCCL_PROTO", "Simple")]);
    let p = params(Time::ZERO);
    let bytes = 1u64 << 30;
    let sel = collsim::collective::select(&comm, Collective::AllReduce, bytes);
    assert_eq!(sel.algo, Algo::Tree);
    let run =
        run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
    let busbw = bytes as f64 / run.time.as_secs_f64() * 2.0 * 15.0 / 16.0 / 1e9;
    let cap = comm.tuning().tree_bus_cap(Proto::Simple).unwrap();
    assert!(busbw <= cap * 1.001 && busbw > 0.8 * cap, "{busbw} against NCCL's {cap}");
}

#[test]
fn broadcast_and_reduce_chains() {
    // One channel, one chunk: the chain's n−1 hops one after the other, (n−1)(S/B + α).
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let n = 8.0;
    let b = 18.0 * 20.6e9;
    let bytes = 64 * 1024u64;
    let sel = Selection {
        algo: Algo::Ring,
        proto: Proto::Simple,
        nchannels: 1,
        nccl_choice: None,
        tuner_line: None,
    };
    for coll in [Collective::Broadcast, Collective::Reduce] {
        let p = params(Time::from_us_f64(2.0));
        let run = run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
        let expected = (n - 1.0) * (bytes as f64 / b + 2.2e-6);
        let got = run.time.as_secs_f64();
        assert!((got - expected).abs() <= 1e-9 * expected + 1e-10, "{coll:?}: {got} vs {expected}");
    }
    // Many chunks on two nodes: the pipeline estimate tracks the per-flow simulation within 15 %
    // (it neither shares links between chunks in flight nor models the window while filling).
    let (cluster, comm) = setup("dgx-h100", 2, 8, &[]);
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    for bytes in [256u64 << 20, 1 << 30] {
        let sel = collsim::collective::select(&comm, Collective::Broadcast, bytes);
        let d =
            run_call(Collective::Broadcast, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
        let a =
            run_call(Collective::Broadcast, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
        let rel = (d.time.as_secs_f64() - a.time.as_secs_f64()).abs() / d.time.as_secs_f64();
        assert!(rel < 0.15, "{bytes}: detailed {} aggregated {}", d.time, a.time);
    }
}

#[test]
fn alltoall_across_nodes_is_bound_by_one_nic_per_gpu() {
    // Two DGX-H100s: each GPU sends half its buffer to the other node through its own NDR NIC
    // (48 GB/s behind PCIe gen5), the other half over NVLink, which is far faster.
    let (cluster, comm) = setup("dgx-h100", 2, 8, &[]);
    let p = params(Time::ZERO);
    let bytes = 1u64 << 30;
    let sel = collsim::collective::select(&comm, Collective::AllToAll, bytes);
    let r = run_call(Collective::AllToAll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
    let floor = bytes as f64 / 2.0 / 48e9;
    let t = r.time.as_secs_f64();
    assert!(t >= floor && t < floor * 1.02, "{t} vs {floor}");
    assert_eq!(r.proto, Proto::Simple);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The aggregated forms (`--mode aggregated`) against the per-flow simulation on small
    /// cases: on these uniform machines the ring and the tree family run symmetric (one node's
    /// ranks, one representative per class of equivalent channels or pipelines, checked), which
    /// is the detailed result to rounding. Over the whole grid (1,890 cases,
    /// `aggregated_vs_detailed_gap_distribution`) the gap is 0 to four decimals; before the
    /// symmetric runs it was median 0 %, p95 6.7 %, worst 36 %.
    #[test]
    fn aggregated_agrees_with_detailed_on_small_cases(
        preset in proptest::sample::select(vec!["dgx-a100", "dgx-h100"]),
        nodes in 1usize..=3,
        g in 2usize..=8,
        log2 in 12u32..=26,
        coll in proptest::sample::select(vec![Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter]),
    ) {
        let (cluster, comm) = setup(preset, nodes, g, &[]);
        let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
        let bytes = 1u64 << log2;
        let mut sel = collsim::collective::select(&comm, coll, bytes);
        if sel.algo == Algo::Nvls || sel.algo == Algo::NvlsTree {
            sel = Selection { algo: Algo::Ring, nchannels: comm.channels_for(bytes, sel.proto), ..sel };
        }
        let d = run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
        let a = run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
        let rel = (d.time.as_secs_f64() - a.time.as_secs_f64()).abs() / d.time.as_secs_f64();
        let what = format!("{preset} x{nodes} g{g} {bytes} B {coll:?} {:?}: detailed {} aggregated {} ({:?})", sel.algo, d.time, a.time, a.form);
        proptest::prop_assert!(a.form != collsim::collective::Form::Aggregated, "{}", what);
        proptest::prop_assert!(rel < 1e-6, "{}", what);
    }
}

/// `nodes` nodes of 8 GPUs of topology preset `preset` with IB SHARP switches
/// (`network.sharp`).
fn sharp_cluster(preset: &str, nodes: usize) -> Cluster {
    let path = format!("{}/topologies/{preset}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("kind = \"non_blocking\"", "kind = \"non_blocking\"\nsharp = true");
    let spec = collsim::config::parse_topology("sharp.toml", &text).unwrap();
    Cluster::new(&spec, nodes, 8)
}

#[test]
fn sharp_in_network_reduction_halves_nic_traffic() {
    // With IB SHARP (network.sharp, NCCL_COLLNET_ENABLE=1) each node sends its share into the
    // switch once and receives the sum once: busbw reaches about twice the NICs' rate, where a
    // ring stays at it (8 × 24 GB/s HDR on DGX-A100).
    let cluster = sharp_cluster("dgx-a100", 16);
    let p = params(Time::ZERO);
    let bytes = 8u64 << 30;
    let busbw = |algo: &str| {
        let env = NcclEnv::from_pairs([("NCCL_COLLNET_ENABLE", "1"), ("NCCL_ALGO", algo)]).unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let sel = collsim::collective::select(&comm, Collective::AllReduce, bytes);
        let t =
            run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
        bytes as f64 / t.time.as_secs_f64() * 2.0 * 127.0 / 128.0 / 1e9
    };
    let (direct, ring) = (busbw("CollNetDirect"), busbw("Ring"));
    assert!(ring > 180.0 && ring < 193.0, "{ring}");
    assert!(direct > 1.9 * ring * 0.95, "direct {direct} ring {ring}");
}

#[test]
fn collnet_direct_is_not_held_to_the_nvlstree_maximum() {
    // CollNetDirect is laid out like NVLSTree (heads over the NVSwitch), but NCCL's
    // perChMaxNVLSTreeBws is NVLSTree's alone: on 8 B200 nodes with SHARP under 2.29 (43.8 GB/s
    // a channel past two nodes, 350 GB/s over the NVLS graph's 8 channels) CollNetDirect runs
    // as under 2.30 (80), and NVLSTree is held to the cap.
    let cluster = sharp_cluster("dgx-b200", 8);
    let p = params(Time::ZERO);
    let bytes = 4u64 << 30;
    let busbw = |algo: &str, version: &str| {
        let env = NcclEnv::from_pairs([
            ("NCCL_COLLNET_ENABLE", "1"),
            ("NCCL_ALGO", algo),
            ("version", version),
        ])
        .unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let sel = collsim::collective::select(&comm, Collective::AllReduce, bytes);
        let t =
            run_call(Collective::AllReduce, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
        bytes as f64 / t.time.as_secs_f64() * 2.0 * 63.0 / 64.0 / 1e9
    };
    let (d29, d30) = (busbw("CollNetDirect", "2.29.7"), busbw("CollNetDirect", "2.30.7"));
    assert!((d29 / d30 - 1.0).abs() < 1e-6, "CollNetDirect 2.29 {d29} 2.30 {d30}");
    assert!(d29 > 500.0, "CollNetDirect {d29}");
    let tree = busbw("NVLSTree", "2.29.7");
    assert!(tree < 350.0, "NVLSTree {tree}");
}

#[test]
fn pat_pays_log_steps_where_the_ring_pays_linear_ones() {
    // One GPU per node on 64 nodes: a small AllGather takes log2(64) = 6 network steps with
    // PAT, 63 around the ring; large ones move the same bytes either way.
    let (cluster, _) = setup("dgx-h100", 64, 1, &[]);
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let time = |algo: &str, bytes: u64| {
        let env = NcclEnv::from_pairs([("NCCL_ALGO", algo)]).unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let sel = collsim::collective::select(&comm, Collective::AllGather, bytes);
        run_call(Collective::AllGather, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated)
            .time
            .as_secs_f64()
    };
    assert!(time("PAT", 64 * 1024) * 2.0 < time("Ring", 64 * 1024));
    let (pat, ring) = (time("PAT", 4 << 30), time("Ring", 4 << 30));
    assert!((pat / ring - 1.0).abs() < 0.1, "{pat} {ring}");
}

/// Prints the distribution of |aggregated − detailed| / detailed over the proptest's whole grid
/// and its 15 worst cases: `cargo test --release aggregated_vs_detailed_gap -- --ignored
/// --nocapture`. A measurement, not a check (it takes a minute).
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn aggregated_vs_detailed_gap_distribution() {
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let mut worst = Vec::new();
    for preset in ["dgx-a100", "dgx-h100"] {
        for nodes in 1..=3 {
            for g in 2..=8 {
                for log2 in 12..=26 {
                    for coll in
                        [Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter]
                    {
                        let (cluster, comm) = setup(preset, nodes, g, &[]);
                        let bytes = 1u64 << log2;
                        let mut sel = collsim::collective::select(&comm, coll, bytes);
                        if sel.algo == Algo::Nvls || sel.algo == Algo::NvlsTree {
                            sel = Selection {
                                algo: Algo::Ring,
                                nchannels: comm.channels_for(bytes, sel.proto),
                                ..sel
                            };
                        }
                        let d = run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Detailed);
                        let a =
                            run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, Mode::Aggregated);
                        let rel =
                            (a.time.as_secs_f64() - d.time.as_secs_f64()) / d.time.as_secs_f64();
                        worst.push((
                            rel.abs(),
                            rel,
                            preset,
                            nodes,
                            g,
                            log2,
                            format!("{coll:?} {:?} {:?}", sel.algo, sel.proto),
                        ));
                    }
                }
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    let n = worst.len();
    let mut abs: Vec<f64> = worst.iter().map(|w| w.0).collect();
    abs.sort_by(f64::total_cmp);
    println!(
        "cases {n} median {:.4} p95 {:.4} max {:.4}",
        abs[n / 2],
        abs[n * 95 / 100],
        abs[n - 1]
    );
    for w in worst.iter().take(15) {
        println!("{:+.4} {} {}x{} 2^{} {}", w.1, w.2, w.3, w.4, w.5, w.6);
    }
}

#[test]
fn a_p2p_group_pays_its_rounds_one_after_the_other() {
    // NCCL schedules an AllToAll's sends and receives one peer after the other, self included
    // (16 rounds on 16 ranks); a SendRecv is one round. A transfer of nothing still runs one
    // step to each peer (NCCL's synchronisation), so it is not free.
    let (cluster, comm) = setup("dgx-a100", 2, 8, &[]);
    let mut with = params(Time::ZERO);
    with.p2p_peer = Time::from_us_f64(2.0);
    for (coll, rounds) in [(Collective::AllToAll, 16.0), (Collective::SendRecv, 1.0)] {
        for bytes in [0u64, 4096, 64 << 20] {
            let sel = collsim::collective::select(&comm, coll, bytes);
            for mode in [Mode::Aggregated, Mode::Detailed] {
                let run = |p: &TimingParams| {
                    run_call(coll, &cluster, &comm, bytes, 4, &sel, p, mode).time.as_us()
                };
                let (a, b) = (run(&params(Time::ZERO)), run(&with));
                assert!((b - a - 2.0 * rounds).abs() < 1e-3, "{coll:?} {bytes} {mode:?}: {a} {b}");
                if bytes == 0 {
                    // One network hop's link latencies, at least.
                    assert!(a > 0.5, "{coll:?} of nothing: {a} us");
                }
            }
        }
    }
}

#[test]
fn p2p_channels_per_peer_follow_nccls_release() {
    // 10 x 1 H100 (one 400 Gb/s NIC per GPU, one ring channel pair): from 2.29 a network peer
    // wants ceil(50 / 14) = 4 channels, halved while 4 x ceil(10 / 8) exceeds the P2P channels;
    // before, 2. Large transfers double their channels up to that; small ones start from
    // nChannelsMin and run LL while each channel carries at most 16 KiB.
    let channels = |version: &str, nodes: usize, g: usize, coll: Collective, bytes: u64| {
        let (cluster, comm) = setup("dgx-h100", nodes, g, &[("version", version)]);
        let sel = collsim::collective::select(&comm, coll, bytes);
        let r =
            run_call(coll, &cluster, &comm, bytes, 4, &sel, &params(Time::ZERO), Mode::Aggregated);
        (r.channels, r.proto)
    };
    // A SendRecv of 16 KiB on one channel is LL; 64 MiB on two nodes is Simple on every
    // channel a peer may have.
    assert_eq!(channels("2.30", 2, 8, Collective::SendRecv, 16 << 10), (1, Proto::LL));
    let (big, proto) = channels("2.30", 2, 8, Collective::SendRecv, 64 << 20);
    assert_eq!(proto, Proto::Simple);
    let (old, _) = channels("2.22", 2, 8, Collective::SendRecv, 64 << 20);
    assert_eq!(old, 2, "2.20-2.28: two per network peer (the GPUs sit behind PCIe switches)");
    assert!(big >= old, "2.29+ fills the NIC at 14 GB/s a channel: {big} vs {old}");
    // On one all-NVLink node every peer may take 2 x (NVLink links) channels, rounded.
    let (one_node, _) = channels("2.30", 1, 8, Collective::SendRecv, 1 << 30);
    assert!(one_node > big, "{one_node} vs {big}");
}

#[test]
fn a_p2p_channel_moves_no_more_than_its_cta_or_proxy_can() {
    // Inside a node, a peer transfer's channel is one CTA whose warps keep a bounded number of
    // bytes in flight: with the GPU generation's per-channel rate set, a 32 MiB SendRecv on one
    // H100 node takes its bytes over (channels x rate), both simulated in detail and
    // aggregated; without it, NVLink alone bounds it and it runs several times faster.
    let (cluster, comm) = setup("dgx-h100", 1, 8, &[]);
    let mut capped = params(Time::ZERO);
    let hopper = GpuParams { p2p_channel: 20e9, ..GpuParams::NOMINAL };
    capped.gpu = vec![(Arch::Hopper, hopper)];
    let bytes = 32u64 << 20;
    let sel = collsim::collective::select(&comm, Collective::SendRecv, bytes);
    for mode in [Mode::Aggregated, Mode::Detailed] {
        let r = run_call(Collective::SendRecv, &cluster, &comm, bytes, 4, &sel, &capped, mode);
        let want = bytes as f64 / (r.channels as f64 * 20e9) * 1e6;
        let got = r.time.as_us();
        assert!((got / want - 1.0).abs() < 0.01, "{mode:?}: {got} us vs {want} us");
        let free = run_call(
            Collective::SendRecv,
            &cluster,
            &comm,
            bytes,
            4,
            &sel,
            &params(Time::ZERO),
            mode,
        );
        assert!(free.time.as_us() < got / 3.0, "{mode:?}: {} vs {got}", free.time.as_us());
    }
    // Beside other calls it loads the links by no more than that either.
    let call = Call {
        cluster: &cluster,
        comm: &comm,
        coll: Collective::SendRecv,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(4),
        sel,
        params: &capped,
        mode: Mode::Aggregated,
        load: &[],
    };
    let load = collsim::collective::steady_load(&call, 1.0);
    assert!(!load.is_empty() && load.iter().all(|l| l.cap == 20e9), "{:?}", load[0].cap);
    // Across nodes a channel carries NCCL_P2P_PER_CHANNEL_NET_BW (14 GB/s by default) whatever
    // the GPU: 10 x 1 H100, two channels to the next node's GPU; raised to 20, the same two
    // channels move 40 GB/s, under the 400 Gb/s NIC.
    for mode in [Mode::Aggregated, Mode::Detailed] {
        let net = |nccl: &[(&str, &str)]| {
            let (cluster, comm) = setup("dgx-h100", 10, 1, nccl);
            let sel = collsim::collective::select(&comm, Collective::SendRecv, bytes);
            let r = run_call(Collective::SendRecv, &cluster, &comm, bytes, 4, &sel, &capped, mode);
            (r.channels, bytes as f64 / r.time.as_us() / 1e3)
        };
        let (ch, gbs) = net(&[("version", "2.29")]);
        assert_eq!(ch, 2);
        assert!((gbs / 28.0 - 1.0).abs() < 0.01, "{mode:?}: {gbs} GB/s");
        let (ch, gbs) = net(&[("version", "2.29"), ("NCCL_P2P_PER_CHANNEL_NET_BW", "20")]);
        assert_eq!(ch, 2, "ceil(50 / 20) = 3 channels, a power of two, halved to fit the batch");
        assert!((gbs / 40.0 - 1.0).abs() < 0.01, "{mode:?}: {gbs} GB/s");
    }
}

#[test]
fn a_gpus_proxy_handles_its_network_messages_one_at_a_time() {
    // Slingshot's proxy thread spends 8 us on every network send and receive (topologies/
    // transports.toml). A ring AllGather on 8 Polaris nodes (32 ranks, 31 steps) on one channel
    // takes at least 31 x 8 us; on four, each entry GPU's proxy receives on two channels and
    // sends on the two others, four messages a step, and the call takes about four times as
    // long (Polaris measured 265 and 903-1,013 us).
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let (cluster, comm) = setup("polaris-a100-4gpu", 8, 4, &[]);
    let run = |nchannels: usize, proto: Proto, bytes: u64, mode: Mode| {
        let sel =
            Selection { algo: Algo::Ring, proto, nchannels, nccl_choice: None, tuner_line: None };
        run_call(Collective::AllGather, &cluster, &comm, bytes, 4, &sel, &p, mode)
    };
    let one = run(1, Proto::LL, 64 << 10, Mode::Detailed).time.as_us();
    let four = run(4, Proto::LL, 64 << 10, Mode::Detailed).time.as_us();
    assert!(one >= 31.0 * 8.0, "{one} us");
    assert!((3.5..4.5).contains(&(four / one)), "{four} vs {one} us");
    // Aggregated, one representative standing for the channels of its class loads the busiest
    // proxy as much: it agrees with the detailed run on calls where it really aggregates,
    // whatever the GPUs per node (one GPU sends and receives on its own proxy; two split the
    // channels' entries and exits).
    for g in [1, 2, 3, 4] {
        let (cluster, comm) = setup("polaris-a100-4gpu", 8, g, &[("NCCL_ALGO", "Ring")]);
        for (coll, proto, bytes) in [
            (Collective::AllGather, Proto::LL, 1u64 << 20),
            (Collective::AllReduce, Proto::LL, 1 << 20),
            (Collective::AllGather, Proto::Simple, 16 << 20),
        ] {
            let nchannels = comm.channels().len();
            let sel = Selection {
                algo: Algo::Ring,
                proto,
                nchannels,
                nccl_choice: None,
                tuner_line: None,
            };
            let run = |mode| run_call(coll, &cluster, &comm, bytes, 4, &sel, &p, mode);
            let (d, a) = (run(Mode::Detailed), run(Mode::Aggregated));
            let rel = a.time.as_secs_f64() / d.time.as_secs_f64() - 1.0;
            let case = format!("8 x {g} {coll:?} {proto:?} {bytes} B");
            // One GPU a node: its proxy interleaves the channels' sends and receives, which a
            // representative serves at their middle (7 % slow on Simple at 16 MiB).
            let tol = if g == 1 { 0.08 } else { 0.05 };
            assert!(rel.abs() < tol, "{case}: aggregated {} vs detailed {}", a.time, d.time);
            assert!(a.events < d.events, "{case}: {} vs {} events", a.events, d.events);
        }
    }
}

#[test]
fn a_p2p_send_goes_out_on_the_peers_rail_through_pxn() {
    // DGX-H100s on a rail-optimised fabric whose rail leaves have 4:1 oversubscribed uplinks to
    // the spine. NCCL (P2P_PXN_LEVEL 2, its default) sends to a peer of local index k on NIC k,
    // through GPU k over NVLink, so an AllToAll stays on the rails and runs as on a
    // non-blocking fabric; with PXN off (NCCL_PXN_DISABLE=1 or NCCL_P2P_PXN_LEVEL=0) each GPU
    // sends on its own NIC and 7/8 of the network bytes cross the spine.
    let text = include_str!("../../topologies/dgx-h100.toml");
    let rail = text
        .replace("kind = \"non_blocking\"", "kind = \"rail\"\nradix = 64\noversubscription = 4");
    assert_ne!(rail, text, "dgx-h100's network is no longer non_blocking");
    let spec = collsim::config::parse_topology("rail.toml", &rail).unwrap();
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let time = |spec: &collsim::hw::NodeSpec, nodes: usize, nccl: &[(&str, &str)], mode: Mode| {
        let cluster = Cluster::new(spec, nodes, 8);
        let env = NcclEnv::from_pairs(nccl.iter().copied()).unwrap();
        let comm = Communicator::new(&cluster, &env).unwrap();
        let bytes = 1u64 << 30;
        let sel = collsim::collective::select(&comm, Collective::AllToAll, bytes);
        run_call(Collective::AllToAll, &cluster, &comm, bytes, 4, &sel, &p, mode).time.as_secs_f64()
    };
    let (_, flat) = resolve_topology("dgx-h100", None).unwrap();
    let nodes = 48;
    let on = time(&spec, nodes, &[], Mode::Aggregated);
    let non_blocking = time(&flat, nodes, &[], Mode::Aggregated);
    assert!(
        (on / non_blocking - 1.0).abs() < 0.01,
        "rails {on} s vs non-blocking {non_blocking} s"
    );
    // GPU-to-GPU P2P off leaves no NVLink path to relay through: no PXN either.
    for off in [("NCCL_PXN_DISABLE", "1"), ("NCCL_P2P_PXN_LEVEL", "0"), ("NCCL_P2P_DISABLE", "1")] {
        let t = time(&spec, nodes, &[off], Mode::Aggregated);
        assert!(t > 2.0 * on, "{off:?}: {t} s vs {on} s with PXN");
    }
    // Every flow on the network, re-shared as each ends, agrees on a case that still crosses
    // the spine without PXN.
    for nccl in [&[][..], &[("NCCL_PXN_DISABLE", "1")][..]] {
        let (d, a) = (time(&spec, 4, nccl, Mode::Detailed), time(&spec, 4, nccl, Mode::Aggregated));
        assert!((a / d - 1.0).abs() < 0.02, "{nccl:?}: aggregated {a} s vs detailed {d} s");
    }
}

#[test]
fn a_tree_step_crosses_the_network_as_one_message() {
    // NCCL's proxy posts a network step once the GPU has written all of it (net.cc
    // sendProxyProgress: an LL step once every line's flag is set, an LL128 one once the tail
    // is bumped at the end of the step), so LL/LL128 store rounds stream over NVLink but a
    // step crosses between nodes whole, as a Simple chunk does. On two one-GPU nodes behind a
    // 1 GB/s NIC, where each channel's call is one step, every protocol moves its step up to
    // the root and back down one after the other: the time beyond an almost empty call is the
    // wire time of two steps for each, so LL128 over Simple is their wire ratio (1/0.9375, the
    // LL128 line's payload share; LL 2). Streaming the rounds across the network lets the way
    // down start before the way up has ended: 0.85 and 1.65.
    let text = include_str!("../../topologies/dgx-h100.toml");
    let slow = text.replace("speed = \"400 Gb/s\"", "speed = \"8 Gb/s\"");
    assert_ne!(slow, text, "dgx-h100's NIC is no longer 400 Gb/s");
    let spec = collsim::config::parse_topology("slow.toml", &slow).unwrap();
    let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let cluster = Cluster::new(&spec, 2, 1);
    let comm = Communicator::new(&cluster, &NcclEnv::default()).unwrap();
    let nchannels = 2;
    let beyond_empty = |proto: Proto| {
        let sel =
            Selection { algo: Algo::Tree, proto, nchannels, nccl_choice: None, tuner_line: None };
        let t = |bytes: u64| {
            let r = run_call(
                Collective::AllReduce,
                &cluster,
                &comm,
                bytes,
                4,
                &sel,
                &p,
                Mode::Detailed,
            );
            r.time.as_secs_f64()
        };
        // 16 KiB a channel: one step under every protocol (the smallest LL128 Tree step is
        // 18,000 B, LL's 32 KiB, Simple's 512 KiB).
        t(nchannels as u64 * (16 << 10)) - t(nchannels as u64 * 16)
    };
    let simple = beyond_empty(Proto::Simple);
    let (ll128, ll) = (beyond_empty(Proto::LL128) / simple, beyond_empty(Proto::LL) / simple);
    assert!((1.05..1.08).contains(&ll128), "LL128 / Simple: {ll128}");
    assert!((1.95..2.05).contains(&ll), "LL / Simple: {ll}");
}

#[test]
fn the_profiles_nvls_fraction_scales_nvls_and_nvlinks_does_not() {
    // `[bandwidth] nvlink` is point-to-point NVLink (Ring, Tree); the NVSwitch's multicast and
    // reduction has its own `nvls` fraction. Halving each moves only its own algorithm.
    let dir = super::scratch().join(format!("collsim-nvls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let busbw = |bandwidth: &str, algo: &str| -> f64 {
        assert!(DEFAULT_PROFILE.1.contains("\nnvlink = 1.0\n"));
        let text = DEFAULT_PROFILE.1.replace("\nnvlink = 1.0\n", &format!("\n{bandwidth}"));
        let p = dir.join(format!("{}-{algo}.toml", bandwidth.len()));
        std::fs::write(&p, text).unwrap();
        let out = super::collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--profile",
            p.to_str().unwrap(),
            "--nccl",
            &format!("NCCL_ALGO={algo}"),
            "--min-bytes",
            "1G",
            "--max-bytes",
            "1G",
            "--format",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["rows"][0]["busbw_gbyte_per_s"].as_f64().unwrap()
    };
    let nominal = "nvlink = 1.0\n";
    let (nvls, ring) = (busbw(nominal, "NVLS"), busbw(nominal, "Ring"));
    let half_nvls = "nvlink = 1.0\nnvls = 0.5\n";
    let half_nvlink = "nvlink = 0.5\n";
    let r = busbw(half_nvls, "NVLS") / nvls;
    assert!((0.45..0.6).contains(&r), "NVLS at nvls = 0.5: {r:.3} of nominal");
    assert!((busbw(half_nvls, "Ring") / ring - 1.0).abs() < 0.01);
    let r = busbw(half_nvlink, "Ring") / ring;
    assert!((0.45..0.6).contains(&r), "Ring at nvlink = 0.5: {r:.3} of nominal");
    assert!((busbw(half_nvlink, "NVLS") / nvls - 1.0).abs() < 0.01);
}
