//! Capacity plans: the 1,080 candidates of benches/data/plan-1080.toml (GPT-2 XL with DDP,
//! 6 instances x 12 node counts x 3 placements x 5 bucket caps) evaluated in parallel as
//! `collsim plan` does, and ranked; the shipped scenarios/plan-gpt2xl.toml (324); the 8- and
//! 64-node sixth of the 10,368 candidates of benches/data/plan-70b-10k.toml (Llama-2-70B, 4
//! instances x 12 node counts x 3 placements x tp x pp x micro-batch: 1,728 candidates),
//! reported as candidates per second; and the Llama-2-7B plan's node search.

use collsim_benches::repo;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use collsim::collective::Mode;
use collsim::config::{DEFAULT_PROFILE, parse_plan, parse_profile};

fn bench(c: &mut Criterion) {
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for (name, file) in [
        ("gpt2xl_1080_candidates", "benches/data/plan-1080.toml"),
        ("shipped_plan_gpt2xl_324_candidates", "scenarios/plan-gpt2xl.toml"),
    ] {
        let file = &repo(file);
        let text = std::fs::read_to_string(file).expect("plan");
        let plan = parse_plan(file, &text).expect("plan parses");
        let cands = collsim::plan::candidates(&plan);
        g.bench_function(name, |b| {
            b.iter(|| {
                let out = collsim::plan::evaluate_all(&plan, &cands, &params, Mode::Auto, &|_| {});
                collsim::plan::rank(&plan.objective, out)
            })
        });
    }
    let file = &repo("benches/data/plan-70b-10k.toml");
    let text = std::fs::read_to_string(file).expect("plan");
    let plan = parse_plan(file, &text).expect("plan parses");
    let cands: Vec<_> = collsim::plan::candidates(&plan)
        .into_iter()
        .filter(|c| c.nodes == 8 || c.nodes == 64)
        .collect();
    g.throughput(Throughput::Elements(cands.len() as u64));
    g.bench_function("llama70b_3d_1728_of_10368_candidates", |b| {
        b.iter(|| collsim::plan::evaluate_all(&plan, &cands, &params, Mode::Auto, &|_| {}))
    });
    let file = &repo("scenarios/plan-llama7b-fsdp.toml");
    let text = std::fs::read_to_string(file).expect("plan");
    let plan = parse_plan(file, &text).expect("plan parses");
    g.throughput(Throughput::Elements(collsim::plan::groups(&plan) as u64));
    g.bench_function("llama7b_fsdp_node_search_3_groups", |b| {
        b.iter(|| collsim::plan::search(&plan, &params, Mode::Auto, &|| {}))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
