//! `collsim profile` and `[workload] profile`: a PyTorch profiler trace of one H200's step as a
//! model profile, replayed on the GPU it was traced on, at other shapes, and on other GPUs and
//! clusters.

use super::cli_errors::fails_with;
use super::{collsim, collsim_ok};

const DIR: &str = "calibration/data/2026-11-26-h200-kineto";
const SHIPPED: &str = "calibration/data/2026-11-26-h200-kineto/run2-ddp-h2048.profile.toml";

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = super::scratch().join(format!("collsim-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A scenario on `topology` naming the shipped profile, with `extra` workload keys.
fn scenario(name: &str, topology: &str, nodes: usize, gpus: usize, extra: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = format!(
        "[cluster]\ntopology = \"{topology}\"\nnodes = {nodes}\ngpus_per_node = {gpus}\n\n[workload]\nprofile = \"{root}/{SHIPPED}\"\n{extra}"
    );
    tmp(name, &text).display().to_string()
}

fn step(scenario: &str) -> (f64, String) {
    let out = collsim_ok(&["simulate", scenario]);
    let ms = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("iteration")?.trim().strip_suffix(" ms")?.parse().ok())
        .unwrap_or_else(|| panic!("no iteration in {out}"));
    (ms, out)
}

/// The median step without the profiler (`parallel`, `layers`, `hidden`, `seq`, `micro_batch`
/// columns; run 1 and run 2 were on two VMs).
fn measured(run: &str, key: &[&str]) -> f64 {
    let text = std::fs::read_to_string(format!("{DIR}/{run}-steps.csv")).unwrap();
    let row = text
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f[0] == key[0] && f[2] == key[1] && f[3] == key[2] && f[5] == key[3] && f[6] == key[4]
        })
        .unwrap_or_else(|| panic!("no row {key:?}"));
    row.split(',').nth(8).unwrap().parse().unwrap()
}

#[test]
fn the_shipped_profile_is_what_collsim_profile_makes_of_its_trace() {
    let out = super::scratch().join(format!("collsim-profile-{}-made.toml", std::process::id()));
    let trace = format!("{DIR}/run2-kineto-ddp-h2048.json.gz");
    let o = collsim(&["profile", &trace, "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let made = std::fs::read_to_string(&out).unwrap();
    assert_eq!(made, std::fs::read_to_string(SHIPPED).unwrap(), "regenerate {SHIPPED}");
    // Its summary: the GEMMs at about 80 % of the H200's bf16 peak, the memory-bound kernels
    // at 60-85 % of its 4.8 TB/s.
    let summary = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(summary.contains("NVIDIA H200 (H200-SXM-141GB), bf16, 8 x 1024 tokens"), "{summary}");
    let p = collsim::workload::profile::ModelProfile::read(SHIPPED, &made).unwrap();
    for s in &p.summary {
        use collsim::workload::profile::Class;
        if s.class == Class::Gemm {
            let f = s.fraction_of_peak.unwrap();
            assert!((0.7..0.9).contains(&f), "{s:?}");
        }
        if s.class == Class::Memory {
            let f = s.fraction_of_bandwidth.unwrap();
            assert!((0.6..0.9).contains(&f), "{s:?}");
        }
    }
    // Per layer: its 24 transformer blocks, found as the forward's and backward's repeated
    // kernel sequences, within 5 % of one another (1.577 to 1.626 ms forward); the GEMMs
    // most of each.
    for (b, kernels) in p.blocks.iter().zip([25, 59]) {
        assert_eq!((b.count, b.kernels), (24, kernels), "{b:?}");
        assert!(b.max_ms < 1.05 * b.min_ms, "{b:?}");
        assert!(b.by_class["gemm"] > 0.6 * b.time_ms, "{b:?}");
    }
    assert!(summary.contains("forward    24 repeated blocks (layers) of 25 kernels: 1.591 ms each (gemm 1.049, memory 0.454, attention 0.084, copy 0.005; 1.577 to 1.626), 5.241 ms outside them"), "{summary}");
    // Without -o the profile goes to standard output.
    assert_eq!(collsim_ok(&["profile", &trace]), made);
}

#[test]
fn a_profile_finds_each_models_layers() {
    // GPT-2 small's 12 blocks under DDP and under FSDP (each a unit), and the 24 of our
    // Megatron-style step with full recompute (its backward recomputes each block's forward);
    // transformers' own GPT-2 and Llama 3.2 1B (Llama's trace records the host's `wait`s on
    // DDP's buffer broadcasts, which are not collectives: they used to stop the profile).
    let hf = "calibration/data/2026-11-30-h200-hf";
    for (trace, layers, fwd, bwd) in [
        (format!("{hf}/gpt2-b8/trace.json.gz"), 12, 37, 71),
        (format!("{hf}/llama1b-b4-s2048/trace.json.gz"), 16, 57, 120),
        (format!("{DIR}/run1-kineto-ddp.json.gz"), 12, 23, 53),
        (format!("{DIR}/run1-kineto-fsdp.json.gz"), 12, 37, 56),
        (
            "calibration/data/2026-11-27-h200-megatron/profile-L24-h1024-mb4.json.gz".to_string(),
            24,
            24,
            63,
        ),
    ] {
        let p = collsim::workload::profile::ModelProfile::read(
            &trace,
            &collsim_ok(&["profile", &trace]),
        )
        .unwrap();
        let found: Vec<(u64, u64)> = p.blocks.iter().map(|b| (b.count, b.kernels)).collect();
        assert_eq!(found, [(layers, fwd), (layers, bwd)], "{trace}");
    }
    // What lies outside the layers (embedding, head, loss) is not a layer, nor are ResNet-50's
    // 53 weight casts of three kernels each, which repeat without a GEMM or convolution.
    for trace in [
        "calibration/data/2026-11-27-h200-megatron/profile-L0-h1024-mb4.json.gz",
        &format!("{hf}/resnet50-b32/trace.json.gz"),
    ] {
        let p = collsim_ok(&["profile", trace]);
        assert!(!p.contains("[[blocks]]"), "{trace}: {p}");
    }
}

#[test]
fn a_profile_replayed_on_the_gpu_it_was_traced_on_reproduces_the_step() {
    // Must hold (issue #46): within 2 % of the step measured without the profiler (run 2, the
    // trace's VM: 157.1 ms).
    let s = scenario("h200.toml", "dgx-h200", 1, 1, "");
    let (ms, out) = step(&s);
    let m = measured("run2", &["ddp-h2048", "24", "2048", "1024", "8"]);
    assert!((ms / m - 1.0).abs() < 0.02, "{ms} against {m} ms: {out}");
    assert!(out.contains("math-bound time x1.000, memory-bound x1.000, per token x1.000"), "{out}");
    assert!(!out.contains("warning"), "{out}");
}

#[test]
fn a_profile_carries_to_other_micro_batches_and_sequences() {
    // The same GPT timed without the profiler at 1-8 samples of 1,024 and 2,048 tokens (run 1,
    // another VM than the trace's): within 5 % but at 1 and 2 samples of 1,024 tokens, where the
    // host bounds the step (1 and 2 samples of 1,024 tokens measured 65.5 and 78.0 ms where the
    // GPU's work is 43 and 59 ms), which the replay does not model: it warns wherever the GPU's
    // work is shorter than the traced host's launches (101.8 ms under the profiler, which slows
    // the host), so at 5 of the 8 points, 2 of them rightly.
    let mut checked = 0;
    for (b, s) in
        [(1, 1024), (2, 1024), (4, 1024), (8, 1024), (1, 2048), (2, 2048), (4, 2048), (8, 2048)]
    {
        let file = scenario(
            &format!("mb{b}-s{s}.toml"),
            "dgx-h200",
            1,
            1,
            &format!("micro_batch = {b}\nsequence = {s}\n"),
        );
        let (ms, out) = step(&file);
        let m = measured("run1", &["ddp", "24", "2048", &s.to_string(), &b.to_string()]);
        let err = ms / m - 1.0;
        let warned = out.contains("warning: its GPU work");
        if !(s == 1024 && b <= 2) {
            assert!(err.abs() < 0.05, "{b} x {s}: {ms} against {m} ms ({:+.1} %)", err * 100.0);
            checked += 1;
        } else {
            assert!(warned && err < -0.2, "{b} x {s}: {ms} against {m} ms: {out}");
        }
        assert_eq!(warned, ms < 101.8, "{b} x {s}: {out}");
    }
    assert_eq!(checked, 6);
}

#[test]
fn a_profile_carries_to_other_gpus_and_clusters() {
    // Acceptance (issue #46): the profile simulates its model on 16 aws-p5 nodes and on 16
    // dgx-a100 nodes. The H100 has the H200's bf16 peak and 3.35 of its 4.8 TB/s; the A100
    // 312 of 989.4 TFLOP/s and 2.04 TB/s.
    let (p5, out) = step("scenarios/gpt-1.4b-profile-p5-16node.toml");
    assert!(out.contains("on the H100-SXM5-80GB") && out.contains("on 16 x aws-p5"), "{out}");
    assert!(out.contains("memory-bound x1.433"), "{out}");
    assert!(out.contains("collectives                  74, 5.28 GiB"), "{out}");
    let a100 = collsim_ok(&[
        "simulate",
        "scenarios/gpt-1.4b-profile-p5-16node.toml",
        "--topology",
        "dgx-a100",
    ]);
    assert!(
        a100.contains("on the A100-SXM4-80GB") && a100.contains("math-bound time x3.171"),
        "{a100}"
    );
    let ms = |out: &str| -> f64 {
        out.lines()
            .find_map(|l| {
                l.trim().strip_prefix("iteration")?.trim().strip_suffix(" ms")?.parse().ok()
            })
            .unwrap()
    };
    let (h200, _) = step(&scenario("h200-1.toml", "dgx-h200", 1, 1, ""));
    assert!(h200 < p5 && p5 < ms(&a100), "{h200} {p5} {}", ms(&a100));
    // The A100's step is the H200's compute carried (2.9x) plus what the all-reduces expose.
    assert!((2.7..3.1).contains(&(ms(&a100) / h200)), "{} / {h200}", ms(&a100));
}

#[test]
fn what_a_profile_cannot_do_is_refused_on_its_line() {
    let root = env!("CARGO_MANIFEST_DIR");
    // A trace without shapes cannot carry to another micro-batch.
    let light = super::scratch().join(format!("collsim-profile-{}-light.toml", std::process::id()));
    collsim_ok(&[
        "profile",
        &format!("{DIR}/run2-kineto-ddp-light.json.gz"),
        "-o",
        light.to_str().unwrap(),
    ]);
    let s = tmp(
        "light.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{}\"\nmicro_batch = 4\n",
            light.display()
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["light.toml:6:15: workload.micro_batch:", "--micro-batch"],
    );
    // A list of calls and a profile together; a profile under a training kind.
    let s = tmp(
        "both.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{root}/{SHIPPED}\"\ncalls = \"c.json\"\n"
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["both.toml:6:9: workload.calls: a step is a list of calls or a model profile, not both"],
    );
    let s = tmp(
        "ddp.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nkind = \"ddp\"\nprofile = \"{root}/{SHIPPED}\"\n"
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["ddp.toml:6:11: workload.profile: not for kind = \"ddp\""],
    );
    let s = tmp(
        "gone.toml",
        "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"nowhere.toml\"\n",
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["gone.toml:5:11: workload.profile:", "nowhere.toml"],
    );
    // A profile edited into something else is named with its line.
    let text = std::fs::read_to_string(SHIPPED).unwrap().replace("shapes = true", "shapes = 3");
    let bad = tmp("bad-profile.toml", &text);
    let s = tmp(
        "bad.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{}\"\n",
            bad.display()
        ),
    );
    fails_with(&["simulate", s.to_str().unwrap()], &["bad-profile.toml:13:10:", "invalid type"]);
    // `collsim profile`'s own errors.
    fails_with(&["profile", "nowhere.json"], &["nowhere.json"]);
    fails_with(
        &["profile", &format!("{DIR}/run2-kineto-ddp-light.json.gz"), "--gpu", "H900"],
        &["--gpu H900: not a GPU model collsim knows", "H200-SXM-141GB"],
    );
    let not_trace = tmp("not-trace.json", "{\"a\": 1}");
    fails_with(&["profile", not_trace.to_str().unwrap()], &["no traceEvents"]);
    super::cli_errors::misused_with(
        &["profile", &format!("{DIR}/run2-kineto-ddp-light.json.gz"), "--micro-batch", "0"],
        &["--micro-batch 0"],
    );
    // A shape carried past what a step may hold names its key; a trace named as a profile
    // says what to do.
    let s = tmp(
        "huge.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{root}/{SHIPPED}\"\nsequence = 4194304\n"
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["huge.toml:6:12: workload.sequence:", "at that shape"],
    );
    let s = tmp(
        "trace.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{root}/{DIR}/run2-kineto-ddp-light.json.gz\"\n"
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["is a trace, not a model profile: make one with `collsim profile"],
    );
    // A misspelt class is named.
    let text = std::fs::read_to_string(SHIPPED).unwrap().replacen(
        "class = \"memory\"",
        "class = \"memroy\"",
        1,
    );
    let bad = tmp("typo-profile.toml", &text);
    let s = tmp(
        "typo.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{}\"\n",
            bad.display()
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["typo-profile.toml:19:8: step[0]: unknown variant `memroy`"],
    );
}

#[test]
fn a_topology_sweep_carries_the_profile_to_each_gpu() {
    let out = collsim_ok(&[
        "simulate",
        "scenarios/gpt-1.4b-profile-p5-16node.toml",
        "--sweep",
        "topology.gpu.model=H100-SXM5-80GB,A100-SXM4-80GB",
        "--format",
        "csv",
    ]);
    let a100 = collsim_ok(&[
        "simulate",
        "scenarios/gpt-1.4b-profile-p5-16node.toml",
        "--topology",
        "dgx-a100",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&a100).unwrap();
    let compute = v["compute_ms"].as_f64().unwrap();
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{out}");
    // The A100 row's compute is the A100's carried compute (the p5 topology's other parts
    // change only the collectives).
    assert!(rows[1].contains(&format!("{compute:.3}")), "{compute} not in {}", rows[1]);
}

/// The H2048 profile made again with `steps.csv` as `profile_model.py` writes it. The figures
/// are made up for the test (the trace's capture recorded no memory): 25 GB at the step's
/// start, 16 GB more at forward's end, a 46 GB peak, 31 GB in the optimizer step, 50 GB
/// reserved.
fn with_memory(name: &str, columns: &str, row: &str) -> std::path::PathBuf {
    let steps = tmp(&format!("{name}-steps.csv"), &format!("{columns}\n{row}\n"));
    let out = super::scratch().join(format!("collsim-profile-{}-{name}.toml", std::process::id()));
    collsim_ok(&[
        "profile",
        &format!("{DIR}/run2-kineto-ddp-h2048.json.gz"),
        "--memory",
        steps.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    out
}

const STEPS_COLUMNS: &str = "batch,seq,image,params,median_ms,min_ms,start_allocated,forward_allocated,max_allocated,optimizer_max_allocated,max_reserved";
const STEPS_ROW: &str =
    "8,1024,,1420000000,157.1,152.8,25000000000,41000000000,46000000000,31000000000,50000000000";

#[test]
fn a_profile_with_the_allocators_figures_says_what_the_step_holds_and_a_plan_uses_it() {
    let p = with_memory("mem", STEPS_COLUMNS, STEPS_ROW);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains("[memory]\nsource = \"mem-steps.csv\"\nmicro_batch = 8\nsequence = 1024\nparams = 1420000000\nmax_allocated = 46000000000\n"), "{text}");
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let on = |extra: &str| {
        let s = tmp(
            &format!("mem-{}.toml", extra.len()),
            &format!(
                "[cluster]\ntopology = \"aws-p5\"\nnodes = 2\n\n[workload]\nprofile = \"{}\"\n{extra}",
                p.display()
            ),
        );
        let out = collsim_ok(&["simulate", s.to_str().unwrap()]);
        let line = out.lines().find(|l| l.contains("memory per GPU")).unwrap().to_string();
        (s, line)
    };
    // At the traced shape: the start, the larger of forward-and-backward (46 - 25 GB) and the
    // optimizer step (31 - 25), the 1.5 GiB runtime; 8 % headroom from 46/50.
    let (traced, line) = on("");
    let total = gib(46e9) + 1.5;
    assert!(
        line.contains(&format!("{total:.1} of 80.0 GiB (73.6 usable with 8 % headroom)")),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "measured {:.1} + max(activations {:.1}, optimizer step {:.1}) + runtime 1.5",
            gib(25e9),
            gib(21e9),
            gib(6e9)
        )),
        "{line}"
    );
    // Twice the tokens: forward's 16 GB but for the 1.42 B parameters' 16-bit copies (2.84
    // GB), and backward's 5 GB, double; half: forward's share halves, the copies and
    // backward's are kept.
    let w = 2.0 * 1.42e9;
    let (_, line) = on("micro_batch = 16\n");
    assert!(
        line.contains(&format!("activations {:.1}", gib((16e9 - w) * 2.0 + w + 10e9))),
        "{line}"
    );
    let (_, line) = on("micro_batch = 4\n");
    assert!(
        line.contains(&format!("activations {:.1}", gib((16e9 - w) / 2.0 + w + 5e9))),
        "{line}"
    );
    // A headroom the scenario gives wins over the measured one.
    let (_, line) = on("memory_headroom = 0.2\n");
    assert!(line.contains("(64.0 usable with 20 % headroom)"), "{line}");
    // A plan over it: samples from the profile's 8 x 1,024 tokens, memory as carried; 8 a
    // micro-batch (44.3 GiB) does not fit an A100's 40 GB, 2 (35.2) does.
    let plan = tmp(
        "mem-plan.toml",
        &format!(
            "scenario = \"{}\"\n[train]\ntokens = 1e9\n[candidates]\ninstances = [\"aws-p5\", \"aws-p4d\"]\nnodes = [2]\nmicro_batch = [2, 8]\n",
            traced.display()
        ),
    );
    let rows =
        super::plan::csv_rows(&collsim_ok(&["plan", plan.to_str().unwrap(), "--format", "csv"]));
    let row = |inst: &str, mb: &str| {
        rows.iter()
            .find(|r| r["instance"] == inst && r["knobs"].contains(mb))
            .unwrap_or_else(|| panic!("{inst} {mb}: {rows:?}"))
    };
    assert_eq!(row("aws-p5", "mb 8")["rejected"], "");
    assert!(row("aws-p4d", "mb 8")["rejected"].contains("does not fit"), "{rows:?}");
    assert_eq!(row("aws-p4d", "mb 2")["rejected"], "", "{rows:?}");
    let gib: f64 = row("aws-p4d", "mb 2")["memory_gib"].parse().unwrap();
    assert!((gib - 35.15).abs() < 0.05, "{gib}");
}

#[test]
fn a_profile_without_its_memory_or_with_bad_figures_is_refused_with_the_reason() {
    // A plan on a profile without memory says how to make one with it.
    let s = scenario("nomem.toml", "aws-p5", 2, 8, "");
    let plan = tmp(
        "nomem-plan.toml",
        &format!(
            "scenario = \"{s}\"\n[train]\nsteps = 10\n[candidates]\ninstances = [\"aws-p5\"]\nnodes = [2]\n"
        ),
    );
    fails_with(
        &["plan", plan.to_str().unwrap()],
        &["workload.profile: the model profile records no memory", "--memory steps.csv"],
    );
    // Peaks alone hold at the traced shape only: a plan's micro-batch knob is refused.
    let p = with_memory(
        "peaks",
        "batch,seq,max_allocated,max_reserved",
        "8,1024,46000000000,50000000000",
    );
    let s = tmp(
        "peaks.toml",
        &format!(
            "[cluster]\ntopology = \"aws-p5\"\nnodes = 2\n\n[workload]\nprofile = \"{}\"\n",
            p.display()
        ),
    );
    let plan = tmp(
        "peaks-plan.toml",
        &format!(
            "scenario = \"{}\"\n[train]\nsteps = 10\n[candidates]\ninstances = [\"aws-p5\"]\nnodes = [2]\nmicro_batch = [4]\n",
            s.display()
        ),
    );
    fails_with(
        &["plan", plan.to_str().unwrap()],
        &["candidates.micro_batch:", "traced micro-batch only"],
    );
    // A layout knob on a traced step is refused: the replay is the traced layout's.
    let plan = tmp(
        "peaks-tp-plan.toml",
        &format!(
            "scenario = \"{}\"\n[train]\nsteps = 10\n[candidates]\ninstances = [\"aws-p5\"]\nnodes = [2]\ntp = [2]\n",
            s.display()
        ),
    );
    fails_with(
        &["plan", plan.to_str().unwrap()],
        &["candidates.tp: a model profile replays its traced step"],
    );
    // Bad figures name the file and line.
    let trace = format!("{DIR}/run2-kineto-ddp-h2048.json.gz");
    for (row, why) in [
        (
            "8,1024,46000000000,40000000000",
            "peaks-bad-steps.csv:2: max_allocated (46000000000) is more than max_reserved",
        ),
        (
            "8,1024,4.6e10,50000000000",
            "peaks-bad-steps.csv:2: max_allocated: not a whole number of bytes",
        ),
        ("8,1024,46000000000", "peaks-bad-steps.csv:2: 3 fields where the header has 4"),
    ] {
        let steps =
            tmp("peaks-bad-steps.csv", &format!("batch,seq,max_allocated,max_reserved\n{row}\n"));
        fails_with(&["profile", &trace, "--memory", steps.to_str().unwrap()], &[why]);
    }
    let steps = tmp("none-steps.csv", "batch,seq,median_ms\n8,1024,157.1\n");
    fails_with(
        &["profile", &trace, "--memory", steps.to_str().unwrap()],
        &["no max_allocated column"],
    );
    for (text, why) in [
        // Another shape's figures, a column twice, a cache that was never the step's.
        (
            "batch,seq,max_allocated,max_reserved\n1,512,46000000000,50000000000\n",
            "measured at 1 x 512 tokens, but the trace's step is 8 x 1024",
        ),
        (
            "batch,max_allocated,max_allocated,max_reserved\n8,1,2,3\n",
            "shape-steps.csv:1: the column \"max_allocated\" twice",
        ),
        (
            "batch,seq,max_allocated,max_reserved\n8,1024,10000000000,50000000000\n",
            "max_reserved (50000000000) is more than twice max_allocated",
        ),
    ] {
        let steps = tmp("shape-steps.csv", text);
        fails_with(&["profile", &trace, "--memory", steps.to_str().unwrap()], &[why]);
    }
    // A hand-edited [memory] key that collsim does not know is refused, not ignored.
    let edited = std::fs::read_to_string(&p).unwrap().replace("max_reserved =", "max_reserve =");
    let e = tmp("edited.toml", &edited);
    let s = tmp(
        "edited-s.toml",
        &format!(
            "[cluster]\ntopology = \"aws-p5\"\nnodes = 2\n\n[workload]\nprofile = \"{}\"\n",
            e.display()
        ),
    );
    fails_with(&["simulate", s.to_str().unwrap()], &["unknown field `max_reserve`"]);
    // Measured memory that does not fit the GPU is warned of, as a model's is.
    let big = with_memory(
        "big",
        "batch,seq,max_allocated,max_reserved",
        "8,1024,120000000000,125000000000",
    );
    let s = tmp(
        "big-s.toml",
        &format!(
            "[cluster]\ntopology = \"aws-p5\"\nnodes = 2\n\n[workload]\nprofile = \"{}\"\n",
            big.display()
        ),
    );
    let out = collsim(&["simulate", s.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: the profiled step does not fit a H100-SXM5-80GB as its allocator measured it: needs 113.3 GiB per GPU"), "{err}");
}

#[test]
fn a_profile_carried_from_an_h200_to_an_h100_errs_slow() {
    // Our Megatron-style step outside the layers (embedding, head, Megatron's loss passes over
    // 4 x 1,024 x 50,304 logits, the fp16 optimizer), traced on an H200 and on an H100 with the
    // same script (calibration/data/2026-11-27-*-megatron). Carried from the H200, the H100's
    // step comes out 11.92 ms against the 9.59 ms its own trace spans (+24 %, 2026-11-29):
    // the memory-bound kernels took 1.15-1.29x as long on the H100 where the bandwidths are
    // 1.43x apart (they do not reach the H200's bandwidth: issue-bound, not bandwidth-bound),
    // and the H200 VM's host left 2.89 ms of gaps where the H100's left 1.69. Slow, never fast.
    let trace = "calibration/data/2026-11-27-h200-megatron/profile-L0-h1024-mb4.json.gz";
    let p = tmp("l0-h200.toml", &collsim_ok(&["profile", trace]));
    let s = tmp(
        "l0-on-h100.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\ngpus_per_node = 1\n\n[workload]\nprofile = \"{}\"\n",
            p.display()
        ),
    );
    let (carried, _) = step(s.to_str().unwrap());
    let h100 = collsim::workload::profile::ModelProfile::read(
        "h100",
        &collsim_ok(&[
            "profile",
            "calibration/data/2026-11-27-h100-megatron/profile-L0-h1024-mb4.json.gz",
        ]),
    )
    .unwrap();
    let e = 100.0 * (carried / h100.traced_step_ms - 1.0);
    assert!(
        (15.0..30.0).contains(&e),
        "{carried:.3} ms against {} ms: {e:+.1} %",
        h100.traced_step_ms
    );
}

#[test]
fn a_profile_splits_over_tensor_parallel_ranks_as_megatron_does() {
    // The 1.42 B GPT traced on one H200 (24 layers, hidden 2,048, 8 x 1,024 tokens), carried to
    // two DGX-H200 nodes at tp 1 and 2: at tp 2 its GEMMs, attention and optimizer step take
    // half as long, each layer all-reduces 8 x 1,024 x 2,048 bf16 values (32 MiB) twice each way
    // over its pair of GPUs (with the embedding's forward and the head's backward, 49 each
    // way, and the loss's three of 32 KiB), its 74 gradient buckets carry half the bytes over
    // the 8 ranks of its data-parallel group, and 8 replicas make its samples, not 16. The
    // memory-bound kernels and the host stay as traced.
    let on = |tp: usize| {
        let s = scenario(
            &format!("tp{tp}.toml"),
            "dgx-h200",
            2,
            8,
            &format!("\n[workload.parallel]\ntp = {tp}\n"),
        );
        let out = collsim_ok(&["simulate", &s]);
        let field = |k: &str| -> f64 {
            out.lines()
                .find_map(|l| {
                    let v = l.trim().strip_prefix(k)?.trim().split(' ').next()?;
                    v.trim_end_matches(',').parse().ok()
                })
                .unwrap_or_else(|| panic!("no {k} in {out}"))
        };
        (field("iteration"), field("compute (as given)"), field("collectives"), out)
    };
    let (step1, compute1, n1, _) = on(1);
    let (step2, compute2, n2, out) = on(2);
    // As traced at tp 1 (the same step as without the table).
    let (plain, _) = step(&scenario("tp-none.toml", "dgx-h200", 2, 8, ""));
    assert_eq!(step1, plain);
    assert_eq!((n1, n2), (74.0, 74.0 + 98.0 + 3.0));
    assert!(out.contains("5.70 GiB (5978440 KiB) in all"), "{out}");
    assert!(out.contains("tensor parallel 2: GEMMs, attention and the optimizer / 2, 49 all-reduces of 32 MiB each way"), "{out}");
    let samples = |o: &str| -> f64 {
        o.lines().find_map(|l| l.trim().strip_prefix("samples/s")?.trim().parse().ok()).unwrap()
    };
    assert!((samples(&out) - 8.0 * 8.0 / (step2 / 1e3)).abs() < 0.1, "{out}");
    // Half of the GEMMs', attention's and optimizer's ~101 ms come off the compute.
    let saved = compute1 - compute2;
    assert!((45.0..55.0).contains(&saved), "{compute1} -> {compute2} ms");
    assert!(step2 < step1 && step2 > 0.6 * step1, "{step1} -> {step2} ms");
    // What cannot be split is refused on its line.
    let s = scenario("tp3.toml", "dgx-h200", 2, 8, "\n[workload.parallel]\ntp = 3\n");
    fails_with(
        &["simulate", &s],
        &["tp3.toml:10:6: workload.parallel.tp: 3 does not divide the node's 8 GPUs"],
    );
    let s = scenario("tp-pp.toml", "dgx-h200", 2, 8, "\n[workload.parallel]\ntp = 2\npp = 2\n");
    fails_with(
        &["simulate", &s],
        &["tp-pp.toml:9:1: workload.parallel: a model profile takes tp alone"],
    );
    let l0 = tmp(
        "l0.toml",
        &collsim_ok(&[
            "profile",
            "calibration/data/2026-11-27-h200-megatron/profile-L0-h1024-mb4.json.gz",
            "--micro-batch",
            "4",
            "--sequence",
            "1024",
        ]),
    );
    let s = tmp(
        "l0-tp.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{}\"\n\n[workload.parallel]\ntp = 2\n",
            l0.display()
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["l0-tp.toml:8:6: workload.parallel.tp:", "no repeated blocks (layers)"],
    );
    // Only DDP's step is split: GPT-2 small's FSDP step, traced on one GPU, is refused.
    let fsdp =
        tmp("fsdp.toml", &collsim_ok(&["profile", &format!("{DIR}/run1-kineto-fsdp.json.gz")]));
    let s = tmp(
        "fsdp-tp.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\n\n[workload]\nprofile = \"{}\"\n\n[workload.parallel]\ntp = 2\n",
            fsdp.display()
        ),
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["fsdp-tp.toml:8:6: workload.parallel.tp:", "the traced step is not DDP's"],
    );
    // A tensor-parallel group stays inside a node, whatever the flags make of one.
    let s = scenario("tp8.toml", "dgx-h200", 2, 8, "\n[workload.parallel]\ntp = 8\n");
    fails_with(
        &["simulate", &s, "--nodes", "4", "--gpus-per-node", "4"],
        &["workload.parallel.tp: 8 does not divide the 4 GPUs used per node"],
    );
    // A plan cannot size a split profile's memory.
    let mem = with_memory("tp-mem", STEPS_COLUMNS, STEPS_ROW);
    let s = tmp(
        "tp2-plan-s.toml",
        &format!(
            "[cluster]\ntopology = \"dgx-h200\"\nnodes = 2\n\n[workload]\nprofile = \"{}\"\n\n[workload.parallel]\ntp = 2\n",
            mem.display()
        ),
    );
    let plan = tmp(
        "tp2-plan.toml",
        &format!(
            "scenario = \"{}\"\n[train]\nsteps = 10\n[candidates]\ninstances = [\"dgx-h200\"]\nnodes = [2]\n",
            s.display()
        ),
    );
    fails_with(
        &["plan", plan.to_str().unwrap()],
        &["workload.parallel.tp: the model profile's memory was measured on one GPU"],
    );
}

#[test]
fn hf_profiles_with_their_unprofiled_steps_carry_to_other_shapes() {
    // transformers' GPT-2 XL, medium and small, Llama 3.2 1B and BERT-large on one H200
    // (calibration/data/2026-11-30-h200-hf): a profile of one capture, made with its steps.csv
    // (the step timed without the profiler), carried to the other captures' shapes of the same
    // model, against their measured steps. At the traced shape the replay is the unprofiled
    // step by construction (the host gaps are cut to what it leaves them). Measured 2026-11-30,
    // the ten carries: +0.1 to +30.3 % (median |error| 4.9 %; Llama's three within 1.6 %; the
    // worst where the host bounds the smaller step, GPT-2 small from 8 samples to 2, whose
    // host floor errs long). Before the profiler's host cost was cut from the gaps and the
    // host's launches floored the carried step: -7.9 to +43.8 % (median 13.9 %).
    let root = env!("CARGO_MANIFEST_DIR");
    let hf = format!("{root}/calibration/data/2026-11-30-h200-hf");
    let measured: std::collections::HashMap<String, f64> = {
        let mut r = csv::Reader::from_path(format!("{hf}/steps.csv")).unwrap();
        r.records().map(|x| x.unwrap()).map(|x| (x[0].to_string(), x[7].parse().unwrap())).collect()
    };
    // A capture to carry to: its name, micro-batch and sequence (None: the traced one).
    type Target<'a> = (&'a str, u64, Option<u64>);
    let carries: [(&str, &[Target]); 5] = [
        (
            "gpt2-xl-b4",
            &[("gpt2-xl-b4", 4, None), ("gpt2-xl-b8", 8, None), ("gpt2-xl-b2", 2, None)],
        ),
        ("gpt2-medium-b4", &[("gpt2-medium-b4", 4, None), ("gpt2-medium-b8", 8, None)]),
        ("gpt2-b8", &[("gpt2-b8", 8, None), ("gpt2-b16", 16, None), ("gpt2-b2", 2, None)]),
        (
            "llama1b-b4-s2048",
            &[
                ("llama1b-b4-s2048", 4, Some(2048)),
                ("llama1b-b8-s1024", 8, Some(1024)),
                ("llama1b-b16-s512", 16, Some(512)),
                ("llama1b-b2-s4096", 2, Some(4096)),
            ],
        ),
        (
            "bert-large-b16",
            &[
                ("bert-large-b16", 16, None),
                ("bert-large-b32", 32, None),
                ("bert-large-b8", 8, None),
            ],
        ),
    ];
    let mut others = Vec::new();
    for (source, targets) in carries {
        let profile = tmp(&format!("{source}.toml"), "");
        let p = profile.to_str().unwrap();
        let trace = format!("{hf}/{source}/trace.json.gz");
        let steps = format!("{hf}/{source}/steps.csv");
        collsim_ok(&["profile", &trace, "--memory", &steps, "-o", p]);
        for &(target, mb, seq) in targets {
            let seq = seq.map_or(String::new(), |s| format!("sequence = {s}\n"));
            let s = tmp(
                &format!("carry-{target}.toml"),
                &format!(
                    "[cluster]\ntopology = \"dgx-h200\"\nnodes = 1\ngpus_per_node = 1\n[workload]\nprofile = \"{p}\"\nmicro_batch = {mb}\n{seq}"
                ),
            );
            let (ms, _) = step(s.to_str().unwrap());
            let e = 100.0 * (ms / measured[target] - 1.0);
            eprintln!(
                "{source} -> {target}: {ms:.1} ms against {:.1}, {e:+.1} %",
                measured[target]
            );
            if target == source {
                assert!(e.abs() < 0.5, "{source} replayed: {e:.1} %");
            } else {
                assert!((-2.0..33.0).contains(&e), "{source} -> {target}: {e:.1} %");
                others.push(e.abs());
            }
        }
    }
    others.sort_by(f64::total_cmp);
    let median = 0.5 * (others[others.len() / 2 - 1] + others[others.len() / 2]);
    assert!(others.len() == 10 && median < 6.0, "{others:?}");
}

#[test]
fn another_steps_unprofiled_time_is_refused() {
    // A median_ms in seconds (or from another run) would cut every host gap: refused.
    let hf = "calibration/data/2026-11-30-h200-hf/gpt2-b8";
    let text =
        std::fs::read_to_string(format!("{hf}/steps.csv")).unwrap().replace(",60.608,", ",0.061,");
    let steps = tmp("steps-seconds.csv", &text);
    fails_with(
        &["profile", &format!("{hf}/trace.json.gz"), "--memory", steps.to_str().unwrap()],
        &[
            "steps-seconds.csv: median_ms 0.061 is not this trace's step",
            "give the steps.csv written beside this trace",
        ],
    );
}
