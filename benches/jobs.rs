//! Jobs side by side: two 1,024-GPU ring AllReduce sweeps (1 MiB to 1 GiB, ×4) spread over
//! the racks of a 256-node DGX-H100 cluster whose spine is 2:1 oversubscribed, each also run
//! alone for its slowdown (scenarios/two-jobs-shared-spine.toml, scaled up).

use criterion::{Criterion, criterion_group, criterion_main};

use collsim::collective::Mode;
use collsim::config::{DEFAULT_PROFILE, parse_profile, parse_scenario};

fn bench(c: &mut Criterion) {
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let text = std::fs::read_to_string("scenarios/two-jobs-shared-spine.toml")
        .expect("scenario")
        .replace(
            "../topologies/user/dgx-h100-spine-2to1.toml",
            concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/user/dgx-h100-spine-2to1.toml"),
        )
        .replace("nodes = 16 ", "nodes = 256 ")
        .replace("nodes = 8 ", "nodes = 128 ")
        .replace("nodes = 8\n", "nodes = 128\n");
    let s = parse_scenario("two-jobs.toml", &text).expect("scenario");
    assert_eq!(s.jobs.iter().map(|j| j.nodes.len()).collect::<Vec<_>>(), [128, 128]);
    let mut g = c.benchmark_group("jobs");
    g.sample_size(10);
    g.bench_function("two_1024_gpu_jobs_2to1_spine", |b| {
        b.iter(|| collsim::simulate_jobs(&s, &params, Mode::Auto).expect("jobs"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
