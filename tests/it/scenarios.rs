//! Each shipped scenario runs and gives a checked summary; output is byte-identical across runs
//! and thread counts; every format renders.

use std::process::Command;

use super::collsim_ok;

fn rows(json: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["rows"].as_array().unwrap().clone()
}

#[test]
fn quickstart_summary() {
    let r = rows(&collsim_ok(&["simulate", "scenarios/quickstart.toml", "--format", "json"]));
    assert_eq!(r.len(), 31); // 8 B … 8 GiB
    let last = &r[30];
    assert_eq!(last["size_bytes"], 8u64 << 30);
    // NCCL runs NVLS there: in-switch reduction, ~480 GB/s busbw measured on 8 H100s
    // (NVIDIA/nccl-tests#212), above the ring's NVLink limit of 370.8.
    let busbw = last["busbw_gbyte_per_s"].as_f64().unwrap();
    assert!((470.0..=500.0).contains(&busbw), "{busbw}");
    assert_eq!(
        (last["algo"].as_str(), last["nccl_algo"].as_str(), last["nccl_proto"].as_str()),
        (Some("NVLS"), Some("NVLS"), Some("SIMPLE"))
    );
    // One process per GPU (as torchrun runs): a 6.6 us call and the ring's LL steps over
    // NVLink; one process driving all 8 measures ~36 us (H100_1N8G_AR_RING_TOGETHER).
    let small = r[0]["time_us"].as_f64().unwrap();
    assert!((10.0..30.0).contains(&small), "{small}");
}

#[test]
fn dgx_a100_4node_summary() {
    let r = rows(&collsim_ok(&["simulate", "scenarios/dgx-a100-4node.toml", "--format", "json"]));
    assert_eq!(r.len(), 7);
    // 8 HDR NICs per node at NCCL's 24 GB/s per GPU-NIC path: ring busbw ≤ 8 × 24 = 192 GB/s
    // (NVIDIA reports 192 GB/s measured).
    let busbw = r[6]["busbw_gbyte_per_s"].as_f64().unwrap();
    assert!((185.0..=192.0).contains(&busbw), "{busbw}");
    assert!(r.iter().all(|row| row["channels"] == 16));
}

#[test]
fn output_is_deterministic_across_runs_and_threads() {
    let args = [
        "simulate",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--max-bytes",
        "256M",
        "--format",
        "json",
    ];
    let a = collsim_ok(&args);
    let b = collsim_ok(&args);
    let one = Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.as_bytes(), one.stdout.as_slice());
}

#[test]
fn every_format_renders() {
    let base = ["simulate", "--topology", "dgx-a100", "--min-bytes", "1M", "--max-bytes", "4M"];
    let nccl = collsim_ok(&[&base[..], &["--format", "nccl"]].concat());
    assert!(nccl.contains("# Collective test starting: all_reduce_perf"));
    assert!(nccl.contains(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    ));
    let row = nccl.lines().find(|l| l.trim_start().starts_with("1048576")).unwrap();
    assert_eq!(row.split_whitespace().count(), 13);
    assert!(nccl.contains("# Avg bus bandwidth    : "));
    let csv = collsim_ok(&[&base[..], &["--format", "csv"]].concat());
    assert_eq!(
        csv.lines().next().unwrap(),
        "size_bytes,count,dtype,redop,time_us,time_us_low,time_us_high,algbw_gbyte_per_s,busbw_gbyte_per_s,algo,proto,channels,nccl_algo,nccl_proto,simulated,tuner_line"
    );
    assert_eq!(csv.lines().count(), 4);
    let table = collsim_ok(&base);
    assert!(table.contains("RING") && table.contains("24 CUDA channels"));
    // The JSON carries the resolved scenario, defaults filled in.
    let json: serde_json::Value =
        serde_json::from_str(&collsim_ok(&[&base[..], &["--format", "json"]].concat())).unwrap();
    assert_eq!(json["scenario"]["sweep"]["dtype"], "float");
    assert_eq!(json["scenario"]["gpus_per_node"], 8);
}

#[test]
fn explain_takes_a_call_apart() {
    let out = collsim_ok(&[
        "explain",
        "--topology",
        "dgx-h100",
        "--nodes",
        "1",
        "--collective",
        "all_reduce",
        "--bytes",
        "256MiB",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["table"].as_array().unwrap().len(), 21); // 7 algorithms × 3 protocols
    assert_eq!(v["nccl_choice"]["algo"], "NVLS");
    assert_eq!(v["nccl_choice"]["proto"], "SIMPLE");
    assert_eq!(v["simulated"]["algo"], "NVLS");
    let (t, l, b) = (
        v["time_us"].as_f64().unwrap(),
        v["latency_part_us"].as_f64().unwrap(),
        v["bandwidth_part_us"].as_f64().unwrap(),
    );
    assert!((t - l - b).abs() < 1e-6 && b > l, "{t} {l} {b}");
    // The bound: a GPU's NVLink (18 × 20.6 GB/s) in NVLS's reduce and store flows.
    assert_eq!(v["bottleneck"]["class"], "nvlink");
    assert!((v["bottleneck"]["capacity_gbyte_per_s"].as_f64().unwrap() - 370.8).abs() < 0.1);
    let text =
        collsim_ok(&["explain", "--topology", "dgx-a100", "--nodes", "2", "--bytes", "4MiB"]);
    assert!(
        text.contains("disabled: NVLS needs NVLink SHARP") && text.contains("NCCL would pick:")
    );
}

#[test]
fn explain_shows_what_the_network_proxies_cost_a_ring() {
    // Slingshot's proxy thread spends 8 us on each network send or receive; on 2 Polaris nodes
    // each ring-entry GPU receives on two of the four channels and sends on the other two.
    let v = explain_json(&["--topology", "polaris-a100-4gpu", "--nodes", "2", "--bytes", "1M"]);
    assert_eq!(v["simulated"]["algo"], "RING");
    assert_eq!(v["network_proxy"]["op_us"], 8.0);
    assert_eq!(v["network_proxy"]["ops_per_step"], 4);
    // 14 steps of 4 operations at 8 us (448 us, less where the first and last steps overlap)
    // are the latency part, not the bytes.
    let lat = v["latency_part_us"].as_f64().unwrap();
    assert!(lat >= 0.9 * 14.0 * 4.0 * 8.0 && lat > 10.0 * v["bandwidth_part_us"].as_f64().unwrap());
    let text = collsim_ok(&[
        "explain",
        "--topology",
        "polaris-a100-4gpu",
        "--nodes",
        "2",
        "--bytes",
        "1M",
    ]);
    assert!(text.contains("network proxy: each network send or receive"), "{text}");
    // 14 messages a connection, 4 a step on the busiest proxy: 448 us, more than the bytes take.
    assert_eq!(v["network_proxy"]["busy_us"], 448.0);
    assert!(text.contains("bottleneck: the network proxies"), "{text}");
    // At 1 GiB the link bounds it again.
    let big = ["explain", "--topology", "polaris-a100-4gpu", "--nodes", "2", "--bytes", "1G"];
    assert!(collsim_ok(&big).contains("bottleneck: a net link"));
    // Nothing to say where the proxy is cheap (InfiniBand) or the call stays on one node.
    for (topo, nodes) in [("dgx-h100", "2"), ("polaris-a100-4gpu", "1")] {
        let v = explain_json(&["--topology", topo, "--nodes", nodes, "--bytes", "1M"]);
        assert!(v["network_proxy"].is_null(), "{topo} x {nodes}: {}", v["network_proxy"]);
    }
}

fn explain_json(args: &[&str]) -> serde_json::Value {
    let out = collsim_ok(&[&["explain", "--format", "json"], args].concat());
    serde_json::from_str(&out).unwrap()
}

#[test]
fn explain_names_a_bottleneck_for_every_algorithm() {
    // The acceptance call: Tree/LL128 on 16 DGX-A100s. Each GPU's PCIe gen4 x16 link to
    // its switch carries both trees' traffic to and from the NIC.
    let v = explain_json(&[
        "--topology",
        "dgx-a100",
        "--nodes",
        "16",
        "--collective",
        "all_reduce",
        "--bytes",
        "4MiB",
    ]);
    assert_eq!(v["simulated"]["algo"], "TREE");
    assert_eq!(v["bottleneck"]["class"], "pcie");
    for (topo, nodes, coll, algo, class) in [
        // Past two nodes aws-ofi-nccl's tuner picks Ring at 1 GiB: NCCL's own choice here.
        ("aws-p5", "4", "all_reduce", "NVLS_TREE", "net"),
        ("dgx-h100", "2", "broadcast", "RING", "pcie"),
        ("dgx-h100", "1", "reduce", "RING", "nvlink"),
        ("aws-p5", "2", "alltoall", "P2P", "net"),
        ("dgx-h100", "1", "sendrecv", "P2P", "nvlink"),
    ] {
        let v = explain_json(&[
            "--topology",
            topo,
            "--nodes",
            nodes,
            "--collective",
            coll,
            "--bytes",
            "1GiB",
            "--nccl",
            "NCCL_TUNER_PLUGIN=none",
        ]);
        assert_eq!(v["simulated"]["algo"], algo, "{topo} {coll}");
        assert_eq!(v["bottleneck"]["class"], class, "{topo} {coll}");
        assert!(v["bottleneck"]["per_flow_gbyte_per_s"].as_f64().unwrap() > 0.0);
    }
    // Point-to-point has no cost table: NCCL selects nothing.
    let text = collsim_ok(&[
        "explain",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--collective",
        "alltoall",
        "--bytes",
        "64MiB",
    ]);
    assert!(text.contains("point-to-point: NCCL selects no algorithm"), "{text}");
    assert!(text.contains("collsim simulates: P2P/SIMPLE"), "{text}");
    // A 32 MiB SendRecv on one H100 node runs 4 channels, each at the profile's 20 GB/s per
    // CTA, far under NVLink: the channel is what bounds it, and explain says so; at 1 GiB (32
    // channels) NVLink is.
    for (bytes, capped) in [("32MiB", true), ("1GiB", false)] {
        let v = explain_json(&[
            "--topology",
            "dgx-h100",
            "--nodes",
            "1",
            "--collective",
            "sendrecv",
            "--bytes",
            bytes,
        ]);
        assert_eq!(v["bottleneck"]["channel_capped"], capped, "{bytes}");
        if capped {
            assert_eq!(v["bottleneck"]["per_flow_gbyte_per_s"].as_f64().unwrap(), 20.0, "{bytes}");
        }
    }
}

#[test]
fn nccl_version_picks_the_cost_tables() {
    let dir = super::scratch().join(format!("collsim-ver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("v.toml");
    std::fs::write(
        &path,
        "[cluster]\ntopology = \"dgx-h100\"\n[workload]\ncollective = \"all_reduce\"\n\
         min_bytes = \"1 MiB\"\nmax_bytes = \"1 MiB\"\n[nccl]\nversion = \"2.18\"\n",
    )
    .unwrap();
    let out = collsim_ok(&["simulate", path.to_str().unwrap()]);
    // 2.18 caps Hopper's one-node LL at 87.7 GB/s, so NVLS wins from 1 MiB; 2.30 keeps LL.
    assert!(out.contains("NCCL 2.18.6 cost model") && out.contains("NVLS"), "{out}");
    let out = collsim_ok(&["simulate", path.to_str().unwrap(), "--nccl-version", "2.30"]);
    assert!(out.contains("NCCL 2.30.7 cost model") && out.contains("RING  LL"), "{out}");
    let bad = super::collsim(&["simulate", path.to_str().unwrap(), "--nccl-version", "1.9"]);
    // A flag's bad value is a usage error naming the flag.
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--nccl-version") && err.contains("unknown NCCL version"), "{err}");
}

#[test]
fn nccl_layout_prints_root_and_redop_as_nccl_tests_does() {
    let row = |coll: &str| {
        let out = collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--collective",
            coll,
            "--min-bytes",
            "1M",
            "--max-bytes",
            "1M",
            "--format",
            "nccl",
        ]);
        out.lines()
            .find(|l| !l.starts_with('#'))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("broadcast")[3..5], ["none".to_string(), "0".to_string()]);
    assert_eq!(row("all_gather")[3..5], ["none".to_string(), "-1".to_string()]);
    assert_eq!(row("reduce")[3..5], ["sum".to_string(), "0".to_string()]);
    // all_gather's count column is per rank: 1 MiB of floats over 8 ranks.
    assert_eq!(row("all_gather")[1], "32768");
}

#[test]
fn gpus_per_process_prices_each_call_by_its_kernel_launches() {
    // One process driving all 8 GPUs (nccl-tests -g 8) launches 7 more kernels per call than
    // one process per GPU; large calls hardly notice.
    let time = |extra: &[&str]| {
        let r = rows(&collsim_ok(
            &[&["simulate", "scenarios/quickstart.toml", "--format", "json"][..], extra].concat(),
        ));
        (r[0]["time_us"].as_f64().unwrap(), r[30]["time_us"].as_f64().unwrap())
    };
    let (small1, big1) = time(&[]);
    let (small8, big8) = time(&["--gpus-per-process", "8"]);
    assert!((small8 - small1 - 7.0 * 3.12).abs() < 0.01, "{small1} {small8}");
    assert!((big8 - big1) / big1 < 1e-3, "{big1} {big8}");
    // A process drives GPUs of one node, and DDP runs one process per GPU.
    // (A layout the flags cannot make is a command-line error, exit 2.)
    for (args, says, code) in [
        (
            &["simulate", "scenarios/quickstart.toml", "--gpus-per-process", "3"][..],
            "--gpus-per-process 3: must divide the 8 GPUs used per node",
            2,
        ),
        (
            &["simulate", "scenarios/resnet50-dgx-a100-1node.toml", "--gpus-per-process", "8"][..],
            "PyTorch DDP runs one process per GPU",
            1,
        ),
    ] {
        let out = super::collsim(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says) && err.lines().count() == 1, "{err}");
    }
    let dir = super::scratch();
    let path = dir.join("gpp.toml");
    let text = std::fs::read_to_string("scenarios/quickstart.toml")
        .unwrap()
        .replace("[cluster]\n", "[cluster]\ngpus_per_process = 5\n");
    std::fs::write(&path, text).unwrap();
    let out = super::collsim(&["simulate", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gpp.toml:") && err.contains("cluster.gpus_per_process: 5 does not divide"),
        "{err}"
    );
}

/// Issue #45: `--format nccl` is what nccl-tests prints with its defaults: its header's
/// iterations and data check, `#wrong` 0, and a maxBytes past the GPU's memory cut, with the
/// line nccl-tests prints and the larger sizes left out of the table and the average.
#[test]
fn nccl_format_is_what_nccl_tests_prints() {
    let run = |max: &str| {
        collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--min-bytes",
            "4GiB",
            "--max-bytes",
            max,
            "--format",
            "nccl",
        ])
    };
    let out = run("64GiB");
    assert!(out.contains("warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0"), "{out}");
    // 80 GiB: (80 - 4 - 1) / 3 GiB.
    assert!(
        out.contains("#\n# Reducing maxBytes to 26843545600 due to memory limitation\n"),
        "{out}"
    );
    let rows: Vec<&str> =
        out.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    let sizes: Vec<&str> = rows.iter().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(sizes, ["4294967296", "8589934592", "17179869184"]);
    for r in &rows {
        let t: Vec<&str> = r.split_whitespace().collect();
        assert_eq!((t[8], t[12]), ("0", "0"), "{r}");
    }
    // Within the memory, no cut.
    assert!(!run("16GiB").contains("Reducing maxBytes"));
}

#[test]
fn sequence_parallelism_without_tensor_parallelism_is_off_as_megatron_turns_it_off() {
    let text = std::fs::read_to_string("scenarios/llama70b-3d-dgx-h100-64node.toml").unwrap();
    assert!(text.contains("\nsequence_parallel = true"));
    let dir = super::scratch().join(format!("collsim-sp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("tp1.toml");
    std::fs::write(&p, text.replacen("\ntp = 8", "\ntp = 1", 1)).unwrap();
    let out = collsim_ok(&["simulate", p.to_str().unwrap()]);
    assert!(out.contains("tp 1 x pp 8"), "{out}");
    // It was printed as on ("; sequence parallel") though nothing of it applied.
    assert!(!out.contains("sequence parallel"), "{out}");
    let out = collsim_ok(&["simulate", "scenarios/llama70b-3d-dgx-h100-64node.toml"]);
    assert!(out.contains("sequence parallel"), "{out}");
}

#[test]
fn nccl_tests_short_flags_mean_what_they_mean_there() {
    // Issue #49: -b -e -f -g -d as nccl-tests spells them (and its long names) give the rows
    // the long flags give.
    let run = |flags: &[&str]| {
        let mut args = vec!["simulate", "--topology", "dgx-h100", "--format", "csv"];
        args.extend(flags);
        collsim_ok(&args)
    };
    let long = run(&["--min-bytes", "8", "--max-bytes", "8GiB", "--factor", "2"]);
    assert_eq!(long.lines().count(), 32);
    assert_eq!(run(&["-b", "8", "-e", "8G", "-f", "2"]), long);
    assert_eq!(run(&["--minbytes", "8", "--maxbytes", "8G", "--stepfactor", "2"]), long);
    let long = run(&["--gpus-per-process", "8", "--dtype", "half", "--max-bytes", "1M"]);
    assert_eq!(run(&["-g", "8", "-d", "half", "-e", "1M"]), long);
    assert_eq!(run(&["--ngpus", "8", "--datatype", "half", "-e", "1M"]), long);
    // -n, -w and -c are what the nccl layouts print of the run; the times do not move.
    let nccl = |flags: &[&str]| {
        let mut args = vec!["simulate", "--topology", "dgx-h100", "-e", "1K", "--format", "nccl"];
        args.extend(flags);
        collsim_ok(&args)
    };
    let plain = nccl(&[]);
    assert!(plain.contains("warmup iters: 1 iters: 20 agg iters: 1 validation: 1"), "{plain}");
    let set = nccl(&["-n", "50", "-w", "5", "-c", "0"]);
    assert!(set.contains("warmup iters: 5 iters: 50 agg iters: 1 validation: 0"), "{set}");
    // Without the check nccl-tests prints N/A for #wrong.
    let row =
        |t: &str| t.lines().find(|l| l.trim_start().starts_with("1024 ")).unwrap().to_string();
    assert_eq!(row(&set), row(&plain).replace("       0", "    N/A"));
    // nccl-tests' -o is the reduction; collsim's -o is --output, so -o sum is no reduction.
    let out = super::scratch().join("short-o-sum");
    collsim_ok(&["simulate", "--topology", "dgx-h100", "-e", "1K", "-o", out.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&out).unwrap().contains("all_reduce"));
}

#[test]
fn nccl_json_is_what_nccl_tests_j_writes_and_reads_back_exactly() {
    // Issue #49's must-hold: --format nccl-json writes nccl-tests' -J layout (version 3,
    // src/util.cu at a0b82b2: the ranks under config.devices, args as a list), and
    // validate --log reads it back with 0 % error.
    let dir = super::scratch();
    let path = dir.join("nccl-json-a100.json");
    let args = ["simulate", "--topology", "dgx-a100", "--nodes", "2", "-e", "64M", "-n", "40"];
    let text = collsim_ok(&[&args[..], &["--format", "nccl-json"]].concat());
    std::fs::write(&path, &text).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["args"][0], "all_reduce_perf");
    assert_eq!(v["config"]["iterations"], 40);
    assert_eq!(v["config"]["devices"].as_array().unwrap().len(), 16);
    assert_eq!(
        (&v["config"]["per_iter_timing"], &v["out_of_bounds"]["okay"]),
        (&"false".into(), &"true".into())
    );
    assert_eq!(v["errors"], serde_json::json!([]));
    assert_eq!(v["config"]["devices"][8]["hostname"], "node1");
    assert_eq!(v["config"]["devices"][0]["device_info"], "NVIDIA A100-SXM4-80GB");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 24); // 8 B … 64 MiB
    assert_eq!(results[0]["root"], "    -1");
    assert_eq!(results[0]["out_of_place"]["nwrong"], 0.0);
    // The same rows the json gives, to the bit.
    let csv = collsim_ok(&[&args[..7], &["--format", "json"]].concat());
    let rows = rows(&csv);
    for (r, j) in rows.iter().zip(results) {
        assert_eq!(r["time_us"], j["out_of_place"]["time"]);
        assert_eq!(r["busbw_gbyte_per_s"], j["in_place"]["bus_bw"]);
    }
    let back = collsim_ok(&[
        "validate",
        "--log",
        path.to_str().unwrap(),
        "--topology",
        "dgx-a100",
        "--nodes",
        "2",
        "--format",
        "json",
    ]);
    let back: serde_json::Value = serde_json::from_str(&back).unwrap();
    assert_eq!(back["rows"].as_array().unwrap().len(), 24);
    assert_eq!(
        (back["median_abs_error_pct"].as_f64(), back["p95_abs_error_pct"].as_f64()),
        (Some(0.0), Some(0.0))
    );
}

#[test]
fn nccl_json_reads_back_one_device_a_process_and_the_nccl_environment() {
    // As nccl-tests writes -J, config.devices has one entry a process (its first rank), and env
    // the environment: a run of -g 8 on two nodes with NCCL_ALGO=Ring reads back as 16 ranks on
    // two hosts with that setting, at 0 % error, with no flags.
    let path = super::scratch().join("nccl-json-g8-ring.json");
    let mut args = vec!["simulate", "--topology", "dgx-h100", "--nodes", "2", "-g", "8"];
    args.extend(["-e", "16M", "--nccl", "NCCL_ALGO=Ring", "--format", "nccl-json"]);
    std::fs::write(&path, collsim_ok(&args)).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let devices = v["config"]["devices"].as_array().unwrap();
    assert_eq!(devices.iter().map(|d| d["rank"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 8]);
    assert_eq!(v["env"], serde_json::json!(["NCCL_ALGO=Ring"]));
    let back = collsim_ok(&["validate", "--log", path.to_str().unwrap(), "--format", "json"]);
    let back: serde_json::Value = serde_json::from_str(&back).unwrap();
    assert_eq!(back["median_abs_error_pct"].as_f64(), Some(0.0), "{}", back["scenario"]);
    assert_eq!(back["scenario"]["nodes"], 2);
}

#[test]
fn without_the_data_check_sizes_fit_in_two_buffers_and_run_flags_need_an_nccl_layout() {
    // nccl-tests holds three buffers of the size with -c 1, two with -c 0 (common.cu): on an
    // 80 GiB H100, 24.7 GiB against 37 GiB.
    let run = |c: &str| {
        collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "-b",
            "8G",
            "-e",
            "32G",
            "-c",
            c,
            "--format",
            "nccl",
        ])
    };
    assert!(run("1").contains("# Reducing maxBytes to"));
    let off = run("0");
    assert!(!off.contains("Reducing") && off.contains(" 34359738368 "), "{off}");
    // -n, -w and -c only change what the nccl layouts print.
    super::cli_errors::misused_with(
        &["simulate", "--topology", "dgx-h100", "-n", "5"],
        &["--iters: only the nccl layouts print it"],
    );
}

#[test]
fn a_sweep_runs_from_flags_alone() {
    // Issue #49 item 5: --sweep without a scenario file sweeps the collective the flags make
    // (all_reduce from 8 B, as `simulate --topology X` runs), over --topology or a swept
    // cluster.topology.
    let csv = collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "-e",
        "1K",
        "--sweep",
        "cluster.nodes=1,2",
        "--format",
        "csv",
    ]);
    assert_eq!(csv.lines().count(), 1 + 2 * 8, "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("1,8,"), "{csv}");
    let json = collsim_ok(&[
        "simulate",
        "--nodes",
        "2",
        "-e",
        "1K",
        "--sweep",
        "cluster.topology=p5.48xlarge,gcp-a3-megagpu-8g",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["points"].as_array().unwrap().len(), 2);
    assert_eq!(v["points"][1]["point"]["cluster.topology"], "gcp-a3-megagpu-8g");
    super::cli_errors::misused_with(
        &["simulate", "--sweep", "cluster.nodes=1,2"],
        &["--sweep without a scenario file needs --topology or --sweep cluster.topology=A,B"],
    );
}
