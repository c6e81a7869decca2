//! Capacity plans: the 1,080 candidates of benches/data/plan-1080.toml (GPT-2 XL with DDP,
//! 6 instances x 12 node counts x 3 placements x 5 bucket caps) evaluated in parallel as
//! `collsim plan` does, and ranked; and the shipped scenarios/plan-gpt2xl.toml (324).

use collsim_benches::repo;
use criterion::{Criterion, criterion_group, criterion_main};

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
                collsim::plan::rank(&plan.objective, collsim::plan::TRAINING_BAND, out)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
