//! The model against real nccl-tests runs (calibration/data, provenance in its manifest).
//!
//! The default profile's Hopper parameters were fitted on H100_1N8G_AR_RING_TOGETHER and its
//! Ampere parameters on A100SXM80_1N8G_AR_THANOS_G8: on those two curves issue #2's targets hold
//! (|error| ≤ 10 % at every size ≥ 1 MiB, ≤ 25 % below). The other curves were not used in the
//! fit; their bounds sit a little above what the model reaches today, so that a change that
//! makes it worse fails.

use super::collsim_ok;

fn validate(log: &str, topo: &str, nodes: &str, g: &str, extra: &[&str]) -> serde_json::Value {
    let log = format!("calibration/data/{log}.log");
    let mut args = vec![
        "--log",
        &log,
        "--topology",
        topo,
        "--nodes",
        nodes,
        "--gpus-per-node",
        g,
        "--collective",
        "all_reduce",
    ];
    args.extend_from_slice(extra);
    validate_json(&args)
}

/// `collsim validate ARGS --format json`, parsed.
fn validate_json(args: &[&str]) -> serde_json::Value {
    let args = [&["validate"], args, &["--format", "json"]].concat();
    serde_json::from_str(&collsim_ok(&args)).unwrap()
}

fn rows(v: &serde_json::Value) -> &[serde_json::Value] {
    v["rows"].as_array().unwrap()
}

/// Largest |error| over the rows `keep` selects.
fn worst(v: &serde_json::Value, keep: impl Fn(&serde_json::Value) -> bool) -> f64 {
    rows(v)
        .iter()
        .filter(|r| keep(r))
        .map(|r| r["error_pct"].as_f64().unwrap().abs())
        .fold(0.0, f64::max)
}

fn from_1mib(r: &serde_json::Value) -> bool {
    r["size_bytes"].as_u64().unwrap() >= 1 << 20
}

/// Whether NCCL would run the ring collsim simulated (the other rows need Tree, NVLS, …).
fn ring_chosen(r: &serde_json::Value) -> bool {
    r["nccl_algo"] == "RING"
}

fn check_targets(v: &serde_json::Value, sizes: usize, median: f64) {
    assert_eq!(rows(v).len(), sizes);
    let small = worst(v, |r| !from_1mib(r));
    let big = worst(v, from_1mib);
    assert!(small <= 25.0, "below 1 MiB: {small}");
    assert!(big <= 10.0, "from 1 MiB: {big}");
    let m = v["median_abs_error_pct"].as_f64().unwrap();
    assert!(m <= median, "median {m}");
}

#[test]
fn h100_ring_together_meets_the_targets() {
    let v = validate(
        "H100_1N8G_AR_RING_TOGETHER",
        "dgx-h100",
        "1",
        "8",
        &["--nccl", "NCCL_ALGO=Ring", "--nccl", "NCCL_NVLS_ENABLE=0"],
    );
    check_targets(&v, 31, 3.0);
}

#[test]
fn a100_thanos_meets_the_targets() {
    let v = validate("A100SXM80_1N8G_AR_THANOS_G8", "dgx-a100", "1", "8", &[]);
    check_targets(&v, 30, 8.0);
}

#[test]
fn h100_held_out_ring_curves() {
    // Four GPUs of one node (NCCL keeps Ring: NVLS gains nothing at 4 GPUs).
    let v = validate("H100_1N4G_ALL_REDUCE_XXRJUN", "dgx-h100", "1", "4", &[]);
    assert_eq!(rows(&v).len(), 10);
    assert!(rows(&v).iter().all(ring_chosen));
    // One process per GPU (srun): the call costs 6.6 us, not the 28 us of one process driving
    // 8 GPUs; what is left at 32-64 MiB (-9 %) is this cluster's ~5 % lower NVLink rate.
    assert!(worst(&v, from_1mib) <= 10.5, "{}", worst(&v, from_1mib));
    // Ten nodes, one GPU each: the ring runs through one 400 Gb/s NIC per node.
    let v = validate("H100_10N1G_ALL_REDUCE_XXRJUN", "dgx-h100", "10", "1", &[]);
    assert_eq!(rows(&v).len(), 10);
    assert!(worst(&v, from_1mib) <= 5.0, "{}", worst(&v, from_1mib));
}

#[test]
fn a100_held_out_two_node_curves_where_nccl_runs_the_ring() {
    // Two DGX-A100-class nodes, 8 × 200 Gb/s HDR each; NCCL runs Tree below 16 MiB, which
    // collsim does not model yet, so only the ring sizes say anything about the model. They
    // cover Ring/LL128 (16–64 MiB, NVLink hops use the Ampere LL128 efficiency fitted on one
    // node) and Ring/Simple (network-bound).
    for (log, sizes, ring_sizes) in
        [("A100SXM80_2N8G_AR_CRUSOE_DSTACK", 29, 8), ("A100SXM40_2N8G_ALL_REDUCE_SOPHIA", 29, 7)]
    {
        let v = validate(log, "dgx-a100", "2", "8", &[]);
        assert_eq!(rows(&v).len(), sizes, "{log}");
        assert_eq!(rows(&v).iter().filter(|r| ring_chosen(r)).count(), ring_sizes, "{log}");
        // 16 MiB, where NCCL turns from Tree to Ring, is the worst (-15 % on CRUSOE, -22 % on
        // SOPHIA): the Tree/LL128 sizes below it are predicted too fast too (issue #13).
        let w = worst(&v, ring_chosen);
        assert!(w <= 23.0, "{log}: {w}");
        let big = |r: &serde_json::Value| r["size_bytes"].as_u64().unwrap() >= 64 << 20;
        assert!(worst(&v, big) <= 8.0, "{log}: {}", worst(&v, big));
    }
}

#[test]
fn polaris_slingshot_fit_and_held_out() {
    // Slingshot efficiency fitted on the 2-node ring sizes >= 32 MiB; 8 nodes held out.
    let big_ring =
        |r: &serde_json::Value| ring_chosen(r) && r["size_bytes"].as_u64().unwrap() >= 32 << 20;
    let v = validate("A100SXM40_2N4G_ALL_REDUCE_POLARIS", "polaris-a100-4gpu", "2", "4", &[]);
    assert!(worst(&v, big_ring) <= 3.0, "fit: {}", worst(&v, big_ring));
    // Its proxy cost per network message fitted on the ring sizes 128 KiB-1 MiB (median 7.4 %,
    // worst 20.6 %), and no latency beyond the NICs' own on its Tree sizes <= 1 KiB (-1..+14 %;
    // a 10 us message overhead put them at +107..+139 %).
    let mid =
        |r: &serde_json::Value| (128 << 10..=1 << 20).contains(&r["size_bytes"].as_u64().unwrap());
    assert!(worst(&v, mid) <= 21.0, "fit: {}", worst(&v, mid));
    let tiny = |r: &serde_json::Value| r["size_bytes"].as_u64().unwrap() <= 1 << 10;
    assert!(worst(&v, tiny) <= 15.0, "tree: {}", worst(&v, tiny));
    let v = validate("A100SXM40_8N4G_ALL_REDUCE_POLARIS", "polaris-a100-4gpu", "8", "4", &[]);
    let from_128m =
        |r: &serde_json::Value| ring_chosen(r) && r["size_bytes"].as_u64().unwrap() >= 128 << 20;
    // 4 %: its AMD hosts pay NCCL's 6 us per ring step on top of the bytes (62 steps; 1.1 %
    // before that cost, 3.8 % with it).
    assert!(worst(&v, from_128m) <= 4.0, "held out: {}", worst(&v, from_128m));
    // Held out from both: the 8-node ring AllGather, whose 1, 2 and 4 channels at small and mid
    // sizes take 265, 594 and 903-1,013 us as the proxies' messages add up (3.0 / 22.3 %; with
    // a 10 us latency per message instead of the proxy cost, 8.4 / 68.0 %).
    let v = validate_json(&[
        "--log",
        "calibration/data/A100SXM40_8N4G_ALL_GATHER_POLARIS.log",
        "--topology",
        "polaris-a100-4gpu",
        "--collective",
        "all_gather",
    ]);
    let (median, p95) =
        (v["median_abs_error_pct"].as_f64().unwrap(), v["p95_abs_error_pct"].as_f64().unwrap());
    assert!(median <= 4.0 && p95 <= 23.5, "all_gather held out: {median} / {p95}");
}

#[test]
fn rtx4090_pcie_box_without_p2p() {
    // A user-defined GPU in a user's file; nothing fitted on it. Host-memory bounces (SHM) run
    // at ~15 GB/s busbw where the links allow ~23: the model overestimates large sizes by up to
    // 37 %; the bound keeps it from getting worse.
    let v =
        validate("RTX4090_1N8G_AR_NOP2P", "topologies/user/rtx4090-epyc-8gpu.toml", "1", "8", &[]);
    assert_eq!(rows(&v).len(), 25);
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 12.0);
    assert!(worst(&v, from_1mib) <= 40.0, "{}", worst(&v, from_1mib));
}

fn validate_coll(log: &str, coll: &str) -> serde_json::Value {
    let log = format!("calibration/data/{log}.log");
    let args = [
        "--log",
        &log,
        "--topology",
        "dgx-h100",
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--collective",
        coll,
    ];
    validate_json(&args)
}

#[test]
fn h100_ring_all_gather_and_reduce_scatter_held_out() {
    // Nothing was fitted on these; NCCL runs the ring for both on one DGX-H100 node.
    for (log, coll, worst_bound) in [
        // One process per GPU: 32 MiB is the worst (all_gather -17 %, see
        // h100_held_out_ring_curves); from 256 MiB both are within 10 %.
        ("H100_1N8G_ALL_GATHER_XXRJUN", "all_gather", 18.0),
        ("H100_1N8G_REDUCE_SCATTER_XXRJUN", "reduce_scatter", 12.0),
    ] {
        let v = validate_coll(log, coll);
        assert_eq!(rows(&v).len(), 10);
        assert!(rows(&v).iter().all(ring_chosen), "{log}");
        let w = worst(&v, from_1mib);
        assert!(w <= worst_bound, "{log}: {w}");
        let big = |r: &serde_json::Value| r["size_bytes"].as_u64().unwrap() >= 256 << 20;
        assert!(worst(&v, big) <= 10.0, "{log}: {}", worst(&v, big));
        assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 10.0, "{log}");
    }
}

#[test]
fn h100_nvls_all_reduce_within_8_percent_from_32_mib() {
    // Issue #4's target. NCCL runs NVLS on one DGX-H100 from 2 MiB; the model uses NCCL's
    // NVLS efficiency (0.85) and latency (25 us) and the NVLink step latency, nothing fitted on
    // this curve.
    let v = validate("H100_1N8G_ALL_REDUCE_XXRJUN", "dgx-h100", "1", "8", &[]);
    assert_eq!(rows(&v).len(), 10);
    assert!(
        rows(&v).iter().all(|r| r["algo"] == "NVLS"
            && r["nccl_algo"] == "NVLS"
            && r["nccl_proto"] == "SIMPLE")
    );
    let w = worst(&v, |r| r["size_bytes"].as_u64().unwrap() >= 32 << 20);
    assert!(w <= 8.0, "{w}");
}

/// AllToAll and SendRecv on one process and one rank (the bench's H100): a self send and
/// receive through NCCL's P2P kernel, 9-10 us per call where all_reduce's one-rank copy takes
/// 6.5 us. `overhead.peer` (one round here) was fitted between Sophia's A100 alltoall and the
/// H100 runs; before it both curves were off by 35-38 % at every size up to 16 MiB.
#[test]
fn one_rank_alltoall_and_sendrecv_pay_their_p2p_round() {
    for (coll, bound) in [("alltoall", 10.0), ("sendrecv", 13.0)] {
        let args = [
            "--log",
            "calibration/data/2026-11-22-h100-single/all-collectives.results.txt",
            "--topology",
            "calibration/data/2026-11-22-h100-single/topology.toml",
            "--collective",
            coll,
        ];
        let v = validate_json(&args);
        assert_eq!(rows(&v).len(), 28);
        let m = v["median_abs_error_pct"].as_f64().unwrap();
        assert!(m <= bound, "{coll}: {m}");
    }
}

#[test]
fn h100_alltoall_and_sendrecv_held_out() {
    // The sendrecv's 32-256 MiB run on 4-16 channels, each at the profile's per-channel rate
    // (fitted there: p95 76.4 % without it); its alltoall is held out.
    for (log, coll, median_bound, p95_bound) in [
        ("H100_1N8G_ALLTOALL_XXRJUN", "alltoall", 11.0, 15.5),
        ("H100_1N8G_SENDRECV_XXRJUN", "sendrecv", 3.0, 6.0),
    ] {
        let v = validate_coll(log, coll);
        assert_eq!(rows(&v).len(), 10, "{log}");
        let m = v["median_abs_error_pct"].as_f64().unwrap();
        assert!(m <= median_bound, "{log}: {m}");
        let p = v["p95_abs_error_pct"].as_f64().unwrap();
        assert!(p <= p95_bound, "{log}: p95 {p}");
    }
}

#[test]
fn a_network_p2p_channel_carries_what_nccl_counts_on() {
    // XXRJUN's 10 x 1 H100 sendrecv (not in the manifest; the same file as its all_reduce):
    // two channels to the next node moving 24.9 GB/s where the NIC gives 50. At NCCL's own
    // per-channel figure (NCCL_P2P_PER_CHANNEL_NET_BW, 14 GB/s; nothing fitted) collsim
    // predicts 28 GB/s: -11 %, where uncapped channels gave -48 %.
    let args = [
        "--log",
        "calibration/data/H100_10N1G_ALL_REDUCE_XXRJUN.log",
        "--topology",
        "dgx-h100",
        "--collective",
        "sendrecv",
    ];
    let v = validate_json(&args);
    assert_eq!(rows(&v).len(), 10);
    let p = v["p95_abs_error_pct"].as_f64().unwrap();
    assert!(p <= 12.0, "p95 {p}");
}

#[test]
fn an_80_rank_sendrecv_crosses_nodes_on_one_channel() {
    // XXRJUN's 10 x 8 H100 sendrecv moves 15.2 GB/s where the 10 x 1 run moves 24.9 on two
    // channels. NCCL builds 16 CUDA channels on these nodes (8 rings of 48 GB/s doubled once,
    // connect.cc ncclTopoPostset) and 2.29 halves the channels per network peer while peers x
    // ranks/8 exceeds them: one. With 32 channels (the second doubling applied first) collsim
    // gave two and -45.5 %.
    let log = "calibration/data/H100_10N8G_SENDRECV_XXRJUN.log";
    let v = validate_json(&["--log", log, "--topology", "dgx-h100", "--collective", "sendrecv"]);
    assert_eq!(rows(&v).len(), 10);
    assert!(rows(&v).iter().all(|r| r["channels"] == 1));
    let p = v["p95_abs_error_pct"].as_f64().unwrap();
    assert!(p <= 12.0, "p95 {p}");
}

#[test]
fn aws_p5_held_out_after_the_efa_fit() {
    // Two p5.48xlarge (32 EFA NICs each): NCCL runs Tree at small sizes and NVLSTree from 2 MiB.
    // EFA's per-message overhead was fitted on run _A (topologies/transports.toml); _B and _C
    // are held out. EFA's efficiency is an assumption.
    for (log, p95_bound) in [("H100_2N8G_AR_AWSP5_B", 35.0), ("H100_2N8G_AR_AWSP5_C", 37.0)] {
        let path = format!("calibration/data/{log}.log");
        let args = [
            "--log",
            &path,
            "--topology",
            "aws-p5",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--collective",
            "all_reduce",
        ];
        let args = [&args[..], &super::P5_ENV[..]].concat();
        let v = validate_json(&args);
        assert_eq!(rows(&v).len(), 32, "{log}");
        let nvls_tree = |r: &serde_json::Value| r["algo"] == "NVLS_TREE";
        assert!(rows(&v).iter().filter(|r| nvls_tree(r)).count() >= 10, "{log}");
        assert!(worst(&v, nvls_tree) <= 27.0, "{log}: {}", worst(&v, nvls_tree));
        let p95 = v["p95_abs_error_pct"].as_f64().unwrap();
        assert!(p95 <= p95_bound, "{log}: p95 {p95}");
        assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 9.0, "{log}");
    }
}

#[test]
fn nvls_busbw_rises_with_gpu_count_as_in_nccl_1455() {
    // NVIDIA/nccl#1455, 8 GiB AllReduce on one H100 node: ~365-370 GB/s busbw at 2-4 GPUs (no
    // gain over the ring), 440 / 460 / 480 at 6 / 7 / 8. At 5 GPUs the issue reports 420 where
    // NCCL's cost model, as collsim implements it, keeps the ring (365): that size is left out.
    let busbw = |g: &str| {
        let out = collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--gpus-per-node",
            g,
            "--min-bytes",
            "8GiB",
            "--max-bytes",
            "8GiB",
            "--format",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let row = &v["rows"][0];
        (row["busbw_gbyte_per_s"].as_f64().unwrap(), row["algo"].as_str().unwrap().to_string())
    };
    for g in ["2", "3", "4"] {
        let (b, algo) = busbw(g);
        assert!((355.0..=380.0).contains(&b) && algo == "RING", "{g} GPUs: {b} {algo}");
    }
    let mut last = 0.0;
    for (g, reported) in [("6", 440.0), ("7", 460.0), ("8", 480.0)] {
        let (b, algo) = busbw(g);
        assert_eq!(algo, "NVLS", "{g} GPUs");
        assert!((b / reported - 1.0).abs() < 0.05, "{g} GPUs: {b} vs {reported}");
        assert!(b > last, "{g} GPUs: {b} not above {last}");
        last = b;
    }
}

#[test]
fn gcp_a3_high_all_gather_with_its_documented_environment() {
    // GCP A3 High (GPUDirect-TCPX), all_gather 8 MiB-8 GiB. Its run script sets NCCL_ALGO=Ring
    // and NCCL_PROTO=Simple (manifest); TCPX's efficiency (0.50) was fitted on this curve's
    // plateau, so what this checks is the ramp from 8 MiB up, not the plateau.
    let args = [
        "--log",
        "calibration/data/H100_2N8G_AG_GCPA3HIGH_DSTACK.log",
        "--topology",
        "gcp-a3-highgpu-8g",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--collective",
        "all_gather",
        "--nccl",
        "NCCL_ALGO=Ring",
        "--nccl",
        "NCCL_PROTO=Simple",
    ];
    let v = validate_json(&args);
    assert_eq!(rows(&v).len(), 11);
    assert!(rows(&v).iter().all(|r| r["algo"] == "RING" && r["proto"] == "SIMPLE"));
    let p95 = v["p95_abs_error_pct"].as_f64().unwrap();
    assert!(p95 <= 23.0, "p95 {p95}");
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 2.0);
}

#[test]
fn our_bench_program_writes_what_validate_reads() {
    // calibration/bench/collsim-bench's output from a lent H100 (one rank, every collective,
    // 8 B - 1 GiB): the log reader finds each of the seven tests with all 28 sizes.
    for coll in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
    ] {
        let args = [
            "--log",
            "calibration/data/2026-11-22-h100-single/all-collectives.results.txt",
            "--topology",
            "dgx-h100",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--collective",
            coll,
        ];
        let v = validate_json(&args);
        assert_eq!(rows(&v).len(), 28, "{coll}");
        assert_eq!(rows(&v)[27]["size_bytes"], 1u64 << 30, "{coll}");
        assert!(rows(&v).iter().all(|r| r["measured_time_us"].as_f64().unwrap() > 0.0), "{coll}");
    }
    // The JSON that `calibrate --run` wrote there (nccl-tests' -J layout) reads the same as its
    // text.
    let dir = "calibration/data/2026-11-22-h100-single";
    for coll in ["all_reduce", "all_gather", "reduce_scatter"] {
        let read = |file: &str| {
            let log = format!("{dir}/{file}");
            let args = [
                "--log",
                &log,
                "--topology",
                "dgx-h100",
                "--nodes",
                "1",
                "--gpus-per-node",
                "1",
                "--collective",
                coll,
            ];
            validate_json(&args)
        };
        let (text, json) = (read("results.txt"), read("results.json"));
        assert_eq!(rows(&text).len(), 28, "{coll}");
        for (a, b) in rows(&text).iter().zip(rows(&json)) {
            assert_eq!(a["size_bytes"], b["size_bytes"]);
            let (ta, tb) =
                (a["measured_time_us"].as_f64().unwrap(), b["measured_time_us"].as_f64().unwrap());
            assert!((ta - tb).abs() <= 0.01, "{coll}: text {ta} json {tb}");
        }
    }
}

#[test]
fn validate_reads_nccl_tests_json_as_it_reads_the_text() {
    // The same rows as nccl-tests' -J layout: validate must give the same comparison.
    let text = std::fs::read_to_string("calibration/data/H100_1N8G_AR_RING_TOGETHER.log").unwrap();
    let results: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|t| t.len() >= 13 && t[0].parse::<u64>().is_ok())
        .map(|t| {
            let side = |i: usize| {
                serde_json::json!({"time": t[i].parse::<f64>().unwrap(),
                    "alg_bw": t[i + 1].parse::<f64>().unwrap(),
                    "bus_bw": t[i + 2].parse::<f64>().unwrap(), "nwrong": t[i + 3]})
            };
            serde_json::json!({"size": t[0].parse::<u64>().unwrap(),
                "count": t[1].parse::<u64>().unwrap(), "type": t[2], "redop": t[3],
                "root": t[4].parse::<i64>().unwrap(), "out_of_place": side(5), "in_place": side(9)})
        })
        .collect();
    assert_eq!(results.len(), 31);
    let json = serde_json::json!({"args": "all_reduce_perf -b 8 -e 8G -f 2 -g 8 -J r.json",
        "results": results});
    let path = super::scratch().join("together.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let nccl = ["--nccl", "NCCL_ALGO=Ring", "--nccl", "NCCL_NVLS_ENABLE=0"];
    let from_text = validate("H100_1N8G_AR_RING_TOGETHER", "dgx-h100", "1", "8", &nccl);
    let args = [
        "--log",
        path.to_str().unwrap(),
        "--topology",
        "dgx-h100",
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--collective",
        "all_reduce",
    ];
    let from_json = validate_json(&[&args[..], &nccl[..]].concat());
    assert_eq!(rows(&from_json), rows(&from_text));
}

#[test]
fn one_rank_calls_copy_at_the_memory_bandwidth() {
    // One H100 (calibration/data/2026-11-22-h100-single): from 256 MiB a one-rank all_reduce is
    // a device copy, read + write at the datasheet's 3.35 TB/s; nothing was fitted on it.
    let args = [
        "--log",
        "calibration/data/2026-11-22-h100-single/results.txt",
        "--topology",
        "dgx-h100",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--collective",
        "all_reduce",
    ];
    let v = validate_json(&args);
    let big = |r: &serde_json::Value| r["size_bytes"].as_u64().unwrap() >= 256 << 20;
    assert_eq!(rows(&v).iter().filter(|r| big(r)).count(), 3);
    // The datasheet's 3.35 TB/s; collsim-bench measured 2.80 TB/s on that GPU (-9.4 % at 1 GiB).
    assert!(worst(&v, big) <= 10.0, "{}", worst(&v, big));
    // Up to 8 MiB both buffers stay in the 50 MB L2: the call alone, 5.1-6.5 us in this run.
    let small = |r: &serde_json::Value| r["size_bytes"].as_u64().unwrap() <= 8 << 20;
    let errors: Vec<f64> =
        rows(&v).iter().filter(|r| small(r)).map(|r| r["error_pct"].as_f64().unwrap()).collect();
    assert_eq!(errors.len(), 21);
    assert!(errors.iter().all(|e| e.abs() <= 22.0), "{errors:?}");
}

/// The pooled figures of `validate --manifest` on the repository's manifest, under the shipped
/// profile: no worse than the README's by more than one point.
fn check_pooled(v: &serde_json::Value) {
    let curves = v["accuracy"]["curves"].as_array().unwrap();
    assert_eq!(curves.len(), 37);
    let pooled = &v["accuracy"]["pooled"];
    assert_eq!(pooled["sizes"], 771);
    let (m, p) = (
        pooled["median_abs_error_pct"].as_f64().unwrap(),
        pooled["p95_abs_error_pct"].as_f64().unwrap(),
    );
    eprintln!("pooled: median {m:.1} %, p95 {p:.1} %");
    assert!(m <= 8.5 && p <= 44.7, "pooled median {m:.1} %, p95 {p:.1} %");
}

/// The fast tier's guard on the manifest: the pooled figures at the shipped profile, without
/// the leave-one-cluster-out refits (which the long tier runs below).
#[test]
fn the_pooled_figures_do_not_get_worse() {
    let v = validate_json(&["--manifest", "calibration/data/manifest.csv", "--no-held-out"]);
    check_pooled(&v);
    assert!(v.get("leave_one_cluster_out").is_none());
}

/// The held-out figures and what each cluster was calibrated on, from `validate --manifest`'s
/// JSON.
fn check_held_out(v: &serde_json::Value) {
    check_pooled(v);
    let figure = |s: &serde_json::Value| {
        (s["median_abs_error_pct"].as_f64().unwrap(), s["p95_abs_error_pct"].as_f64().unwrap())
    };
    let loo = &v["leave_one_cluster_out"];
    let (hm, hp) = figure(&loo["held_out"]);
    eprintln!("leave-one-cluster-out: median {hm:.1} %, p95 {hp:.1} %");
    assert!(hm <= 8.8 && hp <= 43.4, "held out: median {hm:.1} %, p95 {hp:.1} %");
    // A collective plan's error bands are these figures (collsim::plan::band::COLLECTIVE, to
    // the tenth of a per cent): a model change that moves them moves the bands.
    let m = collsim::plan::band::COLLECTIVE;
    assert!((hm - m.median_pct).abs() < 0.05, "held out median {hm} against {}", m.median_pct);
    assert!((hp - m.p95_pct).abs() < 0.05, "held out p95 {hp} against {}", m.p95_pct);
    let by: Vec<(String, u64, f64)> = loo["by_generation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (g["name"].as_str().unwrap().to_string(), g["sizes"].as_u64().unwrap(), figure(g).0)
        })
        .collect();
    super::training::same_classes(&by, m.classes);
    // Each cluster is calibrated on the others of its generation, never on itself.
    let clusters = loo["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 11);
    for c in clusters {
        let name = c["cluster"].as_str().unwrap();
        let on: Vec<&str> =
            c["calibrated_on"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        assert!(!on.contains(&name), "{name} calibrated on itself");
        for other in &on {
            let gen_of = |n: &str| {
                clusters.iter().find(|x| x["cluster"] == n).unwrap()["generation"].clone()
            };
            assert_eq!(gen_of(other), c["generation"], "{name} calibrated on {other}");
        }
    }
    let alone = clusters.iter().find(|c| c["cluster"] == "RTX4090-NOP2P").unwrap();
    assert_eq!(alone["base"], alone["held_out"], "alone in its generation: the profile as given");
}

/// `validate --manifest`: every curve of the repository's manifest on its recorded setup, and
/// leave-one-cluster-out, each cluster predicted with the calibration kept for it in
/// calibration/data/held-out-fits/ (the long tier below makes them again and compares). The
/// pooled figures are the README's; a change that makes either worse by more than one point
/// fails here (issue #13). Measured when set: 771 sizes over 37 curves, median 7.5 %, p95
/// 42.8 %; held out 7.9 % / 42.3 % (before NVLSTree was held to NCCL's per-channel NVLSTree
/// maximum: 7.5 / 43.7 and 7.8 / 42.4; before a ring across nodes paid NCCL's per-step cost and its
/// LL128 NCCL's per-channel maximum: 7.6 / 45.9 and 7.9 / 44.0; before Tree/Simple's cap:
/// 7.6 / 48.1 and 7.9 / 44.6; before the CUDA channels were built in NCCL's order, 16 rather
/// than 32 on a DGX-H100 across nodes: held out 9.0 / 45.4; before Tree's network steps
/// were whole messages: 7.8 / 48.1, the same held out; before point-to-point sends took the
/// peer's rail: held out 9.2 / 45.4; before the network proxy's cost per message: 8.2 / 66.2
/// and 9.5 / 66.2; before the P2P per-channel caps: 8.3 / 68.3 and 9.5 / 67.0; before the P2P
/// rounds: 9.0 / 71.7 and 10.8 / 71.3).
#[test]
fn the_pooled_and_held_out_figures_do_not_get_worse() {
    // A fit not kept would be made again and cached: in scratch, not the user's cache.
    let cache = super::scratch().join(format!("xdg-cache-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(["validate", "--manifest", "calibration/data/manifest.csv", "--format", "json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("note: 10 of 10 held-out calibrations were kept fits"), "{err}");
    check_held_out(&serde_json::from_slice(&out.stdout).unwrap());
}

/// The kept held-out calibrations are what calibrating again gives, byte for byte (a model
/// change that moves a fit fails here: run calibration/profiles/regenerate.sh), and the
/// figures from fresh fits hold.
#[ignore = "long: eleven leave-one-cluster-out calibrations, about four minutes on two cores"]
#[test]
fn the_kept_held_out_fits_are_what_calibrating_again_gives() {
    let dir = super::scratch().join(format!("held-out-fits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let v = validate_json(&[
        "--manifest",
        "calibration/data/manifest.csv",
        "--refit",
        "--fits-dir",
        dir.to_str().unwrap(),
    ]);
    check_held_out(&v);
    let files = |d: &std::path::Path| -> std::collections::BTreeMap<String, String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect()
    };
    let kept = files(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/data/held-out-fits"
    )));
    assert_eq!(files(&dir), kept, "run calibration/profiles/regenerate.sh");
}
