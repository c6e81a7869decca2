//! DDP training steps: one Llama-7B step on 16, 128, 1,024 and 16,384 H100s (2 to 2,048
//! DGX-H100 nodes; the communicator's construction included), and a 50-point bucket_cap_mb
//! sweep of GPT-2 XL on 16 nodes run as `simulate --sweep` runs it (in parallel).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::prelude::*;

use collsim::collective::Mode;
use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_scenario, set_keys};

fn bench(c: &mut Criterion) {
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let llama =
        std::fs::read_to_string("scenarios/llama7b-dgx-h100-16node.toml").expect("scenario");
    let mut g = c.benchmark_group("ddp");
    g.sample_size(10);
    for nodes in [2usize, 16, 128, 2048] {
        let text = set_keys(&llama, &[("cluster.nodes".into(), nodes.to_string())]).expect("edit");
        let s = parse_scenario("llama.toml", &text).expect("scenario");
        g.bench_with_input(BenchmarkId::new("llama7b_step_gpus", nodes * 8), &s, |b, s| {
            b.iter(|| collsim::simulate_ddp(s, &params, Mode::Auto).expect("step"))
        });
    }
    let gpt = std::fs::read_to_string("scenarios/gpt2-xl-a3-16node.toml").expect("scenario");
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
