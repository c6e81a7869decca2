//! The DDP training step: its invariants on random models, and the shipped scenarios.

use collsim::collective::Collective;
use collsim::workload::DataType;
use collsim::workload::ddp::{
    CollTime, CommHook, ComputeRate, DdpSpec, GpuFacts, InputRate, StepResult, simulate_step,
};
use collsim::workload::models::{Layer, MemoryWork, Model, tensor};
use proptest::prelude::*;

use super::collsim_ok;

fn model(layers: &Layers) -> Model {
    Model {
        name: "random".into(),
        layers: layers
            .iter()
            .enumerate()
            .map(|(i, (shapes, gflop, mb))| Layer {
                name: format!("l{i}"),
                tensors: shapes.iter().map(|&(r, c)| tensor(format!("l{i}"), r, c)).collect(),
                fwd_macs: gflop * 1e9 / 2.0,
                times: None,
                act_bytes: 0.0,
                transient_bytes: 0.0,
                memory: MemoryWork::new(mb * 1e6, 2.0 * mb * 1e6, 20, 40),
                parallel: None,
            })
            .collect(),
        grad_dtype: DataType::Float,
        buffer_bytes: 4096,
    }
}

fn run(spec: &DdpSpec, gpu: GpuFacts, per_byte: f64, fixed: f64) -> StepResult {
    let coll = move |_: Collective, bytes: collsim::units::Bytes, _: DataType| CollTime {
        time: collsim::units::Time::from_secs_f64_ceil(fixed + bytes.as_f64() * per_byte),
        algo: "RING",
        proto: "SIMPLE",
        channels: 8,
        links: Vec::new(),
    };
    simulate_step(spec, 16, &gpu, &coll)
}

/// Layers: tensor shapes, forward GFLOP and memory-bound MB per sample.
type Layers = Vec<(Vec<(u64, u64)>, f64, f64)>;

fn layers() -> impl Strategy<Value = Layers> {
    proptest::collection::vec(
        (proptest::collection::vec((1u64..2048, 1u64..2048), 1..4), 0.0f64..50.0, 0.0f64..100.0),
        1..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn step_time_bounds(
        layers in layers(),
        cap_mb in proptest::option::of(1u64..8),
        hook in proptest::sample::select(vec![CommHook::None, CommHook::Fp16]),
        accumulation in 1u64..4,
        view in any::<bool>(),
        slowdown in 0.0f64..0.9,
        per_byte in 1e-11f64..1e-8,
        node_rate in proptest::option::of(100.0f64..1e6),
    ) {
        let input = node_rate.map(InputRate::PerNode);
        let spec = DdpSpec {
            backend: Default::default(),
            model: model(&layers),
            micro_batch: 4,
            grad_accumulation: accumulation,
            rate: ComputeRate::Tflops(50.0),
            bucket_cap: cap_mb.map(|m| m << 20),
            gradient_as_bucket_view: view,
            static_graph: false,
            find_unused_parameters: false,
            broadcast_buffers: true,
            hook,
            compute_slowdown: Some(slowdown),
            optimizer: collsim::workload::memory::Optimizer::Adam,
            optimizer_impl: collsim::workload::memory::OptimizerImpl::Foreach,
            skew: collsim::workload::skew::Skew::default(),
            sequence: None,
            input,
            sharding: None,
            parallel: None,
            launch: None,
            gemm_fixed: None,
            compute_default: None,
            calls: None,
            profile: None,
            checkpointing: Default::default(),
            written: None,
            data_parallel: None,
            memory_headroom: collsim::workload::memory::DEFAULT_HEADROOM,
        };
        let gpu = GpuFacts { flops: 50e12, memory_bandwidth: 1e12, multiprocessors: Some(100), launch: collsim::units::Secs::new(4e-6), gemm_fixed: collsim::units::Secs::new(0.0), ranks_per_node: 8, sixteen_bit_flops: None };
        // Free communication: the step is its compute, or the loader's time if longer.
        let free = run(&spec, gpu, 0.0, 0.0);
        let loader_ms = node_rate.map_or(0.0, |r| 1e3 * (4 * accumulation) as f64 * 8.0 / r);
        // Each collective starts on the engine's clock, at the picosecond after its gradient
        // is ready: each may add that picosecond (1e-9 ms) to the step.
        let ps = |r: &StepResult| 1e-9 * (r.buckets.iter().map(|b| b.collectives).sum::<usize>() + 2) as f64;
        prop_assert!((free.iteration_time_ms - free.compute_ms.max(loader_ms)).abs() < 1e-9 * free.compute_ms.max(1.0) + ps(&free),
            "{} vs {}", free.iteration_time_ms, free.compute_ms);
        prop_assert!(free.exposed_comm_ms.abs() <= ps(&free), "{}", free.exposed_comm_ms);
        // Infinitely fast compute (and no loader limit): the step is its collectives, back to
        // back.
        let no_loader = DdpSpec { input: None, ..spec.clone() };
        let instant = GpuFacts { flops: f64::INFINITY, memory_bandwidth: f64::INFINITY, multiprocessors: Some(100), launch: collsim::units::Secs::new(0.0), gemm_fixed: collsim::units::Secs::new(0.0), ranks_per_node: 8, sixteen_bit_flops: None };
        let fast = run(&no_loader, instant, per_byte, 20e-6);
        prop_assert!((fast.iteration_time_ms - fast.comm_ms).abs() < 1e-9 * fast.comm_ms + ps(&fast),
            "{} vs {}", fast.iteration_time_ms, fast.comm_ms);
        // In between, what is exposed is at most what was communicated.
        let r = run(&spec, gpu, per_byte, 20e-6);
        prop_assert!(r.exposed_comm_ms <= r.comm_ms * (1.0 + 1e-9) + ps(&r), "{} > {}", r.exposed_comm_ms, r.comm_ms);
        prop_assert!(r.iteration_time_ms + 1e-9 >= r.compute_ms);
        prop_assert!(r.iteration_time_ms <= (r.compute_ms + r.comm_ms).max(loader_ms) + ps(&r));
        // The breakdown's parts add up to the step, and its compute parts to the compute.
        let b = &r.breakdown;
        prop_assert!((b.total_ms() - r.iteration_time_ms).abs() < 1e-9 * r.iteration_time_ms.max(1.0),
            "{b:?} vs {}", r.iteration_time_ms);
        let compute = b.flop_ms + b.memory_ms + b.launch_ms + b.ddp_copies_ms + b.optimizer_ms;
        prop_assert!((compute - r.compute_ms).abs() < 1e-9 * r.compute_ms.max(1.0), "{b:?} vs {}", r.compute_ms);
    }
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&collsim_ok(args)).unwrap()
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

#[test]
fn bert_large_weak_scaling_on_one_dgx_a100_is_within_ten_percent() {
    // ddp.md §2.4 (NVIDIA DeepLearningExamples, DGX A100 80GB, mixed precision): 580 seq/s on
    // one GPU and weak scaling 7.91 on eight at sequence 128 (256 per GPU, 32 accumulation
    // steps); 210 seq/s and 7.89 at 512 (32 per GPU, 128 steps). The scenario's compute
    // mfu reproduces the one-GPU rate (its comment says how); at 512 the same is done
    // here. The eight-GPU figure is the model's own.
    let s = "scenarios/bert-large-dgx-a100-8node.toml";
    let r128 = json(&["simulate", s, "--nodes", "1", "--format", "json"]);
    let r512 = json(&[
        "simulate",
        s,
        "--nodes",
        "1",
        "--format",
        "json",
        "--sweep",
        "workload.sequence=512",
        "--sweep",
        "workload.micro_batch=32",
        "--sweep",
        "workload.grad_accumulation=128",
        "--sweep",
        "workload.mfu=0.7433",
    ]);
    let r512 = &r512["points"][0]["result"];
    for (r, seqs, one_gpu, table) in
        [(&r128, 256.0 * 32.0, 580.0, 7.91), (r512, 32.0 * 128.0, 210.0, 7.89)]
    {
        let single_s = num(r, "single_gpu_ms") / 1e3;
        assert!(
            (seqs / single_s / one_gpu - 1.0).abs() < 0.01,
            "one GPU: {} seq/s",
            seqs / single_s
        );
        let scaling = 8.0 * num(r, "scaling_efficiency");
        eprintln!("BERT-large 8 GPUs: weak scaling {scaling:.3} (NVIDIA: {table})");
        assert!((scaling / table - 1.0).abs() <= 0.10, "{scaling} vs {table}");
        assert_eq!(num(r, "world"), 8.0);
    }
}

#[test]
fn resnet50_on_dgx_a100_scales_better_than_nvidia_measured_and_says_why() {
    // ddp.md §2.5: NVIDIA's table shows 6.72x on 8 GPUs with AMP; gradient communication (97.5
    // MiB over NVSwitch, ~1 ms, mostly overlapped) does not explain it, nor does the default
    // per-rank spread (2.1 ms for the slowest of 8), and this model, whose input pipeline has
    // no default from a measurement, predicts more. Not tuned away: the scenario's comment
    // states it.
    let r = json(&["simulate", "scenarios/resnet50-dgx-a100-1node.toml", "--format", "json"]);
    let speedup = 8.0 * num(&r, "scaling_efficiency");
    assert!(speedup > 7.5, "{speedup} (NVIDIA measured 6.72)");
    assert!(num(&r, "comm_ms") < 3.0 && num(&r, "exposed_comm_ms") < num(&r, "comm_ms"));
    // Steady-state buckets after the rebuild (ddp.md §3.6 case B): fc alone first.
    let b: Vec<f64> =
        r["buckets"].as_array().unwrap().iter().map(|b| num(b, "bytes") / 1048576.0).collect();
    assert_eq!(b.len(), 5);
    assert!((b[0] - 7.82).abs() < 0.01, "{b:?}");
    let text = std::fs::read_to_string("scenarios/resnet50-dgx-a100-1node.toml").unwrap();
    assert!(text.contains("6.72x") && text.contains("no\n# default here"));
    // Four nodes: the network carries the buckets; the step still hides most of it.
    let r4 = json(&["simulate", "scenarios/resnet50-dgx-a100-4node.toml", "--format", "json"]);
    assert_eq!(num(&r4, "world"), 32.0);
    assert!(num(&r4, "overlap_fraction") > 0.5, "{r4}");
}

#[test]
fn gpt2_xl_on_256_gpus_under_static_ecmp() {
    // scenarios/gpt2-xl-256gpu-roce-ecmp.toml as the README sweeps it: 32 HGX H100 nodes on
    // 8 leaves of a 2-tier RoCE fat-tree, each channel's connection between leaves hashed onto
    // one of 32 up-ports (ecmp) or the traffic spread over them (adaptive).
    let scenario = "scenarios/gpt2-xl-256gpu-roce-ecmp.toml";
    let v = json(&[
        "simulate",
        scenario,
        "--sweep",
        "topology.network.routing=adaptive,ecmp",
        "--sweep",
        "nccl.NCCL_ALGO=NVLSTree,Ring",
        "--format",
        "json",
    ]);
    let points = v["points"].as_array().unwrap();
    let at = |routing: &str, algo: &str| {
        let p = points.iter().find(|p| {
            p["point"]["topology.network.routing"] == routing
                && p["point"]["nccl.NCCL_ALGO"] == algo
        });
        p.unwrap()["result"].clone()
    };
    let step = |r: &serde_json::Value| num(r, "iteration_time_ms");
    // The bucket of the embedding (tied LM head), the largest all-reduce: its time.
    let largest = |r: &serde_json::Value| {
        let b = r["buckets"].as_array().unwrap();
        let big = b.iter().max_by(|x, y| num(x, "bytes").total_cmp(&num(y, "bytes"))).unwrap();
        num(big, "end_ms") - num(big, "start_ms")
    };
    for algo in ["NVLSTree", "Ring"] {
        let (a, e) = (at("adaptive", algo), at("ecmp", algo));
        assert_eq!((num(&a, "world"), num(&e, "world")), (256.0, 256.0));
        // (NVLSTree's flows sit at NCCL's per-channel NVLSTree maximum either way, so the two
        // agree to the solver's rounding.)
        assert!(
            step(&e) >= step(&a) * (1.0 - 1e-4),
            "{algo}: ecmp {} adaptive {}",
            step(&e),
            step(&a)
        );
    }
    // NVLSTree spreads a node's traffic over 8 heads x 16 channels of connections: the hashes
    // even out. The ring's 16 channels, two per NIC, collide on the ports between leaves: its
    // largest all-reduce is much slower, the step a little (the backward pass hides the rest;
    // 1.0 % since its LL128 buckets are held to NCCL's per-channel LL128 maximum, which the
    // collisions then only partly exceed, and pay NCCL's per-step cost either way; over 2 % before).
    let (a, e) = (at("adaptive", "NVLSTree"), at("ecmp", "NVLSTree"));
    assert!(step(&e) / step(&a) < 1.001, "NVLSTree: {} vs {}", step(&e), step(&a));
    let (a, e) = (at("adaptive", "Ring"), at("ecmp", "Ring"));
    assert!(largest(&e) > 1.3 * largest(&a), "ring: {} vs {}", largest(&e), largest(&a));
    assert!(step(&e) > 1.005 * step(&a), "ring: {} vs {}", step(&e), step(&a));
    // The hash is a fixed function: the same scenario gives the same bytes, on one thread too.
    let once = collsim_ok(&["simulate", scenario, "--format", "json"]);
    assert_eq!(once, collsim_ok(&["simulate", scenario, "--format", "json"]));
    let one = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(["simulate", scenario, "--format", "json"])
        .env("RAYON_NUM_THREADS", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(once.as_bytes(), one.stdout.as_slice());
}

#[test]
fn gpt2_xl_on_a3_high_with_and_without_fp16_compression() {
    let none = json(&["simulate", "scenarios/gpt2-xl-a3-16node.toml", "--format", "json"]);
    let fp16 = json(&["simulate", "scenarios/gpt2-xl-a3-16node-fp16.toml", "--format", "json"]);
    assert_eq!(num(&none, "world"), 128.0);
    let wire = |r: &serde_json::Value| -> f64 {
        r["buckets"].as_array().unwrap().iter().map(|b| num(b, "wire_bytes")).sum()
    };
    assert_eq!(wire(&none), 2.0 * wire(&fp16));
    // On TCPX the halved wire pays for the casts.
    assert!(num(&fp16, "iteration_time_ms") < num(&none, "iteration_time_ms"));
    // The acceptance sweep: one row per hook, in the order given.
    let rows = json(&[
        "simulate",
        "scenarios/gpt2-xl-a3-16node.toml",
        "--sweep",
        "ddp.comm_hook=none,fp16,powersgd",
        "--format",
        "json",
    ]);
    assert_eq!(rows["format_version"], collsim::report::FORMAT_VERSION);
    assert_eq!(rows["scenario"], "scenarios/gpt2-xl-a3-16node.toml");
    assert_eq!(rows["swept"][0], "workload.ddp.comm_hook");
    let rows = &rows["points"];
    let hooks: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["point"]["workload.ddp.comm_hook"].as_str().unwrap())
        .collect();
    assert_eq!(hooks, ["none", "fp16", "powersgd"]);
    assert_eq!(num(&rows[0]["result"], "iteration_time_ms"), num(&none, "iteration_time_ms"));
    // NCCL keys are text, as NCCL reads them: `2.18` is a release, not the number 2.18; a
    // quoted value is the string inside the quotes.
    let rows = json(&[
        "simulate",
        "scenarios/gpt2-xl-a3-16node.toml",
        "--sweep",
        "nccl.version=2.18,2.30",
        "--sweep",
        "ddp.comm_hook=\"none\"",
        "--format",
        "json",
    ]);
    let rows = rows["points"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["point"]["nccl.version"], "2.30");
    assert_eq!(num(&rows[1]["result"], "iteration_time_ms"), num(&none, "iteration_time_ms"));
}

#[test]
fn llama_7b_bf16_on_sixteen_dgx_h100() {
    let r = json(&["simulate", "scenarios/llama7b-dgx-h100-16node.toml", "--format", "json"]);
    assert_eq!(num(&r, "world"), 128.0);
    let b = r["buckets"].as_array().unwrap();
    // bf16: 226 buckets, the 250 MiB head and embedding at the ends (ddp.md §3.6).
    assert_eq!(b.len(), 226);
    assert_eq!(num(&b[0], "bytes"), 262_144_000.0);
    assert_eq!(num(&b[225], "bytes"), 262_144_000.0);
    // gradient_as_bucket_view: no copy-out; the embedding's bucket, ready last, is the tail.
    assert!(num(&r, "exposed_comm_ms") > 0.0 && num(&r, "scaling_efficiency") < 1.0);
}

#[test]
fn trace_and_plot_of_a_step() {
    let dir = super::scratch();
    let (trace, svg) = (dir.join("r50.json"), dir.join("r50.svg"));
    collsim_ok(&[
        "simulate",
        "scenarios/resnet50-dgx-a100-4node.toml",
        "--trace",
        trace.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    let lane = |tid: i64| events.iter().filter(|e| e["ph"] == "X" && e["tid"] == tid).count();
    // One event per layer's backward (18 layers) and more on the compute lane; one per bucket
    // collective and the buffer broadcast on the NCCL lane.
    assert!(lane(0) >= 18 + 2, "{}", lane(0));
    assert_eq!(lane(1), 5 + 1);
    assert!(
        events.iter().any(|e| e["name"] == "thread_name" && e["args"]["name"] == "NCCL stream")
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("<rect"));
}

#[test]
fn compression_pays_off_only_on_slow_networks() {
    // ddp.md §2.3: compression rarely pays on data-centre fabrics and does on slow ones. GPT-2 XL
    // on 16 nodes of 8 H100s, each node's 8 NICs swept from 1 to 400 Gb/s; none, fp16 and
    // PowerSGD rank 4. The crossovers come out of the model.
    use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_scenario};
    use collsim::units::Bandwidth;
    let text = std::fs::read_to_string("scenarios/gpt2-xl-a3-16node.toml")
        .unwrap()
        .replace("gcp-a3-highgpu-8g", "dgx-h100");
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
    let hooks = ["none", "fp16", "powersgd"];
    let speeds = [1u64, 2, 5, 10, 25, 50, 100, 200, 400];
    let mut table = Vec::new();
    for &gbit in &speeds {
        let mut row = Vec::new();
        for h in hooks {
            let t = text.replace("comm_hook = \"none\"", &format!("comm_hook = \"{h}\""));
            let mut s = parse_scenario("gpt2.toml", &t).unwrap();
            if let Some(nic) = s.node.nic.as_mut() {
                nic.speed = Bandwidth::from_gbit_per_s(gbit);
            }
            let (r, _) =
                collsim::simulate_ddp(&s, &params, collsim::collective::Mode::Auto).unwrap();
            row.push(r.iteration_time_ms);
        }
        eprintln!(
            "{gbit:>4} Gb/s per NIC: none {:>10.1} ms, fp16 {:>10.1} ms, powersgd {:>10.1} ms",
            row[0], row[1], row[2]
        );
        table.push(row);
    }
    let best = |row: &Vec<f64>| (0..3).min_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
    // Slow networks: PowerSGD wins. Fast ones: plain all-reduce is within 5 % of the best and
    // PowerSGD, latency- and compute-bound, is not the best.
    assert_eq!(best(&table[0]), 2, "{table:?}");
    let fast = &table[speeds.len() - 1];
    assert!(fast[0] <= 1.05 * fast[best(fast)], "{fast:?}");
    assert_ne!(best(fast), 2, "{fast:?}");
    // PowerSGD's crossover with the uncompressed step: the first speed at which it stops
    // paying off. fp16's gain shrinks with the bandwidth until the casts eat it.
    let cross = speeds.iter().zip(&table).find(|(_, row)| row[2] >= row[0]).map(|(s, _)| *s);
    eprintln!("powersgd rank 4 stops paying off at {cross:?} Gb/s per NIC");
    assert!(matches!(cross, Some(25..=200)), "{table:?}");
    let gain = |row: &Vec<f64>| 1.0 - row[1] / row[0];
    eprintln!(
        "fp16 gain: {:.1} % at 1 Gb/s, {:.1} % at 400",
        100.0 * gain(&table[0]),
        100.0 * gain(fast)
    );
    // At 400 Gb/s the casts cost more than they save: -3.0 % with the default compute model's
    // 52.5 µs of host a kernel for each of the hook's casts (-2.4 % at 8 sequences a GPU,
    // before GPT-2 XL was counted as transformers runs it and 8 no longer fitted).
    assert!(gain(&table[0]) > 0.2 && gain(fast) < 0.02 && gain(fast) > -0.04, "{table:?}");
}

#[test]
fn bad_ddp_input_is_one_line_naming_the_field() {
    use super::cli_errors::fails_with;
    let dir = super::scratch();
    let base = std::fs::read_to_string("scenarios/gpt2-xl-a3-16node.toml").unwrap();
    let cases = [
        (
            base.replace("comm_hook = \"none\"", "comm_hook = \"zip\""),
            "workload.ddp.comm_hook: unknown hook \"zip\"",
        ),
        (base.replace("micro_batch = 4\n", ""), "workload.micro_batch: missing"),
        (
            base.replace("model = \"gpt2-xl\"", "model = \"gpt5\""),
            "workload.model: unknown model \"gpt5\"",
        ),
        (
            base.replace("precision = \"bf16\"", "precision = \"fp4\""),
            "workload.precision: the H100-SXM5-80GB has no peak for \"fp4\"",
        ),
        (
            base.replace("precision = \"bf16\"", "precision = \"bf16\"\nmfu = 1.4"),
            "workload.mfu: must be a fraction",
        ),
        (
            base.replace(
                "precision = \"bf16\"",
                "precision = \"bf16\"\nmfu = 0.4\ngemm_fixed_us = 60",
            ),
            "workload.mfu: with gemm_fixed_us the GEMM rate would be solved",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let p = dir.join(format!("bad-ddp-{i}.toml"));
        std::fs::write(&p, text).unwrap();
        fails_with(&["simulate", p.to_str().unwrap()], &[needle, &format!("bad-ddp-{i}.toml:")]);
    }
    super::cli_errors::misused_with(
        &["simulate", "scenarios/gpt2-xl-a3-16node.toml", "--collective", "all_gather"],
        &["--collective: the scenario's workload is a training step"],
    );
    let misused = super::cli_errors::misused_with;
    misused(
        &["simulate", "scenarios/gpt2-xl-a3-16node.toml", "--sweep", "ddp.bucket_cap_mb"],
        &["expected KEY=V1,V2"],
    );
    // A key swept twice would run every point with the second axis' value under the first
    // axis' label.
    let twice = [
        "simulate",
        "scenarios/gpt2-xl-a3-16node.toml",
        "--sweep",
        "ddp.bucket_cap_mb=1,2",
        "--sweep",
        "ddp.bucket_cap_mb=3",
    ];
    misused(&twice, &["ddp.bucket_cap_mb is swept twice"]);
    let s = "scenarios/gpt2-xl-a3-16node.toml";
    misused(&["simulate", s, "--sweep", "ddp.bucket_cap_mb=1,1"], &["value 1 given twice"]);
    misused(
        &["simulate", s, "--sweep", "ddp.bucket_cap_mb=1,2", "--trace", "t.json"],
        &["--trace draws one DDP step"],
    );
}

#[test]
fn a_model_given_layer_by_layer() {
    let r = json(&["simulate", "scenarios/ddp-custom-layers.toml", "--format", "json"]);
    // 19 tensors; measured times where given (the embedding's 0.4 ms forward), GFLOP per sample
    // at 300 TFLOP/s elsewhere.
    let tensors: f64 = r["buckets"].as_array().unwrap().iter().map(|b| num(b, "tensors")).sum();
    assert_eq!(tensors, 19.0);
    let fwd = 0.4 + 16.0 * (25.0 + 25.0 + 1.6) * 1e9 / 300e12 * 1e3;
    assert!((num(&r, "forward_ms") - fwd).abs() < 1e-9, "{} vs {fwd}", num(&r, "forward_ms"));
    // The embedding's gradient is ready last: its bucket is the latest ready. The bf16 head
    // fills a bucket of its own, which never reaches its limit and so is closed last (PyTorch
    // appends the open buckets after the full ones): reduced last although ready first.
    let b = r["buckets"].as_array().unwrap();
    let big = b.iter().max_by(|x, y| num(x, "bytes").total_cmp(&num(y, "bytes"))).unwrap();
    assert!(num(big, "bytes") >= 50000.0 * 1024.0 * 4.0);
    let latest = b.iter().map(|x| num(x, "ready_ms")).fold(0.0, f64::max);
    assert_eq!(num(big, "ready_ms"), latest);
    let head = b.last().unwrap();
    assert_eq!((num(head, "tensors"), num(head, "bytes")), (2.0, 2.0 * 1024.0 * 2.0));
    // Head-of-line blocking: ready at the start of backward, launched after every other bucket.
    assert!(num(head, "ready_ms") < num(&b[0], "ready_ms"), "{head}");
    assert!(num(head, "start_ms") >= num(&b[b.len() - 2], "end_ms"));
    assert!(num(&r, "exposed_comm_ms") > 0.0);
}

#[test]
fn bert_large_on_eight_dgx_a100_nodes() {
    // The shipped 64-GPU scenario: 38 buckets after the rebuild, gradients all-reduced once per
    // 32 micro-steps, so communication is a sliver of the step.
    let r = json(&["simulate", "scenarios/bert-large-dgx-a100-8node.toml", "--format", "json"]);
    assert_eq!(num(&r, "world"), 64.0);
    assert_eq!(r["buckets"].as_array().unwrap().len(), 38);
    assert!(num(&r, "comm_ms") < 0.01 * num(&r, "iteration_time_ms"));
    assert!(num(&r, "scaling_efficiency") > 0.95 && num(&r, "scaling_efficiency") <= 1.0);
    assert!(
        (num(&r, "samples_per_s") - 64.0 * 256.0 * 32.0 / (num(&r, "iteration_time_ms") / 1e3))
            .abs()
            < 1e-6
    );
}

#[test]
fn ddp_output_is_the_same_bytes_whatever_the_thread_count() {
    let run = |threads: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"));
        c.args([
            "simulate",
            "scenarios/gpt2-xl-a3-16node.toml",
            "--sweep",
            "ddp.comm_hook=none,fp16,powersgd",
            "--sweep",
            "ddp.bucket_cap_mb=5,25",
            "--format",
            "json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
        if let Some(t) = threads {
            c.env("RAYON_NUM_THREADS", t);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let a = run(None);
    assert_eq!(a, run(Some("1")));
    assert_eq!(a, run(None));
}

#[test]
fn sweeps_reach_topology_profile_and_collective_scenarios() {
    // The NIC speed (a topology key) and the network's bandwidth fraction (a profile key) of a
    // DDP scenario: a slower network communicates longer, and CSV carries the swept columns.
    let csv = super::collsim_ok(&[
        "simulate",
        "scenarios/resnet50-dgx-a100-4node.toml",
        "--sweep",
        "topology.nic.speed=100 Gb/s,200 Gb/s",
        "--sweep",
        "profile.bandwidth.net=0.5,1.0",
        "--format",
        "csv",
    ]);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("topology.nic.speed,profile.bandwidth.net,iteration_time_ms,"));
    assert_eq!(lines.len(), 5);
    let comm: Vec<f64> =
        lines[1..].iter().map(|l| l.split(',').nth(7).unwrap().parse().unwrap()).collect();
    // (100, 0.5) > (100, 1.0) > (200, 1.0), and (100, 1.0) ~ (200, 0.5): the same bytes/s.
    assert!(comm[0] > comm[1] && comm[1] > comm[3], "{comm:?}");
    assert!((comm[1] / comm[2] - 1.0).abs() < 0.02, "{comm:?}");
    // A collective sweep: one row per point and size, each point on its own setting.
    let v = json(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--sweep",
        "nccl.NCCL_ALGO=Ring,NVLS",
        "--min-bytes",
        "16M",
        "--max-bytes",
        "16M",
        "--format",
        "json",
    ]);
    assert_eq!(v["format_version"], collsim::report::FORMAT_VERSION);
    let points = v["points"].as_array().unwrap();
    let algo = |i: usize| points[i]["rows"][0]["algo"].as_str().unwrap().to_string();
    assert_eq!((algo(0), algo(1)), ("RING".to_string(), "NVLS".to_string()));
    assert_eq!(points[1]["point"]["nccl.NCCL_ALGO"], "NVLS");
    let csv = super::collsim_ok(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--sweep",
        "cluster.nodes=1,2",
        "--max-bytes",
        "64",
        "--format",
        "csv",
    ]);
    assert!(csv.starts_with("cluster.nodes,size_bytes,count,dtype,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 2 * 4);
    // One DDP step as CSV: the same columns, no swept keys.
    let csv = super::collsim_ok(&[
        "simulate",
        "scenarios/resnet50-dgx-a100-1node.toml",
        "--format",
        "csv",
    ]);
    assert!(csv.starts_with("iteration_time_ms,"), "{csv}");
    assert_eq!(csv.lines().count(), 2);
    // A key no file has is refused, naming the file it was set in.
    crate::cli_errors::fails_with(
        &["simulate", "scenarios/quickstart.toml", "--sweep", "topology.nic.sped=1 Gb/s"],
        &["topologies/dgx-h100.toml", "sped"],
    );
}

#[test]
fn the_optimizer_step_is_its_memory_traffic_after_backward() {
    // GPT-2 XL, fp32 parameters, on an H100 (3.35 TB/s): foreach Adam reads and writes 19
    // fp32 values per parameter (76 bytes), fused Adam 7 (28); no optimizer, no step.
    let s = "scenarios/gpt2-xl-a3-16node.toml";
    let step = |imp: &str, opt: &str| {
        let v = json(&[
            "simulate",
            s,
            "--format",
            "json",
            "--sweep",
            &format!("workload.optimizer_impl={imp}"),
            "--sweep",
            &format!("workload.optimizer={opt}"),
        ]);
        v["points"][0]["result"].clone()
    };
    let params = 1_557_611_200.0_f64;
    let foreach = step("foreach", "adam");
    let fused = step("fused", "adam");
    let none = step("foreach", "none");
    let expect = |bytes: f64| params * bytes / 3.35e12 * 1e3;
    assert!(
        (num(&foreach, "optimizer_ms") - expect(76.0)).abs() < 0.05,
        "{}",
        foreach["optimizer_ms"]
    );
    assert!((num(&fused, "optimizer_ms") - expect(28.0)).abs() < 0.05, "{}", fused["optimizer_ms"]);
    assert_eq!(num(&none, "optimizer_ms"), 0.0);
    // It runs after the last bucket, on the compute stream: the step grows by all of it, at
    // the slowest rank's pace (`optimizer_ms` is a typical rank's).
    let grown = num(&foreach, "iteration_time_ms") - num(&none, "iteration_time_ms");
    let slowest = num(&foreach["skew"], "slowest_factor");
    assert!((grown - num(&foreach, "optimizer_ms") * slowest).abs() < 1e-6, "{grown}");
    let trace = super::scratch().join(format!("collsim-optimizer-{}.json", std::process::id()));
    collsim_ok(&["simulate", s, "--trace", trace.to_str().unwrap()]);
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ev = t["traceEvents"].as_array().unwrap();
    let opt: Vec<&serde_json::Value> = ev.iter().filter(|e| e["cat"] == "optimizer").collect();
    assert_eq!(opt.len(), 1);
    assert_eq!(opt[0]["name"], "optimizer step (adam)");
    let end = |e: &serde_json::Value| num(e, "ts") + num(e, "dur");
    let last_coll = ev.iter().filter(|e| e["cat"] == "collective").map(end).fold(0.0, f64::max);
    assert!(num(opt[0], "ts") >= last_coll - 1e-6, "optimizer before the last collective ends");
    // A bad name is one line naming the field.
    super::cli_errors::fails_with(
        &["simulate", s, "--sweep", "workload.optimizer_impl=apex"],
        &["workload.optimizer_impl", "unknown optimizer_impl \"apex\" (foreach, fused, for_loop)"],
    );
}

#[test]
fn one_gpu_at_80_percent_sets_the_pace_of_a_64_gpu_job() {
    let s = "scenarios/resnet50-straggler-dgx-a100-8node.toml";
    let v = json(&["simulate", s, "--format", "json"]);
    let k = &v["skew"];
    // The straggler's own 1.25, and the default spread of the others (1.43 %, order statistics
    // of 64 ranks: about 1.034) far below it.
    assert!((num(k, "slowest_factor") - 1.25).abs() < 1e-9, "{k}");
    let (step, nominal) = (num(&v, "iteration_time_ms"), num(k, "typical_rank_ms"));
    assert!((num(k, "wait_ms") - (step - nominal)).abs() < 1e-9);
    // Compute-bound: the step stretches by about the straggler's 25 % of compute.
    assert!((step / nominal - 1.25).abs() < 0.01, "{step} / {nominal}");
    // Each bucket waits longer than the one before: the slow GPU falls further behind as
    // backward goes on; the last waits about a quarter of the healthy ranks' step.
    let waits: Vec<f64> =
        v["buckets"].as_array().unwrap().iter().map(|b| num(b, "skew_wait_ms")).collect();
    assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
    assert!((waits.last().unwrap() / nominal - 0.25).abs() < 0.02, "{waits:?}");
    let table = collsim_ok(&["simulate", s]);
    assert!(table.contains("rank skew / straggler wait") && table.contains("waits ms"), "{table}");
    // Without it and without the default spread, nothing of the kind is printed, and the step
    // is the nominal one (within 1e-8: the straggler's step, restated as a typical rank's
    // compute and the wait, leaves the same exposed communication as a healthy step).
    let healthy = json(&[
        "simulate",
        s,
        "--sweep",
        "workload.straggler_speed=1.0",
        "--sweep",
        "workload.rank_skew_cv=0",
        "--sweep",
        "workload.rank_skew_host_cv=0",
        "--format",
        "json",
    ]);
    let r = &healthy["points"][0]["result"];
    assert!(r["skew"].is_null());
    assert!((num(r, "iteration_time_ms") / nominal - 1.0).abs() < 1e-8, "{r}");
    // The default spread alone: the slowest of 64 ranks, about 3.5 % slower than a typical one.
    let spread =
        json(&["simulate", s, "--sweep", "workload.straggler_speed=1.0", "--format", "json"]);
    let f = num(&spread["points"][0]["result"]["skew"], "slowest_factor");
    assert!((1.03..1.04).contains(&f), "{f}");
    super::cli_errors::fails_with(
        &["simulate", s, "--sweep", "workload.straggler_speed=0"],
        &["workload.straggler_speed", "must be a fraction in [0.01, 1]"],
    );
}

#[test]
fn the_resnet50_step_says_where_its_time_goes() {
    let s = "scenarios/resnet50-dgx-a100-1node.toml";
    let v = json(&["simulate", s, "--format", "json"]);
    let b = &v["breakdown"];
    let step = num(&v, "iteration_time_ms");
    let parts = [
        "flop_ms",
        "memory_ms",
        "launch_ms",
        "measured_ms",
        "ddp_copies_ms",
        "optimizer_ms",
        "exposed_comm_ms",
        "skew_wait_ms",
        "input_stall_ms",
    ];
    let sum: f64 = parts.iter().map(|k| num(b, k)).sum();
    assert!((sum - step).abs() < 1e-6 * step, "{sum} vs {step}");
    // The batch norms, ReLUs, adds and pooling move 142 + 208 MB per image (models.rs counts
    // them op by op): 256 images at the A100's 2,039 GB/s.
    let memory = 256.0 * 350.0e6 / 2039e9 * 1e3;
    assert!((num(b, "memory_ms") / memory - 1.0).abs() < 0.01, "{b}");
    // mfu 0.194 holds forward and backward to the model's FLOPs at 19.4 % of the peak: 3 x 2
    // x 4.089 GMAC per image, less the stem's dgrad (118 M MACs), which nothing needs.
    let fwd_bwd = num(&v, "forward_ms") + num(&v, "backward_ms");
    let flops = 2.0 * (3.0 * 4.089e9 - 118.01e6);
    assert!((fwd_bwd - 256.0 * flops / (0.194 * 312e12) * 1e3).abs() < 0.05, "{fwd_bwd}");
    assert!((num(b, "flop_ms") + num(b, "memory_ms") + num(b, "launch_ms") - fwd_bwd).abs() < 1e-6);
    let table = collsim_ok(&["simulate", s]);
    for needle in ["where the step goes", "compute, memory-bound", "input stall", "GEMM rate"] {
        assert!(table.contains(needle), "{needle} not in {table}");
    }
    // CSV columns, the trace's iteration span and the plot carry it too.
    let csv = collsim_ok(&["simulate", s, "--format", "csv"]);
    assert!(csv.lines().next().unwrap().contains("memory_ms,launch_ms"), "{csv}");
    let dir = super::scratch();
    let (trace, plot) = (
        dir.join(format!("collsim-breakdown-{}.json", std::process::id())),
        dir.join(format!("collsim-breakdown-{}.svg", std::process::id())),
    );
    collsim_ok(&[
        "simulate",
        s,
        "--trace",
        trace.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let it = t["traceEvents"].as_array().unwrap().iter().find(|e| e["name"] == "iteration");
    assert!(num(&it.unwrap()["args"], "breakdown.memory_ms") > 0.0);
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("where the step goes") && svg.contains("compute, memory-bound"));
}

#[test]
fn a_node_loader_shared_by_eight_gpus_caps_their_step_but_not_one_gpus() {
    // A node whose CPUs prepare 12,000 images/s: one GPU alone is never short (256 images in
    // 21.3 ms, well under its 103 ms of compute); eight get 1,500/s each, 170.7 ms per step.
    let text = std::fs::read_to_string("scenarios/resnet50-dgx-a100-1node.toml").unwrap();
    let text = format!("{text}\n[workload.input]\nnode_samples_per_s = 12000\n");
    let dir = super::scratch();
    let p = dir.join(format!("collsim-loader-{}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    let v = json(&["simulate", p.to_str().unwrap(), "--format", "json"]);
    let step = num(&v, "iteration_time_ms");
    assert!((step - 256.0 / 1500.0 * 1e3).abs() < 1e-6, "{step}");
    let stall = num(&v["breakdown"], "input_stall_ms");
    assert!(stall > 60.0 && (num(&v["breakdown"], "exposed_comm_ms") + stall) < step);
    assert!((num(&v, "single_gpu_ms") - 103.173).abs() < 0.01, "{v}");
    // Bad input names its field.
    let both = std::fs::read_to_string(&p).unwrap() + "gpu_samples_per_s = 3000\n";
    std::fs::write(&p, both).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &["workload.input.node_samples_per_s", "not both"],
    );
}

#[test]
fn an_mfu_the_memory_bound_work_leaves_no_room_for_is_refused_on_its_line() {
    let s = "scenarios/resnet50-dgx-a100-1node.toml";
    // ResNet-50's memory-bound work takes 43.9 ms per 256 images; at mfu 0.6 forward and
    // backward would have 33.5 ms.
    super::cli_errors::fails_with(
        &["simulate", s, "--sweep", "workload.mfu=0.6"],
        &["workload.mfu", "the memory-bound work and kernel launches alone take 43.9"],
    );
    // A small batch at mfu 0.215: the memory-bound work fits, but only with the GEMMs above
    // the A100's peak.
    super::cli_errors::fails_with(
        &["simulate", s, "--sweep", "workload.micro_batch=6", "--sweep", "workload.mfu=0.215"],
        &["workload.mfu", "above the 312.0 TFLOP/s peak"],
    );
    let text =
        std::fs::read_to_string(s).unwrap().replace("mfu = 0.194", "mfu = 0.194\nefficiency = 0.3");
    let p = super::scratch().join(format!("collsim-mfu-{}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &[".toml:", "workload.mfu", "not both"],
    );
}

#[test]
fn measured_rank_speeds_set_the_pace_as_a_straggler_does() {
    // The straggler scenario with its one slow GPU given as measured speeds of three ranks:
    // the slowest (0.8) sets the same pace.
    let s = "scenarios/resnet50-straggler-dgx-a100-8node.toml";
    let text = std::fs::read_to_string(s).unwrap();
    let line = text.lines().find(|l| l.starts_with("straggler_speed")).unwrap();
    let measured = text.replace(line, "rank_speeds = [1.0, 0.8, 0.97]");
    let dir = super::scratch();
    let p = dir.join(format!("collsim-rank-speeds-{}.toml", std::process::id()));
    std::fs::write(&p, &measured).unwrap();
    let a = json(&["simulate", s, "--format", "json"]);
    let b = json(&["simulate", p.to_str().unwrap(), "--format", "json"]);
    assert_eq!(num(&a, "iteration_time_ms"), num(&b, "iteration_time_ms"));
    assert!((num(&b["skew"], "slowest_factor") - 1.25).abs() < 1e-9, "{b}");
    // Both ways at once, a speed out of range, or more ranks than the job has: one line each.
    std::fs::write(&p, measured.replace("rank_speeds", &format!("{line}\nrank_speeds"))).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &["workload.rank_speeds", "not both"],
    );
    for bad in ["0.0]", "1.1]"] {
        std::fs::write(&p, measured.replace("0.97]", bad)).unwrap();
        super::cli_errors::fails_with(
            &["simulate", p.to_str().unwrap()],
            &["workload.rank_speeds", "0.01 to 1"],
        );
    }
    std::fs::write(&p, measured.clone()).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap(), "--nodes", "1", "--gpus-per-node", "2"],
        &["workload.rank_speeds lists 3 ranks", "the job has 2"],
    );
}

#[test]
fn each_flop_bound_kernel_pays_the_gemms_fixed_time() {
    // block0 with 8 kernels, 4 of them GEMMs, at 50 µs a GEMM: forward 4, backward 8 (dgrad
    // and wgrad) FLOP-bound kernels, 600 µs more GEMM time than at 0 µs; a layer with FLOPs
    // and kernels but no `gemms` counts one (150 µs).
    let s = "scenarios/ddp-custom-layers.toml";
    let text = std::fs::read_to_string(s).unwrap();
    let dir = super::scratch();
    let at = |layer: &str, gemm_us: f64, name: &str| {
        let t = text
            .replacen(
                "fwd_gflops = 25           # per sample",
                &format!("fwd_gflops = 25\n{layer}"),
                1,
            )
            .replace("tflops = 300", &format!("tflops = 300\ngemm_fixed_us = {gemm_us}"));
        let p = dir.join(format!("collsim-gemm-{name}-{}.toml", std::process::id()));
        std::fs::write(&p, t).unwrap();
        let v = json(&["simulate", p.to_str().unwrap(), "--format", "json"]);
        num(&v["breakdown"], "flop_ms")
    };
    let four = "kernels = 8\ngemms = 4";
    let extra = at(four, 50.0, "four") - at(four, 0.0, "none");
    assert!((extra - 0.6).abs() < 1e-9, "{extra} ms");
    let one = at("kernels = 8", 50.0, "one") - at("kernels = 8", 0.0, "one-none");
    assert!((one - 0.15).abs() < 1e-9, "{one} ms");
    // More GEMMs than kernels, a negative time, and gemms on a measured layer are refused.
    let cases = [(
        "kernels = 2\ngemms = 3",
        "workload.layer[1].gemms: must be 0 to the layer's kernels (2)",
    )];
    for (i, (layer, needle)) in cases.iter().enumerate() {
        let p = dir.join(format!("collsim-gemm-bad-{i}-{}.toml", std::process::id()));
        std::fs::write(
            &p,
            text.replacen(
                "fwd_gflops = 25           # per sample",
                &format!("fwd_gflops = 25\n{layer}"),
                1,
            ),
        )
        .unwrap();
        super::cli_errors::fails_with(&["simulate", p.to_str().unwrap()], &[".toml:", needle]);
    }
    let p = dir.join(format!("collsim-gemm-neg-{}.toml", std::process::id()));
    std::fs::write(&p, text.replace("tflops = 300", "tflops = 300\ngemm_fixed_us = -5")).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &[".toml:", "workload.gemm_fixed_us: must be a GPU time per GEMM in µs"],
    );
    let measured = text.replacen("bwd_ms = 0.9", "bwd_ms = 0.9\ngemms = 1", 1);
    std::fs::write(&p, measured).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &[".toml:", "workload.layer[0].gemms", "measured fwd_ms already includes"],
    );
}

#[test]
fn custom_layers_take_memory_bytes_and_launches_only_with_their_flops() {
    let s = "scenarios/ddp-custom-layers.toml";
    let text = std::fs::read_to_string(s).unwrap();
    let dir = super::scratch();
    let p = dir.join(format!("collsim-layer-mem-{}.toml", std::process::id()));
    // block0 moving 1 GB per sample forward (2 backward) at the H100's 3.35 TB/s, twice over
    // (a tflops rate with fp32 gradients counts fp32 activations): 16 samples take 28.66 ms
    // more; kernels = 0 is no launch floor.
    let heavy = text.replacen(
        "fwd_gflops = 25           # per sample",
        "fwd_gflops = 25\nfwd_memory = \"1 GB\"\nkernels = 0",
        1,
    );
    std::fs::write(&p, &heavy).unwrap();
    let base = json(&["simulate", s, "--format", "json"]);
    let v = json(&["simulate", p.to_str().unwrap(), "--format", "json"]);
    let mem = num(&v["breakdown"], "memory_ms");
    assert!((mem - 2.0 * 16.0 * 3e9 / 3.35e12 * 1e3).abs() < 1e-6, "{mem}");
    assert_eq!(num(&base["breakdown"], "memory_ms"), 0.0);
    // On a layer given as measured times, the keys are refused on their line.
    let measured = text.replacen("bwd_ms = 0.9", "bwd_ms = 0.9\nkernels = 40", 1);
    std::fs::write(&p, measured).unwrap();
    super::cli_errors::fails_with(
        &["simulate", p.to_str().unwrap()],
        &[".toml:", "workload.layer[0].kernels", "measured fwd_ms already includes"],
    );
}

#[test]
fn a_straggler_in_a_job_sets_that_jobs_pace() {
    // A [[job]]'s step waits for its slowest rank as a scenario's does: one GPU at 80 % in the
    // first of two jobs stretches its step (compute-bound) by about a quarter, alone and beside
    // the other, and leaves the other job's step as it was or faster (less of its traffic meets
    // the slower job's).
    let text = std::fs::read_to_string("scenarios/two-ddp-jobs-shared-spine.toml").unwrap();
    let text =
        text.replace("../topologies/", &format!("{}/topologies/", env!("CARGO_MANIFEST_DIR")));
    let slow = text.replacen("mfu = 0.2", "mfu = 0.2\nstraggler_speed = 0.8", 1);
    let dir = super::scratch();
    let (p, q) = (
        dir.join(format!("collsim-job-skew-{}.toml", std::process::id())),
        dir.join(format!("collsim-job-healthy-{}.toml", std::process::id())),
    );
    std::fs::write(&p, slow).unwrap();
    std::fs::write(&q, text).unwrap();
    let (a, b) = (
        json(&["simulate", p.to_str().unwrap(), "--format", "json"]),
        json(&["simulate", q.to_str().unwrap(), "--format", "json"]),
    );
    let alone = |v: &serde_json::Value, j: usize| num(&v["jobs"][j]["alone"], "iteration_time_ms");
    let step = |v: &serde_json::Value, j: usize| num(&v["jobs"][j]["step"], "iteration_time_ms");
    let ratio = alone(&a, 0) / alone(&b, 0);
    assert!((1.15..1.26).contains(&ratio), "{ratio}");
    assert!(step(&a, 0) > 1.15 * step(&b, 0), "{} vs {}", step(&a, 0), step(&b, 0));
    assert!(step(&a, 1) <= step(&b, 1) * (1.0 + 1e-9), "{} vs {}", step(&a, 1), step(&b, 1));
    let k = &a["jobs"][0]["alone"]["skew"];
    assert!((num(k, "slowest_factor") - 1.25).abs() < 1e-9, "{k}");
}

#[test]
fn the_larger_presets_run_as_ddp_steps() {
    // Issue #16's example: `llama-13b` was "unknown model". Every preset runs one step; a
    // larger model of the same family takes longer at the same micro-batch.
    let s = "scenarios/llama7b-dgx-h100-16node.toml";
    let v = json(&[
        "simulate",
        s,
        "--format",
        "json",
        "--sweep",
        "workload.model=llama-7b,llama-13b,llama-2-70b,llama-3.2-1b,llama-3-8b,llama-3-70b,mixtral-8x7b,gpt3-175b",
        "--sweep",
        "workload.micro_batch=1",
    ]);
    let step: Vec<f64> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(&p["result"], "iteration_time_ms"))
        .collect();
    assert_eq!(step.len(), 8);
    assert!(step[1] > step[0] && step[2] > step[1], "{step:?}");
    assert!(step[3] < step[0] && step[5] > step[4], "{step:?}");
    // Mixtral reduces all eight experts' gradients (46.7 B parameters in bf16): 93.4 GB.
    let mixtral = &v["points"][6]["result"];
    let wire: f64 = mixtral["buckets"].as_array().unwrap().iter().map(|b| num(b, "bytes")).sum();
    assert!((wire / (2.0 * 46_702_792_704.0) - 1.0).abs() < 1e-9, "{wire}");
}

#[test]
fn an_fsdp_step_runs_where_ddp_cannot_hold_the_model() {
    // Llama-7B with Adam: 119.6 GiB per GPU under DDP; FULL_SHARD over 128 H100s holds it in a
    // fraction, and moves 3 x its bf16 parameters a step.
    let s = "scenarios/llama7b-fsdp-p5-16node.toml";
    let v = json(&["simulate", s, "--format", "json"]);
    let mem = num(&v["memory"], "total") / (1u64 << 30) as f64;
    assert!(mem < 40.0, "{mem} GiB");
    let step = num(&v, "iteration_time_ms");
    assert!((num(&v["breakdown"], "flop_ms") + num(&v["breakdown"], "memory_ms")) < step);
    let table = collsim_ok(&["simulate", s]);
    assert!(
        table.starts_with("FSDP step: llama-7b") && table.contains("sharding FULL_SHARD"),
        "{table}"
    );
    // NONE slowest; BACKWARD_POST as fast as BACKWARD_PRE while the host runs ahead of the GPU
    // (docs/fsdp-model.md §2: its gather is issued once the host has launched the unit's
    // backward, which here is before the GPU begins it).
    let sweep = json(&[
        "simulate",
        s,
        "--format",
        "json",
        "--sweep",
        "workload.fsdp.backward_prefetch=BACKWARD_PRE,BACKWARD_POST,NONE",
    ]);
    let t: Vec<f64> = sweep["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(&p["result"], "iteration_time_ms"))
        .collect();
    assert!(t[0] == t[1] && t[1] < t[2], "{t:?}");
    // NO_SHARD: no all-gather; each unit's gradient all-reduced whole after its backward (one
    // collective a unit, the model's parameters in reduce_dtype), every GPU holding the whole
    // model's state, and the optimizer over all of it: slower than FULL_SHARD's over a shard.
    let n = json(&[
        "simulate",
        s,
        "--format",
        "json",
        "--sweep",
        "workload.fsdp.sharding_strategy=NO_SHARD",
    ]);
    let n = &n["points"][0]["result"];
    let text = std::fs::read_to_string(s).unwrap().replace("\"FULL_SHARD\"", "\"NO_SHARD\"");
    let scenario = collsim::config::parse_scenario("no-shard.toml", &text).unwrap();
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .unwrap();
    let (r, _) =
        collsim::simulate_ddp(&scenario, &params, collsim::collective::Mode::Auto).unwrap();
    let nccl: Vec<&str> =
        r.timeline.iter().filter(|x| x.lane == "nccl").map(|x| x.name.as_str()).collect();
    assert!(!nccl.is_empty() && nccl.iter().all(|name| name.starts_with("all_reduce")), "{nccl:?}");
    let units = n["buckets"].as_array().unwrap();
    assert_eq!(units.len(), v["buckets"].as_array().unwrap().len());
    let wire: f64 = units.iter().map(|b| num(b, "wire_bytes")).sum();
    assert_eq!(wire, 2.0 * 6_738_415_616.0, "bf16 gradients of Llama-7B");
    assert!(num(n, "optimizer_ms") > 50.0 * num(&v, "optimizer_ms"));
    assert!(num(n, "iteration_time_ms") > step);
    // HYBRID_SHARD runs, its replicas' all-reduces in the trace's spans.
    let h = json(&[
        "simulate",
        s,
        "--format",
        "json",
        "--sweep",
        "workload.fsdp.sharding_strategy=HYBRID_SHARD",
    ]);
    assert!(num(&h["points"][0]["result"], "iteration_time_ms") > 0.0);
    super::cli_errors::fails_with(
        &["simulate", s, "--nodes", "1", "--gpus-per-node", "1"],
        &["on one rank", "NO_SHARD"],
    );
    // A compute rate so small the step's times would overflow is refused where it is read,
    // never printed as NaN.
    super::cli_errors::fails_with(
        &["simulate", s, "--sweep", "workload.mfu=1e-200"],
        &["llama7b-fsdp-p5-16node.toml:", "workload.mfu: must be a fraction in [0.01, 1]"],
    );
    // Accumulating four micro-steps: each gathers and reduce-scatters again (no no_sync).
    let k4 = json(&["simulate", s, "--format", "json", "--sweep", "workload.grad_accumulation=4"]);
    let k4 = &k4["points"][0]["result"];
    assert_eq!(k4["buckets"].as_array().unwrap().len(), 4 * v["buckets"].as_array().unwrap().len());
    assert!(num(k4, "iteration_time_ms") > 3.5 * step, "{}", num(k4, "iteration_time_ms"));
}

#[test]
fn an_exported_step_replays_as_a_list_of_calls() {
    // GPT-2 XL's DDP step on 16 A3 nodes, exported as a list of calls and replayed on the same
    // cluster: the same step (within 1 %; the same work runs, so in fact to the µs). Replayed
    // on twice the nodes, the compute stays and the all-reduces take longer.
    let dir = std::env::temp_dir().join(format!("collsim-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let calls = dir.join("calls.json");
    let out = collsim_ok(&[
        "simulate",
        "scenarios/gpt2-xl-a3-16node.toml",
        "--format",
        "json",
        "--export-calls",
        calls.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let step = num(&v, "iteration_time_ms");
    let replay = |nodes: usize| {
        let s = dir.join(format!("replay{nodes}.toml"));
        std::fs::write(
            &s,
            format!(
                "[cluster]\ntopology = \"gcp-a3-highgpu-8g\"\nnodes = {nodes}\n[workload]\nkind = \"trace\"\ncalls = \"calls.json\"\n"
            ),
        )
        .unwrap();
        let out = collsim_ok(&["simulate", s.to_str().unwrap(), "--format", "json"]);
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        (num(&r, "iteration_time_ms"), num(&r, "compute_ms"), num(&r, "comm_ms"))
    };
    let (same, compute, comm) = replay(16);
    assert!((same / step - 1.0).abs() < 0.01, "{same} vs {step}");
    let (_, compute32, comm32) = replay(32);
    assert_eq!(compute, compute32);
    assert!(comm32 > comm, "{comm32} vs {comm}");
    let table = collsim_ok(&["simulate", dir.join("replay16.toml").to_str().unwrap()]);
    assert!(table.contains("replayed step:") && table.contains("collectives"), "{table}");
    // A bad call is refused with the file and the entry.
    std::fs::write(dir.join("calls.json"), r#"{"collsim_calls": 1, "calls": [{"wait": 2}]}"#)
        .unwrap();
    super::cli_errors::fails_with(
        &["simulate", dir.join("replay16.toml").to_str().unwrap()],
        &["workload.calls", "calls[0].wait", "only 0 NCCL launches"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_hybrid_sharded_step_exports_its_groups_and_replays() {
    // HYBRID_SHARD's reduce-scatter on each node and all-reduce across them go into the list
    // of calls as groups (8 consecutive ranks; every 8th of the world) and replay on the same
    // cluster to the same step; on twice the nodes the all-reduce group grows, the shard
    // group does not.
    let dir = super::scratch().join(format!("collsim-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fsdp = std::fs::read_to_string("scenarios/llama7b-fsdp-p5-16node.toml").unwrap();
    let s = dir.join("hybrid.toml");
    std::fs::write(&s, fsdp.replace("\"FULL_SHARD\"", "\"HYBRID_SHARD\"")).unwrap();
    let calls = dir.join("calls.json");
    let step = json(&[
        "simulate",
        s.to_str().unwrap(),
        "--format",
        "json",
        "--export-calls",
        calls.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&calls).unwrap();
    assert!(text.contains(r#""group":{"size":8,"stride":1}"#), "{}", &text[..400]);
    assert!(text.contains(r#""group":{"stride":8}"#));
    let replay = |nodes: usize| {
        let r = dir.join(format!("replay{nodes}.toml"));
        let toml = format!(
            "[cluster]\ntopology = \"aws-p5\"\nnodes = {nodes}\n[workload]\nkind = \"trace\"\ncalls = \"calls.json\"\n"
        );
        std::fs::write(&r, toml).unwrap();
        json(&["simulate", r.to_str().unwrap(), "--format", "json"])
    };
    let same = replay(16);
    let err = num(&same, "iteration_time_ms") / num(&step, "iteration_time_ms") - 1.0;
    assert!(
        err.abs() < 0.01,
        "{} vs {}",
        num(&same, "iteration_time_ms"),
        num(&step, "iteration_time_ms")
    );
    assert!(num(&replay(32), "comm_ms") > num(&same, "comm_ms"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes at `scenario` a dgx-h100 scenario replaying `trace` (relative to the repository).
fn naming_trace(scenario: &std::path::Path, trace: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(trace);
    let text = format!(
        "[cluster]\ntopology = \"dgx-h100\"\n\n[workload]\nkind = \"trace\"\ncalls = {:?}\n",
        path.to_str().unwrap()
    );
    std::fs::write(scenario, text).unwrap();
}

#[test]
fn a_kineto_trace_replays_on_another_cluster() {
    // A synthetic trace in PyTorch's profiler format (tests/data/kineto-synthetic.json, one
    // rank of 8: seven GEMMs, an fp32 all-reduce of 16 Mi elements with its sizes on the
    // kernel, a bf16 all-gather with them on its record_param_comms CPU op, an optimizer
    // kernel that waited for the all-gather). Real traces are tested below.
    let f = "tests/data/kineto-synthetic.json";
    let one =
        json(&["simulate", "--workload-trace", f, "--topology", "dgx-h100", "--format", "json"]);
    let p5 = json(&[
        "simulate",
        "--workload-trace",
        f,
        "--topology",
        "aws-p5",
        "--nodes",
        "16",
        "--format",
        "json",
    ]);
    // The compute is the trace's (its kernels and the host's gaps between them).
    assert_eq!(num(&one, "compute_ms"), num(&p5, "compute_ms"));
    assert!((num(&one, "compute_ms") - 4.21).abs() < 1e-9, "{}", num(&one, "compute_ms"));
    // The collectives: 64 MiB and 16 MiB, re-timed; across 16 nodes they take longer and the
    // optimizer, which waited for the all-gather, waits longer.
    assert!(num(&p5, "comm_ms") > num(&one, "comm_ms"));
    assert!(num(&p5, "iteration_time_ms") > num(&one, "iteration_time_ms"));
    let table = collsim_ok(&["simulate", "--workload-trace", f, "--topology", "dgx-h100"]);
    assert!(table.contains("collectives                  2, 80 MiB in all"), "{table}");
    // A scenario naming the trace replays the same step.
    let scenario = super::scratch().join(format!("kineto-{}.toml", std::process::id()));
    naming_trace(&scenario, f);
    let named = json(&["simulate", scenario.to_str().unwrap(), "--format", "json"]);
    assert_eq!(num(&named, "iteration_time_ms"), num(&one, "iteration_time_ms"));
    std::fs::remove_file(&scenario).ok();
    // Collectives on sub-groups: a block of 4 consecutive ranks keeps its size on a larger
    // cluster (a tensor-parallel group: inside a node, so no slower on 16 nodes); every
    // second rank spans the trace's 8 and grows with the world (a data-parallel group: 64
    // ranks across the nodes on 16). A group whose ranks are not recorded evenly spaced, or
    // that does not tile the cluster's ranks, is refused.
    let text = std::fs::read_to_string(f).unwrap();
    let dir = std::env::temp_dir().join(format!("collsim-kineto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let grouped = |name: &str, group: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text.replace("\"Group size\": 8", group)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let comm = |trace: &str, nodes: &str| {
        let args = ["simulate", "--workload-trace", trace, "--topology", "aws-p5", "--nodes"];
        num(&json(&[&args[..], &[nodes, "--format", "json"]].concat()), "comm_ms")
    };
    let block = grouped("block.json", "\"Group size\": 4, \"Global rank stride\": 1");
    assert!((comm(&block, "16") / comm(&block, "1") - 1.0).abs() < 1e-9);
    let strided = grouped("strided.json", "\"Group size\": 4, \"Global rank stride\": 2");
    assert!(comm(&strided, "16") > 1.5 * comm(&strided, "1"));
    let sub = grouped("sub.json", "\"Group size\": 4");
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", &sub, "--topology", "dgx-h100"],
        &["--workload-trace", "a group of 4 ranks that are not evenly spaced"],
    );
    let three = grouped("three.json", "\"Group size\": 3, \"Global rank stride\": 1");
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", &three, "--topology", "dgx-h100"],
        &["3 ranks, 1 apart, do not tile the 8 ranks"],
    );
    let bare = dir.join("bare.json");
    std::fs::write(&bare, text.replace("\"External id\": 99\n", "\"External id\": 98\n")).unwrap();
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", bare.to_str().unwrap(), "--topology", "dgx-h100"],
        &["--workload-trace", "without its collective's size"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_nsight_systems_export_replays_on_another_cluster() {
    // tests/data/nsys-synthetic.json (JSON Lines, as `nsys export --type json` writes them;
    // written by hand after the export's schema, not captured): the step of
    // tests/data/kineto-synthetic.json as nsys would record it on rank 0 of 8, the all-reduce
    // sized by NCCL's own NVTX range, the all-gather by PyTorch's comm record in a range, and
    // a kernel of another rank's GPU in the same session.
    let f = "tests/data/nsys-synthetic.json";
    let replay = |trace: &str, cluster: &[&str]| {
        let args = ["simulate", "--workload-trace", trace, "--format", "json"];
        json(&[&args[..], cluster].concat())
    };
    let (one, p5) = (["--topology", "dgx-h100"], ["--topology", "aws-p5", "--nodes", "16"]);
    let n_one = replay(f, &one);
    let n_p5 = replay(f, &p5);
    // The compute is the trace's, the same on both clusters; the collectives (64 MiB and
    // 16 MiB) take longer across 16 nodes.
    assert!((num(&n_one, "compute_ms") - 4.21).abs() < 1e-9, "{}", num(&n_one, "compute_ms"));
    assert_eq!(num(&n_one, "compute_ms"), num(&n_p5, "compute_ms"));
    assert!(num(&n_p5, "comm_ms") > num(&n_one, "comm_ms"));
    assert!(num(&n_p5, "iteration_time_ms") > num(&n_one, "iteration_time_ms"));
    // The same step as the Kineto trace's, on either cluster.
    let kineto = "tests/data/kineto-synthetic.json";
    for (n, cluster) in [(&n_one, &one[..]), (&n_p5, &p5[..])] {
        let k = replay(kineto, cluster);
        for key in ["iteration_time_ms", "comm_ms", "exposed_comm_ms"] {
            assert_eq!(num(n, key), num(&k, key), "{key} on {cluster:?}");
        }
    }
    // The table says what was read; the warning, what was left out.
    let out = super::collsim(&["simulate", "--workload-trace", f, "--topology", "dgx-h100"]);
    let (table, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{err}");
    assert!(table.contains("(Nsight Systems trace tests/data/nsys-synthetic.json)"), "{table}");
    assert!(table.contains("collectives                  2, 80 MiB in all"), "{table}");
    assert!(
        err.contains("warning: --workload-trace tests/data/nsys-synthetic.json: GPU work of 2 devices or processes: device 0 of process 4242 (the lowest) replayed"),
        "{err}"
    );
    // A scenario naming the export replays the same step.
    let scenario = super::scratch().join(format!("nsys-{}.toml", std::process::id()));
    naming_trace(&scenario, f);
    let named = json(&["simulate", scenario.to_str().unwrap(), "--format", "json"]);
    assert_eq!(num(&named, "iteration_time_ms"), num(&n_one, "iteration_time_ms"));
    std::fs::remove_file(&scenario).ok();
    // Without NCCL's range, the all-reduce's kernel has no size: refused, naming its line.
    let text = std::fs::read_to_string(f).unwrap();
    let dir = super::scratch().join(format!("collsim-nsys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bare = dir.join("bare.json");
    let kept: Vec<&str> =
        text.lines().filter(|l| !l.contains("\"Text\":\"ncclAllReduce\"")).collect();
    assert_eq!(kept.len() + 1, text.lines().count());
    std::fs::write(&bare, kept.join("\n")).unwrap();
    let line = kept.iter().position(|l| l.contains("\"shortName\":\"11\"")).unwrap() + 1;
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", bare.to_str().unwrap(), "--topology", "dgx-h100"],
        &[
            &format!(
                "bare.json:{line}: ncclDevKernel_AllReduce_Sum_f32_RING_LL: an NCCL kernel whose collective's size is nowhere"
            ),
            "--trace=cuda,nvtx",
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_chakra_trace_written_by_chakras_own_tools_replays() {
    // tests/data/chakra/: ASTRA-sim's data-parallel text workload converted by MLCommons'
    // chakra_converter (4 layers; 2 ms of compute per layer and pass; a 32 MiB all-reduce
    // after each weight gradient, which the next layer's backward overlaps), and one node of
    // each kind from chakra_generator.
    let d = "tests/data/chakra";
    let replay = |f: &str| {
        json(&["simulate", "--workload-trace", f, "--topology", "dgx-h100", "--format", "json"])
    };
    let step = replay(&format!("{d}/data-parallel.0.et"));
    assert!((num(&step, "compute_ms") - 22.0).abs() < 1e-9, "{}", num(&step, "compute_ms"));
    // The last layer's all-reduce follows the last compute, so the step is the compute, that
    // all-reduce alone (as nccl-tests would time it), and what the three others took from the
    // compute they ran beside (their channels' share of the SMs, one CTA each).
    let sweep = json(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--collective",
        "all_reduce",
        "--min-bytes",
        "32M",
        "--max-bytes",
        "32M",
        "--format",
        "json",
    ]);
    let row = &sweep["rows"][0];
    let ar_ms = row["time_us"].as_f64().unwrap() / 1e3;
    let share = row["channels"].as_f64().unwrap() / 132.0;
    let want = 22.0 + ar_ms * (1.0 + 3.0 * share);
    let got = num(&step, "iteration_time_ms");
    assert!((got / want - 1.0).abs() < 1e-6, "{got} against {want}");
    assert!((num(&step, "comm_ms") / (4.0 * ar_ms) - 1.0).abs() < 1e-6);
    // Rank 1's file (other node ids), the same file gzipped, and a scenario naming it replay
    // the same step.
    let same = |v: &serde_json::Value| {
        ["iteration_time_ms", "comm_ms", "exposed_comm_ms"]
            .iter()
            .all(|k| num(v, k) == num(&step, k))
    };
    assert!(same(&replay(&format!("{d}/data-parallel.1.et"))));
    let dir = super::scratch().join(format!("chakra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let et = std::fs::read(format!("{d}/data-parallel.0.et")).unwrap();
    // Gzipped in two members, as `cat a.gz b.gz` or pigz writes it: both are read.
    let gz = dir.join("data-parallel.0.et.gz");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&gz).unwrap();
        for part in et.chunks(et.len() / 2 + 1) {
            let mut w = flate2::write::GzEncoder::new(&mut file, flate2::Compression::default());
            w.write_all(part).unwrap();
            w.finish().unwrap();
        }
    }
    assert!(same(&replay(gz.to_str().unwrap())));
    let scenario = dir.join("replay.toml");
    naming_trace(&scenario, &format!("{d}/data-parallel.0.et"));
    assert!(same(&json(&["simulate", scenario.to_str().unwrap(), "--format", "json"])));
    // Every collective Chakra names that collsim times, at the generator's 65,536 bytes (a
    // barrier: one float; an all-gather: each rank's part, of the 2 ranks whose files are
    // there).
    for (f, bytes) in [
        ("ALL_REDUCE", "64 KiB"),
        ("ALL_GATHER", "128 KiB"),
        ("REDUCE_SCATTER", "64 KiB"),
        ("ALL_TO_ALL", "64 KiB"),
        ("BROADCAST", "64 KiB"),
        ("BARRIER", "4 B"),
    ] {
        let path = format!("{d}/{f}.0.et");
        let t = collsim_ok(&["simulate", "--workload-trace", &path, "--topology", "dgx-h100"]);
        assert!(t.contains(&format!("collectives                  1, {bytes} in all")), "{f}: {t}");
    }
    let two = |f: &str| num(&replay(&format!("{d}/{f}.0.et")), "iteration_time_ms");
    assert!((two("two_comp_nodes_dependent") - 0.010).abs() < 1e-9);
    assert!((two("one_comp_node") - 0.005).abs() < 1e-9);
    // What it cannot replay is refused, naming the node; so is a file that is not a trace.
    for (f, want) in [
        ("one_comm_send_node", "node 0 (id 28, \"COMM_SEND_NODE\"): a point-to-point node"),
        ("one_remote_mem_load_node", "a remote memory node"),
        ("one_metadata_node_all_types", "nothing to replay"),
    ] {
        let path = format!("{d}/{f}.0.et");
        super::cli_errors::fails_with(
            &["simulate", "--workload-trace", &path, "--topology", "dgx-h100"],
            &["--workload-trace", &path, want],
        );
    }
    // A replayed group that does not tile the scenario's ranks is refused on its line.
    let calls = dir.join("three.json");
    std::fs::write(
        &calls,
        r#"{"collsim_calls": 1, "calls": [{"nccl": [{"collective": "all_reduce", "bytes": 1024, "dtype": "float", "name": "tp", "group": {"size": 3, "stride": 1}}]}]}"#,
    )
    .unwrap();
    let bad = dir.join("three.toml");
    std::fs::write(
        &bad,
        "[cluster]\ntopology = \"dgx-h100\"\n\n[workload]\nkind = \"trace\"\ncalls = \"three.json\"\n",
    )
    .unwrap();
    super::cli_errors::fails_with(
        &["simulate", bad.to_str().unwrap()],
        &["three.toml:6:9: workload.calls: calls[0].nccl[0].group: 3 ranks", "(collective \"tp\")"],
    );
    let empty = dir.join("empty.toml");
    std::fs::write(
        &empty,
        "[cluster]\ntopology = \"dgx-h100\"\n[workload]\nkind = \"trace\"\ncalls = \"\"\n",
    )
    .unwrap();
    super::cli_errors::fails_with(
        &["simulate", empty.to_str().unwrap()],
        &["empty.toml:5:9: workload.calls: an empty path"],
    );
    let cut = dir.join("cut.et");
    std::fs::write(&cut, &et[..et.len() - 20]).unwrap();
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", cut.to_str().unwrap(), "--topology", "dgx-h100"],
        &["node 14: does not decode", "cut short"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The median step time `calibration/data/2026-11-26-h200-kineto/run2-steps.csv` measured
/// (CUDA events, no profiler) for a run.
fn measured_step_ms(run: &str) -> f64 {
    let text =
        std::fs::read_to_string("calibration/data/2026-11-26-h200-kineto/run2-steps.csv").unwrap();
    let row = text.lines().find(|l| l.split(',').next() == Some(run)).unwrap();
    row.split(',').nth(8).unwrap().parse().unwrap()
}

#[test]
fn a_kineto_trace_captured_on_a_gpu_replays_its_step_and_at_scale() {
    // PyTorch 2.11 profiler traces of one DDP step on one H200 (an NCCL group of one rank:
    // the all-reduces leave no GPU work, their sizes are on the record_param_comms ops),
    // calibration/data/2026-11-26-h200-kineto/. The 24-layer, 2,048-wide GPT's step is
    // GPU-bound: replayed on one GPU it comes within 2 % of the step measured without the
    // profiler (157.1 ms).
    let d = "calibration/data/2026-11-26-h200-kineto";
    let big = format!("{d}/run2-kineto-ddp-h2048.json.gz");
    let args = |topo: &[&'static str]| {
        let mut a = vec!["simulate", "--workload-trace", big.as_str(), "--format", "json"];
        a.extend_from_slice(topo);
        a
    };
    let one = json(&args(&["--topology", "dgx-h100", "--gpus-per-node", "1"]));
    let measured = measured_step_ms("ddp-h2048");
    let err = num(&one, "iteration_time_ms") / measured - 1.0;
    assert!(err.abs() < 0.02, "{} against {measured} ms", num(&one, "iteration_time_ms"));
    // Its collectives are DDP's 74 buckets of the model's fp32 gradients.
    let (h, layers, vocab, seq) = (2048u64, 24, 50_304, 1024);
    let params = layers * (12 * h * h + 13 * h) + 2 * vocab * h + seq * h + 2 * h;
    let table = collsim_ok(&["simulate", "--workload-trace", &big, "--topology", "dgx-h100"]);
    let kib = params * 4 / 1024;
    assert!(
        table.contains(&format!("collectives                  74, 5.28 GiB ({kib} KiB) in all")),
        "{table}"
    );
    // On 16 nodes of p5 the all-reduces are timed over 128 ranks: longer, some of it exposed.
    let p5 = json(&args(&["--topology", "aws-p5", "--nodes", "16"]));
    assert!(num(&p5, "comm_ms") > 10.0 * num(&one, "comm_ms"));
    assert!(num(&p5, "iteration_time_ms") > 1.05 * num(&one, "iteration_time_ms"));
    assert_eq!(p5["breakdown"]["measured_ms"], one["breakdown"]["measured_ms"]);
    // The small GPT's step is bound by the host, whose time the profiler inflates: the step
    // measured without it lies between the trace's GPU work and the replay.
    let small = format!("{d}/run2-kineto-ddp-light.json.gz");
    let r = json(&[
        "simulate",
        "--workload-trace",
        &small,
        "--topology",
        "dgx-h100",
        "--gpus-per-node",
        "1",
        "--format",
        "json",
    ]);
    let m = measured_step_ms("ddp-light");
    assert!(r["breakdown"]["measured_ms"].as_f64().unwrap() < m);
    assert!(m < num(&r, "iteration_time_ms"));
    // One GPU under FSDP2 issues no collectives: the replay says so.
    let out = super::collsim(&[
        "simulate",
        "--workload-trace",
        &format!("{d}/run1-kineto-fsdp.json.gz"),
        "--topology",
        "dgx-h100",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no collectives in the trace"));
    // A file that starts as gzip but is not is refused, named.
    let bad = super::scratch().join(format!("collsim-bad-gz-{}.json.gz", std::process::id()));
    std::fs::write(&bad, [0x1f, 0x8b, 8, 0, 1, 2, 3]).unwrap();
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", bad.to_str().unwrap(), "--topology", "dgx-h100"],
        &["collsim-bad-gz", "gzip"],
    );
    std::fs::remove_file(&bad).ok();
}

#[test]
fn lists_of_calls_refuse_what_they_cannot_replay() {
    let dir = std::env::temp_dir().join(format!("collsim-calls-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = std::fs::read_to_string("tests/data/kineto-synthetic.json").unwrap();
    // An element count whose bytes wrap a u64, or pass 1 TiB, is refused, not timed as 0 or 1 B.
    let wrap = dir.join("wrap.json");
    std::fs::write(&wrap, trace.replace("16777216", "4611686018427387904")).unwrap();
    super::cli_errors::fails_with(
        &["simulate", "--workload-trace", wrap.to_str().unwrap(), "--topology", "dgx-h100"],
        &["traceEvents[7]", "In msg nelems", "more than any GPU holds"],
    );
    // A step of nothing, and keys a replay would ignore, are refused on their line.
    std::fs::write(dir.join("empty.json"), r#"{"collsim_calls": 1, "calls": [{"drain": true}]}"#)
        .unwrap();
    let scenario = |extra: &str| {
        let s = dir.join("s.toml");
        std::fs::write(
            &s,
            format!("[cluster]\ntopology = \"dgx-h100\"\n[workload]\nkind = \"trace\"\ncalls = \"empty.json\"\n{extra}"),
        )
        .unwrap();
        s
    };
    let s = scenario("");
    super::cli_errors::fails_with(
        &["simulate", s.to_str().unwrap()],
        &["workload.calls", "nothing to replay"],
    );
    let s = scenario("rank_skew_cv = 0.05\n");
    super::cli_errors::fails_with(
        &["simulate", s.to_str().unwrap()],
        &["s.toml:6", "workload.rank_skew_cv", "not for kind = \"trace\""],
    );
    // Export: a straggler's step goes out at its pace (the list holds the slowest rank's
    // compute); what a list of calls cannot hold is refused before anything is printed.
    collsim_ok(&[
        "simulate",
        "scenarios/resnet50-straggler-dgx-a100-8node.toml",
        "--export-calls",
        dir.join("x.json").to_str().unwrap(),
    ]);
    assert!(dir.join("x.json").exists());
    let y = dir.join("y.json");
    let out = super::collsim(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--export-calls",
        y.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--export-calls") && !y.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn hybrid_shard_gathers_over_nvlink_and_reduces_across_nodes() {
    // Llama-7B on 16 aws-p5: HYBRID_SHARD's all-gathers run on one node's 8 GPUs (NVLink), so
    // each is shorter than FULL_SHARD's over 128 ranks (0.95 against 1.19 ms; timed on the
    // world's communicator, as a wrapper once did, they would come out the same), and its
    // replicas' all-reduces cross the nodes.
    let text = std::fs::read_to_string("scenarios/llama7b-fsdp-p5-16node.toml").unwrap();
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .unwrap();
    let run = |strategy: &str| {
        let t = text.replace("\"FULL_SHARD\"", &format!("\"{strategy}\""));
        let s = collsim::config::parse_scenario("fsdp.toml", &t).unwrap();
        collsim::simulate_ddp(&s, &params, collsim::collective::Mode::Auto).unwrap().0
    };
    let mean = |r: &collsim::workload::ddp::StepResult, name: &str| {
        let d: Vec<f64> = r
            .timeline
            .iter()
            .filter(|x| x.lane == "nccl" && x.name.starts_with(name))
            .map(|x| x.end_ms - x.start_ms)
            .collect();
        d.iter().sum::<f64>() / d.len().max(1) as f64
    };
    let (full, hybrid) = (run("FULL_SHARD"), run("HYBRID_SHARD"));
    assert!(
        mean(&hybrid, "all_gather") < 0.9 * mean(&full, "all_gather"),
        "{} vs {}",
        mean(&hybrid, "all_gather"),
        mean(&full, "all_gather")
    );
    assert!(mean(&hybrid, "all_reduce (replicas)") > 0.0);
}

#[test]
fn a_zero_step_keeps_parameters_whole_and_gathers_them_after_the_optimizer() {
    // DeepSpeed ZeRO-2, Llama-7B in bf16 on 128 H100s: whole bf16 parameters on every GPU,
    // gradients and Adam state (with fp32 master weights) over 1/128.
    let s = "scenarios/llama7b-zero2-p5-16node.toml";
    let v = json(&["simulate", s, "--format", "json"]);
    let n = 6_738_415_616.0;
    let mem = &v["memory"];
    assert_eq!(num(mem, "params"), 2.0 * n);
    assert!((num(mem, "grads") - 2.0 * n / 128.0).abs() < 1.0);
    assert!((num(mem, "master") + num(mem, "optimizer") - 12.0 * n / 128.0).abs() < 1.0);
    // The gradients reduce in buckets of at most 5e8 elements, all of them once.
    let buckets = v["buckets"].as_array().unwrap();
    let wire: f64 = buckets.iter().map(|b| num(b, "wire_bytes")).sum();
    assert!(wire >= 2.0 * n && wire < 2.0 * n + 2.0 * 128.0 * buckets.len() as f64, "{wire}");
    assert!(buckets.iter().all(|b| num(b, "wire_bytes") <= 2.0 * (5e8 + 128.0) * 1.5));
    let table = collsim_ok(&["simulate", s]);
    assert!(table.starts_with("DeepSpeed ZeRO step: llama-7b") && table.contains("stage 2"));
    // Without overlap_comm the compute stream waits for every reduction.
    let sweep = json(&[
        "simulate",
        s,
        "--format",
        "json",
        "--sweep",
        "workload.zero.overlap_comm=false,true",
    ]);
    let exposed: Vec<f64> = sweep["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(&p["result"], "exposed_comm_ms"))
        .collect();
    assert!(exposed[0] > exposed[1], "{exposed:?}");
    // Bad settings, each on its line.
    let text = std::fs::read_to_string(s).unwrap();
    for (bad, want) in [
        (text.replace("stage = 2", "stage = 4"), "workload.zero.stage: 1, 2 or 3 (got 4)"),
        (
            text.replace("nodes = 16", "nodes = 1\ngpus_per_node = 1"),
            "workload.kind: \"zero\" on one rank",
        ),
        (
            text.replace("kind = \"zero\"", "kind = \"ddp\""),
            "workload.zero: only for kind = \"zero\"",
        ),
        (
            text.replace(
                "[workload.zero]",
                "[workload.fsdp]\nsharding_strategy = \"FULL_SHARD\"\n[workload.zero]",
            ),
            "workload.fsdp: only for kind = \"fsdp\"",
        ),
        (
            text.replace("grad_accumulation", "x")
                .replace("micro_batch = 2", "micro_batch = 2\ngrad_accumulation = 5000"),
            "workload.grad_accumulation: must be at most 4096",
        ),
    ] {
        let e = collsim::config::parse_scenario("z.toml", &bad).unwrap_err().to_string();
        assert!(e.starts_with("z.toml:") && e.contains(want), "{e}");
    }
}

#[test]
fn forward_prefetch_overlaps_the_all_gathers_only_where_the_host_bounds_the_step() {
    // PyTorch's docs: forward_prefetch "is only useful for CPU-bound workloads". While the host
    // runs ahead of the GPU, limit_all_gathers decides when a forward all-gather is issued (two
    // units ahead), prefetch or not; where launching kernels bounds the step, the host reaches
    // a unit's pre-forward hook only as the previous unit's forward ends, and only a prefetch
    // issues its all-gather a unit earlier.
    let step = |text: &str, sweep: &str| {
        let f = super::scratch().join(format!("fp-{}-{}.toml", std::process::id(), text.len()));
        std::fs::write(&f, text).unwrap();
        let v = json(&["simulate", f.to_str().unwrap(), "--format", "json", "--sweep", sweep]);
        std::fs::remove_file(&f).ok();
        v["points"].as_array().unwrap().iter().map(|p| p["result"].clone()).collect::<Vec<_>>()
    };
    let gpu_bound = std::fs::read_to_string("scenarios/llama7b-fsdp-p5-16node.toml").unwrap();
    let r = step(&gpu_bound, "workload.fsdp.forward_prefetch=false,true");
    let (off, on) = (num(&r[0], "iteration_time_ms"), num(&r[1], "iteration_time_ms"));
    assert!((on / off - 1.0).abs() < 1e-4, "GPU-bound: {off} vs {on} ms");
    // GPT-2 XL, one sequence a GPU, 60 µs of host a kernel: launches bound the step.
    let host_bound = "[cluster]\ntopology = \"aws-p5\"\nnodes = 2\n[workload]\nkind = \"fsdp\"\nmodel = \"gpt2-xl\"\nmicro_batch = 1\nprecision = \"bf16\"\nefficiency = 0.5\nlaunch_us = 60\noptimizer = \"adam\"\n[workload.fsdp]\nparam_dtype = \"bfloat16\"\n";
    let r = step(host_bound, "workload.fsdp.forward_prefetch=false,true");
    let launch = num(&r[0]["breakdown"], "launch_ms");
    assert!(launch > 0.5 * num(&r[0], "iteration_time_ms"), "not host-bound: {launch} ms");
    let (off, on) = (num(&r[0], "iteration_time_ms"), num(&r[1], "iteration_time_ms"));
    let (x_off, x_on) = (num(&r[0], "exposed_comm_ms"), num(&r[1], "exposed_comm_ms"));
    assert!(
        on < 0.98 * off && x_on < x_off,
        "host-bound: {off} vs {on} ms, exposed {x_off} vs {x_on}"
    );
    // Without the limit the host gathers as far ahead as it gets: at most every unit at once
    // (GPT-2 XL's 1.56 B bf16 parameters, padded: 3.05 GiB), never slower.
    let r = step(&gpu_bound, "workload.fsdp.limit_all_gathers=true,false");
    assert!(num(&r[1], "iteration_time_ms") <= num(&r[0], "iteration_time_ms") + 1e-9);
    let limited = |on: bool| {
        let text = format!("{host_bound}limit_all_gathers = {on}\n");
        let f = super::scratch().join(format!("fl-{}-{on}.toml", std::process::id()));
        std::fs::write(&f, text).unwrap();
        let v = json(&["simulate", f.to_str().unwrap(), "--format", "json"]);
        std::fs::remove_file(&f).ok();
        num(&v["memory"], "unsharded") / (1u64 << 30) as f64
    };
    let (on, off) = (limited(true), limited(false));
    assert!(on < 1.0 && (off - 3.05).abs() < 0.05, "{on} / {off} GiB");
}

#[test]
fn a_sweep_gives_each_points_memory_as_a_single_run_does() {
    // Sharding strategies trade time for memory: a sweep over them must show both.
    let s = "scenarios/llama7b-fsdp-p5-16node.toml";
    let sweep = "workload.fsdp.sharding_strategy=FULL_SHARD,SHARD_GRAD_OP";
    let v = json(&["simulate", s, "--format", "json", "--sweep", sweep]);
    let mem: Vec<f64> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(&p["result"]["memory"], "total"))
        .collect();
    let single = json(&["simulate", s, "--format", "json"]);
    assert_eq!(mem[0], num(&single["memory"], "total"));
    // SHARD_GRAD_OP keeps every unit's gathered parameters from forward to backward.
    assert!(mem[1] > mem[0] + 10.0 * (1u64 << 30) as f64, "{mem:?}");
    // `fsdp.X` is short for `workload.fsdp.X`, as `ddp.X` is.
    let short = "fsdp.sharding_strategy=FULL_SHARD,SHARD_GRAD_OP";
    let csv = collsim_ok(&["simulate", s, "--format", "csv", "--sweep", short]);
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = rows[0].iter().position(|c| *c == "memory_bytes").expect("a memory column");
    let got: Vec<f64> = rows[1..].iter().map(|r| r[col].parse().unwrap()).collect();
    assert_eq!(got, mem);
    // A replayed trace says nothing of what the step holds: no memory, rather than a guess.
    let trace = ["simulate", "--workload-trace", "tests/data/kineto-synthetic.json"];
    let replay = json(&[&trace[..], &["--topology", "dgx-h100", "--format", "json"]].concat());
    assert!(replay["memory"].is_null(), "{}", replay["memory"]);
    let csv = collsim_ok(&[&trace[..], &["--topology", "dgx-h100", "--format", "csv"]].concat());
    assert!(csv.lines().nth(1).is_some_and(|l| l.ends_with(',')), "{csv}");
}

#[test]
fn hybrid_shards_all_reduce_runs_on_a_stream_of_its_own() {
    // FSDP runs HYBRID_SHARD's all-reduce across the replicas on its own stream and
    // communicator: after the unit's reduce-scatter, beside the shard group's next all-gather
    // and reduce-scatter. On 4 aws-p4d nodes (4 x 100 Gb/s EFA for 8 GPUs) the all-reduces
    // are long enough to matter: the same list of calls with every launch on one stream takes
    // longer.
    let dir = super::scratch().join(format!("collsim-hybrid2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fsdp = std::fs::read_to_string("scenarios/llama7b-fsdp-p5-16node.toml").unwrap();
    let s = dir.join("hybrid.toml");
    let text = fsdp
        .replace("\"FULL_SHARD\"", "\"HYBRID_SHARD\"")
        .replace("topology = \"aws-p5\"", "topology = \"aws-p4d\"")
        .replace("nodes = 16", "nodes = 4");
    std::fs::write(&s, text).unwrap();
    let calls = dir.join("calls.json");
    let trace = dir.join("trace.json");
    let (s, calls_s, trace_s) =
        (s.to_str().unwrap(), calls.to_str().unwrap(), trace.to_str().unwrap());
    let plot = dir.join("plot.svg");
    let plot_s = plot.to_str().unwrap();
    let args = ["simulate", s, "--format", "json", "--export-calls", calls_s, "--trace", trace_s];
    let step = json(&[&args[..], &["--plot", plot_s]].concat());
    let t = std::fs::read_to_string(&trace).unwrap();
    assert!(t.contains("NCCL stream 2"), "no second NCCL stream in the trace");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains(">NCCL stream 2</text>"), "no second NCCL lane in the plot");
    let text = std::fs::read_to_string(&calls).unwrap();
    let mut f: serde_json::Value = serde_json::from_str(&text).unwrap();
    let second = f["calls"].as_array().unwrap().iter().filter(|c| c["stream"] == 1).count();
    assert_eq!(second, step["buckets"].as_array().unwrap().len(), "one all-reduce a unit");
    let replay = |name: &str, body: &str| {
        std::fs::write(dir.join(format!("{name}.json")), body).unwrap();
        let r = dir.join(format!("{name}.toml"));
        let toml = format!(
            "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n[workload]\nkind = \"trace\"\ncalls = \"{name}.json\"\n"
        );
        std::fs::write(&r, toml).unwrap();
        num(&json(&["simulate", r.to_str().unwrap(), "--format", "json"]), "iteration_time_ms")
    };
    let own = replay("own", &text);
    let want = num(&step, "iteration_time_ms");
    assert!((own / want - 1.0).abs() < 0.01, "{own} vs {want}");
    for c in f["calls"].as_array_mut().unwrap() {
        if let Some(o) = c.as_object_mut() {
            o.remove("stream");
        }
    }
    let one = replay("one", &f.to_string());
    assert!(one > own + 5.0, "one stream {one} ms, two {own} ms");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_replayed_trace_leaves_out_what_it_does_not_say() {
    // It printed 1880 samples/s (a sample a rank assumed) and a GEMM rate of 1 TFLOP/s.
    let base = [
        "simulate",
        "--workload-trace",
        "tests/data/kineto-synthetic.json",
        "--topology",
        "dgx-h100",
    ];
    let json: serde_json::Value =
        serde_json::from_str(&collsim_ok(&[&base[..], &["--format", "json"]].concat())).unwrap();
    for k in ["samples_per_s", "gemm_tflops", "forward_ms", "backward_ms"] {
        assert!(json[k].is_null(), "{k}: {}", json[k]);
    }
    assert!(json["iteration_time_ms"].as_f64().unwrap() > 0.0);
    let csv = collsim_ok(&[&base[..], &["--format", "csv"]].concat());
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    for k in ["samples_per_s", "gemm_tflops", "forward_ms", "backward_ms"] {
        let i = head.iter().position(|h| *h == k).unwrap();
        assert_eq!(row[i], "", "{k}");
    }
}

#[test]
fn the_wait_for_the_slowest_rank_is_what_a_nominal_step_would_not_pay() {
    // The step runs once at the slowest rank's pace and is restated for a typical rank; its
    // "every rank at nominal speed" must be the step with no spread. A loader-bound ResNet-50
    // step waits for its batches whatever its ranks' speeds: no wait, the same one-GPU figure.
    // Each scenario with no spread and with the default GPU spread, the host's left out.
    let spread_or_not = |scenario: &str, more: &[&str]| {
        let mut args = vec!["simulate", scenario];
        args.extend_from_slice(more);
        args.extend(["--sweep", "workload.rank_skew_cv=0,0.0143"]);
        args.extend(["--sweep", "workload.rank_skew_host_cv=0", "--format", "json"]);
        json(&args)
    };
    let s = "scenarios/resnet50-dgx-a100-1node.toml";
    for per_node in ["16000", "1600"] {
        let input = format!("workload.input.node_samples_per_s={per_node}");
        let v = spread_or_not(s, &["--sweep", &input]);
        let (none, spread) = (&v["points"][0]["result"], &v["points"][1]["result"]);
        assert!(none["skew"].is_null());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        for key in ["iteration_time_ms", "single_gpu_ms", "scaling_efficiency"] {
            assert!(close(num(none, key), num(spread, key)), "{per_node}: {key}");
        }
        assert_eq!(num(&spread["skew"], "wait_ms"), 0.0, "{per_node}");
        let stall = |r: &serde_json::Value| num(&r["breakdown"], "input_stall_ms");
        assert!(close(stall(none), stall(spread)), "{per_node}");
    }
    // A 3-D step: the slower stages' compute stretches the bubble too, which goes into the
    // wait; the typical rank's step within 0.2 % of the step without a spread.
    let v = spread_or_not("scenarios/gpt-39b-3d-dgx-a100-32node.toml", &[]);
    let (none, spread) = (&v["points"][0]["result"], &v["points"][1]["result"]);
    let nominal = num(none, "iteration_time_ms");
    let typical = num(&spread["skew"], "typical_rank_ms");
    assert!((typical / nominal - 1.0).abs() < 0.002, "{typical} vs {nominal}");
    let parts: f64 =
        spread["breakdown"].as_object().unwrap().values().map(|x| x.as_f64().unwrap()).sum();
    assert!((parts / num(spread, "iteration_time_ms") - 1.0).abs() < 1e-9);
    assert!(spread["buckets"].as_array().unwrap().iter().all(|b| b["skew_wait_ms"].is_null()));
}

#[test]
fn a_step_names_the_tier_each_process_groups_traffic_crosses() {
    // The RoCE fabric of scenarios/gpt2-xl-256gpu-roce-ecmp.toml: leaves of 4 HGX H100 nodes
    // under a spine, static ECMP. One node talks over NVLink, four under one leaf, eight
    // through the spine; the sweep says which tier each point's exposed communication crossed.
    let scenario = "scenarios/gpt2-xl-256gpu-roce-ecmp.toml";
    let sweep = ["simulate", scenario, "--sweep", "cluster.nodes=1,4,8"];
    let v = json(&[&sweep[..], &["--format", "json"]].concat());
    let tiers: Vec<(f64, String)> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let g = &p["result"]["comm_groups"][0];
            assert_eq!(g["group"], "all ranks");
            (num(g, "nodes"), g["tier"].as_str().unwrap().to_string())
        })
        .collect();
    let want = [(1.0, "nvlink"), (4.0, "net, one leaf"), (8.0, "net, spine, ECMP")];
    assert_eq!(tiers, want.map(|(n, t)| (n, t.to_string())));
    let table = collsim_ok(&sweep);
    assert!(
        table.contains("exposed communication +")
            && table.contains("[all ranks: net, spine, ECMP]"),
        "{table}"
    );
    // A 3-D layout lists each kind of group: tensor-parallel inside a node, data-parallel and
    // pipeline across nodes (the preset's one non-blocking switch: "net").
    let v = json(&["simulate", "scenarios/gpt-39b-3d-dgx-a100-32node.toml", "--format", "json"]);
    let groups: Vec<(String, String)> = v["comm_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap().into(), g["tier"].as_str().unwrap().into()))
        .collect();
    for (g, t) in [("tensor-parallel", "nvlink"), ("data-parallel", "net"), ("pipeline", "net")] {
        assert!(groups.contains(&(g.into(), t.into())), "{g}: {groups:?}");
    }
    // Nodes in two zones cross the zone tier.
    let dir = super::scratch().join(format!("tiers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("zones.toml");
    std::fs::write(
        &path,
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 4\n[workload]\nkind = \"ddp\"\n\
         model = \"gpt2-xl\"\nmicro_batch = 4\nprecision = \"bf16\"\n\
         [placement]\ntier = \"zone\"\n[[placement.group]]\nname = \"a\"\nnodes = [0, 1]\n\
         [[placement.group]]\nname = \"b\"\nnodes = [2, 3]\n",
    )
    .unwrap();
    let table = collsim_ok(&["simulate", path.to_str().unwrap()]);
    assert!(table.contains("all ranks 32 ranks on 4 nodes (net, cross-zone)"), "{table}");
    // A rail fabric: two nodes share each rail's leaf, but a ring leaves a node by one NIC and
    // enters the next by another, and different rails meet only at the spine.
    let h100 = std::fs::read_to_string("topologies/dgx-h100.toml").unwrap();
    let rail = h100.replace("kind = \"non_blocking\"", "kind = \"rail\"\nradix = 16");
    std::fs::write(dir.join("rail.toml"), rail).unwrap();
    // A fat tree of 4 nodes a leaf: the pipeline's stage pairs 3-4 and 7-0 of 8 one-node
    // stages cross the spine, the others stay under a leaf; the pipeline is as high as its
    // highest pair.
    let tree =
        h100.replace("kind = \"non_blocking\"", "kind = \"fat_tree\"\ntiers = 2\nradix = 64");
    std::fs::write(dir.join("tree.toml"), tree).unwrap();
    let step = |topology: &str, nodes: usize, parallel: &str| {
        let path = dir.join(format!("{topology}-{nodes}.toml"));
        std::fs::write(
            &path,
            format!(
                "[cluster]\ntopology = \"{topology}.toml\"\nnodes = {nodes}\n[workload]\n\
                 kind = \"ddp\"\nmodel = \"llama-7b\"\nmicro_batch = 1\n\
                 precision = \"bf16\"\n{parallel}"
            ),
        )
        .unwrap();
        let v = json(&["simulate", path.to_str().unwrap(), "--format", "json"]);
        let groups = v["comm_groups"].as_array().unwrap().clone();
        groups
            .iter()
            .map(|g| {
                (g["group"].as_str().unwrap().to_string(), g["tier"].as_str().unwrap().to_string())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(step("rail", 2, ""), [("all ranks".into(), "net, spine".into())]);
    let layout = "grad_accumulation = 8\n[workload.parallel]\ntp = 8\npp = 8\n";
    let groups = step("tree", 8, layout);
    assert!(groups.contains(&("pipeline".into(), "net, spine".into())), "{groups:?}");
    assert!(!groups.iter().any(|g| g.0 == "embedding"), "llama ties no embedding: {groups:?}");
}
