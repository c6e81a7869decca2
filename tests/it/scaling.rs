//! Collectives at scale (issue #45 item 5): busbw against node count on Together's B200
//! cluster, and the rule that a fixed-size collective does not get faster with more nodes.
//!
//! What this file asserts is what the model reaches today, not the target (every cell
//! within 15 %): see `docs/collective-scaling.md` for the measured decline, the mechanisms that
//! carry it and which of them collsim does not model yet. The reference numbers stay here so
//! that the target can be tightened cell by cell as the mechanisms land.

/// Peak busbw (GB/s) of Together's B200 scaling run: 8 B200 and 8 ConnectX-7 400 Gb/s HCAs per
/// node, NCCL 2.29.7, nccl-tests -g 1 float, the algorithm forced with NCCL_ALGO (NCCL picks the
/// protocol). Source: shared/data/nccl-scaling/together_b200_nccl_scaling_and_stragglers.md,
/// section (b) (github.com/togethercomputer/together-dgxc-benchmarking
/// worklog/2026-04-20_nccl_collective_scaling_report.md @ 661e8e14), the `ring`, `nvlstree` and
/// `tree` columns of the rows `all_reduce,{2,4,8}GB,{2..64}` and `all_gather,{2,4,8}GB,{2..64}`.
/// Per (collective, NCCL_ALGO, nodes): busbw at 2, 4 and 8 GiB.
const TOGETHER_B200: &[(&str, &str, usize, [f64; 3])] = &[
    ("all_reduce", "Ring", 2, [342.4, 343.7, 344.4]),
    ("all_reduce", "Ring", 4, [329.0, 332.2, 333.0]),
    ("all_reduce", "Ring", 8, [311.6, 309.7, 308.4]),
    ("all_reduce", "Ring", 16, [287.4, 307.6, 307.9]),
    ("all_reduce", "Ring", 32, [269.4, 289.8, 310.0]),
    ("all_reduce", "Ring", 64, [223.8, 269.3, 288.3]),
    ("all_reduce", "NVLSTree", 2, [687.3, 705.6, 713.1]),
    ("all_reduce", "NVLSTree", 4, [257.8, 266.6, 267.2]),
    ("all_reduce", "NVLSTree", 8, [255.7, 266.0, 266.4]),
    ("all_reduce", "NVLSTree", 16, [253.2, 263.9, 265.4]),
    ("all_reduce", "NVLSTree", 32, [250.8, 264.5, 266.7]),
    ("all_reduce", "NVLSTree", 64, [247.9, 263.5, 266.6]),
    ("all_reduce", "Tree", 2, [330.1, 335.3, 338.1]),
    ("all_reduce", "Tree", 4, [184.8, 186.8, 188.1]),
    ("all_reduce", "Tree", 8, [189.7, 192.3, 193.8]),
    ("all_reduce", "Tree", 16, [187.4, 190.4, 192.0]),
    ("all_reduce", "Tree", 32, [187.1, 191.0, 192.9]),
    ("all_reduce", "Tree", 64, [186.6, 190.5, 192.6]),
    ("all_gather", "Ring", 2, [338.7, 341.6, 343.1]),
    ("all_gather", "Ring", 4, [325.7, 328.8, 334.2]),
    ("all_gather", "Ring", 8, [313.2, 316.0, 312.7]),
    ("all_gather", "Ring", 16, [288.0, 317.2, 310.9]),
    ("all_gather", "Ring", 32, [237.0, 286.2, 317.2]),
    ("all_gather", "Ring", 64, [224.7, 234.1, 286.2]),
];

/// One size of a sweep: busbw and algbw (GB/s), and "ALGO/PROTO".
type Row = (f64, f64, String);

/// busbw and algbw (GB/s) and "ALGO/PROTO" of each size of a sweep from `min` to `max`
/// (factor 2).
fn sweep(
    topology: &str,
    nodes: usize,
    coll: &str,
    (min, max): (&str, &str),
    algo: Option<&str>,
) -> Vec<Row> {
    let nodes = nodes.to_string();
    let forced = algo.map(|a| format!("NCCL_ALGO={a}"));
    let mut args = vec![
        "simulate",
        "--topology",
        topology,
        "--nodes",
        &nodes,
        "--collective",
        coll,
        "--min-bytes",
        min,
        "--max-bytes",
        max,
        "--format",
        "json",
        // The release Together ran: 2.30 lays out B200's NVLSTree differently across nodes.
        "--nccl-version",
        "2.29.7",
    ];
    if let Some(f) = &forced {
        args.extend(["--nccl", f]);
    }
    let out = super::collsim_ok(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mech = format!("{}/{}", r["algo"].as_str().unwrap(), r["proto"].as_str().unwrap());
            let bw = |k: &str| r[k].as_f64().unwrap();
            (bw("busbw_gbyte_per_s"), bw("algbw_gbyte_per_s"), mech)
        })
        .collect()
}

/// How far above the measurement the model may be, per (algorithm, nodes): 15 % where it
/// reaches the target (two nodes, where every size is bandwidth-bound, and Tree at
/// every node count, held to NCCL's per-channel Tree maximum), and elsewhere what it reaches
/// today, for the reasons docs/collective-scaling.md gives: Ring from 4 nodes +25 % (the per-step
/// cost and the LL128 cap are in; the 8-node plateau, 310 GB/s against 344 on two nodes, is
/// not), NVLSTree from 4 nodes +30 % (held to 2.29's per-channel maximum, 43.8 GB/s, it reaches
/// 320-342 GB/s; the rest of the drop to 248-267 has no mechanism yet). No cell may be
/// more than 15 % pessimistic, which catches the window-bound cliffs the issue reported
/// (dgx-h100 all_gather at 1 GiB, 47 GB/s on 128 nodes). The ceilings may only come down.
fn ceiling(algo: &str, nodes: usize) -> f64 {
    match (algo, nodes) {
        (_, 2) | ("Tree", _) => 0.15,
        ("Ring", _) => 0.25,
        _ => 0.30,
    }
}

#[test]
fn the_b200_scaling_table_holds_where_the_model_reaches_it() {
    let mut report = Vec::new();
    let mut misses = Vec::new();
    for &(coll, algo, nodes, measured) in TOGETHER_B200 {
        let rows = sweep("dgx-b200", nodes, coll, ("2GiB", "8GiB"), Some(algo));
        assert_eq!(rows.len(), 3, "{coll} {algo} {nodes}");
        for ((busbw, _, mech), (m, gib)) in rows.iter().zip(measured.iter().zip([2, 4, 8])) {
            let err = busbw / m - 1.0;
            report.push(format!(
                "{coll} {algo:8} {nodes:2} nodes {gib} GiB: measured {m:6.1} model {busbw:6.1} \
                 ({mech}) {:+5.1} %",
                100.0 * err
            ));
            if err > ceiling(algo, nodes) || err < -0.15 {
                misses.push(report.last().unwrap().clone());
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(misses.is_empty(), "off the B200 table:\n{}", misses.join("\n"));
}

/// Together's `nvls` column (same run, same sizes): busbw at 2, 4 and 8 GiB on 2-64 nodes with
/// NCCL choosing the algorithm. Cell by cell it is the `ring` or the `nvlstree` column's figure:
/// all_reduce on 2 nodes 686-713 = NVLSTree; on 4 and 8 nodes 312-322 against Ring's 308-333 and
/// NVLSTree's 256-267; 16 nodes NVLSTree at 2 GiB, Ring above; 32 nodes Ring at 8 GiB; 64 nodes
/// NVLSTree. all_gather (no NVLSTree; NVLS needs SHARP across nodes) is the ring's figure to
/// within 1.5 % everywhere. What NCCL 2.29.7's cost model picked. Per (collective, nodes): busbw
/// at 2, 4, 8 GiB.
const TOGETHER_B200_DEFAULT: &[(&str, usize, [f64; 3])] = &[
    ("all_reduce", 2, [686.3, 705.7, 713.2]),
    ("all_reduce", 4, [312.5, 317.0, 319.3]),
    ("all_reduce", 8, [320.7, 321.4, 322.2]),
    ("all_reduce", 16, [251.9, 312.5, 308.1]),
    ("all_reduce", 32, [251.2, 265.0, 306.8]),
    ("all_reduce", 64, [247.8, 263.7, 264.1]),
    ("all_gather", 2, [338.9, 341.7, 343.1]),
    ("all_gather", 4, [326.0, 330.3, 332.7]),
    ("all_gather", 8, [311.7, 314.0, 315.5]),
    ("all_gather", 16, [287.3, 316.3, 313.1]),
    ("all_gather", 32, [236.7, 286.9, 312.5]),
    ("all_gather", 64, [224.9, 236.9, 286.1]),
];

/// NCCL 2.29's own choice on B200 nodes, read off Together's table: in each cell the chosen
/// algorithm is the forced column whose busbw the unforced run matches (the nearer of `ring`
/// and `nvlstree`; all_gather has the ring only), and collsim under 2.29.7 must pick the same.
/// It does in all 18 all_reduce cells since its 2.29 tables carry that release's NVLSTree cap
/// for Blackwell on more than two nodes (`perChMaxNVLSTreeBws` 43.8 GB/s a channel; 80 from
/// 2.30); with 2.30's 80 it picked NVLSTree in every all_reduce cell, wrong in 9 of the 18
/// (every cell on 4 and 8 nodes, 16 nodes at 4-8 GiB, 32 at 8 GiB). The 18 all_gather cells,
/// where NVLSTree is no candidate, check that the unforced run is the ring's and Ring is picked.
#[test]
fn nccl_2_29_picks_on_b200_what_together_measured_it_picking() {
    let forced = |coll: &str, algo: &str, nodes: usize| {
        TOGETHER_B200.iter().find(|r| r.0 == coll && r.1 == algo && r.2 == nodes).map(|r| r.3)
    };
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    for &(coll, nodes, measured) in TOGETHER_B200_DEFAULT {
        let ring = forced(coll, "Ring", nodes).unwrap();
        let tree = forced(coll, "NVLSTree", nodes);
        let rows = sweep("dgx-b200", nodes, coll, ("2GiB", "8GiB"), None);
        for (k, gib) in [2, 4, 8].into_iter().enumerate() {
            let m = measured[k];
            let picked = match tree {
                Some(t) if (m - t[k]).abs() < (m - ring[k]).abs() => "NVLS_TREE",
                _ => "RING",
            };
            let (busbw, _, mech) = &rows[k];
            report.push(format!(
                "{coll} {nodes:2} nodes {gib} GiB: NCCL {picked:9} ({m:5.1} GB/s), collsim {mech} ({busbw:5.1})"
            ));
            if !mech.starts_with(&format!("{picked}/")) {
                wrong.push(report.last().unwrap().clone());
            }
        }
        if tree.is_none() {
            // The unforced all_gather is the forced ring's run to within its noise.
            let off = (0..3).map(|k| (measured[k] / ring[k] - 1.0).abs()).fold(0.0, f64::max);
            assert!(off < 0.02, "{coll} {nodes} nodes: unforced {measured:?}, ring {ring:?}");
        }
    }
    println!("{}", report.join("\n"));
    assert!(wrong.is_empty(), "not NCCL 2.29's choice:\n{}", wrong.join("\n"));
}

/// A fixed-size collective under NCCL's default selection takes no less time with more nodes,
/// on dgx-h100 and dgx-b200, all_reduce and all_gather of 1-8 GiB on 2-64 nodes (algbw, that
/// is size over time, non-increasing within 0.5 %; busbw may rise by its 2(n-1)/n or (n-1)/n
/// factor: NVLSTree's does, 1.6 % from 4 to 8 nodes, in the same time) — except the cases
/// listed here, which the model gets wrong today: a Simple ring whose per-rank share per
/// channel is a few hundred KiB runs into its 8-slot FIFO window over the 40 µs network step
/// latency (a cliff), and where NCCL's cost model turns to LL128 one node count later the LL128
/// ring, held to NCCL's per-channel LL128 maximum and paying the per-step cost, is still faster
/// than that cliff.
/// Measured, B200 all_gather busbw falls steadily with the per-rank share (2 GiB: 288, 237,
/// 225 GB/s on 16, 32, 64 nodes). The list may only shrink.
#[test]
fn a_fixed_size_collective_gets_no_faster_with_more_nodes() {
    const KNOWN: &[(&str, &str, &str, usize)] = &[
        ("dgx-h100", "all_gather", "1GiB", 64),
        ("dgx-b200", "all_gather", "1GiB", 32),
        ("dgx-b200", "all_gather", "2GiB", 64),
    ];
    let sizes = ["1GiB", "2GiB", "4GiB", "8GiB"];
    let mut bad = Vec::new();
    for topology in ["dgx-h100", "dgx-b200"] {
        for coll in ["all_reduce", "all_gather"] {
            let mut prev: Option<(usize, Vec<Row>)> = None;
            for nodes in [2, 4, 8, 16, 32, 64] {
                let rows = sweep(topology, nodes, coll, ("1GiB", "8GiB"), None);
                assert_eq!(rows.len(), sizes.len());
                if let Some((pn, p)) = &prev {
                    for (k, size) in sizes.iter().enumerate() {
                        let known = KNOWN.contains(&(topology, coll, *size, nodes));
                        let faster = rows[k].1 > p[k].1 * 1.005;
                        if faster != known {
                            bad.push(format!(
                                "{topology} {coll} {size}: algbw {pn} nodes {:.1} ({}), {nodes} \
                                 nodes {:.1} ({}){}",
                                p[k].1,
                                p[k].2,
                                rows[k].1,
                                rows[k].2,
                                if known { " — listed as known, now holds: drop it" } else { "" }
                            ));
                        }
                    }
                }
                prev = Some((nodes, rows));
            }
        }
    }
    assert!(bad.is_empty(), "busbw against node count:\n{}", bad.join("\n"));
}

/// ALCF Polaris all_reduce (4 A100 and 2 Slingshot-11 NICs per node, NCCL 2.21.5): the 2- and
/// 8-node logs of `calibration/data/` and the 256- and 540-node ones of
/// `calibration/data/scaling/`, with the tree depth NCCL's and collsim's trees have there (one
/// level per doubling of the node count: ceil(log2 nodes)).
const POLARIS: &[(&str, usize, f64)] = &[
    ("A100SXM40_2N4G_ALL_REDUCE_POLARIS", 2, 1.0),
    ("A100SXM40_8N4G_ALL_REDUCE_POLARIS", 8, 3.0),
    ("scaling/A100SXM40_256N4G_ALL_REDUCE_POLARIS", 256, 8.0),
    ("scaling/A100SXM40_540N4G_ALL_REDUCE_POLARIS", 540, 10.0),
];

/// One Polaris log against the model under the release it ran: per size, (bytes, measured us,
/// simulated us, "ALGO/PROTO").
fn polaris(log: &str, nodes: usize) -> Vec<(u64, f64, f64, String)> {
    let (log, nodes) = (format!("calibration/data/{log}.log"), nodes.to_string());
    let out = super::collsim_ok(&[
        "validate",
        "--log",
        &log,
        "--topology",
        "polaris-a100-4gpu",
        "--nodes",
        &nodes,
        "--gpus-per-node",
        "4",
        "--collective",
        "all_reduce",
        "--nccl-version",
        "2.21.5",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let f = |k: &str| r[k].as_f64().unwrap();
            let mech = format!("{}/{}", r["algo"].as_str().unwrap(), r["proto"].as_str().unwrap());
            (r["size_bytes"].as_u64().unwrap(), f("measured_time_us"), f("predicted_time_us"), mech)
        })
        .collect()
}

/// Least-squares slope of `y` against `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let cov: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    cov / var
}

/// Small-message latency across nodes, the only measurement of it beyond two nodes in the
/// repository (docs/collective-scaling.md, "Small messages on 2-540 nodes"). An all_reduce of
/// 4 B - 1 KiB runs NCCL's Tree/LL: its time is a fixed part plus one tree level (a network hop
/// up and one down) per doubling of the node count. Measured, a level costs 23.7 us (median of
/// the sizes: 34.5, 77.8, 198.5 and 246.2 us on 2, 8, 256 and 540 nodes); collsim's costs 28.1
/// (two hops at the profile's 10 us LL network step plus the links' latencies), 1.19 times as
/// much, so every size is +4 to +28 % slow from 8 nodes on. NCCL's own cost model (6.8 + 2 x 5
/// us per level on the network) would give under half the measured growth. From 4 KiB on, where
/// NCCL still runs Tree/LL (to 32 KiB on 2 nodes, 128 KiB on 8, 1 MiB on 256 and 540; Ring/LL
/// above on 2 and 8), the model is fast instead, by up to 51 % at 540
/// nodes: each network step of LL there costs more than its bytes at the link's rate say (a
/// jump of 5-6 us a hop between 1 and 4 KiB at every node count), which collsim does not model.
/// The bounds are what the model reaches today; they may only tighten.
#[test]
fn small_messages_cost_a_tree_level_per_doubling_of_nodes() {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2] + v[(v.len() - 1) / 2]) / 2.0
    };
    let (mut measured, mut simulated) = (Vec::new(), Vec::new());
    let mut report = Vec::new();
    let mut misses = Vec::new();
    for &(log, nodes, depth) in POLARIS {
        let rows = polaris(log, nodes);
        assert_eq!(rows.len(), 29, "{log}");
        let tiny: Vec<_> = rows.iter().filter(|r| r.0 <= 1 << 10).collect();
        assert!(tiny.iter().all(|r| r.3 == "TREE/LL"), "{log}: {tiny:?}");
        measured.push((depth, median(tiny.iter().map(|r| r.1).collect())));
        simulated.push((depth, median(tiny.iter().map(|r| r.2).collect())));
        for &(bytes, m, p, ref mech) in &rows {
            let err = p / m - 1.0;
            report.push(format!("{nodes:3} nodes {bytes:>10} B {mech:12} {:+6.1} %", 100.0 * err));
            // Up to 1 KiB: pessimistic by at most 30 %, never more than 10 % fast. From 2 KiB to
            // 1 MiB on Tree/LL: the known fast band, at most 55 % fast.
            let (lo, hi) = if bytes <= 1 << 10 { (-0.10, 0.30) } else { (-0.55, f64::INFINITY) };
            if mech == "TREE/LL" && (err < lo || err > hi) {
                misses.push(report.last().unwrap().clone());
            }
        }
    }
    println!("{}", report.join("\n"));
    let (m, s) = (slope(&measured), slope(&simulated));
    println!("one tree level: measured {m:.1} us, simulated {s:.1} us ({:.2}x)", s / m);
    assert!((20.0..27.0).contains(&m), "the logs' own level cost moved: {m}");
    assert!((0.9..=1.25).contains(&(s / m)), "level cost {s:.1} us against {m:.1} measured");
    assert!(misses.is_empty(), "off the Polaris curves:\n{}", misses.join("\n"));
}
