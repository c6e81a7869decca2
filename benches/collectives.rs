//! Ring AllReduce of 256 MiB on 8 to 16,384 DGX-H100 GPUs (aggregated mode, as the CLI runs).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use collsim::collective::{Mode, ring};
use collsim::comm::Communicator;
use collsim::comm::env::NcclEnv;
use collsim::config::{DEFAULT_PROFILE, parse_profile, resolve_topology};
use collsim::hw::Cluster;

fn bench(c: &mut Criterion) {
    let (_, spec) = resolve_topology("dgx-h100", None).expect("preset");
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let bytes = 256u64 << 20;
    let mut g = c.benchmark_group("ring_allreduce_256MiB");
    g.sample_size(10);
    for gpus in [8usize, 64, 512, 4096, 16_384] {
        let cluster = Cluster::new(&spec, gpus / 8, 8);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
        let sel = comm.select(collsim::collective::Collective::AllReduce, bytes);
        g.throughput(Throughput::Elements(gpus as u64));
        g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
            b.iter(|| {
                ring::simulate_allreduce(&cluster, &comm, bytes, 4, &sel, &params, Mode::Aggregated)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
