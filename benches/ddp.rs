//! DDP training steps: one Llama-7B step on 16, 128, 1,024 and 16,384 H100s (2 to 2,048
//! DGX-H100 nodes; the communicator's construction included), and a 50-point bucket_cap_mb
//! sweep of GPT-2 XL on 16 nodes run as `simulate --sweep` runs it (in parallel). And a 3-D
//! step at tp 8 on 4 and 128 nodes whose data-parallel groups share NICs (AWS p4d: each
//! all-reduce on its half of the shared NICs) or not (DGX H100: timed alone). And a PyTorch
//! profiler trace captured on an H200 (1.42 B GPT, 74 buckets) imported and replayed on 16 and
//! 128 aws-p5 nodes.

use collsim_benches::repo;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::prelude::*;

use collsim::collective::Mode;
use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_scenario, set_keys};

fn bench(c: &mut Criterion) {
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let llama =
        std::fs::read_to_string(repo("scenarios/llama7b-dgx-h100-16node.toml")).expect("scenario");
    let mut g = c.benchmark_group("ddp");
    g.sample_size(10);
    for nodes in [2usize, 16, 128, 2048] {
        let text = set_keys(&llama, &[("cluster.nodes".into(), nodes.to_string())]).expect("edit");
        let s = parse_scenario("llama.toml", &text).expect("scenario");
        g.bench_with_input(BenchmarkId::new("llama7b_step_gpus", nodes * 8), &s, |b, s| {
            b.iter(|| collsim::simulate_ddp(s, &params, Mode::Auto).expect("step"))
        });
    }
    for topology in ["aws-p4d", "dgx-h100"] {
        for nodes in [4usize, 128] {
            let text = format!(
                "[cluster]\ntopology = \"{topology}\"\nnodes = {nodes}\n[workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nsequence = 2048\nmicro_batch = 1\ngrad_accumulation = 8\nprecision = \"bf16\"\nefficiency = 0.5\noptimizer = \"adam\"\n[workload.parallel]\ntp = 8\noverlap_grad_reduce = false\n"
            );
            let s = parse_scenario("3d.toml", &text).expect("scenario");
            let id = BenchmarkId::new(format!("llama7b_3d_tp8_{topology}_nodes"), nodes);
            g.bench_with_input(id, &s, |b, s| {
                b.iter(|| collsim::simulate_ddp(s, &params, Mode::Auto).expect("step"))
            });
        }
    }
    // A real PyTorch profiler trace (one DDP step of a 1.42 B GPT on an H200): imported, and
    // replayed on 16 and 128 aws-p5 nodes.
    let path = repo("calibration/data/2026-11-26-h200-kineto/run2-kineto-ddp-h2048.json.gz");
    let trace = collsim::config::load_text(std::path::Path::new(&path)).expect("trace");
    g.bench_function("kineto_import_h2048", |b| {
        b.iter(|| collsim::workload::kineto::import("trace", &trace).expect("import"))
    });
    let calls = collsim::workload::kineto::import("trace", &trace).expect("import").calls;
    for nodes in [16usize, 128] {
        // A cluster, its workload replaced by the trace's step (as --workload-trace does).
        let text = format!(
            "[cluster]\ntopology = \"aws-p5\"\nnodes = {nodes}\n[workload]\ncollective = \"all_reduce\"\nmin_bytes = \"8 B\"\nmax_bytes = \"8 B\"\n"
        );
        let mut s = parse_scenario("replay.toml", &text).expect("scenario");
        let spec = collsim::workload::ddp::DdpSpec::replay("trace".into(), calls.clone());
        s.workload = collsim::config::Workload::Ddp(Box::new(spec));
        let id = BenchmarkId::new("kineto_replay_h2048_aws-p5_nodes", nodes);
        g.bench_with_input(id, &s, |b, s| {
            b.iter(|| collsim::simulate_ddp(s, &params, Mode::Auto).expect("step"))
        });
    }
    let gpt = std::fs::read_to_string(repo("scenarios/gpt2-xl-a3-16node.toml")).expect("scenario");
    g.bench_function("gpt2xl_sweep_50_bucket_caps", |b| {
        b.iter(|| {
            (1..=50)
                .into_par_iter()
                .map(|mb| {
                    let t =
                        set_keys(&gpt, &[("workload.ddp.bucket_cap_mb".into(), mb.to_string())])
                            .expect("edit");
                    let s = parse_scenario("gpt2.toml", &t).expect("scenario");
                    collsim::simulate_ddp(&s, &params, Mode::Auto).expect("step").0
                })
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
