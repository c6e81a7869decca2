//! Jobs side by side on a 256-node DGX-H100 cluster whose spine is 2:1 oversubscribed, each
//! job on 128 nodes spread over the racks and also run alone for its slowdown: two 1,024-GPU
//! ring AllReduce sweeps (1 MiB to 1 GiB, ×4; scenarios/two-jobs-shared-spine.toml, scaled
//! up), and two 1,024-GPU GPT-2 XL DDP steps posting their buckets into one shared network
//! (scenarios/two-ddp-jobs-shared-spine.toml, scaled up).

use collsim_benches::repo;
use criterion::{Criterion, criterion_group, criterion_main};

use collsim::collective::Mode;
use collsim::config::{DEFAULT_PROFILE, Scenario, parse_profile, parse_scenario};

/// `file`'s two 8-node jobs on 16 nodes, scaled to 128 nodes each on 256.
fn scaled(file: &str) -> Scenario {
    let file = &repo(file);
    let text = std::fs::read_to_string(file)
        .expect("scenario")
        .replace(
            "../topologies/user/dgx-h100-spine-2to1.toml",
            &repo("topologies/user/dgx-h100-spine-2to1.toml"),
        )
        .replace("nodes = 16", "nodes = 256")
        .replace("nodes = 8 ", "nodes = 128 ")
        .replace("nodes = 8\n", "nodes = 128\n");
    let s = parse_scenario(file, &text).expect("scenario");
    assert_eq!(s.jobs.iter().map(|j| j.nodes.len()).collect::<Vec<_>>(), [128, 128]);
    s
}

fn bench(c: &mut Criterion) {
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let mut g = c.benchmark_group("jobs");
    g.sample_size(10);
    for (name, file) in [
        ("two_1024_gpu_jobs_2to1_spine", "scenarios/two-jobs-shared-spine.toml"),
        ("two_1024_gpu_ddp_jobs_2to1_spine", "scenarios/two-ddp-jobs-shared-spine.toml"),
    ] {
        let s = scaled(file);
        g.bench_function(name, |b| {
            b.iter(|| collsim::simulate_jobs(&s, &params, Mode::Auto).expect("jobs"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
