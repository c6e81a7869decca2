//! Models written down as specifications (`[workload.model]`): presets as tables, any GPT or
//! Llama-family shape under every parallelism, errors on the key's line.

use super::cli_errors::fails_with;
use super::collsim_ok;

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = super::scratch().join(format!("collsim-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn scenario(file: &str) -> String {
    std::fs::read_to_string(format!("scenarios/{file}")).unwrap()
}

#[test]
fn a_preset_written_as_a_table_is_the_preset() {
    let text = scenario("llama7b-dgx-h100-16node.toml");
    let table =
        text.replace("model = \"llama-7b\"\n", "") + "\n[workload.model]\npreset = \"llama-7b\"\n";
    assert_ne!(table, text);
    let p = tmp("llama-table.toml", &table.replace("\"../topologies/", "\"topologies/"));
    let a = collsim_ok(&["simulate", "scenarios/llama7b-dgx-h100-16node.toml"]);
    let b = collsim_ok(&["simulate", p.to_str().unwrap()]);
    assert_eq!(a, b);
}

#[test]
fn a_39b_gpt_runs_at_tp4_pp8_dp8_on_32_nodes_with_full_recompute_from_its_file() {
    let out = collsim_ok(&["simulate", "scenarios/gpt-39b-3d-dgx-a100-32node.toml"]);
    // Narayanan et al.'s 39.1 B parameters, its vocabulary padded to a multiple of 512.
    assert!(out.contains("gpt-48x8192 (39091.8 M params"), "{out}");
    assert!(out.contains("tp 4 x pp 8 x dp 8"), "{out}");
    assert!(out.contains("full recompute"), "{out}");
    let mem = out.lines().find(|l| l.contains("memory per GPU")).unwrap();
    let used: f64 = mem.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(used < 80.0, "{mem}");
}

#[test]
fn a_model_field_sweeps_on_a_preset_scenario() {
    let out = collsim_ok(&[
        "simulate",
        "scenarios/llama7b-fsdp-p5-16node.toml",
        "--sweep",
        "model.hidden=4096,5120",
    ]);
    // The first table (the breakdown follows it, after a blank line).
    let rows: Vec<&str> = out
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| l.trim_start().starts_with("4096") || l.trim_start().starts_with("5120"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    let ms = |r: &str| r.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap();
    // A wider model is a slower step.
    assert!(ms(rows[1]) > ms(rows[0]) * 1.2, "{out}");
}

#[test]
fn specifications_that_cannot_be_built_are_refused_on_their_line() {
    let base = r#"[cluster]
topology = "dgx-h100"
nodes = 1

[workload]
kind = "ddp"
sequence = 1024
micro_batch = 1
precision = "bf16"
mfu = 0.4

[workload.model]
"#;
    let cases: [(&str, &[&str]); 9] = [
        (
            "family = \"gpt\"\nlayers = 2\nhidden = 1000\nheads = 16\n",
            &["m.toml:16:9", "workload.model.heads", "do not divide the hidden size 1000"],
        ),
        (
            "family = \"llama\"\nlayers = 2\nhidden = 1024\nheads = 16\n",
            &["m.toml:12:1", "workload.model.ffn: missing"],
        ),
        ("layers = 2\n", &["m.toml:12:1", "workload.model.family: missing"]),
        ("preset = \"resnet50\"\n", &["m.toml:13:10", "not a transformer with a specification"]),
        ("preset = \"llama-7b\"\ntop_k = 2\n", &["m.toml:14:9", "top_k: goes with experts"]),
        (
            "family = \"gpt\"\nlayers = 2\nhidden = 1024\nheads = 16\nmax_positions = 512\n",
            &["m.toml:17:17", "512 learned positions, fewer than the 1024 tokens"],
        ),
        (
            "family = \"gpt\"\nimplementation = \"torchtitan\"\nlayers = 2\nhidden = 1024\nheads = 16\n",
            &["m.toml:14:18", "torchtitan ships Llama-family models only"],
        ),
        (
            "family = \"gpt\"\nlayers = 2\nhidden = 1024\nheads = 16\nkv_heads = 5\n",
            &["m.toml:17:12", "key/value heads divide the 16 attention heads"],
        ),
        (
            "family = \"gpt\"\nlayers = 2\nhidden = 1024\nheads = 16\nactivation = \"relu\"\n",
            &["m.toml:17:14", "\"relu\": \"gelu\""],
        ),
    ];
    for (table, needles) in cases {
        let p = tmp("m.toml", &format!("{base}{table}"));
        fails_with(&["simulate", p.to_str().unwrap()], needles);
    }
}

#[test]
fn a_specification_splits_under_tensor_parallelism_as_its_preset_does() {
    // Llama-2-13B by shapes, at tp 8 and pp 2: as the preset with the same layout.
    let text =
        scenario("llama70b-3d-dgx-h100-64node.toml").replace("\"../topologies/", "\"topologies/");
    let spec = text.replace("model = \"llama-2-70b\"\n", "")
        + "\n[workload.model]\nname = \"llama-2-70b\"\nfamily = \"llama\"\nlayers = 80\nhidden = 8192\nheads = 64\nkv_heads = 8\nffn = 28672\n";
    let a = collsim_ok(&["simulate", "scenarios/llama70b-3d-dgx-h100-64node.toml"]);
    let b = collsim_ok(&["simulate", tmp("l70.toml", &spec).to_str().unwrap()]);
    assert_eq!(a, b);
}

#[test]
fn activation_checkpointing_is_the_3d_layouts_recompute_and_applies_to_fsdp() {
    // Under [workload.parallel] it is Megatron's full recomputation.
    let text =
        scenario("gpt-39b-3d-dgx-a100-32node.toml").replace("\"../topologies/", "\"topologies/");
    let old = text
        .replace("activation_checkpointing = \"full\"\n", "")
        .replace("pp = 8\n", "pp = 8\nrecompute = \"full\"\n");
    assert_ne!(old, text);
    let a = collsim_ok(&["simulate", "scenarios/gpt-39b-3d-dgx-a100-32node.toml"]);
    let b = collsim_ok(&["simulate", tmp("old.toml", &old).to_str().unwrap()]);
    assert_eq!(a, b);
    // Both, disagreeing: refused on the line.
    let both = text.replace("pp = 8\n", "pp = 8\nrecompute = \"none\"\n");
    let p = tmp("both.toml", &both);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["both.toml:28:28", "where workload.parallel.recompute says \"none\""],
    );
    // FSDP: a Llama-7B on 16 p5 nodes, checkpointed, fits with room to spare and its backward
    // grows by the blocks' forward.
    let out = collsim_ok(&[
        "simulate",
        "scenarios/llama7b-fsdp-p5-16node.toml",
        "--sweep",
        "workload.activation_checkpointing=none,full",
        "--format",
        "csv",
    ]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let fsdp = scenario("llama7b-fsdp-p5-16node.toml").replace("\"../topologies/", "\"topologies/");
    let on = fsdp.replace(
        "optimizer = \"adam\"\n",
        "optimizer = \"adam\"\nactivation_checkpointing = \"full\"\n",
    );
    let out = collsim_ok(&["simulate", tmp("fsdp-ck.toml", &on).to_str().unwrap()]);
    assert!(out.contains("each layer a unit; activation checkpointing full"), "{out}");
    let mem = out.lines().find(|l| l.contains("memory per GPU")).unwrap();
    let used: f64 = mem.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(used < 10.0, "{mem}");
    // A custom layer list has no blocks to checkpoint: refused, not ignored.
    let custom = scenario("ddp-custom-layers.toml")
        .replace("\"../topologies/", "\"topologies/")
        .replace("[workload]\n", "[workload]\nactivation_checkpointing = \"full\"\n");
    let p = tmp("custom-ck.toml", &custom);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["custom-ck.toml:14:28", "no transformer blocks"],
    );
}

#[test]
fn a_plans_tp_pads_a_megatron_vocabulary_as_the_scenario_at_that_tp_does() {
    // 50,257 rows pad to 50,688 at tp 4 and to 51,200 at tp 8: the plan's tp-8 candidate is
    // the scenario simulated at tp 8 (it was the tp-4 model split 8 ways: 5.7 ms and 8 MiB
    // short).
    let text = scenario("gpt-39b-3d-dgx-a100-32node.toml");
    let s = tmp("s39.toml", &text.replace("\"../topologies/", "\"topologies/"));
    let s8 =
        tmp("s39-8.toml", &std::fs::read_to_string(&s).unwrap().replace("tp = 4\n", "tp = 8\n"));
    let plan = tmp(
        "p39.toml",
        "scenario = \"s39.toml\"\n[train]\nsteps = 10\n[candidates]\ninstances = [\"dgx-a100\"]\nnodes = [32]\ntp = [8]\n[objective]\nminimise = \"time\"\n",
    );
    let csv = collsim_ok(&["plan", plan.to_str().unwrap(), "--format", "csv"]);
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |k: &str| row[head.iter().position(|h| *h == k).unwrap()].parse::<f64>().unwrap();
    let sim = collsim_ok(&["simulate", s8.to_str().unwrap(), "--format", "csv"]);
    let sh: Vec<&str> = sim.lines().next().unwrap().split(',').collect();
    let sr: Vec<&str> = sim.lines().nth(1).unwrap().split(',').collect();
    let scol = |k: &str| sr[sh.iter().position(|h| *h == k).unwrap()].parse::<f64>().unwrap();
    assert_eq!(col("step_ms"), scol("iteration_time_ms"));
    assert_eq!(col("memory_gib"), scol("memory_bytes") / 1073741824.0);
}

#[test]
fn unfused_attention_in_the_table_refuses_a_fixed_mfu_as_the_key_does() {
    let text = scenario("llama7b-fsdp-p5-16node.toml").replace("\"../topologies/", "\"topologies/");
    let t = text.replace("model = \"llama-7b\"\n", "")
        + "\n[workload.model]\npreset = \"llama-7b\"\nattention = \"unfused\"\n";
    let p = tmp("unfused-mfu.toml", &t);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["unfused-mfu.toml:", "workload.mfu: with attention = \"unfused\""],
    );
}
