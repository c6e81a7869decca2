//! NCCL's algorithm and protocol choice per size, against a table derived by hand from NCCL
//! 2.26's cost model (nccl-model.md §2.2–2.6 and the 2.23–2.27 column of §2.10) with the
//! graphs of §2.9/§3.4 (DGX-A100: 12 × 20 one node, 8 × 24 across nodes; DGX-H100: 12 × 30,
//! NVLS 8 × 40/60, 8 × 48 across nodes). The derivation is tests/data/selection/derive_nccl_2_26.py,
//! written from the reference, not from collsim's code; issue #4 asks for at least 90 %
//! agreement (measured: 122 of 124 sizes).

use super::collsim_ok;

const DERIVED: &[(&str, usize, &[&str])] = &[
    (
        "dgx-a100",
        1,
        &[
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL128",
            "RING/LL128",
            "RING/LL128",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
        ],
    ),
    (
        "dgx-a100",
        16,
        &[
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "RING/LL128",
            "RING/LL128",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
        ],
    ),
    (
        "dgx-h100",
        1,
        &[
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "RING/LL",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
            "NVLS/SIMPLE",
        ],
    ),
    (
        "dgx-h100",
        16,
        &[
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "TREE/LL128",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "NVLS_TREE/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
            "RING/SIMPLE",
        ],
    ),
];

#[test]
fn choices_match_the_hand_derived_nccl_2_26_table() {
    let (mut same, mut total) = (0, 0);
    for (topo, nodes, expected) in DERIVED {
        let n = nodes.to_string();
        let out = collsim_ok(&[
            "simulate",
            "--topology",
            topo,
            "--nodes",
            &n,
            "--min-bytes",
            "8",
            "--max-bytes",
            "8GiB",
            "--nccl-version",
            "2.26",
            "--format",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), expected.len(), "{topo} x{nodes}");
        for (row, want) in rows.iter().zip(expected.iter()) {
            total += 1;
            let choice = format!(
                "{}/{}",
                row["nccl_algo"].as_str().unwrap(),
                row["nccl_proto"].as_str().unwrap()
            );
            if choice == *want {
                same += 1;
            }
        }
    }
    assert!(same * 10 >= total * 9, "{same} of {total} sizes agree");
}

#[test]
fn each_collective_takes_its_own_nccl_algo_section() {
    // `ring;allgather:pat`: AllGather runs PAT (it ran the AllReduce section's Ring), and a
    // section for AllGather alone leaves AllReduce at NCCL's default (it left nothing).
    let run = |coll: &str, gpus: &str, algo: &str| -> String {
        let out = super::collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--nodes",
            "4",
            "--gpus-per-node",
            gpus,
            "--collective",
            coll,
            "--min-bytes",
            "64M",
            "--max-bytes",
            "64M",
            "--nccl",
            algo,
            "--format",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["rows"][0]["algo"].as_str().unwrap().to_string()
    };
    assert_eq!(run("all_gather", "1", "NCCL_ALGO=ring;allgather:pat"), "PAT");
    assert_eq!(run("all_reduce", "1", "NCCL_ALGO=ring;allgather:pat"), "RING");
    assert_eq!(run("all_gather", "8", "NCCL_ALGO=allreduce:tree;allgather:ring"), "RING");
    assert_eq!(run("all_reduce", "8", "NCCL_ALGO=allreduce:tree;allgather:ring"), "TREE");
    assert_eq!(run("all_reduce", "8", "NCCL_ALGO=allgather:ring"), "NVLS_TREE");
}

/// Each size's (time, algorithm, protocol, channels, tuner line) from `simulate --format json`.
fn sweep_rows(args: &[&str]) -> Vec<(u64, f64, String, String, u64, Option<u64>)> {
    let mut all = vec!["simulate", "--format", "json"];
    all.extend_from_slice(args);
    let v: serde_json::Value = serde_json::from_str(&collsim_ok(&all)).unwrap();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["size_bytes"].as_u64().unwrap(),
                r["time_us"].as_f64().unwrap(),
                r["algo"].as_str().unwrap().to_string(),
                r["proto"].as_str().unwrap().to_string(),
                r["channels"].as_u64().unwrap(),
                r["tuner_line"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn a_tuner_row_forcing_ring_simple_above_96_mib_is_nccl_algo_ring_proto_simple_there() {
    // One row, as NCCL's example tuner plugin reads it: Ring/Simple above 96 MiB, NCCL's own
    // channels. On two DGX-H100s NCCL's cost model picks NVLSTree or Tree there.
    let file = super::scratch().join(format!("tuner-ring-{}.csv", std::process::id()));
    std::fs::write(&file, "# large all-reduces on rings\nallreduce,100663297,18446744073709551615,ring,simple,-1,-1,-1\n")
        .unwrap();
    let tuner = format!("NCCL_TUNER_CONFIG_FILE={}", file.display());
    let base =
        ["--topology", "dgx-h100", "--nodes", "2", "--min-bytes", "16MiB", "--max-bytes", "1GiB"];
    let with = |nccl: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        for n in nccl {
            a.extend(["--nccl", n]);
        }
        sweep_rows(&a)
    };
    let plain = with(&[]);
    let forced = with(&["NCCL_ALGO=Ring", "NCCL_PROTO=Simple"]);
    let tuned = with(&[&tuner]);
    let cut = 96 << 20;
    assert!(plain.iter().any(|r| r.0 > cut && r.2 != "RING"), "NCCL picks no ring here: {plain:?}");
    for ((t, p), f) in tuned.iter().zip(&plain).zip(&forced) {
        if t.0 > cut {
            assert_eq!((t.1, &t.2, &t.3, t.4), (f.1, &f.2, &f.3, f.4), "{} B", t.0);
            assert_eq!(t.5, Some(2), "{} B: the row on line 2 set it", t.0);
        } else {
            assert_eq!((t.1, &t.2, &t.3, t.4), (p.1, &p.2, &p.3, p.4), "{} B", t.0);
            assert_eq!(t.5, None);
        }
    }
}

#[test]
fn the_seed_tuner_file_prints_which_rows_set_which_sizes() {
    // The acceptance command of issue #50.
    let out = collsim_ok(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--nccl",
        "NCCL_TUNER_CONFIG_FILE=scenarios/tuner-seed-example.csv",
    ]);
    for want in [
        "tuner: scenarios/tuner-seed-example.csv (NCCL's example tuner plugin's format, 4 row(s))",
        "line   7  allreduce 0-98304 tree/ll channels -1: 8 B to 64 KiB",
        "line   8  allreduce 98305-12582912 tree/ll128 channels -1: 128 KiB to 8 MiB",
        "line   9  allreduce 12582913-100663296 ring/ll128 channels -1: 16 MiB to 64 MiB",
        "line  10  allreduce 100663297-4294967296 ring/simple channels -1: 128 MiB to 4 GiB",
        "no row: 8 GiB (NCCL's own choice)",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    // NCCL's example plugin binary reads none of the seed's 6-field rows and sets one channel.
    let rows = sweep_rows(&[
        "scenarios/quickstart.toml",
        "--nccl",
        "NCCL_TUNER_CONFIG_FILE=scenarios/tuner-seed-example.csv",
        "--nccl",
        "NCCL_TUNER_PLUGIN=libnccl-tuner-example.so",
    ]);
    assert!(rows.iter().all(|r| r.4 == 1 && r.5.is_none()), "{rows:?}");
}
