//! Several jobs on one cluster, and background traffic: what they do to each other.

use super::cli_errors::fails_with;
use super::{collsim_ok, scratch};

const SPINE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/user/dgx-h100-spine-2to1.toml");

/// Writes a scenario into the scratch directory and returns its path: a directory of its own
/// for each call (tests run in parallel, and two may write the same tag).
fn write(tag: &str, text: &str) -> String {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch().join(format!("collsim-jobs-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&collsim_ok(args)).unwrap()
}

/// Two 8-node ring AllReduce jobs at 1 GiB on the 2:1 spine, both placed `policy`; returns
/// each job's speed beside the other relative to alone.
fn two_jobs(policy: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/two-jobs-shared-spine.toml"
    ))
    .unwrap()
    .replace("../topologies/user/dgx-h100-spine-2to1.toml", SPINE)
    .replace("placement = \"spread\"", &format!("placement = \"{policy}\""))
    .replace("min_bytes = \"1 MiB\"", "min_bytes = \"1 GiB\"");
    let path = write(policy, &text);
    let v = json(&["simulate", &path, "--format", "json"]);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    // Alone, the two jobs are the same job on other nodes.
    assert_eq!(jobs[0]["alone_rows"], jobs[1]["alone_rows"]);
    jobs.iter().map(|j| j["relative_speed"][0].as_f64().unwrap()).collect()
}

#[test]
fn two_spread_ring_jobs_halve_each_other_on_a_2to1_spine_compact_ones_do_not_meet() {
    // Spread, every ring hop leaves its rack: alone, 4 nodes per rack fill its uplink; beside
    // the other job, 8 do.
    for s in two_jobs("spread") {
        assert!((s - 0.50).abs() <= 0.05, "spread: {s}");
    }
    // Compact, each job sits in its own rack and no flow of one crosses a link of the other.
    for s in two_jobs("compact") {
        assert!((s - 1.00).abs() <= 0.02, "compact: {s}");
    }
}

#[test]
fn the_shared_spine_scenario_prints_both_jobs_and_their_speed() {
    let out = collsim_ok(&["simulate", "scenarios/two-jobs-shared-spine.toml"]);
    assert!(
        out.contains("== job \"a\": 8 node(s) (spread: 0 8 1 9 2 10 3 11), 64 ranks =="),
        "{out}"
    );
    assert!(out.contains("== job \"b\": 8 node(s) (spread: 4 12 5 13 6 14 7 15), 64 ranks =="));
    let last = out.lines().last().unwrap();
    assert!(last.trim_start().starts_with("1 GiB"), "{last}");
    let speeds: Vec<f64> = last.split_whitespace().skip(2).map(|x| x.parse().unwrap()).collect();
    assert_eq!(speeds.len(), 2, "{last}");
    assert!(speeds.iter().all(|s| (s - 0.5).abs() <= 0.05), "{last}");
}

const ONE_JOB: &str = r#"
[cluster]
topology = "TOPO"
nodes = 16
[nccl]
NCCL_ALGO = "Ring"
[[job]]
name = "a"
nodes = 8
placement = "spread"
[job.workload]
collective = "all_reduce"
min_bytes = "1 MiB"
max_bytes = "1 GiB"
factor = 32
"#;

#[test]
fn an_idle_neighbour_changes_nothing() {
    let alone = ONE_JOB.replace("TOPO", SPINE);
    let with_idle = format!(
        "{alone}\n[[job]]\nname = \"reserved\"\nnodes = 8\nplacement = \"spread\"\n[job.workload]\nkind = \"idle\"\n"
    );
    let a = json(&["simulate", &write("alone", &alone), "--format", "json"]);
    let b = json(&["simulate", &write("idle", &with_idle), "--format", "json"]);
    let rows = |v: &serde_json::Value| serde_json::to_string(&v["jobs"][0]["rows"]).unwrap();
    assert_eq!(rows(&a), rows(&b));
    assert_eq!(b["jobs"][1]["idle"], true);
    // And the job beside nothing runs as fast as alone.
    assert_eq!(rows(&a), serde_json::to_string(&a["jobs"][0]["alone_rows"]).unwrap());
}

#[test]
fn background_traffic_slows_a_ddp_step_by_its_exposed_communication() {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/llama7b-dgx-h100-16node.toml"
    ))
    .unwrap();
    let busy = format!("{base}\n[[background]]\npattern = \"all_to_all\"\nload = 0.5\n");
    let a = json(&["simulate", &write("quiet", &base), "--format", "json"]);
    let b = json(&["simulate", &write("busy", &busy), "--format", "json"]);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let added = f(&b, "iteration_time_ms") - f(&a, "iteration_time_ms");
    let exposed = f(&b, "exposed_comm_ms") - f(&a, "exposed_comm_ms");
    assert!(added > 1.0, "only {added} ms slower");
    assert!(f(&b, "comm_ms") > f(&a, "comm_ms"));
    assert!((added - exposed).abs() <= 0.05 * added, "step +{added} ms, exposed +{exposed} ms");
}

#[test]
fn background_on_a_sweep_slows_bandwidth_bound_sizes() {
    let path = write(
        "sweep-bg",
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 4\n[workload]\ncollective = \"all_reduce\"\n\
         min_bytes = \"1 GiB\"\nmax_bytes = \"1 GiB\"\n[nccl]\nNCCL_ALGO = \"Ring\"\n\
         [[background]]\npattern = \"links\"\nclass = \"net\"\nload = 0.5\n",
    );
    let quiet = json(&["simulate", &path, "--format", "json", "--nccl", "NCCL_PROTO=Simple"]);
    let plain = path.replace("s.toml", "plain.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&plain, &text[..text.find("[[background]]").unwrap()]).unwrap();
    let alone = json(&["simulate", &plain, "--format", "json", "--nccl", "NCCL_PROTO=Simple"]);
    let bus = |v: &serde_json::Value| v["rows"][0]["busbw_gbyte_per_s"].as_f64().unwrap();
    // Each NIC link shares with a flow capped at half its capacity: the ring's NIC-bound hops
    // get the other half.
    let r = bus(&quiet) / bus(&alone);
    assert!((r - 0.5).abs() < 0.05, "{} vs {}", bus(&quiet), bus(&alone));
}

#[test]
fn jobs_run_the_same_whatever_the_thread_count() {
    let path = write("threads", &ONE_JOB.replace("TOPO", SPINE).replace("nodes = 8", "nodes = 4"));
    same_bytes_with_1_and_2_threads(&path);
}

/// Simulates `path` with 1 and 2 threads: the same JSON.
fn same_bytes_with_1_and_2_threads(path: &str) {
    let run = |threads: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
            .args(["simulate", path, "--format", "json"])
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success());
        out.stdout
    };
    assert_eq!(run("1"), run("2"));
}

/// A Llama-7B step's `[job.workload]`, for layouts to be added to.
const LLAMA: &str = "[job.workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nmicro_batch = 1\ngrad_accumulation = 8\nprecision = \"bf16\"\nmfu = 0.4\n";

#[test]
fn bad_jobs_and_background_are_one_line_errors() {
    let base = ONE_JOB.replace("TOPO", SPINE);
    let second = |extra: &str| format!("{base}\n[[job]]\n{extra}");
    let cases: Vec<(String, &[&str])> = vec![
        (
            second("name = \"a\"\nnodes = 2\n[job.workload]\nkind = \"idle\"\n"),
            &["job.name: duplicate job \"a\""],
        ),
        (
            second("name = \"b\"\nnodes = 9\n[job.workload]\nkind = \"idle\"\n"),
            &["job.nodes: 9 nodes asked, 8 of the cluster's 16 are free"],
        ),
        (
            second("name = \"b\"\nnodes = [0, 1]\n[job.workload]\nkind = \"idle\"\n"),
            &["job.nodes: node 0 already runs job \"a\""],
        ),
        (
            second("name = \"b\"\nnodes = [16]\n[job.workload]\nkind = \"idle\"\n"),
            &["job.nodes: node 16 does not exist"],
        ),
        (
            second(
                "name = \"b\"\nnodes = 2\nplacement = \"random\"\n[job.workload]\nkind = \"idle\"\n",
            ),
            &["job.placement: unknown placement \"random\""],
        ),
        (second("name = \"b\"\nnodes = 2\n"), &["job.workload: missing for job \"b\""]),
        (
            second("name = \" \"\nnodes = 2\n[job.workload]\nkind = \"idle\"\n"),
            &["job.name: give a name of one line"],
        ),
        (
            second(
                "name = \"b\"\nnodes = 2\n[job.workload]\nkind = \"idle\"\ncollective = \"all_reduce\"\n",
            ),
            &["job.workload.kind: an idle job runs nothing"],
        ),
        (
            second(
                "name = \"b\"\nnodes = 2\n[job.workload]\ncollective = \"all_reduce\"\nmin_bytes = \"8 MiB\"\nmax_bytes = \"1 MiB\"\n",
            ),
            &["job.workload.min_bytes: 8 MiB is larger than max_bytes 1 MiB"],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"links\"\nclass = \"net\"\nload = 1.0\n"),
            &["background.load: a links reservation must leave the link something"],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"all_to_all\"\nnodes = [3]\nload = 0.5\n"),
            &["background.pattern: all_to_all needs at least two nodes"],
        ),
        (
            format!(
                "{base}\n[workload]\ncollective = \"all_reduce\"\nmin_bytes = 8\nmax_bytes = 8\n"
            ),
            &["either one [workload]", "[[job]]"],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"storm\"\nload = 0.5\n"),
            &["background.pattern: unknown pattern \"storm\""],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"all_to_all\"\nload = 1.5\n"),
            &["background.load: must be a fraction in (0, 1]"],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"links\"\nload = 0.5\n"),
            &["background.class: missing for pattern \"links\""],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"incast\"\ntarget = 99\nload = 0.5\n"),
            &["background.target: node 99 does not exist"],
        ),
        (
            format!("{base}\n[[background]]\npattern = \"all_to_all\"\n"),
            &["background.load: missing"],
        ),
        // A job's layout must fit its own ranks (2 nodes of 8 GPUs here), as a one-workload
        // scenario's fits the cluster's.
        (
            second(&format!("name = \"b\"\nnodes = 2\n{LLAMA}[job.workload.parallel]\ntp = 32\n")),
            &["job.workload.parallel.tp: tp x pp = 32 does not divide the 16 ranks"],
        ),
        (
            second(&format!(
                "name = \"b\"\nnodes = 2\ngpus_per_node = 1\n{LLAMA}[job.workload.parallel]\ntp = 4\n"
            )),
            &["job.workload.parallel.tp: tp x pp = 4 does not divide the 2 ranks"],
        ),
        (
            second(&format!("name = \"b\"\nnodes = 2\n{LLAMA}[job.workload.parallel]\nep = 2\n")),
            &["job.workload.parallel.ep: ep = 2, but the model \"llama-7b\" has no experts"],
        ),
        (
            second(&format!(
                "name = \"b\"\nnodes = 1\ngpus_per_node = 1\n{}[job.workload.fsdp]\nsharding_strategy = \"HYBRID_SHARD\"\n",
                LLAMA.replace("\"ddp\"", "\"fsdp\"")
            )),
            &["job.workload.kind: \"fsdp\" on one rank"],
        ),
    ];
    for (i, (text, needles)) in cases.iter().enumerate() {
        let path = write(&format!("bad{i}"), text);
        let mut want = vec![path.as_str()];
        want.extend(needles.iter());
        fails_with(&["simulate", &path], &want);
    }
    // The cluster is set by the file when jobs place themselves on it.
    let path = write("flags", &base);
    super::cli_errors::misused_with(&["simulate", &path, "--nodes", "4"], &["--nodes", "[[job]]"]);
    super::cli_errors::misused_with(
        &["simulate", &path, "--format", "csv"],
        &["--format: several jobs print as table or json"],
    );
}

#[test]
fn jobs_print_as_json_with_a_ddp_job_and_inherit_the_clusters_gpus() {
    let text = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 4\ngpus_per_node = 4\n\
         [[job]]\nname = \"train\"\nnodes = 2\n[job.workload]\nkind = \"ddp\"\n\
         model = \"resnet50\"\nmicro_batch = 32\nprecision = \"bf16\"\nefficiency = 0.4\n\
         [[job]]\nname = \"bench\"\nnodes = 2\n[job.workload]\ncollective = \"all_reduce\"\n\
         min_bytes = \"256 MiB\"\nmax_bytes = \"256 MiB\"\n";
    let v = json(&["simulate", &write("ddp-json", text), "--format", "json"]);
    assert_eq!(v["scenario"]["jobs"][0]["workload"]["ddp"], "resnet50");
    assert!(v["jobs"][0]["step"]["iteration_time_ms"].as_f64().unwrap() > 0.0);
    assert!(v["jobs"][0]["relative_speed"][0].as_f64().unwrap() > 0.0);
    // Each job uses [cluster]'s 4 GPUs per node: 2 nodes x 4 ranks.
    assert_eq!(v["jobs"][1]["communicator"]["nranks"], 8);
}

#[test]
fn all_to_all_background_on_many_nodes_stays_cheap() {
    // 256 nodes of all-to-all background (64 destinations per NIC, 131k flows): the fill of
    // the tree's estimate shares what the load leaves instead of re-solving with it per edge.
    let text = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 256\n[workload]\n\
                collective = \"all_reduce\"\nmin_bytes = \"1 MiB\"\nmax_bytes = \"64 MiB\"\n\
                factor = 8\n[[background]]\npattern = \"all_to_all\"\nload = 0.5\n";
    let busy = json(&["simulate", &write("a2a-256", text), "--format", "json"]);
    let quiet_text = &text[..text.find("[[background]]").unwrap()];
    let quiet = json(&["simulate", &write("a2a-256-quiet", quiet_text), "--format", "json"]);
    let t = |v: &serde_json::Value, i: usize| v["rows"][i]["time_us"].as_f64().unwrap();
    for i in 0..3 {
        assert!(t(&busy, i) >= t(&quiet, i), "size {i}: {} < {}", t(&busy, i), t(&quiet, i));
    }
}

/// scenarios/two-ddp-jobs-shared-spine.toml placed `policy`, with `extra` arguments: each
/// job's JSON.
fn two_ddp_jobs(policy: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/two-ddp-jobs-shared-spine.toml"
    ))
    .unwrap()
    .replace("../topologies/user/dgx-h100-spine-2to1.toml", SPINE)
    .replace("placement = \"spread\"", &format!("placement = \"{policy}\""));
    let path = write(&format!("ddp-{policy}"), &text);
    let mut args = vec!["simulate", &path, "--format", "json"];
    args.extend_from_slice(extra);
    json(&args)["jobs"].as_array().unwrap().clone()
}

#[test]
fn ddp_jobs_post_their_buckets_into_one_network() {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    // Spread: every ring hop crosses the 2:1 spine, and where the two jobs' all-reduces overlap
    // they share it. The added step time is added communication: compute is the same.
    for j in two_ddp_jobs("spread", &[]) {
        let speed = j["relative_speed"][0].as_f64().unwrap();
        let (step, alone) = (&j["step"], &j["alone"]);
        // 0.96 on 32 CUDA channels per node, 0.97 on NCCL's 16 (8 rings of 48 GB/s doubled
        // once); 0.98 since GPT-2 XL's step is counted as transformers runs it (more compute to
        // hide the shared spine behind).
        assert!(speed < 0.99 && speed > 0.5, "spread: {speed}");
        assert!(f(step, "comm_ms") > 1.1 * f(alone, "comm_ms"));
        assert_eq!(f(step, "compute_ms"), f(alone, "compute_ms"));
        let added = f(step, "iteration_time_ms") - f(alone, "iteration_time_ms");
        let exposed = f(step, "exposed_comm_ms") - f(alone, "exposed_comm_ms");
        assert!((added - exposed).abs() <= 1e-9 * f(step, "iteration_time_ms"));
        // Buckets still run one at a time, in order, on the job's NCCL stream.
        let rows = step["buckets"].as_array().unwrap();
        for w in rows.windows(2) {
            assert!(f(&w[1], "start_ms") >= f(&w[0], "end_ms"));
        }
    }
    // Compact: each job inside its own rack, nothing meets: the step is the step alone.
    for j in two_ddp_jobs("compact", &[]) {
        assert_eq!(j["step"], j["alone"]);
        assert_eq!(j["relative_speed"][0].as_f64(), Some(1.0));
    }
}

#[test]
fn a_ddp_job_alone_in_the_shared_network_is_the_plain_ddp_step() {
    // The same training as a one-workload scenario on the job's nodes: its collectives timed
    // alone, the timeline stepped with known times. In the shared network, each collective is
    // posted and ends when its flows do.
    let jobs = two_ddp_jobs("compact", &[]);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/two-ddp-jobs-shared-spine.toml"
    ))
    .unwrap();
    let job =
        &text[text.find("[job.workload]").unwrap()..text.find("[[job]]\nname = \"b\"").unwrap()];
    let plain = format!(
        "[cluster]\ntopology = \"{SPINE}\"\nnodes = 8\n[nccl]\nNCCL_ALGO = \"Ring\"\n{}",
        job.replace("[job.workload]", "[workload]").replace("[job.workload.ddp]", "[workload.ddp]")
    );
    let p = json(&["simulate", &write("ddp-plain", &plain), "--format", "json"]);
    // Both on the engine's clock, each call ending at its time alone: every figure of the
    // step equal to the bit (the job lists its timeline, the scenario its memory and more).
    let alone = jobs[0]["alone"].as_object().unwrap();
    assert!(alone.len() > 15, "{alone:?}");
    for (k, v) in alone.iter().filter(|(k, _)| *k != "timeline") {
        assert_eq!(v, &p[k], "{k}");
    }
}

#[test]
fn a_ddp_job_beside_an_idle_one_is_a_ddp_job_alone() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/two-ddp-jobs-shared-spine.toml"
    ))
    .unwrap()
    .replace("../topologies/user/dgx-h100-spine-2to1.toml", SPINE);
    let cut = text.find("[[job]]\nname = \"b\"").unwrap();
    let alone = &text[..cut];
    let idle = format!(
        "{alone}[[job]]\nname = \"b\"\nnodes = 8\nplacement = \"spread\"\n[job.workload]\nkind = \"idle\"\n"
    );
    let a = json(&["simulate", &write("ddp-one", alone), "--format", "json"]);
    let b = json(&["simulate", &write("ddp-idle", &idle), "--format", "json"]);
    assert_eq!(a["jobs"][0]["step"], b["jobs"][0]["step"]);
    assert_eq!(a["jobs"][0]["step"], a["jobs"][0]["alone"]);
    // And the same bytes whatever the thread count.
    same_bytes_with_1_and_2_threads(&write("ddp-threads", &text));
}

#[test]
fn jobs_whose_steps_differ_a_thousandfold_are_refused_not_run_for_ever() {
    // Job a at 1 % of the peak (40 times slower than b) accumulating 64 micro-batches: 2,560
    // times job b's step. Side by side, b would repeat its step that many times.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/two-ddp-jobs-shared-spine.toml"
    ))
    .unwrap()
    .replace("../topologies/user/dgx-h100-spine-2to1.toml", SPINE)
    .replacen("mfu = 0.2", "mfu = 0.01\ngrad_accumulation = 64", 1);
    let p = write("ddp-unequal", &text);
    super::cli_errors::fails_with(
        &["simulate", &p],
        &["job \"a\"'s step", "over 1000 times job \"b\"'s"],
    );
}

/// The FSDP HYBRID_SHARD and 3-D jobs of scenarios/fsdp-and-3d-jobs-shared-spine.toml, both
/// placed `policy`: each job's JSON.
fn fsdp_and_3d_jobs(policy: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/fsdp-and-3d-jobs-shared-spine.toml"
    ))
    .unwrap()
    .replace("../topologies/user/dgx-h100-spine-2to1.toml", SPINE)
    .replace("placement = \"spread\"", &format!("placement = \"{policy}\""));
    let v = json(&["simulate", &write(&format!("fsdp-3d-{policy}"), &text), "--format", "json"]);
    v["jobs"].as_array().unwrap().clone()
}

#[test]
fn hybrid_and_3d_jobs_meet_on_the_spine_only_when_spread() {
    // Spread over the two racks, the replicate groups' all-reduces (eight at once a node) and
    // the 3-D job's data-parallel ones (eight groups a stage) cross the 2:1 spine together;
    // in a rack each, nothing meets.
    for (policy, slower) in [("spread", true), ("compact", false)] {
        for j in fsdp_and_3d_jobs(policy) {
            let speed = j["relative_speed"][0].as_f64().unwrap();
            let (beside, alone) =
                (j["step"]["iteration_time_ms"].as_f64(), j["alone"]["iteration_time_ms"].as_f64());
            if slower {
                assert!(speed < 0.995, "{policy} {}: {speed} ({beside:?} / {alone:?})", j["name"]);
            } else {
                assert!(
                    (speed - 1.0).abs() < 1e-6,
                    "{policy} {}: {beside:?} / {alone:?}",
                    j["name"]
                );
            }
        }
    }
    // The 3-D job reports its layout and stages as a one-workload scenario does; FSDP has
    // nothing to rebuild, so its first iteration is its step beside the other.
    let jobs = fsdp_and_3d_jobs("spread");
    let j = &jobs[1];
    assert_eq!(j["step"]["parallel"]["stages"].as_array().map(Vec::len), Some(2), "{j}");
    let step = &jobs[0]["step"];
    assert_eq!(step["first_iteration_ms"], step["iteration_time_ms"], "{step}");
}

#[test]
fn a_hybrid_or_3d_job_alone_is_its_one_workload_step() {
    // aws-p4d has a NIC for two GPUs: two local ranks' replicate groups share it. Alone in the
    // shared network a job posts its sibling groups' copies of each collective beside its own;
    // a one-workload scenario gives each group its share of the links instead. Both on the
    // job's 4 nodes. The 3-D job's calls never meet (its stages reduce their gradients after
    // their last sends, as Megatron aligns them): the step with each call timed alone in the
    // network (`--comms cached`) is the one-workload step, and with calls sharing it is the
    // same but for the network clock's rounding.
    let fsdp = "[job.workload]\nkind = \"fsdp\"\nmodel = \"llama-7b\"\nsequence = 4096\nmicro_batch = 1\nprecision = \"bf16\"\nmfu = 0.4\noptimizer = \"adam\"\n[job.workload.fsdp]\nsharding_strategy = \"HYBRID_SHARD\"\n";
    let three_d = "[job.workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nsequence = 4096\nmicro_batch = 1\ngrad_accumulation = 8\nprecision = \"bf16\"\nmfu = 0.4\noptimizer = \"adam\"\n[job.workload.parallel]\ntp = 8\npp = 2\n";
    let jobs = format!(
        "[cluster]\ntopology = \"aws-p4d\"\nnodes = 8\n[[job]]\nname = \"fsdp\"\nnodes = 4\n{fsdp}[[job]]\nname = \"3d\"\nnodes = 4\n{three_d}"
    );
    let path = write("p4d-jobs", &jobs);
    let v = json(&["simulate", &path, "--format", "json"]);
    let cached = json(&["simulate", &path, "--format", "json", "--comms", "cached"]);
    let time = |v: &serde_json::Value| v["jobs"][1]["alone"]["iteration_time_ms"].as_f64().unwrap();
    let (shared, alone) = (time(&v), time(&cached));
    assert!((shared - alone).abs() < ROUNDING_MS, "3d: shared {shared}, cached {alone}");
    let runs = [&v["jobs"][0], &cached["jobs"][1]];
    for (j, workload) in runs.into_iter().zip([fsdp, three_d]) {
        let one = format!(
            "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n{}",
            workload.replace("[job.workload", "[workload")
        );
        let p = json(&["simulate", &write("p4d-one", &one), "--format", "json"]);
        let (a, b) = (
            j["alone"]["iteration_time_ms"].as_f64().unwrap(),
            p["iteration_time_ms"].as_f64().unwrap(),
        );
        // The FSDP job's replicate groups have siblings on their NICs, which the network posts
        // and the one-workload step shares links out for (2.7e-5 apart); so do the 3-D job's
        // data-parallel pairs, whose buckets of Megatron's 40 M parameters (160 MB) share
        // their NIC with the sibling pair's (3.5e-5; 1.4e-9 in DDP's 25 MiB buckets).
        let within = 1e-3;
        assert!((a / b - 1.0).abs() < within, "{}: alone {a} ms, one workload {b} ms", j["name"]);
    }
}

#[test]
fn a_replayed_hybrid_step_runs_its_groups_as_a_job() {
    // A list of calls exported from HYBRID_SHARD names its shard and replicate groups; as a
    // job, each collective runs on its group (not on the job's every rank), as the step it
    // came from.
    let one = "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n[workload]\nkind = \"fsdp\"\nmodel = \"llama-7b\"\nsequence = 4096\nmicro_batch = 1\nprecision = \"bf16\"\nmfu = 0.4\noptimizer = \"adam\"\n[workload.fsdp]\nsharding_strategy = \"HYBRID_SHARD\"\n";
    let path = write("replay-one", one);
    let calls = path.replace("s.toml", "calls.json");
    let step = json(&["simulate", &path, "--format", "json", "--export-calls", &calls]);
    let jobs = format!(
        "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n[[job]]\nname = \"replay\"\nnodes = 4\n[job.workload]\nkind = \"trace\"\ncalls = \"{calls}\"\n"
    );
    let v = json(&["simulate", &write("replay-job", &jobs), "--format", "json"]);
    let alone = v["jobs"][0]["alone"]["iteration_time_ms"].as_f64().unwrap();
    let want = step["iteration_time_ms"].as_f64().unwrap();
    assert!((alone / want - 1.0).abs() < 0.01, "replayed as a job {alone} ms, the step {want} ms");
}

#[test]
fn a_one_rank_job_copies_as_its_one_workload_step_does() {
    // On one rank an all-gather writes another buffer: NCCL copies it (an all-reduce in place
    // does nothing). As a job, the call takes that time as alone.
    let dir = write("one-rank", "");
    let calls = dir.replace("s.toml", "calls.json");
    std::fs::write(
        &calls,
        r#"{"collsim_calls": 1, "calls": [{"compute_us": 100.0},
            {"nccl": [{"collective": "all_gather", "bytes": 268435456, "dtype": "float"}]},
            {"compute_us": 50.0}, {"drain": true}]}"#,
    )
    .unwrap();
    let workload = format!("kind = \"trace\"\ncalls = \"{calls}\"\n");
    let one = format!(
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\ngpus_per_node = 1\n[workload]\n{workload}"
    );
    let jobs = format!(
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 2\ngpus_per_node = 1\n[[job]]\nname = \"j\"\nnodes = 1\n[job.workload]\n{workload}"
    );
    let p = json(&["simulate", &write("one-rank-one", &one), "--format", "json"]);
    let v = json(&["simulate", &write("one-rank-jobs", &jobs), "--format", "json"]);
    let (a, b) = (
        v["jobs"][0]["alone"]["iteration_time_ms"].as_f64().unwrap(),
        p["iteration_time_ms"].as_f64().unwrap(),
    );
    assert!(b > 0.15 + 0.05, "the copy of 256 MiB takes time: {b} ms");
    assert_eq!(a, b, "job alone, one workload");
}

/// Issue #45 item 8: at most 64 `[[job]]` tables (1,000 one-node jobs took 5 minutes).
#[test]
fn more_than_64_jobs_are_refused_on_the_65th() {
    let mut text = String::from("[cluster]\ntopology = \"dgx-h100\"\nnodes = 65\n");
    for i in 0..65 {
        text.push_str(&format!(
            "\n[[job]]\nname = \"j{i}\"\nnodes = 1\n[job.workload]\ncollective = \"all_reduce\"\nmin_bytes = \"1 MiB\"\nmax_bytes = \"1 MiB\"\n"
        ));
    }
    let at = text.lines().position(|l| l == "name = \"j64\"").unwrap() + 1;
    let p = write("65-jobs", &text);
    super::cli_errors::fails_with(
        &["simulate", &p],
        &[&format!("s.toml:{at}:"), "more than 64 [[job]] tables (65 given)"],
    );
}

/// A 3-D Llama-7B job on 4 aws-p4d nodes (tensor-parallel in a node, 2 pipeline stages of 2
/// nodes each, so each stage's data-parallel all-reduce crosses the NICs its pipeline sends
/// leave from, a NIC for two GPUs), run alone with `--comms` `policy`, `grads` the keys that
/// say when its gradients are reduced.
fn pipeline_job(policy: &str, grads: &str) -> serde_json::Value {
    let text = format!(
        "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n[[job]]\nname = \"3d\"\nnodes = 4\n\
         [job.workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nsequence = 4096\nmicro_batch = 1\n\
         grad_accumulation = 8\nprecision = \"bf16\"\nmfu = 0.4\noptimizer = \"adam\"\n\
         [job.workload.parallel]\ntp = 8\npp = 2\n{grads}\n"
    );
    let p = write(&format!("pipeline-{}", grads.replace([' ', '='], "")), &text);
    let out = json(&["simulate", &p, "--comms", policy, "--format", "json"]);
    out["jobs"][0]["alone"].clone()
}

#[test]
fn pipeline_sends_slow_a_step_where_they_meet_its_data_parallel_all_reduce_and_only_there() {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    // Every stage's gradients reduced as its buckets fill in its last backward (Megatron with
    // `align_grad_reduce` off): the last stage's send to the first leaves while its buckets'
    // all-reduces still cross the same NICs, and shares them. The first stage's last backward
    // starts later: pipeline time, and so the step.
    let unaligned = "align_grad_reduce = false";
    let (shared, cached) = (pipeline_job("shared", unaligned), pipeline_job("cached", unaligned));
    let (s, c) = (f(&shared, "iteration_time_ms"), f(&cached, "iteration_time_ms"));
    assert!(s > c * (1.0 + 1e-4), "overlapping: shared {s} ms, cached {c} ms");
    let pipe = |v: &serde_json::Value| v["breakdown"]["pipeline_ms"].as_f64().unwrap();
    assert!(pipe(&shared) > pipe(&cached) + 0.1, "{} vs {}", pipe(&shared), pipe(&cached));
    // Megatron's default, and reduced after the backward: the last stage's reductions start
    // once its send is done (in the pipeline's bubble, or when it finalizes its gradients),
    // so nothing meets and the step is the same, but for a few picoseconds: each send shares
    // its NICs with its sibling copies, and where the network's clock rounds their ends
    // depends on what else happens meanwhile.
    for grads in ["", "overlap_grad_reduce = false"] {
        same_within(
            &pipeline_job("shared", grads),
            &pipeline_job("cached", grads),
            ROUNDING_MS,
            "",
        );
    }
    // Two stages and no data parallelism on aws-p4d (a NIC for two GPUs): a stage's
    // activations go one way and the other's gradients the other, so they never meet, and
    // the step is the same (to a few picoseconds, as above).
    // The interleaved schedule too, whose last stage sends its forward output back to the
    // first stage (on the pair whose first rank is the first stage's: a send back).
    let two_nodes = |policy: &str, virtual_stages: usize| {
        let text = format!(
            "[cluster]\ntopology = \"aws-p4d\"\nnodes = 2\n[[job]]\nname = \"3d\"\nnodes = 2\n\
             [job.workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nsequence = 2048\n\
             micro_batch = 1\ngrad_accumulation = 8\nprecision = \"bf16\"\nmfu = 0.4\n\
             optimizer = \"adam\"\n[job.workload.parallel]\ntp = 8\npp = 2\n\
             virtual_stages = {virtual_stages}\n"
        );
        let p = write("pipeline-dp1", &text);
        json(&["simulate", &p, "--comms", policy, "--format", "json"])["jobs"][0]["alone"].clone()
    };
    for v in [1, 2] {
        same_within(&two_nodes("shared", v), &two_nodes("cached", v), ROUNDING_MS, "");
    }
}

/// How far apart a step's figures under `Shared` and `Cached` may be where nothing meets, in
/// ms: the ends of a thousand or so calls, each rounded on the network's clock beside what
/// else is in flight, a few picoseconds each.
const ROUNDING_MS: f64 = 1e-5;

/// Asserts that `a` and `b` are the same but for numbers `ms` apart (or a billionth relative).
fn same_within(a: &serde_json::Value, b: &serde_json::Value, ms: f64, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{at}");
            for (k, v) in x {
                same_within(v, &y[k], ms, &format!("{at}.{k}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_within(v, w, ms, &format!("{at}[{i}]"));
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= ms + 1e-9 * x.abs(), "{at}: {x} vs {y}");
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn a_layers_tensor_and_expert_calls_meet_the_steps_other_traffic_under_shared_only() {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let tp = |v: &serde_json::Value| v["breakdown"]["tp_comm_ms"].as_f64().unwrap();
    // Mixtral on 8 DGX-H100 nodes (tp 2, pp 2, ep 8): each layer's expert all-to-alls cross
    // two nodes' NICs, which the stage's data-parallel all-reduce (during the last backward)
    // and the pipeline's sends cross too. Under `Shared` they share them; under `Cached` each
    // takes its time alone, as in a plain `simulate`.
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/mixtral-ep-dgx-h100-8node.toml");
    let run = |policy: &str| json(&["simulate", p, "--comms", policy, "--format", "json"]);
    let (shared, cached, plain) =
        (run("shared"), run("cached"), json(&["simulate", p, "--format", "json"]));
    assert_eq!(cached["iteration_time_ms"], plain["iteration_time_ms"]);
    assert_eq!(tp(&cached), tp(&plain));
    assert!(tp(&shared) > tp(&cached) + 1.0, "{} vs {} ms", tp(&shared), tp(&cached));
    let (s, c) = (f(&shared, "iteration_time_ms"), f(&cached, "iteration_time_ms"));
    assert!(s > c + 1.0, "shared {s} ms, cached {c} ms");
    // Tensor-parallel in a node beside data-parallel in the same node, the gradients reduced
    // during the last backward: each bucket's all-reduce is done before the layer's calls
    // leave, so nothing meets, and the step is the same to the bit.
    let text = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n[[job]]\nname = \"tp\"\n\
                nodes = 1\n[job.workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\n\
                sequence = 4096\nmicro_batch = 1\ngrad_accumulation = 4\nprecision = \"bf16\"\n\
                mfu = 0.4\noptimizer = \"adam\"\n[job.workload.parallel]\ntp = 4\n";
    let p = write("tp-beside-dp", text);
    let run = |policy: &str| {
        json(&["simulate", &p, "--comms", policy, "--format", "json"])["jobs"][0]["alone"].clone()
    };
    assert_eq!(run("shared"), run("cached"));
}

#[test]
fn one_step_can_run_in_the_shared_network() {
    // The same 3-D step as a plain scenario: `--comms shared` runs it as a job of the whole
    // cluster would run alone; by default each call takes its time alone.
    let text = "[cluster]\ntopology = \"aws-p4d\"\nnodes = 4\n[workload]\nkind = \"ddp\"\n\
                model = \"llama-7b\"\nsequence = 4096\nmicro_batch = 1\ngrad_accumulation = 8\n\
                precision = \"bf16\"\nmfu = 0.4\noptimizer = \"adam\"\n[workload.parallel]\n\
                tp = 8\npp = 2\n";
    let p = write("pipeline-plain", text);
    let shared = json(&["simulate", &p, "--comms", "shared", "--format", "json"]);
    let job = pipeline_job("shared", "");
    assert_eq!(shared["iteration_time_ms"], job["iteration_time_ms"]);
    let cached = json(&["simulate", &p, "--format", "json"]);
    let f = |v: &serde_json::Value| v["iteration_time_ms"].as_f64().unwrap();
    // Megatron's 40 M-parameter buckets (160 MB) on a NIC for two GPUs: the sibling
    // data-parallel pairs' reductions meet in the shared network a little (1768.267 against
    // 1768.206 ms; equal to 2e-6 ms in DDP's 25 MiB buckets).
    let (s, c) = (f(&shared), f(&cached));
    assert!(s >= c - ROUNDING_MS && s / c - 1.0 < 1e-4, "{s} vs {c}");
    super::cli_errors::misused_with(
        &["simulate", &p, "--comms", "shared", "--sweep", "parallel.pp=1,2"],
        &["--comms: a --sweep times each point's step alone"],
    );
}

#[test]
fn a_straggler_step_in_the_shared_network_runs_at_its_pace() {
    // The shared network runs a step at its slowest rank's pace, as the cached one does: one
    // A100 at 80 % in 64 gives the same step either way (ResNet-50's buckets meet nothing on
    // eight nodes), and its wait is the same.
    let p =
        concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/resnet50-straggler-dgx-a100-8node.toml");
    let shared = json(&["simulate", p, "--comms", "shared", "--format", "json"]);
    let cached = json(&["simulate", p, "--format", "json"]);
    let step = |v: &serde_json::Value| v["iteration_time_ms"].as_f64().unwrap();
    assert!((step(&shared) / step(&cached) - 1.0).abs() < 1e-6, "{shared} vs {cached}");
    let wait = |v: &serde_json::Value| v["skew"]["wait_ms"].as_f64().unwrap();
    assert!((wait(&shared) / wait(&cached) - 1.0).abs() < 1e-6);
}

#[test]
fn a_job_alone_takes_its_profiles_size_band_correction_as_the_plain_step_does() {
    // The calibrated DGX-H100 profile multiplies NVLS/Simple by 1.08 from 16 MiB, and one
    // node's 100 MiB buckets run NVLS: a job alone in the shared network is the plain step, to
    // the bit, correction and all (it used to run uncorrected: 24.67 ms of communication
    // against the plain step's 26.60).
    let w = "[workload]\nkind = \"ddp\"\nmodel = \"gpt2-xl\"\nsequence = 1024\nmicro_batch = 4\n\
             precision = \"bf16\"\nmfu = 0.2\n[workload.ddp]\nbucket_cap_mb = 100\n";
    let plain = format!("[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n{w}");
    let jobs = format!(
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 2\n[[job]]\nname = \"a\"\nnodes = 1\n{}",
        w.replace("[workload", "[job.workload")
    );
    let profile = concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/profiles/dgx-h100.toml");
    let (plain, jobs) = (write("nvls-plain", &plain), write("nvls-job", &jobs));
    let p = json(&["simulate", &plain, "--format", "json", "--profile", profile]);
    let j = json(&["simulate", &jobs, "--format", "json", "--profile", profile]);
    let bare = json(&["simulate", &plain, "--format", "json"]);
    assert_eq!(p["buckets"][0]["algo"], "NVLS");
    let comm = |v: &serde_json::Value| v["comm_ms"].as_f64().unwrap();
    assert!(comm(&p) > 1.05 * comm(&bare), "{} vs {}", comm(&p), comm(&bare));
    for k in ["iteration_time_ms", "comm_ms", "exposed_comm_ms", "buckets"] {
        assert_eq!(j["jobs"][0]["alone"][k], p[k], "{k}");
    }
}
