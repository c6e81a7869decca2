//! The max-min solver alone, on random flow sets of 1k, 10k and 100k flows.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use collsim::net::solver::{FlowSpec, max_min_rates};

/// A deterministic problem: `flows` flows over `flows / 4` links, paths of 1 to 4 links.
fn problem(flows: usize) -> (Vec<f64>, Vec<Vec<u32>>) {
    let links = (flows / 4).max(8);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let caps = (0..links).map(|_| 1e9 * (1 + next() % 100) as f64).collect();
    let paths = (0..flows)
        .map(|_| {
            let len = 1 + next() % 4;
            (0..len).map(|_| (next() % links as u64) as u32).collect()
        })
        .collect();
    (caps, paths)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("max_min_rates");
    g.sample_size(20);
    for n in [1_000usize, 10_000, 100_000] {
        let (caps, paths) = problem(n);
        let specs: Vec<FlowSpec<'_>> = paths
            .iter()
            .map(|p| FlowSpec { path: p, cap: f64::INFINITY, weight: 1.0, link_weights: None })
            .collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &specs, |b, s| {
            b.iter(|| max_min_rates(&caps, s))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
